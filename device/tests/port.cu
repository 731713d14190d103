// PortChannel and FIFO kernels of `weft selftest --only port`, `weft bench fifo` and
// `weft bench p2p --channel port`.
#include "weft/fifo.cuh"
#include "weft/port_channel.cuh"
#include "weft/generated/kernels/tests.cuh"  // the prototypes every definition must match

// Thread 0 of block b, on channel chs[b]: put-with-signal commands of `chunk` bytes for the
// chunks i < `chunks` with i % gridDim.x == b, from [i * chunk, ...) of the local memory to
// [dst_base + i * chunk, ...) of the peer's, then waits for as many signals of the peer's block
// b (spinning while this rank's and the peer's proxies move the data: the test that no proxy
// blocks behind a running kernel, and with many channels that no copy stream queues behind it),
// then a flush. status[b] = 1 on success, 0 on failure.
extern "C" __global__ void weft_port_exchange(const weft::PortChannelDeviceHandle* chs, uint32_t chunk,
                                              uint32_t chunks, uint32_t dst_base, uint32_t* status) {
  if (threadIdx.x != 0) return;
  const weft::PortChannelDeviceHandle& ch = chs[blockIdx.x];
  bool ok = true;
  uint32_t mine = 0;
  for (uint32_t i = blockIdx.x; ok && i < chunks; i += gridDim.x, ++mine) {
    ok = weft::port_put_with_signal(ch, dst_base + i * chunk, i * chunk, chunk);
  }
  for (uint32_t i = 0; ok && i < mine; ++i) ok = weft::port_wait(ch);
  ok = ok && weft::port_flush(ch);
  status[blockIdx.x] = ok ? 1u : 0u;
}

// One thread waits for a signal that never comes; shutting the proxy down must release it.
extern "C" __global__ void weft_port_wait_once(weft::PortChannelDeviceHandle ch, uint32_t* status) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  status[0] = weft::port_wait(ch) ? 1u : 0u;
}

// One direction of `weft bench p2p --channel port`, one thread. The sender pushes `count`
// put-with-signal commands of `bytes` from offset 0 of its memory to offset 0 of the peer's, then
// a flush (every put applied at the peer); the receiver waits for `count` signals. status[0] = 1
// on success, 0 on failure (the error record says which wait).
extern "C" __global__ void weft_port_put_bw(weft::PortChannelDeviceHandle ch, uint32_t bytes, uint32_t count,
                                            uint32_t sender, uint32_t* status) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  bool ok = true;
  if (sender) {
    for (uint32_t i = 0; ok && i < count; ++i) ok = weft::port_put_with_signal(ch, 0, 0, bytes);
    ok = ok && weft::port_flush(ch);
  } else {
    for (uint32_t i = 0; ok && i < count; ++i) ok = weft::port_wait(ch);
  }
  status[0] = ok ? 1u : 0u;
}

// Push throughput (`weft bench fifo`). Pushing threads are the first `lanes` lanes of each warp,
// numbered in grid order, `pushers` of them; pusher p pushes `pushes` commands of op `op` into
// fifos[p % nfifos] (handles in memory the device can read; nfifos <= WEFT_BENCH_MAX_FIFOS).
// Each command carries (pusher, sequence first_seq + i, a check word) for the host's handler,
// which fails the proxy on a lost, repeated, reordered or torn command. Then thread 0 of each
// block waits (bounded) until the proxy consumed the block's last command of each FIFO, so the
// kernel ends once every command was popped. out[0] counts failures; the host times the launch.
#define WEFT_BENCH_MAX_FIFOS 64

__device__ __forceinline__ uint32_t weft_fifo_bench_check_word(uint32_t pusher, uint32_t seq) {
  return (seq ^ (pusher * 0x9E3779B1u)) & ((1u << weft::FIFO_SIZE_BITS) - 1);  // the size field's width
}

extern "C" __global__ void weft_fifo_push_rate(const weft::FifoDeviceHandle* fifos, uint32_t nfifos, uint32_t op,
                                               uint32_t pushers, uint32_t lanes, uint32_t pushes, uint32_t first_seq,
                                               unsigned long long* out) {
  __shared__ unsigned long long last[WEFT_BENCH_MAX_FIFOS];  // last position + 1 per FIFO; 0: none
  __shared__ uint32_t block_failed;
  for (uint32_t i = threadIdx.x; i < nfifos; i += blockDim.x) last[i] = 0;
  if (threadIdx.x == 0) block_failed = 0;
  __syncthreads();
  const uint32_t lane = threadIdx.x % 32u;
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32u;
  const uint32_t pusher = warp * lanes + lane;
  if (lane < lanes && pusher < pushers && pushes != 0) {
    const uint32_t f = pusher % nfifos;
    const weft::FifoDeviceHandle fifo = fifos[f];
    uint64_t pos = 0;
    bool ok = true;
    for (uint32_t i = 0; ok && i < pushes; ++i) {
      const uint32_t seq = first_seq + i;
      const weft::FifoCommand cmd = weft::fifo_command(static_cast<weft::FifoOp>(op), 0, 0, 0, pusher, seq,
                                                       weft_fifo_bench_check_word(pusher, seq));
      ok = weft::fifo_push(fifo, cmd, &pos);
    }
    if (ok) {
      atomicMax(&last[f], static_cast<unsigned long long>(pos + 1));
    } else {
      atomicAdd(&block_failed, 1u);
      atomicAdd(&out[0], 1ull);
    }
  }
  __syncthreads();
  // A failed push leaves a hole the proxy never passes: skip the waits then.
  if (threadIdx.x != 0 || block_failed != 0) return;
  for (uint32_t f = 0; f < nfifos; ++f) {
    if (last[f] != 0 && !weft::fifo_sync(fifos[f], last[f] - 1)) atomicAdd(&out[0], 1ull);
  }
}

// PCIe read latency of host-pinned memory as the GPU sees it (`weft bench fifo` subtracts it
// from the round trip): one thread makes `rounds` acquire loads of the FIFO's tail, as
// fifo_sync polls it, each load's address also depending on the value before (tail values stay
// below 2^63, so the offset is always 0); out[0] = total ns (%globaltimer), out[1] = the sum read.
extern "C" __global__ void weft_host_read_latency(weft::FifoDeviceHandle fifo, uint32_t rounds,
                                                  unsigned long long* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const uint64_t* word = reinterpret_cast<const uint64_t*>(fifo.tail);
  uint64_t sum = 0;
  const uint64_t start = weft::ptx::globaltimer_ns();
  for (uint32_t i = 0; i < rounds; ++i) sum += weft::ptx::ld_acquire_sys(word + (sum >> 63));
  out[0] = weft::ptx::globaltimer_ns() - start;
  out[1] = sum;
}

// Push-to-consumed round trip (`weft bench fifo`): one thread pushes and waits for the proxy to
// pop, `rounds` times; out[0] = total ns (%globaltimer), out[1] = failures.
extern "C" __global__ void weft_fifo_latency(weft::FifoDeviceHandle fifo, uint32_t op, uint32_t rounds,
                                             unsigned long long* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const weft::FifoCommand cmd = weft::fifo_command(static_cast<weft::FifoOp>(op), 0, 0, 0, 0, 0, 0);
  const uint64_t start = weft::ptx::globaltimer_ns();
  for (uint32_t i = 0; i < rounds; ++i) {
    uint64_t pos;
    if (!weft::fifo_push(fifo, cmd, &pos) || !weft::fifo_sync(fifo, pos)) {
      out[1] = 1;
      return;
    }
  }
  out[0] = weft::ptx::globaltimer_ns() - start;
}

// One thread waits (bounded) until the device word `token` reaches `value`, as a kernel's
// port_wait does on a PortChannel's inbound token (the TCP step of the self-test: a device
// inbox stores the token). status[0] = 1 once it did, 0 on timeout (recorded in the error record).
extern "C" __global__ void weft_wait_token(const uint64_t* token, uint64_t value, weft::WaitContext wait,
                                           uint32_t* status) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  weft::Spin spin;
  for (;;) {
    const uint64_t seen = weft::ptx::ld_acquire_sys(token);
    if (seen >= value) {
      status[0] = 1;
      return;
    }
    if (spin.expired(wait)) {
      weft::report_timeout(wait, weft::WaitOp::SemaphoreWait, value, seen);
      status[0] = 0;
      return;
    }
  }
}
