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
    /// Arguments the call's checks refused; nothing was enqueued.
    #[error("rank {rank}: invalid argument: {source}")]
    Argument {
        /// This rank.
        rank: usize,
        /// What is wrong.
        source: crate::ArgError,
    },
    /// A buffer of a typed call holds a number of elements the call cannot take.
    #[error("rank {rank}: {buffer} holds {actual} elements, {expected}")]
    Length {
        /// This rank.
        rank: usize,
        /// Which buffer (`send`, `recv`, `buffer`, `scalar`, a block of `send`...).
        buffer: &'static str,
        /// Its elements.
        actual: usize,
        /// What the call needs.
        expected: Expected,
    },
    /// A buffer of a typed call is on another GPU than the communicator.
    #[error("rank {rank}: {buffer} is on GPU {found}, the communicator on GPU {expected}")]
    WrongDevice {
        /// This rank.
        rank: usize,
        /// Which buffer.
        buffer: &'static str,
        /// The buffer's GPU.
        found: usize,
        /// The communicator's GPU.
        expected: usize,
    },
    /// The ranks make different calls (`WEFT_CHECK_CALLS=1`); nothing was launched on any
    /// rank, and every rank reports the same text.
    #[error("rank {rank}: the ranks' calls disagree: {detail}")]
    Mismatch {
        /// This rank.
        rank: usize,
        /// Which ranks make which calls.
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

/// The length a buffer of a typed call needs (see [`CollError::Length`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// Exactly this many elements.
    Exactly(usize),
    /// A multiple of this many (the ranks: one block each).
    MultipleOf(usize),
    /// At least this many (a block's end).
    AtLeast(usize),
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exactly(n) => write!(f, "the call needs {n}"),
            Self::MultipleOf(n) => write!(f, "the call needs a multiple of {n}"),
            Self::AtLeast(n) => write!(f, "the call needs at least {n}"),
        }
    }
}
