// What every reducing collective shares. The program is compiled once per (WEFT_DTYPE,
// WEFT_REDOP) pair (DataType / ReduceOp values), so every kernel is specialised for its element
// type and operator: Fin (Avg's division) and Pre (PreMulSum's pre-operation) below, and the
// folds more than one algorithm runs: ll_reduce (LL packets), ll128_reduce (LL128 lines),
// reduce_range (16-byte vectors in scratch) and ring_reduce (one step of a ring).
#pragma once
#include "common.cuh"
#include "ll128.cuh"
#include "weft/elementwise.cuh"

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

/// Reduces this block's packets of a `len`-byte shard in rank order: this rank's words come
/// from `mine` (its own input, premultiplied here), rank r's from slot `first_slot + r` of the
/// local packet buffer (premultiplied by their sender's ll_put). `emit(j, valid, words)`
/// consumes each result packet. Called by: every thread. False on timeout.
template <typename Emit>
__device__ __forceinline__ bool ll_reduce(const CollContext& c, const LlRound& round, uint32_t first_slot,
                                          const char* mine, uint64_t len, const LlDeal& deal, Emit emit) {
  using R = Reducer<kType, kOp, 8>;
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  for (uint64_t k = 0, j; (j = deal.at(k)) < deal.packets && j * 8 < len; ++k) {
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

/// Reduces this thread's lines of a `len`-byte shard in rank order, as ll_reduce does packets:
/// this rank's words come from `mine` (its own input, through Pre here), rank r's from slot
/// `first_slot + r` of this rank's half (through Pre at their sender's ll128_put). `emit(line,
/// exists, w)` consumes each result line (the flag lane's last 8 bytes are not data), called
/// warp-uniformly like ll128_write, which it may call. Called by: every thread of the block.
/// False on timeout.
template <typename Emit>
__device__ __forceinline__ bool ll128_reduce(const CollContext& c, const LlRound& round, const Ll128Thread& t,
                                             uint32_t first_slot, const char* mine, uint64_t len, Emit emit) {
  using R = Reducer<kType, kOp, 16>;
  const Fin finish = Fin::of(c);
  const Pre pre = Pre::of(c);
  return t.each(ll128_lines(len), [&](uint64_t line, bool exists) {
    Acc acc[R::kElems];
    for (uint32_t r = 0; r < c.ranks; ++r) {
      uint32_t w[4];
      if (r == c.rank) {
        ll128_load(mine, len, line, t.lane, w);
        pre(w);
      } else if (!ll128_read(ll128_slot(c, c.packets, round, first_slot + r), line, exists, t.lane, round.flag, w,
                             channel(c, r).semaphore.wait)) {
        return false;
      }
      if (r == 0) {
        R::start(acc, w);
      } else {
        R::fold(acc, w);
      }
    }
    uint32_t out[4];
    R::finish(acc, finish, out);
    emit(line, exists, out);
    return true;
  });
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

/// Reduces bytes `[lo, hi)` (lo 16-aligned) of `ranks` copies in rank order and applies
/// `finish`, whole 16-byte vectors through round_up16(hi): rank r's copy is at `src(r) + lo`,
/// every copy is scratch, 16-aligned and padded to 16 bytes (see push_padded), so no element is
/// read on its own. Any number of copies: each thread issues MAX_RANKS loads before folding
/// them, then the next MAX_RANKS, into one accumulator. `store(at, v)` puts the result vector
/// of bytes `[at, at + 16)` wherever the caller's outputs are; it must keep the rule of
/// push_padded (no peer receives a sub-word store), which whole vectors into padded scratch or
/// into the 16-aligned prefix of a user buffer do.
template <typename Src, typename Store>
__device__ __forceinline__ void reduce_sources(const Src& src, uint32_t ranks, uint64_t lo, uint64_t hi,
                                               const Fin& finish, const Store& store) {
  using R = Reducer<kType, kOp, 16>;
  const uint64_t vectors = div_ceil(hi - lo, 16);
  for (uint64_t v = threadIdx.x; v < vectors; v += blockDim.x) {
    const uint64_t at = lo + v * 16;
    Acc acc[R::kElems];
    for (uint32_t first = 0; first < ranks; first += MAX_RANKS) {
      uint4 x[MAX_RANKS];
#pragma unroll
      for (uint32_t r = 0; r < MAX_RANKS; ++r) {
        if (first + r < ranks) x[r] = *reinterpret_cast<const uint4*>(src(first + r) + at);
      }
      for (uint32_t r = 0; r < MAX_RANKS && first + r < ranks; ++r) {
        const uint32_t(&w)[4] = *reinterpret_cast<const uint32_t(*)[4]>(&x[r]);
        if (first + r == 0) {
          R::start(acc, w);
        } else {
          R::fold(acc, w);
        }
      }
    }
    uint32_t res[4];
    R::finish(acc, finish, res);
    store(at, make_uint4(res[0], res[1], res[2], res[3]));
  }
}

/// reduce_sources of at most MAX_RANKS copies, rank r's at `in[r] + lo`.
template <typename Store>
__device__ __forceinline__ void reduce_range(const char* const* in, uint32_t ranks, uint64_t lo, uint64_t hi,
                                             const Fin& finish, const Store& store) {
  reduce_sources([in](uint32_t r) { return in[r]; }, ranks, lo, hi, finish, store);
}

/// A result vector stored into this rank's own output, which may lie at any alignment (only a
/// rank's own output is outside the host's agreement on alignment; these stores are local).
struct StoreOutput {
  char* out;
  __device__ __forceinline__ void operator()(uint64_t at, const uint4& v) const {
    if ((reinterpret_cast<uintptr_t>(out + at) & 15u) == 0) {
      *reinterpret_cast<uint4*>(out + at) = v;
    } else {
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      detail::store_words<4>(out + at, 16, w);
    }
  }
};

/// The direct forms' pull (Reduce's and ReduceScatter's): this block's share of bytes
/// `[from, from + bytes)` of every rank's input, read where it lies (`inputs`, mapped here: a
/// peer's through NVLink), folded in rank order into `output`. `bytes` is a multiple of 16 and
/// every input 16-aligned at `from` (the host's agreement).
__device__ __forceinline__ void pull_reduce(const CollContext& c, const PeerBuffers& inputs, uint64_t from,
                                            uint64_t bytes, char* output) {
  const Shards s(bytes, bytes, 1);
  const char* in[MAX_RANKS];
#pragma unroll
  for (uint32_t k = 0; k < MAX_RANKS; ++k) in[k] = k < c.ranks ? peer_buffer(inputs, k) + from : nullptr;
  reduce_range(in, c.ranks, s.lo(0), s.hi(0), Fin::of(c), StoreOutput{output});
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
