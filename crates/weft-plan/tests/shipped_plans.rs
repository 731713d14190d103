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
    fn port_allpairs_allreduce((n, _inst, m, seed) in shape()) {
        let plan = plans::port_allpairs_allreduce(n).unwrap().compile().unwrap();
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

/// Pipelined loops: every shipped plan split into tiles computes its collective, keeps the
/// unpipelined plan's thread blocks and channels (tiles share them), and a thread block starts
/// a later tile before it finishes the first one (the tiles overlap).
#[test]
fn pipelined_plans_are_correct_share_their_connections_and_overlap_tiles() {
    for n in [2u32, 3, 4] {
        let half = if n % 2 == 0 { n / 2 } else { 1 };
        let programs: Vec<(Box<dyn Fn() -> weft_plan::Program>, Coll)> = vec![
            (Box::new(move || plans::ring_allreduce(n, 2).unwrap()), Coll::AllReduce),
            (Box::new(move || plans::ring_allreduce_ll(n, 1).unwrap()), Coll::AllReduce),
            (Box::new(move || plans::allpairs_allreduce(n, 1).unwrap()), Coll::AllReduce),
            (Box::new(move || plans::hierarchical_allreduce(n, half, 1).unwrap()), Coll::AllReduce),
            (Box::new(move || plans::ring_allgather(n, 1).unwrap()), Coll::AllGather),
            (Box::new(move || plans::ring_reduce_scatter(n, 2).unwrap()), Coll::ReduceScatter),
            (Box::new(move || plans::two_step_alltoall(n, half, 1).unwrap()), Coll::AllToAll),
            (Box::new(move || plans::direct_broadcast(n, n - 1, 1).unwrap()), Coll::Broadcast(n as usize - 1)),
        ];
        for (build, coll) in programs {
            let flat = build().compile().unwrap();
            for tiles in [2u32, 3] {
                let plan = build().with_pipeline(tiles).unwrap().compile().unwrap();
                for m in [0usize, 1, 7, 40] {
                    check(&plan, coll, m, u64::from(n) * 31 + m as u64, ReduceOp::Sum)
                        .unwrap_or_else(|e| panic!("{} n={n} tiles={tiles} m={m}: {e}", plan.name));
                }
                assert_eq!(plan.size_classes, flat.size_classes * tiles, "{}", plan.name);
                for (p, f) in plan.ranks.iter().zip(&flat.ranks) {
                    assert_eq!(p.threadblocks.len(), f.threadblocks.len(), "{} rank {}", plan.name, p.rank);
                    let links = |r: &weft_plan::plan::RankPlan| {
                        let mut l: Vec<_> = r
                            .threadblocks
                            .iter()
                            .flat_map(|t| &t.ops)
                            .flat_map(|o| {
                                let e = o.effects();
                                e.wait.into_iter().chain(e.signal)
                            })
                            .collect();
                        l.sort();
                        l.dedup();
                        l
                    };
                    assert_eq!(links(p), links(f), "{} rank {}", plan.name, p.rank);
                }
            }
        }
    }
    // Ring all-gather at 4 ranks, 2 tiles: some thread block forwards tile 1 before tile 0's
    // last hop (the chunk's class tells the tile: class 2c + k is tile k of class c).
    let plan = plans::ring_allgather(4, 1).unwrap().with_pipeline(2).unwrap().compile().unwrap();
    let tile = |o: &weft_plan::plan::Op| {
        let e = o.effects();
        e.outputs.first().map(|l| plan.class_of(l.peer.unwrap_or(0), l.buf.buffer, l.buf.index).unwrap_or(0) % 2)
    };
    let overlaps = plan.ranks.iter().flat_map(|r| &r.threadblocks).any(|t| {
        let tiles: Vec<u32> = t.ops.iter().filter_map(&tile).collect();
        let first_one = tiles.iter().position(|&k| k == 1);
        let last_zero = tiles.iter().rposition(|&k| k == 0);
        matches!((first_one, last_zero), (Some(a), Some(b)) if a < b)
    });
    assert!(overlaps, "{}", plan.listing());
    // Tiles times instances is bounded.
    assert!(plans::ring_allreduce(2, 16).unwrap().with_pipeline(5).is_err());
    assert!(plans::ring_allreduce(2, 1).unwrap().with_pipeline(0).is_err());
}
