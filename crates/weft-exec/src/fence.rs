//! The executor's fences as the kernel runs them (`fence` and `wait_fence` in
//! `device/kernels/exec/executor.cu`): what a fence adds to each peer's token, how a rank reads
//! a peer's token, and which launches fence on entry. [`crate::model`] runs its launches with
//! these, so a change here shows there.
//!
//! Every fence over memory adds 1 to each peer's token, plus [`EXEC_FENCE_DIRECT`] when the
//! launch runs into the ranks' user outputs ([`EXEC_OUTPUT_DIRECT`]). A rank knows the sum its
//! own fences added so far; when every launch agreed, each peer's fences added the same to its
//! token, so the difference between the token and that sum is the peer's part for this fence:
//! one fence, 1 plus the peer's direct bit. A peer cannot be two fences ahead (it passes a
//! fence only once this rank signalled it, and this rank signals its next fence only once all
//! its blocks passed this one), and a peer one ahead passed this fence, whose choices it
//! checked against this rank's: the difference then counts two fences and needs no reading.
//! Wrapping arithmetic keeps all of it exact across the token's 2^64 wrap.

use weft_types::{
    EXEC_ENTRY_FENCE, EXEC_EXIT_FENCE, EXEC_FENCE_DIRECT, EXEC_OUTPUT_DIRECT, EXEC_OUTPUT_STAGED, MAX_RANKS,
};

use crate::lower::DevicePlan;
use crate::tables::peers_touch_outputs;

/// The ranks `rank` fences with (bit p: rank p), given the peers its plan talks to
/// (`peer_mask`). Where the plan may run into the ranks' outputs (its peers write outputs, all
/// ranks in one node, at most [`MAX_RANKS`], no port links), every other rank: a rank whose
/// plan peers all placed a call as it did still meets, at its entry fence, the rank that
/// placed it otherwise, instead of waiting in its plan for a peer that gave up. The same rule
/// on every rank, so the fences pair up.
pub fn fence_mask(plan: &DevicePlan, rank: usize, peer_mask: u32, one_node: bool) -> u32 {
    let ranks = plan.ranks.len();
    let may_run_direct =
        one_node && ranks <= MAX_RANKS && plan.ranks.iter().all(|r| r.ports.is_empty()) && peers_touch_outputs(plan);
    if !may_run_direct {
        return peer_mask;
    }
    ((1u32 << ranks) - 1) & !(1 << rank)
}

/// What one fence of a launch adds to each peer's token: 1, plus [`EXEC_FENCE_DIRECT`] when
/// the launch runs into the user outputs.
pub fn fence_increment(direct: bool) -> u64 {
    1 + if direct { EXEC_FENCE_DIRECT } else { 0 }
}

/// A peer's fence token as a rank waiting at a fence reads it ([`read_fence`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceSeen {
    /// The peer has not reached this fence yet.
    Pending,
    /// The peer reached this fence having placed the outputs as this rank did, or passed it.
    Passed,
    /// The peer reached this fence with the other placement (`theirs`: 1 direct, 0 staged).
    Mismatch {
        /// The peer's direct bit.
        theirs: u64,
    },
}

/// The peer's token `seen` read by a rank at a fence whose own fences added `before` so far
/// and whose launch runs direct when `direct`.
pub fn read_fence(seen: u64, before: u64, direct: bool) -> FenceSeen {
    let delta = seen.wrapping_sub(before);
    match delta as u32 {
        0 => FenceSeen::Pending,
        1 => match delta / EXEC_FENCE_DIRECT {
            theirs if theirs == u64::from(direct) => FenceSeen::Passed,
            theirs => FenceSeen::Mismatch { theirs },
        },
        _ => FenceSeen::Passed,
    }
}

/// Where a launch's outputs go, as the caller placed them; every rank of the call must place
/// them alike, which every fence checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// This rank's output, through the output stage where the plan needs one.
    Staged,
    /// Staged, though the output lies in a window where the call could have run into every
    /// rank's output: the launch fences on entry, so a peer that runs into the outputs meets
    /// the other choice there rather than waiting for this rank until the timeout.
    StagedInWindow,
    /// Every rank's user output (the launch's `PeerBuffers`).
    Direct,
}

/// The context flags of a launch placed `placement`, from the plan's `flags` for the call:
/// direct outputs fence on entry (and skip the exit fence where `exit_fence_optional`),
/// so does a launch staged from a window; a staged output goes through the stage when peers
/// touch it (`output_remote`) or the call is in place.
pub fn placement_flags(
    flags: u32,
    placement: Placement,
    exit_fence_optional: bool,
    output_remote: bool,
    in_place: bool,
) -> u32 {
    match placement {
        Placement::Direct => {
            let flags = flags | EXEC_OUTPUT_DIRECT | EXEC_ENTRY_FENCE;
            if exit_fence_optional { flags & !EXEC_EXIT_FENCE } else { flags }
        }
        Placement::StagedInWindow | Placement::Staged => {
            let fenced = if placement == Placement::StagedInWindow { flags | EXEC_ENTRY_FENCE } else { flags };
            if output_remote || in_place { fenced | EXEC_OUTPUT_STAGED } else { fenced }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direct bit sits above the count, so a fence's count and choice read apart.
    #[test]
    fn a_fence_adds_one_and_the_direct_bit_above_the_count() {
        assert_eq!(fence_increment(false), 1);
        assert_eq!(fence_increment(true), (1 << 32) + 1);
        assert_eq!(fence_increment(true) as u32, 1, "the low 32 bits count fences");
    }

    /// A rank reads each peer's part of the fence: nothing yet, one fence with either choice,
    /// or two fences (the peer passed this one).
    #[test]
    fn a_rank_reads_the_peer_s_choice_from_the_difference() {
        for before in [0u64, 7, (3 << 32) + 9, u64::MAX - 1, u64::MAX - (1 << 32)] {
            for mine in [false, true] {
                assert_eq!(read_fence(before, before, mine), FenceSeen::Pending, "{before:#x}");
                for theirs in [false, true] {
                    let seen = before.wrapping_add(fence_increment(theirs));
                    let want = if theirs == mine {
                        FenceSeen::Passed
                    } else {
                        FenceSeen::Mismatch { theirs: u64::from(theirs) }
                    };
                    assert_eq!(read_fence(seen, before, mine), want, "{before:#x} mine {mine} theirs {theirs}");
                    // One fence ahead: the peer's next launch may place otherwise.
                    for next in [false, true] {
                        let ahead = seen.wrapping_add(fence_increment(next));
                        assert_eq!(read_fence(ahead, before, mine), FenceSeen::Passed);
                    }
                }
            }
        }
    }

    /// The sum a rank keeps is every fence's increment: with every launch agreeing, a peer's
    /// token equals it after each fence, wrapping past 2^32 fences and past 2^64.
    #[test]
    fn agreeing_fences_keep_the_sums_equal_across_the_wrap() {
        // Four fences short of 2^32 fences, and the direct bits short of the 2^64 wrap.
        let mut before = u64::MAX - 5 * (1 << 32) - 3;
        let mut count = u32::MAX - 3;
        assert_eq!(before as u32, count);
        for i in 0..12u64 {
            let direct = i % 3 != 0;
            let seen = before.wrapping_add(fence_increment(direct));
            assert_eq!(read_fence(seen, before, direct), FenceSeen::Passed, "fence {i}");
            before = seen;
            count = count.wrapping_add(1);
            assert_eq!(before as u32, count);
        }
    }

    /// Plans that may run into the outputs fence with every rank; the others, and any plan
    /// across nodes, with their plan peers alone.
    #[test]
    fn plans_that_may_run_direct_fence_with_every_rank() {
        let lowered = |p: weft_plan::dsl::Program| crate::lower::lower(&p.compile().unwrap()).unwrap();
        let alltoall = lowered(weft_plan::plans::two_step_alltoall(4, 2, 1).unwrap());
        let sparse = crate::tables::rank_tables(&alltoall, 3).unwrap().peer_mask;
        assert_ne!(sparse, 0b0111, "two-step all-to-all talks to some ranks only");
        assert_eq!(fence_mask(&alltoall, 3, sparse, true), 0b0111);
        assert_eq!(fence_mask(&alltoall, 0, 0b0110, true), 0b1110);
        assert_eq!(fence_mask(&alltoall, 3, sparse, false), sparse, "across nodes");
        let ll = lowered(weft_plan::plans::ring_allreduce_ll(4, 1).unwrap());
        assert_eq!(fence_mask(&ll, 0, 0b1010, true), 0b1010, "packet plans never run direct");
    }

    /// A launch staged from a window fences on entry like a direct one, so the two meet at
    /// the same fence; elsewhere the flags are what they were.
    #[test]
    fn a_launch_staged_from_a_window_fences_on_entry() {
        let base = EXEC_EXIT_FENCE;
        let direct = placement_flags(base, Placement::Direct, true, true, false);
        assert_eq!(direct, EXEC_OUTPUT_DIRECT | EXEC_ENTRY_FENCE);
        assert_eq!(
            placement_flags(base, Placement::Direct, false, true, true),
            base | EXEC_OUTPUT_DIRECT | EXEC_ENTRY_FENCE
        );
        let windowed = placement_flags(base, Placement::StagedInWindow, true, true, false);
        assert_eq!(windowed, base | EXEC_ENTRY_FENCE | EXEC_OUTPUT_STAGED);
        assert_eq!(windowed & EXEC_OUTPUT_DIRECT, 0);
        assert_eq!(placement_flags(base, Placement::Staged, true, true, false), base | EXEC_OUTPUT_STAGED);
        assert_eq!(placement_flags(base, Placement::Staged, true, false, false), base);
        assert_eq!(
            placement_flags(base, Placement::StagedInWindow, true, false, true),
            base | EXEC_ENTRY_FENCE | EXEC_OUTPUT_STAGED
        );
    }
}
