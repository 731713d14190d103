//! InfiniBand verbs transport (cargo feature `ib`), written against a [`Verbs`] trait.
//!
//! **Status.** Our machines have no RDMA NIC. The transport is tested against
//! [`soft::SoftFabric`], a software reliable-connected fabric over host memory that implements
//! [`Verbs`] (both directions, receive queues, receiver-not-ready, dead NICs, access errors).
//! [`rdma::RdmaVerbs`] binds [`Verbs`] to rdma-core's libibverbs, loaded at run time (device,
//! protection domain, completion queue, memory registration, RC queue-pair bring-up from
//! exchanged [`rdma::QpEndpoint`]s, `post_send`/`post_recv`/`poll_cq`); its layouts and
//! constants are checked against the real verbs.h and its loading against the real library,
//! but it has never run on a NIC, and the PortChannel set-up does not route peers to it yet.
//!
//! **Mapping.** A connection is one RC queue pair, used in both directions: this side's puts,
//! signals and counter updates leave on it, and the peer's for this connection arrive on it.
//! - A put is an RDMA write from a registered local memory to a registered remote one.
//! - A signal is a zero-length RDMA write with immediate data. The immediate is the index of
//!   the receiver's connection (whose inbound token it increments), which the receiver checks
//!   against the queue pair it arrived on. An RC queue pair executes its work requests in
//!   order, so the signal lands after every put posted before it: the transport contract.
//! - A counter update is a zero-length send with immediate data, the
//!   [`CounterImmediate`](crate::proxy::immediate::CounterImmediate). Every 32-bit word is a
//!   counter update, so the receiver tells the two apart by the completion's opcode (a receive
//!   consumed by a send, not by a write), never by the immediate. The same in-order execution
//!   lands it after every put posted before it.
//! - The receiver keeps `recv_depth` zero-length receives posted per queue pair (a write or a
//!   send with immediate consumes one) and turns each such completion into [`Inbox::signal`] or
//!   [`Inbox::counter`] of the connection, reposting the receive. Its [`Transport::progress`]
//!   must therefore run even on a rank that only receives (the proxy calls it on every pass);
//!   it also checks the connections' counter streams for a hole older than its gap timeout
//!   ([`Inbox::expire_counters`]), so an update that never arrives is reported.
//! - The last work request of every operation is signalled (a put longer than `max_write` goes
//!   as several writes); its completion (the peer acknowledged it, and RC acknowledges in
//!   order) advances the connection's completed count and returns its flow-control credit.
//! - A failed completion fails its connection with an error naming the peer; so does a
//!   connection with operations outstanding and no completion for `timeout` (a peer that stopped
//!   posting receives, or a NIC that stopped answering), and, on the receiving side, a counter
//!   update its stream refuses, a hole in the stream that never fills, or a signal it refuses.
//!   A failure stays with its connection: its `submit` reports it, and `completed` while
//!   operations are outstanding; other connections go on.
//! - A refusal tells the sender why (as TCP's error frame does): the refusing side keeps its
//!   own detailed error and posts one zero-length RDMA write with immediate on the queue pair,
//!   whose immediate has bit 31 set and carries a reason code and the wire sequence number
//!   concerned ([`refusal`]). It takes the path of a signal, not of a counter update: every
//!   32-bit word is a counter update, but a signal's immediate is a 16-bit connection index, so
//!   bit 31 is free. The sender's next [`Transport::progress`] fails its connection with a
//!   protocol error naming the peer and the reason ("the peer closed the connection with an
//!   error: ..."), instead of a `PeerTimeout` much later. Codes, not text: a send carrying the
//!   reason would need a registered buffer behind every posted receive and on the sending side,
//!   for one message in a connection's life. The refusing side leaves its queue pair up (moving
//!   it to the error state would flush the refusal before it leaves), reposts no more receives,
//!   and ignores the refusal's completion; a refusal that cannot be posted, or meets a sender
//!   with no receive posted, leaves the sender its timeout.
//! - Shutdown moves the queue pairs to the error state ([`Verbs::close`]), so peers' writes
//!   fail promptly rather than land in memory its owner believes quiet.
//! - With GPUDirect RDMA into device memory, a binding must make the NIC's writes visible to the
//!   GPU before the token is raised (NCCL reads back one word over the loopback, "GDR flush");
//!   [`Inbox::signal`] is where a device inbox does that. Not needed by the host-memory tests.

pub mod discover;
mod ffi;
pub mod rdma;
mod refusal;
pub mod soft;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::{ConnectionId, Inbox, MAX_CONNECTIONS, MemoryError, Op, Submitted, Transport, TransportError};
use crate::proxy::flow::FlowControl;
use refusal::Refusal;

const NAME: &str = "ib";

/// A registered local memory: its address and local key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalRegion {
    /// Address of the first byte.
    pub addr: u64,
    /// Size in bytes.
    pub len: u64,
    /// Local key of the registration.
    pub lkey: u32,
}

/// A peer's registered memory: its address and remote key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteRegion {
    /// Address of the first byte in the peer's address space.
    pub addr: u64,
    /// Size in bytes.
    pub len: u64,
    /// Remote key of the registration.
    pub rkey: u32,
}

/// Immediate data a work request hands the peer, consuming one of its posted receives, and
/// which work request carries it (the receiver tells them apart by the completion's kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Immediate {
    /// An RDMA write with immediate (`IBV_WR_RDMA_WRITE_WITH_IMM`): a signal, whose immediate
    /// is the receiver's connection index, or a refusal (bit 31 set, see [`refusal`]).
    /// Completes as [`CompletionKind::RecvWriteImm`].
    Write(u32),
    /// A send with immediate (`IBV_WR_SEND_WITH_IMM`), zero-length, with no remote address: a
    /// counter update. Completes as [`CompletionKind::RecvSendImm`].
    Send(u32),
}

/// One RDMA write work request, or a send with immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRequest {
    /// Identifies the request in its completion.
    pub wr_id: u64,
    /// Source address.
    pub local_addr: u64,
    /// Source key.
    pub lkey: u32,
    /// Bytes.
    pub len: u64,
    /// Destination address (unused by a send).
    pub remote_addr: u64,
    /// Destination key (unused by a send).
    pub rkey: u32,
    /// Immediate data for the peer, and how it travels; `None` for a plain RDMA write.
    pub imm: Option<Immediate>,
    /// Whether a success completes it (the last part of an operation); an unsignalled part
    /// completes only on failure, under the same id.
    pub signaled: bool,
}

/// What a work completion completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionKind {
    /// A posted [`WriteRequest`] (an RDMA write, with or without immediate, or a send with
    /// immediate), acknowledged by the peer.
    Write,
    /// A posted receive consumed by the peer's write with immediate `imm`, on queue pair `qp`
    /// (`IBV_WC_RECV_RDMA_WITH_IMM`). A failed receive, whose opcode is undefined, comes as this
    /// kind too.
    RecvWriteImm {
        /// The local queue pair it arrived on.
        qp: u32,
        /// The immediate data.
        imm: u32,
    },
    /// A posted receive consumed by the peer's send with immediate `imm`, on queue pair `qp`
    /// (`IBV_WC_RECV` with `IBV_WC_WITH_IMM`).
    RecvSendImm {
        /// The local queue pair it arrived on.
        qp: u32,
        /// The immediate data.
        imm: u32,
    },
}

/// A work completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The request's `wr_id`.
    pub wr_id: u64,
    /// What completed.
    pub kind: CompletionKind,
    /// `Ok`, or why the request failed.
    pub status: Result<(), CompletionError>,
}

/// A failed work completion: its `ibv_wc_status` and the provider's text for it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text}")]
pub struct CompletionError {
    /// The `ibv_wc_status` value.
    pub status: u32,
    /// `ibv_wc_status_str(status)`.
    pub text: String,
}

/// A verbs call of a [`Verbs`] binding failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// The queue pair is not one of this device's.
    #[error("queue pair {qp} is not on {device}")]
    UnknownQp {
        /// The queue pair.
        qp: u32,
        /// The device.
        device: String,
    },
    /// The queue pair is already connected.
    #[error("queue pair {qp} is already connected")]
    AlreadyConnected {
        /// The queue pair.
        qp: u32,
    },
    /// The peer's queue pair is not on this software fabric (which joins the ranks of one
    /// process only).
    #[error("queue pair {qp} is not on this software fabric (it joins the ranks of one process only)")]
    ForeignQp {
        /// The peer's queue pair.
        qp: u32,
    },
    /// The device was removed (or its software NIC killed).
    #[error("the device was removed")]
    DeviceRemoved,
    /// A write longer than one scatter entry can describe.
    #[error("a write of {len} bytes exceeds 4 GiB")]
    TooLong {
        /// Bytes asked for.
        len: u64,
    },
    /// The provider lacks an entry point.
    #[error("the provider has no {call}")]
    MissingEntryPoint {
        /// The entry point.
        call: &'static str,
    },
    /// A call returned an error.
    #[error("{call}: {detail}")]
    Call {
        /// The call.
        call: &'static str,
        /// Its error.
        detail: String,
    },
}

/// The verbs a binding provides (one completion queue shared by the connections). No call
/// blocks.
pub trait Verbs: Send + Sync + std::fmt::Debug {
    /// Posts `request` on queue pair `qp`: an RDMA write (with immediate for an
    /// [`Immediate::Write`]) or, for an [`Immediate::Send`], a send with immediate.
    fn post_write(&self, qp: u32, request: WriteRequest) -> Result<(), VerbsError>;
    /// Posts a zero-length receive on queue pair `qp`, for one incoming write or send with
    /// immediate; it completes as [`CompletionKind::RecvWriteImm`] or
    /// [`CompletionKind::RecvSendImm`] accordingly.
    fn post_recv(&self, qp: u32, wr_id: u64) -> Result<(), VerbsError>;
    /// Appends available completions to `out`.
    fn poll_cq(&self, out: &mut Vec<WorkCompletion>) -> Result<(), VerbsError>;
    /// Moves every queue pair to the error state (shutdown): peers' writes then fail promptly
    /// instead of landing in memory the owner believes quiet.
    fn close(&self) {}
}

/// Options of an [`IbTransport`].
#[derive(Clone, Copy, Debug)]
pub struct IbConfig {
    /// Operations in flight per connection (flow control; at least 2).
    pub max_in_flight: u64,
    /// Receives kept posted per queue pair (incoming signals and counter updates in flight
    /// before the sender sees receiver-not-ready).
    pub recv_depth: u32,
    /// How long a connection may have operations outstanding without a completion.
    pub timeout: Duration,
    /// Largest RDMA write (the port's `max_msg_sz`, 1 GiB on mlx5): longer puts go as several
    /// writes, only the last signalled.
    pub max_write: u64,
}

impl Default for IbConfig {
    fn default() -> Self {
        Self { max_in_flight: 64, recv_depth: 128, timeout: Duration::from_secs(5), max_write: 1 << 30 }
    }
}

/// One connection: a queue pair to a peer and the peer's memories.
#[derive(Clone, Debug)]
pub struct IbConnection {
    /// Queue pair number (already connected to the peer's queue pair by the caller).
    pub qp: u32,
    /// The peer's index of this connection: its inbound token that this side's signals raise
    /// (and its counter stream that this side's counter updates go to).
    pub remote_connection: ConnectionId,
    /// Who the peer is (for errors).
    pub peer: String,
    /// The peer's registered memories, by index.
    pub remote: Vec<RemoteRegion>,
}

#[derive(Debug)]
struct ConnState {
    conn: IbConnection,
    submitted: u64,
    completed: u64,
    /// Completed tickets not yet contiguous with `completed`.
    done_out_of_order: BTreeSet<u64>,
    /// The last time an outstanding operation completed (or none was outstanding).
    last_progress: Instant,
    failure: Option<TransportError>,
}

/// The verbs transport.
#[derive(Debug)]
pub struct IbTransport<V> {
    verbs: V,
    config: IbConfig,
    /// Local memories, by index (registration only appends).
    local: RwLock<Vec<LocalRegion>>,
    inbox: Arc<dyn Inbox>,
    conns: Vec<Mutex<Option<ConnState>>>,
    /// Which connection a queue pair belongs to (receive completions name the queue pair).
    by_qp: RwLock<HashMap<u32, ConnectionId>>,
    flow: FlowControl,
    /// When the next timeout scan is due, in ns from `created`.
    next_timeout_scan: AtomicU64,
    created: Instant,
}

/// How often [`Transport::progress`] looks for connections that stopped completing (or whose
/// counter stream keeps a hole).
const TIMEOUT_SCAN: Duration = Duration::from_millis(1);

/// Set in the id of every receive work request (a write's id has its connection, below 2^10,
/// in bits 48..58), so a failed completion, whose opcode is undefined, is known as a receive.
pub const RECV_WR_TAG: u64 = 1 << 63;

/// Set in the id of a refusal's write (with its connection in the low bits): its completion
/// concerns a connection that has already failed, and is dropped.
const REFUSAL_WR_TAG: u64 = 1 << 62;

/// An operation's writes: `first` covers all of it, cut into parts of `part` bytes (a
/// zero-length write is one part).
#[derive(Clone, Copy, Debug)]
struct Writes {
    first: WriteRequest,
    part: u64,
}

impl Writes {
    fn count(&self) -> u64 {
        self.first.len.div_ceil(self.part).max(1)
    }

    /// Part `k`: only the last is signalled.
    fn part(&self, k: u64) -> WriteRequest {
        let at = k * self.part;
        WriteRequest {
            local_addr: self.first.local_addr + at,
            remote_addr: self.first.remote_addr + at,
            len: self.part.min(self.first.len - at),
            signaled: k + 1 == self.count(),
            ..self.first
        }
    }
}

/// Packs a connection and its ticket into a work request id (tickets below 2^48).
fn wr_id(connection: ConnectionId, ticket: u64) -> u64 {
    (u64::from(connection) << 48) | (ticket & ((1 << 48) - 1))
}

/// The connection and ticket of a write's work request id.
fn ticket_of(wr_id: u64) -> (ConnectionId, u64) {
    // The top 16 bits hold a ConnectionId (see wr_id()).
    ((wr_id >> 48) as ConnectionId, wr_id & ((1 << 48) - 1))
}

impl<V: Verbs> IbTransport<V> {
    /// A transport over `verbs` reading local memories `local` and raising the inbound tokens
    /// of `inbox` when peers signal.
    pub fn new(verbs: V, local: Vec<LocalRegion>, inbox: Arc<dyn Inbox>, config: IbConfig) -> Self {
        Self {
            verbs,
            config,
            local: RwLock::new(local),
            inbox,
            conns: (0..MAX_CONNECTIONS).map(|_| Mutex::new(None)).collect(),
            by_qp: RwLock::new(HashMap::new()),
            flow: FlowControl::new(MAX_CONNECTIONS, config.max_in_flight.max(2)),
            next_timeout_scan: AtomicU64::new(0),
            created: Instant::now(),
        }
    }

    /// Appends a local memory; returns its index.
    pub fn add_local(&self, region: LocalRegion) -> usize {
        let mut local = self.local.write().unwrap_or_else(|p| p.into_inner());
        local.push(region);
        local.len() - 1
    }

    /// The verbs this transport posts to.
    pub fn verbs(&self) -> &V {
        &self.verbs
    }

    /// Sets up connection `id` on its connected queue pair and posts its receives.
    pub fn add_connection(&self, id: ConnectionId, conn: IbConnection) -> Result<(), TransportError> {
        let connect = |detail: String| TransportError::Connect { transport: NAME, peer: conn.peer.clone(), detail };
        let slot = self
            .conns
            .get(usize::from(id))
            .ok_or(TransportError::UnknownConnection { transport: NAME, connection: id })?;
        if usize::from(conn.remote_connection) >= MAX_CONNECTIONS {
            return Err(connect(format!("the peer's connection index must be below {MAX_CONNECTIONS}")));
        }
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_some() {
            return Err(connect(format!("connection {id} is already connected")));
        }
        {
            let mut by_qp = self.by_qp.write().unwrap_or_else(|p| p.into_inner());
            if let Some(other) = by_qp.get(&conn.qp) {
                return Err(connect(format!("queue pair {} already carries connection {other}", conn.qp)));
            }
            by_qp.insert(conn.qp, id);
        }
        for _ in 0..self.config.recv_depth {
            if let Err(e) = self.verbs.post_recv(conn.qp, RECV_WR_TAG | u64::from(id)) {
                self.by_qp.write().unwrap_or_else(|p| p.into_inner()).remove(&conn.qp);
                return Err(connect(format!("posting receives on queue pair {}: {e}", conn.qp)));
            }
        }
        *guard = Some(ConnState {
            conn,
            submitted: 0,
            completed: 0,
            done_out_of_order: BTreeSet::new(),
            last_progress: Instant::now(),
            failure: None,
        });
        Ok(())
    }

    /// Forgets connection `id` (its set-up failed on one side): its queue pair's completions
    /// are dropped from now on. Nothing may be in flight on it.
    pub fn remove_connection(&self, id: ConnectionId) {
        let taken =
            self.conns.get(usize::from(id)).and_then(|slot| slot.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(state) = taken {
            self.by_qp.write().unwrap_or_else(|p| p.into_inner()).remove(&state.conn.qp);
        }
    }

    /// Runs `f` on connection `connection`'s state, failed or not.
    fn state<T>(
        &self,
        connection: ConnectionId,
        f: impl FnOnce(&ConnState) -> Result<T, TransportError>,
    ) -> Result<T, TransportError> {
        let unknown = TransportError::UnknownConnection { transport: NAME, connection };
        let slot = self.conns.get(usize::from(connection)).ok_or(unknown.clone())?;
        let guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        f(guard.as_ref().ok_or(unknown)?)
    }

    /// Runs `f` on connection `connection` unless it is unknown or has failed.
    fn with<T>(
        &self,
        connection: ConnectionId,
        f: impl FnOnce(&mut ConnState) -> Result<T, TransportError>,
    ) -> Result<T, TransportError> {
        let unknown = TransportError::UnknownConnection { transport: NAME, connection };
        let slot = self.conns.get(usize::from(connection)).ok_or(unknown.clone())?;
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        let state = guard.as_mut().ok_or(unknown)?;
        if let Some(e) = &state.failure {
            return Err(e.clone());
        }
        f(state)
    }

    /// The work requests of operation `op` (ticket `ticket`), checked: a put in parts of at
    /// most `max_write` bytes, or one signal or counter update.
    fn writes(
        &self,
        connection: ConnectionId,
        conn: &IbConnection,
        ticket: u64,
        op: &Op,
    ) -> Result<Writes, TransportError> {
        let memory = |source| TransportError::Memory { transport: NAME, connection, source };
        let first = WriteRequest {
            wr_id: wr_id(connection, ticket),
            local_addr: 0,
            lkey: 0,
            len: 0,
            remote_addr: 0,
            rkey: 0,
            imm: None,
            signaled: true,
        };
        match *op {
            Op::Put { src_memory, src_offset, dst_memory, dst_offset, len } => {
                let l = *self
                    .local
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(usize::from(src_memory))
                    .ok_or(MemoryError::UnknownMemory { index: src_memory })
                    .map_err(memory)?;
                let r = conn
                    .remote
                    .get(usize::from(dst_memory))
                    .ok_or(MemoryError::UnknownMemory { index: dst_memory })
                    .map_err(memory)?;
                super::check_range(src_memory, src_offset, len, l.len).map_err(memory)?;
                super::check_range(dst_memory, dst_offset, len, r.len).map_err(memory)?;
                let first = WriteRequest {
                    local_addr: l.addr + src_offset,
                    lkey: l.lkey,
                    len,
                    remote_addr: r.addr + dst_offset,
                    rkey: r.rkey,
                    ..first
                };
                Ok(Writes { first, part: self.config.max_write.max(1) })
            }
            Op::Signal => {
                let imm = Immediate::Write(u32::from(conn.remote_connection));
                Ok(Writes { first: WriteRequest { imm: Some(imm), ..first }, part: 1 })
            }
            Op::Counter { imm } => {
                Ok(Writes { first: WriteRequest { imm: Some(Immediate::Send(imm)), ..first }, part: 1 })
            }
        }
    }

    /// A write of `connection` completed (the peer acknowledged it), or failed.
    fn write_done(
        &self,
        connection: ConnectionId,
        ticket: u64,
        status: Result<(), CompletionError>,
    ) -> Result<(), TransportError> {
        self.with(connection, |state| {
            if let Err(detail) = status {
                return Err(peer_lost(connection, state, format!("work request {ticket} failed: {detail}")));
            }
            state.done_out_of_order.insert(ticket);
            let mut released = 0;
            while state.done_out_of_order.remove(&state.completed) {
                state.completed += 1;
                released += 1;
            }
            if released > 0 {
                state.last_progress = Instant::now();
            }
            self.flow.release(usize::from(connection), released);
            Ok(())
        })
    }

    /// A peer's write or send with immediate consumed a receive of queue pair `qp`: `apply`
    /// what it brought to the queue pair's connection, then repost the receive. (A receive of a
    /// queue pair that carries no connection, left by a failed set-up, is dropped.)
    fn received(
        &self,
        qp: u32,
        status: Result<(), CompletionError>,
        apply: impl FnOnce(ConnectionId, &mut ConnState) -> Result<(), TransportError>,
    ) -> Result<(), TransportError> {
        let Some(connection) = self.by_qp.read().unwrap_or_else(|p| p.into_inner()).get(&qp).copied() else {
            tracing::warn!("ib: a receive completed on queue pair {qp}, which carries no connection");
            return Ok(());
        };
        self.with(connection, |state| {
            if let Err(detail) = status {
                // A failed receive's opcode is undefined: it was for a signal or a counter update.
                return Err(peer_lost(
                    connection,
                    state,
                    format!("a receive for the peer's immediate failed: {detail}"),
                ));
            }
            apply(connection, state)?;
            self.verbs
                .post_recv(qp, RECV_WR_TAG | u64::from(connection))
                .map_err(|e| peer_lost(connection, state, format!("reposting a receive: {e}")))
        })
    }

    /// A peer's write with immediate `imm` for `connection`: a signal, which raises its token,
    /// or the peer's refusal, which fails the connection with the peer's reason.
    fn raise_token(&self, connection: ConnectionId, state: &mut ConnState, imm: u32) -> Result<(), TransportError> {
        if let Some(refusal) = Refusal::decode(imm) {
            let detail = format!("the peer closed the connection with an error: {refusal}");
            return Err(fail(state, protocol(connection, state, detail)));
        }
        if imm != u32::from(connection) {
            let detail = format!("a signal for connection {imm} arrived on the queue pair of connection {connection}");
            let error = protocol(connection, state, detail);
            return Err(self.refuse(connection, state, Refusal::MisdirectedSignal, error));
        }
        self.inbox.signal(connection).map_err(|source| {
            let error = TransportError::Memory { transport: NAME, connection, source };
            self.refuse(connection, state, Refusal::Store, error)
        })
    }

    /// A peer's counter update (send with immediate `imm`) for `connection`: into its counter
    /// stream, which applies or holds it.
    fn apply_counter(&self, connection: ConnectionId, state: &mut ConnState, imm: u32) -> Result<(), TransportError> {
        match self.inbox.counter(connection, imm, Instant::now()) {
            Ok(_) => Ok(()),
            Err(e) => {
                let error = protocol(connection, state, format!("a counter update: {e}"));
                Err(self.refuse(connection, state, Refusal::from(&e), error))
            }
        }
    }

    /// Fails `connection` with `error`, for an inbound operation this side refuses, and tells
    /// the peer why: `refusal` as a zero-length write with immediate, behind whatever this side
    /// posted before (see the module docs).
    fn refuse(
        &self,
        connection: ConnectionId,
        state: &mut ConnState,
        refusal: Refusal,
        error: TransportError,
    ) -> TransportError {
        let request = WriteRequest {
            wr_id: REFUSAL_WR_TAG | u64::from(connection),
            local_addr: 0,
            lkey: 0,
            len: 0,
            remote_addr: 0,
            rkey: 0,
            imm: Some(Immediate::Write(refusal.encode())),
            signaled: true,
        };
        if let Err(e) = self.verbs.post_write(state.conn.qp, request) {
            tracing::warn!("ib: could not tell {} why connection {connection} failed: {e}", state.conn.peer);
        }
        fail(state, error)
    }

    /// Fails connections whose outstanding operations saw no completion for the timeout, and
    /// those whose counter stream holds a hole older than its gap timeout. The scan locks every
    /// connected connection, so it runs at most every [`TIMEOUT_SCAN`], not on every pass of the
    /// proxy.
    fn check_timeouts(&self) {
        let now = u64::try_from(self.created.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if now < self.next_timeout_scan.load(Ordering::Relaxed) {
            return;
        }
        self.next_timeout_scan.store(now.saturating_add(TIMEOUT_SCAN.as_nanos() as u64), Ordering::Relaxed);
        // Copied out: add_connection takes a connection's lock before the queue-pair map's.
        let connected: Vec<ConnectionId> =
            self.by_qp.read().unwrap_or_else(|p| p.into_inner()).values().copied().collect();
        let at = Instant::now();
        for index in connected {
            let Some(slot) = self.conns.get(usize::from(index)) else { continue };
            let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
            let Some(state) = guard.as_mut().filter(|s| s.failure.is_none()) else { continue };
            if let Err(e) = self.inbox.expire_counters(index, at) {
                let error = protocol(index, state, format!("counter updates: {e}"));
                self.refuse(index, state, Refusal::from(&e), error);
                continue;
            }
            if state.completed == state.submitted {
                state.last_progress = Instant::now();
                continue;
            }
            let waited = state.last_progress.elapsed();
            if waited > self.config.timeout {
                let e = TransportError::PeerTimeout {
                    transport: NAME,
                    connection: index,
                    peer: state.conn.peer.clone(),
                    waited,
                    pending: state.submitted - state.completed,
                };
                fail(state, e);
            }
        }
    }
}

/// Fails `connection` for good: the peer is lost, for `detail`.
fn peer_lost(connection: ConnectionId, state: &mut ConnState, detail: String) -> TransportError {
    fail(state, TransportError::PeerLost { transport: NAME, connection, peer: state.conn.peer.clone(), detail })
}

/// The peer of `connection` sent something this side refuses, for `detail`.
fn protocol(connection: ConnectionId, state: &ConnState, detail: String) -> TransportError {
    TransportError::Protocol { transport: NAME, connection, peer: state.conn.peer.clone(), detail }
}

/// Records `error` as the connection's failure (every later call returns it) and returns it.
fn fail(state: &mut ConnState, error: TransportError) -> TransportError {
    state.failure = Some(error.clone());
    error
}

impl<V: Verbs> Transport for IbTransport<V> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn submit(&self, connection: ConnectionId, ops: &[Op]) -> Result<Submitted, TransportError> {
        self.with(connection, |state| {
            // A bad command is refused without failing the connection: every operation is
            // checked before any is posted (again while posting: nothing is kept, nothing
            // allocated on the proxy's path).
            let ticket = |i: usize| state.submitted + i as u64;
            for (i, op) in ops.iter().enumerate() {
                self.writes(connection, &state.conn, ticket(i), op)?;
            }
            if ops.is_empty() {
                return Ok(Submitted::Accepted { last: state.submitted.wrapping_sub(1) });
            }
            if !self.flow.try_acquire(usize::from(connection), ops.len() as u64) {
                return Ok(Submitted::Full);
            }
            if state.completed == state.submitted {
                state.last_progress = Instant::now();
            }
            for (i, op) in ops.iter().enumerate() {
                let writes = self.writes(connection, &state.conn, state.submitted, op)?;
                for k in 0..writes.count() {
                    if let Err(detail) = self.verbs.post_write(state.conn.qp, writes.part(k)) {
                        // Credits of the operations not wholly posted; the posted complete or flush.
                        self.flow.release(usize::from(connection), (ops.len() - i) as u64);
                        return Err(peer_lost(connection, state, format!("posting a write: {detail}")));
                    }
                }
                state.submitted += 1;
            }
            Ok(Submitted::Accepted { last: state.submitted - 1 })
        })
    }

    /// The count, or the connection's failure while operations are outstanding (a connection
    /// that failed after all its operations completed owes nothing).
    fn completed(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        self.state(connection, |s| match &s.failure {
            Some(e) if s.completed < s.submitted => Err(e.clone()),
            _ => Ok(s.completed),
        })
    }

    fn submitted(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        self.state(connection, |s| Ok(s.submitted))
    }

    /// Applies every polled completion and the timeouts. A failure fails only its connection
    /// (its `submit`, and `completed` while operations are outstanding, report it); only a
    /// failing completion queue is an error here.
    fn progress(&self) -> Result<(), TransportError> {
        let mut out = Vec::new();
        self.verbs.poll_cq(&mut out).map_err(|e| TransportError::Protocol {
            transport: NAME,
            connection: 0,
            peer: "the local completion queue".into(),
            detail: e.to_string(),
        })?;
        for wc in out {
            // Errors are recorded in their connection's state (or it had failed before).
            let _ = match wc.kind {
                // A refusal's: its connection has failed already.
                CompletionKind::Write if wc.wr_id & REFUSAL_WR_TAG != 0 => Ok(()),
                CompletionKind::Write => {
                    let (connection, ticket) = ticket_of(wc.wr_id);
                    self.write_done(connection, ticket, wc.status)
                }
                CompletionKind::RecvWriteImm { qp, imm } => {
                    self.received(qp, wc.status, |connection, state| self.raise_token(connection, state, imm))
                }
                CompletionKind::RecvSendImm { qp, imm } => {
                    self.received(qp, wc.status, |connection, state| self.apply_counter(connection, state, imm))
                }
            };
        }
        self.check_timeouts();
        Ok(())
    }

    fn shutdown(&self) {
        self.verbs.close();
    }
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests;
