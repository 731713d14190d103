// What the four low-latency kernels (ll_dispatch.cu, ll_combine.cu) share: their shapes, the
// phase sequences, the end of a launch, and the even split of a launch's work over its warps.
//
// Low-latency dispatch and combine (DeepEP's decoding path) are each a send kernel and a
// receive kernel: run back to back, or the receive later as the hook. Senders never wait, so
// neither kernel can deadlock however ranks share SMs.
//
// Every rank keeps, in its own buffer, a sequence per phase (dispatch send, dispatch receive,
// combine send, combine receive), advanced by the last block of each launch: launch i of a
// phase uses half i % 2 of its regions and tags its signals i + 1. Graph replays continue the
// sequences on the device; no signal is ever reset. A rank can run at most one call ahead of a
// peer's receive (its own receive waits for every peer's send of the same call), so a half is
// never written while a peer still reads it, provided each rank receives a call before it
// sends the call after next (DeepEP's rule of at most two calls' results held at once).
//
// Each kernel spreads its bytes evenly over every warp of the grid (a warp's share is a
// contiguous run of a flat stream of rows), so the busiest warp moves about total / warps.
// The kernels may be launched as programmatic dependents of the previous kernel on the stream:
// each first waits for that grid (ll_kernel_begin) and lets the next one be scheduled once its
// own work is issued (ll_release_dependents).
//
// Between nodes (docs/ep.md, "Low latency between nodes") the same kernels reach the ranks of
// other nodes through weft::Gin: what goes there is stored into this rank's send regions
// instead of the peer's receive regions, and after finish_phase one thread per such rank puts
// the runs and raises that rank's signal of the phase once per put (a bare signal where a run
// is empty), all on the signal's connection, so nothing waits for the network. The receiver
// waits until the peer's share of the signal counts every put of the call, which covers their
// data. On one node EpLlNet's handle is zero: no rank is remote, the one-node kernels are
// launched, and they hold none of this code.
#pragma once
#include <cuda_fp8.h>

#include "common.cuh"
#include "sum_rows.cuh"
#include "weft/gin.cuh"

/// Threads of a low-latency block.
constexpr uint32_t kLlThreads = 512;
constexpr uint32_t kLlWarps = kLlThreads / 32;
/// Most experts of a call (weft-ep's `LL_MAX_EXPERTS`, kept equal by a test).
constexpr uint32_t kLlMaxExperts = 1024;
/// Most top-k slots of a token (weft-ep's `MAX_TOPK`, kept equal by a test).
constexpr uint32_t kMaxTopk = 32;
/// Phases, and their entries in the state words (sequence at `phase`, block count at 4 + phase).
constexpr uint32_t kDispatchSend = 0, kDispatchRecv = 1, kCombineSend = 2, kCombineRecv = 3;
/// State words before the dispatch's per-expert totals (`uint32_t[kLlMaxExperts]`, see
/// ll_dispatch.cu), in the same region of the buffer.
constexpr uint32_t kLlStateWords = 8;
/// Bytes of a dispatch message's header (the token index, then padding).
constexpr uint32_t kLlHeaderBytes = 16;
/// 16-byte elements a lane of a low-latency copy has in flight per round: 8 KiB per warp for
/// the dispatch receive's local copy; 4 KiB for the combine send, whose peer addresses need
/// more registers (16 spill) and whose bytes are bound by NVLink, not by round trips.
constexpr uint32_t kLlCopyUnroll = 8, kLlSendUnroll = 8;

/// The device communicator's signal of each phase that puts (weft-ep's `LL_SIGNALS`).
constexpr uint32_t kLlDispatchSignal = 0, kLlCombineSignal = 1;
/// Increments of a phase's signal a rank of another node makes per call: the dispatch puts its
/// packed messages (or a bare signal) and its row of counts, the combine its packed rows (or a
/// bare signal).
constexpr uint32_t kLlDispatchPuts = 2, kLlCombinePuts = 1;
/// Most ranks of an EP buffer (`EpContext::peers`).
constexpr uint32_t kMaxEpRanks = sizeof(EpContext::peers) / sizeof(EpContext::peers[0]);

/// Whether rank `r` is on another node (reached by puts; its buffer is not mapped here).
__device__ __forceinline__ bool ll_remote(const EpLlNet& n, uint32_t r) { return gin_is_proxy_peer(n.gin, r); }

/// Waits (bounded, acquire) until rank `r` of another node raised this rank's signal `signal`
/// `puts` times per call for `calls` calls (the phase's sequence + 1): every put of its call
/// has landed. The failure names `r` and `op`. Called by: any thread.
__device__ __forceinline__ bool ll_wait_remote(const EpContext& c, const EpLlNet& n, uint32_t r, uint32_t signal,
                                               uint64_t calls, uint64_t puts, WaitOp op) {
  return acquire_at_least(gin_proxy_signal_word(n.gin, r, signal), calls * puts, c, r, op) >= calls * puts;
}

/// The start of every low-latency kernel, before it touches memory: waits for the previous
/// grid on the stream to end (a no-op unless this one was launched early). Called by: every
/// thread.
__device__ __forceinline__ void ll_kernel_begin() {
  ptx::grid_dependency_wait();
  WEFT_TRACE_MARK(grid_wait);
}

/// Lets the next kernel on the stream be scheduled (it still waits for this whole grid to end
/// before touching memory). Called by: every thread of a block, once the block's copies are
/// issued, so the next kernel's blocks take SMs only for this grid's tail.
__device__ __forceinline__ void ll_release_dependents() { ptx::launch_dependents(); }

/// The current sequence of `phase`. Called by: any thread, before the block's work.
__device__ __forceinline__ uint64_t phase_sequence(const uint64_t* state, uint32_t phase) {
  return *reinterpret_cast<const volatile uint64_t*>(state + phase);
}

/// Called by every thread of every block at its end: the last block of the launch advances
/// `phase`'s sequence (the next launch on the stream sees it) and gets true in every thread.
/// Each block's stores (peers' buffers included) are ordered before its arrival by a block
/// barrier and a system-scope fence; the last block fences again after seeing every arrival,
/// so a release store it makes afterwards covers every block's stores.
__device__ __forceinline__ bool finish_phase(uint64_t* state, uint32_t phase) {
  __shared__ uint32_t last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    unsigned long long* blocks = reinterpret_cast<unsigned long long*>(state + 4 + phase);
    last = atomicAdd(blocks, 1ull) == gridDim.x - 1;
    if (last != 0) {
      *blocks = 0;
      state[phase] += 1;
      __threadfence_system();
    }
  }
  __syncthreads();
  WEFT_TRACE_MARK(finish);
  return last != 0;
}

/// Part `part` of `parts` even parts of `total` units: `[share(part), share(part + 1))`.
__device__ __forceinline__ uint64_t share(uint64_t total, uint64_t part, uint64_t parts) {
  return total * part / parts;
}

/// This warp's number among the grid's warps, and their count.
__device__ __forceinline__ uint32_t grid_warp() { return blockIdx.x * kLlWarps + threadIdx.x / 32; }
__device__ __forceinline__ uint32_t grid_warps() { return gridDim.x * kLlWarps; }

/// Replaces `v[0..n)` (shared memory, n <= 2 * kLlThreads) by its exclusive prefix sums and
/// returns the total; `v[n]` gets the total too (the array has n + 1 entries). Called by:
/// every thread of the block.
__device__ __forceinline__ uint32_t block_exclusive_scan(uint32_t* v, uint32_t n) {
  __shared__ uint32_t warp_totals[kLlWarps];
  const uint32_t t = threadIdx.x, lane = t % 32, warp = t / 32;
  const uint32_t a = 2 * t < n ? v[2 * t] : 0, b = 2 * t + 1 < n ? v[2 * t + 1] : 0;
  uint32_t inclusive = a + b;
#pragma unroll
  for (uint32_t d = 1; d < 32; d *= 2) {
    const uint32_t up = __shfl_up_sync(~0u, inclusive, d);
    if (lane >= d) inclusive += up;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  uint32_t before = 0, total = 0;
#pragma unroll
  for (uint32_t w = 0; w < kLlWarps; ++w) {
    before += w < warp ? warp_totals[w] : 0;
    total += warp_totals[w];
  }
  const uint32_t exclusive = before + inclusive - a - b;
  if (2 * t < n) v[2 * t] = exclusive;
  if (2 * t + 1 < n) v[2 * t + 1] = exclusive + a;
  if (t == 0) v[n] = total;
  __syncthreads();
  return total;
}

// One kernel per topology: each low-latency body is a `template <bool kNet>` struct with a
// `static run(c, a, n)`, and each instantiation is a kernel of its own holding only that body:
// `<false>` is `weft_ep_ll_<phase>` for a group on one node, `<true>` `weft_ep_ll_<phase>_net`
// for a group spanning nodes. The host launches the `_net` kernel exactly when the device
// communicator names a proxy peer (`LlTopology::of` in weft-ep's launch.rs).

/// Whether rank `r` is on another node, in a kernel body built for a group spanning nodes
/// (`kNet`) or for one node (never: the one-node body keeps none of the network path's code).
template <bool kNet>
__device__ __forceinline__ bool ll_is_remote(const EpLlNet& n, uint32_t r) {
  return kNet && ll_remote(n, r);
}

/// The network path's shared words (`kLlMaxExperts + 1`), launched as dynamic shared memory
/// only with the `_net` kernels (`LlTopology::shared_bytes` on the host), so the one-node
/// kernels keep their shared memory.
__device__ __forceinline__ uint32_t* ll_net_words() {
  extern __shared__ uint32_t ll_net_shared[];
  return ll_net_shared;
}

/// Slot k's expert of token `t` where `valid`, else -1 (also for a negative or out-of-range
/// index). The load itself is unconditional, from slot 0 of token `fallback` (a valid token)
/// when not `valid`: a load under a branch is waited for inside it, so loads in branches go
/// one round trip at a time, while these are all in flight together.
template <typename Args>
__device__ __forceinline__ int routed_expert(const Args& a, uint32_t t, uint32_t k, bool valid,
                                             uint32_t fallback) {
  const uint64_t i = valid ? uint64_t(t) * a.topk + k : uint64_t(fallback) * a.topk;
  const int64_t e = reinterpret_cast<const int64_t*>(a.topk_idx)[i];
  return valid && e >= 0 && e < int64_t(a.experts) ? int(e) : -1;
}

/// Adds to `seen[e]` (shared) the tokens `[begin, end)` selecting expert e, each once (a token
/// naming an expert in several slots reaches it once). Called by: every thread of the block.
template <typename Args>
__device__ __forceinline__ void count_tokens(const Args& a, uint32_t begin, uint32_t end, uint32_t* seen) {
  for (uint32_t t = begin + threadIdx.x; t < end; t += blockDim.x) {
    int picks[kMaxTopk];
#pragma unroll
    for (uint32_t k = 0; k < kMaxTopk; ++k) picks[k] = routed_expert(a, t, k, k < a.topk, t);
#pragma unroll
    for (uint32_t k = 0; k < kMaxTopk; ++k) {
      bool first = picks[k] >= 0;
#pragma unroll
      for (uint32_t j = 0; j < k; ++j) first &= picks[j] != picks[k];
      if (first) atomicAdd(&seen[picks[k]], 1u);
    }
  }
}

/// Between nodes, where the messages (rows) of this rank's tokens for expert e sit in the
/// packed block of e's rank: `packed[e]` (shared, `experts + 1` words) becomes the number of
/// this rank's tokens selecting that rank's earlier experts (each token once per expert).
/// The dispatch send packs its messages so, and the combine receive finds the rows the
/// experts' ranks packed back in the same order. Called by: every thread of the block.
template <typename Args>
__device__ __forceinline__ void packed_prefix(const EpContext& c, const Args& a, uint32_t* packed) {
  __shared__ uint32_t before_rank[kMaxEpRanks];
  for (uint32_t e = threadIdx.x; e < a.experts; e += blockDim.x) packed[e] = 0;
  __syncthreads();
  count_tokens(a, 0, a.tokens, packed);
  __syncthreads();
  block_exclusive_scan(packed, a.experts);
  const uint32_t local = a.experts / c.ranks;
  if (threadIdx.x < c.ranks) before_rank[threadIdx.x] = packed[threadIdx.x * local];
  __syncthreads();
  for (uint32_t e = threadIdx.x; e < a.experts; e += blockDim.x) packed[e] -= before_rank[e / local];
  __syncthreads();
}

/// The segment holding `x` among `n` segments with ascending starts `starts[0..n]` (shared
/// memory, `starts[n]` the end): the last i < n with starts[i] <= x, so empty segments are
/// skipped. Called by: any thread.
__device__ __forceinline__ uint32_t find_segment(const uint32_t* starts, uint32_t n, uint64_t x) {
  uint32_t lo = 0, hi = n;  // starts[lo] <= x < starts[hi]
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (starts[mid] <= x) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}
