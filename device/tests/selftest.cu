// Kernels of `weft selftest`: they exercise the device API exactly as users' kernels would.
#include "weft/weft.cuh"
#include "weft/elementwise.cuh"
#include "weft/generated/kernels/tests.cuh"  // the prototypes every definition must match

using namespace weft;

// The byte at `index` of the test pattern of (`flag`, `rank`): a 32-bit mix per word, so every
// launch, rank and position differs. Mirrored on the host by weft::selftest::pattern_byte.
__device__ __forceinline__ uint32_t pattern_word(uint32_t flag, uint32_t rank, uint64_t word) {
  uint32_t x = flag * 0x9E3779B1u ^ (rank + 1u) * 0x85EBCA77u ^ static_cast<uint32_t>(word) * 0xC2B2AE3Du ^
               static_cast<uint32_t>(word >> 32) * 0x27D4EB2Fu;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  x *= 0x297A2D39u;
  x ^= x >> 15;
  return x;
}

__device__ __forceinline__ uint8_t pattern_byte(uint32_t flag, uint32_t rank, uint64_t index) {
  return static_cast<uint8_t>(pattern_word(flag, rank, index / 4) >> (8 * (index % 4)));
}

// Ping-pong between two ranks over one semaphore, one thread. After one warm-up round trip it
// times `iters` round trips with %globaltimer and writes the nanoseconds to *elapsed_ns.
// `relaxed` selects relaxed_signal/relaxed_wait (execution sync only) instead of the
// release/acquire pair that publishes data.
template <bool kRelaxed>
__device__ void pingpong(const MemoryChannelDeviceHandle& ch, uint32_t iters, uint32_t initiator,
                         uint64_t* elapsed_ns) {
  uint64_t start = 0;
  for (uint32_t i = 0; i <= iters; ++i) {
    if (i == 1) start = ptx::globaltimer_ns();
    if (initiator) {
      kRelaxed ? channel_relaxed_signal(ch) : channel_signal(ch);
      if (!(kRelaxed ? channel_relaxed_wait(ch) : channel_wait(ch))) return;
    } else {
      if (!(kRelaxed ? channel_relaxed_wait(ch) : channel_wait(ch))) return;
      kRelaxed ? channel_relaxed_signal(ch) : channel_signal(ch);
    }
  }
  *elapsed_ns = ptx::globaltimer_ns() - start;
}

extern "C" __global__ void weft_selftest_pingpong(MemoryChannelDeviceHandle ch, uint32_t iters, uint32_t initiator,
                                                  uint32_t relaxed, uint64_t* elapsed_ns) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  if (relaxed) {
    pingpong<true>(ch, iters, initiator, elapsed_ns);
  } else {
    pingpong<false>(ch, iters, initiator, elapsed_ns);
  }
}

// Grid-wide put of `bytes` from local src+src_offset to the peer's dst+dst_offset. With
// `signal`, every block signals once when its share is written (the receiver waits gridDim.x).
extern "C" __global__ void weft_selftest_put(MemoryChannelDeviceHandle ch, uint64_t dst_offset, uint64_t src_offset,
                                             uint64_t bytes, uint32_t signal) {
  channel_put(ch, dst_offset, src_offset, bytes, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
  if (signal) {
    __syncthreads();
    if (threadIdx.x == 0) channel_signal(ch);
  }
}

// The put above through the TMA instead of SM stores: block b moves its contiguous share in
// pieces of kBulkPiece bytes, each loaded into shared memory by a bulk copy (cp.async.bulk,
// completing on an mbarrier) and stored from there into the peer by another (a bulk group), two
// pieces in flight. One thread per block issues the copies. `bytes` and both offsets are
// multiples of 16 (the host checks). With `signal`, each block signals once its stores are done.
constexpr uint32_t kBulkPiece = 16384;

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

extern "C" __global__ void weft_selftest_bulk_put(MemoryChannelDeviceHandle ch, uint64_t dst_offset,
                                                  uint64_t src_offset, uint64_t bytes, uint32_t signal) {
  __shared__ __align__(128) unsigned char stage[2][kBulkPiece];
  __shared__ __align__(8) uint64_t loaded[2];
  if (threadIdx.x != 0) return;
  const char* src = reinterpret_cast<const char*>(ch.src) + src_offset;
  char* dst = reinterpret_cast<char*>(ch.dst) + dst_offset;
  const uint64_t share = ((bytes + gridDim.x - 1) / gridDim.x + 15) & ~uint64_t(15);
  const uint64_t lo = min(uint64_t(blockIdx.x) * share, bytes), hi = min(lo + share, bytes);
  for (uint32_t s = 0; s < 2; ++s) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&loaded[s])) : "memory");
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  uint32_t phase[2] = {0u, 0u};
  uint64_t k = 0;
  for (uint64_t at = lo; at < hi; at += kBulkPiece, ++k) {
    const uint32_t s = k & 1u, n = static_cast<uint32_t>(min(uint64_t(kBulkPiece), hi - at));
    const uint32_t bar = shared_address(&loaded[s]), buf = shared_address(stage[s]);
    // The store of piece k - 2, which read this stage, has finished reading it.
    if (k >= 2) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(n) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(buf),
                 "l"(src + at), "r"(n), "r"(bar)
                 : "memory");
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(bar), "r"(phase[s])
          : "memory");
    }
    phase[s] ^= 1u;
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + at), "r"(buf), "r"(n)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
  // Every store has been written (not only read from shared memory).
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (signal) {
    asm volatile("fence.proxy.async.global;" ::: "memory");
    channel_signal(ch);
  }
}

// Grid-wide get of `bytes` from the peer's dst+dst_offset into local src+src_offset.
extern "C" __global__ void weft_selftest_get(MemoryChannelDeviceHandle ch, uint64_t dst_offset, uint64_t src_offset,
                                             uint64_t bytes) {
  channel_get(ch, dst_offset, src_offset, bytes, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}

// Waits for `count` signals on the channel's semaphore (one thread).
extern "C" __global__ void weft_selftest_wait(MemoryChannelDeviceHandle ch, uint32_t count) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  for (uint32_t i = 0; i < count; ++i) {
    if (!channel_wait(ch)) return;
  }
}

// One LL round: each block writes this launch's pattern for its slice into src[0, bytes), sends
// it as packets to the peer's packet buffer (half chosen by flag parity), receives the peer's
// packets into src[bytes, 2*bytes), and counts mismatching bytes into *errors. Flags live in
// flag_slots (one per block) and advance here, so consecutive launches and graph replays each
// use a fresh flag.
template <typename P>
__device__ void ll_round(const MemoryChannelDeviceHandle& ch, uint32_t* flag_slots, uint64_t bytes,
                         uint64_t half_bytes, uint32_t rank, uint32_t peer, uint32_t* errors) {
  const uint32_t flag = ll_flag_begin(flag_slots + blockIdx.x);
  const uint64_t packets = packet_count<P>(bytes);
  const uint64_t per_block = (packets + gridDim.x - 1) / gridDim.x;
  const uint64_t first = per_block * blockIdx.x < packets ? per_block * blockIdx.x : packets;
  const uint64_t last = first + per_block < packets ? first + per_block : packets;
  const uint64_t lo = first * P::kPayloadBytes;
  const uint64_t hi = last * P::kPayloadBytes < bytes ? last * P::kPayloadBytes : bytes;
  const uint64_t slice = hi > lo ? hi - lo : 0;
  char* src = reinterpret_cast<char*>(ch.src);

  for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) src[i] = static_cast<char>(pattern_byte(flag, rank, i));
  __syncthreads();
  const uint64_t packet_offset = (flag & 1u) * half_bytes + first * sizeof(typename P::Packet);
  channel_put_packets<P>(ch, packet_offset, lo, slice, threadIdx.x, blockDim.x, flag);
  const bool ok = channel_unpack_packets<P>(ch, packet_offset, bytes + lo, slice, threadIdx.x, blockDim.x, flag);
  if (__syncthreads_and(ok)) {
    uint32_t wrong = 0;
    for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      wrong += static_cast<uint8_t>(src[bytes + i]) != pattern_byte(flag, peer, i);
    }
    if (wrong) atomicAdd(errors, wrong);
  }
  ll_flag_end(flag_slots + blockIdx.x, flag);
}

extern "C" __global__ void weft_selftest_ll8_round(MemoryChannelDeviceHandle ch, uint32_t* flag_slots, uint64_t bytes,
                                                   uint64_t half_bytes, uint32_t rank, uint32_t peer,
                                                   uint32_t* errors) {
  ll_round<Ll8>(ch, flag_slots, bytes, half_bytes, rank, peer, errors);
}

extern "C" __global__ void weft_selftest_ll16_round(MemoryChannelDeviceHandle ch, uint32_t* flag_slots, uint64_t bytes,
                                                    uint64_t half_bytes, uint32_t rank, uint32_t peer,
                                                    uint32_t* errors) {
  ll_round<Ll16>(ch, flag_slots, bytes, half_bytes, rank, peer, errors);
}

// The collectives' reduction (elementwise.cuh's Reducer, what every reducing kernel folds with)
// computes: out[i] = in_a[i] (+|min|max) in_b[i] for f32, f16, bf16 on 16-byte vectors, both
// widened to the accumulator, combined and rounded once (the host checks against a float64
// reference).
template <DataType D, ReduceOp O>
__device__ void reduce_vectors(const uint4* a, const uint4* b, uint4* out, uint64_t vectors) {
  using R = Reducer<D, O, 16>;
  const Finish<D, O> finish{true, 2};
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += gridDim.x * blockDim.x) {
    const uint4 x = a[i], y = b[i];
    const uint32_t wx[4] = {x.x, x.y, x.z, x.w}, wy[4] = {y.x, y.y, y.z, y.w};
    typename Element<D>::Acc acc[R::kElems];
    R::start(acc, wx);
    R::fold(acc, wy);
    uint32_t res[4];
    R::finish(acc, finish, res);
    out[i] = make_uint4(res[0], res[1], res[2], res[3]);
  }
}

extern "C" __global__ void weft_selftest_reduce(const uint4* a, const uint4* b, uint4* out, uint64_t vectors,
                                                uint32_t dtype, uint32_t op) {
  // dtype: 0 f32, 1 f16, 2 bf16; op: 0 sum, 1 min, 2 max
  switch (dtype * 3 + op) {
    case 0: reduce_vectors<DataType::F32, ReduceOp::Sum>(a, b, out, vectors); break;
    case 1: reduce_vectors<DataType::F32, ReduceOp::Min>(a, b, out, vectors); break;
    case 2: reduce_vectors<DataType::F32, ReduceOp::Max>(a, b, out, vectors); break;
    case 3: reduce_vectors<DataType::F16, ReduceOp::Sum>(a, b, out, vectors); break;
    case 4: reduce_vectors<DataType::F16, ReduceOp::Min>(a, b, out, vectors); break;
    case 5: reduce_vectors<DataType::F16, ReduceOp::Max>(a, b, out, vectors); break;
    case 6: reduce_vectors<DataType::Bf16, ReduceOp::Sum>(a, b, out, vectors); break;
    case 7: reduce_vectors<DataType::Bf16, ReduceOp::Min>(a, b, out, vectors); break;
    case 8: reduce_vectors<DataType::Bf16, ReduceOp::Max>(a, b, out, vectors); break;
    default: break;
  }
}
