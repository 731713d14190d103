//! Chunk geometry: binding a chunk-indexed plan to a message size.
//!
//! A plan has `K` size classes. The input buffer of `n_in` elements is made of
//! `input_chunks / K` blocks of `m = n_in / (input_chunks / K)` elements each, and each block is
//! split into `K` balanced parts: part `c` has `m / K` elements, plus one if `c < m % K`. Input
//! and output chunk `i` is part `i % K` of block `i / K`, so
//!
//! ```text
//! offset(i) = (i / K) * m + (i % K) * (m / K) + min(i % K, m % K)
//! ```
//!
//! This is the layout NCCL users expect: an all-gather output is the concatenation of the
//! inputs, a reduce-scatter input is one block per rank, for any element count (including counts
//! not divisible by `K`, and counts smaller than `K`, which give empty chunks). Scratch chunks
//! carry an explicit size class each (listed in the plan) and are packed densely.
//!
//! This module is the one definition of that geometry: [`ChunkSplit`] holds every formula (in
//! elements, and in bytes for the executor's padded layout), [`replica_slice`] and [`op_slice`]
//! how replicas share a chunk, and [`Geometry`] binds a whole plan with it for the interpreter.
//! weft-exec builds its device tables on the same items, and the CUDA executor's closed-form
//! restatement (`device/kernels/exec/geometry.cuh`) is checked against them by weft-exec's tests.

mod slice;
mod split;

use std::ops::Range;

use thiserror::Error;

use super::{Buffer, ExecutionPlan};
use crate::plan::BufRef;

pub use slice::{op_slice, replica_slice};
pub use split::ChunkSplit;

/// Why a plan cannot be bound to a message size.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GeometryError {
    /// The input element count must be a whole number of blocks.
    #[error("element count {element_count} is not a multiple of the {blocks} input blocks of this plan")]
    NotDivisible {
        /// Elements per rank input.
        element_count: u64,
        /// Input blocks (`input_chunks / size_classes`).
        blocks: u64,
    },
    /// The plan's chunk counts do not form whole blocks (the plan was not validated).
    #[error(
        "invalid plan geometry: {input_chunks} input and {output_chunks} output chunks with {size_classes} size classes"
    )]
    InvalidPlan {
        /// Input chunks.
        input_chunks: u32,
        /// Output chunks.
        output_chunks: u32,
        /// Size classes.
        size_classes: u32,
    },
    /// A buffer would not fit in the address space.
    #[error("buffer sizes overflow for element count {element_count}")]
    Overflow {
        /// Elements per rank input.
        element_count: usize,
    },
}

/// Element offsets of every chunk of a plan, for one message size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    split: ChunkSplit,
    input_chunks: u32,
    output_chunks: u32,
    /// Per rank: `scratch[r][i]` is the offset of scratch chunk `i`; one extra entry at the end.
    scratch: Vec<Vec<usize>>,
}

impl Geometry {
    /// Binds `plan` to `element_count` input elements per rank.
    pub fn new(plan: &ExecutionPlan, element_count: usize) -> Result<Self, GeometryError> {
        let overflow = GeometryError::Overflow { element_count };
        let count = u64::try_from(element_count).map_err(|_| overflow.clone())?;
        let split = ChunkSplit::bind(plan.size_classes, plan.input_chunks, plan.output_chunks, count)?;
        (u64::from(plan.output_chunks) / split.classes())
            .checked_mul(split.unit())
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(overflow.clone())?;
        let mut scratch = Vec::with_capacity(plan.ranks.len());
        for rank in &plan.ranks {
            // Chunks of each class before the next scratch chunk.
            let mut before = vec![0u32; plan.size_classes as usize];
            let mut offsets = Vec::with_capacity(rank.scratch.len() + 1);
            offsets.push(0);
            for &class in &rank.scratch {
                let seen = before.get_mut(class as usize).ok_or(GeometryError::InvalidPlan {
                    input_chunks: plan.input_chunks,
                    output_chunks: plan.output_chunks,
                    size_classes: plan.size_classes,
                })?;
                *seen = seen.checked_add(1).ok_or(overflow.clone())?;
                let end = split.packed_offset(&before).and_then(|n| usize::try_from(n).ok());
                offsets.push(end.ok_or(overflow.clone())?);
            }
            scratch.push(offsets);
        }
        Ok(Self { split, input_chunks: plan.input_chunks, output_chunks: plan.output_chunks, scratch })
    }

    /// The split every chunk's place follows.
    pub fn split(&self) -> &ChunkSplit {
        &self.split
    }

    /// Elements per block (`m`).
    pub fn unit(&self) -> usize {
        fits(self.split.unit())
    }

    /// Elements in a chunk of size class `class`.
    pub fn class_len(&self, class: u32) -> usize {
        fits(self.split.class_len(class.into()))
    }

    /// Element offset of input or output chunk `index`.
    fn dense_offset(&self, index: u32) -> usize {
        fits(self.split.dense_offset(index.into()))
    }

    /// Elements in `buffer` of `rank` (`None` if the rank does not exist).
    pub fn buffer_len(&self, rank: u32, buffer: Buffer) -> Option<usize> {
        match buffer {
            Buffer::Input => Some(self.dense_offset(self.input_chunks)),
            Buffer::Output => Some(self.dense_offset(self.output_chunks)),
            Buffer::Scratch => self.scratch.get(rank as usize)?.last().copied(),
        }
    }

    /// Element range of `chunks` in `rank`'s buffer (`None` when out of range).
    pub fn extent(&self, rank: u32, chunks: BufRef) -> Option<Range<usize>> {
        let start = chunks.index;
        let end = start.checked_add(chunks.count)?;
        match chunks.buffer {
            Buffer::Input | Buffer::Output => {
                let limit = if chunks.buffer == Buffer::Input { self.input_chunks } else { self.output_chunks };
                (end <= limit).then(|| self.dense_offset(start)..self.dense_offset(end))
            }
            Buffer::Scratch => {
                let offsets = self.scratch.get(rank as usize)?;
                Some(*offsets.get(start as usize)?..*offsets.get(end as usize)?)
            }
        }
    }
}

/// `n`, an element count or offset within the input or output buffer, as a `usize`: `new`
/// checked that both buffers' lengths fit one, so every offset within them does.
fn fits(n: u64) -> usize {
    n as usize
}
