// Ping-pong of put + signal between world ranks 0 and 1 (the latency of `weft bench gin`): in
// each of `rounds` round trips rank 0 puts `bytes` from window `data` at offset 0 into rank 1's
// window `data` at offset `bytes`, raising rank 1's signal `signal`; rank 1 waits for that
// arrival, then puts back the same way. One launch times `rounds` round trips (rounds arrivals
// per call on both ranks: see call.cuh); ranks from 2 on only take part in the barrier. Launch:
// one block of one thread.
#pragma once
#include "call.cuh"

extern "C" __global__ void weft_gin_ping_pong(weft::DevCommHandle h, uint32_t data, uint64_t bytes, uint32_t rounds,
                                              uint32_t signal, uint32_t barrier) {
  weft::Gin gin(h);
  if (!weft::examples::begin_call(gin, signal, barrier) || h.rank > 1) return;
  const weft::GinTeam world = weft::gin_team_world(h);
  const uint32_t peer = 1 - h.rank;
  for (uint32_t i = 0; i < rounds; ++i) {
    if (h.rank == 1 && !gin.wait_signal(signal, i + 1)) return;
    if (!gin.put(world, peer, data, bytes, data, 0, bytes, weft::gin_signal_inc(signal))) return;
    if (h.rank == 0 && !gin.wait_signal(signal, i + 1)) return;
  }
  gin.flush();
}
