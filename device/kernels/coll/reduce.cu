// Reduce to a root, LL (weft_reduce_ll) and HB (weft_reduce_hb).
#include "reducing.cuh"
#include "two_shot_hb.cuh"

extern "C" __global__ void __launch_bounds__(512)
    weft_reduce_ll(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  WEFT_TRACE_SCOPE(weft_reduce_ll);
  LlRound round;
  if (!ll_round_begin(c, round, c.rank != root ? input : nullptr, bytes)) return;
  WEFT_TRACE_MARK(ll_begin);
  const LlRange range(packet_count<Ll16>(bytes));
  if (c.rank != root) {
    ll_put(c, round, c.rank, input, bytes, range, only(root), Pre::of(c));
    WEFT_TRACE_MARK(ll_puts);
  } else {
    ll_reduce(c, round, 0, input, bytes, range, StoreTo{output});
    WEFT_TRACE_MARK(ll_reduce);
  }
  ll_round_end(c, round);
}

extern "C" __global__ void __launch_bounds__(1024)
    weft_reduce_hb(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  WEFT_TRACE_SCOPE(weft_reduce_hb);
  two_shot_hb(c, input, output, bytes, root, PeerBuffers{});
}
