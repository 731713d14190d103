//! The receiving side of counter updates: each inbound connection registered for counters is
//! one (peer, channel) stream; an arriving immediate goes through the stream's
//! [`ImmediateOrder`] and every update it releases is applied, in sequence order, to a host
//! shadow of the stream's counters and then stored where readers see it ([`CounterStore`]).
//!
//! Readers therefore only ever observe the counters after some prefix of the sender's updates:
//! the stores of one arrival are made in sequence order, each a release, while the stream's lock
//! is held. A stream that fails (a gap that outlived its timeout, an update beyond the window)
//! keeps its error, so a reader waiting on a counter is told which peer and sequence number
//! are missing instead of only that time ran out.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use weft_types::{CounterUpdate, TRANSFER_COUNTER_BITS};

use super::immediate::{CounterImmediate, DEFAULT_WINDOW};
use super::ordering::{Arrival, ImmediateOrder, OrderingError, StreamKey};
use super::transport::{ConnectionId, MAX_CONNECTIONS, MemoryError};

/// Counters per stream (the immediate's counter field).
pub const COUNTERS_PER_STREAM: usize = 1 << TRANSFER_COUNTER_BITS;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking holder leaves plain counters behind; keep going with them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Applying a counter update failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CounterError {
    /// No counters are registered for the connection the update arrived on.
    #[error("a counter update arrived on connection {connection}, which has no counters registered")]
    Unregistered {
        /// The inbound connection.
        connection: ConnectionId,
    },
    /// The stream's ordering failed (a gap timed out, an update beyond the window, a
    /// conflicting duplicate); the error names the peer, channel and sequence number.
    #[error(transparent)]
    Ordering(#[from] OrderingError),
    /// Storing a counter failed.
    #[error("peer {peer} channel {channel}: storing counter {counter}: {source}")]
    Store {
        /// The sending rank.
        peer: u32,
        /// The channel.
        channel: u16,
        /// The counter index.
        counter: u16,
        /// Cause.
        source: MemoryError,
    },
    /// A reader's wait for a counter value ran out.
    #[error(
        "waited {waited:?} for counter {counter} of peer {peer} channel {channel} to reach {expected} (it is {observed}; {applied} updates applied)"
    )]
    Timeout {
        /// The sending rank.
        peer: u32,
        /// The channel.
        channel: u16,
        /// The counter index.
        counter: u16,
        /// The value waited for.
        expected: u64,
        /// The value last seen.
        observed: u64,
        /// Updates of the stream applied so far.
        applied: u64,
        /// How long the wait took.
        waited: Duration,
    },
    /// The stream settings are unusable.
    #[error("counter stream of connection {connection}: {detail}")]
    Config {
        /// The inbound connection.
        connection: ConnectionId,
        /// What is wrong.
        detail: String,
    },
}

/// Where a stream's counter values become visible to readers.
pub trait CounterStore: Send + Sync + fmt::Debug {
    /// Makes `value` the value of `counter` (`< COUNTERS_PER_STREAM`) for readers, with release
    /// semantics: whatever the inbox applied before is visible to a reader that sees it.
    fn store(&self, counter: u16, value: u64) -> Result<(), MemoryError>;
}

/// Counters in host memory: one `u64` per counter index.
#[derive(Debug)]
pub struct HostCounters {
    values: Box<[AtomicU64]>,
}

impl Default for HostCounters {
    fn default() -> Self {
        Self { values: (0..COUNTERS_PER_STREAM).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl HostCounters {
    /// The value of `counter` (acquire); 0 for an index beyond the counters.
    pub fn load(&self, counter: u16) -> u64 {
        self.values.get(usize::from(counter)).map_or(0, |v| v.load(Ordering::Acquire))
    }
}

impl CounterStore for HostCounters {
    fn store(&self, counter: u16, value: u64) -> Result<(), MemoryError> {
        let slot = self.values.get(usize::from(counter)).ok_or(MemoryError::OutOfBounds {
            index: 0,
            offset: u64::from(counter) * 8,
            len: 8,
            size: COUNTERS_PER_STREAM * 8,
        })?;
        slot.store(value, Ordering::Release);
        Ok(())
    }
}

/// Ordering settings of a stream; the sender's [`TransferHandler`](super::TransferHandler) must
/// use the same window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterConfig {
    /// Updates the sender may have unacknowledged, `1..=MAX_WINDOW`.
    pub window: u32,
    /// How long a hole may stay open while later updates wait.
    pub gap_timeout: Duration,
}

impl Default for CounterConfig {
    fn default() -> Self {
        Self { window: DEFAULT_WINDOW, gap_timeout: Duration::from_secs(5) }
    }
}

/// One inbound (peer, channel) stream of counter updates.
#[derive(Debug)]
pub struct CounterStream {
    key: StreamKey,
    store: Arc<dyn CounterStore>,
    state: Mutex<StreamState>,
}

#[derive(Debug)]
struct StreamState {
    order: ImmediateOrder,
    /// The counters after the updates applied so far (what was stored).
    shadow: Box<[u64]>,
    /// The error that stopped the stream.
    failure: Option<CounterError>,
}

impl CounterStream {
    /// The stream of `key`, storing into `store`.
    pub fn new(key: StreamKey, config: CounterConfig, store: Arc<dyn CounterStore>) -> Result<Self, CounterError> {
        let order = ImmediateOrder::new(config.window, config.gap_timeout)?;
        let shadow = vec![0; COUNTERS_PER_STREAM].into_boxed_slice();
        Ok(Self { key, store, state: Mutex::new(StreamState { order, shadow, failure: None }) })
    }

    /// The stream's peer and channel.
    pub fn key(&self) -> StreamKey {
        self.key
    }

    /// Takes the immediate `word`, arrived at `now`: applies and stores what it releases, in
    /// sequence order, or holds it. A failed stream keeps failing with its first error.
    pub fn arrive(&self, word: u32, now: Instant) -> Result<Arrival, CounterError> {
        let mut state = lock(&self.state);
        if let Some(e) = &state.failure {
            return Err(e.clone());
        }
        let StreamState { order, shadow, .. } = &mut *state;
        let mut released: Vec<(u16, u64)> = Vec::new();
        let arrival = order.arrive(self.key, CounterImmediate::decode(word), now, |counter, update: CounterUpdate| {
            // The immediate's counter field has TRANSFER_COUNTER_BITS bits: inside the shadow.
            let value = &mut shadow[usize::from(counter)];
            *value = update.apply(*value);
            released.push((counter, *value));
        });
        let result = arrival.map_err(CounterError::from).and_then(|arrival| {
            for (counter, value) in released {
                self.store.store(counter, value).map_err(|source| CounterError::Store {
                    peer: self.key.peer,
                    channel: self.key.channel,
                    counter,
                    source,
                })?;
            }
            Ok(arrival)
        });
        if let Err(e) = &result {
            state.failure = Some(e.clone());
        }
        result
    }

    /// Fails (and stays failed) once a hole has been open longer than the gap timeout at `now`.
    pub fn expire(&self, now: Instant) -> Result<(), CounterError> {
        let mut state = lock(&self.state);
        if let Some(e) = &state.failure {
            return Err(e.clone());
        }
        if let Err(e) = state.order.expire(now) {
            state.failure = Some(e.clone().into());
            return Err(e.into());
        }
        Ok(())
    }

    /// Updates applied so far.
    pub fn applied(&self) -> u64 {
        lock(&self.state).order.applied(self.key)
    }

    /// The counters as stored, all taken at one point of the stream (after some prefix of its
    /// updates), with the number of updates applied.
    pub fn snapshot(&self) -> (u64, Vec<u64>) {
        let state = lock(&self.state);
        (state.order.applied(self.key), state.shadow.to_vec())
    }

    /// The error that stopped the stream, if one did.
    pub fn failure(&self) -> Option<CounterError> {
        lock(&self.state).failure.clone()
    }
}

/// The counter streams of an inbox, by inbound connection.
#[derive(Debug)]
pub struct InboundCounters {
    streams: RwLock<Box<[Option<Arc<CounterStream>>]>>,
}

impl Default for InboundCounters {
    fn default() -> Self {
        Self { streams: RwLock::new((0..MAX_CONNECTIONS).map(|_| None).collect()) }
    }
}

impl InboundCounters {
    /// Registers inbound `connection` as the stream of `peer`'s channel `connection`, stored
    /// into `store`; replaces an earlier registration.
    pub fn register(
        &self,
        connection: ConnectionId,
        peer: u32,
        config: CounterConfig,
        store: Arc<dyn CounterStore>,
    ) -> Result<Arc<CounterStream>, CounterError> {
        let stream = Arc::new(CounterStream::new(StreamKey { peer, channel: connection }, config, store)?);
        let mut streams = self.streams.write().unwrap_or_else(|p| p.into_inner());
        let slot = streams.get_mut(usize::from(connection)).ok_or_else(|| CounterError::Config {
            connection,
            detail: format!("connections are below {MAX_CONNECTIONS}"),
        })?;
        *slot = Some(stream.clone());
        Ok(stream)
    }

    /// The stream of inbound `connection`.
    pub fn stream(&self, connection: ConnectionId) -> Result<Arc<CounterStream>, CounterError> {
        self.streams
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(usize::from(connection))
            .cloned()
            .flatten()
            .ok_or(CounterError::Unregistered { connection })
    }

    /// Applies immediate `word` arrived on `connection` at `now`.
    pub fn arrive(&self, connection: ConnectionId, word: u32, now: Instant) -> Result<Arrival, CounterError> {
        self.stream(connection)?.arrive(word, now)
    }

    /// Checks the gap timeout of `connection`'s stream, if it has one.
    pub fn expire(&self, connection: ConnectionId, now: Instant) -> Result<(), CounterError> {
        match self.stream(connection) {
            Ok(stream) => stream.expire(now),
            Err(CounterError::Unregistered { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Waits (polling, bounded by `timeout`) until `counter` of `stream`, read through `load`,
/// reaches at least `value` (counters compared as unsigned). Fails at once with the stream's
/// error when it fails (naming the peer and the missing sequence number), and with
/// [`CounterError::Timeout`] naming the peer, channel and counter when time runs out.
pub fn wait_counter(
    stream: &CounterStream,
    counter: u16,
    value: u64,
    timeout: Duration,
    load: impl Fn(u16) -> u64,
) -> Result<(), CounterError> {
    let start = Instant::now();
    loop {
        let observed = load(counter);
        if observed >= value {
            return Ok(());
        }
        if let Some(e) = stream.failure() {
            return Err(e);
        }
        let waited = start.elapsed();
        if waited > timeout {
            let key = stream.key();
            return Err(CounterError::Timeout {
                peer: key.peer,
                channel: key.channel,
                counter,
                expected: value,
                observed,
                applied: stream.applied(),
                waited,
            });
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;
    use crate::proxy::immediate::wire_seq;

    fn word(position: u64, counter: u16, update: CounterUpdate) -> u32 {
        CounterImmediate { seq: wire_seq(position), counter, update }.encode().unwrap()
    }

    #[test]
    fn a_stream_stores_in_sequence_order_and_keeps_its_first_error() {
        let counters = InboundCounters::default();
        let store = Arc::new(HostCounters::default());
        let config = CounterConfig { window: 4, gap_timeout: Duration::from_millis(10) };
        let stream = counters.register(3, 7, config, store.clone()).unwrap();
        let t0 = Instant::now();
        assert_eq!(counters.arrive(3, word(1, 2, CounterUpdate::Add(5)), t0).unwrap(), Arrival::Held);
        assert_eq!(store.load(2), 0, "held, not stored");
        assert_eq!(counters.arrive(3, word(0, 2, CounterUpdate::Set(10)), t0).unwrap(), Arrival::Applied(2));
        assert_eq!(store.load(2), 15, "set then add, in the sender's order");
        assert_eq!(stream.snapshot().0, 2);
        // A hole at position 2 with 3 held.
        counters.arrive(3, word(3, 0, CounterUpdate::Add(1)), t0).unwrap();
        counters.expire(3, t0 + Duration::from_millis(5)).unwrap();
        let e = counters.expire(3, t0 + Duration::from_millis(20)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("peer 7 channel 3") && text.contains("sequence 2"), "{text}");
        assert_eq!(
            counters.arrive(3, word(2, 0, CounterUpdate::Add(1)), t0).unwrap_err(),
            e,
            "a failed stream stays failed"
        );
        let waited = wait_counter(&stream, 0, 2, Duration::from_secs(1), |c| store.load(c)).unwrap_err();
        assert_eq!(waited, e, "a waiting reader is told why");
    }

    #[test]
    fn unregistered_connections_and_bad_windows_are_refused_and_waits_are_bounded() {
        let counters = InboundCounters::default();
        assert_eq!(counters.arrive(1, 0, Instant::now()).unwrap_err(), CounterError::Unregistered { connection: 1 });
        counters.expire(1, Instant::now()).unwrap();
        let store = Arc::new(HostCounters::default());
        let bad = CounterConfig { window: 33, ..CounterConfig::default() };
        assert_eq!(
            counters.register(1, 0, bad, store.clone()).unwrap_err(),
            CounterError::Ordering(OrderingError::Window { window: 33 })
        );
        assert!(matches!(
            counters.register(1024, 0, CounterConfig::default(), store.clone()),
            Err(CounterError::Config { .. })
        ));
        let stream = counters.register(1, 4, CounterConfig::default(), store.clone()).unwrap();
        let e = wait_counter(&stream, 9, 1, Duration::from_millis(5), |c| store.load(c)).unwrap_err();
        assert!(e.to_string().contains("counter 9 of peer 4 channel 1"), "{e}");
    }
}
