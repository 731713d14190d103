// Device-side tracing (docs/trace.md). Without WEFT_TRACE_ENABLED every macro expands to
// nothing, so an untraced kernel compiles to the same CUBIN as one without them.
//
//   WEFT_TRACE_SCOPE(kernel);     first statement of a traced kernel, by every thread; `kernel`
//                                 is the kernel's name in weft-core's trace table.
//   WEFT_TRACE_MARK(phase);       a phase boundary of the block: thread 0 logs (time, phase);
//                                 for phases every thread (or at least thread 0) passes.
//   WEFT_TRACE_WARP_MARK(phase);  a phase boundary of one warp: the first active lane of each
//                                 warp that reaches it logs (time, warp, phase); for kernels
//                                 whose warps have roles of their own.
//
// Traced, the scope makes every block begin with a barrier (so its shared log is reset before
// anything marks) and log the block's entry; the block's last warp to leave (a warp leaves when
// its lane 0 does) logs the block's exit and copies the log into the ring that weft_trace_ring
// (set by the host after loading) points at, when the call is sampled. The call number is the
// kernel's count of ended launches on the ring, read by each block as it leaves and advanced by
// the launch's last block: consistent for launches of one kernel that do not overlap (stream
// order, or an early launch whose blocks wait for the previous grid before leaving, as the LL
// kernels do). A block logs at most kBlockRecords marks a launch; later ones are counted as
// dropped. Shared memory: 8 bytes a record plus 16.
#pragma once

#ifndef WEFT_TRACE_ENABLED

#define WEFT_TRACE_SCOPE(name)
#define WEFT_TRACE_MARK(phase)
#define WEFT_TRACE_WARP_MARK(phase)

#else

#include "weft/generated/trace.cuh"

extern "C" {
/// The ring of this module; zero until the host sets it (then nothing is recorded).
__device__ weft::trace::Ring weft_trace_ring;
}

namespace weft {
namespace trace {

/// The block's log of the current launch.
struct BlockLog {
  unsigned long long start;  ///< %globaltimer when the block began
  uint32_t count;            ///< marks logged (past kBlockRecords: dropped)
  uint32_t warps_left;       ///< warps whose lane 0 has left
  uint32_t delta[kBlockRecords];  ///< ns after `start`
  uint16_t warp[kBlockRecords];
  uint16_t phase[kBlockRecords];
};

__shared__ BlockLog block_log;

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t sm_id() {
  uint32_t s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

__device__ __forceinline__ void append(uint16_t phase_id, uint16_t warp) {
  const unsigned long long t = now();
  const uint32_t i = atomicAdd(&block_log.count, 1u);
  if (i < kBlockRecords) {
    block_log.delta[i] = static_cast<uint32_t>(t - block_log.start);
    block_log.warp[i] = warp;
    block_log.phase[i] = phase_id;
  }
}

/// Logs `phase_id` for the block, by thread 0.
__device__ __forceinline__ void mark(uint16_t phase_id) {
  if (threadIdx.x == 0) append(phase_id, kBlockWarp);
}

/// Logs `phase_id` once per warp: by the first of the lanes that call it together.
__device__ __forceinline__ void warp_mark(uint16_t phase_id) {
  const uint32_t active = __activemask();
  if ((threadIdx.x & 31) == static_cast<uint32_t>(__ffs(active) - 1)) {
    append(phase_id, static_cast<uint16_t>(threadIdx.x / 32));
  }
}

/// Copies the block's log into the ring if the call is sampled, then arrives at the launch's
/// end. Called by one thread, the block's last to leave.
__device__ __forceinline__ void flush(uint16_t kernel_id) {
  const Ring& ring = weft_trace_ring;
  if (ring.records == nullptr) return;
  __threadfence();
  const uint32_t call = *reinterpret_cast<const volatile uint32_t*>(ring.launches + kernel_id);
  if (call % ring.sample == 0) {
    const uint32_t logged = block_log.count;
    const uint32_t n = logged < kBlockRecords ? logged : kBlockRecords;
    if (logged > n) atomicAdd(ring.dropped, static_cast<unsigned long long>(logged - n));
    const unsigned long long first = atomicAdd(ring.cursor, static_cast<unsigned long long>(n));
    const uint32_t block = blockIdx.x, sm = sm_id();
    for (uint32_t i = 0; i < n; ++i) {
      Record r;
      r.ns = block_log.start + block_log.delta[i];
      r.call = call;
      r.block = block;
      r.kernel = kernel_id;
      r.warp = block_log.warp[i];
      r.phase = block_log.phase[i];
      r.sm = static_cast<uint16_t>(sm);
      ring.records[(first + i) % ring.capacity] = r;
    }
  }
  // Every block read `call` before arriving; the last one to arrive starts the next call.
  __threadfence();
  const uint32_t blocks = gridDim.x * gridDim.y * gridDim.z;
  if (atomicAdd(ring.arrivals + kernel_id, 1u) == blocks - 1) {
    ring.arrivals[kernel_id] = 0;
    __threadfence();
    atomicAdd(ring.launches + kernel_id, 1u);
  }
}

/// A traced kernel's lifetime in every thread: logs the block's entry, and its exit and flush
/// when its last warp leaves (a warp leaves when its lane 0 does).
class Scope {
 public:
  __device__ __forceinline__ explicit Scope(uint16_t kernel_id) : kernel_(kernel_id) {
    if (threadIdx.x == 0) {
      block_log.start = now();
      block_log.count = 0;
      block_log.warps_left = 0;
    }
    __syncthreads();
    mark(phase::entry);
  }
  __device__ __forceinline__ ~Scope() {
    if ((threadIdx.x & 31) != 0) return;
    const uint32_t warps = (blockDim.x * blockDim.y * blockDim.z + 31) / 32;
    if (atomicAdd(&block_log.warps_left, 1u) == warps - 1) {
      __threadfence_block();
      append(phase::exit, kBlockWarp);
      flush(kernel_);
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  uint16_t kernel_;
};

}  // namespace trace
}  // namespace weft

#define WEFT_TRACE_SCOPE(name) ::weft::trace::Scope weft_trace_scope_(::weft::trace::kernel::name)
#define WEFT_TRACE_MARK(name) ::weft::trace::mark(::weft::trace::phase::name)
#define WEFT_TRACE_WARP_MARK(name) ::weft::trace::warp_mark(::weft::trace::phase::name)

#endif  // WEFT_TRACE_ENABLED
