//! The flags of LL rounds (`device/include/weft/ll_flags.cuh`), compiled here by the host C++
//! compiler into a program that answers queries on stdin (`ll_flags.cpp`), walked from the first
//! launch and across the 32-bit wrap: a flag is never 0 or 1 (zeroed packet memory never shows
//! one), the parity half alternates at every launch, "two launches back" is the flag two
//! launches earlier, and the token wait holds a round back exactly until the reader finished the
//! round two back (at the first two launches a never-written token does not hold it). Without a
//! C++ compiler the test says SKIPPED, unless `WEFT_REQUIRE_CC=1` (set by scripts/test.sh): then
//! it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure

use std::path::Path;

use weft_core::host_cxx;

fn harness() -> Option<&'static Path> {
    weft_core::host_test_program!("ll_flags", "weft/ll_flags.cuh", "device/include")
}

/// The answers to `queries`, one number each.
fn ask(exe: &Path, queries: &[String]) -> Vec<u64> {
    let answer = host_cxx::ask(exe, &(queries.join("\n") + "\n")).unwrap();
    answer.lines().map(|l| l.trim().parse().unwrap()).collect()
}

/// `n` launches' flags from a slot holding `last`.
fn flags_from(exe: &Path, mut last: u32, n: usize) -> Vec<u32> {
    let mut flags = Vec::with_capacity(n);
    for _ in 0..n {
        last = ask(exe, &[format!("after {last}")])[0] as u32;
        flags.push(last);
    }
    flags
}

#[test]
fn flags_skip_0_and_1_and_alternate_parity_across_the_wrap() {
    let Some(exe) = harness() else { return };
    for start in [0u32, 0xffff_fff0, 0xffff_fffd, 0xffff_fffe, 0xffff_ffff] {
        let flags = flags_from(exe, start, 24);
        if start == 0 {
            assert_eq!(&flags[..3], &[2, 3, 4], "the first launches");
        }
        for (k, pair) in flags.windows(2).enumerate() {
            assert!(pair[0] >= 2 && pair[1] >= 2, "from {start:#x}: {flags:x?}");
            assert_ne!(pair[0] & 1, pair[1] & 1, "from {start:#x}, launch {k}: the same half twice: {flags:x?}");
        }
        // Two launches back is the flag two launches earlier, across the wrap too.
        let backs = ask(exe, &flags.iter().map(|f| format!("back {f}")).collect::<Vec<_>>());
        for k in 2..flags.len() {
            assert_eq!(backs[k] as u32, flags[k - 2], "from {start:#x}, launch {k}: {flags:x?}");
        }
    }
    let wrapped = flags_from(exe, 0xffff_fffe, 3);
    assert_eq!(wrapped, vec![0xffff_ffff, 2, 3]);
}

#[test]
fn the_token_wait_holds_a_round_until_its_reader_finished_the_round_two_back() {
    let Some(exe) = harness() else { return };
    let behind = |seen: u32, want: u32| ask(exe, &[format!("behind {seen} {want}")])[0] == 1;
    let back = |flag: u32| ask(exe, &[format!("back {flag}")])[0] as u32;
    // The first two launches (flags 2 and 3): a never-written token (0) does not hold them.
    for flag in [2, 3] {
        assert!(!behind(0, back(flag)), "launch with flag {flag}");
    }
    // The third waits for the reader of the first.
    assert!(behind(0, back(4)));
    assert!(!behind(2, back(4)) && !behind(3, back(4)));
    // After the wrap: flag 2 follows 0xffffffff and waits for 0xfffffffe.
    assert_eq!(back(2), 0xffff_fffe);
    assert!(behind(0xffff_fffd, back(2)) && behind(0xffff_fffc, back(2)));
    assert!(!behind(0xffff_fffe, back(2)) && !behind(0xffff_ffff, back(2)) && !behind(2, back(2)));
}
