//! Compiler checks: postconditions, freshness (race) rules, hints, transfer ordering, the
//! verifier on hand-damaged plans, and snapshots of compiled plan listings.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

mod common;

use weft_plan::dsl::{Buffer, Collective, DslError, Hints, InputChunk, Program};
use weft_plan::passes::{VerifyError, verify};
use weft_plan::plan::Op;
use weft_plan::{CompileError, ReduceOp, plans};

#[test]
fn ring_allreduce_listing() {
    let plan = plans::ring_allreduce(4, 1).unwrap().compile().unwrap();
    insta::assert_snapshot!(plan.listing());
}

#[test]
fn allpairs_allreduce_two_instances_listing() {
    let plan = plans::allpairs_allreduce(3, 2).unwrap().compile().unwrap();
    insta::assert_snapshot!(plan.listing());
}

/// A local reduce and the send of its result fuse into one `reduce_send` (MSCCL++'s
/// reduce-send), which stores the result only where something else reads it: here it is rank
/// 0's final output. The fused plan computes the same, with two operations fewer (the barrier
/// between the reduce's stores and the send's loads goes too).
#[test]
fn a_reduce_and_the_send_of_its_result_fuse() {
    for n in [2, 3, 5] {
        let fused = plans::reduce_broadcast_allreduce(n, 1).unwrap().compile().unwrap();
        let options = weft_plan::CompileOptions { fuse: false, verify: true };
        let apart = plans::reduce_broadcast_allreduce(n, 1).unwrap().compile_with(&options).unwrap();
        let count = |plan: &weft_plan::ExecutionPlan, name| {
            plan.ranks.iter().flat_map(|r| &r.threadblocks).flat_map(|t| &t.ops).filter(|o| o.name() == name).count()
        };
        assert_eq!((count(&fused, "reduce_send"), count(&apart, "reduce_send")), (1, 0));
        // The reduce and the send become one, and the barrier between them goes.
        assert_eq!(count(&fused, "reduce") + 1, count(&apart, "reduce"));
        assert_eq!(count(&fused, "send") + 1, count(&apart, "send"));
        assert_eq!(count(&fused, "nop") + 1, count(&apart, "nop"));
        for plan in [&fused, &apart] {
            for m in [1, 6, 31] {
                common::check(plan, common::Coll::AllReduce, m, u64::from(n) * 7 + m as u64, ReduceOp::Sum).unwrap();
                common::check(plan, common::Coll::AllReduce, m, 3, ReduceOp::Max).unwrap();
            }
        }
    }
    insta::assert_snapshot!(plans::reduce_broadcast_allreduce(3, 1).unwrap().compile().unwrap().listing());
}

/// A ring all-gather that forgets to forward rank 2's block to rank 1.
#[test]
fn missing_copy_violates_postcondition() {
    let p = Program::new("broken_allgather", Collective::all_gather(3, 1).unwrap());
    for r in 0..3 {
        let mut c = p.chunk(r, Buffer::Input, 0, 1).unwrap().copy(r, Buffer::Output, r).unwrap();
        let steps = if r == 2 { 1 } else { 2 };
        for step in 1..=steps {
            c = c.copy((r + step) % 3, Buffer::Output, r).unwrap();
        }
    }
    let err = p.compile().unwrap_err();
    assert!(matches!(err, CompileError::Postcondition { rank: 1, buffer: Buffer::Output, index: 2, .. }), "{err}");
    insta::assert_snapshot!(err.to_string());
}

/// An all-pairs all-reduce that leaves out rank 2's contribution to chunk 0.
#[test]
fn missing_contribution_violates_postcondition() {
    let p = Program::new("broken_allreduce", Collective::all_reduce(3, 3).unwrap());
    for q in 0..3 {
        let mut acc = p.chunk(q, Buffer::Input, q, 1).unwrap();
        let mut first = true;
        for s in (1..3).map(|k| (q + k) % 3) {
            if q == 0 && s == 2 {
                continue;
            }
            let theirs = p.chunk(s, Buffer::Input, q, 1).unwrap();
            acc = if first { acc.reduce_to(&theirs, Buffer::Output, q).unwrap() } else { acc.reduce(&theirs).unwrap() };
            first = false;
        }
        for s in (1..3).map(|k| (q + k) % 3) {
            acc.copy(s, Buffer::Output, q).unwrap();
        }
    }
    let err = p.compile().unwrap_err();
    assert!(matches!(err, CompileError::Postcondition { rank: 0, index: 0, .. }), "{err}");
    insta::assert_snapshot!(err.to_string());
}

/// Using a reference after its location was overwritten would race on a GPU: rejected.
#[test]
fn stale_reference_is_rejected() {
    let p = Program::new("racy", Collective::all_gather(2, 1).unwrap());
    let x = p.chunk(0, Buffer::Input, 0, 1).unwrap().copy(1, Buffer::Scratch, 0).unwrap();
    p.chunk(1, Buffer::Input, 0, 1).unwrap().copy(1, Buffer::Scratch, 0).unwrap();
    let err = x.copy(1, Buffer::Output, 0).unwrap_err();
    assert_eq!(err, DslError::StaleChunk { rank: 1, buffer: Buffer::Scratch, index: 0 });
    insta::assert_snapshot!(err.to_string());
}

#[test]
fn dsl_error_messages() {
    let p = Program::new("errors", Collective::all_reduce(2, 2).unwrap());
    let q = Program::new("other", Collective::all_reduce(2, 2).unwrap());
    let input = p.chunk(0, Buffer::Input, 0, 1).unwrap();
    let both = p.chunk(0, Buffer::Input, 0, 2).unwrap();
    let foreign = q.chunk(1, Buffer::Input, 0, 1).unwrap();
    let errors = [
        p.chunk(0, Buffer::Output, 0, 1).unwrap_err(),
        p.chunk(5, Buffer::Input, 0, 1).unwrap_err(),
        p.chunk(0, Buffer::Input, 1, 2).unwrap_err(),
        p.chunk(0, Buffer::Input, 0, 0).unwrap_err(),
        input.copy(1, Buffer::Input, 0).unwrap_err(),
        input.copy(1, Buffer::Output, 1).unwrap_err(),
        both.copy(0, Buffer::Input, 1).unwrap_err(),
        both.copy(0, Buffer::Scratch, 0).and_then(|s| s.copy(0, Buffer::Scratch, 1)).unwrap_err(),
        input.reduce(&both).unwrap_err(),
        input.reduce(&foreign).unwrap_err(),
        input.copy_with(1, Buffer::Output, 0, Hints::channel(99)).unwrap_err(),
        Program::new("x", Collective::all_reduce(2, 2).unwrap()).with_instances(0).unwrap_err(),
        Collective::all_reduce(0, 1).unwrap_err(),
        plans::hierarchical_allreduce(6, 4, 1).unwrap_err(),
        plans::ring_allreduce(1, 1).unwrap_err(),
    ];
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    insta::assert_snapshot!(text.join("\n"));
}

/// Hints traced before `with_instances` are checked again: every instance needs a channel of
/// its own, so a hint that fitted one instance may not fit two.
#[test]
fn instances_recheck_the_hints_traced_before() {
    let p = Program::new("hinted", Collective::all_gather(2, 1).unwrap());
    let c = p.chunk(0, Buffer::Input, 0, 1).unwrap();
    c.copy(0, Buffer::Output, 0).unwrap();
    c.copy_with(1, Buffer::Output, 0, Hints::channel(weft_plan::plan::limits::MAX_CHANNELS - 1)).unwrap();
    let e = p.with_instances(2).unwrap_err();
    assert!(matches!(e, DslError::BadSetting { what: "channel", .. }), "{e}");
}

/// Two sends to different peers hinted onto one thread block break "one link per direction".
#[test]
fn thread_block_hint_conflict() {
    let p = Program::new("hinted", Collective::broadcast(3, 0, 1).unwrap());
    let c = p.chunk(0, Buffer::Input, 0, 1).unwrap();
    c.copy(0, Buffer::Output, 0).unwrap();
    c.copy_with(1, Buffer::Output, 0, Hints::default().src_tb(0)).unwrap();
    c.copy_with(2, Buffer::Output, 0, Hints::default().src_tb(0)).unwrap();
    let err = p.compile().unwrap_err();
    assert!(matches!(err, CompileError::ThreadBlockConflict { rank: 0, .. }), "{err}");
    insta::assert_snapshot!(err.to_string());
}

/// Hints that respect the rule are honoured: both sends of rank 0 on their own channel.
#[test]
fn channel_hints_are_honoured() {
    let p = Program::new("channels", Collective::broadcast(2, 0, 2).unwrap());
    for i in 0..2 {
        let c = p.chunk(0, Buffer::Input, i, 1).unwrap();
        c.copy(0, Buffer::Output, i).unwrap();
        c.copy_with(1, Buffer::Output, i, Hints::channel(i)).unwrap();
    }
    let plan = p.compile().unwrap();
    let channels: Vec<u32> = plan.ranks[0]
        .threadblocks
        .iter()
        .flat_map(|t| &t.ops)
        .filter_map(|op| op.effects().signal.map(|l| l.channel))
        .collect();
    assert_eq!(channels.len(), 2);
    assert!(channels.contains(&0) && channels.contains(&1));
}

/// Rank 1 must land `x` before `y` in the same output chunk; `y` is ready long before `x`, but
/// both travel on the same connection, so the sender has to send `x` first.
#[test]
fn transfers_on_one_connection_follow_the_receiver() {
    let collective =
        Collective::custom(3, 1, 1, 1, |rank, _| (rank == 1).then(|| vec![InputChunk::new(0, 0)])).unwrap();
    let p = Program::new("ordering", collective);
    let x = p.chunk(2, Buffer::Input, 0, 1).unwrap().copy(0, Buffer::Scratch, 0).unwrap();
    let x = x.copy(0, Buffer::Scratch, 1).unwrap();
    x.copy(1, Buffer::Output, 0).unwrap();
    p.chunk(0, Buffer::Input, 0, 1).unwrap().copy(1, Buffer::Output, 0).unwrap();
    let plan = p.compile().unwrap();
    let inputs = common::int_inputs(3, 5, 9);
    let out = common::run(&plan, &inputs, -1, ReduceOp::Sum).unwrap();
    assert_eq!(out[1], inputs[0]);
}

/// Removing a cross-thread-block dependency from a compiled plan makes it racy; the verifier
/// rejects it (here the symbolic run reaches the unordered read first, before any write).
#[test]
fn verifier_finds_a_race_in_a_damaged_plan() {
    let program = plans::allpairs_allreduce(3, 1).unwrap();
    let mut plan = program.compile().unwrap();
    let tb =
        plan.ranks[0].threadblocks.iter_mut().find(|t| t.ops.iter().any(|o| matches!(o, Op::WaitTb { .. }))).unwrap();
    let at = tb.ops.iter().position(|o| matches!(o, Op::WaitTb { .. })).unwrap();
    tb.ops[at] = Op::Nop;
    let err = verify(&plan, program.collective()).unwrap_err();
    assert!(matches!(err, VerifyError::Race { rank: 0, .. } | VerifyError::Uninitialized { .. }), "{err}");
    insta::assert_snapshot!(err.to_string());
}

/// The verifier also re-checks the postcondition on the plan itself.
#[test]
fn verifier_checks_the_postcondition_of_a_plan() {
    let program = plans::ring_allgather(3, 1).unwrap();
    let plan = program.compile().unwrap();
    let other = Collective::broadcast(3, 0, 1).unwrap();
    assert!(matches!(verify(&plan, &other), Err(VerifyError::Shape { .. })));
    let wrong = Collective::custom(3, 1, 3, 1, |_, i| Some(vec![InputChunk::new((i + 1) % 3, 0)])).unwrap();
    let err = verify(&plan, &wrong).unwrap_err();
    insta::assert_snapshot!(err.to_string());
}

#[test]
fn compile_is_deterministic() {
    let a = plans::hierarchical_allreduce(8, 4, 2).unwrap().compile().unwrap();
    let b = plans::hierarchical_allreduce(8, 4, 2).unwrap().compile().unwrap();
    assert_eq!(a, b);
}

/// A write that is not ordered after an earlier read of the same chunk is a race.
#[test]
fn verifier_finds_a_write_after_read_race() {
    use weft_plan::plan::{BufRef, ExecutionPlan};
    let json = r#"{
        "version": 1, "name": "war", "collective": {"kind": "custom"}, "nranks": 1,
        "size_classes": 1, "input_chunks": 1, "output_chunks": 2,
        "ranks": [{"rank": 0, "scratch": [], "threadblocks": [
            {"id": 0, "ops": [{"op": "copy", "src": {"buffer": "input", "index": 0, "count": 1},
                                             "dst": {"buffer": "output", "index": 0, "count": 1}},
                              {"op": "copy", "src": {"buffer": "output", "index": 0, "count": 1},
                                             "dst": {"buffer": "output", "index": 1, "count": 1}}]},
            {"id": 1, "ops": [{"op": "wait_tb", "tb": 0, "step": 0},
                              {"op": "copy", "src": {"buffer": "input", "index": 0, "count": 1},
                                             "dst": {"buffer": "output", "index": 0, "count": 1}}]}
        ]}]
    }"#;
    let plan = ExecutionPlan::load(json).unwrap();
    let collective = Collective::custom(1, 1, 2, 1, |_, _| Some(vec![InputChunk::new(0, 0)])).unwrap();
    let err = verify(&plan, &collective).unwrap_err();
    assert!(matches!(err, VerifyError::Race { rank: 0, buffer: Buffer::Output, index: 0, .. }), "{err}");
    insta::assert_snapshot!(err.to_string());
    let _ = BufRef::new(Buffer::Input, 0, 1);
}

/// Fusing rank 0's receive of `x` with its forwarding send moves that send (the later transfer
/// on the 0 -> 1 connection) ahead of the earlier one, which rank 1 must land first. The
/// compiler falls back to a schedule that keeps program order on the connection.
#[test]
fn fusion_that_would_reorder_a_connection_falls_back() {
    let collective =
        Collective::custom(3, 1, 1, 1, |rank, _| (rank == 1).then(|| vec![InputChunk::new(2, 0)])).unwrap();
    let p = Program::new("fallback", collective);
    let x = p.chunk(2, Buffer::Input, 0, 1).unwrap().copy(0, Buffer::Scratch, 0).unwrap();
    let y = x.copy(0, Buffer::Scratch, 1).unwrap();
    y.copy(1, Buffer::Output, 0).unwrap();
    x.copy(1, Buffer::Output, 0).unwrap();
    let plan = p.compile().unwrap();
    let inputs = common::int_inputs(3, 4, 3);
    let out = common::run(&plan, &inputs, -1, ReduceOp::Sum).unwrap();
    assert_eq!(out[1], inputs[2]);
}

/// In place (nccl-tests' layout), an output chunk is the memory of the input chunk it
/// overlaps: the ring plans read every input chunk before anything overwrites it; two-step
/// all-to-all overwrites an input chunk a peer still has to read.
#[test]
fn in_place_verification_accepts_the_ring_plans_and_rejects_all_to_all() {
    use weft_plan::passes::{InPlace, verify_in_place};
    for (ranks, instances) in [(2, 1), (4, 4)] {
        let plans = [
            (plans::ring_allreduce(ranks, instances).unwrap().compile().unwrap(), InPlace::Same),
            (plans::ring_allgather(ranks, instances).unwrap().compile().unwrap(), InPlace::InputInOutput),
            (plans::ring_reduce_scatter(ranks, instances).unwrap().compile().unwrap(), InPlace::OutputInInput),
        ];
        for (plan, layout) in plans {
            assert_eq!(InPlace::of(&plan), Some(layout), "{}", plan.name);
            verify_in_place(&plan, &Collective::from_plan(&plan).unwrap()).unwrap();
        }
        let alltoall = plans::two_step_alltoall(ranks, ranks / 2, instances).unwrap().compile().unwrap();
        let err = verify_in_place(&alltoall, &Collective::from_plan(&alltoall).unwrap()).unwrap_err();
        assert!(matches!(err, VerifyError::Race { buffer: Buffer::Input, .. }), "{err}");
        // Out of place it is fine.
        verify(&alltoall, &Collective::from_plan(&alltoall).unwrap()).unwrap();
    }
    // Rank 1's output chunk 2 of a 2-rank all-gather of 2 chunks is its input chunk 0.
    let gather = plans::ring_allgather(2, 2).unwrap().compile().unwrap();
    assert_eq!(InPlace::InputInOutput.input_of(&gather, 1, 2), Some(0));
    assert_eq!(InPlace::InputInOutput.input_of(&gather, 1, 1), None);
    // In bytes (nccl-tests): rank 2's input at block 2 of an all-gather's output, its output
    // at block 2 of a reduce-scatter's input.
    assert_eq!(InPlace::Same.byte_offsets(2, 64, 64), Some((0, 0)));
    assert_eq!(InPlace::InputInOutput.byte_offsets(2, 64, 256), Some((128, 0)));
    assert_eq!(InPlace::OutputInInput.byte_offsets(2, 256, 64), Some((0, 128)));
    assert_eq!(InPlace::InputInOutput.byte_offsets(2, u64::MAX, 0), None);
}

/// In place, a broadcast root's copy of its input onto its own output writes the memory it
/// reads, and the root's sends read that input concurrently: the copy stores the bytes already
/// there, so it is verified as the read it is. A copy onto the same memory from another chunk
/// still races the sends.
#[test]
fn in_place_verification_accepts_a_broadcast_root_copying_onto_its_own_input() {
    use weft_plan::passes::{InPlace, verify_in_place};
    for (ranks, instances) in [(2, 1), (2, 4), (4, 4), (8, 2)] {
        for root in 0..ranks {
            let plan = plans::direct_broadcast(ranks, root, instances).unwrap().compile().unwrap();
            assert_eq!(InPlace::of(&plan), Some(InPlace::Same));
            verify_in_place(&plan, &Collective::from_plan(&plan).unwrap()).unwrap();
        }
    }
    // The root's copies folding the chunk with itself: in place, each writes twice the input
    // chunk over it while a send reads it.
    let mut plan = plans::direct_broadcast(2, 1, 4).unwrap().compile().unwrap();
    let copies = plan.ranks[1].threadblocks.iter_mut().flat_map(|tb| &mut tb.ops);
    for op in copies {
        if let Op::Copy { src, dst } = *op {
            *op = Op::Reduce { srcs: vec![src, src], dst };
        }
    }
    let collective = Collective::from_plan(&plan).unwrap();
    let err = verify_in_place(&plan, &collective).unwrap_err();
    assert!(matches!(err, VerifyError::Race { rank: 1, .. }), "{err}");
}
