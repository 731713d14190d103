//! The operation DAG behind `weft plan show --dot/--svg`: its depths respect every ordering
//! edge of every shipped plan, a deadlocked plan's operations are found, and the DOT rendering
//! is stable (snapshot).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use weft_plan::plan::{BufRef, Buffer, CollectiveKind, EdgeKind, ExecutionPlan, Link, Op, OpGraph};
use weft_plan::{AnyProgram, plans};

fn shipped(n: u32) -> Vec<AnyProgram> {
    vec![
        plans::ring_allreduce(n, 2).unwrap().into(),
        plans::ring_allreduce_ll(n, 1).unwrap().into(),
        plans::allpairs_allreduce(n, 1).unwrap().into(),
        plans::allpairs_allreduce_ll(n, 1).unwrap().into(),
        plans::reduce_broadcast_allreduce(n, 1).unwrap().into(),
        plans::hierarchical_allreduce(n, 2, 1).unwrap().into(),
        plans::two_step_alltoall(n, 2, 1).unwrap().into(),
        plans::alltonext(n, 2, 1).unwrap().into(),
        plans::direct_broadcast(n, 1, 1).unwrap().into(),
        plans::ring_allgather(n, 1).unwrap().into(),
        plans::ring_reduce_scatter(n, 1).unwrap().into(),
        plans::allpairs_reduce_scatter(n, 1).unwrap().into(),
        plans::port_allpairs_allreduce(n).unwrap().into(),
        plans::nvrar_allreduce(n / 2, 2).unwrap().into(),
        plans::hier2ph_allreduce(n / 2, 2).unwrap().into(),
    ]
}

fn depth(g: &OpGraph, i: usize) -> u32 {
    g.nodes[i].depth.unwrap_or_else(|| panic!("{:?} never runs", g.nodes[i]))
}

/// Every operation of every shipped plan runs (no cycle), lies deeper than what it waits for
/// and than its predecessor in its thread block, the k-th barriers of a rank share one depth,
/// and every signal is drawn to its wait.
#[test]
fn depths_respect_every_edge_of_the_shipped_plans() {
    for n in [2, 4, 8] {
        for program in shipped(n) {
            let plan = program.compile().unwrap();
            let g = plan.graph();
            assert_eq!(g.nodes.len(), plan.op_count(), "{}", plan.name);
            assert_eq!(g.deadlocked().count(), 0, "{}", plan.name);
            for (_, _, lane) in &g.lanes {
                for i in lane.start + 1..lane.end {
                    assert!(depth(&g, i) > depth(&g, i - 1), "{}: program order at node {i}", plan.name);
                }
            }
            for e in &g.edges {
                assert!(depth(&g, e.to) > depth(&g, e.from), "{}: {e:?}", plan.name);
            }
            for group in &g.barriers {
                assert!(group.iter().all(|&m| depth(&g, m) == depth(&g, group[0])), "{}", plan.name);
            }
            let signals = plan
                .ranks
                .iter()
                .flat_map(|r| &r.threadblocks)
                .flat_map(|t| &t.ops)
                .filter(|o| o.effects().signal.is_some());
            let links = g.edges.iter().filter(|e| matches!(e.kind, EdgeKind::Link { .. })).count();
            assert_eq!(links, signals.count(), "{}", plan.name);
            let svg = g.to_svg();
            assert_eq!(svg.matches("<g>").count(), g.nodes.len(), "{}", plan.name);
            assert_eq!(svg.matches("</g>").count(), g.nodes.len(), "{}", plan.name);
            assert_eq!(svg.matches("marker-end").count(), g.edges.len(), "{}", plan.name);
        }
    }
}

fn hand_plan(ranks: Vec<Vec<Vec<Op>>>) -> ExecutionPlan {
    common::hand_plan(CollectiveKind::Custom, 1, 1, ranks)
}

/// Two ranks wait for each other before signalling: every operation is on the cycle, drawn red.
#[test]
fn a_cycle_of_waits_is_found_and_drawn_red() {
    let rank = |peer| vec![vec![Op::Wait { from: Link::new(peer, 0) }, Op::Signal { to: Link::new(peer, 0) }]];
    let plan = hand_plan(vec![rank(1), rank(0)]);
    plan.validate().unwrap();
    let g = plan.graph();
    assert_eq!(g.deadlocked().count(), 4);
    assert_eq!(g.to_dot().matches("fontcolor=red").count(), 4);
    assert_eq!(g.to_svg().matches("stroke=\"#c00\"").count(), 4);
    // One rank signalling first breaks the cycle.
    let first = vec![vec![Op::Signal { to: Link::new(1, 0) }, Op::Wait { from: Link::new(1, 0) }]];
    let g = hand_plan(vec![first, rank(0)]).graph();
    assert_eq!(g.deadlocked().count(), 0);
    assert_eq!(g.nodes.iter().map(|n| n.depth.unwrap()).collect::<Vec<_>>(), [0, 3, 1, 2]);
}

/// A barrier holds every thread block of the rank until the slowest arrives.
#[test]
fn a_barrier_waits_for_the_slowest_thread_block() {
    let out = BufRef::new(Buffer::Output, 0, 1);
    let scratch = BufRef::new(Buffer::Scratch, 0, 1);
    let slow = vec![Op::Copy { src: BufRef::new(Buffer::Input, 0, 1), dst: scratch }, Op::Nop, Op::Nop, Op::Barrier];
    let fast = vec![Op::Barrier, Op::Copy { src: scratch, dst: out }];
    let g = hand_plan(vec![vec![slow, fast]]).graph();
    assert_eq!(g.barriers, vec![vec![3, 4]]);
    assert_eq!((g.nodes[3].depth, g.nodes[4].depth, g.nodes[5].depth), (Some(3), Some(3), Some(4)));
}

#[test]
fn ring_allreduce_dot() {
    let plan = plans::ring_allreduce(2, 1).unwrap().compile().unwrap();
    insta::assert_snapshot!(plan.graph().to_dot());
}
