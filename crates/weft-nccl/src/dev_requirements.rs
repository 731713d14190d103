//! What an application asks of a device communicator, in weft's terms: NCCL 2.28.9's
//! requirement calls (barrier and LL all-to-all resources, computed as NCCL 2.28.9 computes
//! them), and the reading of an `ncclDevCommRequirements_t` into a [`DevCommPlan`] for
//! `weft_gin::DevComm`, or the reason weft cannot serve it.
//!
//! Resources live in one window of the device communicator, the resource window (window 0 of
//! its handle), as in NCCL: a resource's handle is its offset there in 128-byte units
//! (`ncclGetResourceBufferOffset(h) == h * 128`). Signals and counters of resources follow the
//! communicator's own (`ginSignalCount`, `ginCounterCount`, which start at 0), in list order.

use std::collections::HashSet;
use std::ffi::c_int;

use weft_gin::{Requirements, WINDOW_ALIGN};

use crate::device_ffi::{
    RESOURCE_GRANULE, ncclDevCommRequirements_t, ncclDevResourceHandle_t, ncclDevResourceRequirements_t,
    ncclGinBarrierHandle_t, ncclLLA2AHandle_t, ncclLsaBarrierHandle_t, ncclTeam_t, ncclTeamRequirements_t,
};
use crate::error::NcclError;

/// Index of the resource window among a device communicator's windows.
pub const RESOURCE_WINDOW: u32 = 0;

/// Most links a requirement list may have (a longer one is taken for a corrupt list).
const MAX_LIST: usize = 1 << 16;

/// A count the application passed, as a `u32`; negative is `ncclInvalidArgument`.
fn count(what: &str, value: c_int) -> Result<u32, NcclError> {
    u32::try_from(value).map_err(|_| NcclError::invalid_argument(format!("{what} = {value} is negative")))
}

/// `a * b * c` bytes, or `ncclInvalidArgument` naming `what` when it overflows.
fn bytes(what: &str, factors: &[u64]) -> Result<usize, NcclError> {
    factors
        .iter()
        .try_fold(1u64, |acc, &f| acc.checked_mul(f))
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| NcclError::invalid_argument(format!("{what}: the buffer size overflows")))
}

/// `ncclLsaBarrierCreateRequirement(team, nBarriers, handle, req)` of NCCL 2.28.9: a buffer of
/// `(3 + team.nRanks) * nBarriers` words, 4-byte aligned, whose handle goes to
/// `handle.bufHandle`; `handle.nBarriers` is set now.
///
/// # Safety
/// `handle` is valid for writes (it is only written through and pointed into).
pub unsafe fn lsa_barrier(
    team: ncclTeam_t,
    barriers: c_int,
    handle: *mut ncclLsaBarrierHandle_t,
) -> Result<ncclDevResourceRequirements_t, NcclError> {
    let n = count("nBarriers", barriers)?;
    let ranks = count("team.nRanks", team.nRanks)?;
    let size = bytes("ncclLsaBarrierCreateRequirement", &[u64::from(n), 3 + u64::from(ranks), 4])?;
    // SAFETY: the caller's valid handle.
    unsafe { (*handle).nBarriers = barriers };
    // SAFETY: a field of the caller's valid handle (no reference is made).
    Ok(buffer(size, 4, unsafe { &raw mut (*handle).bufHandle }))
}

/// `ncclGinBarrierCreateRequirement(comm, team, nBarriers, handle, req)` of NCCL 2.28.9 (which
/// uses neither the communicator nor the team): one epoch word per barrier and GIN context
/// (4), whose handle goes to `handle.bufHandle`, and `nBarriers` signals, the first to
/// `handle.signal0`.
///
/// # Safety
/// `handle` is valid for writes.
pub unsafe fn gin_barrier(
    barriers: c_int,
    handle: *mut ncclGinBarrierHandle_t,
) -> Result<ncclDevResourceRequirements_t, NcclError> {
    let n = count("nBarriers", barriers)?;
    let size = bytes("ncclGinBarrierCreateRequirement", &[u64::from(n), 4, 4])?;
    Ok(ncclDevResourceRequirements_t {
        ginSignalCount: barriers,
        // SAFETY: fields of the caller's valid handle (no reference is made).
        outGinSignalStart: unsafe { &raw mut (*handle).signal0 },
        // SAFETY: as above.
        ..buffer(size, 4, unsafe { &raw mut (*handle).bufHandle })
    })
}

/// `ncclLLA2ACreateRequirement(nBlocks, nSlots, handle, req)` of NCCL 2.28.9: per block one
/// 16-byte header slot and two epochs of `nSlots` 16-byte slots, 16-byte aligned, whose handle
/// goes to `handle.bufHandle`; `handle.nSlots` is set now.
///
/// # Safety
/// `handle` is valid for writes.
pub unsafe fn ll_a2a(
    blocks: c_int,
    slots: c_int,
    handle: *mut ncclLLA2AHandle_t,
) -> Result<ncclDevResourceRequirements_t, NcclError> {
    let b = count("nBlocks", blocks)?;
    let s = count("nSlots", slots)?;
    let size = bytes("ncclLLA2ACreateRequirement", &[u64::from(b), 1 + 2 * u64::from(s), 16])?;
    // SAFETY: the caller's valid handle.
    unsafe { (*handle).nSlots = s };
    // SAFETY: a field of the caller's valid handle (no reference is made).
    Ok(buffer(size, 16, unsafe { &raw mut (*handle).bufHandle }))
}

/// A requirement of one buffer of `size` bytes aligned to `align`, whose handle goes to `out`.
fn buffer(size: usize, align: usize, out: *mut ncclDevResourceHandle_t) -> ncclDevResourceRequirements_t {
    ncclDevResourceRequirements_t { bufferSize: size, bufferAlign: align, outBufferHandle: out, ..Default::default() }
}

/// `ncclLLA2ACalcSlots(maxElts, maxEltSize)` of NCCL 2.28.9: a slot per element and 8 bytes
/// of it. Negative arguments or an overflow are an error (NCCL returns -1 for a negative
/// element count and garbage for the rest).
pub fn ll_a2a_slots(elts: c_int, elt_size: c_int) -> Result<c_int, NcclError> {
    let e = count("maxElts", elts)?;
    let s = count("maxEltSize", elt_size)?;
    e.checked_mul(s.div_ceil(8))
        .and_then(|n| c_int::try_from(n).ok())
        .ok_or_else(|| NcclError::invalid_argument(format!("{elts} elements of {elt_size} bytes need too many slots")))
}

/// An application's `ncclDevCommRequirements_t`, read whole (its lists copied out).
#[derive(Clone, Debug)]
pub struct Requested {
    /// The struct itself.
    pub reqs: ncclDevCommRequirements_t,
    /// `resourceRequirementsList`, in order.
    pub resources: Vec<ncclDevResourceRequirements_t>,
    /// `teamRequirementsList`, in order.
    pub teams: Vec<ncclTeamRequirements_t>,
}

/// Reads `reqs` and walks its lists. A struct from newer headers (NCCL 2.29 gave it a
/// `size`/`magic`/`version` header: its first word is then a small size where 2.28.9 has a
/// pointer) is refused, as is a list that loops.
///
/// # Safety
/// `reqs` points to a readable `ncclDevCommRequirements_t` whose lists are null-terminated
/// chains of readable links (nccl_device/core.h's contract).
pub unsafe fn read(reqs: *const ncclDevCommRequirements_t) -> Result<Requested, NcclError> {
    // SAFETY: the caller's readable struct (plain integers and pointers: every bit pattern is valid).
    let r = unsafe { reqs.read() };
    let first = r.resourceRequirementsList as usize;
    if (1..4096).contains(&first) {
        let magic = r.teamRequirementsList as usize as u32;
        let header = if magic == crate::ffi::NCCL_CONFIG_MAGIC { " with NCCL's magic" } else { "" };
        return Err(NcclError::invalid_usage(format!(
            "reqs starts with the size {first}{header}, not a resourceRequirementsList pointer: it was built with \
             newer NCCL headers (NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER, NCCL 2.29 or later); this libnccl.so.2 \
             implements NCCL 2.28.9, whose ncclDevCommRequirements has no size/magic/version: build against \
             2.28.9's nccl_device.h"
        )));
    }
    // SAFETY: the caller's contract on the lists.
    let resources = unsafe { walk("resourceRequirementsList", r.resourceRequirementsList, |l| l.next) }?;
    // SAFETY: as above.
    let teams = unsafe { walk("teamRequirementsList", r.teamRequirementsList, |l| l.next) }?;
    Ok(Requested { reqs: r, resources, teams })
}

/// The links of a null-terminated list starting at `head`.
///
/// # Safety
/// Every link reached is readable.
unsafe fn walk<T: Copy>(what: &str, head: *mut T, next: impl Fn(&T) -> *mut T) -> Result<Vec<T>, NcclError> {
    let mut links = Vec::new();
    let mut seen = HashSet::new();
    let mut at = head;
    while !at.is_null() {
        if !seen.insert(at as usize) || links.len() == MAX_LIST {
            return Err(NcclError::invalid_argument(format!("{what} loops back to link {at:p} (or is corrupt)")));
        }
        // SAFETY: the caller's contract.
        let link = unsafe { at.read() };
        at = next(&link);
        links.push(link);
    }
    Ok(links)
}

/// A value for the application once the device communicator exists: `value` is written to
/// the `u32` at address `at` (a handle, a first signal or a first counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Output {
    /// The application's address.
    pub at: usize,
    /// What goes there.
    pub value: u32,
}

/// What weft makes for one `ncclDevCommCreate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevCommPlan {
    /// weft-gin's requirements (the resource window, if any, is window [`RESOURCE_WINDOW`]).
    pub requirements: Requirements,
    /// The handles and first signals and counters of the resources.
    pub outputs: Vec<Output>,
}

impl DevCommPlan {
    /// The plan for `requested`, or why weft cannot serve it: `ncclInvalidArgument` for values
    /// NCCL gives no meaning to (negative counts, an alignment that is no power of two),
    /// `ncclInvalidUsage` for what NCCL 2.28.9 offers and weft's device API does not.
    pub fn new(requested: &Requested) -> Result<Self, NcclError> {
        let r = &requested.reqs;
        let refuse = |what: String| Err(NcclError::invalid_usage(what));
        if r.lsaMultimem != 0 {
            return refuse("lsaMultimem: weft never uses NVLink multicast (NVLS); leave it false".into());
        }
        if let Some(i) = requested.teams.iter().position(|t| t.multimem != 0) {
            return refuse(format!(
                "teamRequirementsList link {i} asks for multimem: weft never uses NVLink multicast (NVLS)"
            ));
        }
        if r.railGinBarrierCount != 0 {
            count("railGinBarrierCount", r.railGinBarrierCount)?;
            return refuse(format!(
                "railGinBarrierCount = {}: weft's device API has no rail-team barrier; use barrierCount (a world \
                 barrier, weft::Gin::barrier) or lsaBarrierCount (weft::Gin::lsa_barrier)",
                r.railGinBarrierCount
            ));
        }
        for (what, value) in [("lsaLLA2ABlockCount", r.lsaLLA2ABlockCount), ("lsaLLA2ASlotCount", r.lsaLLA2ASlotCount)]
        {
            if value != 0 {
                count(what, value)?;
                return refuse(format!("{what} = {value}: weft's device API has no LL all-to-all"));
            }
        }
        let mut signals = u64::from(count("ginSignalCount", r.ginSignalCount)?);
        let mut counters = u64::from(count("ginCounterCount", r.ginCounterCount)?);
        let mut window = 0u64;
        let mut outputs = Vec::new();
        let mut emit = |at: usize, value: u64| -> Result<(), NcclError> {
            let value = u32::try_from(value)
                .map_err(|_| NcclError::invalid_usage(format!("a resource handle or index {value} exceeds 32 bits")))?;
            if at != 0 {
                outputs.push(Output { at, value });
            }
            Ok(())
        };
        for (i, res) in requested.resources.iter().enumerate() {
            let what = |field: &str| format!("resourceRequirementsList link {i}: {field}");
            let align = res.bufferAlign.max(1) as u64;
            if !align.is_power_of_two() {
                return Err(NcclError::invalid_argument(format!(
                    "{} is not a power of two",
                    what(&format!("bufferAlign = {align}"))
                )));
            }
            if align > WINDOW_ALIGN {
                return refuse(format!(
                    "{}: weft aligns resource buffers to at most {WINDOW_ALIGN} bytes",
                    what(&format!("bufferAlign = {align}"))
                ));
            }
            let offset = window.next_multiple_of(align.max(RESOURCE_GRANULE));
            window = offset
                .checked_add(res.bufferSize as u64)
                .ok_or_else(|| NcclError::invalid_argument(what("bufferSize overflows")))?;
            emit(res.outBufferHandle as usize, offset / RESOURCE_GRANULE)?;
            emit(res.outGinSignalStart as usize, signals)?;
            signals += u64::from(count(&what("ginSignalCount"), res.ginSignalCount)?);
            emit(res.outGinCounterStart as usize, counters)?;
            counters += u64::from(count(&what("ginCounterCount"), res.ginCounterCount)?);
        }
        let total = |what: &str, n: u64| {
            u32::try_from(n).map_err(|_| NcclError::invalid_usage(format!("{n} {what} in all exceed 32 bits")))
        };
        let requirements = Requirements {
            signals: total("signals", signals)?,
            counters: total("counters", counters)?,
            world_barriers: count("barrierCount", r.barrierCount)?,
            lsa_barriers: count("lsaBarrierCount", r.lsaBarrierCount)?,
            windows: if window > 0 { vec![window.next_multiple_of(RESOURCE_GRANULE)] } else { Vec::new() },
        };
        Ok(Self { requirements, outputs })
    }

    /// Writes the outputs into the application's memory.
    ///
    /// # Safety
    /// Every output address is a writable `u32` of the application's (the requirement lists'
    /// `out*` pointers, valid until the call or its group completes: nccl_device.h's contract).
    pub unsafe fn deliver(&self) {
        for o in &self.outputs {
            // SAFETY: the caller's contract; unaligned in case the application packed its handle.
            unsafe { (o.at as *mut u32).write_unaligned(o.value) };
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    fn zero() -> ncclDevCommRequirements_t {
        ncclDevCommRequirements_t {
            resourceRequirementsList: std::ptr::null_mut(),
            teamRequirementsList: std::ptr::null_mut(),
            lsaMultimem: 0,
            barrierCount: 0,
            lsaBarrierCount: 0,
            railGinBarrierCount: 0,
            lsaLLA2ABlockCount: 0,
            lsaLLA2ASlotCount: 0,
            ginForceEnable: 0,
            ginContextCount: 0,
            ginSignalCount: 0,
            ginCounterCount: 0,
        }
    }

    fn plan(
        reqs: ncclDevCommRequirements_t,
        resources: Vec<ncclDevResourceRequirements_t>,
    ) -> Result<DevCommPlan, NcclError> {
        DevCommPlan::new(&Requested { reqs, resources, teams: Vec::new() })
    }

    fn message(r: Result<DevCommPlan, NcclError>) -> (crate::Code, String) {
        let e = r.unwrap_err();
        (e.code, e.message)
    }

    #[test]
    fn counts_map_onto_weft_gin_requirements() {
        let reqs = ncclDevCommRequirements_t {
            barrierCount: 2,
            lsaBarrierCount: 3,
            ginSignalCount: 4,
            ginCounterCount: 5,
            ginForceEnable: 1,
            ginContextCount: 4,
            ..zero()
        };
        let p = plan(reqs, Vec::new()).unwrap();
        let want = Requirements { signals: 4, counters: 5, world_barriers: 2, lsa_barriers: 3, windows: Vec::new() };
        assert_eq!((p.requirements, p.outputs), (want, Vec::new()));
    }

    #[test]
    fn resources_share_one_window_at_128_byte_handles_and_follow_the_own_signals() {
        let (mut h0, mut h1, mut h2, mut s1, mut c1, mut s2) = (0u32, 0u32, 0u32, 0u32, 0u32, 0u32);
        let resources = vec![
            ncclDevResourceRequirements_t {
                bufferSize: 100,
                bufferAlign: 4,
                outBufferHandle: &raw mut h0,
                ..Default::default()
            },
            ncclDevResourceRequirements_t {
                bufferSize: 1000,
                bufferAlign: 256,
                outBufferHandle: &raw mut h1,
                ginSignalCount: 3,
                outGinSignalStart: &raw mut s1,
                ginCounterCount: 2,
                outGinCounterStart: &raw mut c1,
                ..Default::default()
            },
            ncclDevResourceRequirements_t {
                bufferSize: 8,
                outBufferHandle: &raw mut h2,
                ginSignalCount: 1,
                outGinSignalStart: &raw mut s2,
                ..Default::default()
            },
            // No buffer and no outputs: nothing to write.
            ncclDevResourceRequirements_t { ginSignalCount: 2, ..Default::default() },
        ];
        let p = plan(ncclDevCommRequirements_t { ginSignalCount: 2, ginCounterCount: 1, ..zero() }, resources).unwrap();
        // 100 bytes at 0; 1000 at 256 (aligned to 256); 8 at 1280 (the next 128 after 1256).
        assert_eq!(p.requirements.windows, vec![1280 + 128]);
        assert_eq!((p.requirements.signals, p.requirements.counters), (2 + 3 + 1 + 2, 1 + 2));
        // SAFETY: every output points at a local above.
        unsafe { p.deliver() };
        assert_eq!((h0, h1, h2), (0, 2, 10));
        assert_eq!((s1, c1, s2), (2, 1, 5));
    }

    #[test]
    fn what_weft_cannot_serve_is_invalid_usage_and_says_why() {
        use crate::Code::{InvalidArgument, InvalidUsage};
        let (code, m) = message(plan(ncclDevCommRequirements_t { railGinBarrierCount: 1, ..zero() }, Vec::new()));
        assert!(code == InvalidUsage && m.contains("no rail-team barrier") && m.contains("barrierCount"), "{m}");
        let (code, m) = message(plan(ncclDevCommRequirements_t { lsaMultimem: 1, ..zero() }, Vec::new()));
        assert!(code == InvalidUsage && m.contains("NVLink multicast"), "{m}");
        let (code, m) = message(plan(ncclDevCommRequirements_t { lsaLLA2ABlockCount: 2, ..zero() }, Vec::new()));
        assert!(code == InvalidUsage && m.contains("lsaLLA2ABlockCount = 2") && m.contains("LL all-to-all"), "{m}");
        let team = ncclTeamRequirements_t {
            next: std::ptr::null_mut(),
            team: ncclTeam_t::default(),
            multimem: 1,
            outMultimemHandle: std::ptr::null_mut(),
        };
        let (code, m) =
            message(DevCommPlan::new(&Requested { reqs: zero(), resources: Vec::new(), teams: vec![team] }));
        assert!(code == InvalidUsage && m.contains("link 0 asks for multimem"), "{m}");
        let plain = ncclTeamRequirements_t { multimem: 0, ..team };
        assert!(DevCommPlan::new(&Requested { reqs: zero(), resources: Vec::new(), teams: vec![plain] }).is_ok());
        let big = ncclDevResourceRequirements_t { bufferSize: 8, bufferAlign: 4096, ..Default::default() };
        let (code, m) = message(plan(zero(), vec![big]));
        assert!(code == InvalidUsage && m.contains("link 0: bufferAlign = 4096") && m.contains("at most 256"), "{m}");
        let odd = ncclDevResourceRequirements_t { bufferSize: 8, bufferAlign: 24, ..Default::default() };
        let (code, m) = message(plan(zero(), vec![odd]));
        assert!(code == InvalidArgument && m.contains("not a power of two"), "{m}");
        for reqs in [
            ncclDevCommRequirements_t { ginSignalCount: -1, ..zero() },
            ncclDevCommRequirements_t { barrierCount: -2, ..zero() },
            ncclDevCommRequirements_t { railGinBarrierCount: -1, ..zero() },
        ] {
            let (code, m) = message(plan(reqs, Vec::new()));
            assert!(code == InvalidArgument && m.contains("is negative"), "{m}");
        }
        let negative = ncclDevResourceRequirements_t { ginCounterCount: -3, ..Default::default() };
        let (code, m) = message(plan(zero(), vec![negative]));
        assert!(code == InvalidArgument && m.contains("link 0: ginCounterCount = -3 is negative"), "{m}");
    }

    #[test]
    fn newer_headers_and_looping_lists_are_refused() {
        // NCCL 2.29's struct: size, magic, version first.
        let mut newer = [0u8; size_of::<ncclDevCommRequirements_t>()];
        newer[..8].copy_from_slice(&96usize.to_le_bytes());
        newer[8..12].copy_from_slice(&crate::ffi::NCCL_CONFIG_MAGIC.to_le_bytes());
        // SAFETY: a readable struct of the right size (every bit pattern is valid).
        let e = unsafe { read(newer.as_ptr().cast()) }.unwrap_err();
        assert_eq!(e.code, crate::Code::InvalidUsage);
        assert!(e.message.contains("size 96 with NCCL's magic") && e.message.contains("2.28.9"), "{}", e.message);
        let mut a = ncclDevResourceRequirements_t::default();
        let mut b = ncclDevResourceRequirements_t { next: &raw mut a, ..Default::default() };
        a.next = &raw mut b;
        let looping = ncclDevCommRequirements_t { resourceRequirementsList: &raw mut a, ..zero() };
        // SAFETY: a readable struct whose list links are readable.
        let e = unsafe { read(&looping) }.unwrap_err();
        assert!(e.message.contains("resourceRequirementsList loops"), "{}", e.message);
        let mut c = ncclDevResourceRequirements_t { bufferSize: 64, ..Default::default() };
        let listed = ncclDevCommRequirements_t { resourceRequirementsList: &raw mut c, ..zero() };
        // SAFETY: as above.
        let r = unsafe { read(&listed) }.unwrap();
        assert_eq!((r.resources.len(), r.resources[0].bufferSize, r.teams.len()), (1, 64, 0));
    }

    #[test]
    fn requirement_calls_size_as_nccl_2_28_9() {
        // The values NCCL 2.28.9's own library returns (checked against it by tests/c_abi.rs).
        let mut lsa = ncclLsaBarrierHandle_t::default();
        // SAFETY: a local handle.
        let r = unsafe { lsa_barrier(ncclTeam_t { nRanks: 4, rank: 1, stride: 1 }, 3, &raw mut lsa) }.unwrap();
        assert_eq!((r.bufferSize, r.bufferAlign, lsa.nBarriers), (84, 4, 3));
        assert_eq!(r.outBufferHandle, &raw mut lsa.bufHandle);
        let mut gin = ncclGinBarrierHandle_t::default();
        // SAFETY: a local handle.
        let r = unsafe { gin_barrier(3, &raw mut gin) }.unwrap();
        assert_eq!((r.bufferSize, r.bufferAlign, r.ginSignalCount), (48, 4, 3));
        assert_eq!((r.outBufferHandle, r.outGinSignalStart), (&raw mut gin.bufHandle, &raw mut gin.signal0));
        let mut a2a = ncclLLA2AHandle_t::default();
        // SAFETY: a local handle.
        let r = unsafe { ll_a2a(5, 9, &raw mut a2a) }.unwrap();
        assert_eq!((r.bufferSize, r.bufferAlign, a2a.nSlots), (1520, 16, 9));
        assert_eq!(
            (ll_a2a_slots(7, 17).unwrap(), ll_a2a_slots(100, 4).unwrap(), ll_a2a_slots(0, 0).unwrap()),
            (21, 100, 0)
        );
        assert!(ll_a2a_slots(-1, 8).is_err() && ll_a2a_slots(1 << 30, 64).is_err());
        // SAFETY: a local handle.
        let negative = unsafe { lsa_barrier(ncclTeam_t::default(), -1, &raw mut lsa) };
        assert!(negative.unwrap_err().message.contains("nBarriers = -1"));
    }
}
