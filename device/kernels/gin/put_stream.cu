// A stream of puts from world rank 0 to rank 1 (the bandwidth of `weft bench gin`): rank 0
// puts `messages` messages of `bytes` from window `data` at offset 0 into rank 1's window
// `data` at offset 0 and flushes; rank 1 waits for every arrival. Ranks from 2 on only take
// part in the barriers.
//
// Each block carries its own slice of every message (16-byte aligned, the last one shorter,
// none for blocks past the end): block b puts it with signal `signal + b` and is a call of its
// own on that signal and world barrier `barrier + b` (call.cuh), so blocks never wait for each
// other (`messages` arrivals per call on each signal with a slice). One block (the proxy: one
// command per message) or enough blocks to fill NVLink (LSA: one SM copies ~45 GB/s). Every put
// is block-cooperative; thread 0 waits.
#pragma once
#include "call.cuh"

extern "C" __global__ void weft_gin_put_stream(weft::DevCommHandle h, uint32_t data, uint64_t bytes,
                                               uint32_t messages, uint32_t signal, uint32_t barrier) {
  const uint64_t slice = ((bytes + gridDim.x - 1) / gridDim.x + 15) & ~15ull;
  const uint64_t begin = blockIdx.x * slice;
  if (begin >= bytes) return;
  const uint64_t len = bytes - begin < slice ? bytes - begin : slice;
  const uint32_t my_signal = signal + blockIdx.x;
  weft::Gin gin(h);
  if (!weft::examples::begin_call(gin, my_signal, barrier + blockIdx.x) || h.rank > 1) return;
  const weft::GinTeam world = weft::gin_team_world(h);
  if (h.rank == 0) {
    for (uint32_t i = 0; i < messages; ++i) {
      if (!gin.put_block(world, 1, data, begin, data, begin, len, weft::gin_signal_inc(my_signal))) return;
    }
    // The leader's Gin queued any proxy command: it flushes.
    if (threadIdx.x == 0) gin.flush();
  } else if (threadIdx.x == 0) {
    gin.wait_signal(my_signal, messages);
  }
  __syncthreads();
}
