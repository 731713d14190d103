// The pipelined chain that Broadcast and Reduce run ("chain"): the ranks in the order `first`,
// `first + 1`, ... (mod n) pass the message down in steps, each step through one of
// kChainSlots slots in the next rank's scratch. Every block owns the same sub-range of every
// step and a semaphore per neighbour (the HB table's (peer, block) entry), over which data
// goes down and credits come back: a rank writes a slot only after the next rank has granted
// it, and grants it again once it has drained it. So a call needs no barrier at all: the next
// rank grants its first slots when its kernel starts, after its previous kernel (the last
// reader of its scratch) has ended. Each pair's signals and waits balance exactly in a call,
// so the table stays in step for the HB kernels that share it. With n ranks a step crosses
// n - 1 links one after another, while the links carry different steps at once: the time is
// about bytes / link bandwidth plus (n - 2) steps, against three barrier-separated phases per
// round for the scatter + all-gather.
#pragma once
#include "common.cuh"

constexpr uint32_t kChainSlots = 4;
/// The cost model that picks the step count: each step costs a block about kChainStepNs of
/// hand-off (its release after its stores, the next rank's acquire) besides its bytes at
/// kChainBytesPerNs; on 4×H100, 8 steps of 128-512 KiB took 4-5 µs each whatever their size.
/// With s steps over n - 1 links the call takes about (s + n - 2) (kChainStepNs + bytes /
/// (s kChainBytesPerNs)), least at s = sqrt((n - 2) bytes / (kChainBytesPerNs kChainStepNs)):
/// one step at 2 ranks (no link waits for another), more as the chain grows and the message
/// with it; at least as many as the slots need (each at most a quarter of the scratch).
constexpr double kChainStepNs = 4500.0, kChainBytesPerNs = 350.0;
/// The least a block moves per step: fewer blocks for small steps.
constexpr uint64_t kChainBlockBytes = 4096;

/// How a message of `bytes` splits into steps and blocks; the same at every rank of the call.
struct ChainGeometry {
  uint64_t step, steps, sub;
  uint32_t blocks;
  __device__ __forceinline__ ChainGeometry(uint64_t bytes, uint32_t ranks, uint64_t scratch_bytes) {
    const uint64_t cap = scratch_bytes / kChainSlots;
    const double hops = ranks > 2 ? ranks - 2 : 0;
    const uint64_t best = static_cast<uint64_t>(sqrt(hops * bytes / (kChainBytesPerNs * kChainStepNs)) + 0.5);
    const uint64_t fewest = div_ceil(bytes, cap);
    const uint64_t wanted = round_up16(div_ceil(bytes, best > fewest ? best : fewest));
    const uint64_t busy = wanted / kChainBlockBytes;
    blocks = static_cast<uint32_t>(busy < 1 ? 1 : min_u64(busy, gridDim.x));
    // 16-byte multiples, and a whole step within a slot (cap >= 16 x blocks: see chunk_ok).
    sub = min_u64(round_up16(div_ceil(wanted, blocks)), (cap / blocks) & ~uint64_t(15));
    step = sub * blocks;
    steps = div_ceil(bytes, step);
  }
};

/// Runs this rank's part of the chain: for every step, `move(at, len, from, to)` moves bytes
/// `[at, at + len)` of the message (len may be 0 in the last step), reading the previous
/// rank's data from `from` (this rank's slot; null at the head) and writing the next rank's
/// into `to` (its slot, 16-aligned and padded to 16 bytes: pushes of whole vectors only; null
/// at the tail). Called by: every thread of every block. False on a timeout (reported).
template <typename Move>
__device__ __forceinline__ bool chain(const CollContext& c, uint32_t first, uint64_t bytes, const Move& move) {
  const uint32_t n = c.ranks, position = (c.rank + n - first) % n;
  const ChainGeometry g(bytes, n, 2 * c.chunk_bytes);
  if (blockIdx.x >= g.blocks) return true;
  const bool receives = position > 0, sends = position + 1 < n;
  const uint32_t next = (c.rank + 1) % n;
  const SemaphoreDeviceHandle& up = semaphore(c, (c.rank + n - 1) % n, blockIdx.x);
  const SemaphoreDeviceHandle& down = semaphore(c, next, blockIdx.x);
  const bool leader = threadIdx.x == 0;
  if (receives && leader) {
    for (uint64_t h = 0; h < g.steps && h < kChainSlots; ++h) semaphore_signal(up);
  }
  for (uint64_t h = 0; h < g.steps; ++h) {
    bool ok = true;
    if (leader && receives) ok = semaphore_wait(up);    // the previous rank's step h
    if (leader && sends && ok) ok = semaphore_wait(down);  // a free slot at the next rank
    if (!__syncthreads_and(ok)) return false;
    const uint64_t at = h * g.step + blockIdx.x * g.sub;
    const uint64_t len = at < bytes ? min_u64(g.sub, bytes - at) : 0;
    const uint64_t slot = (h % kChainSlots) * g.step + blockIdx.x * g.sub;
    move(at, len, receives ? scratch_of(c, c.rank) + slot : nullptr, sends ? scratch_of(c, next) + slot : nullptr);
    __syncthreads();
    if (leader) {
      if (sends) semaphore_signal(down);
      if (receives && h + kChainSlots < g.steps) semaphore_signal(up);
    }
  }
  return true;
}
