// Generated from the device_kernels! declarations of device/kernels/exec; do not edit.
// A kernel definition whose parameter list differs from its prototype here is a second
// extern "C" function of the same name, which NVRTC rejects.
#pragma once
#include "weft/generated/types.cuh"
#include "weft/impl/kernel_params.cuh"

// Execute: One launch of this rank's plan.
extern "C" __global__ void weft_execute(weft::ExecContext c, const __grid_constant__ weft::PeerBuffers outputs);
static_assert(sizeof(weft::kernel_param_t<0, decltype(weft_execute)>) == 216 && alignof(weft::kernel_param_t<0, decltype(weft_execute)>) == 8, "weft_execute: c is 216 bytes aligned to 8 in Rust");
static_assert(sizeof(weft::kernel_param_t<1, decltype(weft_execute)>) == 64 && alignof(weft::kernel_param_t<1, decltype(weft_execute)>) == 8, "weft_execute: outputs is 64 bytes aligned to 8 in Rust");
