// Element types and reduction operators of collectives, selected at compile time by the
// DataType and ReduceOp values of weft-types. Every reduction accumulates in a wider type
// (float for f16/bf16/fp8, the 64-bit integer of the same signedness for integers) and rounds
// once at the end, and combines ranks in rank order, so every rank computes bitwise the same
// result and repeated runs are bitwise identical.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include "weft/generated/types.cuh"

namespace weft {

template <DataType D> struct Element;

#define WEFT_INTEGER_ELEMENT(D, TYPE, ACC)                                          \
  template <> struct Element<DataType::D> {                                        \
    using T = TYPE;                                                                 \
    using Acc = ACC;                                                                \
    __device__ __forceinline__ static Acc widen(T x) { return static_cast<Acc>(x); } \
    __device__ __forceinline__ static T narrow(Acc x) { return static_cast<T>(x); } \
  };
WEFT_INTEGER_ELEMENT(I8, int8_t, int64_t)
WEFT_INTEGER_ELEMENT(U8, uint8_t, uint64_t)
WEFT_INTEGER_ELEMENT(I32, int32_t, int64_t)
WEFT_INTEGER_ELEMENT(U32, uint32_t, uint64_t)
WEFT_INTEGER_ELEMENT(I64, int64_t, int64_t)
WEFT_INTEGER_ELEMENT(U64, uint64_t, uint64_t)
#undef WEFT_INTEGER_ELEMENT

template <> struct Element<DataType::F32> {
  using T = float;
  using Acc = float;
  __device__ __forceinline__ static Acc widen(T x) { return x; }
  __device__ __forceinline__ static T narrow(Acc x) { return x; }
};
template <> struct Element<DataType::F64> {
  using T = double;
  using Acc = double;
  __device__ __forceinline__ static Acc widen(T x) { return x; }
  __device__ __forceinline__ static T narrow(Acc x) { return x; }
};
template <> struct Element<DataType::F16> {
  using T = __half;
  using Acc = float;
  __device__ __forceinline__ static Acc widen(T x) { return __half2float(x); }
  __device__ __forceinline__ static T narrow(Acc x) { return __float2half_rn(x); }
};
template <> struct Element<DataType::Bf16> {
  using T = __nv_bfloat16;
  using Acc = float;
  __device__ __forceinline__ static Acc widen(T x) { return __bfloat162float(x); }
  __device__ __forceinline__ static T narrow(Acc x) { return __float2bfloat16_rn(x); }
};
/// FP8 in either interpretation: widened through half, narrowed with saturation to the
/// largest finite value (as NCCL and cuBLAS do).
template <__nv_fp8_interpretation_t kFormat>
struct Fp8Element {
  using T = __nv_fp8_storage_t;
  using Acc = float;
  __device__ __forceinline__ static Acc widen(T x) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, kFormat))); }
  __device__ __forceinline__ static T narrow(Acc x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kFormat); }
};
template <> struct Element<DataType::F8E4M3> : Fp8Element<__NV_E4M3> {};
template <> struct Element<DataType::F8E5M2> : Fp8Element<__NV_E5M2> {};

/// Combines two accumulators. Avg accumulates as a sum; `finish` divides.
template <ReduceOp O> struct Combine {
  template <typename A>
  __device__ __forceinline__ static A apply(A a, A b) {
    if constexpr (O == ReduceOp::Prod) {
      return a * b;
    } else if constexpr (O == ReduceOp::Max) {
      return a > b ? a : b;
    } else if constexpr (O == ReduceOp::Min) {
      return a < b ? a : b;
    } else {
      return a + b;
    }
  }
  template <typename A>
  __device__ __forceinline__ static A finish(A a, uint32_t ranks) {
    if constexpr (O == ReduceOp::Avg) {
      return a / static_cast<A>(ranks);
    } else {
      return a;
    }
  }
};

/// Reduces `N` bytes (a whole number of elements) from `ranks` sources in rank order:
/// `source(r)` returns a pointer to rank r's bytes (aligned for T), the result goes to `out`.
template <DataType D, ReduceOp O, int N>
struct Reducer {
  using E = Element<D>;
  using T = typename E::T;
  static constexpr int kElems = N / static_cast<int>(sizeof(T));

  /// Loads element i of an N-byte register image.
  __device__ __forceinline__ static T get(const uint32_t (&w)[N / 4], int i) {
    T v;
    memcpy(&v, reinterpret_cast<const char*>(w) + i * sizeof(T), sizeof(T));
    return v;
  }
  __device__ __forceinline__ static void put(uint32_t (&w)[N / 4], int i, T v) {
    memcpy(reinterpret_cast<char*>(w) + i * sizeof(T), &v, sizeof(T));
  }

  /// acc[i] = widen(first), then folded with each next image.
  __device__ __forceinline__ static void start(typename E::Acc (&acc)[kElems], const uint32_t (&w)[N / 4]) {
#pragma unroll
    for (int i = 0; i < kElems; ++i) acc[i] = E::widen(get(w, i));
  }
  __device__ __forceinline__ static void fold(typename E::Acc (&acc)[kElems], const uint32_t (&w)[N / 4]) {
#pragma unroll
    for (int i = 0; i < kElems; ++i) acc[i] = Combine<O>::apply(acc[i], E::widen(get(w, i)));
  }
  __device__ __forceinline__ static void finish(const typename E::Acc (&acc)[kElems], uint32_t ranks,
                                                uint32_t (&w)[N / 4]) {
#pragma unroll
    for (int i = 0; i < kElems; ++i) put(w, i, E::narrow(Combine<O>::finish(acc[i], ranks)));
  }
};

}  // namespace weft
