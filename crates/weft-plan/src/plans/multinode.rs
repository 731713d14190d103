//! AllReduce across nodes in three phases, written at the channel level: a reduce-scatter
//! within every node over memory channels, an AllReduce of each shard among the ranks of the
//! same local index over port channels (the only phase that crosses nodes), and an all-gather
//! within every node over memory channels. Memory channels join ranks of one node only.
//!
//! Ranks are `node * gpus_per_node + local`. Local rank `l` owns shard `l`: input chunks
//! `l * pieces .. (l + 1) * pieces`, where `pieces` is what the phase across nodes cuts a shard
//! into. Every chunk has its own size class, so one plan serves every element count.
//!
//! Scratch of rank `(node, l)`: first `gpus_per_node` slots of shard `l`'s classes (slot `h`
//! receives local rank `h`'s part of shard `l`; slot `l` holds the node's sum), then the area
//! of the phase across nodes (the same size on every rank), then `gpus_per_node` slots where
//! the all-gather lands, slot `h` of shard `h`'s classes. Every slot is written once per
//! launch, so no port put's source is overwritten before the flushes that end the thread block.
//! Peers write only scratch (as in every plan with port channels): a rank copies what its node
//! peers gathered into its own output.

use super::recursive_doubling::{RecursiveDoubling, Role};
use crate::dsl::{Buffer, ChannelProgram, Collective, DslError, MemoryChannel, PortChannel, ThreadBlockOps};
use crate::plan::BufRef;

/// Nodes of equal size, ranks numbered node after node.
#[derive(Clone, Copy, Debug)]
struct Shape {
    nodes: u32,
    gpus: u32,
    /// Chunks per shard.
    pieces: u32,
}

impl Shape {
    fn new(algorithm: &'static str, nodes: u32, gpus: u32, pieces_of: fn(u32) -> u32) -> Result<Self, DslError> {
        let constraint = |reason: String| DslError::Constraint { algorithm, reason };
        if nodes == 0 || gpus == 0 {
            return Err(constraint(format!("{nodes} node(s) of {gpus} GPU(s)")));
        }
        if nodes.saturating_mul(gpus) < 2 {
            return Err(constraint("needs at least 2 ranks".into()));
        }
        Ok(Self { nodes, gpus, pieces: pieces_of(nodes) })
    }

    fn rank(&self, node: u32, local: u32) -> u32 {
        node * self.gpus + local
    }

    /// The collective: every chunk its own size class.
    fn collective(&self) -> Result<Collective, DslError> {
        Collective::all_reduce(self.nodes * self.gpus, self.gpus * self.pieces)
    }

    /// Shard `l` of `buffer` (input, output, or slot `l` of the reduce-scatter in scratch).
    fn shard(&self, buffer: Buffer, l: u32) -> BufRef {
        BufRef::new(buffer, l * self.pieces, self.pieces)
    }

    /// Piece `j` of `shard`.
    fn piece(shard: BufRef, j: u32) -> BufRef {
        BufRef::new(shard.buffer, shard.index + j, 1)
    }

    /// Scratch slot `i` of one shard each, counted from scratch chunk `first`.
    fn slot(&self, first: u32, i: u32) -> BufRef {
        BufRef::new(Buffer::Scratch, first + i * self.pieces, self.pieces)
    }
}

/// The phase across nodes, as the three-phase builder runs it.
#[derive(Clone, Copy)]
struct Across {
    /// The size classes of its scratch on rank `(node, l)`, after the reduce-scatter's slots.
    scratch: fn(&Shape, u32, u32) -> Vec<u32>,
    /// The nodes whose rank of the same local index rank `(node, _)` talks to.
    peers: fn(&Shape, u32) -> Vec<u32>,
    /// What it appends to rank `(node, l)`'s thread block; returns where the AllReduced shard
    /// `l` is.
    run: fn(&Shape, &mut ThreadBlockOps<'_>, Rank<'_>) -> BufRef,
}

/// One rank's view of the phase across nodes.
struct Rank<'a> {
    node: u32,
    /// The node's sum of the rank's shard.
    sum: BufRef,
    /// The first scratch chunk after the reduce-scatter's slots.
    area: u32,
    /// `ports[m]`: the port channel to the same local rank of node `m`, for the nodes of
    /// [`Across::peers`].
    ports: &'a [Option<PortChannel>],
}

/// Builds the three-phase AllReduce `name` with `across` as its phase across nodes.
fn three_phase(name: &'static str, shape: Shape, across: Across) -> Result<ChannelProgram, DslError> {
    let mut p = ChannelProgram::new(name, shape.collective()?);
    let area = shape.gpus * shape.pieces;
    let mut gathered = area;
    for node in 0..shape.nodes {
        for l in 0..shape.gpus {
            let shard_classes = |h: u32| h * shape.pieces..(h + 1) * shape.pieces;
            let mut classes: Vec<u32> = (0..shape.gpus).flat_map(|_| shard_classes(l)).collect();
            let across_classes = (across.scratch)(&shape, node, l);
            gathered = area + across_classes.len() as u32;
            classes.extend(across_classes);
            classes.extend((0..shape.gpus).flat_map(shard_classes));
            p.scratch(shape.rank(node, l), &classes)?;
        }
    }
    for node in 0..shape.nodes {
        for l in 0..shape.gpus {
            let rank = shape.rank(node, l);
            let locals: Vec<u32> = (0..shape.gpus).filter(|&h| h != l).collect();
            let memory = locals
                .iter()
                .map(|&h| p.memory_channel(rank, shape.rank(node, h), 0))
                .collect::<Result<Vec<_>, _>>()?;
            let mut ports = vec![None; shape.nodes as usize];
            for m in (across.peers)(&shape, node) {
                ports[m as usize] = Some(p.port_channel(rank, shape.rank(m, l), 0)?);
            }
            let mut tb = p.threadblock(rank, 0)?;
            let sum = reduce_scatter_within_node(&shape, &mut tb, l, &locals, &memory);
            let result = (across.run)(&shape, &mut tb, Rank { node, sum, area, ports: &ports });
            all_gather_within_node(&shape, &mut tb, (l, &locals), result, gathered, &memory);
            for ch in ports.iter().flatten() {
                tb.flush(ch);
            }
        }
    }
    Ok(p)
}

/// Phase 1 on local rank `l`: its part of every other shard into the owner's slot `l`, then
/// the node's sum of shard `l` into its own slot `l` (returned).
fn reduce_scatter_within_node(
    shape: &Shape,
    tb: &mut ThreadBlockOps<'_>,
    l: u32,
    locals: &[u32],
    memory: &[MemoryChannel],
) -> BufRef {
    let sum = shape.slot(0, l);
    for (ch, &h) in memory.iter().zip(locals) {
        tb.put_with_signal(ch, shape.shard(Buffer::Input, h), sum);
    }
    let mut acc = shape.shard(Buffer::Input, l);
    for (ch, &h) in memory.iter().zip(locals) {
        tb.recv_reduce(ch, acc, shape.slot(0, h), sum);
        acc = sum;
    }
    if memory.is_empty() {
        // One GPU per node: the shard is the input, staged where port puts read (scratch).
        tb.copy(acc, sum);
    }
    sum
}

/// Phase 3 on local rank `l`: the AllReduced shard `l` into its own output and, through
/// every node peer's gathered slot `l` (slots from `gathered` on), into theirs.
fn all_gather_within_node(
    shape: &Shape,
    tb: &mut ThreadBlockOps<'_>,
    (l, locals): (u32, &[u32]),
    result: BufRef,
    gathered: u32,
    memory: &[MemoryChannel],
) {
    let slot = |h: u32| shape.slot(gathered, h);
    tb.copy(result, shape.shard(Buffer::Output, l));
    for ch in memory {
        tb.put_with_signal(ch, result, slot(l));
    }
    for (ch, &h) in memory.iter().zip(locals) {
        tb.recv(ch, slot(h), shape.shard(Buffer::Output, h));
    }
}

/// NVRAR (Singhania et al., CAIS '26): reduce-scatter within each node, recursive doubling of
/// each shard across nodes among the ranks of the same local index, all-gather within each
/// node. Any node count: the nodes beyond the largest power of two fold their shard into a
/// partner first and get the result back last ([`RecursiveDoubling`]). With one GPU per node
/// only the recursive doubling remains. A shard is one chunk.
///
/// Scratch after the reduce-scatter's slots (one chunk each): what the fold partner put (its
/// value, or the handed-back result), the sum after the fold, then per round what the peer
/// put and the sum after it.
pub fn nvrar_allreduce(nodes: u32, gpus_per_node: u32) -> Result<ChannelProgram, DslError> {
    let shape = Shape::new("nvrar_allreduce", nodes, gpus_per_node, |_| 1)?;
    three_phase("nvrar_allreduce", shape, NVRAR)
}

/// NVRAR's phase across nodes.
const NVRAR: Across = Across {
    scratch: nvrar_scratch,
    peers: nvrar_peers,
    run: |shape, tb, rank| recursive_doubling(shape, tb, rank, HandBack::Yes),
};

fn nvrar_scratch(shape: &Shape, _node: u32, l: u32) -> Vec<u32> {
    let rounds = RecursiveDoubling::new(shape.nodes as usize).rounds();
    vec![l; 2 + 2 * rounds as usize]
}

/// The fold partner, then the peer of every round.
fn nvrar_peers(shape: &Shape, node: u32) -> Vec<u32> {
    let rd = RecursiveDoubling::new(shape.nodes as usize);
    let partner = match rd.role(node as usize) {
        Role::Folded { into } => Some(into),
        Role::Survivor { absorbs, .. } => absorbs,
    };
    let rounds = (0..rd.rounds()).filter_map(|round| rd.peer(node as usize, round));
    partner.into_iter().chain(rounds).map(|m| m as u32).collect()
}

/// Whether a survivor hands the result back to the member folded into it (always, but for the
/// test that shows the verifier catches the fix-up without it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum HandBack {
    Yes,
    #[cfg(test)]
    No,
}

/// NVRAR's phase across nodes on rank `(node, l)` (see [`nvrar_allreduce`]).
fn recursive_doubling(shape: &Shape, tb: &mut ThreadBlockOps<'_>, r: Rank<'_>, hand_back: HandBack) -> BufRef {
    let rd = RecursiveDoubling::new(shape.nodes as usize);
    let slot = |i: u32| shape.slot(r.area, i);
    let (from_partner, after_fold) = (slot(0), slot(1));
    let (received, summed) = (|round: u32| slot(2 + 2 * round), |round: u32| slot(3 + 2 * round));
    let port = |m: usize| r.ports[m];
    match rd.role(r.node as usize) {
        Role::Folded { into } => {
            let Some(ch) = port(into) else { return r.sum };
            tb.put_with_signal(&ch, r.sum, from_partner);
            if hand_back == HandBack::Yes {
                tb.wait(&ch);
                return from_partner;
            }
            r.sum
        }
        Role::Survivor { absorbs, .. } => {
            let mut sum = r.sum;
            let folded = absorbs.and_then(port);
            if let Some(ch) = &folded {
                tb.recv_reduce(ch, sum, from_partner, after_fold);
                sum = after_fold;
            }
            for round in 0..rd.rounds() {
                let Some(ch) = rd.peer(r.node as usize, round).and_then(port) else { continue };
                tb.put_with_signal(&ch, sum, received(round));
                tb.recv_reduce(&ch, sum, received(round), summed(round));
                sum = summed(round);
            }
            if let Some(ch) = &folded
                && hand_back == HandBack::Yes
            {
                tb.put_with_signal(ch, sum, from_partner);
            }
            sum
        }
    }
}

/// MSCCL++'s hierarchical two-phase AllReduce (2PH): reduce-scatter within each node, a
/// two-shot all-pairs AllReduce of each shard across nodes among the ranks of the same local
/// index (piece `j` of a shard is reduced on node `j`, which puts the result to every other
/// node), all-gather within each node. A shard is `nodes` chunks. Every rank puts
/// 2(nodes − 1)/nodes of its shard across nodes in two rounds: for large messages, where
/// NVRAR's log2(nodes) whole shards cost more.
///
/// Scratch after the reduce-scatter's slots (one chunk each): on node `n`, piece `n` as each
/// node `s` put it (chunk `s`), then the AllReduced shard, piece by piece.
pub fn hier2ph_allreduce(nodes: u32, gpus_per_node: u32) -> Result<ChannelProgram, DslError> {
    let shape = Shape::new("hier2ph_allreduce", nodes, gpus_per_node, |nodes| nodes)?;
    three_phase("hier2ph_allreduce", shape, HIER2PH)
}

/// 2PH's phase across nodes: every other node is a peer.
const HIER2PH: Across = Across {
    scratch: hier2ph_scratch,
    peers: |shape, node| (0..shape.nodes).filter(|&m| m != node).collect(),
    run: all_pairs,
};

fn hier2ph_scratch(shape: &Shape, node: u32, l: u32) -> Vec<u32> {
    let first = l * shape.pieces;
    (0..shape.nodes).map(|_| first + node).chain(first..first + shape.pieces).collect()
}

/// 2PH's phase across nodes on rank `(node, l)` (see [`hier2ph_allreduce`]).
fn all_pairs(shape: &Shape, tb: &mut ThreadBlockOps<'_>, r: Rank<'_>) -> BufRef {
    let n = r.node;
    let received = |from: u32| BufRef::new(Buffer::Scratch, r.area + from, 1);
    let result = BufRef::new(Buffer::Scratch, r.area + shape.nodes, shape.pieces);
    let peers: Vec<(u32, PortChannel)> =
        r.ports.iter().enumerate().filter_map(|(m, ch)| ch.map(|ch| (m as u32, ch))).collect();
    for &(m, ch) in &peers {
        tb.put_with_signal(&ch, Shape::piece(r.sum, m), received(n));
    }
    let mine = Shape::piece(result, n);
    let mut acc = Shape::piece(r.sum, n);
    for &(m, ch) in &peers {
        tb.recv_reduce(&ch, acc, received(m), mine);
        acc = mine;
    }
    if peers.is_empty() {
        tb.copy(acc, mine);
    }
    for &(_, ch) in &peers {
        tb.put_with_signal(&ch, mine, mine);
    }
    for &(_, ch) in &peers {
        tb.wait(&ch);
    }
    result
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;
    use crate::CompileError;

    const WITHOUT_HAND_BACK: Across = Across { run: |s, tb, r| recursive_doubling(s, tb, r, HandBack::No), ..NVRAR };

    #[test]
    fn without_the_hand_back_the_folded_nodes_fail_the_postcondition() {
        // 3 and 6 nodes fold; 4 does not, so it still verifies.
        for (nodes, gpus) in [(3, 1), (3, 2), (6, 3)] {
            let shape = Shape::new("nvrar_no_hand_back", nodes, gpus, |_| 1).unwrap();
            let p = three_phase("nvrar_no_hand_back", shape, WITHOUT_HAND_BACK).unwrap();
            let e = p.compile().unwrap_err();
            assert!(matches!(e, CompileError::Verify(_)), "{nodes} x {gpus}: {e}");
            assert!(e.to_string().contains("violates the postcondition at rank 0"), "{nodes} x {gpus}: {e}");
        }
        let shape = Shape::new("nvrar_no_hand_back", 4, 2, |_| 1).unwrap();
        let p = three_phase("nvrar_no_hand_back", shape, WITHOUT_HAND_BACK).unwrap();
        p.compile().unwrap();
    }

    #[test]
    fn memory_channels_stay_in_a_node_and_port_channels_leave_it() {
        for (nodes, gpus) in [(3, 4), (5, 2), (2, 1), (16, 1)] {
            for plan in [nvrar_allreduce(nodes, gpus), hier2ph_allreduce(nodes, gpus)] {
                let plan = plan.unwrap().compile().unwrap();
                for rank in &plan.ranks {
                    let mut port_peers = std::collections::BTreeSet::new();
                    for op in rank.threadblocks.iter().flat_map(|t| &t.ops) {
                        let e = op.effects();
                        for link in [e.wait, e.signal, e.via, e.flush].into_iter().flatten() {
                            let same_node = link.peer / gpus == rank.rank / gpus;
                            assert_eq!(link.port, !same_node, "{}: rank {} {link}", plan.name, rank.rank);
                            if link.port {
                                port_peers.insert(link.peer);
                            }
                        }
                    }
                    // NVRAR reaches its fold partner and one peer per round; 2PH every node.
                    let most = if plan.name == "nvrar_allreduce" { nodes.ilog2() + 1 } else { nodes - 1 };
                    assert!(port_peers.len() as u32 <= most, "{}: rank {} {port_peers:?}", plan.name, rank.rank);
                }
            }
        }
    }
}
