//! Where each region of a rank's EP buffer lies and how many tokens its staging area holds:
//! the one place these numbers are computed. Kernels receive them through `EpContext`.
//!
//! A buffer is the metadata (barrier tokens, count tables, channel words and tails, each with
//! a row per rank) followed by the staging area: `num_nvl_bytes` split into one region per rank
//! that writes into it (a dispatch's source, a combine's expert side), each a whole number of
//! slots of one token.

use weft_types::{EpContext, WaitContext};

/// Most ranks of an EP group.
pub const MAX_RANKS: usize = 8;
/// Most channels of a normal-mode kernel (half its SMs).
pub const MAX_CHANNELS: usize = 128;
/// Most experts on one rank.
pub const MAX_LOCAL_EXPERTS: usize = 1024;
/// Start alignment of every region.
const ALIGN: usize = 256;

/// Offsets of the regions of an EP buffer (the same on every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BufferLayout {
    barrier: usize,
    expected: usize,
    rank_counts: usize,
    expert_counts: usize,
    channel_info: usize,
    dispatch_tail: usize,
    combine_tail: usize,
    /// Start of the staging area.
    pub(crate) data_offset: usize,
    /// Bytes of the staging area.
    pub(crate) data_bytes: usize,
}

impl BufferLayout {
    /// The layout of a buffer with `data_bytes` of staging (DeepEP's `num_nvl_bytes`).
    pub(crate) fn new(data_bytes: usize) -> Self {
        let mut at = 0;
        let mut region = |bytes: usize| {
            let start = at;
            at = (at + bytes).next_multiple_of(ALIGN);
            start
        };
        let table = MAX_RANKS * MAX_CHANNELS * 8;
        Self {
            barrier: region(MAX_RANKS * 8),
            expected: region(MAX_RANKS * 8),
            rank_counts: region(MAX_RANKS * MAX_RANKS * 4),
            expert_counts: region(MAX_RANKS * MAX_LOCAL_EXPERTS * 4),
            channel_info: region(table),
            dispatch_tail: region(table),
            combine_tail: region(table),
            data_offset: region(0),
            data_bytes,
        }
    }

    /// Bytes of the whole buffer.
    pub(crate) fn total_bytes(&self) -> usize {
        self.data_offset + self.data_bytes
    }

    /// The kernels' view of this layout for `rank` of `ranks`, with `peers[r]` rank r's buffer.
    pub(crate) fn context(&self, peers: &[u64], rank: usize, wait: WaitContext) -> EpContext {
        let mut table = [0u64; MAX_RANKS];
        table[..peers.len()].copy_from_slice(peers);
        EpContext {
            peers: table,
            wait,
            barrier_offset: self.barrier as u64,
            expected_offset: self.expected as u64,
            rank_counts_offset: self.rank_counts as u64,
            expert_counts_offset: self.expert_counts as u64,
            channel_info_offset: self.channel_info as u64,
            dispatch_tail_offset: self.dispatch_tail as u64,
            combine_tail_offset: self.combine_tail as u64,
            data_offset: self.data_offset as u64,
            data_bytes: self.data_bytes as u64,
            rank: rank as u32,
            ranks: peers.len() as u32,
            max_channels: MAX_CHANNELS as u32,
            max_local_experts: MAX_LOCAL_EXPERTS as u32,
        }
    }
}

/// Slots of the staging area for one kind of transfer: one region per writing rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Staging {
    /// Bytes of one token's slot (a 16-byte multiple).
    pub(crate) slot_bytes: usize,
    /// Tokens a region holds: the most tokens a rank may dispatch.
    pub(crate) capacity: usize,
    /// Bytes of one region.
    pub(crate) region_bytes: usize,
}

impl Staging {
    fn new(data_bytes: usize, ranks: usize, slot_bytes: usize) -> Self {
        let slot_bytes = slot_bytes.next_multiple_of(16);
        let capacity = data_bytes / (ranks.max(1) * slot_bytes);
        Self { slot_bytes, capacity, region_bytes: capacity * slot_bytes }
    }

    /// Dispatch: the payload, `num_scales` f32 scales, `topk` int32 indices and f32 weights,
    /// and the int32 source index (device/kernels/ep/dispatch.cu, `StagedToken`).
    pub(crate) fn dispatch(
        data_bytes: usize,
        ranks: usize,
        hidden_bytes: usize,
        num_scales: usize,
        topk: usize,
    ) -> Self {
        Self::new(data_bytes, ranks, hidden_bytes + 4 * num_scales + 8 * topk + 4)
    }

    /// Combine: the BF16 row and `topk` f32 weights.
    pub(crate) fn combine(data_bytes: usize, ranks: usize, hidden: usize, topk: usize) -> Self {
        Self::new(data_bytes, ranks, 2 * hidden + 4 * topk)
    }
}

/// Staging bytes (`num_nvl_bytes`) for dispatching up to `max_tokens` tokens per rank of
/// `hidden` channels (BF16, or FP8 with a scale per 128 channels) with `topk` experts over
/// `ranks` ranks, and combining them back.
pub fn nvl_bytes_hint(max_tokens: usize, hidden: usize, topk: usize, ranks: usize) -> usize {
    let bf16 = Staging::dispatch(0, ranks, 2 * hidden, 0, topk).slot_bytes;
    let fp8 = Staging::dispatch(0, ranks, hidden, hidden.div_ceil(128), topk).slot_bytes;
    let combine = Staging::combine(0, ranks, hidden, topk).slot_bytes;
    ranks * max_tokens * bf16.max(fp8).max(combine)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_aligned_disjoint_and_in_order() {
        let l = BufferLayout::new(1 << 20);
        let starts = [
            l.barrier,
            l.expected,
            l.rank_counts,
            l.expert_counts,
            l.channel_info,
            l.dispatch_tail,
            l.combine_tail,
            l.data_offset,
        ];
        assert!(starts.iter().all(|s| s % ALIGN == 0));
        assert!(starts.windows(2).all(|w| w[0] < w[1]));
        assert!(l.dispatch_tail - l.channel_info >= MAX_RANKS * MAX_CHANNELS * 8);
        assert_eq!(l.total_bytes(), l.data_offset + (1 << 20));
    }

    #[test]
    fn the_hint_fits_the_largest_dispatch_of_every_payload() {
        let (tokens, hidden, topk, ranks) = (4096, 7168, 8, 2);
        let bytes = nvl_bytes_hint(tokens, hidden, topk, ranks);
        assert!(Staging::dispatch(bytes, ranks, 2 * hidden, 0, topk).capacity >= tokens);
        assert!(Staging::dispatch(bytes, ranks, hidden, hidden / 128, topk).capacity >= tokens);
        assert!(Staging::combine(bytes, ranks, hidden, topk).capacity >= tokens);
        let s = Staging::dispatch(bytes, ranks, 2 * hidden, 0, topk);
        assert_eq!(s.slot_bytes, (2 * 7168 + 64 + 4usize).next_multiple_of(16));
        assert!(ranks * s.region_bytes <= bytes);
    }
}
