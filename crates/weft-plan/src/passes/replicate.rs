//! Pass 2: instance replication (and pipelined tiles), of a chunk-level trace before it is
//! scheduled, or of a channel-level plan as written.

use super::CompileError;
use crate::dsl::trace::{ChunkRange, Trace};
use std::collections::BTreeSet;

use crate::dsl::{Collective, DslError, Hints};
use crate::plan::{Buffer, ExecutionPlan, Op, ThreadBlock};

/// First sub-chunk of instance `s`, tile `k` of the chunk range `[index, index + count)` once
/// every chunk is split into `instances * tiles` sub-chunks: each instance moves a contiguous
/// `1/instances` of the range, in `tiles` consecutive pieces of `count` sub-chunks.
fn sub_index(index: u32, count: u32, (instances, tiles): (u32, u32), s: u32, k: u32) -> u32 {
    index * instances * tiles + (s * tiles + k) * count
}

/// Replays `trace` with every chunk split into `instances * tiles` sub-chunks.
///
/// Operation `op` on chunks `[i, i + c)` becomes, for each instance `s` and tile `k`, the same
/// operation on sub-chunks `[i * m + (s * t + k) * c, ... + c)` (m = `instances * tiles`, t =
/// `tiles`): each instance moves a contiguous `1/n` of the data, in `t` consecutive tiles.
/// Instance `s` of channel `ch` uses channel `ch * n + s`, and thread block hints are mapped the
/// same way, so instances never share a connection; the tiles of one instance share its
/// channels and thread blocks, so a thread block works through them in the scheduler's order
/// (depth first), and a tile's next hop overlaps the next tile's transfer: a pipelined loop.
/// The replay re-runs the symbolic execution, so dependencies and values are recomputed
/// exactly.
pub(super) fn replay(
    trace: &Trace,
    collective: &Collective,
    instances: u32,
    tiles: u32,
) -> Result<Trace, CompileError> {
    let (n, t) = (instances, tiles);
    let mut out = Trace::new(collective);
    for op in &trace.ops {
        for s in 0..n {
            let hints = Hints {
                channel: Some(op.hints.channel.unwrap_or(0) * n + s),
                src_tb: op.hints.src_tb.map(|tb| tb * n + s),
                dst_tb: op.hints.dst_tb.map(|tb| tb * n + s),
            };
            for k in 0..t {
                let map = |r: ChunkRange| ChunkRange { index: sub_index(r.index, r.count, (n, t), s, k), ..r };
                out.apply(op.kind, map(op.src), op.local.map(map), map(op.dst), hints).map_err(CompileError::Replay)?;
            }
        }
    }
    out.finish();
    Ok(out)
}

/// A channel-level plan replicated as MSCCL++ replicates a program: thread block `b` becomes
/// thread blocks `b * instances + s`, instance `s` on channel `c * instances + s` of every link
/// and on its sub-chunks (as [`replay`] maps them), so instances share no connection and no
/// thread block. With `tiles > 1` each instance's thread block runs its operations once per
/// tile, tile after tile, on the tile's sub-chunks (a pipelined loop: a thread block works on
/// its next tile while its peers still handle the last); `wait_tb` steps move with the tiles.
/// The result is verified by the caller like any plan.
///
/// A range of several chunks is split into contiguous pieces, so every operation touching one
/// of its chunks must name the same range: a plan that copies `scratch[0..2]` and then sends
/// `scratch[1]` alone is refused (its instances would not meet on the same sub-chunks).
pub(crate) fn replicate_plan(plan: &ExecutionPlan, instances: u32, tiles: u32) -> Result<ExecutionPlan, CompileError> {
    ranges_are_whole(plan)?;
    let (n, t) = (instances, tiles);
    let m = n * t;
    let mut out = plan.clone();
    out.size_classes *= m;
    out.input_chunks *= m;
    out.output_chunks *= m;
    for rank in &mut out.ranks {
        // Scratch chunk j of class c becomes sub-chunks j * m + x of classes c * m + x, as input
        // and output chunks do (their class is the index modulo the classes).
        rank.scratch = rank.scratch.iter().flat_map(|&c| (0..m).map(move |x| c * m + x)).collect();
        let lengths: Vec<u32> = rank.threadblocks.iter().map(|b| b.ops.len() as u32).collect();
        let blocks = std::mem::take(&mut rank.threadblocks);
        for block in &blocks {
            for s in 0..n {
                let ops = (0..t).flat_map(|k| block.ops.iter().map(move |op| (k, op)));
                let ops = ops.map(|(k, op)| instance_op(op, (n, t), s, k, &lengths)).collect();
                rank.threadblocks.push(ThreadBlock { id: block.id * n + s, ops });
            }
        }
    }
    Ok(out)
}

/// Every two chunk ranges of one buffer that share a chunk are the same range.
fn ranges_are_whole(plan: &ExecutionPlan) -> Result<(), CompileError> {
    let mut ranges: BTreeSet<(u32, Buffer, u32, u32)> = BTreeSet::new();
    for rank in &plan.ranks {
        for op in rank.threadblocks.iter().flat_map(|b| &b.ops) {
            let e = op.effects();
            for loc in e.inputs.iter().chain(&e.outputs) {
                ranges.insert((loc.peer.unwrap_or(rank.rank), loc.buf.buffer, loc.buf.index, loc.buf.count));
            }
        }
    }
    let ranges: Vec<_> = ranges.into_iter().collect();
    for pair in ranges.windows(2) {
        let ((rank, buffer, a, count), (r2, b2, b, _)) = (pair[0], pair[1]);
        if (rank, buffer) == (r2, b2) && b < a + count {
            let show = |i: u32, c: u32| if c == 1 { format!("{i}") } else { format!("{i}..{}", i + c) };
            let other = pair[1].3;
            return Err(CompileError::Program(DslError::Constraint {
                algorithm: "instances",
                reason: format!(
                    "rank {rank} {buffer}[{}] and {buffer}[{}] share chunks but are not the same range; \
                     instances split a range into contiguous pieces, so write it with ranges that are \
                     equal or disjoint (or use one instance and one tile)",
                    show(a, count),
                    show(b, other)
                ),
            }));
        }
    }
    Ok(())
}

/// `op` of instance `s`, tile `k`: its chunks, channels and `wait_tb` mapped.
fn instance_op(op: &Op, shape: (u32, u32), s: u32, k: u32, lengths: &[u32]) -> Op {
    let mut op = op.clone();
    op.for_each_ref_mut(|_, r| r.index = sub_index(r.index, r.count, shape, s, k));
    op.for_each_link_mut(|l| l.channel = l.channel * shape.0 + s);
    if let Op::WaitTb { tb, step } = &mut op {
        *step += k * lengths.get(*tb as usize).copied().unwrap_or(0);
        *tb = *tb * shape.0 + s;
    }
    op
}
