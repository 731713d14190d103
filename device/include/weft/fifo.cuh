// The GPU→CPU FIFO: kernels push 16-byte commands (FifoCommand, bit layout in the generated
// header and in crates/weft-types/src/fifo.rs) into a ring in host-pinned memory mapped into the
// device; a proxy thread on the host polls, executes and pops them.
//
//   head        device memory; fifo_push takes a position with one device-scope atomicAdd.
//   tail        host-pinned, a cache line of its own; the proxy release-stores it after
//               consuming a command. Positions below tail are consumed (flushes: completed).
//   tail_cache  device memory, a line of its own; the last tail a pusher saw, so pushes into a
//               ring that is not nearly full never read across PCIe. Its top bit
//               (FIFO_TAIL_CACHE_STOPPED) says a pusher saw the stop word set: every later push
//               and every waiting pusher gives up without reading host memory.
//   stop        host-pinned, a cache line of its own; a FifoStopCode. Non-zero once the proxy
//               shut down or failed: every FIFO wait then gives up, records
//               DeviceErrorCode::ProxyStopped and returns false.
//
// Host memory is read by one pusher at a time. While the ring is full only the pusher next in
// line (position == cached tail + depth) reads the host tail and stop word and publishes what it
// sees in tail_cache; the others wait on tail_cache in L2. Thousands of pushers that each read
// host memory while waiting (the stop word, the tail) saturated PCIe reads, and the stop word
// shared its line with the tail, so every such read snooped the line the proxy stores to on each
// pop (measured 0.16 M pushes/s with 33792 pushers on one FIFO).
//
//   fifo_push   Called by ONE thread per command (any number of threads may push concurrently,
//               each gets its own slot). Waits while the ring is full, bounded by
//               WaitContext::timeout_ns and by the stop word. Then a fence.acq_rel.sys and one
//               16-byte relaxed .sys store of both words, each carrying the lap-parity valid bit:
//               the proxy takes the command once both words show this lap's bit (PTX orders
//               neither word of a vector store before the other), and its acquire loads pair
//               with the fence, so it also sees every write this thread made before the push
//               (cumulative over writes a preceding barrier ordered before it: put a barrier
//               first when other threads wrote the data a put covers). One store instead of a
//               store, a .sys fence and a store (the previous protocol): one PCIe write a push
//               (measured 4% more pushes per thread, 0.1 µs less round trip). A push that fails
//               after taking a slot leaves a hole the proxy waits at forever: after any FIFO error
//               the FIFO is broken, as a semaphore is after a timeout.
//   fifo_poll   non-blocking: true once the proxy consumed position pos (acquire .sys load of tail).
//   fifo_sync   Called by ONE thread: spins until fifo_poll(pos), bounded like fifo_push.
#pragma once
#include "weft/wait.cuh"

namespace weft {

/// A command with the given fields and the valid bits clear. The caller keeps every field in
/// range (connection < 1024, memories < 256, offsets < 4 GiB: the host checks them when it builds
/// the channel; size < 2 GiB: port_* split larger puts); out-of-range bits are cut off.
__device__ __forceinline__ FifoCommand fifo_command(FifoOp op, uint32_t connection, uint32_t src_memory,
                                                    uint32_t dst_memory, uint32_t src_offset, uint32_t dst_offset,
                                                    uint32_t size) {
  FifoCommand c;
  c.fst = (static_cast<uint64_t>(size) & ((1ull << FIFO_SIZE_BITS) - 1)) |
          (static_cast<uint64_t>(src_offset) << FIFO_FST_SRC_OFFSET_SHIFT);
  c.snd = static_cast<uint64_t>(dst_offset) |
          ((static_cast<uint64_t>(op) & ((1ull << FIFO_OP_BITS) - 1)) << FIFO_SND_OP_SHIFT) |
          ((static_cast<uint64_t>(connection) & ((1ull << FIFO_CONNECTION_BITS) - 1)) << FIFO_SND_CONNECTION_SHIFT) |
          ((static_cast<uint64_t>(src_memory) & ((1ull << FIFO_MEMORY_BITS) - 1)) << FIFO_SND_SRC_MEMORY_SHIFT) |
          ((static_cast<uint64_t>(dst_memory) & ((1ull << FIFO_MEMORY_BITS) - 1)) << FIFO_SND_DST_MEMORY_SHIFT);
  return c;
}

namespace detail {

__device__ __forceinline__ bool fifo_stopped(const FifoDeviceHandle& f) {
  return ptx::ld_relaxed_sys(reinterpret_cast<const uint64_t*>(f.stop)) != 0;
}

/// Waits until position `pos` fits in the ring (see the protocol above). False, with the
/// failure recorded, when the proxy stopped or the wait timed out.
__device__ __noinline__ bool fifo_wait_for_slot(const FifoDeviceHandle& f, uint64_t pos) {
  const uint64_t depth = f.depth;
  uint64_t* cache = reinterpret_cast<uint64_t*>(f.tail_cache);
  const uint64_t* tail = reinterpret_cast<const uint64_t*>(f.tail);
  Spin spin;
  uint64_t seen = 0;
  for (uint32_t round = 0;; ++round) {
    // Acquire pairs with the publisher's fence + atomicMax below, which follows its acquire
    // load of the host's tail: the proxy's last read of our slot happens before our write.
    const uint64_t cached = ptx::ld_acquire_gpu(cache);
    if ((cached & FIFO_TAIL_CACHE_STOPPED) != 0) {
      report_failure(f.wait, DeviceErrorCode::ProxyStopped, WaitOp::FifoPush, pos + 1 - depth, cached);
      return false;
    }
    if (pos < cached + depth) return true;
    if (pos == cached + depth) {
      // Next in line: always one of the waiters, since every position below head was handed out.
      seen = ptx::ld_acquire_sys(tail);
      if (pos < seen + depth) {
        ptx::fence_acq_rel_gpu();
        atomicMax(reinterpret_cast<unsigned long long*>(cache), static_cast<unsigned long long>(seen));
        return true;
      }
      if ((round & 15u) == 15u && fifo_stopped(f)) {
        atomicOr(reinterpret_cast<unsigned long long*>(cache), static_cast<unsigned long long>(FIFO_TAIL_CACHE_STOPPED));
        report_failure(f.wait, DeviceErrorCode::ProxyStopped, WaitOp::FifoPush, pos + 1 - depth, seen);
        return false;
      }
    } else {
      // Farther back in line, nap longer: fewer loads of the one tail_cache line in L2.
      const uint64_t behind = pos - cached - depth;
      const uint32_t shift = behind < 64 ? 0u : behind < 128 ? 1u : behind < 256 ? 2u : behind < 1024 ? 3u : 4u;
      __nanosleep(64u << shift);
    }
    if (spin.expired(f.wait)) {
      report_failure(f.wait, DeviceErrorCode::Timeout, WaitOp::FifoPush, pos + 1 - depth, seen);
      return false;
    }
  }
}

}  // namespace detail

/// Pushes `cmd` (its valid bits are replaced). On success stores the command's position in
/// `*position` (pass it to fifo_poll / fifo_sync) and returns true; returns false when the proxy
/// stopped or the ring stayed full past the timeout (the error record says which).
__device__ __forceinline__ bool fifo_push(const FifoDeviceHandle& f, const FifoCommand& cmd, uint64_t* position) {
  // The fast path reads no host memory: a push into a stopped FIFO that finds a free slot
  // before any pusher saw the stop word is lost, and the pusher's next wait (full ring or
  // fifo_sync) reports ProxyStopped.
  const uint64_t depth = f.depth;
  const uint64_t pos = atomicAdd(reinterpret_cast<unsigned long long*>(f.head), 1ull);
  const uint64_t cached = ptx::ld_acquire_gpu(reinterpret_cast<const uint64_t*>(f.tail_cache));
  // A set stop bit makes `cached` huge, so it is tested first.
  if (((cached & FIFO_TAIL_CACHE_STOPPED) != 0 || pos >= depth + cached) && !detail::fifo_wait_for_slot(f, pos)) {
    return false;
  }
  FifoCommand* slot = reinterpret_cast<FifoCommand*>(f.ring) + (pos & (depth - 1));
  const uint32_t log2_depth = static_cast<uint32_t>(__ffsll(static_cast<long long>(depth)) - 1);
  const uint64_t parity = ((pos >> log2_depth) & 1ull) ^ 1ull;
  const uint64_t fst = (cmd.fst & ~(1ull << FIFO_FST_VALID_SHIFT)) | (parity << FIFO_FST_VALID_SHIFT);
  const uint64_t snd = (cmd.snd & ~(1ull << FIFO_SND_VALID_SHIFT)) | (parity << FIFO_SND_VALID_SHIFT);
  ptx::fence_acq_rel_sys();
  ptx::st_relaxed_sys_v2(&slot->fst, fst, snd);
  *position = pos;
  return true;
}

/// True once the proxy consumed the command at `pos`. Any thread; never blocks.
__device__ __forceinline__ bool fifo_poll(const FifoDeviceHandle& f, uint64_t pos) {
  return ptx::ld_acquire_sys(reinterpret_cast<const uint64_t*>(f.tail)) > pos;
}

/// Waits until the proxy consumed the command at `pos`; false on timeout or when the proxy
/// stopped first (recorded in the error record). Called by ONE thread.
__device__ __forceinline__ bool fifo_sync(const FifoDeviceHandle& f, uint64_t pos) {
  const uint64_t* tail = reinterpret_cast<const uint64_t*>(f.tail);
  Spin spin;
  for (uint32_t round = 0;; ++round) {
    const uint64_t seen = ptx::ld_acquire_sys(tail);
    if (seen > pos) return true;
    // The stop word is another PCIe read: look at it every 32 polls of the tail.
    if ((round & 31u) == 31u && detail::fifo_stopped(f)) {
      report_failure(f.wait, DeviceErrorCode::ProxyStopped, WaitOp::FifoSync, pos + 1, seen);
      return false;
    }
    if (spin.expired(f.wait)) {
      report_failure(f.wait, DeviceErrorCode::Timeout, WaitOp::FifoSync, pos + 1, seen);
      return false;
    }
  }
}

}  // namespace weft
