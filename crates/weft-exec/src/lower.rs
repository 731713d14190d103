//! Execution plan → interpreter-kernel operations. Every plan operation is lowered through its
//! [`Effects`] (wait, inputs, outputs, signal), so the kernel sees one operation form; decoding
//! a lowered operation ([`effects`]) gives back exactly the plan operation's effects.

use thiserror::Error;
use weft_plan::plan::{BufRef, Buffer, Effects, ExecutionPlan, Link, Loc, Part, Protocol, packet_input};
use weft_types::{
    EXEC_BARRIER, EXEC_FLUSH, EXEC_LOC_PACKETS, EXEC_LOCAL, EXEC_MAX_INPUTS, EXEC_MAX_OUTPUTS, EXEC_PART_SHIFT,
    EXEC_PARTS_SHIFT, EXEC_PORT_PUT, EXEC_PUBLISH, EXEC_SIGNAL, EXEC_SIGNAL_PORT, EXEC_WAIT_LINK, EXEC_WAIT_PORT,
    EXEC_WAIT_TB, ExecLoc, ExecOp,
};

/// Why a plan cannot run on the executor.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LowerError {
    /// An operation folds or writes more locations than an [`ExecOp`] holds.
    #[error("rank {rank} thread block {tb} op {step} ({op}): {count} {what}, the executor takes at most {max}")]
    TooMany {
        /// Rank.
        rank: u32,
        /// Thread block.
        tb: u32,
        /// Operation index.
        step: u32,
        /// The operation's name.
        op: &'static str,
        /// `inputs` or `outputs`.
        what: &'static str,
        /// How many it has.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A peer, channel or index does not fit its field.
    #[error(
        "rank {rank} thread block {tb} op {step}: {what} {value} does not fit the executor's field (at most {max})"
    )]
    OutOfRange {
        /// Rank.
        rank: u32,
        /// Thread block.
        tb: u32,
        /// Operation index.
        step: u32,
        /// Which value.
        what: &'static str,
        /// The value.
        value: u64,
        /// The largest the field holds.
        max: u64,
    },
}

/// What one rank's interpreter kernel runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRankPlan {
    /// Thread block `t` runs `ops[tb_starts[t]..tb_starts[t + 1]]`.
    pub tb_starts: Vec<u32>,
    /// Every thread block's operations, concatenated.
    pub ops: Vec<ExecOp>,
    /// Where scratch chunks lie for any size: row `i` (`0..=scratch chunks`) holds, per size
    /// class, how many scratch chunks before chunk `i` have that class (row-major, one row per
    /// chunk plus a final row: the whole scratch). See [`crate::geometry`].
    pub scratch_class_counts: Vec<u32>,
    /// Every memory link this rank waits on or signals, as `(peer, channel)`, sorted: the
    /// semaphores the executor sets up.
    pub links: Vec<(u32, u32)>,
    /// Every port link of this rank, as `(peer, channel)`, sorted: those its operations use and
    /// those its peers' operations use towards it (a port put needs the channel at both ends
    /// even when nothing waits on it). The port channels the executor sets up.
    pub ports: Vec<(u32, u32)>,
}

/// A lowered plan: every rank's [`DeviceRankPlan`] and the plan's chunk geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePlan {
    /// The plan's name.
    pub name: String,
    /// Size classes of its chunks.
    pub size_classes: u32,
    /// Chunks of every input buffer.
    pub input_chunks: u32,
    /// Chunks of every output buffer.
    pub output_chunks: u32,
    /// Links carry LL packets ([`Protocol::Ll`]): receives poll their staged chunk
    /// ([`EXEC_LOC_PACKETS`]), sends write packets, scratch chunks take twice their bytes.
    pub packets: bool,
    /// Per rank.
    pub ranks: Vec<DeviceRankPlan>,
}

fn buffer_code(b: Buffer) -> u8 {
    match b {
        Buffer::Input => 0,
        Buffer::Output => 1,
        Buffer::Scratch => 2,
    }
}

fn buffer_of(code: u8) -> Buffer {
    match code {
        0 => Buffer::Input,
        1 => Buffer::Output,
        _ => Buffer::Scratch,
    }
}

/// Lowers a plan (validated by its loader or compiler) for the interpreter kernel.
pub fn lower(plan: &ExecutionPlan) -> Result<DevicePlan, LowerError> {
    let classes = plan.size_classes.max(1) as usize;
    let mut ranks = Vec::with_capacity(plan.ranks.len());
    for rank_plan in &plan.ranks {
        let rank = rank_plan.rank;
        let mut tb_starts = vec![0u32];
        let mut ops = Vec::new();
        let mut links = Vec::new();
        for tb in &rank_plan.threadblocks {
            for (step, op) in tb.ops.iter().enumerate() {
                let at = Site { rank, tb: tb.id, step: step as u32 };
                let effects = op.effects();
                // Memory links get a semaphore each, except under LL, where the receiver polls
                // the packets themselves and the kernel touches no semaphore.
                if plan.protocol != Protocol::Ll {
                    links.extend(
                        effects.wait.iter().chain(&effects.signal).filter(|l| !l.port).map(|l| (l.peer, l.channel)),
                    );
                }
                let mut x = encode(&effects, op.name(), at)?;
                if plan.protocol == Protocol::Ll {
                    mark_packets(&mut x, packet_input(op));
                }
                x.packets = x.packet_mask();
                ops.push(x);
            }
            tb_starts.push(u32::try_from(ops.len()).map_err(|_| at_plan(rank, tb.id, "operations", ops.len()))?);
        }
        mark_published(rank, &tb_starts, &mut ops)?;
        links.sort_unstable();
        links.dedup();
        let mut counts = vec![0u32; classes];
        let mut scratch_class_counts = counts.clone();
        for &class in &rank_plan.scratch {
            counts[class as usize % classes] += 1;
            scratch_class_counts.extend_from_slice(&counts);
        }
        ranks.push(DeviceRankPlan { tb_starts, ops, scratch_class_counts, links, ports: Vec::new() });
    }
    for (rank, ports) in port_links(plan).into_iter().enumerate() {
        ranks[rank].ports = ports;
    }
    Ok(DevicePlan {
        name: plan.name.clone(),
        size_classes: plan.size_classes,
        input_chunks: plan.input_chunks,
        output_chunks: plan.output_chunks,
        packets: plan.protocol == Protocol::Ll,
        ranks,
    })
}

/// Per rank, its port links and its peers' towards it, as `(peer, channel)`, sorted.
fn port_links(plan: &ExecutionPlan) -> Vec<Vec<(u32, u32)>> {
    let mut ports = vec![Vec::new(); plan.ranks.len()];
    for rank_plan in &plan.ranks {
        for op in rank_plan.threadblocks.iter().flat_map(|tb| &tb.ops) {
            let e = op.effects();
            for l in [e.wait, e.signal, e.via, e.flush].into_iter().flatten().filter(|l| l.port) {
                ports[rank_plan.rank as usize].push((l.peer, l.channel));
                if let Some(theirs) = ports.get_mut(l.peer as usize) {
                    theirs.push((rank_plan.rank, l.channel));
                }
            }
        }
    }
    for p in &mut ports {
        p.sort_unstable();
        p.dedup();
    }
    ports
}

/// Marks an LL operation's packet locations: the staged input its link wait covers (the
/// loader checked that the k-th send on the link wrote exactly it) and every output in a peer.
fn mark_packets(op: &mut ExecOp, staged: Option<BufRef>) {
    let waits = op.flags & EXEC_WAIT_LINK != 0;
    let n = usize::from(op.n_inputs);
    for loc in &mut op.inputs[..n] {
        let local = loc.peer == EXEC_LOCAL;
        if waits && local && staged == Some(BufRef::new(buffer_of(loc.buffer), loc.chunk, loc.count)) {
            loc.flags |= EXEC_LOC_PACKETS;
        }
    }
    let n = usize::from(op.n_outputs);
    for loc in op.outputs[..n].iter_mut().filter(|l| l.peer != EXEC_LOCAL) {
        loc.flags |= EXEC_LOC_PACKETS;
    }
}

/// Sets [`EXEC_PUBLISH`] on exactly the operations another thread block waits for: the
/// kernel's step store is a .sys release, paid only where someone reads it. A wait is for "at
/// least this step", so publishing those steps alone is enough.
fn mark_published(rank: u32, tb_starts: &[u32], ops: &mut [ExecOp]) -> Result<(), LowerError> {
    let waited: Vec<(u32, u32)> =
        ops.iter().filter(|o| o.flags & EXEC_WAIT_TB != 0).map(|o| (o.wait_tb, o.wait_step)).collect();
    for (tb, step) in waited {
        let range = tb_starts.get(tb as usize).copied().zip(tb_starts.get(tb as usize + 1).copied());
        let at = range.and_then(|(first, end)| first.checked_add(step).filter(|&i| i < end));
        let ops_in_tb = range.map_or(0, |(first, end)| end - first);
        let missing = LowerError::OutOfRange {
            rank,
            tb,
            step,
            what: "awaited step",
            value: step.into(),
            max: u64::from(ops_in_tb.saturating_sub(1)),
        };
        ops[at.ok_or(missing)? as usize].flags |= EXEC_PUBLISH;
    }
    Ok(())
}

/// Where an operation is, for errors.
#[derive(Clone, Copy)]
struct Site {
    rank: u32,
    tb: u32,
    step: u32,
}

fn at_plan(rank: u32, tb: u32, what: &'static str, value: usize) -> LowerError {
    LowerError::OutOfRange { rank, tb, step: 0, what, value: value as u64, max: u64::from(u32::MAX) }
}

fn narrow16(value: u32, what: &'static str, at: Site) -> Result<u16, LowerError> {
    u16::try_from(value).ok().filter(|&v| v != EXEC_LOCAL).ok_or(LowerError::OutOfRange {
        rank: at.rank,
        tb: at.tb,
        step: at.step,
        what,
        value: value.into(),
        max: u64::from(EXEC_LOCAL - 1),
    })
}

fn encode_loc(loc: &Loc, at: Site) -> Result<ExecLoc, LowerError> {
    let peer = match loc.peer {
        None => EXEC_LOCAL,
        Some(p) => narrow16(p, "peer", at)?,
    };
    Ok(ExecLoc { chunk: loc.buf.index, count: loc.buf.count, peer, buffer: buffer_code(loc.buf.buffer), flags: 0 })
}

fn fill<const N: usize>(
    locs: &[Loc],
    at: Site,
    op: &'static str,
    what: &'static str,
) -> Result<([ExecLoc; N], u8), LowerError> {
    const { assert!(N <= u8::MAX as usize, "the location count must fit ExecOp's u8 field") };
    if locs.len() > N {
        return Err(LowerError::TooMany {
            rank: at.rank,
            tb: at.tb,
            step: at.step,
            op,
            what,
            count: locs.len(),
            max: N,
        });
    }
    let mut out = [ExecLoc::default(); N];
    for (slot, loc) in out.iter_mut().zip(locs) {
        *slot = encode_loc(loc, at)?;
    }
    // locs.len() <= N <= u8::MAX (asserted at compile time above).
    Ok((out, locs.len() as u8))
}

fn encode(e: &Effects, op: &'static str, at: Site) -> Result<ExecOp, LowerError> {
    let (inputs, n_inputs) = fill::<EXEC_MAX_INPUTS>(&e.inputs, at, op, "inputs")?;
    let (outputs, n_outputs) = fill::<EXEC_MAX_OUTPUTS>(&e.outputs, at, op, "outputs")?;
    let mut x = ExecOp { inputs, outputs, n_inputs, n_outputs, ..ExecOp::default() };
    if let Some(l) = e.wait {
        x.flags |= EXEC_WAIT_LINK | if l.port { EXEC_WAIT_PORT } else { 0 };
        x.wait_peer = narrow16(l.peer, "peer", at)?;
        x.wait_channel = narrow16(l.channel, "channel", at)?;
    }
    if let Some((tb, step)) = e.wait_tb {
        x.flags |= EXEC_WAIT_TB;
        (x.wait_tb, x.wait_step) = (tb, step);
    }
    if e.barrier {
        x.flags |= EXEC_BARRIER;
    }
    if let Some(p) = e.part {
        // The plan's validation keeps part counts at most MAX_PARTS (64): 8 bits each.
        x.flags |= (p.index & 0xff) << EXEC_PART_SHIFT | (p.count & 0xff) << EXEC_PARTS_SHIFT;
    }
    // One outbound link per operation: a port put's, signal's and flush's are the same (the
    // plan's validation allows no other port operation).
    let outbound = [(e.signal, EXEC_SIGNAL), (e.via, EXEC_PORT_PUT), (e.flush, EXEC_FLUSH)];
    for (l, flag) in outbound.into_iter().filter_map(|(l, f)| Some((l?, f))) {
        x.flags |= flag | if l.port { EXEC_SIGNAL_PORT } else { 0 };
        x.signal_peer = narrow16(l.peer, "peer", at)?;
        x.signal_channel = narrow16(l.channel, "channel", at)?;
    }
    Ok(x)
}

fn decode_loc(l: &ExecLoc) -> Loc {
    Loc {
        peer: (l.peer != EXEC_LOCAL).then_some(u32::from(l.peer)),
        buf: BufRef::new(buffer_of(l.buffer), l.chunk, l.count),
    }
}

/// The effects a lowered operation has (the inverse of lowering).
pub fn effects(op: &ExecOp) -> Effects {
    let has = |flag| op.flags & flag != 0;
    let link = |peer: u16, channel: u16, port| Link { peer: peer.into(), channel: channel.into(), port };
    let outbound = link(op.signal_peer, op.signal_channel, has(EXEC_SIGNAL_PORT));
    Effects {
        wait: has(EXEC_WAIT_LINK).then(|| link(op.wait_peer, op.wait_channel, has(EXEC_WAIT_PORT))),
        wait_tb: has(EXEC_WAIT_TB).then_some((op.wait_tb, op.wait_step)),
        barrier: has(EXEC_BARRIER),
        inputs: op.used_inputs().iter().map(decode_loc).collect(),
        outputs: op.used_outputs().iter().map(decode_loc).collect(),
        signal: has(EXEC_SIGNAL).then_some(outbound),
        via: has(EXEC_PORT_PUT).then_some(outbound),
        flush: has(EXEC_FLUSH).then_some(outbound),
        part: exec_part(op),
    }
}

/// The part of every chunk a lowered operation moves (`None`: whole chunks).
pub fn exec_part(op: &ExecOp) -> Option<Part> {
    let count = op.flags >> EXEC_PARTS_SHIFT;
    (count != 0).then(|| Part::new((op.flags >> EXEC_PART_SHIFT) & 0xff, count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::shipped;

    #[test]
    fn lowering_is_a_re_encoding_of_every_shipped_plan() {
        for plan in shipped() {
            let lowered = lower(&plan).unwrap();
            assert_eq!(lowered.ranks.len(), plan.ranks.len());
            for (rp, dp) in plan.ranks.iter().zip(&lowered.ranks) {
                assert_eq!(dp.tb_starts.len(), rp.threadblocks.len() + 1);
                let originals: Vec<_> = rp.threadblocks.iter().flat_map(|t| t.ops.iter()).collect();
                assert_eq!(originals.len(), dp.ops.len(), "{}", plan.name);
                for (o, x) in originals.iter().zip(&dp.ops) {
                    assert_eq!(effects(x), o.effects(), "{} rank {}: {}", plan.name, rp.rank, o.name());
                }
                for (t, tb) in rp.threadblocks.iter().enumerate() {
                    let (a, b) = (dp.tb_starts[t] as usize, dp.tb_starts[t + 1] as usize);
                    assert_eq!(b - a, tb.ops.len());
                }
                let waits_or_signals =
                    originals.iter().any(|o| o.effects().wait.is_some() || o.effects().signal.is_some());
                let semaphores = waits_or_signals && plan.protocol != Protocol::Ll;
                assert_eq!(!dp.links.is_empty() || !dp.ports.is_empty(), semaphores, "{}", plan.name);
            }
        }
    }

    /// Exactly the steps another thread block waits for are published.
    #[test]
    fn only_awaited_steps_are_published() {
        for plan in shipped() {
            for dp in lower(&plan).unwrap().ranks {
                let mut awaited = std::collections::BTreeSet::new();
                for op in dp.ops.iter().filter(|o| o.flags & EXEC_WAIT_TB != 0) {
                    awaited.insert((dp.tb_starts[op.wait_tb as usize] + op.wait_step) as usize);
                }
                let published: std::collections::BTreeSet<usize> =
                    (0..dp.ops.len()).filter(|&i| dp.ops[i].flags & EXEC_PUBLISH != 0).collect();
                assert_eq!(published, awaited, "{}", plan.name);
            }
        }
        // Some shipped plan waits for another thread block (the flag is exercised).
        let hier = lower(&weft_plan::plans::hierarchical_allreduce(4, 2, 1).unwrap().compile().unwrap()).unwrap();
        assert!(hier.ranks.iter().flat_map(|r| &r.ops).any(|o| o.flags & EXEC_PUBLISH != 0));
    }

    #[test]
    fn an_operation_beyond_the_limits_is_an_error_naming_it() {
        let mut plan = weft_plan::plans::allpairs_allreduce(8, 1).unwrap().compile().unwrap();
        // Make one reduce fold more inputs than an ExecOp holds.
        let srcs: Vec<BufRef> = (0..5).map(|i| BufRef::new(Buffer::Input, i, 1)).collect();
        let dst = BufRef::new(Buffer::Output, 0, 1);
        plan.ranks[2].threadblocks[0].ops.push(weft_plan::plan::Op::Reduce { srcs, dst });
        let err = lower(&plan).unwrap_err();
        assert!(matches!(err, LowerError::TooMany { rank: 2, tb: 0, count: 5, max: 4, .. }), "{err}");
        assert!(err.to_string().contains("rank 2 thread block 0"), "{err}");
    }
}
