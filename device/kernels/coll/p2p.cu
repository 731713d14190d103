// Grouped send/receive.
#include "common.cuh"

// Grid: 2 x ranks directions x p2p_blocks blocks; direction 2p sends to p, 2p + 1 receives
// from p (direction 2 x rank is the local copy). Both ends of a pair derive the same
// semaphore blocks: the lower rank's sends use [0, K), the higher rank's [K, 2K). Slot of
// sender s in receiver d's scratch: `s * slot`, two halves used alternately. The receiver
// grants two credits up front and one per half it has drained while more remain; the sender
// spends one before each half, so signals and waits balance exactly per transfer.
extern "C" __global__ void __launch_bounds__(1024) weft_p2p(CollContext c, P2pPlan plan) {
  WEFT_TRACE_SCOPE(weft_p2p);
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
