/* Links against weft's libnccl.so.2 with the real nccl.h (NCCL 2.28.9): every function the
 * header declares must resolve (their addresses are taken below), and the argument checks that
 * need no GPU must return NCCL's codes. Run by crates/weft-nccl/tests/c_abi.rs. */
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "checks.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static const void* const every_symbol[] = {
    (const void*)ncclAllGather,
    (const void*)ncclAllReduce,
    (const void*)ncclAlltoAll,
    (const void*)ncclBcast,
    (const void*)ncclBroadcast,
    (const void*)ncclCommAbort,
    (const void*)ncclCommCount,
    (const void*)ncclCommCuDevice,
    (const void*)ncclCommDeregister,
    (const void*)ncclCommDestroy,
    (const void*)ncclCommFinalize,
    (const void*)ncclCommGetAsyncError,
    (const void*)ncclCommInitAll,
    (const void*)ncclCommInitRank,
    (const void*)ncclCommInitRankConfig,
    (const void*)ncclCommInitRankScalable,
    (const void*)ncclCommRegister,
    (const void*)ncclCommRevoke,
    (const void*)ncclCommShrink,
    (const void*)ncclCommSplit,
    (const void*)ncclCommUserRank,
    (const void*)ncclCommWindowDeregister,
    (const void*)ncclCommWindowRegister,
    (const void*)ncclGather,
    (const void*)ncclGetErrorString,
    (const void*)ncclGetLastError,
    (const void*)ncclGetUniqueId,
    (const void*)ncclGetVersion,
    (const void*)ncclGroupEnd,
    (const void*)ncclGroupSimulateEnd,
    (const void*)ncclGroupStart,
    (const void*)ncclMemAlloc,
    (const void*)ncclMemFree,
    (const void*)ncclRecv,
    (const void*)ncclRedOpCreatePreMulSum,
    (const void*)ncclRedOpDestroy,
    (const void*)ncclReduce,
    (const void*)ncclReduceScatter,
    (const void*)ncclResetDebugInit,
    (const void*)ncclScatter,
    (const void*)ncclSend,
    (const void*)pncclAllGather,
    (const void*)pncclAllReduce,
    (const void*)pncclAlltoAll,
    (const void*)pncclBcast,
    (const void*)pncclBroadcast,
    (const void*)pncclCommAbort,
    (const void*)pncclCommCount,
    (const void*)pncclCommCuDevice,
    (const void*)pncclCommDeregister,
    (const void*)pncclCommDestroy,
    (const void*)pncclCommFinalize,
    (const void*)pncclCommGetAsyncError,
    (const void*)pncclCommInitAll,
    (const void*)pncclCommInitRank,
    (const void*)pncclCommInitRankConfig,
    (const void*)pncclCommInitRankScalable,
    (const void*)pncclCommRegister,
    (const void*)pncclCommRevoke,
    (const void*)pncclCommShrink,
    (const void*)pncclCommSplit,
    (const void*)pncclCommUserRank,
    (const void*)pncclCommWindowDeregister,
    (const void*)pncclCommWindowRegister,
    (const void*)pncclGather,
    (const void*)pncclGetErrorString,
    (const void*)pncclGetLastError,
    (const void*)pncclGetUniqueId,
    (const void*)pncclGetVersion,
    (const void*)pncclGroupEnd,
    (const void*)pncclGroupSimulateEnd,
    (const void*)pncclGroupStart,
    (const void*)pncclMemAlloc,
    (const void*)pncclMemFree,
    (const void*)pncclRecv,
    (const void*)pncclRedOpCreatePreMulSum,
    (const void*)pncclRedOpDestroy,
    (const void*)pncclReduce,
    (const void*)pncclReduceScatter,
    (const void*)pncclResetDebugInit,
    (const void*)pncclScatter,
    (const void*)pncclSend
};
#pragma GCC diagnostic pop

/* What a fresh thread's ncclGetLastError returned, with NULL and with an unknown handle. */
static char seen[512], seen_sentinel[512];

static void* fail_on_a_thread(void* arg) {
  (void)arg;
  ncclUniqueId uid;
  ncclComm_t c;
  if (ncclGetUniqueId(&uid) == ncclSuccess) (void)ncclCommInitRank(&c, 2, uid, 7);
  return NULL;
}

static void* fail_a_group(void* arg) {
  (void)arg;
  (void)ncclGroupEnd();
  return NULL;
}

static void* read_last_error(void* arg) {
  (void)arg;
  const char* m = ncclGetLastError(NULL);
  snprintf(seen, sizeof seen, "%s", m ? m : "(null)");
  m = ncclGetLastError((ncclComm_t)(uintptr_t)0x1234);
  snprintf(seen_sentinel, sizeof seen_sentinel, "%s", m ? m : "(null)");
  return NULL;
}

int main(void) {
  for (size_t i = 0; i < sizeof(every_symbol) / sizeof(every_symbol[0]); i++) CHECK(every_symbol[i] != NULL);

  /* Version and strings. */
  int version = 0;
  EXPECT(ncclGetVersion(&version), ncclSuccess);
  CHECK(version == NCCL_VERSION_CODE);
  EXPECT(pncclGetVersion(&version), ncclSuccess);
  EXPECT_MSG(ncclGetVersion(NULL), ncclInvalidArgument, "version is NULL");
  CHECK(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0);
  CHECK(strstr(ncclGetErrorString(ncclInvalidArgument), "invalid argument") != NULL);
  CHECK(strstr(ncclGetErrorString(ncclInvalidUsage), "invalid usage") != NULL);
  CHECK(strstr(ncclGetErrorString(ncclRemoteError), "remote") != NULL);
  CHECK(strstr(ncclGetErrorString(ncclInProgress), "in progress") != NULL);
  CHECK(strcmp(ncclGetErrorString((ncclResult_t)99), "unknown result code") == 0);
  CHECK(ncclGetLastError(NULL) != NULL);

  /* Unique ids (no GPU needed). */
  ncclUniqueId id;
  EXPECT_MSG(ncclGetUniqueId(NULL), ncclInvalidArgument, "uniqueId is NULL");
  EXPECT(ncclGetUniqueId(&id), ncclSuccess);
  CHECK(memcmp(id.internal, "wfID", 4) == 0);

  /* Communicator creation: argument checks come before any GPU access, and the output is
   * written only on success. */
  ncclComm_t sentinel = (ncclComm_t)(uintptr_t)0x1234, comm = sentinel;
  EXPECT_MSG(ncclCommInitRank(NULL, 2, id, 0), ncclInvalidArgument, "comm is NULL");
  EXPECT_MSG(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument, "nranks");
  EXPECT_MSG(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument, "rank = 2");
  EXPECT_MSG(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument, "rank = -1");
  ncclUniqueId zero;
  memset(&zero, 0, sizeof zero);
  EXPECT_MSG(ncclCommInitRank(&comm, 2, zero, 0), ncclInvalidArgument, "commId");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  CHECK(config.magic == 0xcafebeef && config.size == sizeof(ncclConfig_t));
  /* Every NCCL 2.28 hint is accepted (one rank: succeeds with a GPU, fails without one, never
   * with ncclInvalidArgument). */
  ncclConfig_t hints = NCCL_CONFIG_INITIALIZER;
  hints.nvlinkCentricSched = 1;
  hints.CTAPolicy = 1;
  hints.minCTAs = 4;
  hints.maxCTAs = 32;
  hints.cgaClusterSize = 2;
  hints.nChannelsPerNetPeer = 4;
  hints.trafficClass = 1;
  hints.splitShare = 1;
  hints.shrinkShare = 1;
  hints.collnetEnable = 0;
  hints.netName = "Socket";
  hints.nvlsCTAs = 16;
  hints.commName = "hints";
  ncclComm_t hinted = sentinel;
  ncclResult_t with_hints = ncclCommInitRankConfig(&hinted, 1, id, 0, &hints);
  report(with_hints != ncclInvalidArgument, "every config hint is accepted", __LINE__, with_hints, ncclSuccess);
  if (with_hints == ncclSuccess) {
    EXPECT(ncclCommDestroy(hinted), ncclSuccess);
    /* A fresh id for the later single-rank test. */
    EXPECT(ncclGetUniqueId(&id), ncclSuccess);
  }
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.blocking = 2;
  EXPECT_MSG(ncclCommInitRankConfig(&comm, 2, id, 0, &bad), ncclInvalidArgument, "blocking = 2");
  bad = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  bad.minCTAs = 16;
  bad.maxCTAs = 8;
  EXPECT_MSG(ncclCommInitRankConfig(&comm, 2, id, 0, &bad), ncclInvalidArgument, "minCTAs = 16 exceeds maxCTAs = 8");
  bad = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  bad.maxCTAs = -1;
  EXPECT_MSG(ncclCommInitRankConfig(&comm, 2, id, 0, &bad), ncclInvalidArgument, "maxCTAs = -1");
  bad = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  bad.CTAPolicy = 7;
  EXPECT_MSG(ncclCommInitRankConfig(&comm, 2, id, 0, &bad), ncclInvalidArgument, "CTAPolicy = 7");
  ncclConfig_t bad_magic = NCCL_CONFIG_INITIALIZER;
  bad_magic.magic = 0;
  EXPECT_MSG(ncclCommInitRankConfig(&comm, 2, id, 0, &bad_magic), ncclInvalidArgument, "NCCL_CONFIG_INITIALIZER");
  ncclConfig_t cga = NCCL_CONFIG_INITIALIZER;
  cga.cgaClusterSize = -2;
  EXPECT_MSG(ncclCommInitRankScalable(&comm, 2, 0, 1, &id, &cga), ncclInvalidArgument, "cgaClusterSize = -2");
  EXPECT_MSG(ncclCommInitRankScalable(&comm, 2, 0, 0, &id, NULL), ncclInvalidArgument, "nId");
  CHECK(comm == sentinel);
  /* One rank on this machine: succeeds with a GPU, fails cleanly without one. */
  ncclResult_t single = ncclCommInitRank(&comm, 1, id, 0);
  if (single == ncclSuccess) {
    int n = 0;
    EXPECT(ncclCommCount(comm, &n), ncclSuccess);
    CHECK(n == 1);
    /* PreMulSum operators: created per communicator, typed, destroyed once. */
    ncclRedOp_t pm = ncclSum, pm2 = ncclSum;
    float half_value = 0.5f;
    EXPECT(ncclRedOpCreatePreMulSum(&pm, &half_value, ncclFloat, ncclScalarHostImmediate, comm), ncclSuccess);
    CHECK(pm >= ncclNumOps);
    EXPECT(ncclRedOpCreatePreMulSum(&pm2, &half_value, ncclFloat, ncclScalarDevice, comm), ncclSuccess);
    CHECK(pm2 >= ncclNumOps && pm2 != pm);
    ncclRedOp_t refused = ncclSum;
    EXPECT_MSG(ncclRedOpCreatePreMulSum(&refused, &half_value, ncclFloat, (ncclScalarResidence_t)7, comm), ncclInvalidArgument, "residence");
    CHECK(refused == ncclSum);
    float fbuf[4];
    EXPECT_MSG(ncclAllReduce(fbuf, fbuf, 4, ncclInt32, pm, comm, 0), ncclInvalidArgument, "created for f32");
    ncclUniqueId other_id;
    ncclComm_t other = sentinel;
    EXPECT(ncclGetUniqueId(&other_id), ncclSuccess);
    if (ncclCommInitRank(&other, 1, other_id, 0) == ncclSuccess) {
      EXPECT_MSG(ncclAllReduce(fbuf, fbuf, 4, ncclFloat, pm, other, 0), ncclInvalidArgument, "unknown to this communicator");
      EXPECT_MSG(ncclRedOpDestroy(pm, other), ncclInvalidArgument, "unknown to this communicator");
      EXPECT(ncclCommDestroy(other), ncclSuccess);
    }
    EXPECT(ncclRedOpDestroy(pm, comm), ncclSuccess);
    EXPECT_MSG(ncclRedOpDestroy(pm, comm), ncclInvalidArgument, "destroyed");
    EXPECT_MSG(ncclAllReduce(fbuf, fbuf, 4, ncclFloat, pm, comm, 0), ncclInvalidArgument, "ncclRedOpCreatePreMulSum");
    EXPECT_MSG(ncclRedOpDestroy(ncclAvg, comm), ncclInvalidArgument, "built-in");
    EXPECT(ncclRedOpDestroy(pm2, comm), ncclSuccess);
    EXPECT(ncclCommDestroy(comm), ncclSuccess);
  } else {
    CHECK(single == ncclUnhandledCudaError || single == ncclSystemError);
    CHECK(comm == sentinel);
  }
  ncclComm_t comms[2] = {sentinel, sentinel};
  int twice[2] = {0, 0};
  EXPECT_MSG(ncclCommInitAll(NULL, 2, NULL), ncclInvalidArgument, "comms is NULL");
  EXPECT_MSG(ncclCommInitAll(comms, 0, NULL), ncclInvalidArgument, "ndev");
  EXPECT_MSG(ncclCommInitAll(comms, 2, twice), ncclInvalidArgument, "twice");
  CHECK(comms[0] == sentinel && comms[1] == sentinel);

  /* Null and unknown communicators. */
  int value = -7;
  ncclResult_t async = ncclNumResults;
  EXPECT_MSG(ncclCommCount(NULL, &value), ncclInvalidArgument, "comm is NULL");
  EXPECT_MSG(ncclCommCount(sentinel, &value), ncclInvalidArgument, "not a live communicator");
  EXPECT_MSG(ncclCommCount(sentinel, NULL), ncclInvalidArgument, "NULL");
  EXPECT(ncclCommUserRank(NULL, &value), ncclInvalidArgument);
  EXPECT(ncclCommCuDevice(NULL, &value), ncclInvalidArgument);
  CHECK(value == -7);
  EXPECT(ncclCommGetAsyncError(NULL, &async), ncclInvalidArgument);
  EXPECT(ncclCommGetAsyncError(sentinel, NULL), ncclInvalidArgument);
  CHECK(async == ncclNumResults);
  EXPECT(ncclCommFinalize(NULL), ncclInvalidArgument);
  EXPECT(ncclCommDestroy(NULL), ncclInvalidArgument);
  EXPECT(ncclCommAbort(sentinel), ncclInvalidArgument);
  EXPECT(ncclCommRevoke(NULL, 0), ncclInvalidArgument);
  ncclComm_t child = sentinel;
  EXPECT(ncclCommSplit(NULL, 0, 0, &child, NULL), ncclInvalidArgument);
  EXPECT_MSG(ncclCommSplit(sentinel, 0, 0, NULL, NULL), ncclInvalidArgument, "newcomm is NULL");
  EXPECT_MSG(ncclCommSplit(sentinel, -5, 0, &child, NULL), ncclInvalidArgument, "color");
  EXPECT(ncclCommShrink(NULL, NULL, 0, &child, NULL, 0), ncclInvalidArgument);
  CHECK(child == sentinel);
  void* handle = NULL;
  char host[16];
  EXPECT(ncclCommRegister(NULL, host, sizeof host, &handle), ncclInvalidArgument);
  EXPECT_MSG(ncclCommRegister(sentinel, host, sizeof host, NULL), ncclInvalidArgument, "handle is NULL");
  EXPECT(ncclCommDeregister(NULL, host), ncclInvalidArgument);
  ncclWindow_t win = NULL;
  EXPECT_MSG(ncclCommWindowRegister(NULL, host, sizeof host, &win, NCCL_WIN_DEFAULT), ncclInvalidArgument, "comm is NULL");
  EXPECT_MSG(ncclCommWindowRegister(sentinel, host, sizeof host, NULL, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument, "win is NULL");
  EXPECT_MSG(ncclCommWindowRegister(sentinel, NULL, sizeof host, &win, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument, "buff is NULL");
  EXPECT_MSG(ncclCommWindowRegister(sentinel, host, 0, &win, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument, "size is 0");
  EXPECT_MSG(ncclCommWindowRegister(sentinel, host, sizeof host, &win, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument, "not a live communicator");
  CHECK(win == NULL);
  /* Inside a group a bad registration fails at once and queues nothing. */
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT_MSG(ncclCommWindowRegister(sentinel, host, sizeof host, &win, NCCL_WIN_COLL_SYMMETRIC), ncclInvalidArgument, "not a live communicator");
  EXPECT(ncclGroupEnd(), ncclSuccess);
  CHECK(win == NULL);
  EXPECT_MSG(ncclCommWindowDeregister(NULL, (ncclWindow_t)host), ncclInvalidArgument, "comm is NULL");
  EXPECT_MSG(ncclCommWindowDeregister(sentinel, NULL), ncclInvalidArgument, "win is NULL");
  EXPECT_MSG(ncclCommWindowDeregister(sentinel, (ncclWindow_t)host), ncclInvalidArgument, "not a live communicator");
  ncclRedOp_t op = ncclSum;
  float scalar = 0.5f;
  EXPECT(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, NULL), ncclInvalidArgument);
  EXPECT_MSG(ncclRedOpCreatePreMulSum(&op, &scalar, (ncclDataType_t)42, ncclScalarHostImmediate, NULL), ncclInvalidArgument, "datatype");
  EXPECT_MSG(ncclRedOpCreatePreMulSum(NULL, &scalar, ncclFloat, ncclScalarHostImmediate, NULL), ncclInvalidArgument, "op is NULL");
  /* Scalar and residence are checked before the communicator. */
  EXPECT_MSG(ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat, ncclScalarHostImmediate, sentinel), ncclInvalidArgument, "scalar is NULL");
  EXPECT_MSG(ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat, ncclScalarDevice, sentinel), ncclInvalidArgument, "scalar is NULL");
  EXPECT_MSG(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, (ncclScalarResidence_t)2, sentinel), ncclInvalidArgument, "residence = 2");
  EXPECT_MSG(ncclRedOpCreatePreMulSum(&op, &scalar, (ncclDataType_t)-1, ncclScalarDevice, sentinel), ncclInvalidArgument, "datatype");
  EXPECT_MSG(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, sentinel), ncclInvalidArgument, "not a live communicator");
  CHECK(op == ncclSum);
  EXPECT(ncclRedOpDestroy(ncclNumOps, NULL), ncclInvalidArgument);
  EXPECT_MSG(ncclRedOpDestroy(ncclNumOps, sentinel), ncclInvalidArgument, "not a live communicator");

  /* Collectives: bad types, operators and counts are reported before the communicator. */
  float buf[4];
  cudaStream_t s = 0;
  EXPECT_MSG(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, NULL, s), ncclInvalidArgument, "comm is NULL");
  EXPECT_MSG(ncclAllReduce(buf, buf, 4, (ncclDataType_t)ncclNumTypes, ncclSum, NULL, s), ncclInvalidArgument, "datatype");
  EXPECT_MSG(ncclAllReduce(buf, buf, 4, ncclFloat, (ncclRedOp_t)-1, NULL, s), ncclInvalidArgument, "operator");
  EXPECT_MSG(ncclAllReduce(buf, buf, SIZE_MAX / 2, ncclFloat, ncclSum, NULL, s), ncclInvalidArgument, "overflow");
  EXPECT_MSG(ncclAllGather(buf, buf, SIZE_MAX / 4, ncclFloat64, NULL, s), ncclInvalidArgument, "overflow");
  EXPECT_MSG(ncclReduceScatter(buf, buf, 1, (ncclDataType_t)-3, ncclMax, NULL, s), ncclInvalidArgument, "datatype");
  EXPECT_MSG(ncclReduce(buf, buf, 1, ncclFloat, ncclMin, -1, NULL, s), ncclInvalidArgument, "negative");
  EXPECT_MSG(ncclBroadcast(buf, buf, 1, ncclBfloat16, -2, NULL, s), ncclInvalidArgument, "negative");
  EXPECT_MSG(ncclBcast(buf, 1, (ncclDataType_t)100, 0, NULL, s), ncclInvalidArgument, "datatype");
  EXPECT(ncclAlltoAll(buf, buf, 1, ncclInt8, NULL, s), ncclInvalidArgument);
  EXPECT(ncclGather(buf, buf, 1, ncclUint8, 0, NULL, s), ncclInvalidArgument);
  EXPECT(ncclScatter(buf, buf, 1, ncclFloat8e4m3, 0, sentinel, s), ncclInvalidArgument);
  EXPECT_MSG(ncclSend(buf, 1, ncclFloat8e5m2, -1, NULL, s), ncclInvalidArgument, "negative");
  EXPECT(ncclRecv(buf, 1, ncclInt64, 0, sentinel, s), ncclInvalidArgument);
  EXPECT(pncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, NULL, s), ncclInvalidArgument);

  /* Groups nest; an unmatched end is invalid usage; a bad call inside a group fails at once
     and, as in NCCL, fails the outermost end with its code (the group launches nothing). */
  EXPECT_MSG(ncclGroupEnd(), ncclInvalidUsage, "without a matching ncclGroupStart");
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT(ncclSend(buf, 1, ncclFloat, 1, NULL, s), ncclInvalidArgument);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  EXPECT_MSG(ncclGroupEnd(), ncclInvalidArgument, "inside the group failed");
  EXPECT(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  EXPECT(ncclGroupSimulateEnd(NULL), ncclInvalidArgument);

  /* Memory. */
  void* mem = (void*)sentinel;
  EXPECT(ncclMemAlloc(NULL, 8), ncclInvalidArgument);
  EXPECT_MSG(ncclMemAlloc(&mem, 0), ncclInvalidArgument, "size is 0");
  CHECK(mem == (void*)sentinel);
  EXPECT(ncclMemFree(NULL), ncclInvalidArgument);
  EXPECT_MSG(ncclMemFree(host), ncclInvalidArgument, "not allocated by ncclMemAlloc");

  /* ncclGetLastError on a thread that never failed reports the process's last failure, made on
   * another thread: a bad call, and a group that fails at ncclGroupEnd. */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fail_on_a_thread, NULL) == 0 && pthread_join(t, NULL) == 0);
  CHECK(pthread_create(&t, NULL, read_last_error, NULL) == 0 && pthread_join(t, NULL) == 0);
  report(strstr(seen, "rank = 7") != NULL, "another thread sees the failure (NULL comm)", __LINE__, 0, 1);
  report(strstr(seen_sentinel, "rank = 7") != NULL, "another thread sees it (unknown comm)", __LINE__, 0, 1);
  CHECK(pthread_create(&t, NULL, fail_a_group, NULL) == 0 && pthread_join(t, NULL) == 0);
  CHECK(pthread_create(&t, NULL, read_last_error, NULL) == 0 && pthread_join(t, NULL) == 0);
  report(strstr(seen, "ncclGroupEnd") != NULL, "another thread sees the group's failure", __LINE__, 0, 1);
  /* The pointer stays valid while this thread asks again. */
  const char* kept = ncclGetLastError(NULL);
  char copy[256];
  snprintf(copy, sizeof copy, "%s", kept);
  (void)ncclGetLastError(sentinel);
  CHECK(kept[0] != 0 && strcmp(kept, copy) == 0);

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
  return finish("link_test");
}
