// The GPU→CPU FIFO: kernels push 16-byte commands (FifoCommand, bit layout in the generated
// header and in crates/weft-types/src/fifo.rs) into a ring in host-pinned memory mapped into the
// device; a proxy thread on the host polls, executes and pops them.
//
//   head        device memory; fifo_push takes a position with one device-scope atomicAdd.
//   tail        host-pinned; the proxy release-stores it after consuming a command. Positions
//               below tail are consumed (for flush commands: completed).
//   tail_cache  device memory; the last tail a pusher saw, so pushes into a ring that is not
//               nearly full never read across PCIe.
//   stop        host-pinned; a FifoStopCode. Non-zero once the proxy shut down or failed: every
//               FIFO wait then gives up, records DeviceErrorCode::ProxyStopped and returns false.
//
//   fifo_push   Called by ONE thread per command (any number of threads may push concurrently,
//               each gets its own slot). Waits while the ring is full, bounded by
//               WaitContext::timeout_ns and by the stop word. Writes fst with a relaxed .sys store
//               and then snd, carrying the lap-parity valid bit, with st.release.sys: a proxy that
//               reads snd with acquire and sees this lap's bit sees fst too, and every write this
//               thread made before the push (release is cumulative over writes a preceding
//               barrier ordered before it, so put a barrier first when other threads wrote the
//               data a put covers). Two stores instead of one 16-byte vector store because PTX
//               does not promise a vector store is single-copy atomic. A push that fails after
//               taking a slot leaves a hole the proxy waits at forever: after any FIFO error the
//               FIFO is broken, as a semaphore is after a timeout.
//   fifo_poll   non-blocking: true once the proxy consumed position pos (acquire .sys load of tail).
//   fifo_sync   Called by ONE thread: spins until fifo_poll(pos), bounded like fifo_push.
#pragma once
#include "weft/wait.cuh"

namespace weft {

/// A command with the given fields and the valid bit clear. The caller keeps every field in range
/// (connection < 1024, memories < 256, offsets and size < 4 GiB: the host checks them when it
/// builds the channel); out-of-range bits are cut off.
__device__ __forceinline__ FifoCommand fifo_command(FifoOp op, uint32_t connection, uint32_t src_memory,
                                                    uint32_t dst_memory, uint32_t src_offset, uint32_t dst_offset,
                                                    uint32_t size) {
  FifoCommand c;
  c.fst = static_cast<uint64_t>(size) | (static_cast<uint64_t>(src_offset) << FIFO_FST_SRC_OFFSET_SHIFT);
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

}  // namespace detail

/// Pushes `cmd` (its valid bit is replaced). On success stores the command's position in
/// `*position` (pass it to fifo_poll / fifo_sync) and returns true; returns false when the proxy
/// stopped or the ring stayed full past the timeout (the error record says which).
__device__ __forceinline__ bool fifo_push(const FifoDeviceHandle& f, const FifoCommand& cmd, uint64_t* position) {
  // The stop word is read only while waiting for a free slot: on the fast path a read of
  // host memory would cost a PCIe round trip per push (measured 0.2 M pushes/s with 33792
  // pushers on one FIFO). A push into a stopped FIFO that finds a free slot is lost, and the
  // pusher's next wait (full ring or fifo_sync) reports ProxyStopped.
  const uint64_t depth = f.depth;
  const uint64_t pos = atomicAdd(reinterpret_cast<unsigned long long*>(f.head), 1ull);
  uint64_t* cache = reinterpret_cast<uint64_t*>(f.tail_cache);
  // Acquire pairs with the release pattern below, which follows an acquire load of the host's
  // tail: the proxy's last read of the slot happens before our write into it.
  if (pos >= depth + ptx::ld_acquire_gpu(cache)) {
    // A full ring. Only the pusher next in line (pos == cached tail + depth, always one of
    // the waiters: every position below head was handed out) polls the host tail over PCIe
    // and publishes what it sees in the device-side cache; the others poll the cache in L2,
    // with a short nap. Thousands of pushers polling host memory saturated PCIe with reads
    // (measured 0.15 M pushes/s per GPU with 33792 pushers on one FIFO). The others read the
    // stop word only when their spin reads the clock, so a stopped proxy still releases them.
    const uint64_t* tail = reinterpret_cast<const uint64_t*>(f.tail);
    Spin spin;
    uint64_t seen = 0;
    for (uint32_t round = 0;; ++round) {
      const uint64_t cached = ptx::ld_acquire_gpu(cache);
      if (pos < cached + depth) break;
      const bool next_in_line = pos == cached + depth;
      if (next_in_line) {
        seen = ptx::ld_acquire_sys(tail);
        if (pos < seen + depth) {
          ptx::fence_acq_rel_gpu();
          atomicMax(reinterpret_cast<unsigned long long*>(cache), static_cast<unsigned long long>(seen));
          break;
        }
      } else {
        __nanosleep(128);
      }
      if ((next_in_line || (round & 255u) == 255u) && detail::fifo_stopped(f)) {
        report_failure(f.wait, DeviceErrorCode::ProxyStopped, WaitOp::FifoPush, pos + 1 - depth, seen);
        return false;
      }
      if (spin.expired(f.wait)) {
        report_failure(f.wait, DeviceErrorCode::Timeout, WaitOp::FifoPush, pos + 1 - depth, seen);
        return false;
      }
    }
  }
  FifoCommand* slot = reinterpret_cast<FifoCommand*>(f.ring) + (pos & (depth - 1));
  const uint32_t log2_depth = static_cast<uint32_t>(__ffsll(static_cast<long long>(depth)) - 1);
  const uint64_t parity = ((pos >> log2_depth) & 1ull) ^ 1ull;
  const uint64_t snd = (cmd.snd & ~(1ull << FIFO_SND_VALID_SHIFT)) | (parity << FIFO_SND_VALID_SHIFT);
  ptx::st_relaxed_sys(&slot->fst, cmd.fst);
  ptx::st_release_sys(&slot->snd, snd);
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
  for (;;) {
    const uint64_t seen = ptx::ld_acquire_sys(tail);
    if (seen > pos) return true;
    if (detail::fifo_stopped(f)) {
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
