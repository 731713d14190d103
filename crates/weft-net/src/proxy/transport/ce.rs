//! The copy-engine transport: puts are asynchronous device-to-device copies, signals are 64-bit
//! stores of the peer's inbound token, both enqueued on one queue per connection, so the queue's
//! order delivers a signal after the data it covers. No host round trip sits between them.
//!
//! On a GPU a [`CopyQueue`] is a dedicated non-blocking CUDA stream ([`super::cuda_queue`]):
//! `cuMemcpyDtoDAsync` into the peer's memory (mapped through peer access or imported over
//! IPC), `cuStreamWriteValue64` of the peer's token after it, and completion observed by
//! recording an event and polling it with `cuEventQuery`. None of these calls waits for a
//! running kernel, so a proxy thread keeps serving the FIFO while the kernel that pushed the
//! commands spins on the result. The CPU tests use [`super::sim::HostCopyQueue`], which runs the
//! same operations on host memory on a thread of its own.
//!
//! **Signals.** The sender's proxy is the only writer of the peer's inbound token of a
//! connection, so it counts the connection's signals and stores the new total: the token stays
//! monotonic, as device semaphores require.
//!
//! **Counter updates** ([`Op::Counter`], on a connection given counters with
//! [`CopyEngineTransport::connect_counters`]). There is no receiving proxy: the sender's proxy
//! is the only writer of the connection's counters, keeps a shadow of them, applies each update
//! to the shadow when it issues it and stores the counter's new value with one 64-bit store, on
//! the queue after the copies before it. Updates are issued in their connection's order (the
//! queue's order; under chaos each waits for the fence like a signal, so for every earlier
//! update and put), so the shadow, and every value a reader sees, follows the sender's order.
//! The update's sequence number is not needed here: it orders arrivals at a receiving proxy.
//!
//! **Emulated NIC.** A connection created with `paced = true` (a peer in another virtual node,
//! with `WEFT_EMU_NET_LATENCY_US` / `WEFT_EMU_NET_GBPS` set) holds each operation back until the
//! transport's [`Pacer`] releases it: one link per transport (per GPU), α per message and
//! `bytes / β` of serialisation, so multi-node algorithms see InfiniBand-like costs on one host.
//! Held operations are issued by [`Transport::progress`], which the proxy calls every round. A
//! put longer than [`PACED_PIECE`] is held as pieces, each released once its own bytes have
//! crossed the link (as a NIC's data lands while the rest of the message is still on the
//! wire): the copy engine then copies a piece while the next one serialises, and the put
//! completes one piece's copy after the model's time instead of the whole put's (64 MB at
//! ~390 GB/s: ~170 µs). Its signal still goes after the last piece.
//!
//! **Chaos.** With a chaos seed as well (`WEFT_EMU_NET_CHAOS`), the pacer delays each message
//! of a paced connection further by a seeded pseudo-random amount (up to
//! [`super::pacing::chaos_bound`]), so a connection's puts reach the queue, and land, out of
//! order. The queue's order no longer puts a signal after its data, so the connection orders it
//! explicitly: a signal is issued only once every operation before it is complete at the target
//! (its [`Fence`]), and `completed` counts the completed prefix of tickets.
//!
//! **Coalescing.** A queue call costs the proxy thread a driver call (a few µs), and the
//! operations released in one round of a busy paced connection may be many small ones (the
//! low-latency dispatch between nodes once put one run per remote expert, each with its
//! signal; it now puts one range per destination rank).
//! So the operations issued together (a command's, or those a round releases) go to the queue
//! through a [`Batch`]: copies that continue the previous one in both source and destination,
//! within the same two registered memories (a copy never spans two allocations), become one
//! copy, and the signals of the round become one store of the token's last value,
//! made after every copy issued before the last of them (and before any counter store, which
//! stays in the connection's order). A reader of the token then sees it jump over the values
//! in between, each still covering its data; a deferred signal waits behind at most
//! [`DEFER_SIGNAL_BYTES`] of later copies. Tickets, credits, markers and the chaos fence count
//! the operations as issued one by one: a marker follows everything the batch held.
//!
//! **Completion and failure.** Each batch of operations issued together is followed by one
//! marker; `completed` counts the operations complete with every operation before them, as of
//! the newest marker the queue has reached (flow-control credits return then). A queue error
//! fails the connection; a marker not reached within `timeout` fails it with
//! [`TransportError::PeerTimeout`], so no flush waits forever.

use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::{Duration, Instant};

use weft_core::LinkModel;
use weft_types::CounterUpdate;

use super::fence::Fence;
use super::pacing::{Held, Pacer};
use super::{ConnectionId, MAX_CONNECTIONS, MemoryError, Op, Submitted, Transport, TransportError};
use crate::proxy::counters::COUNTERS_PER_STREAM;
use crate::proxy::flow::FlowControl;
use crate::proxy::immediate::CounterImmediate;

const NAME: &str = "copy-engine";
/// Operations of a busy connection one marker covers at most (see `submit`).
const MARK_EVERY: u64 = 16;
/// Bytes of the pieces a paced put is released in (the connection in order; see the module
/// docs): a copy's driver call costs the proxy a few µs, a piece crosses the emulated 50 GB/s
/// link in 21 µs.
pub const PACED_PIECE: u64 = 1 << 20;
/// Bytes of copies a signal deferred within a round may wait behind before it is stored (a
/// piece: ~3 µs of copy-engine time), so coalescing delays no signal by more than that.
const DEFER_SIGNAL_BYTES: u64 = PACED_PIECE;

/// Something that must stay alive while the transport may address it (a registered memory,
/// an imported mapping).
pub type KeepAlive = Arc<dyn Any + Send + Sync>;

/// A [`CopyQueue`] operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CopyQueueError {
    /// A CUDA call failed.
    #[error("{op}: {detail}")]
    Cuda {
        /// The operation.
        op: &'static str,
        /// CUDA's error.
        detail: String,
    },
    /// A copy longer than this host's address space.
    #[error("a copy of {len} bytes does not fit this host's address space")]
    TooLong {
        /// Bytes asked for.
        len: u64,
    },
    /// Addresses inside no buffer of a simulated address space.
    #[error("{len} bytes at {addr:#x} are not inside one buffer")]
    Unmapped {
        /// First address.
        addr: u64,
        /// Bytes.
        len: u64,
    },
    /// Host memory behind a simulated address refused the access.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The simulated engine has no thread: it stopped, or could not start.
    #[error("the simulated copy engine's thread is gone or never started")]
    EngineGone,
}

/// An ordered queue of asynchronous copies and stores executed by a copy engine. Every method
/// returns without waiting for earlier work (never behind a running kernel).
pub trait CopyQueue: Send + Sync + fmt::Debug {
    /// Completion marker of the work enqueued before it.
    type Marker: Send + fmt::Debug;
    /// Enqueues a copy of `len` bytes from `src` to `dst`.
    fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), CopyQueueError>;
    /// Enqueues a store of `value` to the 8-byte word at `addr`, after (and visible after)
    /// every earlier operation of the queue.
    fn write_value(&self, addr: u64, value: u64) -> Result<(), CopyQueueError>;
    /// A marker after everything enqueued so far.
    fn mark(&self) -> Result<Self::Marker, CopyQueueError>;
    /// Whether the queue has executed everything before `marker`; never waits.
    fn reached(&self, marker: &Self::Marker) -> Result<bool, CopyQueueError>;
    /// Gives a reached marker back for reuse.
    fn recycle(&self, marker: Self::Marker) {
        drop(marker);
    }
}

/// Address ranges addressed by the 8-bit memory indices of FIFO commands.
#[derive(Debug, Default)]
struct Ranges {
    entries: Vec<Option<(u64, u64)>>,
    keep: Vec<KeepAlive>,
}

impl Ranges {
    fn set(&mut self, index: u8, base: u64, len: u64, keep: KeepAlive) {
        let i = usize::from(index);
        if self.entries.len() <= i {
            self.entries.resize(i + 1, None);
        }
        self.entries[i] = Some((base, len));
        self.keep.push(keep);
    }

    /// The address of `[offset, offset + len)` of range `index`, if it lies inside it.
    fn address(&self, index: u8, offset: u64, len: u64) -> Result<u64, MemoryError> {
        let (base, size) =
            self.entries.get(usize::from(index)).copied().flatten().ok_or(MemoryError::UnknownMemory { index })?;
        super::check_range(index, offset, len, size)?;
        Ok(base + offset)
    }
}

/// Options of a [`CopyEngineTransport`].
#[derive(Clone, Debug)]
pub struct CopyEngineConfig {
    /// Operations in flight per connection (flow control).
    pub max_in_flight: u64,
    /// Bound on the time a marker may stay unreached while operations are outstanding.
    pub timeout: Duration,
    /// The emulated NIC of paced connections; `None`: no connection is paced.
    pub link: Option<LinkModel>,
    /// With `link`: the seed of the emulated NIC's chaos, which delivers the operations of
    /// paced connections out of order (see the module docs); `None`: in order.
    pub chaos: Option<u64>,
}

impl Default for CopyEngineConfig {
    fn default() -> Self {
        Self { max_in_flight: 256, timeout: Duration::from_secs(5), link: None, chaos: None }
    }
}

/// What a connection of a [`CopyEngineTransport`] connects to.
#[derive(Debug)]
pub struct PeerLink<Q> {
    /// Who the peer is (for errors).
    pub peer: String,
    /// The queue the connection's operations go to.
    pub queue: Q,
    /// Address of the peer's inbound token of this connection, as the queue addresses it.
    pub token: u64,
    /// The peer's memories puts write into: `(index in the peer's table, address here, length)`.
    pub remote: Vec<(u8, u64, u64)>,
    /// Kept alive as long as the transport (the peer's mappings).
    pub keep: KeepAlive,
    /// Whether the connection goes through the emulated NIC (ignored without a link model).
    pub paced: bool,
}

/// One connection: where its puts and signal go, and what is in flight.
struct Conn<Q: CopyQueue> {
    id: ConnectionId,
    peer: String,
    queue: Q,
    remote: Ranges,
    /// Address of the peer's inbound token of this connection, as this queue addresses it.
    token: u64,
    /// Address of the connection's counters at the peer (`COUNTERS_PER_STREAM` words), once set.
    counters: OnceLock<u64>,
    paced: bool,
    state: Mutex<ConnState<Q::Marker>>,
    submitted: AtomicU64,
    completed: AtomicU64,
    failure: Mutex<Option<TransportError>>,
}

struct ConnState<M> {
    /// What the connection's stores last wrote: the token and the counters.
    stores: Stores,
    /// Operations issued on the queue so far (issue positions; the tickets' order unless chaos
    /// reorders the paced ones).
    issued: u64,
    /// Issue positions the queue has reached.
    reached: u64,
    /// Paced operations not yet issued, as addresses.
    held: Held<Issue>,
    /// Markers of issued batches: (issue positions below this are done when reached, marker).
    markers: VecDeque<(u64, M)>,
    /// Last time a marker was reached, or when markers became outstanding.
    last_progress: Instant,
}

/// An operation with its addresses resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Issue {
    /// A copy; `last`: it completes its operation (false for the leading pieces of a paced put);
    /// `memories`: the registered memories it reads and writes (source, destination).
    Copy {
        dst: u64,
        src: u64,
        len: u64,
        last: bool,
        memories: (u8, u8),
    },
    Signal,
    /// A counter update, already decoded.
    Counter {
        counter: u16,
        update: CounterUpdate,
    },
}

/// The values a connection's 64-bit stores wrote last (the proxy is their only writer).
#[derive(Debug, Default)]
struct Stores {
    /// Signals issued so far (the value the token was last set to).
    signals: u64,
    /// The counters after the updates issued so far; empty until the first one.
    counters: Vec<u64>,
}

/// The queue work of one round of issues (a command's operations, or the paced operations
/// released together) not enqueued yet, so that each driver call carries as much as it can
/// (see the module docs, "Coalescing"). It enqueues, in the round's order, every copy before
/// every signal and counter store issued after it, so each store is still visible only after
/// the data before it.
#[derive(Debug)]
struct Batch {
    /// Address of the connection's inbound token at the peer (what signals store to).
    token: u64,
    /// A run of copies contiguous in source and destination within the same two registered
    /// memories (one copy never spans two allocations), as one copy, and those memories.
    run: Option<(CopyRange, (u8, u8))>,
    /// The token value of the signals issued since the last store, stored after `run`.
    signal: Option<u64>,
    /// Bytes of the copies enqueued or held since `signal` was deferred.
    behind_signal: u64,
}

/// A copy's `(dst, src, len)`.
type CopyRange = (u64, u64, u64);

impl Batch {
    /// Nothing held, for a connection whose token is at `token`.
    fn new(token: u64) -> Self {
        Self { token, run: None, signal: None, behind_signal: 0 }
    }

    /// Takes a copy: extends the run when it continues it in both source and destination, else
    /// enqueues the run and starts a new one (first storing a deferred signal that would
    /// otherwise wait behind more than [`DEFER_SIGNAL_BYTES`] of copies).
    fn copy<Q: CopyQueue>(
        &mut self,
        queue: &Q,
        (dst, src, len): CopyRange,
        memories: (u8, u8),
    ) -> Result<(), CopyQueueError> {
        if self.signal.is_some() {
            self.behind_signal = self.behind_signal.saturating_add(len);
        }
        if let Some(((run_dst, run_src, run_len), run_memories)) = &mut self.run
            && *run_memories == memories
            && run_dst.checked_add(*run_len) == Some(dst)
            && run_src.checked_add(*run_len) == Some(src)
            && self.behind_signal <= DEFER_SIGNAL_BYTES
        {
            *run_len += len;
            return Ok(());
        }
        if let Some(((run_dst, run_src, run_len), _)) = self.run.take() {
            queue.copy(run_dst, run_src, run_len)?;
        }
        if self.behind_signal > DEFER_SIGNAL_BYTES {
            // `run` is empty: the deferred signal covers exactly the copies enqueued so far.
            self.store_signal(queue)?;
        }
        self.run = Some(((dst, src, len), memories));
        Ok(())
    }

    /// Takes a signal that sets the token to `value`: deferred, so the signals of a round
    /// with only copies between them become one store of the last value.
    fn signal(&mut self, value: u64) {
        if self.signal.is_none() {
            self.behind_signal = 0;
        }
        self.signal = Some(value);
    }

    /// Enqueues the run, then the deferred signal's store.
    fn flush<Q: CopyQueue>(&mut self, queue: &Q) -> Result<(), CopyQueueError> {
        if let Some(((dst, src, len), _)) = self.run.take() {
            queue.copy(dst, src, len)?;
        }
        self.store_signal(queue)
    }

    /// Enqueues the deferred signal's store, if any (after everything enqueued so far).
    fn store_signal<Q: CopyQueue>(&mut self, queue: &Q) -> Result<(), CopyQueueError> {
        self.behind_signal = 0;
        match self.signal.take() {
            Some(value) => queue.write_value(self.token, value),
            None => Ok(()),
        }
    }
}

impl Issue {
    /// This operation as pieces of at most `piece` bytes, in order, each with its bytes (a signal
    /// is one piece of none).
    fn pieces(self, piece: u64) -> impl Iterator<Item = (Issue, u64)> {
        let (dst, src, len, memories) = match self {
            Issue::Copy { dst, src, len, memories, .. } => (dst, src, len, memories),
            Issue::Signal | Issue::Counter { .. } => (0, 0, 0, (0, 0)),
        };
        let count = if len == 0 { 1 } else { len.div_ceil(piece.max(1)) };
        (0..count).map(move |i| match self {
            Issue::Signal | Issue::Counter { .. } => (self, 0),
            Issue::Copy { .. } => {
                let offset = i * piece;
                let bytes = piece.min(len - offset);
                let last = i + 1 == count;
                (Issue::Copy { dst: dst + offset, src: src + offset, len: bytes, last, memories }, bytes)
            }
        })
    }
}

impl<Q: CopyQueue> fmt::Debug for Conn<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn").field("id", &self.id).field("peer", &self.peer).field("paced", &self.paced).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Holders only update counters and queues whole; a poisoned lock still holds consistent state.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<Q: CopyQueue> Conn<Q> {
    fn check(&self) -> Result<(), TransportError> {
        lock(&self.failure).clone().map_or(Ok(()), Err)
    }

    fn fail(&self, error: TransportError) -> TransportError {
        let mut failure = lock(&self.failure);
        if failure.is_none() {
            tracing::warn!(connection = self.id, "{error}");
            *failure = Some(error.clone());
        }
        error
    }

    fn device_error(&self, error: CopyQueueError) -> TransportError {
        let detail = error.to_string();
        self.fail(TransportError::Device { transport: NAME, connection: self.id, peer: self.peer.clone(), detail })
    }

    /// Issues `issue`: hands it to `batch`, which enqueues it on the queue now or merged with
    /// its neighbours at `flush`; `issued` and `stores` are the connection's counts and stored
    /// values (a leading piece of a put counts for nothing: its last piece completes the
    /// operation).
    fn issue(
        &self,
        issued: &mut u64,
        stores: &mut Stores,
        batch: &mut Batch,
        issue: Issue,
    ) -> Result<(), TransportError> {
        let done = match issue {
            Issue::Copy { dst, src, len, memories, .. } => batch.copy(&self.queue, (dst, src, len), memories),
            Issue::Signal => {
                stores.signals += 1;
                batch.signal(stores.signals);
                Ok(())
            }
            Issue::Counter { counter, update } => {
                // `resolve` admits counter updates only on a connection with counters.
                let base = self.counters.get().copied().ok_or_else(|| self.no_counters())?;
                if stores.counters.is_empty() {
                    stores.counters = vec![0; COUNTERS_PER_STREAM];
                }
                // The counter index has TRANSFER_COUNTER_BITS bits: inside the shadow.
                let value = &mut stores.counters[usize::from(counter)];
                *value = update.apply(*value);
                // Every store in the connection's order: the held copies and signal first.
                let value = *value;
                batch.flush(&self.queue).and_then(|()| self.queue.write_value(base + 8 * u64::from(counter), value))
            }
        };
        done.map_err(|detail| self.device_error(detail))?;
        if !matches!(issue, Issue::Copy { last: false, .. }) {
            *issued += 1;
        }
        Ok(())
    }

    /// Enqueues what `batch` still holds (before any marker covers it).
    fn flush(&self, batch: &mut Batch) -> Result<(), TransportError> {
        batch.flush(&self.queue).map_err(|detail| self.device_error(detail))
    }

    fn no_counters(&self) -> TransportError {
        TransportError::Unsupported {
            transport: NAME,
            connection: self.id,
            op: "a counter update on a connection without counters (connect_counters)",
        }
    }

    /// Places a marker covering issue positions below `end`.
    fn mark(&self, state: &mut ConnState<Q::Marker>, end: u64) -> Result<(), TransportError> {
        let marker = self.queue.mark().map_err(|detail| self.device_error(detail))?;
        if state.markers.is_empty() {
            state.last_progress = Instant::now();
        }
        state.markers.push_back((end, marker));
        Ok(())
    }

    /// Issues the held operations whose release time has come (under chaos, the signals
    /// among them once their fence clears them).
    fn release_due(&self, state: &mut ConnState<Q::Marker>, now: Instant) -> Result<(), TransportError> {
        let before = state.issued;
        let ConnState { held, issued, stores, .. } = state;
        let mut batch = Batch::new(self.token);
        held.release(now, |_, issue| self.issue(issued, stores, &mut batch, issue))?;
        self.flush(&mut batch)?;
        // Leading pieces complete nothing: a marker only once an operation was issued whole.
        if state.issued > before {
            let end = state.issued;
            self.mark(state, end)?;
        }
        Ok(())
    }

    /// Retires reached markers; returns how many operations completed.
    fn retire(&self, state: &mut ConnState<Q::Marker>, timeout: Duration) -> Result<u64, TransportError> {
        let before = self.completed.load(Ordering::Acquire);
        let mut done = before;
        while let Some((end, marker)) = state.markers.front() {
            if !self.queue.reached(marker).map_err(|detail| self.device_error(detail))? {
                break;
            }
            state.reached = *end;
            done = state.held.completed(state.reached);
            if let Some((_, marker)) = state.markers.pop_front() {
                self.queue.recycle(marker);
            }
            state.last_progress = Instant::now();
        }
        if done == before && !state.markers.is_empty() && state.last_progress.elapsed() > timeout {
            let pending = self.submitted.load(Ordering::Acquire) - before;
            return Err(self.fail(TransportError::PeerTimeout {
                transport: NAME,
                connection: self.id,
                peer: self.peer.clone(),
                waited: state.last_progress.elapsed(),
                pending,
            }));
        }
        self.completed.store(done, Ordering::Release);
        Ok(done - before)
    }
}

/// Puts and signals through copy-engine queues (see the module docs). Generic over the queue so
/// the same code runs on CUDA streams and, in tests, on host memory.
pub struct CopyEngineTransport<Q: CopyQueue> {
    config: CopyEngineConfig,
    local: RwLock<Ranges>,
    conns: RwLock<Vec<Option<Arc<Conn<Q>>>>>,
    flow: FlowControl,
    pacer: Option<Mutex<Pacer>>,
    closing: AtomicBool,
}

impl<Q: CopyQueue> fmt::Debug for CopyEngineTransport<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CopyEngineTransport").field("config", &self.config).finish()
    }
}

impl<Q: CopyQueue> CopyEngineTransport<Q> {
    /// A transport with no memories and no connections.
    ///
    /// With `config.chaos` (and a link), paced connections deliver out of order.
    pub fn new(config: CopyEngineConfig) -> Result<Self, TransportError> {
        if config.max_in_flight < 2 {
            return Err(TransportError::Connect {
                transport: NAME,
                peer: String::new(),
                detail: "max_in_flight must be at least 2 (a put and a signal)".into(),
            });
        }
        Ok(Self {
            flow: FlowControl::new(MAX_CONNECTIONS, config.max_in_flight),
            pacer: config.link.map(|l| {
                Mutex::new(match config.chaos {
                    Some(seed) => Pacer::chaotic(l, seed),
                    None => Pacer::new(l),
                })
            }),
            config,
            local: RwLock::new(Ranges::default()),
            conns: RwLock::new((0..MAX_CONNECTIONS).map(|_| None).collect()),
            closing: AtomicBool::new(false),
        })
    }

    /// Registers local memory `[base, base + len)` that puts read from; returns its index
    /// (the `src_memory` of commands). `keep` stays alive as long as the transport.
    pub fn register_local(&self, base: u64, len: u64, keep: KeepAlive) -> Result<u8, MemoryError> {
        let mut local = self.local.write().unwrap_or_else(|p| p.into_inner());
        let index = u8::try_from(local.entries.len()).map_err(|_| MemoryError::TableFull)?;
        local.set(index, base, len, keep);
        Ok(index)
    }

    /// Opens connection `id` as `link` describes.
    pub fn connect(&self, id: ConnectionId, link: PeerLink<Q>) -> Result<(), TransportError> {
        let PeerLink { peer, queue, token, remote, keep, paced } = link;
        let err = |detail: String| TransportError::Connect { transport: NAME, peer: peer.clone(), detail };
        if usize::from(id) >= MAX_CONNECTIONS {
            return Err(err(format!("connection index {id} is not below {MAX_CONNECTIONS}")));
        }
        if !token.is_multiple_of(8) {
            return Err(err(format!("token address {token:#x} is not 8-byte aligned")));
        }
        let mut ranges = Ranges::default();
        for &(index, base, len) in &remote {
            ranges.set(index, base, len, keep.clone());
        }
        if remote.is_empty() {
            ranges.keep.push(keep);
        }
        let paced = paced && self.pacer.is_some();
        // Only the emulated NIC's chaos delivers out of order; the fence orders signals there.
        let chaotic = paced && self.config.chaos.is_some();
        let conn = Conn {
            id,
            peer: peer.clone(),
            queue,
            remote: ranges,
            token,
            counters: OnceLock::new(),
            paced,
            state: Mutex::new(ConnState {
                stores: Stores::default(),
                issued: 0,
                reached: 0,
                held: if chaotic { Held::reordered(Fence::new()) } else { Held::in_order() },
                markers: VecDeque::new(),
                last_progress: Instant::now(),
            }),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failure: Mutex::new(None),
        };
        let mut conns = self.conns.write().unwrap_or_else(|p| p.into_inner());
        let slot = &mut conns[usize::from(id)];
        if slot.is_some() {
            return Err(err(format!("connection {id} is already connected")));
        }
        *slot = Some(Arc::new(conn));
        Ok(())
    }

    /// Gives connection `id` counters: `COUNTERS_PER_STREAM` 8-byte words at `addr` (as its
    /// queue addresses them) at the peer, which counter updates store to. Once per connection.
    pub fn connect_counters(&self, id: ConnectionId, addr: u64) -> Result<(), TransportError> {
        let conn = self.conn(id)?;
        let err = |detail: String| TransportError::Connect { transport: NAME, peer: conn.peer.clone(), detail };
        if !addr.is_multiple_of(8) {
            return Err(err(format!("counters address {addr:#x} is not 8-byte aligned")));
        }
        conn.counters.set(addr).map_err(|_| err(format!("connection {id} already has counters")))
    }

    /// Calls `f` with the queue of every connection (to wait for them at shutdown).
    pub fn for_each_queue(&self, mut f: impl FnMut(&Q)) {
        for conn in self.conns.read().unwrap_or_else(|p| p.into_inner()).iter().flatten() {
            f(&conn.queue);
        }
    }

    /// The flow control of this transport's connections.
    pub fn flow(&self) -> &FlowControl {
        &self.flow
    }

    /// The link model of paced connections.
    pub fn link(&self) -> Option<LinkModel> {
        self.config.link
    }

    fn conn(&self, connection: ConnectionId) -> Result<Arc<Conn<Q>>, TransportError> {
        self.conns
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(usize::from(connection))
            .cloned()
            .flatten()
            .ok_or(TransportError::UnknownConnection { transport: NAME, connection })
    }

    fn resolve(&self, conn: &Conn<Q>, op: &Op) -> Result<(Issue, u64), TransportError> {
        let memory = |source| TransportError::Memory { transport: NAME, connection: conn.id, source };
        match *op {
            Op::Put { src_memory, src_offset, dst_memory, dst_offset, len } => {
                let src = self
                    .local
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .address(src_memory, src_offset, len)
                    .map_err(memory)?;
                let dst = conn.remote.address(dst_memory, dst_offset, len).map_err(memory)?;
                Ok((Issue::Copy { dst, src, len, last: true, memories: (src_memory, dst_memory) }, len))
            }
            Op::Signal => Ok((Issue::Signal, 0)),
            Op::Counter { imm } => {
                if conn.counters.get().is_none() {
                    return Err(conn.no_counters());
                }
                let CounterImmediate { counter, update, .. } = CounterImmediate::decode(imm);
                Ok((Issue::Counter { counter, update }, 0))
            }
        }
    }

    /// Retires reached markers of `conn` and returns their credits; marks issued operations no
    /// marker covers yet once the markers before them are reached.
    fn poll(&self, conn: &Conn<Q>, state: &mut ConnState<Q::Marker>) -> Result<(), TransportError> {
        if conn.paced && !state.held.is_empty() {
            conn.release_due(state, Instant::now())?;
        }
        if state.markers.is_empty() && state.reached < state.issued {
            let issued = state.issued;
            conn.mark(state, issued)?;
        }
        let done = conn.retire(state, self.config.timeout)?;
        if done > 0 {
            self.flow.release(usize::from(conn.id), done);
        }
        Ok(())
    }
}

impl<Q: CopyQueue> Transport for CopyEngineTransport<Q> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn submit(&self, connection: ConnectionId, ops: &[Op]) -> Result<Submitted, TransportError> {
        let conn = self.conn(connection)?;
        conn.check()?;
        if self.closing.load(Ordering::Acquire) {
            return Err(TransportError::Shutdown { transport: NAME });
        }
        let mut resolved = Vec::with_capacity(ops.len());
        for op in ops {
            resolved.push(self.resolve(&conn, op)?);
        }
        if ops.is_empty() {
            return Ok(Submitted::Accepted { last: conn.submitted.load(Ordering::Acquire).wrapping_sub(1) });
        }
        if !self.flow.try_acquire(usize::from(connection), ops.len() as u64) {
            return Ok(Submitted::Full);
        }
        let mut state = lock(&conn.state);
        let first = conn.submitted.fetch_add(ops.len() as u64, Ordering::AcqRel);
        let end = first + ops.len() as u64;
        match (&self.pacer, conn.paced) {
            (Some(pacer), true) => {
                let now = Instant::now();
                let mut pacer = lock(pacer);
                // In pieces only in order: under chaos a ticket is released whole (its pieces
                // would land in any order, and `Held` counts one issue per ticket).
                let piece = if state.held.keeps_order() { PACED_PIECE } else { u64::MAX };
                for (ticket, (issue, _)) in (first..).zip(resolved) {
                    for (part, bytes) in issue.pieces(piece) {
                        let at = pacer.schedule(now, bytes);
                        // Signals and counter updates wait for the fence under chaos.
                        state.held.push(at, ticket, part, !matches!(part, Issue::Copy { .. }));
                    }
                }
                drop(pacer);
                conn.release_due(&mut state, now)?;
            }
            _ => {
                let ConnState { issued, stores, .. } = &mut *state;
                let mut batch = Batch::new(conn.token);
                for (issue, _) in resolved {
                    conn.issue(issued, stores, &mut batch, issue)?;
                }
                conn.flush(&mut batch)?;
                // A marker (an event record) per command costs the proxy thread a driver call
                // each: mark when nothing else is outstanding (so an idle connection's command
                // completes as soon as it can) or every MARK_EVERY operations; `poll` marks
                // the rest once the markers before them are reached.
                let issued = state.issued;
                let marked = state.markers.back().map_or(0, |&(covered, _)| covered);
                if state.markers.is_empty() || issued - marked >= MARK_EVERY {
                    conn.mark(&mut state, issued)?;
                }
            }
        }
        Ok(Submitted::Accepted { last: end - 1 })
    }

    fn completed(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        let conn = self.conn(connection)?;
        conn.check()?;
        let mut state = lock(&conn.state);
        self.poll(&conn, &mut state)?;
        Ok(conn.completed.load(Ordering::Acquire))
    }

    fn submitted(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        Ok(self.conn(connection)?.submitted.load(Ordering::Acquire))
    }

    fn progress(&self) -> Result<(), TransportError> {
        let conns: Vec<Arc<Conn<Q>>> =
            self.conns.read().unwrap_or_else(|p| p.into_inner()).iter().flatten().cloned().collect();
        for conn in conns {
            conn.check()?;
            // Another proxy thread polling this connection does the same work: skip it.
            let Ok(mut state) = conn.state.try_lock() else { continue };
            self.poll(&conn, &mut state)?;
        }
        Ok(())
    }

    fn shutdown(&self) {
        // Queued copies finish on their own (the queues' owners wait for them before freeing
        // memory); held operations of paced connections are dropped, and their connection
        // fails: it never completes them (`poll` would count them as issued).
        self.closing.store(true, Ordering::Release);
        for conn in self.conns.read().unwrap_or_else(|p| p.into_inner()).iter().flatten() {
            let mut state = lock(&conn.state);
            if !state.held.is_empty() {
                state.held.clear();
                conn.fail(TransportError::Shutdown { transport: NAME });
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;

    /// A queue call, as [`Recorder`] saw it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Call {
        Copy(u64, u64, u64),
        Store(u64, u64),
        Mark,
    }

    /// A queue that records its calls and has executed everything at once.
    #[derive(Debug, Default)]
    struct Recorder(Mutex<Vec<Call>>);

    impl CopyQueue for Recorder {
        type Marker = ();
        fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), CopyQueueError> {
            lock(&self.0).push(Call::Copy(dst, src, len));
            Ok(())
        }
        fn write_value(&self, addr: u64, value: u64) -> Result<(), CopyQueueError> {
            lock(&self.0).push(Call::Store(addr, value));
            Ok(())
        }
        fn mark(&self) -> Result<(), CopyQueueError> {
            lock(&self.0).push(Call::Mark);
            Ok(())
        }
        fn reached(&self, (): &()) -> Result<bool, CopyQueueError> {
            Ok(true)
        }
    }

    const TOKEN: u64 = 0x8000;
    const COUNTERS: u64 = 0x9000;
    const LOCAL: u64 = 1 << 32;
    const REMOTE: u64 = 2 << 32;

    /// An unpaced transport with connection 0 (memory 3 at the peer, counters) over a recorder.
    fn transport() -> CopyEngineTransport<Recorder> {
        let t = CopyEngineTransport::new(CopyEngineConfig::default()).unwrap();
        let keep: KeepAlive = Arc::new(());
        t.register_local(LOCAL, 1 << 30, keep.clone()).unwrap();
        let remote = vec![(3, REMOTE, 1 << 30)];
        let link =
            PeerLink { peer: "peer".into(), queue: Recorder::default(), token: TOKEN, remote, keep, paced: false };
        t.connect(0, link).unwrap();
        t.connect_counters(0, COUNTERS).unwrap();
        t
    }

    fn put(src_offset: u64, dst_offset: u64, len: u64) -> Op {
        Op::Put { src_memory: 0, src_offset, dst_memory: 3, dst_offset, len }
    }

    fn calls(t: &CopyEngineTransport<Recorder>) -> Vec<Call> {
        let mut calls = Vec::new();
        t.for_each_queue(|q| calls.extend(lock(&q.0).iter().copied()));
        calls
    }

    #[test]
    fn contiguous_puts_become_one_copy_and_a_rounds_signals_one_store_after_their_data() {
        let t = transport();
        // A run of three puts continuing each other in source and destination, a signal, a put
        // elsewhere, two signals: a copy per run, then one store of the last token value.
        let ops = [put(0, 100, 8), put(8, 108, 8), put(16, 116, 4), Op::Signal, put(64, 0, 8), Op::Signal, Op::Signal];
        assert_eq!(t.submit(0, &ops).unwrap(), Submitted::Accepted { last: 6 });
        assert_eq!(
            calls(&t),
            vec![
                Call::Copy(REMOTE + 100, LOCAL, 20),
                Call::Copy(REMOTE, LOCAL + 64, 8),
                Call::Store(TOKEN, 3),
                Call::Mark
            ]
        );
        // Tickets and credits count the operations one by one.
        assert_eq!(t.completed(0).unwrap(), 7);
        assert_eq!(t.flow().in_flight(0), 0);
        // The next command continues the token and starts a run of its own.
        t.submit(0, &[put(20, 120, 4), Op::Signal]).unwrap();
        assert_eq!(calls(&t)[4..], [Call::Copy(REMOTE + 120, LOCAL + 20, 4), Call::Store(TOKEN, 4), Call::Mark]);
        assert_eq!(t.completed(0).unwrap(), 9);
    }

    #[test]
    fn puts_contiguous_on_one_side_only_stay_separate() {
        let t = transport();
        t.submit(0, &[put(0, 0, 8), put(8, 100, 8), put(100, 16, 8)]).unwrap();
        assert_eq!(
            calls(&t),
            vec![
                Call::Copy(REMOTE, LOCAL, 8),
                Call::Copy(REMOTE + 100, LOCAL + 8, 8),
                Call::Copy(REMOTE + 16, LOCAL + 100, 8),
                Call::Mark
            ]
        );
    }

    #[test]
    fn puts_contiguous_across_two_registered_memories_stay_separate_copies() {
        let t = transport();
        // Memory 1 starts where memory 0 ends: the addresses continue, the allocations do not.
        let keep: KeepAlive = Arc::new(());
        assert_eq!(t.register_local(LOCAL + (1 << 30), 64, keep).unwrap(), 1);
        let last = Op::Put { src_memory: 0, src_offset: (1 << 30) - 8, dst_memory: 3, dst_offset: 0, len: 8 };
        let next = Op::Put { src_memory: 1, src_offset: 0, dst_memory: 3, dst_offset: 8, len: 8 };
        t.submit(0, &[last, next]).unwrap();
        assert_eq!(
            calls(&t),
            vec![
                Call::Copy(REMOTE, LOCAL + (1 << 30) - 8, 8),
                Call::Copy(REMOTE + 8, LOCAL + (1 << 30), 8),
                Call::Mark
            ]
        );
    }

    #[test]
    fn a_counter_update_keeps_the_stores_in_order_and_splits_the_run() {
        let t = transport();
        let add = CounterImmediate { seq: 0, counter: 2, update: CounterUpdate::Add(5) }.encode().unwrap();
        t.submit(0, &[put(0, 0, 8), Op::Signal, Op::Counter { imm: add }, put(8, 8, 8), Op::Signal]).unwrap();
        assert_eq!(
            calls(&t),
            vec![
                Call::Copy(REMOTE, LOCAL, 8),
                Call::Store(TOKEN, 1),
                Call::Store(COUNTERS + 16, 5),
                Call::Copy(REMOTE + 8, LOCAL + 8, 8),
                Call::Store(TOKEN, 2),
                Call::Mark
            ]
        );
        assert_eq!(t.completed(0).unwrap(), 5);
    }

    #[test]
    fn a_signal_waits_behind_at_most_a_piece_of_later_copies() {
        let t = transport();
        let big = DEFER_SIGNAL_BYTES + 8;
        // Contiguous with the put before the signal, but too long to defer the signal behind.
        t.submit(0, &[put(0, 0, 8), Op::Signal, put(8, 8, big), put(8 + big, 8 + big, 8), Op::Signal]).unwrap();
        assert_eq!(
            calls(&t),
            vec![
                Call::Copy(REMOTE, LOCAL, 8),
                Call::Store(TOKEN, 1),
                Call::Copy(REMOTE + 8, LOCAL + 8, big + 8),
                Call::Store(TOKEN, 2),
                Call::Mark
            ]
        );
    }

    #[test]
    fn a_long_copy_goes_in_pieces_that_tile_it_and_only_the_last_completes_it() {
        let memories = (1, 2);
        let copy = Issue::Copy { dst: 1000, src: 5000, len: 10, last: true, memories };
        let pieces: Vec<_> = copy.pieces(4).collect();
        assert_eq!(
            pieces,
            vec![
                (Issue::Copy { dst: 1000, src: 5000, len: 4, last: false, memories }, 4),
                (Issue::Copy { dst: 1004, src: 5004, len: 4, last: false, memories }, 4),
                (Issue::Copy { dst: 1008, src: 5008, len: 2, last: true, memories }, 2),
            ]
        );
        // A copy of at most a piece, an empty one and a signal stay whole.
        assert_eq!(copy.pieces(10).collect::<Vec<_>>(), vec![(copy, 10)]);
        assert_eq!(copy.pieces(u64::MAX).collect::<Vec<_>>(), vec![(copy, 10)]);
        let empty = Issue::Copy { dst: 0, src: 0, len: 0, last: true, memories };
        assert_eq!(empty.pieces(4).collect::<Vec<_>>(), vec![(empty, 0)]);
        assert_eq!(Issue::Signal.pieces(4).collect::<Vec<_>>(), vec![(Issue::Signal, 0)]);
    }
}
