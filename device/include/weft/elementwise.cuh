// Element types and reduction operators of collectives, selected at compile time by the
// DataType and ReduceOp values of weft-types. Every reduction accumulates in a wider type
// (float for f16/bf16/fp8, the 64-bit integer of the same signedness for integers) and rounds
// once at the end, and combines ranks in rank order, so every rank computes bitwise the same
// result and repeated runs are bitwise identical. Integer results are NCCL's bit for bit: a
// 64-bit accumulator narrowed to the element type is the element type's wrapping sum (or
// product), and Finish applies Avg to that narrowed value. PreMulSum is NCCL's pre-operation:
// each rank multiplies its own input by its own scalar (Premultiply) before it enters the
// reduction, which then sums.
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
    static constexpr bool kInteger = true;                                          \
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
  static constexpr bool kInteger = false;
  __device__ __forceinline__ static Acc widen(T x) { return x; }
  __device__ __forceinline__ static T narrow(Acc x) { return x; }
};
template <> struct Element<DataType::F64> {
  using T = double;
  using Acc = double;
  static constexpr bool kInteger = false;
  __device__ __forceinline__ static Acc widen(T x) { return x; }
  __device__ __forceinline__ static T narrow(Acc x) { return x; }
};
template <> struct Element<DataType::F16> {
  using T = __half;
  using Acc = float;
  static constexpr bool kInteger = false;
  __device__ __forceinline__ static Acc widen(T x) { return __half2float(x); }
  __device__ __forceinline__ static T narrow(Acc x) { return __float2half_rn(x); }
};
template <> struct Element<DataType::Bf16> {
  using T = __nv_bfloat16;
  using Acc = float;
  static constexpr bool kInteger = false;
  __device__ __forceinline__ static Acc widen(T x) { return __bfloat162float(x); }
  __device__ __forceinline__ static T narrow(Acc x) { return __float2bfloat16_rn(x); }
};
/// FP8 in either interpretation: widened through half, narrowed with saturation to the
/// largest finite value (as NCCL and cuBLAS do).
template <__nv_fp8_interpretation_t kFormat>
struct Fp8Element {
  using T = __nv_fp8_storage_t;
  using Acc = float;
  static constexpr bool kInteger = false;
  __device__ __forceinline__ static Acc widen(T x) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, kFormat))); }
  __device__ __forceinline__ static T narrow(Acc x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kFormat); }
};
template <> struct Element<DataType::F8E4M3> : Fp8Element<__NV_E4M3> {};
template <> struct Element<DataType::F8E5M2> : Fp8Element<__NV_E5M2> {};

/// Combines two accumulators. Avg and PreMulSum accumulate as a sum; Finish completes Avg.
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
};

/// The unsigned integer of `kBytes` bytes: PreMulSum's integer products wrap in it.
template <int kBytes> struct UnsignedOf;
template <> struct UnsignedOf<1> { using U = uint8_t; };
template <> struct UnsignedOf<4> { using U = uint32_t; };
template <> struct UnsignedOf<8> { using U = uint64_t; };

/// PreMulSum's pre-operation, as NCCL's: a rank's OWN contribution times that rank's OWN scalar
/// (ranks may pass different scalars; the result is the sum over ranks r of scalar_r * x_r).
/// Kernels apply it exactly once to every element of their own input that contributes, where
/// that input enters the reduction locally or leaves for a peer (a packet, a push into a
/// scratch, its own scratch included), and never to a peer's contribution or to a partial
/// result. Integers multiply the bits in the unsigned type of the element's width: the element
/// type's wrapping product, without signed overflow. Floats multiply widened and narrow once:
/// the widened product of two elements is exact, so this is the product rounded once to the
/// element type, as NCCL's multiplication in the element type's precision. For every other
/// operator it is a copy (`kCopies`), compiled away, so their kernels are unchanged.
template <DataType D, ReduceOp O>
struct Premultiply {
  using E = Element<D>;
  using T = typename E::T;
  /// Whether the words pass unchanged (every operator but PreMulSum).
  static constexpr bool kCopies = O != ReduceOp::PreMulSum;
  /// This rank's scalar (PreMulSum only).
  T scalar;

  /// The scalar of `c`: its bits, or (`scalar_in_device`) the element at its device address,
  /// read here, so every thread calling it reads the value its launch sees.
  __device__ __forceinline__ static Premultiply of(const CollContext& c) {
    Premultiply p{};
    if constexpr (!kCopies) {
      if (c.scalar_in_device != 0) {
        memcpy(&p.scalar, reinterpret_cast<const void*>(c.scalar), sizeof(T));
      } else {
        memcpy(&p.scalar, &c.scalar, sizeof(T));  // the low bytes: little-endian, zero-extended
      }
    }
    return p;
  }

  /// One element times the scalar, in the element type.
  __device__ __forceinline__ T times(T x) const {
    if constexpr (E::kInteger) {
      using U = typename UnsignedOf<static_cast<int>(sizeof(T))>::U;
      U a, b;
      memcpy(&a, &x, sizeof(T));
      memcpy(&b, &scalar, sizeof(T));
      const U product = static_cast<U>(a * b);  // 8-bit: promoted to int, at most 255 * 255
      T out;
      memcpy(&out, &product, sizeof(T));
      return out;
    } else {
      return E::narrow(E::widen(x) * E::widen(scalar));
    }
  }

  /// Premultiplies every element of an `N`-word image of this rank's input (whole elements,
  /// element-aligned; padding past a short tail is zero and stays zero).
  template <int N>
  __device__ __forceinline__ void operator()(uint32_t (&w)[N]) const {
    if constexpr (!kCopies) {
      constexpr int kElems = N * 4 / static_cast<int>(sizeof(T));
#pragma unroll
      for (int i = 0; i < kElems; ++i) {
        T v;
        memcpy(&v, reinterpret_cast<const char*>(w) + i * sizeof(T), sizeof(T));
        v = times(v);
        memcpy(reinterpret_cast<char*>(w) + i * sizeof(T), &v, sizeof(T));
      }
    }
  }
};

/// What turns a fully reduced accumulator into the result element (NCCL's post-op), and the
/// one place it happens: Avg divides by the rank count; a partial result (`partial()`, a step
/// of a ring) and the other operators only narrow (PreMulSum's multiplication happened before
/// the reduction: Premultiply). Integers first narrow to the element type, which wraps the sum
/// as NCCL's does, then divide in it (C division: truncation toward zero). Floats divide the
/// accumulator, within rounding of NCCL's pre-multiply by 1/n.
template <DataType D, ReduceOp O>
struct Finish {
  using E = Element<D>;
  using T = typename E::T;
  using Acc = typename E::Acc;
  /// Whether the operator is applied (false: a partial result).
  bool complete;
  /// Avg's divisor.
  uint32_t ranks;

  /// The result of a whole reduction over `c.ranks` ranks.
  __device__ __forceinline__ static Finish of(const CollContext& c) { return of(c, c.ranks); }
  /// As `of(c)`, with `ranks` the divisor of an average.
  __device__ __forceinline__ static Finish of(const CollContext&, uint32_t ranks) { return Finish{true, ranks}; }
  /// A partial result: narrowed only.
  __device__ __forceinline__ static Finish partial() { return Finish{false, 1}; }

  __device__ __forceinline__ T operator()(Acc a) const {
    if constexpr (O == ReduceOp::Avg) {
      if (!complete) return E::narrow(a);
      if constexpr (E::kInteger) {
        return E::narrow(E::widen(E::narrow(a)) / static_cast<Acc>(ranks));
      } else {
        return E::narrow(a / static_cast<Acc>(ranks));
      }
    } else {
      return E::narrow(a);
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
  /// The result image: `finish` (Finish) applied to every accumulator.
  __device__ __forceinline__ static void finish(const typename E::Acc (&acc)[kElems], const Finish<D, O>& finish,
                                                uint32_t (&w)[N / 4]) {
#pragma unroll
    for (int i = 0; i < kElems; ++i) put(w, i, finish(acc[i]));
  }
};

}  // namespace weft
