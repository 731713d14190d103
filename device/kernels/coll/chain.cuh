// The pipelined chain that Broadcast and Reduce run ("chain"): the ranks in the order `first`,
// `first + 1`, ... (mod n) pass the message down in steps, each step through one of
// kChainSlots slots in the next rank's scratch. Every block owns the same sub-range of every
// step and a semaphore per neighbour (the HB table's (peer, block) entry), over which data
// goes down and credits come back: a rank writes a slot only after the next rank has granted
// it, and grants it again once it has drained it. So a call needs no barrier at all: the next
// rank grants its first slots when its kernel starts, after its previous kernel (the last
// reader of its scratch) has ended (the scratch rule of weft/collective.cuh). Each pair's
// signals and waits balance exactly in a call, so the table stays in step for the HB kernels
// that share it. With n ranks a step crosses
// n - 1 links one after another, while the links carry different steps at once: the time is
// about bytes / link bandwidth plus (n - 2) steps, against three barrier-separated phases per
// round for the scatter + all-gather.
#pragma once
#include "chain_geometry.cuh"
#include "common.cuh"

/// Runs this rank's part of the chain: for every step, `move(at, len, from, to)` moves bytes
/// `[at, at + len)` of the message (len may be 0 in the last step), reading the previous
/// rank's data from `from` (this rank's slot; null at the head) and writing the next rank's
/// into `to` (its slot, 16-aligned and padded to 16 bytes: pushes of whole vectors only; null
/// at the tail). Called by: every thread of every block. False on a timeout (reported).
template <typename Move>
__device__ __forceinline__ bool chain(const CollContext& c, uint32_t first, uint64_t bytes, const Move& move) {
  const uint32_t n = c.ranks, position = (c.rank + n - first) % n;
  const ChainGeometry g(bytes, n, 2 * c.chunk_bytes, gridDim.x);
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
