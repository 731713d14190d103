// A stream of puts from world rank 0 to rank 1 (the bandwidth of `weft bench gin`): rank 0
// puts `messages` messages of `bytes` from window `data` at offset 0 into rank 1's window
// `data` at offset 0, each raising rank 1's signal `signal`, and flushes; rank 1 waits for every
// arrival (`messages` per call: see call.cuh). Ranks from 2 on only take part in the barrier.
// Launch: one block; every put is block-cooperative (SM copies over LSA, one proxy command
// through the proxy), thread 0 waits.
#pragma once
#include "call.cuh"

extern "C" __global__ void weft_gin_put_stream(weft::DevCommHandle h, uint32_t data, uint64_t bytes,
                                               uint32_t messages, uint32_t signal, uint32_t barrier) {
  weft::Gin gin(h);
  if (!weft::examples::begin_call(gin, signal, barrier) || h.rank > 1) return;
  const weft::GinTeam world = weft::gin_team_world(h);
  if (h.rank == 0) {
    for (uint32_t i = 0; i < messages; ++i) {
      if (!gin.put_block(world, 1, data, 0, data, 0, bytes, weft::gin_signal_inc(signal))) return;
    }
    // The leader's Gin queued any proxy command: it flushes.
    if (threadIdx.x == 0) gin.flush();
  } else if (threadIdx.x == 0) {
    gin.wait_signal(signal, messages);
  }
  __syncthreads();
}
