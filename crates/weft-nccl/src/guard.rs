//! The one wrapper around every exported body: no panic crosses the C ABI, every failure
//! leaves its message for `ncclGetLastError`, and every call's outcome is logged at debug level.
//!
//! A failure's message is kept three times: for the communicator the call named (if any, and
//! live), for the calling thread, and for the process (NCCL keeps one per process). So
//! `ncclGetLastError(comm)` finds it whichever thread asks, and `ncclGetLastError(NULL)` on a
//! thread other than the failing one still finds the process's last failure.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use crate::error::{Code, NcclError};
use crate::ffi::{ncclComm_t, ncclResult_t, ncclSuccess};

/// How many distinct messages `ncclGetLastError` keeps alive per thread: a pointer it returned
/// stays valid until this many other messages have been returned on the same thread.
const RETURNED_KEPT: usize = 16;

thread_local! {
    /// The message of the last failed call on this thread.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    /// The strings `ncclGetLastError` returned on this thread, newest last (only this thread
    /// frees them, so no other thread's failure invalidates a pointer it holds).
    static RETURNED: RefCell<VecDeque<CString>> = const { RefCell::new(VecDeque::new()) };
}

/// The message of the last failed call of the process.
static PROCESS_LAST: Mutex<String> = Mutex::new(String::new());

/// Runs `body` for the entry point `call`: `ncclSuccess` when it returns `Ok`, its code when it
/// returns an error, `ncclInternalError` when it panics.
pub fn guard(call: &'static str, body: impl FnOnce() -> Result<(), NcclError>) -> ncclResult_t {
    guard_on(call, std::ptr::null_mut(), body)
}

/// [`guard`] for an entry point that names the communicator `comm`: a failure is also kept as
/// that communicator's last error (when it is live).
pub fn guard_on(call: &'static str, comm: ncclComm_t, body: impl FnOnce() -> Result<(), NcclError>) -> ncclResult_t {
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
    let message = format!("{call}: {}", error.message);
    if let Ok(comm) = crate::comm::lookup(comm) {
        comm.record_error(&message);
    }
    set_last_error(&message);
    error.raw()
}

/// Records `message` as this thread's and the process's last error.
pub fn set_last_error(message: &str) {
    let text = message.replace('\0', " ");
    *crate::comm::lock(&PROCESS_LAST) = text.clone();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// The message `ncclGetLastError` reports: `comm`'s last error (the communicator's, given by
/// the caller when the handle is live), else this thread's, else the process's; empty when
/// nothing failed.
pub fn last_error_text(comm: Option<String>) -> String {
    comm.filter(|m| !m.is_empty())
        .or_else(|| LAST_ERROR.with(|e| Some(e.borrow().clone()).filter(|m| !m.is_empty())))
        .unwrap_or_else(|| crate::comm::lock(&PROCESS_LAST).clone())
}

/// [`last_error_text`] as a C string that stays valid on this thread until
/// [`RETURNED_KEPT`] other messages have been returned on it (NCCL returns a static buffer).
pub fn last_error(comm: Option<String>) -> *const c_char {
    let text = CString::new(last_error_text(comm)).unwrap_or_default();
    RETURNED.with(|r| {
        let mut returned = r.borrow_mut();
        if let Some(kept) = returned.iter().find(|k| **k == text) {
            return kept.as_ptr();
        }
        if returned.len() == RETURNED_KEPT {
            returned.pop_front();
        }
        let ptr = text.as_ptr();
        // Moving the CString moves its pointer, not its heap buffer: `ptr` stays valid.
        returned.push_back(text);
        ptr
    })
}

/// The message `ncclGetLastError(NULL)` reports on this thread, as a `String` (tests, logs).
pub fn last_error_string() -> String {
    // SAFETY: last_error returns a string kept alive by this thread's list.
    unsafe { CStr::from_ptr(last_error(None)) }.to_string_lossy().into_owned()
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

    #[test]
    fn another_thread_and_a_communicator_see_the_last_failure() {
        // A failure on another thread: this thread has none of its own yet.
        std::thread::spawn(|| guard("ncclOther", || Err(NcclError::invalid_argument("far away")))).join().unwrap();
        let seen = std::thread::spawn(last_error_string).join().unwrap();
        assert!(!seen.is_empty(), "the process's last error is visible on a fresh thread");
        // A communicator's own message comes first.
        assert_eq!(last_error_text(Some("mine".into())), "mine");
        assert_eq!(last_error_text(Some(String::new())), last_error_text(None));
        // Returned pointers stay valid while others are returned on this thread.
        let first = last_error(Some("first".into()));
        for i in 0..RETURNED_KEPT - 1 {
            let _ = last_error(Some(format!("other {i}")));
        }
        // SAFETY: within RETURNED_KEPT returns of `first`, it is still alive.
        assert_eq!(unsafe { CStr::from_ptr(first) }.to_str().unwrap(), "first");
        // The same message twice is the same pointer.
        assert_eq!(last_error(Some("again".into())), last_error(Some("again".into())));
    }
}
