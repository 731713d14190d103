//! Errors of collective calls.

/// A collective could not be set up or launched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollError {
    /// Bad arguments; nothing was written.
    #[error("rank {rank}: invalid argument: {detail}")]
    InvalidArgument {
        /// This rank.
        rank: usize,
        /// What is wrong.
        detail: String,
    },
    /// The configuration is outside what the algorithms support.
    #[error("rank {rank}: unsupported: {detail}")]
    Unsupported {
        /// This rank.
        rank: usize,
        /// What is not supported.
        detail: String,
    },
    /// A CUDA call failed.
    #[error("rank {rank}: {source}")]
    Gpu {
        /// This rank.
        rank: usize,
        /// Cause.
        source: weft_gpu::GpuError,
    },
    /// The plan executor failed (set-up or launch).
    #[error("rank {rank}: {source}")]
    Exec {
        /// This rank.
        rank: usize,
        /// Cause.
        source: weft_exec::ExecError,
    },
    /// Communicator setup failed.
    #[error(transparent)]
    Core(#[from] weft_core::Error),
}
