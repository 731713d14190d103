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

/// A lane's step through a stream of records of `fields` elements (fields > 0), as (record,
/// field) pairs: `step(r, f)` moves the pair on by the warp's 32 elements without a division.
struct FieldStep {
  uint32_t fields, records_per_step, fields_per_step;

  __device__ __forceinline__ explicit FieldStep(uint32_t n)
      : fields(n), records_per_step(32 / n), fields_per_step(32 % n) {}

  __device__ __forceinline__ void operator()(uint32_t& r, uint32_t& f) const {
    r += records_per_step;
    f += fields_per_step;
    if (f >= fields) {
      f -= fields;
      ++r;
    }
  }
};

/// Copies `records` records of `fields` elements of type `T` each, field f of record r from
/// `src(r, f)` to `dst(r, f)` (callables returning aligned `const T*` / `T*`), as one stream in
/// rounds of kCopyUnroll elements per lane whose loads are all issued before their stores: a
/// round costs one memory latency, ragged ends and record boundaries included. Each lane walks
/// its elements as (record, field) pairs, stepping by the warp's 32 elements without a division
/// per element (a division per 16-byte vector made the copy instruction-bound). Called by: all
/// 32 lanes of a warp. `kInput`: as load_element.
template <bool kInput, typename T, typename Src, typename Dst>
__device__ __forceinline__ void warp_copy_fields(uint32_t records, uint32_t fields, Src src, Dst dst, uint32_t lane) {
  if (fields == 0) return;
  const uint32_t n = records * fields;
  const FieldStep step(fields);
  // This lane's element base + lane of the current round.
  uint32_t r = lane / fields, f = lane % fields;
  for (uint32_t base = 0; base < n; base += 32 * kCopyUnroll) {
    const uint32_t r0 = r, f0 = f;
    T v[kCopyUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kCopyUnroll; ++u) {
      if (base + 32 * u + lane < n) v[u] = load_element<kInput>(src(r, f));
      step(r, f);
    }
    r = r0;
    f = f0;
#pragma unroll
    for (uint32_t u = 0; u < kCopyUnroll; ++u) {
      if (base + 32 * u + lane < n) *dst(r, f) = v[u];
      step(r, f);
    }
  }
}

/// Two words describing one record of a span copy (warp_copy_span), usually its source and
/// destination addresses.
struct RecordWords {
  uint64_t src, dst;
};

/// Copies elements `[begin, end)` of a stream of records of `fields` elements of type `T`
/// (element i is field i % fields of record i / fields): field f of record r from
/// `src_at(w.src, f)` to `dst_at(w.dst, f)`, `w = record(r)`. The records are taken 32 at a
/// time and lane l calls `record` for the batch's record l alone, so look-ups that load (where
/// a record goes) cost one latency per batch; each element's words come from that lane by a
/// shuffle, so no address in a round waits for memory and all of a round's loads are in
/// flight before its stores (an address loaded per element made the compiler interleave loads
/// and stores, one round trip per element). Rounds of `kUnroll` elements per lane, stepping as
/// warp_copy_fields. Called by: all 32 lanes of a warp, with the same arguments. `kInput`: as
/// load_element.
template <bool kInput, uint32_t kUnroll, typename T, typename Record, typename SrcAt, typename DstAt>
__device__ __forceinline__ void warp_copy_span(uint64_t begin, uint64_t end, uint32_t fields, Record record,
                                               SrcAt src_at, DstAt dst_at, uint32_t lane) {
  if (fields == 0) return;
  const FieldStep step(fields);
  while (begin < end) {
    const uint64_t first = begin / fields, stop = min(end, (first + 32) * fields);
    RecordWords mine = {0, 0};
    if ((first + lane) * fields < stop) mine = record(first + lane);
    // This lane's element begin + lane of the current round, as (record - first, field).
    const uint32_t n = uint32_t(stop - begin), offset = uint32_t(begin - first * fields) + lane;
    uint32_t r = offset / fields, f = offset % fields;
    for (uint32_t base = 0; base < n; base += 32 * kUnroll) {
      const uint32_t r0 = r, f0 = f;
      T v[kUnroll];
#pragma unroll
      for (uint32_t u = 0; u < kUnroll; ++u) {
        const uint64_t src = __shfl_sync(~0u, mine.src, r % 32);
        if (base + 32 * u + lane < n) v[u] = load_element<kInput>(src_at(src, f));
        step(r, f);
      }
      r = r0;
      f = f0;
#pragma unroll
      for (uint32_t u = 0; u < kUnroll; ++u) {
        const uint64_t dst = __shfl_sync(~0u, mine.dst, r % 32);
        if (base + 32 * u + lane < n) *dst_at(dst, f) = v[u];
        step(r, f);
      }
    }
    begin = stop;
  }
}

/// Copies `records` records of `bytes` each (16-byte multiples, aligned), record r from
/// `src(r)` to `dst(r)`, as one stream of vectors (warp_copy_fields): loads of several records
/// are in flight at once. Called by: all 32 lanes of a warp. `kInput`: `src` holds kernel
/// inputs (see load_input), else staged data (see load_staged).
template <bool kInput, typename Src, typename Dst>
__device__ __forceinline__ void warp_copy_records(uint32_t records, uint32_t bytes, Src src, Dst dst, uint32_t lane) {
  warp_copy_fields<kInput, int4>(
      records, bytes / 16, [&](uint32_t r, uint32_t f) { return reinterpret_cast<const int4*>(src(r)) + f; },
      [&](uint32_t r, uint32_t f) { return reinterpret_cast<int4*>(dst(r)) + f; }, lane);
}

}  // namespace ep
}  // namespace weft
