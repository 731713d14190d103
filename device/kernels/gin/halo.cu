// Halo exchange on a ring of ranks: window `field` is [left halo | interior | right halo], each
// halo `halo` bytes and the interior `interior` bytes (at least `halo`). Rank r puts its first
// `halo` interior bytes into rank r - 1's right halo and its last `halo` interior bytes into
// rank r + 1's left halo, each with signal `signal`, then waits for both neighbours' edges (2
// arrivals per call: see call.cuh). Launch: one block; both puts are block-cooperative, thread
// 0 waits.
#pragma once
#include "call.cuh"

extern "C" __global__ void weft_gin_halo(weft::DevCommHandle h, uint32_t field, uint64_t halo, uint64_t interior,
                                         uint32_t signal, uint32_t barrier) {
  weft::Gin gin(h);
  if (!weft::examples::begin_call(gin, signal, barrier)) return;
  const weft::GinTeam world = weft::gin_team_world(h);
  const uint32_t n = h.world;
  const uint32_t left = (h.rank + n - 1) % n;
  const uint32_t right = (h.rank + 1) % n;
  const uint64_t right_halo = halo + interior;
  if (!gin.put_block(world, left, field, right_halo, field, halo, halo, weft::gin_signal_inc(signal))) return;
  if (!gin.put_block(world, right, field, 0, field, interior, halo, weft::gin_signal_inc(signal))) return;
  if (threadIdx.x == 0 && gin.wait_signal(signal, 2)) gin.flush();
  __syncthreads();
}
