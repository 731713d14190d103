// LL packets. A packet carries its payload and a flag in ONE vector store (8 bytes for LL8,
// 16 for LL16, each 8-byte half of an LL16 carrying its own flag), so a reader that sees the
// flag it expects also sees the payload: no fence, no semaphore.
//
// Flags are never 0 or 1 (ll_flags.cuh) and must differ from whatever sits in the slot. Kernels keep them in device
// memory and advance them inside the kernel (ll_flag_begin / ll_flag_end), never as a host
// counter baked into a captured launch, and split packet scratch in two halves chosen by flag
// parity, so launch k+1 never overwrites packets launch k's peer is still reading.
#pragma once
#include "weft/ll_flags.cuh"
#include "weft/wait.cuh"

namespace weft {

/// LL8: 4 payload bytes per 8-byte packet.
struct Ll8 {
  using Packet = Ll8Packet;
  static constexpr uint32_t kPayloadBytes = 4;
  static constexpr WaitOp kReadOp = WaitOp::Ll8Read;

  __device__ __forceinline__ static void write(Packet* p, const uint32_t (&w)[1], uint32_t flag) {
    ptx::st_volatile_v2(p, w[0], flag);
  }
  /// One attempt; true when the packet carries `flag`. `seen` gets the flag observed.
  __device__ __forceinline__ static bool try_read(const Packet* p, uint32_t flag, uint32_t (&w)[1], uint32_t& seen) {
    ptx::ld_volatile_v2(p, w[0], seen);
    return seen == flag;
  }
};

/// LL16: 8 payload bytes per 16-byte packet.
struct Ll16 {
  using Packet = Ll16Packet;
  static constexpr uint32_t kPayloadBytes = 8;
  static constexpr WaitOp kReadOp = WaitOp::Ll16Read;

  __device__ __forceinline__ static void write(Packet* p, const uint32_t (&w)[2], uint32_t flag) {
    ptx::st_volatile_v4(p, w[0], flag, w[1], flag);
  }
  __device__ __forceinline__ static bool try_read(const Packet* p, uint32_t flag, uint32_t (&w)[2], uint32_t& seen) {
    uint32_t f1, f2;
    ptx::ld_volatile_v4(p, w[0], f1, w[1], f2);
    seen = f1 != flag ? f1 : f2;
    return f1 == flag && f2 == flag;
  }
};

namespace detail {
/// Loads `valid` (<= N*4) bytes from `src` into words, zero-padding the rest; vector loads when
/// the source is aligned and full, byte loads otherwise (exact tails, any alignment).
template <int N>
__device__ __forceinline__ void load_words(const char* src, uint32_t valid, uint32_t (&w)[N]) {
  if (valid == N * 4 && (reinterpret_cast<uintptr_t>(src) & 3u) == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = reinterpret_cast<const uint32_t*>(src)[i];
    return;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] = 0;
  for (uint32_t b = 0; b < valid; ++b) w[b / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(src[b])) << (8 * (b % 4));
}

/// Stores the first `valid` bytes of `w` to `dst` (vector stores when aligned and full).
template <int N>
__device__ __forceinline__ void store_words(char* dst, uint32_t valid, const uint32_t (&w)[N]) {
  if (valid == N * 4 && (reinterpret_cast<uintptr_t>(dst) & 3u) == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) reinterpret_cast<uint32_t*>(dst)[i] = w[i];
    return;
  }
  for (uint32_t b = 0; b < valid; ++b) dst[b] = static_cast<char>((w[b / 4] >> (8 * (b % 4))) & 0xffu);
}
}  // namespace detail

/// Number of packets that carry `bytes` of payload.
template <typename P>
__device__ __host__ __forceinline__ uint64_t packet_count(uint64_t bytes) {
  return (bytes + P::kPayloadBytes - 1) / P::kPayloadBytes;
}

/// Converts `bytes` at `src` into packets at `dst` (packet array). Called by: a group of
/// `nthreads` threads, each with its own `tid`; no synchronisation inside.
template <typename P>
__device__ __forceinline__ void write_packets(typename P::Packet* dst, const char* src, uint64_t bytes, uint32_t tid,
                                              uint32_t nthreads, uint32_t flag) {
  constexpr int N = P::kPayloadBytes / 4;
  const uint64_t count = packet_count<P>(bytes);
  for (uint64_t i = tid; i < count; i += nthreads) {
    const uint64_t at = i * P::kPayloadBytes;
    const uint32_t valid = static_cast<uint32_t>(bytes - at < P::kPayloadBytes ? bytes - at : P::kPayloadBytes);
    uint32_t w[N];
    detail::load_words<N>(src + at, valid, w);
    P::write(dst + i, w, flag);
  }
}

/// Polls the packet at `p` until it carries `flag`, its payload into `w`. Called by: one thread.
/// Bounded: false after the context's timeout (recorded), or once another thread has failed.
template <typename P>
__device__ __forceinline__ bool poll_packet(const typename P::Packet* p, uint32_t flag,
                                            uint32_t (&w)[P::kPayloadBytes / 4], const WaitContext& ctx) {
  uint32_t seen = 0;
  Spin spin;
  while (!P::try_read(p, flag, w, seen)) {
    if (spin.expired(ctx)) {
      report_timeout(ctx, P::kReadOp, flag, seen);
      return false;
    }
  }
  return true;
}

/// Waits for packets carrying `flag` at `src` and writes their payload (exactly `bytes`) to
/// `dst`. Called by: a group of `nthreads` threads. Bounded: false after the context's timeout
/// (every thread returns false once any thread has failed).
template <typename P>
__device__ __forceinline__ bool read_packets(char* dst, const typename P::Packet* src, uint64_t bytes, uint32_t tid,
                                             uint32_t nthreads, uint32_t flag, const WaitContext& ctx) {
  constexpr int N = P::kPayloadBytes / 4;
  const uint64_t count = packet_count<P>(bytes);
  for (uint64_t i = tid; i < count; i += nthreads) {
    uint32_t w[N];
    if (!poll_packet<P>(src + i, flag, w, ctx)) return false;
    const uint64_t at = i * P::kPayloadBytes;
    const uint32_t valid = static_cast<uint32_t>(bytes - at < P::kPayloadBytes ? bytes - at : P::kPayloadBytes);
    detail::store_words<N>(dst + at, valid, w);
  }
  return true;
}

/// Reads the flag a block should use for this launch from its device-resident slot
/// (ll_flags.cuh: 2 at the first launch, never 0 or 1). Called by: every thread of the block
/// (all read the same value).
__device__ __forceinline__ uint32_t ll_flag_begin(const uint32_t* slot) {
  return ll_flag_after(ptx::ld_volatile_u32(slot));
}

/// Publishes `flag` as the last one used. Called by: the whole block; it synchronises the block
/// first.
__device__ __forceinline__ void ll_flag_end(uint32_t* slot, uint32_t flag) {
  __syncthreads();
  if (threadIdx.x == 0) *slot = flag;
}

}  // namespace weft
