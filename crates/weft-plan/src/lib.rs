//! # weft-plan: algorithm DSL, verifying compiler, execution plans, CPU reference interpreter
//!
//! **Owns.** Everything about collective algorithms as data:
//!
//! - [`dsl`]: a chunk-level Rust DSL traced into a chunk DAG (MSCCLang's model: `chunk`, `copy`,
//!   `reduce`, pre/postconditions, only-the-latest-version freshness rule), with channel and
//!   thread block hints, instance replication and pipelined loops; and a channel-level
//!   builder (MSCCL++'s level: put, put_packets, get, read-reduce, signal/wait per memory
//!   channel, semaphores between thread blocks) whose programs the verifier checks as written;
//! - [`passes`]: the compiler (postcondition check, replication, lowering to send/receive pairs,
//!   fusion into `rcs`/`rrcs`/`rrs`/`reduce_send`, thread block and channel scheduling, sync insertion) and a
//!   verifier that executes the emitted plan symbolically (deadlock, races, postcondition);
//! - [`plan`]: the versioned serde [`ExecutionPlan`] format, indexed in chunks so one plan serves
//!   every message size, with a loader that validates every limit, and the one definition of
//!   the chunk geometry (size classes, dense and padded layouts, replica slices) that the
//!   interpreter, weft-exec's tables and the CUDA executor follow;
//! - [`interp`]: a CPU reference interpreter that runs any plan on host memory, one OS thread per
//!   (rank, thread block), with bounded waits;
//! - [`plans`]: the shipped algorithms, written in the DSL.
//!
//! **Must not.** Touch a GPU, allocate device memory, open sockets, read the environment, or use
//! `unsafe` (`#![forbid(unsafe_code)]`). It knows nothing about transports: a plan names peers and
//! channel numbers, and the executor (`weft-exec`) maps them to connections.
//!
//! **May depend on.** `serde`, `serde_json`, `thiserror` (and `proptest`, `insta` for tests).
//! Nothing else in weft; `weft-exec`, `weft-coll` and `weft-model` depend on this crate, never the
//! reverse.
//!
//! ```
//! use weft_plan::interp::{RankBuffers, interpret};
//! use weft_plan::plans;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let plan = plans::ring_allreduce(4, 1)?.compile()?;
//! let count = 10; // elements per rank: need not divide the chunk count
//! let mut buffers: Vec<RankBuffers<i64>> = (0..4)
//!     .map(|r| RankBuffers::new(vec![r as i64; count], vec![0; count]))
//!     .collect();
//! interpret(&plan, &mut buffers, count)?;
//! assert!(buffers.iter().all(|b| b.output == vec![6; count]));
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]

pub mod dsl;
pub mod interp;
pub mod passes;
pub mod plan;
pub mod plans;

pub use dsl::{AnyProgram, Buffer, ChannelProgram, Chunk, Collective, DslError, Program};
pub use interp::{InterpretError, RankBuffers, ReduceOp, interpret};
pub use passes::{CompileError, CompileOptions, compile};
pub use plan::{ExecutionPlan, LoadError};
