//! What ranks exchange about memory and themselves: the [`MemoryDescriptor`] of registered
//! memory (sent to every peer that maps or puts to it) and the [`PeerInfo`] of the topology
//! exchange.

use weft_core::descriptor::{MemoryDescriptor, MemoryHandle};
use weft_core::{PeerInfo, ProcessIdentity};
use weft_gpu::LegacyIpcHandle;

/// Both decoders are strict: what decodes re-encodes to the very same bytes, and a descriptor
/// that decodes names a range inside its mapping. Returns whether `data` decoded as either.
pub fn check(data: &[u8]) -> bool {
    let descriptor = MemoryDescriptor::decode(data);
    if let Ok(descriptor) = &descriptor {
        assert!(descriptor.offset.checked_add(descriptor.len).is_some_and(|end| end <= descriptor.mapped_len));
        assert_eq!(descriptor.encode().as_deref(), Ok(data), "{descriptor:?} re-encodes to other bytes");
    }
    let peer = PeerInfo::decode(data);
    if let Ok(peer) = &peer {
        assert_eq!(peer.encode().as_deref(), Ok(data), "{peer:?} re-encodes to other bytes");
    }
    descriptor.is_ok() || peer.is_ok()
}

/// A descriptor of each handle kind and a peer's information.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let identity = ProcessIdentity { host_hash: 0x1122_3344_5566_7788, pid_hash: 0x99aa_bbcc_ddee_ff00 };
    let descriptor = |handle| MemoryDescriptor {
        owner_rank: 1,
        device_ordinal: 2,
        identity,
        base: 0x7f00_0000_0000,
        mapped_len: 0x20_0000,
        offset: 0x100,
        len: 0x1000,
        handle,
    };
    let vmm = descriptor(MemoryHandle::PosixFd { socket: b"weft-fd-1".to_vec(), export_id: 3, secret: 0xdead_beef });
    let legacy = descriptor(MemoryHandle::Legacy(LegacyIpcHandle([0x42; 64])));
    let peer = PeerInfo { rank: 3, device_ordinal: 1, pci_bus_id: "0000:1b:00.0".into(), identity };
    // Every field fits the encoding's widths (ranks, ordinals and names are small).
    #[allow(clippy::expect_used)]
    let encoded = [
        ("descriptor_vmm", vmm.encode().expect("encodable")),
        ("descriptor_legacy", legacy.encode().expect("encodable")),
        ("peer_info", peer.encode().expect("encodable")),
    ];
    encoded.into()
}
