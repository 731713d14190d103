// The reducing collectives. Compiled once per (WEFT_DTYPE, WEFT_REDOP) pair (DataType /
// ReduceOp values), so every kernel is specialised for its element type and operator. Every
// result is folded in rank order, so all ranks get bitwise identical results, run after run.
// Every fully reduced element goes through Fin (elementwise.cuh): Avg's division, so no
// algorithm needs a pass of its own for it. PreMulSum is NCCL's pre-operation: every rank
// multiplies its OWN input by its OWN scalar (Pre, elementwise.cuh's Premultiply; the scalar
// the launch's CollContext carries, by value or a device address read when the kernel runs)
// where that input enters the reduction or leaves for a peer, then the kernels sum. Each
// kernel applies it exactly once to every contributing element of its own input: at the
// local read of ll_reduce and ring_reduce, in ll_put's packets and in push_padded's pushes
// (a rank's push into its own scratch included); never to a peer's data or a partial result.
// Protocols (LL, HB) and their invariants: weft/collective.cuh.
//
//   weft_allreduce_ll       one-shot: every rank sends its whole input to every peer as
//                           packets and reduces all ranks' packets.
//   weft_allreduce_ll2      two-shot: scatter shards as packets, each rank reduces its shard
//                           and sends the result as packets to every peer.
//   weft_allreduce_hb       two-shot through scratch, push only (NVLink stores): shard d of
//                           every input goes into rank d's scratch, rank d reduces it (local
//                           reads) and stores the result into every rank's result region, or
//                           (zero-copy, registered outputs) straight into every rank's output.
//   weft_allreduce_ring     ring reduce-scatter then ring all-gather through the next rank's
//                           scratch, one step slot each, signals per (neighbour, block).
//   weft_allreduce_port_ring  the same ring over PortChannels (MSCCL++ "2PR"): the copy engine
//                           moves every byte between ranks (the proxy's puts), the GPU only
//                           reduces, a large step in pieces so that one piece's reduction
//                           overlaps another's copy; one driver block talks to the proxy for
//                           the grid.
//   weft_allreduce_port_allpairs  every rank puts its input to every peer over PortChannels
//                           and folds all inputs: one network crossing, for small messages.
//   weft_reduce_scatter_ll  the scatter and reduce of the two-shot, shard d = block d of input.
//   weft_reduce_scatter_hb  push shards into their owners' scratch, reduce there.
//   weft_reduce_ll          every rank sends its input to the root as packets.
//   weft_reduce_hb          the two-shot HB over the non-roots, results to the root only.
#include "weft/collective.cuh"
#include "weft/elementwise.cuh"
#include "weft/port_channel.cuh"

using namespace weft;
using namespace weft::coll;

constexpr DataType kType = static_cast<DataType>(WEFT_DTYPE);
constexpr ReduceOp kOp = static_cast<ReduceOp>(WEFT_REDOP);
using Elem = Element<kType>;
using T = typename Elem::T;
using Acc = typename Elem::Acc;
/// Avg's division (elementwise.cuh), once per fully reduced element.
using Fin = Finish<kType, kOp>;
/// PreMulSum's multiplication of this rank's own input by its scalar (elementwise.cuh), once per
/// contributing element; a copy for every other operator.
using Pre = Premultiply<kType, kOp>;

constexpr uint32_t kEveryRank = 0xffffffffu;

// ---------------------------------------------------------------------------------------------
// LL

/// Reduces this block's packets of a `len`-byte shard in rank order: this rank's words come
/// from `mine` (its own input, premultiplied here), rank r's from slot `first_slot + r` of the
/// local packet buffer (premultiplied by their sender's ll_put). `emit(j, valid, words)`
/// consumes each result packet. Called by: every thread. False on timeout.
template <typename Emit>
__device__ __forceinline__ bool ll_reduce(const CollContext& c, const LlRound& round, uint32_t first_slot,
                                          const char* mine, uint64_t len, const LlRange& range, Emit emit) {
  using R = Reducer<kType, kOp, 8>;
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  for (uint64_t j = range.lo + threadIdx.x; j < range.hi && j * 8 < len; j += blockDim.x) {
    Acc acc[R::kElems];
    for (uint32_t r = 0; r < c.ranks; ++r) {
      uint32_t w[2];
      if (r == c.rank) {
        detail::load_words<2>(mine + j * 8, packet_valid(len, j), w);
        pre(w);
      } else if (!ll_read(packet_at(c, c.packets, round, first_slot + r, j), round, channel(c, r).semaphore.wait, w)) {
        return false;
      }
      if (r == 0) {
        R::start(acc, w);
      } else {
        R::fold(acc, w);
      }
    }
    uint32_t out[2];
    R::finish(acc, finish, out);
    emit(j, packet_valid(len, j), out);
  }
  return true;
}

/// A `store` emitter: result packet j goes to `dst + 8j`.
struct StoreTo {
  char* dst;
  __device__ __forceinline__ void operator()(uint64_t j, uint32_t valid, const uint32_t (&w)[2]) const {
    detail::store_words<2>(dst + j * 8, valid, w);
  }
};

__device__ __forceinline__ auto every_peer() {
  return [](uint32_t) { return true; };
}
__device__ __forceinline__ auto only(uint32_t d) {
  return [d](uint32_t p) { return p == d; };
}

extern "C" __global__ void __launch_bounds__(512)
    weft_allreduce_ll(CollContext c, const char* input, char* output, uint64_t bytes) {
  LlRound round;
  if (!ll_round_begin(c, round)) return;
  const LlRange range(packet_count<Ll16>(bytes));
  ll_put(c, round, c.rank, input, bytes, range, every_peer(), Pre::of(c));
  ll_reduce(c, round, 0, input, bytes, range, StoreTo{output});
  ll_round_end(c, round);
}

// Shard d: bytes [d * shard, d * shard + len(d)) with shard a multiple of 8; slots [0, ranks)
// carry the scattered inputs, slots [ranks, 2 ranks) the reduced shards.
extern "C" __global__ void __launch_bounds__(512)
    weft_allreduce_ll2(CollContext c, const char* input, char* output, uint64_t bytes) {
  LlRound round;
  if (!ll_round_begin(c, round)) return;
  const uint64_t shard = (div_ceil(bytes, c.ranks) + 7) & ~uint64_t(7);
  const LlRange range(shard / 8);
  auto len = [&](uint32_t d) { return bytes > d * shard ? min_u64(shard, bytes - d * shard) : 0; };
  const Pre pre = Pre::of(c);
  for (uint32_t k = 1; k < c.ranks; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ll_put(c, round, c.rank, input + d * shard, len(d), range, only(d), pre);
  }
  char* mine = output + c.rank * shard;
  auto keep_and_send = [&](uint64_t j, uint32_t valid, const uint32_t (&w)[2]) {
    detail::store_words<2>(mine + j * 8, valid, w);
    for (uint32_t k = 1; k < c.ranks; ++k) {
      const uint32_t peer = (c.rank + k) % c.ranks;
      Ll16::write(packet_at(c, channel(c, peer).remote_packet_buffer, round, c.ranks + c.rank, j), w, round.flag);
    }
  };
  bool ok = ll_reduce(c, round, 0, input + c.rank * shard, len(c.rank), range, keep_and_send);
  for (uint32_t k = 1; k < c.ranks && ok; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ok = ll_get(c, round, d, c.ranks + d, output + d * shard, len(d), range);
  }
  ll_round_end(c, round);
}

// Shard d is block d of the input (`shard_bytes` each); the result is this rank's shard.
extern "C" __global__ void __launch_bounds__(512)
    weft_reduce_scatter_ll(CollContext c, const char* input, char* output, uint64_t shard_bytes) {
  LlRound round;
  if (!ll_round_begin(c, round)) return;
  const LlRange range(packet_count<Ll16>(shard_bytes));
  const Pre pre = Pre::of(c);
  for (uint32_t k = 1; k < c.ranks; ++k) {
    const uint32_t d = (c.rank + k) % c.ranks;
    ll_put(c, round, c.rank, input + d * shard_bytes, shard_bytes, range, only(d), pre);
  }
  ll_reduce(c, round, 0, input + c.rank * shard_bytes, shard_bytes, range, StoreTo{output});
  ll_round_end(c, round);
}

extern "C" __global__ void __launch_bounds__(512)
    weft_reduce_ll(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  LlRound round;
  if (!ll_round_begin(c, round)) return;
  const LlRange range(packet_count<Ll16>(bytes));
  if (c.rank != root) {
    ll_put(c, round, c.rank, input, bytes, range, only(root), Pre::of(c));
  } else {
    ll_reduce(c, round, 0, input, bytes, range, StoreTo{output});
  }
  ll_round_end(c, round);
}

// ---------------------------------------------------------------------------------------------
// HB

/// Reduces bytes `[lo, hi)` (lo 16-aligned) in rank order and applies `finish`, whole 16-byte vectors through
/// round_up16(hi): rank r's copy is at `in[r] + lo`, every `in` is scratch, 16-aligned and
/// padded to 16 bytes (see push_padded), so no element is read on its own. `store(at, v)`
/// puts the result vector of bytes `[at, at + 16)` wherever the caller's outputs are; it must
/// keep the rule of push_padded (no peer receives a sub-word store), which whole vectors into
/// padded scratch or into the 16-aligned prefix of a user buffer do.
template <typename Store>
__device__ __forceinline__ void reduce_range(const char* const* in, uint32_t ranks, uint64_t lo, uint64_t hi,
                                             const Fin& finish, const Store& store) {
  using R = Reducer<kType, kOp, 16>;
  const uint64_t vectors = div_ceil(hi - lo, 16);
  for (uint64_t v = threadIdx.x; v < vectors; v += blockDim.x) {
    const uint64_t at = lo + v * 16;
    Acc acc[R::kElems];
    uint4 x[MAX_RANKS];
    // Issue every rank's load before reducing.
#pragma unroll
    for (uint32_t r = 0; r < MAX_RANKS; ++r) {
      if (r < ranks) x[r] = *reinterpret_cast<const uint4*>(in[r] + at);
    }
    for (uint32_t r = 0; r < ranks; ++r) {
      const uint32_t(&w)[4] = *reinterpret_cast<const uint32_t(*)[4]>(&x[r]);
      if (r == 0) {
        R::start(acc, w);
      } else {
        R::fold(acc, w);
      }
    }
    uint32_t res[4];
    R::finish(acc, finish, res);
    store(at, make_uint4(res[0], res[1], res[2], res[3]));
  }
}

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
    if (j < rounds) {
      const Shards s = shards(j);
      for (uint32_t k = 0; k < owners; ++k) {
        const uint32_t i = (mine == kNoShard ? k : mine + k) % owners;
        const uint64_t at = static_cast<uint64_t>(rank) * s.shard - static_cast<uint64_t>(i) * s.shard;
        push_padded(slots(owner(i), j) + at, input + j * round, s.lo(i), s.hi(i), pre);
      }
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
    }
    if (j >= 2 && receives) {
      const Shards s = shards(j - 2);
      const uint64_t first = (j - 2) * round;
      // Staged bytes of this round start at `from` (zero-copy: past every whole vector).
      const uint64_t from = zero_copy ? direct_bytes - first : 0;
      for (uint32_t i = 0; i < owners; ++i) {
        copy_range(output + first, results(rank, j - 2), s.lo(i) > from ? s.lo(i) : from, s.hi(i));
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_hb(CollContext c, const char* input, char* output, uint64_t bytes, PeerBuffers outputs) {
  two_shot_hb(c, input, output, bytes, kEveryRank, outputs);
}

extern "C" __global__ void __launch_bounds__(1024)
    weft_reduce_hb(CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root) {
  two_shot_hb(c, input, output, bytes, root, PeerBuffers{});
}

/// Tells the next rank this block's writes into its scratch are done (one release signal after
/// a block barrier). Called by: every thread.
__device__ __forceinline__ void ring_signal(const CollContext& c, uint32_t next) {
  __syncthreads();
  if (threadIdx.x == 0) semaphore_signal(semaphore(c, next, blockIdx.x));
}

/// Waits (bounded) for the previous rank's signal. Called by: every thread; false on timeout.
__device__ __forceinline__ bool ring_wait(const CollContext& c, uint32_t prev) {
  bool ok = true;
  if (threadIdx.x == 0) ok = semaphore_wait(semaphore(c, prev, blockIdx.x));
  return __syncthreads_and(ok);
}

/// One reduce step of the ring on bytes `[lo, hi)`: `partial` (a padded scratch slot, or null
/// at the first step) folded with `input` (this rank's own, any alignment, through `pre`: every
/// byte of it is read by exactly one step of a round); the result goes as whole 16-byte
/// vectors into `to` (a peer's padded slot, or null) and, when `out` is set, exactly into
/// `out`. `finish`: Fin::of for the last step, Fin::partial() for a partial result.
__device__ __forceinline__ void ring_reduce(const char* partial, const char* input, char* to, char* out, uint64_t lo,
                                            uint64_t hi, const Fin& finish, const Pre& pre) {
  using R = Reducer<kType, kOp, 16>;
  for (uint64_t at = lo + threadIdx.x * 16; at < hi; at += blockDim.x * 16) {
    const uint32_t n = static_cast<uint32_t>(min_u64(16, hi - at));
    uint32_t mine[4];
    if (n == 16) {
      const uint4 x = load16_any(input + at);
      mine[0] = x.x, mine[1] = x.y, mine[2] = x.z, mine[3] = x.w;
    } else {
      detail::load_words<4>(input + at, n, mine);
    }
    pre(mine);
    Acc acc[R::kElems];
    if (partial != nullptr) {
      const uint32_t(&p)[4] = *reinterpret_cast<const uint32_t(*)[4]>(partial + at);
      R::start(acc, p);
      R::fold(acc, mine);
    } else {
      R::start(acc, mine);
    }
    uint32_t res[4];
    R::finish(acc, finish, res);
    if (to != nullptr) *reinterpret_cast<uint4*>(to + at) = make_uint4(res[0], res[1], res[2], res[3]);
    if (out != nullptr) detail::store_words<4>(out + at, n, res);
  }
}

/// Ring AllReduce in rounds of `chunk_bytes`, each split into `ranks` shards. Reduce-scatter:
/// at step s rank r folds shard (r - s) mod n (its input with the partial the previous rank
/// pushed at step s - 1) and pushes it into the next rank's slot s; at step n - 1 it owns
/// shard r + 1, fully reduced, writes it out and starts the all-gather, which forwards each
/// received shard to the next rank's next slot. Scratch of every rank: 2(n - 1) step slots.
/// Every shard is reduced once, in one fixed order, so every rank gets the same bits.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_ring(CollContext c, const char* input, char* output, uint64_t bytes) {
  const uint32_t n = c.ranks, r = c.rank, next = (r + 1) % n, prev = (r + n - 1) % n;
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  for (uint64_t first = 0; first < bytes; first += c.chunk_bytes) {
    // The previous round's (or kernel's) readers of every slot are done.
    if (!hb_barrier(c)) return;
    const Shards s(min_u64(c.chunk_bytes, bytes - first), round_capacity(bytes, c.chunk_bytes), n);
    // Slot k of `owner` positioned so that shard d's bytes [lo(d), hi(d)) index it directly.
    auto slot = [&](uint32_t owner, uint32_t k, uint32_t d) {
      return scratch_of(c, owner) + static_cast<uint64_t>(k) * s.shard - static_cast<uint64_t>(d) * s.shard;
    };
    const char* in = input + first;
    char* out = output + first;
    for (uint32_t step = 0; step < n; ++step) {
      const uint32_t d = (r + n - step) % n;
      if (step > 0 && !ring_wait(c, prev)) return;
      const bool last = step == n - 1;
      const char* partial = step > 0 ? slot(r, step - 1, d) : nullptr;
      char* to = n == 1 ? nullptr : slot(next, step, d);  // at the last step: all-gather slot 0
      ring_reduce(partial, in, to, last ? out : nullptr, s.lo(d), s.hi(d), last ? finish : Fin::partial(), pre);
      if (n > 1) ring_signal(c, next);
    }
    for (uint32_t t = 1; t < n; ++t) {
      const uint32_t d = (r + n - t + 1) % n;
      if (!ring_wait(c, prev)) return;
      const uint32_t k = n - 1 + t - 1;  // all-gather slot t - 1
      copy_range(out, slot(r, k, d), s.lo(d), s.hi(d));
      if (t < n - 1) {
        push_padded(slot(next, k + 1, d), slot(r, k, d), s.lo(d), s.hi(d));
        ring_signal(c, next);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Ring over PortChannels ("2PR")

/// Most bytes one FIFO put carries (its size field is 32-bit); larger puts are split.
constexpr uint64_t kPortMaxPut = uint64_t(1) << 31;

/// `size` bytes from offset `src` of the channel's local memory to offset `dst` of the peer's
/// memory, as puts of at most kPortMaxPut bytes with a signal on the last (a signal alone when
/// `size` is 0), so the peer's wait covers every piece. Offsets stay below 4 GiB: the host keeps
/// the registered scratch under it. Called by ONE thread.
__device__ __forceinline__ bool port_put_signal_split(const PortChannelDeviceHandle& ch, uint64_t dst, uint64_t src,
                                                      uint64_t size) {
  while (size > kPortMaxPut) {
    if (!port_put(ch, static_cast<uint32_t>(dst), static_cast<uint32_t>(src), static_cast<uint32_t>(kPortMaxPut))) {
      return false;
    }
    dst += kPortMaxPut, src += kPortMaxPut, size -= kPortMaxPut;
  }
  if (size == 0) return port_signal(ch);
  return port_put_with_signal(ch, static_cast<uint32_t>(dst), static_cast<uint32_t>(src), static_cast<uint32_t>(size));
}

/// The smallest piece a step's shard is cut into: a shard crosses the ring in as many pieces of
/// at least this size as it holds, up to one per channel of the edge, so that one piece's
/// reduction overlaps another's copy (and, over a network, the pieces' transfers run on
/// connections of their own). Each piece costs the proxy a command, several µs of driver
/// calls, more than the copy engine takes for 512 KiB, and over TCP a message's latency.
/// Mirrored by weft-coll's port_ring.
constexpr uint64_t kPortRingPieceBytes = uint64_t(512) << 10;

/// One round of the port ring as every block sees it: the round's bytes split into `ranks`
/// 16-byte-aligned shards (from the round capacity, the same in every round of a launch, so a
/// short last round leaves the tails empty), each step's shard in `pieces` 16-byte-aligned
/// pieces (1 to `lanes`, the channels per edge), and each piece in one 16-byte-aligned slice
/// per worker block. Piece h crosses on channel h. Mirrored by weft-coll's port_ring (the
/// tests).
struct RingRound {
  uint64_t len, shard;
  uint32_t pieces;
  __device__ __forceinline__ RingRound(uint64_t len_, uint64_t capacity, uint32_t ranks, uint32_t lanes)
      : len(len_),
        shard(round_up16(div_ceil(capacity, ranks))),
        pieces(shard < 2 * kPortRingPieceBytes
                   ? 1
                   : static_cast<uint32_t>(min_u64(lanes, shard / kPortRingPieceBytes))) {}
  /// Bytes [a, b) of piece h of shard d.
  __device__ __forceinline__ void piece(uint32_t d, uint32_t h, uint64_t& a, uint64_t& b) const {
    const uint64_t lo = min_u64(static_cast<uint64_t>(d) * shard, len);
    const uint64_t hi = min_u64(static_cast<uint64_t>(d + 1) * shard, len);
    const uint64_t sub = round_up16(div_ceil(hi - lo, pieces));
    a = min_u64(lo + h * sub, hi);
    b = min_u64(lo + (h + 1) * sub, hi);
  }
};

/// Worker `w`'s slice [lo, hi) of the range [a, b) (a 16-aligned) shared by `workers` blocks.
__device__ __forceinline__ void worker_slice(uint64_t a, uint64_t b, uint32_t w, uint32_t workers, uint64_t& lo,
                                             uint64_t& hi) {
  const uint64_t sub = b > a ? round_up16(div_ceil(b - a, workers)) : 0;
  lo = min_u64(a + w * sub, b);
  hi = min_u64(lo + sub, b);
}

/// The grid of the PortChannel AllReduces: block 0 is the driver, whose thread 0 alone talks to
/// the proxy (the first block dispatched, so it runs even where workers wait to be scheduled),
/// and blocks 1.. are `gridDim.x - 1` workers. They hand work over through counters that only
/// grow, over launches too: the driver raises `ready` (a piece received, a round started); each
/// worker publishes how many times it has arrived (its slices written), and the driver waits
/// until every worker has arrived as often as it expects. Per-worker counts, not one shared sum:
/// a worker may arrive twice before the driver looks (two pieces of a step it reduces without a
/// hand-off between them), and a sum would then let a piece go out before a slow worker wrote
/// its slice. `state`: [ready, then per block {hand-offs, arrivals, rounds}], the same in every
/// block between launches (a worker's arrivals are also what it publishes; the driver's are
/// what it awaits of each worker), so nothing is reset and graph replays need no host work.
/// Waits are bounded with `ctx`.
struct PortGrid {
  static constexpr uint32_t kWords = 3;
  uint64_t* ready;
  uint64_t* blocks;
  uint64_t* counts;
  const WaitContext* ctx;
  uint32_t workers;
  bool driver;
  /// This worker's index (blocks 1.. are workers 0..).
  uint32_t worker;
  /// Hand-offs raised (driver) or consumed (worker), arrivals awaited per worker or made, and
  /// the rounds of earlier launches (round `round` of this launch is round `base + round`).
  uint64_t handed, arrived, base;

  __device__ __forceinline__ PortGrid(uint64_t* state, const WaitContext& ctx_)
      : ready(state),
        blocks(state + 1),
        counts(state + 1 + kWords * static_cast<uint64_t>(blockIdx.x)),
        ctx(&ctx_),
        workers(gridDim.x - 1),
        driver(blockIdx.x == 0),
        worker(blockIdx.x - 1),
        handed(counts[0]),
        arrived(counts[1]),
        base(counts[2]) {}

  /// Driver: the next piece or round is the workers'.
  __device__ __forceinline__ void hand_off() { ptx::st_release_sys(ready, ++handed); }
  /// Driver: waits until every worker has arrived once more: each poll issues every worker's
  /// relaxed load before using any (one memory latency, not one per worker), and one acquire
  /// fence covers them all. False on timeout.
  __device__ __forceinline__ bool all_arrived() {
    ++arrived;
    Spin spin;
    for (;;) {
      uint64_t least = ~uint64_t(0);
      for (uint32_t w = 1; w <= workers; ++w) least = min_u64(least, ptx::ld_relaxed_sys(blocks + kWords * w + 1));
      if (least >= arrived) break;
      if (spin.expired(*ctx)) {
        report_timeout(*ctx, WaitOp::RingHandoff, arrived, least);
        return false;
      }
    }
    ptx::fence_acq_rel_sys();
    return true;
  }
  /// Worker (every thread): waits for the driver's next hand-off. False on timeout.
  __device__ __forceinline__ bool take() {
    ++handed;
    bool ok = true;
    if (threadIdx.x == 0) ok = wait_at_least(ready, handed, *ctx, WaitOp::RingHandoff);
    return __syncthreads_and(ok);
  }
  /// Worker (every thread): the block's writes so far are done.
  __device__ __forceinline__ void arrive() {
    __syncthreads();  // the block's writes come before the release
    ++arrived;
    if (threadIdx.x == 0) ptx::st_release_sys(counts + 1, arrived);
  }
  /// Keeps the counts for the next launch, which ran `rounds` rounds (a worker's arrivals are
  /// stored already). Called by: every thread.
  __device__ __forceinline__ void save(uint64_t rounds) const {
    if (threadIdx.x == 0) {
      counts[0] = handed;
      if (driver) counts[1] = arrived;
      counts[2] = base + rounds;
    }
  }
};

/// One rank alone: its output is its input (PreMulSum: times the scalar), by the whole grid.
__device__ __forceinline__ void port_single_rank(const CollContext& c, const char* input, char* output,
                                                 uint64_t bytes) {
  uint64_t lo, hi;
  worker_slice(0, bytes, blockIdx.x, gridDim.x, lo, hi);
  ring_reduce(nullptr, input, nullptr, output, lo, hi, Fin::of(c), Pre::of(c));
}

/// Ring AllReduce over PortChannels (MSCCL++ "2PR"): the reduce-scatter and all-gather of
/// weft_allreduce_ring, with every transfer a put-with-signal the proxy executes with the copy
/// engine. The GPU only reduces and copies out. Every shard is reduced once, in the native
/// ring's order, so every rank gets the same bits, run after run.
///
/// The grid is one driver block (block 0) and `gridDim.x - 1` workers (PortGrid); the driver's
/// thread 0 alone talks to the proxy, so a round costs the proxy one command per (step, piece):
/// each command costs the proxy's thread several µs of driver calls. The driver waits for the
/// previous rank's signals and hands each received piece to the workers; the workers reduce
/// their slices of the piece and arrive; once every worker arrived, the driver pushes the
/// piece's put (PortGrid). One pusher keeps each channel's commands in step order,
/// which the receiver's waits rely on (a signal covers its put only).
///
/// `channels` = {`lanes` channels of the edge rank -> next (puts, and on channel 0 the next
/// rank's credits), `lanes` of the edge prev -> rank (the previous rank's signals; credits go
/// back on channel 0)}. Piece h of a step crosses on channel h: over the copy engine every
/// channel to a peer shares one stream, over TCP each has its own sender thread and sockets.
/// `scratch` (registered with the proxy, < 4 GiB) holds two sets of 3n - 2 slots of
/// `slot_bytes` (>= any shard): 2(n - 1) receive slots (written only by the previous rank's
/// puts: reduce-scatter step s into slot s, the reduced shard into slot n - 1, all-gather
/// forwards into slots n..2n-3), then n staging slots (step s reduces into staging slot s; the
/// copy engine reads it from there). Rounds are counted over launches too, and round g uses set
/// g % 2, so round g + 1 starts while round g drains, across a launch boundary as well.
///
/// Credits: after round g a rank signals the previous one that its set g % 2 is free again, once
/// its workers have read the round's receive slots and, with 3 ranks or more, a flush of every
/// channel saw the round's forwards applied (they read receive slots). Before round g >= 2 the
/// driver waits for the next rank's credit of round g - 2; that credit also says the next rank
/// received every put of round g - 2, so the copy engine is done with this rank's staging slots
/// of the set. Rounds 0 and 1 find fresh scratch. So a launch of one round waits for a credit
/// signalled two rounds (usually two launches) earlier: no round trip on its critical path.
/// `state`: PortGrid's.
/// Inputs and outputs are read and written by this GPU's threads only (any alignment, no
/// registration); puts go between padded scratch slots, whole 16-byte vectors rounded up. Every
/// wait is bounded and names the rank, peer and operation.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_port_ring(CollContext c, const char* input, char* output, uint64_t bytes,
                             const PortChannelDeviceHandle* channels, uint32_t lanes, char* scratch,
                             uint64_t slot_bytes, uint64_t* state) {
  const uint32_t n = c.ranks, r = c.rank;
  if (bytes == 0) return;  // (the host launches none)
  if (n == 1) return port_single_rank(c, input, output, bytes);
  // Channel h of the edge to the next rank, and of the edge from the previous one; credits go
  // on channel 0.
  auto out_ch = [&](uint32_t h) -> const PortChannelDeviceHandle& { return channels[h]; };
  auto in_ch = [&](uint32_t h) -> const PortChannelDeviceHandle& { return channels[lanes + h]; };
  PortGrid grid(state, in_ch(0).semaphore.wait);
  if (grid.driver && threadIdx.x != 0) return;
  const uint32_t workers = grid.workers, w = grid.worker;
  const uint64_t base = grid.base;
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  const uint64_t capacity = round_capacity(bytes, c.chunk_bytes);
  const uint64_t rounds = div_ceil(bytes, c.chunk_bytes);
  const uint64_t set_bytes = static_cast<uint64_t>(3 * n - 2) * slot_bytes;
  const uint32_t staging = 2 * (n - 1);
  // Pieces per step, the same in every round of the launch (they depend on the capacity).
  const uint32_t pieces = RingRound(capacity, capacity, n, lanes).pieces;
  // Byte x of shard d in slot k of `set` is at offset `at(set, k, d, g) + x` of the scratch (slot
  // k positioned so that shard d's bytes index it directly).
  auto at = [&](uint64_t set, uint32_t k, uint32_t d, const RingRound& g) {
    return set * set_bytes + static_cast<uint64_t>(k) * slot_bytes - static_cast<uint64_t>(d) * g.shard;
  };

  if (grid.driver) {
    // A round's end: its workers are done with the receive slots and, with 3 ranks or more, a
    // flush saw its forwards applied (they read receive slots; 2 ranks forward nothing); then
    // its set is free again, two rounds later. The staging slots need no flush: the next
    // rank's credit for the round comes after it waited for every put of the round.
    auto finish = [&]() {
      bool done = grid.all_arrived();
      for (uint32_t h = 0; done && n > 2 && h < pieces; ++h) done = port_flush(out_ch(h));
      return done && port_signal(in_ch(0));
    };
    bool ok = true;
    for (uint64_t round = 0; ok && round < rounds; ++round) {
      const RingRound g(min_u64(capacity, bytes - round * capacity), capacity, n, lanes);
      const uint64_t set = (base + round) % 2;
      auto put = [&](uint32_t h, uint32_t from, uint32_t to, uint32_t d, uint64_t a, uint64_t b) {
        const uint64_t size = b > a ? round_up16(b) - a : 0;
        return port_put_signal_split(out_ch(h), at(set, to, d, g) + a, at(set, from, d, g) + a, size);
      };
      // The next rank's receive slots of this set are free; the workers may start the round.
      if (base + round >= 2 && !(ok = port_wait(out_ch(0)))) break;
      grid.hand_off();
      if (round > 0 && !(ok = finish())) break;
      for (uint32_t step = 0; ok && step < n; ++step) {
        const uint32_t d = (r + n - step) % n;
        for (uint32_t h = 0; ok && h < g.pieces; ++h) {
          uint64_t a, b;
          g.piece(d, h, a, b);
          if (step > 0) {
            if (!(ok = port_wait(in_ch(h)))) break;
            grid.hand_off();
          }
          ok = grid.all_arrived() && put(h, staging + step, step, d, a, b);
        }
      }
      for (uint32_t t = 1; ok && t < n; ++t) {
        const uint32_t d = (r + n - t + 1) % n;
        const uint32_t k = n - 2 + t;  // the receive slot of all-gather step t
        for (uint32_t h = 0; ok && h < g.pieces; ++h) {
          uint64_t a, b;
          g.piece(d, h, a, b);
          ok = port_wait(in_ch(h)) && (t == n - 1 || put(h, k, k + 1, d, a, b));
          if (ok) grid.hand_off();
        }
      }
    }
    if (!ok || !finish()) return;
  } else {
    for (uint64_t round = 0; round < rounds; ++round) {
      const uint64_t first = round * capacity;
      const RingRound g(min_u64(capacity, bytes - first), capacity, n, lanes);
      const uint64_t set = (base + round) % 2;
      const char* in = input + first;
      char* out = output + first;
      auto slot = [&](uint32_t k, uint32_t d) { return scratch + at(set, k, d, g); };
      if (!grid.take()) return;
      for (uint32_t step = 0; step < n; ++step) {
        const uint32_t d = (r + n - step) % n;
        const bool last = step == n - 1;
        for (uint32_t h = 0; h < g.pieces; ++h) {
          uint64_t a, b, lo, hi;
          g.piece(d, h, a, b);
          worker_slice(a, b, w, workers, lo, hi);
          if (step > 0 && !grid.take()) return;
          ring_reduce(step > 0 ? slot(step - 1, d) : nullptr, in, slot(staging + step, d), last ? out : nullptr, lo,
                      hi, last ? finish : Fin::partial(), pre);
          grid.arrive();
        }
      }
      for (uint32_t t = 1; t < n; ++t) {
        const uint32_t d = (r + n - t + 1) % n;
        for (uint32_t h = 0; h < g.pieces; ++h) {
          uint64_t a, b, lo, hi;
          g.piece(d, h, a, b);
          worker_slice(a, b, w, workers, lo, hi);
          if (!grid.take()) return;
          copy_range(out, slot(n - 2 + t, d), lo, hi);
        }
      }
      grid.arrive();  // the round's receive slots are read
    }
  }
  grid.save(rounds);
}

// ---------------------------------------------------------------------------------------------
// All pairs over PortChannels

/// AllReduce over PortChannels in one step (the latency algorithm across nodes): every rank puts
/// its input to every peer, then folds all ranks' inputs in rank order, so every rank gets the
/// same bits, run after run. One crossing of the network per call instead of the ring's
/// 2(n - 1); each rank moves (n - 1) times its input, so it is for small messages.
///
/// The grid is a driver block and worker blocks, as in the port ring (PortGrid): the
/// workers copy their slices of a round's input into this rank's staging slot and arrive; the
/// driver pushes one put-with-signal to every peer (`channels[p]`, entry `rank` unused), waits
/// for every peer's, and hands the round to the workers, which fold it into the output
/// (PortGrid).
///
/// `scratch` (registered with the proxy) holds two sets of `ranks` slots of `slot_bytes`; round
/// g (counted over launches) uses set g % 2, where slot j holds rank j's input (slot `rank` is
/// this rank's staging, put into the same slot of every peer). No credits: every round, every
/// rank waits for every peer's put, and a peer puts round g + 1 only after it has folded round
/// g; so when round g + 2 reuses a set, every peer has folded round g out of it and received
/// this rank's round-g put (the copy engine is done with the staging slot). Every wait is
/// bounded and names the rank, peer and operation.
extern "C" __global__ void __launch_bounds__(1024)
    weft_allreduce_port_allpairs(CollContext c, const char* input, char* output, uint64_t bytes,
                                 const PortChannelDeviceHandle* channels, char* scratch, uint64_t slot_bytes,
                                 uint64_t* state) {
  const uint32_t n = c.ranks, r = c.rank;
  if (bytes == 0) return;  // (the host launches none)
  if (n == 1) return port_single_rank(c, input, output, bytes);
  PortGrid grid(state, channels[(r + 1) % n].semaphore.wait);
  if (grid.driver && threadIdx.x != 0) return;
  const uint64_t rounds = div_ceil(bytes, slot_bytes);
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  auto slot = [&](uint64_t set, uint32_t j) { return (set * n + j) * slot_bytes; };

  if (grid.driver) {
    for (uint64_t round = 0; round < rounds; ++round) {
      const uint64_t len = min_u64(slot_bytes, bytes - round * slot_bytes);
      const uint64_t mine = slot((grid.base + round) % 2, r);
      if (!grid.all_arrived()) return;
      for (uint32_t k = 1; k < n; ++k) {
        if (!port_put_signal_split(channels[(r + k) % n], mine, mine, round_up16(len))) return;
      }
      for (uint32_t k = 1; k < n; ++k) {
        if (!port_wait(channels[(r + n - k) % n])) return;
      }
      grid.hand_off();
    }
  } else {
    for (uint64_t round = 0; round < rounds; ++round) {
      const uint64_t first = round * slot_bytes;
      const uint64_t len = min_u64(slot_bytes, bytes - first);
      const uint64_t set = (grid.base + round) % 2;
      uint64_t lo, hi;
      worker_slice(0, len, grid.worker, grid.workers, lo, hi);
      push_padded(scratch + slot(set, r), input + first, lo, hi, pre);  // premultiplied once, for all
      grid.arrive();
      if (!grid.take()) return;
      // Every rank's slot of the set, this rank's own included (the staging copy is its input,
      // premultiplied, and 16-byte aligned).
      const char* in[MAX_RANKS];
      for (uint32_t j = 0; j < n; ++j) in[j] = scratch + slot(set, j);
      char* out = output + first;
      reduce_range(in, n, lo, hi, finish, [&](uint64_t at, const uint4& v) {
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
        detail::store_words<4>(out + at, static_cast<uint32_t>(min_u64(16, hi - at)), words);
      });
    }
  }
  grid.save(rounds);
}

/// Reduce-scatter through scratch in rounds: each shard contributes `slot` bytes per round,
/// pushed into slot `rank` of its owner (slots fill the first half of the scratch); the owner
/// reduces its slots into its result region (the second half, 16-byte aligned like the slots)
/// and copies that out, so the vector path never depends on the user buffer's alignment.
extern "C" __global__ void __launch_bounds__(1024)
    weft_reduce_scatter_hb(CollContext c, const char* input, char* output, uint64_t shard_bytes) {
  const uint32_t ranks = c.ranks, rank = c.rank;
  const uint64_t slot = (c.chunk_bytes / ranks) & ~uint64_t(15);
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  char* result = reinterpret_cast<char*>(c.scratch) + c.chunk_bytes;
  for (uint64_t first = 0; first < shard_bytes; first += slot) {
    if (!hb_barrier(c)) return;
    const Shards s(min_u64(slot, shard_bytes - first), round_capacity(shard_bytes, slot), 1);
    const uint64_t lo = s.lo(0), hi = s.hi(0);
    for (uint32_t k = 0; k < ranks; ++k) {
      const uint32_t d = (rank + k) % ranks;
      push_padded(scratch_of(c, d) + rank * slot, input + d * shard_bytes + first, lo, hi, pre);
    }
    if (!hb_barrier(c)) return;
    if (hi > lo) {
      const char* in[MAX_RANKS];
      for (uint32_t r = 0; r < ranks; ++r) in[r] = reinterpret_cast<const char*>(c.scratch) + r * slot;
      reduce_range(in, ranks, lo, hi, finish, [&](uint64_t at, const uint4& v) { *reinterpret_cast<uint4*>(result + at) = v; });
      __syncthreads();
      copy_range(output + first, result, lo, hi);
    }
  }
}
