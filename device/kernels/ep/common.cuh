// What every EP kernel file includes: the EP buffer, synchronisation and copy helpers
// (weft/ep/), BF16, and the launch shapes weft-ep's launch code uses (kept equal by a test).
#pragma once
#include <cuda_bf16.h>

#include "weft/ep/buffer.cuh"
#include "weft/ep/copy.cuh"
#include "weft/ep/sync.cuh"
#include "weft/trace.cuh"

using namespace weft;
using namespace weft::ep;

/// Threads of a normal-mode dispatch or combine block (16 warps).
constexpr uint32_t kChannelThreads = 512;
constexpr uint32_t kChannelWarps = kChannelThreads / 32;
/// Threads of the layout, notify and prologue blocks.
constexpr uint32_t kSetupThreads = 256;
/// Valid bit of a dispatch channel word (`valid | count << 32 | start`).
constexpr uint64_t kChannelWordValid = 1ull << 63;
