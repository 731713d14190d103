//! Transports: how a proxy moves a command's data and signals to a peer.
//!
//! Every transport implements [`Transport`]: [`Transport::submit`] queues a command's operations
//! (a [`Op::Put`] and/or a [`Op::Signal`], or a [`Op::Counter`] update where the transport
//! carries them: TCP, the copy engine, verbs) on a connection, in order and all or nothing, without blocking; [`Transport::completed`] says how many of the connection's operations the peer has
//! applied. The contract every transport keeps:
//!
//! - **A signal is applied only after every operation submitted before it on the same
//!   connection is applied** (TCP: per-connection sequence numbers and a reorder buffer, so the
//!   receiver applies everything in submission order; InfiniBand: one reliable-connected queue
//!   pair and RDMA write-with-immediate; a copy engine: one stream with the signal written by
//!   `cuStreamWriteValue64` after the copies). Puts may land in any order where the carrier
//!   reorders them (the emulated NIC under `WEFT_EMU_NET_CHAOS`); the transport then holds each
//!   signal back itself until every earlier operation is complete ([`fence`]).
//! - `submit` never blocks and never makes a CUDA call that can wait behind a running kernel:
//!   when the connection's in-flight bound is reached it returns [`Submitted::Full`] and the
//!   proxy retries later; completion is observed by polling `completed` (a GPU transport polls
//!   events with `cuEventQuery`, never `cuStreamSynchronize`).
//! - A flush of ticket `t` is complete once `completed(connection) > t`: `completed` counts the
//!   operations complete together with every operation before them, so it never passes one
//!   still in flight, whatever order they complete in.
//! - A dead peer turns into an error naming the peer, within the transport's timeout.
//!
//! Memory on both sides is addressed by small indices into a [`MemoryTable`]: the sender reads
//! its local memories, the receiver applies writes and signals through its [`Inbox`].
//! [`HostMemory`] and [`HostInbox`] are the host-memory implementations the CPU tests use;
//! [`staged`] puts device memory behind the same traits (copies through a pinned host buffer on
//! a non-blocking stream of its own), so the byte-moving transports (TCP) carry GPU buffers.
//! The copy-engine transport ([`ce`]) addresses device memory directly instead: its puts are
//! `cuMemcpyDtoDAsync` into the peer's mapped memory and its signals `cuStreamWriteValue64` of
//! the peer's token, on a CUDA stream per connection ([`cuda_queue`]); with a [`pacing`] link
//! model it is the emulated NIC between virtual nodes. [`sim`] runs it on host memory for tests.

pub mod ce;
pub mod cuda_queue;
pub mod fence;
pub mod frame;
#[cfg(feature = "ib")]
pub mod ib;
pub mod pacing;
pub mod reorder;
pub mod routed;
pub mod sim;
pub mod staged;
pub mod tcp;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::counters::{CounterConfig, CounterError, CounterStream, HostCounters, InboundCounters, wait_counter};
use super::ordering::Arrival;

/// Index of a connection within one proxy (fits the command's 10-bit field).
pub type ConnectionId = u16;

/// Largest connection index plus one.
pub const MAX_CONNECTIONS: usize = 1 << weft_types::FIFO_CONNECTION_BITS;

/// A memory access failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// No memory is registered under this index.
    #[error("no memory registered under index {index}")]
    UnknownMemory {
        /// The index.
        index: u8,
    },
    /// The access reaches outside the memory.
    #[error("access of {len} bytes at offset {offset} outside memory {index} of {size} bytes")]
    OutOfBounds {
        /// The memory index.
        index: u8,
        /// Offset of the access.
        offset: u64,
        /// Length of the access.
        len: u64,
        /// Size of the memory.
        size: usize,
    },
    /// The memory table is full (256 entries).
    #[error("memory table full: at most 256 memories per proxy")]
    TableFull,
    /// Copying to or from device memory failed (a CUDA error, or the copy did not finish in time).
    #[error("device memory: {detail}")]
    Device {
        /// What failed.
        detail: String,
    },
}

/// Memory a transport reads from (sender) or writes into (receiver).
pub trait Memory: Send + Sync + fmt::Debug {
    /// Size in bytes.
    fn len(&self) -> usize;
    /// Whether the memory is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `out.len()` bytes at `offset` into `out` (bounds already checked by the table).
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemoryError>;
    /// Writes `data` at `offset` (bounds already checked by the table); the bytes are in place
    /// when it returns.
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), MemoryError>;
}

/// Plain host memory.
#[derive(Debug)]
pub struct HostMemory {
    bytes: Mutex<Vec<u8>>,
}

impl HostMemory {
    /// `len` zero bytes.
    pub fn new(len: usize) -> Self {
        Self { bytes: Mutex::new(vec![0; len]) }
    }

    /// A copy of the contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Memory for HostMemory {
    fn len(&self) -> usize {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemoryError> {
        let bytes = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        out.copy_from_slice(&bytes[offset..offset + out.len()]);
        Ok(())
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), MemoryError> {
        let mut bytes = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        bytes[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }
}

/// Checks that `[offset, offset + len)` lies inside memory `index` of `size` bytes: the one
/// bounds rule every transport applies to a command's ranges.
pub(crate) fn check_range(index: u8, offset: u64, len: u64, size: u64) -> Result<(), MemoryError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(MemoryError::OutOfBounds { index, offset, len, size: usize::try_from(size).unwrap_or(usize::MAX) }),
    }
}

/// Memories addressed by the 8-bit indices of FIFO commands. Registration takes `&self`, so a
/// table shared with running transports grows while they read it (a proxy registers memories
/// after its transports started); an index, once handed out, names the same memory for good.
#[derive(Debug)]
pub struct MemoryTable {
    entries: Box<[OnceLock<Arc<dyn Memory>>]>,
    /// Entries handed out; only `register` writes it.
    len: Mutex<usize>,
}

impl Default for MemoryTable {
    fn default() -> Self {
        Self { entries: (0..MAX_MEMORIES).map(|_| OnceLock::new()).collect(), len: Mutex::new(0) }
    }
}

/// Entries of a [`MemoryTable`] (the commands' 8-bit memory fields).
pub const MAX_MEMORIES: usize = 256;

impl MemoryTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `memory` and returns its index.
    pub fn register(&self, memory: Arc<dyn Memory>) -> Result<u8, MemoryError> {
        let mut len = self.len.lock().unwrap_or_else(|p| p.into_inner());
        let index = u8::try_from(*len).map_err(|_| MemoryError::TableFull)?;
        // Only this call, under the lock, sets entry `len`: it is still empty.
        let _ = self.entries[*len].set(memory);
        *len += 1;
        Ok(index)
    }

    /// Memory `index` if `[offset, offset + len)` lies inside it, with the offset as a usize.
    pub fn checked(&self, index: u8, offset: u64, len: u64) -> Result<(&dyn Memory, usize), MemoryError> {
        let memory = self.entries[usize::from(index)].get().ok_or(MemoryError::UnknownMemory { index })?;
        let size = memory.len();
        check_range(index, offset, len, size as u64)?;
        // Inside a memory of `size: usize` bytes, so the offset fits a usize.
        let start = usize::try_from(offset).map_err(|_| MemoryError::OutOfBounds { index, offset, len, size })?;
        Ok((memory.as_ref(), start))
    }
}

/// Where a receiver applies what peers send: writes into its memories, signals of its
/// connections' inbound semaphore tokens and counter updates of its connections' counter
/// streams. Calls for one connection come in order.
pub trait Inbox: Send + Sync + fmt::Debug {
    /// Writes `data` at `offset` of memory `memory`.
    fn write(&self, memory: u8, offset: u64, data: &[u8]) -> Result<(), MemoryError>;
    /// Increments the inbound token of `connection` (release: the writes before it are visible
    /// to whoever observes the new token value).
    fn signal(&self, connection: ConnectionId) -> Result<(), MemoryError>;
    /// Takes the counter immediate `imm` ([`CounterImmediate`](super::immediate::CounterImmediate))
    /// arrived on `connection` at `now`, through the connection's stream ordering
    /// ([`counters`](super::counters)): applied with every held update it releases, or held.
    /// An inbox without counters refuses it.
    fn counter(&self, connection: ConnectionId, imm: u32, now: Instant) -> Result<Arrival, CounterError> {
        let _ = (imm, now);
        Err(CounterError::Unregistered { connection })
    }
    /// Checks at `now` whether a hole in `connection`'s counter stream outlived its timeout;
    /// receivers call it while idle, so a gap that never fills is reported.
    fn expire_counters(&self, connection: ConnectionId, now: Instant) -> Result<(), CounterError> {
        let _ = (connection, now);
        Ok(())
    }
}

/// An [`Inbox`] over host memories, host `u64` tokens (one per connection) and host counters
/// (per connection registered with [`HostInbox::register_counters`]).
#[derive(Debug)]
pub struct HostInbox {
    memories: MemoryTable,
    tokens: Box<[AtomicU64]>,
    counters: InboundCounters,
}

impl HostInbox {
    /// An inbox applying writes into `memories`.
    pub fn new(memories: MemoryTable) -> Self {
        Self {
            memories,
            tokens: (0..MAX_CONNECTIONS).map(|_| AtomicU64::new(0)).collect(),
            counters: InboundCounters::default(),
        }
    }

    /// Gives inbound `connection` (from rank `peer`) a stream of host counters.
    pub fn register_counters(
        &self,
        connection: ConnectionId,
        peer: u32,
        config: CounterConfig,
    ) -> Result<HostCounterStream, CounterError> {
        let values = Arc::new(HostCounters::default());
        let stream = self.counters.register(connection, peer, config, values.clone())?;
        Ok(HostCounterStream { stream, values })
    }

    /// The inbound token of `connection` (acquire).
    pub fn token(&self, connection: ConnectionId) -> u64 {
        self.tokens.get(usize::from(connection)).map_or(0, |t| t.load(Ordering::Acquire))
    }

    /// Waits (polling, bounded) until the token of `connection` reaches `value`.
    pub fn wait_token(&self, connection: ConnectionId, value: u64, timeout: Duration) -> bool {
        let start = Instant::now();
        while self.token(connection) < value {
            if start.elapsed() > timeout {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        true
    }

    /// The memory table.
    pub fn memories(&self) -> &MemoryTable {
        &self.memories
    }
}

impl Inbox for HostInbox {
    fn write(&self, memory: u8, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        let (m, start) = self.memories.checked(memory, offset, data.len() as u64)?;
        m.write(start, data)
    }
    fn signal(&self, connection: ConnectionId) -> Result<(), MemoryError> {
        if let Some(t) = self.tokens.get(usize::from(connection)) {
            t.fetch_add(1, Ordering::Release);
        }
        Ok(())
    }
    fn counter(&self, connection: ConnectionId, imm: u32, now: Instant) -> Result<Arrival, CounterError> {
        self.counters.arrive(connection, imm, now)
    }
    fn expire_counters(&self, connection: ConnectionId, now: Instant) -> Result<(), CounterError> {
        self.counters.expire(connection, now)
    }
}

/// The host counters of one inbound connection of a [`HostInbox`], as a reader sees them.
#[derive(Clone, Debug)]
pub struct HostCounterStream {
    stream: Arc<CounterStream>,
    values: Arc<HostCounters>,
}

impl HostCounterStream {
    /// The value of `counter` (acquire).
    pub fn load(&self, counter: u16) -> u64 {
        self.values.load(counter)
    }

    /// Waits (bounded) until `counter` reaches `value`; see [`wait_counter`].
    pub fn wait(&self, counter: u16, value: u64, timeout: Duration) -> Result<(), CounterError> {
        wait_counter(&self.stream, counter, value, timeout, |c| self.values.load(c))
    }

    /// The stream: its ordering state, snapshots and failure.
    pub fn stream(&self) -> &CounterStream {
        &self.stream
    }
}

/// One operation of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Write `len` bytes from local memory `src_memory` at `src_offset` to the peer's memory
    /// `dst_memory` at `dst_offset`.
    Put {
        /// Local memory index.
        src_memory: u8,
        /// Offset in it.
        src_offset: u64,
        /// The peer's memory index.
        dst_memory: u8,
        /// Offset in it.
        dst_offset: u64,
        /// Bytes.
        len: u64,
    },
    /// Increment the peer's inbound token of this connection, after every earlier put.
    Signal,
    /// Apply a counter update to the peer's counters of this connection, after every earlier
    /// put: `imm` is a [`CounterImmediate`](super::immediate::CounterImmediate) stamped with the
    /// connection's next counter sequence number; the receiver orders updates by it.
    Counter {
        /// The 32-bit immediate.
        imm: u32,
    },
}

/// What [`Transport::submit`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Every operation is queued; the last one has this ticket (tickets count a connection's
    /// operations from 0).
    Accepted {
        /// Ticket of the last operation.
        last: u64,
    },
    /// Nothing was queued: the connection's in-flight bound is reached. Retry later.
    Full,
}

/// A transport failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The connection index is not connected.
    #[error("{transport}: connection {connection} is not connected")]
    UnknownConnection {
        /// Transport name.
        transport: &'static str,
        /// The connection.
        connection: ConnectionId,
    },
    /// The peer closed the connection or the socket failed.
    #[error("{transport}: lost peer {peer} on connection {connection}: {detail}")]
    PeerLost {
        /// Transport name.
        transport: &'static str,
        /// The connection.
        connection: ConnectionId,
        /// Who the peer is (name and address).
        peer: String,
        /// What happened.
        detail: String,
    },
    /// The peer stopped acknowledging.
    #[error(
        "{transport}: peer {peer} on connection {connection} applied nothing for {waited:?} ({pending} operations pending)"
    )]
    PeerTimeout {
        /// Transport name.
        transport: &'static str,
        /// The connection.
        connection: ConnectionId,
        /// Who the peer is.
        peer: String,
        /// How long nothing happened.
        waited: Duration,
        /// Operations waiting for the peer.
        pending: u64,
    },
    /// The peer reported an error or sent something malformed.
    #[error("{transport}: peer {peer} on connection {connection}: {detail}")]
    Protocol {
        /// Transport name.
        transport: &'static str,
        /// The connection.
        connection: ConnectionId,
        /// Who the peer is.
        peer: String,
        /// What went wrong.
        detail: String,
    },
    /// A command addressed memory it may not.
    #[error("{transport}: connection {connection}: {source}")]
    Memory {
        /// Transport name.
        transport: &'static str,
        /// The connection.
        connection: ConnectionId,
        /// Cause.
        source: MemoryError,
    },
    /// Setting up a connection failed.
    #[error("{transport}: cannot connect to {peer}: {detail}")]
    Connect {
        /// Transport name.
        transport: &'static str,
        /// Who the peer is.
        peer: String,
        /// Why.
        detail: String,
    },
    /// A copy or store failed on the device (a CUDA error).
    #[error("{transport}: connection {connection} to {peer}: {detail}")]
    Device {
        /// Transport name.
        transport: &'static str,
        /// The connection.
        connection: ConnectionId,
        /// Who the peer is.
        peer: String,
        /// The failing call and its error.
        detail: String,
    },
    /// The transport does not carry this kind of operation.
    #[error("{transport}: connection {connection}: {op} is not supported on this transport")]
    Unsupported {
        /// Transport name.
        transport: &'static str,
        /// The connection.
        connection: ConnectionId,
        /// The operation.
        op: &'static str,
    },
    /// The transport was shut down.
    #[error("{transport}: shut down")]
    Shutdown {
        /// Transport name.
        transport: &'static str,
    },
}

/// Moves a proxy's operations to peers (see the module docs for the contract).
pub trait Transport: Send + Sync + fmt::Debug {
    /// Short name for errors and logs (`"tcp"`, `"ib"`).
    fn name(&self) -> &'static str;
    /// Queues `ops` on `connection` in order, all or nothing, without blocking.
    fn submit(&self, connection: ConnectionId, ops: &[Op]) -> Result<Submitted, TransportError>;
    /// Number of operations of `connection` the peer has applied (tickets below it are done);
    /// the connection's error once it failed with operations outstanding (a connection that
    /// failed after everything submitted on it was applied, e.g. closed by a peer that is
    /// done, owes nothing; its next `submit` fails).
    fn completed(&self, connection: ConnectionId) -> Result<u64, TransportError>;
    /// Number of operations of `connection` submitted so far.
    fn submitted(&self, connection: ConnectionId) -> Result<u64, TransportError>;
    /// Advances work the transport does on the proxy thread (completion polling); never blocks.
    fn progress(&self) -> Result<(), TransportError> {
        Ok(())
    }
    /// Stops every connection and joins the transport's threads; bounded.
    fn shutdown(&self);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;

    #[test]
    fn memory_table_checks_bounds_and_indices() {
        let table = MemoryTable::new();
        assert_eq!(table.register(Arc::new(HostMemory::new(16))).unwrap(), 0);
        assert!(table.checked(0, 8, 8).is_ok());
        assert!(matches!(table.checked(0, 9, 8), Err(MemoryError::OutOfBounds { .. })));
        assert!(matches!(table.checked(0, u64::MAX, 2), Err(MemoryError::OutOfBounds { .. })));
        assert_eq!(table.checked(1, 0, 0).unwrap_err(), MemoryError::UnknownMemory { index: 1 });
        for _ in 1..256 {
            table.register(Arc::new(HostMemory::new(1))).unwrap();
        }
        assert_eq!(table.register(Arc::new(HostMemory::new(1))).unwrap_err(), MemoryError::TableFull);
    }

    #[test]
    fn host_inbox_writes_and_signals() {
        let table = MemoryTable::new();
        let mem = Arc::new(HostMemory::new(8));
        table.register(mem.clone()).unwrap();
        let inbox = HostInbox::new(table);
        inbox.write(0, 2, b"abc").unwrap();
        assert_eq!(&mem.snapshot()[2..5], b"abc");
        assert!(inbox.write(0, 6, b"abc").is_err());
        inbox.signal(3).unwrap();
        assert_eq!(inbox.token(3), 1);
        assert!(inbox.wait_token(3, 1, Duration::from_millis(1)));
        assert!(!inbox.wait_token(3, 2, Duration::from_millis(1)));
    }
}
