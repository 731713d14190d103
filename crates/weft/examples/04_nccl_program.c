/* 04: a C program against libnccl.so.2, using the NCCL API only (nccl.h, and the CUDA runtime
 * for memory and streams). It runs unchanged on weft's libnccl.so.2 or on NVIDIA's.
 *
 * It prints the library's version, makes one communicator per visible GPU in this process
 * (ncclCommInitAll), AllReduces (sum) a float vector on every GPU in one group, and checks every
 * element of every result.
 *
 * Build and run against weft's library (scripts/nccl-header.sh installs the reference nccl.h and
 * the CUDA runtime beside it; `cargo build --release -p weft-nccl` builds target/release/libnccl.so):
 *
 *   H="$(scripts/nccl-header.sh)"; CU="$H/../../cu13"; LIB="$PWD/target/release"
 *   ln -sf libnccl.so "$LIB/libnccl.so.2"
 *   gcc -std=gnu11 -Wall -Wextra -I"$H" -I"$CU/include/cccl" -I"$CU/include" \
 *       crates/weft/examples/04_nccl_program.c -o /tmp/04_nccl_program \
 *       -L"$LIB" -lnccl -L"$CU/lib" -l:libcudart.so.13 -Wl,-rpath,"$LIB:$CU/lib"
 *   /tmp/04_nccl_program
 *
 * Without a GPU it prints that it skipped and exits 0; with WEFT_REQUIRE_GPU=1 it exits 1. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 16
#define COUNT (1 << 20)

#define CUDA_OK(call)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "%s failed: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)

#define NCCL_OK(call)                                                                        \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess) {                                                                 \
      fprintf(stderr, "%s failed: %s (%s, line %d)\n", #call, ncclGetErrorString(r_),        \
              ncclGetLastError(NULL) ? ncclGetLastError(NULL) : "", __LINE__);               \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

/* Element i of GPU g's input: small integers, so every sum is exact in float. */
static float input(int g, int i) { return (float)((g + 1) * (i % 13)); }

int main(void) {
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  printf("libnccl version %d (%d.%d.%d)\n", version, version / 10000, version / 100 % 100, version % 100);

  int ndev = 0;
  cudaError_t counted = cudaGetDeviceCount(&ndev);
  if (counted != cudaSuccess || ndev == 0) {
    const char* why = counted != cudaSuccess ? cudaGetErrorString(counted) : "no CUDA device is visible";
    const char* require = getenv("WEFT_REQUIRE_GPU");
    if (require && strcmp(require, "1") == 0) {
      fprintf(stderr, "04_nccl_program needs a GPU and WEFT_REQUIRE_GPU=1 forbids skipping: %s\n", why);
      return 1;
    }
    printf("04_nccl_program: SKIPPED: this example needs a GPU (%s); set WEFT_REQUIRE_GPU=1 to make that an error\n", why);
    return 0;
  }
  if (ndev > MAX_GPUS) ndev = MAX_GPUS;

  ncclComm_t comms[MAX_GPUS];
  cudaStream_t streams[MAX_GPUS];
  float* send[MAX_GPUS];
  float* recv[MAX_GPUS];
  float* host = malloc(COUNT * sizeof(float));
  if (!host) return 1;
  NCCL_OK(ncclCommInitAll(comms, ndev, NULL)); /* NULL: GPUs 0..ndev-1 */
  for (int g = 0; g < ndev; ++g) {
    CUDA_OK(cudaSetDevice(g));
    CUDA_OK(cudaStreamCreate(&streams[g]));
    CUDA_OK(cudaMalloc((void**)&send[g], COUNT * sizeof(float)));
    CUDA_OK(cudaMalloc((void**)&recv[g], COUNT * sizeof(float)));
    for (int i = 0; i < COUNT; ++i) host[i] = input(g, i);
    CUDA_OK(cudaMemcpy(send[g], host, COUNT * sizeof(float), cudaMemcpyHostToDevice));
  }

  /* One thread drives every GPU: the calls of all communicators form one group. */
  NCCL_OK(ncclGroupStart());
  for (int g = 0; g < ndev; ++g) {
    NCCL_OK(ncclAllReduce(send[g], recv[g], COUNT, ncclFloat, ncclSum, comms[g], streams[g]));
  }
  NCCL_OK(ncclGroupEnd());

  int wrong = 0;
  for (int g = 0; g < ndev; ++g) {
    CUDA_OK(cudaSetDevice(g));
    CUDA_OK(cudaStreamSynchronize(streams[g]));
    CUDA_OK(cudaMemcpy(host, recv[g], COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < COUNT; ++i) {
      float want = 0;
      for (int r = 0; r < ndev; ++r) want += input(r, i);
      if (host[i] != want) {
        if (wrong++ < 5) fprintf(stderr, "GPU %d element %d: %g, expected %g\n", g, i, host[i], want);
      }
    }
  }

  for (int g = 0; g < ndev; ++g) {
    NCCL_OK(ncclCommDestroy(comms[g]));
    CUDA_OK(cudaSetDevice(g));
    CUDA_OK(cudaFree(send[g]));
    CUDA_OK(cudaFree(recv[g]));
    CUDA_OK(cudaStreamDestroy(streams[g]));
  }
  free(host);
  if (wrong) {
    fprintf(stderr, "04_nccl_program: %d wrong elements\n", wrong);
    return 1;
  }
  printf("04_nccl_program: AllReduce of %d floats on %d GPU(s): every element checked, passed\n", COUNT, ndev);
  return 0;
}
