//! # weft-types — the layouts weft's host and device code share
//!
//! **Owns:** every `#[repr(C)]` struct and enum that CUDA device code reads or writes (device
//! handles of semaphores and channels, LL packets, the device error record, the collective
//! context and send/receive plans, the GPU→CPU FIFO's commands and device handle, the expert-parallel network path's transfer command, the PortChannel's device handle, the plan
//! executor's operations, the expert-parallel kernels' context and arguments, GIN's device communicator), each declared once
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
mod ep;
mod exec;
mod fifo;
mod gin;
mod handles;
mod packets;
mod port;
mod status;
mod transfer;

pub use coll::{CollContext, LlPairs, MAX_RANKS, P2pPlan, PeerBuffers};
pub use collective::{Collective, DataType, ReduceOp};
pub use declare::{EnumInfo, FieldInfo, StructInfo};
pub use ep::{
    EpCombineArgs, EpContext, EpDispatchArgs, EpLayoutArgs, EpLlCombineArgs, EpLlDispatchArgs, EpLlNet, EpNotifyArgs,
    EpRailArgs, EpRailArrival,
};
pub use exec::{
    EXEC_BARRIER, EXEC_ENTRY_FENCE, EXEC_EXIT_FENCE, EXEC_FLUSH, EXEC_INPUT_STAGED, EXEC_LOC_PACKETS, EXEC_LOCAL,
    EXEC_MAX_INPUTS, EXEC_MAX_OUTPUTS, EXEC_MAX_RANKS, EXEC_OUTPUT_DIRECT, EXEC_OUTPUT_STAGED, EXEC_PACKETS,
    EXEC_PART_SHIFT, EXEC_PARTS_SHIFT, EXEC_PORT_PUT, EXEC_PUBLISH, EXEC_RESOLVED_ROWS, EXEC_ROW_CACHE_ENTRY_BYTES,
    EXEC_ROW_CACHE_KEY_WORDS, EXEC_SIGNAL, EXEC_SIGNAL_PORT, EXEC_STATIC_SHARED_BYTES, EXEC_STEP_STRIDE,
    EXEC_WAIT_LINK, EXEC_WAIT_PORT, EXEC_WAIT_TB, ExecBuffers, ExecContext, ExecLoc, ExecOp,
};
pub use fifo::{
    FIFO_CONNECTION_BITS, FIFO_FST_SRC_OFFSET_SHIFT, FIFO_FST_VALID_SHIFT, FIFO_MAX_DEPTH, FIFO_MEMORY_BITS,
    FIFO_OP_BITS, FIFO_SIZE_BITS, FIFO_SND_CONNECTION_SHIFT, FIFO_SND_DST_MEMORY_SHIFT, FIFO_SND_OP_SHIFT,
    FIFO_SND_SRC_MEMORY_SHIFT, FIFO_SND_VALID_SHIFT, FIFO_TAIL_CACHE_STOPPED, FieldOutOfRange, FifoCommand,
    FifoCommandFields, FifoDeviceHandle, FifoOp, FifoStopCode, fifo_parity,
};
pub use gin::{
    DevCommHandle, GIN_MAX_RANKS, GIN_MAX_SIGNALS, GIN_STAGING_SLOTS, NCCL_DEV_COMM_BYTES, NCCL_DEV_COMM_WEFT_MAGIC,
    NCCL_DEV_COMM_WEFT_OFFSET,
};
pub use handles::{MemoryChannelDeviceHandle, SemaphoreDeviceHandle, WaitContext};
pub use packets::{Ll8Packet, Ll16Packet};
pub use port::PortChannelDeviceHandle;
pub use status::{DeviceErrorCode, DeviceErrorRecord, WaitOp};
pub use transfer::{
    CounterUpdate, MalformedTransfer, TRANSFER_CONNECTION_SHIFT, TRANSFER_COUNTER_BITS, TRANSFER_FIFO_OP,
    TRANSFER_KIND_BITS, TRANSFER_KIND_SHIFT, TRANSFER_LEN_BITS, TRANSFER_VALUE_BITS, Transfer, TransferCmd,
    TransferKind,
};

/// Every device-visible struct, in declaration order (a struct appears after the ones it embeds).
pub fn all_structs() -> Vec<StructInfo> {
    let mut all = Vec::new();
    all.extend(status::structs());
    all.extend(handles::structs());
    all.extend(fifo::structs());
    all.extend(transfer::structs());
    all.extend(port::structs());
    all.extend(packets::structs());
    all.extend(coll::structs());
    all.extend(exec::structs());
    all.extend(gin::structs());
    all.extend(ep::structs());
    all
}

/// Every device-visible enum.
pub fn all_enums() -> Vec<EnumInfo> {
    let mut all = status::enums();
    all.extend(collective::enums());
    all.extend(fifo::enums());
    all.extend(transfer::enums());
    all
}

/// Every constant the device code needs besides the layouts: `(name, value, doc)`.
pub fn all_constants() -> Vec<(&'static str, u64, &'static str)> {
    let mut all = fifo::constants();
    all.extend(transfer::constants());
    all.extend(exec::constants());
    all.extend(gin::constants());
    all
}
