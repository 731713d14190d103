// The one translation unit of the EP kernels: every file below, compiled once into one module.
#include "weft/generated/kernels/ep.cuh"  // the prototypes every definition must match
#include "layout.cu"
#include "notify.cu"
#include "dispatch.cu"
#include "combine.cu"
#include "ll_dispatch.cu"
#include "ll_combine.cu"
#include "rail.cu"
