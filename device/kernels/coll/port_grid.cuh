// What the AllReduces over PortChannels (port_ring.cu, port_allpairs.cu) share: puts split to
// the FIFO's size field, the driver-and-workers grid (PortGrid) and its slices, and one rank
// alone.
#pragma once
#include "reducing.cuh"
#include "weft/port_channel.cuh"

/// Most bytes one FIFO put carries (its size field is 32-bit); larger puts are split.
constexpr uint64_t kPortMaxPut = uint64_t(1) << 31;

/// `size` bytes from offset `src` of the channel's local memory to offset `dst` of the peer's
/// memory, as puts of at most kPortMaxPut bytes with a signal on the last (a signal alone when
/// `size` is 0), so the peer's wait covers every piece. Offsets stay below 4 GiB: the host keeps
/// the registered scratch under it. Called by ONE thread.
__device__ __forceinline__ bool port_put_signal_split(const PortChannelDeviceHandle& ch, uint64_t dst, uint64_t src,
                                                      uint64_t size) {
  while (size > kPortMaxPut) {
    if (!port_put(ch, static_cast<uint32_t>(dst), static_cast<uint32_t>(src), static_cast<uint32_t>(kPortMaxPut))) {
      return false;
    }
    dst += kPortMaxPut, src += kPortMaxPut, size -= kPortMaxPut;
  }
  if (size == 0) return port_signal(ch);
  return port_put_with_signal(ch, static_cast<uint32_t>(dst), static_cast<uint32_t>(src), static_cast<uint32_t>(size));
}

/// Worker `w`'s slice [lo, hi) of the range [a, b) (a 16-aligned) shared by `workers` blocks.
__device__ __forceinline__ void worker_slice(uint64_t a, uint64_t b, uint32_t w, uint32_t workers, uint64_t& lo,
                                             uint64_t& hi) {
  const uint64_t sub = b > a ? round_up16(div_ceil(b - a, workers)) : 0;
  lo = min_u64(a + w * sub, b);
  hi = min_u64(lo + sub, b);
}

/// The grid of the PortChannel AllReduces: block 0 is the driver, whose thread 0 alone talks to
/// the proxy (the first block dispatched, so it runs even where workers wait to be scheduled),
/// and blocks 1.. are `gridDim.x - 1` workers. They hand work over through counters that only
/// grow, over launches too: the driver raises `ready` (a piece received, a round started); each
/// worker publishes how many times it has arrived (its slices written), and the driver waits
/// until every worker has arrived as often as it expects. Per-worker counts, not one shared sum:
/// a worker may arrive twice before the driver looks (two pieces of a step it reduces without a
/// hand-off between them), and a sum would then let a piece go out before a slow worker wrote
/// its slice. `state`: [ready, then per block {hand-offs, arrivals, rounds}], the same in every
/// block between launches (a worker's arrivals are also what it publishes; the driver's are
/// what it awaits of each worker), so nothing is reset and graph replays need no host work.
/// Waits are bounded with `ctx`.
struct PortGrid {
  static constexpr uint32_t kWords = 3;
  uint64_t* ready;
  uint64_t* blocks;
  uint64_t* counts;
  const WaitContext* ctx;
  uint32_t workers;
  bool driver;
  /// This worker's index (blocks 1.. are workers 0..).
  uint32_t worker;
  /// Hand-offs raised (driver) or consumed (worker), arrivals awaited per worker or made, and
  /// the rounds of earlier launches (round `round` of this launch is round `base + round`).
  uint64_t handed, arrived, base;

  __device__ __forceinline__ PortGrid(uint64_t* state, const WaitContext& ctx_)
      : ready(state),
        blocks(state + 1),
        counts(state + 1 + kWords * static_cast<uint64_t>(blockIdx.x)),
        ctx(&ctx_),
        workers(gridDim.x - 1),
        driver(blockIdx.x == 0),
        worker(blockIdx.x - 1),
        handed(counts[0]),
        arrived(counts[1]),
        base(counts[2]) {}

  /// Driver: the next piece or round is the workers'.
  __device__ __forceinline__ void hand_off() { ptx::st_release_sys(ready, ++handed); }
  /// Driver: waits until every worker has arrived once more: each poll issues every worker's
  /// relaxed load before using any (one memory latency, not one per worker), and one acquire
  /// fence covers them all. False on timeout.
  __device__ __forceinline__ bool all_arrived() {
    ++arrived;
    Spin spin;
    for (;;) {
      uint64_t least = ~uint64_t(0);
      for (uint32_t w = 1; w <= workers; ++w) least = min_u64(least, ptx::ld_relaxed_sys(blocks + kWords * w + 1));
      if (least >= arrived) break;
      if (spin.expired(*ctx)) {
        report_timeout(*ctx, WaitOp::RingHandoff, arrived, least);
        return false;
      }
    }
    ptx::fence_acq_rel_sys();
    return true;
  }
  /// Worker (every thread): waits for the driver's next hand-off. False on timeout.
  __device__ __forceinline__ bool take() {
    ++handed;
    bool ok = true;
    if (threadIdx.x == 0) ok = wait_at_least(ready, handed, *ctx, WaitOp::RingHandoff);
    return __syncthreads_and(ok);
  }
  /// Worker (every thread): the block's writes so far are done.
  __device__ __forceinline__ void arrive() {
    __syncthreads();  // the block's writes come before the release
    ++arrived;
    if (threadIdx.x == 0) ptx::st_release_sys(counts + 1, arrived);
  }
  /// Keeps the counts for the next launch, which ran `rounds` rounds (a worker's arrivals are
  /// stored already). Called by: every thread.
  __device__ __forceinline__ void save(uint64_t rounds) const {
    if (threadIdx.x == 0) {
      counts[0] = handed;
      if (driver) counts[1] = arrived;
      counts[2] = base + rounds;
    }
  }
};

/// One rank alone: its output is its input (PreMulSum: times the scalar), by the whole grid.
__device__ __forceinline__ void port_single_rank(const CollContext& c, const char* input, char* output,
                                                 uint64_t bytes) {
  uint64_t lo, hi;
  worker_slice(0, bytes, blockIdx.x, gridDim.x, lo, hi);
  ring_reduce(nullptr, input, nullptr, output, lo, hi, Fin::of(c), Pre::of(c));
}
