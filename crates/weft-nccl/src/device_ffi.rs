//! The C types of the host side of NCCL 2.28.9's device API (`nccl_device/core.h` and the
//! handles of `nccl_device/impl/*__types.h`), declared by hand with the headers' layouts.
//! [`probe_source`] turns every size and field offset here into a C++ `static_assert` that a
//! test compiles against the real headers. C `bool` fields are `u8` here: a byte the
//! application set to anything but 0 or 1 must not be undefined behaviour on our side.
#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

use weft_types::{NCCL_DEV_COMM_BYTES, NCCL_DEV_COMM_WEFT_MAGIC, NCCL_DEV_COMM_WEFT_OFFSET};

use crate::ffi::Probe;

/// `ncclTeam_t`: `nRanks` ranks, this one at `rank`, world ranks `stride` apart.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclTeam_t {
    pub nRanks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

/// `ncclDevResourceHandle_t`: a resource buffer's offset in the device communicator's
/// resource window, in units of [`RESOURCE_GRANULE`] bytes (`ncclGetResourceBufferOffset`).
pub type ncclDevResourceHandle_t = u32;

/// Bytes per unit of a [`ncclDevResourceHandle_t`] (`ncclGetResourceBufferOffset(h) == h * 128`).
pub const RESOURCE_GRANULE: u64 = 128;

/// `ncclDevResourceRequirements_t`: one link of `ncclDevCommRequirements::resourceRequirementsList`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclDevResourceRequirements_t {
    pub next: *mut ncclDevResourceRequirements_t,
    pub bufferSize: usize,
    pub bufferAlign: usize,
    pub outBufferHandle: *mut ncclDevResourceHandle_t,
    pub ginSignalCount: c_int,
    pub ginCounterCount: c_int,
    pub outGinSignalStart: *mut u32,
    pub outGinCounterStart: *mut u32,
}

impl Default for ncclDevResourceRequirements_t {
    /// All zero, as NCCL's requirement calls start from.
    fn default() -> Self {
        Self {
            next: std::ptr::null_mut(),
            bufferSize: 0,
            bufferAlign: 0,
            outBufferHandle: std::ptr::null_mut(),
            ginSignalCount: 0,
            ginCounterCount: 0,
            outGinSignalStart: std::ptr::null_mut(),
            outGinCounterStart: std::ptr::null_mut(),
        }
    }
}

/// `ncclTeamRequirements_t`: one link of `ncclDevCommRequirements::teamRequirementsList`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclTeamRequirements_t {
    pub next: *mut ncclTeamRequirements_t,
    pub team: ncclTeam_t,
    pub multimem: u8,
    pub outMultimemHandle: *mut c_void,
}

/// `ncclDevCommRequirements_t` of NCCL 2.28.9 (no size/magic/version header: that arrived
/// later, with `NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclDevCommRequirements_t {
    pub resourceRequirementsList: *mut ncclDevResourceRequirements_t,
    pub teamRequirementsList: *mut ncclTeamRequirements_t,
    pub lsaMultimem: u8,
    pub barrierCount: c_int,
    pub lsaBarrierCount: c_int,
    pub railGinBarrierCount: c_int,
    pub lsaLLA2ABlockCount: c_int,
    pub lsaLLA2ASlotCount: c_int,
    pub ginForceEnable: u8,
    pub ginContextCount: c_int,
    pub ginSignalCount: c_int,
    pub ginCounterCount: c_int,
}

/// `ncclLsaBarrierHandle_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclLsaBarrierHandle_t {
    pub bufHandle: ncclDevResourceHandle_t,
    pub nBarriers: c_int,
}

/// `ncclGinBarrierHandle_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclGinBarrierHandle_t {
    pub signal0: u32,
    pub bufHandle: ncclDevResourceHandle_t,
}

/// `ncclLLA2AHandle_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ncclLLA2AHandle_t {
    pub bufHandle: ncclDevResourceHandle_t,
    pub nSlots: u32,
}

/// `struct ncclWindow_vidmem` (what NCCL's `ncclWindow_t` points to; inlined in `ncclDevComm`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclWindow_vidmem {
    pub winHost: *mut c_void,
    pub lsaFlatBase: *mut c_char,
    pub lsaRank: c_int,
    pub worldRank: c_int,
    pub stride4G: u32,
    pub mcOffset4K: u32,
    pub ginOffset4K: u32,
    pub ginWins: [*mut c_void; 4],
}

/// weft's part of an `ncclDevComm`: 16 bytes where NCCL keeps `ginSignalBase`,
/// `ginSignalCount`, `ginCounterBase` and `ginCounterCount` (at [`NCCL_DEV_COMM_WEFT_OFFSET`]),
/// which weft's device communicators do not use.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeftPart {
    /// [`NCCL_DEV_COMM_WEFT_MAGIC`].
    pub magic: u32,
    /// The device communicator's id (unique in the process, never reused).
    pub id: u32,
    /// Device address of its `DevCommHandle`.
    pub handle: u64,
}

/// `ncclDevComm_t` of NCCL 2.28.9, with NCCL's four GIN signal and counter words seen as
/// [`WeftPart`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclDevComm_t {
    pub rank: c_int,
    pub nRanks: c_int,
    pub nRanks_rcp32: u32,
    pub lsaRank: c_int,
    pub lsaSize: c_int,
    pub lsaSize_rcp32: u32,
    pub windowTable: *mut c_void,
    pub resourceWindow: *mut c_void,
    pub resourceWindow_inlined: ncclWindow_vidmem,
    pub lsaMultimem: *mut c_void,
    pub lsaBarrier: ncclLsaBarrierHandle_t,
    pub railGinBarrier: ncclGinBarrierHandle_t,
    pub ginContextCount: u8,
    pub ginTypes: [u8; 4],
    pub ginHandles: [*mut c_void; 4],
    pub weft: WeftPart,
    pub ginSignalShadows: *mut u64,
}

impl ncclDevComm_t {
    /// weft's part, when this is an `ncclDevComm` weft made (its magic is there).
    pub fn weft_part(&self) -> Option<WeftPart> {
        (self.weft.magic == NCCL_DEV_COMM_WEFT_MAGIC).then_some(self.weft)
    }
}

impl Default for ncclDevComm_t {
    /// All zero: every pointer NCCL's device code follows is null.
    fn default() -> Self {
        let null = std::ptr::null_mut();
        Self {
            rank: 0,
            nRanks: 0,
            nRanks_rcp32: 0,
            lsaRank: 0,
            lsaSize: 0,
            lsaSize_rcp32: 0,
            windowTable: null,
            resourceWindow: null,
            resourceWindow_inlined: ncclWindow_vidmem {
                winHost: null,
                lsaFlatBase: std::ptr::null_mut(),
                lsaRank: 0,
                worldRank: 0,
                stride4G: 0,
                mcOffset4K: 0,
                ginOffset4K: 0,
                ginWins: [null; 4],
            },
            lsaMultimem: null,
            lsaBarrier: ncclLsaBarrierHandle_t::default(),
            railGinBarrier: ncclGinBarrierHandle_t::default(),
            ginContextCount: 0,
            ginTypes: [0; 4],
            ginHandles: [null; 4],
            weft: WeftPart::default(),
            ginSignalShadows: std::ptr::null_mut(),
        }
    }
}

/// The reciprocal NCCL's `idivFast32` divides by (`idivRcp32` of `nccl_device/utility.h`):
/// `u32::MAX / x`, plus one when `x` is a power of two (0 for 1, which divides as itself).
pub fn idiv_rcp32(x: u32) -> u32 {
    if x == 0 {
        return 0;
    }
    (u32::MAX / x).wrapping_add(u32::from(x.is_power_of_two()))
}

/// A C++ translation unit that includes `nccl_device.h` and `static_assert`s every size and
/// field offset declared in this module against it, the place of [`WeftPart`], and
/// [`idiv_rcp32`] against NCCL's own.
pub fn probe_source() -> String {
    let mut probe = Probe::new(
        "#include <stddef.h>\n#include <nccl.h>\n#include <nccl_device.h>\n",
        "static_assert",
        "weft-nccl device_ffi.rs",
    );
    for (ty, size) in [
        ("ncclTeam_t", size_of::<ncclTeam_t>()),
        ("ncclDevResourceHandle_t", size_of::<ncclDevResourceHandle_t>()),
        ("ncclDevResourceRequirements_t", size_of::<ncclDevResourceRequirements_t>()),
        ("ncclTeamRequirements_t", size_of::<ncclTeamRequirements_t>()),
        ("ncclDevCommRequirements_t", size_of::<ncclDevCommRequirements_t>()),
        ("ncclLsaBarrierHandle_t", size_of::<ncclLsaBarrierHandle_t>()),
        ("ncclGinBarrierHandle_t", size_of::<ncclGinBarrierHandle_t>()),
        ("ncclLLA2AHandle_t", size_of::<ncclLLA2AHandle_t>()),
        ("struct ncclWindow_vidmem", size_of::<ncclWindow_vidmem>()),
        ("ncclDevComm_t", size_of::<ncclDevComm_t>()),
        ("ncclDevComm_t", NCCL_DEV_COMM_BYTES),
        ("bool", 1),
    ] {
        probe.check(&format!("sizeof({ty})"), size as i128);
    }
    macro_rules! offsets {
        ($ty:ident: $($field:ident),*) => {
            $(probe.check(&format!("offsetof({}, {})", stringify!($ty), stringify!($field)), offset_of!($ty, $field) as i128);)*
        };
    }
    offsets!(ncclTeam_t: nRanks, rank, stride);
    offsets!(ncclDevResourceRequirements_t: next, bufferSize, bufferAlign, outBufferHandle, ginSignalCount,
        ginCounterCount, outGinSignalStart, outGinCounterStart);
    offsets!(ncclTeamRequirements_t: next, team, multimem, outMultimemHandle);
    offsets!(ncclDevCommRequirements_t: resourceRequirementsList, teamRequirementsList, lsaMultimem, barrierCount,
        lsaBarrierCount, railGinBarrierCount, lsaLLA2ABlockCount, lsaLLA2ASlotCount, ginForceEnable, ginContextCount,
        ginSignalCount, ginCounterCount);
    offsets!(ncclLsaBarrierHandle_t: bufHandle, nBarriers);
    offsets!(ncclGinBarrierHandle_t: signal0, bufHandle);
    offsets!(ncclLLA2AHandle_t: bufHandle, nSlots);
    offsets!(ncclDevComm_t: rank, nRanks, nRanks_rcp32, lsaRank, lsaSize, lsaSize_rcp32, windowTable, resourceWindow,
        resourceWindow_inlined, lsaMultimem, lsaBarrier, railGinBarrier, ginContextCount, ginTypes, ginHandles,
        ginSignalShadows);
    // weft's part takes exactly NCCL's four words between ginHandles and ginSignalShadows.
    let weft = offset_of!(ncclDevComm_t, weft) as i128;
    probe.check("offsetof(ncclDevComm_t, ginSignalBase)", weft);
    probe.check("offsetof(ncclDevComm_t, ginSignalBase)", NCCL_DEV_COMM_WEFT_OFFSET as i128);
    probe.check("offsetof(ncclDevComm_t, ginSignalShadows)", weft + size_of::<WeftPart>() as i128);
    offsets!(ncclWindow_vidmem: winHost, lsaFlatBase, lsaRank, worldRank, stride4G, mcOffset4K, ginOffset4K, ginWins);
    for x in [1u32, 2, 3, 4, 5, 7, 8, 9, 12, 31, 32, 33, 1000, 4096] {
        probe.check(&format!("nccl::utility::idivRcp32({x}u)"), i128::from(idiv_rcp32(x)));
    }
    probe.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reciprocal_divides_as_nccl_divides() {
        // idivFast32 of nccl_device/utility.h, on the host: q = mulhi(x, rcp) (x when rcp is
        // 0), then one correction step.
        let div = |x: u32, y: u32| {
            let rcp = idiv_rcp32(y);
            let mut q = if rcp == 0 { x } else { ((u64::from(x) * u64::from(rcp)) >> 32) as u32 };
            if x.wrapping_sub(y.wrapping_mul(q)) >= y {
                q += 1;
            }
            q
        };
        for y in 1..=64 {
            for x in (0..4096).chain([u32::MAX / 2, 1 << 30]) {
                assert_eq!(div(x, y), x / y, "{x} / {y}");
            }
        }
    }

    #[test]
    fn weft_part_is_recognised_by_its_magic() {
        let mut c = ncclDevComm_t::default();
        assert_eq!(c.weft_part(), None);
        c.weft = WeftPart { magic: NCCL_DEV_COMM_WEFT_MAGIC, id: 7, handle: 0x1000 };
        assert_eq!(c.weft_part().map(|w| (w.id, w.handle)), Some((7, 0x1000)));
        assert_eq!(size_of::<ncclDevComm_t>(), NCCL_DEV_COMM_BYTES);
        assert_eq!(offset_of!(ncclDevComm_t, weft), NCCL_DEV_COMM_WEFT_OFFSET);
    }
}
