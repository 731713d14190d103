// Generated from the device_kernels! declarations of device/kernels/coll; do not edit.
// A kernel definition whose parameter list differs from its prototype here is a second
// extern "C" function of the same name, which NVRTC rejects.
#pragma once
#include "weft/generated/types.cuh"
#include "weft/impl/kernel_params.cuh"

// Flat: A collective from one input into one output per rank.
extern "C" __global__ void weft_allreduce_ll(weft::CollContext c, const char* input, char* output, uint64_t bytes);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allreduce_ll)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allreduce_ll)>) == 8, "weft_allreduce_ll: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allreduce_ll)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allreduce_ll)>) == 8, "weft_allreduce_ll: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allreduce_ll)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allreduce_ll)>) == 8, "weft_allreduce_ll: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allreduce_ll)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allreduce_ll)>) == 8, "weft_allreduce_ll: bytes is 8 bytes aligned to 8 in Rust");

// Flat: A collective from one input into one output per rank.
extern "C" __global__ void weft_allreduce_ll2(weft::CollContext c, const char* input, char* output, uint64_t bytes);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allreduce_ll2)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allreduce_ll2)>) == 8, "weft_allreduce_ll2: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allreduce_ll2)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allreduce_ll2)>) == 8, "weft_allreduce_ll2: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allreduce_ll2)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allreduce_ll2)>) == 8, "weft_allreduce_ll2: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allreduce_ll2)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allreduce_ll2)>) == 8, "weft_allreduce_ll2: bytes is 8 bytes aligned to 8 in Rust");

// Flat: A collective from one input into one output per rank.
extern "C" __global__ void weft_allreduce_ll128(weft::CollContext c, const char* input, char* output, uint64_t bytes);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allreduce_ll128)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allreduce_ll128)>) == 8, "weft_allreduce_ll128: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allreduce_ll128)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allreduce_ll128)>) == 8, "weft_allreduce_ll128: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allreduce_ll128)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allreduce_ll128)>) == 8, "weft_allreduce_ll128: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allreduce_ll128)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allreduce_ll128)>) == 8, "weft_allreduce_ll128: bytes is 8 bytes aligned to 8 in Rust");

// Flat: A collective from one input into one output per rank.
extern "C" __global__ void weft_allreduce_ring(weft::CollContext c, const char* input, char* output, uint64_t bytes);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allreduce_ring)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allreduce_ring)>) == 8, "weft_allreduce_ring: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allreduce_ring)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allreduce_ring)>) == 8, "weft_allreduce_ring: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allreduce_ring)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allreduce_ring)>) == 8, "weft_allreduce_ring: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allreduce_ring)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allreduce_ring)>) == 8, "weft_allreduce_ring: bytes is 8 bytes aligned to 8 in Rust");

// Flat: A collective from one input into one output per rank.
extern "C" __global__ void weft_reduce_scatter_ll(weft::CollContext c, const char* input, char* output, uint64_t bytes);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_reduce_scatter_ll)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_reduce_scatter_ll)>) == 8, "weft_reduce_scatter_ll: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_reduce_scatter_ll)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_reduce_scatter_ll)>) == 8, "weft_reduce_scatter_ll: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_reduce_scatter_ll)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_reduce_scatter_ll)>) == 8, "weft_reduce_scatter_ll: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_reduce_scatter_ll)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_reduce_scatter_ll)>) == 8, "weft_reduce_scatter_ll: bytes is 8 bytes aligned to 8 in Rust");

// Flat: A collective from one input into one output per rank.
extern "C" __global__ void weft_reduce_scatter_ll128(weft::CollContext c, const char* input, char* output, uint64_t bytes);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_reduce_scatter_ll128)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_reduce_scatter_ll128)>) == 8, "weft_reduce_scatter_ll128: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_reduce_scatter_ll128)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_reduce_scatter_ll128)>) == 8, "weft_reduce_scatter_ll128: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_reduce_scatter_ll128)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_reduce_scatter_ll128)>) == 8, "weft_reduce_scatter_ll128: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_reduce_scatter_ll128)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_reduce_scatter_ll128)>) == 8, "weft_reduce_scatter_ll128: bytes is 8 bytes aligned to 8 in Rust");

// Flat: A collective from one input into one output per rank.
extern "C" __global__ void weft_reduce_scatter_hb(weft::CollContext c, const char* input, char* output, uint64_t bytes);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_reduce_scatter_hb)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_reduce_scatter_hb)>) == 8, "weft_reduce_scatter_hb: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_reduce_scatter_hb)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_reduce_scatter_hb)>) == 8, "weft_reduce_scatter_hb: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_reduce_scatter_hb)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_reduce_scatter_hb)>) == 8, "weft_reduce_scatter_hb: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_reduce_scatter_hb)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_reduce_scatter_hb)>) == 8, "weft_reduce_scatter_hb: bytes is 8 bytes aligned to 8 in Rust");

// Flat: A collective from one input into one output per rank.
extern "C" __global__ void weft_allgather_ll(weft::CollContext c, const char* input, char* output, uint64_t bytes);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allgather_ll)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allgather_ll)>) == 8, "weft_allgather_ll: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allgather_ll)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allgather_ll)>) == 8, "weft_allgather_ll: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allgather_ll)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allgather_ll)>) == 8, "weft_allgather_ll: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allgather_ll)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allgather_ll)>) == 8, "weft_allgather_ll: bytes is 8 bytes aligned to 8 in Rust");

// Flat: A collective from one input into one output per rank.
extern "C" __global__ void weft_allgather_ll128(weft::CollContext c, const char* input, char* output, uint64_t bytes);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allgather_ll128)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allgather_ll128)>) == 8, "weft_allgather_ll128: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allgather_ll128)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allgather_ll128)>) == 8, "weft_allgather_ll128: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allgather_ll128)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allgather_ll128)>) == 8, "weft_allgather_ll128: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allgather_ll128)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allgather_ll128)>) == 8, "weft_allgather_ll128: bytes is 8 bytes aligned to 8 in Rust");

// AllReduceHb: HB AllReduce through scratch: [`Flat`] plus every rank's output as this GPU addresses
extern "C" __global__ void weft_allreduce_hb(weft::CollContext c, const char* input, char* output, uint64_t bytes, weft::PeerBuffers outputs);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allreduce_hb)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allreduce_hb)>) == 8, "weft_allreduce_hb: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allreduce_hb)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allreduce_hb)>) == 8, "weft_allreduce_hb: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allreduce_hb)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allreduce_hb)>) == 8, "weft_allreduce_hb: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allreduce_hb)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allreduce_hb)>) == 8, "weft_allreduce_hb: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_allreduce_hb)>) == 64 && alignof(weft::kernel_param_t<4, decltype(weft_allreduce_hb)>) == 8, "weft_allreduce_hb: outputs is 64 bytes aligned to 8 in Rust");

// AllReduceDirect: HB AllReduce straight between the ranks' windows (the direct two-shot): every rank's
extern "C" __global__ void weft_allreduce_hb_direct(weft::CollContext c, uint64_t bytes, weft::PeerBuffers inputs, weft::PeerBuffers outputs);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allreduce_hb_direct)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allreduce_hb_direct)>) == 8, "weft_allreduce_hb_direct: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allreduce_hb_direct)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allreduce_hb_direct)>) == 8, "weft_allreduce_hb_direct: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allreduce_hb_direct)>) == 64 && alignof(weft::kernel_param_t<2, decltype(weft_allreduce_hb_direct)>) == 8, "weft_allreduce_hb_direct: inputs is 64 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allreduce_hb_direct)>) == 64 && alignof(weft::kernel_param_t<3, decltype(weft_allreduce_hb_direct)>) == 8, "weft_allreduce_hb_direct: outputs is 64 bytes aligned to 8 in Rust");

// AllGatherHb: HB AllGather: through scratch, or straight into the peers' registered outputs.
extern "C" __global__ void weft_allgather_hb(weft::CollContext c, const char* input, char* output, uint64_t bytes, weft::PeerBuffers outputs);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allgather_hb)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allgather_hb)>) == 8, "weft_allgather_hb: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allgather_hb)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allgather_hb)>) == 8, "weft_allgather_hb: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allgather_hb)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allgather_hb)>) == 8, "weft_allgather_hb: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allgather_hb)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allgather_hb)>) == 8, "weft_allgather_hb: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_allgather_hb)>) == 64 && alignof(weft::kernel_param_t<4, decltype(weft_allgather_hb)>) == 8, "weft_allgather_hb: outputs is 64 bytes aligned to 8 in Rust");

// Rooted: A collective with a root (Broadcast, Reduce).
extern "C" __global__ void weft_broadcast_ll(weft::CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_broadcast_ll)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_broadcast_ll)>) == 8, "weft_broadcast_ll: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_broadcast_ll)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_broadcast_ll)>) == 8, "weft_broadcast_ll: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_broadcast_ll)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_broadcast_ll)>) == 8, "weft_broadcast_ll: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_broadcast_ll)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_broadcast_ll)>) == 8, "weft_broadcast_ll: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_broadcast_ll)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_broadcast_ll)>) == 4, "weft_broadcast_ll: root is 4 bytes aligned to 4 in Rust");

// Rooted: A collective with a root (Broadcast, Reduce).
extern "C" __global__ void weft_broadcast_hb(weft::CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_broadcast_hb)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_broadcast_hb)>) == 8, "weft_broadcast_hb: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_broadcast_hb)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_broadcast_hb)>) == 8, "weft_broadcast_hb: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_broadcast_hb)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_broadcast_hb)>) == 8, "weft_broadcast_hb: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_broadcast_hb)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_broadcast_hb)>) == 8, "weft_broadcast_hb: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_broadcast_hb)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_broadcast_hb)>) == 4, "weft_broadcast_hb: root is 4 bytes aligned to 4 in Rust");

// Rooted: A collective with a root (Broadcast, Reduce).
extern "C" __global__ void weft_broadcast_chain(weft::CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_broadcast_chain)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_broadcast_chain)>) == 8, "weft_broadcast_chain: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_broadcast_chain)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_broadcast_chain)>) == 8, "weft_broadcast_chain: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_broadcast_chain)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_broadcast_chain)>) == 8, "weft_broadcast_chain: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_broadcast_chain)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_broadcast_chain)>) == 8, "weft_broadcast_chain: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_broadcast_chain)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_broadcast_chain)>) == 4, "weft_broadcast_chain: root is 4 bytes aligned to 4 in Rust");

// Rooted: A collective with a root (Broadcast, Reduce).
extern "C" __global__ void weft_broadcast_ll128(weft::CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_broadcast_ll128)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_broadcast_ll128)>) == 8, "weft_broadcast_ll128: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_broadcast_ll128)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_broadcast_ll128)>) == 8, "weft_broadcast_ll128: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_broadcast_ll128)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_broadcast_ll128)>) == 8, "weft_broadcast_ll128: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_broadcast_ll128)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_broadcast_ll128)>) == 8, "weft_broadcast_ll128: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_broadcast_ll128)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_broadcast_ll128)>) == 4, "weft_broadcast_ll128: root is 4 bytes aligned to 4 in Rust");

// Rooted: A collective with a root (Broadcast, Reduce).
extern "C" __global__ void weft_reduce_ll(weft::CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_reduce_ll)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_reduce_ll)>) == 8, "weft_reduce_ll: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_reduce_ll)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_reduce_ll)>) == 8, "weft_reduce_ll: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_reduce_ll)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_reduce_ll)>) == 8, "weft_reduce_ll: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_reduce_ll)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_reduce_ll)>) == 8, "weft_reduce_ll: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_reduce_ll)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_reduce_ll)>) == 4, "weft_reduce_ll: root is 4 bytes aligned to 4 in Rust");

// Rooted: A collective with a root (Broadcast, Reduce).
extern "C" __global__ void weft_reduce_hb(weft::CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_reduce_hb)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_reduce_hb)>) == 8, "weft_reduce_hb: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_reduce_hb)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_reduce_hb)>) == 8, "weft_reduce_hb: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_reduce_hb)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_reduce_hb)>) == 8, "weft_reduce_hb: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_reduce_hb)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_reduce_hb)>) == 8, "weft_reduce_hb: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_reduce_hb)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_reduce_hb)>) == 4, "weft_reduce_hb: root is 4 bytes aligned to 4 in Rust");

// Rooted: A collective with a root (Broadcast, Reduce).
extern "C" __global__ void weft_reduce_chain(weft::CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_reduce_chain)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_reduce_chain)>) == 8, "weft_reduce_chain: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_reduce_chain)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_reduce_chain)>) == 8, "weft_reduce_chain: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_reduce_chain)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_reduce_chain)>) == 8, "weft_reduce_chain: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_reduce_chain)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_reduce_chain)>) == 8, "weft_reduce_chain: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_reduce_chain)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_reduce_chain)>) == 4, "weft_reduce_chain: root is 4 bytes aligned to 4 in Rust");

// Rooted: A collective with a root (Broadcast, Reduce).
extern "C" __global__ void weft_reduce_ll128(weft::CollContext c, const char* input, char* output, uint64_t bytes, uint32_t root);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_reduce_ll128)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_reduce_ll128)>) == 8, "weft_reduce_ll128: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_reduce_ll128)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_reduce_ll128)>) == 8, "weft_reduce_ll128: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_reduce_ll128)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_reduce_ll128)>) == 8, "weft_reduce_ll128: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_reduce_ll128)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_reduce_ll128)>) == 8, "weft_reduce_ll128: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_reduce_ll128)>) == 4 && alignof(weft::kernel_param_t<4, decltype(weft_reduce_ll128)>) == 4, "weft_reduce_ll128: root is 4 bytes aligned to 4 in Rust");

// ReduceDirect: Reduce's direct form (`weft_reduce_direct`): [`Rooted`] with every rank's input as
extern "C" __global__ void weft_reduce_direct(weft::CollContext c, char* output, uint64_t bytes, uint32_t root, weft::PeerBuffers inputs);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_reduce_direct)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_reduce_direct)>) == 8, "weft_reduce_direct: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_reduce_direct)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_reduce_direct)>) == 8, "weft_reduce_direct: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_reduce_direct)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_reduce_direct)>) == 8, "weft_reduce_direct: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_reduce_direct)>) == 4 && alignof(weft::kernel_param_t<3, decltype(weft_reduce_direct)>) == 4, "weft_reduce_direct: root is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_reduce_direct)>) == 64 && alignof(weft::kernel_param_t<4, decltype(weft_reduce_direct)>) == 8, "weft_reduce_direct: inputs is 64 bytes aligned to 8 in Rust");

// ReduceScatterDirect: ReduceScatter's direct form (`weft_reduce_scatter_direct`): rank r folds block r of
extern "C" __global__ void weft_reduce_scatter_direct(weft::CollContext c, char* output, uint64_t shard_bytes, weft::PeerBuffers inputs);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_reduce_scatter_direct)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_reduce_scatter_direct)>) == 8, "weft_reduce_scatter_direct: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_reduce_scatter_direct)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_reduce_scatter_direct)>) == 8, "weft_reduce_scatter_direct: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_reduce_scatter_direct)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_reduce_scatter_direct)>) == 8, "weft_reduce_scatter_direct: shard_bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_reduce_scatter_direct)>) == 64 && alignof(weft::kernel_param_t<3, decltype(weft_reduce_scatter_direct)>) == 8, "weft_reduce_scatter_direct: inputs is 64 bytes aligned to 8 in Rust");

// P2p: One round of grouped sends and receives (AllToAll, grouped send/receive).
extern "C" __global__ void weft_p2p(weft::CollContext c, weft::P2pPlan plan);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_p2p)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_p2p)>) == 8, "weft_p2p: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_p2p)>) == 256 && alignof(weft::kernel_param_t<1, decltype(weft_p2p)>) == 8, "weft_p2p: plan is 256 bytes aligned to 8 in Rust");

// P2pLl: The small directions of one round of grouped sends and receives, over LL packets.
extern "C" __global__ void weft_p2p_ll(weft::CollContext c, weft::P2pPlan plan, weft::LlPairs pairs);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_p2p_ll)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_p2p_ll)>) == 8, "weft_p2p_ll: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_p2p_ll)>) == 256 && alignof(weft::kernel_param_t<1, decltype(weft_p2p_ll)>) == 8, "weft_p2p_ll: plan is 256 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_p2p_ll)>) == 48 && alignof(weft::kernel_param_t<2, decltype(weft_p2p_ll)>) == 8, "weft_p2p_ll: pairs is 48 bytes aligned to 8 in Rust");

// PortRingParams: AllReduce over a ring of PortChannels.
extern "C" __global__ void weft_allreduce_port_ring(weft::CollContext c, const char* input, char* output, uint64_t bytes, const weft::PortChannelDeviceHandle* channels, uint32_t lanes, char* scratch, uint64_t slot_bytes, uint64_t* state);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allreduce_port_ring)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allreduce_port_ring)>) == 8, "weft_allreduce_port_ring: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allreduce_port_ring)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allreduce_port_ring)>) == 8, "weft_allreduce_port_ring: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allreduce_port_ring)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allreduce_port_ring)>) == 8, "weft_allreduce_port_ring: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allreduce_port_ring)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allreduce_port_ring)>) == 8, "weft_allreduce_port_ring: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_allreduce_port_ring)>) == 8 && alignof(weft::kernel_param_t<4, decltype(weft_allreduce_port_ring)>) == 8, "weft_allreduce_port_ring: channels is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_allreduce_port_ring)>) == 4 && alignof(weft::kernel_param_t<5, decltype(weft_allreduce_port_ring)>) == 4, "weft_allreduce_port_ring: lanes is 4 bytes aligned to 4 in Rust");
static_assert(sizeof(weft::kernel_param_t<6, decltype(weft_allreduce_port_ring)>) == 8 && alignof(weft::kernel_param_t<6, decltype(weft_allreduce_port_ring)>) == 8, "weft_allreduce_port_ring: scratch is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<7, decltype(weft_allreduce_port_ring)>) == 8 && alignof(weft::kernel_param_t<7, decltype(weft_allreduce_port_ring)>) == 8, "weft_allreduce_port_ring: slot_bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<8, decltype(weft_allreduce_port_ring)>) == 8 && alignof(weft::kernel_param_t<8, decltype(weft_allreduce_port_ring)>) == 8, "weft_allreduce_port_ring: state is 8 bytes aligned to 8 in Rust");

// PortAllPairsParams: AllReduce by puts to every peer over PortChannels.
extern "C" __global__ void weft_allreduce_port_allpairs(weft::CollContext c, const char* input, char* output, uint64_t bytes, const weft::PortChannelDeviceHandle* channels, char* scratch, uint64_t slot_bytes, uint64_t* state);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allreduce_port_allpairs)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allreduce_port_allpairs)>) == 8, "weft_allreduce_port_allpairs: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allreduce_port_allpairs)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allreduce_port_allpairs)>) == 8, "weft_allreduce_port_allpairs: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allreduce_port_allpairs)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allreduce_port_allpairs)>) == 8, "weft_allreduce_port_allpairs: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allreduce_port_allpairs)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allreduce_port_allpairs)>) == 8, "weft_allreduce_port_allpairs: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_allreduce_port_allpairs)>) == 8 && alignof(weft::kernel_param_t<4, decltype(weft_allreduce_port_allpairs)>) == 8, "weft_allreduce_port_allpairs: channels is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_allreduce_port_allpairs)>) == 8 && alignof(weft::kernel_param_t<5, decltype(weft_allreduce_port_allpairs)>) == 8, "weft_allreduce_port_allpairs: scratch is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<6, decltype(weft_allreduce_port_allpairs)>) == 8 && alignof(weft::kernel_param_t<6, decltype(weft_allreduce_port_allpairs)>) == 8, "weft_allreduce_port_allpairs: slot_bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<7, decltype(weft_allreduce_port_allpairs)>) == 8 && alignof(weft::kernel_param_t<7, decltype(weft_allreduce_port_allpairs)>) == 8, "weft_allreduce_port_allpairs: state is 8 bytes aligned to 8 in Rust");

// GinAllReduceParams: The AllReduces across nodes on a device communicator (GIN), `nvrar` and `2ph`.
extern "C" __global__ void weft_allreduce_nvrar(weft::CollContext c, const char* input, char* output, uint64_t bytes, weft::DevCommHandle gin, uint64_t round_bytes, uint64_t slot_bytes, uint64_t* state);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allreduce_nvrar)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allreduce_nvrar)>) == 8, "weft_allreduce_nvrar: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allreduce_nvrar)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allreduce_nvrar)>) == 8, "weft_allreduce_nvrar: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allreduce_nvrar)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allreduce_nvrar)>) == 8, "weft_allreduce_nvrar: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allreduce_nvrar)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allreduce_nvrar)>) == 8, "weft_allreduce_nvrar: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_allreduce_nvrar)>) == 144 && alignof(weft::kernel_param_t<4, decltype(weft_allreduce_nvrar)>) == 8, "weft_allreduce_nvrar: gin is 144 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_allreduce_nvrar)>) == 8 && alignof(weft::kernel_param_t<5, decltype(weft_allreduce_nvrar)>) == 8, "weft_allreduce_nvrar: round_bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<6, decltype(weft_allreduce_nvrar)>) == 8 && alignof(weft::kernel_param_t<6, decltype(weft_allreduce_nvrar)>) == 8, "weft_allreduce_nvrar: slot_bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<7, decltype(weft_allreduce_nvrar)>) == 8 && alignof(weft::kernel_param_t<7, decltype(weft_allreduce_nvrar)>) == 8, "weft_allreduce_nvrar: state is 8 bytes aligned to 8 in Rust");

// GinAllReduceParams: The AllReduces across nodes on a device communicator (GIN), `nvrar` and `2ph`.
extern "C" __global__ void weft_allreduce_2ph(weft::CollContext c, const char* input, char* output, uint64_t bytes, weft::DevCommHandle gin, uint64_t round_bytes, uint64_t slot_bytes, uint64_t* state);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_allreduce_2ph)>) == 112 && alignof(weft::kernel_param_t<0, decltype(weft_allreduce_2ph)>) == 8, "weft_allreduce_2ph: c is 112 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_allreduce_2ph)>) == 8 && alignof(weft::kernel_param_t<1, decltype(weft_allreduce_2ph)>) == 8, "weft_allreduce_2ph: input is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<2, decltype(weft_allreduce_2ph)>) == 8 && alignof(weft::kernel_param_t<2, decltype(weft_allreduce_2ph)>) == 8, "weft_allreduce_2ph: output is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<3, decltype(weft_allreduce_2ph)>) == 8 && alignof(weft::kernel_param_t<3, decltype(weft_allreduce_2ph)>) == 8, "weft_allreduce_2ph: bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<4, decltype(weft_allreduce_2ph)>) == 144 && alignof(weft::kernel_param_t<4, decltype(weft_allreduce_2ph)>) == 8, "weft_allreduce_2ph: gin is 144 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<5, decltype(weft_allreduce_2ph)>) == 8 && alignof(weft::kernel_param_t<5, decltype(weft_allreduce_2ph)>) == 8, "weft_allreduce_2ph: round_bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<6, decltype(weft_allreduce_2ph)>) == 8 && alignof(weft::kernel_param_t<6, decltype(weft_allreduce_2ph)>) == 8, "weft_allreduce_2ph: slot_bytes is 8 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<7, decltype(weft_allreduce_2ph)>) == 8 && alignof(weft::kernel_param_t<7, decltype(weft_allreduce_2ph)>) == 8, "weft_allreduce_2ph: state is 8 bytes aligned to 8 in Rust");
