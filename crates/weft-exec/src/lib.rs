//! # weft-exec — the plan executor
//!
//! **Owns:** turning a verified [`weft_plan::ExecutionPlan`] into what the executor's
//! interpreter kernel reads ([`lower::DevicePlan`]: per rank, thread-block op ranges and
//! [`weft_types::ExecOp`]s, plus the table that places scratch chunks for any message size),
//! and the chunk geometry the kernel computes ([`geometry`]), stated once in Rust and tested
//! against weft-plan's [`weft_plan::plan::Geometry`]. Later: uploading a lowered plan, the
//! interpreter kernel and its launch.
//!
//! **Must not:** change what a plan computes (lowering is a re-encoding, checked by decoding
//! it back), or accept a plan beyond the kernel's limits silently (an error names the rank,
//! thread block and operation).
//!
//! **Depends on:** `weft-types`, `weft-plan`.
//!
//! Status: the lowering and the geometry are done and tested on the CPU; the interpreter kernel
//! and its launch are not written yet.
#![forbid(unsafe_code)]

pub mod geometry;
pub mod lower;

pub use lower::{DevicePlan, DeviceRankPlan, LowerError, lower};

#[cfg(test)]
pub(crate) mod tests {
    use weft_plan::ExecutionPlan;
    use weft_plan::plans;

    /// Every shipped plan at a few rank counts.
    pub(crate) fn shipped() -> Vec<ExecutionPlan> {
        let programs = [
            plans::ring_allreduce(4, 2),
            plans::ring_allreduce(3, 1),
            plans::allpairs_allreduce(4, 1),
            plans::hierarchical_allreduce(4, 2, 1),
            plans::ring_allgather(5, 1),
            plans::ring_reduce_scatter(4, 1),
            plans::allpairs_reduce_scatter(3, 1),
            plans::two_step_alltoall(4, 2, 1),
            plans::alltonext(6, 3, 1),
            plans::direct_broadcast(4, 1, 1),
        ];
        programs.into_iter().map(|p| p.unwrap().compile().unwrap()).collect()
    }
}
