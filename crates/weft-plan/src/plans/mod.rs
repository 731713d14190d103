//! The shipped algorithms, written in the DSL.
//!
//! Each function returns a traced [`Program`](crate::dsl::Program); call
//! [`Program::compile`](crate::dsl::Program::compile) for its plan. Every one takes `instances`
//! (1 to [`Program::MAX_INSTANCES`](crate::dsl::Program::MAX_INSTANCES)), which splits each chunk into that
//! many sub-chunks handled by independent channels and thread blocks.
//!
//! | function | collective | constraints |
//! | --- | --- | --- |
//! | [`ring_allreduce`] | AllReduce | `nranks >= 2` |
//! | [`allpairs_allreduce`] | AllReduce | `nranks >= 2` |
//! | [`ring_allreduce_ll`], [`allpairs_allreduce_ll`] | AllReduce, LL packets | `nranks >= 2` |
//! | [`reduce_broadcast_allreduce`] | AllReduce through rank 0 (a `reduce_send`) | `nranks >= 2` |
//! | [`hierarchical_allreduce`] | AllReduce | `ranks_per_node` divides `nranks` |
//! | [`ring_allgather`] | AllGather | `nranks >= 2` |
//! | [`ring_reduce_scatter`] | ReduceScatter | `nranks >= 2` |
//! | [`allpairs_reduce_scatter`] | ReduceScatter | `nranks >= 2` |
//! | [`two_step_alltoall`] | AllToAll | `ranks_per_node` divides `nranks` |
//! | [`alltonext`] | custom: rank `r` receives rank `r - 1`'s input | `ranks_per_node` divides `nranks` |
//! | [`direct_broadcast`] | Broadcast | `root < nranks` |
//!
//! Written at the channel level (a [`ChannelProgram`](crate::dsl::ChannelProgram), compiled as
//! written, one thread block per rank):
//!
//! | function | collective | constraints |
//! | --- | --- | --- |
//! | [`port_allpairs_allreduce`] | AllReduce over port channels | `nranks >= 2` |
//! | [`nvrar_allreduce`] | AllReduce across nodes: NVRAR (recursive doubling across nodes, any node count) | `nodes * gpus_per_node >= 2` |
//! | [`hier2ph_allreduce`] | AllReduce across nodes: MSCCL++'s 2PH (two-shot all-pairs across nodes) | `nodes * gpus_per_node >= 2` |
//!
//! The two across nodes use memory channels only between ranks of one node (rank
//! `node * gpus_per_node + local`) and port channels only between nodes.

mod allreduce;
mod alltoall;
mod alltonext;
mod broadcast;
mod gather_scatter;
mod multinode;
mod port;
mod recursive_doubling;

pub use allreduce::{
    allpairs_allreduce, allpairs_allreduce_ll, hierarchical_allreduce, reduce_broadcast_allreduce, ring_allreduce,
    ring_allreduce_ll,
};
pub use alltoall::two_step_alltoall;
pub use alltonext::alltonext;
pub use broadcast::direct_broadcast;
pub use gather_scatter::{allpairs_reduce_scatter, ring_allgather, ring_reduce_scatter};
pub use multinode::{hier2ph_allreduce, nvrar_allreduce};
pub use port::port_allpairs_allreduce;
pub use recursive_doubling::{RecursiveDoubling, Role};

use crate::dsl::DslError;
use crate::{CompileError, ExecutionPlan};

/// Every shipped algorithm at a few rank counts (2 to 6 ranks, 1 or 2 instances), compiled: the
/// sample that the crates consuming plans (the executor's lowering, tables and geometry) test
/// against.
pub fn samples() -> Result<Vec<ExecutionPlan>, CompileError> {
    let programs = [
        ring_allreduce(4, 2),
        ring_allreduce(3, 1),
        allpairs_allreduce(4, 1),
        hierarchical_allreduce(4, 2, 1),
        ring_allgather(5, 1),
        ring_reduce_scatter(4, 1),
        allpairs_reduce_scatter(3, 1),
        two_step_alltoall(4, 2, 1),
        alltonext(6, 3, 1),
        direct_broadcast(4, 1, 1),
        allpairs_allreduce_ll(4, 1),
        ring_allreduce_ll(3, 2),
    ];
    let mut plans = Vec::with_capacity(programs.len() + 1);
    for program in programs {
        plans.push(program.map_err(CompileError::Program)?.compile()?);
    }
    for program in [port_allpairs_allreduce(3), nvrar_allreduce(3, 2), hier2ph_allreduce(3, 2)] {
        plans.push(program.map_err(CompileError::Program)?.compile()?);
    }
    Ok(plans)
}

fn at_least_two(algorithm: &'static str, nranks: u32) -> Result<(), DslError> {
    if nranks < 2 {
        return Err(DslError::Constraint { algorithm, reason: format!("needs at least 2 ranks, got {nranks}") });
    }
    Ok(())
}

fn nodes(algorithm: &'static str, nranks: u32, ranks_per_node: u32) -> Result<u32, DslError> {
    if ranks_per_node == 0 || !nranks.is_multiple_of(ranks_per_node) {
        return Err(DslError::Constraint {
            algorithm,
            reason: format!("{ranks_per_node} ranks per node does not divide {nranks} ranks"),
        });
    }
    Ok(nranks / ranks_per_node)
}
