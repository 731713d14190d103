//! Pass 5: the global order and thread block assignment.
//!
//! One list-scheduling pass over the whole DAG (all ranks) picks ready nodes by priority:
//! smallest depth first, then the longest remaining path (MSCCLang's heuristic). A node that
//! receives on a connection is ready only when its transfer is the oldest one sent and not yet
//! received there, so every connection delivers in the order its sender sends. Each thread
//! block then runs its nodes in this global order, and every wait (on a link or another thread
//! block) waits for a node earlier in it: the plan cannot deadlock.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use super::fuse::Graph;
use super::{CompileError, internal};

/// The global order and thread block of every node.
#[derive(Clone, Debug)]
pub(super) struct Schedule {
    /// Node ids in execution priority order.
    pub(super) order: Vec<usize>,
    /// Thread block of each node, numbered per rank from 0.
    pub(super) tb: Vec<u32>,
    /// Thread blocks of each rank.
    pub(super) threadblocks: Vec<u32>,
}

/// Heap key of a ready node (a min-heap through `Reverse`): depth, longest remaining path
/// (larger first), rank, id.
type Key = Reverse<(usize, Reverse<usize>, u32, usize)>;

/// How ready nodes are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Priority {
    /// Smallest depth, then longest remaining path (pipelines chunks).
    Depth,
    /// Program order (node ids follow the trace).
    Program,
}

pub(super) fn schedule(graph: &Graph, mode: Priority) -> Result<Schedule, CompileError> {
    let nodes = &graph.nodes;
    let n = nodes.len();
    let deps = order_edges(graph)?;
    let topo = topological(&deps).ok_or_else(|| internal("ordering edges made a cycle"))?;
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for &d in d {
            succs[d].push(i);
        }
    }
    let mut depth = vec![0usize; n];
    for &i in &topo {
        depth[i] = deps[i].iter().map(|&d| depth[d] + 1).max().unwrap_or(0);
    }
    let mut height = vec![0usize; n];
    for &i in topo.iter().rev() {
        height[i] = succs[i].iter().map(|&s| height[s] + 1).max().unwrap_or(0);
    }
    let priority = |i: usize| match mode {
        Priority::Depth => Reverse((depth[i], Reverse(height[i]), nodes[i].rank, i)),
        Priority::Program => Reverse((0, Reverse(0), 0, i)),
    };

    let mut pending: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut heap: BinaryHeap<Key> = (0..n).filter(|&i| pending[i] == 0).map(priority).collect();
    let mut queues: BTreeMap<(u32, u32, u32), VecDeque<usize>> = BTreeMap::new();
    let mut parked: BTreeMap<(u32, u32, u32), Vec<usize>> = BTreeMap::new();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse((_, _, _, i))) = heap.pop() {
        if let Some(t) = nodes[i].recv {
            let key = graph.transfers[t].key();
            let queue = queues.entry(key).or_default();
            if queue.front() != Some(&t) {
                parked.entry(key).or_default().push(i);
                continue;
            }
            queue.pop_front();
            for p in parked.remove(&key).unwrap_or_default() {
                heap.push(priority(p));
            }
        }
        if let Some(t) = nodes[i].send {
            let key = graph.transfers[t].key();
            queues.entry(key).or_default().push_back(t);
            for p in parked.remove(&key).unwrap_or_default() {
                heap.push(priority(p));
            }
        }
        order.push(i);
        for &s in &succs[i] {
            pending[s] -= 1;
            if pending[s] == 0 {
                heap.push(priority(s));
            }
        }
    }
    if order.len() != n {
        let (from, to, channel) =
            parked.keys().next().copied().ok_or_else(|| internal("scheduling stopped with nothing parked"))?;
        return Err(CompileError::ConnectionOrder { from, to, channel });
    }

    // Thread blocks: link/hint groups as found by fusion; local operations join the group of
    // their latest same-rank predecessor, else of their earliest same-rank successor, else a
    // per-rank local thread block.
    let mut position = vec![0usize; n];
    for (p, &i) in order.iter().enumerate() {
        position[i] = p;
    }
    const LOCAL: usize = usize::MAX;
    let mut group: Vec<Option<usize>> = nodes.iter().map(|x| x.group).collect();
    for &i in &order {
        if group[i].is_none() {
            group[i] = deps[i]
                .iter()
                .filter(|&&d| nodes[d].rank == nodes[i].rank && group[d].is_some())
                .max_by_key(|&&d| position[d])
                .and_then(|&d| group[d]);
        }
    }
    for &i in order.iter().rev() {
        if group[i].is_none() {
            group[i] = succs[i]
                .iter()
                .filter(|&&s| nodes[s].rank == nodes[i].rank && group[s].is_some())
                .min_by_key(|&&s| position[s])
                .and_then(|&s| group[s]);
        }
    }
    let ranks = graph.scratch.len();
    let mut numbering: BTreeMap<(u32, usize), u32> = BTreeMap::new();
    let mut threadblocks = vec![0u32; ranks];
    let mut tb = vec![0u32; n];
    for &i in &order {
        let rank = nodes[i].rank;
        let key = (rank, group[i].unwrap_or(LOCAL));
        let next = &mut threadblocks[rank as usize];
        let id = *numbering.entry(key).or_insert_with(|| {
            *next += 1;
            *next - 1
        });
        tb[i] = id;
    }
    Ok(Schedule { order, tb, threadblocks })
}

/// A topological order of `deps` (each node's list of predecessors), or `None` on a cycle.
fn topological(deps: &[Vec<usize>]) -> Option<Vec<usize>> {
    let n = deps.len();
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut pending: Vec<usize> = deps.iter().map(Vec::len).collect();
    for (i, d) in deps.iter().enumerate() {
        for &d in d {
            succs[d].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| pending[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &s in &succs[i] {
            pending[s] -= 1;
            if pending[s] == 0 {
                ready.push(s);
            }
        }
    }
    (order.len() == n).then_some(order)
}

/// Descendants of every node, as bitsets.
fn reachability(deps: &[Vec<usize>], topo: &[usize]) -> Vec<Vec<u64>> {
    let n = deps.len();
    let words = n.div_ceil(64);
    let mut reach = vec![vec![0u64; words]; n];
    for &v in topo.iter().rev() {
        // `deps` lists predecessors; push `v`'s set (plus `v`) into each predecessor.
        let mut mine = std::mem::take(&mut reach[v]);
        mine[v / 64] |= 1 << (v % 64);
        for &d in &deps[v] {
            for (a, b) in reach[d].iter_mut().zip(&mine) {
                *a |= *b;
            }
        }
        mine[v / 64] &= !(1 << (v % 64));
        reach[v] = mine;
    }
    reach
}

fn reaches(reach: &[Vec<u64>], from: usize, to: usize) -> bool {
    reach[from][to / 64] & (1 << (to % 64)) != 0
}

/// Dependencies plus ordering edges: when the receiver must receive transfer `a` before
/// transfer `b` of the same connection (its receive of `a` leads to its receive of `b`), the
/// sender must send `a` before `b`. Repeated until no edge is added; a cycle means the order is
/// impossible on one connection.
fn order_edges(graph: &Graph) -> Result<Vec<Vec<usize>>, CompileError> {
    let nodes = &graph.nodes;
    let mut deps: Vec<Vec<usize>> = nodes.iter().map(|x| x.deps.iter().copied().collect()).collect();
    let mut send_node = vec![usize::MAX; graph.transfers.len()];
    let mut recv_node = vec![usize::MAX; graph.transfers.len()];
    for (i, node) in nodes.iter().enumerate() {
        if let Some(t) = node.send {
            send_node[t] = i;
        }
        if let Some(t) = node.recv {
            recv_node[t] = i;
        }
    }
    let mut by_conn: BTreeMap<(u32, u32, u32), Vec<usize>> = BTreeMap::new();
    for (t, x) in graph.transfers.iter().enumerate() {
        by_conn.entry(x.key()).or_default().push(t);
    }
    let mut last = None;
    loop {
        let Some(topo) = topological(&deps) else {
            return Err(match last {
                Some((from, to, channel)) => CompileError::ConnectionOrder { from, to, channel },
                None => internal("dependency cycle"),
            });
        };
        let reach = reachability(&deps, &topo);
        let mut added = false;
        for (&(from, to, channel), transfers) in &by_conn {
            for &a in transfers {
                for &b in transfers {
                    let (ra, rb, sa, sb) = (recv_node[a], recv_node[b], send_node[a], send_node[b]);
                    if a == b || !reaches(&reach, ra, rb) || sa == sb || reaches(&reach, sa, sb) {
                        continue;
                    }
                    if reaches(&reach, sb, sa) {
                        return Err(CompileError::ConnectionOrder { from, to, channel });
                    }
                    deps[sb].push(sa);
                    added = true;
                    last = Some((from, to, channel));
                }
            }
        }
        if !added {
            return Ok(deps);
        }
    }
}
