//! The CPU reference interpreter: runs any plan on host memory for all ranks at once.
//!
//! Each (rank, thread block) is one OS thread. Buffers are shared arrays of `AtomicU64` (element
//! bits) accessed with relaxed loads and stores; ordering comes only from the plan's own
//! synchronisation, exactly as on a GPU:
//!
//! - link semaphores are monotonic counters: `signal` is a release `fetch_add` on the peer's
//!   inbound counter, `wait` bumps a thread-local expected count and spins with acquire loads
//!   until the counter reaches it;
//! - `wait_tb` spins on the target thread block's progress counter, published (release) after
//!   every operation;
//! - `barrier` counts arrivals per rank.
//!
//! Every spin is bounded ([`Interpreter::timeout`]): a deadlocked plan returns
//! [`InterpretError::Stalled`] naming the rank, thread block and operation of every stuck thread,
//! and never hangs.

mod element;
mod run;

use std::time::Duration;

use thiserror::Error;

pub use element::{Element, ReduceOp};

use crate::plan::{Buffer, ExecutionPlan, GeometryError, LoadError, Site};

/// The input and output buffers of one rank.
#[derive(Clone, Debug, PartialEq)]
pub struct RankBuffers<T> {
    /// The rank's input (send) buffer.
    pub input: Vec<T>,
    /// The rank's output (receive) buffer. Elements the plan does not write keep their value.
    pub output: Vec<T>,
}

impl<T> RankBuffers<T> {
    /// Buffers for one rank.
    pub fn new(input: Vec<T>, output: Vec<T>) -> Self {
        Self { input, output }
    }
}

/// A thread that could not make progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stall {
    /// Where it stopped.
    pub site: Site,
    /// The operation, as listed.
    pub op: String,
    /// What it was waiting for.
    pub waiting_for: String,
}

/// Why [`interpret`] failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum InterpretError {
    /// The plan is invalid.
    #[error("invalid plan: {0}")]
    Plan(#[from] LoadError),
    /// The plan cannot be bound to this element count.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// Wrong number of rank buffers.
    #[error("plan has {expected} ranks but {found} rank buffers were given")]
    RankCount {
        /// Ranks in the plan.
        expected: usize,
        /// Buffers given.
        found: usize,
    },
    /// A buffer has the wrong length for the element count.
    #[error("rank {rank} {buffer} buffer has {found} elements, expected {expected}")]
    BufferLength {
        /// The rank.
        rank: u32,
        /// The buffer.
        buffer: Buffer,
        /// Required length.
        expected: usize,
        /// Given length.
        found: usize,
    },
    /// Some thread blocks waited longer than the timeout: the plan deadlocks (or is far too
    /// slow).
    #[error("plan stalled (no progress within {} ms): {}", timeout.as_millis(), describe(stalls))]
    Stalled {
        /// The timeout that expired.
        timeout: Duration,
        /// Every thread block that was stuck, ordered by site.
        stalls: Vec<Stall>,
    },
    /// The operator is one the interpreter cannot compute: it folds in the element type, with
    /// no division by the rank count (avg) and no per-rank scalar (premulsum).
    #[error("the interpreter cannot reduce with the {} operator (it computes sum, prod, min and max)", .0.name())]
    UnsupportedOp(ReduceOp),
    /// An interpreter thread panicked (a bug in the interpreter).
    #[error("interpreter thread for {site} panicked")]
    Panicked {
        /// The thread's rank and thread block (op is 0).
        site: Site,
    },
}

fn describe(stalls: &[Stall]) -> String {
    stalls.iter().map(|s| format!("{} `{}` waiting for {}", s.site, s.op, s.waiting_for)).collect::<Vec<_>>().join("; ")
}

/// Runs `plan` with [`ReduceOp::Sum`] and the default timeout.
///
/// `element_count` is the number of input elements of each rank; every rank's input and output
/// lengths must match the plan's geometry (see [`Geometry`](crate::plan::Geometry)).
pub fn interpret<T: Element>(
    plan: &ExecutionPlan,
    buffers: &mut [RankBuffers<T>],
    element_count: usize,
) -> Result<(), InterpretError> {
    Interpreter::new(plan).run(buffers, element_count)
}

/// A configured interpreter run.
#[derive(Debug, Clone)]
pub struct Interpreter<'p> {
    plan: &'p ExecutionPlan,
    op: ReduceOp,
    timeout: Duration,
}

impl<'p> Interpreter<'p> {
    /// Default bound on each wait.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// An interpreter for `plan`, with [`ReduceOp::Sum`] and [`Interpreter::DEFAULT_TIMEOUT`].
    pub fn new(plan: &'p ExecutionPlan) -> Self {
        Self { plan, op: ReduceOp::Sum, timeout: Self::DEFAULT_TIMEOUT }
    }

    /// Sets the reduction operator.
    pub fn reduce_op(mut self, op: ReduceOp) -> Self {
        self.op = op;
        self
    }

    /// Sets the bound on every single wait.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs the plan on `buffers` (one entry per rank), `element_count` input elements per rank.
    pub fn run<T: Element>(&self, buffers: &mut [RankBuffers<T>], element_count: usize) -> Result<(), InterpretError> {
        run::run(self.plan, self.op, self.timeout, buffers, element_count)
    }
}
