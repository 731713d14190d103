// NVRAR AllReduce for communicators that span nodes (Singhania et al., CAIS '26), on the GIN
// device API: one kernel source for the peers of this node (LSA: stores over NVLink) and those
// of other nodes (the proxy: puts).
#include "put_groups.cuh"
#include "weft/gin.cuh"

namespace {

/// The window of the device communicator the kernel uses (its only one).
constexpr uint32_t kNvrarWindow = 0;
/// Most puts per step: a put through the proxy costs a few microseconds of its own (~5 µs a copy
/// on the emulated NIC, docs/multinode.md) and a step ends with its last put, so a shard goes
/// as a few large puts, each packed by a group of blocks.
constexpr uint32_t kNvrarMaxPuts = 4;
/// Fewest packets a put carries (64 KB of payload): a small call is one put per step.
constexpr uint64_t kNvrarMinPutPackets = 8192;
/// Fewest packets a block of a put's group takes (one per thread of a 1024-thread block).
constexpr uint64_t kNvrarMinBlockPackets = 1024;
/// Most steps across nodes: ⌊log2 32⌋ + 2 (GIN_MAX_RANKS ranks, one per node at most).
constexpr uint32_t kNvrarMaxSteps = 8;

/// Where a block works in a round (PutGroups, in LL packets).
using NvrarRange = PutGroups<kNvrarMaxPuts>;

/// Whether this block is the last of its group to have its part of the put of step `step`
/// written (put_groups_last_to_arrive). Each (group, parity, step) has its counter; its next
/// use, two rounds later, comes after the partner of that step answered this put (the partner
/// of a step is the same every round, and it answers round g + 1 only after receiving round g).
__device__ __forceinline__ bool nvrar_last_to_arrive(const NvrarRange& range, uint32_t parity, uint32_t step,
                                                     uint64_t* arrivals) {
  return put_groups_last_to_arrive(range, arrivals + (range.group * 2 + parity) * kNvrarMaxSteps + step);
}

/// One rank's place in the algorithm: the node (LSA team, G ranks) and the rail (the ranks of
/// this local index, one per node: N), the recursive doubling's fix-up, and the window's slots.
///
/// Recursive doubling among N = 2^q + r nodes (MPICH's fix-up): nodes 2i < 2r fold into 2i + 1
/// at step 0, the 2^q survivors (node v becomes survivor v / 2 below 2r, v - r from there)
/// exchange the whole shard with the survivor whose number differs in bit b at round b, and the
/// folded nodes get the result back at the last step. Steps: q, or q + 2 with a fix-up.
///
/// Window slots, per parity (rounds alternate): `rs[m]` (local rank m's piece of this rank's
/// shard), `ag[m]` (local rank m's finished shard), `recv[s]` (what step s brings), `send[s]`
/// (what step s sends: LL packets the proxy reads; the partial that step s will send waits
/// there too) and `done` (this rank's finished shard, which the hand-back sends). Each slot
/// holds one shard's packets (`NvrarLayout` on the host).
struct NvrarPlace {
  uint32_t g, local, nodes, node, q, r, steps;
  uint64_t slot;

  __device__ __forceinline__ NvrarPlace(const DevCommHandle& h, uint64_t slot_bytes)
      : g(h.lsa_size), local(h.lsa_rank), nodes(h.rail_size), node(h.rail_rank), slot(slot_bytes) {
    q = 31 - __clz(nodes);
    r = nodes - (1u << q);
    steps = q + (r > 0 ? 2 : 0);
  }

  __device__ __forceinline__ bool folded() const { return node < 2 * r && node % 2 == 0; }
  __device__ __forceinline__ bool fold_receiver() const { return node < 2 * r && node % 2 == 1; }
  /// This node's number among the survivors (not for a folded node).
  __device__ __forceinline__ uint32_t survivor() const { return node < 2 * r ? node / 2 : node - r; }
  __device__ __forceinline__ uint32_t node_of(uint32_t survivor) const {
    return survivor < r ? 2 * survivor + 1 : survivor + r;
  }
  /// The exchange round of step s, or -1 for the fix-up's steps.
  __device__ __forceinline__ int exchange(uint32_t s) const {
    if (r == 0) return static_cast<int>(s);
    return s == 0 || s == steps - 1 ? -1 : static_cast<int>(s) - 1;
  }
  /// The first step at which this node sends (survivors idle at the fold).
  __device__ __forceinline__ uint32_t first_send() const { return r > 0 && !folded() ? 1 : 0; }

  __device__ __forceinline__ uint64_t base(uint32_t parity) const {
    return parity * (2ull * g + 2ull * steps + 1) * slot;
  }
  __device__ __forceinline__ uint64_t rs(uint32_t parity, uint32_t m) const { return base(parity) + m * slot; }
  __device__ __forceinline__ uint64_t ag(uint32_t parity, uint32_t m) const { return base(parity) + (g + m) * slot; }
  __device__ __forceinline__ uint64_t recv(uint32_t parity, uint32_t s) const {
    return base(parity) + (2ull * g + s) * slot;
  }
  __device__ __forceinline__ uint64_t send(uint32_t parity, uint32_t s) const {
    return base(parity) + (2ull * g + steps + s) * slot;
  }
  __device__ __forceinline__ uint64_t done(uint32_t parity) const { return send(parity, steps); }
};

/// The packets of slot `offset` of this rank's window, or of LSA member `m`'s.
__device__ __forceinline__ LlPacket* nvrar_local(const DevCommHandle& h, uint64_t offset) {
  return gin_local_pointer<LlPacket>(h, kNvrarWindow, offset);
}
__device__ __forceinline__ LlPacket* nvrar_lsa(const DevCommHandle& h, uint32_t m, uint64_t offset) {
  return lsa_pointer<LlPacket>(h, kNvrarWindow, m, offset);
}

/// Payload bytes of packet j of a `len`-byte piece: 0 past its end (a shard's packets run to the
/// common shard size; the last shards are shorter or empty).
__device__ __forceinline__ uint32_t nvrar_valid(uint64_t len, uint64_t j) {
  return len > j * 8 ? static_cast<uint32_t>(min_u64(8, len - j * 8)) : 0;
}

/// The payload of a packet this thread wrote itself (its own partial): no flag to wait for.
__device__ __forceinline__ void own_words(const LlPacket* p, uint32_t (&w)[2]) {
  uint32_t f1, f2;
  ptx::ld_volatile_v4(p, w[0], f1, w[1], f2);
}

/// Reads packet `p` from world rank `peer` (bounded; the timeout names this rank and the peer).
__device__ __forceinline__ bool nvrar_read(const DevCommHandle& h, uint32_t peer, const LlPacket* p, uint32_t flag,
                                           uint32_t (&w)[2]) {
  WaitContext ctx = h.wait;
  ctx.peer = static_cast<int32_t>(peer);
  return ll_read(p, LlRound{flag, 0}, ctx, w);
}

/// Two values folded, `lower` (the value of the lower-numbered side) first, so both sides of an
/// exchange compute the same bits.
__device__ __forceinline__ void fold_pair(const uint32_t (&lower)[2], const uint32_t (&upper)[2], const Fin& finish,
                                          uint32_t (&out)[2]) {
  using R = Reducer<kType, kOp, 8>;
  Acc acc[R::kElems];
  R::start(acc, lower);
  R::fold(acc, upper);
  R::finish(acc, finish, out);
}

}  // namespace

/// AllReduce across nodes in three phases, each rank `local` of G in its node and one of N
/// nodes (NvrarPlace):
///   1. reduce-scatter within the node: rank `local` owns shard `local` (1/G of a round, a
///      multiple of 8 bytes); every rank writes its piece of shard m as LL packets straight
///      into member m's `rs[local]` slot (LSA stores) and folds the pieces of its own shard in
///      local-rank order;
///   2. recursive doubling across nodes among the ranks of the same local index (the rail) on
///      the shard, with the fix-up for N not a power of two. Each step is one put per group of
///      blocks (at most kNvrarMaxPuts) of LL packets (4 bytes of data and 4 of flag per 8, the
///      flag the round's sequence number)
///      from `send[s]` into the partner's `recv[s]`: no signal travels, the receiver polls the
///      flags, so a step costs one crossing. Both sides fold the pair in node order;
///   3. all-gather within the node: the finished shard (`done`) into the output and as LL
///      packets into every member's `ag[local]`, and the others' shards from this rank's `ag`
///      slots into the output.
/// Every rank gets the same bits: phase 1 folds in local-rank order, every exchange folds the
/// lower side's value first, and every other rank copies the finished values.
///
/// Blocks: a round's shard is dealt in at most kNvrarMaxPuts contiguous ranges of packets, one
/// per group of blocks, each block of a group taking a part of its range (NvrarRange); block k
/// takes the same part of every shard at every phase and step, so block k of each rank reads only
/// what block k of the others wrote, and the last block of a group to finish its part puts the
/// group's range (nvrar_last_to_arrive). Each block keeps its round count in
/// `state[blockIdx.x]` (every launch has the same grid and every block counts every round, so
/// the counts agree); round g uses parity g % 2 of the window and flag g % (2^32 - 1) + 1, so a
/// slot's old packets (round g - 2) never match. A slot is rewritten two rounds later only after
/// its reader is known to be done with it: a rank reaches round g + 2 only after receiving, in
/// round g + 1, what its partner of that slot sent after finishing round g; the same holds for a
/// send slot, whose put the partner must have received in full before. A step's result never
/// goes into the slot the step is sending from (the copy may still be reading it). Calls larger
/// than a round (`round_bytes`) go in rounds of one size, so every block takes part in every
/// round of a call; between calls, a rank's next kernel starts after its previous one ended, and
/// its partners' likewise. Every wait is bounded and names the rank and the peer; a timeout
/// leaves the round counts and arrival counters behind, and the communicator is then failed,
/// as after any device timeout.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_nvrar(CollContext c, const char* input, char* output, uint64_t bytes, DevCommHandle h,
                         uint64_t round_bytes, uint64_t slot_bytes, uint64_t* state) {
  // state: the blocks' round counts, then the groups' arrival counters (NvrarRange).
  WEFT_TRACE_SCOPE(weft_allreduce_nvrar);
  if (bytes == 0) return;
  const NvrarPlace at(h, slot_bytes);
  const GinTeam rail = gin_team_rail(h), node = gin_team_lsa(h);
  const Pre pre = Pre::of(c);
  const Fin finish = Fin::of(c);
  // Rounds of one size: every round of a call has the same shard and the same block ranges, so
  // every block takes part in every round (the slot reuse argument below needs that); the last
  // round's bytes may fall short of it.
  const CallRounds call(bytes, round_bytes);
  const uint64_t rounds = call.count, per_round = call.size;
  const uint64_t shard = (div_ceil(per_round, at.g) + 7) & ~uint64_t(7);
  const NvrarRange range(shard / 8, kNvrarMinPutPackets, kNvrarMinBlockPackets);
  const uint64_t lo = range.lo, hi = range.hi;
  const uint64_t before = state[blockIdx.x];
  if (lo == hi) {
    if (threadIdx.x == 0) state[blockIdx.x] = before + rounds;
    return;
  }
  for (uint64_t i = 0; i < rounds; ++i) {
    const uint64_t round = before + i;
    const uint32_t flag = static_cast<uint32_t>(round % 0xffffffffull) + 1;
    const uint32_t parity = static_cast<uint32_t>(round & 1);
    const uint64_t first = i * per_round;
    const uint64_t len = min_u64(per_round, bytes - first);
    auto shard_len = [&](uint32_t m) { return len > m * shard ? min_u64(shard, len - m * shard) : 0; };
    const char* in = input + first;
    char* out = output + first;
    LlPacket* const done = nvrar_local(h, at.done(parity));

    // Phase 1: the pieces of the other shards out, then this shard folded in local order; the
    // partial goes where the first step that sends it reads it (or, with one node, is done).
    for (uint32_t m = 0; m < at.g; ++m) {
      if (m == at.local) continue;
      LlPacket* to = nvrar_lsa(h, m, at.rs(parity, at.local));
      for (uint64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        uint32_t w[2];
        detail::load_words<2>(in + m * shard + j * 8, nvrar_valid(shard_len(m), j), w);
        pre(w);
        Ll16::write(to + j, w, flag);
      }
    }
    const bool single = at.steps == 0;
    LlPacket* partial_to = single ? done : nvrar_local(h, at.send(parity, at.first_send()));
    bool ok = true;
    for (uint64_t j = lo + threadIdx.x; j < hi && ok; j += blockDim.x) {
      using R = Reducer<kType, kOp, 8>;
      Acc acc[R::kElems];
      for (uint32_t m = 0; m < at.g && ok; ++m) {
        uint32_t w[2];
        if (m == at.local) {
          detail::load_words<2>(in + m * shard + j * 8, nvrar_valid(shard_len(m), j), w);
          pre(w);
        } else {
          ok = nvrar_read(h, gin_world_rank(node, m), nvrar_local(h, at.rs(parity, m)) + j, flag, w);
        }
        if (m == 0) {
          R::start(acc, w);
        } else {
          R::fold(acc, w);
        }
      }
      uint32_t w[2];
      R::finish(acc, single ? finish : Fin::partial(), w);
      if (ok) Ll16::write(partial_to + j, w, flag);
    }
    if (!__syncthreads_and(ok)) return;
    WEFT_TRACE_MARK(reduce_scatter);

    // Phase 2: the steps across nodes. A step's partial lies in send[s] (this thread's own
    // packets); its result goes to send[s + 1], or, finished, to `done`.
    const uint64_t put_offset = range.put_lo * sizeof(LlPacket);
    const uint64_t put_bytes = (range.put_hi - range.put_lo) * sizeof(LlPacket);
    uint64_t* const arrivals = state + gridDim.x;
    auto put = [&](uint32_t to_node, uint32_t slot, uint64_t from) {
      if (!nvrar_last_to_arrive(range, parity, slot, arrivals)) return true;
      return gin_put_unordered(GinCoopBlock{}, h, rail, to_node, kNvrarWindow, at.recv(parity, slot) + put_offset,
                               kNvrarWindow, from + put_offset, put_bytes);
    };
    const uint32_t hand_back = at.steps - 1;
    for (uint32_t s = 0; s < at.steps; ++s) {
      const int b = at.exchange(s);
      if (b < 0 && s == 0) {  // the fold: folded nodes send, survivors below 2r receive
        if (at.folded() && !put(at.node + 1, 0, at.send(parity, 0))) return;
        if (!at.fold_receiver()) continue;
      } else if (b < 0) {  // the hand-back: folded nodes receive the finished shard
        if (!at.folded()) continue;
        const uint32_t peer = gin_world_rank(rail, at.node + 1);
        for (uint64_t j = lo + threadIdx.x; j < hi && ok; j += blockDim.x) {
          uint32_t w[2];
          ok = nvrar_read(h, peer, nvrar_local(h, at.recv(parity, s)) + j, flag, w);
          if (ok) Ll16::write(done + j, w, flag);
        }
        if (!__syncthreads_and(ok)) return;
        continue;
      } else if (at.folded()) {  // an exchange, which folded nodes sit out
        continue;
      } else if (!put(at.node_of(at.survivor() ^ (1u << b)), s, at.send(parity, s))) {
        return;
      }
      // This node receives at step s: from its folded node (the fold) or its exchange partner.
      const uint32_t partner = b < 0 ? 0 : at.survivor() ^ (1u << b);
      const uint32_t from_node = b < 0 ? at.node - 1 : at.node_of(partner);
      const bool theirs_first = b < 0 || partner < at.survivor();
      const bool final_step = b >= 0 && static_cast<uint32_t>(b) + 1 == at.q;
      // The fold receiver's partial waits in the first exchange's slot, which the fold rewrites.
      const LlPacket* mine = nvrar_local(h, at.send(parity, b < 0 ? 1 : s));
      LlPacket* result = final_step ? done : nvrar_local(h, at.send(parity, b < 0 ? 1 : s + 1));
      const LlPacket* theirs = nvrar_local(h, at.recv(parity, s));
      const uint32_t peer = gin_world_rank(rail, from_node);
      const Fin fin = final_step ? finish : Fin::partial();
      for (uint64_t j = lo + threadIdx.x; j < hi && ok; j += blockDim.x) {
        uint32_t own[2], other[2], w[2];
        own_words(mine + j, own);
        ok = nvrar_read(h, peer, theirs + j, flag, other);
        if (!ok) break;
        if (theirs_first) {
          fold_pair(other, own, fin, w);
        } else {
          fold_pair(own, other, fin, w);
        }
        Ll16::write(result + j, w, flag);
      }
      if (!__syncthreads_and(ok)) return;
      if (final_step && at.fold_receiver() && !put(at.node - 1, hand_back, at.done(parity))) return;
    }
    WEFT_TRACE_MARK(across_nodes);

    // Phase 3: the finished shard into the output and every member's ag slot, then the members'.
    for (uint64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
      uint32_t w[2];
      own_words(done + j, w);
      detail::store_words<2>(out + at.local * shard + j * 8, nvrar_valid(shard_len(at.local), j), w);
      for (uint32_t m = 0; m < at.g; ++m) {
        if (m != at.local) Ll16::write(nvrar_lsa(h, m, at.ag(parity, at.local)) + j, w, flag);
      }
    }
    for (uint32_t m = 0; m < at.g && ok; ++m) {
      if (m == at.local) continue;
      const LlPacket* from = nvrar_local(h, at.ag(parity, m));
      const uint32_t peer = gin_world_rank(node, m);
      for (uint64_t j = lo + threadIdx.x; j < hi && ok; j += blockDim.x) {
        uint32_t w[2];
        ok = nvrar_read(h, peer, from + j, flag, w);
        if (ok) detail::store_words<2>(out + m * shard + j * 8, nvrar_valid(shard_len(m), j), w);
      }
    }
    if (!__syncthreads_and(ok)) return;
    WEFT_TRACE_MARK(all_gather);
  }
  if (threadIdx.x == 0) state[blockIdx.x] = before + rounds;
}
