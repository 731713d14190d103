//! The host entry points of NCCL 2.28.9's device API (`nccl_device.h`): device communicators,
//! teams, and the barrier and LL all-to-all requirements.
//!
//! A communicator's device API is weft's own (weft-gin, see [`crate::dev_comm`]) when it has a
//! weft side, unless `devcomm` is in `WEFT_NCCL_FORCE_FALLBACK`; otherwise the fallback's. The
//! calls that name a communicator follow that route: `ncclDevCommCreate` and
//! `ncclDevCommDestroy` (collective: inside a group they run at `ncclGroupEnd`, one thread per
//! communicator), `ncclGinBarrierCreateRequirement`, `ncclTeamLsa`, `ncclTeamRail` and
//! `ncclTeamRankToLsa`. `ncclTeamWorld` and `ncclTeamRankToWorld` are the same arithmetic on
//! both. The requirement calls that name no communicator (`ncclLsaBarrierCreateRequirement`,
//! `ncclLLA2ACreateRequirement`, `ncclLLA2ACalcSlots`) are answered by the fallback when one is
//! loaded (so what they size serves a fallback device communicator of any NCCL version; weft's
//! own takes any sizes), else by weft, which computes what NCCL 2.28.9 does.

use std::ffi::{c_int, c_void};

use weft_gin::Team;

use crate::api::non_null;
use crate::comm::{Native, Ready, lookup};
use crate::dev_requirements::{self as reqs, DevCommPlan};
use crate::device_ffi::{
    WeftPart, ncclDevComm_t, ncclDevCommRequirements_t, ncclDevResourceRequirements_t, ncclGinBarrierHandle_t,
    ncclLLA2AHandle_t, ncclLsaBarrierHandle_t, ncclTeam_t,
};
use crate::env::{Kind, env};
use crate::error::NcclError;
use crate::exec::{self, SetupWork};
use crate::fallback::{Fallback, FallbackComm, fallback};
use crate::ffi::{ncclComm_t, ncclResult_t};
use crate::route::{Route, route};

/// Who serves a communicator's device API.
enum Engine<'a> {
    /// weft-gin, on the communicator's weft side.
    Weft(&'a Native),
    /// The fallback NCCL's communicator.
    Fallback(&'a FallbackComm),
}

/// The engine of `ready`'s device API (see the module docs).
fn engine(ready: &Ready) -> Result<Engine<'_>, NcclError> {
    let missing =
        |what: &str| NcclError::invalid_usage(format!("the device API was routed to {what}, which is missing"));
    match route(Kind::DevComm, None, ready.engines(env()?))? {
        Route::Weft => ready.weft.as_ref().map(Engine::Weft).map_err(|_| missing("weft")),
        Route::Fallback => ready.fallback.as_ref().map(Engine::Fallback).ok_or_else(|| missing("the fallback")),
    }
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

/// The work of `ncclDevCommCreate` and `ncclDevCommDestroy`, run at once or at the end of the
/// group (addresses are the application's pointers, valid until then: nccl_device.h's
/// contract).
#[derive(Debug)]
pub enum DevCommWork {
    /// weft's: make the device communicator of `plan`, then write its outputs and the
    /// `ncclDevComm` at `out`.
    Create {
        /// What to make.
        plan: Box<DevCommPlan>,
        /// The application's `ncclDevComm*`.
        out: usize,
    },
    /// weft's: destroy the device communicator `part` names.
    Destroy {
        /// Its part of the application's `ncclDevComm`.
        part: WeftPart,
    },
    /// The fallback's `ncclDevCommCreate(comm, reqs, out)`.
    FallbackCreate {
        /// The application's requirements.
        reqs: usize,
        /// The application's `ncclDevComm*`.
        out: usize,
    },
    /// The fallback's `ncclDevCommDestroy(comm, devComm)`.
    FallbackDestroy {
        /// The application's `ncclDevComm*`.
        dev_comm: usize,
    },
}

impl DevCommWork {
    /// Runs the work on `ready` (its GPU current).
    pub fn run(self, ready: &Ready) -> Result<(), NcclError> {
        let native = || ready.weft.as_ref().map_err(|why| NcclError::invalid_usage(format!("no weft side: {why}")));
        let fallback = || ready.fallback.as_ref().ok_or_else(|| NcclError::invalid_usage("no fallback communicator"));
        match self {
            DevCommWork::Create { plan, out } => {
                let native = native()?;
                let dev_comm = native.dev_comms.create(&native.comm, &plan)?;
                // SAFETY: the requirement lists' out-pointers and `out`, the application's,
                // valid until this call (or its group) completes.
                unsafe {
                    plan.deliver();
                    (out as *mut ncclDevComm_t).write(dev_comm);
                }
                Ok(())
            }
            DevCommWork::Destroy { part } => {
                let native = native()?;
                native.dev_comms.destroy(&native.comm, part)
            }
            DevCommWork::FallbackCreate { reqs, out } => {
                let fc = fallback()?;
                type F = unsafe extern "C" fn(*mut c_void, *const c_void, *mut c_void) -> ncclResult_t;
                // SAFETY: F is ncclDevCommCreate's signature.
                let create: F = unsafe { entry(fc.fallback, "ncclDevCommCreate") }?;
                // SAFETY: a live fallback communicator and the application's pointers.
                fc.fallback.check("ncclDevCommCreate", unsafe { create(fc.raw(), reqs as _, out as _) })
            }
            DevCommWork::FallbackDestroy { dev_comm } => {
                let fc = fallback()?;
                type F = unsafe extern "C" fn(*mut c_void, *const c_void) -> ncclResult_t;
                // SAFETY: F is ncclDevCommDestroy's signature.
                let destroy: F = unsafe { entry(fc.fallback, "ncclDevCommDestroy") }?;
                // SAFETY: a live fallback communicator and a device communicator it made.
                fc.fallback.check("ncclDevCommDestroy", unsafe { destroy(fc.raw(), dev_comm as _) })
            }
        }
    }
}

/// `ncclDevCommCreate(comm, reqs, outDevComm)`: the requirements are checked now (on weft's
/// route: [`DevCommPlan::new`]); the device communicator is made now or at the group's end,
/// and `outDevComm` and the requirements' out-pointers are written only when it exists.
///
/// # Safety
/// `reqs` and `out` as nccl_device.h specifies (checked for null); both stay valid until the
/// call (or its group) completes.
pub unsafe fn dev_comm_create(
    comm: ncclComm_t,
    reqs: *const ncclDevCommRequirements_t,
    out: *mut ncclDevComm_t,
) -> Result<(), NcclError> {
    non_null(reqs, "reqs")?;
    non_null(out, "outDevComm")?;
    let comm = lookup(comm)?;
    let ready = comm.ready()?;
    let work = match engine(&ready)? {
        Engine::Weft(_) => {
            // SAFETY: the caller's readable requirements.
            let plan = DevCommPlan::new(&unsafe { reqs::read(reqs) }?)?;
            DevCommWork::Create { plan: Box::new(plan), out: out as usize }
        }
        Engine::Fallback(_) => DevCommWork::FallbackCreate { reqs: reqs as usize, out: out as usize },
    };
    exec::setup(comm, SetupWork::DevComm(work))
}

/// `ncclDevCommDestroy(comm, devComm)`: a device communicator weft made (its magic is in it)
/// must be a live one of `comm`; anything else goes to the fallback when it serves `comm`.
///
/// # Safety
/// `dev_comm` as nccl_device.h specifies (checked for null), valid until the call (or its
/// group) completes.
pub unsafe fn dev_comm_destroy(comm: ncclComm_t, dev_comm: *const ncclDevComm_t) -> Result<(), NcclError> {
    non_null(dev_comm, "devComm")?;
    let comm = lookup(comm)?;
    let ready = comm.ready()?;
    // SAFETY: the caller's readable struct (plain integers and pointers).
    let part = unsafe { dev_comm.read() }.weft_part();
    let work = match (part, engine(&ready)?) {
        (Some(part), Engine::Weft(native)) => {
            native.dev_comms.check(part)?;
            DevCommWork::Destroy { part }
        }
        (None, Engine::Fallback(_)) => DevCommWork::FallbackDestroy { dev_comm: dev_comm as usize },
        (Some(part), Engine::Fallback(_)) => {
            return Err(NcclError::invalid_argument(format!(
                "devComm {} was made by weft, but this communicator's device API is the fallback's",
                part.id
            )));
        }
        (None, Engine::Weft(_)) => {
            return Err(NcclError::invalid_argument(
                "devComm is no device communicator ncclDevCommCreate made (weft's magic is missing)",
            ));
        }
    };
    exec::setup(comm, SetupWork::DevComm(work))
}

/// `ncclGinBarrierCreateRequirement(comm, team, nBarriers, outHandle, outReq)`: weft's
/// (NCCL 2.28.9's sizes) or the fallback's, as `comm`'s device API.
///
/// # Safety
/// Out-pointers as nccl_device.h specifies (checked for null).
pub unsafe fn gin_barrier_requirement(
    comm: ncclComm_t,
    team: ncclTeam_t,
    barriers: c_int,
    handle: *mut ncclGinBarrierHandle_t,
    req: *mut ncclDevResourceRequirements_t,
) -> Result<(), NcclError> {
    non_null(handle, "outHandle")?;
    non_null(req, "outReq")?;
    let ready = lookup(comm)?.ready()?;
    match engine(&ready)? {
        // SAFETY: the caller's non-null handle and requirement.
        Engine::Weft(_) => unsafe { req.write(reqs::gin_barrier(barriers, handle)?) },
        Engine::Fallback(fc) => {
            type F = unsafe extern "C" fn(
                *mut c_void,
                ncclTeam_t,
                c_int,
                *mut ncclGinBarrierHandle_t,
                *mut ncclDevResourceRequirements_t,
            ) -> ncclResult_t;
            // SAFETY: F is ncclGinBarrierCreateRequirement's signature.
            let make: F = unsafe { entry(fc.fallback, "ncclGinBarrierCreateRequirement") }?;
            // SAFETY: a live fallback communicator and the application's pointers.
            let code = unsafe { make(fc.raw(), team, barriers, handle, req) };
            return fc.fallback.check("ncclGinBarrierCreateRequirement", code);
        }
    }
    Ok(())
}

/// The fallback library's `name` as an `F`, for a call that names no communicator: `None`
/// without a fallback, or when it lacks `name` (weft answers then).
///
/// # Safety
/// `F` must be the C signature `nccl_device.h` 2.28 declares for `name`.
unsafe fn fallback_entry<F: Copy>(name: &str) -> Result<Option<(&'static Fallback, F)>, NcclError> {
    let Some(f) = fallback()? else { return Ok(None) };
    // SAFETY: the caller's contract on F.
    Ok(unsafe { entry::<F>(f, name) }.ok().map(|g| (f, g)))
}

/// `ncclLsaBarrierCreateRequirement(team, nBarriers, outHandle, outReq)`.
///
/// # Safety
/// Out-pointers as nccl_device.h specifies (checked for null).
pub unsafe fn lsa_barrier_requirement(
    team: ncclTeam_t,
    barriers: c_int,
    handle: *mut ncclLsaBarrierHandle_t,
    req: *mut ncclDevResourceRequirements_t,
) -> Result<(), NcclError> {
    non_null(handle, "outHandle")?;
    non_null(req, "outReq")?;
    const NAME: &str = "ncclLsaBarrierCreateRequirement";
    type F = unsafe extern "C" fn(
        ncclTeam_t,
        c_int,
        *mut ncclLsaBarrierHandle_t,
        *mut ncclDevResourceRequirements_t,
    ) -> ncclResult_t;
    // SAFETY: F is the call's signature.
    match unsafe { fallback_entry::<F>(NAME) }? {
        // SAFETY: the application's pointers.
        Some((f, make)) => f.check(NAME, unsafe { make(team, barriers, handle, req) }),
        None => {
            // SAFETY: the caller's non-null handle and requirement.
            unsafe { req.write(reqs::lsa_barrier(team, barriers, handle)?) };
            Ok(())
        }
    }
}

/// `ncclLLA2ACreateRequirement(nBlocks, nSlots, outHandle, outReq)`.
///
/// # Safety
/// Out-pointers as nccl_device.h specifies (checked for null).
pub unsafe fn ll_a2a_requirement(
    blocks: c_int,
    slots: c_int,
    handle: *mut ncclLLA2AHandle_t,
    req: *mut ncclDevResourceRequirements_t,
) -> Result<(), NcclError> {
    non_null(handle, "outHandle")?;
    non_null(req, "outReq")?;
    const NAME: &str = "ncclLLA2ACreateRequirement";
    type F =
        unsafe extern "C" fn(c_int, c_int, *mut ncclLLA2AHandle_t, *mut ncclDevResourceRequirements_t) -> ncclResult_t;
    // SAFETY: F is the call's signature.
    match unsafe { fallback_entry::<F>(NAME) }? {
        // SAFETY: the application's pointers.
        Some((f, make)) => f.check(NAME, unsafe { make(blocks, slots, handle, req) }),
        None => {
            // SAFETY: the caller's non-null handle and requirement.
            unsafe { req.write(reqs::ll_a2a(blocks, slots, handle)?) };
            Ok(())
        }
    }
}

/// `ncclLLA2ACalcSlots(maxElts, maxEltSize)`.
pub fn ll_a2a_slots(elts: c_int, elt_size: c_int) -> Result<c_int, NcclError> {
    type F = unsafe extern "C" fn(c_int, c_int) -> c_int;
    // SAFETY: F is ncclLLA2ACalcSlots's signature.
    match unsafe { fallback_entry::<F>("ncclLLA2ACalcSlots") }? {
        // SAFETY: plain integers.
        Some((_, calc)) => Ok(unsafe { calc(elts, elt_size) }),
        None => reqs::ll_a2a_slots(elts, elt_size),
    }
}

/// `ncclTeamWorld(comm)`: every rank, stride 1.
pub fn team_world(comm: ncclComm_t) -> Result<ncclTeam_t, NcclError> {
    let c = lookup(comm)?;
    Ok(ncclTeam_t { nRanks: c.nranks as c_int, rank: c.rank as c_int, stride: 1 })
}

/// Which of weft's teams a call asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TeamKind {
    /// `ncclTeamLsa`.
    Lsa,
    /// `ncclTeamRail`.
    Rail,
}

impl TeamKind {
    fn call(self) -> &'static str {
        match self {
            TeamKind::Lsa => "ncclTeamLsa",
            TeamKind::Rail => "ncclTeamRail",
        }
    }
}

/// `team` as an `ncclTeam_t` (members evenly `stride` apart); `single_stride` is the stride
/// NCCL reports for a team of one. `None` when the members are not evenly spaced.
pub fn nccl_team(team: &Team, single_stride: usize) -> Option<ncclTeam_t> {
    let m = team.members();
    let stride = if m.len() > 1 { m[1].checked_sub(m[0])? } else { single_stride };
    if stride == 0 || m.windows(2).any(|w| w[1].checked_sub(w[0]) != Some(stride)) {
        return None;
    }
    let int = |n: usize| c_int::try_from(n).ok();
    Some(ncclTeam_t { nRanks: int(m.len())?, rank: int(team.rank())?, stride: int(stride)? })
}

/// weft's LSA and rail teams of `native`'s rank, as NCCL describes teams: the LSA team's
/// stride is 1 and a rail team of one has the LSA team's size as its stride, as in NCCL.
fn weft_team(native: &Native, kind: TeamKind) -> Result<ncclTeam_t, NcclError> {
    let teams = weft_gin::Teams::of(&native.comm)
        .ok_or_else(|| NcclError::invalid_usage("this rank lies outside its communicator's topology"))?;
    let (team, single) = match kind {
        TeamKind::Lsa => (&teams.lsa, 1),
        TeamKind::Rail => (&teams.rail, teams.lsa.size()),
    };
    nccl_team(team, single).ok_or_else(|| {
        NcclError::invalid_usage(format!(
            "weft's {kind:?} team {:?} is not evenly spaced: an ncclTeam_t cannot describe it",
            team.members()
        ))
    })
}

/// `ncclTeamLsa(comm)` / `ncclTeamRail(comm)`: weft's teams (the ranks of this rank's node,
/// which weft-gin reaches by loads and stores, and the ranks of its index on every node) or the
/// fallback's, as `comm`'s device API.
pub fn team_of(kind: TeamKind, comm: ncclComm_t) -> Result<ncclTeam_t, NcclError> {
    let ready = lookup(comm)?.ready()?;
    match engine(&ready)? {
        Engine::Weft(native) => weft_team(native, kind),
        Engine::Fallback(fc) => {
            type F = unsafe extern "C" fn(*mut c_void) -> ncclTeam_t;
            // SAFETY: F is the signature of ncclTeamLsa and ncclTeamRail.
            let team: F = unsafe { entry(fc.fallback, kind.call()) }?;
            // SAFETY: a live fallback communicator.
            Ok(unsafe { team(fc.raw()) })
        }
    }
}

/// `ncclTeamRankToWorld(comm, team, rank)`: NCCL's definition, this rank's world rank moved by
/// `(rank - team.rank)` strides.
pub fn team_rank_to_world(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> Result<c_int, NcclError> {
    let c = lookup(comm)?;
    Ok(c.rank as c_int + (rank - team.rank) * team.stride)
}

/// `ncclTeamRankToLsa(comm, team, rank)`: NCCL's definition on weft's LSA team (this rank's
/// LSA rank moved by `(rank - team.rank)` strides), or the fallback's answer.
pub fn team_rank_to_lsa(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> Result<c_int, NcclError> {
    let ready = lookup(comm)?.ready()?;
    match engine(&ready)? {
        Engine::Weft(native) => Ok(weft_team(native, TeamKind::Lsa)?.rank + (rank - team.rank) * team.stride),
        Engine::Fallback(fc) => {
            type F = unsafe extern "C" fn(*mut c_void, ncclTeam_t, c_int) -> c_int;
            // SAFETY: F is ncclTeamRankToLsa's signature.
            let to_lsa: F = unsafe { entry(fc.fallback, "ncclTeamRankToLsa") }?;
            // SAFETY: a live fallback communicator and plain values.
            Ok(unsafe { to_lsa(fc.raw(), team, rank) })
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn weft_teams_read_as_nccl_teams() {
        // Two nodes of three: rank 4 is the second of node 1.
        let teams = weft_gin::Teams::new(4, &[0, 0, 0, 1, 1, 1]).unwrap();
        assert_eq!(nccl_team(&teams.lsa, 1), Some(ncclTeam_t { nRanks: 3, rank: 1, stride: 1 }));
        assert_eq!(nccl_team(&teams.rail, 3), Some(ncclTeam_t { nRanks: 2, rank: 1, stride: 3 }));
        assert_eq!(nccl_team(&teams.world, 1), Some(ncclTeam_t { nRanks: 6, rank: 4, stride: 1 }));
        // One node: the rail team is this rank alone, with NCCL's stride (the LSA size).
        let teams = weft_gin::Teams::new(1, &[0, 0, 0, 0]).unwrap();
        assert_eq!(nccl_team(&teams.rail, teams.lsa.size()), Some(ncclTeam_t { nRanks: 1, rank: 0, stride: 4 }));
        // Nodes whose ranks interleave make an LSA team no stride describes.
        let teams = weft_gin::Teams::new(0, &[0, 1, 0, 0]).unwrap();
        assert_eq!(teams.lsa.members(), &[0, 2, 3]);
        assert_eq!(nccl_team(&teams.lsa, 1), None);
    }
}
