// The collectives that move bytes without reducing them (compiled once, for every type).
// Protocols (LL, HB) and their invariants: weft/collective.cuh.
//
//   weft_allgather_ll   every rank sends its block as packets to every peer.
//   weft_allgather_hb   every rank pushes its block into slot `rank` of every peer's scratch;
//                       each rank copies the slots out, in rounds; or (zero-copy, registered
//                       outputs) straight into block `rank` of every peer's output.
//   weft_broadcast_ll   the root sends its buffer as packets to every peer.
//   weft_broadcast_hb   scatter + all-gather through scratch: the root pushes shard i to the
//                       i-th other rank, which pushes it to the others, so the root sends each
//                       byte once instead of once per peer; rounds pipelined over three buffers.
//   weft_p2p            grouped send/receive: per (peer, direction) a set of blocks moves the
//                       bytes through a double-buffered slot of the receiver's scratch, with
//                       credits, so sends and receives of one group progress together.
#include "weft/collective.cuh"

using namespace weft;
using namespace weft::coll;

extern "C" __global__ void __launch_bounds__(512)
    weft_allgather_ll(CollContext c, const char* input, char* output, uint64_t block_bytes) {
  LlRound round;
  if (!ll_round_begin(c, round)) return;
  const LlRange range(packet_count<Ll16>(block_bytes));
  ll_put(c, round, c.rank, input, block_bytes, range, [](uint32_t) { return true; });
  ll_copy_local(output + c.rank * block_bytes, input, block_bytes, range);
  bool ok = true;
  for (uint32_t k = 1; k < c.ranks && ok; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ok = ll_get(c, round, d, d, output + d * block_bytes, block_bytes, range);
  }
  ll_round_end(c, round);
}

// Rounds of `slot` bytes: barrier, push this rank's block into slot `rank` of every peer's
// scratch, barrier, copy every peer's slot out. Zero-copy (`outputs` set: every rank's
// registered output, block_bytes a multiple of 16 so every destination is 16-aligned and no
// store is partial): one round pushes straight into block `rank` of every peer's output, with
// the same two barriers (the peer has entered, so its output is free; every peer is done
// writing before anyone returns) and nothing to copy out. In place, peers write only blocks
// other than the one this rank reads.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allgather_hb(CollContext c, const char* input, char* output, uint64_t block_bytes, PeerBuffers outputs) {
  const uint32_t ranks = c.ranks, rank = c.rank;
  const bool zero_copy = peer_buffer(outputs, rank) != nullptr;
  const uint64_t slot = zero_copy ? round_up16(block_bytes) : (2 * c.chunk_bytes / ranks) & ~uint64_t(15);
  for (uint64_t first = 0; first < block_bytes; first += slot) {
    if (!hb_barrier(c)) return;
    const Shards s(min_u64(slot, block_bytes - first), round_capacity(block_bytes, slot), 1);
    const uint64_t lo = s.lo(0), hi = s.hi(0);
    for (uint32_t k = 1; k < ranks; ++k) {
      const uint32_t d = (rank + k) % ranks;
      char* to = zero_copy ? peer_buffer(outputs, d) + rank * block_bytes + first
                           : scratch_of(c, d) + rank * slot;
      push_padded(to, input + first, lo, hi);
    }
    copy_range(output + rank * block_bytes + first, input + first, lo, hi);
    if (!hb_barrier(c)) return;
    for (uint32_t k = 1; k < ranks && !zero_copy; ++k) {
      const uint32_t d = (rank + k) % ranks;
      copy_range(output + d * block_bytes + first, reinterpret_cast<const char*>(c.scratch) + d * slot, lo, hi);
    }
  }
}

extern "C" __global__ void __launch_bounds__(512)
    weft_broadcast_ll(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  LlRound round;
  if (!ll_round_begin(c, round)) return;
  const LlRange range(packet_count<Ll16>(bytes));
  if (c.rank == root) {
    ll_put(c, round, root, input, bytes, range, [](uint32_t) { return true; });
    ll_copy_local(output, input, bytes, range);
  } else {
    ll_get(c, round, root, root, output, bytes, range);
  }
  ll_round_end(c, round);
}

// Scatter + all-gather through scratch, pipelined over three scratch buffers. The i-th rank
// after the root owns shard i of every round. Step j (each begins with a barrier): the root
// pushes shard i of round j into rank i's buffer j % 3 (and copies its own output); every
// non-root pushes its shard of round j - 1 into the other non-roots' buffer (j - 1) % 3, and
// copies round j - 2 out of buffer (j - 2) % 3. The three stages of consecutive rounds run at
// once, and a buffer is written again (round j + 3) only after the step that copied it out.
// Small messages take one round (three steps, as unpipelined); large ones at least 8 rounds.
extern "C" __global__ void __launch_bounds__(1024)
    weft_broadcast_hb(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  const uint32_t ranks = c.ranks, rank = c.rank;
  if (ranks == 1) {
    const Shards s(bytes, bytes, 1);
    copy_range(output, input, s.lo(0), s.hi(0));
    return;
  }
  constexpr uint64_t kMinRound = 4ull << 20;
  const uint32_t owners = ranks - 1;
  auto owner = [&](uint32_t i) { return (root + 1 + i) % ranks; };
  const uint32_t mine = (rank + ranks - root - 1) % ranks;  // my shard (non-roots)
  // Buffers and rounds are multiples of 16 x owners, so the shards of a full round tile it
  // exactly and never spill into the next buffer.
  const uint64_t unit = 16ull * owners;
  const uint64_t buffer = (2 * c.chunk_bytes / 3) / unit * unit;
  const uint64_t wanted = div_ceil(bytes, 8) > kMinRound ? div_ceil(bytes, 8) : kMinRound;
  const uint64_t round = min_u64(buffer, div_ceil(wanted, unit) * unit);
  const uint64_t rounds = div_ceil(bytes, round), capacity = round_capacity(bytes, round);
  auto shards = [&](uint64_t j) { return Shards(min_u64(round, bytes - j * round), capacity, owners); };
  auto buffer_of = [&](uint32_t r, uint64_t j) { return scratch_of(c, r) + (j % 3) * buffer; };
  for (uint64_t j = 0; j < rounds + 2; ++j) {
    if (!hb_barrier(c)) return;
    if (rank == root) {
      if (j < rounds) {
        const Shards s = shards(j);
        const uint64_t first = j * round;
        for (uint32_t i = 0; i < owners; ++i) {
          push_padded(buffer_of(owner(i), j), input + first, s.lo(i), s.hi(i));
          copy_range(output + first, input + first, s.lo(i), s.hi(i));
        }
      }
      continue;
    }
    if (j >= 1 && j - 1 < rounds) {
      const Shards s = shards(j - 1);
      for (uint32_t i = 1; i < owners; ++i) {
        push_padded(buffer_of(owner((mine + i) % owners), j - 1), buffer_of(rank, j - 1), s.lo(mine), s.hi(mine));
      }
    }
    if (j >= 2) {
      const Shards s = shards(j - 2);
      const uint64_t first = (j - 2) * round;
      for (uint32_t i = 0; i < owners; ++i) copy_range(output + first, buffer_of(rank, j - 2), s.lo(i), s.hi(i));
    }
  }
}

// Grid: 2 x ranks directions x p2p_blocks blocks; direction 2p sends to p, 2p + 1 receives
// from p (direction 2 x rank is the local copy). Both ends of a pair derive the same
// semaphore blocks: the lower rank's sends use [0, K), the higher rank's [K, 2K). Slot of
// sender s in receiver d's scratch: `s * slot`, two halves used alternately. The receiver
// grants two credits up front and one per half it has drained while more remain; the sender
// spends one before each half, so signals and waits balance exactly per transfer.
extern "C" __global__ void __launch_bounds__(1024) weft_p2p(CollContext c, P2pPlan plan) {
  const uint32_t blocks = c.p2p_blocks;
  const uint32_t direction = blockIdx.x / blocks, j = blockIdx.x % blocks;
  const uint32_t peer = direction / 2;
  const bool sending = direction % 2 == 0;
  if (peer >= c.ranks) return;
  const uint64_t bytes = sending ? plan.send_bytes[peer] : plan.recv_bytes[peer];
  if (bytes == 0) return;
  if (peer == c.rank) {
    if (sending) {
      const uint64_t sub = round_up16(div_ceil(bytes, blocks));
      const uint64_t lo = min_u64(j * sub, bytes), hi = min_u64(lo + sub, bytes);
      copy_range(reinterpret_cast<char*>(plan.recv_ptr[peer]), reinterpret_cast<const char*>(plan.send_ptr[peer]),
                 lo, hi);
    }
    return;
  }
  const uint32_t src = sending ? c.rank : peer, dst = sending ? peer : c.rank;
  const SemaphoreDeviceHandle& s = semaphore(c, peer, (src < dst ? 0 : blocks) + j);
  const uint64_t slot = (2 * c.chunk_bytes / c.ranks) & ~uint64_t(31);
  const uint64_t half = slot / 2;
  char* box = scratch_of(c, dst) + src * slot;
  const uint64_t halves = div_ceil(bytes, half);
  const bool leader = threadIdx.x == 0;
  if (!sending && leader) {
    for (uint64_t h = 0; h < halves && h < 2; ++h) semaphore_signal(s);
  }
  for (uint64_t h = 0; h < halves; ++h) {
    const uint64_t first = h * half;
    const uint64_t n = min_u64(half, bytes - first);
    // Sub-slices sized from a full half (see Shards): block j owns the same ranges every half.
    const uint64_t sub = round_up16(div_ceil(round_capacity(bytes, half), blocks));
    const uint64_t lo = min_u64(j * sub, n), hi = min_u64(lo + sub, n);
    char* window = box + (h % 2) * half;
    bool ok = true;
    if (leader) ok = semaphore_wait(s);  // sender: a credit; receiver: the data
    if (!__syncthreads_and(ok)) return;
    if (sending) {
      copy_range(window, reinterpret_cast<const char*>(plan.send_ptr[peer]) + first, lo, hi);
    } else {
      copy_range(reinterpret_cast<char*>(plan.recv_ptr[peer]) + first, window, lo, hi);
    }
    __syncthreads();
    if (leader && (sending || h + 2 < halves)) semaphore_signal(s);
  }
}
