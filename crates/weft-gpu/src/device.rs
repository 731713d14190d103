//! A GPU and its primary context.

use std::ffi::c_int;
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::driver::{cu, init};
use crate::error::GpuError;

/// A GPU with its retained primary context. Cheap to clone; the context is released when the
/// last clone drops.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    ordinal: usize,
    raw: sys::CUdevice,
    ctx: sys::CUcontext,
}

// SAFETY: a CUcontext handle may be made current on, and used from, any thread; the driver
// serialises what needs serialising. The handle itself is never mutated.
unsafe impl Send for DeviceInner {}
// SAFETY: see Send; every method takes &self and only passes the handle to the driver.
unsafe impl Sync for DeviceInner {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // SAFETY: releases the retain taken in Device::new; the handle is not used afterwards.
        let _ = unsafe { cu!(cuDevicePrimaryCtxRelease_v2(self.raw)) };
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("ordinal", &self.inner.ordinal).finish()
    }
}

/// See [`Device::rdma_write_visibility`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaWriteVisibility {
    /// The device's kernels see RDMA writes in order: nothing to do.
    Ordered,
    /// `cuFlushGPUDirectRDMAWrites` from the host makes them visible.
    HostFlush,
    /// Neither.
    Unsupported,
}

impl Device {
    /// Number of GPUs this process can see; an error if the driver cannot be loaded.
    pub fn count() -> Result<usize, GpuError> {
        init()?;
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        unsafe { cu!(cuDeviceGetCount(&mut n))? };
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Opens GPU `ordinal` and retains its primary context.
    pub fn new(ordinal: usize) -> Result<Self, GpuError> {
        let count = Self::count()?;
        if ordinal >= count {
            return Err(GpuError::NoSuchDevice { ordinal, count });
        }
        let mut raw: sys::CUdevice = 0;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        let index = c_int::try_from(ordinal).map_err(|_| GpuError::NoSuchDevice { ordinal, count })?;
        // SAFETY: out-pointers to locals; the ordinal was range-checked.
        unsafe {
            cu!(cuDeviceGet(&mut raw, index))?;
            cu!(cuDevicePrimaryCtxRetain(&mut ctx, raw))?;
        }
        let device = Self { inner: Arc::new(DeviceInner { ordinal, raw, ctx }) };
        device.bind()?;
        Ok(device)
    }

    /// The GPU of the calling thread's current context (what `cudaGetDevice` reports after
    /// `cudaSetDevice`), or GPU 0 when no context is current, as the CUDA runtime defaults.
    pub fn current() -> Result<Self, GpuError> {
        init()?;
        let mut raw: sys::CUdevice = 0;
        // SAFETY: writes one int; fails without side effects when no context is current.
        match unsafe { sys::cuCtxGetDevice(&mut raw) } {
            sys::CUresult::CUDA_SUCCESS => Self::new(usize::try_from(raw).unwrap_or(usize::MAX)),
            _ => Self::new(0),
        }
    }

    /// Opens the GPU at PCI bus id `bus_id` (as reported by [`Device::pci_bus_id`] in any
    /// process of this host).
    pub fn by_pci_bus_id(bus_id: &str) -> Result<Self, GpuError> {
        init()?;
        let c_bus =
            std::ffi::CString::new(bus_id).map_err(|_| GpuError::InvalidArgument(format!("PCI bus id {bus_id:?}")))?;
        let mut raw: sys::CUdevice = 0;
        // SAFETY: out-pointer to a local; NUL-terminated id.
        unsafe { cu!(cuDeviceGetByPCIBusId(&mut raw, c_bus.as_ptr()))? };
        Self::new(usize::try_from(raw).unwrap_or(usize::MAX))
    }

    /// Makes this device's context current on the calling thread.
    pub fn bind(&self) -> Result<(), GpuError> {
        // SAFETY: the context is retained for as long as self lives.
        unsafe { cu!(cuCtxSetCurrent(self.inner.ctx)) }
    }

    /// How a NIC's GPUDirect RDMA writes into this device must be made visible before a later
    /// signal: not at all (the device orders them for its own kernels), by
    /// [`Device::flush_rdma_writes`], or not from the host (an error: weft has no other way).
    pub fn rdma_write_visibility(&self) -> Result<RdmaWriteVisibility, GpuError> {
        use sys::CUdevice_attribute::*;
        let ordering = self.attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING)?;
        let flush_options = self.attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS)?;
        let owner = sys::CUGPUDirectRDMAWritesOrdering::CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER as i32;
        let host_flush = sys::CUflushGPUDirectRDMAWritesOptions::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST as i32;
        Ok(if ordering >= owner {
            RdmaWriteVisibility::Ordered
        } else if flush_options & host_flush != 0 {
            RdmaWriteVisibility::HostFlush
        } else {
            RdmaWriteVisibility::Unsupported
        })
    }

    /// Whether memory weft allocates with VMM can be registered by an RDMA NIC, and whether
    /// device memory exports as a dma-buf (registration without the peer-memory module).
    pub fn rdma_registration(&self) -> Result<(bool, bool), GpuError> {
        use sys::CUdevice_attribute::*;
        Ok((
            self.attribute(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED)? != 0,
            self.attribute(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)? != 0,
        ))
    }

    /// Makes every GPUDirect RDMA write that reached this device so far visible to its
    /// kernels (`cuFlushGPUDirectRDMAWrites`): a NIC's PCIe writes into device memory may
    /// otherwise be observed after a later token store. Not ordered on any stream; it waits
    /// for no kernel.
    pub fn flush_rdma_writes(&self) -> Result<(), GpuError> {
        self.bind()?;
        // SAFETY: plain enum arguments; the context is current.
        unsafe {
            cu!(cuFlushGPUDirectRDMAWrites(
                sys::CUflushGPUDirectRDMAWritesTarget::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                sys::CUflushGPUDirectRDMAWritesScope::CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER
            ))
        }
    }

    /// CUDA ordinal of this device.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    pub(crate) fn raw(&self) -> sys::CUdevice {
        self.inner.raw
    }

    /// Reads a device attribute.
    pub fn attribute(&self, attribute: sys::CUdevice_attribute) -> Result<i32, GpuError> {
        let mut value: c_int = 0;
        // SAFETY: writes one int for a valid device.
        unsafe { cu!(cuDeviceGetAttribute(&mut value, attribute, self.inner.raw))? };
        Ok(value)
    }

    /// Marketing name, e.g. "NVIDIA H200".
    pub fn name(&self) -> Result<String, GpuError> {
        let mut buf = [0 as std::ffi::c_char; 256];
        // SAFETY: the driver writes at most `len` bytes including the NUL.
        unsafe { cu!(cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, self.inner.raw))? };
        Ok(c_chars_to_string(&buf))
    }

    /// PCI bus id, e.g. "0000:19:00.0".
    pub fn pci_bus_id(&self) -> Result<String, GpuError> {
        let mut buf = [0 as std::ffi::c_char; 64];
        // SAFETY: as for name().
        unsafe { cu!(cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, self.inner.raw))? };
        Ok(c_chars_to_string(&buf))
    }

    /// `(major, minor)` compute capability.
    pub fn compute_capability(&self) -> Result<(i32, i32), GpuError> {
        use sys::CUdevice_attribute::*;
        Ok((
            self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// NVRTC architecture name for this device, e.g. `sm_90`.
    pub fn arch(&self) -> Result<String, GpuError> {
        let (major, minor) = self.compute_capability()?;
        Ok(format!("sm_{major}{minor}"))
    }

    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> Result<u32, GpuError> {
        let n = self.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        Ok(u32::try_from(n).unwrap_or(0))
    }

    /// Whether this device can map memory of `peer` (NVLink or PCIe peer access).
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool, GpuError> {
        let mut ok: c_int = 0;
        // SAFETY: writes one int for two valid devices.
        unsafe { cu!(cuDeviceCanAccessPeer(&mut ok, self.inner.raw, peer.inner.raw))? };
        Ok(ok != 0)
    }

    /// Lets kernels on this device access `cuMemAlloc` memory of `peer` (same process). VMM
    /// memory needs no peer access, only `cuMemSetAccess`. Enabling twice is not an error.
    pub fn enable_peer_access(&self, peer: &Device) -> Result<(), GpuError> {
        if self.inner.raw == peer.inner.raw {
            return Ok(());
        }
        if !self.can_access_peer(peer)? {
            return Err(GpuError::Unsupported { ordinal: self.ordinal(), what: "peer access to the other GPU" });
        }
        self.bind()?;
        // SAFETY: both contexts are retained.
        let result = unsafe { sys::cuCtxEnablePeerAccess(peer.inner.ctx, 0) };
        if result == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        crate::driver::check("cuCtxEnablePeerAccess", result)
    }

    /// Waits for all work on this device (setup and tests only; collectives never call it).
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.bind()?;
        // SAFETY: no arguments; the context is current.
        unsafe { cu!(cuCtxSynchronize()) }
    }
}

fn c_chars_to_string(buf: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The calling thread's current CUDA context, made current again when this value drops: entry
/// points that bind other devices' contexts leave the application's current device as it was.
pub struct SavedContext {
    ctx: Option<sys::CUcontext>,
}

impl fmt::Debug for SavedContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SavedContext").field("saved", &self.ctx.is_some()).finish()
    }
}

impl SavedContext {
    /// Remembers the current context (nothing, when the driver cannot be loaded).
    pub fn save() -> Self {
        if init().is_err() {
            return Self { ctx: None };
        }
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: writes one handle (null when no context is current).
        let ok = unsafe { sys::cuCtxGetCurrent(&mut ctx) } == sys::CUresult::CUDA_SUCCESS;
        Self { ctx: ok.then_some(ctx) }
    }
}

impl Drop for SavedContext {
    fn drop(&mut self) {
        if let Some(ctx) = self.ctx {
            // SAFETY: restores a handle the driver gave us (or null, which unbinds); a context
            // destroyed meanwhile only makes this call fail.
            let _ = unsafe { sys::cuCtxSetCurrent(ctx) };
        }
    }
}
