//! The compiler: a traced [`Program`] to a verified [`ExecutionPlan`].
//!
//! Passes, in order:
//!
//! 1. **postcondition**: the traced program computes its collective, else
//!    an error naming the first wrong rank, buffer and index;
//! 2. **replicate**: with `instances > 1`, every chunk is split into sub-chunks and the trace
//!    replayed once per instance, on disjoint channels and thread block hints; with
//!    `tiles > 1` (a pipelined loop), each instance's part is split again into tiles that
//!    share its channels and thread blocks;
//! 3. **lower** (chunk DAG → instruction DAG): a remote copy or reduce becomes a `send` on the
//!    source rank and a `recv` on the destination rank. A copy into a location nothing touched
//!    before is put there directly; anything else is put into a fresh staging chunk of the
//!    receiver's scratch and landed by the receiver itself, in its own order, so no rank ever
//!    writes memory another rank may still be using. Under the LL protocol every transfer is
//!    staged (packets land in scratch only);
//! 4. **fuse**: a receive whose result is forwarded becomes `rcs` / `rrcs`, or `rrs` when the
//!    reduced value is not used locally; a local reduce whose result is sent becomes
//!    `reduce_send` (storing the result only where it is used locally);
//! 5. **schedule**: thread blocks own at most one inbound and one outbound link (one
//!    (peer, direction, channel) each way), and each link belongs to one thread block; a global
//!    priority order (depth, then longest remaining path) fixes the order of operations in every
//!    thread block and of transfers on every connection, which makes the plan deadlock-free;
//! 6. **sync** and emit: `wait_tb` only where an operation depends on another thread block and
//!    no earlier sync already implies it; `nop` only where two operations of one thread block
//!    touch the same chunk with no block barrier between them;
//! 7. **verify** ([`verify`]): the emitted plan is validated, then executed symbolically:
//!    signal/wait pairing, deadlock freedom, race freedom (every pair of conflicting accesses is
//!    ordered by happens-before) and the postcondition, on the plan itself.

mod emit;
mod fuse;
mod lower;
mod postcondition;
mod replicate;
mod schedule;
mod verify;

use thiserror::Error;

use crate::dsl::{Buffer, DslError, Program};
use crate::plan::{ExecutionPlan, LoadError, Protocol};

pub(crate) use replicate::replicate_plan;
pub use verify::{InPlace, VerifyError, verify, verify_in_place};

use schedule::Priority;

/// Compiler switches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileOptions {
    /// Fuse receives with the sends that forward their data (`rcs`, `rrcs`, `rrs`), and local
    /// reduces with the sends of their results (`reduce_send`).
    pub fuse: bool,
    /// Verify the emitted plan symbolically (see [`verify`]).
    pub verify: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        Self { fuse: true, verify: true }
    }
}

/// Why a program did not compile.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CompileError {
    /// The program does not compute its collective.
    #[error("postcondition violated at rank {rank} {buffer}[{index}]: expected {expected}, found {found}")]
    Postcondition {
        /// The rank.
        rank: u32,
        /// The buffer (always the output).
        buffer: Buffer,
        /// The chunk.
        index: u32,
        /// What the collective requires there.
        expected: String,
        /// What the program leaves there.
        found: String,
    },
    /// Thread block hints ask one thread block to own two links of one direction.
    #[error("rank {rank}: thread block hint {hint} would own two {direction} links ({links})")]
    ThreadBlockConflict {
        /// The rank.
        rank: u32,
        /// The hint (in plan space, after replication).
        hint: u32,
        /// "inbound" or "outbound".
        direction: &'static str,
        /// The links involved.
        links: String,
    },
    /// Transfers on one connection cannot be ordered the same way on both ends.
    #[error(
        "transfers on connection rank {from} -> rank {to} channel {channel} must arrive in an order the sender cannot produce; put one of them on another channel"
    )]
    ConnectionOrder {
        /// Sending rank.
        from: u32,
        /// Receiving rank.
        to: u32,
        /// Channel.
        channel: u32,
    },
    /// The plan would exceed a documented limit.
    #[error("rank {rank}: {what} is {value}, above the limit of {max}")]
    Limit {
        /// The rank.
        rank: u32,
        /// What was counted.
        what: &'static str,
        /// The value.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// Replaying the program failed (a compiler bug).
    #[error("internal compiler error while replicating: {0}")]
    Replay(DslError),
    /// A channel-level program misused an operation (see [`crate::dsl::ChannelProgram`]).
    #[error("invalid channel program: {0}")]
    Program(DslError),
    /// The emitted plan is invalid (a compiler bug).
    #[error("internal compiler error: emitted plan is invalid: {0}")]
    Invalid(LoadError),
    /// The emitted plan failed verification (a compiler bug, or a program the compiler cannot
    /// schedule safely).
    #[error("emitted plan failed verification: {0}")]
    Verify(#[from] VerifyError),
    /// An internal invariant does not hold (a compiler bug).
    #[error("internal compiler error: {0}")]
    Internal(String),
}

/// Compiles `program` into a plan. This is the function to time in benchmarks.
pub fn compile(program: &Program, options: &CompileOptions) -> Result<ExecutionPlan, CompileError> {
    let mut trace = program.trace().clone();
    trace.finish();
    postcondition::check(&trace, program.collective())?;

    let (instances, tiles) = (program.instances(), program.tiles());
    let collective = program.collective().replicated(instances * tiles);
    let trace = replicate::replay(&trace, &collective, instances, tiles)?;
    let lowered = lower::lower(&trace, program.protocol() == Protocol::Ll);
    // The priority order pipelines best, but it (and fusion, which moves a forwarding send up to
    // its receive) can order two transfers of one connection against what the receiver needs.
    // Program order without fusion never does (every dependency follows program order), so it
    // is the last resort.
    let attempts = [(options.fuse, Priority::Depth), (false, Priority::Depth), (false, Priority::Program)];
    let mut result = Err(internal("no scheduling attempt"));
    for (fuse, priority) in attempts {
        let graph = fuse::fuse(&trace, lowered.clone(), fuse)?;
        result = schedule::schedule(&graph, priority).map(|s| (graph, s));
        if !matches!(result, Err(CompileError::ConnectionOrder { .. })) {
            break;
        }
    }
    let (graph, schedule) = result?;
    let plan = emit::emit(program, &collective, &graph, &schedule)?;
    plan.validate().map_err(CompileError::Invalid)?;
    if options.verify {
        verify(&plan, &collective)?;
    }
    Ok(plan)
}

fn internal(what: impl Into<String>) -> CompileError {
    CompileError::Internal(what.into())
}
