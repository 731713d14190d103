// PortChannel and FIFO self-test kernels (launched by weft-core's port_selftest module).
#include "weft/fifo.cuh"
#include "weft/port_channel.cuh"

// One thread: `chunks` put-with-signal commands of `chunk` bytes from [0, chunks * chunk) of the
// local memory to [dst_base, ...) of the peer's, then waits for the peer's `chunks` signals
// (spinning while this rank's and the peer's proxies move the data: the test that no proxy
// blocks behind a running kernel), then a flush. status[0] = 1 on success, 0 on failure.
extern "C" __global__ void weft_port_exchange(weft::PortChannelDeviceHandle ch, uint32_t chunk, uint32_t chunks,
                                              uint32_t dst_base, uint32_t* status) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  bool ok = true;
  for (uint32_t i = 0; ok && i < chunks; ++i) {
    ok = weft::port_put_with_signal(ch, dst_base + i * chunk, i * chunk, chunk);
  }
  for (uint32_t i = 0; ok && i < chunks; ++i) ok = weft::port_wait(ch);
  ok = ok && weft::port_flush(ch);
  status[0] = ok ? 1u : 0u;
}

// One thread waits for a signal that never comes; shutting the proxy down must release it.
extern "C" __global__ void weft_port_wait_once(weft::PortChannelDeviceHandle ch, uint32_t* status) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  status[0] = weft::port_wait(ch) ? 1u : 0u;
}

// Push throughput: every thread pushes `pushes` commands of op `op` (a handler that only pops
// them), one block's thread 0 measuring; out[0] = ns of the whole kernel as block 0 saw it,
// out[1] = failures.
extern "C" __global__ void weft_fifo_push_rate(weft::FifoDeviceHandle fifo, uint32_t op, uint32_t pushes,
                                               unsigned long long* out) {
  const uint64_t start = weft::ptx::globaltimer_ns();
  const weft::FifoCommand cmd = weft::fifo_command(static_cast<weft::FifoOp>(op), 0, 0, 0, 0, 0, 0);
  uint32_t failed = 0;
  uint64_t pos = 0;
  for (uint32_t i = 0; i < pushes; ++i) {
    if (!weft::fifo_push(fifo, cmd, &pos)) {
      ++failed;
      break;
    }
  }
  if (failed != 0) atomicAdd(&out[1], 1ull);
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    if (failed == 0 && !weft::fifo_sync(fifo, pos)) atomicAdd(&out[1], 1ull);
    out[0] = weft::ptx::globaltimer_ns() - start;
  }
}

// Push-to-consumed latency: one thread pushes and waits for the proxy to pop, `rounds` times;
// out[0] = total ns, out[1] = failures.
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
