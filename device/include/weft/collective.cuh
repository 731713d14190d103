// Building blocks of weft's collective kernels (device/kernels/coll/, and the executor), shared by every
// collective so each kernel states only its data movement.
//
// Two protocols share one communicator's state (CollContext):
//
//   LL  (small messages) Payload travels as LL16 packets into the receiver's packet buffer; the
//       packets' flags are the only synchronisation. The buffer has two halves chosen by flag
//       parity. Every LL launch uses the same grid, and block b of every rank handles the same
//       packet range, so per-block flags advance in lockstep on every rank. A rooted LL kernel
//       (broadcast, reduce) lets a rank run ahead of a peer that never answers it, so every LL
//       launch ends by writing a token (its flag) into each peer's buffer, and begins by
//       waiting until each peer's token shows it has finished the launch before last: only
//       then may this launch overwrite the half that launch used. Send/receive over LL
//       (weft_p2p_ll) involves only the pairs that exchange bytes, so it keeps lanes of its
//       own, one flag per (direction, peer, part), in a region of the packet buffer of its own
//       (LlPairLane): a pair's lanes advance exactly when that pair moves bytes.
//   HB  (large messages) Bulk copies through the peers' registered scratch, ordered by per
//       (peer, block) semaphores. Every HB launch uses the same grid and balances its signals
//       and waits on every (peer, block) semaphore it uses within the launch; block b of every
//       rank handles the same sub-slices. Scratch is push-only: no kernel reads a peer's
//       scratch, and every kernel waits, before it ends, for everything peers write into its
//       own. So a rank's scratch is quiet once its previous kernel has ended, and a launch may
//       write into a peer's scratch only after that peer has said, within the launch, that its
//       kernel has started: a barrier on every (peer, block) semaphore (most HB kernels begin
//       with one), or a credit from that peer (the chain, coll/chain.cuh).
#pragma once
#include "weft/weft.cuh"

namespace weft {
namespace coll {

/// Most ranks a collective handles: the extent of P2pPlan's per-peer arrays.
constexpr uint32_t MAX_RANKS = sizeof(P2pPlan::send_ptr) / sizeof(uint64_t);

__device__ __forceinline__ uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
__device__ __forceinline__ uint64_t round_up16(uint64_t x) { return (x + 15) & ~uint64_t(15); }
__device__ __forceinline__ uint64_t div_ceil(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ const MemoryChannelDeviceHandle& channel(const CollContext& c, uint32_t peer) {
  return reinterpret_cast<const MemoryChannelDeviceHandle*>(c.channels)[peer];
}

/// Rank r's scratch as this GPU sees it (its own, or the peer mapping).
__device__ __forceinline__ char* scratch_of(const CollContext& c, uint32_t r) {
  return r == c.rank ? reinterpret_cast<char*>(c.scratch) : reinterpret_cast<char*>(channel(c, r).dst);
}

/// Rank `r`'s buffer in `b` (null: not registered, or no such slot). A select over every slot
/// rather than `b.ptr[r]`: a run-time index into a by-value kernel parameter makes the compiler
/// copy the whole struct into every thread's local memory.
__device__ __forceinline__ char* peer_buffer(const PeerBuffers& b, uint32_t r) {
  uint64_t p = 0;
#pragma unroll
  for (uint32_t i = 0; i < MAX_RANKS; ++i) {
    if (i == r) p = b.ptr[i];
  }
  return reinterpret_cast<char*>(p);
}

/// The semaphore this rank shares with `peer` for HB block `block`.
__device__ __forceinline__ const SemaphoreDeviceHandle& semaphore(const CollContext& c, uint32_t peer,
                                                                  uint32_t block) {
  return reinterpret_cast<const SemaphoreDeviceHandle*>(c.semaphores)[peer * c.hb_blocks + block];
}

// ---------------------------------------------------------------------------------------------
// LL

using LlPacket = typename Ll16::Packet;

/// A block's packets of a message of `packets` packets that `parts` blocks share, dealt by a
/// pattern fixed in the packet index: runs of 32 consecutive packets (a warp's stores) go to
/// the parts in turn, so part `part` owns the same packet positions whatever the message's
/// length. The token of a part's lane then covers every position its writer stores into next:
/// with ranges sized from each message, a part of a longer message (or of a rooted call whose
/// root runs ahead) could overwrite packets that another part of the reader, still on the round
/// before last, has not read. Both the collective LL16 kernels (a part per block) and the
/// send/receive lanes deal this way.
struct LlDeal {
  uint64_t packets;
  uint32_t part, parts;
  /// This block's share when every block of the grid shares the message (the collective LL
  /// kernels: one part per block, `ll_blocks` of them in every launch).
  __device__ __forceinline__ static LlDeal of_block(uint64_t packets) { return {packets, blockIdx.x, gridDim.x}; }
  /// The packet this thread handles at its step k (0, 1, ...), increasing in k; at or past
  /// `packets` once the thread is done.
  __device__ __forceinline__ uint64_t at(uint64_t k) const {
    constexpr uint64_t run = 32;  // a local: a namespace-scope constant would add a symbol to every module
    const uint64_t e = threadIdx.x + k * blockDim.x;
    return (part + parts * (e / run)) * run + e % run;
  }
};

/// One LL launch of one block: its flag and the packet-buffer half the flag selects.
struct LlRound {
  uint32_t flag;
  uint64_t half;
};

/// Tokens of collective LL lane `lane` inside a packet buffer: `uint32_t[ranks]`, entry r
/// written by rank r. An LL16 launch's block b is lane b; an LL128 launch's is
/// `c.ll128_lane + b` (ll128.cuh), so the two kinds of launch may run grids of different sizes.
__device__ __forceinline__ uint32_t* ll_tokens(const CollContext& c, uint64_t buffer, uint32_t lane) {
  return reinterpret_cast<uint32_t*>(buffer + c.token_offset) + static_cast<uint64_t>(lane) * c.ranks;
}

// A lane is what one LL round belongs to: a flag in device memory that advances once per
// launch that uses the lane, a region of the packet buffers whose half the flag's parity
// selects, and tokens. Both ends of a lane advance its flag at the same launches, so a reader
// waits for exactly the flag the writer stores. A writer waits, before its round f, for the
// token of round f - 2 from every reader of the lane (the round that used the same half); a
// reader ends its round by writing its token into every writer of the lane. The collective LL
// launches have one lane per block, which every peer writes and reads (ll_round_begin,
// ll_round_end); the LL128 launches have one lane per block too, past the LL16 ones
// (`c.ll128_lane + b`), and wait for every block's token of every peer (ll_wait_every_token,
// ll128.cuh says why); send/receive has one per
// (direction, peer, part) (LlPairLane, ll_lane_begin, ll_lane_end). Both share the token wait (ll_wait_token) and the flag helpers; the
// collective pair keeps its own code because, routed through the lane template, ptxas
// allocated the collective kernels' registers differently (spilling in some types), and those
// kernels stay as measured. A lane type provides, each given the context: `flag` (the flag's
// slot), `half(c, flag)` (offset of the round's half in the packet buffers), `waits_for(c, t)`
// and `token_from(c, t)` (whether thread t waits for a token, and where it lies in this rank's
// buffer: t is the peer that writes it), `tells(c, t)` and `token_to(c, t)` (whether thread t
// writes this rank's token, and where in peer t's buffer).

/// The lane of part `part` of one direction of the send/receive LL launches (`weft_p2p_ll`):
/// sending to `peer` or receiving from it. A launch advances it only when that direction
/// carries bytes, which both ends of the pair know (the sender's send bytes, the receiver's
/// receive bytes), so a pair's lanes stay in step however the other pairs' traffic goes. One
/// writer (the sender, into slot `sender` of the receiver's half) and one reader.
struct LlPairLane {
  const LlPairs& pairs;
  uint32_t peer, part;
  bool sending;
  __device__ __forceinline__ uint32_t* flag(const CollContext& c) const {
    const uint32_t lane = ((sending ? 0u : c.ranks) + peer) * pairs.parts + part;
    return reinterpret_cast<uint32_t*>(pairs.flags) + lane;
  }
  __device__ __forceinline__ uint64_t half(const CollContext&, uint32_t flag) const {
    return pairs.offset + (flag & 1u) * pairs.half_bytes;
  }
  /// Tokens of part `part` in a packet buffer: `uint32_t[ranks]`, entry d written by receiver d.
  __device__ __forceinline__ uint32_t* tokens(const CollContext& c, uint64_t buffer) const {
    return reinterpret_cast<uint32_t*>(buffer + pairs.token_offset) + static_cast<uint64_t>(part) * c.ranks;
  }
  __device__ __forceinline__ bool waits_for(const CollContext&, uint32_t t) const { return sending && t == peer; }
  __device__ __forceinline__ const uint32_t* token_from(const CollContext& c, uint32_t t) const {
    return tokens(c, c.packets) + t;
  }
  __device__ __forceinline__ bool tells(const CollContext&, uint32_t t) const { return !sending && t == peer; }
  __device__ __forceinline__ uint32_t* token_to(const CollContext& c, uint32_t t) const {
    return tokens(c, channel(c, t).remote_packet_buffer) + c.rank;
  }
  /// The packets of `round` on this lane: the sender's slot of the receiver's buffer (the
  /// peer's mapping when sending, this rank's own when receiving).
  __device__ __forceinline__ LlPacket* packets(const CollContext& c, const LlRound& round) const {
    const uint64_t buffer = sending ? channel(c, peer).remote_packet_buffer : c.packets;
    const uint32_t sender = sending ? c.rank : peer;
    return reinterpret_cast<LlPacket*>(buffer + round.half + sender * pairs.slot_bytes);
  }
};

/// Starts an LL launch in this block: waits for the previous grid on the stream when launched
/// early (weft-coll's `early_launch`: the flags, inputs and outputs may be its work) and lets
/// the next one be scheduled. Called by: every thread, before the kernel touches memory.
__device__ __forceinline__ void ll_launch_begin() {
  ptx::grid_dependency_wait();
  ptx::launch_dependents();
}

/// Waits (bounded) until the token at `token`, first read as `seen`, reaches `want`: peer `t`
/// has finished reading the round before last. False on timeout (reported on t's channel).
/// Called by: the thread that waits for peer t.
__device__ __forceinline__ bool ll_wait_token(const CollContext& c, uint32_t t, const uint32_t* token, uint32_t want,
                                              uint32_t seen) {
  bool ok = true;
  Spin spin;
  // Signed distance: correct across the 32-bit wrap of the flags.
  while (ll_token_behind(seen, want)) {
    if (spin.expired(channel(c, t).semaphore.wait)) {
      report_timeout(channel(c, t).semaphore.wait, WaitOp::LlToken, want, seen);
      ok = false;
      break;
    }
    seen = ptx::ld_volatile_u32(token);
  }
  return ok;
}

/// The token this thread waits for in an own-block wait: thread t < ranks (t not this rank)
/// waits for peer t's token of this block, loaded as early as possible (`seen`).
struct LlOwnToken {
  bool waits;
  const uint32_t* token;
  uint32_t seen;
  __device__ __forceinline__ LlOwnToken(const CollContext& c, uint32_t lane)
      : waits(threadIdx.x < c.ranks && threadIdx.x != c.rank),
        token(ll_tokens(c, c.packets, lane) + threadIdx.x),
        seen(waits ? ptx::ld_volatile_u32(token) : 0u) {}
  /// Waits (bounded) until the same block of this thread's peer has finished reading the round
  /// whose flag is `want`. True for a thread with no peer; false on timeout.
  __device__ __forceinline__ bool wait(const CollContext& c, uint32_t want) const {
    return !waits || ll_wait_token(c, threadIdx.x, token, want, seen);
  }
};

/// Starts this block's LL16 launch: `ll_launch_begin`, then takes the block's next flag and
/// waits (bounded) until the same block of every peer has finished reading the launch before
/// last. Its own block's token is enough: every LL16 kernel deals the packets of a slot to
/// blocks by position (LlDeal::of_block, the same grid in every launch), so the positions this
/// block writes were read only by the peers' same block. The flag, the token and (when `input`
/// is set) this thread's first packet of the `input_len`-byte message at `input`, which its
/// `ll_put` reads first, are loaded together, so their latencies overlap instead of adding up
/// ahead of the first put. Called by: every thread of the block. False (for every thread) on
/// timeout.
__device__ __forceinline__ bool ll_round_begin(const CollContext& c, LlRound& round, const char* input = nullptr,
                                               uint64_t input_len = 0) {
  ll_launch_begin();
  const LlOwnToken own(c, blockIdx.x);
  round.flag = ll_flag_begin(reinterpret_cast<const uint32_t*>(c.flags) + blockIdx.x);
  round.half = (round.flag & 1u) * c.packet_half_bytes;
  if (input != nullptr) {
    const LlDeal deal = LlDeal::of_block(packet_count<Ll16>(input_len));
    const uint64_t first = deal.at(0);
    if (first < deal.packets) ptx::prefetch_l1(input + first * Ll16::kPayloadBytes);
  }
  const bool ok = own.wait(c, ll_flag_two_back(round.flag));
  return __syncthreads_and(ok);
}

/// Ends this block's round on collective LL lane `lane`: tells every peer it is done reading,
/// and records the flag. Called by: every thread of the block.
__device__ __forceinline__ void ll_round_end_on(const CollContext& c, const LlRound& round, uint32_t lane) {
  __syncthreads();
  const uint32_t t = threadIdx.x;
  if (t < c.ranks && t != c.rank) {
    uint32_t* token = ll_tokens(c, channel(c, t).remote_packet_buffer, lane) + c.rank;
    ptx::st_volatile_u32(token, round.flag);
  }
  ll_flag_end(reinterpret_cast<uint32_t*>(c.flags) + lane, round.flag);
}

/// Ends this block's LL16 launch (its lane is the block). Called by: every thread of the block.
__device__ __forceinline__ void ll_round_end(const CollContext& c, const LlRound& round) {
  ll_round_end_on(c, round, blockIdx.x);
}

/// Nothing to load ahead of a round's first put.
struct NoPrefetch {
  __device__ __forceinline__ void operator()() const {}
};

/// Starts this block's round on `lane` (after `ll_launch_begin`), as `ll_round_begin` does on
/// the block's lane: takes the lane's next flag and waits (bounded) until every reader of the
/// lane has finished reading the round before last, loading the flag, the token and what
/// `prefetch` starts loading (the first input a put of the round reads) together. Called by:
/// every thread of the block. False (for every thread) on timeout.
template <typename Lane, typename Prefetch = NoPrefetch>
__device__ __forceinline__ bool ll_lane_begin(const CollContext& c, LlRound& round, const Lane& lane,
                                              const Prefetch& prefetch = {}) {
  const uint32_t t = threadIdx.x;
  const bool waits = lane.waits_for(c, t);
  const uint32_t* token = lane.token_from(c, t);
  uint32_t seen = waits ? ptx::ld_volatile_u32(token) : 0u;
  round.flag = ll_flag_begin(lane.flag(c));
  round.half = lane.half(c, round.flag);
  prefetch();
  bool ok = true;
  if (waits) ok = ll_wait_token(c, t, token, ll_flag_two_back(round.flag), seen);
  return __syncthreads_and(ok);
}

/// Ends this block's round on `lane`, as `ll_round_end` does on the block's lane: tells every
/// writer of the lane it is done reading, and records the flag. Called by: every thread of the
/// block.
template <typename Lane>
__device__ __forceinline__ void ll_lane_end(const CollContext& c, const LlRound& round, const Lane& lane) {
  __syncthreads();
  const uint32_t t = threadIdx.x;
  if (lane.tells(c, t)) ptx::st_volatile_u32(lane.token_to(c, t), round.flag);
  ll_flag_end(lane.flag(c), round.flag);
}

/// Payload bytes of packet j of a `len`-byte message.
__device__ __forceinline__ uint32_t packet_valid(uint64_t len, uint64_t j) {
  return static_cast<uint32_t>(min_u64(Ll16::kPayloadBytes, len - j * Ll16::kPayloadBytes));
}

/// Packet j of slot `slot` of the given half of a packet buffer.
__device__ __forceinline__ LlPacket* packet_at(const CollContext& c, uint64_t buffer, const LlRound& round,
                                               uint32_t slot, uint64_t j) {
  return reinterpret_cast<LlPacket*>(buffer + round.half + slot * c.packet_slot_bytes) + j;
}

/// The words of a send as they are read: the transform of a plain copy. A transform of the
/// words a rank sends of its own input (such as elementwise.cuh's Premultiply) is called on
/// each word image (`N` words, whole elements) before it leaves, and says with `kCopies`
/// whether it leaves them unchanged (then it is never called).
struct AsIs {
  static constexpr bool kCopies = true;
  template <int N>
  __device__ __forceinline__ void operator()(uint32_t (&)[N]) const {}
};

/// Writes this block's packets (`deal`) of the `len` bytes at `src` into slot `slot` of every
/// peer p with `to(p)`, each payload through `transform` (AsIs). Called by: every thread of the
/// block.
template <typename To, typename Transform = AsIs>
__device__ __forceinline__ void ll_put(const CollContext& c, const LlRound& round, uint32_t slot, const char* src,
                                       uint64_t len, const LlDeal& deal, To to, const Transform& transform = {}) {
  for (uint64_t k = 0, j; (j = deal.at(k)) < deal.packets && j * Ll16::kPayloadBytes < len; ++k) {
    uint32_t w[2];
    detail::load_words<2>(src + j * Ll16::kPayloadBytes, packet_valid(len, j), w);
    if constexpr (!Transform::kCopies) transform(w);
    for (uint32_t p = 1; p < c.ranks; ++p) {
      const uint32_t peer = (c.rank + p) % c.ranks;
      if (to(peer)) Ll16::write(packet_at(c, channel(c, peer).remote_packet_buffer, round, slot, j), w, round.flag);
    }
  }
}

/// Spins (bounded) until packet `src` carries the round's flag. False on timeout.
__device__ __forceinline__ bool ll_read(const LlPacket* src, const LlRound& round, const WaitContext& ctx,
                                        uint32_t (&w)[2]) {
  uint32_t seen = 0;
  Spin spin;
  while (!Ll16::try_read(src, round.flag, w, seen)) {
    if (spin.expired(ctx)) {
      report_timeout(ctx, Ll16::kReadOp, round.flag, seen);
      return false;
    }
  }
  return true;
}

/// Waits for this block's packets (`deal`) of a `len`-byte message from `peer` in slot `slot`
/// of the local buffer and stores their payload at `dst`. Called by: every thread. False on
/// timeout.
__device__ __forceinline__ bool ll_get(const CollContext& c, const LlRound& round, uint32_t peer, uint32_t slot,
                                       char* dst, uint64_t len, const LlDeal& deal) {
  for (uint64_t k = 0, j; (j = deal.at(k)) < deal.packets && j * Ll16::kPayloadBytes < len; ++k) {
    uint32_t w[2];
    if (!ll_read(packet_at(c, c.packets, round, slot, j), round, channel(c, peer).semaphore.wait, w)) return false;
    detail::store_words<2>(dst + j * Ll16::kPayloadBytes, packet_valid(len, j), w);
  }
  return true;
}

/// Copies this block's share of a `len`-byte message locally (a rank's own part): contiguous
/// 16-byte-aligned shares, since no packet buffer is involved. Called by: every thread.
__device__ __forceinline__ void ll_copy_local(char* dst, const char* src, uint64_t len) {
  const uint64_t share = (div_ceil(len, gridDim.x) + 15) & ~uint64_t(15);
  const uint64_t lo = min_u64(share * blockIdx.x, len);
  const uint64_t hi = min_u64(lo + share, len);
  if (dst != src && hi > lo) copy_bytes(dst + lo, src + lo, hi - lo, threadIdx.x, blockDim.x);
}

/// Writes this block's packets (`deal`) of the `len` bytes at `src` to the packet array `dst`
/// with the round's flag. Called by: every thread of the block.
__device__ __forceinline__ void ll_put_dealt(LlPacket* dst, const char* src, uint64_t len, const LlDeal& deal,
                                             const LlRound& round) {
  for (uint64_t k = 0, j; (j = deal.at(k)) < deal.packets; ++k) {
    uint32_t w[2];
    detail::load_words<2>(src + j * Ll16::kPayloadBytes, packet_valid(len, j), w);
    Ll16::write(dst + j, w, round.flag);
  }
}

/// Waits for this block's packets (`deal`) of a `len`-byte message in the packet array `src`
/// and stores their payload at `dst`. Called by: every thread. False on timeout.
__device__ __forceinline__ bool ll_get_dealt(char* dst, const LlPacket* src, uint64_t len, const LlDeal& deal,
                                             const LlRound& round, const WaitContext& ctx) {
  for (uint64_t k = 0, j; (j = deal.at(k)) < deal.packets; ++k) {
    uint32_t w[2];
    if (!ll_read(src + j, round, ctx, w)) return false;
    detail::store_words<2>(dst + j * Ll16::kPayloadBytes, packet_valid(len, j), w);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// HB

/// Barrier of this block with the same block of every peer: one thread per peer signals
/// (release) then waits (acquire). Called by: every thread. False (for every thread) on timeout.
__device__ __forceinline__ bool hb_barrier(const CollContext& c) {
  __syncthreads();
  bool ok = true;
  const uint32_t t = threadIdx.x;
  if (t < c.ranks && t != c.rank) {
    const SemaphoreDeviceHandle& s = semaphore(c, t, blockIdx.x);
    semaphore_signal(s);
    ok = semaphore_wait(s);
  }
  return __syncthreads_and(ok);
}

/// One HB round of `bytes` split into `parts` 16-byte-aligned shards, each split into one
/// sub-slice per block: this block's sub-slice of shard d is `[lo(d), hi(d))`. The geometry
/// comes from `capacity`, the size of a full round, not from this round's `bytes`: block b then
/// owns the same byte ranges in every round of a launch, which is what lets per-block barriers
/// order one round's reads before the next round's writes (a short last round simply leaves
/// the tail of the ranges empty).
struct Shards {
  uint64_t bytes, shard, sub;
  __device__ __forceinline__ Shards(uint64_t bytes_, uint64_t capacity, uint32_t parts)
      : bytes(bytes_), shard(round_up16(div_ceil(capacity, parts))), sub(round_up16(div_ceil(shard, gridDim.x))) {}
  __device__ __forceinline__ uint64_t end(uint32_t d) const { return min_u64((d + 1) * shard, bytes); }
  __device__ __forceinline__ uint64_t lo(uint32_t d) const { return min_u64(d * shard + blockIdx.x * sub, end(d)); }
  __device__ __forceinline__ uint64_t hi(uint32_t d) const { return min_u64(lo(d) + sub, end(d)); }
};

/// The round size of a launch moving `bytes` in rounds of at most `round` bytes.
__device__ __forceinline__ uint64_t round_capacity(uint64_t bytes, uint64_t round) { return min_u64(bytes, round); }

/// 16 bytes from any address, with the widest loads its alignment allows (the alignment is
/// the same for every vector of a contiguous copy, so the branch does not diverge).
__device__ __forceinline__ uint4 load16_any(const char* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if ((a & 15u) == 0) return *reinterpret_cast<const uint4*>(p);
  if ((a & 7u) == 0) {
    const uint2 x = reinterpret_cast<const uint2*>(p)[0], y = reinterpret_cast<const uint2*>(p)[1];
    return make_uint4(x.x, x.y, y.x, y.y);
  }
  uint32_t w[4];
  if ((a & 3u) == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = reinterpret_cast<const uint32_t*>(p)[i];
  } else if ((a & 1u) == 0) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = uint32_t(h[2 * i]) | (uint32_t(h[2 * i + 1]) << 16);
  } else {
    detail::load_words<4>(p, 16, w);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// Writes bytes `[lo, hi)` of `src` (any alignment) to `dst` (both offset by lo) with whole
/// 16-byte vector stores only; the last vector is zero-padded past hi. For pushes into a
/// peer's scratch: `dst + lo` is 16-aligned and `dst` may be written up to round_up16(hi)
/// (scratch slots are padded to 16 bytes). A peer never receives a sub-word store this way:
/// 2-byte elements in the unaligned tail of a push lost their low byte on NVLink when the tail
/// went out as byte stores (measured; docs/perf/collectives.md). Every vector goes through
/// `transform` (AsIs: a copy); a transform that changes them needs `lo` a multiple of the
/// element size, as every caller's is (16-aligned), so that each vector holds whole elements.
/// Called by: every thread.
template <typename Transform = AsIs>
__device__ __forceinline__ void push_padded(char* dst, const char* src, uint64_t lo, uint64_t hi,
                                            const Transform& transform = {}) {
  if (hi <= lo) return;
  const uint64_t n = hi - lo, full = n / 16;
  dst += lo;
  src += lo;
  if (Transform::kCopies && (reinterpret_cast<uintptr_t>(src) & 15u) == 0) {
    detail::copy_vectors<uint4>(dst, src, full * 16, threadIdx.x, blockDim.x);
  } else {
    for (uint64_t v = threadIdx.x; v < full; v += blockDim.x) {
      uint4 x = load16_any(src + v * 16);
      if constexpr (!Transform::kCopies) {
        uint32_t w[4] = {x.x, x.y, x.z, x.w};
        transform(w);
        x = make_uint4(w[0], w[1], w[2], w[3]);
      }
      reinterpret_cast<uint4*>(dst)[v] = x;
    }
  }
  if (full * 16 < n && threadIdx.x == blockDim.x - 1) {
    uint32_t w[4];
    detail::load_words<4>(src + full * 16, static_cast<uint32_t>(n - full * 16), w);
    if constexpr (!Transform::kCopies) transform(w);
    reinterpret_cast<uint4*>(dst)[full] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/// Block-cooperative copy of `[lo, hi)` from `src` to `dst` (both offset by lo).
__device__ __forceinline__ void copy_range(char* dst, const char* src, uint64_t lo, uint64_t hi) {
  if (hi > lo && dst != src) copy_bytes(dst + lo, src + lo, hi - lo, threadIdx.x, blockDim.x);
}

}  // namespace coll
}  // namespace weft
