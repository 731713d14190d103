//! The two layouts the device and the host share: a [`Record`] in the ring and the [`Ring`]
//! itself (the module global `weft_trace_ring` of a traced module). The generated header
//! declares both in C++ and `static_assert`s every offset taken from these structs.

use std::mem::{offset_of, size_of};

/// Records a block keeps in shared memory during a launch; later marks of the launch are
/// dropped (and counted in [`Ring::dropped`]).
pub const BLOCK_RECORDS: u32 = 512;

/// The [`Record::warp`] of a block's own marks (`WEFT_TRACE_MARK`, entry and exit), as
/// against one warp's (`WEFT_TRACE_WARP_MARK`).
pub const BLOCK_WARP: u16 = u16::MAX;

/// One phase boundary of one warp of one block in one call.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// `%globaltimer` in nanoseconds.
    pub ns: u64,
    /// The call: the kernel's launch count on this ring when the block left it.
    pub call: u32,
    /// `blockIdx.x`.
    pub block: u32,
    /// The kernel's index in [`super::table::KERNELS`].
    pub kernel: u16,
    /// The warp in the block, or [`BLOCK_WARP`] for the block's own marks.
    pub warp: u16,
    /// The phase's index in [`super::table::PHASES`].
    pub phase: u16,
    /// The SM the block ran on (`%smid`).
    pub sm: u16,
}

impl Record {
    /// Bytes of one record in the ring.
    pub const BYTES: usize = size_of::<Self>();

    /// The record in the first [`Record::BYTES`] of `bytes` (little-endian, as the GPU wrote
    /// it); `None` when shorter.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let field = |at: usize, width: usize| -> Option<u64> {
            let mut word = [0u8; 8];
            word[..width].copy_from_slice(bytes.get(at..at + width)?);
            Some(u64::from_le_bytes(word))
        };
        // Each field is read at its width, so the casts below are lossless.
        Some(Self {
            ns: field(offset_of!(Self, ns), 8)?,
            call: field(offset_of!(Self, call), 4)? as u32,
            block: field(offset_of!(Self, block), 4)? as u32,
            kernel: field(offset_of!(Self, kernel), 2)? as u16,
            warp: field(offset_of!(Self, warp), 2)? as u16,
            phase: field(offset_of!(Self, phase), 2)? as u16,
            sm: field(offset_of!(Self, sm), 2)? as u16,
        })
    }

    /// The record's bytes as the GPU writes them (for tests of the reader).
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        let mut put = |at: usize, bytes: &[u8]| out[at..at + bytes.len()].copy_from_slice(bytes);
        put(offset_of!(Self, ns), &self.ns.to_le_bytes());
        put(offset_of!(Self, call), &self.call.to_le_bytes());
        put(offset_of!(Self, block), &self.block.to_le_bytes());
        put(offset_of!(Self, kernel), &self.kernel.to_le_bytes());
        put(offset_of!(Self, warp), &self.warp.to_le_bytes());
        put(offset_of!(Self, phase), &self.phase.to_le_bytes());
        put(offset_of!(Self, sm), &self.sm.to_le_bytes());
        out
    }
}

/// Where a traced module writes its records: device addresses, set into the module's
/// `weft_trace_ring` global after loading. A zero `records` records nothing.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ring {
    /// `Record[capacity]`; record `i` of the run lies at `i % capacity`.
    pub records: u64,
    /// `uint64_t`: records claimed so far (the next record's `i`).
    pub cursor: u64,
    /// `uint64_t`: marks dropped because a block's shared log was full.
    pub dropped: u64,
    /// `uint32_t[KERNELS.len()]`: the launches of each kernel that have ended.
    pub launches: u64,
    /// `uint32_t[KERNELS.len()]`: the blocks of each kernel's current launch that have ended.
    pub arrivals: u64,
    /// Records the ring holds.
    pub capacity: u32,
    /// Calls recorded: those whose number is a multiple of this (1: every call).
    pub sample: u32,
}

impl Ring {
    /// The bytes of the module global.
    pub fn to_bytes(&self) -> [u8; size_of::<Self>()] {
        let mut out = [0u8; size_of::<Self>()];
        let words = [self.records, self.cursor, self.dropped, self.launches, self.arrivals];
        for (i, w) in words.iter().enumerate() {
            out[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        out[offset_of!(Self, capacity)..][..4].copy_from_slice(&self.capacity.to_le_bytes());
        out[offset_of!(Self, sample)..][..4].copy_from_slice(&self.sample.to_le_bytes());
        out
    }
}

/// `(C++ type, field, offset)` of a field.
pub(crate) type Field = (&'static str, &'static str, usize);

/// `(name, fields, size)` of [`Record`] then of [`Ring`]: what the generated header declares
/// and asserts.
pub(crate) fn fields() -> [(&'static str, &'static [Field], usize); 2] {
    const RECORD: &[Field] = &[
        ("uint64_t", "ns", offset_of!(Record, ns)),
        ("uint32_t", "call", offset_of!(Record, call)),
        ("uint32_t", "block", offset_of!(Record, block)),
        ("uint16_t", "kernel", offset_of!(Record, kernel)),
        ("uint16_t", "warp", offset_of!(Record, warp)),
        ("uint16_t", "phase", offset_of!(Record, phase)),
        ("uint16_t", "sm", offset_of!(Record, sm)),
    ];
    const RING: &[Field] = &[
        ("Record*", "records", offset_of!(Ring, records)),
        ("unsigned long long*", "cursor", offset_of!(Ring, cursor)),
        ("unsigned long long*", "dropped", offset_of!(Ring, dropped)),
        ("uint32_t*", "launches", offset_of!(Ring, launches)),
        ("uint32_t*", "arrivals", offset_of!(Ring, arrivals)),
        ("uint32_t", "capacity", offset_of!(Ring, capacity)),
        ("uint32_t", "sample", offset_of!(Ring, sample)),
    ];
    [("Record", RECORD, size_of::<Record>()), ("Ring", RING, size_of::<Ring>())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_its_bytes() {
        let r = Record { ns: 0x0102_0304_0506_0708, call: 7, block: 70_000, kernel: 3, warp: 15, phase: 6, sm: 131 };
        assert_eq!(Record::BYTES, 24);
        assert_eq!(Record::from_bytes(&r.to_bytes()), Some(r));
        assert_eq!(Record::from_bytes(&r.to_bytes()[..23]), None);
    }

    #[test]
    fn the_ring_packs_its_fields_in_order() {
        let ring = Ring { records: 1, cursor: 2, dropped: 3, launches: 4, arrivals: 5, capacity: 6, sample: 7 };
        let bytes = ring.to_bytes();
        assert_eq!(bytes.len(), 48);
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!([word(0), word(8), word(16), word(24), word(32)], [1, 2, 3, 4, 5]);
        assert_eq!(word(40), 6 | (7 << 32));
    }
}
