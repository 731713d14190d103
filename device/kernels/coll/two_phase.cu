// 2PH AllReduce for communicators that span nodes (MSCCL++'s hierarchical two-phase), on the
// GIN device API: one kernel source for the peers of this node (LSA: stores over NVLink) and
// those of other nodes (the proxy: puts with signals). For large messages: the data moves in
// whole 16-byte vectors, never as LL packets, and crosses the network once, 1/G of it per rank.
#include "put_groups.cuh"
#include "weft/gin.cuh"

namespace {

/// The window of the device communicator the kernel uses (its only one).
constexpr uint32_t kTwoPhaseWindow = 0;
/// Most puts per node and round, each with a signal of its own (signal k: group k's puts), so
/// the communicator has this many signal slots (`TwoPhaseLayout` on the host).
constexpr uint32_t kTwoPhaseMaxPuts = 4;
/// Words of a block's launch state: its rounds, then every group's.
constexpr uint32_t kTwoPhaseStateWords = 1 + kTwoPhaseMaxPuts;
/// Fewest vectors a put carries (256 KB): a put through the proxy costs a few microseconds of
/// its own, so a shard goes as a few large puts.
constexpr uint64_t kTwoPhaseMinPutVectors = 16384;
/// Fewest vectors a block of a put's group takes (one per thread of a 1024-thread block).
constexpr uint64_t kTwoPhaseMinBlockVectors = 1024;

using TwoPhaseRange = PutGroups<kTwoPhaseMaxPuts>;

/// One rank's place: local rank `local` of G in its node (the LSA team), node `node` of N (the
/// rail: the ranks of this local index), and the window: per parity, slots `rs[G]` (member m's
/// piece of this rank's shard; this rank's own piece is pushed into `rs[local]` too),
/// `recv[N]` (node n's partial of the shard; `recv[node]` is this rank's, the source of its
/// puts, which land in the same slot of every other node) and `ag[G]` (member m's finished
/// shard), each a round's shard padded to 16 bytes; after both parities, the flags `rs_flag[G]
/// [blocks]` and `ag_flag[G][blocks]`, which member m's block b raises to the group's round
/// count + 1 once its part of `rs[m]` or `ag[m]` is written here.
struct TwoPhasePlace {
  uint32_t g, local, nodes, node;
  uint64_t slot;

  __device__ __forceinline__ TwoPhasePlace(const DevCommHandle& h, uint64_t slot_bytes)
      : g(h.lsa_size), local(h.lsa_rank), nodes(h.rail_size), node(h.rail_rank), slot(slot_bytes) {}

  __device__ __forceinline__ uint64_t base(uint32_t parity) const { return parity * (2ull * g + nodes) * slot; }
  __device__ __forceinline__ uint64_t rs(uint32_t parity, uint32_t m) const { return base(parity) + m * slot; }
  __device__ __forceinline__ uint64_t recv(uint32_t parity, uint32_t n) const {
    return base(parity) + (g + n) * slot;
  }
  __device__ __forceinline__ uint64_t ag(uint32_t parity, uint32_t m) const {
    return base(parity) + (g + nodes + m) * slot;
  }
  /// Flag `kind` (0: rs, 1: ag) that member m's block `b` raises at this rank.
  __device__ __forceinline__ uint64_t flag(uint32_t kind, uint32_t m, uint32_t b) const {
    return base(2) + ((uint64_t(kind) * g + m) * gridDim.x + b) * 8;
  }
};

/// Bytes `[lo, hi)` of slot `offset` of this rank's window, or of LSA member `m`'s.
__device__ __forceinline__ char* two_phase_local(const DevCommHandle& h, uint64_t offset) {
  return gin_local_pointer<char>(h, kTwoPhaseWindow, offset);
}
__device__ __forceinline__ char* two_phase_lsa(const DevCommHandle& h, uint32_t m, uint64_t offset) {
  return lsa_pointer<char>(h, kTwoPhaseWindow, m, offset);
}

/// Block-wide, after this block's stores into every other member's slot `kind`: raises this
/// block's flag of that kind at each of them to `value` (release: the block's stores first).
__device__ __forceinline__ void two_phase_raise(const DevCommHandle& h, const TwoPhasePlace& at, uint32_t kind,
                                                uint64_t value) {
  __syncthreads();
  if (threadIdx.x < at.g && threadIdx.x != at.local) {
    uint64_t* word = lsa_pointer<uint64_t>(h, kTwoPhaseWindow, threadIdx.x, at.flag(kind, at.local, blockIdx.x));
    ptx::st_release_sys(word, value);
  }
}

/// Block-wide: waits (bounded) until every other member's flag `kind` of this block reached
/// `value`; the data it covers is then visible to the block. False on timeout (recorded, naming
/// the member's rank).
__device__ __forceinline__ bool two_phase_await(const DevCommHandle& h, const TwoPhasePlace& at, uint32_t kind,
                                                uint64_t value) {
  bool ok = true;
  if (threadIdx.x < at.g && threadIdx.x != at.local) {
    WaitContext ctx = h.wait;
    ctx.peer = static_cast<int32_t>(gin_world_rank(gin_team_lsa(h), threadIdx.x));
    const uint64_t* word = gin_local_pointer<uint64_t>(h, kTwoPhaseWindow, at.flag(kind, threadIdx.x, blockIdx.x));
    ok = wait_at_least(word, value, ctx, WaitOp::TwoPhaseNode);
  }
  return __syncthreads_and(ok) != 0;
}

/// Copies bytes `[lo, hi)` of a padded slot into `out` (any alignment), nothing past `hi`.
__device__ __forceinline__ void two_phase_copy_out(char* out, const char* slot, uint64_t lo, uint64_t hi) {
  for (uint64_t at = lo + threadIdx.x * 16; at < hi; at += blockDim.x * 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(slot + at);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    detail::store_words<4>(out + at, static_cast<uint32_t>(min_u64(16, hi - at)), w);
  }
}

}  // namespace

/// AllReduce across nodes in two phases around one exchange, each rank `local` of G in its node
/// and one of N nodes (TwoPhasePlace):
///   1. reduce-scatter within the node: rank `local` owns shard `local` (1/G of a round, a
///      multiple of 16 bytes); every rank pushes its piece of shard m into member m's
///      `rs[local]` (LSA stores, whole vectors) and raises its flag there; the owner folds the
///      G pieces in local-rank order into `recv[node]`;
///   2. across nodes, all-pairs: the partial goes to the rank of this local index in every
///      other node (`recv[node]` there), as at most kTwoPhaseMaxPuts puts through the proxy,
///      group k's with signal k; once every node's put of the group has arrived (its signal k
///      from that rank, counted per peer), the N partials are folded in node order;
///   3. all-gather within the node, in the same pass: the finished vectors go into this rank's
///      output and every member's `ag[local]`, then the members' finished shards from this
///      rank's `ag` slots into the output.
/// Every rank gets the same bits (local-rank order, then node order, then copies).
///
/// Blocks: a round's shard is dealt in at most kTwoPhaseMaxPuts contiguous ranges of vectors,
/// one per group of blocks, each block of a group taking a part of its range (PutGroups); block
/// b takes the same part at every rank and phase, so it reads only what block b of the others
/// wrote, and the last block of a group to fold its part puts the group's range. Each block
/// keeps (kept between launches, so graph replays need no host work) the rounds of every call
/// so far, g, and for every group the rounds that group has carried (every block counts alike).
/// Round g uses window parity g % 2 and flags g + 1; a group that has carried r rounds waits
/// for r + 1 signals k from each node (one put with signal k per node and round it carries).
/// The parity is the call's, not the group's: a group's range moves with the call's size, and
/// a group idle in some calls would otherwise write, at the parity another group used for the
/// same bytes in the call before, into a slot still being read or still being copied from.
/// A slot is rewritten two rounds later only after its reader is done with it: a rank starts
/// round g + 2 only after it received, in round g + 1, what each peer of the slot sent after
/// finishing round g (a member's rs and ag flags, a node's puts of the round's groups, which
/// the node sent after its own round g had received this rank's puts of round g: so the copy
/// reading this rank's `recv[node]` of round g had ended, whatever group reads those bytes now),
/// or, where round g ended the peer's previous launch, after that launch had received all of
/// this rank's round g. Every wait is bounded and names the rank and the peer; a timeout leaves
/// the counts behind, and the communicator is then failed, as after any device timeout.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_2ph(CollContext c, const char* input, char* output, uint64_t bytes, DevCommHandle h,
                       uint64_t round_bytes, uint64_t slot_bytes, uint64_t* state) {
  // state: per block, its rounds and the groups' round counts; then per (group, parity), an
  // arrival counter.
  WEFT_TRACE_SCOPE(weft_allreduce_2ph);
  if (bytes == 0) return;
  const TwoPhasePlace at(h, slot_bytes);
  const GinTeam rail = gin_team_rail(h);
  const Pre pre = Pre::of(c);
  const Fin finish = Fin::of(c);
  const bool across = at.nodes > 1;
  // Rounds of one size, so every round of a call deals its vectors alike.
  const CallRounds call(bytes, round_bytes);
  const uint64_t rounds = call.count, per_round = call.size;
  const uint64_t shard = round_up16(div_ceil(per_round, at.g));
  const TwoPhaseRange range(shard / 16, kTwoPhaseMinPutVectors, kTwoPhaseMinBlockVectors);
  uint64_t* const rounds_so_far = state + uint64_t(blockIdx.x) * kTwoPhaseStateWords;
  uint64_t* const counts = rounds_so_far + 1;
  uint64_t* const arrivals = state + uint64_t(gridDim.x) * kTwoPhaseStateWords;
  const uint64_t lo = range.lo * 16, hi = range.hi * 16;
  const uint64_t before = *rounds_so_far;
  const uint64_t carried = range.lo < range.hi ? counts[range.group] : 0;
  for (uint64_t i = 0; i < rounds && range.lo < range.hi; ++i) {
    const uint64_t round = before + i;
    const uint32_t parity = static_cast<uint32_t>(round & 1);
    const uint64_t first = i * per_round;
    const uint64_t len = min_u64(per_round, bytes - first);
    auto shard_len = [&](uint32_t m) { return len > m * shard ? min_u64(shard, len - m * shard) : 0; };
    const char* in = input + first;
    char* out = output + first;

    // Phase 1: this block's part of every piece into its owner's rs slot (premultiplied once),
    // then the G pieces of this rank's shard folded in local order.
    for (uint32_t m = 0; m < at.g; ++m) {
      char* to = m == at.local ? two_phase_local(h, at.rs(parity, m)) : two_phase_lsa(h, m, at.rs(parity, at.local));
      push_padded(to, in + m * shard, lo, min_u64(hi, lo > shard_len(m) ? lo : shard_len(m)), pre);
    }
    two_phase_raise(h, at, 0, round + 1);
    if (!two_phase_await(h, at, 0, round + 1)) return;
    const auto piece = [&](uint32_t m) -> const char* { return two_phase_local(h, at.rs(parity, m)); };
    char* const partial = two_phase_local(h, at.recv(parity, at.node));
    const uint64_t mine = shard_len(at.local);
    // The finished vectors: into the output (the shard's bytes only) and every member's ag slot.
    const auto finished = [&](uint64_t v_at, const uint4& v) {
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      if (v_at < mine) detail::store_words<4>(out + at.local * shard + v_at, static_cast<uint32_t>(min_u64(16, mine - v_at)), w);
      for (uint32_t m = 0; m < at.g; ++m) {
        if (m != at.local) *reinterpret_cast<uint4*>(two_phase_lsa(h, m, at.ag(parity, at.local)) + v_at) = v;
      }
    };
    if (!across) {
      reduce_sources(piece, at.g, lo, hi, finish, finished);
    } else {
      reduce_sources(piece, at.g, lo, hi, Fin::partial(),
                     [&](uint64_t v_at, const uint4& v) { *reinterpret_cast<uint4*>(partial + v_at) = v; });
      WEFT_TRACE_MARK(reduce_scatter);

      // Phase 2: the group's partial to every other node, then every node's folded in order.
      if (put_groups_last_to_arrive(range, arrivals + range.group * 2 + parity)) {
        const uint64_t offset = at.recv(parity, at.node) + range.put_lo * 16;
        for (uint32_t n = 0; n < at.nodes; ++n) {
          if (n != at.node && !gin_put_unordered(GinCoopBlock{}, h, rail, n, kTwoPhaseWindow, offset, kTwoPhaseWindow,
                                                 offset, (range.put_hi - range.put_lo) * 16,
                                                 gin_signal_inc(range.group))) {
            return;
          }
        }
      }
      bool ok = true;
      if (threadIdx.x == 0) {
        for (uint32_t n = 0; n < at.nodes && ok; ++n) {
          if (n == at.node) continue;
          const uint32_t peer = gin_world_rank(rail, n);
          WaitContext ctx = h.wait;
          ctx.peer = static_cast<int32_t>(peer);
          // Every node's peer is a proxy peer (the LSA team is the node): its signal k has its
          // own word here.
          ok = wait_at_least(gin_proxy_signal_word(h, peer, range.group), carried + i + 1, ctx,
                             WaitOp::TwoPhaseRail);
        }
      }
      if (!__syncthreads_and(ok)) return;
      const auto node_partial = [&](uint32_t n) -> const char* { return two_phase_local(h, at.recv(parity, n)); };
      reduce_sources(node_partial, at.nodes, lo, hi, finish, finished);
      WEFT_TRACE_MARK(across_nodes);
    }

    // Phase 3: the members' finished shards into the output.
    two_phase_raise(h, at, 1, round + 1);
    if (!two_phase_await(h, at, 1, round + 1)) return;
    for (uint32_t m = 0; m < at.g; ++m) {
      if (m != at.local) {
        two_phase_copy_out(out + m * shard, two_phase_local(h, at.ag(parity, m)), lo, lo > shard_len(m) ? lo : min_u64(hi, shard_len(m)));
      }
    }
    WEFT_TRACE_MARK(all_gather);
  }
  __syncthreads();  // every thread read the counts before thread 0 moves them on
  if (threadIdx.x == 0) {
    *rounds_so_far = before + rounds;
    for (uint32_t k = 0; k < kTwoPhaseMaxPuts; ++k) {
      if (range.carries(k, shard / 16)) counts[k] += rounds;
    }
  }
}
