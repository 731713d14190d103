//! Checked access to the CUDA driver: result conversion and lazy, non-panicking initialisation.

use std::ffi::CStr;
use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::error::GpuError;
use crate::loader;

/// A device address (`CUdeviceptr`).
pub type DevicePtr = u64;

/// Turns a `CUresult` into a `GpuError` naming the call.
pub(crate) fn check(call: &'static str, result: sys::CUresult) -> Result<(), GpuError> {
    if result == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut name_ptr: *const std::ffi::c_char = std::ptr::null();
    let mut text_ptr: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: both calls only write a pointer to a static string owned by the driver; the
    // library is loaded (we got a result from it).
    unsafe {
        let _ = sys::cuGetErrorName(result, &mut name_ptr);
        let _ = sys::cuGetErrorString(result, &mut text_ptr);
    }
    let read = |p: *const std::ffi::c_char| {
        if p.is_null() {
            String::from("unknown")
        } else {
            // SAFETY: the driver returns NUL-terminated static strings.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    Err(GpuError::Driver { call, code: result as u32, name: read(name_ptr), message: read(text_ptr) })
}

/// Loads libcuda and calls `cuInit` once per process; later calls return the first outcome.
pub(crate) fn init() -> Result<(), GpuError> {
    static INIT: OnceLock<Result<(), InitFailure>> = OnceLock::new();
    let outcome = INIT.get_or_init(|| {
        loader::load_driver().map_err(|searched| InitFailure::Missing { searched })?;
        // SAFETY: the library is present (checked above); cuInit has no pointer arguments.
        match unsafe { sys::cuInit(0) } {
            sys::CUresult::CUDA_SUCCESS => Ok(()),
            failed => Err(InitFailure::Driver(failed)),
        }
    });
    match outcome {
        Ok(()) => Ok(()),
        Err(InitFailure::Missing { searched }) => {
            Err(GpuError::LibraryMissing { library: "libcuda", searched: searched.clone() })
        }
        Err(InitFailure::Driver(code)) => check("cuInit", *code),
    }
}

#[derive(Debug)]
enum InitFailure {
    Missing { searched: Vec<String> },
    Driver(sys::CUresult),
}

/// Wraps a driver call: `call!(cuFoo(a, b))` checks the result and names `cuFoo` in the error.
macro_rules! cu {
    ($f:ident ( $($arg:expr),* $(,)? )) => {
        $crate::driver::check(stringify!($f), cudarc::driver::sys::$f($($arg),*))
    };
}
pub(crate) use cu;
