//! The exported C ABI: every function `nccl.h` (2.28) declares and the host functions of
//! `nccl_device.h` the real library exports, each under its `nccl*` name and its `pncclX`
//! profiling alias. Each body runs inside [`guard`], so no panic crosses the ABI.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

use crate::api::{self, Args};
use crate::device_api::{self, TeamKind};
use crate::device_ffi::{
    ncclDevComm_t, ncclDevCommRequirements_t, ncclDevResourceRequirements_t, ncclGinBarrierHandle_t, ncclLLA2AHandle_t,
    ncclLsaBarrierHandle_t, ncclTeam_t,
};
use crate::exec::Coll;
use crate::ffi::{
    cudaStream_t, ncclComm_t, ncclConfig_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclScalarResidence_t,
    ncclSimInfo_t, ncclUniqueId, ncclWindow_t,
};
use crate::guard::{guard, guard_on, guard_value, last_error};

/// Defines each entry point `$name` and its alias `$alias` (which calls it).
macro_rules! exports {
    ($(
        $(#[$doc:meta])*
        fn $name:ident / $alias:ident ($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block
    )*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// Every pointer argument must be valid for what nccl.h says the call does with it.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret $body

        #[doc = concat!("`", stringify!($alias), "`, the profiling alias of [`", stringify!($name), "`].")]
        ///
        /// # Safety
        #[doc = concat!("As for [`", stringify!($name), "`].")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $alias($($arg: $ty),*) -> $ret {
            // SAFETY: the same contract as the entry point it forwards to.
            unsafe { $name($($arg),*) }
        }
    )*};
}

/// Arguments of a collective without an operator or root.
fn args(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> Args {
    Args { send, recv, count, dtype, op: crate::ffi::ncclSum, root: 0, comm, stream }
}

exports! {
    /// The version of the NCCL API weft implements (`NCCL_VERSION_CODE` of nccl.h 2.28.9).
    fn ncclGetVersion / pncclGetVersion(version: *mut c_int) -> ncclResult_t {
        // SAFETY: the application's out-pointer (checked for null).
        guard("ncclGetVersion", || unsafe { api::get_version(version) })
    }

    /// A new unique id; the calling process hosts rank 0's rendezvous.
    fn ncclGetUniqueId / pncclGetUniqueId(uniqueId: *mut ncclUniqueId) -> ncclResult_t {
        // SAFETY: the application's out-pointer (checked for null).
        guard("ncclGetUniqueId", || unsafe { api::get_unique_id(uniqueId) })
    }

    /// Creates this rank's communicator on the current GPU.
    fn ncclCommInitRank / pncclCommInitRank(comm: *mut ncclComm_t, nranks: c_int, commId: ncclUniqueId, rank: c_int) -> ncclResult_t {
        // SAFETY: a null config means defaults.
        guard("ncclCommInitRank", || unsafe { api::comm_init_rank_config(comm, nranks, commId, rank, std::ptr::null()) })
    }

    /// [`ncclCommInitRank`] with a configuration; fields weft does not implement must be unset.
    fn ncclCommInitRankConfig / pncclCommInitRankConfig(
        comm: *mut ncclComm_t, nranks: c_int, commId: ncclUniqueId, rank: c_int, config: *mut ncclConfig_t,
    ) -> ncclResult_t {
        // SAFETY: the application's config (nccl.h contract).
        guard("ncclCommInitRankConfig", || unsafe { api::comm_init_rank_config(comm, nranks, commId, rank, config) })
    }

    /// [`ncclCommInitRankConfig`] from the first of `nId` ids.
    fn ncclCommInitRankScalable / pncclCommInitRankScalable(
        newcomm: *mut ncclComm_t, nranks: c_int, myrank: c_int, nId: c_int, commIds: *mut ncclUniqueId,
        config: *mut ncclConfig_t,
    ) -> ncclResult_t {
        // SAFETY: the application's arguments (nccl.h contract).
        guard("ncclCommInitRankScalable", || unsafe {
            api::comm_init_rank_scalable(newcomm, nranks, myrank, nId, commIds, config)
        })
    }

    /// One communicator per GPU of `devlist` (or GPUs `0..ndev`), driven by this process.
    fn ncclCommInitAll / pncclCommInitAll(comm: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t {
        // SAFETY: the application's arrays (nccl.h contract).
        guard("ncclCommInitAll", || unsafe { api::comm_init_all(comm, ndev, devlist) })
    }

    /// Finalises the communicator (the fallback's side; weft's has nothing in flight).
    fn ncclCommFinalize / pncclCommFinalize(comm: ncclComm_t) -> ncclResult_t {
        guard_on("ncclCommFinalize", comm, || api::comm_finalize(comm))
    }

    /// Destroys the communicator.
    fn ncclCommDestroy / pncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
        guard_on("ncclCommDestroy", comm, || api::comm_destroy(comm, false))
    }

    /// Destroys the communicator, aborting the fallback's.
    fn ncclCommAbort / pncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
        guard_on("ncclCommAbort", comm, || api::comm_destroy(comm, true))
    }

    /// Not implemented: returns `ncclInvalidUsage`.
    fn ncclCommRevoke / pncclCommRevoke(comm: ncclComm_t, revokeFlags: c_int) -> ncclResult_t {
        guard_on("ncclCommRevoke", comm, || api::comm_revoke(comm, revokeFlags))
    }

    /// Splits the communicator by color, ordering by key.
    fn ncclCommSplit / pncclCommSplit(
        comm: ncclComm_t, color: c_int, key: c_int, newcomm: *mut ncclComm_t, config: *mut ncclConfig_t,
    ) -> ncclResult_t {
        // SAFETY: the application's arguments (nccl.h contract).
        guard_on("ncclCommSplit", comm, || unsafe { api::comm_split(comm, color, key, newcomm, config) })
    }

    /// Not implemented: returns `ncclInvalidUsage`.
    fn ncclCommShrink / pncclCommShrink(
        comm: ncclComm_t, excludeRanksList: *mut c_int, excludeRanksCount: c_int, newcomm: *mut ncclComm_t,
        config: *mut ncclConfig_t, shrinkFlags: c_int,
    ) -> ncclResult_t {
        let _ = (excludeRanksList, excludeRanksCount, config, shrinkFlags);
        guard_on("ncclCommShrink", comm, || api::comm_shrink(comm, newcomm))
    }

    /// The text of a result code.
    fn ncclGetErrorString / pncclGetErrorString(result: ncclResult_t) -> *const c_char {
        guard_value("ncclGetErrorString", c"unknown result code".as_ptr(), || api::error_string(result).as_ptr())
    }

    /// The message of the last failure: `comm`'s (when live and one failed), else this
    /// thread's, else the process's (empty when nothing failed). The string stays valid on the
    /// calling thread until 16 other messages have been returned on it.
    fn ncclGetLastError / pncclGetLastError(comm: ncclComm_t) -> *const c_char {
        guard_value("ncclGetLastError", c"".as_ptr(), || {
            last_error(crate::comm::lookup(comm).ok().map(|c| c.last_error()))
        })
    }

    /// Does nothing: weft's logging is configured once from `WEFT_NCCL_LOG`.
    fn ncclResetDebugInit / pncclResetDebugInit() -> () {}

    /// The communicator's asynchronous state (timeouts and peer failures of weft's waits included).
    fn ncclCommGetAsyncError / pncclCommGetAsyncError(comm: ncclComm_t, asyncError: *mut ncclResult_t) -> ncclResult_t {
        // SAFETY: the application's out-pointer (checked for null).
        guard_on("ncclCommGetAsyncError", comm, || unsafe { api::comm_get_async_error(comm, asyncError) })
    }

    /// Number of ranks.
    fn ncclCommCount / pncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t {
        // SAFETY: the application's out-pointer (checked for null).
        guard_on("ncclCommCount", comm, || unsafe { api::comm_query(comm, count, |c| c.nranks) })
    }

    /// CUDA ordinal of the communicator's GPU.
    fn ncclCommCuDevice / pncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t {
        // SAFETY: the application's out-pointer (checked for null).
        guard_on("ncclCommCuDevice", comm, || unsafe { api::comm_query(comm, device, |c| c.device) })
    }

    /// This rank.
    fn ncclCommUserRank / pncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t {
        // SAFETY: the application's out-pointer (checked for null).
        guard_on("ncclCommUserRank", comm, || unsafe { api::comm_query(comm, rank, |c| c.rank) })
    }

    /// Registers a buffer (a hint to weft for now; registered with the fallback too).
    fn ncclCommRegister / pncclCommRegister(comm: ncclComm_t, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> ncclResult_t {
        // SAFETY: the application's arguments (nccl.h contract).
        guard_on("ncclCommRegister", comm, || unsafe { api::comm_register(comm, buff, size, handle) })
    }

    /// Releases a registration.
    fn ncclCommDeregister / pncclCommDeregister(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t {
        guard_on("ncclCommDeregister", comm, || api::comm_deregister(comm, handle))
    }

    /// A symmetric window (fallback only).
    fn ncclCommWindowRegister / pncclCommWindowRegister(
        comm: ncclComm_t, buff: *mut c_void, size: usize, win: *mut ncclWindow_t, winFlags: c_int,
    ) -> ncclResult_t {
        // SAFETY: the application's arguments (nccl.h contract).
        guard_on("ncclCommWindowRegister", comm, || unsafe { api::window_register(comm, buff, size, win, winFlags) })
    }

    /// Releases a window (fallback only).
    fn ncclCommWindowDeregister / pncclCommWindowDeregister(comm: ncclComm_t, win: ncclWindow_t) -> ncclResult_t {
        // SAFETY: the application's window (nccl.h contract).
        guard_on("ncclCommWindowDeregister", comm, || unsafe { api::window_deregister(comm, win) })
    }

    /// A PreMulSum operator (fallback only).
    fn ncclRedOpCreatePreMulSum / pncclRedOpCreatePreMulSum(
        op: *mut ncclRedOp_t, scalar: *mut c_void, datatype: ncclDataType_t, residence: ncclScalarResidence_t,
        comm: ncclComm_t,
    ) -> ncclResult_t {
        // SAFETY: the application's arguments (nccl.h contract).
        guard_on("ncclRedOpCreatePreMulSum", comm, || unsafe { api::red_op_create(op, scalar, datatype, residence, comm) })
    }

    /// Destroys a PreMulSum operator.
    fn ncclRedOpDestroy / pncclRedOpDestroy(op: ncclRedOp_t, comm: ncclComm_t) -> ncclResult_t {
        guard_on("ncclRedOpDestroy", comm, || api::red_op_destroy(op, comm))
    }

    /// Reduce to `root`.
    fn ncclReduce / pncclReduce(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t,
        root: c_int, comm: ncclComm_t, stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = Args { op, root, ..args(sendbuff, recvbuff, count, datatype, comm, stream) };
        guard_on("ncclReduce", comm, || api::collective(a, true, |op, root| Coll::Reduce { op, root }))
    }

    /// In-place broadcast from `root`.
    fn ncclBcast / pncclBcast(
        buff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int, comm: ncclComm_t, stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = Args { root, ..args(buff, buff, count, datatype, comm, stream) };
        guard_on("ncclBcast", comm, || api::collective(a, false, |_, root| Coll::Broadcast { root }))
    }

    /// Broadcast from `root`.
    fn ncclBroadcast / pncclBroadcast(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int,
        comm: ncclComm_t, stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = Args { root, ..args(sendbuff, recvbuff, count, datatype, comm, stream) };
        guard_on("ncclBroadcast", comm, || api::collective(a, false, |_, root| Coll::Broadcast { root }))
    }

    /// AllReduce.
    fn ncclAllReduce / pncclAllReduce(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t,
        comm: ncclComm_t, stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = Args { op, ..args(sendbuff, recvbuff, count, datatype, comm, stream) };
        guard_on("ncclAllReduce", comm, || api::collective(a, true, |op, _| Coll::AllReduce(op)))
    }

    /// ReduceScatter (`recvcount` elements per rank).
    fn ncclReduceScatter / pncclReduceScatter(
        sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize, datatype: ncclDataType_t, op: ncclRedOp_t,
        comm: ncclComm_t, stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = Args { op, ..args(sendbuff, recvbuff, recvcount, datatype, comm, stream) };
        guard_on("ncclReduceScatter", comm, || api::collective(a, true, |op, _| Coll::ReduceScatter(op)))
    }

    /// AllGather (`sendcount` elements per rank).
    fn ncclAllGather / pncclAllGather(
        sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize, datatype: ncclDataType_t,
        comm: ncclComm_t, stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = args(sendbuff, recvbuff, sendcount, datatype, comm, stream);
        guard_on("ncclAllGather", comm, || api::collective(a, false, |_, _| Coll::AllGather))
    }

    /// AllToAll (`count` elements per peer).
    fn ncclAlltoAll / pncclAlltoAll(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t,
        comm: ncclComm_t, stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = args(sendbuff, recvbuff, count, datatype, comm, stream);
        guard_on("ncclAlltoAll", comm, || api::collective(a, false, |_, _| Coll::AllToAll))
    }

    /// Gather to `root` (`count` elements per rank).
    fn ncclGather / pncclGather(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int,
        comm: ncclComm_t, stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = Args { root, ..args(sendbuff, recvbuff, count, datatype, comm, stream) };
        guard_on("ncclGather", comm, || api::collective(a, false, |_, root| Coll::Gather { root }))
    }

    /// Scatter from `root` (`count` elements per rank).
    fn ncclScatter / pncclScatter(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int,
        comm: ncclComm_t, stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = Args { root, ..args(sendbuff, recvbuff, count, datatype, comm, stream) };
        guard_on("ncclScatter", comm, || api::collective(a, false, |_, root| Coll::Scatter { root }))
    }

    /// Sends `count` elements to `peer`.
    fn ncclSend / pncclSend(
        sendbuff: *const c_void, count: usize, datatype: ncclDataType_t, peer: c_int, comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = Args { root: peer, ..args(sendbuff, std::ptr::null_mut(), count, datatype, comm, stream) };
        guard_on("ncclSend", comm, || api::collective(a, false, |_, peer| Coll::Send { peer }))
    }

    /// Receives `count` elements from `peer`.
    fn ncclRecv / pncclRecv(
        recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, peer: c_int, comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> ncclResult_t {
        let a = Args { root: peer, ..args(std::ptr::null(), recvbuff, count, datatype, comm, stream) };
        guard_on("ncclRecv", comm, || api::collective(a, false, |_, peer| Coll::Recv { peer }))
    }

    /// Opens a group (nests).
    fn ncclGroupStart / pncclGroupStart() -> ncclResult_t {
        guard("ncclGroupStart", api::group_start)
    }

    /// Closes a group; the outermost end runs the group's work.
    fn ncclGroupEnd / pncclGroupEnd() -> ncclResult_t {
        guard("ncclGroupEnd", api::group_end)
    }

    /// Not implemented: returns `ncclInvalidUsage`.
    fn ncclGroupSimulateEnd / pncclGroupSimulateEnd(simInfo: *mut ncclSimInfo_t) -> ncclResult_t {
        guard("ncclGroupSimulateEnd", || api::group_simulate_end(simInfo))
    }

    /// Device memory for communication buffers on the current GPU.
    fn ncclMemAlloc / pncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> ncclResult_t {
        // SAFETY: the application's out-pointer (checked for null).
        guard("ncclMemAlloc", || unsafe { api::mem_alloc(ptr, size) })
    }

    /// Frees memory from [`ncclMemAlloc`].
    fn ncclMemFree / pncclMemFree(ptr: *mut c_void) -> ncclResult_t {
        guard("ncclMemFree", || api::mem_free(ptr))
    }

    /// A device communicator: weft-gin's (see `docs/gin.md`), or the fallback's.
    fn ncclDevCommCreate / pncclDevCommCreate(
        comm: ncclComm_t,
        reqs: *const ncclDevCommRequirements_t,
        outDevComm: *mut ncclDevComm_t,
    ) -> ncclResult_t {
        // SAFETY: the application's pointers (checked for null).
        guard_on("ncclDevCommCreate", comm, || unsafe { device_api::dev_comm_create(comm, reqs, outDevComm) })
    }

    /// Destroys a device communicator of [`ncclDevCommCreate`].
    fn ncclDevCommDestroy / pncclDevCommDestroy(comm: ncclComm_t, devComm: *const ncclDevComm_t) -> ncclResult_t {
        // SAFETY: the application's pointer (checked for null).
        guard_on("ncclDevCommDestroy", comm, || unsafe { device_api::dev_comm_destroy(comm, devComm) })
    }

    /// The resources of `nBarriers` GIN barriers over `team`.
    fn ncclGinBarrierCreateRequirement / pncclGinBarrierCreateRequirement(
        comm: ncclComm_t,
        team: ncclTeam_t,
        nBarriers: c_int,
        outHandle: *mut ncclGinBarrierHandle_t,
        outReq: *mut ncclDevResourceRequirements_t,
    ) -> ncclResult_t {
        // SAFETY: the application's pointers (checked for null).
        guard_on("ncclGinBarrierCreateRequirement", comm, || unsafe {
            device_api::gin_barrier_requirement(comm, team, nBarriers, outHandle, outReq)
        })
    }

    /// The resources of `nBarriers` LSA barriers over `team`.
    fn ncclLsaBarrierCreateRequirement / pncclLsaBarrierCreateRequirement(
        team: ncclTeam_t,
        nBarriers: c_int,
        outHandle: *mut ncclLsaBarrierHandle_t,
        outReq: *mut ncclDevResourceRequirements_t,
    ) -> ncclResult_t {
        // SAFETY: the application's pointers (checked for null).
        guard("ncclLsaBarrierCreateRequirement", || unsafe {
            device_api::lsa_barrier_requirement(team, nBarriers, outHandle, outReq)
        })
    }

    /// The resources of an LL all-to-all of `nBlocks` blocks and `nSlots` slots.
    fn ncclLLA2ACreateRequirement / pncclLLA2ACreateRequirement(
        nBlocks: c_int,
        nSlots: c_int,
        outHandle: *mut ncclLLA2AHandle_t,
        outReq: *mut ncclDevResourceRequirements_t,
    ) -> ncclResult_t {
        // SAFETY: the application's pointers (checked for null).
        guard("ncclLLA2ACreateRequirement", || unsafe {
            device_api::ll_a2a_requirement(nBlocks, nSlots, outHandle, outReq)
        })
    }

    /// The LL all-to-all slots of `maxElts` elements of `maxEltSize` bytes (-1 on error).
    fn ncclLLA2ACalcSlots / pncclLLA2ACalcSlots(maxElts: c_int, maxEltSize: c_int) -> c_int {
        value("ncclLLA2ACalcSlots", -1, || device_api::ll_a2a_slots(maxElts, maxEltSize))
    }

    /// Every rank of the communicator (an empty team on error).
    fn ncclTeamWorld / pncclTeamWorld(comm: ncclComm_t) -> ncclTeam_t {
        value("ncclTeamWorld", ncclTeam_t::default(), || device_api::team_world(comm))
    }

    /// The load-store-accessible team of this rank (an empty team on error).
    fn ncclTeamLsa / pncclTeamLsa(comm: ncclComm_t) -> ncclTeam_t {
        value("ncclTeamLsa", ncclTeam_t::default(), || device_api::team_of(TeamKind::Lsa, comm))
    }

    /// This rank's rail team (an empty team on error).
    fn ncclTeamRail / pncclTeamRail(comm: ncclComm_t) -> ncclTeam_t {
        value("ncclTeamRail", ncclTeam_t::default(), || device_api::team_of(TeamKind::Rail, comm))
    }

    /// The world rank of `rank` of `team` (-1 on error).
    fn ncclTeamRankToWorld / pncclTeamRankToWorld(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int {
        value("ncclTeamRankToWorld", -1, || device_api::team_rank_to_world(comm, team, rank))
    }

    /// The LSA rank of `rank` of `team` (-1 on error).
    fn ncclTeamRankToLsa / pncclTeamRankToLsa(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int {
        value("ncclTeamRankToLsa", -1, || device_api::team_rank_to_lsa(comm, team, rank))
    }
}

/// Runs a device-API body that returns a value: a failure is recorded for `ncclGetLastError`
/// and `none` returned; a panic yields `none` too.
fn value<T: Copy>(call: &'static str, none: T, body: impl FnOnce() -> Result<T, crate::error::NcclError>) -> T {
    guard_value(call, none, || {
        body().unwrap_or_else(|e| {
            crate::guard::set_last_error(&format!("{call}: {}", e.message));
            none
        })
    })
}
