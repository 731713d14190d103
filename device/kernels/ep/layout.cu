// get_dispatch_layout: tokens per rank and per expert, and which ranks each token goes to.
#include "common.cuh"

/// Experts counted by one block.
constexpr uint32_t kLayoutExpertsPerBlock = 64;

// Grid: ceil(experts / 64) blocks each counting 64 experts over every top-k entry, then one
// block for the ranks (their counts and is_token_in_rank). kSetupThreads threads. Counts are
// integers summed in shared memory, so the result does not depend on the order of the adds.
extern "C" __global__ void __launch_bounds__(kSetupThreads) weft_ep_layout(EpLayoutArgs a) {
  __shared__ int counts[kLayoutExpertsPerBlock];
  for (uint32_t i = threadIdx.x; i < kLayoutExpertsPerBlock; i += blockDim.x) counts[i] = 0;
  __syncthreads();
  const int64_t* idx = reinterpret_cast<const int64_t*>(a.topk_idx);
  const uint32_t expert_blocks = (a.experts + kLayoutExpertsPerBlock - 1) / kLayoutExpertsPerBlock;
  if (blockIdx.x < expert_blocks) {
    const int64_t lo = int64_t(blockIdx.x) * kLayoutExpertsPerBlock;
    const int64_t hi = min(lo + int64_t(kLayoutExpertsPerBlock), int64_t(a.experts));
    for (uint64_t i = threadIdx.x; i < uint64_t(a.tokens) * a.topk; i += blockDim.x) {
      const int64_t e = idx[i];
      if (e >= lo && e < hi) atomicAdd(&counts[e - lo], 1);
    }
    __syncthreads();
    int* out = reinterpret_cast<int*>(a.num_tokens_per_expert);
    for (int64_t e = threadIdx.x; e < hi - lo; e += blockDim.x) out[lo + e] = counts[e];
    return;
  }
  const uint32_t per_rank = a.experts / a.ranks;
  bool* in_rank = reinterpret_cast<bool*>(a.is_token_in_rank);
  for (uint32_t t = threadIdx.x; t < a.tokens; t += blockDim.x) {
    uint32_t mask = 0;
    for (uint32_t k = 0; k < a.topk; ++k) {
      const int64_t e = idx[uint64_t(t) * a.topk + k];
      if (e >= 0) mask |= 1u << (e / per_rank);
    }
    for (uint32_t r = 0; r < a.ranks; ++r) {
      const bool in = (mask >> r) & 1u;
      in_rank[uint64_t(t) * a.ranks + r] = in;
      if (in) atomicAdd(&counts[r], 1);
    }
  }
  __syncthreads();
  if (threadIdx.x < a.ranks) reinterpret_cast<int*>(a.num_tokens_per_rank)[threadIdx.x] = counts[threadIdx.x];
}
