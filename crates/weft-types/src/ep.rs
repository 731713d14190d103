//! What the expert-parallel kernels of `weft-ep` receive by value: the rank's EP buffer and its
//! peers' (as this GPU maps them) with the offsets of their regions, and the arguments of each
//! kernel. Offsets and sizes are computed once on the host (`weft-ep`'s buffer layout), so the
//! device code holds no layout of its own.

use crate::{DevCommHandle, WaitContext};

device_structs! {
    /// One rank's EP buffers: every rank's buffer as this GPU addresses it, and where each region
    /// lies in a buffer (the same offsets on every rank). Every EP kernel takes it first.
    struct EpContext align(8) size(176) {
        /// Rank r's EP buffer (entry `rank`: this rank's own), 0 past `ranks`.
        peers: [u64; 8] => "uint64_t[8]",
        /// Error record and spin bound of every wait (`peer` is set per wait).
        wait: WaitContext => "WaitContext",
        /// `uint64_t[8]`: barrier tokens, entry s raised by rank s.
        barrier_offset: u64 => "uint64_t",
        /// `uint64_t[8]`: barrier tokens already consumed, per rank (this rank's own state).
        expected_offset: u64 => "uint64_t",
        /// `int32_t[8][8]`: row s is rank s's tokens per destination rank.
        rank_counts_offset: u64 => "uint64_t",
        /// `int32_t[8][max_local_experts]`: row s is rank s's tokens per local expert of this rank.
        expert_counts_offset: u64 => "uint64_t",
        /// `uint64_t[8][max_channels]`: dispatch channel words, row s written by rank s.
        channel_info_offset: u64 => "uint64_t",
        /// `uint64_t[8][max_channels]`: dispatch tails (tokens written), row s written by rank s.
        dispatch_tail_offset: u64 => "uint64_t",
        /// `uint64_t[8][max_channels]`: combine tails (rows written), row r written by rank r.
        combine_tail_offset: u64 => "uint64_t",
        /// Start of the staging area tokens are written into.
        data_offset: u64 => "uint64_t",
        /// Bytes of the staging area.
        data_bytes: u64 => "uint64_t",
        /// This rank.
        rank: u32 => "uint32_t",
        /// Ranks of the expert-parallel group (at most 8).
        ranks: u32 => "uint32_t",
        /// Channels the metadata rows hold.
        max_channels: u32 => "uint32_t",
        /// Local experts the expert count rows hold.
        max_local_experts: u32 => "uint32_t",
    }

    /// `weft_ep_layout`: the layout of one rank's routing.
    struct EpLayoutArgs align(8) size(48) {
        /// `int64_t[tokens][topk]` expert indices; negative: no expert.
        topk_idx: u64 => "uint64_t",
        /// Out: `int32_t[ranks]`.
        num_tokens_per_rank: u64 => "uint64_t",
        /// Out: `int32_t[experts]`.
        num_tokens_per_expert: u64 => "uint64_t",
        /// Out: `bool[tokens][ranks]`.
        is_token_in_rank: u64 => "uint64_t",
        /// Tokens of this rank.
        tokens: u32 => "uint32_t",
        /// Top-k entries per token.
        topk: u32 => "uint32_t",
        /// Experts, split evenly over the ranks.
        experts: u32 => "uint32_t",
        /// Ranks.
        ranks: u32 => "uint32_t",
    }

    /// `weft_ep_notify`: exchanges the counts of a dispatch and computes its prefix matrices.
    struct EpNotifyArgs align(8) size(64) {
        /// `int32_t[ranks]` from the layout.
        num_tokens_per_rank: u64 => "uint64_t",
        /// `int32_t[experts]` from the layout.
        num_tokens_per_expert: u64 => "uint64_t",
        /// `bool[tokens][ranks]` from the layout.
        is_token_in_rank: u64 => "uint64_t",
        /// Out: `int32_t[ranks][ranks]`, inclusive prefix over source ranks.
        rank_prefix_matrix: u64 => "uint64_t",
        /// Out: `int32_t[ranks][channels]`, inclusive prefix over this rank's channels.
        channel_prefix_matrix: u64 => "uint64_t",
        /// Out: `int32_t[1 + experts / ranks]`: rows received, then rows per local expert (rounded).
        recv_counts: u64 => "uint64_t",
        /// Tokens of this rank.
        tokens: u32 => "uint32_t",
        /// Experts.
        experts: u32 => "uint32_t",
        /// Channels of the dispatch.
        channels: u32 => "uint32_t",
        /// Rounding of the per-expert counts.
        expert_alignment: u32 => "uint32_t",
    }

    /// Where the rows a kernel reads arrive over the rail hop, chunk by chunk (docs/ep.md,
    /// "Overlapping the rail hop"): the rows `[from[s], from[s] + rows[s])` of its input come
    /// from rail peer `peers[s]` in `chunks[s]` chunks, chunk k being rows
    /// `rows[s] * k / chunks[s]` to `rows[s] * (k + 1) / chunks[s]` of them, each covered once
    /// that peer's signal word `words[s]` reaches `base[s] + puts * (k + 1)`. A zero word: those
    /// rows are already here (this node's own); `nodes` zero: every row is.
    struct EpRailArrival align(8) size(288) {
        /// Per source node s: the word counting rail peer s's increments of the phase's signal (ld.acquire.sys), or 0.
        words: [u64; 8] => "uint64_t[8]",
        /// Per source node s: the count its word had reached before this call.
        base: [u64; 8] => "uint64_t[8]",
        /// Error record and spin bound of the waits (`peer` is set per wait).
        wait: WaitContext => "WaitContext",
        /// Per source node s: its first row in the reader's input.
        from: [u32; 8] => "uint32_t[8]",
        /// Per source node s: its rows.
        rows: [u32; 8] => "uint32_t[8]",
        /// Per source node s: the chunks its rows come in (at least 1 where it has a word).
        chunks: [u32; 8] => "uint32_t[8]",
        /// Per source node s: the rank sending them (its rail peer), named by a wait that gives up.
        peers: [u32; 8] => "uint32_t[8]",
        /// Increments of the signal each chunk brings (its field arrays' puts).
        puts: u32 => "uint32_t",
        /// Nodes described (0: nothing to wait for).
        nodes: u32 => "uint32_t",
    }

    /// `weft_ep_dispatch`: one normal-mode dispatch. The payload is opaque bytes (BF16 or FP8),
    /// with `num_scales` f32 scales per token when FP8.
    struct EpDispatchArgs align(8) size(456) {
        /// `[tokens][hidden_bytes]` payload rows.
        x: u64 => "uint64_t",
        /// f32 scales of `x`, element (t, i) at `t * scale_token_stride + i * scale_hidden_stride`; 0: none.
        x_scales: u64 => "uint64_t",
        /// `int64_t[tokens][topk]` global expert indices, or 0.
        topk_idx: u64 => "uint64_t",
        /// `float[tokens][topk]`, or 0.
        topk_weights: u64 => "uint64_t",
        /// `bool[tokens][ranks]`.
        is_token_in_rank: u64 => "uint64_t",
        /// `int32_t[ranks][ranks]` from notify (or the handle).
        rank_prefix_matrix: u64 => "uint64_t",
        /// `int32_t[ranks][channels]` from notify (or the handle).
        channel_prefix_matrix: u64 => "uint64_t",
        /// Out: `[received][hidden_bytes]`.
        recv_x: u64 => "uint64_t",
        /// Out: f32 scales at `row * recv_scale_token_stride + i * recv_scale_hidden_stride`; 0: none.
        recv_x_scales: u64 => "uint64_t",
        /// Out: `int64_t[received][topk]` local expert indices or -1; 0: none.
        recv_topk_idx: u64 => "uint64_t",
        /// Out: `float[received][topk]`; 0: none.
        recv_topk_weights: u64 => "uint64_t",
        /// Out: `int32_t[received]` source token indices.
        recv_src_idx: u64 => "uint64_t",
        /// Out: `int32_t[ranks][channels]` first received row of each (source, channel).
        recv_channel_prefix_matrix: u64 => "uint64_t",
        /// Out: `int32_t[tokens][ranks]` position among the tokens sent to a rank, or -1.
        send_head: u64 => "uint64_t",
        /// Bytes of one staged token (16-byte multiple).
        slot_bytes: u64 => "uint64_t",
        /// Bytes of one source rank's staging region.
        region_bytes: u64 => "uint64_t",
        /// Tokens of this rank.
        tokens: u32 => "uint32_t",
        /// Payload bytes per token (16-byte multiple).
        hidden_bytes: u32 => "uint32_t",
        /// Scales per token (0 for BF16).
        num_scales: u32 => "uint32_t",
        /// Input scale strides, in elements.
        scale_token_stride: u32 => "uint32_t",
        /// See `scale_token_stride`.
        scale_hidden_stride: u32 => "uint32_t",
        /// Output scale strides, in elements.
        recv_scale_token_stride: u32 => "uint32_t",
        /// See `recv_scale_token_stride`.
        recv_scale_hidden_stride: u32 => "uint32_t",
        /// Top-k entries per token (0: no top-k arrays).
        topk: u32 => "uint32_t",
        /// Experts.
        experts: u32 => "uint32_t",
        /// Channels (half the grid).
        channels: u32 => "uint32_t",
        /// Where the input rows arrive over the rail hop (the NVL hop of a dispatch between nodes; `nodes` zero: every row is here).
        rail: EpRailArrival => "EpRailArrival",
    }

    /// `weft_ep_combine`: one normal-mode combine over a dispatch's handle.
    struct EpCombineArgs align(8) size(112) {
        /// `bf16[received][hidden]` rows in dispatch receive order.
        x: u64 => "uint64_t",
        /// `float[received][topk]`, or 0.
        topk_weights: u64 => "uint64_t",
        /// Handle: `int32_t[ranks][ranks]`.
        rank_prefix_matrix: u64 => "uint64_t",
        /// Handle: `int32_t[ranks][channels]` (this rank as sender).
        channel_prefix_matrix: u64 => "uint64_t",
        /// Handle: `int32_t[ranks][channels]` (this rank as receiver).
        recv_channel_prefix_matrix: u64 => "uint64_t",
        /// Handle: `int32_t[tokens][ranks]`.
        send_head: u64 => "uint64_t",
        /// `bf16[tokens][hidden]` bias, or 0.
        bias0: u64 => "uint64_t",
        /// A second bias, or 0.
        bias1: u64 => "uint64_t",
        /// Out: `bf16[tokens][hidden]`.
        combined_x: u64 => "uint64_t",
        /// Out: `float[tokens][topk]`, or 0.
        combined_topk_weights: u64 => "uint64_t",
        /// Bytes of one staged row (16-byte multiple).
        slot_bytes: u64 => "uint64_t",
        /// Bytes of one sending rank's staging region.
        region_bytes: u64 => "uint64_t",
        /// Tokens of this rank.
        tokens: u32 => "uint32_t",
        /// BF16 elements per row (a multiple of 8).
        hidden: u32 => "uint32_t",
        /// Top-k entries per token (0: no weights).
        topk: u32 => "uint32_t",
        /// Channels (half the grid).
        channels: u32 => "uint32_t",
    }

    /// `weft_ep_ll_dispatch_send` / `_recv`: one low-latency dispatch. Every (token, expert)
    /// pair is a message (16-byte header holding the token index, then the payload, then the
    /// FP8 scales) in slot `[local expert][source rank][i]` of the destination's region.
    struct EpLlDispatchArgs align(8) size(136) {
        /// `bf16[tokens][hidden]`.
        x: u64 => "uint64_t",
        /// `int64_t[tokens][topk]`; negative: no expert.
        topk_idx: u64 => "uint64_t",
        /// Out: `[local experts][ranks * max_tokens][hidden]` E4M3 bytes or BF16.
        recv_x: u64 => "uint64_t",
        /// Out (FP8): `float[local experts][hidden / 128][ranks * max_tokens]` (column-major per expert).
        recv_x_scales: u64 => "uint64_t",
        /// Out: `int32_t[local experts]` rows received.
        recv_count: u64 => "uint64_t",
        /// Out: `int32_t[local experts][ranks * max_tokens]` source token of each row.
        recv_src_info: u64 => "uint64_t",
        /// Out: `int64_t[local experts][ranks]`, `first row << 32 | rows` per source rank.
        recv_layout_range: u64 => "uint64_t",
        /// In/out: `int32_t[local experts]` rows received so far, or 0.
        cumulative_recv_stats: u64 => "uint64_t",
        /// `uint64_t[8]` phase sequences and block counters, then `uint32_t[1024]` send totals.
        state_offset: u64 => "uint64_t",
        /// Two halves of `uint64_t[experts]` count words (`sequence + 1 << 32 | rows`).
        signal_offset: u64 => "uint64_t",
        /// Two halves of message slots.
        data_offset: u64 => "uint64_t",
        /// Bytes of one half.
        data_half_bytes: u64 => "uint64_t",
        /// Bytes of one message (16-byte multiple).
        message_bytes: u64 => "uint64_t",
        /// Tokens of this rank (at most `max_tokens`).
        tokens: u32 => "uint32_t",
        /// Channels per token (a multiple of 128).
        hidden: u32 => "uint32_t",
        /// Top-k slots per token.
        topk: u32 => "uint32_t",
        /// Experts.
        experts: u32 => "uint32_t",
        /// `num_max_dispatch_tokens_per_rank`.
        max_tokens: u32 => "uint32_t",
        /// Nonzero: cast to FP8 with a scale per 128 channels.
        fp8: u32 => "uint32_t",
        /// Nonzero: power-of-two scales.
        round_scale: u32 => "uint32_t",
        /// Zero.
        reserved: u32 => "uint32_t",
    }

    /// `weft_ep_ll_combine_send` / `_recv`: one low-latency combine over a dispatch's handle.
    /// Row `(token t, global expert g)` goes to slot `[g][t]` of the token's rank.
    struct EpLlCombineArgs align(8) size(104) {
        /// `bf16[local experts][ranks * max_tokens][hidden]` in the dispatch's packed order.
        x: u64 => "uint64_t",
        /// `int64_t[tokens][topk]` of this rank's tokens.
        topk_idx: u64 => "uint64_t",
        /// `float[tokens][topk]`.
        topk_weights: u64 => "uint64_t",
        /// Handle: `int32_t[local experts][ranks * max_tokens]`.
        src_info: u64 => "uint64_t",
        /// Handle: `int64_t[local experts][ranks]`.
        layout_range: u64 => "uint64_t",
        /// Out: `bf16[tokens][hidden]`.
        combined_x: u64 => "uint64_t",
        /// `uint64_t[8]` phase sequences and block counters in this rank's buffer.
        state_offset: u64 => "uint64_t",
        /// Two halves of `uint64_t[experts]` flags (`sequence + 1`).
        signal_offset: u64 => "uint64_t",
        /// Two halves of `[experts][max_tokens]` BF16 rows.
        data_offset: u64 => "uint64_t",
        /// Bytes of one half.
        data_half_bytes: u64 => "uint64_t",
        /// Tokens of this rank.
        tokens: u32 => "uint32_t",
        /// Channels per row (a multiple of 8).
        hidden: u32 => "uint32_t",
        /// Top-k slots per token.
        topk: u32 => "uint32_t",
        /// Experts.
        experts: u32 => "uint32_t",
        /// `num_max_dispatch_tokens_per_rank`.
        max_tokens: u32 => "uint32_t",
        /// Zero.
        reserved: u32 => "uint32_t",
    }

    /// The rail hop of a normal-mode call between nodes (`weft_ep_rail_*`; docs/ep.md,
    /// "Normal mode between nodes"): rank `(node, local)` sends each token once to rank
    /// `(d, local)` of every node `d` holding one of its experts, which forwards it over NVLink.
    /// Offsets are into this rank's EP buffer (window 0 of `gin`, the same on every rank); rows
    /// of a region lie as `weft-ep`'s `RailRegions` says.
    struct EpRailArgs align(8) size(696) {
        /// This rank's EP buffer (window 0 of the device communicator) as this GPU maps it.
        base: u64 => "uint64_t",
        /// `bool[tokens][ranks]` (the layout's).
        is_token_in_rank: u64 => "uint64_t",
        /// Out of `weft_ep_rail_layout`: `int32_t[nodes + ranks + experts]`, this rank's tokens per node, then copies of `num_tokens_per_rank` and `num_tokens_per_expert`.
        counts: u64 => "uint64_t",
        /// `int32_t[ranks]` (the layout's).
        num_tokens_per_rank: u64 => "uint64_t",
        /// `int32_t[experts]` (the layout's).
        num_tokens_per_expert: u64 => "uint64_t",
        /// `int32_t[tokens][nodes]`: a token's position among the tokens sent to a node, or -1.
        rail_send_head: u64 => "uint64_t",
        /// `int32_t[nodes][tokens]`: the token of each row sent to a node (written with `rail_send_head`).
        rail_row_token: u64 => "uint64_t",
        /// `uint64_t[progress_warps]`: pack warp g stores `progress_epoch << 32 | next` once every token of its share below `next` is packed (`| 0xffffffff` when done); 0: the exchange runs after the pack.
        progress: u64 => "uint64_t",
        /// `[tokens][hidden_bytes]` rows to send.
        x: u64 => "uint64_t",
        /// f32 scales at `t * scale_token_stride + i * scale_hidden_stride`; 0: none.
        x_scales: u64 => "uint64_t",
        /// `int64_t[tokens][topk]` global experts; 0 (with `topk` 0): a cached dispatch.
        topk_idx: u64 => "uint64_t",
        /// `float[tokens][topk]`; 0: none.
        topk_weights: u64 => "uint64_t",
        /// `bf16[tokens][hidden]` biases of the combine; 0: none.
        bias0: u64 => "uint64_t",
        /// See `bias0`.
        bias1: u64 => "uint64_t",
        /// Out of `weft_ep_rail_sum`: `bf16[tokens][hidden]`.
        combined_x: u64 => "uint64_t",
        /// Out of `weft_ep_rail_sum`: `float[tokens][topk]`; 0: none.
        combined_topk_weights: u64 => "uint64_t",
        /// Where the rows the call receives arrive: the dispatch's forwarded rows, or the combine's partials from other nodes (rows `[0, sent[d])` of node d's block).
        arrival: EpRailArrival => "EpRailArrival",
        /// Offsets of the forwarder's received rows: payload, scales, top-k indices, weights, source index.
        recv_x: u32 => "uint32_t",
        /// See `recv_x`.
        recv_scales: u32 => "uint32_t",
        /// See `recv_x`.
        recv_topk_idx: u32 => "uint32_t",
        /// See `recv_x`.
        recv_topk_weights: u32 => "uint32_t",
        /// See `recv_x`.
        recv_src_idx: u32 => "uint32_t",
        /// Offsets of the source's rows for other nodes, node d's from row `d * capacity`.
        send_x: u32 => "uint32_t",
        /// See `send_x`.
        send_scales: u32 => "uint32_t",
        /// See `send_x`.
        send_topk_idx: u32 => "uint32_t",
        /// See `send_x`.
        send_topk_weights: u32 => "uint32_t",
        /// See `send_x`.
        send_src_idx: u32 => "uint32_t",
        /// Offset of the forwarder's partials (BF16 rows), one per received row.
        part_x: u32 => "uint32_t",
        /// Offset of the forwarder's partial weights (f32, `topk` per row).
        part_topk_weights: u32 => "uint32_t",
        /// Offset of the source's partials from other nodes, node d's from row `d * capacity`.
        part_recv_x: u32 => "uint32_t",
        /// See `part_recv_x`, for the weights.
        part_recv_topk_weights: u32 => "uint32_t",
        /// Per node d: the row where this rank's rows start at d's forwarder.
        before: [u32; 8] => "uint32_t[8]",
        /// Per node d: the rows this rank sends to d.
        sent: [u32; 8] => "uint32_t[8]",
        /// Per source node s: the forwarder's first row from s.
        from: [u32; 8] => "uint32_t[8]",
        /// Per source node s: the forwarder's rows from s.
        received: [u32; 8] => "uint32_t[8]",
        /// Per node d: the chunks this rank's puts to d come in (each field array's rows split alike, one put per field and chunk).
        chunks: [u32; 8] => "uint32_t[8]",
        /// Rows of one node in a send or partial-receive region.
        capacity: u32 => "uint32_t",
        /// Tokens of this rank.
        tokens: u32 => "uint32_t",
        /// Payload bytes per row (16-byte multiple).
        hidden_bytes: u32 => "uint32_t",
        /// Scales per row (0 for BF16).
        num_scales: u32 => "uint32_t",
        /// Input scale strides, in elements.
        scale_token_stride: u32 => "uint32_t",
        /// See `scale_token_stride`.
        scale_hidden_stride: u32 => "uint32_t",
        /// Top-k slots per row (0: none sent).
        topk: u32 => "uint32_t",
        /// Experts of the group.
        experts: u32 => "uint32_t",
        /// Channels per row of the combine (a multiple of 8).
        hidden: u32 => "uint32_t",
        /// Nodes of the group.
        nodes: u32 => "uint32_t",
        /// This rank's node.
        node: u32 => "uint32_t",
        /// Ranks per node.
        ranks_per_node: u32 => "uint32_t",
        /// This rank's index in its node (its rail).
        local: u32 => "uint32_t",
        /// Ranks of the group.
        ranks: u32 => "uint32_t",
        /// The call's epoch in `progress` (new for every call).
        progress_epoch: u32 => "uint32_t",
        /// Warps of the pack (its grid times 16): the words of `progress`.
        progress_warps: u32 => "uint32_t",
    }

    /// The low-latency kernels' path to the ranks of other nodes (docs/ep.md, "Low latency
    /// between nodes"): the GIN device communicator whose window 0 is the EP buffer, and the
    /// regions only that path uses (`weft-ep`'s `LlNetRegions`). On one node `gin` is zero
    /// (no proxy peer) and the offsets are unused.
    struct EpLlNet align(8) size(176) {
        /// Its `proxy_mask` names the ranks reached through puts; the rest are stored to.
        gin: DevCommHandle => "DevCommHandle",
        /// Two halves of `[expert][max_tokens]` messages to experts of other nodes.
        dispatch_send_offset: u64 => "uint64_t",
        /// Two halves of `[local expert][ranks * max_tokens]` rows to tokens of other nodes.
        combine_send_offset: u64 => "uint64_t",
        /// Two halves of `uint64_t[ranks][local experts]` counts from ranks of other nodes.
        counts_in_offset: u64 => "uint64_t",
        /// Two halves of `uint64_t[ranks][local experts]` counts for ranks of other nodes.
        counts_out_offset: u64 => "uint64_t",
    }
}
