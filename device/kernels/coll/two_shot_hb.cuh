// The two-shot HB through scratch that the HB AllReduce (allreduce_hb.cu) and the HB Reduce
// (reduce.cu) run.
#pragma once
#include "reducing.cuh"

/// Stores a result vector into every receiver's buffer: `out[k] + at` for k < n. Indexed
/// only by unrolled constants, so the pointers can stay in registers.
struct StoreEach {
  char* out[MAX_RANKS];
  uint32_t n;
  __device__ __forceinline__ void operator()(uint64_t at, const uint4& v) const {
#pragma unroll
    for (uint32_t k = 0; k < MAX_RANKS; ++k) {
      if (k < n) *reinterpret_cast<uint4*>(out[k] + at) = v;
    }
  }
};

constexpr uint32_t kNoShard = 0xffffffffu;

/// Two-shot through scratch, pipelined over rounds. `owners` ranks own one shard of every
/// round each: every rank for all-reduce and for a reduce of one round; every rank but the
/// root for a longer reduce (so the root's links carry each byte once in each direction, and
/// the pipeline overlaps the two). Scratch of every rank: two slot regions
/// (`ranks` slots of one shard each) and two result regions (one round each), used by
/// alternate rounds. Step j (each begins with a barrier): (A) push shard i of round j into slot
/// `rank` of its owner; (B) owners reduce their shard of round j - 1 from their slots into the
/// result region of every rank (`root == kEveryRank`) or of the root; (C) ranks with results
/// copy round j - 2 out. A region is written again two steps after it was written, by which
/// time the barrier has ordered its reader before the writer.
///
/// Zero-copy (`outputs` set, all-reduce only): (B) stores results straight into every rank's
/// registered output, and (C) copies out only the message's last partial vector (a peer's
/// output never gets a store past its end or narrower than a vector). The barriers keep it safe: a rank's output is first written in step 1, after
/// every rank has entered the kernel (so the stream's earlier work on that output is done);
/// the last writes (step `rounds`) come before the barrier of step rounds + 1, which every
/// rank passes before returning. In place, round j - 1's results overwrite input that block b
/// of every rank pushed in step j - 1, before the barrier of step j that the owner's block b
/// passed, while step j reads round j's input, bytes no result of round j - 1 touches; block b
/// handles the same sub-slices in every round and on every rank (see Shards).
__device__ __forceinline__ void two_shot_hb(const CollContext& c, const char* input, char* output, uint64_t bytes,
                                            uint32_t root, const PeerBuffers& outputs) {
  const uint32_t ranks = c.ranks, rank = c.rank;
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  // A reduce that fits one all-owner round keeps the root as an owner: unpipelined, spreading
  // its 1.5x bytes over two phases beats 1x in each of two serial phases (measured 4xH200).
  // So do two ranks: without the root the one owner would do every reduction alone.
  const uint64_t single_round = c.chunk_bytes / 2 / (16ull * ranks) * (16ull * ranks);
  const bool everyone = root == kEveryRank || ranks <= 2 || bytes <= single_round;
  const uint32_t owners = everyone ? ranks : ranks - 1;
  auto owner = [&](uint32_t i) { return everyone ? i : (root + 1 + i) % ranks; };
  const uint32_t mine = everyone ? rank : rank == root ? kNoShard : (rank + ranks - root - 1) % ranks;
  // 2 x ranks/owners x round of slots and 2 x round of results fill the 2 x chunk_bytes
  // scratch; the round is a multiple of 16 x owners, so a full round's shards tile it exactly.
  const uint64_t unit = 16ull * owners;
  const uint64_t round = c.chunk_bytes * owners / (owners + ranks) / unit * unit;
  const uint64_t slot_region = round / owners * ranks;
  const uint64_t rounds = div_ceil(bytes, round), capacity = round_capacity(bytes, round);
  auto shards = [&](uint64_t j) { return Shards(min_u64(round, bytes - j * round), capacity, owners); };
  auto slots = [&](uint32_t r, uint64_t j) { return scratch_of(c, r) + (j % 2) * slot_region; };
  auto results = [&](uint32_t r, uint64_t j) { return scratch_of(c, r) + 2 * slot_region + (j % 2) * round; };
  const bool receives = root == kEveryRank || rank == root;
  const bool zero_copy = root == kEveryRank && peer_buffer(outputs, rank) != nullptr;
  // Bytes the owners store straight into the outputs (zero-copy): whole vectors only.
  const uint64_t direct_bytes = zero_copy ? bytes & ~uint64_t(15) : 0;
  for (uint64_t j = 0; j < rounds + 2; ++j) {
    if (!hb_barrier(c)) return;
    WEFT_TRACE_MARK(barrier);
    if (j < rounds) {
      const Shards s = shards(j);
      for (uint32_t k = 0; k < owners; ++k) {
        const uint32_t i = (mine == kNoShard ? k : mine + k) % owners;
        const uint64_t at = static_cast<uint64_t>(rank) * s.shard - static_cast<uint64_t>(i) * s.shard;
        push_padded(slots(owner(i), j) + at, input + j * round, s.lo(i), s.hi(i), pre);
      }
      WEFT_TRACE_MARK(push);
    }
    if (j >= 1 && j - 1 < rounds && mine != kNoShard) {
      const Shards s = shards(j - 1);
      if (s.hi(mine) > s.lo(mine)) {
        const char* in[MAX_RANKS];
        const uint64_t first = (j - 1) * round, lo = s.lo(mine), hi = s.hi(mine);
        for (uint32_t r = 0; r < ranks; ++r) {
          in[r] = slots(rank, j - 1) + static_cast<uint64_t>(r) * s.shard - static_cast<uint64_t>(mine) * s.shard;
        }
        // The receivers' result regions, or (zero-copy) their outputs for the vectors of the
        // message's aligned prefix, [lo, split); the partial last vector, [split, hi), stages.
        // direct_bytes >= first: both are multiples of 16 and first <= bytes.
        const uint64_t split = zero_copy ? min_u64(hi, direct_bytes - first > lo ? direct_bytes - first : lo) : lo;
        // Receiver k is rank + k (all-reduce) or the root.
        StoreEach store;
        store.n = root == kEveryRank ? ranks : 1;
        auto aim = [&](bool direct) {
#pragma unroll
          for (uint32_t k = 0; k < MAX_RANKS; ++k) {
            const uint32_t r = root == kEveryRank ? (rank + k) % ranks : root;
            store.out[k] = direct ? peer_buffer(outputs, r) + first : results(r, j - 1);
          }
        };
        if (split > lo) {
          aim(true);
          reduce_range(in, ranks, lo, split, finish, store);
        }
        if (hi > split) {
          aim(false);
          reduce_range(in, ranks, split, hi, finish, store);
        }
      }
      WEFT_TRACE_MARK(reduce);
    }
    if (j >= 2 && receives) {
      const Shards s = shards(j - 2);
      const uint64_t first = (j - 2) * round;
      // Staged bytes of this round start at `from` (zero-copy: past every whole vector).
      const uint64_t from = zero_copy ? direct_bytes - first : 0;
      for (uint32_t i = 0; i < owners; ++i) {
        copy_range(output + first, results(rank, j - 2), s.lo(i) > from ? s.lo(i) : from, s.hi(i));
      }
      WEFT_TRACE_MARK(copy);
    }
  }
}
