//! Pass 4: instruction fusion and thread block grouping.
//!
//! Thread blocks are found with a union-find over "keys": each inbound link, outbound link and
//! thread block hint of a rank. An instruction joins the keys it uses; a group may hold at most
//! one inbound and one outbound link. A receive and the send forwarding its data fuse into one
//! operation (`rcs`, `rrcs`, `rrs`) only if joining their links keeps that rule; so do a local
//! reduce and the send of its result (`reduce_send`: the result is put while it is computed,
//! not stored and read back).

use std::collections::{BTreeMap, BTreeSet};

use super::lower::{Instr, Landing, Lowered, Transfer};
use super::{CompileError, internal};
use crate::dsl::trace::Trace;
use crate::plan::{BufRef, Link, Op};

/// A node of the final DAG: one plan operation.
#[derive(Clone, Debug)]
pub(super) struct Node {
    pub(super) rank: u32,
    pub(super) op: Op,
    /// Nodes it depends on (same rank, or the node holding the matching send).
    pub(super) deps: BTreeSet<usize>,
    /// Transfer whose send this node performs.
    pub(super) send: Option<usize>,
    /// Transfer whose receive this node performs.
    pub(super) recv: Option<usize>,
    /// Thread block group (union-find root) for nodes with links or hints.
    pub(super) group: Option<usize>,
}

/// The fused DAG. Node ids are a topological order.
#[derive(Clone, Debug)]
pub(super) struct Graph {
    pub(super) nodes: Vec<Node>,
    pub(super) transfers: Vec<Transfer>,
    pub(super) scratch: Vec<Vec<u32>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Out(Link),
    In(Link),
    Hint(u32),
}

/// Union-find over (rank, key), each root carrying the links of its group.
#[derive(Default)]
struct Groups {
    ids: BTreeMap<(u32, Key), usize>,
    parent: Vec<usize>,
    outs: Vec<BTreeSet<Link>>,
    ins: Vec<BTreeSet<Link>>,
}

impl Groups {
    fn id(&mut self, rank: u32, key: Key) -> usize {
        if let Some(&id) = self.ids.get(&(rank, key)) {
            return id;
        }
        let id = self.parent.len();
        self.parent.push(id);
        self.outs.push(matches!(key, Key::Out(_)).then(|| link(key)).into_iter().collect());
        self.ins.push(matches!(key, Key::In(_)).then(|| link(key)).into_iter().collect());
        self.ids.insert((rank, key), id);
        id
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    /// Merged (outbound, inbound) link sets if `a` and `b` were joined.
    fn merged(&mut self, a: usize, b: usize) -> (BTreeSet<Link>, BTreeSet<Link>) {
        let (a, b) = (self.find(a), self.find(b));
        let outs = self.outs[a].union(&self.outs[b]).copied().collect();
        let ins = self.ins[a].union(&self.ins[b]).copied().collect();
        (outs, ins)
    }

    fn can_union(&mut self, a: usize, b: usize) -> bool {
        let (outs, ins) = self.merged(a, b);
        outs.len() <= 1 && ins.len() <= 1
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let (outs, ins) = self.merged(ra, rb);
            self.parent[rb] = ra;
            self.outs[ra] = outs;
            self.ins[ra] = ins;
        }
    }
}

fn link(key: Key) -> Link {
    match key {
        Key::Out(l) | Key::In(l) => l,
        Key::Hint(_) => Link::new(0, 0),
    }
}

/// The keys an instruction uses.
fn keys(lowered: &Lowered, i: usize) -> Vec<Key> {
    let node = &lowered.instrs[i];
    let mut keys = Vec::new();
    match node.instr {
        Instr::Send { xfer, .. } => keys.push(Key::Out(lowered.transfers[xfer].out_link())),
        Instr::Recv { xfer, .. } => keys.push(Key::In(lowered.transfers[xfer].in_link())),
        Instr::Copy { .. } | Instr::Reduce { .. } => {}
    }
    keys.extend(node.tb_hint.map(Key::Hint));
    keys
}

fn conflict(rank: u32, hint: u32, outs: &BTreeSet<Link>, ins: &BTreeSet<Link>) -> CompileError {
    let (direction, links) = if outs.len() > 1 { ("outbound", outs) } else { ("inbound", ins) };
    CompileError::ThreadBlockConflict {
        rank,
        hint,
        direction,
        links: links.iter().map(Link::to_string).collect::<Vec<_>>().join(", "),
    }
}

/// Fuses receives with the sends that forward their data and groups keys into thread blocks.
pub(super) fn fuse(trace: &Trace, lowered: Lowered, enabled: bool) -> Result<Graph, CompileError> {
    let n = lowered.instrs.len();
    let mut groups = Groups::default();

    // Mandatory joins: the keys of each instruction (a hinted send joins its hint group).
    for i in 0..n {
        let rank = lowered.instrs[i].rank;
        let ids: Vec<usize> = keys(&lowered, i).into_iter().map(|k| groups.id(rank, k)).collect();
        for w in ids.windows(2) {
            if !groups.can_union(w[0], w[1]) {
                let (outs, ins) = groups.merged(w[0], w[1]);
                let hint = lowered.instrs[i].tb_hint.unwrap_or(0);
                return Err(conflict(rank, hint, &outs, &ins));
            }
            groups.union(w[0], w[1]);
        }
    }

    // Longest path to a leaf, to fuse a receive onto its most critical forwarding send.
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in lowered.instrs.iter().enumerate() {
        for &d in &node.deps {
            succs[d].push(i);
        }
    }
    let mut height = vec![0usize; n];
    for i in (0..n).rev() {
        height[i] = succs[i].iter().map(|&s| height[s] + 1).max().unwrap_or(0);
    }

    // Sends by (rank, source chunks, operation that wrote them).
    let mut sends: BTreeMap<(u32, BufRef, usize), Vec<usize>> = BTreeMap::new();
    for (i, node) in lowered.instrs.iter().enumerate() {
        if let Instr::Send { src, .. } = node.instr {
            let op = &trace.ops[node.op];
            let writers: BTreeSet<Option<usize>> = op.src_writers.iter().copied().collect();
            if let [Some(w)] = writers.into_iter().collect::<Vec<_>>()[..] {
                sends.entry((node.rank, src, w)).or_default().push(i);
            }
        }
    }

    // fused[recv] = send
    let mut fused: BTreeMap<usize, usize> = BTreeMap::new();
    let mut taken: BTreeSet<usize> = BTreeSet::new();
    if enabled {
        for (r, node) in lowered.instrs.iter().enumerate() {
            // The result a receive or a local reduce may forward.
            let result = match node.instr {
                Instr::Recv { landing, .. } => landing.result(),
                Instr::Reduce { dst, .. } => dst,
                Instr::Send { .. } | Instr::Copy { .. } => continue,
            };
            let Some(candidates) = sends.get(&(node.rank, result, node.op)) else {
                continue;
            };
            let mut candidates: Vec<usize> = candidates.iter().copied().filter(|s| !taken.contains(s)).collect();
            candidates.sort_by_key(|&s| (std::cmp::Reverse(height[s]), s));
            for s in candidates {
                // A send reading exactly this result depends on nothing else locally.
                let only_dep = lowered.instrs[s].deps.iter().all(|&d| d == r);
                let b = groups.id(node.rank, keys(&lowered, s)[0]);
                // A reduce without a hint has no key: it simply joins the send's thread block.
                let a = keys(&lowered, r).first().map(|&k| groups.id(node.rank, k));
                if only_dep && a.is_none_or(|a| groups.can_union(a, b)) {
                    if let Some(a) = a {
                        groups.union(a, b);
                    }
                    fused.insert(r, s);
                    taken.insert(s);
                    break;
                }
            }
        }
    }

    // Prefer one thread block per peer: join the outbound and inbound link of the same peer
    // and channel when the rule allows it.
    let links: Vec<(u32, Link)> = groups
        .ids
        .keys()
        .filter_map(|&(rank, key)| match key {
            Key::Out(l) => Some((rank, l)),
            _ => None,
        })
        .collect();
    for (rank, l) in links {
        if let Some(&b) = groups.ids.get(&(rank, Key::In(l))) {
            let a = groups.id(rank, Key::Out(l));
            if groups.can_union(a, b) {
                groups.union(a, b);
            }
        }
    }

    // Build nodes. A fused pair takes the receive's position, which keeps ids topological.
    let mut node_of = vec![usize::MAX; n];
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..n {
        if taken.contains(&i) {
            continue;
        }
        let instr = &lowered.instrs[i];
        let mut members = vec![i];
        members.extend(fused.get(&i).copied());
        let mut deps = BTreeSet::new();
        for &m in &members {
            for &d in &lowered.instrs[m].deps {
                if !members.contains(&d) {
                    let node = node_of[d];
                    if node == usize::MAX {
                        return Err(internal("instruction order is not topological"));
                    }
                    deps.insert(node);
                }
            }
        }
        let op = match fused.get(&i) {
            Some(&s) => fused_op(trace, &lowered, i, s)?,
            None => single_op(&lowered, i),
        };
        let (mut send, mut recv) = (None, None);
        for &m in &members {
            match lowered.instrs[m].instr {
                Instr::Send { xfer, .. } => send = Some(xfer),
                Instr::Recv { xfer, .. } => recv = Some(xfer),
                _ => {}
            }
        }
        let key = members.iter().find_map(|&m| keys(&lowered, m).first().copied());
        let group = key.map(|k| groups.id(instr.rank, k)).map(|g| groups.find(g));
        let id = nodes.len();
        for &m in &members {
            node_of[m] = id;
        }
        nodes.push(Node { rank: instr.rank, op, deps, send, recv, group });
    }
    Ok(Graph { nodes, transfers: lowered.transfers, scratch: lowered.scratch })
}

fn single_op(lowered: &Lowered, i: usize) -> Op {
    match lowered.instrs[i].instr {
        Instr::Copy { src, dst } => Op::Copy { src, dst },
        Instr::Reduce { a, b, dst } => Op::Reduce { srcs: vec![a, b], dst },
        Instr::Send { src, remote, xfer } => Op::Send { src, dst: remote, to: lowered.transfers[xfer].out_link() },
        Instr::Recv { landing, xfer } => {
            let from = lowered.transfers[xfer].in_link();
            match landing {
                Landing::Direct(_) => Op::Wait { from },
                Landing::Copy { staged, dst } => Op::Recv { from, src: staged, dst },
                Landing::Reduce { local, staged, dst } => Op::Rrc { from, local, staged, dst },
            }
        }
    }
}

fn fused_op(trace: &Trace, lowered: &Lowered, r: usize, s: usize) -> Result<Op, CompileError> {
    let Instr::Send { remote, xfer: out, .. } = lowered.instrs[s].instr else {
        return Err(internal("fusing an instruction with something other than a send"));
    };
    let to = lowered.transfers[out].out_link();
    // The result must be stored if anything but the forwarding send reads it, or if it is the
    // final value of an output chunk.
    let producer = &trace.ops[lowered.instrs[r].op];
    let forwarder = lowered.instrs[s].op;
    let store = producer.out_final || producer.out_readers.iter().any(|&x| x != forwarder);
    let (landing, xfer) = match lowered.instrs[r].instr {
        Instr::Recv { landing, xfer } => (landing, xfer),
        Instr::Reduce { a, b, dst } => {
            return Ok(Op::ReduceSend { srcs: vec![a, b], dst: store.then_some(dst), to, remote });
        }
        Instr::Copy { .. } | Instr::Send { .. } => {
            return Err(internal("fusing a send with something other than a receive or a reduce"));
        }
    };
    let from = lowered.transfers[xfer].in_link();
    Ok(match landing {
        Landing::Direct(src) => Op::Rcs { from, src, dst: None, to, remote },
        Landing::Copy { staged, dst } => Op::Rcs { from, src: staged, dst: store.then_some(dst), to, remote },
        Landing::Reduce { local, staged, dst } if store => Op::Rrcs { from, local, staged, dst, to, remote },
        Landing::Reduce { local, staged, .. } => Op::Rrs { from, local, staged, to, remote },
    })
}
