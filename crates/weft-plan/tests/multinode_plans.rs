//! The multi-node AllReduce plans (`nvrar_allreduce`, `hier2ph_allreduce`) at every node count
//! from 2 to 9 and 16 (powers of two and not), 1 to 4 GPUs per node: each compiles (validated
//! and verified) and computes the AllReduce exactly on the CPU reference interpreter, for
//! every operator and element counts that do and do not divide by the chunks, with every rank
//! ending bitwise identical.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use common::{Coll, Rng, check, run};
use weft_plan::passes::verify;
use weft_plan::plan::Op;
use weft_plan::plans;
use weft_plan::{ChannelProgram, Collective, DslError, ExecutionPlan, ReduceOp};

const NODES: [u32; 9] = [2, 3, 4, 5, 6, 7, 8, 9, 16];
const OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];

/// Elements per rank: none, fewer than the chunks, odd, and a few hundred.
const COUNTS: [usize; 5] = [0, 1, 7, 37, 301];

fn check_all(build: fn(u32, u32) -> Result<ChannelProgram, DslError>) {
    for nodes in NODES {
        for gpus in 1..=4 {
            let plan = build(nodes, gpus).unwrap().compile().unwrap_or_else(|e| panic!("{nodes} x {gpus}: {e}"));
            assert_eq!(plan.nranks, nodes * gpus);
            for (i, count) in COUNTS.into_iter().enumerate() {
                let seed = u64::from(nodes * 100 + gpus) * 10 + i as u64;
                // `check` takes elements per block; one block covers the whole input.
                check(&plan, Coll::AllReduce, count, seed, OPS[i % OPS.len()])
                    .unwrap_or_else(|e| panic!("{} {nodes} x {gpus}, {count} elements: {e}", plan.name));
                identical_on_every_rank(&plan, count, seed);
            }
        }
    }
}

/// Real-valued sums come out bitwise the same on every rank (each step reduces the same two
/// values on both sides of an exchange, or one rank reduces and sends the result).
fn identical_on_every_rank(plan: &ExecutionPlan, count: usize, seed: u64) {
    let mut rng = Rng::new(seed ^ 0xd1ff);
    let inputs: Vec<Vec<f64>> = (0..plan.nranks).map(|_| (0..count).map(|_| rng.float() * 1e3).collect()).collect();
    let outputs = run(plan, &inputs, f64::NAN, ReduceOp::Sum).unwrap();
    for (r, out) in outputs.iter().enumerate() {
        let same = out.iter().zip(&outputs[0]).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{}: rank {r} differs from rank 0 at {count} elements", plan.name);
    }
}

#[test]
fn nvrar_is_an_allreduce_on_2_to_9_and_16_nodes() {
    check_all(plans::nvrar_allreduce);
}

#[test]
fn hier2ph_is_an_allreduce_on_2_to_9_and_16_nodes() {
    check_all(plans::hier2ph_allreduce);
}

#[test]
fn shapes_without_two_ranks_are_refused_by_name() {
    for build in [plans::nvrar_allreduce, plans::hier2ph_allreduce] {
        for (nodes, gpus) in [(1, 1), (0, 4), (4, 0)] {
            let e = build(nodes, gpus).unwrap_err().to_string();
            assert!(e.contains("_allreduce"), "{e}");
        }
        // One node: the phase across nodes is empty, and what remains is still an AllReduce.
        let plan = build(1, 3).unwrap().compile().unwrap();
        check(&plan, Coll::AllReduce, 11, 5, ReduceOp::Sum).unwrap();
    }
}

/// NVRAR on 3 nodes: node 0 folds into node 1, which hands the result back last. The compiled
/// plan with that put and its wait taken out leaves node 0 with what its scratch held before:
/// the verifier refuses it and the interpreter's outputs differ from the reference.
#[test]
fn without_the_hand_back_the_verifier_and_the_interpreter_both_object() {
    let mut plan = plans::nvrar_allreduce(3, 1).unwrap().compile().unwrap();
    let survivor = &mut plan.ranks[1].threadblocks[0].ops;
    let hand_back = survivor.iter().rposition(|op| matches!(op, Op::Send { to, .. } if to.port && to.peer == 0));
    survivor.remove(hand_back.expect("node 1 hands the result back to node 0"));
    let folded = &mut plan.ranks[0].threadblocks[0].ops;
    let wait = folded.iter().position(|op| matches!(op, Op::Wait { from } if from.port && from.peer == 1));
    folded.remove(wait.expect("node 0 waits for the result"));
    let collective = Collective::from_plan(&plan).unwrap();
    let e = verify(&plan, &collective).unwrap_err().to_string();
    assert!(e.contains("rank 0") && e.contains("before anything writes it"), "{e}");
    let e = check(&plan, Coll::AllReduce, 5, 1, ReduceOp::Sum).unwrap_err();
    assert!(e.contains("rank 0 element"), "{e}");
}
