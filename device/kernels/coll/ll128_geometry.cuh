// Where the bytes of a message go in LL128 lines (ll128.cuh), and which warp handles which
// lines. Plain arithmetic, so that weft-coll's tests/ll128_geometry.rs compiles it on the host
// and checks it on random sizes and grids.
//
// A line is 128 bytes, stored by 8 consecutive lanes of a warp with one 16-byte store each:
// lanes 0-6 carry message bytes [16 l, 16 l + 16) of the line's 120, lane 7 carries bytes
// [112, 120) and the flag in its last 8 bytes. Line i carries message bytes [120 i, 120 i + 120).
// A warp stores four consecutive lines at once (a group: 512 bytes, one store instruction).
#pragma once
#include "weft/impl/stdint.cuh"

#ifdef __CUDACC__
#define WEFT_LL128_FN __host__ __device__ __forceinline__
#else
#define WEFT_LL128_FN inline
#endif

namespace weft {
namespace coll {

constexpr uint32_t kLl128LineBytes = 128;
constexpr uint32_t kLl128PayloadBytes = 120;
constexpr uint32_t kLl128LanesPerLine = 8;
constexpr uint32_t kLl128LinesPerGroup = 4;
/// The lane of a line whose last 8 bytes are the flag.
constexpr uint32_t kLl128FlagLane = kLl128LanesPerLine - 1;

/// Lines that carry `bytes`.
WEFT_LL128_FN uint64_t ll128_lines(uint64_t bytes) { return (bytes + kLl128PayloadBytes - 1) / kLl128PayloadBytes; }

/// Groups of four lines that carry `bytes`.
WEFT_LL128_FN uint64_t ll128_groups(uint64_t bytes) {
  return (ll128_lines(bytes) + kLl128LinesPerGroup - 1) / kLl128LinesPerGroup;
}

/// Offset in the message of the first byte lane `lane` (0-7) of line `line` carries.
WEFT_LL128_FN uint64_t ll128_offset(uint64_t line, uint32_t lane) { return line * kLl128PayloadBytes + 16u * lane; }

/// Message bytes lane `lane` of line `line` carries in a message of `bytes`: 16 (8 for the
/// flag lane) inside the message, fewer at its end, 0 past it.
WEFT_LL128_FN uint32_t ll128_valid(uint64_t bytes, uint64_t line, uint32_t lane) {
  const uint64_t at = ll128_offset(line, lane);
  const uint64_t cap = lane == kLl128FlagLane ? 8u : 16u;
  if (at >= bytes) return 0;
  return static_cast<uint32_t>(bytes - at < cap ? bytes - at : cap);
}

/// Which groups a warp handles: its k-th is group (k blocks + block) warps + warp, a pattern
/// fixed in the group index, so a warp owns the same lines whatever the message's length. The
/// chain's rounds within one launch rely on it (a round from the third on waits for the same
/// block of each peer only); across launches every LL128 launch waits for every block's token.
struct Ll128Deal {
  uint32_t blocks, warps, block, warp;
  /// The group of this warp's step k, increasing in k.
  WEFT_LL128_FN uint64_t group(uint64_t k) const {
    return (k * blocks + block) * static_cast<uint64_t>(warps) + warp;
  }
};

}  // namespace coll
}  // namespace weft
