//! Loaded CUBIN modules, kernels and launches.

use std::ffi::{CString, c_void};
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::device::Device;
use crate::driver::{DevicePtr, cu};
use crate::error::GpuError;
use crate::kernel_params::KernelParams;
use crate::stream::Stream;

/// Plain-old-data: `Copy`, `#[repr(C)]` or primitive, every bit pattern valid, no padding. Only
/// this crate implements it (for primitives and the `weft-types` layouts, whose declarations
/// assert they have no implicit padding), which is what makes kernel arguments and volatile
/// reads of device-written memory sound.
///
/// # Safety
/// Implementors must accept any bit pattern and have no padding bytes (every byte of a value is
/// initialised).
pub unsafe trait Pod: Copy + Send + Sync + 'static {}

macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: primitive integer/float or a weft-types #[repr(C)] struct of integers.
        unsafe impl Pod for $t {}
    )* };
}
pod!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, usize);
pod!(
    weft_types::WaitContext,
    weft_types::SemaphoreDeviceHandle,
    weft_types::MemoryChannelDeviceHandle,
    weft_types::FifoDeviceHandle,
    weft_types::PortChannelDeviceHandle,
    weft_types::DeviceErrorRecord,
    weft_types::Ll8Packet,
    weft_types::Ll16Packet,
    weft_types::CollContext,
    weft_types::P2pPlan,
    weft_types::LlPairs,
    weft_types::PeerBuffers,
    weft_types::ExecLoc,
    weft_types::ExecOp,
    weft_types::ExecBuffers,
    weft_types::ExecContext,
    weft_types::EpContext,
    weft_types::EpLayoutArgs,
    weft_types::EpNotifyArgs,
    weft_types::EpDispatchArgs,
    weft_types::EpCombineArgs,
    weft_types::EpLlDispatchArgs,
    weft_types::EpLlCombineArgs,
    weft_types::EpLlNet,
    weft_types::EpRailArgs,
    weft_types::DevCommHandle
);

/// Alias kept for call sites that talk about kernel arguments.
pub use Pod as KernelArg;

/// A CUBIN loaded into a device's context.
pub struct Module {
    device: Device,
    raw: sys::CUmodule,
}

// SAFETY: module handles are usable from any thread with the context bound.
unsafe impl Send for Module {}
// SAFETY: methods take &self and only pass the handle to the driver.
unsafe impl Sync for Module {}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module").field("device", &self.device.ordinal()).finish()
    }
}

impl Module {
    /// Loads a CUBIN image on `device`.
    pub fn load(device: &Device, cubin: &[u8]) -> Result<Arc<Self>, GpuError> {
        if cubin.len() < 4 || &cubin[..4] != b"\x7fELF" {
            return Err(GpuError::InvalidArgument("not a CUBIN (ELF) image".into()));
        }
        device.bind()?;
        let mut raw: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: the image is a complete ELF held alive for the duration of the call.
        unsafe { cu!(cuModuleLoadData(&mut raw, cubin.as_ptr().cast()))? };
        Ok(Arc::new(Self { device: device.clone(), raw }))
    }

    /// Looks up an `extern "C"` kernel by name.
    pub fn kernel(self: &Arc<Self>, name: &str) -> Result<Kernel, GpuError> {
        let c_name = CString::new(name).map_err(|_| GpuError::InvalidArgument(format!("kernel name {name:?}")))?;
        let mut func: sys::CUfunction = std::ptr::null_mut();
        self.device.bind()?;
        // SAFETY: out-pointer to a local; live module; NUL-terminated name.
        unsafe { cu!(cuModuleGetFunction(&mut func, self.raw, c_name.as_ptr()))? };
        Ok(Kernel { module: Arc::clone(self), func, name: name.to_string() })
    }

    /// The device address and size of the module's `__device__` variable `name` (an
    /// `extern "C"` name: C++ names are mangled).
    pub fn global(&self, name: &str) -> Result<(DevicePtr, usize), GpuError> {
        let c_name = CString::new(name).map_err(|_| GpuError::InvalidArgument(format!("global name {name:?}")))?;
        let (mut ptr, mut bytes): (sys::CUdeviceptr, usize) = (0, 0);
        self.device.bind()?;
        // SAFETY: out-pointers to locals; live module; NUL-terminated name.
        unsafe { cu!(cuModuleGetGlobal_v2(&mut ptr, &mut bytes, self.raw, c_name.as_ptr()))? };
        Ok((ptr, bytes))
    }

    /// Writes `value` into the module's `__device__` variable `name`, which must be exactly
    /// `value.len()` bytes. Synchronous; no kernel of the module may be running.
    pub fn write_global(&self, name: &str, value: &[u8]) -> Result<(), GpuError> {
        let (ptr, bytes) = self.global(name)?;
        if bytes != value.len() {
            return Err(GpuError::InvalidArgument(format!("global {name} is {bytes} bytes, not {}", value.len())));
        }
        self.device.bind()?;
        // SAFETY: the destination is the variable's whole storage (size checked above) in this
        // live module; the source is a live host slice of the same length.
        unsafe { cu!(cuMemcpyHtoD_v2(ptr, value.as_ptr().cast(), value.len())) }
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: kernels hold an Arc to the module, so none outlives it.
            let _ = unsafe { cu!(cuModuleUnload(self.raw)) };
        }
    }
}

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x.
    pub grid: u32,
    /// Threads per block in x.
    pub block: u32,
    /// Dynamic shared memory bytes.
    pub shared_bytes: u32,
}

/// Most kernel arguments a launch takes.
pub const MAX_KERNEL_ARGS: usize = 16;
/// 8-byte words all of a launch's arguments take: 2 KiB, half of CUDA's 4 KiB limit on a
/// kernel's parameters.
const ARG_WORDS: usize = 256;

/// Kernel arguments, each in its own 8-byte-aligned slot of a fixed inline buffer, so building
/// them on a collective's hot path allocates nothing. Built only by [`KernelParams::args`] of a
/// [`device_kernels!`](crate::device_kernels) declaration, which packs the fields in order.
#[derive(Clone)]
pub struct KernelArgs {
    words: [u64; ARG_WORDS],
    starts: [usize; MAX_KERNEL_ARGS],
    count: usize,
    used: usize,
}

impl Default for KernelArgs {
    fn default() -> Self {
        Self { words: [0; ARG_WORDS], starts: [0; MAX_KERNEL_ARGS], count: 0, used: 0 }
    }
}

impl fmt::Debug for KernelArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelArgs").field("count", &self.count).finish()
    }
}

impl KernelArgs {
    /// No arguments yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one argument by value; for [`device_kernels!`](crate::device_kernels)'s
    /// expansion only, not API. Panics past [`MAX_KERNEL_ARGS`] arguments or 2 KiB:
    /// argument lists are fixed by their declarations, so that is a programming error.
    #[doc(hidden)]
    pub fn __push<T: Pod>(&mut self, value: T) -> &mut Self {
        assert!(align_of::<T>() <= 8, "kernel arguments aligned above 8 bytes are not supported");
        let words = size_of::<T>().div_ceil(8).max(1);
        assert!(self.count < MAX_KERNEL_ARGS && self.used + words <= ARG_WORDS, "too many kernel arguments");
        // SAFETY: words [used, used + words) lie inside the buffer (checked) and are 8-byte
        // aligned, which covers T's size and alignment.
        unsafe { std::ptr::write(self.words.as_mut_ptr().add(self.used).cast::<T>(), value) };
        self.starts[self.count] = self.used;
        self.count += 1;
        self.used += words;
        self
    }

    /// How many arguments there are.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The bytes of argument `index`: its value followed by zeros up to the next 8-byte slot.
    pub fn slot(&self, index: usize) -> Option<&[u8]> {
        if index >= self.count {
            return None;
        }
        let end = if index + 1 < self.count { self.starts[index + 1] } else { self.used };
        let words = &self.words[self.starts[index]..end];
        // SAFETY: the words are initialised: zeroed at construction, then overwritten only by
        // `Pod` values, which have no padding bytes; u8 has no alignment requirement.
        Some(unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), 8 * words.len()) })
    }
}

/// A kernel of a loaded module.
pub struct Kernel {
    module: Arc<Module>,
    func: sys::CUfunction,
    name: String,
}

// SAFETY: function handles are usable from any thread with the context bound.
unsafe impl Send for Kernel {}
// SAFETY: launches take &self and only pass the handle to the driver.
unsafe impl Sync for Kernel {}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel").field("name", &self.name).finish()
    }
}

impl Kernel {
    /// Kernel name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Enqueues the kernel on `stream` with `params`, a parameter list declared for this
    /// kernel's name (another is an error: the declarations, checked against the kernel
    /// definitions by NVRTC, fix the number, order and layout of the arguments).
    ///
    /// # Safety
    /// Every device address among `params` must be valid for the accesses the kernel makes
    /// and stay valid until the kernel has finished.
    pub unsafe fn launch<P: KernelParams>(
        &self,
        stream: &Stream,
        config: LaunchConfig,
        params: &P,
    ) -> Result<(), GpuError> {
        // SAFETY: forwarded contract.
        unsafe { self.enqueue(stream, config, params, false) }
    }

    /// [`Kernel::launch`] as a programmatic dependent launch: the kernel's blocks may be
    /// scheduled while the previous kernel on `stream` is still running (once that kernel's
    /// blocks have all executed `griddepcontrol.launch_dependents`, or exited), which hides
    /// the launch gap between back-to-back kernels. Stream order still holds for memory only
    /// through the kernel itself: it must execute `griddepcontrol.wait` (weft's
    /// `ptx::grid_dependency_wait`) in every block before touching memory that earlier work
    /// on the stream writes or reads. CUDA-graph capture keeps the dependency as a
    /// programmatic edge.
    ///
    /// # Safety
    /// As for [`Kernel::launch`], and the kernel must wait as described above.
    pub unsafe fn launch_early<P: KernelParams>(
        &self,
        stream: &Stream,
        config: LaunchConfig,
        params: &P,
    ) -> Result<(), GpuError> {
        // SAFETY: forwarded contract.
        unsafe { self.enqueue(stream, config, params, true) }
    }

    /// # Safety
    /// As for [`Kernel::launch_early`] when `early`, else [`Kernel::launch`].
    unsafe fn enqueue<P: KernelParams>(
        &self,
        stream: &Stream,
        config: LaunchConfig,
        params: &P,
        early: bool,
    ) -> Result<(), GpuError> {
        if !P::KERNELS.contains(&self.name.as_str()) {
            return Err(GpuError::InvalidArgument(format!(
                "{} is launched with the parameters of {:?}",
                self.name,
                P::KERNELS
            )));
        }
        if config.grid == 0 || config.block == 0 || config.block > 1024 {
            return Err(GpuError::InvalidArgument(format!("launch of {} with {config:?}", self.name)));
        }
        let args = params.args();
        self.module.device.bind()?;
        let mut pointers = [std::ptr::null_mut::<c_void>(); MAX_KERNEL_ARGS];
        for (pointer, &start) in pointers.iter_mut().zip(&args.starts[..args.count]) {
            // SAFETY: start < ARG_WORDS by construction in __push().
            *pointer = unsafe { args.words.as_ptr().add(start) } as *mut c_void;
        }
        // SAFETY: a plain C struct; the value's union member is the one the id names.
        let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute.value.programmaticStreamSerializationAllowed = 1;
        let launch = sys::CUlaunchConfig {
            gridDimX: config.grid,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: config.block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: config.shared_bytes,
            hStream: stream.raw(),
            attrs: &mut attribute,
            numAttrs: u32::from(early),
        };
        // SAFETY: the pointers point at live slots for the duration of the call (the driver copies
        // them, and the launch configuration and its attribute); the argument list is the one
        // declared for this kernel (checked above), the device addresses in it and the kernel's
        // wait when `early` are the caller's contract.
        unsafe { cu!(cuLaunchKernelEx(&launch, self.func, pointers.as_mut_ptr(), std::ptr::null_mut())) }
    }
}
