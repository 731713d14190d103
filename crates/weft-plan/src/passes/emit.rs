//! Pass 6: synchronisation insertion and plan assembly.

use super::CompileError;
use super::fuse::Graph;
use super::schedule::Schedule;
use crate::dsl::{Collective, Program};
use crate::plan::{BufRef, Buffer, ExecutionPlan, Op, PLAN_VERSION, RankPlan, ThreadBlock, limits};

/// One entry of a thread block before step numbers are known.
enum Entry {
    /// `wait_tb` for the given node.
    WaitFor(usize),
    Nop,
    Node(usize),
}

pub(super) fn emit(
    program: &Program,
    collective: &Collective,
    graph: &Graph,
    schedule: &Schedule,
) -> Result<ExecutionPlan, CompileError> {
    let nodes = &graph.nodes;
    let n = nodes.len();
    let ranks = graph.scratch.len();
    for (rank, &count) in schedule.threadblocks.iter().enumerate() {
        if count as usize > limits::MAX_THREADBLOCKS {
            return Err(CompileError::Limit {
                rank: rank as u32,
                what: "thread blocks",
                value: u64::from(count),
                max: limits::MAX_THREADBLOCKS as u64,
            });
        }
    }

    // Thread block lists in global order, and each node's position in its list.
    let mut lists: Vec<Vec<Vec<usize>>> = schedule.threadblocks.iter().map(|&c| vec![Vec::new(); c as usize]).collect();
    let mut pos = vec![0usize; n];
    for &i in &schedule.order {
        let list = &mut lists[nodes[i].rank as usize][schedule.tb[i] as usize];
        pos[i] = list.len();
        list.push(i);
    }

    // Cross-thread-block dependencies, skipping those already implied. `clock[v][t]` is how
    // many nodes of thread block `t` (same rank) are known complete when `v` completes.
    let mut clock: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut waits: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut order_pos = vec![0usize; n];
    for (p, &i) in schedule.order.iter().enumerate() {
        order_pos[i] = p;
    }
    for &v in &schedule.order {
        let rank = nodes[v].rank as usize;
        let tb = schedule.tb[v] as usize;
        let mut c = if pos[v] > 0 {
            clock[lists[rank][tb][pos[v] - 1]].clone()
        } else {
            vec![0; schedule.threadblocks[rank] as usize]
        };
        let mut preds: Vec<usize> = nodes[v]
            .deps
            .iter()
            .copied()
            .filter(|&d| nodes[d].rank as usize == rank && schedule.tb[d] as usize != tb)
            .collect();
        preds.sort_by_key(|&d| std::cmp::Reverse(order_pos[d]));
        for a in preds {
            let ta = schedule.tb[a] as usize;
            if c[ta] < pos[a] + 1 {
                waits[v].push(a);
                for (x, y) in c.iter_mut().zip(&clock[a]) {
                    *x = (*x).max(*y);
                }
            }
        }
        c[tb] = pos[v] + 1;
        clock[v] = c;
    }

    // Entries with block barriers (`nop`) where two operations of a thread block touch the
    // same chunk with no barrier in between.
    let mut entries: Vec<Vec<Vec<Entry>>> = Vec::with_capacity(ranks);
    let mut index = vec![0u32; n];
    for (rank, tbs) in lists.iter().enumerate() {
        let mut rank_entries = Vec::with_capacity(tbs.len());
        for list in tbs {
            let mut out = Vec::new();
            let mut dirty: Vec<(BufRef, bool)> = Vec::new();
            for &v in list {
                let e = nodes[v].op.effects();
                for &w in &waits[v] {
                    out.push(Entry::WaitFor(w));
                }
                if !waits[v].is_empty() || e.syncs_before() {
                    dirty.clear();
                }
                let reads = e.inputs.iter().filter(|l| l.peer.is_none()).map(|l| (l.buf, false));
                let writes = e.outputs.iter().filter(|l| l.peer.is_none()).map(|l| (l.buf, true));
                let access: Vec<(BufRef, bool)> = reads.chain(writes).collect();
                let hazard = access.iter().any(|(a, wa)| dirty.iter().any(|(b, wb)| (*wa || *wb) && a.overlaps(b)));
                if hazard {
                    out.push(Entry::Nop);
                    dirty.clear();
                }
                dirty.extend(access);
                if e.signal.is_some() {
                    dirty.clear();
                }
                index[v] = out.len() as u32;
                out.push(Entry::Node(v));
            }
            if out.len() > limits::MAX_OPS_PER_THREADBLOCK {
                return Err(CompileError::Limit {
                    rank: rank as u32,
                    what: "operations in a thread block",
                    value: out.len() as u64,
                    max: limits::MAX_OPS_PER_THREADBLOCK as u64,
                });
            }
            rank_entries.push(out);
        }
        entries.push(rank_entries);
    }

    let mut ranks_out: Vec<RankPlan> = entries
        .into_iter()
        .enumerate()
        .map(|(rank, tbs)| RankPlan {
            rank: rank as u32,
            scratch: graph.scratch[rank].clone(),
            threadblocks: tbs
                .into_iter()
                .enumerate()
                .map(|(id, list)| ThreadBlock {
                    id: id as u32,
                    ops: list
                        .into_iter()
                        .map(|entry| match entry {
                            Entry::WaitFor(a) => Op::WaitTb { tb: schedule.tb[a], step: index[a] },
                            Entry::Nop => Op::Nop,
                            Entry::Node(v) => nodes[v].op.clone(),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    compact_scratch(&mut ranks_out);

    Ok(ExecutionPlan {
        version: PLAN_VERSION,
        name: program.name().to_string(),
        collective: collective.kind(),
        nranks: collective.nranks(),
        size_classes: collective.size_classes(),
        input_chunks: collective.input_chunks(),
        output_chunks: collective.output_chunks(),
        protocol: program.protocol(),
        ranks: ranks_out,
    })
}

/// Drops scratch chunks no operation touches (results that fusion never stores) and renumbers
/// the rest. Every chunk of a referenced range is referenced, so the monotone renumbering keeps
/// ranges contiguous.
fn compact_scratch(ranks: &mut [RankPlan]) {
    let mut used: Vec<Vec<bool>> = ranks.iter().map(|r| vec![false; r.scratch.len()]).collect();
    for rank in ranks.iter_mut() {
        let me = rank.rank;
        for op in rank.threadblocks.iter_mut().flat_map(|t| t.ops.iter_mut()) {
            op.for_each_ref_mut(|peer, r| {
                if r.buffer == Buffer::Scratch {
                    let slots = &mut used[peer.unwrap_or(me) as usize];
                    for i in r.index..r.index + r.count {
                        slots[i as usize] = true;
                    }
                }
            });
        }
    }
    let remap: Vec<Vec<u32>> = used
        .iter()
        .map(|u| {
            let mut next = 0u32;
            u.iter()
                .map(|&x| {
                    let at = next;
                    next += u32::from(x);
                    at
                })
                .collect()
        })
        .collect();
    for rank in ranks.iter_mut() {
        let me = rank.rank;
        for op in rank.threadblocks.iter_mut().flat_map(|t| t.ops.iter_mut()) {
            op.for_each_ref_mut(|peer, r| {
                if r.buffer == Buffer::Scratch {
                    r.index = remap[peer.unwrap_or(me) as usize][r.index as usize];
                }
            });
        }
        let keep = &used[me as usize];
        let scratch = std::mem::take(&mut rank.scratch);
        rank.scratch = scratch.into_iter().zip(keep).filter_map(|(class, &k)| k.then_some(class)).collect();
    }
}
