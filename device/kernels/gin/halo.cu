// Halo exchange on a ring of ranks: window `field` is [left halo | interior | right halo], each
// halo `halo` bytes and the interior `interior` bytes (at least `halo`). Rank r puts its first
// `halo` interior bytes into rank r - 1's right halo and its last `halo` interior bytes into
// rank r + 1's left halo, each with signal `signal`, then waits for both neighbours' edges. One
// thread (launch: one block; thread 0 works). `round` counts earlier launches on the signal.
#pragma once
#include "weft/gin.cuh"

extern "C" __global__ void weft_gin_halo(weft::DevCommHandle h, uint32_t field, uint64_t halo, uint64_t interior,
                                         uint32_t signal, uint64_t round) {
  if (threadIdx.x != 0) return;
  weft::Gin gin(h);
  const weft::GinTeam world = weft::gin_team_world(h);
  const uint32_t n = h.world;
  const uint32_t left = (h.rank + n - 1) % n;
  const uint32_t right = (h.rank + 1) % n;
  const uint64_t right_halo = halo + interior;
  if (!gin.put(world, left, field, right_halo, field, halo, halo, weft::gin_signal_inc(signal))) return;
  if (!gin.put(world, right, field, 0, field, interior, halo, weft::gin_signal_inc(signal))) return;
  if (gin.wait_signal(signal, 2 * (round + 1))) gin.flush();
}
