// AllToAll with put + signal: rank r's window `send` holds world chunks of `chunk` bytes (chunk
// p for rank p); each rank puts chunk p into rank p's window `recv` at offset r * chunk, raising
// p's signal `signal`, then waits until every rank's chunk arrived (world arrivals per call:
// see call.cuh). Launch: one block; every put is block-cooperative. The puts through the proxy
// go first (the leader queues one command each, so their transfers start at once), then the
// block copies the chunks of the LSA peers (its own chunk included, an LSA put to itself) while
// the NIC moves the others; the leader flushes and waits.
#pragma once
#include "call.cuh"

extern "C" __global__ void weft_gin_alltoall(weft::DevCommHandle h, uint32_t send, uint32_t recv, uint64_t chunk,
                                             uint32_t signal, uint32_t barrier) {
  weft::Gin gin(h);
  if (!weft::examples::begin_call(gin, signal, barrier)) return;
  const weft::GinTeam world = weft::gin_team_world(h);
  for (uint32_t pass = 0; pass < 2; ++pass) {
    const bool proxy = pass == 0;
    // Starting at the next rank spreads the ranks' puts over the peers.
    for (uint32_t i = 0; i < h.world; ++i) {
      const uint32_t peer = (h.rank + 1 + i) % h.world;
      if (weft::gin_is_proxy_peer(h, peer) != proxy) continue;
      if (!gin.put_block(world, peer, recv, h.rank * chunk, send, peer * chunk, chunk, weft::gin_signal_inc(signal))) {
        return;
      }
    }
  }
  // The leader's Gin queued every proxy command: it flushes, then waits.
  if (threadIdx.x == 0 && gin.flush()) gin.wait_signal(signal, h.world);
  __syncthreads();
}
