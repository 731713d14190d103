//! Direct transfers past the matrix's even shapes (step `coll`): all-to-allv with uneven blocks
//! and send/receive groups with subsets of peers, over rounds whose sizes change from one call
//! to the next on every pair, eager and replayed from a CUDA graph, under `ll` and `p2p`. The
//! sizes take in empty blocks (an empty operation, or none at all), blocks on either side of
//! the LL limit (so `ll` calls run both kernels, packets and scratch, in one call) and the local
//! copy; on odd rounds a send/receive group also names its next rank twice. Every byte of every
//! receive block is checked, and the poison around each block must stay.

use std::time::Duration;

use weft_coll::{Algorithm, CollConfig, Collectives, P2pGroup};
use weft_core::{Communicator, Env};
use weft_gpu::{DeviceBuffer, Stream};

use super::report::RankReport;

/// `p2p_ll_bytes` of these calls: small, so that blocks on both sides of it stay cheap.
const LIMIT: usize = 4096;
/// Block sizes a direction takes: empty, sub-packet, whole packets, around the limit, above.
const SIZES: [usize; 9] = [0, 1, 7, 8, 100, LIMIT - 1, LIMIT, LIMIT + 1, 3 * LIMIT + 5];
/// Calls per check, each with sizes of its own.
const ROUNDS: u64 = 8;
/// Poisoned bytes after every receive block.
const GUARD: usize = 16;
const POISON: u8 = 0xa5;

type BoxError = Box<dyn std::error::Error>;

/// Runs the checks on `comm`, one outcome per (collective, algorithm).
pub(super) fn run(comm: &Communicator, env: &Env, label: &str, report: &mut RankReport) {
    let cases = [
        (Algorithm::AllToAllLl, Shape::AllToAllv),
        (Algorithm::AllToAllP2p, Shape::AllToAllv),
        (Algorithm::SendRecvLl, Shape::Groups),
        (Algorithm::SendRecvP2p, Shape::Groups),
    ];
    for (algorithm, shape) in cases {
        let what = format!(
            "{label}{} {}: {}, blocks across the {LIMIT}-byte LL limit, {ROUNDS} rounds, eager and replayed",
            algorithm.collective(),
            algorithm.name(),
            shape.describe()
        );
        let outcome = check(comm, env, algorithm, shape)
            .map_err(|e| e.to_string())
            .and_then(|failures| if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) });
        report.record(what, outcome);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// One all-to-allv per round.
    AllToAllv,
    /// One send/receive group per round.
    Groups,
}

impl Shape {
    fn describe(self) -> &'static str {
        match self {
            Shape::AllToAllv => "all-to-allv with uneven and empty blocks",
            Shape::Groups => "groups with subsets of peers, empty and repeated operations",
        }
    }
}

/// The traffic of one round, the same on every rank.
#[derive(Clone, Copy, Debug)]
struct Traffic {
    round: u64,
    ranks: usize,
}

impl Traffic {
    fn hash(self, s: usize, d: usize) -> u64 {
        let mut x = (self.round << 32) ^ ((s as u64) << 16) ^ d as u64 ^ 0x9e37_79b9_7f4a_7c15;
        x = (x ^ (x >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// Bytes rank `s` sends rank `d`.
    fn bytes(self, s: usize, d: usize) -> usize {
        SIZES[(self.hash(s, d) % SIZES.len() as u64) as usize]
    }

    /// Whether an empty direction is still named in the group (an operation of no elements).
    fn empty_named(self, s: usize, d: usize) -> bool {
        self.hash(s, d) & (1 << 40) != 0
    }

    /// On odd rounds rank `s` sends its next rank its block as two operations: the first one's
    /// length.
    fn split(self, s: usize, d: usize) -> Option<usize> {
        (self.round % 2 == 1 && d == (s + 1) % self.ranks).then(|| self.bytes(s, d) / 2)
    }

    /// Byte `i` of what `s` sends `d`.
    fn byte(self, s: usize, d: usize, i: usize) -> u8 {
        (self.hash(s, d) as usize).wrapping_add(i.wrapping_mul(131)).wrapping_add(i >> 8) as u8
    }
}

/// Where each peer's block lies in a buffer of blocks separated by guards.
fn offsets(lengths: &[usize]) -> Vec<usize> {
    lengths.iter().scan(0, |at, &len| Some(std::mem::replace(at, *at + len + GUARD))).collect()
}

/// Every round of `algorithm` on `comm`; the failures found (every rank runs every round
/// whatever it sees, so the ranks stay in step).
fn check(comm: &Communicator, env: &Env, algorithm: Algorithm, shape: Shape) -> Result<Vec<String>, BoxError> {
    let mut config = CollConfig { p2p_ll_bytes: LIMIT, ..CollConfig::from_env(env)? };
    config.selector.force(algorithm);
    let coll = Collectives::new(comm, config)?;
    let stream = Stream::new(comm.device())?;
    let (me, ranks) = (comm.rank(), comm.world_size());
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let t = Traffic { round, ranks };
        let sent: Vec<usize> = (0..ranks).map(|d| t.bytes(me, d)).collect();
        let received: Vec<usize> = (0..ranks).map(|s| t.bytes(s, me)).collect();
        let (send_at, recv_at) = (offsets(&sent), offsets(&received));
        let mut host = vec![POISON; sent.iter().sum::<usize>() + ranks * GUARD];
        for (d, (&at, &len)) in send_at.iter().zip(&sent).enumerate() {
            for (i, b) in host[at..at + len].iter_mut().enumerate() {
                *b = t.byte(me, d, i);
            }
        }
        let send = DeviceBuffer::from_host(comm.device(), &host)?;
        let mut recv = DeviceBuffer::<u8>::new(comm.device(), received.iter().sum::<usize>() + ranks * GUARD)?;
        let call = |recv: &mut DeviceBuffer<u8>| -> Result<(), BoxError> {
            match shape {
                Shape::AllToAllv => {
                    coll.all_to_allv(
                        &send.as_slice(),
                        &sent,
                        &send_at,
                        &mut recv.as_mut_slice(),
                        &received,
                        &recv_at,
                        &stream,
                    )?;
                }
                Shape::Groups => group(&coll, t, me, &send, &send_at, recv, &recv_at, &stream)?,
            }
            Ok(())
        };
        let expected = |s: usize, i: usize| t.byte(s, me, i);
        let mut verify = |recv: &mut DeviceBuffer<u8>,
                          how: &str,
                          run: &mut dyn FnMut(&mut DeviceBuffer<u8>) -> Result<(), BoxError>| {
            let outcome = recv
                .copy_from_host(&vec![POISON; recv.len()])
                .map_err(BoxError::from)
                .and_then(|()| run(recv))
                .and_then(|()| {
                    stream.wait_idle(Duration::from_secs(60), "a direct-transfer check").map_err(BoxError::from)
                })
                .and_then(|()| recv.to_vec().map_err(BoxError::from));
            match outcome {
                Ok(got) => {
                    if let Some(wrong) = first_wrong(&got, &received, &recv_at, &expected) {
                        failures.push(format!("round {round} {how}: {wrong}"));
                    }
                }
                Err(e) => {
                    // A kernel's failure record stays until cleared: the next rounds report
                    // their own outcomes.
                    let _ = stream.wait_idle(Duration::from_secs(60), "a failed direct-transfer check");
                    let _ = comm.clear_device_failure();
                    failures.push(format!("round {round} {how}: {e}"));
                }
            }
        };
        verify(&mut recv, "eager", &mut |recv| call(recv));
        // Two replays of one capture: the lanes' flags advance on the device.
        stream.begin_capture()?;
        let captured = call(&mut recv);
        let graph = stream.end_capture()?;
        captured?;
        for replay in 0..2 {
            verify(&mut recv, &format!("graph replay {replay}"), &mut |_| Ok(graph.launch(&stream)?));
        }
    }
    Ok(failures)
}

/// One send/receive group of round `t`: a send of every block this rank sends (named even when
/// empty where the round says so, in two operations to the next rank on odd rounds), a receive
/// of every block it receives, each into its place of `recv`.
#[allow(clippy::too_many_arguments)]
fn group(
    coll: &Collectives,
    t: Traffic,
    me: usize,
    send: &DeviceBuffer<u8>,
    send_at: &[usize],
    recv: &mut DeviceBuffer<u8>,
    recv_at: &[usize],
    stream: &Stream,
) -> Result<(), BoxError> {
    let mut group = P2pGroup::new();
    for (d, &at) in send_at.iter().enumerate() {
        let len = t.bytes(me, d);
        if len == 0 && !t.empty_named(me, d) {
            continue;
        }
        let block = send.slice(at..at + len)?;
        match t.split(me, d) {
            Some(first) => {
                group.send(d, block.slice(..first)?).send(d, block.slice(first..)?);
            }
            None => {
                group.send(d, block);
            }
        }
    }
    let mut rest = recv.as_mut_slice();
    let mut consumed = 0;
    for (s, &at) in recv_at.iter().enumerate() {
        let len = t.bytes(s, me);
        // Blocks lie in peer order: split off this one, leave what follows.
        let (_, tail) = rest.split_at_mut(at - consumed)?;
        let (block, after) = tail.split_at_mut(len)?;
        (rest, consumed) = (after, at + len);
        if len == 0 && !t.empty_named(s, me) {
            continue;
        }
        match t.split(s, me) {
            Some(first) => {
                let (a, b) = block.split_at_mut(first)?;
                group.recv(s, a).recv(s, b);
            }
            None => {
                group.recv(s, block);
            }
        }
    }
    coll.send_recv(&group, stream)?;
    Ok(())
}

/// The first byte of `got` that differs from what it should hold: block s (`lengths[s]` bytes
/// at `offsets[s]`) from rank s, the guard after it poison.
fn first_wrong(
    got: &[u8],
    lengths: &[usize],
    offsets: &[usize],
    expected: &dyn Fn(usize, usize) -> u8,
) -> Option<String> {
    for (s, (&at, &len)) in offsets.iter().zip(lengths).enumerate() {
        if let Some(i) = (0..len).find(|&i| got[at + i] != expected(s, i)) {
            return Some(format!(
                "byte {i} of the {len}-byte block from rank {s} is {:#04x}, expected {:#04x}",
                got[at + i],
                expected(s, i)
            ));
        }
        if let Some(g) = (0..GUARD).find(|&g| got[at + len + g] != POISON) {
            return Some(format!("byte {g} past the {len}-byte block from rank {s} was overwritten"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traffic_spans_every_size_and_both_ends_agree() {
        let mut seen = std::collections::BTreeSet::new();
        for round in 0..ROUNDS {
            for ranks in 1..=8 {
                let t = Traffic { round, ranks };
                for s in 0..ranks {
                    for d in 0..ranks {
                        seen.insert(t.bytes(s, d));
                        if let Some(first) = t.split(s, d) {
                            assert!(first <= t.bytes(s, d) && round % 2 == 1);
                        }
                    }
                }
            }
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), SIZES.to_vec());
        assert_eq!(offsets(&[3, 0, 5]), vec![0, 3 + GUARD, 3 + 2 * GUARD]);
    }

    #[test]
    fn a_wrong_byte_or_an_overwritten_guard_is_found() {
        let t = Traffic { round: 1, ranks: 2 };
        let lengths = [5, 2];
        let at = offsets(&lengths);
        let mut buffer = vec![POISON; 7 + 2 * GUARD];
        for (s, (&o, &len)) in at.iter().zip(&lengths).enumerate() {
            for i in 0..len {
                buffer[o + i] = t.byte(s, 0, i);
            }
        }
        let expected = |s: usize, i: usize| t.byte(s, 0, i);
        assert_eq!(first_wrong(&buffer, &lengths, &at, &expected), None);
        let mut wrong = buffer.clone();
        wrong[at[1] + 1] ^= 1;
        assert!(
            first_wrong(&wrong, &lengths, &at, &expected).unwrap().contains("byte 1 of the 2-byte block from rank 1")
        );
        buffer[at[0] + 5] = 0;
        assert!(first_wrong(&buffer, &lengths, &at, &expected).unwrap().contains("past the 5-byte block from rank 0"));
    }
}
