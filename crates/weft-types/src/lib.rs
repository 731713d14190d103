//! # weft-types — the layouts weft's host and device code share
//!
//! **Owns:** every `#[repr(C)]` struct and enum that CUDA device code reads or writes (device
//! handles of semaphores and channels, LL packets, the device error record, the collective
//! context and send/receive plans), each declared once
//! through [`device_structs!`]/[`device_enums!`], which also record the C++ spelling of every
//! field. From that record [`cuda::generated_header`] writes `device/include/weft/generated/types.cuh`
//! with `static_assert`s of every `sizeof`/`offsetof`; tests check the checked-in header is
//! current and compile it with NVRTC, so no layout is kept in sync by hand.
//!
//! **Must not:** depend on any crate, allocate device memory, or contain `unsafe`.
//!
//! **Depends on:** nothing.
#![forbid(unsafe_code)]

#[macro_use]
mod declare;
mod coll;
mod collective;
pub mod cuda;
mod handles;
mod packets;
mod status;

pub use coll::{CollContext, MAX_RANKS, P2pPlan};
pub use collective::{DataType, ReduceOp};
pub use declare::{EnumInfo, FieldInfo, StructInfo};
pub use handles::{MemoryChannelDeviceHandle, SemaphoreDeviceHandle, WaitContext};
pub use packets::{Ll8Packet, Ll16Packet};
pub use status::{DeviceErrorCode, DeviceErrorRecord, WaitOp};

/// Every device-visible struct, in declaration order (a struct appears after the ones it embeds).
pub fn all_structs() -> Vec<StructInfo> {
    let mut all = Vec::new();
    all.extend(status::structs());
    all.extend(handles::structs());
    all.extend(packets::structs());
    all.extend(coll::structs());
    all
}

/// Every device-visible enum.
pub fn all_enums() -> Vec<EnumInfo> {
    let mut all = status::enums();
    all.extend(collective::enums());
    all
}
