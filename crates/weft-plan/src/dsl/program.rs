//! [`Program`] and [`Chunk`]: the user-facing builder.

use std::cell::{Ref, RefCell};
use std::fmt;

use super::trace::{ChunkRange, Trace, TraceKind};
use super::{Buffer, Collective, DslError};
use crate::passes::{CompileError, CompileOptions};
use crate::plan::{ExecutionPlan, Protocol, limits};

/// Scheduling hints for one operation.
///
/// `channel` picks the channel of a remote transfer (default 0). `src_tb` / `dst_tb` ask for a
/// thread block on the source / destination rank: operations with the same hint on a rank share
/// a thread block (local operations use `dst_tb`, else `src_tb`). Hints are numbers in program
/// space; with [`Program::with_instances`], instance `i` of channel `c` runs on channel
/// `c * instances + i` (and likewise for thread block hints).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Hints {
    /// Channel of the transfer.
    pub channel: Option<u32>,
    /// Thread block hint on the source rank.
    pub src_tb: Option<u32>,
    /// Thread block hint on the destination rank.
    pub dst_tb: Option<u32>,
}

impl Hints {
    /// Hints with only a channel.
    pub fn channel(channel: u32) -> Self {
        Self { channel: Some(channel), ..Self::default() }
    }

    /// Adds a source thread block hint.
    pub fn src_tb(mut self, tb: u32) -> Self {
        self.src_tb = Some(tb);
        self
    }

    /// Adds a destination thread block hint.
    pub fn dst_tb(mut self, tb: u32) -> Self {
        self.dst_tb = Some(tb);
        self
    }
}

/// A collective algorithm being traced. See the [module documentation](super).
pub struct Program {
    name: String,
    collective: Collective,
    instances: u32,
    tiles: u32,
    protocol: Protocol,
    trace: RefCell<Trace>,
}

impl fmt::Debug for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Program")
            .field("name", &self.name)
            .field("collective", &self.collective)
            .field("instances", &self.instances)
            .field("tiles", &self.tiles)
            .field("protocol", &self.protocol)
            .field("ops", &self.trace.borrow().ops.len())
            .finish()
    }
}

impl Program {
    /// Most instances a program may be replicated into.
    pub const MAX_INSTANCES: u32 = 16;

    /// A new, empty program computing `collective`.
    pub fn new(name: impl Into<String>, collective: Collective) -> Self {
        let trace = RefCell::new(Trace::new(&collective));
        Self { name: name.into(), collective, instances: 1, tiles: 1, protocol: Protocol::Simple, trace }
    }

    /// Replicates the program `instances` times when compiled: every chunk is split into
    /// `instances` sub-chunks and each instance runs on its own channels and thread blocks
    /// (MSCCLang's `parallelize`, MSCCL++'s `instances`).
    pub fn with_instances(mut self, instances: u32) -> Result<Self, DslError> {
        let max = Self::MAX_INSTANCES.min(Self::MAX_SPLIT / self.tiles);
        if instances == 0 || instances > max {
            return Err(DslError::BadSetting { what: "instances", value: instances, max });
        }
        self.instances = instances;
        // Hints traced before this call were checked for one instance; every instance needs
        // channels and thread blocks of its own.
        for op in &self.trace.borrow().ops {
            self.check_hints(&op.hints)?;
        }
        Ok(self)
    }

    /// Most sub-chunks (instances times tiles) a chunk may be split into.
    pub const MAX_SPLIT: u32 = 64;

    /// Pipelines the program when compiled (MSCCL++'s pipelined loops): every instance's part
    /// of a chunk is split into `tiles` consecutive tiles that the same thread blocks and
    /// channels move one after another, so a tile's next hop overlaps the next tile's transfer
    /// (a ring's latency becomes `tiles + hops - 1` tile steps instead of `hops` whole-chunk
    /// steps). Instances times tiles is at most [`Program::MAX_SPLIT`].
    pub fn with_pipeline(mut self, tiles: u32) -> Result<Self, DslError> {
        let max = Self::MAX_SPLIT / self.instances;
        if tiles == 0 || tiles > max {
            return Err(DslError::BadSetting { what: "pipeline tiles", value: tiles, max });
        }
        self.tiles = tiles;
        Ok(self)
    }

    /// Tiles of the pipelined loop (1: not pipelined).
    pub fn tiles(&self) -> u32 {
        self.tiles
    }

    /// Moves data across links with `protocol`. Under [`Protocol::Ll`] every remote copy or
    /// reduce is staged in the receiver's scratch (packets never land in a user buffer) and
    /// the receive polls the packets instead of a semaphore: the latency of small messages.
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// The protocol of its transfers.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Renames the program (the plan's name: a variant of an algorithm, e.g. with another
    /// protocol, is another plan).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The collective it computes.
    pub fn collective(&self) -> &Collective {
        &self.collective
    }

    /// Number of instances.
    pub fn instances(&self) -> u32 {
        self.instances
    }

    /// Number of ranks.
    pub fn nranks(&self) -> u32 {
        self.collective.nranks()
    }

    /// Number of traced operations so far.
    pub fn op_count(&self) -> usize {
        self.trace.borrow().ops.len()
    }

    pub(crate) fn trace(&self) -> Ref<'_, Trace> {
        self.trace.borrow()
    }

    /// A reference to `count` chunks of `rank`'s `buffer` from `index`. They must hold data.
    pub fn chunk(&self, rank: u32, buffer: Buffer, index: u32, count: u32) -> Result<Chunk<'_>, DslError> {
        let range = ChunkRange { rank, buffer, index, count };
        let trace = self.trace.borrow();
        trace.check_readable(&range)?;
        Ok(Chunk { program: self, versions: trace.versions(&range), range })
    }

    /// Compiles the program with the default options (see [`crate::passes::compile`]).
    pub fn compile(&self) -> Result<ExecutionPlan, CompileError> {
        crate::passes::compile(self, &CompileOptions::default())
    }

    /// Compiles the program with explicit options.
    pub fn compile_with(&self, options: &CompileOptions) -> Result<ExecutionPlan, CompileError> {
        crate::passes::compile(self, options)
    }

    fn check_hints(&self, hints: &Hints) -> Result<(), DslError> {
        let max_channel = limits::MAX_CHANNELS / self.instances;
        if let Some(c) = hints.channel.filter(|&c| c >= max_channel) {
            return Err(DslError::BadSetting { what: "channel", value: c, max: max_channel });
        }
        let max_tb = (limits::MAX_THREADBLOCKS as u32) / self.instances;
        for tb in [hints.src_tb, hints.dst_tb].into_iter().flatten() {
            if tb >= max_tb {
                return Err(DslError::BadSetting { what: "thread block hint", value: tb, max: max_tb });
            }
        }
        Ok(())
    }

    fn record(
        &self,
        kind: TraceKind,
        src: &Chunk<'_>,
        local: Option<&Chunk<'_>>,
        dst: ChunkRange,
        hints: Hints,
    ) -> Result<Chunk<'_>, DslError> {
        self.check_hints(&hints)?;
        let mut trace = self.trace.borrow_mut();
        for chunk in std::iter::once(src).chain(local) {
            if !std::ptr::eq(chunk.program, self) {
                return Err(DslError::ForeignChunk);
            }
            chunk.check_fresh(&trace)?;
        }
        trace.apply(kind, src.range, local.map(|c| c.range), dst, hints)?;
        Ok(Chunk { program: self, versions: trace.versions(&dst), range: dst })
    }
}

/// A reference to chunks of one rank's buffer, valid until the location is overwritten.
#[derive(Clone)]
pub struct Chunk<'p> {
    program: &'p Program,
    range: ChunkRange,
    versions: Vec<u32>,
}

impl fmt::Debug for Chunk<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Chunk(rank {} {}[{}..{}])",
            self.range.rank,
            self.range.buffer,
            self.range.index,
            self.range.index + self.range.count
        )
    }
}

impl<'p> Chunk<'p> {
    /// The rank holding the chunks.
    pub fn rank(&self) -> u32 {
        self.range.rank
    }

    /// The buffer.
    pub fn buffer(&self) -> Buffer {
        self.range.buffer
    }

    /// First chunk index.
    pub fn index(&self) -> u32 {
        self.range.index
    }

    /// Number of chunks.
    pub fn count(&self) -> u32 {
        self.range.count
    }

    fn check_fresh(&self, trace: &Trace) -> Result<(), DslError> {
        let current = trace.versions(&self.range);
        match current.iter().zip(&self.versions).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(k) => Err(DslError::StaleChunk {
                rank: self.range.rank,
                buffer: self.range.buffer,
                index: self.range.index + k as u32,
            }),
        }
    }

    /// Copies these chunks to `rank`'s `buffer` at `index`; returns a reference to the copy.
    pub fn copy(&self, rank: u32, buffer: Buffer, index: u32) -> Result<Chunk<'p>, DslError> {
        self.copy_with(rank, buffer, index, Hints::default())
    }

    /// [`Chunk::copy`] with scheduling hints.
    pub fn copy_with(&self, rank: u32, buffer: Buffer, index: u32, hints: Hints) -> Result<Chunk<'p>, DslError> {
        let dst = ChunkRange { rank, buffer, index, count: self.range.count };
        self.program.record(TraceKind::Copy, self, None, dst, hints)
    }

    /// Reduces `other` (on any rank) into these chunks in place: `self := self ⊕ other`.
    pub fn reduce(&self, other: &Chunk<'p>) -> Result<Chunk<'p>, DslError> {
        self.reduce_to_with(other, self.range.buffer, self.range.index, Hints::default())
    }

    /// [`Chunk::reduce`] with scheduling hints.
    pub fn reduce_with(&self, other: &Chunk<'p>, hints: Hints) -> Result<Chunk<'p>, DslError> {
        self.reduce_to_with(other, self.range.buffer, self.range.index, hints)
    }

    /// Writes `self ⊕ other` to `buffer` at `index` on this chunk's rank (`other` may be on any
    /// rank). This is how a reduction starts from a read-only input chunk.
    pub fn reduce_to(&self, other: &Chunk<'p>, buffer: Buffer, index: u32) -> Result<Chunk<'p>, DslError> {
        self.reduce_to_with(other, buffer, index, Hints::default())
    }

    /// [`Chunk::reduce_to`] with scheduling hints.
    pub fn reduce_to_with(
        &self,
        other: &Chunk<'p>,
        buffer: Buffer,
        index: u32,
        hints: Hints,
    ) -> Result<Chunk<'p>, DslError> {
        let dst = ChunkRange { rank: self.range.rank, buffer, index, count: self.range.count };
        self.program.record(TraceKind::Reduce, other, Some(self), dst, hints)
    }
}
