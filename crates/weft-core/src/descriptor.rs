//! The wire descriptor of registered memory (version 1, little-endian):
//!
//! ```text
//! "WFRM" | version u16 | kind u8 | owner rank u32 | device u32 | host hash u64 | pid hash u64
//!        | base u64 | mapped len u64 | offset u64 | len u64 | kind payload
//! kind 1 (VMM, POSIX fd): socket name (u16 length + bytes) | export id u64 | secret u64
//! kind 2 (legacy IPC):    handle [64]
//! ```
//! `base` is the owner's address of the allocation, `offset`/`len` the registered range inside
//! it; peers in the owner's process use `base + offset` directly.

use weft_gpu::LegacyIpcHandle;

use crate::identity::ProcessIdentity;
use weft_bootstrap::codec::{CodecError, Reader, Writer};

use crate::wire::{put_short_bytes, short_bytes, to_u32};

const MAGIC: &[u8; 4] = b"WFRM";
/// Current descriptor version.
pub const DESCRIPTOR_VERSION: u16 = 1;

/// How an importer in another process reaches the allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryHandle {
    /// VMM allocation: fetch its POSIX fd from the owner's fd server.
    PosixFd {
        /// Abstract Unix socket name of the owner's fd server.
        socket: Vec<u8>,
        /// Id of the export on that server.
        export_id: u64,
        /// Secret the server checks.
        secret: u64,
    },
    /// `cuMemAlloc` allocation: open its legacy IPC handle.
    Legacy(LegacyIpcHandle),
}

/// Everything a peer needs to map registered memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryDescriptor {
    /// Rank that owns the memory.
    pub owner_rank: usize,
    /// Owner's CUDA ordinal.
    pub device_ordinal: usize,
    /// Owner's host and process.
    pub identity: ProcessIdentity,
    /// Owner's address of the allocation's first byte.
    pub base: u64,
    /// Bytes mapped for the allocation.
    pub mapped_len: u64,
    /// Offset of the registered range in the allocation.
    pub offset: u64,
    /// Bytes in the registered range.
    pub len: u64,
    /// Cross-process handle.
    pub handle: MemoryHandle,
}

impl MemoryDescriptor {
    /// Encodes version [`DESCRIPTOR_VERSION`].
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        let mut w = Writer::new();
        w.put_bytes(MAGIC);
        w.put_u16(DESCRIPTOR_VERSION);
        w.put_u8(match self.handle {
            MemoryHandle::PosixFd { .. } => 1,
            MemoryHandle::Legacy(_) => 2,
        });
        w.put_u32(to_u32("owner rank", self.owner_rank)?);
        w.put_u32(to_u32("device", self.device_ordinal)?);
        for field in
            [self.identity.host_hash, self.identity.pid_hash, self.base, self.mapped_len, self.offset, self.len]
        {
            w.put_u64(field);
        }
        match &self.handle {
            MemoryHandle::PosixFd { socket, export_id, secret } => {
                put_short_bytes(&mut w, socket)?;
                w.put_u64(*export_id);
                w.put_u64(*secret);
            }
            MemoryHandle::Legacy(h) => w.put_bytes(&h.0),
        }
        Ok(w.into_inner())
    }

    /// Decodes and validates a descriptor (range inside the allocation, known kind/version).
    pub fn decode(bytes: &[u8]) -> Result<Self, CodecError> {
        let mut r = Reader::new(bytes);
        let magic = r.array::<4>()?;
        if &magic != MAGIC {
            return Err(CodecError::InvalidValue {
                field: "memory descriptor magic",
                value: u32::from_le_bytes(magic).into(),
            });
        }
        let version = r.u16()?;
        if version != DESCRIPTOR_VERSION {
            return Err(CodecError::InvalidValue { field: "memory descriptor version", value: version.into() });
        }
        let kind = r.u8()?;
        let owner_rank = r.u32()? as usize;
        let device_ordinal = r.u32()? as usize;
        let identity = ProcessIdentity { host_hash: r.u64()?, pid_hash: r.u64()? };
        let base = r.u64()?;
        let mapped_len = r.u64()?;
        let offset = r.u64()?;
        let len = r.u64()?;
        if offset.checked_add(len).is_none_or(|end| end > mapped_len) {
            return Err(CodecError::InvalidValue {
                field: "registered range end (past the mapping)",
                value: offset.saturating_add(len),
            });
        }
        let handle = match kind {
            1 => MemoryHandle::PosixFd { socket: short_bytes(&mut r)?.to_vec(), export_id: r.u64()?, secret: r.u64()? },
            2 => MemoryHandle::Legacy(LegacyIpcHandle(r.array::<64>()?)),
            other => return Err(CodecError::InvalidValue { field: "memory handle kind", value: other.into() }),
        };
        r.finish()?;
        Ok(Self { owner_rank, device_ordinal, identity, base, mapped_len, offset, len, handle })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> MemoryDescriptor {
        MemoryDescriptor {
            owner_rank: 1,
            device_ordinal: 2,
            identity: ProcessIdentity { host_hash: 0x1122334455667788, pid_hash: 0x99aabbccddeeff00 },
            base: 0x7f00_0000_0000,
            mapped_len: 0x20_0000,
            offset: 0x100,
            len: 0x1000,
            handle: MemoryHandle::PosixFd { socket: b"weft-fd-1".to_vec(), export_id: 3, secret: 0xdead_beef },
        }
    }

    #[test]
    fn golden_bytes_of_version_1() {
        let golden = concat!(
            "5746524d",
            "0100",
            "01",
            "01000000",
            "02000000",
            "8877665544332211",
            "00ffeeddccbbaa99",
            "00000000007f0000",
            "0000200000000000",
            "0001000000000000",
            "0010000000000000",
            "0900",
            "776566742d66642d31",
            "0300000000000000",
            "efbeadde00000000"
        );
        assert_eq!(hex(&sample().encode().unwrap()), golden);
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn legacy_round_trip_and_bad_inputs() {
        let mut d = sample();
        d.handle = MemoryHandle::Legacy(LegacyIpcHandle([7; 64]));
        let bytes = d.encode().unwrap();
        assert_eq!(MemoryDescriptor::decode(&bytes).unwrap(), d);
        let mut wrong_magic = bytes.clone();
        wrong_magic[0] = b'X';
        assert!(MemoryDescriptor::decode(&wrong_magic).is_err());
        let mut future = bytes.clone();
        future[4] = 9;
        assert!(MemoryDescriptor::decode(&future).unwrap_err().to_string().contains("version"));
        let mut outside = d.clone();
        outside.len = outside.mapped_len;
        assert!(MemoryDescriptor::decode(&outside.encode().unwrap()).is_err());
    }

    proptest! {
        #[test]
        fn descriptors_round_trip(
            owner in 0usize..1024, dev in 0usize..16, host: u64, pid: u64, base: u64,
            mapped in 1u64..1 << 40, off_frac in 0.0f64..1.0, socket in proptest::collection::vec(any::<u8>(), 0..100),
            id: u64, secret: u64,
        ) {
            let offset = (mapped as f64 * off_frac) as u64 % mapped;
            let d = MemoryDescriptor {
                owner_rank: owner, device_ordinal: dev,
                identity: ProcessIdentity { host_hash: host, pid_hash: pid },
                base, mapped_len: mapped, offset, len: mapped - offset,
                handle: MemoryHandle::PosixFd { socket, export_id: id, secret },
            };
            prop_assert_eq!(MemoryDescriptor::decode(&d.encode().unwrap()).unwrap(), d);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = MemoryDescriptor::decode(&bytes);
        }
    }
}
