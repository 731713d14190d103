// Low-latency dispatch and combine (DeepEP's decoding path), each a send kernel and a receive
// kernel: run back to back, or the receive later as the hook. Senders never wait, so neither
// kernel can deadlock however ranks share SMs.
//
// Every rank keeps, in its own buffer, a sequence per phase (dispatch send, dispatch receive,
// combine send, combine receive), advanced by the last block of each launch: launch i of a
// phase uses half i % 2 of its regions and tags its signals i + 1. Graph replays continue the
// sequences on the device; no signal is ever reset. A rank can run at most one call ahead of a
// peer's receive (its own receive waits for every peer's send of the same call), so a half is
// never written while a peer still reads it, provided each rank receives a call before it
// sends the call after next (DeepEP's rule of at most two calls' results held at once).
#include <cuda_fp8.h>

#include "common.cuh"

/// Threads of a low-latency block.
constexpr uint32_t kLlThreads = 512;
constexpr uint32_t kLlWarps = kLlThreads / 32;
/// Phases, and their entries in the state words (sequence at `phase`, block count at 4 + phase).
constexpr uint32_t kDispatchSend = 0, kDispatchRecv = 1, kCombineSend = 2, kCombineRecv = 3;
/// Bytes of a dispatch message's header (the token index, then padding).
constexpr uint32_t kLlHeaderBytes = 16;

/// The current sequence of `phase`. Called by: any thread, before the block's work.
__device__ __forceinline__ uint64_t phase_sequence(const uint64_t* state, uint32_t phase) {
  return *reinterpret_cast<const volatile uint64_t*>(state + phase);
}

/// Called by every thread of every block at its end: the last block of the launch advances
/// `phase`'s sequence (the next launch on the stream sees it).
__device__ __forceinline__ void finish_phase(uint64_t* state, uint32_t phase) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned long long* blocks = reinterpret_cast<unsigned long long*>(state + 4 + phase);
    if (atomicAdd(blocks, 1ull) == gridDim.x - 1) {
      *blocks = 0;
      state[phase] += 1;
      __threadfence();
    }
  }
}

/// The block's `(scale, scale_inv)` for its largest magnitude, as weft-ep's model computes it.
__device__ __forceinline__ float2 fp8_scales(float amax, bool round_scale) {
  amax = fmaxf(amax, 1e-4f);
  if (!round_scale) return make_float2(448.f / amax, amax / 448.f);
  const uint32_t bits = __float_as_uint(amax / 448.f);
  const int exponent = int((bits >> 23) & 0xffu) - 127 + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  return make_float2(__uint_as_float(uint32_t(127 - exponent) << 23), __uint_as_float(uint32_t(127 + exponent) << 23));
}

/// Writes token `t`'s message at `msg`: header, then the payload, BF16 as is or cast to E4M3
/// with a scale per 128 channels (after the payload). Called by: one warp.
__device__ __forceinline__ void write_message(const EpLlDispatchArgs& a, uint32_t t, char* msg, uint32_t lane) {
  if (lane == 0) *reinterpret_cast<int4*>(msg) = make_int4(int(t), 0, 0, 0);
  const char* row = reinterpret_cast<const char*>(a.x) + uint64_t(t) * a.hidden * 2;
  char* payload = msg + kLlHeaderBytes;
  if (a.fp8 == 0) {
    warp_copy<true>(payload, row, a.hidden * 2, lane);
    return;
  }
  for (uint32_t block = 0; block < a.hidden / 128; ++block) {
    // Lane l holds channels 4l .. 4l + 3 of the block.
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(row) + block * 32 + lane);
    const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float2 lo = __bfloat1622float2(pair[0]), hi = __bfloat1622float2(pair[1]);
    const float local = fmaxf(fmaxf(fabsf(lo.x), fabsf(lo.y)), fmaxf(fabsf(hi.x), fabsf(hi.y)));
    // Non-negative floats order like their bits.
    const float amax = __uint_as_float(__reduce_max_sync(~0u, __float_as_uint(local)));
    const float2 s = fp8_scales(amax, a.round_scale != 0);
    const float v[4] = {lo.x * s.x, lo.y * s.x, hi.x * s.x, hi.y * s.x};
    uint32_t packed = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) packed |= uint32_t(__nv_cvt_float_to_fp8(v[i], __NV_SATFINITE, __NV_E4M3)) << (8 * i);
    reinterpret_cast<uint32_t*>(payload + block * 128)[lane] = packed;
    if (lane == 0) reinterpret_cast<float*>(payload + a.hidden)[block] = s.y;
  }
}

// Grid: any number of blocks of kLlThreads (the SM budget); a warp per expert in turn. The
// warp scans this rank's tokens in order and writes each one that selects the expert into the
// expert's rank at `[local expert][this rank][n]`, then publishes `n` with the call's tag.
extern "C" __global__ void __launch_bounds__(kLlThreads, 1) weft_ep_ll_dispatch_send(EpContext c, EpLlDispatchArgs a) {
  uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
  const uint64_t sequence = phase_sequence(state, kDispatchSend);
  const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
  const uint32_t local = a.experts / c.ranks;
  const int64_t* idx = reinterpret_cast<const int64_t*>(a.topk_idx);
  for (uint32_t e = blockIdx.x * kLlWarps + threadIdx.x / 32; e < a.experts; e += gridDim.x * kLlWarps) {
    const uint32_t dst = e / local, le = e % local;
    char* region = at<char>(c, dst, a.data_offset + half * a.data_half_bytes) +
                   (uint64_t(le) * c.ranks + c.rank) * a.max_tokens * a.message_bytes;
    uint32_t n = 0;
    for (uint32_t base = 0; base < a.tokens; base += 32) {
      const uint32_t t = base + lane;
      bool hit = false;
      for (uint32_t k = 0; t < a.tokens && k < a.topk; ++k) hit |= idx[uint64_t(t) * a.topk + k] == int64_t(e);
      for (uint32_t pending = __ballot_sync(~0u, hit); pending != 0; pending &= pending - 1, ++n) {
        write_message(a, base + __ffs(pending) - 1, region + uint64_t(n) * a.message_bytes, lane);
      }
    }
    __syncwarp();  // every lane's message stores before lane 0's release
    if (lane == 0) {
      uint64_t* count = at<uint64_t>(c, dst, a.signal_offset) + uint64_t(half) * a.experts + le * c.ranks + c.rank;
      ptx::st_release_sys(count, (sequence + 1) << 32 | n);
    }
  }
  finish_phase(state, kDispatchSend);
}

// Grid: any number of blocks of kLlThreads; a warp per (local expert, source rank) in turn.
// Lane s waits for source s's count of the expert (every source, so the rows of lower ranks
// can be placed first), then the warp copies the source's messages to rows `begin ..` of the
// expert: rows are packed by source rank, then token order (weft-ep's model::ll_dispatch).
extern "C" __global__ void __launch_bounds__(kLlThreads, 1) weft_ep_ll_dispatch_recv(EpContext c, EpLlDispatchArgs a) {
  uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
  const uint64_t sequence = phase_sequence(state, kDispatchRecv);
  const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
  const uint32_t local = a.experts / c.ranks, rows = c.ranks * a.max_tokens;
  const uint32_t payload_bytes = a.fp8 != 0 ? a.hidden : 2 * a.hidden, scales = a.fp8 != 0 ? a.hidden / 128 : 0;
  for (uint32_t unit = blockIdx.x * kLlWarps + threadIdx.x / 32; unit < local * c.ranks; unit += gridDim.x * kLlWarps) {
    const uint32_t le = unit / c.ranks, src = unit % c.ranks;
    uint32_t n = 0;
    bool ok = true;
    if (lane < c.ranks) {
      const uint64_t* count = at<uint64_t>(c, c.rank, a.signal_offset) + uint64_t(half) * a.experts + le * c.ranks + lane;
      const uint64_t want = (sequence + 1) << 32;
      const uint64_t seen = acquire_at_least(count, want, c, lane, WaitOp::EpLlCount);
      ok = seen >= want;
      n = uint32_t(seen);
    }
    if (!__all_sync(~0u, ok)) break;
    __syncwarp();  // the lanes' acquires order every lane's reads of the messages
    uint32_t begin = 0, total = 0;
    for (uint32_t s = 0; s < c.ranks; ++s) {
      const uint32_t ns = __shfl_sync(~0u, n, s);
      begin += s < src ? ns : 0;
      total += ns;
    }
    const uint32_t mine = __shfl_sync(~0u, n, src);
    if (lane == 0) {
      reinterpret_cast<int64_t*>(a.recv_layout_range)[le * c.ranks + src] = int64_t(begin) << 32 | mine;
      if (src == 0) {
        reinterpret_cast<int*>(a.recv_count)[le] = int(total);
        if (a.cumulative_recv_stats != 0) atomicAdd(reinterpret_cast<int*>(a.cumulative_recv_stats) + le, int(total));
      }
    }
    const char* region = at<char>(c, c.rank, a.data_offset + half * a.data_half_bytes) +
                         (uint64_t(le) * c.ranks + src) * a.max_tokens * a.message_bytes;
    for (uint32_t i = 0; i < mine; ++i) {
      const char* msg = region + uint64_t(i) * a.message_bytes;
      const uint64_t row = uint64_t(le) * rows + begin + i;
      if (lane == 0) reinterpret_cast<int*>(a.recv_src_info)[row] = *reinterpret_cast<const int*>(msg);
      warp_copy<false>(reinterpret_cast<char*>(a.recv_x) + row * payload_bytes, msg + kLlHeaderBytes, payload_bytes, lane);
      const float* in = reinterpret_cast<const float*>(msg + kLlHeaderBytes + a.hidden);
      float* out = reinterpret_cast<float*>(a.recv_x_scales);
      for (uint32_t j = lane; j < scales; j += 32) out[(uint64_t(le) * scales + j) * rows + begin + i] = in[j];
    }
  }
  finish_phase(state, kDispatchRecv);
}

// Grid: any number of blocks of kLlThreads; a warp per (local expert, destination rank) in
// turn. It writes the rows its dispatch received from the destination back into the
// destination's slot `[global expert][token]`, then raises the expert's flag there (every
// pair, so every destination hears from every expert).
extern "C" __global__ void __launch_bounds__(kLlThreads, 1) weft_ep_ll_combine_send(EpContext c, EpLlCombineArgs a) {
  uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
  const uint64_t sequence = phase_sequence(state, kCombineSend);
  const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
  const uint32_t local = a.experts / c.ranks, rows = c.ranks * a.max_tokens, row_bytes = 2 * a.hidden;
  for (uint32_t unit = blockIdx.x * kLlWarps + threadIdx.x / 32; unit < local * c.ranks; unit += gridDim.x * kLlWarps) {
    const uint32_t le = unit / c.ranks, dst = unit % c.ranks, g = c.rank * local + le;
    const int64_t range = reinterpret_cast<const int64_t*>(a.layout_range)[le * c.ranks + dst];
    const uint32_t begin = uint32_t(uint64_t(range) >> 32), n = uint32_t(range);
    char* slots = at<char>(c, dst, a.data_offset + half * a.data_half_bytes) + uint64_t(g) * a.max_tokens * row_bytes;
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t row = uint64_t(le) * rows + begin + i;
      const int t = reinterpret_cast<const int*>(a.src_info)[row];
      warp_copy<true>(slots + uint64_t(t) * row_bytes, reinterpret_cast<const char*>(a.x) + row * row_bytes, row_bytes, lane);
    }
    __syncwarp();  // every lane's row stores before lane 0's release
    if (lane == 0) ptx::st_release_sys(at<uint64_t>(c, dst, a.signal_offset) + uint64_t(half) * a.experts + g, sequence + 1);
  }
  finish_phase(state, kCombineSend);
}

// Grid: any number of blocks of kLlThreads; a warp per token in turn. Lane k waits for the
// flag of slot k's expert, then the warp sums `fma(row, weight_k, acc)` over the slots in
// order in f32 and rounds once to BF16 (weft-ep's model::ll_combine). Block 0 also waits for
// every expert's flag, so no rank finishes a combine before every peer has sent it.
extern "C" __global__ void __launch_bounds__(kLlThreads, 1) weft_ep_ll_combine_recv(EpContext c, EpLlCombineArgs a) {
  uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
  const uint64_t sequence = phase_sequence(state, kCombineRecv);
  const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
  const uint32_t local = a.experts / c.ranks, row_bytes = 2 * a.hidden;
  const uint64_t* flags = at<uint64_t>(c, c.rank, a.signal_offset) + uint64_t(half) * a.experts;
  const char* slots = at<char>(c, c.rank, a.data_offset + half * a.data_half_bytes);
  if (blockIdx.x == 0) {
    for (uint32_t g = threadIdx.x; g < a.experts; g += blockDim.x) {
      acquire_at_least(flags + g, sequence + 1, c, g / local, WaitOp::EpLlFlag);
    }
  }
  const int64_t* idx = reinterpret_cast<const int64_t*>(a.topk_idx);
  for (uint32_t t = blockIdx.x * kLlWarps + threadIdx.x / 32; t < a.tokens; t += gridDim.x * kLlWarps) {
    int64_t g = -1;
    float w = 0.f;
    bool ok = true;
    if (lane < a.topk) {
      g = idx[uint64_t(t) * a.topk + lane];
      w = reinterpret_cast<const float*>(a.topk_weights)[uint64_t(t) * a.topk + lane];
      if (g >= 0) ok = acquire_at_least(flags + g, sequence + 1, c, uint32_t(g) / local, WaitOp::EpLlFlag) >= sequence + 1;
    }
    if (!__all_sync(~0u, ok)) break;
    __syncwarp();  // the lanes' acquires order every lane's reads of the rows
    int4* out = reinterpret_cast<int4*>(a.combined_x + uint64_t(t) * row_bytes);
    for (uint32_t j = lane; j < a.hidden / 8; j += 32) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      for (uint32_t k = 0; k < a.topk; ++k) {
        const int64_t gk = __shfl_sync(~0u, g, k);
        const float wk = __shfl_sync(~0u, w, k);
        if (gk < 0) continue;
        const int4 v = load_staged(reinterpret_cast<const int4*>(slots + (uint64_t(gk) * a.max_tokens + t) * row_bytes) + j);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = __bfloat1622float2(h[i]);
          acc[2 * i] = __fmaf_rn(f.x, wk, acc[2 * i]);
          acc[2 * i + 1] = __fmaf_rn(f.y, wk, acc[2 * i + 1]);
        }
      }
      int4 v;
      __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
      for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
      out[j] = v;
    }
  }
  finish_phase(state, kCombineRecv);
}
