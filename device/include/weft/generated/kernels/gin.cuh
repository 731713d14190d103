// Generated from the device_kernels! declarations of device/kernels/gin; do not edit.
// A kernel definition whose parameter list differs from its prototype here is a second
// extern "C" function of the same name, which NVRTC rejects.
#pragma once
#include "weft/generated/types.cuh"
#include "weft/impl/kernel_params.cuh"

// AllToAll: AllToAll with put + signal (`device/kernels/gin/alltoall.cu`).
extern "C" __global__ void weft_gin_alltoall(weft::DevCommHandle h, uint32_t send, uint32_t recv, uint64_t chunk, uint32_t signal, uint32_t barrier);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_gin_alltoall)>) == 144 && alignof(weft::kernel_param_t<0, decltype(weft_gin_alltoall)>) == 8, "weft_gin_alltoall: h is 144 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_gin_alltoall)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_gin_alltoall)>) == 4, "weft_gin_alltoall: send is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_gin_alltoall)>) == 4 && alignof(weft::kernel_param_t<2, decltype(weft_gin_alltoall)>) == 4, "weft_gin_alltoall: recv is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_gin_alltoall)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_gin_alltoall)>) == 8, "weft_gin_alltoall: chunk is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_gin_alltoall)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_gin_alltoall)>) == 4, "weft_gin_alltoall: signal is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_gin_alltoall)>) == 4 && alignof(weft::kernel_param_t<5, decltype(weft_gin_alltoall)>) == 4, "weft_gin_alltoall: barrier is 4 bytes aligned to 4 in Rust");

// RingAllGather: Ring AllGather with put + signal (`device/kernels/gin/ring_allgather.cu`).
extern "C" __global__ void weft_gin_ring_allgather(weft::DevCommHandle h, uint32_t data, uint64_t chunk, uint32_t signal, uint32_t barrier);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_gin_ring_allgather)>) == 144 && alignof(weft::kernel_param_t<0, decltype(weft_gin_ring_allgather)>) == 8, "weft_gin_ring_allgather: h is 144 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_gin_ring_allgather)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_gin_ring_allgather)>) == 4, "weft_gin_ring_allgather: data is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_gin_ring_allgather)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_gin_ring_allgather)>) == 8, "weft_gin_ring_allgather: chunk is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_gin_ring_allgather)>) == 4 && alignof(weft::kernel_param_t<3, decltype(weft_gin_ring_allgather)>) == 4, "weft_gin_ring_allgather: signal is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_gin_ring_allgather)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_gin_ring_allgather)>) == 4, "weft_gin_ring_allgather: barrier is 4 bytes aligned to 4 in Rust");

// Halo: Halo exchange on a ring of ranks (`device/kernels/gin/halo.cu`).
extern "C" __global__ void weft_gin_halo(weft::DevCommHandle h, uint32_t field, uint64_t halo, uint64_t interior, uint32_t signal, uint32_t barrier);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_gin_halo)>) == 144 && alignof(weft::kernel_param_t<0, decltype(weft_gin_halo)>) == 8, "weft_gin_halo: h is 144 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_gin_halo)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_gin_halo)>) == 4, "weft_gin_halo: field is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_gin_halo)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_gin_halo)>) == 8, "weft_gin_halo: halo is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_gin_halo)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_gin_halo)>) == 8, "weft_gin_halo: interior is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_gin_halo)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_gin_halo)>) == 4, "weft_gin_halo: signal is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_gin_halo)>) == 4 && alignof(weft::kernel_param_t<5, decltype(weft_gin_halo)>) == 4, "weft_gin_halo: barrier is 4 bytes aligned to 4 in Rust");

// PingPong: Put + signal ping-pong between ranks 0 and 1 (`device/kernels/gin/ping_pong.cu`).
extern "C" __global__ void weft_gin_ping_pong(weft::DevCommHandle h, uint32_t data, uint64_t bytes, uint32_t rounds, uint32_t signal, uint32_t barrier);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_gin_ping_pong)>) == 144 && alignof(weft::kernel_param_t<0, decltype(weft_gin_ping_pong)>) == 8, "weft_gin_ping_pong: h is 144 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_gin_ping_pong)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_gin_ping_pong)>) == 4, "weft_gin_ping_pong: data is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_gin_ping_pong)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_gin_ping_pong)>) == 8, "weft_gin_ping_pong: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_gin_ping_pong)>) == 4 && alignof(weft::kernel_param_t<3, decltype(weft_gin_ping_pong)>) == 4, "weft_gin_ping_pong: rounds is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_gin_ping_pong)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_gin_ping_pong)>) == 4, "weft_gin_ping_pong: signal is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_gin_ping_pong)>) == 4 && alignof(weft::kernel_param_t<5, decltype(weft_gin_ping_pong)>) == 4, "weft_gin_ping_pong: barrier is 4 bytes aligned to 4 in Rust");

// PutStream: A stream of puts + signal from rank 0 to rank 1 (`device/kernels/gin/put_stream.cu`).
extern "C" __global__ void weft_gin_put_stream(weft::DevCommHandle h, uint32_t data, uint64_t bytes, uint32_t messages, uint32_t signal, uint32_t barrier);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_gin_put_stream)>) == 144 && alignof(weft::kernel_param_t<0, decltype(weft_gin_put_stream)>) == 8, "weft_gin_put_stream: h is 144 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_gin_put_stream)>) == 4 && alignof(weft::kernel_param_t<1, decltype(weft_gin_put_stream)>) == 4, "weft_gin_put_stream: data is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_gin_put_stream)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_gin_put_stream)>) == 8, "weft_gin_put_stream: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_gin_put_stream)>) == 4 && alignof(weft::kernel_param_t<3, decltype(weft_gin_put_stream)>) == 4, "weft_gin_put_stream: messages is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_gin_put_stream)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_gin_put_stream)>) == 4, "weft_gin_put_stream: signal is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_gin_put_stream)>) == 4 && alignof(weft::kernel_param_t<5, decltype(weft_gin_put_stream)>) == 4, "weft_gin_put_stream: barrier is 4 bytes aligned to 4 in Rust");
