// Ring AllGather: window `data` holds world chunks of `chunk` bytes, rank r's own chunk at
// r * chunk. In step k (0 <= k < world - 1) rank r puts chunk (r - k) mod world to rank r + 1
// with signal `signal`, then waits for the chunk (r - k - 1) mod world from rank r - 1 before
// forwarding it (world - 1 arrivals per call: see call.cuh). Launch: one block; every thread
// takes part in each put (a block-cooperative put), thread 0 waits.
#pragma once
#include "call.cuh"

extern "C" __global__ void weft_gin_ring_allgather(weft::DevCommHandle h, uint32_t data, uint64_t chunk,
                                                   uint32_t signal, uint32_t barrier) {
  weft::Gin gin(h);
  if (!weft::examples::begin_call(gin, signal, barrier)) return;
  const weft::GinTeam world = weft::gin_team_world(h);
  const uint32_t n = h.world;
  const uint32_t next = (h.rank + 1) % n;
  for (uint32_t k = 0; k + 1 < n; ++k) {
    const uint64_t c = (h.rank + n - k) % n;
    if (!gin.put_block(world, next, data, c * chunk, data, c * chunk, chunk, weft::gin_signal_inc(signal))) return;
    bool arrived = true;
    if (threadIdx.x == 0) arrived = gin.wait_signal(signal, k + 1);
    // Thread 0's acquire, then the block barrier: the chunk is visible to every thread that
    // forwards it in the next step.
    if (__syncthreads_and(arrived) == 0) return;
  }
  if (threadIdx.x == 0) gin.flush();
}
