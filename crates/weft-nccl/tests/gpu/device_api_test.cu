// NCCL's device-API host calls on weft's libnccl.so.2, with kernels written on weft's device
// API (weft/gin.cuh), on a GPU machine: every rank makes a device communicator with NCCL's
// requirements (a resource buffer with its own signal and counter, a world and an LSA barrier),
// checks what the ncclDevComm says against the host's team calls, and runs two rounds of a ring
// in which each rank puts a stamped block into the next rank's half of the resource buffer with
// a signal and a counter, waits for both, and checks every element from the previous rank; then
// destroys it. Built and run by scripts/nccl-device-api-test.sh (nvcc):
//
//   device_api_test threads RANKS GPUS LSA   a thread per rank, rank r on GPU r % GPUS, LSA teams
//                                            of LSA ranks (RANKS: one node, LSA; 1: the proxy)
//   device_api_test group GPUS               one thread: ncclCommInitAll, grouped create, destroy
//   device_api_test trap                     gin_handle of an ncclDevComm weft did not make traps
//
// Ends with `device_api_test <mode>: N checks, M failed` (exit 1 on a failure).
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "weft/gin.cuh"

static std::atomic<int> checks{0}, failures{0};

static void report(bool ok, int rank, const char* what, int line, const char* detail = "") {
  checks++;
  if (!ok) {
    failures++;
    std::fprintf(stderr, "FAIL rank %d line %d: %s %s\n", rank, line, what, detail);
  }
}

#define CHECK(rank, cond) report((cond), (rank), #cond, __LINE__)
#define NCCL(rank, call)                                                                        \
  do {                                                                                          \
    ncclResult_t r_ = (call);                                                                   \
    report(r_ == ncclSuccess, (rank), #call, __LINE__, r_ == ncclSuccess ? "" : ncclGetLastError(NULL)); \
  } while (0)
#define CUDA(rank, call)                                                                        \
  do {                                                                                          \
    cudaError_t e_ = (call);                                                                    \
    report(e_ == cudaSuccess, (rank), #call, __LINE__, cudaGetErrorString(e_));                 \
  } while (0)

// Elements each rank sends per round: an odd count, so the copy has a tail past 16-byte words.
constexpr uint32_t kElems = 1001;

__host__ __device__ uint32_t stamp(uint32_t rank, uint32_t round, uint32_t i) {
  return rank * 1000003u + round * 7919u + i;
}

// One round of the ring (one thread): see the top of the file. `bad[0]` counts wrong elements,
// plus 1 << 20 for a failed GIN call and 1 << 24 when NCCL's inline team helper disagrees;
// `bad[1]` counts the rounds that ran.
__global__ void ring(ncclDevComm dc, ncclDevResourceHandle_t buffer, ncclGinSignal_t signal,
                     ncclGinCounter_t counter, uint32_t round, int* bad) {
  weft::Gin gin(weft::gin_handle(dc));
  const weft::DevCommHandle& h = gin.handle();
  const ncclTeam nccl_world = ncclTeamWorld(dc);
  if (nccl_world.nRanks != int(h.world) || nccl_world.rank != int(h.rank)) atomicAdd(bad, 1 << 24);
  const weft::GinTeam world = weft::gin_team_world(h);
  // NCCL's resource handle: an offset in the resource window (window 0) in 128-byte units.
  const uint64_t base = ncclGetResourceBufferOffset(buffer);
  uint32_t* send = weft::gin_local_pointer<uint32_t>(h, 0, base);
  const uint32_t* recv = send + kElems;
  const uint32_t next = (h.rank + 1) % h.world, prev = (h.rank + h.world - 1) % h.world;
  for (uint32_t i = 0; i < kElems; ++i) send[i] = stamp(h.rank, round, i);
  // Every rank checked the previous round before anyone overwrites its receive half.
  bool ok = gin.barrier(0);
  ok = ok && gin.put(world, next, 0, base + 4ull * kElems, 0, base, 4ull * kElems, weft::gin_signal_inc(signal),
                     weft::gin_counter_inc(counter));
  ok = ok && gin.wait_counter(counter, round) && gin.wait_signal(signal, round);
  int wrong = 0;
  for (uint32_t i = 0; ok && i < kElems; ++i) wrong += recv[i] != stamp(prev, round, i);
  ok = ok && gin.flush() && gin.lsa_barrier(0);
  atomicAdd(&bad[0], wrong + (ok ? 0 : 1 << 20));
  atomicAdd(&bad[1], 1);
}

// gin_handle of an ncclDevComm without weft's magic.
__global__ void foreign(ncclDevComm dc, uint64_t* out) { *out = weft::gin_handle(dc).heap; }

struct Resources {
  ncclDevResourceHandle_t buffer = ~0u;
  ncclGinSignal_t signal = ~0u;
  ncclGinCounter_t counter = ~0u;
  ncclDevResourceRequirements_t req;
  ncclDevCommRequirements_t reqs;
};

static void require(Resources* r) {
  std::memset(&r->req, 0, sizeof r->req);
  std::memset(&r->reqs, 0, sizeof r->reqs);
  r->req.bufferSize = 2 * 4 * kElems;
  r->req.bufferAlign = 16;
  r->req.outBufferHandle = &r->buffer;
  r->req.ginSignalCount = 1;
  r->req.outGinSignalStart = &r->signal;
  r->req.ginCounterCount = 1;
  r->req.outGinCounterStart = &r->counter;
  r->reqs.resourceRequirementsList = &r->req;
  r->reqs.ginSignalCount = 2;
  r->reqs.ginCounterCount = 1;
  r->reqs.barrierCount = 1;
  r->reqs.lsaBarrierCount = 1;
}

// What a made device communicator says, against the host calls; `lsa` ranks share a node.
static void check_made(ncclComm_t comm, int rank, int ranks, int lsa_size, const ncclDevComm& dc, const Resources& r) {
  CHECK(rank, dc.rank == rank && dc.nRanks == ranks && dc.ginContextCount == 1);
  CHECK(rank, dc.lsaSize == lsa_size && dc.lsaRank == rank % lsa_size);
  const ncclTeam_t lsa = ncclTeamLsa(comm), rail = ncclTeamRail(comm);
  CHECK(rank, lsa.nRanks == dc.lsaSize && lsa.rank == dc.lsaRank && lsa.stride == 1);
  const ncclTeam inline_rail = ncclTeamRail(dc);
  CHECK(rank, rail.nRanks == inline_rail.nRanks && rail.rank == inline_rail.rank && rail.stride == inline_rail.stride);
  CHECK(rank, ncclTeamRankToLsa(comm, ncclTeamWorld(comm), rank) == dc.lsaRank);
  // One resource: at handle 0, its signal after the communicator's 2, its counter after its 1.
  CHECK(rank, r.buffer == 0 && r.signal == 2 && r.counter == 1);
}

static void launch(int rank, const ncclDevComm& dc, const Resources& r, uint32_t round, int* bad, cudaStream_t s) {
  ring<<<1, 1, 0, s>>>(dc, r.buffer, r.signal, r.counter, round, bad);
  CUDA(rank, cudaGetLastError());
}

static void check_bad(int rank, int* bad) {
  int value[2] = {-1, -1};
  CUDA(rank, cudaMemcpy(value, bad, sizeof value, cudaMemcpyDeviceToHost));
  char detail[64];
  std::snprintf(detail, sizeof detail, "(bad = %#x, rounds = %d)", value[0], value[1]);
  report(value[0] == 0 && value[1] == 2, rank, "both rounds ran, every element arrived, every GIN call succeeded",
         __LINE__, detail);
}

// One rank on its own thread: communicator, device communicator, two rounds, teardown.
static void rank_thread(int rank, int ranks, int gpus, int lsa_size, ncclUniqueId id) {
  CUDA(rank, cudaSetDevice(rank % gpus));
  ncclComm_t comm = nullptr;
  NCCL(rank, ncclCommInitRank(&comm, ranks, id, rank));
  if (comm == nullptr) return;
  Resources r;
  require(&r);
  ncclDevComm dc;
  NCCL(rank, ncclDevCommCreate(comm, &r.reqs, &dc));
  check_made(comm, rank, ranks, lsa_size, dc, r);
  cudaStream_t s;
  int* bad;
  CUDA(rank, cudaStreamCreate(&s));
  CUDA(rank, cudaMalloc(&bad, 2 * sizeof(int)));
  CUDA(rank, cudaMemset(bad, 0, 2 * sizeof(int)));
  for (uint32_t round = 1; round <= 2; ++round) launch(rank, dc, r, round, bad, s);
  CUDA(rank, cudaStreamSynchronize(s));
  check_bad(rank, bad);
  NCCL(rank, ncclDevCommDestroy(comm, &dc));
  CUDA(rank, cudaFree(bad));
  CUDA(rank, cudaStreamDestroy(s));
  NCCL(rank, ncclCommDestroy(comm));
}

// Every rank from one thread: creation and destruction inside groups.
static void group_mode(int gpus) {
  std::vector<ncclComm_t> comms(gpus);
  NCCL(-1, ncclCommInitAll(comms.data(), gpus, nullptr));
  std::vector<Resources> r(gpus);
  std::vector<ncclDevComm> dc(gpus);
  std::vector<cudaStream_t> s(gpus);
  std::vector<int*> bad(gpus);
  NCCL(-1, ncclGroupStart());
  for (int i = 0; i < gpus; ++i) {
    require(&r[i]);
    NCCL(i, ncclDevCommCreate(comms[i], &r[i].reqs, &dc[i]));
  }
  NCCL(-1, ncclGroupEnd());
  for (int i = 0; i < gpus; ++i) {
    check_made(comms[i], i, gpus, gpus, dc[i], r[i]);
    CUDA(i, cudaSetDevice(i));
    CUDA(i, cudaStreamCreate(&s[i]));
    CUDA(i, cudaMalloc(&bad[i], 2 * sizeof(int)));
    CUDA(i, cudaMemset(bad[i], 0, 2 * sizeof(int)));
  }
  for (uint32_t round = 1; round <= 2; ++round) {
    for (int i = 0; i < gpus; ++i) {
      CUDA(i, cudaSetDevice(i));
      launch(i, dc[i], r[i], round, bad[i], s[i]);
    }
  }
  for (int i = 0; i < gpus; ++i) {
    CUDA(i, cudaSetDevice(i));
    CUDA(i, cudaStreamSynchronize(s[i]));
    check_bad(i, bad[i]);
  }
  NCCL(-1, ncclGroupStart());
  for (int i = 0; i < gpus; ++i) NCCL(i, ncclDevCommDestroy(comms[i], &dc[i]));
  NCCL(-1, ncclGroupEnd());
  for (int i = 0; i < gpus; ++i) NCCL(i, ncclCommDestroy(comms[i]));
}

// A kernel given an ncclDevComm weft did not make stops with an error instead of running on.
static void trap_mode() {
  ncclDevComm zero;
  std::memset(&zero, 0, sizeof zero);
  uint64_t* out;
  CUDA(0, cudaMalloc(&out, sizeof(uint64_t)));
  foreign<<<1, 1>>>(zero, out);
  const cudaError_t e = cudaDeviceSynchronize();
  report(e != cudaSuccess, 0, "gin_handle of a foreign ncclDevComm traps", __LINE__, cudaGetErrorString(e));
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "threads";
  if (mode == "threads") {
    const int ranks = argc > 2 ? std::atoi(argv[2]) : 2, gpus = argc > 3 ? std::atoi(argv[3]) : 1;
    const int lsa_size = argc > 4 ? std::atoi(argv[4]) : ranks;
    ncclUniqueId id;
    NCCL(-1, ncclGetUniqueId(&id));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < ranks; ++rank) threads.emplace_back(rank_thread, rank, ranks, gpus, lsa_size, id);
    for (auto& t : threads) t.join();
  } else if (mode == "group") {
    group_mode(argc > 2 ? std::atoi(argv[2]) : 2);
  } else if (mode == "trap") {
    trap_mode();
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("device_api_test %s: %d checks, %d failed\n", mode.c_str(), checks.load(), failures.load());
  return failures == 0 ? 0 : 1;
}
