//! Errors of the EP API; every variant names the rank, and argument errors the argument.

use weft_gpu::GpuError;

/// An EP call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EpError {
    /// An argument is out of range or does not fit the buffer.
    #[error("rank {rank}: {argument}: {detail}")]
    InvalidArgument {
        /// This rank.
        rank: usize,
        /// The argument, by DeepEP's name.
        argument: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The group or a request is beyond what the kernels support.
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
        source: GpuError,
    },
    /// The device communicator that reaches the ranks of other nodes could not be made.
    #[error("rank {rank}: {source}")]
    Gin {
        /// This rank.
        rank: usize,
        /// Cause.
        source: Box<weft_gin::GinError>,
    },
    /// The communicator failed: setup, or a kernel's wait that gave up (which names the peer
    /// and the phase).
    #[error(transparent)]
    Core(#[from] weft_core::Error),
}
