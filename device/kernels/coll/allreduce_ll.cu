// LL AllReduce, one-shot (weft_allreduce_ll) and two-shot (weft_allreduce_ll2).
#include "reducing.cuh"

extern "C" __global__ void __launch_bounds__(512)
    weft_allreduce_ll(CollContext c, const char* input, char* output, uint64_t bytes) {
  WEFT_TRACE_SCOPE(weft_allreduce_ll);
  LlRound round;
  if (!ll_round_begin(c, round, input, bytes)) return;
  WEFT_TRACE_MARK(ll_begin);
  const LlRange range(packet_count<Ll16>(bytes));
  ll_put(c, round, c.rank, input, bytes, range, every_peer(), Pre::of(c));
  WEFT_TRACE_MARK(ll_puts);
  ll_reduce(c, round, 0, input, bytes, range, StoreTo{output});
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
  const LlRange range(shard / 8);
  auto len = [&](uint32_t d) { return bytes > d * shard ? min_u64(shard, bytes - d * shard) : 0; };
  const Pre pre = Pre::of(c);
  for (uint32_t k = 1; k < c.ranks; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ll_put(c, round, c.rank, input + d * shard, len(d), range, only(d), pre);
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
  bool ok = ll_reduce(c, round, 0, input + c.rank * shard, len(c.rank), range, keep_and_send);
  WEFT_TRACE_MARK(ll_reduce);
  for (uint32_t k = 1; k < c.ranks && ok; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ok = ll_get(c, round, d, c.ranks + d, output + d * shard, len(d), range);
  }
  WEFT_TRACE_MARK(ll_gets);
  ll_round_end(c, round);
}
