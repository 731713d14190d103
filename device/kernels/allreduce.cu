// AllReduce kernels. Compiled once per (WEFT_DTYPE, WEFT_REDOP) pair (DataType / ReduceOp
// values), so every kernel is specialised for its element type and operator.
//
//   weft_allreduce_ll  one-shot all-pairs over LL16 packets (small messages): every rank writes
//                      its whole input as packets into every peer's packet buffer, then reduces
//                      all ranks' data in rank order. No semaphore, no fence: the packets' flags
//                      are the synchronisation. Per-block flags live in device memory.
//   weft_allreduce_ll2 two-shot LL16 (mid-size messages): scatter shards as packets, each rank
//                      reduces its shard and broadcasts the result as packets. Two hops, each
//                      byte crosses NVLink twice instead of (ranks - 1) times.
//   weft_allreduce_hb  two-shot reduce-scatter + all-gather through registered scratch (large
//                      messages), chunked so any size fits the scratch. Push only (NVLink
//                      stores, never remote loads): every rank writes shard d of its input into
//                      slot `rank` of rank d's scratch, barrier, each rank reduces its own slots
//                      (local reads) and stores the result into every rank's result region,
//                      barrier, copy the result out. Block b of every rank handles the same
//                      sub-slice of every shard, so barriers are per block.
#include "weft/weft.cuh"
#include "weft/elementwise.cuh"

using namespace weft;

constexpr DataType kType = static_cast<DataType>(WEFT_DTYPE);
constexpr ReduceOp kOp = static_cast<ReduceOp>(WEFT_REDOP);
using Elem = Element<kType>;
using T = typename Elem::T;
using Acc = typename Elem::Acc;

__device__ __forceinline__ uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
__device__ __forceinline__ uint64_t round_up16(uint64_t x) { return (x + 15) & ~uint64_t(15); }

// ---------------------------------------------------------------------------------------------
// LL16 (one-shot and two-shot). Every rank's packet buffer has two halves of `half_bytes`,
// chosen by flag parity; both LL kernels lay their regions out inside the half, so consecutive
// calls alternate halves whichever kernel runs. Flags come from per-block device slots shared
// by both kernels (same grid), so they only ever grow.

using LlPacket = typename Ll16::Packet;
using LlReducer = Reducer<kType, kOp, 8>;

// Payload bytes of packet i of a `bytes`-long message.
__device__ __forceinline__ uint32_t packet_valid(uint64_t bytes, uint64_t i) {
  return static_cast<uint32_t>(min_u64(8, bytes - i * 8));
}

// Spins (bounded) until `src` carries `flag`; false on timeout (recorded in the error record).
__device__ __forceinline__ bool read_packet(const LlPacket* src, uint32_t flag, const WaitContext& ctx,
                                            uint32_t (&w)[2]) {
  uint32_t seen = 0;
  Spin spin;
  while (!Ll16::try_read(src, flag, w, seen)) {
    if (spin.expired(ctx)) {
      report_timeout(ctx, Ll16::kReadOp, flag, seen);
      return false;
    }
  }
  return true;
}

// Packet `i` of region `region` (byte offset inside the half) of a packet buffer.
__device__ __forceinline__ LlPacket* packet_at(uint64_t buffer, uint64_t half, uint64_t region, uint64_t i) {
  return reinterpret_cast<LlPacket*>(reinterpret_cast<char*>(buffer) + half + region) + i;
}

// Reduces packet-sized payload i of every rank in rank order: my own words are `mine`, the
// others come from `region_of(r)` of my packet buffer. False on timeout.
template <typename RegionOf>
__device__ __forceinline__ bool reduce_packet(const MemoryChannelDeviceHandle* channels, uint64_t local, uint64_t half,
                                              RegionOf region_of, uint64_t i, uint32_t flag, uint32_t rank,
                                              uint32_t ranks, const uint32_t (&mine)[2], uint32_t (&out)[2]) {
  Acc acc[LlReducer::kElems];
  for (uint32_t r = 0; r < ranks; ++r) {
    uint32_t w[2] = {mine[0], mine[1]};
    if (r != rank && !read_packet(packet_at(local, half, region_of(r), i), flag, channels[r].semaphore.wait, w)) {
      return false;
    }
    if (r == 0) {
      LlReducer::start(acc, w);
    } else {
      LlReducer::fold(acc, w);
    }
  }
  LlReducer::finish(acc, ranks, out);
  return true;
}

// One-shot: every rank writes its whole input as packets into slot `rank` of every peer, then
// reduces every rank's packets. Region of source r: r * slot_bytes.
extern "C" __global__ void __launch_bounds__(512) weft_allreduce_ll(
    const char* input, char* output, uint64_t bytes, const MemoryChannelDeviceHandle* channels, uint32_t rank,
    uint32_t ranks, uint32_t* flag_slots, uint64_t half_bytes, uint64_t slot_bytes) {
  const uint32_t flag = ll_flag_begin(flag_slots + blockIdx.x);
  const uint64_t packets = packet_count<Ll16>(bytes);
  const uint64_t per_block = (packets + gridDim.x - 1) / gridDim.x;
  const uint64_t lo = min_u64(per_block * blockIdx.x, packets);
  const uint64_t hi = min_u64(lo + per_block, packets);
  const uint64_t half = (flag & 1u) * half_bytes;
  const uint64_t local = ranks > 1 ? channels[(rank + 1) % ranks].packet_buffer : 0;

  for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    uint32_t w[2];
    detail::load_words<2>(input + i * 8, packet_valid(bytes, i), w);
    for (uint32_t k = 1; k < ranks; ++k) {
      const uint32_t peer = (rank + k) % ranks;
      Ll16::write(packet_at(channels[peer].remote_packet_buffer, half, rank * slot_bytes, i), w, flag);
    }
  }
  __syncthreads();
  for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    uint32_t mine[2], out[2];
    detail::load_words<2>(input + i * 8, packet_valid(bytes, i), mine);
    auto region_of = [&](uint32_t r) { return r * slot_bytes; };
    if (!reduce_packet(channels, local, half, region_of, i, flag, rank, ranks, mine, out)) break;
    detail::store_words<2>(output + i * 8, packet_valid(bytes, i), out);
  }
  ll_flag_end(flag_slots + blockIdx.x, flag);
}

// Two-shot: rank d owns shard d (`shard` bytes, a multiple of 8). Scatter: shard d of my input
// goes as packets to region `rank * slot_bytes` of rank d. Reduce my shard from every rank's
// packets, write the result to my output and as packets to region `(ranks + rank) *
// slot_bytes` of every peer. Gather: read every other shard's result packets into my output.
// Block b handles the same packet range of every shard on every rank.
extern "C" __global__ void __launch_bounds__(512) weft_allreduce_ll2(
    const char* input, char* output, uint64_t bytes, const MemoryChannelDeviceHandle* channels, uint32_t rank,
    uint32_t ranks, uint32_t* flag_slots, uint64_t half_bytes, uint64_t slot_bytes) {
  const uint32_t flag = ll_flag_begin(flag_slots + blockIdx.x);
  const uint64_t shard = ((bytes + ranks - 1) / ranks + 7) & ~uint64_t(7);
  const uint64_t shard_packets = shard / 8;
  const uint64_t per_block = (shard_packets + gridDim.x - 1) / gridDim.x;
  const uint64_t lo = min_u64(per_block * blockIdx.x, shard_packets);
  const uint64_t hi = min_u64(lo + per_block, shard_packets);
  const uint64_t half = (flag & 1u) * half_bytes;
  const uint64_t local = ranks > 1 ? channels[(rank + 1) % ranks].packet_buffer : 0;
  // Packet j of shard d is message packet d * shard_packets + j; it may lie past the end.
  auto in_message = [&](uint32_t d, uint64_t j) { return (d * shard_packets + j) * 8 < bytes; };

  // Scatter.
  for (uint32_t k = 1; k < ranks; ++k) {
    const uint32_t d = (rank + k) % ranks;
    for (uint64_t j = lo + threadIdx.x; j < hi && in_message(d, j); j += blockDim.x) {
      const uint64_t i = d * shard_packets + j;
      uint32_t w[2];
      detail::load_words<2>(input + i * 8, packet_valid(bytes, i), w);
      Ll16::write(packet_at(channels[d].remote_packet_buffer, half, rank * slot_bytes, j), w, flag);
    }
  }
  // Reduce my shard, keep it and broadcast it.
  bool ok = true;
  for (uint64_t j = lo + threadIdx.x; j < hi && in_message(rank, j) && ok; j += blockDim.x) {
    const uint64_t i = rank * shard_packets + j;
    uint32_t mine[2], out[2];
    detail::load_words<2>(input + i * 8, packet_valid(bytes, i), mine);
    auto region_of = [&](uint32_t r) { return r * slot_bytes; };
    ok = reduce_packet(channels, local, half, region_of, j, flag, rank, ranks, mine, out);
    if (!ok) break;
    detail::store_words<2>(output + i * 8, packet_valid(bytes, i), out);
    for (uint32_t k = 1; k < ranks; ++k) {
      const uint32_t peer = (rank + k) % ranks;
      Ll16::write(packet_at(channels[peer].remote_packet_buffer, half, (ranks + rank) * slot_bytes, j), out, flag);
    }
  }
  // Gather every other shard.
  for (uint32_t k = 1; k < ranks && ok; ++k) {
    const uint32_t d = (rank + k) % ranks;
    for (uint64_t j = lo + threadIdx.x; j < hi && in_message(d, j); j += blockDim.x) {
      const uint64_t i = d * shard_packets + j;
      uint32_t w[2];
      ok = read_packet(packet_at(local, half, (ranks + d) * slot_bytes, j), flag, channels[d].semaphore.wait, w);
      if (!ok) break;
      detail::store_words<2>(output + i * 8, packet_valid(bytes, i), w);
    }
  }
  ll_flag_end(flag_slots + blockIdx.x, flag);
}

// ---------------------------------------------------------------------------------------------
// Two-shot HB through scratch.

// Block barrier with every peer: one thread per peer signals (release) then waits (acquire)
// on the (peer, block) semaphore. Returns false if a wait timed out.
__device__ __forceinline__ bool block_barrier(const SemaphoreDeviceHandle* sems, uint32_t rank, uint32_t ranks) {
  __syncthreads();
  bool ok = true;
  const uint32_t t = threadIdx.x;
  if (t < ranks && t != rank) {
    const SemaphoreDeviceHandle& s = sems[t * gridDim.x + blockIdx.x];
    semaphore_signal(s);
    ok = semaphore_wait(s);
  }
  return __syncthreads_and(ok);
}

// Reduces bytes [lo, hi) of my shard (lo 16-aligned): source rank r's copy is at in[r] + lo
// (rank order), the result goes to out[r] + lo for every rank r.
__device__ __forceinline__ void reduce_shard(const char* const* in, char* const* out, uint64_t lo, uint64_t hi,
                                             uint32_t ranks, uint32_t rank) {
  using R = Reducer<kType, kOp, 16>;
  const uint64_t vectors = (hi - lo) / 16;
  for (uint64_t v = threadIdx.x; v < vectors; v += blockDim.x) {
    const uint64_t at = lo + v * 16;
    Acc acc[R::kElems];
    uint4 x[8];
    // Issue every rank's load before reducing.
#pragma unroll
    for (uint32_t r = 0; r < 8; ++r) {
      if (r < ranks) x[r] = *reinterpret_cast<const uint4*>(in[r] + at);
    }
    for (uint32_t r = 0; r < ranks; ++r) {
      const uint32_t(&w)[4] = *reinterpret_cast<const uint32_t(*)[4]>(&x[r]);
      if (r == 0) {
        R::start(acc, w);
      } else {
        R::fold(acc, w);
      }
    }
    uint32_t res[4];
    R::finish(acc, ranks, res);
    const uint4 y = make_uint4(res[0], res[1], res[2], res[3]);
    for (uint32_t k = 0; k < ranks; ++k) {
      *reinterpret_cast<uint4*>(out[(rank + k) % ranks] + at) = y;
    }
  }
  // Tail: whole elements after the last full vector.
  for (uint64_t at = lo + vectors * 16 + threadIdx.x * sizeof(T); at < hi; at += blockDim.x * sizeof(T)) {
    T v;
    memcpy(&v, in[0] + at, sizeof(T));
    Acc acc = Elem::widen(v);
    for (uint32_t r = 1; r < ranks; ++r) {
      memcpy(&v, in[r] + at, sizeof(T));
      acc = Combine<kOp>::apply(acc, Elem::widen(v));
    }
    const T res = Elem::narrow(Combine<kOp>::finish(acc, ranks));
    for (uint32_t r = 0; r < ranks; ++r) memcpy(out[r] + at, &res, sizeof(T));
  }
}

// Scratch of every rank: [slots: ranks x shard | results: chunk_bytes]. `chunk_bytes` is a
// multiple of 16 * ranks (the host ensures it), so ranks x shard never exceeds it.
extern "C" __global__ void __launch_bounds__(1024) weft_allreduce_hb(
    const char* input, char* output, uint64_t bytes, const MemoryChannelDeviceHandle* channels,
    const SemaphoreDeviceHandle* sems, char* scratch, uint64_t chunk_bytes, uint32_t rank, uint32_t ranks) {
  // At most 8 ranks (register arrays below); the host checks.
  char* base[8];
  char* out[8];
  for (uint32_t r = 0; r < ranks; ++r) {
    base[r] = r == rank ? scratch : reinterpret_cast<char*>(channels[r].dst);
    out[r] = base[r] + chunk_bytes;
  }
  for (uint64_t first = 0; first < bytes; first += chunk_bytes) {
    const uint64_t cb = min_u64(chunk_bytes, bytes - first);
    const uint64_t shard = round_up16((cb + ranks - 1) / ranks);
    const uint64_t sub = round_up16((shard + gridDim.x - 1) / gridDim.x);
    // Sub-slice b of shard d: [lo(d), hi(d)) in chunk offsets.
    auto lo_of = [&](uint32_t d) { return min_u64(d * shard + blockIdx.x * sub, min_u64((d + 1) * shard, cb)); };
    auto hi_of = [&](uint32_t d) { return min_u64(lo_of(d) + sub, min_u64((d + 1) * shard, cb)); };
    // Phase A: push sub-slice b of shard d of my input into slot `rank` of rank d.
    for (uint32_t k = 0; k < ranks; ++k) {
      const uint32_t d = (rank + k) % ranks;
      const uint64_t lo = lo_of(d), hi = hi_of(d);
      if (hi > lo) {
        copy_bytes(base[d] + rank * shard + (lo - d * shard), input + first + lo, hi - lo, threadIdx.x, blockDim.x);
      }
    }
    if (!block_barrier(sems, rank, ranks)) return;
    // Phase B: reduce my slots (local reads) into every rank's result region.
    {
      const uint64_t lo = lo_of(rank), hi = hi_of(rank);
      if (hi > lo) {
        const char* in[8];
        for (uint32_t r = 0; r < ranks; ++r) in[r] = scratch + r * shard - static_cast<uint64_t>(rank) * shard;
        reduce_shard(in, out, lo, hi, ranks, rank);
      }
    }
    if (!block_barrier(sems, rank, ranks)) return;
    // Phase C: copy sub-slice b of every shard of the result out.
    for (uint32_t d = 0; d < ranks; ++d) {
      const uint64_t lo = lo_of(d), hi = hi_of(d);
      if (hi > lo) copy_bytes(output + first + lo, scratch + chunk_bytes + lo, hi - lo, threadIdx.x, blockDim.x);
    }
  }
}
