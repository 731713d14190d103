// The rail hop of the normal mode between nodes (docs/ep.md, "Normal mode between nodes").
// Rank (node n, local l) sends each token once to rank (d, l) of every node d holding one of
// its experts: its own node's share straight into its own receive rows, the others' packed
// into a send block per node and carried by GIN puts, chunk by chunk, one per field array and
// chunk (the proxy). The forwarder passes the rows on over NVLink with the one-node kernels
// run on the node's ranks (an EpContext of the node), and returns each row's partial sum the
// same way; the source sums the nodes' partials in node order. The readers of the rows that
// cross the network (the NVL hop's senders, the sum) wait for each chunk as it lands, so the
// exchange overlaps them (docs/ep.md, "Overlapping the rail hop"). Every wait here is bounded
// and names the rank waited for (its rank in the group) and the phase.
#include "common.cuh"
#include "rail_arrival.cuh"
#include "sum_rows.cuh"
#include "weft/gin.cuh"

/// Signals of the EP device communicator (after the low-latency mode's 0 and 1) and the
/// increments each rail peer makes per chunk: one per field array of the dispatch's rows,
/// one per partials array of the combine (a bare signal where an array is empty).
constexpr uint32_t kRailDispatchSignal = 2, kRailCombineSignal = 3;
constexpr uint32_t kRailDispatchPuts = 5, kRailCombinePuts = 2;
/// Threads of a pack or sum block.
constexpr uint32_t kRailThreads = 512;
constexpr uint32_t kRailWarps = kRailThreads / 32;

/// The rank of this rank's rail on node `d`.
__device__ __forceinline__ uint32_t rail_rank(const EpRailArgs& a, uint32_t d) {
  return d * a.ranks_per_node + a.local;
}

/// `T*` at `offset` of this rank's buffer.
template <typename T>
__device__ __forceinline__ T* own(const EpRailArgs& a, uint64_t offset) {
  return reinterpret_cast<T*>(a.base + offset);
}

// Grid: 1 block of kSetupThreads. Warp d < nodes: rail_send_head column d (a ballot scan over
// the tokens in order), its inverse rail_row_token row d, and the tokens sent to node d; then
// every thread copies the layout's
// per-rank and per-expert counts after them, so one read brings the host all it exchanges.
extern "C" __global__ void __launch_bounds__(kSetupThreads) weft_ep_rail_layout(EpRailArgs a) {
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool* in_rank = reinterpret_cast<const bool*>(a.is_token_in_rank);
  int* head = reinterpret_cast<int*>(a.rail_send_head);
  int* row_token = reinterpret_cast<int*>(a.rail_row_token);
  int* counts = reinterpret_cast<int*>(a.counts);
  for (uint32_t d = warp; d < a.nodes; d += kSetupThreads / 32) {
    uint32_t sent = 0;
    for (uint32_t t0 = 0; t0 < a.tokens; t0 += 32) {
      const uint32_t t = t0 + lane;
      bool in = false;
      for (uint32_t j = 0; t < a.tokens && j < a.ranks_per_node; ++j) {
        in |= in_rank[uint64_t(t) * a.ranks + d * a.ranks_per_node + j];
      }
      const uint32_t ballot = __ballot_sync(~0u, in);
      const uint32_t row = sent + __popc(ballot & ((1u << lane) - 1));
      if (t < a.tokens) head[uint64_t(t) * a.nodes + d] = in ? int(row) : -1;
      if (in) row_token[uint64_t(d) * a.tokens + row] = int(t);
      sent += __popc(ballot);
    }
    if (lane == 0) counts[d] = int(sent);
  }
  const int* per_rank = reinterpret_cast<const int*>(a.num_tokens_per_rank);
  const int* per_expert = reinterpret_cast<const int*>(a.num_tokens_per_expert);
  for (uint32_t i = threadIdx.x; i < a.ranks + a.experts; i += blockDim.x) {
    counts[a.nodes + i] = i < a.ranks ? per_rank[i] : per_expert[i - a.ranks];
  }
}

// Grid: any number of blocks of kRailThreads; a warp per token, over the grid. For each node d
// the token goes to (rail_send_head), the warp writes the token's row: the payload in 16-byte
// vectors, the scales, the top-k indices as node d's expert indices (-1 for the experts of
// other nodes) with the weights as given, and the source index; into this rank's own receive
// rows at `before[node] + head` for its own node, else into the send block of d at
// `d * capacity + head`. Where the exchange runs beside it (`progress`), each warp publishes
// how far it has come after each token. Local memory only: nothing waits.
extern "C" __global__ void __launch_bounds__(kRailThreads) weft_ep_rail_pack(EpRailArgs a) {
  const uint32_t lane = threadIdx.x % 32, warps = gridDim.x * kRailWarps, warp = blockIdx.x * kRailWarps + threadIdx.x / 32;
  // Where the exchange runs beside the pack: this warp's progress (lane 0, release, after the
  // warp's stores), so it can put each chunk once its rows are packed.
  const auto publish = [&](uint32_t next) {
    if (a.progress == 0) return;
    __syncwarp();
    if (lane == 0) ptx::st_release_gpu(reinterpret_cast<uint64_t*>(a.progress) + warp, uint64_t(a.progress_epoch) << 32 | next);
  };
  const uint32_t node_experts = a.experts / a.nodes, vectors = a.hidden_bytes / 16;
  const int* head = reinterpret_cast<const int*>(a.rail_send_head);
  const float* scales = reinterpret_cast<const float*>(a.x_scales);
  const int64_t* idx = reinterpret_cast<const int64_t*>(a.topk_idx);
  const float* weights = reinterpret_cast<const float*>(a.topk_weights);
  for (uint32_t t = warp; t < a.tokens; publish(t + warps), t += warps) {
    const int4* src = reinterpret_cast<const int4*>(a.x + uint64_t(t) * a.hidden_bytes);
    for (uint32_t d = 0; d < a.nodes; ++d) {
      const int h = head[uint64_t(t) * a.nodes + d];
      if (h < 0) continue;
      const bool mine = d == a.node;
      const uint64_t row = mine ? uint64_t(a.before[d]) + h : uint64_t(d) * a.capacity + h;
      int4* x = own<int4>(a, mine ? a.recv_x : a.send_x) + row * vectors;
      for (uint32_t v = lane; v < vectors; v += 32) x[v] = load_input(src + v);
      float* s = own<float>(a, mine ? a.recv_scales : a.send_scales) + row * a.num_scales;
      for (uint32_t i = lane; i < a.num_scales; i += 32) {
        s[i] = scales[uint64_t(t) * a.scale_token_stride + uint64_t(i) * a.scale_hidden_stride];
      }
      if (lane < a.topk) {
        const uint64_t slot = uint64_t(t) * a.topk + lane;
        const int64_t e = idx[slot], first = int64_t(d) * node_experts;
        const bool here = e >= first && e < first + int64_t(node_experts);
        own<int64_t>(a, mine ? a.recv_topk_idx : a.send_topk_idx)[row * a.topk + lane] = here ? e - first : -1;
        own<float>(a, mine ? a.recv_topk_weights : a.send_topk_weights)[row * a.topk + lane] =
            weights != nullptr ? weights[slot] : 0.f;
      }
      if (lane == 0) own<int>(a, mine ? a.recv_src_idx : a.send_src_idx)[row] = int(t);
    }
  }
  publish(0xffffffffu);
}

/// One field array's rows `[begin, end)` of `bytes` each, from this rank's `src` into rail peer
/// `peer`'s `dst` (the same offsets in its window 0) with one increment of `signal`, or a bare
/// signal where there is nothing to move. Called by: one thread, with its own Gin.
__device__ __forceinline__ bool rail_put(Gin& gin, const GinTeam& world, uint32_t peer, uint64_t dst, uint64_t src,
                                         uint64_t begin, uint64_t end, uint64_t bytes, uint32_t signal) {
  if ((end - begin) * bytes == 0) return gin.signal(world, peer, signal);
  return gin.put(world, peer, 0, dst + begin * bytes, 0, src + begin * bytes, (end - begin) * bytes,
                 gin_signal_inc(signal));
}

/// Waits until the pack running beside the exchange has packed every token below `need`:
/// the least of its warps' published progress (EpRailArgs::progress, a word of an earlier call
/// reading as the warp's first token) reaches it. False when the wait gave up (recorded).
/// Called by: all 32 lanes of a warp, with the same `need`.
__device__ __forceinline__ bool rail_packed(const EpRailArgs& a, const DevCommHandle& h, uint32_t need,
                                            uint32_t lane) {
  const uint64_t* words = reinterpret_cast<const uint64_t*>(a.progress);
  Spin spin;
  for (;;) {
    uint32_t packed = 0xffffffffu;
    for (uint32_t g = lane; g < a.progress_warps; g += 32) {
      const uint64_t v = ptx::ld_acquire_gpu(words + g);
      packed = min(packed, uint32_t(v >> 32) == a.progress_epoch ? uint32_t(v) : g);
    }
    packed = __reduce_min_sync(~0u, packed);
    if (packed >= need) {
      __syncwarp();  // the lanes' acquires order every lane's puts of the packed rows
      return true;
    }
    const bool expired = lane == 0 && spin.expired(h.wait);
    if (__shfl_sync(~0u, expired, 0)) {
      if (lane == 0) report_timeout(h.wait, WaitOp::EpRailPacked, need, packed);
      return false;
    }
    // This warp may share an SM with pack warps, and the slowest of them sets the pace: poll
    // gently (a poll's loads hit L2 and would otherwise take a scheduler's every cycle).
    __nanosleep(512);
  }
}

/// Flags of weft_ep_rail_exchange: the phase, and its steps.
constexpr uint32_t kRailCombine = 1;  // the combine's partials (else the dispatch's rows)
constexpr uint32_t kRailPut = 2;      // put the call's chunks
constexpr uint32_t kRailAwait = 4;    // wait until the peers' puts of the call have arrived
constexpr uint32_t kRailFlush = 8;    // wait until this rank's own puts are complete

// Grid: 1 block of 32 threads; thread d serves rank (d, local) of each node d other than this
// rank's, in the steps `flags` names. kRailPut: puts to it in `chunks[d]` chunks of rows,
// chunk by chunk (where the pack runs beside this kernel, `progress`, each chunk once the pack
// has packed its tokens: the pack never waits for this kernel), each field array's rows of the chunk with one increment of the phase's
// signal (kRailDispatchPuts or kRailCombinePuts per chunk), so a reader can start on a chunk
// once its signals arrived (rail_arrival.cuh; GIN stores a signal after the data it covers, and
// a connection applies its signals in order). Dispatch: the rows packed for d (`sent[d]` of
// them, from row d * capacity of the send block) into its receive rows from row before[d].
// Combine (kRailCombine): the partials of the rows received from node d (`received[d]` from
// row from[d]) into its partial receive rows from row node * capacity. kRailAwait: waits until
// that rank's puts of the call have all arrived (`arrival`). kRailFlush: waits until this
// rank's own puts and signals to it are complete, so no proxy work of the call is left queued
// behind what the host enqueues after the kernel (docs/ep.md, "The proxy's copies and the
// hardware queues"). Puts alone never wait for another rank, so a reader enqueued behind them
// cannot be held by them. A wait that gives up records (rank, peer, phase: the wait context of
// `h`, which names this rank, with `peer` the rank waited for; the flush's FifoSync names the
// same peer) and the kernel ends.
extern "C" __global__ void __launch_bounds__(32)
    weft_ep_rail_exchange(EpRailArgs a, DevCommHandle h, uint32_t flags) {
  // Every lane stays to the end of the puts: a wait for the pack is the whole warp's.
  const uint32_t d = threadIdx.x;
  const bool serves = d < a.nodes && d != a.node;
  Gin gin(h);
  const GinTeam world = gin_team_world(h);
  const uint32_t peer = rail_rank(a, d);
  const bool combine = (flags & kRailCombine) != 0;
  const uint32_t signal = combine ? kRailCombineSignal : kRailDispatchSignal;
  const uint64_t rows = serves ? (combine ? a.received[d] : a.sent[d]) : 0;
  const uint64_t from_row = combine ? a.from[d % kMaxRanks] : uint64_t(d) * a.capacity;
  const uint64_t at_row = combine ? uint64_t(a.node) * a.capacity : a.before[d % kMaxRanks];
  const uint32_t chunks = serves && (flags & kRailPut) != 0 ? a.chunks[d] : 0;
  const uint32_t most = __reduce_max_sync(~0u, chunks);
  bool ok = true;
  for (uint32_t k = 0; k < most; ++k) {
    const bool put = ok && k < chunks;
    const uint64_t begin = put ? rail_chunk_begin(rows, chunks, k) : 0, end = put ? rail_chunk_begin(rows, chunks, k + 1) : 0;
    if (a.progress != 0) {
      // The pack runs beside this kernel: the chunk's rows once it has packed their tokens.
      const int* row_token = reinterpret_cast<const int*>(a.rail_row_token);
      const uint32_t need = end > begin ? uint32_t(row_token[uint64_t(d) * a.tokens + end - 1]) + 1 : 0;
      if (!rail_packed(a, h, __reduce_max_sync(~0u, need), d)) return;  // recorded
    }
    if (!put) continue;
    const auto field = [&](uint64_t dst, uint64_t src, uint64_t bytes) {
      return ok && (ok = rail_put(gin, world, peer, dst + at_row * bytes, src + from_row * bytes, begin, end, bytes,
                                  signal));
    };
    if (combine) {
      // kRailCombinePuts of them.
      field(a.part_recv_x, a.part_x, 2ull * a.hidden);
      field(a.part_recv_topk_weights, a.part_topk_weights, 4ull * a.topk);
    } else {
      // kRailDispatchPuts of them.
      field(a.recv_x, a.send_x, a.hidden_bytes);
      field(a.recv_scales, a.send_scales, 4ull * a.num_scales);
      field(a.recv_topk_idx, a.send_topk_idx, 8ull * a.topk);
      field(a.recv_topk_weights, a.send_topk_weights, 4ull * a.topk);
      field(a.recv_src_idx, a.send_src_idx, 4);
    }
  }
  if (!serves || !ok) return;  // a failure is recorded
  if ((flags & kRailAwait) != 0) {
    const WaitOp op = combine ? WaitOp::EpRailPartials : WaitOp::EpRailRows;
    const uint64_t expected = a.arrival.base[d] + uint64_t(a.arrival.puts) * a.arrival.chunks[d];
    const uint64_t* word = gin_proxy_signal_word(h, peer, signal);
    if (!detail::gin_wait(h, op, peer, expected, [&] { return ptx::ld_acquire_sys(word); })) return;
  }
  if ((flags & kRailFlush) != 0) gin.flush_signal(world, peer, signal);
}

// Grid: any number of blocks of kRailThreads, alongside weft_ep_rail_exchange of the combine.
// A warp per (token, span of 32 · kSumVectors vectors) item: lane 0 and 1 describe the biases,
// lane 2 + d node d's partial of the token (this rank's own partials for its node, the
// received ones for the others, once their chunk has arrived: `a.arrival`), so warp_sum_rows
// sums, from 0 in f32, the biases, then the nodes' partials in increasing node order, rounded
// once to BF16 (model::combine_internode). The item of a token's first span also sums the
// partial weights in node order, in f32. A warp whose wait gave up (recorded) stops.
extern "C" __global__ void __launch_bounds__(kRailThreads) weft_ep_rail_sum(EpRailArgs a) {
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t vectors = a.hidden / 8, span = 32 * kSumVectors, spans = (vectors + span - 1) / span;
  const uint64_t row_bytes = 2ull * a.hidden;
  const int* head = reinterpret_cast<const int*>(a.rail_send_head);
  // The node a lane describes, and the count its word is known to have reached: a warp's
  // items go up in token order, so the rows it waits for go up within each node's block.
  const uint32_t d = lane >= 2 ? lane - 2 : 0;
  const bool remote = lane >= 2 && d < a.arrival.nodes && a.arrival.words[d] != 0;
  uint64_t arrived = 0;
  for (uint32_t item = blockIdx.x * kRailWarps + threadIdx.x / 32; item < a.tokens * spans;
       item += gridDim.x * kRailWarps) {
    const uint32_t t = item / spans, begin = item % spans * span;
    // The row (partial) of node d of token t, or -1.
    const int h = lane >= 2 && d < a.nodes ? head[uint64_t(t) * a.nodes + d] : -1;
    bool ok = true;
    if (remote && h >= 0) {
      const uint64_t target = rail_row_target(a.arrival, d, uint32_t(h));
      if (arrived < target) {
        ok = rail_wait(a.arrival, d, target, WaitOp::EpRailPartials);
        arrived = ok ? target : arrived;
      }
    }
    if (!__all_sync(~0u, ok)) return;
    __syncwarp();  // the lanes' acquires order every lane's reads of the partials
    const bool mine = d == a.node;
    const uint64_t r = mine ? uint64_t(a.before[d]) + h : uint64_t(d) * a.capacity + h;
    const char* row = nullptr;
    if (lane == 0 && a.bias0 != 0) row = reinterpret_cast<const char*>(a.bias0) + uint64_t(t) * row_bytes;
    if (lane == 1 && a.bias1 != 0) row = reinterpret_cast<const char*>(a.bias1) + uint64_t(t) * row_bytes;
    if (h >= 0) row = own<char>(a, mine ? a.part_x : a.part_recv_x) + r * row_bytes;
    int4* out = reinterpret_cast<int4*>(a.combined_x + uint64_t(t) * row_bytes);
    warp_sum_rows(row, 1.f, out, begin, min(begin + span, vectors), lane);
    if (begin != 0 || a.combined_topk_weights == 0) continue;
    for (uint32_t k = lane; k < a.topk; k += 32) {
      float acc = 0.f;
      for (uint32_t n = 0; n < a.nodes; ++n) {
        const int hn = head[uint64_t(t) * a.nodes + n];
        if (hn < 0) continue;
        const uint64_t rn = n == a.node ? uint64_t(a.before[n]) + hn : uint64_t(n) * a.capacity + hn;
        acc += own<float>(a, n == a.node ? a.part_topk_weights : a.part_recv_topk_weights)[rn * a.topk + k];
      }
      reinterpret_cast<float*>(a.combined_topk_weights)[uint64_t(t) * a.topk + k] = acc;
    }
  }
}

// Grid: any number of blocks of kRailThreads. The NVL hop of a node of one rank (docs/ep.md,
// "One rank per node"): the forwarded rows are this rank's received rows in the same order, so
// a warp per row, over the grid in row order, copies row t of the forwarded rows (`d.x`, the
// scales at `d.x_scales` with `d`'s input strides, the node's expert indices and weights at
// `d.topk_idx` / `d.topk_weights` unless cached) into received row t (`recv_x`, the scales
// with the output strides, `recv_topk_idx`, `recv_topk_weights` with weight 0 where no expert
// of this rank is named, as the one-node dispatch writes them, and `recv_src_idx` = t) once
// its chunk has arrived over the rail hop (`d.rail`; lane 0 waits, its acquire ordering the
// warp's reads). A warp whose wait gave up (recorded) stops.
extern "C" __global__ void __launch_bounds__(kRailThreads) weft_ep_rail_unpack(EpDispatchArgs d) {
  const uint32_t lane = threadIdx.x % 32, vectors = d.hidden_bytes / 16;
  const float* scales = reinterpret_cast<const float*>(d.x_scales);
  float* recv_scales = reinterpret_cast<float*>(d.recv_x_scales);
  uint32_t here = 0;  // lane 0: rows from this warp's next below it have arrived
  for (uint32_t t = blockIdx.x * kRailWarps + threadIdx.x / 32; t < d.tokens; t += gridDim.x * kRailWarps) {
    bool ok = true;
    if (lane == 0) ok = rail_row_arrived(d.rail, t, &here, WaitOp::EpRailRows);
    if (!__shfl_sync(~0u, ok, 0)) return;
    __syncwarp();
    const int4* src = reinterpret_cast<const int4*>(d.x + uint64_t(t) * d.hidden_bytes);
    int4* dst = reinterpret_cast<int4*>(d.recv_x + uint64_t(t) * d.hidden_bytes);
    for (uint32_t v = lane; v < vectors; v += 32) dst[v] = load_staged(src + v);
    for (uint32_t i = lane; recv_scales != nullptr && i < d.num_scales; i += 32) {
      recv_scales[uint64_t(t) * d.recv_scale_token_stride + uint64_t(i) * d.recv_scale_hidden_stride] =
          scales[uint64_t(t) * d.scale_token_stride + uint64_t(i) * d.scale_hidden_stride];
    }
    if (lane < d.topk && d.topk_idx != 0) {
      const uint64_t slot = uint64_t(t) * d.topk + lane;
      const int64_t e = reinterpret_cast<const int64_t*>(d.topk_idx)[slot];
      if (d.recv_topk_idx != 0) reinterpret_cast<int64_t*>(d.recv_topk_idx)[slot] = e;
      if (d.recv_topk_weights != 0) {
        reinterpret_cast<float*>(d.recv_topk_weights)[slot] =
            e >= 0 ? reinterpret_cast<const float*>(d.topk_weights)[slot] : 0.f;
      }
    }
    if (lane == 0) reinterpret_cast<int*>(d.recv_src_idx)[t] = int(t);
  }
}
