//! How the replicas of a thread block (and the members of a thread-block group) share a chunk:
//! each takes a run of the chunk's 16-byte vectors, so slices start 16-byte aligned, cover the
//! chunk and never overlap. A chunk's slices depend only on its byte length, so the replica that
//! writes a slice on one rank is the one that reads it on any rank.

use std::ops::Range;

use crate::plan::Part;

/// Bytes `[start, end)` of a `bytes`-long chunk that replica `replica` of `replicas` moves: its
/// balanced share of the chunk's 16-byte vectors (a padded chunk is written in whole vectors and
/// no two replicas store into one).
pub fn replica_slice(bytes: u64, replica: u32, replicas: u32) -> Range<u64> {
    let (r, n) = (u64::from(replica), u64::from(replicas.max(1)));
    let vectors = bytes.div_ceil(16);
    let at = |k: u64| (vectors * k / n * 16).min(bytes);
    at(r)..at(r + 1)
}

/// Bytes of a `bytes`-long chunk that replica `replica` of `replicas` moves for an operation on
/// `part` of every chunk (a thread-block group member; `None`: the whole chunk): the part is a
/// [`replica_slice`] of the chunk, and the replica's slice is a `replica_slice` of the part,
/// so both start on 16-byte vectors.
pub fn op_slice(bytes: u64, part: Option<Part>, replica: u32, replicas: u32) -> Range<u64> {
    let whole = match part {
        Some(p) => replica_slice(bytes, p.index, p.count),
        None => 0..bytes,
    };
    let mine = replica_slice(whole.end - whole.start, replica, replicas);
    whole.start + mine.start..whole.start + mine.end
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
