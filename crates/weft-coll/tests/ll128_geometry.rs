//! Where the LL128 chain puts a message's bytes and which warp handles which lines
//! (`device/kernels/coll/ll128_geometry.cuh`), compiled here by the host C++ compiler (`$CXX`,
//! else `g++`) into a program that answers queries on stdin (`ll128_geometry.cpp`), checked on
//! random sizes and grids: the lanes' bytes tile the message exactly, 120 bytes a line with the
//! flag lane's last 8 left for the flag; every group of lines belongs to exactly one warp of the
//! grid; and a warp owns the same groups whatever the message's length (the per-block tokens of
//! the LL protocol rely on it). Without a C++ compiler the test says SKIPPED, unless
//! `WEFT_REQUIRE_CC=1` (set by scripts/test.sh): then it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use weft_core::host_cxx;

/// The host program evaluating ll128_geometry.cuh, compiled once per test run (`None`: no C++
/// compiler here, and skipping is allowed).
fn harness() -> Option<&'static Path> {
    weft_core::host_test_program!("ll128_geometry", "ll128_geometry.cuh", "device/kernels/coll")
}

/// The answer to one query: its lines of numbers.
fn ask(exe: &Path, query: &str) -> Vec<Vec<u64>> {
    let answer = host_cxx::ask(exe, &format!("{query}\n")).unwrap();
    let mut lines: Vec<Vec<u64>> = Vec::new();
    for line in answer.lines() {
        if line == "end" {
            return lines;
        }
        lines.push(line.split_whitespace().map(|x| x.parse().unwrap()).collect());
    }
    panic!("the answer to {query:?} did not end");
}

/// The groups each (block, warp) of a grid handles for a message of `bytes`.
fn deal(exe: &Path, bytes: u64, blocks: u32, warps: u32) -> BTreeMap<(u64, u64), Vec<u64>> {
    ask(exe, &format!("deal {bytes} {blocks} {warps}")).into_iter().map(|v| ((v[0], v[1]), v[2..].to_vec())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_lanes_carry_every_byte_of_the_message_once(bytes in prop_oneof![0u64..1024, 1u64..(64 << 10)]) {
        let Some(exe) = harness() else { return Ok(()) };
        let mut covered = vec![0u8; bytes as usize];
        for v in ask(exe, &format!("lanes {bytes}")) {
            let (line, lane, offset, valid) = (v[0], v[1], v[2], v[3]);
            prop_assert_eq!(offset, line * 120 + 16 * lane);
            // The flag lane carries 8 bytes: its last 8 are the flag's.
            let cap = if lane == 7 { 8 } else { 16 };
            prop_assert!(valid <= cap, "line {} lane {}: {} bytes", line, lane, valid);
            if valid < cap {
                // Short only at the message's end.
                prop_assert_eq!(offset + valid, bytes.max(offset).min(offset + cap), "line {} lane {}", line, lane);
            }
            for b in offset..offset + valid {
                covered[b as usize] += 1;
            }
        }
        prop_assert!(covered.iter().all(|&c| c == 1), "bytes carried other than once: {:?}",
            covered.iter().position(|&c| c != 1));
    }

    #[test]
    fn every_group_has_one_warp_and_keeps_it_whatever_the_length(
        bytes in 1u64..(4 << 20),
        shorter in 0u64..(4 << 20),
        blocks in 1u32..=80,
        warps in 1u32..=32,
    ) {
        let Some(exe) = harness() else { return Ok(()) };
        let groups = bytes.div_ceil(120).div_ceil(4);
        let owners = deal(exe, bytes, blocks, warps);
        prop_assert_eq!(owners.len(), (blocks * warps) as usize);
        let mut owner = vec![None; groups as usize];
        for (&warp, list) in &owners {
            prop_assert!(list.windows(2).all(|w| w[0] < w[1]), "{:?}: not increasing", warp);
            for &g in list {
                prop_assert!(g < groups);
                prop_assert!(owner[g as usize].replace(warp).is_none(), "group {} has two warps", g);
            }
        }
        prop_assert!(owner.iter().all(Option::is_some), "a group without a warp");
        // A shorter message: each warp handles a prefix of the same list.
        let shorter = shorter.min(bytes);
        for (warp, list) in deal(exe, shorter, blocks, warps) {
            prop_assert!(owners[&warp].starts_with(&list), "{:?} at {} bytes: {:?}", warp, shorter, list);
        }
    }
}
