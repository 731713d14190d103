//! Errors of the executor's host side.

use std::path::PathBuf;

use thiserror::Error;

use crate::lower::LowerError;

/// Why a plan cannot be set up or launched.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The plan does not fit the executor's operation form.
    #[error(transparent)]
    Lower(#[from] LowerError),
    /// The plan or the call is beyond what the executor handles.
    #[error("the executor cannot run this: {0}")]
    Unsupported(String),
    /// Thread blocks of one rank run different numbers of barriers.
    #[error("rank {rank} thread block {tb} runs {found} barriers, thread block 0 runs {expected}")]
    UnevenBarriers {
        /// Rank.
        rank: u32,
        /// Thread block.
        tb: u32,
        /// Its barriers.
        found: u32,
        /// Thread block 0's barriers.
        expected: u32,
    },
    /// An operation pairs chunks of different sizes (or names one out of range).
    #[error("rank {rank} thread block {tb} op {step}: its chunks do not pair up in size")]
    ClassMismatch {
        /// Rank.
        rank: u32,
        /// Thread block.
        tb: u32,
        /// Operation index.
        step: u32,
    },
    /// The call's element count does not suit the plan.
    #[error("rank {rank}: plan {plan} cannot take {count} elements: {reason}")]
    Count {
        /// Rank.
        rank: usize,
        /// Plan name.
        plan: String,
        /// Elements per rank input.
        count: u64,
        /// Why.
        reason: String,
    },
    /// A user plan in the plan folder could not be read or is invalid.
    #[error("{}: {reason}", path.display())]
    PlanFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The communicator failed (registration, connection).
    #[error(transparent)]
    Core(#[from] weft_core::Error),
    /// A CUDA call failed.
    #[error("rank {rank}: {source}")]
    Gpu {
        /// Rank.
        rank: usize,
        /// The CUDA error.
        source: weft_gpu::GpuError,
    },
}
