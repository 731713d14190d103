// Warp copies of token rows and their fields, several loads in flight per lane before their
// stores (NVLink stores want many bytes in flight per SM): a copy is a stream of elements, so
// the rows of several tokens, and a row's ragged end, share round trips.
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

/// One element of a copy: 16-byte vectors as load_input (`kInput`) or load_staged, smaller
/// elements (scales, indices) as plain loads (after the caller's acquire, if staged).
template <bool kInput>
__device__ __forceinline__ int4 load_element(const int4* p) {
  return kInput ? load_input(p) : load_staged(p);
}
template <bool kInput, typename T>
__device__ __forceinline__ T load_element(const T* p) {
  return *p;
}

/// Copies `n` elements of type `T`, element q from `src(q)` to `dst(q)` (callables returning
/// aligned `const T*` / `T*`), in rounds of kCopyUnroll elements per lane whose loads are all
/// issued before their stores: a round costs one memory latency, ragged ends included.
/// Called by: all 32 lanes of a warp. `kInput`: as load_element.
template <bool kInput, typename T, typename Src, typename Dst>
__device__ __forceinline__ void warp_copy_each(uint32_t n, Src src, Dst dst, uint32_t lane) {
  for (uint32_t base = 0; base < n; base += 32 * kCopyUnroll) {
    T v[kCopyUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kCopyUnroll; ++u) {
      const uint32_t q = base + 32 * u + lane;
      if (q < n) v[u] = load_element<kInput>(src(q));
    }
#pragma unroll
    for (uint32_t u = 0; u < kCopyUnroll; ++u) {
      const uint32_t q = base + 32 * u + lane;
      if (q < n) *dst(q) = v[u];
    }
  }
}

/// Copies `records` records of `bytes` each (16-byte multiples, aligned), record i from
/// `src(i)` to `dst(i)`, as one stream of vectors: loads of several records are in flight at
/// once. Called by: all 32 lanes of a warp. `kInput`: `src` holds kernel inputs (see
/// load_input), else staged data (see load_staged).
template <bool kInput, typename Src, typename Dst>
__device__ __forceinline__ void warp_copy_records(uint32_t records, uint32_t bytes, Src src, Dst dst, uint32_t lane) {
  const uint32_t vectors = bytes / 16;
  warp_copy_each<kInput, int4>(
      records * vectors,
      [&](uint32_t q) { return reinterpret_cast<const int4*>(src(q / vectors)) + q % vectors; },
      [&](uint32_t q) { return reinterpret_cast<int4*>(dst(q / vectors)) + q % vectors; }, lane);
}

}  // namespace ep
}  // namespace weft
