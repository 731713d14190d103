//! Where a chunk lies for a given message size, on the device tables: weft-plan's one
//! definition of the chunk geometry ([`ChunkSplit`], [`replica_slice`], [`op_slice`]) applied to
//! a lowered plan, whose scratch chunks are placed by each rank's per-class chunk counts
//! ([`DeviceRankPlan::scratch_class_counts`]) the way the kernel reads them, without tables that
//! depend on the size.
//!
//! The executor's own buffers (input and output stages, scratch) use the *padded* layout of the
//! same chunks; scratch chunks take twice their padded bytes under LL packets.
//! `device/kernels/exec/geometry.cuh` restates these formulas in closed form for the kernel;
//! this crate's `tests/geometry.rs` evaluates that header on the host and holds it equal to
//! weft-plan's.

use std::ops::Range;

use weft_plan::plan::{BufRef, Buffer, ChunkSplit};

use crate::lower::{DevicePlan, DeviceRankPlan};

pub use weft_plan::plan::{op_slice, replica_slice};

/// The size-dependent numbers of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    split: ChunkSplit,
    input_chunks: u64,
    output_chunks: u64,
    /// Bytes of a scratch chunk per byte of the padded layout: 2 under LL packets (16 bytes of
    /// packets carry 8 of data), else 1.
    scratch_scale: u64,
}

impl Sizing {
    /// The sizing of `plan` for `element_count` input elements per rank; `None` when the count
    /// is not a whole number of input blocks (the plan cannot take it).
    pub fn new(plan: &DevicePlan, element_count: u64) -> Option<Self> {
        let split = ChunkSplit::bind(plan.size_classes, plan.input_chunks, plan.output_chunks, element_count).ok()?;
        Some(Self {
            split,
            input_chunks: plan.input_chunks.into(),
            output_chunks: plan.output_chunks.into(),
            scratch_scale: if plan.packets { 2 } else { 1 },
        })
    }

    /// The split every chunk's place follows.
    pub fn split(&self) -> &ChunkSplit {
        &self.split
    }

    /// Elements of one input block.
    pub fn unit(&self) -> u64 {
        self.split.unit()
    }

    /// Size classes.
    pub fn classes(&self) -> u64 {
        self.split.classes()
    }

    /// Row `index` of a rank's scratch table: how many chunks of each class precede scratch
    /// chunk `index` (`index` may be the chunk count); `None` past the end.
    fn scratch_row<'a>(&self, rank: &'a DeviceRankPlan, index: u64) -> Option<&'a [u32]> {
        let k = self.split.classes() as usize;
        let i = usize::try_from(index).ok()?;
        rank.scratch_class_counts.get(i.checked_mul(k)?..i.checked_add(1)?.checked_mul(k)?)
    }

    /// Element offset of scratch chunk `index` of a rank (`index` may be the chunk count: the
    /// scratch length); `None` past the end.
    pub fn scratch_offset(&self, rank: &DeviceRankPlan, index: u64) -> Option<u64> {
        self.split.packed_offset(self.scratch_row(rank, index)?)
    }

    /// Bytes a scratch chunk of size class `class` takes: its padded bytes, twice that under
    /// LL packets.
    pub fn scratch_class_bytes(&self, class: u64, elem: u64) -> u64 {
        self.split.padded_class_bytes(class, elem) * self.scratch_scale
    }

    /// Byte offset of scratch chunk `index` of a rank (`index` may be the chunk count: the
    /// scratch's length); `None` past the end.
    pub fn padded_scratch_offset(&self, rank: &DeviceRankPlan, index: u64, elem: u64) -> Option<u64> {
        self.split.padded_packed_offset(self.scratch_row(rank, index)?, elem)?.checked_mul(self.scratch_scale)
    }

    /// Size class of chunk `index` of `owner`'s buffer `buffer` (0 input, 1 output, 2 scratch):
    /// for scratch, the class whose count grows from row `index` to the next; `None` past the
    /// end of the scratch.
    pub fn class_of(&self, owner: &DeviceRankPlan, buffer: u8, index: u64) -> Option<u64> {
        if buffer != 2 {
            return Some(self.split.dense_class(index));
        }
        let row = self.scratch_row(owner, index)?;
        let next = self.scratch_row(owner, index.checked_add(1)?)?;
        row.iter().zip(next).position(|(a, b)| a != b).map(|c| c as u64)
    }

    /// Byte offset of chunk `index` of `owner`'s padded buffer `buffer` (0 input stage, 1 output
    /// stage, 2 scratch): what the kernel computes for it on *any* rank. A scratch chunk is
    /// placed by its owner's table, since ranks' scratch layouts differ.
    pub fn padded_offset(&self, owner: &DeviceRankPlan, buffer: u8, index: u64, elem: u64) -> Option<u64> {
        match buffer {
            0 | 1 => Some(self.split.padded_dense_offset(index, elem)),
            _ => self.padded_scratch_offset(owner, index, elem),
        }
    }

    /// Bytes of a rank's input stage, output stage and scratch in the padded layout.
    pub fn padded_lengths(&self, rank: &DeviceRankPlan, elem: u64) -> [u64; 3] {
        let scratch_chunks = (rank.scratch_class_counts.len() / self.split.classes() as usize).saturating_sub(1) as u64;
        [
            self.split.padded_dense_offset(self.input_chunks, elem),
            self.split.padded_dense_offset(self.output_chunks, elem),
            self.padded_scratch_offset(rank, scratch_chunks, elem).unwrap_or(0),
        ]
    }

    /// Element range of `chunks` in a rank's buffer; `None` when out of range.
    pub fn extent(&self, rank: &DeviceRankPlan, chunks: BufRef) -> Option<Range<u64>> {
        let (start, end) = (u64::from(chunks.index), chunks.end());
        match chunks.buffer {
            Buffer::Input | Buffer::Output => {
                let limit = if chunks.buffer == Buffer::Input { self.input_chunks } else { self.output_chunks };
                (end <= limit).then(|| self.split.dense_offset(start)..self.split.dense_offset(end))
            }
            Buffer::Scratch => Some(self.scratch_offset(rank, start)?..self.scratch_offset(rank, end)?),
        }
    }
}
