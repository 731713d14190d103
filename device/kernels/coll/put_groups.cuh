// What the AllReduces on the GIN device API across nodes (nvrar.cu, two_phase.cu) share: a
// round's shard dealt to a few groups of blocks, each group's range leaving as one put through
// the proxy, made by the last block of the group to have written its part.
#pragma once
#include "reducing.cuh"

/// A call of `bytes` in rounds of at most `round_bytes` (a multiple of 16): `count` rounds of
/// `size` bytes but the last, which may be shorter. Every round has the same size, so every
/// round deals its shard to the blocks alike, and that size is a multiple of 16, so every round
/// starts on a whole element (and a 16-byte boundary of the buffers).
struct CallRounds {
  uint64_t count, size;
  __device__ __forceinline__ CallRounds(uint64_t bytes, uint64_t round_bytes) {
    size = round_up16(div_ceil(bytes, div_ceil(bytes, round_bytes)));
    count = div_ceil(bytes, size);
  }
};

/// Where a block works in a round of `units` units (LL packets, 16-byte vectors): the blocks
/// form at most `kMaxPuts` groups; group k packs and receives put k's range `[put_lo, put_hi)`,
/// each block its own part `[lo, hi)` of it; `active` blocks of the group have a part. Puts
/// carry at least `min_put` units (a small round is one put) and block parts at least
/// `min_block`, both multiples of 32 units once rounded. The same on every rank.
template <uint32_t kMaxPuts>
struct PutGroups {
  uint64_t put, put_lo, put_hi, lo, hi;
  uint32_t groups, group, active;

  __device__ __forceinline__ PutGroups(uint64_t units, uint64_t min_put, uint64_t min_block) {
    groups = gridDim.x < kMaxPuts ? gridDim.x : kMaxPuts;
    const uint32_t per_group = gridDim.x / groups;
    group = blockIdx.x / per_group;
    put = round_up32(max_u64(min_put, div_ceil(units, groups)));
    put_lo = min_u64(group * put, units);
    put_hi = group < groups ? min_u64(put_lo + put, units) : put_lo;
    const uint64_t part = round_up32(max_u64(min_block, div_ceil(put_hi - put_lo, per_group)));
    lo = min_u64(put_lo + (blockIdx.x % per_group) * part, put_hi);
    hi = min_u64(lo + part, put_hi);
    active = static_cast<uint32_t>(div_ceil(put_hi - put_lo, part));
  }
  /// Whether group `k` has units to move this round (`units` as constructed).
  __device__ __forceinline__ bool carries(uint32_t k, uint64_t units) const { return k < groups && k * put < units; }
  __device__ __forceinline__ static uint64_t round_up32(uint64_t n) { return (n + 31) & ~uint64_t(31); }
  __device__ __forceinline__ static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
};

/// Block-wide: whether this block is the last of its group to have its part written, counted
/// on `counter` (one per use that can be in flight at once: the callers keep one per group,
/// window parity and step); that block puts the group's whole range. The last arriver sets the
/// counter back to 0 before the put leaves; the callers show that the counter's next use comes
/// after the put was answered, so no arrival is lost. Called by every thread.
template <uint32_t kMaxPuts>
__device__ __forceinline__ bool put_groups_last_to_arrive(const PutGroups<kMaxPuts>& range, uint64_t* counter) {
  if (range.active == 1) return true;
  __syncthreads();  // the block's writes before thread 0's release
  bool last = false;
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned long long* count = reinterpret_cast<unsigned long long*>(counter);
    last = atomicAdd(count, 1ull) + 1 == range.active;
    if (last) {
      atomicExch(count, 0ull);
      __threadfence();  // the other blocks' writes (seen through the counter) before the put
    }
  }
  return __syncthreads_or(last) != 0;
}
