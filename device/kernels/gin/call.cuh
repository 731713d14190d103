// The call protocol of the GIN examples: what makes a call reusable, back to back, eagerly or
// replayed from a CUDA graph, with no host synchronisation between calls.
//
// A call starts with thread 0 resetting the example's signal and entering world barrier
// `barrier`, and every thread waits for it:
//   - the reset subtracts exactly the previous call's arrivals: every one of them landed before
//     that call's wait returned, and no peer can raise the signal for this call before the
//     barrier, which it leaves only after this rank entered it. So every call waits for the
//     same count (its own arrivals), whatever ran before: nothing depends on a host-side round
//     number, and a graph replays the same parameters.
//   - after the barrier every rank has finished its previous call, including the copy of its
//     receive window the host queued after it: puts may overwrite the windows.
// A call ends once this rank's puts are flushed (complete at their targets: the source window
// may be refilled) and every arrival it waits for is there.
#pragma once
#include "weft/gin.cuh"

namespace weft::examples {

/// The start of a call (see above), by every thread of the block; false on every thread if
/// the barrier failed (its wait is in the error record).
__device__ __forceinline__ bool begin_call(Gin& gin, uint32_t signal, uint32_t barrier) {
  bool ok = true;
  if (threadIdx.x == 0) {
    gin.reset_signal(signal);
    ok = gin.barrier(barrier);
  }
  return __syncthreads_and(ok) != 0;
}

}  // namespace weft::examples
