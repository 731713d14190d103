// AllGather, LL (weft_allgather_ll), HB (weft_allgather_hb) and LL128 (weft_allgather_ll128).
#include "common.cuh"
#include "ll128.cuh"

extern "C" __global__ void __launch_bounds__(512)
    weft_allgather_ll(CollContext c, const char* input, char* output, uint64_t block_bytes) {
  WEFT_TRACE_SCOPE(weft_allgather_ll);
  LlRound round;
  if (!ll_round_begin(c, round, input, block_bytes)) return;
  WEFT_TRACE_MARK(ll_begin);
  const LlDeal deal = LlDeal::of_block(packet_count<Ll16>(block_bytes));
  ll_put(c, round, c.rank, input, block_bytes, deal, [](uint32_t) { return true; });
  ll_copy_local(output + c.rank * block_bytes, input, block_bytes);
  WEFT_TRACE_MARK(ll_puts);
  bool ok = true;
  for (uint32_t k = 1; k < c.ranks && ok; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ok = ll_get(c, round, d, d, output + d * block_bytes, block_bytes, deal);
  }
  WEFT_TRACE_MARK(ll_gets);
  ll_round_end(c, round);
}

// Rounds of `slot` bytes: barrier, push this rank's block into slot `rank` of every peer's
// scratch, barrier, copy every peer's slot out. Zero-copy (`outputs` set: every rank's
// registered output, block_bytes a multiple of 16 so every destination is 16-aligned and no
// store is partial): one round pushes straight into block `rank` of every peer's output, with
// the same two barriers (the peer has entered, so its output is free; every peer is done
// writing before anyone returns) and nothing to copy out. In place, peers write only blocks
// other than the one this rank reads.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allgather_hb(CollContext c, const char* input, char* output, uint64_t block_bytes, PeerBuffers outputs) {
  WEFT_TRACE_SCOPE(weft_allgather_hb);
  const uint32_t ranks = c.ranks, rank = c.rank;
  const bool zero_copy = peer_buffer(outputs, rank) != nullptr;
  const uint64_t slot = zero_copy ? round_up16(block_bytes) : (2 * c.chunk_bytes / ranks) & ~uint64_t(15);
  for (uint64_t first = 0; first < block_bytes; first += slot) {
    if (!hb_barrier(c)) return;
    WEFT_TRACE_MARK(barrier);
    const Shards s(min_u64(slot, block_bytes - first), round_capacity(block_bytes, slot), 1);
    const uint64_t lo = s.lo(0), hi = s.hi(0);
    for (uint32_t k = 1; k < ranks; ++k) {
      const uint32_t d = (rank + k) % ranks;
      char* to = zero_copy ? peer_buffer(outputs, d) + rank * block_bytes + first
                           : scratch_of(c, d) + rank * slot;
      push_padded(to, input + first, lo, hi);
    }
    copy_range(output + rank * block_bytes + first, input + first, lo, hi);
    WEFT_TRACE_MARK(push);
    if (!hb_barrier(c)) return;
    WEFT_TRACE_MARK(barrier);
    for (uint32_t k = 1; k < ranks && !zero_copy; ++k) {
      const uint32_t d = (rank + k) % ranks;
      copy_range(output + d * block_bytes + first, reinterpret_cast<const char*>(c.scratch) + d * slot, lo, hi);
    }
    WEFT_TRACE_MARK(copy);
  }
}

// As weft_allgather_ll, in LL128 lines (ll128.cuh): every rank writes its block into slot
// `rank` of every peer and stores its own copy, then takes every peer's block from its slot.
extern "C" __global__ void __launch_bounds__(512)
    weft_allgather_ll128(CollContext c, const char* input, char* output, uint64_t block_bytes) {
  WEFT_TRACE_SCOPE(weft_allgather_ll128);
  LlRound round;
  if (!ll128_round_begin(c, round)) return;
  WEFT_TRACE_MARK(ll_begin);
  const Ll128Thread t;
  char* own = output + c.rank * block_bytes;
  ll128_put(c, round, t, c.rank, input, block_bytes, [](uint32_t) { return true; }, own != input ? own : nullptr);
  WEFT_TRACE_MARK(ll_puts);
  bool ok = true;
  for (uint32_t k = 1; k < c.ranks && ok; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ok = ll128_get(c, round, t, d, d, output + d * block_bytes, block_bytes);
  }
  WEFT_TRACE_MARK(ll_gets);
  ll128_round_end(c, round);
}
