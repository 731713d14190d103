// Element-wise reduction helpers for f32, f16 and bf16, scalar and on 16-byte vectors (uint4
// holding 4 floats, 8 halves or 8 bfloat16s). Pure functions: no memory access, no sync.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "weft/impl/stdint.cuh"

namespace weft {

struct SumOp {
  __device__ __forceinline__ static float apply(float a, float b) { return a + b; }
  __device__ __forceinline__ static __half apply(__half a, __half b) { return __hadd(a, b); }
  __device__ __forceinline__ static __nv_bfloat16 apply(__nv_bfloat16 a, __nv_bfloat16 b) { return __hadd(a, b); }
  __device__ __forceinline__ static __half2 apply(__half2 a, __half2 b) { return __hadd2(a, b); }
  __device__ __forceinline__ static __nv_bfloat162 apply(__nv_bfloat162 a, __nv_bfloat162 b) { return __hadd2(a, b); }
};

struct MinOp {
  __device__ __forceinline__ static float apply(float a, float b) { return fminf(a, b); }
  __device__ __forceinline__ static __half apply(__half a, __half b) { return __hmin(a, b); }
  __device__ __forceinline__ static __nv_bfloat16 apply(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmin(a, b); }
  __device__ __forceinline__ static __half2 apply(__half2 a, __half2 b) { return __hmin2(a, b); }
  __device__ __forceinline__ static __nv_bfloat162 apply(__nv_bfloat162 a, __nv_bfloat162 b) { return __hmin2(a, b); }
};

struct MaxOp {
  __device__ __forceinline__ static float apply(float a, float b) { return fmaxf(a, b); }
  __device__ __forceinline__ static __half apply(__half a, __half b) { return __hmax(a, b); }
  __device__ __forceinline__ static __nv_bfloat16 apply(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmax(a, b); }
  __device__ __forceinline__ static __half2 apply(__half2 a, __half2 b) { return __hmax2(a, b); }
  __device__ __forceinline__ static __nv_bfloat162 apply(__nv_bfloat162 a, __nv_bfloat162 b) { return __hmax2(a, b); }
};

/// Lane type of a 32-bit word for element type T: float for f32, the packed pair otherwise.
template <typename T> struct Lane;
template <> struct Lane<float> { using type = float; };
template <> struct Lane<__half> { using type = __half2; };
template <> struct Lane<__nv_bfloat16> { using type = __nv_bfloat162; };

/// Reduces two 32-bit words holding packed T values.
template <typename T, typename Op>
__device__ __forceinline__ uint32_t reduce_word(uint32_t a, uint32_t b) {
  using L = typename Lane<T>::type;
  static_assert(sizeof(L) == 4, "lanes are 32-bit");
  L x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  const L r = Op::apply(x, y);
  uint32_t out;
  memcpy(&out, &r, 4);
  return out;
}

/// Reduces two 16-byte vectors of packed T values.
template <typename T, typename Op>
__device__ __forceinline__ uint4 reduce_vec(uint4 a, uint4 b) {
  return make_uint4(reduce_word<T, Op>(a.x, b.x), reduce_word<T, Op>(a.y, b.y), reduce_word<T, Op>(a.z, b.z),
                    reduce_word<T, Op>(a.w, b.w));
}

/// Scalar reduction of one element.
template <typename T, typename Op>
__device__ __forceinline__ T reduce_scalar(T a, T b) {
  return Op::apply(a, b);
}

}  // namespace weft
