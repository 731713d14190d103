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

use std::ops::Range;

use thiserror::Error;

use super::{Buffer, ExecutionPlan};
use crate::plan::BufRef;

/// Why a plan cannot be bound to a message size.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GeometryError {
    /// The input element count must be a whole number of blocks.
    #[error("element count {element_count} is not a multiple of the {blocks} input blocks of this plan")]
    NotDivisible {
        /// Elements per rank input.
        element_count: usize,
        /// Input blocks (`input_chunks / size_classes`).
        blocks: usize,
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
    unit: usize,
    classes: usize,
    input_chunks: usize,
    output_chunks: usize,
    /// Per rank: `scratch[r][i]` is the offset of scratch chunk `i`; one extra entry at the end.
    scratch: Vec<Vec<usize>>,
}

impl Geometry {
    /// Binds `plan` to `element_count` input elements per rank.
    pub fn new(plan: &ExecutionPlan, element_count: usize) -> Result<Self, GeometryError> {
        let invalid = GeometryError::InvalidPlan {
            input_chunks: plan.input_chunks,
            output_chunks: plan.output_chunks,
            size_classes: plan.size_classes,
        };
        let classes = plan.size_classes as usize;
        let input_chunks = plan.input_chunks as usize;
        let output_chunks = plan.output_chunks as usize;
        if classes == 0
            || input_chunks == 0
            || !input_chunks.is_multiple_of(classes)
            || !output_chunks.is_multiple_of(classes)
        {
            return Err(invalid);
        }
        let blocks = input_chunks / classes;
        if !element_count.is_multiple_of(blocks) {
            return Err(GeometryError::NotDivisible { element_count, blocks });
        }
        let unit = element_count / blocks;
        let mut geometry =
            Self { unit, classes, input_chunks, output_chunks, scratch: Vec::with_capacity(plan.ranks.len()) };
        (output_chunks / classes).checked_mul(unit).ok_or(GeometryError::Overflow { element_count })?;
        for rank in &plan.ranks {
            let mut offsets = Vec::with_capacity(rank.scratch.len() + 1);
            let mut at = 0usize;
            offsets.push(at);
            for &class in &rank.scratch {
                if class as usize >= classes {
                    return Err(invalid);
                }
                at = at.checked_add(geometry.class_len(class)).ok_or(GeometryError::Overflow { element_count })?;
                offsets.push(at);
            }
            geometry.scratch.push(offsets);
        }
        Ok(geometry)
    }

    /// Elements per block (`m`).
    pub fn unit(&self) -> usize {
        self.unit
    }

    /// Elements in a chunk of size class `class`.
    pub fn class_len(&self, class: u32) -> usize {
        let c = class as usize;
        self.unit / self.classes + usize::from(c < self.unit % self.classes)
    }

    fn class_offset(&self, class: usize) -> usize {
        class * (self.unit / self.classes) + class.min(self.unit % self.classes)
    }

    fn dense_offset(&self, index: usize) -> usize {
        (index / self.classes) * self.unit + self.class_offset(index % self.classes)
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
        let start = chunks.index as usize;
        let end = start.checked_add(chunks.count as usize)?;
        match chunks.buffer {
            Buffer::Input | Buffer::Output => {
                let limit = if chunks.buffer == Buffer::Input { self.input_chunks } else { self.output_chunks };
                (end <= limit).then(|| self.dense_offset(start)..self.dense_offset(end))
            }
            Buffer::Scratch => {
                let offsets = self.scratch.get(rank as usize)?;
                Some(*offsets.get(start)?..*offsets.get(end)?)
            }
        }
    }
}
