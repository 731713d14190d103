// ReduceScatter, LL (weft_reduce_scatter_ll), HB (weft_reduce_scatter_hb), LL128
// (weft_reduce_scatter_ll128), and HB's direct form (weft_reduce_scatter_direct).
#include "reducing.cuh"

// Shard d is block d of the input (`shard_bytes` each); the result is this rank's shard.
extern "C" __global__ void __launch_bounds__(512)
    weft_reduce_scatter_ll(CollContext c, const char* input, char* output, uint64_t shard_bytes) {
  WEFT_TRACE_SCOPE(weft_reduce_scatter_ll);
  LlRound round;
  if (!ll_round_begin(c, round, input + (c.rank + 1) % c.ranks * shard_bytes, shard_bytes)) return;  // first put's shard
  WEFT_TRACE_MARK(ll_begin);
  const LlDeal deal = LlDeal::of_block(packet_count<Ll16>(shard_bytes));
  const Pre pre = Pre::of(c);
  for (uint32_t k = 1; k < c.ranks; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ll_put(c, round, c.rank, input + d * shard_bytes, shard_bytes, deal, only(d), pre);
  }
  WEFT_TRACE_MARK(ll_puts);
  ll_reduce(c, round, 0, input + c.rank * shard_bytes, shard_bytes, deal, StoreTo{output});
  WEFT_TRACE_MARK(ll_reduce);
  ll_round_end(c, round);
}

/// Reduce-scatter through scratch in rounds: each shard contributes `slot` bytes per round,
/// pushed into slot `rank` of its owner (slots fill the first half of the scratch); the owner
/// reduces its slots into its result region (the second half, 16-byte aligned like the slots)
/// and copies that out, so the vector path never depends on the user buffer's alignment.
extern "C" __global__ void __launch_bounds__(1024)
    weft_reduce_scatter_hb(CollContext c, const char* input, char* output, uint64_t shard_bytes) {
  WEFT_TRACE_SCOPE(weft_reduce_scatter_hb);
  const uint32_t ranks = c.ranks, rank = c.rank;
  const uint64_t slot = (c.chunk_bytes / ranks) & ~uint64_t(15);
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  char* result = reinterpret_cast<char*>(c.scratch) + c.chunk_bytes;
  for (uint64_t first = 0; first < shard_bytes; first += slot) {
    if (!hb_barrier(c)) return;
    WEFT_TRACE_MARK(barrier);
    const Shards s(min_u64(slot, shard_bytes - first), round_capacity(shard_bytes, slot), 1);
    const uint64_t lo = s.lo(0), hi = s.hi(0);
    for (uint32_t k = 0; k < ranks; ++k) {
      const uint32_t d = (rank + k) % ranks;
      push_padded(scratch_of(c, d) + rank * slot, input + d * shard_bytes + first, lo, hi, pre);
    }
    WEFT_TRACE_MARK(push);
    if (!hb_barrier(c)) return;
    WEFT_TRACE_MARK(barrier);
    if (hi > lo) {
      const char* in[MAX_RANKS];
      for (uint32_t r = 0; r < ranks; ++r) in[r] = reinterpret_cast<const char*>(c.scratch) + r * slot;
      reduce_range(in, ranks, lo, hi, finish, [&](uint64_t at, const uint4& v) { *reinterpret_cast<uint4*>(result + at) = v; });
      __syncthreads();
      WEFT_TRACE_MARK(reduce);
      copy_range(output + first, result, lo, hi);
      WEFT_TRACE_MARK(copy);
    }
  }
}

// As weft_reduce_scatter_ll, in LL128 lines (ll128.cuh): block d of every rank's input goes
// into slot `rank` of rank d, which folds them in rank order.
extern "C" __global__ void __launch_bounds__(512)
    weft_reduce_scatter_ll128(CollContext c, const char* input, char* output, uint64_t shard_bytes) {
  WEFT_TRACE_SCOPE(weft_reduce_scatter_ll128);
  LlRound round;
  if (!ll128_round_begin(c, round)) return;
  WEFT_TRACE_MARK(ll_begin);
  const Ll128Thread t;
  const Pre pre = Pre::of(c);
  for (uint32_t k = 1; k < c.ranks; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ll128_put(c, round, t, c.rank, input + d * shard_bytes, shard_bytes, only(d), nullptr, pre);
  }
  WEFT_TRACE_MARK(ll_puts);
  ll128_reduce(c, round, t, 0, input + c.rank * shard_bytes, shard_bytes,
               [&](uint64_t line, bool exists, const uint32_t (&w)[4]) {
                 if (exists) ll128_store(output, shard_bytes, line, t.lane, w);
               });
  WEFT_TRACE_MARK(ll_reduce);
  ll128_round_end(c, round);
}

// HB's direct form: rank r reads block r of every rank's input where it lies (a peer's through
// NVLink) and folds them into its output, between two barriers of each block with the same
// block of every peer, so each block crosses the link once with no scratch and no rounds. The
// entry barrier orders every peer's earlier stream work on its input before it is read; the
// exit barrier orders this block's reads before each peer's same block returns (after which
// its caller may overwrite its input). In place, rank r's output is block r of its own input,
// which only rank r's same thread reads, before it stores there. The host chooses it when
// every rank's input is mapped here (windows, or a captured call's agreement), for blocks of
// whole 16-byte vectors and operators without a per-rank pre-operation.
extern "C" __global__ void __launch_bounds__(1024)
    weft_reduce_scatter_direct(CollContext c, char* output, uint64_t shard_bytes, PeerBuffers inputs) {
  WEFT_TRACE_SCOPE(weft_reduce_scatter_direct);
  if (!hb_barrier(c)) return;
  WEFT_TRACE_MARK(barrier);
  pull_reduce(c, inputs, c.rank * shard_bytes, shard_bytes, output);
  WEFT_TRACE_MARK(reduce);
  hb_barrier(c);
  WEFT_TRACE_MARK(barrier);
}
