//! # weft-gpu — safe CUDA for weft
//!
//! **Owns:** finding and loading `libcuda` and `libnvrtc` at run time (a missing library is an
//! error that says what was searched, never a panic), devices and their primary contexts,
//! streams, events and CUDA graphs, device memory through the VMM API (exportable as POSIX file
//! descriptors) with a legacy `cuMemAlloc` + IPC-handle fallback, host-pinned memory mapped into
//! the device, typed device buffers and views of them (whose memory outlives the stream work
//! that uses it), application allocations (their identity and export), NVRTC compilation to
//! CUBIN with an on-disk cache keyed by a hash of every input, module loading and kernel
//! launch (alone, or in a [`LaunchScope`] that borrows its arguments' owners), typed kernel parameter lists ([`device_kernels!`], checked against the kernel
//! definitions through generated prototypes), and whether two GPUs are NVLink peers (NVML,
//! loaded at run time: [`nvml::nvlink_between`]).
//!
//! **Must not:** know about ranks, peers or collectives; call `cuMulticast*` (NVLink multicast is
//! forbidden on our machines); block on a device with no bound when a bounded variant exists.
//!
//! **Depends on:** `weft-types` (kernel-argument layouts), `cudarc` (raw driver/NVRTC bindings,
//! dynamically loaded), `libloading` (also for NVML), `half` (the 16-bit float element types).

mod buffer;
mod device;
mod dma_buf;
mod driver;
mod element;
mod error;
pub mod kernel_params;
pub mod loader;
mod memory;
mod module;
pub mod nvml;
pub mod nvrtc;
mod scope;
mod stream;
mod user_memory;

pub use buffer::{DeviceBuffer, DeviceSlice, DeviceSliceMut, DeviceView};
pub use device::{Device, RdmaWriteVisibility, SavedContext};
pub use dma_buf::{DmaBuf, export_dma_buf};
pub use driver::DevicePtr;
pub use element::{DeviceElement, ElementFn, F8E4M3, F8E5M2, with_element};
pub use error::GpuError;
pub use kernel_params::{KernelParam, KernelParams, KernelSignature, prototypes_header};
pub use memory::{
    AllocKind, DeviceMemory, ForeignRelease, ImportedMemory, LegacyIpcHandle, PinnedHostMemory, check_device_range,
};
pub use module::{Kernel, KernelArg, KernelArgs, LaunchConfig, MAX_KERNEL_ARGS, Module, Pod};
pub use nvrtc::{
    CompileOptions, CompiledKernel, KernelResources, KernelSource, compile, default_cache_dir, kernel_resources,
    nvrtc_version,
};
pub use scope::LaunchScope;
pub use stream::{CaptureModeRelaxed, Event, Graph, Stream};
pub use user_memory::{AllocationKey, Sharing, UserAllocation};

/// Result alias of this crate.
pub type Result<T, E = GpuError> = std::result::Result<T, E>;
