// HB AllReduce: the two-shot through scratch (two_shot_hb.cuh), results to every rank; or,
// when every rank's input and output lie in windows, the direct two-shot.
#include "two_shot_hb.cuh"

/// The direct two-shot, a kernel of its own (in one kernel with the scratch path, the extra
/// pointers made that path spill): rank r owns shard r of the whole message, reads that shard of
/// every rank's input where it lies (a peer's through NVLink), reduces it in rank order and
/// stores the result into every rank's output. Two barriers in all, against the scratch path's
/// one per round plus two, and no push into scratch. The host chooses it only when every rank's
/// input and output lie in windows, for messages of whole 16-byte vectors at 16-byte aligned
/// offsets and operators without a per-rank pre-operation (a peer's PreMulSum scalar is not
/// known here), alike on every rank (the windows' contract: same window, same offset).
///
/// The entry barrier orders every rank's earlier stream work on its input and output before
/// any peer reads or writes them; the exit barrier orders this block's reads of the peers'
/// inputs and stores into their outputs before each peer's same block returns. In place, shard
/// r of every buffer is read and written by rank r's same thread only, read first. Pointer
/// arrays are indexed by unrolled constants only, so they stay in registers.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_hb_direct(CollContext c, uint64_t bytes, PeerBuffers inputs, PeerBuffers outputs) {
  WEFT_TRACE_SCOPE(weft_allreduce_hb_direct);
  if (!hb_barrier(c)) return;
  WEFT_TRACE_MARK(barrier);
  const Shards s(bytes, bytes, c.ranks);
  const uint64_t lo = s.lo(c.rank), hi = s.hi(c.rank);
  if (hi > lo) {
    const char* in[MAX_RANKS];
    StoreEach store;
    store.n = c.ranks;
#pragma unroll
    for (uint32_t k = 0; k < MAX_RANKS; ++k) {
      in[k] = k < c.ranks ? peer_buffer(inputs, k) : nullptr;
      store.out[k] = k < c.ranks ? peer_buffer(outputs, k) : nullptr;
    }
    reduce_range(in, c.ranks, lo, hi, Fin::of(c), store);
  }
  WEFT_TRACE_MARK(reduce);
  hb_barrier(c);
  WEFT_TRACE_MARK(barrier);
}

extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_hb(CollContext c, const char* input, char* output, uint64_t bytes, PeerBuffers outputs) {
  WEFT_TRACE_SCOPE(weft_allreduce_hb);
  two_shot_hb(c, input, output, bytes, kEveryRank, outputs);
}
