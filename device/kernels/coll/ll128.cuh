// LL128 lines, and the chain that Broadcast and Reduce run over them ("ll128").
//
// A line (ll128_geometry.cuh) is 120 payload bytes and an 8-byte flag, stored by 8 lanes of a
// warp with one 16-byte volatile store each, all in one store instruction; a reader loads it the
// same way and takes it once the flag lane sees the flag, every lane of the line having loaded
// in that same instruction. This relies on a 128-byte-aligned line stored by one warp
// instruction reaching a peer's memory whole over NVLink, and being read whole by one warp
// instruction: the property NCCL's LL128 protocol rests on (it enables LL128 only between
// NVLink peers). Over PCIe the line may arrive in pieces; weft's intranode collectives assume
// NVLink peers. So a line needs no fence and no semaphore, like an LL16 packet, but costs 8
// bytes in 128 instead of 8 in 16.
//
// The chain: the ranks in the order `first`, `first + 1`, ... (mod n) pass every line on as
// soon as it arrives, so the message streams down the chain line by line, with no step, no
// release and no acquire between ranks (the chain of chain.cuh pays a release/acquire hand-off
// per step, ~4.5 µs). It is an LL launch: one round of the block's lane (the flag, the half
// of the packet buffers the flag's parity selects, the tokens that keep a writer off the half a
// reader may still read), on the LL grid. The lines of the previous rank fill this rank's half
// from its start (128-aligned): the message must fit in a half (weft-coll checks this).
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

/// Stores lane `lane`'s 16 bytes of line `line` of the line array `lines` (a peer's): `w`, with
/// the flag in place of the flag lane's last 8 bytes. Called by: the 8 lanes of the line
/// together (one instruction).
__device__ __forceinline__ void ll128_write(char* lines, uint64_t line, uint32_t lane, uint32_t (&w)[4],
                                            uint32_t flag) {
  if (lane == kLl128FlagLane) w[2] = flag, w[3] = 0u;
  ptx::st_volatile_v4(lines + line * kLl128LineBytes + 16u * lane, w[0], w[1], w[2], w[3]);
}

/// Waits until line `line` of the line array `lines` (this rank's) carries `flag`, this lane's
/// 16 bytes into `w`. Called by: every lane of the warp together (warp-uniform), `exists` false
/// for a lane whose line is past the message (it waits for nothing). The flag word is `flag`
/// zero-extended; an LL16 or LL8 packet left in the same place has a non-zero flag in those
/// upper 4 bytes, so it never passes for a line. False for every lane on timeout (reported on
/// `ctx`).
__device__ __forceinline__ bool ll128_read(const char* lines, uint64_t line, bool exists, uint32_t lane, uint32_t flag,
                                           uint32_t (&w)[4], const WaitContext& ctx) {
  const char* p = lines + line * kLl128LineBytes + 16u * lane;
  Spin spin;
  for (;;) {
    if (exists) ptx::ld_volatile_v4(p, w[0], w[1], w[2], w[3]);
    const bool ready = !exists || lane != kLl128FlagLane || (w[2] == flag && w[3] == 0u);
    if (__all_sync(~0u, ready)) return true;
    if (__any_sync(~0u, spin.expired(ctx))) {
      if (!ready) report_timeout(ctx, WaitOp::Ll128Read, flag, (static_cast<uint64_t>(w[3]) << 32) | w[2]);
      return false;
    }
  }
}

/// Runs this rank's part of the LL128 chain from rank `first` (see the top of this file) in
/// `round` (begun by the kernel, whose first act it is: kernels are launched early), and ends
/// the round: for each of its lines, `step(line, lane, received, w)` gets in `w` the previous
/// rank's words of the line when `received` (not at the head), and leaves in `w` the words the
/// next rank gets (ignored at the tail). Called by: every thread of every block.
template <typename Step>
__device__ __forceinline__ void ll128_chain(const CollContext& c, const LlRound& round, uint32_t first,
                                            uint64_t bytes, const Step& step) {
  const uint32_t n = c.ranks, position = (c.rank + n - first) % n;
  const bool receives = position > 0, sends = position + 1 < n;
  const uint32_t prev = (c.rank + n - 1) % n, next = (c.rank + 1) % n;
  const uint64_t lines_at = round_up128(round.half);
  const char* mine = reinterpret_cast<const char*>(c.packets + lines_at);
  char* theirs = sends ? reinterpret_cast<char*>(channel(c, next).remote_packet_buffer + lines_at) : nullptr;
  const WaitContext& from_prev = channel(c, prev).semaphore.wait;
  const uint32_t lane = threadIdx.x % kLl128LanesPerLine;
  const uint32_t sub = (threadIdx.x % 32) / kLl128LanesPerLine;
  const Ll128Deal deal{gridDim.x, blockDim.x / 32, blockIdx.x, threadIdx.x / 32};
  const uint64_t lines = ll128_lines(bytes), groups = ll128_groups(bytes);
  // Whole warps only (warp-wide votes); a partial last warp, if any, sits out.
  const bool whole_warp = threadIdx.x < deal.warps * 32;
  for (uint64_t k = 0, g; whole_warp && (g = deal.group(k)) < groups; ++k) {
    const uint64_t line = g * kLl128LinesPerGroup + sub;
    const bool exists = line < lines;
    uint32_t w[4] = {0u, 0u, 0u, 0u};
    if (receives && !ll128_read(mine, line, exists, lane, round.flag, w, from_prev)) break;
    if (!exists) continue;
    step(line, lane, receives, w);
    if (sends) ll128_write(theirs, line, lane, w, round.flag);
  }
  ll_round_end(c, round);
}
