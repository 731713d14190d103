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
//
// The send kernels spread their rows over every warp of the grid and publish their signals
// from the launch's last block, once every block's stores are done (finish_phase's fences):
// no sender waits, not even for another block of its own launch.
#include <cuda_fp8.h>

#include "common.cuh"
#include "sum_rows.cuh"

/// Threads of a low-latency block.
constexpr uint32_t kLlThreads = 512;
constexpr uint32_t kLlWarps = kLlThreads / 32;
/// Most experts of a call (weft-ep's `LL_MAX_EXPERTS`, kept equal by a test).
constexpr uint32_t kLlMaxExperts = 1024;
/// Most top-k slots of a token (weft-ep's `MAX_TOPK`, kept equal by a test).
constexpr uint32_t kMaxTopk = 32;
/// Phases, and their entries in the state words (sequence at `phase`, block count at 4 + phase).
constexpr uint32_t kDispatchSend = 0, kDispatchRecv = 1, kCombineSend = 2, kCombineRecv = 3;
/// Bytes of a dispatch message's header (the token index, then padding).
constexpr uint32_t kLlHeaderBytes = 16;
/// Vectors of 8 channels a lane of a dispatch sender loads per chunk, all before any store:
/// a chunk is 32 x 4 x 8 = 1024 channels of one token.
constexpr uint32_t kLlChunkVectors = 4;
constexpr uint32_t kLlChunkChannels = 32 * kLlChunkVectors * 8;

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

/// The block's `(scale, scale_inv)` for its largest magnitude, as weft-ep's model computes it.
__device__ __forceinline__ float2 fp8_scales(float amax, bool round_scale) {
  amax = fmaxf(amax, 1e-4f);
  if (!round_scale) return make_float2(448.f / amax, amax / 448.f);
  const uint32_t bits = __float_as_uint(amax / 448.f);
  const int exponent = int((bits >> 23) & 0xffu) - 127 + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  return make_float2(__uint_as_float(uint32_t(127 - exponent) << 23), __uint_as_float(uint32_t(127 + exponent) << 23));
}

/// Message `n` from rank `src` to local expert `le` of rank `owner`, in the call's half.
__device__ __forceinline__ char* ll_message(const EpContext& c, const EpLlDispatchArgs& a, uint32_t half, uint32_t owner,
                                            uint32_t le, uint32_t src, uint32_t n) {
  return at<char>(c, owner, a.data_offset + half * a.data_half_bytes) +
         ((uint64_t(le) * c.ranks + src) * a.max_tokens + n) * a.message_bytes;
}

/// Slot k's expert of token `t`, or -1 for none (negative or out of range).
__device__ __forceinline__ int routed_expert(const EpLlDispatchArgs& a, uint32_t t, uint32_t k) {
  const int64_t e = reinterpret_cast<const int64_t*>(a.topk_idx)[uint64_t(t) * a.topk + k];
  return e >= 0 && e < int64_t(a.experts) ? int(e) : -1;
}

/// Token `t`'s experts, slot by slot (routed_expert; -1 past `topk` or when not `valid`).
/// Callers index `picks` only by unrolled loop counters, so it stays in registers.
__device__ __forceinline__ void token_experts(const EpLlDispatchArgs& a, uint32_t t, bool valid, int (&picks)[kMaxTopk]) {
#pragma unroll
  for (uint32_t j = 0; j < kMaxTopk; ++j) picks[j] = valid && j < a.topk ? routed_expert(a, t, j) : -1;
}

/// Where token `t`'s messages go: lane k < topk holds slot k's `expert` (-1: none, or the
/// expert of an earlier slot, so a token reaches an expert once) and the message's `index`
/// among this rank's messages to that expert: the number of earlier tokens selecting it (the
/// model's token order). Lane l looks at token `base + l` of each 32 before `t`. Called by:
/// one warp.
struct Route {
  int expert;
  uint32_t index;
};
__device__ __forceinline__ Route route_token(const EpLlDispatchArgs& a, uint32_t t, uint32_t lane) {
  const int mine = lane < a.topk ? routed_expert(a, t, lane) : -1;
  int expert = mine;
  for (uint32_t k = 0; k + 1 < a.topk; ++k) {
    if (__shfl_sync(~0u, mine, k) == mine && k < lane) expert = -1;
  }
  uint32_t index = 0;
  for (uint32_t base = 0; base < t; base += 32) {
    int picks[kMaxTopk];
    token_experts(a, base + lane, base + lane < t, picks);
    for (uint32_t k = 0; k < a.topk; ++k) {
      const int e = __shfl_sync(~0u, expert, k);
      bool hit = false;
#pragma unroll
      for (uint32_t j = 0; j < kMaxTopk; ++j) {
        if (j >= a.topk) break;
        hit |= picks[j] == e;
      }
      const uint32_t n = __popc(__ballot_sync(~0u, hit && e >= 0));
      if (lane == k) index += n;
    }
  }
  return {expert, index};
}

/// Chunk `chunk` of token `t`: loads its channels once (every load before any store), casts
/// them to E4M3 with a scale per 128 channels when `a.fp8` (a 128-channel block is 16 lanes'
/// vector u), and stores them into the token's message at every expert of `route`; chunk 0
/// also writes the header. Lane l's vector u is channels `first + 256u + 8l ..+ 8`.
/// Called by: one warp.
__device__ __forceinline__ void send_chunk(const EpContext& c, const EpLlDispatchArgs& a, uint32_t half, Route route,
                                           uint32_t t, uint32_t chunk, uint32_t lane) {
  const uint32_t first = chunk * kLlChunkChannels;
  const int4* row = reinterpret_cast<const int4*>(a.x) + uint64_t(t) * (a.hidden / 8);
  int4 v[kLlChunkVectors];
#pragma unroll
  for (uint32_t u = 0; u < kLlChunkVectors; ++u) {
    const uint32_t channel = first + 256 * u + 8 * lane;
    v[u] = channel < a.hidden ? load_input(row + channel / 8) : make_int4(0, 0, 0, 0);
  }
  uint2 q[kLlChunkVectors];
  float scale_inv[kLlChunkVectors];
  if (a.fp8 != 0) {
#pragma unroll
    for (uint32_t u = 0; u < kLlChunkVectors; ++u) {
      const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(&v[u]);
      float f[8];
      float amax = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 p = __bfloat1622float2(pair[i]);
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
        amax = fmaxf(amax, fmaxf(fabsf(p.x), fabsf(p.y)));
      }
#pragma unroll
      for (uint32_t m = 8; m != 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, m));
      const float2 s = fp8_scales(amax, a.round_scale != 0);
      uint32_t packed[2] = {0, 0};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        packed[i / 4] |= uint32_t(__nv_cvt_float_to_fp8(f[i] * s.x, __NV_SATFINITE, __NV_E4M3)) << (8 * (i % 4));
      }
      q[u] = make_uint2(packed[0], packed[1]);
      scale_inv[u] = s.y;
    }
  }
  for (uint32_t k = 0; k < a.topk; ++k) {
    const int e = __shfl_sync(~0u, route.expert, k);
    const uint32_t n = __shfl_sync(~0u, route.index, k);
    if (e < 0) continue;
    const uint32_t local = a.experts / c.ranks;
    char* msg = ll_message(c, a, half, uint32_t(e) / local, uint32_t(e) % local, c.rank, n);
    if (chunk == 0 && lane == 0) *reinterpret_cast<int4*>(msg) = make_int4(int(t), 0, 0, 0);
    char* payload = msg + kLlHeaderBytes;
#pragma unroll
    for (uint32_t u = 0; u < kLlChunkVectors; ++u) {
      const uint32_t channel = first + 256 * u + 8 * lane;
      if (channel >= a.hidden) continue;
      if (a.fp8 == 0) {
        reinterpret_cast<int4*>(payload)[channel / 8] = v[u];
        continue;
      }
      reinterpret_cast<uint2*>(payload)[channel / 8] = q[u];
      if (lane % 16 == 0) reinterpret_cast<float*>(payload + a.hidden)[channel / 128] = scale_inv[u];
    }
  }
}

/// Run by the send's last block, after every block's messages: counts each expert's tokens (a
/// token once per expert) and publishes them, tagged with the call, at every expert's rank
/// (release: the messages before the count).
__device__ __forceinline__ void publish_counts(const EpContext& c, const EpLlDispatchArgs& a, uint64_t sequence,
                                               uint32_t half) {
  __shared__ uint32_t counts[kLlMaxExperts];
  for (uint32_t e = threadIdx.x; e < a.experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (uint32_t t = threadIdx.x; t < a.tokens; t += blockDim.x) {
    int picks[kMaxTopk];
    token_experts(a, t, true, picks);
#pragma unroll
    for (uint32_t k = 0; k < kMaxTopk; ++k) {
      if (k >= a.topk) break;
      bool first = picks[k] >= 0;
#pragma unroll
      for (uint32_t j = 0; j < k; ++j) first &= picks[j] != picks[k];
      if (first) atomicAdd(&counts[picks[k]], 1u);
    }
  }
  __syncthreads();
  const uint32_t local = a.experts / c.ranks;
  for (uint32_t e = threadIdx.x; e < a.experts; e += blockDim.x) {
    uint64_t* count = at<uint64_t>(c, e / local, a.signal_offset) + uint64_t(half) * a.experts + (e % local) * c.ranks + c.rank;
    ptx::st_release_sys(count, (sequence + 1) << 32 | counts[e]);
  }
}

// Grid: any number of blocks of kLlThreads (the SM budget). The work is every (token, chunk)
// pair; each warp takes a run of consecutive pairs, routes each of its tokens once and sends
// its chunks to every expert of the token, at `[local expert][this rank][index]` of the
// expert's rank. The last block publishes every expert's count.
extern "C" __global__ void __launch_bounds__(kLlThreads, 1) weft_ep_ll_dispatch_send(EpContext c, EpLlDispatchArgs a) {
  WEFT_TRACE_SCOPE(weft_ep_ll_dispatch_send);
  uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
  const uint64_t sequence = phase_sequence(state, kDispatchSend);
  const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
  const uint32_t chunks = (a.hidden + kLlChunkChannels - 1) / kLlChunkChannels, items = a.tokens * chunks;
  const uint32_t warps = gridDim.x * kLlWarps, per = (items + warps - 1) / warps;
  const uint32_t first = (blockIdx.x * kLlWarps + threadIdx.x / 32) * per, end = min(first + per, items);
  Route route = {-1, 0};
  uint32_t routed = ~0u;
  for (uint32_t item = first; item < end; ++item) {
    const uint32_t t = item / chunks;
    if (t != routed) {
      route = route_token(a, t, lane);
      routed = t;
    }
    send_chunk(c, a, half, route, t, item % chunks, lane);
  }
  WEFT_TRACE_WARP_MARK(send);
  if (finish_phase(state, kDispatchSend)) {
    publish_counts(c, a, sequence, half);
    WEFT_TRACE_MARK(publish);
  }
}

// Grid: any number of blocks of kLlThreads; a unit is a (local expert, source rank) pair, with
// `members` warps each (the spare warps of the grid share the units' messages). Lane s waits
// for source s's count of the expert (every source, so the rows of lower ranks can be placed
// first), then the warp copies its messages (every `members`-th) to rows `begin + i` of the
// expert, their loads in flight together: rows are packed by source rank, then token order
// (weft-ep's model::ll_dispatch).
extern "C" __global__ void __launch_bounds__(kLlThreads, 1) weft_ep_ll_dispatch_recv(EpContext c, EpLlDispatchArgs a) {
  WEFT_TRACE_SCOPE(weft_ep_ll_dispatch_recv);
  uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
  const uint64_t sequence = phase_sequence(state, kDispatchRecv);
  const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
  const uint32_t local = a.experts / c.ranks, rows = c.ranks * a.max_tokens;
  const uint32_t payload_bytes = a.fp8 != 0 ? a.hidden : 2 * a.hidden, scales = a.fp8 != 0 ? a.hidden / 128 : 0;
  const uint32_t units = local * c.ranks, warps = gridDim.x * kLlWarps, members = max(1u, warps / units);
  for (uint32_t slot = blockIdx.x * kLlWarps + threadIdx.x / 32; slot < units * members; slot += warps) {
    const uint32_t unit = slot / members, member = slot % members;
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
    WEFT_TRACE_WARP_MARK(wait);
    uint32_t begin = 0, total = 0;
    for (uint32_t s = 0; s < c.ranks; ++s) {
      const uint32_t ns = __shfl_sync(~0u, n, s);
      begin += s < src ? ns : 0;
      total += ns;
    }
    const uint32_t mine = __shfl_sync(~0u, n, src);
    if (lane == 0 && member == 0) {
      reinterpret_cast<int64_t*>(a.recv_layout_range)[le * c.ranks + src] = int64_t(begin) << 32 | mine;
      if (src == 0) {
        reinterpret_cast<int*>(a.recv_count)[le] = int(total);
        if (a.cumulative_recv_stats != 0) atomicAdd(reinterpret_cast<int*>(a.cumulative_recv_stats) + le, int(total));
      }
    }
    // This warp's messages are i = member + r * members for r < count; message i is the
    // expert's row `begin + i`, row `le * rows + begin + i` of the outputs.
    const uint32_t count = mine > member ? (mine - member + members - 1) / members : 0;
    const char* region = ll_message(c, a, half, c.rank, le, src, 0);
    auto message = [&](uint32_t r) { return region + uint64_t(member + r * members) * a.message_bytes; };
    auto row = [&](uint32_t r) { return begin + member + r * members; };
    const uint64_t expert_row0 = uint64_t(le) * rows;
    warp_copy_records<false>(
        count, payload_bytes, [&](uint32_t r) { return message(r) + kLlHeaderBytes; },
        [&](uint32_t r) { return reinterpret_cast<char*>(a.recv_x) + (expert_row0 + row(r)) * payload_bytes; }, lane);
    warp_copy_fields<false, int>(
        count, 1, [&](uint32_t r, uint32_t) { return reinterpret_cast<const int*>(message(r)); },
        [&](uint32_t r, uint32_t) { return reinterpret_cast<int*>(a.recv_src_info) + expert_row0 + row(r); }, lane);
    if (scales == 0) continue;
    // Scale j of message r goes to the column-major `[le][j][row]`.
    warp_copy_fields<false, float>(
        count, scales,
        [&](uint32_t r, uint32_t j) {
          return reinterpret_cast<const float*>(message(r) + kLlHeaderBytes + a.hidden) + j;
        },
        [&](uint32_t r, uint32_t j) {
          return reinterpret_cast<float*>(a.recv_x_scales) + (uint64_t(le) * scales + j) * rows + row(r);
        },
        lane);
  }
  WEFT_TRACE_WARP_MARK(copy);
  finish_phase(state, kDispatchRecv);
}

// Grid: any number of blocks of kLlThreads; a unit is a (local expert, destination rank) pair,
// with `members` warps each (as in the dispatch receive). A warp writes its share of the rows
// its dispatch received from the destination back into the destination's slot
// `[global expert][token]`, their loads in flight together. The last block then raises every
// pair's flag (every pair, so every destination hears from every expert).
extern "C" __global__ void __launch_bounds__(kLlThreads, 1) weft_ep_ll_combine_send(EpContext c, EpLlCombineArgs a) {
  WEFT_TRACE_SCOPE(weft_ep_ll_combine_send);
  uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
  const uint64_t sequence = phase_sequence(state, kCombineSend);
  const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
  const uint32_t local = a.experts / c.ranks, rows = c.ranks * a.max_tokens, row_bytes = 2 * a.hidden;
  const uint32_t units = local * c.ranks, warps = gridDim.x * kLlWarps, members = max(1u, warps / units);
  for (uint32_t slot = blockIdx.x * kLlWarps + threadIdx.x / 32; slot < units * members; slot += warps) {
    const uint32_t unit = slot / members, member = slot % members;
    const uint32_t le = unit / c.ranks, dst = unit % c.ranks, g = c.rank * local + le;
    const int64_t range = reinterpret_cast<const int64_t*>(a.layout_range)[le * c.ranks + dst];
    const uint32_t begin = uint32_t(uint64_t(range) >> 32), n = uint32_t(range);
    const uint32_t count = n > member ? (n - member + members - 1) / members : 0;
    char* slots = at<char>(c, dst, a.data_offset + half * a.data_half_bytes) + uint64_t(g) * a.max_tokens * row_bytes;
    const uint64_t row0 = uint64_t(le) * rows + begin + member;
    auto row = [&](uint32_t r) { return row0 + uint64_t(r) * members; };
    warp_copy_records<true>(
        count, row_bytes, [&](uint32_t r) { return reinterpret_cast<const char*>(a.x) + row(r) * row_bytes; },
        [&](uint32_t r) {
          const int t = reinterpret_cast<const int*>(a.src_info)[row(r)];
          return slots + uint64_t(t) * row_bytes;
        },
        lane);
  }
  WEFT_TRACE_WARP_MARK(send);
  if (!finish_phase(state, kCombineSend)) return;
  for (uint32_t pair = threadIdx.x; pair < units; pair += blockDim.x) {
    const uint32_t le = pair / c.ranks, dst = pair % c.ranks;
    ptx::st_release_sys(at<uint64_t>(c, dst, a.signal_offset) + uint64_t(half) * a.experts + c.rank * local + le, sequence + 1);
  }
  WEFT_TRACE_MARK(publish);
}

// Grid: any number of blocks of kLlThreads; the work is every (token, span of 32 x
// kSumVectors vectors) pair, a warp each in turn. Lane k waits for the flag of slot k's
// expert, then the warp sums `fma(row, weight_k, acc)` over the slots in order in f32 and
// rounds once to BF16 (weft-ep's model::ll_combine). Block 0 also waits for every expert's
// flag, so no rank finishes a combine before every peer has sent it.
extern "C" __global__ void __launch_bounds__(kLlThreads, 1) weft_ep_ll_combine_recv(EpContext c, EpLlCombineArgs a) {
  WEFT_TRACE_SCOPE(weft_ep_ll_combine_recv);
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
    WEFT_TRACE_MARK(wait);
  }
  const int64_t* idx = reinterpret_cast<const int64_t*>(a.topk_idx);
  const uint32_t vectors = a.hidden / 8, span = 32 * kSumVectors, spans = (vectors + span - 1) / span;
  for (uint32_t item = blockIdx.x * kLlWarps + threadIdx.x / 32; item < a.tokens * spans; item += gridDim.x * kLlWarps) {
    const uint32_t t = item / spans, begin = item % spans * span;
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
    WEFT_TRACE_WARP_MARK(wait);
    const char* row = g >= 0 ? slots + (uint64_t(g) * a.max_tokens + t) * row_bytes : nullptr;
    int4* out = reinterpret_cast<int4*>(a.combined_x + uint64_t(t) * row_bytes);
    warp_sum_rows(row, w, out, begin, min(begin + span, vectors), lane);
  }
  WEFT_TRACE_WARP_MARK(copy);
  finish_phase(state, kCombineRecv);
}
