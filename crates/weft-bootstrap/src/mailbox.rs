//! Where incoming messages wait for the `recv` (or collective) that takes them.
//!
//! One mailbox per rank. Producers (TCP reader threads, or in-process peers) `deliver` parcels
//! keyed by `(sender, channel)`; consumers `take` them in arrival order, waiting on a condition
//! variable until the parcel arrives, the sender is known to have failed, or the deadline passes.

use std::{
    collections::{HashMap, VecDeque, hash_map::Entry},
    io,
    sync::{Condvar, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use crate::{
    BootstrapError,
    codec::{CodecError, CollectiveOp, FrameKind},
};

/// The namespace a message travels in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Channel {
    /// `send`/`recv` with the user's tag.
    User(u32),
    /// A collective, by the sender's collective sequence number.
    Collective(u64),
}

/// One delivered message.
#[derive(Debug)]
pub(crate) struct Parcel {
    /// The collective it belongs to (`None` for user messages).
    pub(crate) op: Option<CollectiveOp>,
    /// The bytes.
    pub(crate) payload: Vec<u8>,
}

/// Why no more messages will come from a peer.
#[derive(Debug, Clone)]
pub(crate) enum PeerFailure {
    /// The connection ended (the peer exited or dropped its bootstrap).
    Closed,
    /// The peer announced a frame longer than this rank's limit.
    FrameTooLarge { len: u64, limit: usize },
    /// The peer sent bytes that do not decode.
    Malformed(CodecError),
    /// The peer sent a frame kind that has no place on a data connection.
    Unexpected(FrameKind),
    /// Reading from the peer failed.
    Io { kind: io::ErrorKind, message: String },
}

impl PeerFailure {
    fn to_error(&self, rank: usize, peer: usize, during: &'static str) -> BootstrapError {
        match self {
            Self::Closed => BootstrapError::PeerClosed { rank, peer, during },
            Self::FrameTooLarge { len, limit } => {
                BootstrapError::FrameTooLarge { rank, peer: Some(peer), len: *len, limit: *limit }
            }
            Self::Malformed(source) => BootstrapError::Malformed { rank, peer: Some(peer), source: source.clone() },
            Self::Unexpected(got) => BootstrapError::UnexpectedFrame { rank, peer: Some(peer), got: *got, during },
            Self::Io { kind, message } => BootstrapError::io(
                Some(rank),
                format!("reading from rank {peer} during {during}"),
                io::Error::new(*kind, message.clone()),
            ),
        }
    }
}

/// The bound of one operation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    pub(crate) deadline: Instant,
    pub(crate) timeout: Duration,
    pub(crate) during: &'static str,
}

impl Wait {
    /// A wait of `timeout` from now.
    pub(crate) fn new(timeout: Duration, during: &'static str) -> Self {
        Self { deadline: Instant::now() + timeout, timeout, during }
    }
}

#[derive(Debug, Default)]
struct State {
    queues: HashMap<(usize, Channel), VecDeque<Parcel>>,
    failed: HashMap<usize, PeerFailure>,
}

impl State {
    fn pop(&mut self, from: usize, channel: Channel) -> Option<Parcel> {
        match self.queues.entry((from, channel)) {
            Entry::Occupied(mut queue) => {
                let parcel = queue.get_mut().pop_front();
                if queue.get().is_empty() {
                    queue.remove();
                }
                parcel
            }
            Entry::Vacant(_) => None,
        }
    }
}

/// One rank's incoming messages.
#[derive(Debug)]
pub(crate) struct Mailbox {
    rank: usize,
    state: Mutex<State>,
    arrived: Condvar,
}

impl Mailbox {
    /// An empty mailbox for `rank`.
    pub(crate) fn new(rank: usize) -> Self {
        Self { rank, state: Mutex::new(State::default()), arrived: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held (only map and queue operations run under it),
        // and those leave the state consistent even if they did, so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `parcel` from `from` on `channel`.
    pub(crate) fn deliver(&self, from: usize, channel: Channel, parcel: Parcel) {
        self.lock().queues.entry((from, channel)).or_default().push_back(parcel);
        self.arrived.notify_all();
    }

    /// Records that nothing more will come from `from`. Parcels already queued stay deliverable;
    /// the first recorded failure wins.
    pub(crate) fn fail(&self, from: usize, failure: PeerFailure) {
        self.lock().failed.entry(from).or_insert(failure);
        self.arrived.notify_all();
    }

    /// Takes the oldest parcel from `from` on `channel`.
    pub(crate) fn take(&self, from: usize, channel: Channel, wait: &Wait) -> Result<Parcel, BootstrapError> {
        let mut parcels = self.take_each(&[from], channel, wait)?;
        // take_each returns exactly one parcel per sender on success.
        parcels.pop().ok_or(BootstrapError::Timeout {
            rank: self.rank,
            missing: vec![from],
            during: wait.during,
            timeout: wait.timeout,
        })
    }

    /// Takes one parcel from each of `from` on `channel`, in the order of `from`. Fails fast if
    /// any of them has failed; on timeout, names those whose parcel never arrived.
    pub(crate) fn take_each(
        &self,
        from: &[usize],
        channel: Channel,
        wait: &Wait,
    ) -> Result<Vec<Parcel>, BootstrapError> {
        let mut got: Vec<Option<Parcel>> = from.iter().map(|_| None).collect();
        let mut state = self.lock();
        loop {
            for (slot, &peer) in got.iter_mut().zip(from) {
                if slot.is_none() {
                    *slot = state.pop(peer, channel);
                }
            }
            let mut missing: Vec<usize> =
                got.iter().zip(from).filter(|(slot, _)| slot.is_none()).map(|(_, &peer)| peer).collect();
            if missing.is_empty() {
                return Ok(got.into_iter().flatten().collect());
            }
            if let Some((&peer, failure)) = missing.iter().find_map(|peer| state.failed.get(peer).map(|f| (peer, f))) {
                return Err(failure.to_error(self.rank, peer, wait.during));
            }
            let now = Instant::now();
            if now >= wait.deadline {
                missing.sort_unstable();
                return Err(BootstrapError::Timeout {
                    rank: self.rank,
                    missing,
                    during: wait.during,
                    timeout: wait.timeout,
                });
            }
            state = self
                .arrived
                .wait_timeout(state, wait.deadline - now)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn parcel(bytes: &[u8]) -> Parcel {
        Parcel { op: None, payload: bytes.to_vec() }
    }

    #[test]
    fn keeps_order_per_sender_and_channel() {
        let mailbox = Mailbox::new(0);
        let wait = Wait::new(Duration::from_secs(1), "test");
        mailbox.deliver(1, Channel::User(1), parcel(b"a"));
        mailbox.deliver(1, Channel::User(2), parcel(b"x"));
        mailbox.deliver(1, Channel::User(1), parcel(b"b"));
        mailbox.deliver(2, Channel::User(1), parcel(b"c"));
        let take = |from, tag| mailbox.take(from, Channel::User(tag), &wait).unwrap().payload;
        assert_eq!(take(1, 2), b"x");
        assert_eq!(take(2, 1), b"c");
        assert_eq!(take(1, 1), b"a");
        assert_eq!(take(1, 1), b"b");
        assert!(mailbox.lock().queues.is_empty());
    }

    #[test]
    fn timeout_names_the_missing_senders() {
        let mailbox = Mailbox::new(0);
        mailbox.deliver(2, Channel::Collective(0), parcel(b""));
        let wait = Wait::new(Duration::from_millis(50), "all_gather");
        let err = mailbox.take_each(&[3, 2, 1], Channel::Collective(0), &wait).unwrap_err();
        match err {
            BootstrapError::Timeout { rank: 0, missing, during: "all_gather", .. } => assert_eq!(missing, vec![1, 3]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn queued_parcels_outlive_the_failure_of_their_sender() {
        let mailbox = Mailbox::new(0);
        let wait = Wait::new(Duration::from_secs(5), "recv");
        mailbox.deliver(1, Channel::User(0), parcel(b"last words"));
        mailbox.fail(1, PeerFailure::Closed);
        mailbox.fail(1, PeerFailure::Unexpected(FrameKind::Hello));
        assert_eq!(mailbox.take(1, Channel::User(0), &wait).unwrap().payload, b"last words");
        let started = Instant::now();
        assert!(matches!(
            mailbox.take(1, Channel::User(0), &wait),
            Err(BootstrapError::PeerClosed { rank: 0, peer: 1, .. })
        ));
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_waiting_taker_wakes_on_delivery() {
        let mailbox = std::sync::Arc::new(Mailbox::new(0));
        let producer = {
            let mailbox = mailbox.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                mailbox.deliver(1, Channel::User(9), parcel(b"late"));
            })
        };
        let wait = Wait::new(Duration::from_secs(5), "recv");
        assert_eq!(mailbox.take(1, Channel::User(9), &wait).unwrap().payload, b"late");
        producer.join().unwrap();
    }
}
