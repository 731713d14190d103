//! [`InProcessBootstrap`]: the bootstrap for one process that drives several GPUs from threads.

use std::{
    fmt,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{
    Bootstrap, BootstrapError,
    codec::Message,
    env,
    mailbox::{Channel, Mailbox, Parcel, PeerFailure},
    ops::{self, Transport},
};

/// What the handles of one group share.
#[derive(Debug)]
struct Group {
    timeout: Duration,
    mailboxes: Vec<Mailbox>,
    /// `alive[r]` is false once rank `r`'s handle is dropped.
    alive: Vec<AtomicBool>,
}

/// One rank of a group of ranks that live in the same process, one per thread.
///
/// Messages move between threads through shared mailboxes; nothing touches the network.
/// Operations are bounded by the same timeout as [`TcpBootstrap`](crate::TcpBootstrap)'s and
/// name the ranks that never arrived; dropping a handle makes its peers' waits on it fail with
/// [`BootstrapError::PeerClosed`].
///
/// ```
/// use weft_bootstrap::{Bootstrap, InProcessBootstrap};
///
/// let ranks = InProcessBootstrap::group(3)?;
/// std::thread::scope(|s| {
///     for bs in &ranks {
///         s.spawn(move || {
///             let all = bs.all_gather(&[bs.rank() as u8]).expect("all_gather");
///             assert_eq!(all, vec![vec![0], vec![1], vec![2]]);
///         });
///     }
/// });
/// # Ok::<(), weft_bootstrap::BootstrapError>(())
/// ```
pub struct InProcessBootstrap {
    rank: usize,
    group: Arc<Group>,
    seq: AtomicU64,
}

/// Configures an [`InProcessBootstrap`] group.
#[derive(Debug, Clone, Default)]
pub struct InProcessBuilder {
    timeout: Option<Duration>,
}

impl InProcessBuilder {
    /// A builder with every value at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bound on every operation. Wins over `WEFT_BOOTSTRAP_TIMEOUT`; default 30 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Creates the `world_size` handles of one group, indexed by rank.
    pub fn group(self, world_size: usize) -> Result<Vec<InProcessBootstrap>, BootstrapError> {
        if world_size == 0 {
            return Err(BootstrapError::InvalidConfig("the world size must be at least 1".to_owned()));
        }
        let timeout = env::resolve_timeout(self.timeout, env::lookup_process_env)?;
        let group = Arc::new(Group {
            timeout,
            mailboxes: (0..world_size).map(Mailbox::new).collect(),
            alive: (0..world_size).map(|_| AtomicBool::new(true)).collect(),
        });
        Ok((0..world_size)
            .map(|rank| InProcessBootstrap { rank, group: group.clone(), seq: AtomicU64::new(0) })
            .collect())
    }
}

impl InProcessBootstrap {
    /// A builder for a group with non-default settings.
    pub fn builder() -> InProcessBuilder {
        InProcessBuilder::new()
    }

    /// Creates the `world_size` handles of one group with default settings, indexed by rank.
    /// Give each to its own thread.
    pub fn group(world_size: usize) -> Result<Vec<Self>, BootstrapError> {
        InProcessBuilder::new().group(world_size)
    }

    /// The bound on every operation.
    pub fn timeout(&self) -> Duration {
        self.group.timeout
    }

    /// Runs `rank_main(rank, bootstrap)` for `world_size` ranks, each on a thread of its own
    /// (named `<name>-<rank>`) holding its handle of one new group, and returns every thread's
    /// outcome in rank order (`Err` when it panicked): the one-process-many-ranks pattern.
    pub fn run_threads<T: Send + 'static>(
        world_size: usize,
        name: &str,
        rank_main: impl Fn(usize, Arc<InProcessBootstrap>) -> T + Send + Sync + 'static,
    ) -> Result<Vec<std::thread::Result<T>>, BootstrapError> {
        let rank_main = Arc::new(rank_main);
        let handles = Self::group(world_size)?
            .into_iter()
            .enumerate()
            .map(|(rank, bootstrap)| {
                let rank_main = Arc::clone(&rank_main);
                std::thread::Builder::new()
                    .name(format!("{name}-{rank}"))
                    .spawn(move || rank_main(rank, Arc::new(bootstrap)))
                    .map_err(|e| BootstrapError::io(Some(rank), "spawning the rank's thread", e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(handles.into_iter().map(|h| h.join()).collect())
    }
}

impl fmt::Debug for InProcessBootstrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcessBootstrap")
            .field("rank", &self.rank)
            .field("world_size", &self.group.mailboxes.len())
            .field("timeout", &self.group.timeout)
            .finish_non_exhaustive()
    }
}

impl Drop for InProcessBootstrap {
    fn drop(&mut self) {
        self.group.alive[self.rank].store(false, Ordering::Release);
        for (rank, mailbox) in self.group.mailboxes.iter().enumerate() {
            if rank != self.rank {
                mailbox.fail(self.rank, PeerFailure::Closed);
            }
        }
    }
}

impl Transport for InProcessBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.group.mailboxes.len()
    }

    fn timeout(&self) -> Duration {
        self.group.timeout
    }

    fn mailbox(&self) -> &Mailbox {
        &self.group.mailboxes[self.rank]
    }

    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    fn post(&self, peer: usize, message: &Message<'_>, _deadline: Instant) -> Result<(), BootstrapError> {
        if !self.group.alive[peer].load(Ordering::Acquire) {
            return Err(BootstrapError::PeerClosed { rank: self.rank, peer, during: "send" });
        }
        let (channel, parcel) = match message {
            Message::Data { tag, payload } => (Channel::User(*tag), Parcel { op: None, payload: payload.to_vec() }),
            Message::Collective { seq, op, payload } => {
                (Channel::Collective(*seq), Parcel { op: Some(*op), payload: payload.to_vec() })
            }
            other => {
                return Err(BootstrapError::UnexpectedFrame {
                    rank: self.rank,
                    peer: Some(peer),
                    got: other.kind(),
                    during: "send",
                });
            }
        };
        self.group.mailboxes[peer].deliver(self.rank, channel, parcel);
        Ok(())
    }
}

impl Bootstrap for InProcessBootstrap {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.group.mailboxes.len()
    }

    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        ops::all_gather(self, mine)
    }

    fn broadcast(&self, root: usize, data: Option<&[u8]>) -> Result<Vec<u8>, BootstrapError> {
        ops::broadcast(self, root, data)
    }

    fn barrier(&self) -> Result<(), BootstrapError> {
        ops::barrier(self)
    }

    fn send(&self, peer: usize, tag: u32, data: &[u8]) -> Result<(), BootstrapError> {
        ops::send(self, peer, tag, data)
    }

    fn recv(&self, peer: usize, tag: u32) -> Result<Vec<u8>, BootstrapError> {
        ops::recv(self, peer, tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_threads_returns_every_rank_in_order_and_a_panic_as_an_error() {
        let outcomes = InProcessBootstrap::run_threads(3, "t", |rank, bootstrap| {
            assert_eq!(std::thread::current().name(), Some(format!("t-{rank}").as_str()));
            if rank == 1 {
                panic!("rank 1 fails on purpose");
            }
            bootstrap.rank()
        })
        .unwrap();
        assert_eq!(outcomes.len(), 3);
        assert_eq!((outcomes[0].as_ref().ok(), outcomes[2].as_ref().ok()), (Some(&0), Some(&2)));
        assert!(outcomes[1].is_err());
        assert!(InProcessBootstrap::run_threads(0, "t", |rank, _| rank).is_err());
    }
}
