// MemoryChannel: SM threads load/store a peer's registered buffer through NVLink peer mappings.
//
//   put / get      copy `bytes` local->peer (put) or peer->local (get) with a group of threads:
//                  16-byte vectors where both addresses allow it, narrower otherwise, exact
//                  head and tail bytes (any size, any offset). No synchronisation inside:
//                  publish with a barrier then one thread's signal().
//   put_packets    write local bytes as LL packets into the PEER's packet buffer.
//   unpack_packets wait for the peer's packets in the LOCAL packet buffer and write their
//                  payload into the local buffer (bounded; false on timeout).
//   read / write   one element of the peer's buffer.
//   signal / wait / relaxed_* / poll   the channel's semaphore (see semaphore.cuh).
#pragma once
#include "weft/packet.cuh"
#include "weft/semaphore.cuh"

namespace weft {

namespace detail {
template <typename V>
__device__ __forceinline__ void copy_vectors(char* dst, const char* src, uint64_t bytes, uint32_t tid,
                                             uint32_t nthreads) {
  constexpr int kUnroll = 4;
  V* d = reinterpret_cast<V*>(dst);
  const V* s = reinterpret_cast<const V*>(src);
  const uint64_t count = bytes / sizeof(V);
  uint64_t i = tid;
  for (; i + (kUnroll - 1) * static_cast<uint64_t>(nthreads) < count; i += kUnroll * static_cast<uint64_t>(nthreads)) {
    V r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = s[i + u * static_cast<uint64_t>(nthreads)];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) d[i + u * static_cast<uint64_t>(nthreads)] = r[u];
  }
  for (; i < count; i += nthreads) d[i] = s[i];
}
}  // namespace detail

/// Copies `bytes` from `src` to `dst` with `nthreads` cooperating threads. Uses the widest unit
/// (16/8/4/2/1 bytes) both addresses share, bytes for the unaligned head and the tail.
__device__ __forceinline__ void copy_bytes(char* dst, const char* src, uint64_t bytes, uint32_t tid, uint32_t nthreads) {
  const uintptr_t mismatch = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
  const uint32_t unit = (mismatch & 15u) == 0 ? 16 : (mismatch & 7u) == 0 ? 8 : (mismatch & 3u) == 0 ? 4 : (mismatch & 1u) == 0 ? 2 : 1;
  uint64_t head = (unit - (reinterpret_cast<uintptr_t>(dst) & (unit - 1))) & (unit - 1);
  if (head > bytes) head = bytes;
  for (uint64_t i = tid; i < head; i += nthreads) dst[i] = src[i];
  const uint64_t body = (bytes - head) / unit * unit;
  char* d = dst + head;
  const char* s = src + head;
  switch (unit) {
    case 16: detail::copy_vectors<uint4>(d, s, body, tid, nthreads); break;
    case 8: detail::copy_vectors<uint2>(d, s, body, tid, nthreads); break;
    case 4: detail::copy_vectors<uint32_t>(d, s, body, tid, nthreads); break;
    case 2: detail::copy_vectors<uint16_t>(d, s, body, tid, nthreads); break;
    default: detail::copy_vectors<uint8_t>(d, s, body, tid, nthreads); break;
  }
  for (uint64_t i = head + body + tid; i < bytes; i += nthreads) dst[i] = src[i];
}

__device__ __forceinline__ void channel_put(const MemoryChannelDeviceHandle& ch, uint64_t dst_offset,
                                            uint64_t src_offset, uint64_t bytes, uint32_t tid, uint32_t nthreads) {
  copy_bytes(reinterpret_cast<char*>(ch.dst) + dst_offset, reinterpret_cast<const char*>(ch.src) + src_offset, bytes,
             tid, nthreads);
}

__device__ __forceinline__ void channel_get(const MemoryChannelDeviceHandle& ch, uint64_t dst_offset,
                                            uint64_t src_offset, uint64_t bytes, uint32_t tid, uint32_t nthreads) {
  copy_bytes(reinterpret_cast<char*>(ch.src) + src_offset, reinterpret_cast<const char*>(ch.dst) + dst_offset, bytes,
             tid, nthreads);
}

/// `packet_offset` is a byte offset into the peer's packet buffer (a multiple of the packet size).
template <typename P>
__device__ __forceinline__ void channel_put_packets(const MemoryChannelDeviceHandle& ch, uint64_t packet_offset,
                                                    uint64_t src_offset, uint64_t bytes, uint32_t tid,
                                                    uint32_t nthreads, uint32_t flag) {
  auto* packets = reinterpret_cast<typename P::Packet*>(reinterpret_cast<char*>(ch.remote_packet_buffer) + packet_offset);
  write_packets<P>(packets, reinterpret_cast<const char*>(ch.src) + src_offset, bytes, tid, nthreads, flag);
}

/// `packet_offset` is a byte offset into the local packet buffer; payload goes to src + dst_offset.
template <typename P>
__device__ __forceinline__ bool channel_unpack_packets(const MemoryChannelDeviceHandle& ch, uint64_t packet_offset,
                                                       uint64_t dst_offset, uint64_t bytes, uint32_t tid,
                                                       uint32_t nthreads, uint32_t flag) {
  const auto* packets =
      reinterpret_cast<const typename P::Packet*>(reinterpret_cast<const char*>(ch.packet_buffer) + packet_offset);
  return read_packets<P>(reinterpret_cast<char*>(ch.src) + dst_offset, packets, bytes, tid, nthreads, flag,
                         ch.semaphore.wait);
}

template <typename T>
__device__ __forceinline__ T channel_read(const MemoryChannelDeviceHandle& ch, uint64_t index) {
  return reinterpret_cast<const T*>(ch.dst)[index];
}

template <typename T>
__device__ __forceinline__ void channel_write(const MemoryChannelDeviceHandle& ch, uint64_t index, T value) {
  reinterpret_cast<T*>(ch.dst)[index] = value;
}

__device__ __forceinline__ void channel_signal(const MemoryChannelDeviceHandle& ch) { semaphore_signal(ch.semaphore); }
__device__ __forceinline__ void channel_relaxed_signal(const MemoryChannelDeviceHandle& ch) {
  semaphore_relaxed_signal(ch.semaphore);
}
__device__ __forceinline__ bool channel_wait(const MemoryChannelDeviceHandle& ch) { return semaphore_wait(ch.semaphore); }
__device__ __forceinline__ bool channel_relaxed_wait(const MemoryChannelDeviceHandle& ch) {
  return semaphore_relaxed_wait(ch.semaphore);
}
__device__ __forceinline__ bool channel_poll(const MemoryChannelDeviceHandle& ch) { return semaphore_poll(ch.semaphore); }

}  // namespace weft
