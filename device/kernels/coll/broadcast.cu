// Broadcast, LL (weft_broadcast_ll), HB (weft_broadcast_hb), chain (weft_broadcast_chain) and
// LL128 chain (weft_broadcast_ll128).
#include "chain.cuh"
#include "common.cuh"
#include "ll128.cuh"

extern "C" __global__ void __launch_bounds__(512)
    weft_broadcast_ll(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  WEFT_TRACE_SCOPE(weft_broadcast_ll);
  LlRound round;
  if (!ll_round_begin(c, round, c.rank == root ? input : nullptr, bytes)) return;
  WEFT_TRACE_MARK(ll_begin);
  const LlDeal deal = LlDeal::of_block(packet_count<Ll16>(bytes));
  if (c.rank == root) {
    ll_put(c, round, root, input, bytes, deal, [](uint32_t) { return true; });
    ll_copy_local(output, input, bytes);
    WEFT_TRACE_MARK(ll_puts);
  } else {
    ll_get(c, round, root, root, output, bytes, deal);
    WEFT_TRACE_MARK(ll_gets);
  }
  ll_round_end(c, round);
}

// Scatter + all-gather through scratch, pipelined over three scratch buffers. The i-th rank
// after the root owns shard i of every round. Step j (each begins with a barrier): the root
// pushes shard i of round j into rank i's buffer j % 3 (and copies its own output); every
// non-root pushes its shard of round j - 1 into the other non-roots' buffer (j - 1) % 3, and
// copies round j - 2 out of buffer (j - 2) % 3. The three stages of consecutive rounds run at
// once, and a buffer is written again (round j + 3) only after the step that copied it out.
// Small messages take one round (three steps, as unpipelined); large ones at least 8 rounds.
extern "C" __global__ void __launch_bounds__(1024)
    weft_broadcast_hb(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  WEFT_TRACE_SCOPE(weft_broadcast_hb);
  const uint32_t ranks = c.ranks, rank = c.rank;
  if (ranks == 1) {
    const Shards s(bytes, bytes, 1);
    copy_range(output, input, s.lo(0), s.hi(0));
    return;
  }
  constexpr uint64_t kMinRound = 4ull << 20;
  const uint32_t owners = ranks - 1;
  auto owner = [&](uint32_t i) { return (root + 1 + i) % ranks; };
  const uint32_t mine = (rank + ranks - root - 1) % ranks;  // my shard (non-roots)
  // Buffers and rounds are multiples of 16 x owners, so the shards of a full round tile it
  // exactly and never spill into the next buffer.
  const uint64_t unit = 16ull * owners;
  const uint64_t buffer = (2 * c.chunk_bytes / 3) / unit * unit;
  const uint64_t wanted = div_ceil(bytes, 8) > kMinRound ? div_ceil(bytes, 8) : kMinRound;
  const uint64_t round = min_u64(buffer, div_ceil(wanted, unit) * unit);
  const uint64_t rounds = div_ceil(bytes, round), capacity = round_capacity(bytes, round);
  auto shards = [&](uint64_t j) { return Shards(min_u64(round, bytes - j * round), capacity, owners); };
  auto buffer_of = [&](uint32_t r, uint64_t j) { return scratch_of(c, r) + (j % 3) * buffer; };
  for (uint64_t j = 0; j < rounds + 2; ++j) {
    if (!hb_barrier(c)) return;
    WEFT_TRACE_MARK(barrier);
    if (rank == root) {
      if (j < rounds) {
        const Shards s = shards(j);
        const uint64_t first = j * round;
        for (uint32_t i = 0; i < owners; ++i) {
          push_padded(buffer_of(owner(i), j), input + first, s.lo(i), s.hi(i));
          copy_range(output + first, input + first, s.lo(i), s.hi(i));
        }
        WEFT_TRACE_MARK(push);
      }
      continue;
    }
    if (j >= 1 && j - 1 < rounds) {
      const Shards s = shards(j - 1);
      for (uint32_t i = 1; i < owners; ++i) {
        push_padded(buffer_of(owner((mine + i) % owners), j - 1), buffer_of(rank, j - 1), s.lo(mine), s.hi(mine));
      }
      WEFT_TRACE_MARK(push);
    }
    if (j >= 2) {
      const Shards s = shards(j - 2);
      const uint64_t first = (j - 2) * round;
      for (uint32_t i = 0; i < owners; ++i) copy_range(output + first, buffer_of(rank, j - 2), s.lo(i), s.hi(i));
      WEFT_TRACE_MARK(copy);
    }
  }
}

// The chain from the root (chain.cuh): every rank copies each step out of its slot (the root
// out of its input) into its output, and pushes it on into the next rank's slot.
extern "C" __global__ void __launch_bounds__(1024)
    weft_broadcast_chain(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  WEFT_TRACE_SCOPE(weft_broadcast_chain);
  chain(c, root, bytes, [&](uint64_t at, uint64_t len, const char* from, char* to) {
    const char* src = from != nullptr ? from : input + at;
    if (to != nullptr) push_padded(to, src, 0, len);
    copy_range(output + at, src, 0, len);
  });
}

// The LL128 chain from the root (ll128.cuh): the root reads each line's bytes from its input,
// every other rank takes them from the previous rank's line; each stores them in its output
// and passes the line on.
extern "C" __global__ void __launch_bounds__(512)
    weft_broadcast_ll128(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  WEFT_TRACE_SCOPE(weft_broadcast_ll128);
  LlRound round;
  if (!ll128_round_begin(c, round)) return;
  const bool copies = c.rank != root || input != output;
  ll128_chain(c, round, root, bytes, [&](uint64_t line, uint32_t lane, bool received, uint32_t (&w)[4]) {
    if (!received) ll128_load(input, bytes, line, lane, w);
    if (copies) ll128_store(output, bytes, line, lane, w);
  });
}
