//! Every shipped plan, compiled for random rank counts and instances, computes its collective
//! exactly on random inputs of random sizes (including sizes not divisible by the chunk count,
//! and empty chunks), as run by the CPU reference interpreter.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use common::{Coll, check};
use proptest::prelude::*;
use weft_plan::ReduceOp;
use weft_plan::plans;

fn divisors(n: u32) -> Vec<u32> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// (ranks, instances, elements per block, seed)
fn shape() -> impl Strategy<Value = (u32, u32, usize, u64)> {
    (2u32..=8, 1u32..=3, prop_oneof![0usize..=3, 4usize..=40], any::<u64>())
}

/// (ranks, ranks per node, instances, elements per block, seed)
fn node_shape() -> impl Strategy<Value = (u32, u32, u32, usize, u64)> {
    (2u32..=8)
        .prop_flat_map(|n| (Just(n), prop::sample::select(divisors(n))))
        .prop_flat_map(|(n, g)| (Just(n), Just(g), 1u32..=3, prop_oneof![0usize..=3, 4usize..=40], any::<u64>()))
}

fn op_for(seed: u64) -> ReduceOp {
    [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max][(seed % 4) as usize]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn ring_allreduce((n, inst, m, seed) in shape()) {
        let plan = plans::ring_allreduce(n, inst).unwrap().compile().unwrap();
        check(&plan, Coll::AllReduce, m, seed, op_for(seed)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn allpairs_allreduce((n, inst, m, seed) in shape()) {
        let plan = plans::allpairs_allreduce(n, inst).unwrap().compile().unwrap();
        check(&plan, Coll::AllReduce, m, seed, op_for(seed)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn ring_allreduce_ll((n, inst, m, seed) in shape()) {
        let plan = plans::ring_allreduce_ll(n, inst).unwrap().compile().unwrap();
        check(&plan, Coll::AllReduce, m, seed, op_for(seed)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn allpairs_allreduce_ll((n, inst, m, seed) in shape()) {
        let plan = plans::allpairs_allreduce_ll(n, inst).unwrap().compile().unwrap();
        check(&plan, Coll::AllReduce, m, seed, op_for(seed)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn hierarchical_allreduce((n, g, inst, m, seed) in node_shape()) {
        let plan = plans::hierarchical_allreduce(n, g, inst).unwrap().compile().unwrap();
        check(&plan, Coll::AllReduce, m, seed, op_for(seed)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn ring_allgather((n, inst, m, seed) in shape()) {
        let plan = plans::ring_allgather(n, inst).unwrap().compile().unwrap();
        check(&plan, Coll::AllGather, m, seed, ReduceOp::Sum).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn ring_reduce_scatter((n, inst, m, seed) in shape()) {
        let plan = plans::ring_reduce_scatter(n, inst).unwrap().compile().unwrap();
        check(&plan, Coll::ReduceScatter, m, seed, op_for(seed)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn allpairs_reduce_scatter((n, inst, m, seed) in shape()) {
        let plan = plans::allpairs_reduce_scatter(n, inst).unwrap().compile().unwrap();
        check(&plan, Coll::ReduceScatter, m, seed, op_for(seed)).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn two_step_alltoall((n, g, inst, m, seed) in node_shape()) {
        let plan = plans::two_step_alltoall(n, g, inst).unwrap().compile().unwrap();
        check(&plan, Coll::AllToAll, m, seed, ReduceOp::Sum).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn alltonext((n, g, inst, m, seed) in node_shape()) {
        let plan = plans::alltonext(n, g, inst).unwrap().compile().unwrap();
        check(&plan, Coll::AllToNext, m, seed, ReduceOp::Sum).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn direct_broadcast((n, inst, m, seed) in shape()) {
        let root = (seed % u64::from(n)) as u32;
        let plan = plans::direct_broadcast(n, root, inst).unwrap().compile().unwrap();
        check(&plan, Coll::Broadcast(root as usize), m, seed, ReduceOp::Sum).map_err(TestCaseError::fail)?;
    }
}

/// Every plan, every rank count, no fusion: the unfused lowering is correct too.
#[test]
fn unfused_plans_are_correct() {
    let options = weft_plan::CompileOptions { fuse: false, verify: true };
    for n in 2..=5 {
        let programs = [
            (plans::ring_allreduce(n, 1).unwrap(), Coll::AllReduce),
            (plans::allpairs_allreduce(n, 2).unwrap(), Coll::AllReduce),
            (plans::ring_reduce_scatter(n, 1).unwrap(), Coll::ReduceScatter),
            (plans::ring_allgather(n, 1).unwrap(), Coll::AllGather),
        ];
        for (program, coll) in programs {
            let plan = program.compile_with(&options).unwrap();
            check(&plan, coll, 13, u64::from(n), ReduceOp::Sum).unwrap();
        }
    }
}
