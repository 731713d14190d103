// Low-latency combine: the send kernel writes every row the dispatch received back into its
// token's rank, slot `[global expert][token]`; for a rank d of another node, the rows go
// packed into this rank's send block for d (local expert by local expert, each expert's in
// token order, which is the tokens' message order), put after the launch's stores as one range
// into d's rows of this rank's experts, `[rank's experts][max_tokens]`, from their start: the
// row of d's token at expert g then sits at d's messages to g's earlier experts (on this rank)
// plus its message index. The receive kernel sums each token's rows weighted by its top-k
// weights in slot order (weft-ep's model::ll_combine and, between nodes,
// model::ll_combine_net). Each body is built into a one-node kernel and a `_net` one, as in
// ll_dispatch.cu.
#include "low_latency.cuh"

/// This rank's send block for rank `d` of another node, in the call's half: `local experts x
/// max_tokens` rows, the rows for d packed by local expert.
__device__ __forceinline__ char* ll_combine_send_block(const EpContext& c, const EpLlCombineArgs& a, const EpLlNet& n,
                                                       uint32_t half, uint32_t d) {
  const uint64_t block = uint64_t(a.experts / c.ranks) * a.max_tokens * 2 * a.hidden;
  return at<char>(c, c.rank, n.combine_send_offset + half * a.data_half_bytes) + d * block;
}

/// Puts the rows for rank `d` (another node) as one range, the packed prefix of the send block
/// into the rows of this rank's experts at d (a bare signal when there are none), with the
/// combine signal: `kLlCombinePuts` increment of d's signal per call. Called by: one thread per
/// such rank, after finish_phase.
__device__ void ll_put_combine(const EpContext& c, const EpLlCombineArgs& a, const EpLlNet& n, uint32_t half,
                               uint32_t d) {
  Gin gin(n.gin);
  const GinTeam world = gin_team_world(n.gin);
  const uint32_t local = a.experts / c.ranks;
  const uint64_t h = half, row_bytes = 2ull * a.hidden, block = uint64_t(local) * a.max_tokens * row_bytes;
  const int64_t* ranges = reinterpret_cast<const int64_t*>(a.layout_range);
  uint64_t count = 0;
  for (uint32_t le = 0; le < local; ++le) count += uint32_t(ranges[le * c.ranks + d]);
  const uint64_t src = n.combine_send_offset + h * a.data_half_bytes + d * block;
  const uint64_t dst = a.data_offset + h * a.data_half_bytes + c.rank * block;
  if (count == 0) {
    gin.signal(world, d, kLlCombineSignal);
  } else {
    gin.put(world, d, 0, dst, 0, src, count * row_bytes, gin_signal_inc(kLlCombineSignal));
  }
}

/// For each lane k < topk whose expert `g` lies on another node: how many tokens before `t`
/// select g (each once), which is the index of t's message at g in the dispatch (its token
/// order, as route_window counts it) and of t's row in g's slots. Other lanes get 0. Called
/// by: a whole warp, the same `t` on every lane.
__device__ uint32_t ll_message_index(const EpLlCombineArgs& a, uint32_t t, int64_t g, uint32_t lane) {
  const int64_t* idx = reinterpret_cast<const int64_t*>(a.topk_idx);
  uint32_t index = 0;
  for (uint32_t base = 0; base < t; base += 32) {
    const uint32_t u = base + lane;  // this lane's token of the round
    for (uint32_t k = 0; k < a.topk; ++k) {
      const long long want = __shfl_sync(~0u, static_cast<long long>(g), int(k));
      bool selects = false;
      if (u < t && want >= 0) {
        for (uint32_t j = 0; j < a.topk; ++j) selects |= idx[uint64_t(u) * a.topk + j] == want;
      }
      const uint32_t voters = __ballot_sync(~0u, selects);
      if (lane == k) index += __popc(voters);
    }
  }
  return index;
}

// Grid: any number of blocks of kLlThreads. The rows of every local expert, in the dispatch's
// packed order, are one stream split evenly over the grid's warps (a block first lays out
// where each expert's rows start, from the handle's layout ranges). A row goes back to the
// source rank whose range holds it, into the slot of its expert and source token (the
// handle's source index), or for a rank of another node into its packed place in this rank's
// send block for that rank (the rows of the earlier local experts for it, from the ranges,
// plus its place in its own range). The last block then raises every (expert, destination)
// flag on this node (every pair, so every destination hears from every expert) and a thread
// per rank of another node puts its rows (ll_put_combine).
template <bool kNet>
struct LlCombineSend {
  static __device__ __forceinline__ void run(const EpContext& c, const EpLlCombineArgs& a, const EpLlNet& n) {
    // The first row of each local expert in the stream.
    __shared__ uint32_t starts[kLlMaxExperts + 1];
    // Between nodes, per (local expert, rank d of another node): where the expert's rows for d go
    // in the send block for d, less the start of its range (mod 2^32): the rows of the earlier
    // local experts for d, minus the range's first row.
    uint32_t* packed = kNet ? ll_net_words() : nullptr;
    uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
    const uint64_t sequence = phase_sequence(state, kCombineSend);
    const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
    const uint32_t local = a.experts / c.ranks, rows = c.ranks * a.max_tokens, row_bytes = 2 * a.hidden;
    const int64_t* ranges = reinterpret_cast<const int64_t*>(a.layout_range);
    for (uint32_t le = threadIdx.x; le < local; le += blockDim.x) {
      const int64_t last = ranges[le * c.ranks + c.ranks - 1];
      starts[le] = uint32_t(uint64_t(last) >> 32) + uint32_t(last);
    }
    for (uint32_t d = threadIdx.x; kNet && d < c.ranks; d += blockDim.x) {
      uint32_t rows_before = 0;
      for (uint32_t le = 0; le < local && ll_remote(n, d); ++le) {
        const int64_t range = ranges[le * c.ranks + d];
        packed[le * c.ranks + d] = rows_before - uint32_t(uint64_t(range) >> 32);
        rows_before += uint32_t(range);
      }
    }
    __syncthreads();
    const uint32_t total = block_exclusive_scan(starts, local);
    // Row m of the stream: local expert le's row i, which came from the last source rank whose
    // range starts at or before i (empty ranges share the next one's start).
    const uint32_t fields = row_bytes / 16, warp = grid_warp(), warps = grid_warps();
    const uint64_t elements = uint64_t(total) * fields;
    warp_copy_span<true, kLlSendUnroll, int4>(
        share(elements, warp, warps), share(elements, warp + 1, warps), fields,
        [&](uint64_t m) {
          const uint32_t le = find_segment(starts, local, m), i = uint32_t(m) - starts[le];
          uint32_t dst = 0;
          for (uint32_t s = 1; s < c.ranks; ++s) {
            if (uint32_t(uint64_t(ranges[le * c.ranks + s]) >> 32) <= i) dst = s;
          }
          const uint64_t row = uint64_t(le) * rows + i;
          const char* x = reinterpret_cast<const char*>(a.x) + row * row_bytes;
          if (ll_is_remote<kNet>(n, dst)) {
            const char* staged =
                ll_combine_send_block(c, a, n, half, dst) + uint64_t(packed[le * c.ranks + dst] + i) * row_bytes;
            return RecordWords{reinterpret_cast<uint64_t>(x), reinterpret_cast<uint64_t>(staged)};
          }
          const int t = reinterpret_cast<const int*>(a.src_info)[row];
          const uint64_t g = uint64_t(c.rank) * local + le;
          const char* slots = at<char>(c, dst, a.data_offset + half * a.data_half_bytes);
          const char* slot = slots + (g * a.max_tokens + t) * row_bytes;
          return RecordWords{reinterpret_cast<uint64_t>(x), reinterpret_cast<uint64_t>(slot)};
        },
        [](uint64_t src, uint32_t f) { return reinterpret_cast<const int4*>(src) + f; },
        [](uint64_t dst, uint32_t f) { return reinterpret_cast<int4*>(dst) + f; }, lane);
    WEFT_TRACE_WARP_MARK(send);
    ll_release_dependents();
    if (!finish_phase(state, kCombineSend)) return;
    for (uint32_t pair = threadIdx.x; pair < local * c.ranks; pair += blockDim.x) {
      const uint32_t le = pair / c.ranks, dst = pair % c.ranks;
      if (ll_is_remote<kNet>(n, dst)) continue;
      ptx::st_release_sys(at<uint64_t>(c, dst, a.signal_offset) + uint64_t(half) * a.experts + c.rank * local + le, sequence + 1);
    }
    if (threadIdx.x < c.ranks && ll_is_remote<kNet>(n, threadIdx.x)) ll_put_combine(c, a, n, half, threadIdx.x);
    WEFT_TRACE_MARK(publish);
  }
};

extern "C" __global__ void __launch_bounds__(kLlThreads, 1)
    weft_ep_ll_combine_send(EpContext c, EpLlCombineArgs a, EpLlNet n) {
  WEFT_TRACE_SCOPE(weft_ep_ll_combine_send);
  ll_kernel_begin();
  LlCombineSend<false>::run(c, a, n);
}

extern "C" __global__ void __launch_bounds__(kLlThreads, 1)
    weft_ep_ll_combine_send_net(EpContext c, EpLlCombineArgs a, EpLlNet n) {
  WEFT_TRACE_SCOPE(weft_ep_ll_combine_send_net);
  ll_kernel_begin();
  LlCombineSend<true>::run(c, a, n);
}

// Grid: any number of blocks of kLlThreads; the work is every (token, span of 32 x
// kSumVectors vectors) pair, a warp each in turn. Lane k waits for the flag of slot k's
// expert (for an expert of another node, for its rank's signal to count every put of the
// call; the row is then at its packed place: the rank's rows of the token's earlier experts
// there plus its message index), then the warp sums `fma(row, weight_k, acc)` over the slots
// in order in f32 and rounds once to BF16 (weft-ep's model::ll_combine). Block 0 also waits
// for every expert's flag, so no rank finishes a combine before every peer has sent it.
template <bool kNet>
struct LlCombineRecv {
  static __device__ __forceinline__ void run(const EpContext& c, const EpLlCombineArgs& a, const EpLlNet& n) {
    // Between nodes: this rank's tokens selecting each expert's rank's earlier experts, where
    // that rank's packed rows for the expert start.
    uint32_t* packed = kNet ? ll_net_words() : nullptr;
    if (kNet) packed_prefix(c, a, packed);
    uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
    const uint64_t sequence = phase_sequence(state, kCombineRecv);
    const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
    const uint32_t local = a.experts / c.ranks, row_bytes = 2 * a.hidden;
    const uint64_t* flags = at<uint64_t>(c, c.rank, a.signal_offset) + uint64_t(half) * a.experts;
    const char* slots = at<char>(c, c.rank, a.data_offset + half * a.data_half_bytes);
    if (blockIdx.x == 0) {
      for (uint32_t g = threadIdx.x; g < a.experts; g += blockDim.x) {
        if (ll_is_remote<kNet>(n, g / local)) {
          ll_wait_remote(c, n, g / local, kLlCombineSignal, sequence + 1, kLlCombinePuts, WaitOp::EpLlFlag);
        } else {
          acquire_at_least(flags + g, sequence + 1, c, g / local, WaitOp::EpLlFlag);
        }
      }
      WEFT_TRACE_MARK(wait);
    }
    const int64_t* idx = reinterpret_cast<const int64_t*>(a.topk_idx);
    const uint32_t vectors = a.hidden / 8, span = 32 * kSumVectors, spans = (vectors + span - 1) / span;
    for (uint32_t item = grid_warp(); item < a.tokens * spans; item += grid_warps()) {
      const uint32_t t = item / spans, begin = item % spans * span;
      // Unconditional loads (lanes past topk read slot 0): in flight together, not one by one
      // in a branch.
      const uint64_t slot = uint64_t(t) * a.topk + (lane < a.topk ? lane : 0);
      const int64_t expert = idx[slot], g = lane < a.topk ? expert : -1;
      const float w = reinterpret_cast<const float*>(a.topk_weights)[slot];
      const bool remote = g >= 0 && ll_is_remote<kNet>(n, uint32_t(g) / local);
      // The row's slot among the expert's: the token, or from another node its packed place
      // in the expert's rank's rows (which start at the rank's first expert).
      uint64_t index = t;
      if (__any_sync(~0u, remote)) {
        const uint32_t m = ll_message_index(a, t, g, lane);
        if (remote) index = uint64_t(packed[g]) + m - uint64_t(g % local) * a.max_tokens;
      }
      bool ok = true;
      if (remote) {
        ok = ll_wait_remote(c, n, uint32_t(g) / local, kLlCombineSignal, sequence + 1, kLlCombinePuts, WaitOp::EpLlFlag);
      } else if (g >= 0) {
        ok = acquire_at_least(flags + g, sequence + 1, c, uint32_t(g) / local, WaitOp::EpLlFlag) >= sequence + 1;
      }
      if (!__all_sync(~0u, ok)) break;
      __syncwarp();  // the lanes' acquires order every lane's reads of the rows
      WEFT_TRACE_WARP_MARK(wait);
      const char* row = g >= 0 ? slots + (uint64_t(g) * a.max_tokens + index) * row_bytes : nullptr;
      int4* out = reinterpret_cast<int4*>(a.combined_x + uint64_t(t) * row_bytes);
      warp_sum_rows(row, w, out, begin, min(begin + span, vectors), lane);
    }
    WEFT_TRACE_WARP_MARK(copy);
    ll_release_dependents();
    finish_phase(state, kCombineRecv);
  }
};

extern "C" __global__ void __launch_bounds__(kLlThreads, 1)
    weft_ep_ll_combine_recv(EpContext c, EpLlCombineArgs a, EpLlNet n) {
  WEFT_TRACE_SCOPE(weft_ep_ll_combine_recv);
  ll_kernel_begin();
  LlCombineRecv<false>::run(c, a, n);
}

extern "C" __global__ void __launch_bounds__(kLlThreads, 1)
    weft_ep_ll_combine_recv_net(EpContext c, EpLlCombineArgs a, EpLlNet n) {
  WEFT_TRACE_SCOPE(weft_ep_ll_combine_recv_net);
  ll_kernel_begin();
  LlCombineRecv<true>::run(c, a, n);
}
