// The flags of LL rounds (packet.cuh): which flag a launch uses, which flag two launches back
// its token wait names, and when a token is behind. Plain arithmetic, so that weft-core's
// tests/ll_flags.rs compiles it on the host and walks the cycle across its wrap.
//
// Flags cycle through 2, 3, ..., 0xffffffff, 2, 3, ...: never 0 or 1, so never-written (zeroed)
// packet memory never shows a flag a reader waits for, and the cycle's length (2^32 - 2) is
// even, so the parity half alternates across the wrap as everywhere else. A slot holds the last
// flag used, 0 before the first launch. Two launches back is defined on the cycle, so a round
// after the wrap waits for the right token; at the first two launches it names the two flags
// before 2 on the cycle, which a token of 0 (never written) is not behind, so no first-launch
// shortcut is needed. Tokens compare by signed 32-bit distance.
#pragma once
#include "weft/impl/stdint.cuh"

#ifdef __CUDACC__
#define WEFT_LL_FLAGS_FN __host__ __device__ __forceinline__
#else
#define WEFT_LL_FLAGS_FN inline
#endif

namespace weft {

/// The flag after `last` (the slot's value: the last flag used, 0 before any).
WEFT_LL_FLAGS_FN uint32_t ll_flag_after(uint32_t last) { return last >= 2u && last != 0xffffffffu ? last + 1u : 2u; }

/// The flag two launches before `flag` on the cycle: the round whose packets shared its half.
WEFT_LL_FLAGS_FN uint32_t ll_flag_two_back(uint32_t flag) { return flag >= 4u ? flag - 2u : flag + 0xfffffffcu; }

/// Whether a token holding `seen` is behind `want` (the reader has not finished that round).
WEFT_LL_FLAGS_FN bool ll_token_behind(uint32_t seen, uint32_t want) { return static_cast<int32_t>(seen - want) < 0; }

}  // namespace weft
