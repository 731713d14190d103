// AllToAll with put + signal: rank r's window `send` holds world chunks of `chunk` bytes (chunk
// p for rank p); each rank puts chunk p into rank p's window `recv` at offset r * chunk, raising
// p's signal `signal`, then waits until every rank's chunk arrived. Launch: one block of at least
// `world` threads; thread p serves rank p (its own chunk included, an LSA put to itself).
// `round` counts earlier launches on the same signal: signals only count up, so launch n waits
// for world * (n + 1) arrivals and needs no reset between launches.
#pragma once
#include "weft/gin.cuh"

extern "C" __global__ void weft_gin_alltoall(weft::DevCommHandle h, uint32_t send, uint32_t recv, uint64_t chunk,
                                             uint32_t signal, uint64_t round) {
  weft::Gin gin(h);
  const weft::GinTeam world = weft::gin_team_world(h);
  const uint32_t peer = threadIdx.x;
  __syncthreads();  // the caller's writes of `send` before any put reads them
  if (peer < h.world) {
    if (gin.put(world, peer, recv, h.rank * chunk, send, peer * chunk, chunk, weft::gin_signal_inc(signal))) {
      gin.flush();
    }
  }
  if (threadIdx.x == 0) gin.wait_signal(signal, (round + 1) * h.world);
  __syncthreads();
}
