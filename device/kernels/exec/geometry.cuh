// The executor's chunk arithmetic: weft-plan's chunk geometry (crates/weft-plan/src/plan/
// geometry, the one definition: ChunkSplit, replica_slice, op_slice) restated in closed form for
// the kernel. weft-exec's tests/geometry.rs compiles this header on the host and holds every
// function equal to the Rust definition on random plans, sizes and element widths; keep it free
// of anything but integer arithmetic so it compiles as plain C++ too.
#pragma once
#include "weft/impl/stdint.cuh"

#ifdef __CUDACC__
#define WEFT_GEOMETRY_FN __device__ __forceinline__
#else
#define WEFT_GEOMETRY_FN inline
#endif

namespace weft {
namespace exec {

WEFT_GEOMETRY_FN uint64_t pad16(uint64_t bytes) { return (bytes + 15) & ~uint64_t(15); }
WEFT_GEOMETRY_FN uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/// Where chunks lie for this call, for elements of `Elem` bytes. Scratch chunks are placed by
/// their owner's table (`ExecBuffers::scratch_counts`: row `i` counts the chunks of each class
/// before scratch chunk `i`): ranks' scratch layouts differ (e.g. ring all-reduce: rank 0 stages
/// classes 0..3, rank 1 classes 4..7), so a writer must place a chunk of a peer's scratch where
/// the peer reads it.
/// The call's divisions are done once, in `make`: a class holds `small` elements, plus one for
/// the first `extra` classes, so every offset below is closed-form, without loops over classes
/// (except over a scratch table's row).
template <uint64_t Elem>
struct ChunkGeometry {
  uint32_t classes;
  /// Bytes of a scratch chunk per padded byte: 2 under packets, else 1.
  uint32_t scratch_scale;
  uint64_t unit;
  /// unit / classes and unit % classes.
  uint64_t small, extra;
  /// Padded bytes of a class with `small + 1` and with `small` elements.
  uint64_t pad_big, pad_small;

  WEFT_GEOMETRY_FN static ChunkGeometry make(uint64_t unit, uint32_t classes, uint32_t scratch_scale) {
    const uint64_t small = unit / classes, extra = unit % classes;
    return {classes, scratch_scale, unit, small, extra, pad16((small + 1) * Elem), pad16(small * Elem)};
  }
  /// Elements of a chunk of class `c` (ChunkSplit::class_len).
  WEFT_GEOMETRY_FN uint64_t class_len(uint32_t c) const { return small + (c < extra ? 1 : 0); }
  WEFT_GEOMETRY_FN uint64_t class_bytes(uint32_t c) const { return class_len(c) * Elem; }
  /// ChunkSplit::padded_class_bytes.
  WEFT_GEOMETRY_FN uint64_t padded_class(uint32_t c) const { return c < extra ? pad_big : pad_small; }
  /// Element offset of input or output chunk `i` in a user buffer (ChunkSplit::dense_offset;
  /// chunk indices fit 32 bits).
  WEFT_GEOMETRY_FN uint64_t dense(uint64_t i) const {
    const uint32_t n = static_cast<uint32_t>(i), q = n / classes, c = n % classes;
    return q * unit + c * small + (c < extra ? c : extra);
  }
  /// Byte offset of input or output chunk `i` in a stage (ChunkSplit::padded_dense_offset).
  WEFT_GEOMETRY_FN uint64_t padded_dense(uint64_t i) const {
    const uint32_t n = static_cast<uint32_t>(i), q = n / classes, c = n % classes;
    const uint64_t big_before = c < extra ? c : extra;
    const uint64_t block = extra * pad_big + (classes - extra) * pad_small;
    return q * block + big_before * pad_big + (c - big_before) * pad_small;
  }
  /// Byte offset of scratch chunk `i` of the rank whose table is `counts`
  /// (ChunkSplit::padded_packed_offset, times the scratch scale).
  WEFT_GEOMETRY_FN uint64_t padded_scratch(const uint32_t* counts, uint64_t i) const {
    uint64_t at = 0;
    for (uint32_t k = 0; k < classes; ++k) at += counts[i * classes + k] * padded_class(k);
    return at * scratch_scale;
  }
  /// Size class of chunk `i` of buffer `buffer` (0 input, 1 output, 2 scratch: `counts` is the
  /// owner's table, and the class is the one whose count grows from row `i` to the next).
  WEFT_GEOMETRY_FN uint32_t class_of(uint8_t buffer, const uint32_t* counts, uint64_t i) const {
    if (buffer != 2) return static_cast<uint32_t>(i) % classes;
    for (uint32_t k = 0; k < classes; ++k) {
      if (counts[(i + 1) * classes + k] != counts[i * classes + k]) return k;
    }
    return 0;
  }
};

/// Bytes [begin, end) of a `bytes`-long chunk that replica `r` of `n` moves (replica_slice): its
/// share of the chunk's 16-byte vectors.
WEFT_GEOMETRY_FN void replica_slice(uint64_t bytes, uint32_t r, uint32_t n, uint64_t& begin, uint64_t& end) {
  const uint64_t vectors = (bytes + 15) / 16;
  begin = min_u64(vectors * r / n * 16, bytes);
  end = min_u64(vectors * (r + 1) / n * 16, bytes);
}

/// The bytes [begin, end) of a `bytes`-long chunk that replica `r` of `n` moves for an operation
/// on part `part()` of `parts` of every chunk (op_slice; `parts` 0: the whole chunk, and `part`
/// is not called): the part's replica_slice of the chunk, then the replica's of that.
template <class PartIndex>
WEFT_GEOMETRY_FN void op_slice(uint64_t bytes, uint32_t parts, PartIndex part, uint32_t r, uint32_t n, uint64_t& begin,
                               uint64_t& end) {
  uint64_t lo = 0, hi = bytes;
  if (parts != 0) replica_slice(bytes, part(), parts, lo, hi);
  replica_slice(hi - lo, r, n, begin, end);
  begin += lo;
  end += lo;
}

}  // namespace exec
}  // namespace weft
