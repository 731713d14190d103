// Ring AllReduce over PortChannels (MSCCL++ "2PR").
#include "port_grid.cuh"

/// The smallest piece a step's shard is cut into: a shard crosses the ring in as many pieces of
/// at least this size as it holds, up to one per channel of the edge, so that one piece's
/// reduction overlaps another's copy (and, over a network, the pieces' transfers run on
/// connections of their own). Each piece costs the proxy a command, several µs of driver
/// calls, more than the copy engine takes for 512 KiB, and over TCP a message's latency.
/// Mirrored by weft-coll's port_ring.
constexpr uint64_t kPortRingPieceBytes = uint64_t(512) << 10;

/// One round of the port ring as every block sees it: the round's bytes split into `ranks`
/// 16-byte-aligned shards (from the round capacity, the same in every round of a launch, so a
/// short last round leaves the tails empty), each step's shard in `pieces` 16-byte-aligned
/// pieces (1 to `lanes`, the channels per edge), and each piece in one 16-byte-aligned slice
/// per worker block. Piece h crosses on channel h. Mirrored by weft-coll's port_ring (the
/// tests).
struct RingRound {
  uint64_t len, shard;
  uint32_t pieces;
  __device__ __forceinline__ RingRound(uint64_t len_, uint64_t capacity, uint32_t ranks, uint32_t lanes)
      : len(len_),
        shard(round_up16(div_ceil(capacity, ranks))),
        pieces(shard < 2 * kPortRingPieceBytes
                   ? 1
                   : static_cast<uint32_t>(min_u64(lanes, shard / kPortRingPieceBytes))) {}
  /// Bytes [a, b) of piece h of shard d.
  __device__ __forceinline__ void piece(uint32_t d, uint32_t h, uint64_t& a, uint64_t& b) const {
    const uint64_t lo = min_u64(static_cast<uint64_t>(d) * shard, len);
    const uint64_t hi = min_u64(static_cast<uint64_t>(d + 1) * shard, len);
    const uint64_t sub = round_up16(div_ceil(hi - lo, pieces));
    a = min_u64(lo + h * sub, hi);
    b = min_u64(lo + (h + 1) * sub, hi);
  }
};

/// Ring AllReduce over PortChannels (MSCCL++ "2PR"): the reduce-scatter and all-gather of
/// weft_allreduce_ring, with every transfer a put-with-signal the proxy executes with the copy
/// engine. The GPU only reduces and copies out. Every shard is reduced once, in the native
/// ring's order, so every rank gets the same bits, run after run.
///
/// The grid is one driver block (block 0) and `gridDim.x - 1` workers (PortGrid); the driver's
/// thread 0 alone talks to the proxy, so a round costs the proxy one command per (step, piece):
/// each command costs the proxy's thread several µs of driver calls. The driver waits for the
/// previous rank's signals and hands each received piece to the workers; the workers reduce
/// their slices of the piece and arrive; once every worker arrived, the driver pushes the
/// piece's put (PortGrid). One pusher keeps each channel's commands in step order,
/// which the receiver's waits rely on (a signal covers its put only).
///
/// `channels` = {`lanes` channels of the edge rank -> next (puts, and on channel 0 the next
/// rank's credits), `lanes` of the edge prev -> rank (the previous rank's signals; credits go
/// back on channel 0)}. Piece h of a step crosses on channel h: over the copy engine every
/// channel to a peer shares one stream, over TCP each has its own sender thread and sockets.
/// `scratch` (registered with the proxy, < 4 GiB) holds two sets of 3n - 2 slots of
/// `slot_bytes` (>= any shard): 2(n - 1) receive slots (written only by the previous rank's
/// puts: reduce-scatter step s into slot s, the reduced shard into slot n - 1, all-gather
/// forwards into slots n..2n-3), then n staging slots (step s reduces into staging slot s; the
/// copy engine reads it from there). Rounds are counted over launches too, and round g uses set
/// g % 2, so round g + 1 starts while round g drains, across a launch boundary as well.
///
/// Credits: after round g a rank signals the previous one that its set g % 2 is free again, once
/// its workers have read the round's receive slots and, with 3 ranks or more, a flush of every
/// channel saw the round's forwards applied (they read receive slots). Before round g >= 2 the
/// driver waits for the next rank's credit of round g - 2; that credit also says the next rank
/// received every put of round g - 2, so the copy engine is done with this rank's staging slots
/// of the set. Rounds 0 and 1 find fresh scratch. So a launch of one round waits for a credit
/// signalled two rounds (usually two launches) earlier: no round trip on its critical path.
/// `state`: PortGrid's.
/// Inputs and outputs are read and written by this GPU's threads only (any alignment, no
/// registration); puts go between padded scratch slots, whole 16-byte vectors rounded up. Every
/// wait is bounded and names the rank, peer and operation.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_port_ring(CollContext c, const char* input, char* output, uint64_t bytes,
                             const PortChannelDeviceHandle* channels, uint32_t lanes, char* scratch,
                             uint64_t slot_bytes, uint64_t* state) {
  const uint32_t n = c.ranks, r = c.rank;
  if (bytes == 0) return;  // (the host launches none)
  if (n == 1) return port_single_rank(c, input, output, bytes);
  // Channel h of the edge to the next rank, and of the edge from the previous one; credits go
  // on channel 0.
  auto out_ch = [&](uint32_t h) -> const PortChannelDeviceHandle& { return channels[h]; };
  auto in_ch = [&](uint32_t h) -> const PortChannelDeviceHandle& { return channels[lanes + h]; };
  PortGrid grid(state, in_ch(0).semaphore.wait);
  if (grid.driver && threadIdx.x != 0) return;
  const uint32_t workers = grid.workers, w = grid.worker;
  const uint64_t base = grid.base;
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  const uint64_t capacity = round_capacity(bytes, c.chunk_bytes);
  const uint64_t rounds = div_ceil(bytes, c.chunk_bytes);
  const uint64_t set_bytes = static_cast<uint64_t>(3 * n - 2) * slot_bytes;
  const uint32_t staging = 2 * (n - 1);
  // Pieces per step, the same in every round of the launch (they depend on the capacity).
  const uint32_t pieces = RingRound(capacity, capacity, n, lanes).pieces;
  // Byte x of shard d in slot k of `set` is at offset `at(set, k, d, g) + x` of the scratch (slot
  // k positioned so that shard d's bytes index it directly).
  auto at = [&](uint64_t set, uint32_t k, uint32_t d, const RingRound& g) {
    return set * set_bytes + static_cast<uint64_t>(k) * slot_bytes - static_cast<uint64_t>(d) * g.shard;
  };

  if (grid.driver) {
    // A round's end: its workers are done with the receive slots and, with 3 ranks or more, a
    // flush saw its forwards applied (they read receive slots; 2 ranks forward nothing); then
    // its set is free again, two rounds later. The staging slots need no flush: the next
    // rank's credit for the round comes after it waited for every put of the round.
    auto finish = [&]() {
      bool done = grid.all_arrived();
      for (uint32_t h = 0; done && n > 2 && h < pieces; ++h) done = port_flush(out_ch(h));
      return done && port_signal(in_ch(0));
    };
    bool ok = true;
    for (uint64_t round = 0; ok && round < rounds; ++round) {
      const RingRound g(min_u64(capacity, bytes - round * capacity), capacity, n, lanes);
      const uint64_t set = (base + round) % 2;
      auto put = [&](uint32_t h, uint32_t from, uint32_t to, uint32_t d, uint64_t a, uint64_t b) {
        const uint64_t size = b > a ? round_up16(b) - a : 0;
        return port_put_signal_split(out_ch(h), at(set, to, d, g) + a, at(set, from, d, g) + a, size);
      };
      // The next rank's receive slots of this set are free; the workers may start the round.
      if (base + round >= 2 && !(ok = port_wait(out_ch(0)))) break;
      grid.hand_off();
      if (round > 0 && !(ok = finish())) break;
      for (uint32_t step = 0; ok && step < n; ++step) {
        const uint32_t d = (r + n - step) % n;
        for (uint32_t h = 0; ok && h < g.pieces; ++h) {
          uint64_t a, b;
          g.piece(d, h, a, b);
          if (step > 0) {
            if (!(ok = port_wait(in_ch(h)))) break;
            grid.hand_off();
          }
          ok = grid.all_arrived() && put(h, staging + step, step, d, a, b);
        }
      }
      for (uint32_t t = 1; ok && t < n; ++t) {
        const uint32_t d = (r + n - t + 1) % n;
        const uint32_t k = n - 2 + t;  // the receive slot of all-gather step t
        for (uint32_t h = 0; ok && h < g.pieces; ++h) {
          uint64_t a, b;
          g.piece(d, h, a, b);
          ok = port_wait(in_ch(h)) && (t == n - 1 || put(h, k, k + 1, d, a, b));
          if (ok) grid.hand_off();
        }
      }
    }
    if (!ok || !finish()) return;
  } else {
    for (uint64_t round = 0; round < rounds; ++round) {
      const uint64_t first = round * capacity;
      const RingRound g(min_u64(capacity, bytes - first), capacity, n, lanes);
      const uint64_t set = (base + round) % 2;
      const char* in = input + first;
      char* out = output + first;
      auto slot = [&](uint32_t k, uint32_t d) { return scratch + at(set, k, d, g); };
      if (!grid.take()) return;
      for (uint32_t step = 0; step < n; ++step) {
        const uint32_t d = (r + n - step) % n;
        const bool last = step == n - 1;
        for (uint32_t h = 0; h < g.pieces; ++h) {
          uint64_t a, b, lo, hi;
          g.piece(d, h, a, b);
          worker_slice(a, b, w, workers, lo, hi);
          if (step > 0 && !grid.take()) return;
          ring_reduce(step > 0 ? slot(step - 1, d) : nullptr, in, slot(staging + step, d), last ? out : nullptr, lo,
                      hi, last ? finish : Fin::partial(), pre);
          grid.arrive();
        }
      }
      for (uint32_t t = 1; t < n; ++t) {
        const uint32_t d = (r + n - t + 1) % n;
        for (uint32_t h = 0; h < g.pieces; ++h) {
          uint64_t a, b, lo, hi;
          g.piece(d, h, a, b);
          worker_slice(a, b, w, workers, lo, hi);
          if (!grid.take()) return;
          copy_range(out, slot(n - 2 + t, d), lo, hi);
        }
      }
      grid.arrive();  // the round's receive slots are read
    }
  }
  grid.save(rounds);
}
