//! Plan validation: every limit, index, peer and channel, and the signal/wait pairing.

use std::collections::BTreeMap;
use std::fmt;

use thiserror::Error;

use super::{Buffer, ExecutionPlan, Loc, PLAN_VERSION};

/// Documented limits every valid plan respects (the GPU executor sizes its tables from them).
pub mod limits {
    /// Most ranks in a plan.
    pub const MAX_RANKS: u32 = 4096;
    /// Most thread blocks per rank.
    pub const MAX_THREADBLOCKS: usize = 256;
    /// Most operations in one thread block.
    pub const MAX_OPS_PER_THREADBLOCK: usize = 1024;
    /// Channel numbers are below this.
    pub const MAX_CHANNELS: u32 = 64;
    /// Most chunks in one buffer of one rank.
    pub const MAX_CHUNKS: u32 = 1 << 20;
    /// Most size classes.
    pub const MAX_SIZE_CLASSES: u32 = 1 << 16;
    /// Most operands of one `reduce`.
    pub const MAX_REDUCE_INPUTS: usize = 16;
    /// Most parts a chunk is split into by thread-block groups: the least common multiple of
    /// every part count of a plan (a verifier cell is one such part).
    pub const MAX_PARTS: u32 = 64;
}

/// Where in a plan something is: rank, thread block and operation index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Site {
    /// The rank.
    pub rank: u32,
    /// The thread block on that rank.
    pub tb: u32,
    /// Index of the operation in the thread block.
    pub op: u32,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} tb {} op {}", self.rank, self.tb, self.op)
    }
}

/// Why a plan was rejected by [`ExecutionPlan::load`] or [`ExecutionPlan::validate`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LoadError {
    /// Not JSON, or not the plan schema.
    #[error("plan is not valid JSON for the plan schema: {0}")]
    Json(#[source] serde_json::Error),
    /// The `version` field is missing.
    #[error("plan has no version field")]
    MissingVersion,
    /// The plan was written for another format version.
    #[error("plan version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        /// Version in the plan.
        found: u64,
        /// Version this build reads.
        supported: u32,
    },
    /// A documented limit is exceeded.
    #[error("{what} is {value}, above the limit of {max}")]
    Limit {
        /// What was counted.
        what: &'static str,
        /// The plan's value.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// The plan has no ranks, or a wrong number of rank entries.
    #[error("plan declares {nranks} ranks but lists {listed}")]
    RankCount {
        /// Declared ranks.
        nranks: u32,
        /// Rank entries.
        listed: usize,
    },
    /// A rank entry is out of order.
    #[error("rank entry {position} says it is rank {found}")]
    RankOrder {
        /// Position in the list.
        position: usize,
        /// Rank it claims.
        found: u32,
    },
    /// A thread block entry is out of order.
    #[error("rank {rank}: thread block entry {position} says it is thread block {found}")]
    ThreadBlockOrder {
        /// The rank.
        rank: u32,
        /// Position in the list.
        position: usize,
        /// Id it claims.
        found: u32,
    },
    /// Chunk counts do not form whole blocks of `size_classes` chunks.
    #[error("{buffer} has {chunks} chunks, which is not a positive multiple of the {size_classes} size classes")]
    ChunkClasses {
        /// The buffer.
        buffer: Buffer,
        /// Its chunk count.
        chunks: u32,
        /// Size classes of the plan.
        size_classes: u32,
    },
    /// A scratch chunk names a size class that does not exist.
    #[error("rank {rank}: scratch[{index}] has size class {class}, but the plan has {size_classes}")]
    ScratchClass {
        /// The rank.
        rank: u32,
        /// Scratch chunk.
        index: usize,
        /// Its class.
        class: u32,
        /// Size classes of the plan.
        size_classes: u32,
    },
    /// An operation names a rank that does not exist or is its own rank.
    #[error("{site}: peer {peer} is not another rank of this {nranks}-rank plan")]
    BadPeer {
        /// The operation.
        site: Site,
        /// The peer named.
        peer: u32,
        /// Ranks in the plan.
        nranks: u32,
    },
    /// An operation names a channel at or above the limit.
    #[error("{site}: channel {channel} is out of range (limit {max})")]
    BadChannel {
        /// The operation.
        site: Site,
        /// The channel named.
        channel: u32,
        /// Limit.
        max: u32,
    },
    /// A chunk reference falls outside its buffer.
    #[error("{site}: {buffer}[{index}..{end}] on rank {target} is out of range ({buffer} has {chunks} chunks)")]
    IndexOutOfRange {
        /// The operation.
        site: Site,
        /// Rank owning the buffer.
        target: u32,
        /// The buffer.
        buffer: Buffer,
        /// First chunk.
        index: u32,
        /// One past the last chunk.
        end: u64,
        /// Chunks in the buffer.
        chunks: u32,
    },
    /// A chunk reference has no chunks.
    #[error("{site}: a chunk reference has count 0")]
    EmptyRef {
        /// The operation.
        site: Site,
    },
    /// An operation writes the input buffer, which belongs to the user and is read-only.
    #[error("{site}: writes the input buffer of rank {target}, which is read-only")]
    WritesInput {
        /// The operation.
        site: Site,
        /// Rank whose input would be written.
        target: u32,
    },
    /// An operation's operands and results have different chunk size classes (different sizes).
    #[error("{site}: operands have different chunk sizes ({first} vs {other})")]
    SizeMismatch {
        /// The operation.
        site: Site,
        /// First operand.
        first: String,
        /// The mismatching operand.
        other: String,
    },
    /// An operation's output partly overlaps one of its operands or another output.
    #[error("{site}: {a} and {b} partly overlap")]
    PartialOverlap {
        /// The operation.
        site: Site,
        /// One range.
        a: String,
        /// The other range.
        b: String,
    },
    /// A reduce with too few or too many operands.
    #[error("{site}: reduce has {count} operands (needs 2 to {max})")]
    ReduceArity {
        /// The operation.
        site: Site,
        /// Operands given.
        count: usize,
        /// Most allowed.
        max: usize,
    },
    /// A `wait_tb` names a thread block or step that does not exist.
    #[error("{site}: waits for tb {tb} step {step}, which does not exist on this rank")]
    BadWaitTb {
        /// The operation.
        site: Site,
        /// Thread block named.
        tb: u32,
        /// Step named.
        step: u32,
    },
    /// Two thread blocks of one rank use the same link direction.
    #[error("rank {rank}: thread blocks {first} and {second} both {direction} peer {peer} on channel {channel}")]
    SharedLink {
        /// The rank.
        rank: u32,
        /// The peer.
        peer: u32,
        /// The channel.
        channel: u32,
        /// "signal" or "wait on".
        direction: &'static str,
        /// First owner.
        first: u32,
        /// Second owner.
        second: u32,
    },
    /// Thread blocks of one rank execute different numbers of barriers (they would deadlock).
    #[error("rank {rank}: tb 0 executes {expected} barriers but tb {tb} executes {found}")]
    BarrierMismatch {
        /// The rank.
        rank: u32,
        /// The thread block that differs.
        tb: u32,
        /// Barriers in thread block 0.
        expected: usize,
        /// Barriers in `tb`.
        found: usize,
    },
    /// Signals and waits on a connection do not pair up.
    #[error("connection rank {from} -> rank {to} channel {channel}: {signals} signals but {waits} waits")]
    Unpaired {
        /// Signalling rank.
        from: u32,
        /// Waiting rank.
        to: u32,
        /// Channel.
        channel: u32,
        /// Signals sent.
        signals: usize,
        /// Waits issued.
        waits: usize,
    },
    /// An operation a packet (LL) plan cannot run: a bare put, get, read-reduce, signal or wait.
    #[error("{site}: `{op}` cannot run in an LL plan (only send, recv and the fused receives cross links)")]
    PacketOp {
        /// The operation.
        site: Site,
        /// Its name.
        op: &'static str,
    },
    /// A packet transfer into a peer buffer other than scratch.
    #[error("{site}: an LL transfer writes rank {peer} {target}; packets land in scratch only")]
    PacketTarget {
        /// The sending operation.
        site: Site,
        /// The receiving rank.
        peer: u32,
        /// Where it writes.
        target: super::BufRef,
    },
    /// A scratch chunk that packets land in is written twice, or touched by a plain access.
    #[error("rank {rank} scratch[{index}] holds packets ({first}) and is written or read again by {second}")]
    PacketChunk {
        /// Rank owning the chunk.
        rank: u32,
        /// The chunk.
        index: u32,
        /// The packet write.
        first: Site,
        /// The other access.
        second: Site,
    },
    /// A scratch chunk of an LL plan that holds plain data.
    #[error("{site}: rank {rank} scratch[{index}] holds plain data; an LL plan keeps only packets in scratch")]
    PlainScratch {
        /// Rank owning the chunk.
        rank: u32,
        /// The chunk.
        index: u32,
        /// The first access.
        site: Site,
    },
    /// An operation uses a port link in a way port channels cannot run.
    #[error("{site}: `{op}` on {link}: {reason}")]
    PortOp {
        /// The operation.
        site: Site,
        /// Its name.
        op: &'static str,
        /// The link.
        link: super::Link,
        /// What is wrong.
        reason: &'static str,
    },
    /// An operation's part is malformed or not allowed.
    #[error("{site}: {part}: {reason}")]
    BadPart {
        /// The operation.
        site: Site,
        /// The part.
        part: super::Part,
        /// What is wrong.
        reason: &'static str,
    },
    /// The plan's part counts split chunks finer than the limit.
    #[error(
        "the plan's thread-block groups split chunks into {parts} parts (least common multiple), above the limit of {max}"
    )]
    TooManyParts {
        /// The least common multiple of the part counts.
        parts: u64,
        /// The limit.
        max: u32,
    },
    /// A thread block ends with port puts no flush has completed: their copies could still
    /// read the sources when the next call writes them.
    #[error("{site}: put on port link {link} is not flushed before thread block {} ends", .site.tb)]
    Unflushed {
        /// The last unflushed put.
        site: Site,
        /// The link.
        link: super::Link,
    },
    /// A receive on a link does not read what the matching send wrote.
    #[error(
        "LL connection rank {from} -> rank {to} channel {channel}: transfer {transfer} sends {sent} but the receive reads {received}"
    )]
    PacketPairing {
        /// Sending rank.
        from: u32,
        /// Receiving rank.
        to: u32,
        /// Channel.
        channel: u32,
        /// Position of the transfer on the link.
        transfer: usize,
        /// Chunks sent.
        sent: String,
        /// Chunks the receive reads.
        received: String,
    },
}

fn limit(what: &'static str, value: u64, max: u64) -> Result<(), LoadError> {
    if value > max { Err(LoadError::Limit { what, value, max }) } else { Ok(()) }
}

impl ExecutionPlan {
    /// Checks every structural rule of the plan format:
    ///
    /// - the version is [`PLAN_VERSION`]; rank and thread block entries are in order;
    /// - every limit in [`limits`];
    /// - chunk counts form whole blocks of size classes; scratch classes exist;
    /// - every peer is another rank, every channel below [`limits::MAX_CHANNELS`];
    /// - every chunk reference is non-empty and inside its buffer (the peer's, for remote ones);
    /// - no operation writes an input buffer; operands and results of one operation have equal
    ///   chunk sizes and do not partly overlap;
    /// - `wait_tb` names an existing thread block and step;
    /// - every thread block of a rank executes the same number of barriers;
    /// - each (peer, channel, direction) of a rank belongs to one thread block;
    /// - signals from `a` to `b` on a channel equal the waits of `b` on it;
    /// - port links (see [`Link`](super::Link)): only in simple-protocol plans; data crosses
    ///   them only by `put` and `send`, from scratch into the peer's scratch (the buffers the
    ///   proxy registers); `flush` names a port link; every put is flushed before its thread
    ///   block ends;
    /// - a [`Part`](super::Part) splits chunks into 2 to 64 parts, wraps an operation that moves
    ///   data (not another part), in a simple-protocol plan, and the plan's part counts have a
    ///   least common multiple of at most [`limits::MAX_PARTS`];
    /// - in a [`Protocol::Ll`](super::Protocol::Ll) plan, the packet rules (see that variant).
    ///
    /// It does not prove the plan deadlock-free, race-free or correct: the compiler's verifier
    /// does that for compiled plans.
    pub fn validate(&self) -> Result<(), LoadError> {
        if self.version != PLAN_VERSION {
            return Err(LoadError::UnsupportedVersion { found: u64::from(self.version), supported: PLAN_VERSION });
        }
        limit("nranks", u64::from(self.nranks), u64::from(limits::MAX_RANKS))?;
        if self.nranks == 0 || self.ranks.len() != self.nranks as usize {
            return Err(LoadError::RankCount { nranks: self.nranks, listed: self.ranks.len() });
        }
        limit("size_classes", u64::from(self.size_classes), u64::from(limits::MAX_SIZE_CLASSES))?;
        for (buffer, chunks, min) in [(Buffer::Input, self.input_chunks, 1), (Buffer::Output, self.output_chunks, 0)] {
            limit("chunks per buffer", u64::from(chunks), u64::from(limits::MAX_CHUNKS))?;
            if self.size_classes == 0 || chunks < min || chunks % self.size_classes != 0 {
                return Err(LoadError::ChunkClasses { buffer, chunks, size_classes: self.size_classes });
            }
        }
        for (position, rank) in self.ranks.iter().enumerate() {
            if rank.rank as usize != position {
                return Err(LoadError::RankOrder { position, found: rank.rank });
            }
            limit("scratch chunks", rank.scratch.len() as u64, u64::from(limits::MAX_CHUNKS))?;
            if let Some((index, &class)) = rank.scratch.iter().enumerate().find(|(_, c)| **c >= self.size_classes) {
                return Err(LoadError::ScratchClass { rank: rank.rank, index, class, size_classes: self.size_classes });
            }
            limit("thread blocks per rank", rank.threadblocks.len() as u64, limits::MAX_THREADBLOCKS as u64)?;
            for (position, tb) in rank.threadblocks.iter().enumerate() {
                if tb.id as usize != position {
                    return Err(LoadError::ThreadBlockOrder { rank: rank.rank, position, found: tb.id });
                }
                limit("operations per thread block", tb.ops.len() as u64, limits::MAX_OPS_PER_THREADBLOCK as u64)?;
            }
        }
        for rank in &self.ranks {
            for tb in &rank.threadblocks {
                for (i, op) in tb.ops.iter().enumerate() {
                    let site = Site { rank: rank.rank, tb: tb.id, op: i as u32 };
                    self.validate_op(site, op)?;
                }
            }
        }
        self.validate_links()?;
        self.cell_parts()?;
        self.validate_packets()
    }

    fn validate_op(&self, site: Site, op: &super::Op) -> Result<(), LoadError> {
        if let super::Op::Reduce { srcs, .. } | super::Op::ReduceSend { srcs, .. } = op
            && !(2..=limits::MAX_REDUCE_INPUTS).contains(&srcs.len())
        {
            return Err(LoadError::ReduceArity { site, count: srcs.len(), max: limits::MAX_REDUCE_INPUTS });
        }
        let effects = op.effects();
        for link in [effects.wait, effects.signal, effects.via, effects.flush].iter().flatten() {
            self.check_link(site, link.peer, link.channel)?;
        }
        self.validate_port_use(site, op, &effects)?;
        if let super::Op::Part { part, of } = op {
            let bad = |reason| Err(LoadError::BadPart { site, part: *part, reason });
            if !(2..=limits::MAX_PARTS).contains(&part.count) || part.index >= part.count {
                return bad("a group has 2 to 64 members and the part is below their count");
            }
            if matches!(**of, super::Op::Part { .. }) || effects.inputs.is_empty() {
                return bad("only an operation that moves data runs in parts, once");
            }
            if self.protocol != super::Protocol::Simple {
                return bad("LL packets move whole chunks");
            }
        }
        if let super::Op::Put { to: link, .. }
        | super::Op::Get { from: link, .. }
        | super::Op::ReadReduce { from: link, .. } = op
        {
            self.check_link(site, link.peer, link.channel)?;
        }
        if let Some((tb, step)) = effects.wait_tb {
            let rank = &self.ranks[site.rank as usize];
            let exists = rank.threadblocks.get(tb as usize).is_some_and(|t| (step as usize) < t.ops.len());
            if !exists || tb == site.tb {
                return Err(LoadError::BadWaitTb { site, tb, step });
            }
        }
        let all: Vec<Loc> = effects.inputs.iter().chain(effects.outputs.iter()).copied().collect();
        let mut classes: Option<(Loc, Vec<u32>)> = None;
        for loc in &all {
            let target = loc.peer.unwrap_or(site.rank);
            if loc.buf.count == 0 {
                return Err(LoadError::EmptyRef { site });
            }
            let chunks = self.chunks(target, loc.buf.buffer).unwrap_or(0);
            if loc.buf.end() > u64::from(chunks) {
                return Err(LoadError::IndexOutOfRange {
                    site,
                    target,
                    buffer: loc.buf.buffer,
                    index: loc.buf.index,
                    end: loc.buf.end(),
                    chunks,
                });
            }
            let seq: Vec<u32> = (loc.buf.index..loc.buf.index + loc.buf.count)
                .filter_map(|i| self.class_of(target, loc.buf.buffer, i))
                .collect();
            match &classes {
                None => classes = Some((*loc, seq)),
                Some((first, first_seq)) if *first_seq != seq => {
                    return Err(LoadError::SizeMismatch {
                        site,
                        first: describe(site.rank, first),
                        other: describe(site.rank, loc),
                    });
                }
                Some(_) => {}
            }
        }
        for (k, out) in effects.outputs.iter().enumerate() {
            if out.buf.buffer == Buffer::Input {
                return Err(LoadError::WritesInput { site, target: out.peer.unwrap_or(site.rank) });
            }
            let others = effects.inputs.iter().chain(effects.outputs[..k].iter());
            for other in others {
                let same_place = other.peer == out.peer && other.buf.overlaps(&out.buf);
                let exact = other.buf == out.buf;
                let is_output = effects.outputs[..k].contains(other);
                if same_place && (!exact || is_output) {
                    return Err(LoadError::PartialOverlap {
                        site,
                        a: describe(site.rank, other),
                        b: describe(site.rank, out),
                    });
                }
            }
        }
        Ok(())
    }

    /// Parts every chunk is split into for the verifier: the least common multiple of the
    /// plan's part counts (1 without thread-block groups), at most [`limits::MAX_PARTS`].
    pub fn cell_parts(&self) -> Result<u32, LoadError> {
        let gcd = |mut a: u64, mut b: u64| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        let mut lcm = 1u64;
        let ops = self.ranks.iter().flat_map(|r| &r.threadblocks).flat_map(|t| &t.ops);
        for part in ops.filter_map(|op| op.effects().part) {
            lcm = lcm / gcd(lcm, u64::from(part.count)) * u64::from(part.count);
            if lcm > u64::from(limits::MAX_PARTS) {
                return Err(LoadError::TooManyParts { parts: lcm, max: limits::MAX_PARTS });
            }
        }
        Ok(lcm as u32)
    }

    /// The port-link rules of [`Self::validate`] for one operation.
    fn validate_port_use(&self, site: Site, op: &super::Op, e: &super::Effects) -> Result<(), LoadError> {
        let err = |link, reason| Err(LoadError::PortOp { site, op: op.name(), link, reason });
        if let Some(link) = e.flush.filter(|l| !l.port) {
            return err(link, "only port links are flushed");
        }
        if let super::Op::Get { from, .. } | super::Op::ReadReduce { from, .. } = op
            && from.port
        {
            return err(*from, "a port channel only writes the peer; reading it takes a memory channel");
        }
        let Some(link) = [e.wait, e.signal, e.via, e.flush].into_iter().flatten().find(|l| l.port) else {
            return Ok(());
        };
        if self.protocol != super::Protocol::Simple {
            return err(link, "port channels carry no LL packets");
        }
        let remote = e.outputs.iter().any(|l| l.peer.is_some());
        if remote && e.via.is_none() && e.signal == Some(link) {
            return err(link, "a port channel moves data only by put and send; threads do not reach the peer");
        }
        if e.via.is_some() {
            let scratch = e.inputs.iter().chain(&e.outputs).all(|l| l.buf.buffer == Buffer::Scratch);
            if !scratch {
                return err(link, "a port put moves scratch into the peer's scratch (the memory the proxy registers)");
            }
        }
        Ok(())
    }

    fn check_link(&self, site: Site, peer: u32, channel: u32) -> Result<(), LoadError> {
        if peer >= self.nranks || peer == site.rank {
            return Err(LoadError::BadPeer { site, peer, nranks: self.nranks });
        }
        if channel >= limits::MAX_CHANNELS {
            return Err(LoadError::BadChannel { site, channel, max: limits::MAX_CHANNELS });
        }
        Ok(())
    }

    /// Link ownership (one thread block per direction), signal/wait pairing, and port puts
    /// flushed before their thread block ends.
    fn validate_links(&self) -> Result<(), LoadError> {
        // (from, to, channel, port) -> (signals, waits)
        let mut counts: BTreeMap<(u32, u32, u32, bool), (usize, usize)> = BTreeMap::new();
        for rank in &self.ranks {
            let barriers = |t: &super::ThreadBlock| t.ops.iter().filter(|o| matches!(o, super::Op::Barrier)).count();
            let expected = rank.threadblocks.first().map_or(0, barriers);
            if let Some(t) = rank.threadblocks.iter().find(|t| barriers(t) != expected) {
                return Err(LoadError::BarrierMismatch { rank: rank.rank, tb: t.id, expected, found: barriers(t) });
            }
            // (link, outbound) -> owning thread block
            let mut owners: BTreeMap<(super::Link, bool), u32> = BTreeMap::new();
            for tb in &rank.threadblocks {
                // Port links with puts no flush has completed yet, and the last such put.
                let mut unflushed: BTreeMap<super::Link, u32> = BTreeMap::new();
                for (i, op) in tb.ops.iter().enumerate() {
                    let e = op.effects();
                    if let Some(link) = e.via {
                        unflushed.insert(link, i as u32);
                    }
                    if let Some(link) = e.flush {
                        unflushed.remove(&link);
                    }
                    let outbound = e.signal.or(e.via).or(e.flush);
                    for (link, is_signal) in [(outbound, true), (e.wait, false)] {
                        let Some(link) = link else { continue };
                        let key = (link, is_signal);
                        let owner = *owners.entry(key).or_insert(tb.id);
                        if owner != tb.id {
                            return Err(LoadError::SharedLink {
                                rank: rank.rank,
                                peer: link.peer,
                                channel: link.channel,
                                direction: if is_signal { "signal" } else { "wait on" },
                                first: owner,
                                second: tb.id,
                            });
                        }
                    }
                    if let Some(link) = e.signal {
                        counts.entry((rank.rank, link.peer, link.channel, link.port)).or_default().0 += 1;
                    }
                    if let Some(link) = e.wait {
                        counts.entry((link.peer, rank.rank, link.channel, link.port)).or_default().1 += 1;
                    }
                }
                if let Some((&link, &op)) = unflushed.iter().next() {
                    return Err(LoadError::Unflushed { site: Site { rank: rank.rank, tb: tb.id, op }, link });
                }
            }
        }
        for ((from, to, channel, _), (signals, waits)) in counts {
            if signals != waits {
                return Err(LoadError::Unpaired { from, to, channel, signals, waits });
            }
        }
        Ok(())
    }
}

fn describe(rank: u32, loc: &Loc) -> String {
    match loc.peer {
        Some(p) => format!("r{p}:{}", loc.buf),
        None => format!("r{rank}:{}", loc.buf),
    }
}
