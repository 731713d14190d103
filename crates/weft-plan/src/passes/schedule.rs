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

pub(super) fn schedule(graph: &Graph) -> Result<Schedule, CompileError> {
    let nodes = &graph.nodes;
    let n = nodes.len();
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut depth = vec![0usize; n];
    for (i, node) in nodes.iter().enumerate() {
        for &d in &node.deps {
            if d >= i {
                return Err(internal("node order is not topological"));
            }
            succs[d].push(i);
            depth[i] = depth[i].max(depth[d] + 1);
        }
    }
    let mut height = vec![0usize; n];
    for i in (0..n).rev() {
        height[i] = succs[i].iter().map(|&s| height[s] + 1).max().unwrap_or(0);
    }
    let priority = |i: usize| Reverse((depth[i], Reverse(height[i]), nodes[i].rank, i));

    let mut pending: Vec<usize> = nodes.iter().map(|x| x.deps.len()).collect();
    let mut heap: BinaryHeap<Reverse<(usize, Reverse<usize>, u32, usize)>> = (0..n)
        .filter(|&i| pending[i] == 0)
        .map(priority)
        .collect();
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
        let (from, to, channel) = parked
            .keys()
            .next()
            .copied()
            .ok_or_else(|| internal("scheduling stopped with nothing parked"))?;
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
            group[i] = nodes[i]
                .deps
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
    Ok(Schedule {
        order,
        tb,
        threadblocks,
    })
}
