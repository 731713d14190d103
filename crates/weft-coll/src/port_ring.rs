//! The state of the AllReduce `port_ring` algorithm (the ring over PortChannels, MSCCL++
//! "2PR", kernel `weft_allreduce_port_ring` in `device/kernels/coll/port_ring.cu`): a
//! [`weft_net::PortProxy`], a scratch registered with it, the PortChannels of each ring edge
//! this rank belongs to (the launch's driver block alone pushes and waits on them), and the
//! launch state the blocks hand work over with ([`PortSetup`]). Set up on the first call that uses the algorithm;
//! every rank reaches that call together (collective contract), so the pairwise channel set-up
//! matches.
//!
//! User buffers are never registered: the kernel reads the input and writes the output with
//! its own threads, and the copy engine only moves bytes between scratch slots. So calls need
//! no per-call registration or host exchange, and CUDA-graph replays work as long as the
//! proxy runs (it lives as long as the [`crate::Collectives`]).
//!
//! The geometry helpers mirror the kernel and are what the CPU tests check.

use crate::error::CollError;
use crate::params::PortRingParams;
use crate::port_setup::PortSetup;
#[cfg(test)]
use crate::port_setup::{MAX_SCRATCH, state_words};
use weft_core::Communicator;
use weft_gpu::DevicePtr;
use weft_net::PortProxy;
use weft_types::CollContext;

/// Most bytes one FIFO put carries (the command's size field is 32-bit); the kernel splits
/// larger puts (`kPortMaxPut`). Mirrors the kernel for the tests.
#[cfg(test)]
pub(crate) const MAX_PUT: u64 = 1 << 31;

fn round_up16(x: u64) -> u64 {
    x.div_ceil(16) * 16
}

/// Scratch layout for `ranks` ranks and rounds of `chunk_bytes`: two sets (rounds alternate)
/// of 2(n - 1) receive slots then n staging slots, each `slot_bytes` (at least the largest
/// shard of a round).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) slot_bytes: u64,
    /// Slots of one set.
    pub(crate) slots: u64,
    pub(crate) total_bytes: u64,
}

impl Layout {
    pub(crate) fn new(chunk_bytes: u64, ranks: usize) -> Self {
        let n = ranks as u64;
        // The kernel's largest shard: RingRound(capacity <= chunk_bytes, n).shard.
        let slot_bytes = round_up16(chunk_bytes.div_ceil(n));
        let slots = if ranks > 1 { 3 * n - 2 } else { 0 };
        Self { slot_bytes, slots, total_bytes: 2 * slots * slot_bytes }
    }
}

/// The smallest piece a shard is cut into (`kPortRingPieceBytes`).
#[cfg(test)]
const PIECE_BYTES: u64 = 512 << 10;

/// Most channels per ring edge.
pub(crate) const MAX_LANES: u32 = 16;

/// Channels per ring edge unless configured: pieces of a step on channels of their own. Over the
/// copy engine (within a host, and the emulated NIC) every channel to a peer shares one
/// stream, so two: one piece's reduction overlaps the other's copy, and more pieces only add
/// commands (measured: 2.2x slower at 4 MB with eight). Over TCP each channel has its own
/// sender thread and sockets, one moving about 3 GB/s, so four (1.1-1.4x faster than one from
/// 16 MB; eight were no faster at 4 ranks, docs/perf/proxy.md). Over verbs each channel is a
/// queue pair of its own, so four too (a NIC spreads queue pairs over its engines).
pub(crate) fn default_lanes(over_network: bool) -> u32 {
    if over_network { 4 } else { 2 }
}

/// The kernel's `worker_slice`: worker `w`'s part of the half `[a, b)`.
#[cfg(test)]
pub(crate) fn worker_slice(a: u64, b: u64, w: u64, workers: u64) -> (u64, u64) {
    let sub = if b > a { round_up16((b - a).div_ceil(workers)) } else { 0 };
    let lo = (a + w * sub).min(b);
    (lo, (lo + sub).min(b))
}

/// The FIFO puts the kernel pushes for `size` bytes from `src` to `dst`
/// (`port_put_signal_split`): `(dst, src, size)` pieces of at most [`MAX_PUT`] bytes, the last
/// carrying the signal; a lone signal (size 0) for an empty range.
#[cfg(test)]
pub(crate) fn split_put(mut dst: u64, mut src: u64, mut size: u64) -> Vec<(u64, u64, u64)> {
    let mut pieces = Vec::new();
    while size > MAX_PUT {
        pieces.push((dst, src, MAX_PUT));
        dst += MAX_PUT;
        src += MAX_PUT;
        size -= MAX_PUT;
    }
    pieces.push((dst, src, size));
    pieces
}

/// The ring edges rank `rank` of `ranks` belongs to, in the order every rank visits them:
/// `(edge, peer, sender)` for edge i = (i -> i + 1 mod n), i ascending. Any two ranks meet
/// their common edges in the same order, so the pairwise set-up cannot deadlock.
pub(crate) fn edges(rank: usize, ranks: usize) -> Vec<(usize, usize, bool)> {
    if ranks < 2 {
        return Vec::new();
    }
    (0..ranks)
        .filter_map(|i| {
            let to = (i + 1) % ranks;
            if rank == i {
                Some((i, to, true))
            } else if rank == to {
                Some((i, i, false))
            } else {
                None
            }
        })
        .collect()
}

/// The scratch, channels and launch state of `port_ring` (see the module docs).
pub(crate) struct PortRing {
    lanes: u32,
    slot_bytes: u64,
    /// Channel table `[out; lanes]` (edge rank -> next) then `[in; lanes]` (edge prev -> rank).
    setup: PortSetup,
}

impl PortRing {
    /// Sets everything up on `proxy` for rounds of `chunk_bytes`, `worker_blocks` workers and
    /// `lanes` channels per edge. Collective: every rank calls it at the same collective call
    /// with the same arguments.
    pub(crate) fn new(
        comm: &Communicator,
        proxy: &PortProxy,
        chunk_bytes: u64,
        worker_blocks: u32,
        lanes: u32,
    ) -> Result<Self, CollError> {
        let (rank, ranks) = (comm.rank(), comm.world_size());
        if !(1..=MAX_LANES).contains(&lanes) {
            return Err(CollError::InvalidArgument {
                rank,
                detail: format!("port_ring needs 1 to {MAX_LANES} channels per edge, not {lanes}"),
            });
        }
        let layout = Layout::new(chunk_bytes, ranks);
        let lanes_n = lanes as usize;
        let mut links = Vec::new();
        for (_, peer, sender) in edges(rank, ranks) {
            let first = if sender { 0 } else { lanes_n };
            links.extend((first..first + lanes_n).map(|entry| (peer, entry)));
        }
        let setup = PortSetup::new(comm, proxy, "port_ring", layout.total_bytes, 2 * lanes_n, &links, worker_blocks)?;
        Ok(Self { lanes, slot_bytes: layout.slot_bytes, setup })
    }

    /// The kernel's parameters for a call on `bytes` of `input` into `output` with context `c`.
    pub(crate) fn params(&self, c: CollContext, input: DevicePtr, output: DevicePtr, bytes: u64) -> PortRingParams {
        let b = self.setup.kernel_buffers();
        let (lanes, slot_bytes) = (self.lanes, self.slot_bytes);
        PortRingParams {
            c,
            input,
            output,
            bytes,
            channels: b.channels,
            lanes,
            scratch: b.scratch,
            slot_bytes,
            state: b.state,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's `RingRound`: its pieces per shard, and piece h of shard d of a round of
    /// `len` bytes.
    fn pieces(capacity: u64, n: u64, lanes: u64) -> u64 {
        (round_up16(capacity.div_ceil(n)) / PIECE_BYTES).clamp(1, lanes)
    }
    fn piece(len: u64, capacity: u64, n: u64, lanes: u64, d: u64, h: u64) -> (u64, u64) {
        let shard = round_up16(capacity.div_ceil(n));
        let lo = (d * shard).min(len);
        let hi = ((d + 1) * shard).min(len);
        let sub = round_up16((hi - lo).div_ceil(pieces(capacity, n, lanes)));
        ((lo + h * sub).min(hi), (lo + (h + 1) * sub).min(hi))
    }

    #[test]
    fn slots_hold_every_shard_and_pieces_and_worker_slices_tile_it_on_16_byte_boundaries() {
        for ranks in 2..=8usize {
            for chunk in [64u64 << 10, (32 << 20) - 16 * 3, 1 << 20] {
                let l = Layout::new(chunk, ranks);
                assert_eq!(l.slots, 3 * ranks as u64 - 2);
                assert_eq!(l.total_bytes, 2 * l.slots * l.slot_bytes, "two sets");
                assert!(l.slot_bytes.is_multiple_of(16));
                let n = ranks as u64;
                for bytes in [1u64, 15, 17, 4099, chunk - 1, chunk, chunk + 5, 3 * chunk + 77] {
                    let capacity = bytes.min(chunk);
                    for (workers, lanes) in [(1u64, 1u64), (3, 2), (32, 2), (32, 8), (5, 16)] {
                        // The last round may be short; every round uses the same capacity.
                        for len in [capacity, bytes - (bytes - 1) / chunk * chunk] {
                            let mut covered = 0;
                            for d in 0..n {
                                let shard = round_up16(capacity.div_ceil(n));
                                assert!(shard <= l.slot_bytes);
                                let mut next = (d * shard).min(len);
                                for h in 0..pieces(capacity, n, lanes) {
                                    let (a, b) = piece(len, capacity, n, lanes, d, h);
                                    assert_eq!(a, next, "pieces are contiguous in channel order");
                                    assert!(a <= b);
                                    if b > a {
                                        // 16-aligned puts of whole vectors stay inside the slot.
                                        assert!(a.is_multiple_of(16));
                                        assert!(round_up16(b) - d * shard <= l.slot_bytes);
                                    }
                                    let mut at = a;
                                    for w in 0..workers {
                                        let (lo, hi) = worker_slice(a, b, w, workers);
                                        if hi > lo {
                                            assert_eq!(lo, at, "slices are contiguous in worker order");
                                            assert!(lo.is_multiple_of(16));
                                            // Only the piece's last slice may end mid-vector.
                                            assert!(hi.is_multiple_of(16) || hi == b);
                                            at = hi;
                                        }
                                        covered += hi - lo;
                                    }
                                    assert_eq!(at, b);
                                    next = b;
                                }
                                assert_eq!(next, ((d + 1) * shard).min(len), "the pieces cover the shard");
                            }
                            assert_eq!(covered, len, "{ranks} ranks, chunk {chunk}, {bytes} bytes, {workers} workers");
                        }
                    }
                }
            }
        }
        // Shards split into pieces of at least 512 KiB, at most one per channel.
        assert_eq!(pieces(32 << 20, 4, 8), 8);
        assert_eq!(pieces(4 << 20, 4, 8), 2);
        assert_eq!(pieces(4 << 20, 4, 2), 2);
        assert_eq!(pieces(1 << 20, 4, 8), 1);
        assert_eq!(Layout::new(1 << 20, 1).total_bytes, 0);
        assert_eq!(Layout::new(32 << 20, 8).total_bytes, 2 * 22 * (4 << 20));
        assert_eq!(state_words(32), 100);
    }

    #[test]
    fn puts_split_into_32_bit_pieces_with_the_signal_on_the_last() {
        assert_eq!(split_put(16, 32, 0), vec![(16, 32, 0)]);
        assert_eq!(split_put(0, 0, 100), vec![(0, 0, 100)]);
        assert_eq!(split_put(0, 64, MAX_PUT), vec![(0, 64, MAX_PUT)]);
        let big = split_put(16, 0, 2 * MAX_PUT + 48);
        assert_eq!(big, vec![(16, 0, MAX_PUT), (16 + MAX_PUT, MAX_PUT, MAX_PUT), (16 + 2 * MAX_PUT, 2 * MAX_PUT, 48)]);
        assert!(big.iter().all(|&(_, _, s)| s <= u64::from(u32::MAX)));
        // A scratch at the limit keeps every offset 32-bit.
        let l = Layout::new(MAX_SCRATCH / 44 / 16 * 16 * 8, 8);
        assert!(l.total_bytes <= MAX_SCRATCH);
    }

    #[test]
    fn ring_edges_are_met_in_the_same_order_by_both_ends() {
        assert!(edges(0, 1).is_empty());
        assert_eq!(edges(0, 2), vec![(0, 1, true), (1, 1, false)]);
        assert_eq!(edges(1, 2), vec![(0, 0, false), (1, 0, true)]);
        for ranks in 2..=8 {
            for rank in 0..ranks {
                let mine = edges(rank, ranks);
                assert_eq!(mine.len(), 2);
                assert_eq!(mine.iter().filter(|e| e.2).count(), 1);
                let next = (rank + 1) % ranks;
                assert!(mine.contains(&(rank, next, true)));
                let prev = (rank + ranks - 1) % ranks;
                assert!(mine.contains(&(prev, prev, false)));
                for peer in 0..ranks {
                    let theirs = edges(peer, ranks);
                    let common_mine: Vec<usize> =
                        mine.iter().map(|e| e.0).filter(|i| theirs.iter().any(|t| t.0 == *i)).collect();
                    let common_theirs: Vec<usize> =
                        theirs.iter().map(|e| e.0).filter(|i| mine.iter().any(|t| t.0 == *i)).collect();
                    assert_eq!(common_mine, common_theirs);
                }
            }
        }
    }
}
