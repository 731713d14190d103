// Grouped send/receive: through scratch with credits (weft_p2p) and over LL packets
// (weft_p2p_ll). weft-coll gives each direction of a round to one of them by its byte count,
// which both ends of the direction know.
#include "common.cuh"

// Both kernels: direction 2p sends to peer p, 2p + 1 receives from p; direction 2 x rank is the
// local copy of `bytes` from `src` to `dst`, which its `blocks` blocks share in 16-byte-aligned
// parts (this is part j).
__device__ __forceinline__ void copy_share(char* dst, const char* src, uint64_t bytes, uint32_t j, uint32_t blocks) {
  const uint64_t sub = round_up16(div_ceil(bytes, blocks));
  const uint64_t lo = min_u64(j * sub, bytes), hi = min_u64(lo + sub, bytes);
  copy_range(dst, src, lo, hi);
}

// Grid: 2 x ranks directions x S slots of blocks (S = gridDim.x / (2 x ranks): p2p_blocks, or
// twice that in a wide launch). A direction runs on K = p2p_blocks blocks, or on 2 x p2p_blocks
// when it carries at least p2p_wide_mib MiB: K follows from the direction's bytes, which both
// ends know, and the host launches a wide grid wherever such a direction may be (weft-coll's
// p2p_launch_grid, only where the semaphore table holds 4 x p2p_blocks per peer). Both ends of
// a pair derive the same semaphore blocks: with k = p2p_blocks, a direction's first k blocks
// use [0, k) from the lower rank and [k, 2k) from the higher, and a wide direction's other k
// blocks [2k, 3k) and [3k, 4k): the two directions never share one, whatever their widths. Slot of
// sender s in receiver d's scratch: `s * slot`, two halves used alternately. The receiver
// grants two credits up front and one per half it has drained while more remain; the sender
// spends one before each half, so signals and waits balance exactly per transfer.
extern "C" __global__ void __launch_bounds__(1024) weft_p2p(CollContext c, P2pPlan plan) {
  WEFT_TRACE_SCOPE(weft_p2p);
  const uint32_t slots = gridDim.x / (2 * c.ranks);
  const uint32_t direction = blockIdx.x / slots, j = blockIdx.x % slots;
  const uint32_t peer = direction / 2;
  const bool sending = direction % 2 == 0;
  if (peer >= c.ranks) return;
  const uint64_t bytes = sending ? plan.send_bytes[peer] : plan.recv_bytes[peer];
  if (bytes == 0) return;
  const bool wide = c.p2p_wide_mib != 0 && bytes >= (uint64_t{c.p2p_wide_mib} << 20) && slots >= 2 * c.p2p_blocks &&
                    4 * c.p2p_blocks <= c.hb_blocks;
  const uint32_t blocks = wide ? 2 * c.p2p_blocks : c.p2p_blocks;
  if (j >= blocks) return;
  if (peer == c.rank) {
    if (sending) {
      copy_share(reinterpret_cast<char*>(plan.recv_ptr[peer]), reinterpret_cast<const char*>(plan.send_ptr[peer]),
                 bytes, j, blocks);
    }
    return;
  }
  const uint32_t src = sending ? c.rank : peer, dst = sending ? peer : c.rank;
  const uint32_t k = c.p2p_blocks, side = src < dst ? 0 : k;
  const SemaphoreDeviceHandle& s = semaphore(c, peer, j < k ? side + j : 2 * k + side + (j - k));
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

// Grid: 2 x ranks directions x `pairs.parts` blocks of at most 512 threads. Each (direction,
// part) is a lane of its own (LlPairLane in weft/collective.cuh): the sender stores its part of
// the message (LlDeal) as LL16 packets straight into its slot of the receiver's packet buffer,
// waiting for nothing but the receiver's token of the launch before last on this lane; the
// receiver polls them and stores the payload. No credit round trip, no fence: the packets'
// flags order everything, and each receiver reads each peer's packets as soon as that peer has
// stored them. Every direction fits a slot (weft-coll sends larger ones to weft_p2p).
extern "C" __global__ void __launch_bounds__(512) weft_p2p_ll(CollContext c, P2pPlan plan, LlPairs pairs) {
  WEFT_TRACE_SCOPE(weft_p2p_ll);
  ll_launch_begin();
  const uint32_t direction = blockIdx.x / pairs.parts, part = blockIdx.x % pairs.parts;
  const uint32_t peer = direction / 2;
  const bool sending = direction % 2 == 0;
  if (peer >= c.ranks) return;
  const uint64_t bytes = sending ? plan.send_bytes[peer] : plan.recv_bytes[peer];
  // An empty direction is empty at the peer's end too: its lane does not move.
  if (bytes == 0) return;
  if (peer == c.rank) {
    if (sending) {
      copy_share(reinterpret_cast<char*>(plan.recv_ptr[peer]), reinterpret_cast<const char*>(plan.send_ptr[peer]),
                 bytes, part, pairs.parts);
    }
    return;
  }
  const LlPairLane lane{pairs, peer, part, sending};
  const LlDeal deal{packet_count<Ll16>(bytes), part, pairs.parts};
  const char* input = reinterpret_cast<const char*>(plan.send_ptr[peer]);
  // A sender's first packet loads with the flag and the token (as ll_round_begin's).
  const auto first_input = [&] {
    const uint64_t j = deal.at(0);
    if (sending && j < deal.packets) ptx::prefetch_l1(input + j * Ll16::kPayloadBytes);
  };
  LlRound round;
  if (!ll_lane_begin(c, round, lane, first_input)) return;
  WEFT_TRACE_MARK(ll_begin);
  if (sending) {
    ll_put_dealt(lane.packets(c, round), input, bytes, deal, round);
    WEFT_TRACE_MARK(ll_puts);
  } else {
    ll_get_dealt(reinterpret_cast<char*>(plan.recv_ptr[peer]), lane.packets(c, round), bytes, deal, round,
                 channel(c, peer).semaphore.wait);
    WEFT_TRACE_MARK(ll_gets);
  }
  ll_lane_end(c, round, lane);
}
