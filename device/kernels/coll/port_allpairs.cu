// All-pairs AllReduce over PortChannels.
#include "port_grid.cuh"

/// AllReduce over PortChannels in one step (the latency algorithm across nodes): every rank puts
/// its input to every peer, then folds all ranks' inputs in rank order, so every rank gets the
/// same bits, run after run. One crossing of the network per call instead of the ring's
/// 2(n - 1); each rank moves (n - 1) times its input, so it is for small messages.
///
/// The grid is a driver block and worker blocks, as in the port ring (PortGrid): the
/// workers copy their slices of a round's input into this rank's staging slot and arrive; the
/// driver pushes one put-with-signal to every peer (`channels[p]`, entry `rank` unused), waits
/// for every peer's, and hands the round to the workers, which fold it into the output
/// (PortGrid).
///
/// `scratch` (registered with the proxy) holds two sets of `ranks` slots of `slot_bytes`; round
/// g (counted over launches) uses set g % 2, where slot j holds rank j's input (slot `rank` is
/// this rank's staging, put into the same slot of every peer). No credits: every round, every
/// rank waits for every peer's put, and a peer puts round g + 1 only after it has folded round
/// g; so when round g + 2 reuses a set, every peer has folded round g out of it and received
/// this rank's round-g put (the copy engine is done with the staging slot). Every wait is
/// bounded and names the rank, peer and operation.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_port_allpairs(CollContext c, const char* input, char* output, uint64_t bytes,
                                 const PortChannelDeviceHandle* channels, char* scratch, uint64_t slot_bytes,
                                 uint64_t* state) {
  const uint32_t n = c.ranks, r = c.rank;
  if (bytes == 0) return;  // (the host launches none)
  if (n == 1) return port_single_rank(c, input, output, bytes);
  PortGrid grid(state, channels[(r + 1) % n].semaphore.wait);
  if (grid.driver && threadIdx.x != 0) return;
  const uint64_t rounds = div_ceil(bytes, slot_bytes);
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  auto slot = [&](uint64_t set, uint32_t j) { return (set * n + j) * slot_bytes; };

  if (grid.driver) {
    for (uint64_t round = 0; round < rounds; ++round) {
      const uint64_t len = min_u64(slot_bytes, bytes - round * slot_bytes);
      const uint64_t mine = slot((grid.base + round) % 2, r);
      if (!grid.all_arrived()) return;
      for (uint32_t k = 1; k < n; ++k) {
        if (!port_put_signal_split(channels[(r + k) % n], mine, mine, round_up16(len))) return;
      }
      for (uint32_t k = 1; k < n; ++k) {
        if (!port_wait(channels[(r + n - k) % n])) return;
      }
      grid.hand_off();
    }
  } else {
    for (uint64_t round = 0; round < rounds; ++round) {
      const uint64_t first = round * slot_bytes;
      const uint64_t len = min_u64(slot_bytes, bytes - first);
      const uint64_t set = (grid.base + round) % 2;
      uint64_t lo, hi;
      worker_slice(0, len, grid.worker, grid.workers, lo, hi);
      push_padded(scratch + slot(set, r), input + first, lo, hi, pre);  // premultiplied once, for all
      grid.arrive();
      if (!grid.take()) return;
      // Every rank's slot of the set, this rank's own included (the staging copy is its input,
      // premultiplied, and 16-byte aligned).
      const char* in[MAX_RANKS];
      for (uint32_t j = 0; j < n; ++j) in[j] = scratch + slot(set, j);
      char* out = output + first;
      reduce_range(in, n, lo, hi, finish, [&](uint64_t at, const uint4& v) {
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
        detail::store_words<4>(out + at, static_cast<uint32_t>(min_u64(16, hi - at)), words);
      });
    }
  }
  grid.save(rounds);
}
