//! The one wrapper around every exported body: no panic crosses the C ABI, every failure
//! leaves its message for `ncclGetLastError`, and every call's outcome is logged at debug level.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::{Code, NcclError};
use crate::ffi::{ncclResult_t, ncclSuccess};

thread_local! {
    /// The message of the last failed call on this thread (NCCL keeps one per process; one
    /// per thread keeps concurrent ranks' messages apart).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs `body` for the entry point `call`: `ncclSuccess` when it returns `Ok`, its code when it
/// returns an error, `ncclInternalError` when it panics.
pub fn guard(call: &'static str, body: impl FnOnce() -> Result<(), NcclError>) -> ncclResult_t {
    crate::env::init_logging();
    let error = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            tracing::trace!(call, "ok");
            return ncclSuccess;
        }
        Ok(Err(e)) => e,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            NcclError::new(Code::InternalError, format!("internal error (a weft bug, please report it): {what}"))
        }
    };
    tracing::debug!(call, code = error.raw(), "{}", error.message);
    set_last_error(&format!("{call}: {}", error.message));
    error.raw()
}

/// Records `message` as this thread's last error.
pub fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// This thread's last error message (empty when nothing failed). Valid until the next failure
/// on this thread.
pub fn last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// This thread's last error message as a `String` (tests, logs).
pub fn last_error_string() -> String {
    // SAFETY: last_error points at this thread's live CString, not replaced during this call.
    unsafe { CStr::from_ptr(last_error()) }.to_string_lossy().into_owned()
}

/// Runs a body that returns a value instead of a code (`ncclGetErrorString`,
/// `ncclGetLastError`): a panic yields `fallback`.
pub fn guard_value<T>(call: &'static str, fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        set_last_error(&format!("{call}: internal error (a weft bug, please report it)"));
        fallback
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi;

    #[test]
    fn success_errors_and_panics_become_codes_and_messages() {
        assert_eq!(guard("ncclTest", || Ok(())), ffi::ncclSuccess);
        let code = guard("ncclTest", || Err(NcclError::invalid_argument("count overflows")));
        assert_eq!(code, ffi::ncclInvalidArgument);
        assert_eq!(last_error_string(), "ncclTest: count overflows");
        let code = guard("ncclPanics", || panic!("boom {}", 7));
        assert_eq!(code, ffi::ncclInternalError);
        assert!(
            last_error_string().starts_with("ncclPanics: internal error") && last_error_string().contains("boom 7")
        );
        // A success leaves the last error alone, as NCCL does.
        assert_eq!(guard("ncclTest", || Ok(())), ffi::ncclSuccess);
        assert!(last_error_string().contains("boom 7"));
        assert_eq!(guard_value("x", 1, || panic!("no")), 1);
        set_last_error("nul\0inside");
        assert_eq!(last_error_string(), "nul inside");
    }
}
