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
/// Most experts of a low-latency call (the signal tables' rows).
pub const LL_MAX_EXPERTS: usize = 1024;
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
    /// `uint64_t[8]`: low-latency phase sequences and block counters, then `uint32_t[LL_MAX_EXPERTS]`:
    /// the dispatch send's per-expert totals, left by one block for the launch's last one.
    pub(crate) ll_state: usize,
    /// `uint64_t[4][LL_MAX_EXPERTS]`: low-latency dispatch counts (two halves), then combine
    /// flags (two halves).
    pub(crate) ll_signals: usize,
    /// Start of the staging area.
    pub(crate) data_offset: usize,
    /// Bytes of the staging area.
    pub(crate) data_bytes: usize,
    /// Start of the low-latency area (after the staging area).
    pub(crate) ll_offset: usize,
    /// Bytes of the low-latency area (DeepEP's `num_rdma_bytes`).
    pub(crate) ll_bytes: usize,
}

impl BufferLayout {
    /// The layout of a buffer with `data_bytes` of staging (DeepEP's `num_nvl_bytes`) and
    /// `ll_bytes` for the low-latency mode (DeepEP's `num_rdma_bytes`).
    pub(crate) fn new(data_bytes: usize, ll_bytes: usize) -> Self {
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
            ll_state: region(8 * 8 + 4 * LL_MAX_EXPERTS),
            ll_signals: region(4 * LL_MAX_EXPERTS * 8),
            data_offset: region(data_bytes),
            data_bytes,
            ll_offset: region(ll_bytes),
            ll_bytes,
        }
    }

    /// Bytes of the whole buffer.
    pub(crate) fn total_bytes(&self) -> usize {
        self.ll_offset + self.ll_bytes
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

/// How a low-latency call reaches its peers: every one mapped (one node), or some through the
/// network (the communicator spans nodes: `weft::Gin` puts to the ranks of other nodes, which
/// need send regions in this rank's own buffer and count rows that travel with the puts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LlPath {
    Node,
    Net,
}

/// Where a low-latency call's regions lie for one `(max_tokens, hidden, experts)`, in the
/// buffer's low-latency area, each with two halves (a call uses the half of its phase's
/// sequence): dispatch messages `[source rank][local expert][max_tokens]` (a source of another
/// node's block packed by expert from its start), combine rows `[expert][max_tokens]` (the
/// rows of one rank's experts from another node packed from the first expert's start), and
/// with [`LlPath::Net`] the dispatch send messages and combine send rows, a block per
/// destination rank of the receive block's size, packed by the destination's experts, and the
/// count rows in `[source rank][local expert]` and out `[destination rank][local expert]`
/// (`u64`, `sequence + 1 << 32 | messages`).
/// docs/ep.md, "Low latency between nodes", describes who writes what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LlRegions {
    /// Bytes of one dispatch message slot: header, payload (BF16, or FP8 and its scales).
    pub(crate) message_bytes: usize,
    pub(crate) dispatch_offset: usize,
    pub(crate) dispatch_half_bytes: usize,
    pub(crate) combine_offset: usize,
    pub(crate) combine_half_bytes: usize,
    /// The network path's regions (`None` on one node).
    pub(crate) net: Option<LlNetRegions>,
    /// Bytes all of them use together.
    pub(crate) bytes: usize,
}

/// The regions only the network path uses (see [`LlRegions`]); the halves of each follow one
/// another, like the receive regions'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LlNetRegions {
    pub(crate) dispatch_send_offset: usize,
    pub(crate) combine_send_offset: usize,
    /// `u64[2][experts]`: per half, `[source rank][local expert]`.
    pub(crate) counts_in_offset: usize,
    /// `u64[2][experts]`: per half, `[destination rank][local expert]`.
    pub(crate) counts_out_offset: usize,
}

impl LlRegions {
    pub(crate) fn new(ll_offset: usize, max_tokens: usize, hidden: usize, experts: usize, path: LlPath) -> Self {
        let message_bytes = ll_message_bytes(hidden, false).max(ll_message_bytes(hidden, true));
        let dispatch_half_bytes = experts * max_tokens * message_bytes;
        let combine_half_bytes = experts * max_tokens * 2 * hidden;
        let combine_offset = ll_offset + 2 * dispatch_half_bytes;
        let mut end = combine_offset + 2 * combine_half_bytes;
        let net = (path == LlPath::Net).then(|| {
            // The send regions have the receive regions' sizes: a block of `local experts *
            // max_tokens` messages (rows) per destination rank.
            let dispatch_send_offset = end;
            let combine_send_offset = dispatch_send_offset + 2 * dispatch_half_bytes;
            let counts_in_offset = combine_send_offset + 2 * combine_half_bytes;
            let counts_out_offset = counts_in_offset + 2 * experts * 8;
            end = counts_out_offset + 2 * experts * 8;
            LlNetRegions { dispatch_send_offset, combine_send_offset, counts_in_offset, counts_out_offset }
        });
        Self {
            message_bytes,
            dispatch_offset: ll_offset,
            dispatch_half_bytes,
            combine_offset,
            combine_half_bytes,
            net,
            bytes: end - ll_offset,
        }
    }
}

/// Bytes of one low-latency dispatch message of a call: the header and the payload it carries
/// (FP8 and its scales, or BF16), rounded to 16. On the network path messages lie at this
/// stride, so a put of a run of messages moves no slot padding; a slot of the receive region
/// holds the larger of the two.
pub fn ll_message_bytes(hidden: usize, fp8: bool) -> usize {
    let payload = if fp8 { hidden + 4 * hidden.div_ceil(128) } else { 2 * hidden };
    (16 + payload).next_multiple_of(16)
}

/// DeepEP's `get_low_latency_rdma_size_hint`: the low-latency bytes (`num_rdma_bytes`) for
/// `num_max_dispatch_tokens_per_rank` tokens of `hidden` channels over `num_experts` experts
/// on one node (`num_ranks` does not change it: every expert has its slots on its own rank).
/// A group spanning nodes needs [`low_latency_net_bytes_hint`].
pub fn low_latency_rdma_size_hint(
    num_max_dispatch_tokens_per_rank: usize,
    hidden: usize,
    _num_ranks: usize,
    num_experts: usize,
) -> usize {
    LlRegions::new(0, num_max_dispatch_tokens_per_rank, hidden, num_experts, LlPath::Node).bytes
}

/// The low-latency bytes (`num_rdma_bytes`) a group spanning nodes needs for the same calls:
/// [`low_latency_rdma_size_hint`]'s, plus the send regions and count rows of the network path
/// (about twice as much: 3.76 GB for 128 tokens of 7168 channels over 256 experts).
pub fn low_latency_net_bytes_hint(num_max_dispatch_tokens_per_rank: usize, hidden: usize, num_experts: usize) -> usize {
    LlRegions::new(0, num_max_dispatch_tokens_per_rank, hidden, num_experts, LlPath::Net).bytes
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

/// Field arrays of the rail hop's token rows (see [`RailRegions`]): row `r` of a call with
/// `hidden_bytes` of payload, `num_scales` scales and `topk` slots lies at `x + r ·
/// hidden_bytes`, `scales + 4 r · num_scales`, `topk_idx + 8 r · topk` (int64, the
/// destination node's expert indices), `topk_weights + 4 r · topk`, `src_idx + 4 r`: as the
/// NVL hop's dispatch reads its `x`, `x_scales`, `topk_idx`, `topk_weights`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RailRows {
    pub(crate) x: usize,
    pub(crate) scales: usize,
    pub(crate) topk_idx: usize,
    pub(crate) topk_weights: usize,
    pub(crate) src_idx: usize,
}

/// Field arrays of the combine's partial rows: row `r` at `x + 2 r · hidden` (BF16) and
/// `topk_weights + 4 r · topk` (f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RailPartials {
    pub(crate) x: usize,
    pub(crate) topk_weights: usize,
}

/// The rail hop of a normal-mode call between nodes (docs/ep.md, "Normal mode between
/// nodes"), in the buffer's rail area (the normal mode's `num_rdma_bytes`), for `nodes` nodes,
/// `hidden` channels and `topk` slots: every region holds `nodes · capacity` rows, `capacity`
/// being the most tokens a rank may dispatch (every rank computes the same layout from the
/// same sizes, so a put lands where its receiver reads).
///
/// - `dispatch_recv` (a forwarder's): the rows of its rail's sources, by source node, then
///   token; node `s`'s start at row `rail_prefix_matrix[s - 1][this node]`. They are the NVL
///   hop's dispatch inputs where they lie.
/// - `dispatch_send` (a source's): the rows for node `d` packed from row `d · capacity`, one
///   put each (the own node's rows go straight into `dispatch_recv`).
/// - `combine_send` (a forwarder's): the NVL hop's combine output, one partial per received
///   row in `dispatch_recv`'s order, so source node `s`'s partials are one put.
/// - `combine_recv` (a source's): node `d`'s partials from row `d · capacity`, by the
///   token's position among the tokens sent to `d` (`rail_send_head`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RailRegions {
    /// Tokens of one rank a region holds per node.
    pub(crate) capacity: usize,
    pub(crate) dispatch_recv: RailRows,
    pub(crate) dispatch_send: RailRows,
    pub(crate) combine_send: RailPartials,
    pub(crate) combine_recv: RailPartials,
    /// End of the last region.
    pub(crate) end: usize,
}

impl RailRegions {
    /// Field arrays of all regions, each starting 16-byte aligned.
    const ARRAYS: usize = 14;

    /// Bytes of one row's dispatch fields (room for BF16 and for FP8 with its scales) and of
    /// one partial.
    fn row_bytes(hidden: usize, topk: usize) -> (usize, usize) {
        (2 * hidden + 4 * hidden.div_ceil(128) + 12 * topk + 4, 2 * hidden + 4 * topk)
    }

    /// The regions in `bytes` from `offset` (16-byte aligned).
    pub(crate) fn new(offset: usize, bytes: usize, hidden: usize, topk: usize, nodes: usize) -> Self {
        let (row, partial) = Self::row_bytes(hidden, topk);
        let capacity = bytes.saturating_sub(Self::ARRAYS * 16) / (2 * row + 2 * partial) / nodes.max(1);
        let rows = nodes * capacity;
        let mut at = offset;
        let mut array = |per_row: usize| {
            let start = at;
            at = (at + rows * per_row).next_multiple_of(16);
            start
        };
        let mut token_rows = || RailRows {
            x: array(2 * hidden),
            scales: array(4 * hidden.div_ceil(128)),
            topk_idx: array(8 * topk),
            topk_weights: array(4 * topk),
            src_idx: array(4),
        };
        let (dispatch_recv, dispatch_send) = (token_rows(), token_rows());
        let mut partials = || RailPartials { x: array(2 * hidden), topk_weights: array(4 * topk) };
        let (combine_send, combine_recv) = (partials(), partials());
        Self { capacity, dispatch_recv, dispatch_send, combine_send, combine_recv, end: at }
    }
}

/// The normal mode's `num_rdma_bytes` (DeepEP's `get_rdma_buffer_size_hint`) for up to
/// `max_tokens` tokens per rank of `hidden` channels (BF16, or FP8 with a scale per 128
/// channels) with `topk` slots over `ranks` ranks in nodes of `ranks_per_node`: the rail
/// hop's regions ([`RailRegions`]); 0 on one node, where nothing crosses a network. DeepEP
/// sizes ring buffers of chunks per channel; weft stages whole dispatches, so the size follows
/// the tokens.
pub fn rdma_bytes_hint(max_tokens: usize, hidden: usize, topk: usize, ranks: usize, ranks_per_node: usize) -> usize {
    if ranks_per_node == 0 || ranks_per_node >= ranks {
        return 0;
    }
    let nodes = ranks.div_ceil(ranks_per_node);
    let (row, partial) = RailRegions::row_bytes(hidden, topk);
    nodes * max_tokens * (2 * row + 2 * partial) + RailRegions::ARRAYS * 16
}

/// The normal mode's `num_nvl_bytes` between nodes: a forwarder passes on up to `nodes ·
/// max_tokens` rows (its rail's sources' tokens) to the `ranks_per_node` ranks of its node,
/// so it is [`nvl_bytes_hint`] of that many tokens over the node's ranks.
pub fn nvl_bytes_hint_between_nodes(
    max_tokens: usize,
    hidden: usize,
    topk: usize,
    ranks: usize,
    ranks_per_node: usize,
) -> usize {
    let k = ranks_per_node.clamp(1, ranks.max(1));
    nvl_bytes_hint(ranks.div_ceil(k) * max_tokens, hidden, topk, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_aligned_disjoint_and_in_order() {
        let l = BufferLayout::new(1 << 20, 4096);
        let starts = [
            l.barrier,
            l.expected,
            l.rank_counts,
            l.expert_counts,
            l.channel_info,
            l.dispatch_tail,
            l.combine_tail,
            l.ll_state,
            l.ll_signals,
            l.data_offset,
            l.ll_offset,
        ];
        assert!(starts.iter().all(|s| s % ALIGN == 0));
        assert!(starts.windows(2).all(|w| w[0] < w[1]));
        assert!(l.dispatch_tail - l.channel_info >= MAX_RANKS * MAX_CHANNELS * 8);
        assert_eq!(l.total_bytes(), l.ll_offset + 4096);
        assert!(l.ll_offset >= l.data_offset + (1 << 20));
    }

    #[test]
    fn low_latency_regions_match_deepeps_message_size() {
        // DeepEP: 16-byte header + max(2H, H + H/128 * 4) = 14352 bytes for H = 7168.
        let r = LlRegions::new(1000, 128, 7168, 256, LlPath::Node);
        assert_eq!(r.message_bytes, 14352);
        assert_eq!(r.combine_offset, 1000 + 2 * 256 * 128 * 14352);
        assert_eq!(r.net, None);
        assert_eq!(low_latency_rdma_size_hint(128, 7168, 8, 256), 2 * 256 * 128 * (14352 + 14336));
        assert_eq!(low_latency_rdma_size_hint(128, 7168, 8, 256), 1_880_096_768);
    }

    /// DeepEP's hint, as `csrc/config.hpp` (`LowLatencyLayout`) computes it: two buffers of
    /// send, receive and signal regions.
    fn deepeps_hint(tokens: usize, hidden: usize, experts: usize) -> usize {
        let dispatch = 16 + (2 * hidden).max(hidden + 4 * (hidden / 128));
        let combine = 4 * (hidden / 128) + 2 * hidden;
        let send = (tokens * dispatch).max(experts * tokens * combine);
        let receive = experts * tokens * dispatch.max(combine);
        let signals = (experts * 4).next_multiple_of(128);
        2 * (send + receive + signals)
    }

    #[test]
    fn the_hints_compare_with_deepeps_as_the_design_says() {
        // docs/ep.md, "Sizing": 1.91 GB (DeepEP), 1.88 GB (one node), 3.76 GB (between nodes).
        assert_eq!(deepeps_hint(128, 7168, 256), 1_908_410_368);
        assert_eq!(low_latency_net_bytes_hint(128, 7168, 256), 3_760_201_728);
        for (tokens, hidden, experts) in [(128, 7168, 256), (1, 128, 2), (96, 2048, 288), (4096, 512, 8)] {
            let node = low_latency_rdma_size_hint(tokens, hidden, 8, experts);
            let net = low_latency_net_bytes_hint(tokens, hidden, experts);
            // The network path adds exactly a copy of the receive regions and the count rows.
            assert_eq!(net, 2 * node + 2 * 2 * experts * 8);
            // weft's one-node area is below DeepEP's, by less than 2% at model sizes.
            let deepep = deepeps_hint(tokens, hidden, experts);
            assert!(node <= deepep, "{tokens} {hidden} {experts}: {node} vs {deepep}");
            assert!(hidden < 2048 || deepep - node <= deepep / 50, "{tokens} {hidden} {experts}: {node} vs {deepep}");
        }
    }

    #[test]
    fn network_regions_follow_the_receive_regions_without_overlap() {
        let (tokens, hidden, experts, at) = (5, 384, 12, 4096);
        let r = LlRegions::new(at, tokens, hidden, experts, LlPath::Net);
        let net = r.net.expect("the network path has send regions");
        let spans = [
            (r.dispatch_offset, 2 * r.dispatch_half_bytes),
            (r.combine_offset, 2 * r.combine_half_bytes),
            (net.dispatch_send_offset, 2 * r.dispatch_half_bytes),
            (net.combine_send_offset, 2 * r.combine_half_bytes),
            (net.counts_in_offset, 2 * experts * 8),
            (net.counts_out_offset, 2 * experts * 8),
        ];
        assert_eq!(spans[0].0, at);
        assert!(spans.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0), "{spans:?}");
        assert_eq!(at + r.bytes, spans[5].0 + spans[5].1);
        // Count words are 8-byte aligned wherever the area starts (messages and rows are
        // 16-byte multiples).
        assert!(spans.iter().all(|&(start, _)| start.is_multiple_of(16)));
        // The node path's regions are the same, and end where the send regions begin.
        let node = LlRegions::new(at, tokens, hidden, experts, LlPath::Node);
        assert_eq!((node.dispatch_offset, node.combine_offset), (r.dispatch_offset, r.combine_offset));
        assert_eq!(at + node.bytes, net.dispatch_send_offset);
    }

    #[test]
    fn a_calls_messages_fit_the_slots_and_carry_no_padding() {
        for hidden in [128, 512, 2048, 7168] {
            let slot = LlRegions::new(0, 1, hidden, 1, LlPath::Node).message_bytes;
            let fp8 = ll_message_bytes(hidden, true);
            let bf16 = ll_message_bytes(hidden, false);
            assert_eq!(bf16, slot);
            assert_eq!(fp8, (16 + hidden + 4 * (hidden / 128)).next_multiple_of(16));
            assert!(fp8 < slot && fp8.is_multiple_of(16));
        }
        assert_eq!(ll_message_bytes(7168, true), 7408);
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

    #[test]
    fn rail_regions_hold_the_hinted_tokens_in_disjoint_aligned_arrays() {
        for (tokens, hidden, topk, ranks, k) in
            [(4096, 7168, 8, 8, 4), (1, 128, 1, 2, 1), (37, 200, 3, 6, 2), (128, 7168, 8, 8, 1)]
        {
            let bytes = rdma_bytes_hint(tokens, hidden, topk, ranks, k);
            let nodes = ranks / k;
            let r = RailRegions::new(512, bytes, hidden, topk, nodes);
            assert!(r.capacity >= tokens, "{tokens} {hidden} {topk} {ranks} {k}: {}", r.capacity);
            assert!(r.end <= 512 + bytes);
            let rows = nodes * r.capacity;
            let (s, d) = (hidden.div_ceil(128), r.dispatch_recv);
            let (t, p) = (r.dispatch_send, r.combine_send);
            let q = r.combine_recv;
            let spans = [
                (d.x, 2 * hidden),
                (d.scales, 4 * s),
                (d.topk_idx, 8 * topk),
                (d.topk_weights, 4 * topk),
                (d.src_idx, 4),
                (t.x, 2 * hidden),
                (t.scales, 4 * s),
                (t.topk_idx, 8 * topk),
                (t.topk_weights, 4 * topk),
                (t.src_idx, 4),
                (p.x, 2 * hidden),
                (p.topk_weights, 4 * topk),
                (q.x, 2 * hidden),
                (q.topk_weights, 4 * topk),
            ];
            assert_eq!(spans[0].0, 512);
            assert!(spans.iter().all(|&(start, _)| start.is_multiple_of(16)));
            assert!(spans.windows(2).all(|w| w[0].0 + rows * w[0].1 <= w[1].0), "{spans:?}");
            assert!(spans[13].0 + rows * spans[13].1 <= r.end);
        }
        // One node needs no rail area; DeepEP's normal shape over 2 nodes of 4 fits 4 GiB.
        assert_eq!(rdma_bytes_hint(4096, 7168, 8, 4, 4), 0);
        let two_nodes = rdma_bytes_hint(4096, 7168, 8, 8, 4);
        assert!(two_nodes < 1 << 31, "{two_nodes}");
        assert_eq!(two_nodes, 2 * 4096 * (2 * (2 * 7168 + 4 * 56 + 12 * 8 + 4) + 2 * (2 * 7168 + 4 * 8)) + 14 * 16);
    }

    #[test]
    fn a_forwarders_staging_holds_every_rail_sources_tokens() {
        let (tokens, hidden, topk) = (100, 512, 4);
        let bytes = nvl_bytes_hint_between_nodes(tokens, hidden, topk, 8, 2);
        assert_eq!(bytes, nvl_bytes_hint(4 * tokens, hidden, topk, 2));
        assert!(Staging::dispatch(bytes, 2, 2 * hidden, 0, topk).capacity >= 4 * tokens);
        assert_eq!(nvl_bytes_hint_between_nodes(tokens, hidden, topk, 4, 4), nvl_bytes_hint(tokens, hidden, topk, 4));
    }
}
