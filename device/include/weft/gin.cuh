// GIN: device-initiated communication over a DevCommHandle (weft_gin::DevComm; docs/gin.md).
// A kernel puts into peers' windows, raises their signals, counts its own completions, flushes
// and synchronises, with no host in the loop. One source serves both backends, chosen per peer
// when the DevComm was created:
//
//   LSA (a peer of this node, memory mapped here): the calling thread (or every thread of a
//       cooperative put: put_warp, put_block) stores the bytes itself, then a release add on the
//       peer's signal (red.release.sys), which orders every store of this thread (and what a
//       group sync or a barrier ordered before it) before the signal.
//   proxy (a peer of another node): FIFO commands on the peer's PortChannel connections. Signal
//       s travels on connection s (its inbound token at the peer is signal s's share from this
//       rank), puts without a signal on a connection of their own. A connection applies its
//       commands in order, and the transport stores a signal after the data it covers; before a
//       signal leaves on connection s, the Gin object flushes every OTHER connection to that peer
//       that carried a put of it since its last flush, so a signal covers every earlier put of
//       the same Gin to the same peer, whatever connection carried it.
//
// A Gin is a per-thread object (construct it in the kernel: it holds the ordering state of the
// calling thread's proxy traffic). Every member is called by ONE thread (but the cooperative
// puts, called by a whole warp or block: see GinCoopThread); any number of threads
// may use their own Gin on the same DevCommHandle concurrently. Ordering covers the calling
// thread's operations through its Gin; to cover other threads' proxy puts, they flush (or send
// the signal themselves) before the barrier that precedes the signal. Every wait is bounded
// (WaitContext::timeout_ns) and on expiry records {rank, op, index, expected, observed} in the
// error record and returns false; every operation returns false after a failure.
//
// A kernel written against NCCL's host API (weft's libnccl.so.2: ncclDevCommCreate) gets its
// handle from the ncclDevComm with gin_handle (at the end of this file).
//
// Signals count up: read_signal(s) is the sum of every rank's increments since the last
// reset_signal(s) of this rank (a reset subtracts what was seen: increments in flight land
// after it). Counters count this rank's local completions (the source of a put may be reused).
#pragma once
#include "weft/lsa.cuh"
#include "weft/port_channel.cuh"

namespace weft {

/// The word at this rank that counts the increments of signal `signal` made by proxy peer
/// `rank` (the inbound token of its connection `signal`; read_signal sums these words and this
/// rank's heap slot). A kernel that must know which peer's signal arrived reads it with an
/// acquire load (ld.acquire.sys): the data that peer's signal covers is then visible. Only for
/// a proxy peer (gin_is_proxy_peer); an LSA peer's increments land in the heap slot, unseparated.
__device__ __forceinline__ const uint64_t* gin_proxy_signal_word(const DevCommHandle& h, uint32_t rank, uint32_t signal) {
  const PortChannelDeviceHandle* ports = reinterpret_cast<const PortChannelDeviceHandle*>(h.ports);
  return reinterpret_cast<const uint64_t*>(ports[rank * (h.signal_slots + 1) + signal].semaphore.inbound);
}

/// Remote action of a put: raise the destination's signal `signal` by one, or nothing.
struct GinRemoteAction {
  uint32_t signal;
};
constexpr uint32_t kGinNone = 0xffffffffu;
__device__ __forceinline__ GinRemoteAction gin_signal_inc(uint32_t signal) { return {signal}; }
__device__ __forceinline__ GinRemoteAction gin_no_signal() { return {kGinNone}; }

/// Local action of a put: raise this rank's counter `counter` by one once the source may be
/// reused, or nothing.
struct GinLocalAction {
  uint32_t counter;
};
__device__ __forceinline__ GinLocalAction gin_counter_inc(uint32_t counter) { return {counter}; }
__device__ __forceinline__ GinLocalAction gin_no_counter() { return {kGinNone}; }

namespace detail {

__device__ __forceinline__ uint64_t* gin_counters(const DevCommHandle& h) { return reinterpret_cast<uint64_t*>(h.state); }
__device__ __forceinline__ uint64_t* gin_signal_base(const DevCommHandle& h) { return gin_counters(h) + h.counters; }
__device__ __forceinline__ uint64_t* gin_barrier_epochs(const DevCommHandle& h) {
  return gin_signal_base(h) + h.signal_slots;
}
__device__ __forceinline__ uint32_t* gin_staging_busy(const DevCommHandle& h) {
  return reinterpret_cast<uint32_t*>(gin_barrier_epochs(h) + h.world_barriers + h.lsa_barriers);
}

/// The sum of every rank's increments of signal slot `s` (no reset applied), acquire: the data
/// the increments cover is visible to this thread.
__device__ __forceinline__ uint64_t gin_raw_signal(const DevCommHandle& h, uint32_t s) {
  uint64_t sum = ptx::ld_acquire_sys(reinterpret_cast<const uint64_t*>(h.heap) + s);
  const PortChannelDeviceHandle* ports = reinterpret_cast<const PortChannelDeviceHandle*>(h.ports);
  for (uint64_t m = h.proxy_mask; m != 0; m &= m - 1) {
    const uint32_t peer = __ffsll(static_cast<long long>(m)) - 1;
    sum += ptx::ld_acquire_sys(
        reinterpret_cast<const uint64_t*>(ports[peer * (h.signal_slots + 1) + s].semaphore.inbound));
  }
  return sum;
}

/// Spins until `read() >= at_least` (bounded); the failure names `op` and `index`.
template <typename Read>
__device__ __forceinline__ bool gin_wait(const DevCommHandle& h, WaitOp op, uint32_t index, uint64_t at_least,
                                         Read read) {
  Spin spin;
  uint64_t seen;
  while ((seen = read()) < at_least) {
    if (spin.expired(h.wait)) {
      WaitContext ctx = h.wait;
      ctx.peer = static_cast<int32_t>(index);
      report_timeout(ctx, op, at_least, seen);
      return false;
    }
  }
  return true;
}

/// Words of the copy each thread has in flight: it loads them all, then stores them all, so the
/// latency of the source (HBM, or a peer's window) is paid once per group of words, not per word
/// (a 512-thread put_block over NVLink: 36 GB/s with 1, 44 with 4, about one SM's limit).
constexpr uint32_t kGinCopyUnroll = 4;

/// Copies `words` 16-byte words from `src` to `dst` with every thread of `coop`, each taking
/// every coop.size()-th word, kGinCopyUnroll at a time.
template <typename Coop>
__device__ __forceinline__ void gin_copy_words(const Coop& coop, uint4* dst, const uint4* src, uint64_t words) {
  const uint64_t stride = coop.size();
  uint64_t w = coop.rank();
  for (; w + (kGinCopyUnroll - 1) * stride < words; w += kGinCopyUnroll * stride) {
    uint4 v[kGinCopyUnroll];
#pragma unroll
    for (uint32_t k = 0; k < kGinCopyUnroll; ++k) v[k] = src[w + k * stride];
#pragma unroll
    for (uint32_t k = 0; k < kGinCopyUnroll; ++k) dst[w + k * stride] = v[k];
  }
  for (; w < words; w += stride) dst[w] = src[w];
}

/// Copies `bytes` from `src` to `dst` with every thread of `coop`: in 16-byte words when both
/// addresses are 16-byte aligned, the rest byte by byte. (8- and 4-byte words for the other
/// alignments made the 8-byte put of the latency probe 0.06 us slower on an H100 pair, within
/// the same call: docs/perf/gin.md.) Nothing orders the threads' stores: the caller syncs the
/// group before any release.
template <typename Coop>
__device__ __forceinline__ void gin_copy(const Coop& coop, char* dst, const char* src, uint64_t bytes) {
  uint64_t copied = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15u) == 0) {
    copied = bytes & ~15ull;
    gin_copy_words(coop, reinterpret_cast<uint4*>(dst), reinterpret_cast<const uint4*>(src), bytes / 16);
  }
  for (uint64_t i = copied + coop.rank(); i < bytes; i += coop.size()) dst[i] = src[i];
}

}  // namespace detail

/// The threads that make one call together (NCCL's ncclCoopThread / ncclCoopWarp /
/// ncclCoopCta): every thread of the group calls with the same arguments, the copy is spread
/// over all of them, and the group's thread 0 (its leader) issues the signal, the counter and
/// any proxy command after the group synced. The leader's Gin carries the proxy ordering
/// state of the call: a later signal() or flush() meant to cover it is called by the leader.
struct GinCoopThread {
  __device__ uint32_t rank() const { return 0; }
  __device__ uint32_t size() const { return 1; }
  __device__ void sync() const {}
  /// Whether `ok` holds on every thread of the group (a sync).
  __device__ bool all(bool ok) const { return ok; }
};

/// A whole warp (all 32 lanes converged at the call).
struct GinCoopWarp {
  __device__ uint32_t rank() const { return threadIdx.x % 32; }
  __device__ uint32_t size() const { return 32; }
  __device__ void sync() const { __syncwarp(); }
  __device__ bool all(bool ok) const { return __all_sync(0xffffffffu, ok) != 0; }
};

/// A whole block (every thread at the call, as for __syncthreads).
struct GinCoopBlock {
  __device__ uint32_t rank() const { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
  __device__ uint32_t size() const { return blockDim.x * blockDim.y * blockDim.z; }
  __device__ void sync() const { __syncthreads(); }
  __device__ bool all(bool ok) const { return __syncthreads_and(ok) != 0; }
};

/// A thread's view of a device communicator (see the top of this file).
class Gin {
 public:
  __device__ explicit Gin(const DevCommHandle& h) : h_(h) {
    for (uint32_t r = 0; r < GIN_MAX_RANKS; ++r) pending_[r] = 0;
  }

  __device__ const DevCommHandle& handle() const { return h_; }

  /// Puts `bytes` from this rank's window `src_window` at `src_offset` into member `peer` of
  /// `team`'s window `dst_window` at `dst_offset`, then the actions. On LSA, returns after the
  /// stores; through the proxy, once queued (with a counter action: once the source was read).
  __device__ bool put(const GinTeam& team, uint32_t peer, uint32_t dst_window, uint64_t dst_offset,
                      uint32_t src_window, uint64_t src_offset, uint64_t bytes,
                      GinRemoteAction remote = gin_no_signal(), GinLocalAction local = gin_no_counter()) {
    return put(GinCoopThread{}, team, peer, dst_window, dst_offset, src_window, src_offset, bytes, remote, local);
  }

  /// put() made by every thread of `coop` together (GinCoopWarp, GinCoopBlock): on LSA each
  /// thread stores its share in 16-byte words, the group syncs (__syncwarp / __syncthreads:
  /// every share is ordered before what the leader does next), then the leader's release add
  /// raises the signal, which therefore covers the whole group's stores; through the proxy the
  /// group syncs and the leader alone queues the command (the proxy copies). Every thread
  /// returns the leader's outcome.
  template <typename Coop>
  __device__ bool put(const Coop& coop, const GinTeam& team, uint32_t peer, uint32_t dst_window, uint64_t dst_offset,
                      uint32_t src_window, uint64_t src_offset, uint64_t bytes,
                      GinRemoteAction remote = gin_no_signal(), GinLocalAction local = gin_no_counter()) {
    return put_heap(coop, gin_world_rank(team, peer), gin_window_offset(h_, dst_window) + dst_offset,
                    gin_window_offset(h_, src_window) + src_offset, bytes, remote.signal, local.counter);
  }

  /// put() by a whole warp (see the Coop overload).
  __device__ bool put_warp(const GinTeam& team, uint32_t peer, uint32_t dst_window, uint64_t dst_offset,
                           uint32_t src_window, uint64_t src_offset, uint64_t bytes,
                           GinRemoteAction remote = gin_no_signal(), GinLocalAction local = gin_no_counter()) {
    return put(GinCoopWarp{}, team, peer, dst_window, dst_offset, src_window, src_offset, bytes, remote, local);
  }

  /// put() by a whole block (see the Coop overload).
  __device__ bool put_block(const GinTeam& team, uint32_t peer, uint32_t dst_window, uint64_t dst_offset,
                            uint32_t src_window, uint64_t src_offset, uint64_t bytes,
                            GinRemoteAction remote = gin_no_signal(), GinLocalAction local = gin_no_counter()) {
    return put(GinCoopBlock{}, team, peer, dst_window, dst_offset, src_window, src_offset, bytes, remote, local);
  }

  /// Puts the 8 bytes of `value` into member `peer` of `team`'s window `dst_window` at
  /// `dst_offset` (8-byte aligned), then the actions.
  __device__ bool put_value(const GinTeam& team, uint32_t peer, uint32_t dst_window, uint64_t dst_offset,
                            uint64_t value, GinRemoteAction remote = gin_no_signal(),
                            GinLocalAction local = gin_no_counter()) {
    const uint32_t rank = gin_world_rank(team, peer);
    const uint64_t dst = gin_window_offset(h_, dst_window) + dst_offset;
    if (!gin_is_proxy_peer(h_, rank)) {
      ptx::st_relaxed_sys(reinterpret_cast<uint64_t*>(gin_peer_heap(h_, rank) + dst), value);
      return finish_lsa(rank, remote.signal, local.counter);
    }
    // Through the proxy the value must lie in registered memory until the copy read it: a
    // staging slot of the heap, claimed here and released after a flush of the put.
    uint32_t* busy = detail::gin_staging_busy(h_);
    uint32_t slot = (threadIdx.x + blockIdx.x * blockDim.x) % GIN_STAGING_SLOTS;
    Spin spin;
    while (atomicCAS(&busy[slot], 0u, 1u) != 0u) {
      slot = (slot + 1) % GIN_STAGING_SLOTS;
      if (spin.expired(h_.wait)) {
        WaitContext ctx = h_.wait;
        ctx.peer = static_cast<int32_t>(rank);
        report_timeout(ctx, WaitOp::GinStaging, GIN_STAGING_SLOTS, slot);
        return false;
      }
    }
    const uint64_t src = h_.staging_offset + 8ull * slot;
    *reinterpret_cast<uint64_t*>(h_.heap + src) = value;
    const bool ok =
        put_heap(GinCoopThread{}, rank, dst, src, 8, remote.signal, kGinNone) && flush_connection(rank, conn(remote.signal));
    atomicExch(&busy[slot], 0u);
    if (ok && local.counter != kGinNone) atomicAdd(reinterpret_cast<unsigned long long*>(detail::gin_counters(h_) + local.counter), 1ull);
    return ok;
  }

  /// Raises member `peer` of `team`'s signal `signal` by one, after every earlier put of this
  /// Gin to that peer.
  __device__ bool signal(const GinTeam& team, uint32_t peer, uint32_t signal) {
    return signal_rank(gin_world_rank(team, peer), signal);
  }

  /// This rank's signal `signal` since its last reset (acquire: the data it covers is visible).
  __device__ uint64_t read_signal(uint32_t signal) const {
    return detail::gin_raw_signal(h_, signal) - detail::gin_signal_base(h_)[signal];
  }

  /// Waits (bounded) until read_signal(signal) >= at_least.
  __device__ bool wait_signal(uint32_t signal, uint64_t at_least) const {
    const uint64_t base = detail::gin_signal_base(h_)[signal];
    return detail::gin_wait(h_, WaitOp::GinSignal, signal, at_least,
                            [&] { return detail::gin_raw_signal(h_, signal) - base; });
  }

  /// read_signal(signal) reads 0 from here on. No other thread of this rank may use the signal
  /// meanwhile; increments in flight count after the reset.
  __device__ void reset_signal(uint32_t signal) {
    detail::gin_signal_base(h_)[signal] = detail::gin_raw_signal(h_, signal);
  }

  /// This rank's counter `counter`.
  __device__ uint64_t read_counter(uint32_t counter) const {
    return ptx::ld_acquire_gpu(detail::gin_counters(h_) + counter);
  }

  /// Waits (bounded) until read_counter(counter) >= at_least.
  __device__ bool wait_counter(uint32_t counter, uint64_t at_least) const {
    return detail::gin_wait(h_, WaitOp::GinCounter, counter, at_least, [&] { return read_counter(counter); });
  }

  /// Sets counter `counter` to 0 (no put with its action may be in flight).
  __device__ void reset_counter(uint32_t counter) {
    atomicExch(reinterpret_cast<unsigned long long*>(detail::gin_counters(h_) + counter), 0ull);
  }

  /// Returns once every put of this Gin issued so far is complete at its target (and its
  /// source may be reused).
  __device__ bool flush() {
    ptx::fence_acq_rel_sys();
    for (uint32_t r = 0; r < h_.world && r < GIN_MAX_RANKS; ++r) {
      if (pending_[r] != 0 && !flush_except(r, kGinNone)) return false;
    }
    return true;
  }

  /// Returns once everything this rank queued through the proxy to member `peer` of `team` on
  /// the connection of `signal` (puts and bare signals alike, from any Gin) is complete at the
  /// target. Nothing to wait for with an LSA peer, whose stores are made by the kernel itself.
  __device__ bool flush_signal(const GinTeam& team, uint32_t peer, uint32_t signal) {
    const uint32_t rank = gin_world_rank(team, peer);
    return !gin_is_proxy_peer(h_, rank) || flush_connection(rank, conn(signal));
  }

  /// World barrier `index` (< world_barriers): returns once every rank reached its matching
  /// call. Called by ONE thread per rank; every put of this Gin before it is visible at its
  /// target before the peers leave (a block-wide barrier: __syncthreads around it).
  __device__ bool barrier(uint32_t index) { return team_barrier(gin_team_world(h_), h_.signals + index, index); }

  /// LSA barrier `index` (< lsa_barriers): the same over this rank's LSA team.
  __device__ bool lsa_barrier(uint32_t index) {
    return team_barrier(gin_team_lsa(h_), h_.signals + h_.world_barriers + index, h_.world_barriers + index);
  }

 private:
  /// Connection of a proxy peer carrying `signal` (puts without a signal: the last one).
  __device__ uint32_t conn(uint32_t signal) const { return signal == kGinNone ? h_.signal_slots : signal; }

  __device__ const PortChannelDeviceHandle& port(uint32_t rank, uint32_t c) const {
    return reinterpret_cast<const PortChannelDeviceHandle*>(h_.ports)[rank * (h_.signal_slots + 1) + c];
  }

  /// Flushes connection `c` to `rank` (pushes a Flush and waits until the proxy consumed it).
  __device__ bool flush_connection(uint32_t rank, uint32_t c) {
    uint64_t pos;
    const PortChannelDeviceHandle& ch = port(rank, c);
    if (!detail::port_push(ch, FifoOp::Flush, 0, 0, 0, 0, 0, &pos) || !detail::port_sync(ch, pos)) return false;
    pending_[rank] &= ~(1ull << c);
    return true;
  }

  /// Flushes every connection to `rank` that carried a put of this Gin since its last flush,
  /// but `keep`.
  __device__ bool flush_except(uint32_t rank, uint32_t keep) {
    for (uint64_t m = pending_[rank] & ~(keep == kGinNone ? 0ull : 1ull << keep); m != 0; m &= m - 1) {
      if (!flush_connection(rank, __ffsll(static_cast<long long>(m)) - 1)) return false;
    }
    return true;
  }

  /// After LSA stores: the signal (a release add, cumulative over every earlier store of this
  /// thread and what a group sync or a barrier ordered before it) and the counter. A put without
  /// a signal adds no fence (a .sys fence costs ~1.5 us on an H100, docs/perf/gin.md): the next
  /// signal's release, a barrier or flush() orders its stores before anything that needs them.
  __device__ bool finish_lsa(uint32_t rank, uint32_t signal, uint32_t counter) {
    if (signal != kGinNone) {
      ptx::red_add_release_sys(reinterpret_cast<uint64_t*>(gin_peer_heap(h_, rank)) + signal, 1);
    }
    if (counter != kGinNone) atomicAdd(reinterpret_cast<unsigned long long*>(detail::gin_counters(h_) + counter), 1ull);
    return true;
  }

  /// A put between heap offsets to world rank `rank` by every thread of `coop`, then the
  /// leader's actions (kGinNone: none); every thread returns the leader's outcome.
  template <typename Coop>
  __device__ bool put_heap(const Coop& coop, uint32_t rank, uint64_t dst, uint64_t src, uint64_t bytes,
                           uint32_t signal, uint32_t counter) {
    const bool lsa = !gin_is_proxy_peer(h_, rank);
    if (lsa) {
      detail::gin_copy(coop, reinterpret_cast<char*>(gin_peer_heap(h_, rank) + dst),
                       reinterpret_cast<const char*>(h_.heap + src), bytes);
    }
    // Every thread's stores (its share of the copy, or the source the group wrote before the
    // call) happen before what the leader does next: the release add of the signal, or the
    // push, whose .sys fence orders them before the proxy reads the source.
    coop.sync();
    const bool ok =
        coop.rank() != 0 || (lsa ? finish_lsa(rank, signal, counter) : push_put(rank, dst, src, bytes, signal, counter));
    return coop.all(ok);  // one call site: every thread of the group reaches the same barrier
  }

  /// Queues a put to proxy peer `rank` on the connection of `signal`, then the counter.
  __device__ bool push_put(uint32_t rank, uint64_t dst, uint64_t src, uint64_t bytes, uint32_t signal,
                           uint32_t counter) {
    const uint32_t c = conn(signal);
    if (signal != kGinNone && !flush_except(rank, c)) return false;
    const PortChannelDeviceHandle& ch = port(rank, c);
    uint64_t pos;
    const FifoOp op = signal == kGinNone ? FifoOp::Put : FifoOp::PutSignal;
    if (!detail::port_push(ch, op, ch.dst_memory, static_cast<uint32_t>(dst), ch.src_memory, static_cast<uint32_t>(src),
                           static_cast<uint32_t>(bytes), &pos)) {
      return false;
    }
    pending_[rank] |= 1ull << c;
    if (counter != kGinNone) {
      if (!flush_connection(rank, c)) return false;
      atomicAdd(reinterpret_cast<unsigned long long*>(detail::gin_counters(h_) + counter), 1ull);
    }
    return true;
  }

  __device__ bool signal_rank(uint32_t rank, uint32_t signal) {
    if (!gin_is_proxy_peer(h_, rank)) return finish_lsa(rank, signal, kGinNone);
    if (!flush_except(rank, signal)) return false;
    uint64_t pos;
    // A bare signal carries no data for a later signal to wait for: its connection is not
    // pending (marking it made the first put after every barrier flush the barrier's
    // connection first, a FIFO and NIC round trip on the critical path).
    return detail::port_push(port(rank, signal), FifoOp::Signal, 0, 0, 0, 0, 0, &pos);
  }

  /// Signals every other member of `team` on slot `slot`, then waits for theirs.
  __device__ bool team_barrier(const GinTeam& team, uint32_t slot, uint32_t epoch_index) {
    uint64_t* epoch = detail::gin_barrier_epochs(h_) + epoch_index;
    const uint64_t round = *epoch + 1;
    *epoch = round;
    for (uint32_t i = 0; i < team.size; ++i) {
      if (i != team.rank && !signal_rank(gin_world_rank(team, i), slot)) return false;
    }
    const uint64_t arrivals = round * (team.size - 1);
    return detail::gin_wait(h_, WaitOp::GinBarrier, slot, arrivals, [&] { return detail::gin_raw_signal(h_, slot); });
  }

  DevCommHandle h_;
  /// Per world rank: the proxy connections that carried a put of this Gin since it last flushed
  /// them.
  uint64_t pending_[GIN_MAX_RANKS];
};

/// A put of `bytes` from this rank's window `src_window` at `src_offset` into member `peer` of
/// `team`'s window `dst_window` at `dst_offset`, made by every thread of `coop`, that no later
/// signal or flush of a Gin covers: it keeps no ordering state (no Gin object, so no per-thread
/// array). Without a signal the receiver learns of its arrival from the data itself (LL packets
/// carrying a flag in every 8 bytes); with `remote` a signal, that signal is raised after this
/// put's bytes and covers them alone (through the proxy both travel on the signal's connection,
/// as one command). On LSA the group stores the bytes (then the leader's release add raises the
/// signal); through the proxy the group syncs and its leader queues the command (the push's
/// .sys fence orders the group's earlier stores before the proxy reads the source). Every
/// thread returns the leader's outcome.
template <typename Coop>
__device__ __forceinline__ bool gin_put_unordered(const Coop& coop, const DevCommHandle& h, const GinTeam& team,
                                                  uint32_t peer, uint32_t dst_window, uint64_t dst_offset,
                                                  uint32_t src_window, uint64_t src_offset, uint64_t bytes,
                                                  GinRemoteAction remote = gin_no_signal()) {
  const uint32_t rank = gin_world_rank(team, peer);
  const uint64_t dst = gin_window_offset(h, dst_window) + dst_offset;
  const uint64_t src = gin_window_offset(h, src_window) + src_offset;
  const bool lsa = !gin_is_proxy_peer(h, rank);
  if (lsa) {
    detail::gin_copy(coop, reinterpret_cast<char*>(gin_peer_heap(h, rank) + dst),
                     reinterpret_cast<const char*>(h.heap + src), bytes);
  }
  coop.sync();
  bool ok = true;
  if (coop.rank() == 0 && lsa && remote.signal != kGinNone) {
    ptx::red_add_release_sys(reinterpret_cast<uint64_t*>(gin_peer_heap(h, rank)) + remote.signal, 1);
  } else if (coop.rank() == 0 && !lsa) {
    const uint32_t c = remote.signal == kGinNone ? h.signal_slots : remote.signal;
    const PortChannelDeviceHandle& ch = reinterpret_cast<const PortChannelDeviceHandle*>(h.ports)[rank * (h.signal_slots + 1) + c];
    const FifoOp op = remote.signal == kGinNone ? FifoOp::Put : FifoOp::PutSignal;
    uint64_t pos;
    ok = detail::port_push(ch, op, ch.dst_memory, static_cast<uint32_t>(dst), ch.src_memory, static_cast<uint32_t>(src),
                           static_cast<uint32_t>(bytes), &pos);
  }
  return coop.all(ok);
}

/// The DevCommHandle behind an ncclDevComm that weft's libnccl.so.2 made (ncclDevCommCreate;
/// docs/gin.md), for a kernel written against NCCL's host API: `weft::Gin gin(gin_handle(devComm))`.
/// `NcclDevComm` is NCCL 2.28.9's ncclDevComm (its size is checked), passed to the kernel by value
/// or by reference; at NCCL_DEV_COMM_WEFT_OFFSET it holds weft's magic, an id, and the device
/// address of the handle. One without weft's magic (the real NCCL's, or garbage) traps: the
/// kernel stops with an error rather than read memory that is no handle.
template <typename NcclDevComm>
__device__ __forceinline__ const DevCommHandle& gin_handle(const NcclDevComm& dev_comm) {
  static_assert(sizeof(NcclDevComm) == NCCL_DEV_COMM_BYTES, "gin_handle takes NCCL 2.28.9's ncclDevComm");
  const char* part = reinterpret_cast<const char*>(&dev_comm) + NCCL_DEV_COMM_WEFT_OFFSET;
  if (*reinterpret_cast<const uint32_t*>(part) != NCCL_DEV_COMM_WEFT_MAGIC) __trap();
  return *reinterpret_cast<const DevCommHandle*>(*reinterpret_cast<const uint64_t*>(part + 8));
}

}  // namespace weft
