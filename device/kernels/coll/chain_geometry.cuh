// How the chain (chain.cuh) splits a message into steps and blocks. Plain arithmetic, so that
// weft-coll's tests/chain_geometry.rs compiles it on the host and checks it on random sizes,
// rank counts, scratch sizes and grids.
#pragma once
#include "weft/impl/stdint.cuh"

#ifdef __CUDACC__
#define WEFT_CHAIN_FN __device__ __forceinline__
#else
#include <math.h>
#define WEFT_CHAIN_FN inline
#endif

namespace weft {
namespace coll {

constexpr uint32_t kChainSlots = 4;
/// The cost model that picks the step count: each step costs a block about kChainStepNs of
/// hand-off (its release after its stores, the next rank's acquire) besides its bytes at
/// kChainBytesPerNs; on 4×H100, 8 steps of 128-512 KiB took 4-5 µs each whatever their size.
/// With s steps over n - 1 links the call takes about (s + n - 2) (kChainStepNs + bytes /
/// (s kChainBytesPerNs)), least at s = sqrt((n - 2) bytes / (kChainBytesPerNs kChainStepNs)):
/// one step at 2 ranks (no link waits for another), more as the chain grows and the message
/// with it; at least as many as the slots need (each at most a quarter of the scratch).
constexpr double kChainStepNs = 4500.0, kChainBytesPerNs = 350.0;
/// The least a block moves per step: fewer blocks for small steps.
constexpr uint64_t kChainBlockBytes = 4096;

/// The split of a message of `bytes` (> 0) over `ranks` ranks, `scratch_bytes` of scratch per
/// rank (at least 64 x `grid`) and a grid of `grid` blocks; the same at every rank of a call.
/// Block b moves bytes [h step + b sub, h step + (b + 1) sub) of step h, into the same offsets
/// of slot h mod kChainSlots.
struct ChainGeometry {
  uint64_t step, steps, sub;
  uint32_t blocks;
  WEFT_CHAIN_FN ChainGeometry(uint64_t bytes, uint32_t ranks, uint64_t scratch_bytes, uint32_t grid) {
    const uint64_t cap = scratch_bytes / kChainSlots;
    const double hops = ranks > 2 ? ranks - 2 : 0;
    const uint64_t best = static_cast<uint64_t>(sqrt(hops * bytes / (kChainBytesPerNs * kChainStepNs)) + 0.5);
    const uint64_t fewest = (bytes + cap - 1) / cap;
    const uint64_t count = best > fewest ? best : fewest;
    const uint64_t wanted = ((bytes + count - 1) / count + 15) & ~uint64_t(15);
    const uint64_t busy = wanted / kChainBlockBytes;
    blocks = static_cast<uint32_t>(busy < 1 ? 1 : (busy < grid ? busy : grid));
    // 16-byte multiples, and a whole step within a slot (cap >= 16 x blocks).
    const uint64_t even = ((wanted + blocks - 1) / blocks + 15) & ~uint64_t(15);
    const uint64_t room = (cap / blocks) & ~uint64_t(15);
    sub = even < room ? even : room;
    step = sub * blocks;
    steps = (bytes + step - 1) / step;
  }
};

}  // namespace coll
}  // namespace weft
