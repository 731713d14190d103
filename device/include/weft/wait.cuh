// Bounded waits: every spin in weft gives up after WaitContext::timeout_ns of %globaltimer,
// records {rank, peer, op, expected, observed} in the communicator's DeviceErrorRecord (first
// failure wins) and returns false. The host turns the record into an error naming the peer.
// A spin also gives up early once any thread has recorded a failure, so a kernel whose peer
// died exits promptly instead of timing out once per wait.
#pragma once
#include "weft/generated/types.cuh"
#include "weft/impl/ptx__funcs.cuh"

namespace weft {

/// State of one bounded spin. Called by: whichever threads spin (each keeps its own Spin).
struct Spin {
  uint64_t start = 0;
  uint32_t count = 0;

  /// True when the spin must give up: its time is out, or another thread already failed.
  /// Reads the clock only every 256 calls to keep the polling loop tight.
  __device__ __forceinline__ bool expired(const WaitContext& ctx) {
    if ((++count & 255u) != 0) return false;
    const uint64_t now = ptx::globaltimer_ns();
    if (start == 0) {
      start = now;
      return false;
    }
    const DeviceErrorRecord* record = reinterpret_cast<const DeviceErrorRecord*>(ctx.error);
    if (record != nullptr && ptx::ld_volatile_u32(&record->code) != 0) return true;
    return now - start > ctx.timeout_ns;
  }
};

/// Records a failure with `code` (first failure wins). Called by: the thread that gave up.
__device__ __forceinline__ void report_failure(const WaitContext& ctx, DeviceErrorCode code, WaitOp op,
                                               uint64_t expected, uint64_t observed) {
  DeviceErrorRecord* record = reinterpret_cast<DeviceErrorRecord*>(ctx.error);
  if (record == nullptr) return;
  if (atomicCAS(&record->code, 0u, static_cast<uint32_t>(code)) == 0u) {
    record->op = static_cast<uint32_t>(op);
    record->rank = ctx.rank;
    record->peer = ctx.peer;
    record->expected = expected;
    record->observed = observed;
    __threadfence_system();
  }
}

/// Records a timeout (first failure wins). Called by: the thread whose spin expired.
__device__ __forceinline__ void report_timeout(const WaitContext& ctx, WaitOp op, uint64_t expected,
                                               uint64_t observed) {
  report_failure(ctx, DeviceErrorCode::Timeout, op, expected, observed);
}

/// True once any thread of any kernel sharing this error record has failed.
__device__ __forceinline__ bool failed(const WaitContext& ctx) {
  const DeviceErrorRecord* record = reinterpret_cast<const DeviceErrorRecord*>(ctx.error);
  return record != nullptr && ptx::ld_volatile_u32(&record->code) != 0;
}

/// Spins until `*word >= target`, acquire .sys. Called by: one thread. False on timeout.
__device__ __forceinline__ bool wait_at_least(const uint64_t* word, uint64_t target, const WaitContext& ctx,
                                              WaitOp op) {
  Spin spin;
  uint64_t seen;
  while ((seen = ptx::ld_acquire_sys(word)) < target) {
    if (spin.expired(ctx)) {
      report_timeout(ctx, op, target, seen);
      return false;
    }
  }
  return true;
}

}  // namespace weft
