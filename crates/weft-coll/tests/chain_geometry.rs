//! The chain's step geometry (`device/kernels/coll/chain_geometry.cuh`), compiled here by the
//! host C++ compiler (`$CXX`, else `g++`) into a program that answers queries on stdin
//! (`chain_geometry.cpp`), checked on random message sizes, rank counts, scratch sizes and grids:
//! the steps tile the message, every block's share is whole 16-byte vectors inside its slot, a
//! step fits a quarter of the scratch, and the step count follows the cost model (one step at 2
//! ranks when a slot holds the message, more with more ranks). Without a C++ compiler the test
//! says SKIPPED, unless `WEFT_REQUIRE_CC=1` (set by scripts/test.sh): then it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::path::Path;

use proptest::prelude::*;
use weft_core::host_cxx;

/// One query's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geometry {
    step: u64,
    steps: u64,
    sub: u64,
    blocks: u64,
}

/// A query: message bytes, ranks, scratch bytes per rank, grid.
type Query = (u64, u32, u64, u32);

/// The host program evaluating chain_geometry.cuh, compiled once per test run (`None`: no C++
/// compiler here, and skipping is allowed).
fn harness() -> Option<&'static Path> {
    weft_core::host_test_program!("chain_geometry", "chain_geometry.cuh", "device/kernels/coll")
}

/// Runs the host program on `queries`.
fn ask(exe: &Path, queries: &[Query]) -> Vec<Geometry> {
    let input: String = queries.iter().map(|(b, r, s, g)| format!("{b} {r} {s} {g}\n")).collect();
    let answers: Vec<Geometry> = host_cxx::ask(exe, &input)
        .unwrap()
        .lines()
        .map(|line| {
            let v: Vec<u64> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
            Geometry { step: v[0], steps: v[1], sub: v[2], blocks: v[3] }
        })
        .collect();
    assert_eq!(answers.len(), queries.len());
    answers
}

/// A call the collectives can make: any size, 1 to 8 ranks, a grid of 1 to 1024 blocks and the
/// scratch weft-coll allocates (`resources.rs`): two rounds of `chunk_bytes` rounded down to a
/// multiple of 16 x ranks, `chunk_bytes` any multiple of 16 of at least 32 x ranks x grid
/// (`check_shapes`).
fn query() -> impl Strategy<Value = Query> {
    (prop_oneof![1u64..4096, 1u64..(64 << 20), 1u64..(1 << 34)], 1u32..=8, 1u32..=1024, 0u64..(1 << 22)).prop_map(
        |(bytes, ranks, grid, extra)| {
            let chunk = 32 * u64::from(ranks) * u64::from(grid) + 16 * extra;
            (bytes, ranks, 2 * (chunk - chunk % (16 * u64::from(ranks))), grid)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_steps_tile_the_message_in_whole_vectors_inside_the_slots(queries in proptest::collection::vec(query(), 64)) {
        let Some(exe) = harness() else { return Ok(()) };
        for (q, g) in queries.iter().zip(ask(exe, &queries)) {
            let (bytes, ranks, scratch, grid) = *q;
            prop_assert!(g.blocks >= 1 && g.blocks <= u64::from(grid), "{q:?} {g:?}");
            prop_assert!(g.sub >= 16 && g.sub.is_multiple_of(16), "{q:?} {g:?}");
            prop_assert_eq!(g.step, g.sub * g.blocks);
            prop_assert!(g.step <= scratch / 4, "a step overflows its slot: {:?} {:?}", q, g);
            prop_assert_eq!(g.steps, bytes.div_ceil(g.step), "{:?}", q);
            // Blocks are chosen for the step's bytes: rounding each share up to 16 bytes may
            // leave the last few blocks of a one-step call idle, at most one in 256 (and one).
            let busy = bytes.min(g.step).div_ceil(g.sub);
            prop_assert!(g.blocks - busy <= g.blocks / 256 + 1, "idle blocks: {:?} {:?}", q, g);
            // At 2 ranks nothing waits down the chain: one step whenever a slot holds the message.
            if ranks <= 2 && bytes <= scratch / 4 - 16 * g.blocks {
                prop_assert_eq!(g.steps, 1, "{:?}", q);
            }
        }
    }
}

/// The model's step counts at the shipped scratch (two rounds of 32 MiB) and grid (128 blocks),
/// as measured on 4×H100 (docs/perf/collectives.md): one step at 2 ranks up to a slot (16 MiB),
/// 1 MB in one step at 4 ranks, 16 MB in five, 1 GB in 64 slot-sized steps; more ranks, more
/// steps.
#[test]
fn the_model_picks_few_large_steps_and_more_with_more_ranks() {
    let Some(exe) = harness() else { return };
    let scratch = 64 << 20;
    let sizes = [256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 1 << 30];
    let at = |ranks| ask(exe, &sizes.map(|b| (b, ranks, scratch, 128)));
    let steps = |ranks| at(ranks).iter().map(|g| g.steps).collect::<Vec<_>>();
    assert_eq!(steps(2), [1, 1, 1, 1, 4, 64]);
    let four = steps(4);
    assert_eq!((four[1], four[3], four[5]), (1, 5, 64), "{four:?}");
    for (more, fewer) in steps(8).iter().zip(&four) {
        assert!(more >= fewer);
    }
    for g in at(4) {
        assert_eq!(g.blocks, 128.min(g.step / 4096).max(1));
    }
}
