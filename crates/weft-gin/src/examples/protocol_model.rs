//! A model of the examples' call protocol (`device/kernels/gin/call.cuh`), checked over every
//! interleaving of the ranks' steps: an AllToAll-shaped call (each rank puts to every rank, its
//! own included, each put raising the target's one signal) made twice back to back. The
//! protocol as shipped never lets a wait return before its call's data is all there, never
//! lets a put overwrite data its target has not copied out, and never deadlocks; the variants
//! without its parts each break one of these.

use std::collections::HashSet;

/// How a call begins (the shipped protocol, and variants that drop a piece of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Begin {
    /// Reset the signal, then the barrier (`call.cuh`).
    ResetThenBarrier,
    /// The barrier, then the reset.
    BarrierThenReset,
    /// No reset nor barrier: the host passes the number of earlier calls.
    HostRound,
}

/// Every rank's progress and the shared counters; `Hash` for the visited set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    /// Per rank: (call, step within the call).
    pc: Vec<(usize, usize)>,
    /// Arrivals on each rank's signal (never reset: the raw sum).
    raw: Vec<usize>,
    /// Each rank's reset base.
    base: Vec<usize>,
    /// Arrivals on each rank's barrier slot.
    barrier: Vec<usize>,
    /// `window[r][p]`: the call whose chunk from rank p lies in rank r's window (`usize::MAX`:
    /// none yet).
    window: Vec<Vec<usize>>,
    /// Calls whose output each rank has copied out.
    done: Vec<usize>,
}

struct Model {
    ranks: usize,
    calls: usize,
    begin: Begin,
}

/// Steps of a call: begin (two steps), one put per rank, the wait.
const BEGIN_STEPS: usize = 2;

impl Model {
    fn steps(&self) -> usize {
        BEGIN_STEPS + self.ranks + 1
    }

    /// Rank `r` takes its next step if it can: `Ok(true)` taken, `Ok(false)` blocked.
    fn step(&self, s: &mut State, r: usize) -> Result<bool, String> {
        let (call, step) = s.pc[r];
        let n = self.ranks;
        let signal_others = |s: &mut State| (0..n).filter(|&p| p != r).for_each(|p| s.barrier[p] += 1);
        let everyone_arrived = |s: &State| s.barrier[r] >= (call + 1) * (n - 1);
        // A step that blocks returns Ok(false); what it changed is dropped with its state.
        let taken = match (self.begin, step) {
            (Begin::HostRound, 0 | 1) => true,
            (Begin::ResetThenBarrier, 0) => {
                s.base[r] = s.raw[r];
                signal_others(s);
                true
            }
            (Begin::ResetThenBarrier, 1) => everyone_arrived(s),
            (Begin::BarrierThenReset, 0) => {
                signal_others(s);
                true
            }
            (Begin::BarrierThenReset, 1) => {
                s.base[r] = s.raw[r];
                everyone_arrived(s)
            }
            (_, put) if put < BEGIN_STEPS + n => {
                let p = put - BEGIN_STEPS;
                if s.done[p] < call {
                    return Err(format!("rank {r}'s call {call} overwrote rank {p}'s output of call {}", call - 1));
                }
                s.window[p][r] = call;
                s.raw[p] += 1;
                true
            }
            _ => {
                let arrived = match self.begin {
                    Begin::HostRound => s.raw[r] >= (call + 1) * n,
                    _ => s.raw[r] - s.base[r] >= n,
                };
                if arrived {
                    if let Some(p) = (0..n).find(|&p| s.window[r][p] != call) {
                        return Err(format!("rank {r}'s call {call} returned before rank {p}'s chunk arrived"));
                    }
                    s.done[r] = call + 1;
                }
                arrived
            }
        };
        if taken {
            s.pc[r] = if step + 1 == self.steps() { (call + 1, 0) } else { (call, step + 1) };
        }
        Ok(taken)
    }

    /// Explores every interleaving; the first violation or deadlock found.
    fn check(&self) -> Result<usize, String> {
        let n = self.ranks;
        let start = State {
            pc: vec![(0, 0); n],
            raw: vec![0; n],
            base: vec![0; n],
            barrier: vec![0; n],
            window: vec![vec![usize::MAX; n]; n],
            done: vec![0; n],
        };
        let mut seen = HashSet::new();
        let mut stack = vec![start];
        while let Some(s) = stack.pop() {
            if !seen.insert(s.clone()) {
                continue;
            }
            let mut moved = false;
            for r in (0..n).filter(|&r| s.pc[r].0 < self.calls) {
                let mut next = s.clone();
                if self.step(&mut next, r)? {
                    moved = true;
                    stack.push(next);
                }
            }
            if !moved && s.pc.iter().any(|&(call, _)| call < self.calls) {
                return Err(format!("deadlock at {:?}", s.pc));
            }
        }
        Ok(seen.len())
    }
}

#[test]
fn the_shipped_protocol_holds_over_every_interleaving() {
    for ranks in [2, 3] {
        let states = Model { ranks, calls: 2, begin: Begin::ResetThenBarrier }.check();
        assert!(states.as_ref().is_ok_and(|&s| s > 20), "{ranks} ranks: {states:?}");
    }
}

#[test]
fn each_part_of_the_protocol_is_needed() {
    // Counting calls on the host gets the counts right but nothing holds a fast rank back.
    let e = Model { ranks: 2, calls: 2, begin: Begin::HostRound }.check().unwrap_err();
    assert!(e.contains("overwrote"), "{e}");
    let e = Model { ranks: 2, calls: 2, begin: Begin::BarrierThenReset }.check().unwrap_err();
    // A peer's put of the new call lands before the late reset, which swallows it.
    assert!(e.contains("deadlock"), "{e}");
}
