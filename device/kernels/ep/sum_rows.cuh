// The combines' reduction: a warp sums BF16 rows in f32 in a fixed order, with several
// sources' loads in flight at once, and rounds once to BF16.
#pragma once
#include "common.cuh"

/// Vectors (8 channels each) a lane sums per step, and sources whose loads a step issues
/// together: 8 loads of 16 bytes in flight per lane.
constexpr uint32_t kSumVectors = 4, kSumSources = 2;

/// `acc = fma(x, w, acc)` for the 8 BF16 values of `v`.
__device__ __forceinline__ void fma_bf16x8(float (&acc)[8], int4 v, float w) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    acc[2 * i] = __fmaf_rn(f.x, w, acc[2 * i]);
    acc[2 * i + 1] = __fmaf_rn(f.y, w, acc[2 * i + 1]);
  }
}

/// Vectors `[begin, end)` of `out`: per channel, from 0 in f32, `acc = fma(x, weight, acc)` for
/// each source in lane order, rounded once to BF16. Lane s describes source s: `row` (its
/// BF16 row, null for no source) and `weight` (1 gives `acc + x` exactly). Called by: all 32
/// lanes of a warp, after the acquires that make the rows visible.
__device__ __forceinline__ void warp_sum_rows(const char* row, float weight, int4* out, uint32_t begin, uint32_t end,
                                              uint32_t lane) {
  const uint32_t sources = __ballot_sync(~0u, row != nullptr);
  for (uint32_t base = begin; base < end; base += 32 * kSumVectors) {
    float acc[kSumVectors][8];
#pragma unroll
    for (uint32_t u = 0; u < kSumVectors; ++u) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[u][i] = 0.f;
    }
    for (uint32_t pending = sources; pending != 0;) {
      // Every load of the step first, then the sums in source order.
      int4 v[kSumSources][kSumVectors];
      float w[kSumSources];
      bool used[kSumSources];
#pragma unroll
      for (uint32_t s = 0; s < kSumSources; ++s) {
        used[s] = pending != 0;
        const uint32_t source = used[s] ? __ffs(pending) - 1 : 0;
        pending &= pending - 1;
        const int4* p = reinterpret_cast<const int4*>(
            __shfl_sync(~0u, reinterpret_cast<unsigned long long>(row), source));
        w[s] = __shfl_sync(~0u, weight, source);
#pragma unroll
        for (uint32_t u = 0; u < kSumVectors; ++u) {
          const uint32_t j = base + 32 * u + lane;
          if (used[s] && j < end) v[s][u] = load_staged(p + j);
        }
      }
#pragma unroll
      for (uint32_t s = 0; s < kSumSources; ++s) {
#pragma unroll
        for (uint32_t u = 0; u < kSumVectors; ++u) {
          if (used[s] && base + 32 * u + lane < end) fma_bf16x8(acc[u], v[s][u], w[s]);
        }
      }
    }
#pragma unroll
    for (uint32_t u = 0; u < kSumVectors; ++u) {
      const uint32_t j = base + 32 * u + lane;
      if (j >= end) continue;
      int4 v;
      __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
      for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(acc[u][2 * i], acc[u][2 * i + 1]);
      out[j] = v;
    }
  }
}
