//! Errors of the CUDA layer.

use std::path::PathBuf;

/// Everything that can go wrong below the communicator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// A CUDA library could not be loaded.
    #[error(
        "{library} could not be loaded (tried {searched:?}); install the NVIDIA driver / CUDA 13 \
         or point WEFT_CUDA_HOME at a CUDA installation"
    )]
    LibraryMissing {
        /// `libcuda` or `libnvrtc`.
        library: &'static str,
        /// Names and paths that were tried.
        searched: Vec<String>,
    },
    /// A driver call returned an error.
    #[error("{call} failed: {name} ({code}): {message}")]
    Driver {
        /// The driver entry point.
        call: &'static str,
        /// Raw `CUresult`.
        code: u32,
        /// `cuGetErrorName`.
        name: String,
        /// `cuGetErrorString`.
        message: String,
    },
    /// An NVRTC call returned an error.
    #[error("NVRTC {call} failed: {detail}")]
    Nvrtc {
        /// The NVRTC entry point.
        call: &'static str,
        /// The NVRTC result code.
        detail: String,
    },
    /// A kernel failed to compile.
    #[error("compiling {source_name} for {arch} failed:\n{log}")]
    Compile {
        /// Name of the source.
        source_name: String,
        /// Target architecture.
        arch: String,
        /// The NVRTC log.
        log: String,
    },
    /// No CUDA headers were found for NVRTC.
    #[error("CUDA headers (cuda_fp16.h) not found in {searched:?}; set WEFT_CUDA_HOME or CUDA_HOME")]
    HeadersMissing {
        /// Directories that were searched.
        searched: Vec<PathBuf>,
    },
    /// The on-disk kernel cache could not be used.
    #[error("kernel cache at {path}: {source}")]
    Cache {
        /// File or folder involved.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A device ordinal that does not exist.
    #[error("GPU {ordinal} does not exist ({count} visible)")]
    NoSuchDevice {
        /// Requested ordinal.
        ordinal: usize,
        /// Devices visible to this process.
        count: usize,
    },
    /// The device lacks a capability weft needs.
    #[error("GPU {ordinal} does not support {what}")]
    Unsupported {
        /// Device ordinal.
        ordinal: usize,
        /// Missing capability.
        what: &'static str,
    },
    /// A bounded wait on a stream expired.
    #[error("GPU {ordinal}: stream still busy after {waited_ms} ms while waiting for {what}")]
    StreamTimeout {
        /// Device ordinal.
        ordinal: usize,
        /// How long the host waited.
        waited_ms: u128,
        /// What the host was waiting for.
        what: String,
    },
    /// A caller passed an invalid argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}
