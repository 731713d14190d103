// Ring AllGather: window `data` holds world chunks of `chunk` bytes, rank r's own chunk at
// r * chunk. In step k (0 <= k < world - 1) rank r puts chunk (r - k) mod world to rank r + 1
// with signal `signal`, then waits for the chunk (r - k - 1) mod world from rank r - 1 before
// forwarding it. One thread (launch: one block of one or more threads; thread 0 works).
// `round` counts earlier launches on the same signal (world - 1 arrivals each).
#pragma once
#include "weft/gin.cuh"

extern "C" __global__ void weft_gin_ring_allgather(weft::DevCommHandle h, uint32_t data, uint64_t chunk,
                                                   uint32_t signal, uint64_t round) {
  if (threadIdx.x != 0) return;
  weft::Gin gin(h);
  const weft::GinTeam world = weft::gin_team_world(h);
  const uint32_t n = h.world;
  const uint32_t next = (h.rank + 1) % n;
  const uint64_t before = round * (n - 1);
  for (uint32_t k = 0; k + 1 < n; ++k) {
    const uint64_t c = (h.rank + n - k) % n;
    if (!gin.put(world, next, data, c * chunk, data, c * chunk, chunk, weft::gin_signal_inc(signal))) return;
    if (!gin.wait_signal(signal, before + k + 1)) return;
  }
  gin.flush();
}
