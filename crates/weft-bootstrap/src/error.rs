//! The one error type of this crate.

use std::{io, net::SocketAddr, time::Duration};

use crate::codec::{CodecError, FrameKind};

/// Everything that can go wrong while bootstrapping or exchanging bytes.
///
/// `rank` is always the rank that reports the error; `peer` is the other side where one is known.
/// Timeouts list the ranks that never arrived, so a hung job names its culprits.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootstrapError {
    /// A value given in code is unusable (world size 0, a zero timeout, a tiny frame limit, ...).
    #[error("invalid bootstrap configuration: {0}")]
    InvalidConfig(String),

    /// A required environment variable is not set.
    #[error("environment variable {name} is not set")]
    MissingEnv {
        /// The variable.
        name: &'static str,
    },

    /// An environment variable is set to something unusable.
    #[error("environment variable {name}={value:?} is invalid: {reason}")]
    InvalidEnv {
        /// The variable.
        name: &'static str,
        /// Its value, as read (lossily converted to UTF-8).
        value: String,
        /// Why it was rejected.
        reason: String,
    },

    /// Bytes or text that should hold a [`UniqueId`](crate::UniqueId) do not.
    #[error("invalid unique id: {reason}")]
    InvalidUniqueId {
        /// What is wrong with it.
        reason: String,
    },

    /// A rank was asked to join as `rank`, which is not below `world_size`.
    #[error("rank {rank} is out of range for world size {world_size}")]
    RankOutOfRange {
        /// The offending rank.
        rank: usize,
        /// The world size it was checked against.
        world_size: usize,
    },

    /// An operation named a peer that does not exist.
    #[error("rank {rank}: peer {peer} is out of range for world size {world_size}")]
    PeerOutOfRange {
        /// The reporting rank.
        rank: usize,
        /// The peer it named.
        peer: usize,
        /// The world size.
        world_size: usize,
    },

    /// An operation was called with arguments it cannot use.
    #[error("rank {rank}: invalid argument: {reason}")]
    InvalidArgument {
        /// The reporting rank.
        rank: usize,
        /// What is wrong.
        reason: &'static str,
    },

    /// Two processes registered with the rendezvous root as the same rank; the second one gets this.
    #[error("rank {rank} is already registered with the rendezvous root (two processes claim it)")]
    DuplicateRank {
        /// The rank claimed twice.
        rank: usize,
    },

    /// A rank was started with a different world size than rank 0.
    #[error("rank {rank} was started with world size {got}, but rank 0 uses world size {expected}")]
    WorldSizeMismatch {
        /// The reporting rank.
        rank: usize,
        /// Rank 0's world size.
        expected: usize,
        /// This rank's world size.
        got: usize,
    },

    /// A wait ran past its bound. `missing` lists the ranks whose part never arrived.
    #[error("rank {rank}: timed out after {timeout:?} during {during}; ranks that never arrived: {missing:?}")]
    Timeout {
        /// The reporting rank.
        rank: usize,
        /// Ranks that did not arrive, ascending.
        missing: Vec<usize>,
        /// The operation that timed out (`"rendezvous"`, `"recv"`, `"all_gather"`, ...).
        during: &'static str,
        /// The bound that was exceeded.
        timeout: Duration,
    },

    /// The other end of a connection does not know this job's secret: either it is a stranger, or
    /// this rank holds the wrong [`UniqueId`](crate::UniqueId).
    #[error(
        "rank {rank}: the endpoint at {peer_addr} does not know this job's secret (a stranger, or this rank has the wrong unique id)"
    )]
    WrongSecret {
        /// The reporting rank.
        rank: usize,
        /// Address of the other end.
        peer_addr: SocketAddr,
    },

    /// A peer (or the rendezvous root, hosted by rank 0) closed its connection or exited.
    #[error("rank {rank}: rank {peer} closed its connection or exited during {during}")]
    PeerClosed {
        /// The reporting rank.
        rank: usize,
        /// The rank that went away.
        peer: usize,
        /// What this rank was doing.
        during: &'static str,
    },

    /// A frame is longer than the configured limit; nothing of that size was allocated.
    #[error("rank {rank}: frame of {len} bytes{} exceeds the limit of {limit} bytes", from_peer(*.peer))]
    FrameTooLarge {
        /// The reporting rank.
        rank: usize,
        /// The sender (or receiver, when the check failed before sending), if known.
        peer: Option<usize>,
        /// The announced (or attempted) body length.
        len: u64,
        /// The configured limit.
        limit: usize,
    },

    /// A frame could not be decoded.
    #[error("rank {rank}: malformed frame{}: {source}", from_peer(*.peer))]
    Malformed {
        /// The reporting rank.
        rank: usize,
        /// The sender, if known.
        peer: Option<usize>,
        /// What the decoder rejected.
        #[source]
        source: CodecError,
    },

    /// A well-formed frame arrived where the protocol does not allow it.
    #[error("rank {rank}: unexpected {got:?} frame{} during {during}", from_peer(*.peer))]
    UnexpectedFrame {
        /// The reporting rank.
        rank: usize,
        /// The sender, if known.
        peer: Option<usize>,
        /// The kind that arrived.
        got: FrameKind,
        /// What this rank was doing.
        during: &'static str,
    },

    /// Ranks called different collectives at the same point in their sequence.
    #[error("rank {rank}: collective mismatch with rank {peer}: this rank called {expected}, the peer called {got}")]
    CollectiveMismatch {
        /// The reporting rank.
        rank: usize,
        /// The peer whose message did not match.
        peer: usize,
        /// The collective this rank is in.
        expected: &'static str,
        /// The collective the peer is in.
        got: &'static str,
    },

    /// Ranks named different roots for the same broadcast.
    #[error(
        "rank {rank}: broadcast root mismatch with rank {peer}: this rank named root {root}, the peer named root {peer_root}"
    )]
    RootMismatch {
        /// The reporting rank.
        rank: usize,
        /// The peer that named another root.
        peer: usize,
        /// The root this rank named.
        root: usize,
        /// The root the peer named.
        peer_root: usize,
    },

    /// An operating-system call failed.
    #[error("{}{context}: {source}", rank_prefix(*.rank))]
    Io {
        /// The reporting rank, if the failure happened on behalf of one.
        rank: Option<usize>,
        /// What was being done, with addresses.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl BootstrapError {
    /// Shorthand for [`BootstrapError::Io`].
    pub(crate) fn io(rank: Option<usize>, context: impl Into<String>, source: io::Error) -> Self {
        Self::Io { rank, context: context.into(), source }
    }
}

fn from_peer(peer: Option<usize>) -> String {
    match peer {
        Some(peer) => format!(" (peer rank {peer})"),
        None => String::new(),
    }
}

fn rank_prefix(rank: Option<usize>) -> String {
    match rank {
        Some(rank) => format!("rank {rank}: "),
        None => String::new(),
    }
}
