// Fixed-width integers for both NVRTC (no C library) and nvcc.
#pragma once
#ifdef __CUDACC_RTC__
#include <cuda/std/cstdint>
using cuda::std::int8_t;
using cuda::std::int16_t;
using cuda::std::int32_t;
using cuda::std::int64_t;
using cuda::std::uint8_t;
using cuda::std::uint16_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
using cuda::std::uintptr_t;
#else
#include <cstdint>
#endif

// A constant-expression offsetof: NVRTC's front end has no __builtin_offsetof, but folds
// __INTADDR__ of a member address to a constant.
#ifdef __CUDACC_RTC__
#define WEFT_OFFSETOF(type, member) ((unsigned long long)__INTADDR__(&(((type*)0)->member)))
#else
#include <cstddef>
#define WEFT_OFFSETOF(type, member) offsetof(type, member)
#endif
