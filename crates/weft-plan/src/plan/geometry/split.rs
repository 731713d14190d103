//! The balanced split of one message size into chunks: every formula a chunk's place depends
//! on, in elements (the dense layout of user buffers) and in bytes (the padded layout of the
//! executor's stages and scratch).

use super::GeometryError;

/// A plan's `K` size classes bound to `unit`, the elements of one input block. Part `c` of a
/// block holds `unit / K` elements, plus one when `c < unit % K`; input and output chunk `i` is
/// part `i % K` of block `i / K`. Scratch chunks are packed: a chunk lies after the chunks before
/// it, whatever their classes, so its offset depends only on how many of each class precede it.
///
/// The padded layout places the same chunks in bytes, each starting 16-byte aligned and owning
/// its bytes up to the next multiple of 16 (see `docs/device.md` for why the executor needs it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSplit {
    unit: u64,
    classes: u64,
}

impl ChunkSplit {
    /// Binds a plan of `classes` size classes, `input_chunks` and `output_chunks` to
    /// `element_count` input elements per rank: the count must be a whole number of input
    /// blocks (`input_chunks / classes`), and the chunk counts whole blocks.
    pub fn bind(
        classes: u32,
        input_chunks: u32,
        output_chunks: u32,
        element_count: u64,
    ) -> Result<Self, GeometryError> {
        if classes == 0
            || input_chunks == 0
            || !input_chunks.is_multiple_of(classes)
            || !output_chunks.is_multiple_of(classes)
        {
            return Err(GeometryError::InvalidPlan { input_chunks, output_chunks, size_classes: classes });
        }
        let blocks = u64::from(input_chunks / classes);
        if !element_count.is_multiple_of(blocks) {
            return Err(GeometryError::NotDivisible { element_count, blocks });
        }
        Ok(Self { unit: element_count / blocks, classes: classes.into() })
    }

    /// Elements of one input block.
    pub fn unit(&self) -> u64 {
        self.unit
    }

    /// Size classes (`K`, never 0).
    pub fn classes(&self) -> u64 {
        self.classes
    }

    /// Size class of input or output chunk `index`.
    pub fn dense_class(&self, index: u64) -> u64 {
        index % self.classes
    }

    /// Elements of a chunk of size class `class`.
    pub fn class_len(&self, class: u64) -> u64 {
        self.unit / self.classes + u64::from(class < self.unit % self.classes)
    }

    /// Element offset of input or output chunk `index` in a dense buffer (`index` may be the
    /// chunk count: the buffer's length).
    pub fn dense_offset(&self, index: u64) -> u64 {
        let c = index % self.classes;
        (index / self.classes) * self.unit + c * (self.unit / self.classes) + c.min(self.unit % self.classes)
    }

    /// Element offset of a packed (scratch) chunk preceded by `before[c]` chunks of class `c`
    /// (`None` past `u64`).
    pub fn packed_offset(&self, before: &[u32]) -> Option<u64> {
        packed(before, |c| self.class_len(c))
    }

    /// Bytes a chunk of size class `class` owns in the padded layout, for `elem`-byte elements.
    pub fn padded_class_bytes(&self, class: u64, elem: u64) -> u64 {
        (self.class_len(class) * elem).next_multiple_of(16)
    }

    /// Byte offset of input or output chunk `index` in a padded buffer (`index` may be the chunk
    /// count: the buffer's length).
    pub fn padded_dense_offset(&self, index: u64, elem: u64) -> u64 {
        let block: u64 = (0..self.classes).map(|k| self.padded_class_bytes(k, elem)).sum();
        let before: u64 = (0..index % self.classes).map(|k| self.padded_class_bytes(k, elem)).sum();
        (index / self.classes) * block + before
    }

    /// Byte offset of a packed chunk preceded by `before[c]` chunks of class `c` in a padded
    /// buffer (`None` past `u64`).
    pub fn padded_packed_offset(&self, before: &[u32], elem: u64) -> Option<u64> {
        packed(before, |c| self.padded_class_bytes(c, elem))
    }

    /// Whether every input and output chunk is whole 16-byte vectors for `elem`-byte elements:
    /// then the padded layout is the dense one (chunk `i` at byte `dense_offset(i) * elem`).
    pub fn dense_is_padded(&self, elem: u64) -> bool {
        self.unit.is_multiple_of(self.classes) && (self.unit / self.classes * elem).is_multiple_of(16)
    }
}

/// `sum(before[c] * size(c))`, `None` on overflow.
fn packed(before: &[u32], size: impl Fn(u64) -> u64) -> Option<u64> {
    (0..).zip(before).try_fold(0u64, |at, (c, &n)| at.checked_add(u64::from(n).checked_mul(size(c))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every split of up to 8 classes and 1 to 3 input blocks, at a few sizes per block.
    fn splits(per_block: &[u64]) -> impl Iterator<Item = (ChunkSplit, u32)> + '_ {
        (1u32..=8).flat_map(move |classes| {
            (1u32..=3).flat_map(move |blocks| {
                per_block.iter().map(move |&m| {
                    let chunks = classes * blocks;
                    (ChunkSplit::bind(classes, chunks, chunks, m * u64::from(blocks)).unwrap(), chunks)
                })
            })
        })
    }

    #[test]
    fn a_count_must_be_whole_blocks_of_whole_classes() {
        assert!(matches!(ChunkSplit::bind(0, 4, 4, 8), Err(GeometryError::InvalidPlan { .. })));
        assert!(matches!(ChunkSplit::bind(2, 3, 4, 8), Err(GeometryError::InvalidPlan { .. })));
        assert!(matches!(ChunkSplit::bind(2, 4, 3, 8), Err(GeometryError::InvalidPlan { .. })));
        assert_eq!(ChunkSplit::bind(2, 4, 4, 7), Err(GeometryError::NotDivisible { element_count: 7, blocks: 2 }));
        let split = ChunkSplit::bind(2, 4, 6, 10).unwrap();
        assert_eq!((split.unit(), split.classes()), (5, 2));
    }

    /// Chunks tile a dense buffer in order, each as long as its class, the classes of a block
    /// differing by at most one element; packed chunks lie one after the other.
    #[test]
    fn dense_and_packed_chunks_tile_their_buffers() {
        for (split, chunks) in splits(&[0, 1, 2, 3, 5, 8, 13, 1000, 1023]) {
            for i in 0..u64::from(chunks) {
                let c = split.dense_class(i);
                assert_eq!(split.dense_offset(i + 1) - split.dense_offset(i), split.class_len(c), "{split:?} {i}");
                assert!(split.class_len(0) - split.class_len(c) <= 1);
            }
            assert_eq!(split.dense_offset(chunks.into()), split.unit() * u64::from(chunks) / split.classes());
            let mut before = vec![0u32; split.classes() as usize];
            for c in (0..split.classes()).rev().chain(0..split.classes()) {
                let at = split.packed_offset(&before).unwrap();
                before[c as usize] += 1;
                assert_eq!(split.packed_offset(&before).unwrap() - at, split.class_len(c));
                let padded = split.padded_packed_offset(&before, 2).unwrap();
                assert_eq!(padded % 16, 0);
            }
        }
        assert_eq!(ChunkSplit::bind(1, 1, 1, u64::MAX).unwrap().packed_offset(&[2]), None);
    }

    /// Where `dense_is_padded` holds, every input and output chunk lies at the same byte in
    /// both layouts; where it does not, some chunk does not.
    #[test]
    fn dense_is_padded_exactly_when_the_layouts_coincide() {
        for (split, chunks) in splits(&[1, 2, 8, 16, 24, 64, 1000, 1024, 4096]) {
            for elem in [1u64, 2, 4, 8] {
                let same =
                    (0..=u64::from(chunks)).all(|i| split.padded_dense_offset(i, elem) == split.dense_offset(i) * elem);
                assert_eq!(split.dense_is_padded(elem), same, "{split:?} of {elem}");
            }
        }
    }

    /// Every padded chunk starts 16-byte aligned and owns its bytes rounded up to 16.
    #[test]
    fn padded_chunks_are_their_bytes_rounded_up_to_16() {
        for (split, chunks) in splits(&[0, 1, 3, 7, 16, 1001]) {
            for elem in [1u64, 2, 4, 8] {
                for i in 0..u64::from(chunks) {
                    let (at, next) = (split.padded_dense_offset(i, elem), split.padded_dense_offset(i + 1, elem));
                    assert_eq!(at % 16, 0);
                    assert_eq!(next - at, (split.class_len(split.dense_class(i)) * elem).next_multiple_of(16));
                }
            }
        }
        // One class: a chunk is the whole block.
        let one = ChunkSplit::bind(1, 1, 3, 5).unwrap();
        assert_eq!(
            (one.padded_dense_offset(1, 2), one.padded_dense_offset(3, 2), one.padded_dense_offset(2, 4)),
            (16, 48, 64)
        );
        // Two classes: 5 elements split 3 + 2.
        let two = ChunkSplit::bind(2, 2, 2, 5).unwrap();
        assert_eq!((two.class_len(0), two.class_len(1)), (3, 2));
        assert_eq!((two.padded_dense_offset(1, 8), two.padded_dense_offset(2, 8)), (32, 48));
        assert_eq!((two.padded_dense_offset(1, 2), two.padded_dense_offset(2, 2)), (16, 32));
    }
}
