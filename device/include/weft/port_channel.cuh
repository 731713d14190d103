// PortChannel: puts, signals and flushes that a kernel hands to its rank's proxy through the FIFO
// (weft/fifo.cuh); the proxy executes them with a copy engine (or a network transport) and
// stores the peer's inbound token after the data it covers. Waits spin on this GPU's inbound
// token, which the peer's proxy writes (a host-to-device semaphore).
//
// Every function is called by ONE thread (any number of threads may use the same channel
// concurrently as long as at most FIFO-depth pushes are outstanding; each push takes its own
// slot). All return false after a failure (recorded in the error record, naming rank and peer):
// the proxy stopped or failed, or a bounded wait expired (WaitContext::timeout_ns).
//
//   port_put               one Put command: `size` bytes from src_memory at src_offset to the
//                          peer's dst_memory at dst_offset. Data written by OTHER threads must be
//                          ordered before the push by a barrier (__syncthreads / grid sync): the
//                          push's release fence is cumulative over what the barrier ordered
//                          before it, and the copy engine reads the source only after the proxy
//                          saw the command. Returns once the command is in the FIFO (the copy
//                          happens later: do not overwrite the source until a flush says so).
//   port_signal            one Signal command: the peer's token is incremented after every put
//                          pushed before it on this channel is applied at the peer.
//   port_put_with_signal   Put and Signal in one command.
//   port_flush             one Flush command, then waits (bounded) until the proxy consumed it:
//                          every earlier operation of the connection is applied at the peer, so
//                          the source buffers may be reused.
//   port_put_with_signal_and_flush   the three in one command, then the same wait.
//   port_wait              waits (bounded) for the next signal of the peer: claims a ticket of
//                          the semaphore and spins until the inbound token reaches it, then an
//                          acquire load: the peer's data the signal covers is visible to this
//                          thread (follow with a barrier before other threads read it). The
//                          peer's proxy stores the token with cuStreamWriteValue64 after its
//                          copies on the same stream, with a memory barrier first. Also gives
//                          up (ProxyStopped) when this rank's proxy shuts down, so shutting the
//                          proxy down releases a kernel waiting for a peer that will not signal.
//   port_poll              non-blocking: consumes a pending signal if there is one.
//
// Sizes and offsets are 32-bit (< 4 GiB); the host checks the channel's memories fit. A put of
// 2 GiB or more (FifoCommand's size field is 31 bits) goes as several commands.
#pragma once
#include "weft/fifo.cuh"
#include "weft/semaphore.cuh"

namespace weft {

namespace detail {

/// Pushes `op`; a put of FifoCommand's size limit or more goes first as Put commands of 1 GiB
/// (a connection applies its commands in order, so this is the same put).
__device__ __forceinline__ bool port_push(const PortChannelDeviceHandle& ch, FifoOp op, uint32_t dst_memory,
                                          uint32_t dst_offset, uint32_t src_memory, uint32_t src_offset,
                                          uint32_t size, uint64_t* position) {
  constexpr uint32_t kPiece = 1u << 30;
  if ((static_cast<uint32_t>(op) & static_cast<uint32_t>(FifoOp::Put)) != 0) {
    while (size >= (1u << FIFO_SIZE_BITS)) {
      const FifoCommand piece =
          fifo_command(FifoOp::Put, ch.connection, src_memory, dst_memory, src_offset, dst_offset, kPiece);
      if (!fifo_push(ch.fifo, piece, position)) return false;
      src_offset += kPiece;
      dst_offset += kPiece;
      size -= kPiece;
    }
  }
  const FifoCommand cmd = fifo_command(op, ch.connection, src_memory, dst_memory, src_offset, dst_offset, size);
  return fifo_push(ch.fifo, cmd, position);
}

/// Waits until the proxy consumed the command at `pos`. A failure names the channel's peer (the
/// FIFO's own wait context serves every peer of the rank and names none).
__device__ __forceinline__ bool port_sync(const PortChannelDeviceHandle& ch, uint64_t pos) {
  FifoDeviceHandle fifo = ch.fifo;
  fifo.wait.peer = ch.semaphore.wait.peer;
  return fifo_sync(fifo, pos);
}

}  // namespace detail

/// Put with explicit memory indices. Called by ONE thread.
__device__ __forceinline__ bool port_put(const PortChannelDeviceHandle& ch, uint32_t dst_memory, uint32_t dst_offset,
                                         uint32_t src_memory, uint32_t src_offset, uint32_t size) {
  uint64_t pos;
  return detail::port_push(ch, FifoOp::Put, dst_memory, dst_offset, src_memory, src_offset, size, &pos);
}

/// Put between the channel's default memories. Called by ONE thread.
__device__ __forceinline__ bool port_put(const PortChannelDeviceHandle& ch, uint32_t dst_offset, uint32_t src_offset,
                                         uint32_t size) {
  return port_put(ch, ch.dst_memory, dst_offset, ch.src_memory, src_offset, size);
}

/// Signal the peer after every earlier put of this channel. Called by ONE thread.
__device__ __forceinline__ bool port_signal(const PortChannelDeviceHandle& ch) {
  uint64_t pos;
  return detail::port_push(ch, FifoOp::Signal, 0, 0, 0, 0, 0, &pos);
}

/// Put, then signal, in one command. Called by ONE thread.
__device__ __forceinline__ bool port_put_with_signal(const PortChannelDeviceHandle& ch, uint32_t dst_offset,
                                                     uint32_t src_offset, uint32_t size) {
  uint64_t pos;
  return detail::port_push(ch, FifoOp::PutSignal, ch.dst_memory, dst_offset, ch.src_memory, src_offset, size, &pos);
}

/// Waits until every operation pushed on this channel before it is applied at the peer.
/// Called by ONE thread.
__device__ __forceinline__ bool port_flush(const PortChannelDeviceHandle& ch) {
  uint64_t pos;
  if (!detail::port_push(ch, FifoOp::Flush, 0, 0, 0, 0, 0, &pos)) return false;
  return detail::port_sync(ch, pos);
}

/// Put, signal and flush in one command, then waits for the flush. Called by ONE thread.
__device__ __forceinline__ bool port_put_with_signal_and_flush(const PortChannelDeviceHandle& ch,
                                                               uint32_t dst_offset, uint32_t src_offset,
                                                               uint32_t size) {
  uint64_t pos;
  if (!detail::port_push(ch, FifoOp::PutSignalFlush, ch.dst_memory, dst_offset, ch.src_memory, src_offset, size,
                         &pos)) {
    return false;
  }
  return detail::port_sync(ch, pos);
}

/// Waits for the peer's next signal (bounded). Called by ONE thread per expected signal.
/// Gives up with ProxyStopped once this rank's proxy shut down (its FIFO's stop word is set).
__device__ __forceinline__ bool port_wait(const PortChannelDeviceHandle& ch) {
  return detail::semaphore_wait<true>(ch.semaphore, reinterpret_cast<const uint64_t*>(ch.fifo.stop));
}

/// Consumes a pending signal of the peer if there is one; never waits. Called by ONE thread.
__device__ __forceinline__ bool port_poll(const PortChannelDeviceHandle& ch) { return semaphore_poll(ch.semaphore); }

}  // namespace weft
