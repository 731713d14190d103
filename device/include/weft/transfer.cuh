// The expert-parallel path's transfer commands: a TransferCmd (layout in the generated header
// and in crates/weft-types/src/transfer.rs) is a FIFO command of op TRANSFER_FIFO_OP, pushed
// with fifo_push into the same FIFO as every other command and executed by the proxy's
// TransferHandler (crates/weft-net/src/proxy/transfer.rs):
//
//   transfer_write        put `len` bytes from this rank's buffer of the connection at
//                         `src_offset` to the peer's at `dst_offset`.
//   transfer_counter_add  add a signed 16-bit value to the peer's counter `counter` of the
//   transfer_counter_set  connection (or set it to an unsigned 16-bit value), after every
//                         earlier write of the connection; the proxy stamps the connection's
//                         next sequence number and the receiving proxy applies updates in that
//                         order, whatever order they arrive in.
//   transfer_quiet        popped once every earlier command of the connection is applied at
//                         the peer: fifo_sync on its position means "delivered".
//
// The encoders are constexpr, so the host's encoding can be checked against them at compile
// time (weft_core::device_code::transfer_probe_source). Fields beyond their widths are cut off:
// the caller keeps connection < 1024, counter < 512, len < 2 GiB. One thread per push; a
// barrier first when other threads wrote the data a write covers.
#pragma once
#include "weft/fifo.cuh"

namespace weft {

namespace detail {

__host__ __device__ constexpr uint32_t transfer_mask(uint64_t bits) { return static_cast<uint32_t>((1ull << bits) - 1); }

__host__ __device__ constexpr uint32_t transfer_control(uint32_t connection, TransferKind kind) {
  return static_cast<uint32_t>(TRANSFER_FIFO_OP) |
         ((connection & transfer_mask(FIFO_CONNECTION_BITS)) << TRANSFER_CONNECTION_SHIFT) |
         (static_cast<uint32_t>(kind) << TRANSFER_KIND_SHIFT);
}

}  // namespace detail

/// A write of `len` bytes on `connection`, valid bits clear.
__host__ __device__ constexpr TransferCmd transfer_write(uint32_t connection, uint32_t src_offset, uint32_t dst_offset,
                                                         uint32_t len) {
  return TransferCmd{len & detail::transfer_mask(TRANSFER_LEN_BITS), src_offset, dst_offset,
                     detail::transfer_control(connection, TransferKind::Write)};
}

/// `counter += value` at the peer, in the connection's order, valid bits clear.
__host__ __device__ constexpr TransferCmd transfer_counter_add(uint32_t connection, uint32_t counter, int16_t value) {
  // Sign-extended, as the host decodes it.
  return TransferCmd{counter & detail::transfer_mask(TRANSFER_COUNTER_BITS),
                     static_cast<uint32_t>(static_cast<int32_t>(value)), 0,
                     detail::transfer_control(connection, TransferKind::CounterAdd)};
}

/// `counter = value` at the peer, in the connection's order, valid bits clear.
__host__ __device__ constexpr TransferCmd transfer_counter_set(uint32_t connection, uint32_t counter, uint16_t value) {
  return TransferCmd{counter & detail::transfer_mask(TRANSFER_COUNTER_BITS), static_cast<uint32_t>(value), 0,
                     detail::transfer_control(connection, TransferKind::CounterSet)};
}

/// Completes once everything earlier on `connection` is applied at the peer, valid bits clear.
__host__ __device__ constexpr TransferCmd transfer_quiet(uint32_t connection) {
  return TransferCmd{0, 0, 0, detail::transfer_control(connection, TransferKind::Quiet)};
}

/// The FIFO command holding `t`'s 16 bytes: `len | src` the first word, `dst | control` the second.
__host__ __device__ constexpr FifoCommand transfer_fifo_command(const TransferCmd& t) {
  return FifoCommand{static_cast<uint64_t>(t.len) | (static_cast<uint64_t>(t.src) << 32),
                     static_cast<uint64_t>(t.dst) | (static_cast<uint64_t>(t.control) << 32)};
}

/// Pushes `t` (see fifo_push: its position goes to `*position`; false when the proxy stopped or
/// the ring stayed full past the timeout, recorded in the error record). ONE thread per call.
__device__ __forceinline__ bool transfer_push(const FifoDeviceHandle& f, const TransferCmd& t, uint64_t* position) {
  return fifo_push(f, transfer_fifo_command(t), position);
}

}  // namespace weft
