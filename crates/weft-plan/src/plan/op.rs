//! Plan operations and their normalised effects.
//!
//! Every operation of a thread block is one [`Op`]. The interpreter, the loader's validation and
//! the static verifier never match on `Op` variants for data movement: they ask
//! [`Op::effects`], which describes any operation as the same four phases:
//!
//! 1. wait: for an inbound signal on a link, for another thread block, or for a rank barrier;
//! 2. read every input, fold them element-wise with the reduction operator (one input = copy);
//! 3. write the result to every output (local or on a peer);
//! 4. signal a link, which publishes to the peer every write that happens before the signal:
//!    the thread block's own earlier writes and those it has waited for (happens-before is
//!    transitive across `wait_tb`, `barrier` and link waits, as with release/acquire fences).

use std::fmt;

use serde::{Deserialize, Serialize};

/// One of the three buffers every rank has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Buffer {
    /// The user's send buffer. Read-only for plans: no operation may write it.
    Input,
    /// The user's receive buffer.
    Output,
    /// Temporary memory owned by the executor, sized from the plan.
    Scratch,
}

impl Buffer {
    /// The three buffers, in a fixed order (used to index per-buffer tables).
    pub const ALL: [Buffer; 3] = [Buffer::Input, Buffer::Output, Buffer::Scratch];

    /// Position of this buffer in [`Buffer::ALL`].
    pub fn position(self) -> usize {
        match self {
            Buffer::Input => 0,
            Buffer::Output => 1,
            Buffer::Scratch => 2,
        }
    }

    /// Lower-case name, as used in listings and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Buffer::Input => "input",
            Buffer::Output => "output",
            Buffer::Scratch => "scratch",
        }
    }
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A run of `count` consecutive chunks of one buffer, starting at chunk `index`.
///
/// Indices are in chunks, never bytes: the element extent of a chunk is computed when a plan is
/// bound to a message size (see [`Geometry`](crate::plan::Geometry)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufRef {
    /// Which buffer.
    pub buffer: Buffer,
    /// First chunk.
    pub index: u32,
    /// Number of chunks (at least 1).
    pub count: u32,
}

impl BufRef {
    /// A reference to `count` chunks of `buffer` starting at `index`.
    pub fn new(buffer: Buffer, index: u32, count: u32) -> Self {
        Self { buffer, index, count }
    }

    /// One past the last chunk.
    pub fn end(&self) -> u64 {
        u64::from(self.index) + u64::from(self.count)
    }

    /// Whether the two references share a chunk of the same buffer.
    pub fn overlaps(&self, other: &BufRef) -> bool {
        self.buffer == other.buffer && u64::from(self.index) < other.end() && u64::from(other.index) < self.end()
    }
}

impl fmt::Display for BufRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count == 1 {
            write!(f, "{}[{}]", self.buffer, self.index)
        } else {
            write!(f, "{}[{}..{}]", self.buffer, self.index, self.end())
        }
    }
}

/// One direction of a connection: the peer rank, the channel number and the channel's kind.
///
/// A memory channel is a pair of semaphores between two ranks (one per direction) plus access to
/// the peer's buffers: threads move the data. A port channel (`port`) hands its puts, signals
/// and flushes to the rank's proxy, which moves the data with a copy engine (or a network) and
/// raises the peer's semaphore after it: a port put completes later, at the peer by the link's
/// next signal and locally by the link's next flush. Memory and port channels of one number are
/// different links. Within one rank, each (peer, channel, kind, direction) is owned by exactly
/// one thread block, so the k-th wait on a link always matches the peer's k-th signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// The other rank.
    pub peer: u32,
    /// The channel between the two ranks.
    pub channel: u32,
    /// A port channel (moved by the proxy) rather than a memory channel.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub port: bool,
}

impl Link {
    /// A memory-channel link to `peer` on `channel`.
    pub fn new(peer: u32, channel: u32) -> Self {
        Self { peer, channel, port: false }
    }

    /// A port-channel link to `peer` on `channel`.
    pub fn port(peer: u32, channel: u32) -> Self {
        Self { peer, channel, port: true }
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.port { "port" } else { "ch" };
        write!(f, "r{}/{kind}{}", self.peer, self.channel)
    }
}

/// Which part of every chunk an operation moves: part `index` of `count` balanced parts (a
/// member of a thread-block group). Parts of one chunk never overlap and together cover it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    /// This part, below `count`.
    pub index: u32,
    /// Parts of every chunk (the group's size).
    pub count: u32,
}

impl Part {
    /// Part `index` of `count`.
    pub fn new(index: u32, count: u32) -> Self {
        Self { index, count }
    }

    /// Elements `[start, end)` of a `len`-element range that this part holds (balanced, in
    /// order).
    pub fn of_len(&self, len: usize) -> std::ops::Range<usize> {
        let at = |k: u32| (len as u128 * u128::from(k) / u128::from(self.count.max(1))) as usize;
        at(self.index)..at(self.index + 1)
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "part {}/{}", self.index, self.count)
    }
}

/// One operation of a thread block.
///
/// Sync operations (`wait*`, `barrier`, and the leading wait of the fused receives) include a
/// block-wide barrier after the wait; operations that signal include a block-wide barrier before
/// the signal, so the signal covers every earlier write of the thread block. `nop` is a bare
/// block-wide barrier, inserted where two data operations of one thread block touch the same
/// chunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Block-wide barrier within the thread block.
    Nop,
    /// Barrier among all thread blocks of this rank.
    Barrier,
    /// Wait until thread block `tb` of this rank has completed its operation number `step`.
    WaitTb {
        /// The thread block waited for.
        tb: u32,
        /// Index of the operation in that thread block's list.
        step: u32,
    },
    /// `dst := src`, both local.
    Copy {
        /// Source.
        src: BufRef,
        /// Destination.
        dst: BufRef,
    },
    /// `dst := srcs[0] ⊕ srcs[1] ⊕ …`, all local.
    Reduce {
        /// Operands, at least two.
        srcs: Vec<BufRef>,
        /// Destination (may equal one operand).
        dst: BufRef,
    },
    /// Write local `src` into the peer's `dst`. No signal.
    Put {
        /// Local source.
        src: BufRef,
        /// Destination in the peer's buffers.
        dst: BufRef,
        /// The peer and channel.
        to: Link,
    },
    /// Read the peer's `src` into local `dst`.
    Get {
        /// Source in the peer's buffers.
        src: BufRef,
        /// Local destination.
        dst: BufRef,
        /// The peer and channel.
        from: Link,
    },
    /// `dst := local ⊕ remote`, reading `remote` from the peer's buffers.
    ReadReduce {
        /// Local operand.
        local: BufRef,
        /// Operand in the peer's buffers.
        remote: BufRef,
        /// Local destination.
        dst: BufRef,
        /// The peer and channel.
        from: Link,
    },
    /// Signal the peer on a link (release: covers every earlier write of this thread block).
    Signal {
        /// The link signalled.
        to: Link,
    },
    /// Wait for the next inbound signal on a link.
    Wait {
        /// The link waited on.
        from: Link,
    },
    /// Wait until every put and signal pushed on a port link before it is applied at the peer:
    /// their sources may be written again (PortChannel `flush`).
    Flush {
        /// The port link flushed.
        to: Link,
    },
    /// Put then signal (MSCCLang `send`).
    Send {
        /// Local source.
        src: BufRef,
        /// Destination in the peer's buffers.
        dst: BufRef,
        /// The peer and channel.
        to: Link,
    },
    /// Wait, then copy the staged data to its destination (MSCCLang `recv`).
    Recv {
        /// The link waited on.
        from: Link,
        /// Where the peer put the data (local).
        src: BufRef,
        /// Local destination.
        dst: BufRef,
    },
    /// Wait, then `dst := local ⊕ staged` (MSCCLang `recvReduceCopy`).
    Rrc {
        /// The link waited on.
        from: Link,
        /// Local operand.
        local: BufRef,
        /// Where the peer put its operand (local).
        staged: BufRef,
        /// Local destination.
        dst: BufRef,
    },
    /// Wait, copy `src` to `dst` (when present), put `src` to the next peer and signal it
    /// (MSCCLang `recvCopySend`).
    Rcs {
        /// The link waited on.
        from: Link,
        /// The received data (local).
        src: BufRef,
        /// Optional local copy of the received data.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dst: Option<BufRef>,
        /// The link the data is forwarded on.
        to: Link,
        /// Destination in the next peer's buffers.
        remote: BufRef,
    },
    /// Wait, `dst := local ⊕ staged`, put the result to the next peer and signal it
    /// (MSCCLang `recvReduceCopySend`).
    Rrcs {
        /// The link waited on.
        from: Link,
        /// Local operand.
        local: BufRef,
        /// Where the previous peer put its operand (local).
        staged: BufRef,
        /// Local destination of the result.
        dst: BufRef,
        /// The link the result is forwarded on.
        to: Link,
        /// Destination in the next peer's buffers.
        remote: BufRef,
    },
    /// `op` on one part of each of its chunks: the member `part.index` of a thread-block group of
    /// `part.count` thread blocks, whose other members move the other parts (MSCCL++'s
    /// `tbg_info`). Any operation that moves data, but not another part.
    Part {
        /// The part.
        part: Part,
        /// The operation.
        of: Box<Op>,
    },
    /// Wait, compute `local ⊕ staged`, put it to the next peer and signal it, without storing it
    /// locally (MSCCLang `recvReduceSend`).
    Rrs {
        /// The link waited on.
        from: Link,
        /// Local operand.
        local: BufRef,
        /// Where the previous peer put its operand (local).
        staged: BufRef,
        /// The link the result is forwarded on.
        to: Link,
        /// Destination in the next peer's buffers.
        remote: BufRef,
    },
    /// `srcs[0] ⊕ srcs[1] ⊕ …`, all local, stored in `dst` (when present) and put to the peer,
    /// then signal it: a reduce and the send of its result in one pass (MSCCL++'s
    /// reduce-send).
    ReduceSend {
        /// Operands, at least two.
        srcs: Vec<BufRef>,
        /// Optional local destination of the result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dst: Option<BufRef>,
        /// The link the result is sent on.
        to: Link,
        /// Destination in the peer's buffers.
        remote: BufRef,
    },
}

/// A chunk range on this rank (`peer == None`) or on a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    /// `None` for this rank's own buffers.
    pub peer: Option<u32>,
    /// The chunks.
    pub buf: BufRef,
}

impl Loc {
    fn local(buf: BufRef) -> Self {
        Self { peer: None, buf }
    }

    fn remote(peer: u32, buf: BufRef) -> Self {
        Self { peer: Some(peer), buf }
    }
}

/// What an operation does, phase by phase (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Inbound link whose next signal is awaited before anything else.
    pub wait: Option<Link>,
    /// `(tb, step)`: wait for another thread block of this rank.
    pub wait_tb: Option<(u32, u32)>,
    /// Whether this is a barrier among all thread blocks of the rank.
    pub barrier: bool,
    /// Values read and folded with the reduction operator, in order.
    pub inputs: Vec<Loc>,
    /// Locations that receive the result.
    pub outputs: Vec<Loc>,
    /// Outbound link signalled last.
    pub signal: Option<Link>,
    /// The port link whose proxy writes the outputs in the peer: the inputs are read and the
    /// peer's outputs written asynchronously, finished at the peer by the link's next signal
    /// and locally by its next flush.
    pub via: Option<Link>,
    /// Port link flushed last: every earlier put on it has completed.
    pub flush: Option<Link>,
    /// The part of every chunk the data phase moves (`None`: whole chunks).
    pub part: Option<Part>,
}

impl Effects {
    /// Whether the operation waits (on a link, a thread block or a barrier) before its data phase.
    pub fn syncs_before(&self) -> bool {
        self.wait.is_some() || self.wait_tb.is_some() || self.barrier
    }
}

impl Op {
    /// Short lower-case name of the operation kind, as in the JSON `op` field.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Nop => "nop",
            Op::Barrier => "barrier",
            Op::WaitTb { .. } => "wait_tb",
            Op::Copy { .. } => "copy",
            Op::Reduce { .. } => "reduce",
            Op::Put { .. } => "put",
            Op::Get { .. } => "get",
            Op::ReadReduce { .. } => "read_reduce",
            Op::Signal { .. } => "signal",
            Op::Wait { .. } => "wait",
            Op::Flush { .. } => "flush",
            Op::Send { .. } => "send",
            Op::Recv { .. } => "recv",
            Op::Rrc { .. } => "rrc",
            Op::Rcs { .. } => "rcs",
            Op::Rrcs { .. } => "rrcs",
            Op::Rrs { .. } => "rrs",
            Op::ReduceSend { .. } => "reduce_send",
            Op::Part { of, .. } => of.name(),
        }
    }

    /// The operation's effects, phase by phase.
    pub fn effects(&self) -> Effects {
        let l = Loc::local;
        let mut e = Effects::default();
        match *self {
            Op::Nop => {}
            Op::Barrier => e.barrier = true,
            Op::WaitTb { tb, step } => e.wait_tb = Some((tb, step)),
            Op::Copy { src, dst } => {
                e.inputs = vec![l(src)];
                e.outputs = vec![l(dst)];
            }
            Op::Reduce { ref srcs, dst } => {
                e.inputs = srcs.iter().copied().map(l).collect();
                e.outputs = vec![l(dst)];
            }
            Op::Put { src, dst, to } => {
                e.inputs = vec![l(src)];
                e.outputs = vec![Loc::remote(to.peer, dst)];
                e.via = to.port.then_some(to);
            }
            Op::Get { src, dst, from } => {
                e.inputs = vec![Loc::remote(from.peer, src)];
                e.outputs = vec![l(dst)];
            }
            Op::ReadReduce { local, remote, dst, from } => {
                e.inputs = vec![l(local), Loc::remote(from.peer, remote)];
                e.outputs = vec![l(dst)];
            }
            Op::Signal { to } => e.signal = Some(to),
            Op::Wait { from } => e.wait = Some(from),
            Op::Flush { to } => e.flush = Some(to),
            Op::Send { src, dst, to } => {
                e.inputs = vec![l(src)];
                e.outputs = vec![Loc::remote(to.peer, dst)];
                e.signal = Some(to);
                e.via = to.port.then_some(to);
            }
            Op::Recv { from, src, dst } => {
                e.wait = Some(from);
                e.inputs = vec![l(src)];
                e.outputs = vec![l(dst)];
            }
            Op::Rrc { from, local, staged, dst } => {
                e.wait = Some(from);
                e.inputs = vec![l(local), l(staged)];
                e.outputs = vec![l(dst)];
            }
            Op::Rcs { from, src, dst, to, remote } => {
                e.wait = Some(from);
                e.inputs = vec![l(src)];
                e.outputs = dst.into_iter().map(l).collect();
                e.outputs.push(Loc::remote(to.peer, remote));
                e.signal = Some(to);
            }
            Op::Rrcs { from, local, staged, dst, to, remote } => {
                e.wait = Some(from);
                e.inputs = vec![l(local), l(staged)];
                e.outputs = vec![l(dst), Loc::remote(to.peer, remote)];
                e.signal = Some(to);
            }
            Op::Rrs { from, local, staged, to, remote } => {
                e.wait = Some(from);
                e.inputs = vec![l(local), l(staged)];
                e.outputs = vec![Loc::remote(to.peer, remote)];
                e.signal = Some(to);
            }
            Op::ReduceSend { ref srcs, dst, to, remote } => {
                e.inputs = srcs.iter().copied().map(l).collect();
                e.outputs = dst.into_iter().map(l).collect();
                e.outputs.push(Loc::remote(to.peer, remote));
                e.signal = Some(to);
            }
            Op::Part { part, ref of } => {
                e = of.effects();
                e.part = Some(part);
            }
        }
        e
    }
}

impl Op {
    /// Calls `f` on every chunk reference of the operation, with the peer owning it (`None` for
    /// this rank's own buffers).
    pub fn for_each_ref_mut(&mut self, mut f: impl FnMut(Option<u32>, &mut BufRef)) {
        match self {
            Op::Nop | Op::Barrier | Op::WaitTb { .. } | Op::Signal { .. } | Op::Wait { .. } | Op::Flush { .. } => {}
            Op::Copy { src, dst } | Op::Recv { src, dst, .. } => {
                f(None, src);
                f(None, dst);
            }
            Op::Reduce { srcs, dst } => {
                srcs.iter_mut().for_each(|s| f(None, s));
                f(None, dst);
            }
            Op::Put { src, dst, to } | Op::Send { src, dst, to } => {
                f(None, src);
                f(Some(to.peer), dst);
            }
            Op::Get { src, dst, from } => {
                f(Some(from.peer), src);
                f(None, dst);
            }
            Op::ReadReduce { local, remote, dst, from } => {
                f(None, local);
                f(Some(from.peer), remote);
                f(None, dst);
            }
            Op::Rrc { local, staged, dst, .. } => {
                f(None, local);
                f(None, staged);
                f(None, dst);
            }
            Op::Rcs { src, dst, to, remote, .. } => {
                f(None, src);
                if let Some(dst) = dst {
                    f(None, dst);
                }
                f(Some(to.peer), remote);
            }
            Op::Rrcs { local, staged, dst, to, remote, .. } => {
                f(None, local);
                f(None, staged);
                f(None, dst);
                f(Some(to.peer), remote);
            }
            Op::Rrs { local, staged, to, remote, .. } => {
                f(None, local);
                f(None, staged);
                f(Some(to.peer), remote);
            }
            Op::ReduceSend { srcs, dst, to, remote } => {
                srcs.iter_mut().for_each(|s| f(None, s));
                if let Some(dst) = dst {
                    f(None, dst);
                }
                f(Some(to.peer), remote);
            }
            Op::Part { of, .. } => of.for_each_ref_mut(f),
        }
    }

    /// Calls `f` on every link the operation uses (waited on, signalled, put or read over).
    pub fn for_each_link_mut(&mut self, mut f: impl FnMut(&mut Link)) {
        match self {
            Op::Nop | Op::Barrier | Op::WaitTb { .. } | Op::Copy { .. } | Op::Reduce { .. } => {}
            Op::Put { to, .. }
            | Op::Send { to, .. }
            | Op::Signal { to }
            | Op::Flush { to }
            | Op::ReduceSend { to, .. } => f(to),
            Op::Get { from, .. }
            | Op::ReadReduce { from, .. }
            | Op::Wait { from }
            | Op::Recv { from, .. }
            | Op::Rrc { from, .. } => f(from),
            Op::Rcs { from, to, .. } | Op::Rrcs { from, to, .. } | Op::Rrs { from, to, .. } => {
                f(from);
                f(to);
            }
            Op::Part { of, .. } => of.for_each_link_mut(f),
        }
    }
}

/// Operands joined by ` + `.
struct Sum<'a>(&'a [BufRef]);

impl fmt::Display for Sum<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Op::Part { part, of } = self {
            return write!(f, "{} ({part})", of.to_string().trim_end());
        }
        // Names of 8 characters or more still get a space before their operands.
        write!(f, "{:<8}", self.name())?;
        if self.name().len() >= 8 {
            f.write_str(" ")?;
        }
        match self {
            Op::Nop | Op::Barrier => Ok(()),
            Op::WaitTb { tb, step } => write!(f, "tb{tb} #{step}"),
            Op::Copy { src, dst } => write!(f, "{src} -> {dst}"),
            Op::Reduce { srcs, dst } => write!(f, "{} -> {dst}", Sum(srcs)),
            Op::Put { src, dst, to } | Op::Send { src, dst, to } => {
                write!(f, "{src} -> {to} {dst}")
            }
            Op::Get { src, dst, from } => write!(f, "{from} {src} -> {dst}"),
            Op::ReadReduce { local, remote, dst, from } => write!(f, "{local} + {from} {remote} -> {dst}"),
            Op::Signal { to } => write!(f, "{to}"),
            Op::Wait { from } => write!(f, "{from}"),
            Op::Flush { to } => write!(f, "{to}"),
            Op::Recv { from, src, dst } => write!(f, "{from}: {src} -> {dst}"),
            Op::Rrc { from, local, staged, dst } => write!(f, "{from}: {local} + {staged} -> {dst}"),
            Op::Rcs { from, src, dst, to, remote } => {
                write!(f, "{from}: {src}")?;
                if let Some(dst) = dst {
                    write!(f, " -> {dst}")?;
                }
                write!(f, " => {to} {remote}")
            }
            Op::Rrcs { from, local, staged, dst, to, remote } => {
                write!(f, "{from}: {local} + {staged} -> {dst} => {to} {remote}")
            }
            Op::Rrs { from, local, staged, to, remote } => write!(f, "{from}: {local} + {staged} => {to} {remote}"),
            Op::ReduceSend { srcs, dst, to, remote } => {
                write!(f, "{}", Sum(srcs))?;
                if let Some(dst) = dst {
                    write!(f, " -> {dst}")?;
                }
                write!(f, " => {to} {remote}")
            }
            Op::Part { .. } => Ok(()), // written above
        }
    }
}
