//! Device memory (VMM, exportable as a POSIX file descriptor; or legacy `cuMemAlloc` with IPC
//! handles), memory imported from another process, and host-pinned memory mapped into the device.

use std::ffi::c_void;
use std::fmt;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use cudarc::driver::sys;

use crate::device::Device;
use crate::driver::{DevicePtr, cu};
use crate::error::GpuError;
use crate::module::Pod;

/// How device memory is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// `cuMemCreate` + `cuMemMap`, shareable as a POSIX file descriptor.
    Vmm,
    /// `cuMemAlloc`, shareable through a legacy IPC handle.
    Legacy,
    /// VMM where the device supports it, legacy otherwise.
    Auto,
}

/// A 64-byte legacy CUDA IPC handle (`CUipcMemHandle`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LegacyIpcHandle(pub [u8; 64]);

impl fmt::Debug for LegacyIpcHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LegacyIpcHandle({:02x?}..)", &self.0[..8])
    }
}

/// How another library gives back device memory it allocated (see
/// [`DeviceMemory::from_foreign`]).
pub type ForeignRelease = Box<dyn Fn(DevicePtr) + Send + Sync>;

/// What a mapping is made of, which decides how it is given back.
enum Backing {
    /// A VMM handle (created here or imported) mapped at a reserved range.
    Vmm { handle: sys::CUmemGenericAllocationHandle },
    /// A `cuMemAlloc` allocation of this process.
    Legacy,
    /// Another process's `cuMemAlloc` allocation opened through its IPC handle.
    LegacyImport,
    /// Memory another library of this process allocated, given back by its own call.
    Foreign { release: ForeignRelease },
}

impl fmt::Debug for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Vmm { handle } => f.debug_struct("Vmm").field("handle", handle).finish(),
            Self::Legacy => f.write_str("Legacy"),
            Self::LegacyImport => f.write_str("LegacyImport"),
            Self::Foreign { .. } => f.write_str("Foreign"),
        }
    }
}

impl Backing {
    /// Gives the mapping at `ptr` back to the driver; errors are ignored (this runs in drop).
    ///
    /// # Safety
    /// `ptr`/`mapped_len` must describe this backing's live mapping, unused from now on.
    unsafe fn release(&self, device: &Device, ptr: DevicePtr, mapped_len: usize) {
        if device.bind().is_err() {
            return;
        }
        // SAFETY: caller contract: the mapping is live and no longer used.
        unsafe {
            match self {
                Backing::Vmm { handle } => {
                    let _ = cu!(cuMemUnmap(ptr, mapped_len));
                    let _ = cu!(cuMemAddressFree(ptr, mapped_len));
                    let _ = cu!(cuMemRelease(*handle));
                }
                Backing::Legacy => {
                    let _ = cu!(cuMemFree_v2(ptr));
                }
                Backing::LegacyImport => {
                    let _ = cu!(cuIpcCloseMemHandle(ptr));
                }
                Backing::Foreign { release } => release(ptr),
            }
        }
    }
}

/// Device memory owned by this process. Freed on drop; the caller keeps it alive while kernels
/// or peers use it (weft-core ties those lifetimes together).
pub struct DeviceMemory {
    device: Device,
    ptr: DevicePtr,
    len: usize,
    mapped_len: usize,
    backing: Backing,
}

// SAFETY: the allocation is a device address range; nothing about it is tied to a host thread.
unsafe impl Send for DeviceMemory {}
// SAFETY: methods take &self and either read immutable fields or call thread-safe driver APIs.
unsafe impl Sync for DeviceMemory {}

impl fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceMemory")
            .field("device", &self.device.ordinal())
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("backing", &self.backing)
            .finish()
    }
}

fn vmm_prop(device: &Device) -> Result<sys::CUmemAllocationProp, GpuError> {
    // SAFETY: CUmemAllocationProp is a plain C struct for which all-zero is a valid value.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device.raw();
    // An RDMA NIC can register VMM memory only when it is created GPUDirect-RDMA capable (as
    // NCCL's buffers are); set wherever the GPU allows it.
    let rdma =
        device.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED)?;
    prop.allocFlags.gpuDirectRDMACapable = u8::from(rdma != 0);
    Ok(prop)
}

pub(crate) fn access_desc(device: &Device) -> sys::CUmemAccessDesc {
    // SAFETY: plain C struct; all-zero is valid and every field we rely on is set below.
    let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
    desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = device.raw();
    desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    desc
}

fn vmm_supported(device: &Device) -> Result<bool, GpuError> {
    use sys::CUdevice_attribute::*;
    Ok(device.attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED)? != 0
        && device.attribute(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)? != 0)
}

/// Reserves address space and maps `handle` there with read-write access for `device`.
/// On failure everything taken here is given back (the handle stays with the caller).
///
/// # Safety
/// `handle` must be a live allocation handle of at least `size` bytes.
unsafe fn map_handle(
    device: &Device,
    handle: sys::CUmemGenericAllocationHandle,
    size: usize,
) -> Result<DevicePtr, GpuError> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: out-pointer to a local; size is a multiple of the granularity (callers ensure).
    unsafe { cu!(cuMemAddressReserve(&mut ptr, size, 0, 0, 0))? };
    let desc = access_desc(device);
    // SAFETY: ptr is a fresh reservation of `size` bytes; handle is live (caller contract).
    let mapped = unsafe { cu!(cuMemMap(ptr, size, 0, handle, 0)) }
        // SAFETY: ptr is mapped for `size` bytes; desc is a valid descriptor.
        .and_then(|()| unsafe { cu!(cuMemSetAccess(ptr, size, &desc, 1)) });
    if let Err(e) = mapped {
        // SAFETY: undo what succeeded; unmapping an unmapped range only returns an error.
        unsafe {
            let _ = cu!(cuMemUnmap(ptr, size));
            let _ = cu!(cuMemAddressFree(ptr, size));
        }
        return Err(e);
    }
    Ok(ptr)
}

impl DeviceMemory {
    /// Allocates `len` bytes (rounded up to the allocation granularity) on `device`.
    pub fn alloc(device: &Device, len: usize, kind: AllocKind) -> Result<Self, GpuError> {
        if len == 0 {
            return Err(GpuError::InvalidArgument("cannot allocate 0 bytes".into()));
        }
        device.bind()?;
        let use_vmm = match kind {
            AllocKind::Vmm => {
                if !vmm_supported(device)? {
                    return Err(GpuError::Unsupported { ordinal: device.ordinal(), what: "VMM with POSIX fd handles" });
                }
                true
            }
            AllocKind::Legacy => false,
            AllocKind::Auto => vmm_supported(device)?,
        };
        if !use_vmm {
            let mut ptr: sys::CUdeviceptr = 0;
            // SAFETY: out-pointer to a local.
            unsafe { cu!(cuMemAlloc_v2(&mut ptr, len))? };
            return Ok(Self { device: device.clone(), ptr, len, mapped_len: len, backing: Backing::Legacy });
        }
        let prop = vmm_prop(device)?;
        let mut granularity = 0usize;
        // SAFETY: out-pointer to a local, valid prop.
        unsafe {
            cu!(cuMemGetAllocationGranularity(
                &mut granularity,
                &prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
            ))?
        };
        let granularity = granularity.max(1);
        let mapped_len = len.div_ceil(granularity) * granularity;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: out-pointer to a local, valid prop, size a multiple of the granularity.
        unsafe { cu!(cuMemCreate(&mut handle, mapped_len, &prop, 0))? };
        // SAFETY: handle was just created with mapped_len bytes.
        let ptr = match unsafe { map_handle(device, handle, mapped_len) } {
            Ok(ptr) => ptr,
            Err(e) => {
                // SAFETY: the handle is ours and mapped nowhere.
                let _ = unsafe { cu!(cuMemRelease(handle)) };
                return Err(e);
            }
        };
        Ok(Self { device: device.clone(), ptr, len, mapped_len, backing: Backing::Vmm { handle } })
    }

    /// Takes ownership of `len` bytes at `ptr` that another library of this process allocated
    /// on `device` (`ncclMemAlloc`, say): `release` gives them back when this value drops.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must be device memory of `device`, allocated for this value alone and
    /// valid until `release(ptr)` runs, which must be the right way to free it.
    pub unsafe fn from_foreign(device: &Device, ptr: DevicePtr, len: usize, release: ForeignRelease) -> Self {
        Self { device: device.clone(), ptr, len, mapped_len: len, backing: Backing::Foreign { release } }
    }

    /// Device address of the first byte.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Bytes requested.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-byte allocations are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes actually mapped (the requested size rounded up to the granularity).
    pub fn mapped_len(&self) -> usize {
        self.mapped_len
    }

    /// The device that owns the memory.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether this is VMM memory (else legacy `cuMemAlloc`).
    pub fn is_vmm(&self) -> bool {
        matches!(self.backing, Backing::Vmm { .. })
    }

    /// Exports the allocation as a POSIX file descriptor another process can import.
    pub fn export_fd(&self) -> Result<OwnedFd, GpuError> {
        let Backing::Vmm { handle } = self.backing else {
            return Err(GpuError::InvalidArgument("only VMM memory exports file descriptors".into()));
        };
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: for POSIX fd handles the driver writes an int through the pointer.
        unsafe {
            cu!(cuMemExportToShareableHandle(
                (&mut fd as *mut std::ffi::c_int).cast::<c_void>(),
                handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0
            ))?
        };
        // SAFETY: the driver returned a fresh descriptor that we now own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Legacy IPC handle of a `cuMemAlloc` allocation.
    pub fn legacy_ipc_handle(&self) -> Result<LegacyIpcHandle, GpuError> {
        if self.is_vmm() {
            return Err(GpuError::InvalidArgument("VMM memory has no legacy IPC handle".into()));
        }
        // SAFETY: plain 64-byte C struct.
        let mut raw: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
        self.device.bind()?;
        // SAFETY: out-pointer to a local; ptr is the base of a cuMemAlloc allocation.
        unsafe { cu!(cuIpcGetMemHandle(&mut raw, self.ptr))? };
        Ok(LegacyIpcHandle(raw.reserved.map(|c| c as u8)))
    }

    /// Lets kernels on `peer` (same process) access this memory through its address.
    pub fn grant_access(&self, peer: &Device) -> Result<(), GpuError> {
        match self.backing {
            Backing::Vmm { .. } => {
                let desc = access_desc(peer);
                self.device.bind()?;
                // SAFETY: the range is mapped; desc is valid.
                unsafe { cu!(cuMemSetAccess(self.ptr, self.mapped_len, &desc, 1)) }
            }
            Backing::Legacy | Backing::LegacyImport | Backing::Foreign { .. } => peer.enable_peer_access(&self.device),
        }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), GpuError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(GpuError::InvalidArgument(format!(
                "range {offset}+{len} outside an allocation of {} bytes",
                self.len
            ))),
        }
    }

    /// Waits for the legacy default stream, where the synchronous copy and memset entry points
    /// run: `cuMemcpyHtoD` from pageable memory and `cuMemsetD8` may return before the device
    /// has finished, and our own streams are non-blocking, so kernels launched there afterwards
    /// would race with them.
    fn drain_legacy_stream(&self) -> Result<(), GpuError> {
        // SAFETY: the null stream always exists for the current context.
        unsafe { cu!(cuStreamSynchronize(std::ptr::null_mut())) }
    }

    /// Copies `data` to `offset` (synchronous: the data is on the device when this returns;
    /// for setup and tests).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), GpuError> {
        self.check_range(offset, data.len())?;
        if data.is_empty() {
            return Ok(());
        }
        self.device.bind()?;
        // SAFETY: range checked; the host slice is valid for data.len() bytes.
        unsafe { cu!(cuMemcpyHtoD_v2(self.ptr + offset as u64, data.as_ptr().cast(), data.len()))? };
        self.drain_legacy_stream()
    }

    /// Copies plain-old-data values to `offset` (synchronous; for setup tables).
    pub fn write_pod<T: Pod>(&self, offset: usize, values: &[T]) -> Result<(), GpuError> {
        // SAFETY: T: Pod has no padding-dependent invariants; the byte view covers exactly
        // the slice's memory and lives no longer than it.
        let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) };
        self.write(offset, bytes)
    }

    /// Reads one plain-old-data value at `offset` (synchronous).
    pub fn read_pod<T: Pod + Default>(&self, offset: usize) -> Result<T, GpuError> {
        let mut value = [T::default()];
        self.read_pod_slice(offset, &mut value)?;
        Ok(value[0])
    }

    /// Copies plain-old-data values from `offset` into `out` (synchronous; for tests).
    pub fn read_pod_slice<T: Pod>(&self, offset: usize, out: &mut [T]) -> Result<(), GpuError> {
        // SAFETY: T: Pod accepts any bit pattern; the byte view covers exactly `out`.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(out)) };
        self.read(offset, bytes)
    }

    /// Copies from `offset` into `out` (synchronous; for setup and tests).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), GpuError> {
        self.check_range(offset, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        self.device.bind()?;
        // SAFETY: range checked; the host slice is valid for out.len() bytes.
        unsafe { cu!(cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.ptr + offset as u64, out.len())) }
    }

    /// Sets `len` bytes at `offset` to `byte` (synchronous: done when this returns; for setup
    /// and tests).
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), GpuError> {
        self.check_range(offset, len)?;
        self.device.bind()?;
        // SAFETY: range checked.
        unsafe { cu!(cuMemsetD8_v2(self.ptr + offset as u64, byte, len))? };
        self.drain_legacy_stream()
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: we own the allocation; nothing uses it after drop (owners guarantee).
        unsafe { self.backing.release(&self.device, self.ptr, self.mapped_len) }
    }
}

/// Device memory of another process mapped into this one.
pub struct ImportedMemory {
    device: Device,
    ptr: DevicePtr,
    mapped_len: usize,
    backing: Backing,
}

// SAFETY: as for DeviceMemory.
unsafe impl Send for ImportedMemory {}
// SAFETY: as for DeviceMemory.
unsafe impl Sync for ImportedMemory {}

impl fmt::Debug for ImportedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ImportedMemory")
            .field("device", &self.device.ordinal())
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("mapped_len", &self.mapped_len)
            .finish()
    }
}

impl ImportedMemory {
    /// Imports a VMM allocation of `mapped_len` bytes from a POSIX file descriptor and maps it
    /// for `device`. The descriptor is closed afterwards.
    pub fn from_fd(device: &Device, fd: OwnedFd, mapped_len: usize) -> Result<Self, GpuError> {
        device.bind()?;
        let raw_fd = fd.into_raw_fd();
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: for POSIX fds the "OS handle" argument is the descriptor value itself.
        let imported = unsafe {
            cu!(cuMemImportFromShareableHandle(
                &mut handle,
                raw_fd as isize as *mut c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
            ))
        };
        // SAFETY: we own raw_fd (taken from OwnedFd); the driver keeps its own reference.
        drop(unsafe { OwnedFd::from_raw_fd(raw_fd) });
        imported?;
        // SAFETY: handle was just imported; mapped_len is the exporter's mapped size.
        match unsafe { map_handle(device, handle, mapped_len) } {
            Ok(ptr) => Ok(Self { device: device.clone(), ptr, mapped_len, backing: Backing::Vmm { handle } }),
            Err(e) => {
                // SAFETY: handle is ours and unmapped.
                let _ = unsafe { cu!(cuMemRelease(handle)) };
                Err(e)
            }
        }
    }

    /// Opens a legacy IPC handle on `device`.
    pub fn from_legacy(device: &Device, handle: &LegacyIpcHandle, len: usize) -> Result<Self, GpuError> {
        device.bind()?;
        // SAFETY: plain 64-byte C struct.
        let mut raw: sys::CUipcMemHandle = unsafe { std::mem::zeroed() };
        raw.reserved = handle.0.map(|b| b as std::ffi::c_char);
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local; raw holds the exporter's handle bytes.
        unsafe {
            cu!(cuIpcOpenMemHandle_v2(&mut ptr, raw, sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32))?
        };
        Ok(Self { device: device.clone(), ptr, mapped_len: len, backing: Backing::LegacyImport })
    }

    /// Device address of the first byte of the exporter's allocation.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Bytes mapped.
    pub fn mapped_len(&self) -> usize {
        self.mapped_len
    }
}

impl Drop for ImportedMemory {
    fn drop(&mut self) {
        // SAFETY: we own the mapping; nothing uses it after drop.
        unsafe { self.backing.release(&self.device, self.ptr, self.mapped_len) }
    }
}

/// Host-pinned memory mapped into the device address space (zero-initialised).
pub struct PinnedHostMemory {
    device: Device,
    host: *mut u8,
    device_ptr: DevicePtr,
    len: usize,
}

// SAFETY: pinned host memory is ordinary process memory; accesses go through volatile reads and
// writes with explicit bounds checks.
unsafe impl Send for PinnedHostMemory {}
// SAFETY: see Send; concurrent volatile accesses of plain words are how host and device talk.
unsafe impl Sync for PinnedHostMemory {}

impl fmt::Debug for PinnedHostMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedHostMemory").field("len", &self.len).finish()
    }
}

impl PinnedHostMemory {
    /// Allocates `len` bytes of pinned, device-mapped, zeroed host memory.
    pub fn alloc(device: &Device, len: usize) -> Result<Self, GpuError> {
        if len == 0 {
            return Err(GpuError::InvalidArgument("cannot allocate 0 bytes".into()));
        }
        device.bind()?;
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a local.
        unsafe { cu!(cuMemHostAlloc(&mut host, len, sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE))? };
        // SAFETY: host points at len writable bytes just allocated.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, len) };
        let mut device_ptr: sys::CUdeviceptr = 0;
        // SAFETY: host is a mapped pinned allocation.
        if let Err(e) = unsafe { cu!(cuMemHostGetDevicePointer_v2(&mut device_ptr, host, 0)) } {
            // SAFETY: allocated above, not used afterwards.
            let _ = unsafe { cu!(cuMemFreeHost(host)) };
            return Err(e);
        }
        Ok(Self { device: device.clone(), host: host.cast(), device_ptr, len })
    }

    /// Device address of the first byte.
    pub fn device_ptr(&self) -> DevicePtr {
        self.device_ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-byte allocations are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn checked<T>(&self, offset: usize) -> Result<*mut T, GpuError> {
        let fits = offset.checked_add(size_of::<T>()).is_some_and(|end| end <= self.len);
        if !fits || !offset.is_multiple_of(align_of::<T>()) {
            return Err(GpuError::InvalidArgument(format!(
                "offset {offset} misaligned or outside {} pinned bytes",
                self.len
            )));
        }
        // SAFETY: offset + size_of::<T>() <= len, checked above.
        Ok(unsafe { self.host.add(offset) }.cast())
    }

    /// Volatile read of a `T` at `offset` (the device may write it concurrently).
    pub fn read<T: Pod>(&self, offset: usize) -> Result<T, GpuError> {
        let p = self.checked::<T>(offset)?;
        // SAFETY: in bounds and aligned (checked); T: Pod, so any bit pattern is a valid T.
        Ok(unsafe { std::ptr::read_volatile(p) })
    }

    /// The `u64` at `offset` as an atomic, for words the host shares with running kernels (FIFO
    /// slots, tails, stop words): host accesses then follow the Rust memory model.
    pub fn atomic_u64(&self, offset: usize) -> Result<&std::sync::atomic::AtomicU64, GpuError> {
        let p = self.checked::<u64>(offset)?;
        // SAFETY: in bounds and 8-byte aligned (checked); AtomicU64 has the size and alignment of
        // u64; the memory lives as long as `&self`; host code touches it only through atomics or
        // volatile accesses, never through `&mut`.
        Ok(unsafe { &*p.cast::<std::sync::atomic::AtomicU64>() })
    }

    fn checked_range(&self, offset: usize, len: usize) -> Result<*mut u8, GpuError> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(GpuError::InvalidArgument(format!(
                "{len} bytes at {offset} outside {} pinned bytes",
                self.len
            )));
        }
        // SAFETY: offset + len <= self.len, checked above.
        Ok(unsafe { self.host.add(offset) })
    }

    /// Copies `out.len()` bytes at `offset` into `out`. For bytes no device work is writing
    /// (a staging buffer after the copy into it finished).
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) -> Result<(), GpuError> {
        let p = self.checked_range(offset, out.len())?;
        // SAFETY: `p` has out.len() readable bytes (checked); `out` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` to `offset`. For bytes no device work is reading or writing (a staging
    /// buffer before a copy out of it is queued).
    pub fn write_bytes(&self, offset: usize, data: &[u8]) -> Result<(), GpuError> {
        let p = self.checked_range(offset, data.len())?;
        // SAFETY: `p` has data.len() writable bytes (checked); `data` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
        Ok(())
    }

    /// Volatile write of a `T` at `offset`.
    pub fn write<T: Pod>(&self, offset: usize, value: T) -> Result<(), GpuError> {
        let p = self.checked::<T>(offset)?;
        // SAFETY: in bounds and aligned (checked).
        unsafe { std::ptr::write_volatile(p, value) };
        Ok(())
    }
}

impl Drop for PinnedHostMemory {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: allocated by cuMemHostAlloc, not used after drop.
            let _ = unsafe { cu!(cuMemFreeHost(self.host.cast())) };
        }
    }
}

/// The base and size of the allocation of `device` that holds `ptr`: an error when `ptr` is not
/// device memory or belongs to another GPU.
pub(crate) fn allocation_range(device: &Device, ptr: DevicePtr) -> Result<(DevicePtr, u64), GpuError> {
    if ptr == 0 {
        return Err(GpuError::InvalidArgument("null device pointer".into()));
    }
    device.bind()?;
    let mut ordinal: std::ffi::c_int = -1;
    // SAFETY: writes one int; the driver validates the pointer itself.
    let attr = unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut std::ffi::c_int).cast::<c_void>(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
    };
    if attr != sys::CUresult::CUDA_SUCCESS {
        return Err(GpuError::InvalidArgument(format!("{ptr:#x} is not device memory")));
    }
    if usize::try_from(ordinal).ok() != Some(device.ordinal()) {
        return Err(GpuError::InvalidArgument(format!(
            "{ptr:#x} belongs to GPU {ordinal}, not GPU {}",
            device.ordinal()
        )));
    }
    let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
    // SAFETY: out-pointers to locals; ptr is device memory (checked above).
    unsafe { cu!(cuMemGetAddressRange_v2(&mut base, &mut size, ptr))? };
    Ok((base, size as u64))
}

/// Checks that `[ptr, ptr + len)` lies inside one device allocation that belongs to `device`,
/// so a collective given a stray pointer returns an error instead of faulting the GPU.
pub fn check_device_range(device: &Device, ptr: DevicePtr, len: usize) -> Result<(), GpuError> {
    let (base, size) = allocation_range(device, ptr)?;
    let end = ptr.checked_add(len as u64);
    if end.is_none_or(|end| end > base + size) {
        return Err(GpuError::InvalidArgument(format!(
            "{len} bytes at {ptr:#x} run past the end of their allocation ({size} bytes at {base:#x})"
        )));
    }
    Ok(())
}
