//! The host entry points of NCCL 2.28's device API (`nccl_device.h`): device communicators,
//! teams, barrier and LL all-to-all requirements. They exist so that programs linked against
//! them load (PyTorch's `libtorch_cuda.so` imports `ncclDevCommCreate`/`ncclDevCommDestroy`).
//! weft has no NCCL device API of its own: device communicators and their requirements belong
//! to the fallback NCCL and are made on the fallback communicator; without a fallback these
//! calls fail with `ncclInvalidUsage`. Team arithmetic that needs no device communicator
//! (`ncclTeamWorld`, `ncclTeamRankToWorld`) is answered by weft itself.

use std::ffi::{c_int, c_void};

use crate::comm::lookup;
use crate::error::NcclError;
use crate::fallback::{Fallback, FallbackComm, fallback};
use crate::ffi::{ncclComm_t, ncclResult_t, ncclTeam_t};

/// Why a device-API call cannot run without the real NCCL.
fn no_device_api(call: &str) -> NcclError {
    NcclError::invalid_usage(format!(
        "{call}: weft has no NCCL device API; set WEFT_NCCL_FALLBACK_LIB to the real libnccl.so.2 to use it"
    ))
}

/// The fallback library (for calls that take no communicator).
fn library(call: &str) -> Result<&'static Fallback, NcclError> {
    fallback()?.ok_or_else(|| no_device_api(call))
}

/// Runs `f` with the fallback communicator of `comm`.
fn with_fallback<T>(
    call: &str,
    comm: ncclComm_t,
    f: impl FnOnce(&FallbackComm) -> Result<T, NcclError>,
) -> Result<T, NcclError> {
    let ready = lookup(comm)?.ready()?;
    let fc = ready.fallback.as_ref().ok_or_else(|| no_device_api(call))?;
    f(fc)
}

/// Resolves `name` in the fallback as a function of type `F`.
///
/// # Safety
/// `F` must be the C signature `nccl_device.h` 2.28 declares for `name`.
unsafe fn entry<F: Copy>(f: &Fallback, name: &str) -> Result<F, NcclError> {
    // SAFETY: the caller's contract on F.
    unsafe { f.lib.symbol::<F>(name) }.map_err(|e| {
        NcclError::invalid_usage(format!("the fallback NCCL ({}) has no {name}: {e}", f.lib.path().display()))
    })
}

/// `ncclDevCommCreate(comm, reqs, outDevComm)` on the fallback communicator.
///
/// # Safety
/// `reqs` and `out` as nccl_device.h specifies (passed through unchanged).
pub unsafe fn dev_comm_create(comm: ncclComm_t, reqs: *const c_void, out: *mut c_void) -> Result<(), NcclError> {
    with_fallback("ncclDevCommCreate", comm, |fc| {
        type F = unsafe extern "C" fn(*mut c_void, *const c_void, *mut c_void) -> ncclResult_t;
        // SAFETY: F is ncclDevCommCreate's signature.
        let create: F = unsafe { entry(fc.fallback, "ncclDevCommCreate") }?;
        // SAFETY: a live fallback communicator and the application's pointers.
        fc.fallback.check("ncclDevCommCreate", unsafe { create(fc.raw(), reqs, out) })
    })
}

/// `ncclDevCommDestroy(comm, devComm)` on the fallback communicator.
///
/// # Safety
/// `dev_comm` was made by [`dev_comm_create`] for `comm`.
pub unsafe fn dev_comm_destroy(comm: ncclComm_t, dev_comm: *const c_void) -> Result<(), NcclError> {
    with_fallback("ncclDevCommDestroy", comm, |fc| {
        type F = unsafe extern "C" fn(*mut c_void, *const c_void) -> ncclResult_t;
        // SAFETY: F is ncclDevCommDestroy's signature.
        let destroy: F = unsafe { entry(fc.fallback, "ncclDevCommDestroy") }?;
        // SAFETY: a live fallback communicator and a device communicator it made.
        fc.fallback.check("ncclDevCommDestroy", unsafe { destroy(fc.raw(), dev_comm) })
    })
}

/// `ncclGinBarrierCreateRequirement(comm, team, nBarriers, outHandle, outReq)`.
///
/// # Safety
/// Out-pointers as nccl_device.h specifies.
pub unsafe fn gin_barrier_requirement(
    comm: ncclComm_t,
    team: ncclTeam_t,
    barriers: c_int,
    handle: *mut c_void,
    req: *mut c_void,
) -> Result<(), NcclError> {
    with_fallback("ncclGinBarrierCreateRequirement", comm, |fc| {
        type F = unsafe extern "C" fn(*mut c_void, ncclTeam_t, c_int, *mut c_void, *mut c_void) -> ncclResult_t;
        // SAFETY: F is ncclGinBarrierCreateRequirement's signature.
        let make: F = unsafe { entry(fc.fallback, "ncclGinBarrierCreateRequirement") }?;
        // SAFETY: a live fallback communicator and the application's pointers.
        fc.fallback.check("ncclGinBarrierCreateRequirement", unsafe { make(fc.raw(), team, barriers, handle, req) })
    })
}

/// `ncclLsaBarrierCreateRequirement(team, nBarriers, outHandle, outReq)` (no communicator).
///
/// # Safety
/// Out-pointers as nccl_device.h specifies.
pub unsafe fn lsa_barrier_requirement(
    team: ncclTeam_t,
    barriers: c_int,
    handle: *mut c_void,
    req: *mut c_void,
) -> Result<(), NcclError> {
    let f = library("ncclLsaBarrierCreateRequirement")?;
    type F = unsafe extern "C" fn(ncclTeam_t, c_int, *mut c_void, *mut c_void) -> ncclResult_t;
    // SAFETY: F is ncclLsaBarrierCreateRequirement's signature.
    let make: F = unsafe { entry(f, "ncclLsaBarrierCreateRequirement") }?;
    // SAFETY: the application's pointers.
    f.check("ncclLsaBarrierCreateRequirement", unsafe { make(team, barriers, handle, req) })
}

/// `ncclLLA2ACreateRequirement(nBlocks, nSlots, outHandle, outReq)` (no communicator).
///
/// # Safety
/// Out-pointers as nccl_device.h specifies.
pub unsafe fn ll_a2a_requirement(
    blocks: c_int,
    slots: c_int,
    handle: *mut c_void,
    req: *mut c_void,
) -> Result<(), NcclError> {
    let f = library("ncclLLA2ACreateRequirement")?;
    type F = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> ncclResult_t;
    // SAFETY: F is ncclLLA2ACreateRequirement's signature.
    let make: F = unsafe { entry(f, "ncclLLA2ACreateRequirement") }?;
    // SAFETY: the application's pointers.
    f.check("ncclLLA2ACreateRequirement", unsafe { make(blocks, slots, handle, req) })
}

/// `ncclLLA2ACalcSlots(maxElts, maxEltSize)`: the fallback's answer, or -1 without one (the
/// requirement it sizes cannot be made without it either).
pub fn ll_a2a_slots(elts: c_int, elt_size: c_int) -> c_int {
    let Ok(f) = library("ncclLLA2ACalcSlots") else { return -1 };
    type F = unsafe extern "C" fn(c_int, c_int) -> c_int;
    // SAFETY: F is ncclLLA2ACalcSlots's signature.
    match unsafe { entry::<F>(f, "ncclLLA2ACalcSlots") } {
        // SAFETY: plain integers.
        Ok(calc) => unsafe { calc(elts, elt_size) },
        Err(_) => -1,
    }
}

/// `ncclTeamWorld(comm)`: every rank, stride 1.
pub fn team_world(comm: ncclComm_t) -> Result<ncclTeam_t, NcclError> {
    let c = lookup(comm)?;
    Ok(ncclTeam_t { nRanks: c.nranks as c_int, rank: c.rank as c_int, stride: 1 })
}

/// `ncclTeamLsa(comm)` / `ncclTeamRail(comm)`: the fallback's teams (they describe its device
/// communicators' load-store and rail domains).
pub fn team_of(call: &'static str, comm: ncclComm_t) -> Result<ncclTeam_t, NcclError> {
    with_fallback(call, comm, |fc| {
        type F = unsafe extern "C" fn(*mut c_void) -> ncclTeam_t;
        // SAFETY: F is the signature of ncclTeamLsa and ncclTeamRail.
        let team: F = unsafe { entry(fc.fallback, call) }?;
        // SAFETY: a live fallback communicator.
        Ok(unsafe { team(fc.raw()) })
    })
}

/// `ncclTeamRankToWorld(comm, team, rank)`: NCCL's definition, this rank's world rank moved by
/// `(rank - team.rank)` strides.
pub fn team_rank_to_world(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> Result<c_int, NcclError> {
    let c = lookup(comm)?;
    Ok(c.rank as c_int + (rank - team.rank) * team.stride)
}

/// `ncclTeamRankToLsa(comm, team, rank)`: the fallback's answer.
pub fn team_rank_to_lsa(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> Result<c_int, NcclError> {
    with_fallback("ncclTeamRankToLsa", comm, |fc| {
        type F = unsafe extern "C" fn(*mut c_void, ncclTeam_t, c_int) -> c_int;
        // SAFETY: F is ncclTeamRankToLsa's signature.
        let to_lsa: F = unsafe { entry(fc.fallback, "ncclTeamRankToLsa") }?;
        // SAFETY: a live fallback communicator and plain values.
        Ok(unsafe { to_lsa(fc.raw(), team, rank) })
    })
}
