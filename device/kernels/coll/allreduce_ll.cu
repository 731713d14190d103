// LL AllReduce, one-shot (weft_allreduce_ll) and two-shot (weft_allreduce_ll2), and the
// two-shot in LL128 lines (weft_allreduce_ll128).
#include "reducing.cuh"

extern "C" __global__ void __launch_bounds__(512)
    weft_allreduce_ll(CollContext c, const char* input, char* output, uint64_t bytes) {
  WEFT_TRACE_SCOPE(weft_allreduce_ll);
  LlRound round;
  if (!ll_round_begin(c, round, input, bytes)) return;
  WEFT_TRACE_MARK(ll_begin);
  const LlDeal deal = LlDeal::of_block(packet_count<Ll16>(bytes));
  ll_put(c, round, c.rank, input, bytes, deal, every_peer(), Pre::of(c));
  WEFT_TRACE_MARK(ll_puts);
  ll_reduce(c, round, 0, input, bytes, deal, StoreTo{output});
  WEFT_TRACE_MARK(ll_reduce);
  ll_round_end(c, round);
}

// Shard d: bytes [d * shard, d * shard + len(d)) with shard a multiple of 8; slots [0, ranks)
// carry the scattered inputs, slots [ranks, 2 ranks) the reduced shards.
extern "C" __global__ void __launch_bounds__(512)
    weft_allreduce_ll2(CollContext c, const char* input, char* output, uint64_t bytes) {
  WEFT_TRACE_SCOPE(weft_allreduce_ll2);
  LlRound round;
  if (!ll_round_begin(c, round)) return;
  WEFT_TRACE_MARK(ll_begin);
  const uint64_t shard = (div_ceil(bytes, c.ranks) + 7) & ~uint64_t(7);
  const LlDeal deal = LlDeal::of_block(shard / 8);
  auto len = [&](uint32_t d) { return bytes > d * shard ? min_u64(shard, bytes - d * shard) : 0; };
  const Pre pre = Pre::of(c);
  for (uint32_t k = 1; k < c.ranks; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ll_put(c, round, c.rank, input + d * shard, len(d), deal, only(d), pre);
  }
  WEFT_TRACE_MARK(ll_puts);
  char* mine = output + c.rank * shard;
  auto keep_and_send = [&](uint64_t j, uint32_t valid, const uint32_t (&w)[2]) {
    detail::store_words<2>(mine + j * 8, valid, w);
    for (uint32_t k = 1; k < c.ranks; ++k) {
      const uint32_t peer = (c.rank + k) % c.ranks;
      Ll16::write(packet_at(c, channel(c, peer).remote_packet_buffer, round, c.ranks + c.rank, j), w, round.flag);
    }
  };
  bool ok = ll_reduce(c, round, 0, input + c.rank * shard, len(c.rank), deal, keep_and_send);
  WEFT_TRACE_MARK(ll_reduce);
  for (uint32_t k = 1; k < c.ranks && ok; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ok = ll_get(c, round, d, c.ranks + d, output + d * shard, len(d), deal);
  }
  WEFT_TRACE_MARK(ll_gets);
  ll_round_end(c, round);
}

// As weft_allreduce_ll2, in LL128 lines (ll128.cuh): shard d (a multiple of 8 bytes, so no
// element straddles a lane) of every input goes into slot `rank` of rank d, which folds them in
// rank order, keeps the result and writes it into slot `ranks + d` of every peer.
extern "C" __global__ void __launch_bounds__(512)
    weft_allreduce_ll128(CollContext c, const char* input, char* output, uint64_t bytes) {
  WEFT_TRACE_SCOPE(weft_allreduce_ll128);
  LlRound round;
  if (!ll128_round_begin(c, round)) return;
  WEFT_TRACE_MARK(ll_begin);
  const Ll128Thread t;
  const uint64_t shard = (div_ceil(bytes, c.ranks) + 7) & ~uint64_t(7);
  auto len = [&](uint32_t d) { return bytes > d * shard ? min_u64(shard, bytes - d * shard) : 0; };
  const Pre pre = Pre::of(c);
  for (uint32_t k = 1; k < c.ranks; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ll128_put(c, round, t, c.rank, input + d * shard, len(d), only(d), nullptr, pre);
  }
  WEFT_TRACE_MARK(ll_puts);
  char* mine = output + c.rank * shard;
  const uint64_t my_len = len(c.rank);
  auto keep_and_send = [&](uint64_t line, bool exists, const uint32_t (&r)[4]) {
    uint32_t w[4] = {r[0], r[1], r[2], r[3]};
    if (exists) ll128_store(mine, my_len, line, t.lane, w);
    for (uint32_t k = 1; k < c.ranks; ++k) {
      const uint32_t peer = (c.rank + k) % c.ranks;
      ll128_write(ll128_slot(c, channel(c, peer).remote_packet_buffer, round, c.ranks + c.rank), line, exists, t.lane,
                  w, round.flag);
    }
  };
  bool ok = ll128_reduce(c, round, t, 0, input + c.rank * shard, my_len, keep_and_send);
  WEFT_TRACE_MARK(ll_reduce);
  for (uint32_t k = 1; k < c.ranks && ok; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ok = ll128_get(c, round, t, d, c.ranks + d, output + d * shard, len(d));
  }
  WEFT_TRACE_MARK(ll_gets);
  ll128_round_end(c, round);
}
