// Synchronisation of the EP kernels: bounded acquire waits on a peer's counters, the barrier of
// every rank of the group, and named barriers of a warp group inside a block. Every wait gives
// up like all weft waits (weft/wait.cuh): it records rank, peer, phase (the WaitOp), expected
// and observed values in the communicator's error record and returns.
#pragma once
#include "weft/ep/buffer.cuh"
#include "weft/wait.cuh"

namespace weft {
namespace ep {

/// Spins until `*word >= target` (acquire, .sys) and returns the last value seen: below
/// `target` when the wait gave up (recorded as `op` waiting for `peer`). Called by: one thread.
__device__ __forceinline__ uint64_t acquire_at_least(const uint64_t* word, uint64_t target, const EpContext& c,
                                                     uint32_t peer, WaitOp op) {
  Spin spin;
  uint64_t seen;
  const WaitContext ctx = waiting_for(c, peer);
  while ((seen = ptx::ld_acquire_sys(word)) < target) {
    if (spin.expired(ctx)) {
      report_timeout(ctx, op, target, seen);
      return seen;
    }
  }
  return seen;
}

/// Barrier of every rank of the group. Called by: every thread of one block (at least `ranks`
/// threads). Thread r raises rank r's token for this rank (release, after a block barrier, so
/// the block's earlier writes are covered) and waits for rank r's (acquire); the block
/// barrier after it hands what the peers wrote before theirs to every thread. The consumed
/// count lives in this rank's buffer, so launches and graph replays continue it. False when a
/// wait gave up.
__device__ __forceinline__ bool barrier(const EpContext& c) {
  __syncthreads();
  bool ok = true;
  const uint32_t r = threadIdx.x;
  if (r < c.ranks && r != c.rank) {
    ptx::red_add_release_sys(at<uint64_t>(c, r, c.barrier_offset) + c.rank, 1);
    uint64_t* consumed = at<uint64_t>(c, c.rank, c.expected_offset) + r;
    const uint64_t target = *consumed + 1;
    *consumed = target;
    ok = acquire_at_least(at<uint64_t>(c, c.rank, c.barrier_offset) + r, target, c, r, WaitOp::EpBarrier) >= target;
  }
  return __syncthreads_and(ok);
}

/// Named barrier `id` (1..15) of the `threads` threads of one warp group. Called by: every
/// thread of the group.
__device__ __forceinline__ void group_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace ep
}  // namespace weft
