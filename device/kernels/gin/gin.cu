// The one translation unit of the GIN kernels: every file below, compiled once.
#include "weft/generated/kernels/gin.cuh"  // the prototypes every definition must match
#include "alltoall.cu"
#include "ring_allgather.cu"
#include "halo.cu"
#include "ping_pong.cu"
#include "put_stream.cu"
