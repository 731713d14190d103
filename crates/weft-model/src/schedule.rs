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

use weft_plan::plans::RecursiveDoubling;

use crate::{Algorithm, Shape};

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
    /// A PortChannel `put_with_signal` of weft's port algorithms: across the network it pays
    /// [`crate::Params::port_link`]'s α rather than the network's.
    pub port_channel: bool,
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

/// A phase among a group of ranks on a range of the vector: its steps.
type Phase = fn(&[usize], &Range<usize>, Hops, &Shape) -> Vec<Step>;

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

/// Piece `i` of `k` (> 0) near-equal pieces of `range`.
fn piece(range: &Range<usize>, i: usize, k: usize) -> Range<usize> {
    // In u128: `len × (i + 1)` overflows usize for a vector of more than usize::MAX / k
    // elements (bytes, in `weft model predict --sim`); the quotient is at most `len`.
    let at = |j: usize| range.start + (range.len() as u128 * j as u128 / k as u128) as usize;
    at(i)..at(i + 1)
}

impl Schedule {
    /// `algorithm`'s schedule on `shape` for `len` elements; `ll_factor` is η of LL transfers.
    pub fn build(algorithm: Algorithm, shape: Shape, len: usize, ll_factor: f64) -> Self {
        let everyone: Vec<usize> = (0..shape.ranks()).collect();
        let whole = 0..len;
        let phase = |members: &[usize], hops: Hops, f: Phase| f(members, &whole, hops, &shape);
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
            Algorithm::NcclTree => nccl_tree(&shape, len, len.div_ceil(2 * TREE_PIECE).clamp(1, MAX_TREE_PIECES)),
        };
        Self { shape, len, steps }
    }

    /// Every transfer with the index of its step.
    pub fn transfers(&self) -> impl Iterator<Item = (usize, &Transfer)> {
        self.steps.iter().enumerate().flat_map(|(i, s)| s.transfers.iter().map(move |t| (i, t)))
    }
}

/// Reduce-scatter within every node (ring over NVLink, local rank j ends with piece j of G),
/// `inter` among the ranks of each local index on piece j across the nodes, then all-gather
/// within every node.
fn hierarchical(shape: &Shape, len: usize, inter_hops: Hops, inter: Phase) -> Vec<Step> {
    let whole = 0..len;
    let g = shape.gpus_per_node();
    let node_members = |n: usize| (0..g).map(|l| shape.rank(n, l)).collect::<Vec<_>>();
    let local_members = |l: usize| (0..shape.nodes()).map(|n| shape.rank(n, l)).collect::<Vec<_>>();
    let within = |f: Phase| parallel((0..shape.nodes()).map(|n| f(&node_members(n), &whole, DIRECT, shape)).collect());
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
    Transfer { src, dst, range, op, wire_factor: hops.wire_factor, via_proxy, port_channel: hops.proxy_within_node }
}

/// Ring reduce-scatter among `members` (in order) of `range`: k − 1 steps; in step s member j
/// sends piece (j − s − 1) mod k to member j + 1, which reduces it, so member j ends holding
/// piece j of k summed over all members.
fn ring_reduce_scatter(members: &[usize], range: &Range<usize>, hops: Hops, shape: &Shape) -> Vec<Step> {
    ring(members, range, hops, shape, Op::Reduce, 1)
}

/// Ring all-gather among `members` of `range`, member j starting with piece j: k − 1 steps;
/// in step s member j passes piece (j − s) mod k on to member j + 1.
fn ring_all_gather(members: &[usize], range: &Range<usize>, hops: Hops, shape: &Shape) -> Vec<Step> {
    ring(members, range, hops, shape, Op::Copy, 0)
}

/// The k − 1 steps of a ring among `members` (in order) over `range` cut into k pieces: in step
/// s member j sends piece (j − s − `lag`) mod k to member j + 1, which applies `op` to it.
fn ring(members: &[usize], range: &Range<usize>, hops: Hops, shape: &Shape, op: Op, lag: usize) -> Vec<Step> {
    let k = members.len();
    (0..k.saturating_sub(1))
        .map(|s| Step {
            transfers: (0..k)
                .map(|j| {
                    // s + lag ≤ k − 1, so adding 2k keeps the index non-negative.
                    let piece_index = (j + 2 * k - s - lag) % k;
                    transfer(shape, hops, members[j], members[(j + 1) % k], piece(range, piece_index, k), op)
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

/// Recursive-doubling AllReduce among `members` of `range`, paired as weft-plan's
/// [`RecursiveDoubling`] pairs them (the pairing `nvrar_allreduce` runs): with k = 2^q + r
/// members, r fold into a partner (one step), the 2^q survivors exchange and reduce in q steps,
/// and the folded members get the result from their partner (one step): q steps for a power
/// of two, q + 2 otherwise.
fn recursive_doubling(members: &[usize], range: &Range<usize>, hops: Hops, shape: &Shape) -> Vec<Step> {
    if members.len() < 2 {
        return Vec::new();
    }
    let rd = RecursiveDoubling::new(members.len());
    let edge = |src: usize, dst: usize, op: Op| transfer(shape, hops, members[src], members[dst], range.clone(), op);
    let fold_in = Step { transfers: rd.folds().map(|(folded, into)| edge(folded, into, Op::Reduce)).collect() };
    let doubling = (0..rd.rounds()).map(|round| Step {
        transfers: rd.survivors().filter_map(|m| rd.peer(m, round).map(|q| edge(m, q, Op::Reduce))).collect(),
    });
    let hand_back = Step { transfers: rd.folds().map(|(folded, into)| edge(into, folded, Op::Copy)).collect() };
    let mut steps = Vec::new();
    if !fold_in.transfers.is_empty() {
        steps.push(fold_in);
    }
    steps.extend(doubling);
    if !hand_back.transfers.is_empty() {
        steps.push(hand_back);
    }
    steps
}

/// Elements (bytes, in the model) per piece NCCL's tree pipelines, at most
/// [`MAX_TREE_PIECES`] pieces per tree (its chunk size is of this order; a smaller piece
/// shortens the pipeline's fill, a larger one pays fewer α).
pub const TREE_PIECE: usize = 64 << 10;
/// Most pieces per tree.
pub const MAX_TREE_PIECES: usize = 64;

/// The parent of `rank` in NCCL's binary tree over `n` ranks (`ncclGetBtree`: clear the lowest
/// set bit and set the next, or just clear it past the end); `None` for the root, rank 0.
fn btree_parent(rank: usize, n: usize) -> Option<usize> {
    if rank == 0 {
        return None;
    }
    let bit = 1 << rank.trailing_zeros();
    let up = (rank ^ bit) | (bit << 1);
    Some(if up >= n { rank ^ bit } else { up })
}

/// The parent of `rank` in NCCL's second tree (`ncclGetDtree`): the first tree mirrored when
/// `n` is even, shifted by one when odd, so that most inner nodes of one are leaves of the other.
fn dtree_parent(rank: usize, n: usize) -> Option<usize> {
    if n.is_multiple_of(2) {
        btree_parent(n - 1 - rank, n).map(|p| n - 1 - p)
    } else {
        btree_parent((rank + n - 1) % n, n).map(|p| (p + 1) % n)
    }
}

/// NCCL's tree AllReduce: each half of the vector goes up one of the two trees across nodes
/// (reduced at every hop) and back down (copied), through a chain within each node (local
/// rank G − 1 up to local rank 0, which talks to the other nodes), in `pieces` pieces per half
/// pipelined: a rank sends piece c up at step h + c, h the height of its subtree, and down at
/// step H + d + c, H the tree's height and d the rank's depth, so a piece moves on as soon as
/// its predecessor on the same path has.
fn nccl_tree(shape: &Shape, len: usize, pieces: usize) -> Vec<Step> {
    let n = shape.nodes();
    let whole = 0..len;
    let mut groups = Vec::new();
    for (half, node_parent) in [(0, btree_parent as fn(usize, usize) -> Option<usize>), (1, dtree_parent)] {
        // Parent of every rank: up the node's chain, then local 0 to its parent node's local 0.
        let parent = |rank: usize| match shape.local_of(rank) {
            0 => node_parent(shape.node_of(rank), n).map(|up| shape.rank(up, 0)),
            l => Some(shape.rank(shape.node_of(rank), l - 1)),
        };
        let ranks = shape.ranks();
        let mut depth = vec![0; ranks];
        let mut height = vec![0; ranks];
        // Depths from the root down; heights from the leaves up (a rank's depth exceeds its
        // parent's, so ordering by depth visits parents first).
        let depth_of = |mut r: usize| {
            let mut d = 0;
            while let Some(p) = parent(r) {
                d += 1;
                r = p;
            }
            d
        };
        for (r, d) in depth.iter_mut().enumerate() {
            *d = depth_of(r);
        }
        let mut by_depth: Vec<usize> = (0..ranks).collect();
        by_depth.sort_by_key(|&r| std::cmp::Reverse(depth[r]));
        for &r in &by_depth {
            if let Some(p) = parent(r) {
                height[p] = height[p].max(height[r] + 1);
            }
        }
        let top = by_depth.last().map_or(0, |&root| height[root]);
        let range = piece(&whole, half, 2);
        let mut steps = vec![Step::default(); 2 * top + pieces + 1];
        for r in 0..ranks {
            let Some(p) = parent(r) else { continue };
            for c in 0..pieces {
                let part = piece(&range, c, pieces);
                steps[height[r] + c].transfers.push(transfer(shape, DIRECT, r, p, part.clone(), Op::Reduce));
                steps[top + depth[p] + c].transfers.push(transfer(shape, DIRECT, p, r, part, Op::Copy));
            }
        }
        steps.retain(|s| !s.transfers.is_empty());
        groups.push(steps);
    }
    parallel(groups)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn the_two_trees_are_nccl_s_and_mostly_swap_inner_nodes_and_leaves() {
        // ncclGetBtree on 8 ranks: 0 is the root with child 4; 4 has 2 and 6; 2 has 1 and 3.
        let parents: Vec<Option<usize>> = (0..8).map(|r| btree_parent(r, 8)).collect();
        assert_eq!(parents, [None, Some(2), Some(4), Some(2), Some(0), Some(6), Some(4), Some(6)]);
        for n in 2..40 {
            for parent in [btree_parent, dtree_parent] {
                // One root, and every rank reaches it.
                assert_eq!((0..n).filter(|&r| parent(r, n).is_none()).count(), 1);
                for r in 0..n {
                    let (mut at, mut hops) = (r, 0);
                    while let Some(p) = parent(at, n) {
                        (at, hops) = (p, hops + 1);
                        assert!(hops <= n, "{n} ranks: a cycle from {r}");
                    }
                }
            }
            let inner = |parent: fn(usize, usize) -> Option<usize>| {
                (0..n).map(|r| (0..n).any(|c| parent(c, n) == Some(r))).collect::<Vec<bool>>()
            };
            let both = inner(btree_parent).iter().zip(inner(dtree_parent)).filter(|(a, b)| **a && *b).count();
            assert!(both <= 2, "{n} ranks: {both} ranks are inner in both trees");
        }
    }

    #[test]
    fn the_tree_pipelined_in_pieces_is_an_allreduce() {
        for (nodes, gpus) in [(1, 3), (2, 2), (5, 3), (8, 1), (13, 2)] {
            let shape = Shape::new(nodes, gpus).unwrap();
            for pieces in [1, 3] {
                let schedule = Schedule { shape, len: 37, steps: nccl_tree(&shape, 37, pieces) };
                let inputs: Vec<Vec<i64>> =
                    (0..shape.ranks()).map(|r| (0..37).map(|i| (r * 1000 + i) as i64).collect()).collect();
                assert!(
                    crate::reference::wrong_ranks(&schedule, &inputs).is_empty(),
                    "{nodes} x {gpus}, {pieces} pieces"
                );
            }
        }
    }

    #[test]
    fn pieces_cover_the_range_even_when_len_times_k_overflows() {
        assert_eq!((0..4).map(|i| piece(&(10..20), i, 4)).collect::<Vec<_>>(), [10..12, 12..15, 15..17, 17..20]);
        let huge = 1..usize::MAX;
        let pieces: Vec<_> = (0..3).map(|i| piece(&huge, i, 3)).collect();
        assert_eq!((pieces[0].start, pieces[2].end), (1, usize::MAX));
        assert!(pieces.windows(2).all(|w| w[0].end == w[1].start));
    }

    fn steps(algorithm: Algorithm, nodes: usize, gpus: usize) -> usize {
        Schedule::build(algorithm, Shape::new(nodes, gpus).unwrap(), 1000, 2.0).steps.len()
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
        // The tree, one piece per half: up and down 3 chain hops and 3 levels of 8 nodes.
        assert_eq!(steps(Algorithm::NcclTree, 8, 4), 2 * (3 + 3));
    }

    /// NVRAR's network messages in the model are the port puts of weft-plan's
    /// `nvrar_allreduce` (same pairs, as many of each), at node counts that fold and not.
    #[test]
    fn nvrar_crosses_the_network_as_its_plan_does() {
        for (nodes, gpus) in [(2, 1), (3, 2), (5, 1), (6, 3), (8, 2), (13, 1)] {
            let shape = Shape::new(nodes, gpus).unwrap();
            let model = Schedule::build(Algorithm::Nvrar, shape, 64, 2.0);
            let mut modelled: Vec<(u32, u32)> =
                model.transfers().filter(|(_, t)| t.via_proxy).map(|(_, t)| (t.src as u32, t.dst as u32)).collect();
            let plan = weft_plan::plans::nvrar_allreduce(nodes as u32, gpus as u32).unwrap().compile().unwrap();
            let mut planned: Vec<(u32, u32)> = plan
                .ranks
                .iter()
                .flat_map(|r| r.threadblocks.iter().flat_map(|t| &t.ops).map(move |op| (r.rank, op.effects())))
                .filter_map(|(rank, e)| e.via.map(|link| (rank, link.peer)))
                .collect();
            modelled.sort_unstable();
            planned.sort_unstable();
            assert_eq!(modelled, planned, "{nodes} x {gpus}");
        }
    }

    #[test]
    fn only_network_hops_or_port_channels_go_through_the_proxy_and_only_nvrar_pays_eta() {
        let shape = Shape::new(2, 2).unwrap();
        for algorithm in [Algorithm::TwoPhase, Algorithm::Nvrar, Algorithm::NcclRing, Algorithm::NcclTree] {
            let s = Schedule::build(algorithm, shape, 64, 2.0);
            assert!(s.transfers().all(|(_, t)| t.via_proxy == shape.crosses_network(t.src, t.dst)));
            let eta = if algorithm == Algorithm::Nvrar { 2.0 } else { 1.0 };
            assert!(s.transfers().all(|(_, t)| t.wire_factor == if t.via_proxy { eta } else { 1.0 }));
        }
        let ring = Schedule::build(Algorithm::Ring, shape, 64, 2.0);
        assert!(ring.transfers().all(|(_, t)| t.via_proxy));
        // Only weft's PortChannel algorithms send PortChannel puts.
        for algorithm in Algorithm::ALL {
            let port = matches!(algorithm, Algorithm::Ring | Algorithm::AllPairs);
            let s = Schedule::build(algorithm, shape, 64, 2.0);
            assert!(s.transfers().all(|(_, t)| t.port_channel == port), "{}", algorithm.name());
        }
    }
}
