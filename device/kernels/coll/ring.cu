// Ring AllReduce through the next rank's scratch.
#include "reducing.cuh"

/// Tells the next rank this block's writes into its scratch are done (one release signal after
/// a block barrier). Called by: every thread.
__device__ __forceinline__ void ring_signal(const CollContext& c, uint32_t next) {
  __syncthreads();
  if (threadIdx.x == 0) semaphore_signal(semaphore(c, next, blockIdx.x));
}

/// Waits (bounded) for the previous rank's signal. Called by: every thread; false on timeout.
__device__ __forceinline__ bool ring_wait(const CollContext& c, uint32_t prev) {
  bool ok = true;
  if (threadIdx.x == 0) ok = semaphore_wait(semaphore(c, prev, blockIdx.x));
  return __syncthreads_and(ok);
}

/// Ring AllReduce in rounds of `chunk_bytes`, each split into `ranks` shards. Reduce-scatter:
/// at step s rank r folds shard (r - s) mod n (its input with the partial the previous rank
/// pushed at step s - 1) and pushes it into the next rank's slot s; at step n - 1 it owns
/// shard r + 1, fully reduced, writes it out and starts the all-gather, which forwards each
/// received shard to the next rank's next slot. Scratch of every rank: 2(n - 1) step slots.
/// Every shard is reduced once, in one fixed order, so every rank gets the same bits.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_ring(CollContext c, const char* input, char* output, uint64_t bytes) {
  WEFT_TRACE_SCOPE(weft_allreduce_ring);
  const uint32_t n = c.ranks, r = c.rank, next = (r + 1) % n, prev = (r + n - 1) % n;
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  for (uint64_t first = 0; first < bytes; first += c.chunk_bytes) {
    // The previous round's (or kernel's) readers of every slot are done.
    if (!hb_barrier(c)) return;
    const Shards s(min_u64(c.chunk_bytes, bytes - first), round_capacity(bytes, c.chunk_bytes), n);
    // Slot k of `owner` positioned so that shard d's bytes [lo(d), hi(d)) index it directly.
    auto slot = [&](uint32_t owner, uint32_t k, uint32_t d) {
      return scratch_of(c, owner) + static_cast<uint64_t>(k) * s.shard - static_cast<uint64_t>(d) * s.shard;
    };
    const char* in = input + first;
    char* out = output + first;
    for (uint32_t step = 0; step < n; ++step) {
      const uint32_t d = (r + n - step) % n;
      if (step > 0 && !ring_wait(c, prev)) return;
      const bool last = step == n - 1;
      const char* partial = step > 0 ? slot(r, step - 1, d) : nullptr;
      char* to = n == 1 ? nullptr : slot(next, step, d);  // at the last step: all-gather slot 0
      ring_reduce(partial, in, to, last ? out : nullptr, s.lo(d), s.hi(d), last ? finish : Fin::partial(), pre);
      if (n > 1) ring_signal(c, next);
    }
    for (uint32_t t = 1; t < n; ++t) {
      const uint32_t d = (r + n - t + 1) % n;
      if (!ring_wait(c, prev)) return;
      const uint32_t k = n - 1 + t - 1;  // all-gather slot t - 1
      copy_range(out, slot(r, k, d), s.lo(d), s.hi(d));
      if (t < n - 1) {
        push_padded(slot(next, k + 1, d), slot(r, k, d), s.lo(d), s.hi(d));
        ring_signal(c, next);
      }
    }
  }
}
