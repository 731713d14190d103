// AllReduce kernels. Compiled once per (WEFT_DTYPE, WEFT_REDOP) pair (DataType / ReduceOp
// values), so every kernel is specialised for its element type and operator.
//
//   weft_allreduce_ll  one-shot all-pairs over LL16 packets (small messages): every rank writes
//                      its whole input as packets into every peer's packet buffer, then reduces
//                      all ranks' data in rank order. No semaphore, no fence: the packets' flags
//                      are the synchronisation. Per-block flags live in device memory.
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
// One-shot LL16.

extern "C" __global__ void __launch_bounds__(512) weft_allreduce_ll(
    const char* input, char* output, uint64_t bytes, const MemoryChannelDeviceHandle* channels, uint32_t rank,
    uint32_t ranks, uint32_t* flag_slots, uint64_t slot_bytes) {
  using P = Ll16;
  using Packet = typename P::Packet;
  using R = Reducer<kType, kOp, 8>;
  const uint32_t flag = ll_flag_begin(flag_slots + blockIdx.x);
  const uint64_t packets = packet_count<P>(bytes);
  const uint64_t per_block = (packets + gridDim.x - 1) / gridDim.x;
  const uint64_t lo = min_u64(per_block * blockIdx.x, packets);
  const uint64_t hi = min_u64(lo + per_block, packets);
  const uint64_t half = (flag & 1u) * ranks * slot_bytes;

  // 1. My input, as packets, into slot `rank` of every peer's packet buffer.
  for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const uint32_t valid = static_cast<uint32_t>(min_u64(8, bytes - i * 8));
    uint32_t w[2];
    detail::load_words<2>(input + i * 8, valid, w);
    for (uint32_t k = 1; k < ranks; ++k) {
      const uint32_t peer = (rank + k) % ranks;
      Packet* dst = reinterpret_cast<Packet*>(reinterpret_cast<char*>(channels[peer].remote_packet_buffer) + half +
                                              rank * slot_bytes) + i;
      P::write(dst, w, flag);
    }
  }
  __syncthreads();

  // 2. Reduce every rank's packets (and my input) in rank order.
  bool ok = true;
  const char* local_packets = ranks > 1 ? reinterpret_cast<const char*>(channels[(rank + 1) % ranks].packet_buffer) : nullptr;
  for (uint64_t i = lo + threadIdx.x; i < hi && ok; i += blockDim.x) {
    const uint32_t valid = static_cast<uint32_t>(min_u64(8, bytes - i * 8));
    Acc acc[R::kElems];
    for (uint32_t r = 0; r < ranks && ok; ++r) {
      uint32_t w[2];
      if (r == rank) {
        detail::load_words<2>(input + i * 8, valid, w);
      } else {
        const Packet* src = reinterpret_cast<const Packet*>(local_packets + half + r * slot_bytes) + i;
        const WaitContext& ctx = channels[r].semaphore.wait;
        uint32_t seen = 0;
        Spin spin;
        while (!P::try_read(src, flag, w, seen)) {
          if (spin.expired(ctx)) {
            report_timeout(ctx, P::kReadOp, flag, seen);
            ok = false;
            break;
          }
        }
      }
      if (!ok) break;
      if (r == 0) {
        R::start(acc, w);
      } else {
        R::fold(acc, w);
      }
    }
    if (!ok) break;
    uint32_t out[2];
    R::finish(acc, ranks, out);
    detail::store_words<2>(output + i * 8, valid, out);
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
