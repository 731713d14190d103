//! The channel-level DSL (MSCCL++'s level): the program says what every thread block of every
//! rank does, operation by operation, over memory channels, and the compiler checks it instead
//! of deriving it. Nothing is scheduled, fused or inserted: the plan is the program, and
//! [`ChannelProgram::compile`] validates it ([`ExecutionPlan::validate`]) and verifies it
//! ([`verify`](crate::passes::verify)): no deadlock, no race, the collective's postcondition.
//! As for every simple-protocol plan, the end of a launch orders every write before it (the
//! executor fences at exit, unless every write into a peer is signalled and awaited), so a last
//! `put` needs no signal of its own. LL plans have no exit fence and no bare `put`: every
//! transfer is a packet send its receiver polls.
//!
//! Thread-block groups ([`ChannelProgram::threadblock_group`]) emit an operation once per member
//! thread block, member `i` of `n` moving part `i` of every chunk ([`Op::Part`]); the verifier
//! checks the parts as separate cells.
//!
//! Instances and pipelined loops ([`ChannelProgram::with_instances`],
//! [`ChannelProgram::with_pipeline`]) replicate the program as written when it compiles: every
//! thread block once per instance on channels and sub-chunks of its own, and every thread
//! block's operations once per tile on the tile's sub-chunks; the replicated plan is what the
//! verifier checks.
//!
//! Port channels ([`ChannelProgram::port_channel`]) hand their transfers to the rank's proxy,
//! which moves them with a copy engine (or a network) while the thread block goes on: a put
//! reads its source and lands at the peer later, covered at the peer by the channel's next
//! signal and locally by its next [`ThreadBlockOps::flush`]. Their puts move scratch into the
//! peer's scratch (the memory the proxy registers), and every put is flushed before its thread
//! block ends. The verifier treats the put as asynchronous, so writing its source before the
//! flush, or reading its destination without the signal, is a race it reports.
//!
//! ```
//! use weft_plan::dsl::{Buffer, ChannelProgram, Collective};
//! use weft_plan::plan::BufRef;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Two ranks exchange their input: an all-gather, one thread block each.
//! let mut p = ChannelProgram::new("exchange", Collective::all_gather(2, 1)?);
//! for r in 0..2u32 {
//!     let peer = 1 - r;
//!     let ch = p.memory_channel(r, peer, 0)?;
//!     let input = BufRef::new(Buffer::Input, 0, 1);
//!     let mine = BufRef::new(Buffer::Output, r, 1);
//!     let mut tb = p.threadblock(r, 0)?;
//!     tb.copy(input, mine);
//!     tb.put_with_signal(&ch, input, mine); // into the peer's output[r]
//!     tb.wait(&ch); // the peer's put into this rank's output[peer] has landed
//! }
//! let plan = p.compile()?;
//! assert_eq!(plan.op_count(), 6);
//! # Ok(())
//! # }
//! ```

use super::{Collective, DslError};
use crate::passes::{CompileError, replicate_plan, verify};
use crate::plan::{BufRef, ExecutionPlan, Link, Op, PLAN_VERSION, Part, Protocol, RankPlan, ThreadBlock};

/// A memory channel of one rank to a peer: the link (`peer`, `channel`) seen from `rank`.
/// Signals and waits on it pair with the peer's channel to `rank` of the same number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryChannel {
    rank: u32,
    link: Link,
}

/// A port channel of one rank to a peer (see the [module documentation](self)): puts, signals
/// and flushes go through the rank's proxy. Signals and waits on it pair with the peer's port
/// channel to `rank` of the same number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortChannel {
    rank: u32,
    link: Link,
}

/// What memory and port channels share: an owning rank and a link. Puts, signals, waits and
/// receives take either kind.
pub trait Channel: private::Sealed + Copy {
    /// The rank owning this end.
    fn rank(&self) -> u32;
    /// The link: peer, channel number and kind.
    fn link(&self) -> Link;
}

mod private {
    pub trait Sealed {}
    impl Sealed for super::MemoryChannel {}
    impl Sealed for super::PortChannel {}
}

impl Channel for MemoryChannel {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn link(&self) -> Link {
        self.link
    }
}

impl Channel for PortChannel {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn link(&self) -> Link {
        self.link
    }
}

/// A program written thread block by thread block. See the [module documentation](self).
#[derive(Debug)]
pub struct ChannelProgram {
    name: String,
    collective: Collective,
    protocol: Protocol,
    ranks: Vec<RankPlan>,
    /// The first misuse an operation made (reported by `compile`).
    misuse: Option<DslError>,
    /// The first rank that wrote packets (`put_packets`): checked against the protocol the
    /// program has when it compiles, whenever `with_protocol` was called.
    packets_on: Option<u32>,
    /// Copies of every thread block, each on its own channels and sub-chunks.
    instances: u32,
    /// Tiles each thread block's operations run over, one after another.
    tiles: u32,
}

impl ChannelProgram {
    /// An empty program computing `collective`: every rank has no scratch and no thread block.
    pub fn new(name: impl Into<String>, collective: Collective) -> Self {
        let ranks = (0..collective.nranks())
            .map(|rank| RankPlan { rank, scratch: Vec::new(), threadblocks: Vec::new() })
            .collect();
        Self {
            name: name.into(),
            collective,
            protocol: Protocol::Simple,
            ranks,
            misuse: None,
            packets_on: None,
            instances: 1,
            tiles: 1,
        }
    }

    /// Moves data across links with `protocol`: under [`Protocol::Ll`] a `put_with_signal` is a
    /// packet transfer into the peer's scratch and the receive that follows polls it
    /// ([`ThreadBlockOps::recv`], [`ThreadBlockOps::recv_reduce`]).
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Runs `instances` copies of the program (MSCCL++'s instances): thread block `b` becomes
    /// thread blocks `b * instances + s`, instance `s` moving a contiguous `1/instances` of every
    /// chunk range over channel `c * instances + s` of each of its links. Channels are written
    /// as for one instance. Instances times tiles is at most [`Program::MAX_SPLIT`](super::Program::MAX_SPLIT).
    pub fn with_instances(mut self, instances: u32) -> Result<Self, DslError> {
        let max = super::Program::MAX_INSTANCES.min(super::Program::MAX_SPLIT / self.tiles);
        if instances == 0 || instances > max {
            return Err(DslError::BadSetting { what: "instances", value: instances, max });
        }
        self.instances = instances;
        Ok(self)
    }

    /// Pipelines the program (MSCCL++'s pipelined loops): every instance's part of a chunk
    /// range is split into `tiles` consecutive tiles, and each thread block runs its operations
    /// once per tile, tile after tile, on the same channels; a thread block moves on to its next
    /// tile while its peers still work on the last. Instances times tiles is at most
    /// [`Program::MAX_SPLIT`](super::Program::MAX_SPLIT).
    pub fn with_pipeline(mut self, tiles: u32) -> Result<Self, DslError> {
        let max = super::Program::MAX_SPLIT / self.instances;
        if tiles == 0 || tiles > max {
            return Err(DslError::BadSetting { what: "pipeline tiles", value: tiles, max });
        }
        self.tiles = tiles;
        Ok(self)
    }

    fn rank_plan(&mut self, rank: u32) -> Result<&mut RankPlan, DslError> {
        let nranks = self.collective.nranks();
        self.ranks.get_mut(rank as usize).ok_or(DslError::RankOutOfRange { rank, nranks })
    }

    /// Appends scratch chunks of the given size classes to `rank`'s scratch; returns them as
    /// one reference.
    pub fn scratch(&mut self, rank: u32, classes: &[u32]) -> Result<BufRef, DslError> {
        let max = self.collective.size_classes();
        if let Some(&class) = classes.iter().find(|&&c| c >= max) {
            return Err(DslError::BadSetting { what: "scratch size class", value: class, max: max - 1 });
        }
        if classes.is_empty() {
            return Err(DslError::EmptyChunk);
        }
        let scratch = &mut self.rank_plan(rank)?.scratch;
        let index = scratch.len() as u32;
        scratch.extend_from_slice(classes);
        Ok(BufRef::new(crate::plan::Buffer::Scratch, index, classes.len() as u32))
    }

    /// `rank`'s memory channel number `channel` to `peer`.
    pub fn memory_channel(&self, rank: u32, peer: u32, channel: u32) -> Result<MemoryChannel, DslError> {
        self.check_pair("memory_channel", rank, peer)?;
        Ok(MemoryChannel { rank, link: Link::new(peer, channel) })
    }

    /// `rank`'s port channel number `channel` to `peer` (needs [`Protocol::Simple`]).
    pub fn port_channel(&self, rank: u32, peer: u32, channel: u32) -> Result<PortChannel, DslError> {
        self.check_pair("port_channel", rank, peer)?;
        Ok(PortChannel { rank, link: Link::port(peer, channel) })
    }

    fn check_pair(&self, algorithm: &'static str, rank: u32, peer: u32) -> Result<(), DslError> {
        let nranks = self.collective.nranks();
        for r in [rank, peer] {
            if r >= nranks {
                return Err(DslError::RankOutOfRange { rank: r, nranks });
            }
        }
        if peer == rank {
            return Err(DslError::Constraint { algorithm, reason: format!("rank {rank} to itself") });
        }
        Ok(())
    }

    /// Thread block `tb` of `rank` (created, with the ones before it, on first use), to append
    /// operations to.
    pub fn threadblock(&mut self, rank: u32, tb: u32) -> Result<ThreadBlockOps<'_>, DslError> {
        let max = crate::plan::limits::MAX_THREADBLOCKS as u32;
        if tb >= max {
            return Err(DslError::BadSetting { what: "thread block", value: tb, max: max - 1 });
        }
        self.rank_plan(rank)?;
        let (misuse, packets_on) = (&mut self.misuse, &mut self.packets_on);
        let plan = &mut self.ranks[rank as usize];
        while plan.threadblocks.len() <= tb as usize {
            let id = plan.threadblocks.len() as u32;
            plan.threadblocks.push(ThreadBlock { id, ops: Vec::new() });
        }
        Ok(ThreadBlockOps { rank, block: &mut plan.threadblocks[tb as usize], misuse, packets_on })
    }

    /// Thread blocks `tbs` of `rank` as a thread-block group (MSCCL++'s `ThreadBlockGroup`):
    /// every data operation appended through it is emitted once per member, member `i` moving
    /// part `i` of `tbs.len()` of every chunk ([`Op::Part`]). Members are ordinary thread
    /// blocks: they order their parts with the rest through their own waits and signals, and a
    /// whole-chunk reader waits for every member (`wait_tb`, `barrier`).
    pub fn threadblock_group(&mut self, rank: u32, tbs: &[u32]) -> Result<ThreadBlockGroup<'_>, DslError> {
        let max = crate::plan::limits::MAX_PARTS;
        if !(2..=max as usize).contains(&tbs.len()) {
            return Err(DslError::BadSetting { what: "thread-block group size", value: tbs.len() as u32, max });
        }
        for &tb in tbs {
            self.threadblock(rank, tb)?;
        }
        Ok(ThreadBlockGroup { program: self, rank, tbs: tbs.to_vec() })
    }

    /// The program as a plan, validated and verified (see the module documentation).
    pub fn compile(&self) -> Result<ExecutionPlan, CompileError> {
        if let Some(e) = &self.misuse {
            return Err(CompileError::Program(e.clone()));
        }
        if let Some(rank) = self.packets_on
            && self.protocol != Protocol::Ll
        {
            return Err(CompileError::Program(misuse(format!("put_packets on rank {rank} needs the LL protocol"))));
        }
        // Thread blocks are numbered from 0 without gaps: asking for thread block 5 first makes
        // 0-4 too, and one left empty would still take a grid block (and miss every barrier).
        for rank in &self.ranks {
            if let Some(tb) = rank.threadblocks.iter().find(|t| t.ops.is_empty()) {
                return Err(CompileError::Program(misuse(format!(
                    "thread block {} of rank {} has no operations (thread blocks are numbered from 0 without gaps)",
                    tb.id, rank.rank
                ))));
            }
        }
        let written = ExecutionPlan {
            version: PLAN_VERSION,
            name: self.name.clone(),
            collective: self.collective.kind(),
            nranks: self.collective.nranks(),
            size_classes: self.collective.size_classes(),
            input_chunks: self.collective.input_chunks(),
            output_chunks: self.collective.output_chunks(),
            protocol: self.protocol,
            ranks: self.ranks.clone(),
        };
        let split = self.instances * self.tiles;
        if split == 1 {
            verify(&written, &self.collective)?;
            return Ok(written);
        }
        // Mistakes are reported against the program as written, before it is replicated.
        written.validate().map_err(CompileError::Invalid)?;
        let plan = replicate_plan(&written, self.instances, self.tiles)?;
        verify(&plan, &self.collective.replicated(split))?;
        Ok(plan)
    }
}

/// Appends operations to every member of a thread-block group, each on its part of every chunk
/// ([`ChannelProgram::threadblock_group`]). Operations over channels take one channel per
/// member, in member order (a link belongs to one thread block).
#[derive(Debug)]
pub struct ThreadBlockGroup<'p> {
    program: &'p mut ChannelProgram,
    rank: u32,
    tbs: Vec<u32>,
}

impl ThreadBlockGroup<'_> {
    /// Runs `append` for every member `i`, then marks the data operations it appended as part
    /// `i`.
    fn each(&mut self, mut append: impl FnMut(&mut ThreadBlockOps<'_>, usize)) -> &mut Self {
        let count = self.tbs.len() as u32;
        for (i, &tb) in self.tbs.iter().enumerate() {
            let Ok(mut ops) = self.program.threadblock(self.rank, tb) else { continue };
            let first = ops.block.ops.len();
            append(&mut ops, i);
            for op in &mut ops.block.ops[first..] {
                if !op.effects().inputs.is_empty() {
                    let whole = std::mem::replace(op, Op::Nop);
                    *op = Op::Part { part: Part::new(i as u32, count), of: Box::new(whole) };
                }
            }
        }
        self
    }

    /// The channel of member `i`, or a misuse when the group was given another count.
    fn channel<'c, C: Channel>(&mut self, channels: &'c [C], i: usize) -> Option<&'c C> {
        if channels.len() != self.tbs.len() {
            let reason = format!("{} channels for a group of {} thread blocks", channels.len(), self.tbs.len());
            self.program.misuse.get_or_insert(DslError::Constraint { algorithm: "thread-block group", reason });
        }
        channels.get(i)
    }

    /// `dst := src`, local, in parts.
    pub fn copy(&mut self, src: BufRef, dst: BufRef) -> &mut Self {
        self.each(|tb, _| {
            tb.copy(src, dst);
        })
    }

    /// `dst := srcs[0] ⊕ srcs[1] ⊕ …`, local, in parts.
    pub fn reduce(&mut self, srcs: &[BufRef], dst: BufRef) -> &mut Self {
        self.each(|tb, _| {
            tb.reduce(srcs.to_vec(), dst);
        })
    }

    /// [`ThreadBlockOps::put`] in parts, member `i` on `channels[i]`.
    pub fn put(&mut self, channels: &[impl Channel], src: BufRef, dst: BufRef) -> &mut Self {
        self.over(channels, |tb, ch| {
            tb.put(ch, src, dst);
        })
    }

    /// [`ThreadBlockOps::put_with_signal`] in parts: each member signals its own channel.
    pub fn put_with_signal(&mut self, channels: &[impl Channel], src: BufRef, dst: BufRef) -> &mut Self {
        self.over(channels, |tb, ch| {
            tb.put_with_signal(ch, src, dst);
        })
    }

    /// [`ThreadBlockOps::get`] in parts.
    pub fn get(&mut self, channels: &[MemoryChannel], src: BufRef, dst: BufRef) -> &mut Self {
        self.over(channels, |tb, ch| {
            tb.get(ch, src, dst);
        })
    }

    /// [`ThreadBlockOps::read_reduce`] in parts.
    pub fn read_reduce(&mut self, channels: &[MemoryChannel], local: BufRef, remote: BufRef, dst: BufRef) -> &mut Self {
        self.over(channels, |tb, ch| {
            tb.read_reduce(ch, local, remote, dst);
        })
    }

    /// [`ThreadBlockOps::recv`] in parts: each member waits on its own channel.
    pub fn recv(&mut self, channels: &[impl Channel], staged: BufRef, dst: BufRef) -> &mut Self {
        self.over(channels, |tb, ch| {
            tb.recv(ch, staged, dst);
        })
    }

    /// [`ThreadBlockOps::recv_reduce`] in parts.
    pub fn recv_reduce(&mut self, channels: &[impl Channel], local: BufRef, staged: BufRef, dst: BufRef) -> &mut Self {
        self.over(channels, |tb, ch| {
            tb.recv_reduce(ch, local, staged, dst);
        })
    }

    fn over<C: Channel>(&mut self, channels: &[C], mut append: impl FnMut(&mut ThreadBlockOps<'_>, &C)) -> &mut Self {
        let chosen: Vec<Option<C>> = (0..self.tbs.len()).map(|i| self.channel(channels, i).copied()).collect();
        self.each(|tb, i| {
            if let Some(ch) = &chosen[i] {
                append(tb, ch);
            }
        })
    }
}

/// A misuse of the channel program (the error names what was wrong).
fn misuse(reason: String) -> DslError {
    DslError::Constraint { algorithm: "channel program", reason }
}

/// Appends operations to one thread block (program order). A misuse (a channel of another
/// rank, packets without the LL protocol) is reported by [`ChannelProgram::compile`].
#[derive(Debug)]
pub struct ThreadBlockOps<'p> {
    rank: u32,
    block: &'p mut ThreadBlock,
    misuse: &'p mut Option<DslError>,
    packets_on: &'p mut Option<u32>,
}

impl ThreadBlockOps<'_> {
    fn push(&mut self, op: Op) -> &mut Self {
        self.block.ops.push(op);
        self
    }

    fn misused(&mut self, reason: String) {
        self.misuse.get_or_insert(misuse(reason));
    }

    fn on(&mut self, ch: &impl Channel) -> Link {
        let (rank, link) = (ch.rank(), ch.link());
        if rank != self.rank {
            let reason = format!("rank {rank}'s channel to rank {} used on rank {}", link.peer, self.rank);
            self.misused(reason);
        }
        link
    }

    /// Index the next operation will have (for [`Self::wait_tb`] in another thread block).
    pub fn next_step(&self) -> u32 {
        self.block.ops.len() as u32
    }

    /// `dst := src`, local.
    pub fn copy(&mut self, src: BufRef, dst: BufRef) -> &mut Self {
        self.push(Op::Copy { src, dst })
    }

    /// `dst := srcs[0] ⊕ srcs[1] ⊕ …`, local.
    pub fn reduce(&mut self, srcs: Vec<BufRef>, dst: BufRef) -> &mut Self {
        self.push(Op::Reduce { srcs, dst })
    }

    /// Writes local `src` into the peer's `dst`, without a signal (MemoryChannel and
    /// PortChannel `put`; a port put completes later: see the module documentation).
    pub fn put(&mut self, ch: &impl Channel, src: BufRef, dst: BufRef) -> &mut Self {
        let to = self.on(ch);
        self.push(Op::Put { src, dst, to })
    }

    /// `put` then `signal`: the peer's next `wait` on this channel sees the data (under LL, a
    /// packet transfer: `dst` must be the peer's scratch).
    pub fn put_with_signal(&mut self, ch: &impl Channel, src: BufRef, dst: BufRef) -> &mut Self {
        let to = self.on(ch);
        self.push(Op::Send { src, dst, to })
    }

    /// Writes local `src` as LL packets into the peer's scratch `dst`, which the peer's next
    /// receive on this channel polls (MemoryChannel `put_packets`; needs [`Protocol::Ll`]).
    pub fn put_packets(&mut self, ch: &MemoryChannel, src: BufRef, dst: BufRef) -> &mut Self {
        self.packets_on.get_or_insert(self.rank);
        self.put_with_signal(ch, src, dst)
    }

    /// Reads the peer's `src` into local `dst` (MemoryChannel `get`).
    pub fn get(&mut self, ch: &MemoryChannel, src: BufRef, dst: BufRef) -> &mut Self {
        let from = self.on(ch);
        self.push(Op::Get { src, dst, from })
    }

    /// `dst := local ⊕ the peer's remote` (MemoryChannel read-reduce).
    pub fn read_reduce(&mut self, ch: &MemoryChannel, local: BufRef, remote: BufRef, dst: BufRef) -> &mut Self {
        let from = self.on(ch);
        self.push(Op::ReadReduce { local, remote, dst, from })
    }

    /// Signals the peer: releases every earlier write of this thread block (on a port channel,
    /// after every earlier put of the channel has landed).
    pub fn signal(&mut self, ch: &impl Channel) -> &mut Self {
        let to = self.on(ch);
        self.push(Op::Signal { to })
    }

    /// Waits until every earlier put and signal of the port channel is applied at the peer:
    /// the puts' sources may be written again (PortChannel `flush`).
    pub fn flush(&mut self, ch: &PortChannel) -> &mut Self {
        let to = self.on(ch);
        self.push(Op::Flush { to })
    }

    /// `put_with_signal`, then `flush` (PortChannel `put_with_signal_and_flush`).
    pub fn put_with_signal_and_flush(&mut self, ch: &PortChannel, src: BufRef, dst: BufRef) -> &mut Self {
        self.put_with_signal(ch, src, dst).flush(ch)
    }

    /// Waits for the peer's next signal on this channel.
    pub fn wait(&mut self, ch: &impl Channel) -> &mut Self {
        let from = self.on(ch);
        self.push(Op::Wait { from })
    }

    /// Waits for the peer's next transfer, then copies what it put into `staged` to `dst`
    /// (under LL: polls the packets in `staged`).
    pub fn recv(&mut self, ch: &impl Channel, staged: BufRef, dst: BufRef) -> &mut Self {
        let from = self.on(ch);
        self.push(Op::Recv { from, src: staged, dst })
    }

    /// Waits for the peer's next transfer, then `dst := local ⊕ staged`.
    pub fn recv_reduce(&mut self, ch: &impl Channel, local: BufRef, staged: BufRef, dst: BufRef) -> &mut Self {
        let from = self.on(ch);
        self.push(Op::Rrc { from, local, staged, dst })
    }

    /// Waits until thread block `tb` of this rank has finished its operation `step` (a
    /// semaphore between thread blocks).
    pub fn wait_tb(&mut self, tb: u32, step: u32) -> &mut Self {
        self.push(Op::WaitTb { tb, step })
    }

    /// Barrier of every thread block of this rank.
    pub fn barrier(&mut self) -> &mut Self {
        self.push(Op::Barrier)
    }
}
