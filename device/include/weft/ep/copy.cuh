// Warp copies of token rows in 16-byte vectors, several loads in flight per lane before their
// stores (NVLink stores want many bytes in flight per SM).
#pragma once
#include "weft/impl/stdint.cuh"

namespace weft {
namespace ep {

/// Loads in flight per lane: 4 KiB per warp, so a few channels' warps cover NVLink's latency
/// (about a microsecond) at full bandwidth. Not yet tuned on a GPU.
constexpr uint32_t kCopyUnroll = 8;

/// A 16-byte load from memory no thread writes while the kernel runs (the caller's inputs):
/// through the read-only path, without allocating in L1.
__device__ __forceinline__ int4 load_input(const int4* p) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// A 16-byte load of memory peers wrote during the kernel (after an acquire made it visible).
__device__ __forceinline__ int4 load_staged(const int4* p) {
  int4 v;
  asm volatile("ld.global.v4.s32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from `src` to `dst`.
/// Called by: all 32 lanes of a warp. `kInput`: `src` is a kernel input (see load_input),
/// else staged data (see load_staged).
template <bool kInput>
__device__ __forceinline__ void warp_copy(void* dst, const void* src, uint32_t bytes, uint32_t lane) {
  int4* d = reinterpret_cast<int4*>(dst);
  const int4* s = reinterpret_cast<const int4*>(src);
  const uint32_t n = bytes / 16;
  uint32_t i = lane;
  for (; i + 32 * (kCopyUnroll - 1) < n; i += 32 * kCopyUnroll) {
    int4 v[kCopyUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kCopyUnroll; ++u) v[u] = kInput ? load_input(s + i + 32 * u) : load_staged(s + i + 32 * u);
#pragma unroll
    for (uint32_t u = 0; u < kCopyUnroll; ++u) d[i + 32 * u] = v[u];
  }
  for (; i < n; i += 32) d[i] = kInput ? load_input(s + i) : load_staged(s + i);
}

}  // namespace ep
}  // namespace weft
