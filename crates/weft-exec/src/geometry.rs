//! Where a chunk lies for a given message size, computed the way the interpreter kernel does it:
//! from two size-dependent numbers (`unit`, the elements of one input block, and the number of
//! size classes `K`) plus, for scratch, the rank's per-class chunk counts of
//! [`DeviceRankPlan::scratch_class_counts`]. Input and output chunk `i` is part `i % K` of block
//! `i / K`; part `c` holds `unit / K` elements plus one when `c < unit % K`; scratch chunks are
//! packed densely, each of its own class. This is weft-plan's [`Geometry`] restated so the
//! kernel can evaluate it without tables that depend on the size; the tests hold the two equal.
//!
//! The executor's own buffers (input and output stages, scratch) use the *padded* layout of the
//! same chunks, in bytes: every chunk starts 16-byte aligned and owns its bytes up to the next
//! multiple of 16, so the kernel writes them in whole 16-byte vectors and no two writers share a
//! word. [`Sizing::padded_dense_offset`] and [`Sizing::padded_scratch_offset`] are what
//! `device/kernels/exec/executor.cu` computes.
//!
//! A plan thread block runs as several *replicas* (blocks of the grid); replica `r` of `R` moves
//! [`replica_slice`] of every chunk an operation touches. A chunk's slices depend only on its
//! byte length, so the replica that writes a slice on one rank is the one that reads it on any
//! rank, and a replica's own links and steps order exactly the bytes it moves.
//!
//! [`Geometry`]: weft_plan::plan::Geometry

use std::ops::Range;

use weft_plan::plan::{BufRef, Buffer};

use crate::lower::{DevicePlan, DeviceRankPlan};

/// Bytes `[start, end)` of a `bytes`-long chunk that replica `replica` of `replicas` moves: its
/// share of the chunk's 16-byte vectors, so slices start 16-byte aligned (a padded chunk is
/// written in whole vectors and no two replicas store into one), cover the chunk and never
/// overlap. `device/kernels/exec/executor.cu` computes the same.
pub fn replica_slice(bytes: u64, replica: u32, replicas: u32) -> Range<u64> {
    let (r, n) = (u64::from(replica), u64::from(replicas.max(1)));
    let vectors = bytes.div_ceil(16);
    let at = |k: u64| (vectors * k / n * 16).min(bytes);
    at(r)..at(r + 1)
}

/// Bytes of a `bytes`-long chunk that replica `replica` of `replicas` moves for an operation on
/// `part` of every chunk (a thread-block group member; `None`: the whole chunk): the part is a
/// [`replica_slice`] of the chunk, and the replica's slice is a `replica_slice` of the part,
/// so both start on 16-byte vectors. `device/kernels/exec/executor.cu` computes the same.
pub fn op_slice(bytes: u64, part: Option<weft_plan::plan::Part>, replica: u32, replicas: u32) -> Range<u64> {
    let whole = match part {
        Some(p) => replica_slice(bytes, p.index, p.count),
        None => 0..bytes,
    };
    let mine = replica_slice(whole.end - whole.start, replica, replicas);
    whole.start + mine.start..whole.start + mine.end
}

/// The size-dependent numbers of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// Elements of one input block.
    pub unit: u64,
    /// Size classes.
    pub classes: u64,
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
            scratch_scale: if plan.packets { 2 } else { 1 },
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

    /// Bytes of a chunk of size class `class` in the padded layout (elements of `elem` bytes).
    pub fn padded_class_bytes(&self, class: u64, elem: u64) -> u64 {
        (self.class_len(class) * elem).next_multiple_of(16)
    }

    /// Byte offset of input or output chunk `index` in a stage (`index` may be the chunk count:
    /// the stage's length).
    pub fn padded_dense_offset(&self, index: u64, elem: u64) -> u64 {
        let c = index % self.classes;
        let block: u64 = (0..self.classes).map(|k| self.padded_class_bytes(k, elem)).sum();
        let before: u64 = (0..c).map(|k| self.padded_class_bytes(k, elem)).sum();
        (index / self.classes) * block + before
    }

    /// Bytes a scratch chunk of size class `class` takes: its padded bytes, twice that under
    /// LL packets.
    pub fn scratch_class_bytes(&self, class: u64, elem: u64) -> u64 {
        self.padded_class_bytes(class, elem) * self.scratch_scale
    }

    /// Byte offset of scratch chunk `index` of a rank (`index` may be the chunk count: the
    /// scratch's length); `None` past the end.
    pub fn padded_scratch_offset(&self, rank: &DeviceRankPlan, index: u64, elem: u64) -> Option<u64> {
        let k = self.classes as usize;
        let row = rank.scratch_class_counts.get(index as usize * k..(index as usize + 1) * k)?;
        Some(row.iter().enumerate().map(|(c, &n)| u64::from(n) * self.scratch_class_bytes(c as u64, elem)).sum())
    }

    /// Size class of chunk `index` of `owner`'s buffer `buffer` (0 input, 1 output, 2 scratch);
    /// `None` past the end of the scratch.
    pub fn class_of(&self, owner: &DeviceRankPlan, buffer: u8, index: u64) -> Option<u64> {
        if buffer != 2 {
            return Some(index % self.classes);
        }
        let k = self.classes as usize;
        let i = usize::try_from(index).ok()?;
        let row = owner.scratch_class_counts.get(i * k..(i + 1) * k)?;
        let next = owner.scratch_class_counts.get((i + 1) * k..(i + 2) * k)?;
        row.iter().zip(next).position(|(a, b)| a != b).map(|c| c as u64)
    }

    /// Byte offset of chunk `index` of `owner`'s padded buffer `buffer` (0 input stage, 1 output
    /// stage, 2 scratch): what the kernel computes for it on *any* rank. A scratch chunk is
    /// placed by its owner's table, since ranks' scratch layouts differ.
    pub fn padded_offset(&self, owner: &DeviceRankPlan, buffer: u8, index: u64, elem: u64) -> Option<u64> {
        match buffer {
            0 | 1 => Some(self.padded_dense_offset(index, elem)),
            _ => self.padded_scratch_offset(owner, index, elem),
        }
    }

    /// Whether every input and output chunk is whole 16-byte vectors for `elem`-byte elements:
    /// then the padded layout is the dense one (chunk `i` at byte `dense_offset(i) * elem`), and
    /// peers may write a user buffer that starts 16-byte aligned as they write a stage.
    pub fn dense_is_padded(&self, elem: u64) -> bool {
        self.unit.is_multiple_of(self.classes) && (self.unit / self.classes * elem).is_multiple_of(16)
    }

    /// Bytes of a rank's input stage, output stage and scratch in the padded layout.
    pub fn padded_lengths(&self, rank: &DeviceRankPlan, elem: u64) -> [u64; 3] {
        let scratch_chunks = (rank.scratch_class_counts.len() / self.classes as usize).saturating_sub(1) as u64;
        [
            self.padded_dense_offset(self.input_chunks, elem),
            self.padded_dense_offset(self.output_chunks, elem),
            self.padded_scratch_offset(rank, scratch_chunks, elem).unwrap_or(0),
        ]
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

    /// Every chunk of the padded layout starts 16-byte aligned, holds its elements and ends
    /// before the next chunk begins; the buffer lengths cover every chunk.
    #[test]
    fn padded_chunks_are_aligned_disjoint_and_large_enough() {
        for plan in shipped() {
            let lowered = lower(&plan).unwrap();
            let blocks = u64::from(plan.input_chunks / plan.size_classes);
            for per_block in [0u64, 1, 3, 7, 16, 1001] {
                let sizing = Sizing::new(&lowered, per_block * blocks).unwrap();
                for elem in [1u64, 2, 4, 8] {
                    for (r, rank) in lowered.ranks.iter().enumerate() {
                        let [input, output, scratch] = sizing.padded_lengths(rank, elem);
                        let dense = |n: u64, end: u64| -> Vec<(u64, u64)> {
                            (0..n)
                                .map(|i| (sizing.padded_dense_offset(i, elem), sizing.padded_dense_offset(i + 1, elem)))
                                .chain([(end, end)])
                                .collect()
                        };
                        let scratch_chunks = plan.ranks[r].scratch.len() as u64;
                        let scratch_spans: Vec<(u64, u64)> = (0..scratch_chunks)
                            .map(|i| {
                                let at = |j| sizing.padded_scratch_offset(rank, j, elem).unwrap();
                                (at(i), at(i + 1))
                            })
                            .collect();
                        let classes = |i: u64| i % sizing.classes;
                        for (i, &(start, end)) in dense(plan.input_chunks.into(), input).iter().enumerate() {
                            assert_eq!(start % 16, 0);
                            if (i as u64) < u64::from(plan.input_chunks) {
                                assert!(end - start >= sizing.class_len(classes(i as u64)) * elem);
                                assert!(end <= input);
                            }
                        }
                        for &(start, end) in &dense(plan.output_chunks.into(), output) {
                            assert!(start % 16 == 0 && start <= end && end <= output);
                        }
                        for (i, &(start, end)) in scratch_spans.iter().enumerate() {
                            let class = u64::from(plan.ranks[r].scratch[i]);
                            assert!(start % 16 == 0 && end <= scratch, "{} rank {r}", plan.name);
                            assert!(end - start >= sizing.class_len(class) * elem, "{} rank {r}", plan.name);
                        }
                    }
                }
            }
        }
    }

    /// Where `dense_is_padded` holds, every input and output chunk lies at the same byte in
    /// both layouts; where it does not, some chunk does not.
    #[test]
    fn dense_is_padded_exactly_when_the_layouts_coincide() {
        for plan in shipped() {
            let lowered = lower(&plan).unwrap();
            let blocks = u64::from(plan.input_chunks / plan.size_classes);
            for per_block in [1u64, 2, 8, 16, 24, 64, 1000, 1024, 4096] {
                let sizing = Sizing::new(&lowered, per_block * blocks).unwrap();
                for elem in [1u64, 2, 4, 8] {
                    let chunks = u64::from(plan.input_chunks.max(plan.output_chunks));
                    let same =
                        (0..=chunks).all(|i| sizing.padded_dense_offset(i, elem) == sizing.dense_offset(i) * elem);
                    assert_eq!(sizing.dense_is_padded(elem), same, "{} {per_block}x{blocks} of {elem}", plan.name);
                }
            }
        }
    }

    #[test]
    fn replica_slices_are_aligned_and_tile_the_chunk() {
        for bytes in [0u64, 1, 15, 16, 17, 100, 4096, 4097, 1 << 20, (1 << 20) + 3] {
            for replicas in [1u32, 2, 3, 7, 33, 132] {
                let mut next = 0;
                for r in 0..replicas {
                    let s = replica_slice(bytes, r, replicas);
                    assert_eq!(s.start, next, "{bytes} bytes, replica {r} of {replicas}");
                    assert!(s.start <= s.end && s.start.is_multiple_of(16));
                    next = s.end;
                }
                assert_eq!(next, bytes, "{bytes} bytes over {replicas} replicas");
            }
        }
        // Balanced: slices differ by at most one vector.
        let sizes: Vec<u64> = (0..3).map(|r| replica_slice(160, r, 3)).map(|s| s.end - s.start).collect();
        assert_eq!(sizes, vec![48, 48, 64]);
    }

    #[test]
    fn every_part_s_replica_slices_tile_the_chunk_in_order_on_16_byte_vectors() {
        use weft_plan::plan::Part;
        for bytes in [0u64, 1, 17, 100, 4097, (1 << 20) + 3] {
            for parts in [2u32, 3, 7, 64] {
                for replicas in [1u32, 3, 8] {
                    let mut next = 0;
                    for p in 0..parts {
                        for r in 0..replicas {
                            let s = op_slice(bytes, Some(Part::new(p, parts)), r, replicas);
                            assert_eq!(s.start, next, "{bytes} bytes, part {p}/{parts}, replica {r}/{replicas}");
                            assert!(s.start <= s.end && s.start.is_multiple_of(16));
                            next = s.end;
                        }
                    }
                    assert_eq!(next, bytes);
                }
            }
            assert_eq!(op_slice(bytes, None, 1, 3), replica_slice(bytes, 1, 3));
        }
    }

    #[test]
    fn the_padded_layout_of_one_class_is_each_chunk_rounded_up_to_16_bytes() {
        let plan = weft_plan::plans::ring_allgather(3, 1).unwrap().compile().unwrap();
        let lowered = lower(&plan).unwrap();
        // One class, one input block: a chunk is the whole input.
        let sizing = Sizing::new(&lowered, 5).unwrap();
        assert_eq!(sizing.classes, 1);
        assert_eq!(sizing.padded_dense_offset(1, 2), 16);
        assert_eq!(sizing.padded_dense_offset(3, 2), 48);
        assert_eq!(sizing.padded_dense_offset(2, 4), 64);
        // Two classes: 5 elements split 3 + 2.
        let two = lower(&weft_plan::plans::ring_allreduce(2, 1).unwrap().compile().unwrap()).unwrap();
        let sizing = Sizing::new(&two, 5).unwrap();
        assert_eq!((sizing.class_len(0), sizing.class_len(1)), (3, 2));
        assert_eq!((sizing.padded_dense_offset(1, 8), sizing.padded_dense_offset(2, 8)), (32, 48));
        assert_eq!((sizing.padded_dense_offset(1, 2), sizing.padded_dense_offset(2, 2)), (16, 32));
    }
}
