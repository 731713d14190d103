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
    /// A peer made the call otherwise ([`weft_types::DeviceErrorCode::Mismatch`]): `expected` is this
    /// rank's choice, `observed` the peer's, rather than a wait that ran out.
    pub mismatch: bool,
}

/// [`DeviceFailure::op`] of a plan executor fence that found a peer placing the call's outputs
/// otherwise ([`weft_types::WaitOp::ExecPlacement`]).
pub const PLACEMENT_MISMATCH_OP: &str = "plan executor call";

/// A plan executor launch's placement of its outputs in words: 1 runs into the ranks' user
/// outputs, 0 stages through scratch ([`weft_types::WaitOp::ExecPlacement`]).
pub fn placement_words(bit: u64) -> &'static str {
    match bit {
        0 => "staged through scratch",
        1 => "ran into the ranks' outputs (zero-copy)",
        _ => "sent an unknown placement",
    }
}

impl DeviceFailure {
    /// The failure in words: a timeout names the stalled peer, a mismatch both choices.
    fn describe(&self) -> String {
        let (rank, peer) = (self.rank, self.peer);
        if !self.mismatch {
            return format!(
                "rank {rank} timed out in {} waiting for peer {peer} (needed {}, saw {}): peer {peer} stalled or died",
                self.op, self.expected, self.observed
            );
        }
        if self.op == PLACEMENT_MISMATCH_OP {
            return format!(
                "rank {rank}: {}: this rank {}, peer {peer} {}; through a window every rank must call a plan alike, all in place or all out of place",
                self.op,
                placement_words(self.expected),
                placement_words(self.observed)
            );
        }
        format!("rank {rank}: {}: this rank chose {}, peer {peer} {}", self.op, self.expected, self.observed)
    }
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
    #[error("{}", .0.describe())]
    PeerTimeout(DeviceFailure),
    /// A kernel found a peer making the call otherwise (a plan executor fence: the placement
    /// of the outputs) and gave up before writing any output; the peer fails alike.
    #[error("{}", .0.describe())]
    PeerMismatch(DeviceFailure),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(op: &'static str, expected: u64, observed: u64, mismatch: bool) -> DeviceFailure {
        DeviceFailure { rank: 1, peer: 0, op, expected, observed, mismatch }
    }

    /// A placement mismatch names the call, this rank's choice and the peer's, and the rule.
    #[test]
    fn a_placement_mismatch_names_both_choices() {
        let text = Error::PeerMismatch(failure(PLACEMENT_MISMATCH_OP, 0, 1, true)).to_string();
        assert_eq!(
            text,
            "rank 1: plan executor call: this rank staged through scratch, peer 0 ran into the ranks' outputs \
             (zero-copy); through a window every rank must call a plan alike, all in place or all out of place"
        );
        let other = Error::PeerMismatch(failure(PLACEMENT_MISMATCH_OP, 1, 0, true)).to_string();
        assert!(
            other.contains("this rank ran into the ranks' outputs (zero-copy), peer 0 staged through scratch"),
            "{other}"
        );
        assert!(!text.contains("timed out") && !other.contains("timed out"));
    }

    /// A timeout reads as before: the stalled peer and the values.
    #[test]
    fn a_timeout_names_the_stalled_peer() {
        let text = Error::PeerTimeout(failure("semaphore wait", 5, 4, false)).to_string();
        assert_eq!(
            text,
            "rank 1 timed out in semaphore wait waiting for peer 0 (needed 5, saw 4): peer 0 stalled or died"
        );
    }
}
