//! Pass 3: chunk DAG → instruction DAG, with send/receive pairs and staging.

use std::collections::BTreeSet;

use crate::dsl::Buffer;
use crate::dsl::trace::{ChunkRange, Trace, TraceKind};
use crate::plan::{BufRef, Link};

/// One remote transfer: a send on `from` paired with a receive on `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Transfer {
    pub(super) from: u32,
    pub(super) to: u32,
    pub(super) channel: u32,
}

impl Transfer {
    /// The link as seen by the sender.
    pub(super) fn out_link(&self) -> Link {
        Link::new(self.to, self.channel)
    }

    /// The link as seen by the receiver.
    pub(super) fn in_link(&self) -> Link {
        Link::new(self.from, self.channel)
    }

    /// `(from, to, channel)`.
    pub(super) fn key(&self) -> (u32, u32, u32) {
        (self.from, self.to, self.channel)
    }
}

/// What the receiver does once the data has arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Landing {
    /// The sender put the data straight into its destination.
    Direct(BufRef),
    /// The data was staged; copy it to `dst`.
    Copy { staged: BufRef, dst: BufRef },
    /// The data was staged; `dst := local ⊕ staged`.
    Reduce { local: BufRef, staged: BufRef, dst: BufRef },
}

impl Landing {
    /// Where the received (or reduced) value ends up.
    pub(super) fn result(&self) -> BufRef {
        match *self {
            Landing::Direct(dst) | Landing::Copy { dst, .. } | Landing::Reduce { dst, .. } => dst,
        }
    }
}

/// One instruction of one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Instr {
    Copy { src: BufRef, dst: BufRef },
    Reduce { a: BufRef, b: BufRef, dst: BufRef },
    Send { src: BufRef, remote: BufRef, xfer: usize },
    Recv { landing: Landing, xfer: usize },
}

/// An instruction with its rank, origin and dependencies.
#[derive(Clone, Debug)]
pub(super) struct InstrNode {
    pub(super) rank: u32,
    pub(super) instr: Instr,
    /// The traced operation it comes from.
    pub(super) op: usize,
    /// Earlier instructions it depends on (same rank, or the matching send).
    pub(super) deps: BTreeSet<usize>,
    pub(super) tb_hint: Option<u32>,
}

/// The instruction DAG. Instruction ids are a topological order.
#[derive(Clone, Debug)]
pub(super) struct Lowered {
    pub(super) instrs: Vec<InstrNode>,
    pub(super) transfers: Vec<Transfer>,
    /// Size class of every scratch chunk of every rank (program scratch, then staging).
    pub(super) scratch: Vec<Vec<u32>>,
}

fn buf(r: &ChunkRange) -> BufRef {
    BufRef::new(r.buffer, r.index, r.count)
}

/// Lowers every traced operation; see the [pass list](super) for the rules. With
/// `always_stage` (LL packets) every transfer is staged, even a copy into a fresh location.
pub(super) fn lower(trace: &Trace, always_stage: bool) -> Lowered {
    let mut scratch: Vec<Vec<u32>> = (0..trace.nranks)
        .map(|r| {
            (0..trace.scratch_len(r))
                .map(|i| trace.slot(r, Buffer::Scratch, i).and_then(|s| s.class).unwrap_or(0))
                .collect()
        })
        .collect();
    let mut out = Lowered { instrs: Vec::new(), transfers: Vec::new(), scratch: Vec::new() };
    // sides[op] = [(rank, instr)] : the instruction of `op` on each rank it touches.
    let mut sides: Vec<Vec<(u32, usize)>> = Vec::with_capacity(trace.ops.len());
    for (id, op) in trace.ops.iter().enumerate() {
        let src_rank = op.src.rank;
        let dst_rank = op.dst.rank;
        let mut push = |rank, instr, tb_hint| {
            out.instrs.push(InstrNode { rank, instr, op: id, deps: BTreeSet::new(), tb_hint });
            out.instrs.len() - 1
        };
        let mut side = Vec::new();
        if src_rank == dst_rank {
            let instr = match (op.kind, op.local) {
                (TraceKind::Reduce, Some(local)) => {
                    Instr::Reduce { a: buf(&local), b: buf(&op.src), dst: buf(&op.dst) }
                }
                _ => Instr::Copy { src: buf(&op.src), dst: buf(&op.dst) },
            };
            let hint = op.hints.dst_tb.or(op.hints.src_tb);
            side.push((dst_rank, push(dst_rank, instr, hint)));
        } else {
            let xfer = out.transfers.len();
            out.transfers.push(Transfer { from: src_rank, to: dst_rank, channel: op.hints.channel.unwrap_or(0) });
            let direct = op.kind == TraceKind::Copy && op.dst_virgin && !always_stage;
            let remote = if direct {
                buf(&op.dst)
            } else {
                // A fresh staging run in the receiver's scratch, with the data's size classes.
                let classes = &mut scratch[dst_rank as usize];
                let index = classes.len() as u32;
                classes.extend(op.src.slots().map(|(r, b, i)| trace.slot(r, b, i).and_then(|s| s.class).unwrap_or(0)));
                BufRef::new(Buffer::Scratch, index, op.src.count)
            };
            let landing = match (op.kind, op.local) {
                (TraceKind::Reduce, Some(local)) => {
                    Landing::Reduce { local: buf(&local), staged: remote, dst: buf(&op.dst) }
                }
                _ if direct => Landing::Direct(remote),
                _ => Landing::Copy { staged: remote, dst: buf(&op.dst) },
            };
            let send = push(src_rank, Instr::Send { src: buf(&op.src), remote, xfer }, op.hints.src_tb);
            let recv = push(dst_rank, Instr::Recv { landing, xfer }, op.hints.dst_tb);
            out.instrs[recv].deps.insert(send);
            side.push((src_rank, send));
            side.push((dst_rank, recv));
        }
        // A conflict on `rank` means both operations touch that rank, so both have an
        // instruction there.
        for &(pred, rank) in &op.deps {
            let from = sides[pred].iter().find(|(r, _)| *r == rank).map(|s| s.1);
            let to = side.iter().find(|(r, _)| *r == rank).map(|s| s.1);
            if let (Some(from), Some(to)) = (from, to) {
                out.instrs[to].deps.insert(from);
            }
        }
        sides.push(side);
    }
    out.scratch = scratch;
    out
}
