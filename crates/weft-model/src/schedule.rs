//! The algorithms as schedules: steps of transfers between ranks, each moving a range of the
//! vector and reducing it into the destination or copying it over.
//!
//! A step's transfers read the state every rank had when the step began (so an exchange, as
//! in recursive doubling, is two transfers of one step), and a rank starts its transfers of a
//! step once everything sent to it in earlier steps has arrived. The CPU reference
//! ([`crate::reference`]) and the simulator ([`crate::sim`]) both follow these rules, on the
//! same [`Schedule`].
//!
//! Phases are built per group of ranks (a node, or the ranks of one local index across nodes)
//! and groups that run at once are merged step by step ([`parallel`]).

use std::ops::Range;

use crate::{Algorithm, ModelError, Shape};

/// What a transfer does at its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `dst[range] += src[range]`.
    Reduce,
    /// `dst[range] = src[range]`.
    Copy,
}

/// One message: `range` of `src`'s vector to `dst`.
#[derive(Clone, Debug, PartialEq)]
pub struct Transfer {
    /// Sending rank.
    pub src: usize,
    /// Receiving rank.
    pub dst: usize,
    /// Elements moved.
    pub range: Range<usize>,
    /// Reduce or copy at `dst`.
    pub op: Op,
    /// Bytes on the wire per byte of data (η for LL packets, else 1).
    pub wire_factor: f64,
    /// Posted by `src`'s proxy thread (a PortChannel, or any network message) rather than
    /// written by the GPU's own threads.
    pub via_proxy: bool,
}

/// Transfers that start together.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// The step's transfers.
    pub transfers: Vec<Transfer>,
}

/// An algorithm's AllReduce of `len` elements on a shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Where the ranks are.
    pub shape: Shape,
    /// Elements per rank.
    pub len: usize,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

/// How a phase's transfers travel.
#[derive(Clone, Copy, Debug)]
struct Hops {
    /// Transfers within a node go through the proxy (PortChannels everywhere).
    proxy_within_node: bool,
    /// Bytes on the wire per byte of data.
    wire_factor: f64,
}

/// SM copies within a node, the proxy across, plain payloads.
const DIRECT: Hops = Hops { proxy_within_node: false, wire_factor: 1.0 };
/// PortChannels to every peer: the proxy posts every transfer.
const PORT: Hops = Hops { proxy_within_node: true, wire_factor: 1.0 };

/// Piece `i` of `k` near-equal pieces of `range`.
pub fn piece(range: &Range<usize>, i: usize, k: usize) -> Range<usize> {
    let len = range.len();
    range.start + len * i / k..range.start + len * (i + 1) / k
}

impl Schedule {
    /// `algorithm`'s schedule on `shape` for `len` elements; `ll_factor` is η of LL transfers.
    pub fn build(algorithm: Algorithm, shape: Shape, len: usize, ll_factor: f64) -> Result<Self, ModelError> {
        let everyone: Vec<usize> = (0..shape.ranks()).collect();
        let whole = 0..len;
        let phase = |members: &[usize], hops: Hops, f: fn(&[usize], &Range<usize>, Hops, &Shape) -> Vec<Step>| {
            f(members, &whole, hops, &shape)
        };
        let steps = match algorithm {
            Algorithm::Ring => {
                [phase(&everyone, PORT, ring_reduce_scatter), phase(&everyone, PORT, ring_all_gather)].concat()
            }
            Algorithm::NcclRing => {
                [phase(&everyone, DIRECT, ring_reduce_scatter), phase(&everyone, DIRECT, ring_all_gather)].concat()
            }
            Algorithm::AllPairs => phase(&everyone, PORT, all_pairs),
            Algorithm::TwoPhase => hierarchical(&shape, len, DIRECT, all_pairs),
            Algorithm::TwoPhaseRing => hierarchical(&shape, len, DIRECT, ring_all_reduce),
            Algorithm::Nvrar => {
                hierarchical(&shape, len, Hops { wire_factor: ll_factor, ..DIRECT }, recursive_doubling)
            }
            Algorithm::NcclTree => return Err(ModelError::NoSchedule(algorithm.name())),
        };
        Ok(Self { shape, len, steps })
    }

    /// Every transfer with the index of its step.
    pub fn transfers(&self) -> impl Iterator<Item = (usize, &Transfer)> {
        self.steps.iter().enumerate().flat_map(|(i, s)| s.transfers.iter().map(move |t| (i, t)))
    }
}

/// Reduce-scatter within every node (ring over NVLink, local rank j ends with piece j of G),
/// `inter` among the ranks of each local index on piece j across the nodes, then all-gather
/// within every node.
fn hierarchical(
    shape: &Shape,
    len: usize,
    inter_hops: Hops,
    inter: fn(&[usize], &Range<usize>, Hops, &Shape) -> Vec<Step>,
) -> Vec<Step> {
    let whole = 0..len;
    let g = shape.gpus_per_node();
    let node_members = |n: usize| (0..g).map(|l| shape.rank(n, l)).collect::<Vec<_>>();
    let local_members = |l: usize| (0..shape.nodes()).map(|n| shape.rank(n, l)).collect::<Vec<_>>();
    let within = |f: fn(&[usize], &Range<usize>, Hops, &Shape) -> Vec<Step>| {
        parallel((0..shape.nodes()).map(|n| f(&node_members(n), &whole, DIRECT, shape)).collect())
    };
    let across = parallel((0..g).map(|l| inter(&local_members(l), &piece(&whole, l, g), inter_hops, shape)).collect());
    [within(ring_reduce_scatter), across, within(ring_all_gather)].concat()
}

/// Groups' steps run at once: step i of the result holds every group's step i.
fn parallel(groups: Vec<Vec<Step>>) -> Vec<Step> {
    let steps = groups.iter().map(Vec::len).max().unwrap_or(0);
    (0..steps)
        .map(|i| Step { transfers: groups.iter().filter_map(|g| g.get(i)).flat_map(|s| s.transfers.clone()).collect() })
        .collect()
}

fn transfer(shape: &Shape, hops: Hops, src: usize, dst: usize, range: Range<usize>, op: Op) -> Transfer {
    let via_proxy = hops.proxy_within_node || shape.crosses_network(src, dst);
    Transfer { src, dst, range, op, wire_factor: hops.wire_factor, via_proxy }
}

/// Ring reduce-scatter among `members` (in order) of `range`: k − 1 steps; in step s member j
/// sends piece (j − s − 1) mod k to member j + 1, which reduces it, so member j ends holding
/// piece j of k summed over all members.
fn ring_reduce_scatter(members: &[usize], range: &Range<usize>, hops: Hops, shape: &Shape) -> Vec<Step> {
    let k = members.len();
    (0..k.saturating_sub(1))
        .map(|s| Step {
            transfers: (0..k)
                .map(|j| {
                    let piece_index = (j + 2 * k - s - 1) % k;
                    transfer(shape, hops, members[j], members[(j + 1) % k], piece(range, piece_index, k), Op::Reduce)
                })
                .collect(),
        })
        .collect()
}

/// Ring all-gather among `members` of `range`, member j starting with piece j: k − 1 steps;
/// in step s member j passes piece (j − s) mod k on to member j + 1.
fn ring_all_gather(members: &[usize], range: &Range<usize>, hops: Hops, shape: &Shape) -> Vec<Step> {
    let k = members.len();
    (0..k.saturating_sub(1))
        .map(|s| Step {
            transfers: (0..k)
                .map(|j| {
                    transfer(shape, hops, members[j], members[(j + 1) % k], piece(range, (j + k - s) % k, k), Op::Copy)
                })
                .collect(),
        })
        .collect()
}

/// Ring AllReduce among `members`: reduce-scatter then all-gather, 2(k − 1) steps.
fn ring_all_reduce(members: &[usize], range: &Range<usize>, hops: Hops, shape: &Shape) -> Vec<Step> {
    [ring_reduce_scatter(members, range, hops, shape), ring_all_gather(members, range, hops, shape)].concat()
}

/// All-pairs AllReduce among `members`: one step in which every member sends `range` to every
/// other, which reduces it.
fn all_pairs(members: &[usize], range: &Range<usize>, hops: Hops, shape: &Shape) -> Vec<Step> {
    if members.len() < 2 {
        return Vec::new();
    }
    let transfers = members
        .iter()
        .flat_map(|&src| members.iter().filter(move |&&dst| dst != src).map(move |&dst| (src, dst)))
        .map(|(src, dst)| transfer(shape, hops, src, dst, range.clone(), Op::Reduce))
        .collect();
    vec![Step { transfers }]
}

/// Recursive-doubling AllReduce among `members` of `range` (MPICH's, Thakur and Gropp 2005):
/// with k = 2^q + r members, the first 2r fold pairwise (member 2i sends to 2i + 1, which
/// reduces; one step), the 2^q survivors exchange with the survivor whose index differs in
/// bit b at step b (q steps, each pair reducing both ways), and the folded members get the
/// result from their partner (one step): q steps for a power of two, q + 2 otherwise.
fn recursive_doubling(members: &[usize], range: &Range<usize>, hops: Hops, shape: &Shape) -> Vec<Step> {
    let k = members.len();
    if k < 2 {
        return Vec::new();
    }
    let pof2 = 1 << k.ilog2();
    let folded = k - pof2;
    let edge = |src: usize, dst: usize, op: Op| transfer(shape, hops, src, dst, range.clone(), op);
    let survivors: Vec<usize> =
        (0..folded).map(|i| members[2 * i + 1]).chain(members[2 * folded..].iter().copied()).collect();
    let fold_in =
        Step { transfers: (0..folded).map(|i| edge(members[2 * i], members[2 * i + 1], Op::Reduce)).collect() };
    let doubling = (0..pof2.ilog2()).map(|bit| Step {
        transfers: (0..pof2).map(|a| edge(survivors[a], survivors[a ^ (1 << bit)], Op::Reduce)).collect(),
    });
    let hand_back =
        Step { transfers: (0..folded).map(|i| edge(members[2 * i + 1], members[2 * i], Op::Copy)).collect() };
    let mut steps = Vec::new();
    if folded > 0 {
        steps.push(fold_in);
    }
    steps.extend(doubling);
    if folded > 0 {
        steps.push(hand_back);
    }
    steps
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    fn steps(algorithm: Algorithm, nodes: usize, gpus: usize) -> usize {
        Schedule::build(algorithm, Shape::new(nodes, gpus).unwrap(), 1000, 2.0).unwrap().steps.len()
    }

    #[test]
    fn step_counts_follow_the_algorithms() {
        assert_eq!(steps(Algorithm::Ring, 4, 2), 2 * 7);
        assert_eq!(steps(Algorithm::AllPairs, 4, 2), 1);
        assert_eq!(steps(Algorithm::TwoPhase, 4, 2), 1 + 1 + 1);
        assert_eq!(steps(Algorithm::TwoPhaseRing, 4, 3), 2 + 6 + 2);
        // Recursive doubling: log2(8) = 3 steps; 6 = 4 + 2 nodes: 2 + the fix-up's 2.
        assert_eq!(steps(Algorithm::Nvrar, 8, 4), 3 + 3 + 3);
        assert_eq!(steps(Algorithm::Nvrar, 6, 4), 3 + 4 + 3);
        assert_eq!(steps(Algorithm::Nvrar, 1, 4), 6);
        assert!(Schedule::build(Algorithm::NcclTree, Shape::new(2, 2).unwrap(), 8, 2.0).is_err());
    }

    #[test]
    fn only_network_hops_or_port_channels_go_through_the_proxy_and_only_nvrar_pays_eta() {
        let shape = Shape::new(2, 2).unwrap();
        for algorithm in [Algorithm::TwoPhase, Algorithm::Nvrar, Algorithm::NcclRing] {
            let s = Schedule::build(algorithm, shape, 64, 2.0).unwrap();
            assert!(s.transfers().all(|(_, t)| t.via_proxy == shape.crosses_network(t.src, t.dst)));
            let eta = if algorithm == Algorithm::Nvrar { 2.0 } else { 1.0 };
            assert!(s.transfers().all(|(_, t)| t.wire_factor == if t.via_proxy { eta } else { 1.0 }));
        }
        let ring = Schedule::build(Algorithm::Ring, shape, 64, 2.0).unwrap();
        assert!(ring.transfers().all(|(_, t)| t.via_proxy));
    }
}
