// Generated from the device_kernels! declarations of device/tests; do not edit.
// A kernel definition whose parameter list differs from its prototype here is a second
// extern "C" function of the same name, which NVRTC rejects.
#pragma once
#include "weft/generated/types.cuh"
#include "weft/impl/kernel_params.cuh"

// SelftestPingpong: Semaphore ping-pong over a MemoryChannel.
extern "C" __global__ void weft_selftest_pingpong(weft::MemoryChannelDeviceHandle ch, uint32_t iters, uint32_t initiator, uint32_t relaxed, uint64_t* elapsed_ns);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_selftest_pingpong)>) == 80 && alignof(weft::kernel_param_t<0, decltype(weft_selftest_pingpong)>) == 8, "weft_selftest_pingpong: ch is 80 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_selftest_pingpong)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_selftest_pingpong)>) == 4, "weft_selftest_pingpong: iters is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_selftest_pingpong)>) == 4 && alignof(weft::kernel_param_t<2, decltype(weft_selftest_pingpong)>) == 4, "weft_selftest_pingpong: initiator is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_selftest_pingpong)>) == 4 && alignof(weft::kernel_param_t<3, decltype(weft_selftest_pingpong)>) == 4, "weft_selftest_pingpong: relaxed is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_selftest_pingpong)>) == 8 && alignof(weft::kernel_param_t<4, decltype(weft_selftest_pingpong)>) == 8, "weft_selftest_pingpong: elapsed_ns is 8 bytes aligned to 8 in Rust");

// SelftestPut: A put of `bytes` over a MemoryChannel (SM stores, or the TMA's bulk copies), every block
extern "C" __global__ void weft_selftest_put(weft::MemoryChannelDeviceHandle ch, uint64_t dst_offset, uint64_t src_offset, uint64_t bytes, uint32_t signal);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_selftest_put)>) == 80 && alignof(weft::kernel_param_t<0, decltype(weft_selftest_put)>) == 8, "weft_selftest_put: ch is 80 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_selftest_put)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_selftest_put)>) == 8, "weft_selftest_put: dst_offset is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_selftest_put)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_selftest_put)>) == 8, "weft_selftest_put: src_offset is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_selftest_put)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_selftest_put)>) == 8, "weft_selftest_put: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_selftest_put)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_selftest_put)>) == 4, "weft_selftest_put: signal is 4 bytes aligned to 4 in Rust");

// SelftestPut: A put of `bytes` over a MemoryChannel (SM stores, or the TMA's bulk copies), every block
extern "C" __global__ void weft_selftest_bulk_put(weft::MemoryChannelDeviceHandle ch, uint64_t dst_offset, uint64_t src_offset, uint64_t bytes, uint32_t signal);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_selftest_bulk_put)>) == 80 && alignof(weft::kernel_param_t<0, decltype(weft_selftest_bulk_put)>) == 8, "weft_selftest_bulk_put: ch is 80 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_selftest_bulk_put)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_selftest_bulk_put)>) == 8, "weft_selftest_bulk_put: dst_offset is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_selftest_bulk_put)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_selftest_bulk_put)>) == 8, "weft_selftest_bulk_put: src_offset is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_selftest_bulk_put)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_selftest_bulk_put)>) == 8, "weft_selftest_bulk_put: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_selftest_bulk_put)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_selftest_bulk_put)>) == 4, "weft_selftest_bulk_put: signal is 4 bytes aligned to 4 in Rust");

// SelftestGet: A get of `bytes` over a MemoryChannel.
extern "C" __global__ void weft_selftest_get(weft::MemoryChannelDeviceHandle ch, uint64_t dst_offset, uint64_t src_offset, uint64_t bytes);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_selftest_get)>) == 80 && alignof(weft::kernel_param_t<0, decltype(weft_selftest_get)>) == 8, "weft_selftest_get: ch is 80 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_selftest_get)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_selftest_get)>) == 8, "weft_selftest_get: dst_offset is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_selftest_get)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_selftest_get)>) == 8, "weft_selftest_get: src_offset is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_selftest_get)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_selftest_get)>) == 8, "weft_selftest_get: bytes is 8 bytes aligned to 8 in Rust");

// SelftestWait: A wait for `count` signals of the peer.
extern "C" __global__ void weft_selftest_wait(weft::MemoryChannelDeviceHandle ch, uint32_t count);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_selftest_wait)>) == 80 && alignof(weft::kernel_param_t<0, decltype(weft_selftest_wait)>) == 8, "weft_selftest_wait: ch is 80 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_selftest_wait)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_selftest_wait)>) == 4, "weft_selftest_wait: count is 4 bytes aligned to 4 in Rust");

// SelftestLlRound: One LL round trip with the peer (LL8 or LL16 packets).
extern "C" __global__ void weft_selftest_ll8_round(weft::MemoryChannelDeviceHandle ch, uint32_t* flag_slots, uint64_t bytes, uint64_t half_bytes, uint32_t rank, uint32_t peer, uint32_t* errors);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_selftest_ll8_round)>) == 80 && alignof(weft::kernel_param_t<0, decltype(weft_selftest_ll8_round)>) == 8, "weft_selftest_ll8_round: ch is 80 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_selftest_ll8_round)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_selftest_ll8_round)>) == 8, "weft_selftest_ll8_round: flag_slots is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_selftest_ll8_round)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_selftest_ll8_round)>) == 8, "weft_selftest_ll8_round: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_selftest_ll8_round)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_selftest_ll8_round)>) == 8, "weft_selftest_ll8_round: half_bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_selftest_ll8_round)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_selftest_ll8_round)>) == 4, "weft_selftest_ll8_round: rank is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_selftest_ll8_round)>) == 4 && alignof(weft::kernel_param_t<5, decltype(weft_selftest_ll8_round)>) == 4, "weft_selftest_ll8_round: peer is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<6, decltype(weft_selftest_ll8_round)>) == 8 && alignof(weft::kernel_param_t<6, decltype(weft_selftest_ll8_round)>) == 8, "weft_selftest_ll8_round: errors is 8 bytes aligned to 8 in Rust");

// SelftestLlRound: One LL round trip with the peer (LL8 or LL16 packets).
extern "C" __global__ void weft_selftest_ll16_round(weft::MemoryChannelDeviceHandle ch, uint32_t* flag_slots, uint64_t bytes, uint64_t half_bytes, uint32_t rank, uint32_t peer, uint32_t* errors);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_selftest_ll16_round)>) == 80 && alignof(weft::kernel_param_t<0, decltype(weft_selftest_ll16_round)>) == 8, "weft_selftest_ll16_round: ch is 80 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_selftest_ll16_round)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_selftest_ll16_round)>) == 8, "weft_selftest_ll16_round: flag_slots is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_selftest_ll16_round)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_selftest_ll16_round)>) == 8, "weft_selftest_ll16_round: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_selftest_ll16_round)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_selftest_ll16_round)>) == 8, "weft_selftest_ll16_round: half_bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_selftest_ll16_round)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_selftest_ll16_round)>) == 4, "weft_selftest_ll16_round: rank is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_selftest_ll16_round)>) == 4 && alignof(weft::kernel_param_t<5, decltype(weft_selftest_ll16_round)>) == 4, "weft_selftest_ll16_round: peer is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<6, decltype(weft_selftest_ll16_round)>) == 8 && alignof(weft::kernel_param_t<6, decltype(weft_selftest_ll16_round)>) == 8, "weft_selftest_ll16_round: errors is 8 bytes aligned to 8 in Rust");

// SelftestReduce: Element-wise reduction of two vectors of 16-byte words.
extern "C" __global__ void weft_selftest_reduce(const uint4* a, const uint4* b, uint4* out, uint64_t vectors, uint32_t dtype, uint32_t op);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_selftest_reduce)>) == 8 && alignof(weft::kernel_param_t<0, decltype(weft_selftest_reduce)>) == 8, "weft_selftest_reduce: a is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_selftest_reduce)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_selftest_reduce)>) == 8, "weft_selftest_reduce: b is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_selftest_reduce)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_selftest_reduce)>) == 8, "weft_selftest_reduce: out is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_selftest_reduce)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_selftest_reduce)>) == 8, "weft_selftest_reduce: vectors is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_selftest_reduce)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_selftest_reduce)>) == 4, "weft_selftest_reduce: dtype is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_selftest_reduce)>) == 4 && alignof(weft::kernel_param_t<5, decltype(weft_selftest_reduce)>) == 4, "weft_selftest_reduce: op is 4 bytes aligned to 4 in Rust");

// PortExchange: Put-with-signal chunks over one PortChannel per block, then waits and a flush.
extern "C" __global__ void weft_port_exchange(const weft::PortChannelDeviceHandle* chs, uint32_t chunk, uint32_t chunks, uint32_t dst_base, uint32_t* status);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_port_exchange)>) == 8 && alignof(weft::kernel_param_t<0, decltype(weft_port_exchange)>) == 8, "weft_port_exchange: chs is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_port_exchange)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_port_exchange)>) == 4, "weft_port_exchange: chunk is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_port_exchange)>) == 4 && alignof(weft::kernel_param_t<2, decltype(weft_port_exchange)>) == 4, "weft_port_exchange: chunks is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_port_exchange)>) == 4 && alignof(weft::kernel_param_t<3, decltype(weft_port_exchange)>) == 4, "weft_port_exchange: dst_base is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_port_exchange)>) == 8 && alignof(weft::kernel_param_t<4, decltype(weft_port_exchange)>) == 8, "weft_port_exchange: status is 8 bytes aligned to 8 in Rust");

// PortWaitOnce: One wait on a PortChannel.
extern "C" __global__ void weft_port_wait_once(weft::PortChannelDeviceHandle ch, uint32_t* status);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_port_wait_once)>) == 136 && alignof(weft::kernel_param_t<0, decltype(weft_port_wait_once)>) == 8, "weft_port_wait_once: ch is 136 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_port_wait_once)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_port_wait_once)>) == 8, "weft_port_wait_once: status is 8 bytes aligned to 8 in Rust");

// PortPutBandwidth: One direction of `weft bench p2p --channel port`.
extern "C" __global__ void weft_port_put_bw(weft::PortChannelDeviceHandle ch, uint32_t bytes, uint32_t count, uint32_t sender, uint32_t* status);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_port_put_bw)>) == 136 && alignof(weft::kernel_param_t<0, decltype(weft_port_put_bw)>) == 8, "weft_port_put_bw: ch is 136 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_port_put_bw)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_port_put_bw)>) == 4, "weft_port_put_bw: bytes is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_port_put_bw)>) == 4 && alignof(weft::kernel_param_t<2, decltype(weft_port_put_bw)>) == 4, "weft_port_put_bw: count is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_port_put_bw)>) == 4 && alignof(weft::kernel_param_t<3, decltype(weft_port_put_bw)>) == 4, "weft_port_put_bw: sender is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_port_put_bw)>) == 8 && alignof(weft::kernel_param_t<4, decltype(weft_port_put_bw)>) == 8, "weft_port_put_bw: status is 8 bytes aligned to 8 in Rust");

// FifoPushRate: FIFO push rate: `pushers` threads push `pushes` commands each.
extern "C" __global__ void weft_fifo_push_rate(const weft::FifoDeviceHandle* fifos, uint32_t nfifos, uint32_t op, uint32_t pushers, uint32_t lanes, uint32_t pushes, uint32_t first_seq, unsigned long long* out);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_fifo_push_rate)>) == 8 && alignof(weft::kernel_param_t<0, decltype(weft_fifo_push_rate)>) == 8, "weft_fifo_push_rate: fifos is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_fifo_push_rate)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_fifo_push_rate)>) == 4, "weft_fifo_push_rate: nfifos is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_fifo_push_rate)>) == 4 && alignof(weft::kernel_param_t<2, decltype(weft_fifo_push_rate)>) == 4, "weft_fifo_push_rate: op is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_fifo_push_rate)>) == 4 && alignof(weft::kernel_param_t<3, decltype(weft_fifo_push_rate)>) == 4, "weft_fifo_push_rate: pushers is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_fifo_push_rate)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_fifo_push_rate)>) == 4, "weft_fifo_push_rate: lanes is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_fifo_push_rate)>) == 4 && alignof(weft::kernel_param_t<5, decltype(weft_fifo_push_rate)>) == 4, "weft_fifo_push_rate: pushes is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<6, decltype(weft_fifo_push_rate)>) == 4 && alignof(weft::kernel_param_t<6, decltype(weft_fifo_push_rate)>) == 4, "weft_fifo_push_rate: first_seq is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<7, decltype(weft_fifo_push_rate)>) == 8 && alignof(weft::kernel_param_t<7, decltype(weft_fifo_push_rate)>) == 8, "weft_fifo_push_rate: out is 8 bytes aligned to 8 in Rust");

// HostReadLatency: Latency of a device read of host-pinned memory (the FIFO's tail).
extern "C" __global__ void weft_host_read_latency(weft::FifoDeviceHandle fifo, uint32_t rounds, unsigned long long* out);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_host_read_latency)>) == 72 && alignof(weft::kernel_param_t<0, decltype(weft_host_read_latency)>) == 8, "weft_host_read_latency: fifo is 72 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_host_read_latency)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_host_read_latency)>) == 4, "weft_host_read_latency: rounds is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_host_read_latency)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_host_read_latency)>) == 8, "weft_host_read_latency: out is 8 bytes aligned to 8 in Rust");

// FifoLatency: Round-trip latency of a FIFO push and its completion.
extern "C" __global__ void weft_fifo_latency(weft::FifoDeviceHandle fifo, uint32_t op, uint32_t rounds, unsigned long long* out);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_fifo_latency)>) == 72 && alignof(weft::kernel_param_t<0, decltype(weft_fifo_latency)>) == 8, "weft_fifo_latency: fifo is 72 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_fifo_latency)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_fifo_latency)>) == 4, "weft_fifo_latency: op is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_fifo_latency)>) == 4 && alignof(weft::kernel_param_t<2, decltype(weft_fifo_latency)>) == 4, "weft_fifo_latency: rounds is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_fifo_latency)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_fifo_latency)>) == 8, "weft_fifo_latency: out is 8 bytes aligned to 8 in Rust");

// WaitToken: A bounded wait for a host-written token to reach `value`.
extern "C" __global__ void weft_wait_token(const uint64_t* token, uint64_t value, weft::WaitContext wait, uint32_t* status);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_wait_token)>) == 8 && alignof(weft::kernel_param_t<0, decltype(weft_wait_token)>) == 8, "weft_wait_token: token is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_wait_token)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_wait_token)>) == 8, "weft_wait_token: value is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_wait_token)>) == 24 && alignof(weft::kernel_param_t<2, decltype(weft_wait_token)>) == 8, "weft_wait_token: wait is 24 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_wait_token)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_wait_token)>) == 8, "weft_wait_token: status is 8 bytes aligned to 8 in Rust");
