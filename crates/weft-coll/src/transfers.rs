//! Direct transfers (an all-to-all(v), one round of a send/receive group): which kernel carries
//! each direction. Under `ll` a direction of at most the pair slots' payload goes over LL
//! packets (`weft_p2p_ll`) and a larger one through scratch with credits (`weft_p2p`); under
//! `p2p` every direction goes through scratch.
//!
//! **Both ends decide alike.** The choice is made per direction, from that direction's bytes
//! alone: the sender's `send_bytes[d]` and the receiver's `recv_bytes[s]`, equal in a correct
//! program, against a limit every rank shares (the configuration is checked equal at set-up).
//! A choice per launch ("LL when every direction of the round fits") would not be: a rank that
//! also receives 1 MB from a third rank would go through scratch while its small peer sends
//! packets. Each kernel then runs on the ranks that have a direction in it, and each launch
//! settles with exactly its peers, so both ends of every direction run the kernel that carries
//! it, in the same order (packets first), and the launches of the ranks never wait in a cycle.
//!
//! **A mismatch is the program's error, bounded.** Sizes that differ between the ends of a
//! direction never make a kernel write outside the receive buffer, the sender's packet slot or
//! its scratch slot, and never hang: every wait is bounded, and a timeout is recorded as the
//! device failure, naming the wait. Over packets, a receive shorter than its send takes the
//! send's first bytes and a longer one times out polling; through scratch, the end with more
//! halves times out waiting for the other's credit or data; with the two sizes on either side
//! of the limit, one end is on packets and the other on credits, and every end that waits (all
//! but a sender of packets) times out. Sizes on either side of `WEFT_P2P_WIDE_BYTES` put one
//! end of a direction through scratch on twice the other's blocks: the extra blocks wait for
//! credits or data the other end never sends, and time out. After a timeout the pair's
//! flags or credits are out of step: the communicator must be set up again. A send with no
//! receive at all times out through scratch; over packets it completes, and the peer's next
//! receive from this rank over packets takes its bytes (in-order matching, as NCCL's).

use weft_types::{MAX_RANKS, P2pPlan};

/// The directions of one round, by the kernel that carries them. A direction with no bytes is
/// in neither (both kernels skip empty entries).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Split {
    /// The directions of at most the limit: LL packets (`weft_p2p_ll`).
    pub(crate) packets: P2pPlan,
    /// The larger ones: through scratch with credits (`weft_p2p`).
    pub(crate) scratch: P2pPlan,
}

impl Split {
    /// The side a direction of `bytes` goes to.
    fn side(&mut self, bytes: u64, packets_max: u64) -> &mut P2pPlan {
        if bytes <= packets_max { &mut self.packets } else { &mut self.scratch }
    }
}

/// Splits `plan` of rank `me` by `packets_max`, the most bytes a direction may have to go over
/// packets (0: every direction goes through scratch). The local copy (entry `me`) goes whole to
/// one side, chosen by its send bytes: both kernels copy from `send_ptr[me]` to `recv_ptr[me]`.
pub(crate) fn split(plan: &P2pPlan, me: usize, packets_max: u64) -> Split {
    let mut split = Split::default();
    for p in 0..MAX_RANKS {
        let (send, recv) = (plan.send_bytes[p], plan.recv_bytes[p]);
        // The receive of the local copy follows its send.
        let recv_decides = if p == me { send } else { recv };
        if send > 0 {
            let to = split.side(send, packets_max);
            (to.send_ptr[p], to.send_bytes[p]) = (plan.send_ptr[p], send);
        }
        if recv > 0 {
            let to = split.side(recv_decides, packets_max);
            (to.recv_ptr[p], to.recv_bytes[p]) = (plan.recv_ptr[p], recv);
        }
    }
    split
}

/// Bytes a launch of `plan` moves on this rank, sent and received (0: nothing to launch).
pub(crate) fn bytes(plan: &P2pPlan) -> usize {
    let total = plan.send_bytes.iter().chain(&plan.recv_bytes).fold(0u64, |sum, &b| sum.saturating_add(b));
    usize::try_from(total).unwrap_or(usize::MAX)
}

/// The peers a launch of `plan` on rank `me` exchanges bytes with (the local copy aside).
pub(crate) fn peers(plan: &P2pPlan, me: usize) -> impl Iterator<Item = usize> + Clone + '_ {
    (0..MAX_RANKS).filter(move |&p| p != me && (plan.send_bytes[p] > 0 || plan.recv_bytes[p] > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank `me`'s plan when rank s sends `m[s][d]` bytes to rank d (pointers encode the entry).
    fn plan_of(m: &[Vec<u64>], me: usize) -> P2pPlan {
        let mut plan = P2pPlan::default();
        for (p, from) in m.iter().enumerate() {
            (plan.send_ptr[p], plan.send_bytes[p]) = (0x1000 + p as u64, m[me][p]);
            (plan.recv_ptr[p], plan.recv_bytes[p]) = (0x2000 + p as u64, from[me]);
        }
        plan
    }

    /// A small deterministic generator (xorshift), so the cases need no dependency.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Traffic matrices of every shape: empty directions, sizes at and around the limit, the
    /// local copy; every rank count.
    fn matrices(limit: u64) -> Vec<Vec<Vec<u64>>> {
        let sizes = [0, 1, 7, 8, limit.saturating_sub(1), limit, limit + 1, 3 * limit + 5, 1 << 20];
        let mut state = 0x9e37_79b9_7f4a_7c15;
        let mut out = Vec::new();
        for n in 1..=MAX_RANKS {
            for _ in 0..64 {
                out.push(
                    (0..n).map(|_| (0..n).map(|_| sizes[next(&mut state) as usize % sizes.len()]).collect()).collect(),
                );
            }
        }
        out
    }

    #[test]
    fn both_ends_of_every_direction_give_it_to_the_same_kernel() {
        for limit in [0, 8, 64 << 10] {
            for m in matrices(limit) {
                let n = m.len();
                // The local copy moves as one: make each rank's self entry consistent, as the
                // argument checks require.
                let splits: Vec<Split> = (0..n).map(|me| split(&plan_of(&m, me), me, limit)).collect();
                for s in 0..n {
                    for d in 0..n {
                        let (sender, receiver) = (&splits[s], &splits[d]);
                        let case = format!("limit {limit}, {n} ranks, {s} -> {d}: {m:?}");
                        assert_eq!(sender.packets.send_bytes[d], receiver.packets.recv_bytes[s], "{case}");
                        assert_eq!(sender.scratch.send_bytes[d], receiver.scratch.recv_bytes[s], "{case}");
                        let bytes = m[s][d];
                        let on_packets = bytes > 0 && bytes <= limit;
                        assert_eq!(sender.packets.send_bytes[d], if on_packets { bytes } else { 0 }, "{case}");
                        assert_eq!(sender.scratch.send_bytes[d], if on_packets { 0 } else { bytes }, "{case}");
                    }
                    // Each launch's peers are those that launch it with this rank.
                    type Launch = fn(&Split) -> &P2pPlan;
                    let kernels: [(Launch, &str); 2] = [(|x| &x.packets, "packets"), (|x| &x.scratch, "scratch")];
                    for (launch, kernel) in kernels {
                        for d in peers(launch(&splits[s]), s) {
                            assert!(peers(launch(&splits[d]), d).any(|p| p == s), "{kernel}: {s} and {d} in {m:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_split_keeps_every_direction_once_with_its_pointer_and_the_local_copy_whole() {
        for limit in [0, 64 << 10] {
            for m in matrices(limit) {
                for me in 0..m.len() {
                    let plan = plan_of(&m, me);
                    let s = split(&plan, me, limit);
                    assert_eq!(bytes(&s.packets) + bytes(&s.scratch), bytes(&plan));
                    for p in 0..MAX_RANKS {
                        for (side, ptrs, lens, full) in [
                            (
                                "send",
                                [s.packets.send_ptr[p], s.scratch.send_ptr[p]],
                                [s.packets.send_bytes[p], s.scratch.send_bytes[p]],
                                (plan.send_ptr[p], plan.send_bytes[p]),
                            ),
                            (
                                "recv",
                                [s.packets.recv_ptr[p], s.scratch.recv_ptr[p]],
                                [s.packets.recv_bytes[p], s.scratch.recv_bytes[p]],
                                (plan.recv_ptr[p], plan.recv_bytes[p]),
                            ),
                        ] {
                            let carried: Vec<(u64, u64)> = ptrs.into_iter().zip(lens).filter(|&(_, l)| l > 0).collect();
                            let expected = if full.1 > 0 { vec![full] } else { vec![] };
                            assert_eq!(carried, expected, "{side} {p} of rank {me}, limit {limit}: {m:?}");
                        }
                    }
                    // Both kernels copy send_ptr[me] to recv_ptr[me]: one side holds both.
                    for half in [s.packets, s.scratch] {
                        assert_eq!(half.send_bytes[me], half.recv_bytes[me], "rank {me}, limit {limit}: {m:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn under_p2p_every_direction_goes_through_scratch_and_empty_ones_nowhere() {
        let m = vec![vec![0, 5, 1 << 20], vec![8, 0, 0], vec![0, 64, 3]];
        let s = split(&plan_of(&m, 0), 0, 0);
        assert_eq!(s.packets, P2pPlan::default());
        assert_eq!(peers(&s.scratch, 0).collect::<Vec<_>>(), vec![1, 2]);
        let s = split(&plan_of(&m, 1), 1, 64);
        assert_eq!((s.packets.send_bytes[0], s.packets.recv_bytes[0], s.packets.recv_bytes[2]), (8, 5, 64));
        assert_eq!(s.scratch, P2pPlan::default());
        assert_eq!(peers(&s.packets, 1).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(bytes(&P2pPlan::default()), 0);
    }
}
