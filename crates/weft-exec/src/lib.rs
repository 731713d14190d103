//! # weft-exec — the plan executor
//!
//! **Owns:** running a verified [`weft_plan::ExecutionPlan`] on GPUs with one interpreter
//! kernel for every plan (`device/kernels/exec/executor.cu`):
//! - [`lower`]: the plan re-encoded as [`weft_types::ExecOp`]s per rank and thread block, plus
//!   the table that places scratch chunks for any message size;
//! - [`geometry`]: the chunk geometry the kernel computes, dense (user buffers) and padded
//!   (the executor's registered stages and scratch), tested against weft-plan's;
//! - [`tables`]: per rank, what the kernel needs besides the operations (which buffers peers
//!   touch, which output chunks the plan writes, links, fences, barriers), with the checks the
//!   kernel relies on, and how a rank reaches each peer ([`tables::peer_routes`]: mapped within
//!   its node, through port channels alone across nodes);
//! - [`PlanExecutor`]: collective set-up on a [`weft_core::Communicator`] (registered stages and
//!   scratch exchanged with peers, a semaphore per link and replica, uploaded tables) and the
//!   launch; every plan thread block runs as several replicas, each moving a slice of every
//!   chunk ([`geometry::replica_slice`]), so a plan fills the GPU;
//! - [`specialize`]: a rank's operations compiled into the kernel as constants (a kernel per
//!   plan and rank, straight-line code per operation);
//! - [`load_plan_dir`]: user plans from a folder (`WEFT_PLAN_DIR`), validated at load.
//!
//! **Must not:** change what a plan computes (lowering is a re-encoding, checked by decoding
//! it back), accept a plan beyond the kernel's limits silently (an error names the rank,
//! thread block and operation), synchronise the host or allocate on a launch, or call
//! `cuMulticast*`.
//!
//! **Depends on:** `weft-types`, `weft-plan`, `weft-gpu`, `weft-core`.
//!
//! `unsafe` is confined to the kernel launch in [`executor`].
#![deny(unsafe_code)]

pub mod device_code;
pub mod error;
#[allow(unsafe_code)]
pub mod executor;
pub mod geometry;
pub mod lower;
#[cfg(test)]
mod model;
pub mod plan_dir;
pub mod resources;
pub mod specialize;
pub mod tables;

pub use error::ExecError;
pub use executor::{
    DirectOutput, EXEC_THREADS, ExecConfig, PLAN_SLICE_BYTES, PlanExecutor, active_replicas, exec_threads,
    replicas_for, supports_op,
};
pub use lower::{DevicePlan, DeviceRankPlan, LowerError, lower};
pub use plan_dir::load_plan_dir;
pub use specialize::{SPECIALIZE_MAX_OPS, specializable, static_ops_defines};
pub use tables::{check_routes, peers_touch_outputs};

#[cfg(test)]
pub(crate) mod tests {
    use weft_plan::ExecutionPlan;
    use weft_plan::plans;

    /// Every shipped plan at a few rank counts.
    pub(crate) fn shipped() -> Vec<ExecutionPlan> {
        plans::samples().unwrap()
    }
}
