// AllToAll with put + signal: rank r's window `send` holds world chunks of `chunk` bytes (chunk
// p for rank p); each rank puts chunk p into rank p's window `recv` at offset r * chunk, raising
// p's signal `signal`, then waits until every rank's chunk arrived (world arrivals per call:
// see call.cuh). Launch: one block of 32 * world threads; warp p serves rank p with a
// cooperative put (its own chunk included, an LSA put to itself).
#pragma once
#include "call.cuh"

extern "C" __global__ void weft_gin_alltoall(weft::DevCommHandle h, uint32_t send, uint32_t recv, uint64_t chunk,
                                             uint32_t signal, uint32_t barrier) {
  weft::Gin gin(h);
  if (!weft::examples::begin_call(gin, signal, barrier)) return;
  const weft::GinTeam world = weft::gin_team_world(h);
  const uint32_t peer = threadIdx.x / 32;
  if (peer < h.world) {
    const bool put = gin.put_warp(world, peer, recv, h.rank * chunk, send, peer * chunk, chunk,
                                  weft::gin_signal_inc(signal));
    // The leader's Gin queued any proxy command: it flushes.
    if (put && threadIdx.x % 32 == 0) gin.flush();
  }
  if (threadIdx.x == 0) gin.wait_signal(signal, h.world);
  __syncthreads();
}
