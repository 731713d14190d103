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

namespace detail {
/// Copies `n` bytes with thread 0 alone. Peer (NVLink) stores narrower than 4 bytes may become
/// read-modify-writes of their 32-bit word, so two threads storing different bytes of one word
/// can lose one of them (measured: 2-byte elements of a misaligned reduce-scatter shard lost
/// their low byte). Every sub-word store of a copy therefore comes from one thread.
__device__ __forceinline__ void copy_few_bytes(char* dst, const char* src, uint64_t n, uint32_t tid) {
  if (tid == 0) {
    for (uint64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

/// `words` 32-bit words to a 4-aligned `dst` from any `src`: each thread assembles whole words
/// from byte loads, so no word is written by two threads.
__device__ __forceinline__ void copy_words_from_bytes(char* dst, const char* src, uint64_t words, uint32_t tid,
                                                      uint32_t nthreads) {
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  const uint8_t* s = reinterpret_cast<const uint8_t*>(src);
  for (uint64_t i = tid; i < words; i += nthreads) {
    const uint8_t* w = s + 4 * i;
    d[i] = uint32_t(w[0]) | (uint32_t(w[1]) << 8) | (uint32_t(w[2]) << 16) | (uint32_t(w[3]) << 24);
  }
}
}  // namespace detail

/// Copies `bytes` from `src` to `dst` with `nthreads` cooperating threads. Uses the widest unit
/// (16/8/4 bytes) both addresses share; when they share less than 4-byte alignment, whole
/// destination words assembled from byte loads. The unaligned head and the tail are stored by
/// one thread (see detail::copy_few_bytes), so the copy is safe into peer memory at any offset.
__device__ __forceinline__ void copy_bytes(char* dst, const char* src, uint64_t bytes, uint32_t tid, uint32_t nthreads) {
  const uintptr_t mismatch = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
  const uint32_t unit = (mismatch & 15u) == 0 ? 16 : (mismatch & 7u) == 0 ? 8 : 4;
  uint64_t head = (unit - (reinterpret_cast<uintptr_t>(dst) & (unit - 1))) & (unit - 1);
  if (head > bytes) head = bytes;
  detail::copy_few_bytes(dst, src, head, tid);
  const uint64_t body = (bytes - head) / unit * unit;
  char* d = dst + head;
  const char* s = src + head;
  if ((mismatch & 3u) != 0) {
    detail::copy_words_from_bytes(d, s, body / 4, tid, nthreads);
  } else {
    switch (unit) {
      case 16: detail::copy_vectors<uint4>(d, s, body, tid, nthreads); break;
      case 8: detail::copy_vectors<uint2>(d, s, body, tid, nthreads); break;
      default: detail::copy_vectors<uint32_t>(d, s, body, tid, nthreads); break;
    }
  }
  detail::copy_few_bytes(d + body, s + body, bytes - head - body, tid);
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
