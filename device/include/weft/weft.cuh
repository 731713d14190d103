// weft's device API (the Primitive API): include this from your own kernels, with
// device/include on the include path. Reduction helpers live in weft/reduce.cuh (they pull in
// cuda_fp16.h / cuda_bf16.h).
#pragma once
#include "weft/fifo.cuh"
#include "weft/generated/types.cuh"
#include "weft/memory_channel.cuh"
#include "weft/packet.cuh"
#include "weft/port_channel.cuh"
#include "weft/semaphore.cuh"
#include "weft/wait.cuh"
