//! The plan format: JSON round trips, loader validation with clear errors, chunk geometry.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use weft_plan::plan::{
    BufRef, Buffer, CollectiveKind, ExecutionPlan, Geometry, Link, LoadError, Op, PLAN_VERSION, Protocol, RankPlan,
    ThreadBlock,
};
use weft_plan::plans;

fn shipped() -> Vec<ExecutionPlan> {
    vec![
        plans::ring_allreduce(4, 2).unwrap().compile().unwrap(),
        plans::allpairs_allreduce(4, 1).unwrap().compile().unwrap(),
        plans::hierarchical_allreduce(4, 2, 1).unwrap().compile().unwrap(),
        plans::ring_allgather(4, 1).unwrap().compile().unwrap(),
        plans::ring_reduce_scatter(4, 1).unwrap().compile().unwrap(),
        plans::allpairs_reduce_scatter(4, 1).unwrap().compile().unwrap(),
        plans::two_step_alltoall(4, 2, 1).unwrap().compile().unwrap(),
        plans::alltonext(4, 2, 1).unwrap().compile().unwrap(),
        plans::direct_broadcast(4, 3, 1).unwrap().compile().unwrap(),
        plans::ring_allreduce_ll(3, 2).unwrap().compile().unwrap(),
    ]
}

#[test]
fn json_round_trip() {
    for plan in shipped() {
        let json = plan.to_json().unwrap();
        let back = ExecutionPlan::load(&json).unwrap();
        assert_eq!(back, plan, "{}", plan.name);
    }
}

#[test]
fn json_shape() {
    let plan = plans::ring_allgather(2, 1).unwrap().compile().unwrap();
    let json: serde_json::Value = serde_json::from_str(&plan.to_json().unwrap()).unwrap();
    assert_eq!(json["version"], PLAN_VERSION);
    assert_eq!(json["collective"]["kind"], "allgather");
    let op = &json["ranks"][0]["threadblocks"][0]["ops"][0];
    assert_eq!(op["op"], "copy");
    assert_eq!(op["src"]["buffer"], "input");
}

/// A valid two-rank plan to damage: rank r puts its input into the peer's output[r].
fn base() -> ExecutionPlan {
    let rank = |r: u32| RankPlan {
        rank: r,
        scratch: vec![0],
        threadblocks: vec![ThreadBlock {
            id: 0,
            ops: vec![
                Op::Copy { src: BufRef::new(Buffer::Input, 0, 1), dst: BufRef::new(Buffer::Output, r, 1) },
                Op::Send {
                    src: BufRef::new(Buffer::Input, 0, 1),
                    dst: BufRef::new(Buffer::Output, r, 1),
                    to: Link::new(1 - r, 0),
                },
                Op::Wait { from: Link::new(1 - r, 0) },
            ],
        }],
    };
    ExecutionPlan {
        version: PLAN_VERSION,
        name: "base".into(),
        collective: CollectiveKind::Rootless(weft_types::Collective::AllGather),
        nranks: 2,
        size_classes: 1,
        input_chunks: 1,
        output_chunks: 2,
        protocol: Protocol::Simple,
        ranks: vec![rank(0), rank(1)],
    }
}

fn damaged(f: impl FnOnce(&mut ExecutionPlan)) -> String {
    let mut plan = base();
    f(&mut plan);
    match ExecutionPlan::load(&plan.to_json().unwrap()) {
        Ok(_) => "accepted".into(),
        Err(e) => e.to_string(),
    }
}

fn op(plan: &mut ExecutionPlan, rank: usize, i: usize) -> &mut Op {
    &mut plan.ranks[rank].threadblocks[0].ops[i]
}

#[test]
fn base_plan_is_valid() {
    assert_eq!(damaged(|_| {}), "accepted");
}

#[test]
fn loader_rejects_bad_plans() {
    let cases: Vec<(&str, String)> = vec![
        ("future version", damaged(|p| p.version = 2)),
        ("rank count", damaged(|p| p.nranks = 3)),
        ("rank order", damaged(|p| p.ranks.swap(0, 1))),
        ("chunks not whole blocks", damaged(|p| p.size_classes = 3)),
        ("scratch class", damaged(|p| p.ranks[0].scratch = vec![4])),
        (
            "index out of range",
            damaged(|p| {
                *op(p, 0, 0) =
                    Op::Copy { src: BufRef::new(Buffer::Input, 0, 1), dst: BufRef::new(Buffer::Output, 1, 2) }
            }),
        ),
        (
            "remote index out of range",
            damaged(|p| {
                *op(p, 0, 1) = Op::Send {
                    src: BufRef::new(Buffer::Input, 0, 1),
                    dst: BufRef::new(Buffer::Scratch, 3, 1),
                    to: Link::new(1, 0),
                }
            }),
        ),
        (
            "empty reference",
            damaged(|p| {
                *op(p, 0, 0) =
                    Op::Copy { src: BufRef::new(Buffer::Input, 0, 0), dst: BufRef::new(Buffer::Output, 0, 0) }
            }),
        ),
        ("bad peer", damaged(|p| *op(p, 0, 2) = Op::Wait { from: Link::new(7, 0) })),
        ("self peer", damaged(|p| *op(p, 0, 2) = Op::Wait { from: Link::new(0, 0) })),
        ("bad channel", damaged(|p| *op(p, 0, 2) = Op::Wait { from: Link::new(1, 64) })),
        (
            "unpaired",
            damaged(|p| {
                p.ranks[1].threadblocks[0].ops.pop();
            }),
        ),
        (
            "writes input",
            damaged(|p| {
                *op(p, 0, 0) =
                    Op::Copy { src: BufRef::new(Buffer::Output, 0, 1), dst: BufRef::new(Buffer::Input, 0, 1) }
            }),
        ),
        (
            "partial overlap",
            damaged(|p| {
                p.ranks[0].scratch = vec![0; 3];
                *op(p, 0, 0) = Op::Reduce {
                    srcs: vec![BufRef::new(Buffer::Scratch, 0, 2), BufRef::new(Buffer::Scratch, 0, 2)],
                    dst: BufRef::new(Buffer::Scratch, 1, 2),
                };
            }),
        ),
        (
            "reduce arity",
            damaged(|p| {
                *op(p, 0, 0) =
                    Op::Reduce { srcs: vec![BufRef::new(Buffer::Input, 0, 1)], dst: BufRef::new(Buffer::Output, 0, 1) }
            }),
        ),
        ("bad wait_tb", damaged(|p| *op(p, 0, 0) = Op::WaitTb { tb: 3, step: 0 })),
        (
            "shared link",
            damaged(|p| {
                let mut tb = p.ranks[0].threadblocks[0].clone();
                tb.id = 1;
                tb.ops = vec![Op::Wait { from: Link::new(1, 0) }];
                p.ranks[0].threadblocks.push(tb);
            }),
        ),
        ("barrier mismatch", damaged(|p| p.ranks[1].threadblocks.push(ThreadBlock { id: 1, ops: vec![Op::Barrier] }))),
        ("too many ops", damaged(|p| p.ranks[0].threadblocks[0].ops.extend(vec![Op::Nop; 1024]))),
    ];
    let text: Vec<String> = cases.iter().map(|(what, e)| format!("{what}: {e}")).collect();
    assert!(cases.iter().all(|(_, e)| e != "accepted"), "{text:#?}");
    insta::assert_snapshot!(text.join("\n"));
}

/// `base` as an LL plan: rank r sends its input into the peer's scratch[0], and receives the
/// peer's from its own scratch[0] into output[1 - r].
fn ll_base() -> ExecutionPlan {
    let mut plan = base();
    plan.protocol = Protocol::Ll;
    for r in 0..2u32 {
        let ops = &mut plan.ranks[r as usize].threadblocks[0].ops;
        ops[1] = Op::Send {
            src: BufRef::new(Buffer::Input, 0, 1),
            dst: BufRef::new(Buffer::Scratch, 0, 1),
            to: Link::new(1 - r, 0),
        };
        ops[2] = Op::Recv {
            from: Link::new(1 - r, 0),
            src: BufRef::new(Buffer::Scratch, 0, 1),
            dst: BufRef::new(Buffer::Output, 1 - r, 1),
        };
    }
    plan
}

/// The LL packet rules: packets land in scratch only, a chunk holds one transfer's packets and
/// nothing else touches it, each receive reads what its send wrote, no bare link operations.
#[test]
fn loader_rejects_bad_ll_plans() {
    let damaged_ll = |f: &dyn Fn(&mut ExecutionPlan)| {
        let mut plan = ll_base();
        f(&mut plan);
        match ExecutionPlan::load(&plan.to_json().unwrap()) {
            Ok(_) => "accepted".to_string(),
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(damaged_ll(&|_| ()), "accepted");
    let scratch = |i| BufRef::new(Buffer::Scratch, i, 1);
    let cases: Vec<(&str, String)> = vec![
        ("into an output", damaged(|p| p.protocol = Protocol::Ll)),
        (
            "bare put",
            damaged_ll(&|p| {
                *op(p, 0, 0) = Op::Put { src: BufRef::new(Buffer::Input, 0, 1), dst: scratch(0), to: Link::new(1, 1) }
            }),
        ),
        (
            "chunk read plainly",
            damaged_ll(&|p| *op(p, 1, 0) = Op::Copy { src: scratch(0), dst: BufRef::new(Buffer::Output, 1, 1) }),
        ),
        (
            "chunk written twice",
            damaged_ll(&|p| {
                let (send, recv) = (op(p, 0, 1).clone(), op(p, 1, 2).clone());
                p.ranks[0].threadblocks[0].ops.push(send);
                p.ranks[1].threadblocks[0].ops.push(recv);
            }),
        ),
        (
            "receive reads another chunk",
            damaged_ll(&|p| {
                p.ranks[1].scratch = vec![0, 0];
                if let Op::Recv { src, .. } = op(p, 1, 2) {
                    *src = scratch(1);
                }
            }),
        ),
    ];
    let text: Vec<String> = cases.iter().map(|(what, e)| format!("{what}: {e}")).collect();
    assert!(cases.iter().all(|(_, e)| e != "accepted"), "{text:#?}");
    insta::assert_snapshot!(text.join("\n"));
}

#[test]
fn loader_rejects_size_mismatch() {
    let mut plan = base();
    plan.size_classes = 2;
    plan.input_chunks = 2;
    plan.output_chunks = 4;
    plan.ranks[0].threadblocks[0].ops[0] =
        Op::Copy { src: BufRef::new(Buffer::Input, 0, 1), dst: BufRef::new(Buffer::Output, 1, 1) };
    let err = plan.validate().unwrap_err();
    assert!(matches!(err, LoadError::SizeMismatch { .. }), "{err}");
    insta::assert_snapshot!(err.to_string());
}

#[test]
fn loader_rejects_malformed_json() {
    let no_version = r#"{"name": "x"}"#;
    assert!(matches!(ExecutionPlan::load(no_version), Err(LoadError::MissingVersion)));
    let old = r#"{"version": 0, "name": "x"}"#;
    let err = ExecutionPlan::load(old).unwrap_err();
    assert!(matches!(err, LoadError::UnsupportedVersion { found: 0, supported: PLAN_VERSION }));
    let mut json: serde_json::Value = serde_json::from_str(&base().to_json().unwrap()).unwrap();
    json["ranks"][0]["threadblocks"][0]["ops"][0]["surprise"] = 1.into();
    let err = ExecutionPlan::load(&json.to_string()).unwrap_err();
    assert!(matches!(err, LoadError::Json(_)), "{err}");
    json["ranks"][0]["threadblocks"][0]["ops"][0] = serde_json::json!({"op": "teleport"});
    assert!(matches!(ExecutionPlan::load(&json.to_string()), Err(LoadError::Json(_))));
    assert!(matches!(ExecutionPlan::load("not json"), Err(LoadError::Json(_))));
}

/// Chunks of a block get a balanced split: sizes differ by at most one, larger ones first, and
/// blocks are contiguous, whatever the element count.
#[test]
fn geometry_balanced_split() {
    let mut plan = base();
    plan.size_classes = 3;
    plan.input_chunks = 3;
    plan.output_chunks = 6;
    plan.ranks[0].scratch = vec![2, 0];
    let g = Geometry::new(&plan, 7).unwrap();
    let extent = |r, b, i, c| g.extent(r, BufRef::new(b, i, c)).unwrap();
    assert_eq!(extent(0, Buffer::Input, 0, 1), 0..3);
    assert_eq!(extent(0, Buffer::Input, 1, 1), 3..5);
    assert_eq!(extent(0, Buffer::Input, 2, 1), 5..7);
    assert_eq!(extent(0, Buffer::Output, 3, 1), 7..10);
    assert_eq!(extent(0, Buffer::Output, 4, 2), 10..14);
    assert_eq!(extent(0, Buffer::Scratch, 0, 2), 0..5);
    assert_eq!(g.buffer_len(0, Buffer::Output), Some(14));
    assert_eq!(g.buffer_len(1, Buffer::Scratch), Some(3));
    let tiny = Geometry::new(&plan, 2).unwrap();
    assert_eq!(tiny.extent(0, BufRef::new(Buffer::Input, 2, 1)), Some(2..2));
    assert!(g.extent(0, BufRef::new(Buffer::Output, 5, 2)).is_none());
}

#[test]
fn a_loaded_plan_is_verified_against_the_collective_it_names() {
    let plan = weft_plan::plans::ring_allreduce(4, 2).unwrap().compile().unwrap();
    let loaded = weft_plan::ExecutionPlan::load(&plan.to_json().unwrap()).unwrap();
    let collective = weft_plan::Collective::from_plan(&loaded).unwrap();
    weft_plan::passes::verify(&loaded, &collective).unwrap();
    // The same plan relabelled as an AllToAll is rejected by the verifier.
    let mut wrong = loaded.clone();
    wrong.collective = weft_plan::plan::CollectiveKind::Rootless(weft_types::Collective::AllToAll);
    let c = weft_plan::Collective::from_plan(&wrong).unwrap();
    assert!(weft_plan::passes::verify(&wrong, &c).is_err());
}

/// An LL plan keeps only packets in scratch: plain data a launch left there could sit on a
/// packet's flag word in a later launch of another size. Two-step all-to-all stages plain
/// chunks in scratch, so it cannot be LL; the shipped LL plans, pipelined too, keep packets only.
#[test]
fn ll_plans_keep_only_packets_in_scratch() {
    let err = plans::two_step_alltoall(4, 2, 1).unwrap().with_protocol(Protocol::Ll).compile().unwrap_err();
    assert!(err.to_string().contains("holds plain data"), "{err}");
    for n in [2, 3, 4, 8] {
        plans::ring_allreduce_ll(n, 2).unwrap().with_pipeline(2).unwrap().compile().unwrap();
        plans::allpairs_allreduce_ll(n, 1).unwrap().with_pipeline(3).unwrap().compile().unwrap();
    }
}
