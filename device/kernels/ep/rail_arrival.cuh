// The rows of the rail hop as they arrive, chunk by chunk (docs/ep.md, "Overlapping the rail
// hop"): a kernel that reads rows another node puts waits only for the chunk holding them,
// not for the whole exchange. The split is the one `weft_ep_rail_exchange` puts with, and the
// counts are the host's (`EpRailArrival`).
#pragma once
#include "common.cuh"

/// First row of chunk `k` of `rows` rows split in `chunks` (`chunks` + 1 boundaries, the last
/// `rows`; empty chunks where `rows < chunks`).
__device__ __forceinline__ uint64_t rail_chunk_begin(uint64_t rows, uint32_t chunks, uint32_t k) {
  return rows * k / chunks;
}

/// The count source `s`'s word must reach before row `offset` of its rows (`offset < rows[s]`)
/// is visible: `base + puts * (k + 1)` for the chunk k holding it, the largest k with
/// `rail_chunk_begin(rows, chunks, k) <= offset`.
__device__ __forceinline__ uint64_t rail_row_target(const EpRailArrival& a, uint32_t s, uint32_t offset) {
  const uint64_t rows = a.rows[s], chunks = a.chunks[s];
  const uint64_t k = ((uint64_t(offset) + 1) * chunks + rows - 1) / rows - 1;
  return a.base[s] + uint64_t(a.puts) * (k + 1);
}

/// Waits (acquire, bounded) until source `s`'s word reaches `target`; false when the wait gave
/// up (recorded as `op` waiting for the source's rail peer). Called by: one thread.
__device__ __forceinline__ bool rail_wait(const EpRailArrival& a, uint32_t s, uint64_t target, WaitOp op) {
  WaitContext ctx = a.wait;
  ctx.peer = int32_t(a.peers[s]);
  return wait_at_least(reinterpret_cast<const uint64_t*>(a.words[s]), target, ctx, op);
}

/// Waits until rows `[first, last]` of the reader's input have arrived (rows of a source
/// without a word are here already); false when a wait gave up (recorded). Called by: one
/// thread; its acquires cover the rows for the threads a barrier after it orders.
__device__ __forceinline__ bool rail_rows_arrived(const EpRailArrival& a, uint32_t first, uint32_t last, WaitOp op) {
  for (uint32_t s = 0; s < a.nodes; ++s) {
    const uint32_t begin = a.from[s], end = a.from[s] + a.rows[s];
    if (a.words[s] == 0 || last < begin || first >= end) continue;
    if (!rail_wait(a, s, rail_row_target(a, s, min(last, end - 1) - begin), op)) return false;
  }
  return true;
}

/// Waits until input row `row` has arrived, unless `row < *here` (rows from `row` below
/// `*here` are known to have); then sets `*here` past the last row known with it (the end of
/// its chunk, or of its source's rows when they are here already). False when the wait gave
/// up (recorded). Called by: one thread, for rows in increasing order.
__device__ __forceinline__ bool rail_row_arrived(const EpRailArrival& a, uint32_t row, uint32_t* here, WaitOp op) {
  if (row < *here) return true;
  for (uint32_t s = 0; s < a.nodes; ++s) {
    const uint32_t begin = a.from[s], end = a.from[s] + a.rows[s];
    if (row < begin || row >= end) continue;
    if (a.words[s] == 0) {
      *here = end;
      return true;
    }
    const uint64_t target = rail_row_target(a, s, row - begin);
    const uint32_t k = uint32_t((target - a.base[s]) / a.puts) - 1;
    if (!rail_wait(a, s, target, op)) return false;
    *here = begin + uint32_t(rail_chunk_begin(a.rows[s], a.chunks[s], k + 1));
    return true;
  }
  return true;  // a row of no source: nothing to wait for
}
