//! The error every entry point returns: an NCCL result code and the message
//! `ncclGetLastError` reports.

use std::ffi::c_int;

use crate::ffi;

/// The NCCL result codes weft produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Code {
    /// `ncclUnhandledCudaError`: a CUDA call failed (or the driver is missing).
    UnhandledCudaError = ffi::ncclUnhandledCudaError,
    /// `ncclSystemError`: the operating system or the network failed (sockets, threads).
    SystemError = ffi::ncclSystemError,
    /// `ncclInternalError`: a bug in weft (a caught panic).
    InternalError = ffi::ncclInternalError,
    /// `ncclInvalidArgument`: a bad value (null pointer, unknown type, overflowing count,
    /// unsupported configuration field).
    InvalidArgument = ffi::ncclInvalidArgument,
    /// `ncclInvalidUsage`: a call out of order, or a request weft cannot serve without the
    /// fallback NCCL.
    InvalidUsage = ffi::ncclInvalidUsage,
    /// `ncclRemoteError`: a peer failed or timed out (weft's bounded waits).
    RemoteError = ffi::ncclRemoteError,
    /// `ncclInProgress`: a communicator whose initialisation has not finished yet.
    InProgress = ffi::ncclInProgress,
}

/// A failed call: its code and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NcclError {
    /// The code returned to the application.
    pub code: Code,
    /// The text `ncclGetLastError` returns.
    pub message: String,
}

impl NcclError {
    /// An error with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// `ncclInvalidArgument`.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// `ncclInvalidUsage`.
    pub fn invalid_usage(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidUsage, message)
    }

    /// `ncclSystemError`.
    pub fn system(message: impl Into<String>) -> Self {
        Self::new(Code::SystemError, message)
    }

    /// The code as the C enum value.
    pub fn raw(&self) -> c_int {
        self.code as c_int
    }

    /// The same error with `context: ` in front of the message.
    pub fn context(mut self, context: impl std::fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl From<weft_gpu::GpuError> for NcclError {
    fn from(e: weft_gpu::GpuError) -> Self {
        Self::new(Code::UnhandledCudaError, e.to_string())
    }
}

impl From<weft_bootstrap::BootstrapError> for NcclError {
    fn from(e: weft_bootstrap::BootstrapError) -> Self {
        use weft_bootstrap::BootstrapError as B;
        let code = match &e {
            B::InvalidConfig(_) | B::InvalidUniqueId { .. } => Code::InvalidArgument,
            B::PeerClosed { .. } => Code::RemoteError,
            _ => Code::SystemError,
        };
        Self::new(code, format!("bootstrap: {e}"))
    }
}

impl From<weft_core::Error> for NcclError {
    fn from(e: weft_core::Error) -> Self {
        use weft_core::Error as E;
        let code = match &e {
            E::Gpu { .. } => Code::UnhandledCudaError,
            E::PeerTimeout(_) => Code::RemoteError,
            E::InvalidArgument { .. } | E::Env(_) => Code::InvalidArgument,
            _ => Code::SystemError,
        };
        Self::new(code, e.to_string())
    }
}

impl From<weft_coll::nccl::NcclLibError> for NcclError {
    fn from(e: weft_coll::nccl::NcclLibError) -> Self {
        Self::system(format!("fallback NCCL: {e}"))
    }
}

impl From<crate::env::NcclEnvError> for NcclError {
    fn from(e: crate::env::NcclEnvError) -> Self {
        Self::invalid_usage(format!("environment: {e}"))
    }
}

impl From<weft_coll::CollError> for NcclError {
    fn from(e: weft_coll::CollError) -> Self {
        use weft_coll::CollError as C;
        match e {
            C::InvalidArgument { .. } | C::Argument { .. } => Self::invalid_argument(e.to_string()),
            C::Unsupported { .. } | C::Mismatch { .. } => Self::invalid_usage(e.to_string()),
            C::Gpu { .. } => Self::new(Code::UnhandledCudaError, e.to_string()),
            C::Core(core) => core.into(),
            other => Self::new(Code::InternalError, other.to_string()),
        }
    }
}

impl From<weft_gin::GinError> for NcclError {
    fn from(e: weft_gin::GinError) -> Self {
        use weft_gin::GinError as G;
        match e {
            G::Requirements(_) | G::Mismatch(_) | G::Call(_) => Self::invalid_usage(e.to_string()),
            G::Comm(core) => core.into(),
            G::Gpu { .. } => Self::new(Code::UnhandledCudaError, e.to_string()),
        }
    }
}
