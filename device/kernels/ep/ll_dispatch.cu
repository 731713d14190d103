// Low-latency dispatch: the send kernel casts each token once and stores it straight into the
// message slot of (local expert, this rank, index) at each of its experts' ranks on this node
// (ll_slot); for a rank d of another node, into this rank's send block for d, packed by
// expert, put there as one range after the launch's stores into d's block for this rank. The
// receive kernel packs each local expert's messages into rows by source rank, then token order
// (weft-ep's model::ll_dispatch and, between nodes, model::ll_dispatch_net). Each body is built
// into two kernels: one for a group on one node and a `_net` one for a group spanning nodes
// (docs/ep.md, "One kernel per topology").
#include "low_latency.cuh"

/// Channels of a send item: 16 per lane, two 16-byte BF16 loads and, per expert, one 16-byte
/// FP8 store (two with BF16). A 128-channel scale block is 8 lanes.
constexpr uint32_t kLlItemChannels = 32 * 16;
/// Items of a warp whose loads are in flight together.
constexpr uint32_t kLlItemBatch = 4;
/// Rounds of one warp that route a window of tokens: 32 / topk tokens a round.
constexpr uint32_t kLlRouteRounds = 8;

/// The block's `(scale, scale_inv)` for its largest magnitude, as weft-ep's model computes it.
__device__ __forceinline__ float2 fp8_scales(float amax, bool round_scale) {
  amax = fmaxf(amax, 1e-4f);
  if (!round_scale) return make_float2(448.f / amax, amax / 448.f);
  const uint32_t bits = __float_as_uint(amax / 448.f);
  const int exponent = int((bits >> 23) & 0xffu) - 127 + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  return make_float2(__uint_as_float(uint32_t(127 - exponent) << 23), __uint_as_float(uint32_t(127 + exponent) << 23));
}

/// Message `n` from rank `src` to local expert `le` of rank `owner` (a rank of this node), in
/// the call's half: expert-major `[le][src][max_tokens]` on one node; source-major
/// `[src][le][max_tokens]` on a group spanning nodes, where a source of another node fills its
/// block, packed (ll_packed_message).
template <bool kNet>
__device__ __forceinline__ char* ll_slot(const EpContext& c, const EpLlDispatchArgs& a, uint32_t half, uint32_t owner,
                                         uint32_t le, uint32_t src, uint32_t n) {
  const uint64_t slot = kNet ? uint64_t(src) * (a.experts / c.ranks) + le : uint64_t(le) * c.ranks + src;
  return at<char>(c, owner, a.data_offset + half * a.data_half_bytes) + (slot * a.max_tokens + n) * a.message_bytes;
}

/// Message `at` of source `src`'s block at this rank, from a rank of another node: its messages
/// packed by expert (`at` = its messages to this rank's earlier experts + n).
__device__ __forceinline__ char* ll_packed_message(const EpContext& c, const EpLlDispatchArgs& a, uint32_t half,
                                                   uint32_t src, uint64_t at) {
  const uint64_t block = uint64_t(a.experts / c.ranks) * a.max_tokens;
  return ::at<char>(c, c.rank, a.data_offset + half * a.data_half_bytes) + (src * block + at) * a.message_bytes;
}

/// The send region's block for rank `d` of another node, in the call's half: this rank's
/// messages to d's experts packed in expert order, as they land in d's block for this rank.
__device__ __forceinline__ char* ll_send_block(const EpContext& c, const EpLlDispatchArgs& a, const EpLlNet& n,
                                               uint32_t half, uint32_t d) {
  const uint64_t block = uint64_t(a.experts / c.ranks) * a.max_tokens;
  return at<char>(c, c.rank, n.dispatch_send_offset + half * a.data_half_bytes) + d * block * a.message_bytes;
}

/// Where this rank stores its message `index` to expert `e`: the slot at the expert's rank on
/// this node, the packed place in the send block of a rank of another node (`packed[e]`: this
/// rank's messages to that rank's earlier experts).
template <bool kNet>
__device__ __forceinline__ char* ll_route(const EpContext& c, const EpLlDispatchArgs& a, const EpLlNet& n,
                                          uint32_t half, uint32_t e, uint32_t index, const uint32_t* packed) {
  const uint32_t local = a.experts / c.ranks, owner = e / local;
  if (!ll_is_remote<kNet>(n, owner)) return ll_slot<kNet>(c, a, half, owner, e % local, c.rank, index);
  return ll_send_block(c, a, n, half, owner) + uint64_t(packed[e] + index) * a.message_bytes;
}

/// The per-expert totals of the send (`uint32_t[experts]` after the state words).
__device__ __forceinline__ uint32_t* dispatch_totals(uint64_t* state) {
  return reinterpret_cast<uint32_t*>(state + kLlStateWords);
}

/// Routes tokens `[w0, w1)` (at most kLlRouteRounds * (32 / topk)): `route[(t - w0) * topk +
/// k]` becomes the message slot k of token t is stored into, or null (no expert, or one an
/// earlier slot of the token names). A message's index among this rank's messages to its
/// expert is `seen[e]` (the tokens before w0 selecting e) plus the earlier tokens of the
/// window selecting it, the model's token order; `seen` advances past the window. Each round
/// routes 32 / topk tokens, a lane per slot: lanes naming the same expert are ranked by lane
/// (`__match_any_sync`), the token's first slot naming it being the one counted. Called by:
/// one warp.
template <bool kNet>
__device__ __forceinline__ void route_window(const EpContext& c, const EpLlDispatchArgs& a, const EpLlNet& n,
                                             uint32_t half, uint32_t w0, uint32_t w1, uint32_t* seen, char** route,
                                             const uint32_t* packed, uint32_t lane) {
  const uint32_t per = 32 / a.topk, k = lane % a.topk;
  const bool lives = lane < per * a.topk;
  int picks[kLlRouteRounds];
#pragma unroll
  for (uint32_t q = 0; q < kLlRouteRounds; ++q) {
    const uint32_t t = w0 + q * per + lane / a.topk;
    picks[q] = routed_expert(a, t, k, lives && t < w1, w0);
  }
#pragma unroll
  for (uint32_t q = 0; q < kLlRouteRounds; ++q) {
    const uint32_t i = q * per + lane / a.topk;  // the token's place in the window
    int e = picks[q];
    // Keys no other lane has stand for "nothing" (bit 31 and the lane).
    const uint32_t same_token = __match_any_sync(~0u, e >= 0 ? (lane / a.topk) << 11 | uint32_t(e) : 1u << 31 | lane);
    if (uint32_t(__ffs(same_token)) - 1 != lane) e = -1;
    const uint32_t same = __match_any_sync(~0u, e >= 0 ? uint32_t(e) : 1u << 31 | lane);
    const uint32_t index = e >= 0 ? seen[e] + __popc(same & ((1u << lane) - 1)) : 0;
    __syncwarp();
    if (e >= 0 && lane == 31 - __clz(same)) seen[e] += __popc(same);
    __syncwarp();
    if (lives && w0 + i < w1) route[i * a.topk + k] = e >= 0 ? ll_route<kNet>(c, a, n, half, uint32_t(e), index, packed) : nullptr;
  }
}

/// 16 BF16 channels (two vectors) cast to E4M3 with `scale`.
__device__ __forceinline__ int4 cast_fp8(const int4 (&v)[2], float scale) {
  uint32_t packed[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162* pair = reinterpret_cast<const __nv_bfloat162*>(&v[i / 2]) + 2 * (i % 2);
    const float2 p = __bfloat1622float2(pair[0]), q = __bfloat1622float2(pair[1]);
    const float f[4] = {p.x, p.y, q.x, q.y};
    packed[i] = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      packed[i] |= uint32_t(__nv_cvt_float_to_fp8(f[j] * scale, __NV_SATFINITE, __NV_E4M3)) << (8 * j);
    }
  }
  return make_int4(int(packed[0]), int(packed[1]), int(packed[2]), int(packed[3]));
}

/// The largest magnitude of 16 BF16 channels.
__device__ __forceinline__ float abs_max(const int4 (&v)[2]) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 p = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(v)[i]);
    amax = fmaxf(amax, fmaxf(fabsf(p.x), fabsf(p.y)));
  }
  return amax;
}

/// Items `[first, end)` (item i: token i / chunks, channels of chunk i % chunks), all routed
/// in `route` (window starting at token w0): lane l holds channels `chunk * 512 + 16l ..+ 16`,
/// loaded kLlItemBatch items at a time before any store, cast once (to E4M3 with a scale per
/// 128 channels with `kFp8`) and stored into the message of each of the token's experts;
/// chunk 0 also writes the header. Called by: one warp.
template <bool kFp8>
__device__ __forceinline__ void send_items(const EpLlDispatchArgs& a, char* const* route, uint32_t w0, uint32_t first,
                                           uint32_t end, uint32_t lane) {
  const uint32_t chunks = (a.hidden + kLlItemChannels - 1) / kLlItemChannels;
  const int4* x = reinterpret_cast<const int4*>(a.x);
  for (uint32_t item = first; item < end; item += kLlItemBatch) {
    int4 v[kLlItemBatch][2];
#pragma unroll
    for (uint32_t b = 0; b < kLlItemBatch; ++b) {
      const uint32_t i = item + b, channel = i % chunks * kLlItemChannels + 16 * lane;
      if (i < end && channel < a.hidden) {
        const int4* p = x + (uint64_t(i / chunks) * a.hidden + channel) / 8;
        v[b][0] = load_input(p);
        v[b][1] = load_input(p + 1);
      }
    }
#pragma unroll
    for (uint32_t b = 0; b < kLlItemBatch; ++b) {
      const uint32_t i = item + b;
      if (i >= end) break;
      const uint32_t t = i / chunks, chunk = i % chunks, channel = chunk * kLlItemChannels + 16 * lane;
      const bool live = channel < a.hidden;  // whole 8-lane scale blocks: hidden % 128 == 0
      int4 q = make_int4(0, 0, 0, 0);
      float scale_inv = 0.f;
      if (kFp8) {
        float amax = live ? abs_max(v[b]) : 0.f;
#pragma unroll
        for (uint32_t m = 4; m != 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(~0u, amax, m));
        const float2 s = fp8_scales(amax, a.round_scale != 0);
        if (live) q = cast_fp8(v[b], s.x);
        scale_inv = s.y;
      }
      char* const* slots = route + (t - w0) * a.topk;
      for (uint32_t k = 0; k < a.topk; ++k) {
        char* msg = slots[k];
        if (msg == nullptr) continue;
        if (chunk == 0 && lane == 0) *reinterpret_cast<int4*>(msg) = make_int4(int(t), 0, 0, 0);
        if (!live) continue;
        char* payload = msg + kLlHeaderBytes;
        if (kFp8) {
          *reinterpret_cast<int4*>(payload + channel) = q;
          if (lane % 8 == 0) reinterpret_cast<float*>(payload + a.hidden)[channel / 128] = scale_inv;
        } else {
          int4* out = reinterpret_cast<int4*>(payload) + channel / 8;
          out[0] = v[b][0];
          out[1] = v[b][1];
        }
      }
    }
  }
}

/// Puts this rank's messages to rank `d` (another node) as one range, its send block's
/// packed prefix into its block at d (a bare signal when there are none), then its row of
/// counts, each with the dispatch signal, both on that signal's connection:
/// `kLlDispatchPuts` increments of d's signal per call, the last after the counts. Called by:
/// one thread per such rank, after finish_phase (so every block's stores into the send region
/// are ordered before the pushes).
__device__ void ll_put_dispatch(const EpContext& c, const EpLlDispatchArgs& a, const EpLlNet& n, uint32_t half,
                                const uint32_t* totals, uint32_t d) {
  Gin gin(n.gin);
  const GinTeam world = gin_team_world(n.gin);
  const uint32_t local = a.experts / c.ranks;
  const uint64_t h = half, block = uint64_t(local) * a.max_tokens * a.message_bytes;
  uint64_t count = 0;
  for (uint32_t le = 0; le < local; ++le) count += *reinterpret_cast<const volatile uint32_t*>(totals + d * local + le);
  const uint64_t src = n.dispatch_send_offset + h * a.data_half_bytes + d * block;
  const uint64_t dst = a.data_offset + h * a.data_half_bytes + c.rank * block;
  const bool ok = count == 0 ? gin.signal(world, d, kLlDispatchSignal)
                             : gin.put(world, d, 0, dst, 0, src, count * a.message_bytes, gin_signal_inc(kLlDispatchSignal));
  if (!ok) return;  // recorded
  const uint64_t row = n.counts_out_offset + (h * a.experts + uint64_t(d) * local) * 8;
  const uint64_t into = n.counts_in_offset + (h * a.experts + uint64_t(c.rank) * local) * 8;
  gin.put(world, d, 0, into, 0, row, uint64_t(local) * 8, gin_signal_inc(kLlDispatchSignal));
}

// Grid: any number of blocks of kLlThreads (the SM budget). The work is every (token, chunk of
// 512 channels) item, split evenly over the blocks and, within a block, over its warps, as
// contiguous runs. A block first counts, for each expert, the tokens before its own that
// select it (and, when some rank is on another node, every token, whose prefix sums within
// each such rank's experts are the packed places of its send block); then, a window of
// tokens at a time, one warp routes the window (each slot's message index: the model's token
// order) and every warp sends its items of the window. The
// block holding the last token ends with every expert's total, which it leaves in the state
// region; the launch's last block publishes them at every expert's rank (release: the
// messages before the count), or for a rank of another node stages its row of counts and a
// thread per such rank puts the messages and the row (ll_put_dispatch).
template <bool kNet>
struct LlDispatchSend {
  static __device__ __forceinline__ void run(const EpContext& c, const EpLlDispatchArgs& a, const EpLlNet& n) {
    // Per expert, the tokens before the window selecting it; the window's routes (route_window).
    __shared__ uint32_t seen[kLlMaxExperts];
    __shared__ char* route[kLlRouteRounds * 32];
    // Between nodes: this rank's messages to each expert's rank's earlier experts.
    uint32_t* packed = kNet ? ll_net_words() : nullptr;
    uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
    const uint64_t sequence = phase_sequence(state, kDispatchSend);
    const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const uint32_t chunks = (a.hidden + kLlItemChannels - 1) / kLlItemChannels, items = a.tokens * chunks;
    const uint32_t begin = uint32_t(share(items, blockIdx.x, gridDim.x));
    const uint32_t end = uint32_t(share(items, blockIdx.x + 1, gridDim.x));
    const uint32_t mine = uint32_t(share(end - begin, warp, kLlWarps)) + begin;
    const uint32_t mine_end = uint32_t(share(end - begin, warp + 1, kLlWarps)) + begin;
    const bool totals = blockIdx.x == gridDim.x - 1;  // holds the last token (or counts them all)
    // The block's tokens: [first_token, end_token).
    const uint32_t first_token = begin / chunks, end_token = begin < end ? (end - 1) / chunks + 1 : first_token;
    // The first items' rows head for L2 while the block counts and routes.
    for (uint32_t i = mine; i < min(mine_end, mine + 2 * kLlItemBatch); ++i) {
      const uint32_t channel = i % chunks * kLlItemChannels + 16 * lane;
      const char* row = reinterpret_cast<const char*>(a.x) + uint64_t(i / chunks) * a.hidden * 2;
      if (channel < a.hidden) ptx::prefetch_l2(row + channel * 2);
    }
    if (begin < end || totals) {
      for (uint32_t e = threadIdx.x; e < a.experts; e += blockDim.x) seen[e] = 0;
      __syncthreads();
      count_tokens(a, 0, first_token, seen);
      if (kNet) packed_prefix(c, a, packed);
      __syncthreads();
    }
    const uint32_t window = kLlRouteRounds * (32 / a.topk);
    for (uint32_t w0 = first_token; w0 < end_token; w0 += window) {
      const uint32_t w1 = min(w0 + window, end_token);
      if (warp == 0) route_window<kNet>(c, a, n, half, w0, w1, seen, route, packed, lane);
      __syncthreads();
      if (w0 == first_token) {
        WEFT_TRACE_MARK(route);
      }
      const uint32_t from = max(mine, w0 * chunks), to = min(mine_end, w1 * chunks);
      if (a.fp8 != 0) {
        send_items<true>(a, route, w0, from, to, lane);
      } else {
        send_items<false>(a, route, w0, from, to, lane);
      }
      __syncthreads();  // the window's routes read before the next window's are written
    }
    WEFT_TRACE_WARP_MARK(send);
    ll_release_dependents();
    if (totals) {
      for (uint32_t e = threadIdx.x; e < a.experts; e += blockDim.x) dispatch_totals(state)[e] = seen[e];
    }
    if (!finish_phase(state, kDispatchSend)) return;
    const uint32_t local = a.experts / c.ranks;
    // Counts out: `[destination rank][local expert]`, which is expert e's own index.
    uint64_t* counts_out = at<uint64_t>(c, c.rank, n.counts_out_offset) + uint64_t(half) * a.experts;
    for (uint32_t e = threadIdx.x; e < a.experts; e += blockDim.x) {
      const uint32_t count = *reinterpret_cast<const volatile uint32_t*>(dispatch_totals(state) + e);
      const uint64_t tagged = (sequence + 1) << 32 | count;
      if (ll_is_remote<kNet>(n, e / local)) {
        counts_out[e] = tagged;
        continue;
      }
      uint64_t* word = at<uint64_t>(c, e / local, a.signal_offset) + uint64_t(half) * a.experts + (e % local) * c.ranks + c.rank;
      ptx::st_release_sys(word, tagged);
    }
    __syncthreads();  // the staged rows before the pushes that carry them
    if (threadIdx.x < c.ranks && ll_is_remote<kNet>(n, threadIdx.x)) {
      ll_put_dispatch(c, a, n, half, dispatch_totals(state), threadIdx.x);
    }
    WEFT_TRACE_MARK(publish);
  }
};

extern "C" __global__ void __launch_bounds__(kLlThreads, 1)
    weft_ep_ll_dispatch_send(EpContext c, EpLlDispatchArgs a, EpLlNet n) {
  WEFT_TRACE_SCOPE(weft_ep_ll_dispatch_send);
  ll_kernel_begin();
  LlDispatchSend<false>::run(c, a, n);
}

extern "C" __global__ void __launch_bounds__(kLlThreads, 1)
    weft_ep_ll_dispatch_send_net(EpContext c, EpLlDispatchArgs a, EpLlNet n) {
  WEFT_TRACE_SCOPE(weft_ep_ll_dispatch_send_net);
  ll_kernel_begin();
  LlDispatchSend<true>::run(c, a, n);
}

// Grid: any number of blocks of kLlThreads. Every block waits for the counts of every (local
// expert, source rank) pair (a thread each: the tagged word a rank of this node stored, or the
// row a rank of another node put, once its signal counts every put of the call) and lays the rows out in shared memory: the pairs'
// messages in (expert, source) order are the experts' rows in order. The payloads of all rows
// are one stream split evenly over the grid's warps; a warp also copies the source index and
// the scales (to the column-major `[expert][scale][row]`) of the rows that start in its share.
// Block 0 writes the counts and the layout ranges.
template <bool kNet>
struct LlDispatchRecv {
  static __device__ __forceinline__ void run(const EpContext& c, const EpLlDispatchArgs& a, const EpLlNet& n) {
    // The first row of each (local expert, source) pair.
    __shared__ uint32_t starts[kLlMaxExperts + 1];
    // Between nodes: where each (local expert, source of another node) pair's messages start in
    // the source's packed block.
    uint32_t* firsts = kNet ? ll_net_words() : nullptr;
    uint64_t* state = at<uint64_t>(c, c.rank, a.state_offset);
    const uint64_t sequence = phase_sequence(state, kDispatchRecv);
    const uint32_t half = uint32_t(sequence & 1), lane = threadIdx.x % 32;
    const uint32_t rows = c.ranks * a.max_tokens, pairs = a.experts;
    const uint32_t payload_bytes = a.fp8 != 0 ? a.hidden : 2 * a.hidden, scales = a.fp8 != 0 ? a.hidden / 128 : 0;
    bool ok = true;
    const uint32_t local = a.experts / c.ranks;
    for (uint32_t p = threadIdx.x; p < pairs; p += blockDim.x) {
      const uint32_t src = p % c.ranks, le = p / c.ranks;
      const uint64_t want = (sequence + 1) << 32;
      uint64_t seen = 0;
      if (!ll_is_remote<kNet>(n, src)) {
        const uint64_t* count = at<uint64_t>(c, c.rank, a.signal_offset) + uint64_t(half) * a.experts + p;
        seen = acquire_at_least(count, want, c, src, WaitOp::EpLlCount);
      } else if (ll_wait_remote(c, n, src, kLlDispatchSignal, sequence + 1, kLlDispatchPuts, WaitOp::EpLlCount)) {
        const uint64_t* row = at<uint64_t>(c, c.rank, n.counts_in_offset) + uint64_t(half) * a.experts + uint64_t(src) * local;
        seen = *reinterpret_cast<const volatile uint64_t*>(row + le);
      }
      ok &= seen >= want;
      starts[p] = uint32_t(seen);
    }
    // A wait that gave up is recorded; the block copies nothing (the barrier's acquire order
    // every thread's reads of the messages after the counts).
    if (__syncthreads_and(ok)) {
      WEFT_TRACE_MARK(wait);
      // From another node, each pair's messages start after the source's to this rank's
      // earlier experts (a thread per such source).
      if (kNet) {
        for (uint32_t src = threadIdx.x; src < c.ranks; src += blockDim.x) {
          uint32_t next = 0;
          for (uint32_t le = 0; le < local && ll_remote(n, src); ++le) {
            firsts[le * c.ranks + src] = next;
            next += starts[le * c.ranks + src];
          }
        }
        __syncthreads();
      }
      const uint32_t total = block_exclusive_scan(starts, pairs);
      if (blockIdx.x == 0) {
        for (uint32_t p = threadIdx.x; p < pairs; p += blockDim.x) {
          const uint32_t le = p / c.ranks, first = starts[le * c.ranks], n = starts[p + 1] - starts[p];
          reinterpret_cast<int64_t*>(a.recv_layout_range)[p] = int64_t(starts[p] - first) << 32 | n;
          if (p % c.ranks != 0) continue;
          const int received = int(starts[p + c.ranks] - first);
          reinterpret_cast<int*>(a.recv_count)[le] = received;
          if (a.cumulative_recv_stats != 0) atomicAdd(reinterpret_cast<int*>(a.cumulative_recv_stats) + le, received);
        }
      }
      // Message m of the stream: (expert, source) pair p, its i-th; the expert's row
      // starts[p] - starts[first pair of the expert] + i, row `le * rows + that` of the outputs.
      auto place = [&](uint64_t m, uint32_t& le, uint32_t& row) {
        const uint32_t p = find_segment(starts, pairs, m), i = uint32_t(m) - starts[p];
        le = p / c.ranks;
        row = starts[p] - starts[le * c.ranks] + i;
        const uint32_t src = p % c.ranks;
        return ll_is_remote<kNet>(n, src) ? ll_packed_message(c, a, half, src, uint64_t(firsts[p]) + i)
                                          : ll_slot<kNet>(c, a, half, c.rank, le, src, i);
      };
      const uint32_t fields = payload_bytes / 16, warp = grid_warp(), warps = grid_warps();
      const uint64_t elements = uint64_t(total) * fields;
      const uint64_t begin = share(elements, warp, warps), end = share(elements, warp + 1, warps);
      warp_copy_span<false, kLlCopyUnroll, int4>(
          begin, end, fields,
          [&](uint64_t m) {
            uint32_t le, row;
            const char* msg = place(m, le, row);
            const char* out = reinterpret_cast<const char*>(a.recv_x) + (uint64_t(le) * rows + row) * payload_bytes;
            return RecordWords{reinterpret_cast<uint64_t>(msg + kLlHeaderBytes), reinterpret_cast<uint64_t>(out)};
          },
          [](uint64_t src, uint32_t f) { return reinterpret_cast<const int4*>(src) + f; },
          [](uint64_t dst, uint32_t f) { return reinterpret_cast<int4*>(dst) + f; }, lane);
      // The rows starting in this share: field 0 the source index (the header's first word),
      // field 1 + j scale j (after the payload).
      const uint64_t first_row = (begin + fields - 1) / fields, end_row = (end + fields - 1) / fields;
      const uint32_t scale_word = (kLlHeaderBytes + a.hidden) / 4;
      warp_copy_span<false, kLlCopyUnroll, uint32_t>(
          first_row * (1 + scales), end_row * (1 + scales), 1 + scales,
          [&](uint64_t m) {
            uint32_t le, row;
            const char* msg = place(m, le, row);
            return RecordWords{reinterpret_cast<uint64_t>(msg), uint64_t(le) << 32 | row};
          },
          [&](uint64_t msg, uint32_t f) {
            return reinterpret_cast<const uint32_t*>(msg) + (f == 0 ? 0 : scale_word + f - 1);
          },
          [&](uint64_t where, uint32_t f) {
            const uint64_t le = where >> 32, row = uint32_t(where);
            return f == 0 ? reinterpret_cast<uint32_t*>(a.recv_src_info) + le * rows + row
                          : reinterpret_cast<uint32_t*>(a.recv_x_scales) + (le * scales + f - 1) * rows + row;
          },
          lane);
    }
    WEFT_TRACE_WARP_MARK(copy);
    ll_release_dependents();
    finish_phase(state, kDispatchRecv);
  }
};

extern "C" __global__ void __launch_bounds__(kLlThreads, 1)
    weft_ep_ll_dispatch_recv(EpContext c, EpLlDispatchArgs a, EpLlNet n) {
  WEFT_TRACE_SCOPE(weft_ep_ll_dispatch_recv);
  ll_kernel_begin();
  LlDispatchRecv<false>::run(c, a, n);
}

extern "C" __global__ void __launch_bounds__(kLlThreads, 1)
    weft_ep_ll_dispatch_recv_net(EpContext c, EpLlDispatchArgs a, EpLlNet n) {
  WEFT_TRACE_SCOPE(weft_ep_ll_dispatch_recv_net);
  ll_kernel_begin();
  LlDispatchRecv<true>::run(c, a, n);
}
