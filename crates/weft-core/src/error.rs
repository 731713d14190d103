//! Errors of the communicator layer; every variant says which rank (and peer) it concerns.

use weft_bootstrap::BootstrapError;
use weft_gpu::GpuError;

use crate::env::EnvError;
use weft_bootstrap::codec::CodecError;

/// Connecting to a peer failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// No transport reaches the peer.
    #[error("rank {rank} cannot reach peer {peer}: {reason}")]
    NoTransport {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// Why no transport applies.
        reason: String,
    },
    /// The peer's GPU memory could not be mapped.
    #[error("rank {rank} could not map memory of peer {peer}: {source}")]
    Map {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// Cause.
        source: GpuError,
    },
    /// Fetching a file descriptor from the peer's process failed.
    #[error("rank {rank} could not fetch a memory handle from peer {peer}: {detail}")]
    FdFetch {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// What went wrong.
        detail: String,
    },
    /// The peer sent a malformed descriptor.
    #[error("rank {rank} got a malformed descriptor from peer {peer}: {source}")]
    Descriptor {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// Cause.
        source: CodecError,
    },
}

/// Registering memory failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterMemoryError {
    /// The memory belongs to another device than the communicator's.
    #[error("rank {rank}: memory on GPU {memory_device} cannot be registered with a communicator on GPU {comm_device}")]
    WrongDevice {
        /// This rank.
        rank: usize,
        /// Device of the memory.
        memory_device: usize,
        /// Device of the communicator.
        comm_device: usize,
    },
    /// A CUDA call failed.
    #[error("rank {rank}: {source}")]
    Gpu {
        /// This rank.
        rank: usize,
        /// Cause.
        source: GpuError,
    },
}

/// A failure a kernel recorded in the device error record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFailure {
    /// Rank that was waiting.
    pub rank: i32,
    /// Peer it waited for.
    pub peer: i32,
    /// What it was doing (`semaphore wait`, `LL8 packet read`, ...).
    pub op: &'static str,
    /// Value it needed.
    pub expected: u64,
    /// Value it last saw.
    pub observed: u64,
}

/// weft-core's top-level error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A CUDA call failed.
    #[error("rank {rank}: {source}")]
    Gpu {
        /// This rank.
        rank: usize,
        /// Cause.
        source: GpuError,
    },
    /// The bootstrap failed.
    #[error("rank {rank}: bootstrap: {source}")]
    Bootstrap {
        /// This rank.
        rank: usize,
        /// Cause.
        source: BootstrapError,
    },
    /// Connecting to a peer failed.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// Registering memory failed.
    #[error(transparent)]
    RegisterMemory(#[from] RegisterMemoryError),
    /// A bounded wait on the device expired.
    #[error(
        "rank {} timed out in {} waiting for peer {} (needed {}, saw {}): peer {} stalled or died",
        .0.rank, .0.op, .0.peer, .0.expected, .0.observed, .0.peer
    )]
    PeerTimeout(DeviceFailure),
    /// Invalid environment.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// Invalid argument.
    #[error("rank {rank}: invalid argument: {detail}")]
    InvalidArgument {
        /// This rank.
        rank: usize,
        /// What is wrong.
        detail: String,
    },
}
