// Low-latency combine: the send kernel writes every row the dispatch received back into its
// token's rank, slot `[global expert][token]`; the receive kernel sums each token's rows
// weighted by its top-k weights in slot order (weft-ep's model::ll_combine).
#include "low_latency.cuh"

// Grid: any number of blocks of kLlThreads. The rows of every local expert, in the dispatch's
// packed order, are one stream split evenly over the grid's warps (a block first lays out
// where each expert's rows start, from the handle's layout ranges). A row goes back to the
// source rank whose range holds it, into the slot of its expert and source token (the
// handle's source index). The last block then raises every (expert, destination) flag (every
// pair, so every destination hears from every expert).
extern "C" __global__ void __launch_bounds__(kLlThreads, 1) weft_ep_ll_combine_send(EpContext c, EpLlCombineArgs a) {
  WEFT_TRACE_SCOPE(weft_ep_ll_combine_send);
  ll_kernel_begin();
  __shared__ uint32_t starts[kLlMaxExperts + 1];  // first row of each local expert in the stream
  uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
  const uint64_t sequence = phase_sequence(state, kCombineSend);
  const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
  const uint32_t local = a.experts / c.ranks, rows = c.ranks * a.max_tokens, row_bytes = 2 * a.hidden;
  const int64_t* ranges = reinterpret_cast<const int64_t*>(a.layout_range);
  for (uint32_t le = threadIdx.x; le < local; le += blockDim.x) {
    const int64_t last = ranges[le * c.ranks + c.ranks - 1];
    starts[le] = uint32_t(uint64_t(last) >> 32) + uint32_t(last);
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
        const int t = reinterpret_cast<const int*>(a.src_info)[row];
        const uint64_t g = uint64_t(c.rank) * local + le;
        const char* slots = at<char>(c, dst, a.data_offset + half * a.data_half_bytes);
        const char* slot = slots + (g * a.max_tokens + t) * row_bytes;
        const char* x = reinterpret_cast<const char*>(a.x) + row * row_bytes;
        return RecordWords{reinterpret_cast<uint64_t>(x), reinterpret_cast<uint64_t>(slot)};
      },
      [](uint64_t src, uint32_t f) { return reinterpret_cast<const int4*>(src) + f; },
      [](uint64_t dst, uint32_t f) { return reinterpret_cast<int4*>(dst) + f; }, lane);
  WEFT_TRACE_WARP_MARK(send);
  ll_release_dependents();
  if (!finish_phase(state, kCombineSend)) return;
  for (uint32_t pair = threadIdx.x; pair < local * c.ranks; pair += blockDim.x) {
    const uint32_t le = pair / c.ranks, dst = pair % c.ranks;
    ptx::st_release_sys(at<uint64_t>(c, dst, a.signal_offset) + uint64_t(half) * a.experts + c.rank * local + le, sequence + 1);
  }
  WEFT_TRACE_MARK(publish);
}

// Grid: any number of blocks of kLlThreads; the work is every (token, span of 32 x
// kSumVectors vectors) pair, a warp each in turn. Lane k waits for the flag of slot k's
// expert, then the warp sums `fma(row, weight_k, acc)` over the slots in order in f32 and
// rounds once to BF16 (weft-ep's model::ll_combine). Block 0 also waits for every expert's
// flag, so no rank finishes a combine before every peer has sent it.
extern "C" __global__ void __launch_bounds__(kLlThreads, 1) weft_ep_ll_combine_recv(EpContext c, EpLlCombineArgs a) {
  WEFT_TRACE_SCOPE(weft_ep_ll_combine_recv);
  ll_kernel_begin();
  uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
  const uint64_t sequence = phase_sequence(state, kCombineRecv);
  const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
  const uint32_t local = a.experts / c.ranks, row_bytes = 2 * a.hidden;
  const uint64_t* flags = at<uint64_t>(c, c.rank, a.signal_offset) + uint64_t(half) * a.experts;
  const char* slots = at<char>(c, c.rank, a.data_offset + half * a.data_half_bytes);
  if (blockIdx.x == 0) {
    for (uint32_t g = threadIdx.x; g < a.experts; g += blockDim.x) {
      acquire_at_least(flags + g, sequence + 1, c, g / local, WaitOp::EpLlFlag);
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
    bool ok = true;
    if (g >= 0) ok = acquire_at_least(flags + g, sequence + 1, c, uint32_t(g) / local, WaitOp::EpLlFlag) >= sequence + 1;
    if (!__all_sync(~0u, ok)) break;
    __syncwarp();  // the lanes' acquires order every lane's reads of the rows
    WEFT_TRACE_WARP_MARK(wait);
    const char* row = g >= 0 ? slots + (uint64_t(g) * a.max_tokens + t) * row_bytes : nullptr;
    int4* out = reinterpret_cast<int4*>(a.combined_x + uint64_t(t) * row_bytes);
    warp_sum_rows(row, w, out, begin, min(begin + span, vectors), lane);
  }
  WEFT_TRACE_WARP_MARK(copy);
  ll_release_dependents();
  finish_phase(state, kCombineRecv);
}
