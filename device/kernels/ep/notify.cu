// The notify phase of a dispatch, and the prologue of a cached dispatch or a combine: barriers
// between ranks around the exchange of counts and the reset of the counters peers write.
#include "common.cuh"

/// Zeroes this rank's dispatch channel words and tails (`dispatch`) or its combine tails.
/// Called by: every thread of one block, between two barriers (no peer writes them meanwhile).
__device__ __forceinline__ void reset_counters(const EpContext& c, bool dispatch) {
  const uint32_t n = kMaxRanks * c.max_channels;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (dispatch) {
      at<uint64_t>(c, c.rank, c.channel_info_offset)[i] = 0;
      at<uint64_t>(c, c.rank, c.dispatch_tail_offset)[i] = 0;
    } else {
      at<uint64_t>(c, c.rank, c.combine_tail_offset)[i] = 0;
    }
  }
}

/// channel_prefix_matrix row `dst`: per channel, the tokens of channels 0..=c going to `dst`.
/// Called by: every thread of one block (a warp per channel, then thread 0 sums).
__device__ __forceinline__ void channel_prefix(const EpNotifyArgs& a, uint32_t ranks, uint32_t dst) {
  extern __shared__ int channel_counts[];
  const bool* in_rank = reinterpret_cast<const bool*>(a.is_token_in_rank);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (uint32_t ch = warp; ch < a.channels; ch += warps) {
    const TokenRange r = channel_tokens(a.tokens, a.channels, ch);
    int n = 0;
    for (uint32_t t = r.begin + lane; t < r.end; t += 32) n += in_rank[uint64_t(t) * ranks + dst] ? 1 : 0;
    n = __reduce_add_sync(~0u, n);
    if (lane == 0) channel_counts[ch] = n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int sum = 0;
    int* out = reinterpret_cast<int*>(a.channel_prefix_matrix) + dst * a.channels;
    for (uint32_t ch = 0; ch < a.channels; ++ch) out[ch] = sum += channel_counts[ch];
  }
}

// Grid: 1 + ranks blocks of kSetupThreads, `channels` ints of dynamic shared memory. Block 0:
// barrier (every rank's previous EP kernels are done); write this rank's tokens per rank into
// every rank's count table, and its tokens for each rank's experts into that rank's expert
// table; reset the dispatch counters; barrier; sum the tables into rank_prefix_matrix and
// recv_counts. Block 1 + d: channel_prefix_matrix row d (local work, no peer).
extern "C" __global__ void __launch_bounds__(kSetupThreads) weft_ep_notify(EpContext c, EpNotifyArgs a) {
  if (blockIdx.x > 0) {
    channel_prefix(a, c.ranks, blockIdx.x - 1);
    return;
  }
  if (!barrier(c)) return;
  const uint32_t local = a.experts / c.ranks;
  const int* per_rank = reinterpret_cast<const int*>(a.num_tokens_per_rank);
  const int* per_expert = reinterpret_cast<const int*>(a.num_tokens_per_expert);
  for (uint32_t i = threadIdx.x; i < c.ranks * c.ranks; i += blockDim.x) {
    const uint32_t dst = i / c.ranks, r = i % c.ranks;
    at<int>(c, dst, c.rank_counts_offset)[c.rank * kMaxRanks + r] = per_rank[r];
  }
  for (uint32_t i = threadIdx.x; i < c.ranks * local; i += blockDim.x) {
    const uint32_t dst = i / local, e = i % local;
    at<int>(c, dst, c.expert_counts_offset)[c.rank * c.max_local_experts + e] = per_expert[i];
  }
  reset_counters(c, true);
  if (!barrier(c)) return;
  const int* counts = at<int>(c, c.rank, c.rank_counts_offset);
  int* prefix = reinterpret_cast<int*>(a.rank_prefix_matrix);
  int* recv = reinterpret_cast<int*>(a.recv_counts);
  for (uint32_t d = threadIdx.x; d < c.ranks; d += blockDim.x) {
    int sum = 0;
    for (uint32_t s = 0; s < c.ranks; ++s) prefix[s * c.ranks + d] = sum += counts[s * kMaxRanks + d];
    if (d == c.rank) recv[0] = sum;
  }
  const int* experts = at<int>(c, c.rank, c.expert_counts_offset);
  const int align = int(max(a.expert_alignment, 1u));
  for (uint32_t e = threadIdx.x; e < local; e += blockDim.x) {
    int sum = 0;
    for (uint32_t s = 0; s < c.ranks; ++s) sum += experts[s * c.max_local_experts + e];
    recv[1 + e] = (sum + align - 1) / align * align;
  }
}

// Grid: 1 block of kSetupThreads. Barrier, reset the dispatch counters (`dispatch` nonzero:
// before a cached-handle dispatch) or the combine tails (before a combine), barrier.
extern "C" __global__ void __launch_bounds__(kSetupThreads) weft_ep_prologue(EpContext c, uint32_t dispatch) {
  if (!barrier(c)) return;
  reset_counters(c, dispatch != 0);
  barrier(c);
}
