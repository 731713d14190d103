// LL128 lines, and the collectives that move them ("ll128"): AllGather, ReduceScatter and the
// two-shot AllReduce through a slot per sender, Broadcast and Reduce down a chain.
//
// A line (ll128_geometry.cuh) is 120 payload bytes and an 8-byte flag, stored by 8 lanes of a
// warp with one 16-byte volatile store each, all in one store instruction; a reader polls it
// the same way until the flag lane sees the flag, then loads the line again and uses that copy.
// This relies on a 128-byte-aligned line stored by one warp instruction reaching a peer's
// memory whole over NVLink: the property NCCL's LL128 protocol rests on (it enables LL128 only
// between NVLink peers, and uses the load that saw the flag; weft loads once more, a defensive
// choice that costs one local latency per group of lines). Over PCIe the line may arrive in
// pieces; weft's intranode collectives assume NVLink peers. So a line needs no fence and no
// semaphore, like an LL16 packet, but costs 8 bytes in 128 instead of 8 in 16. Every store and
// load of a line runs with the warp converged (__syncwarp first): a line split over two
// instructions could show its flag before its data.
//
// The lines live in a region of the packet buffer of their own (CollContext::ll128_offset): two
// parity halves of 2 x ranks slots. An LL16 reader polling a position where an LL128 line was
// left could take two data words equal to its flag for a packet, so the two never share memory.
// An LL128 launch is an LL round on the block's LL128 lane (`c.ll128_lane + blockIdx.x`: a
// flag and a row of tokens the LL16 launches never touch, so that the LL128 grid,
// WEFT_LL128_BLOCKS, may differ from the LL16 one; a chain of many halves takes one flag per
// half) that waits, before writing, until every block of every peer has finished the round
// before last (ll128_round_begin): the kernels deal a region's lines to
// blocks differently (the chain numbers them from the start of the half, the others within a
// slot), so one block's token would not cover what it overwrites. Within one chain launch,
// rounds from the third on wait for the same block of each peer only (ll128_round_next). (The
// LL16 kernels deal by position within a slot alike, and wait for their own block's token
// only: weft/collective.cuh, ll_round_begin.)
//
// The chain: the ranks in the order `first`, `first + 1`, ... (mod n) pass every line on as
// soon as it arrives, so the message streams down the chain line by line, with no step, no
// release and no acquire between ranks (the chain of chain.cuh pays a release/acquire hand-off
// per step, ~4.5 us). The previous rank's lines fill this rank's half from its start; a message
// longer than a half goes in rounds of a half, the halves alternating as launches do.
#pragma once
#include "common.cuh"
#include "ll128_geometry.cuh"

__device__ __forceinline__ uint64_t round_up128(uint64_t x) { return (x + 127) & ~uint64_t(127); }

/// Lane `lane`'s bytes of line `line` of the `bytes`-byte message at `src` into `w`, zero past
/// the message's end (any alignment).
__device__ __forceinline__ void ll128_load(const char* src, uint64_t bytes, uint64_t line, uint32_t lane,
                                           uint32_t (&w)[4]) {
  const uint32_t valid = ll128_valid(bytes, line, lane);
  const char* p = src + ll128_offset(line, lane);
  if ((reinterpret_cast<uintptr_t>(p) & 7u) == 0 && (valid == 16 || valid == 8)) {
    const uint2 a = reinterpret_cast<const uint2*>(p)[0];
    const uint2 b = valid == 16 ? reinterpret_cast<const uint2*>(p)[1] : make_uint2(0u, 0u);
    w[0] = a.x, w[1] = a.y, w[2] = b.x, w[3] = b.y;
    return;
  }
  detail::load_words<4>(p, valid, w);
}

/// Stores lane `lane`'s bytes of line `line` from `w` into the `bytes`-byte message at `dst`
/// (exactly its bytes; any alignment). For this rank's own buffers only.
__device__ __forceinline__ void ll128_store(char* dst, uint64_t bytes, uint64_t line, uint32_t lane,
                                            const uint32_t (&w)[4]) {
  const uint32_t valid = ll128_valid(bytes, line, lane);
  char* p = dst + ll128_offset(line, lane);
  if ((reinterpret_cast<uintptr_t>(p) & 7u) == 0 && (valid == 16 || valid == 8)) {
    reinterpret_cast<uint2*>(p)[0] = make_uint2(w[0], w[1]);
    if (valid == 16) reinterpret_cast<uint2*>(p)[1] = make_uint2(w[2], w[3]);
    return;
  }
  detail::store_words<4>(p, valid, w);
}

/// Stores lane `lane`'s 16 bytes of line `line` of the line array `lines` (a peer's), when
/// `exists`: `w`, with the flag in place of the flag lane's last 8 bytes. Called by: every lane
/// of the warp together (it converges the warp first, so the line's 8 lanes store at once).
__device__ __forceinline__ void ll128_write(char* lines, uint64_t line, bool exists, uint32_t lane, uint32_t (&w)[4],
                                            uint32_t flag) {
  if (lane == kLl128FlagLane) w[2] = flag, w[3] = 0u;
  __syncwarp();
  if (exists) ptx::st_volatile_v4(lines + line * kLl128LineBytes + 16u * lane, w[0], w[1], w[2], w[3]);
}

/// Waits until line `line` of the line array `lines` (this rank's) carries `flag`, then loads
/// this lane's 16 bytes of it into `w`. Called by: every lane of the warp together
/// (warp-uniform), `exists` false for a lane whose line is past the message (it waits for
/// nothing). The flag word is `flag` zero-extended. False for every lane on timeout (reported
/// on `ctx`).
__device__ __forceinline__ bool ll128_read(const char* lines, uint64_t line, bool exists, uint32_t lane, uint32_t flag,
                                           uint32_t (&w)[4], const WaitContext& ctx) {
  const char* p = lines + line * kLl128LineBytes + 16u * lane;
  Spin spin;
  for (;;) {
    __syncwarp();
    if (exists) ptx::ld_volatile_v4(p, w[0], w[1], w[2], w[3]);
    const bool ready = !exists || lane != kLl128FlagLane || (w[2] == flag && w[3] == 0u);
    if (__all_sync(~0u, ready)) break;
    if (__any_sync(~0u, spin.expired(ctx))) {
      if (!ready) report_timeout(ctx, WaitOp::Ll128Read, flag, (static_cast<uint64_t>(w[3]) << 32) | w[2]);
      return false;
    }
  }
  // The poll saw every flag; the copy used is loaded after it (NCCL uses the polling load), so
  // that only the line's arrival needs to be whole, not the load that saw its flag.
  __syncwarp();
  if (exists) ptx::ld_volatile_v4(p, w[0], w[1], w[2], w[3]);
  return true;
}

/// This block's LL lane in an LL128 launch (see the top of this file).
__device__ __forceinline__ uint32_t ll128_lane(const CollContext& c) { return c.ll128_lane + blockIdx.x; }

/// Every LL128 block's tokens inside this rank's packet buffer: `uint32_t[gridDim.x][ranks]`,
/// entry (b, r) written by rank r's block b (ll128_round_end).
__device__ __forceinline__ const uint32_t* ll_every_token(const CollContext& c) {
  return reinterpret_cast<const uint32_t*>(c.packets + c.token_offset) + static_cast<uint64_t>(c.ll128_lane) * c.ranks;
}

/// This thread's first token to wait for in `ll_wait_every_token`, loaded early so that its
/// latency overlaps the flag's; 0 for a thread with none.
__device__ __forceinline__ uint32_t ll_first_token(const CollContext& c) {
  const uint32_t i = threadIdx.x;
  return i < gridDim.x * c.ranks && i % c.ranks != c.rank ? ptx::ld_volatile_u32(ll_every_token(c) + i) : 0u;
}

/// Waits (bounded) until every block of every peer has finished reading launch `want` (its
/// token reached `want`). Every block, not only this one's partner: the LL128 kernels number a
/// region's lines differently (the chain from the start of the half, the others within a
/// slot), so a line this block writes now may have been another block's to read two launches
/// back. `first_seen` is `ll_first_token`. Called by: every thread of the block, each waiting
/// for its share of the tokens. False on timeout.
__device__ __forceinline__ bool ll_wait_every_token(const CollContext& c, uint32_t want, uint32_t first_seen) {
  const uint32_t* tokens = ll_every_token(c);
  bool ok = true;
  for (uint32_t i = threadIdx.x; i < gridDim.x * c.ranks && ok; i += blockDim.x) {
    const uint32_t peer = i % c.ranks;
    if (peer == c.rank) continue;
    const uint32_t seen = i == threadIdx.x ? first_seen : ptx::ld_volatile_u32(tokens + i);
    ok = ll_wait_token(c, peer, tokens + i, want, seen);
  }
  return ok;
}

/// Bytes of one parity half of the LL128 region: 2 x ranks slots.
__device__ __forceinline__ uint64_t ll128_half_bytes(const CollContext& c) {
  return 2ull * c.ranks * round_up128(c.packet_slot_bytes);
}

/// Takes `flag` for this block's round and waits (bounded) until every block of every peer has
/// finished reading the round before last (its token), so that no line of the half this round
/// writes is still to be read. `first_seen` is `ll_first_token`. Called by: every thread of the
/// block. False (for every thread) on timeout.
__device__ __forceinline__ bool ll128_round_take(const CollContext& c, LlRound& round, uint32_t flag,
                                                 uint32_t first_seen) {
  round.flag = flag;
  round.half = (flag & 1u) * ll128_half_bytes(c);
  const bool ok = ll_wait_every_token(c, ll_flag_two_back(flag), first_seen);
  return __syncthreads_and(ok);
}

/// Starts this block's LL128 launch (an LL round; see the top of this file): `ll_launch_begin`,
/// then the block's next flag and the token wait (ll128_round_take). Called by: every thread of
/// the block. False (for every thread) on timeout.
__device__ __forceinline__ bool ll128_round_begin(const CollContext& c, LlRound& round) {
  ll_launch_begin();
  const uint32_t first_seen = ll_first_token(c);
  return ll128_round_take(c, round, ll_flag_begin(reinterpret_cast<const uint32_t*>(c.flags) + ll128_lane(c)),
                          first_seen);
}

/// Ends this block's LL128 round: tells every peer it is done reading, and records the flag, on
/// its LL128 lane. Called by: every thread of the block.
__device__ __forceinline__ void ll128_round_end(const CollContext& c, const LlRound& round) {
  ll_round_end_on(c, round, ll128_lane(c));
}

/// Starts round `index` (1, 2, ...) of a launch that moves more lines than a half holds (the
/// chain), after `ll128_round_end` of the round before: every block of every rank runs the same
/// rounds (their count follows from the message's length), so the flags stay in step. Round 1
/// shares its half with the previous launch's last round, whose lines another kernel may have
/// dealt otherwise: it waits for every block's token. From round 2 the round two back is this
/// launch's, full, with the same deal, so the same block of each peer was the only reader of
/// the lines this block now writes: its token is enough, and no block waits for another block
/// of the same launch (which would need every block of every rank resident at once). Called by:
/// every thread of the block. False (for every thread) on timeout.
__device__ __forceinline__ bool ll128_round_next(const CollContext& c, LlRound& round, uint64_t index) {
  if (index < 2) return ll128_round_take(c, round, ll_flag_after(round.flag), ll_first_token(c));
  const LlOwnToken own(c, ll128_lane(c));
  round.flag = ll_flag_after(round.flag);
  round.half = (round.flag & 1u) * ll128_half_bytes(c);
  return __syncthreads_and(own.wait(c, ll_flag_two_back(round.flag)));
}

/// This thread's place in its block's LL128 work: its lane in a line, its line in its warp's
/// group of four, and the warp's deal of groups (ll128_geometry.cuh).
struct Ll128Thread {
  uint32_t lane, sub;
  bool whole_warp;
  Ll128Deal deal;
  __device__ __forceinline__ Ll128Thread()
      : lane(threadIdx.x % kLl128LanesPerLine),
        sub((threadIdx.x % 32) / kLl128LanesPerLine),
        // Whole warps only (warp-wide votes); a partial last warp, if any, sits out.
        whole_warp(threadIdx.x < blockDim.x / 32 * 32),
        deal{gridDim.x, blockDim.x / 32, blockIdx.x, threadIdx.x / 32} {}

  /// Calls `f(line, exists)` for this thread's line of each of its warp's groups of a message of
  /// `lines` lines, in order, warp-uniformly (`exists`: the line is in the message; lines past
  /// it only take part in the warp's votes). Stops, returning false, when `f` returns false.
  template <typename F>
  __device__ __forceinline__ bool each(uint64_t lines, const F& f) const {
    if (!whole_warp) return true;
    const uint64_t groups = (lines + kLl128LinesPerGroup - 1) / kLl128LinesPerGroup;
    for (uint64_t k = 0, g; (g = deal.group(k)) < groups; ++k) {
      const uint64_t line = g * kLl128LinesPerGroup + sub;
      if (!f(line, line < lines)) return false;
    }
    return true;
  }
};

/// The lines of slot `slot` of the round's half of the LL128 region of the packet buffer at
/// `buffer` (this rank's, or a peer's mapping: the same offsets; 128-aligned, which weft-coll
/// checks).
__device__ __forceinline__ char* ll128_slot(const CollContext& c, uint64_t buffer, const LlRound& round,
                                            uint32_t slot) {
  return reinterpret_cast<char*>(buffer + c.ll128_offset + round.half + slot * round_up128(c.packet_slot_bytes));
}

/// Writes the lines of the `bytes`-byte message at `src` (through `transform`, AsIs: a copy)
/// into slot `slot` of every peer p with `to(p)`, and, when `local` is set, stores them there
/// (this rank's own copy, plain stores). Called by: every thread of the block.
template <typename To, typename Transform = AsIs>
__device__ __forceinline__ void ll128_put(const CollContext& c, const LlRound& round, const Ll128Thread& t,
                                          uint32_t slot, const char* src, uint64_t bytes, To to, char* local = nullptr,
                                          const Transform& transform = {}) {
  t.each(ll128_lines(bytes), [&](uint64_t line, bool exists) {
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    if (exists) {
      ll128_load(src, bytes, line, t.lane, w);
      if constexpr (!Transform::kCopies) transform(w);
      if (local != nullptr) ll128_store(local, bytes, line, t.lane, w);
    }
    for (uint32_t k = 1; k < c.ranks; ++k) {
      const uint32_t peer = (c.rank + k) % c.ranks;
      if (to(peer)) {
        ll128_write(ll128_slot(c, channel(c, peer).remote_packet_buffer, round, slot), line, exists, t.lane, w,
                    round.flag);
      }
    }
    return true;
  });
}

/// Waits for the lines of a `bytes`-byte message from `peer` in slot `slot` of this rank's
/// half and stores them at `dst`. Called by: every thread of the block. False on timeout.
__device__ __forceinline__ bool ll128_get(const CollContext& c, const LlRound& round, const Ll128Thread& t,
                                          uint32_t peer, uint32_t slot, char* dst, uint64_t bytes) {
  const char* lines = ll128_slot(c, c.packets, round, slot);
  return t.each(ll128_lines(bytes), [&](uint64_t line, bool exists) {
    uint32_t w[4];
    if (!ll128_read(lines, line, exists, t.lane, round.flag, w, channel(c, peer).semaphore.wait)) return false;
    if (exists) ll128_store(dst, bytes, line, t.lane, w);
    return true;
  });
}

/// Runs this rank's part of the LL128 chain from rank `first` (see the top of this file) in
/// `round` (begun by the kernel, whose first act it is: kernels are launched early), and ends
/// the round: for each of its lines, `step(line, lane, received, w)` gets in `w` the previous
/// rank's words of line `line` of the message when `received` (not at the head), and leaves in
/// `w` the words the next rank gets (ignored at the tail). A message of more lines than a half
/// holds goes in rounds of a half each, the halves alternating (ll128_round_next): the lines of
/// a round fill its half from the start (slot 0 on), and the round after next waits for the
/// peers' blocks that read them. Called by: every thread of every block; the kernel
/// began with ll128_round_begin.
template <typename Step>
__device__ __forceinline__ void ll128_chain(const CollContext& c, LlRound& round, uint32_t first, uint64_t bytes,
                                            const Step& step) {
  const uint32_t n = c.ranks, position = (c.rank + n - first) % n;
  const bool receives = position > 0, sends = position + 1 < n;
  const uint32_t prev = (c.rank + n - 1) % n, next = (c.rank + 1) % n;
  const WaitContext& from_prev = channel(c, prev).semaphore.wait;
  const Ll128Thread t;
  const uint64_t lines = ll128_lines(bytes), per_round = ll128_half_bytes(c) / kLl128LineBytes;
  for (uint64_t from = 0, index = 1;; from += per_round, ++index) {
    const char* mine = ll128_slot(c, c.packets, round, 0);
    char* theirs = sends ? ll128_slot(c, channel(c, next).remote_packet_buffer, round, 0) : nullptr;
    const uint64_t count = lines - from < per_round ? lines - from : per_round;
    const bool ok = t.each(count, [&](uint64_t local, bool exists) {
      uint32_t w[4] = {0u, 0u, 0u, 0u};
      if (receives && !ll128_read(mine, local, exists, t.lane, round.flag, w, from_prev)) return false;
      if (exists) step(from + local, t.lane, receives, w);
      if (sends) ll128_write(theirs, local, exists, t.lane, w, round.flag);
      return true;
    });
    ll128_round_end(c, round);
    // A timeout was reported; the communicator has failed, so the rounds may end unevenly.
    if (__syncthreads_or(!ok) || from + per_round >= lines) return;
    if (!ll128_round_next(c, round, index)) return;
  }
}
