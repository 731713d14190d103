// weft's device API (the Primitive API): include this from your own kernels, with
// device/include on the include path. The element types and reduction operators of the
// collectives live in weft/elementwise.cuh (it pulls in cuda_fp16.h, cuda_bf16.h, cuda_fp8.h).
#pragma once
#include "weft/fifo.cuh"
#include "weft/generated/types.cuh"
#include "weft/memory_channel.cuh"
#include "weft/packet.cuh"
#include "weft/port_channel.cuh"
#include "weft/semaphore.cuh"
#include "weft/transfer.cuh"
#include "weft/wait.cuh"
