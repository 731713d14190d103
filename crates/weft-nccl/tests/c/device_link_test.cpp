/* The host side of the device API of weft's libnccl.so.2, compiled by g++ against the real
 * nccl.h and nccl_device.h (NCCL 2.28.9) and linked against weft's library: every host
 * function of nccl_device/ resolves, argument checks return NCCL's codes with a message, the
 * requirement calls fill what NCCL 2.28.9 fills, and, when a GPU is there, a one-rank
 * communicator's device communicators are made, described and destroyed (directly and inside
 * a group), and what weft cannot serve is refused with a reason. Run by
 * crates/weft-nccl/tests/c_abi.rs. */
#include <nccl.h>
#include <nccl_device.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "checks.h"

static const void* const every_symbol[] = {
    (const void*)ncclDevCommCreate, (const void*)ncclDevCommDestroy, (const void*)ncclGinBarrierCreateRequirement,
    (const void*)ncclLsaBarrierCreateRequirement, (const void*)ncclLLA2ACreateRequirement, (const void*)ncclLLA2ACalcSlots,
    (const void*)(ncclTeam_t(*)(ncclComm_t))ncclTeamWorld, (const void*)(ncclTeam_t(*)(ncclComm_t))ncclTeamLsa,
    (const void*)(ncclTeam_t(*)(ncclComm_t))ncclTeamRail, (const void*)(int (*)(ncclComm_t, ncclTeam_t, int))ncclTeamRankToWorld,
    (const void*)(int (*)(ncclComm_t, ncclTeam_t, int))ncclTeamRankToLsa,
};

/* weft's part of an ncclDevComm (docs/gin.md): magic, id, handle address after ginHandles. */
static uint32_t weft_magic(const ncclDevComm& dc) { return dc.ginSignalBase; }

/* Requirements of the devcomm test: 3 signals, 2 counters, a world and an LSA barrier, and
 * three resources: 2 LSA barriers, 1 GIN barrier, and a 1000-byte buffer with 2 signals. */
struct Resources {
  ncclLsaBarrierHandle_t lsa;
  ncclGinBarrierHandle_t gin;
  ncclDevResourceHandle_t buffer;
  ncclGinSignal_t buffer_signals;
  ncclDevResourceRequirements_t lsa_req, gin_req, buffer_req;
};

static ncclDevCommRequirements_t requirements(ncclComm_t comm, Resources* r) {
  ncclDevCommRequirements_t reqs;
  memset(&reqs, 0, sizeof reqs);
  memset(r, 0, sizeof *r);
  reqs.ginSignalCount = 3;
  reqs.ginCounterCount = 2;
  reqs.barrierCount = 1;
  reqs.lsaBarrierCount = 1;
  reqs.ginForceEnable = true;
  reqs.ginContextCount = 4;
  EXPECT(ncclLsaBarrierCreateRequirement(ncclTeamLsa(comm), 2, &r->lsa, &r->lsa_req), ncclSuccess);
  EXPECT(ncclGinBarrierCreateRequirement(comm, ncclTeamRail(comm), 1, &r->gin, &r->gin_req), ncclSuccess);
  r->buffer_req.bufferSize = 1000;
  r->buffer_req.bufferAlign = 256;
  r->buffer_req.outBufferHandle = &r->buffer;
  r->buffer_req.ginSignalCount = 2;
  r->buffer_req.outGinSignalStart = &r->buffer_signals;
  r->lsa_req.next = &r->gin_req;
  r->gin_req.next = &r->buffer_req;
  reqs.resourceRequirementsList = &r->lsa_req;
  return reqs;
}

/* What weft made for requirements(): the layout docs/gin.md describes. */
static void check_made(ncclComm_t comm, const ncclDevComm& dc, const Resources& r) {
  EQ(weft_magic(dc), 0x31434477u); /* "wDC1" */
  EQ(dc.rank, 0);
  EQ(dc.nRanks, 1);
  EQ(dc.lsaRank, 0);
  EQ(dc.lsaSize, 1);
  EQ(dc.ginContextCount, 1);
  CHECK(dc.windowTable == NULL && dc.resourceWindow == NULL && dc.ginHandles[0] == NULL && dc.ginSignalShadows == NULL);
  /* The NCCL helpers that read only the stable fields agree with the host calls. */
  ncclTeam world = ncclTeamWorld(dc), lsa = ncclTeamLsa(dc), rail = ncclTeamRail(dc);
  ncclTeam_t host_lsa = ncclTeamLsa(comm), host_rail = ncclTeamRail(comm);
  CHECK(world.nRanks == 1 && world.rank == 0 && world.stride == 1);
  CHECK(lsa.nRanks == host_lsa.nRanks && lsa.rank == host_lsa.rank && lsa.stride == host_lsa.stride);
  CHECK(rail.nRanks == host_rail.nRanks && rail.rank == host_rail.rank && rail.stride == host_rail.stride);
  /* Resources in list order in the resource window, at 128-byte handles; their signals after
   * the 3 of the communicator. 2 LSA barriers on 1 rank: 32 bytes at 0; 1 GIN barrier: 16
   * bytes at 128; the buffer at 256 (its alignment). */
  EQ(r.lsa.bufHandle, 0);
  EQ(r.lsa.nBarriers, 2);
  EQ(r.gin.bufHandle, 1);
  EQ(r.gin.signal0, 3);
  EQ(r.buffer, 2);
  EQ(ncclGetResourceBufferOffset(r.buffer), 256);
  EQ(r.buffer_signals, 4);
}

static void devcomm_on_one_rank(ncclComm_t comm) {
  Resources r;
  ncclDevCommRequirements_t reqs = requirements(comm, &r);
  ncclDevComm dc, untouched;
  memset(&dc, 0x5a, sizeof dc);
  memcpy(&untouched, &dc, sizeof dc);

  /* What weft cannot serve: refused with the reason, nothing written. */
  ncclDevCommRequirements_t bad = reqs;
  bad.railGinBarrierCount = 1;
  EXPECT_MSG(ncclDevCommCreate(comm, &bad, &dc), ncclInvalidUsage, "no rail-team barrier");
  bad = reqs;
  bad.lsaMultimem = true;
  EXPECT_MSG(ncclDevCommCreate(comm, &bad, &dc), ncclInvalidUsage, "NVLink multicast");
  bad = reqs;
  bad.lsaLLA2ABlockCount = 4;
  EXPECT_MSG(ncclDevCommCreate(comm, &bad, &dc), ncclInvalidUsage, "no LL all-to-all");
  bad = reqs;
  bad.ginSignalCount = 100;
  EXPECT_MSG(ncclDevCommCreate(comm, &bad, &dc), ncclInvalidUsage, "signal slots");
  bad = reqs;
  bad.ginCounterCount = -1;
  EXPECT_MSG(ncclDevCommCreate(comm, &bad, &dc), ncclInvalidArgument, "ginCounterCount = -1 is negative");
  CHECK(memcmp(&dc, &untouched, sizeof dc) == 0);
  CHECK(strstr(ncclGetLastError(comm), "ncclDevCommCreate") != NULL);

  /* Made, described, destroyed once. */
  EXPECT(ncclDevCommCreate(comm, &reqs, &dc), ncclSuccess);
  check_made(comm, dc, r);
  ncclDevComm stale = dc;
  EXPECT(ncclDevCommDestroy(comm, &dc), ncclSuccess);
  EXPECT_MSG(ncclDevCommDestroy(comm, &stale), ncclInvalidArgument, "not a live device communicator");
  ncclDevComm zero;
  memset(&zero, 0, sizeof zero);
  EXPECT_MSG(ncclDevCommDestroy(comm, &zero), ncclInvalidArgument, "magic is missing");

  /* Inside a group: made and destroyed at ncclGroupEnd. */
  reqs = requirements(comm, &r);
  ncclDevComm grouped;
  memset(&grouped, 0, sizeof grouped);
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT(ncclDevCommCreate(comm, &reqs, &grouped), ncclSuccess);
  EQ(weft_magic(grouped), 0);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  check_made(comm, grouped, r);
  EXPECT(ncclGroupStart(), ncclSuccess);
  EXPECT(ncclDevCommDestroy(comm, &grouped), ncclSuccess);
  EXPECT(ncclGroupEnd(), ncclSuccess);
  EXPECT_MSG(ncclDevCommDestroy(comm, &grouped), ncclInvalidArgument, "not a live device communicator");

  /* A device communicator left alive is freed with its communicator. */
  reqs = requirements(comm, &r);
  EXPECT(ncclDevCommCreate(comm, &reqs, &dc), ncclSuccess);
}

int main(void) {
  for (size_t i = 0; i < sizeof(every_symbol) / sizeof(every_symbol[0]); i++) CHECK(every_symbol[i] != NULL);
  ncclComm_t sentinel = (ncclComm_t)(uintptr_t)0x1234;
  ncclDevCommRequirements_t reqs;
  memset(&reqs, 0, sizeof reqs);
  ncclDevComm dc;
  memset(&dc, 0x5a, sizeof dc);

  /* Null and unknown arguments, before any GPU is touched; nothing written. */
  EXPECT_MSG(ncclDevCommCreate(NULL, &reqs, &dc), ncclInvalidArgument, "comm is NULL");
  EXPECT_MSG(ncclDevCommCreate(sentinel, NULL, &dc), ncclInvalidArgument, "reqs is NULL");
  EXPECT_MSG(ncclDevCommCreate(sentinel, &reqs, NULL), ncclInvalidArgument, "outDevComm is NULL");
  EXPECT_MSG(ncclDevCommCreate(sentinel, &reqs, &dc), ncclInvalidArgument, "not a live communicator");
  CHECK(weft_magic(dc) == 0x5a5a5a5a);
  EXPECT_MSG(ncclDevCommDestroy(sentinel, NULL), ncclInvalidArgument, "devComm is NULL");
  EXPECT_MSG(ncclDevCommDestroy(NULL, &dc), ncclInvalidArgument, "comm is NULL");
  ncclTeam_t team = {4, 1, 1};
  ncclGinBarrierHandle_t gh;
  ncclDevResourceRequirements_t req;
  EXPECT_MSG(ncclGinBarrierCreateRequirement(sentinel, team, 1, &gh, &req), ncclInvalidArgument, "not a live communicator");
  EXPECT_MSG(ncclGinBarrierCreateRequirement(sentinel, team, 1, NULL, &req), ncclInvalidArgument, "outHandle is NULL");
  ncclTeam_t empty = ncclTeamLsa(sentinel);
  CHECK(empty.nRanks == 0 && strstr(ncclGetLastError(NULL), "ncclTeamLsa") != NULL);
  EQ(ncclTeamRankToLsa(NULL, team, 0), -1);

  /* The requirement calls that name no communicator: NCCL 2.28.9's sizes, checked arguments. */
  ncclLsaBarrierHandle_t lh;
  memset(&req, 0x5a, sizeof req);
  EXPECT(ncclLsaBarrierCreateRequirement(team, 3, &lh, &req), ncclSuccess);
  CHECK(req.bufferSize == 84 && req.bufferAlign == 4 && req.outBufferHandle == &lh.bufHandle && lh.nBarriers == 3);
  CHECK(req.next == NULL && req.ginSignalCount == 0 && req.outGinSignalStart == NULL && req.outGinCounterStart == NULL);
  EXPECT_MSG(ncclLsaBarrierCreateRequirement(team, -1, &lh, &req), ncclInvalidArgument, "nBarriers = -1");
  EXPECT_MSG(ncclLsaBarrierCreateRequirement(team, 1, &lh, NULL), ncclInvalidArgument, "outReq is NULL");
  ncclLLA2AHandle_t ah;
  EXPECT(ncclLLA2ACreateRequirement(5, 9, &ah, &req), ncclSuccess);
  CHECK(req.bufferSize == 1520 && req.bufferAlign == 16 && req.outBufferHandle == &ah.bufHandle && ah.nSlots == 9);
  EXPECT_MSG(ncclLLA2ACreateRequirement(1, -2, &ah, &req), ncclInvalidArgument, "nSlots = -2");
  EQ(ncclLLA2ACalcSlots(7, 17), 21);
  EQ(ncclLLA2ACalcSlots(-1, 8), -1);
  CHECK(strstr(ncclGetLastError(NULL), "ncclLLA2ACalcSlots: maxElts = -1 is negative") != NULL);

  /* One rank on this machine: succeeds with a GPU, fails cleanly without one. */
  ncclUniqueId id;
  ncclComm_t comm = sentinel;
  EXPECT(ncclGetUniqueId(&id), ncclSuccess);
  ncclResult_t single = ncclCommInitRank(&comm, 1, id, 0);
  if (single == ncclSuccess) {
    ncclTeam_t lsa = ncclTeamLsa(comm), rail = ncclTeamRail(comm);
    CHECK(lsa.nRanks == 1 && lsa.rank == 0 && lsa.stride == 1);
    CHECK(rail.nRanks == 1 && rail.rank == 0 && rail.stride == 1);
    EQ(ncclTeamRankToLsa(comm, ncclTeamWorld(comm), 0), 0);
    devcomm_on_one_rank(comm);
    EXPECT(ncclCommDestroy(comm), ncclSuccess);
    printf("device_link_test: device communicators made on a GPU\n");
  } else {
    CHECK(single == ncclUnhandledCudaError || single == ncclSystemError);
  }
  return finish("device_link_test");
}
