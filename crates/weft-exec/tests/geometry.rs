//! The chunk geometry is defined once, in weft-plan (`ChunkSplit`, `replica_slice`, `op_slice`,
//! and `Geometry` binding a plan with them), and two restatements must agree with it byte for
//! byte, on random plans (random size classes, chunk counts, scratch classes and protocols, and
//! the shipped DSL plans), element counts and element widths:
//!
//! - weft-exec's device tables: every chunk's extent as `Sizing` computes it from a lowered plan
//!   equals the interpreter's (`Geometry`), and every scratch chunk's class and padded room
//!   follow the plan's scratch list;
//! - the CUDA executor's closed forms (`device/kernels/exec/geometry.cuh`), compiled here by the
//!   host C++ compiler (`$CXX`, else `g++`) into a program that answers queries on stdin
//!   (`geometry.cpp`). Without a C++ compiler that test says SKIPPED, unless `WEFT_REQUIRE_CC=1`
//!   (set by scripts/test.sh): then it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::path::Path;
use std::sync::OnceLock;

use proptest::collection::vec;
use proptest::prelude::*;
use weft_core::host_cxx;
use weft_exec::geometry::Sizing;
use weft_exec::{DevicePlan, lower};
use weft_plan::ExecutionPlan;
use weft_plan::plan::{
    BufRef, Buffer, ChunkSplit, CollectiveKind, Geometry, PLAN_VERSION, Part, Protocol, RankPlan, op_slice,
    replica_slice,
};
use weft_plan::plans;

/// Element widths of weft's data types.
const ELEMS: [u64; 4] = [1, 2, 4, 8];

/// The shipped DSL plans at a few rank counts (compiled once).
fn shipped() -> &'static [ExecutionPlan] {
    static PLANS: OnceLock<Vec<ExecutionPlan>> = OnceLock::new();
    PLANS.get_or_init(|| plans::samples().unwrap())
}

/// A plan of random shape: `classes` size classes, whole input and output blocks, each rank a
/// random list of scratch classes, either protocol. Only the geometry reads it (no operations).
fn random_plan() -> impl Strategy<Value = ExecutionPlan> {
    (1u32..=8, 1u32..=4, 0u32..=4, 1usize..=3, any::<bool>()).prop_flat_map(
        |(classes, in_blocks, out_blocks, nranks, ll)| {
            vec(vec(0..classes, 0..12), nranks).prop_map(move |scratch| ExecutionPlan {
                version: PLAN_VERSION,
                name: "random".into(),
                collective: CollectiveKind::Custom,
                nranks: nranks as u32,
                size_classes: classes,
                input_chunks: classes * in_blocks,
                output_chunks: classes * out_blocks,
                protocol: if ll { Protocol::Ll } else { Protocol::Simple },
                ranks: (0..)
                    .zip(scratch)
                    .map(|(rank, scratch)| RankPlan { rank, scratch, threadblocks: vec![] })
                    .collect(),
            })
        },
    )
}

/// A random or shipped plan.
fn any_plan() -> impl Strategy<Value = ExecutionPlan> {
    prop_oneof![random_plan(), (0..shipped().len()).prop_map(|i| shipped()[i].clone())]
}

/// Elements per input block: small (empty and ragged chunks), medium, and past 32 bits.
fn per_block() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..40, 0u64..100_000, (1u64 << 33)..(1u64 << 40)]
}

/// The plan's input blocks.
fn blocks(plan: &ExecutionPlan) -> u64 {
    u64::from(plan.input_chunks / plan.size_classes)
}

/// Chunks of each class among the first `index` scratch chunks of `rank`: the plan's own list,
/// not the lowered table.
fn classes_before(plan: &ExecutionPlan, rank: usize, index: usize) -> Vec<u32> {
    let mut before = vec![0u32; plan.size_classes as usize];
    for &c in &plan.ranks[rank].scratch[..index] {
        before[c as usize] += 1;
    }
    before
}

/// Every chunk range of `rank`'s buffers, and one past each end.
fn every_ref(plan: &ExecutionPlan, rank: usize) -> Vec<BufRef> {
    let buffers = [
        (Buffer::Input, plan.input_chunks),
        (Buffer::Output, plan.output_chunks),
        (Buffer::Scratch, plan.ranks[rank].scratch.len() as u32),
    ];
    let mut refs = Vec::new();
    for (buffer, n) in buffers {
        for start in 0..=n {
            refs.extend((1..=n + 1 - start).map(|count| BufRef::new(buffer, start, count)));
        }
    }
    refs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The interpreter and the executor's tables place every chunk of every buffer at the same
    /// elements, refuse the same counts, and the padded layout gives every chunk room for its
    /// bytes, 16-byte aligned, in order.
    #[test]
    fn the_interpreter_and_the_exec_tables_place_every_chunk_alike(plan in any_plan(), per_block in per_block(), ragged in 1u64..4) {
        let lowered = lower(&plan).unwrap();
        let count = per_block * blocks(&plan);
        if blocks(&plan) > 1 {
            let odd = count + ragged % blocks(&plan);
            if !odd.is_multiple_of(blocks(&plan)) {
                prop_assert!(Geometry::new(&plan, odd as usize).is_err() && Sizing::new(&lowered, odd).is_none());
            }
        }
        let geometry = Geometry::new(&plan, count as usize).unwrap();
        let sizing = Sizing::new(&lowered, count).unwrap();
        prop_assert_eq!(geometry.split(), sizing.split());
        for (r, rank) in lowered.ranks.iter().enumerate() {
            for b in every_ref(&plan, r) {
                let want = geometry.extent(r as u32, b).map(|x| x.start as u64..x.end as u64);
                prop_assert_eq!(sizing.extent(rank, b), want, "rank {} {}", r, b);
            }
            let n = plan.ranks[r].scratch.len();
            for i in 0..n {
                let class = plan.class_of(r as u32, Buffer::Scratch, i as u32).map(u64::from);
                prop_assert_eq!(sizing.class_of(rank, 2, i as u64), class);
            }
            prop_assert_eq!(sizing.class_of(rank, 2, n as u64), None);
            for elem in ELEMS {
                padded_room(&plan, &lowered, &sizing, r, elem)?;
            }
        }
    }
}

/// Every chunk of `r`'s padded buffers starts 16-byte aligned where the one before it ends or
/// later, holds its bytes (twice under packets for scratch), and the lengths cover them all.
fn padded_room(
    plan: &ExecutionPlan,
    lowered: &DevicePlan,
    sizing: &Sizing,
    r: usize,
    elem: u64,
) -> Result<(), TestCaseError> {
    let rank = &lowered.ranks[r];
    let lengths = sizing.padded_lengths(rank, elem);
    let scale = if lowered.packets { 2 } else { 1 };
    let n_scratch = plan.ranks[r].scratch.len() as u32;
    for (buffer, n, length) in
        [(0u8, plan.input_chunks, lengths[0]), (1, plan.output_chunks, lengths[1]), (2, n_scratch, lengths[2])]
    {
        let mut end = 0;
        for i in 0..u64::from(n) {
            let at = sizing.padded_offset(rank, buffer, i, elem).unwrap();
            let class = sizing.class_of(rank, buffer, i).unwrap();
            let room = sizing.padded_offset(rank, buffer, i + 1, elem).unwrap() - at;
            let need = sizing.split().class_len(class) * elem * if buffer == 2 { scale } else { 1 };
            prop_assert!(at.is_multiple_of(16) && at >= end && room >= need, "rank {r} buffer {buffer} chunk {i}");
            end = at + need;
        }
        prop_assert!(end <= length);
    }
    Ok(())
}

/// The host program evaluating geometry.cuh, compiled once per test run (`None`: no C++
/// compiler here, and skipping is allowed).
fn harness() -> Option<&'static Path> {
    weft_core::host_test_program!("geometry", "geometry.cuh", "device/kernels/exec")
}

/// Runs the host program on `queries`, one answer line per query line.
fn ask(exe: &Path, queries: &str) -> Vec<String> {
    host_cxx::ask(exe, queries).unwrap().lines().map(str::to_owned).collect()
}

/// A slice query: `bytes`, part `part` of `parts` (0: none), replica `r` of `n`.
fn slice_query() -> impl Strategy<Value = (u64, u32, u32, u32, u32)> {
    (prop_oneof![0u64..100, 0u64..(1 << 24), 0u64..(1 << 40)], 0u32..=8, 1u32..=33)
        .prop_flat_map(|(bytes, parts, n)| (Just(bytes), 0..parts.max(1), Just(parts), 0..n, Just(n)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// geometry.cuh computes what weft-plan defines: every class's length and padded bytes,
    /// every input and output chunk's dense and padded offset and class, every scratch chunk's
    /// padded offset (from the lowered table) and class, and every replica and part slice.
    #[test]
    fn the_cuda_geometry_computes_what_weft_plan_defines(
        plan in any_plan(),
        per_block in per_block(),
        elem in proptest::sample::select(ELEMS.to_vec()),
        slices in vec(slice_query(), 1..64),
    ) {
        let Some(exe) = harness() else { return Ok(()) };
        let lowered = lower(&plan).unwrap();
        let count = per_block * blocks(&plan);
        let split = ChunkSplit::bind(plan.size_classes, plan.input_chunks, plan.output_chunks, count).unwrap();
        let (unit, classes) = (split.unit(), plan.size_classes);
        let scale = if lowered.packets { 2 } else { 1 };
        let (mut queries, mut want) = (String::new(), Vec::new());
        let dense_chunks = u64::from(plan.input_chunks.max(plan.output_chunks));
        for i in (0..=dense_chunks).chain([65_535, 1 << 20]) {
            let c = i % u64::from(classes);
            queries += &format!("g {elem} {unit} {classes} {scale} {c} {i}\n");
            want.push(format!(
                "{} {} {} {} {} {}",
                split.class_len(c),
                split.class_len(c) * elem,
                split.padded_class_bytes(c, elem),
                split.dense_offset(i),
                split.padded_dense_offset(i, elem),
                split.dense_class(i),
            ));
        }
        for (r, rank) in lowered.ranks.iter().enumerate() {
            let table = &rank.scratch_class_counts;
            let rows = table.len() / classes as usize;
            let table: Vec<String> = table.iter().map(u32::to_string).collect();
            let n = plan.ranks[r].scratch.len();
            for s in 0..=n {
                queries += &format!("s {elem} {unit} {classes} {scale} {rows} {} {s}\n", table.join(" "));
                let at = split.padded_packed_offset(&classes_before(&plan, r, s), elem).unwrap() * scale;
                let class = plan.ranks[r].scratch.get(s).map_or(-1, |&c| i64::from(c));
                want.push(format!("{at} {class}"));
            }
        }
        for &(bytes, part, parts, r, n) in &slices {
            queries += &format!("o {bytes} {part} {parts} {r} {n}\n");
            let mine = op_slice(bytes, (parts != 0).then(|| Part::new(part, parts)), r, n);
            let replica = replica_slice(bytes, r, n);
            want.push(format!("{} {} {} {}", mine.start, mine.end, replica.start, replica.end));
        }
        let got = ask(exe, &queries);
        prop_assert_eq!(got.len(), want.len());
        for ((g, w), q) in got.iter().zip(&want).zip(queries.lines()) {
            prop_assert_eq!(g, w, "query `{}`", q);
        }
    }
}
