//! The CPU reference interpreter: hand-made plans using every primitive, element types and
//! operators, bounded waits on deadlock, and input validation.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use std::time::Duration;

use weft_plan::dsl::{Collective, InputChunk};
use weft_plan::interp::{InterpretError, Interpreter, RankBuffers, ReduceOp, interpret};
use weft_plan::passes::verify;
use weft_plan::plan::{BufRef, Buffer, CollectiveKind, Link, Op};
use weft_plan::plans;

fn io(i: u32, c: u32) -> (BufRef, BufRef) {
    (BufRef::new(Buffer::Input, i, c), BufRef::new(Buffer::Output, i, c))
}

use common::hand_plan as plan;

/// Two ranks wait for each other before signalling: a deadlock, reported, not hung.
#[test]
fn deadlock_is_reported() {
    let rank = |peer| vec![vec![Op::Wait { from: Link::new(peer, 0) }, Op::Signal { to: Link::new(peer, 0) }]];
    let p = plan(CollectiveKind::Custom, 1, 1, vec![rank(1), rank(0)]);
    p.validate().unwrap();
    let mut buffers = vec![RankBuffers::new(vec![1i32; 4], vec![0; 4]); 2];
    let err = Interpreter::new(&p).timeout(Duration::from_millis(100)).run(&mut buffers, 4).unwrap_err();
    let InterpretError::Stalled { stalls, .. } = &err else { panic!("{err}") };
    assert_eq!(stalls.len(), 2);
    assert_eq!((stalls[0].site.rank, stalls[0].site.tb, stalls[0].site.op), (0, 0, 0));
    insta::assert_snapshot!(err.to_string());
    // The static verifier sees it too.
    let collective = Collective::custom(2, 1, 1, 1, |_, _| None).unwrap();
    insta::assert_snapshot!("deadlock_verify", verify(&p, &collective).unwrap_err().to_string());
}

/// A thread block waiting for a step another thread block never reaches.
#[test]
fn stalled_wait_tb_is_reported() {
    let p = plan(
        CollectiveKind::Custom,
        1,
        1,
        vec![vec![vec![Op::WaitTb { tb: 1, step: 0 }], vec![Op::WaitTb { tb: 0, step: 0 }]]],
    );
    let mut buffers = vec![RankBuffers::new(vec![1u64; 3], vec![0; 3])];
    let err = Interpreter::new(&p).timeout(Duration::from_millis(50)).run(&mut buffers, 3).unwrap_err();
    insta::assert_snapshot!(err.to_string());
}

/// All-reduce of two ranks with signal, wait and read_reduce (reading the peer's input).
fn read_reduce_plan() -> weft_plan::plan::ExecutionPlan {
    let rank = |peer: u32| {
        let (i, o) = io(0, 1);
        vec![vec![
            Op::Signal { to: Link::new(peer, 0) },
            Op::Wait { from: Link::new(peer, 0) },
            Op::ReadReduce { local: i, remote: i, dst: o, from: Link::new(peer, 0) },
        ]]
    };
    plan(CollectiveKind::Rootless(weft_types::Collective::AllReduce), 1, 1, vec![rank(1), rank(0)])
}

/// Avg and PreMulSum are refused by name (the interpreter has no division by the rank count
/// and no per-rank scalar), the four folds run.
#[test]
fn operators_without_a_fold_are_refused() {
    let p = read_reduce_plan();
    for op in ReduceOp::ALL {
        let mut buffers = vec![RankBuffers::new(vec![3i32], vec![0]), RankBuffers::new(vec![5i32], vec![0])];
        let result = Interpreter::new(&p).reduce_op(op).run(&mut buffers, 1);
        match op {
            ReduceOp::Avg | ReduceOp::PreMulSum => {
                let err = result.unwrap_err();
                assert!(matches!(err, InterpretError::UnsupportedOp(o) if o == op), "{err}");
                assert!(err.to_string().contains(op.name()), "{err}");
            }
            _ => {
                result.unwrap();
                let want = common::combine_i64(op)(3, 5) as i32;
                assert_eq!((buffers[0].output[0], buffers[1].output[0]), (want, want), "{op:?}");
            }
        }
    }
}

/// All-reduce of two ranks with signal, wait and read_reduce (reading the peer's input).
#[test]
fn read_reduce_allreduce() {
    let p = read_reduce_plan();
    verify(&p, &Collective::all_reduce(2, 1).unwrap()).unwrap();
    let mut buffers = vec![
        RankBuffers::new(vec![1.5f64, 2.0, -3.0], vec![0.0; 3]),
        RankBuffers::new(vec![0.25f64, 4.0, 3.0], vec![0.0; 3]),
    ];
    interpret(&p, &mut buffers, 3).unwrap();
    assert!(buffers.iter().all(|b| b.output == vec![1.75, 6.0, 0.0]));
}

/// All-gather of two ranks with copy, nop, put, signal, wait, get and a barrier between thread
/// blocks.
#[test]
fn put_get_barrier_allgather() {
    let rank = |me: u32| {
        let peer = 1 - me;
        let mine = BufRef::new(Buffer::Output, me, 1);
        let theirs = BufRef::new(Buffer::Output, peer, 1);
        vec![
            vec![
                Op::Copy { src: BufRef::new(Buffer::Input, 0, 1), dst: mine },
                Op::Nop,
                Op::Put { src: mine, dst: mine, to: Link::new(peer, 0) },
                Op::Signal { to: Link::new(peer, 0) },
                Op::Barrier,
            ],
            vec![Op::Wait { from: Link::new(peer, 0) }, Op::Barrier],
        ]
        .into_iter()
        .chain(std::iter::once(vec![
            Op::Barrier,
            // After the barrier the peer's data is here; read it again through `get` into
            // nothing new: a get of the peer's own block into ours is the same data.
            Op::Get { src: theirs, dst: theirs, from: Link::new(peer, 1) },
        ]))
        .collect::<Vec<_>>()
    };
    let p = plan(CollectiveKind::Rootless(weft_types::Collective::AllGather), 1, 2, vec![rank(0), rank(1)]);
    p.validate().unwrap();
    let mut buffers = vec![RankBuffers::new(vec![1i32, 2], vec![0; 4]), RankBuffers::new(vec![3i32, 4], vec![0; 4])];
    interpret(&p, &mut buffers, 2).unwrap();
    assert!(buffers.iter().all(|b| b.output == vec![1, 2, 3, 4]));
}

#[test]
fn element_types_and_operators() {
    let plan = plans::ring_allreduce(3, 1).unwrap().compile().unwrap();
    let mut b: Vec<RankBuffers<i32>> =
        (0..3).map(|r| RankBuffers::new(vec![i32::MAX - r, 5, -7], vec![0; 3])).collect();
    interpret(&plan, &mut b, 3).unwrap();
    let want = vec![(i32::MAX).wrapping_add(i32::MAX - 1).wrapping_add(i32::MAX - 2), 15, -21];
    assert!(b.iter().all(|x| x.output == want));
    for (op, want) in [(ReduceOp::Min, 1u32), (ReduceOp::Max, 3), (ReduceOp::Prod, 6), (ReduceOp::Sum, 6)] {
        let mut b: Vec<RankBuffers<u32>> = (0..3).map(|r| RankBuffers::new(vec![r + 1; 5], vec![0; 5])).collect();
        Interpreter::new(&plan).reduce_op(op).run(&mut b, 5).unwrap();
        assert!(b.iter().all(|x| x.output == vec![want; 5]), "{op:?}");
    }
    let mut b: Vec<RankBuffers<f32>> =
        (0..3).map(|r| RankBuffers::new(vec![r as f32 * 0.5; 2], vec![0.0; 2])).collect();
    Interpreter::new(&plan).reduce_op(ReduceOp::Max).run(&mut b, 2).unwrap();
    assert!(b.iter().all(|x| x.output == vec![1.0; 2]));
}

#[test]
fn interpreter_rejects_bad_buffers() {
    let plan = plans::ring_reduce_scatter(2, 1).unwrap().compile().unwrap();
    let mut good: Vec<RankBuffers<i64>> = (0..2).map(|_| RankBuffers::new(vec![0; 6], vec![0; 3])).collect();
    interpret(&plan, &mut good, 6).unwrap();
    let mut messages = Vec::new();
    messages.push(interpret(&plan, &mut good.clone(), 5).unwrap_err().to_string());
    messages.push(interpret(&plan, &mut good[..1].to_vec(), 6).unwrap_err().to_string());
    let mut short = good.clone();
    short[1].output.pop();
    messages.push(interpret(&plan, &mut short, 6).unwrap_err().to_string());
    let mut broken = plan.clone();
    broken.version = 9;
    messages.push(interpret(&broken, &mut good, 6).unwrap_err().to_string());
    insta::assert_snapshot!(messages.join("\n"));
}

/// A custom collective (rank 1 receives rank 0's two chunks swapped; rank 0's output is
/// unconstrained). With one size class both chunks have the same size, so the swap is legal
/// for every element count that is a multiple of 2.
#[test]
fn custom_collective_swap() {
    use weft_plan::dsl::Program;
    let collective =
        Collective::custom(2, 2, 2, 1, |rank, index| (rank == 1).then(|| vec![InputChunk::new(0, 1 - index)])).unwrap();
    let p = Program::new("swap", collective);
    for i in 0..2 {
        p.chunk(0, Buffer::Input, i, 1).unwrap().copy(1, Buffer::Output, 1 - i).unwrap();
    }
    let plan = p.compile().unwrap();
    let mut b =
        vec![RankBuffers::new(vec![1i64, 2, 3, 4, 5, 6], vec![-1; 6]), RankBuffers::new(vec![0i64; 6], vec![-1; 6])];
    interpret(&plan, &mut b, 6).unwrap();
    assert_eq!(b[1].output, vec![4, 5, 6, 1, 2, 3]);
    assert_eq!(b[0].output, vec![-1; 6]);
}
