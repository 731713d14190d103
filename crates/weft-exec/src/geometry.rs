//! Where a chunk lies for a given message size, computed the way the interpreter kernel does it:
//! from two size-dependent numbers (`unit`, the elements of one input block, and the number of
//! size classes `K`) plus, for scratch, the rank's per-class chunk counts of
//! [`DeviceRankPlan::scratch_class_counts`]. Input and output chunk `i` is part `i % K` of block
//! `i / K`; part `c` holds `unit / K` elements plus one when `c < unit % K`; scratch chunks are
//! packed densely, each of its own class. This is weft-plan's [`Geometry`] restated so the
//! kernel can evaluate it without tables that depend on the size; the tests hold the two equal.
//!
//! [`Geometry`]: weft_plan::plan::Geometry

use std::ops::Range;

use weft_plan::plan::{BufRef, Buffer};

use crate::lower::{DevicePlan, DeviceRankPlan};

/// The size-dependent numbers of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// Elements of one input block.
    pub unit: u64,
    /// Size classes.
    pub classes: u64,
    input_chunks: u64,
    output_chunks: u64,
}

impl Sizing {
    /// The sizing of `plan` for `element_count` input elements per rank; `None` when the count
    /// is not a whole number of input blocks (the plan cannot take it).
    pub fn new(plan: &DevicePlan, element_count: u64) -> Option<Self> {
        let classes = u64::from(plan.size_classes);
        let blocks = u64::from(plan.input_chunks).checked_div(classes)?;
        if blocks == 0 || !element_count.is_multiple_of(blocks) {
            return None;
        }
        Some(Self {
            unit: element_count / blocks,
            classes,
            input_chunks: plan.input_chunks.into(),
            output_chunks: plan.output_chunks.into(),
        })
    }

    /// Elements of a chunk of size class `class`.
    pub fn class_len(&self, class: u64) -> u64 {
        self.unit / self.classes + u64::from(class < self.unit % self.classes)
    }

    /// Element offset of input or output chunk `index`.
    pub fn dense_offset(&self, index: u64) -> u64 {
        let c = index % self.classes;
        (index / self.classes) * self.unit + c * (self.unit / self.classes) + c.min(self.unit % self.classes)
    }

    /// Element offset of scratch chunk `index` of a rank (`index` may be the chunk count: the
    /// scratch length); `None` past the end.
    pub fn scratch_offset(&self, rank: &DeviceRankPlan, index: u64) -> Option<u64> {
        let k = self.classes as usize;
        let row = rank.scratch_class_counts.get(index as usize * k..(index as usize + 1) * k)?;
        Some(row.iter().enumerate().map(|(c, &n)| u64::from(n) * self.class_len(c as u64)).sum())
    }

    /// Element range of `chunks` in a rank's buffer; `None` when out of range.
    pub fn extent(&self, rank: &DeviceRankPlan, chunks: BufRef) -> Option<Range<u64>> {
        let (start, end) = (u64::from(chunks.index), chunks.end());
        match chunks.buffer {
            Buffer::Input | Buffer::Output => {
                let limit = if chunks.buffer == Buffer::Input { self.input_chunks } else { self.output_chunks };
                (end <= limit).then(|| self.dense_offset(start)..self.dense_offset(end))
            }
            Buffer::Scratch => Some(self.scratch_offset(rank, start)?..self.scratch_offset(rank, end)?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::lower;
    use crate::tests::shipped;
    use weft_plan::plan::Geometry;

    #[test]
    fn the_kernel_geometry_equals_weft_plans_for_every_chunk_of_every_shipped_plan() {
        for plan in shipped() {
            let lowered = lower(&plan).unwrap();
            let blocks = (plan.input_chunks / plan.size_classes) as usize;
            for per_block in [0usize, 1, 2, 3, 5, 8, 13, 1000, 1023] {
                let count = per_block * blocks;
                let sizing = Sizing::new(&lowered, count as u64).unwrap();
                let geometry = Geometry::new(&plan, count).unwrap();
                for (r, rp) in plan.ranks.iter().enumerate() {
                    let dr = &lowered.ranks[r];
                    let n = rp.scratch.len() as u32;
                    let mut refs = vec![BufRef::new(Buffer::Input, 0, plan.input_chunks)];
                    refs.push(BufRef::new(Buffer::Output, 0, plan.output_chunks));
                    refs.extend((0..n).map(|i| BufRef::new(Buffer::Scratch, i, n - i)));
                    refs.extend((0..plan.output_chunks).map(|i| BufRef::new(Buffer::Output, i, 1)));
                    for b in refs {
                        let want = geometry.extent(r as u32, b).map(|x| x.start as u64..x.end as u64);
                        assert_eq!(sizing.extent(dr, b), want, "{} rank {r} {b} count {count}", plan.name);
                    }
                }
            }
            let blocks = u64::from(plan.input_chunks / plan.size_classes);
            if blocks > 1 {
                assert!(Sizing::new(&lowered, blocks + 1).is_none(), "{}", plan.name);
            }
        }
    }
}
