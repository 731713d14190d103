//! The algorithm DSL: a chunk-level builder traced into a chunk DAG, as in MSCCLang, and a
//! channel-level builder ([`ChannelProgram`], MSCCL++'s level) whose thread blocks are written
//! operation by operation and verified, not derived.
//!
//! A [`Program`] is created for a [`Collective`]. Every rank has three buffers
//! ([`Buffer::Input`], [`Buffer::Output`], [`Buffer::Scratch`]) divided into chunks.
//! [`Program::chunk`] returns a reference to chunks; [`Chunk::copy`] moves them to any rank and
//! [`Chunk::reduce`] / [`Chunk::reduce_to`] reduce a (possibly remote) chunk into a local one.
//! Each call is executed on a symbolic state right away, so mistakes are reported where they are
//! made:
//!
//! - only the latest version of a chunk may be used: a reference taken before its location was
//!   overwritten is stale ([`DslError::StaleChunk`]); this is what makes programs race-free by
//!   construction, since every remaining conflict is an ordered edge of the chunk DAG;
//! - reading uninitialised chunks, writing the (read-only) input buffer, mixing chunk sizes and
//!   overlapping ranges are errors.
//!
//! ```
//! use weft_plan::dsl::{Buffer, Collective, Program};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Two ranks exchange their input chunk: an all-gather.
//! let p = Program::new("tiny_allgather", Collective::all_gather(2, 1)?);
//! for r in 0..2 {
//!     let c = p.chunk(r, Buffer::Input, 0, 1)?;
//!     c.copy(r, Buffer::Output, r)?;
//!     c.copy(1 - r, Buffer::Output, r)?;
//! }
//! let plan = p.compile()?;
//! assert_eq!(plan.nranks, 2);
//! # Ok(())
//! # }
//! ```

pub mod channels;
mod collective;
mod program;
pub(crate) mod trace;

use thiserror::Error;

pub use crate::plan::Buffer;
pub use channels::{Channel, ChannelProgram, MemoryChannel, PortChannel, ThreadBlockGroup, ThreadBlockOps};
pub use collective::{Collective, InputChunk, Postcondition};
pub use program::{Chunk, Hints, Program};

/// A program of either level: chunk level (traced, then scheduled by the compiler) or channel
/// level (compiled as written). What code that handles both keeps.
#[derive(Debug)]
pub enum AnyProgram {
    /// A chunk-level program.
    Chunks(Program),
    /// A channel-level program.
    Channels(ChannelProgram),
}

impl AnyProgram {
    /// The program as a verified plan.
    pub fn compile(&self) -> Result<crate::ExecutionPlan, crate::CompileError> {
        match self {
            AnyProgram::Chunks(p) => p.compile(),
            AnyProgram::Channels(p) => p.compile(),
        }
    }

    /// [`Program::with_pipeline`] or [`ChannelProgram::with_pipeline`].
    pub fn with_pipeline(self, tiles: u32) -> Result<Self, DslError> {
        match self {
            AnyProgram::Chunks(p) => Ok(p.with_pipeline(tiles)?.into()),
            AnyProgram::Channels(p) => Ok(p.with_pipeline(tiles)?.into()),
        }
    }
}

impl From<Program> for AnyProgram {
    fn from(p: Program) -> Self {
        AnyProgram::Chunks(p)
    }
}

impl From<ChannelProgram> for AnyProgram {
    fn from(p: ChannelProgram) -> Self {
        AnyProgram::Channels(p)
    }
}

/// A mistake in a DSL program, reported by the call that made it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DslError {
    /// The collective's shape is not usable.
    #[error(
        "bad collective shape: {nranks} ranks, {input_chunks} input chunks, {output_chunks} output chunks, {size_classes} size classes"
    )]
    BadCollective {
        /// Ranks.
        nranks: u32,
        /// Input chunks per rank.
        input_chunks: u32,
        /// Output chunks per rank.
        output_chunks: u32,
        /// Chunks per block.
        size_classes: u32,
    },
    /// A rank that does not exist.
    #[error("rank {rank} does not exist (the program has {nranks} ranks)")]
    RankOutOfRange {
        /// The rank named.
        rank: u32,
        /// Ranks in the program.
        nranks: u32,
    },
    /// Chunks outside their buffer.
    #[error("rank {rank} {buffer}[{index}..{end}] is out of range ({buffer} has {chunks} chunks)")]
    IndexOutOfRange {
        /// The rank.
        rank: u32,
        /// The buffer.
        buffer: Buffer,
        /// First chunk.
        index: u32,
        /// One past the last chunk.
        end: u64,
        /// Chunks in the buffer.
        chunks: u32,
    },
    /// A chunk reference must cover at least one chunk.
    #[error("a chunk reference must cover at least one chunk")]
    EmptyChunk,
    /// Reading a chunk nothing has written.
    #[error("rank {rank} {buffer}[{index}] is read before anything writes it")]
    Uninitialized {
        /// The rank.
        rank: u32,
        /// The buffer.
        buffer: Buffer,
        /// The chunk.
        index: u32,
    },
    /// Using a reference whose location was overwritten after it was taken.
    #[error(
        "stale chunk reference: rank {rank} {buffer}[{index}] was overwritten after this reference was taken (only the latest version of a chunk may be used)"
    )]
    StaleChunk {
        /// The rank.
        rank: u32,
        /// The buffer.
        buffer: Buffer,
        /// The chunk.
        index: u32,
    },
    /// Writing the input buffer.
    #[error("rank {rank} input[{index}] is written, but input buffers are read-only")]
    WriteToInput {
        /// The rank.
        rank: u32,
        /// The chunk.
        index: u32,
    },
    /// Putting data of one chunk size where another is expected.
    #[error("rank {rank} {buffer}[{index}] has chunk size class {expected} but receives data of class {found}")]
    SizeClassMismatch {
        /// The rank.
        rank: u32,
        /// The buffer.
        buffer: Buffer,
        /// The chunk.
        index: u32,
        /// Class of the location (or of the first operand).
        expected: u32,
        /// Class of the data.
        found: u32,
    },
    /// Source and destination partly overlap (or a copy onto itself).
    #[error("rank {rank} {buffer}[{index}]: source and destination overlap")]
    Overlap {
        /// The rank.
        rank: u32,
        /// The buffer.
        buffer: Buffer,
        /// First shared chunk.
        index: u32,
    },
    /// Reduce operands of different lengths.
    #[error("reduce operands cover {left} and {right} chunks")]
    CountMismatch {
        /// Chunks of the first operand.
        left: u32,
        /// Chunks of the second operand.
        right: u32,
    },
    /// A chunk reference of another program.
    #[error("a chunk reference of another program was used")]
    ForeignChunk,
    /// An algorithm's parameters do not meet its constraints.
    #[error("{algorithm}: {reason}")]
    Constraint {
        /// The algorithm.
        algorithm: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A hint or program setting out of range.
    #[error("{what} {value} is out of range (limit {max})")]
    BadSetting {
        /// What.
        what: &'static str,
        /// Value given.
        value: u32,
        /// Limit.
        max: u32,
    },
}
