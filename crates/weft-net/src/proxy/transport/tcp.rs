//! The TCP transport: puts and signals as framed messages ([`super::frame`]) over one or more
//! sockets per connection, between threads, processes or hosts.
//!
//! **Sender.** [`Transport::submit`] checks the source range, takes flow-control credits and
//! queues the operations; it never touches a socket. One sender thread per connection turns
//! operations into frames (puts are cut into frames of at most `max_frame_payload` bytes, read
//! from local memory straight into each frame as it is sent: device memory through
//! [`super::staged`]), gives every frame the connection's next sequence number, and writes
//! frames round-robin over the connection's sockets, so frames can arrive in any order.
//! At most `window_frames` frames are unacknowledged; an operation completes (its credits
//! return) when the receiver has acknowledged its last frame.
//!
//! **Receiver.** One thread per socket reads frames into the connection's reorder buffer and
//! applies them strictly in sequence order through the [`Inbox`]: a signal or counter update is
//! applied only after every frame before it, so after all the data it covers (a counter update
//! then goes through the connection's counter stream, which orders updates by their own
//! sequence numbers; while idle, the receiver checks that stream's gap timeout). After applying, it acknowledges the
//! next expected sequence number on the socket the frame came from. A sequence number already
//! applied or beyond the window, a write outside a memory, or a malformed frame is answered with
//! an `Error` frame and the socket is closed.
//!
//! **Failures.** Every socket has read and write timeouts; a closed socket, a write that cannot
//! progress within `timeout`, an `Error` frame, or `timeout` without any acknowledgement while
//! frames are outstanding fails the connection with an error naming the peer. An endpoint that
//! shuts down after one of its connections failed sends that failure, as an `Error` frame, to
//! every peer still sending to it, so that a survivor blames the rank that died rather than
//! the one that stopped because of it. No wait in this module is unbounded.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::seq::SliceRandom;

use super::frame::{Frame, FrameError, HEADER_LEN, PUT_KIND, PUT_PREFIX_LEN, decode_header};
use super::{ConnectionId, Inbox, MAX_CONNECTIONS, MemoryError, MemoryTable, Op, Submitted, Transport, TransportError};
use crate::proxy::counters::CounterError;
use crate::proxy::flow::FlowControl;

const NAME: &str = "tcp";
/// How often blocked threads look at the shutdown flag.
const TICK: Duration = Duration::from_millis(20);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking holder leaves plain counters and queues behind; keep going with them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Options of a [`TcpTransport`].
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Address to listen on.
    pub bind: SocketAddr,
    /// Sockets per connection (frames go round-robin over them).
    pub streams: u16,
    /// Operations in flight per connection (flow control).
    pub max_in_flight: u64,
    /// Largest data payload of one frame.
    pub max_frame_payload: usize,
    /// Frames a sender may have unacknowledged, and the receiver's reorder window; both sides
    /// must use the same value.
    pub window_frames: u64,
    /// Bound of every wait on a peer (connect, write progress, acknowledgements).
    pub timeout: Duration,
    /// Test aid: when above 1, the sender permutes its frames in groups of this many before
    /// writing them, so the receiver sees them out of order.
    pub shuffle_window: usize,
    /// Seed of that permutation.
    pub shuffle_seed: u64,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            streams: 1,
            max_in_flight: 64,
            max_frame_payload: 1 << 20,
            window_frames: 256,
            timeout: Duration::from_secs(5),
            shuffle_window: 0,
            shuffle_seed: 0,
        }
    }
}

#[derive(Debug)]
struct Shared {
    name: String,
    config: TcpConfig,
    memories: Arc<MemoryTable>,
    inbox: Arc<dyn Inbox>,
    flow: FlowControl,
    closing: AtomicBool,
    /// Why this endpoint shut down, when one of its own connections had failed: every peer
    /// still connected to it is told, so that a survivor blames the rank that died, not the
    /// one that stopped because of it.
    farewell: Mutex<Option<String>>,
    inbound: Mutex<HashMap<ConnectionId, Arc<InConn>>>,
    inbound_errors: Mutex<Vec<String>>,
    /// Sockets this endpoint opened (it sends on them and reads acknowledgements).
    outbound_sockets: Mutex<Vec<TcpStream>>,
    /// Sockets peers opened (this endpoint reads frames and writes acknowledgements).
    inbound_sockets: Mutex<Vec<TcpStream>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    fn spawn(self: &Arc<Self>, name: String, f: impl FnOnce(Arc<Self>) + Send + 'static) -> Result<(), io::Error> {
        let shared = self.clone();
        let handle = std::thread::Builder::new().name(name).spawn(move || f(shared))?;
        lock(&self.threads).push(handle);
        Ok(())
    }

    fn frame_limit(&self) -> usize {
        self.config.max_frame_payload + 64
    }
}

/// A TCP endpoint: listens for peers' connections (applying what they send through its inbox)
/// and opens connections to peers (sending what the proxy submits).
#[derive(Debug)]
pub struct TcpTransport {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    out: RwLock<HashMap<ConnectionId, Arc<OutConn>>>,
}

impl TcpTransport {
    /// Listens on `config.bind`. `name` identifies this endpoint in its peers' errors;
    /// `memories` are read by puts, `inbox` receives what peers send.
    pub fn bind(
        config: TcpConfig,
        name: impl Into<String>,
        memories: Arc<MemoryTable>,
        inbox: Arc<dyn Inbox>,
    ) -> Result<Self, TransportError> {
        let name = name.into();
        let connect_err = |detail: String| TransportError::Connect { transport: NAME, peer: name.clone(), detail };
        if config.streams == 0 || config.max_frame_payload == 0 || config.window_frames == 0 {
            return Err(connect_err("streams, max_frame_payload and window_frames must be positive".into()));
        }
        if config.max_in_flight < 2 {
            return Err(connect_err("max_in_flight must be at least 2 (a put and a signal)".into()));
        }
        let listener = TcpListener::bind(config.bind).map_err(|e| connect_err(format!("bind {}: {e}", config.bind)))?;
        let local_addr = listener.local_addr().map_err(|e| connect_err(e.to_string()))?;
        listener.set_nonblocking(true).map_err(|e| connect_err(e.to_string()))?;
        let flow = FlowControl::new(MAX_CONNECTIONS, config.max_in_flight);
        let shared = Arc::new(Shared {
            name: format!("{name}@{local_addr}"),
            config,
            memories,
            inbox,
            flow,
            closing: AtomicBool::new(false),
            farewell: Mutex::new(None),
            inbound: Mutex::new(HashMap::new()),
            inbound_errors: Mutex::new(Vec::new()),
            outbound_sockets: Mutex::new(Vec::new()),
            inbound_sockets: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
        });
        shared
            .spawn(format!("weft-tcp-accept-{}", local_addr.port()), move |s| accept_loop(&s, &listener))
            .map_err(|e| connect_err(e.to_string()))?;
        Ok(Self { shared, local_addr, out: RwLock::new(HashMap::new()) })
    }

    /// The address peers connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Opens connection `local` to the peer at `addr`, whose inbox sees it as connection
    /// `remote` (signals increment its token `remote`). `peer_name` is used in errors.
    pub fn connect(
        &self,
        local: ConnectionId,
        addr: SocketAddr,
        remote: ConnectionId,
        peer_name: &str,
    ) -> Result<(), TransportError> {
        let peer = format!("{peer_name}@{addr}");
        let err = |detail: String| TransportError::Connect { transport: NAME, peer: peer.clone(), detail };
        if usize::from(local) >= MAX_CONNECTIONS || usize::from(remote) >= MAX_CONNECTIONS {
            return Err(err(format!("connection indices must be below {MAX_CONNECTIONS}")));
        }
        if self.shared.closing() {
            return Err(TransportError::Shutdown { transport: NAME });
        }
        let config = &self.shared.config;
        let mut streams = Vec::new();
        for stream in 0..config.streams {
            let mut s = TcpStream::connect_timeout(&addr, config.timeout).map_err(|e| err(e.to_string()))?;
            s.set_nodelay(true).map_err(|e| err(e.to_string()))?;
            s.set_write_timeout(Some(config.timeout)).map_err(|e| err(e.to_string()))?;
            s.set_read_timeout(Some(TICK)).map_err(|e| err(e.to_string()))?;
            let hello =
                Frame::Hello { connection: remote, stream, streams: config.streams, name: self.shared.name.clone() };
            s.write_all(&hello.encode()).map_err(|e| err(format!("hello: {e}")))?;
            lock(&self.shared.outbound_sockets).push(s.try_clone().map_err(|e| err(e.to_string()))?);
            streams.push(s);
        }
        let conn = Arc::new(OutConn {
            id: local,
            peer: peer.clone(),
            state: Mutex::new(OutState {
                queue: VecDeque::new(),
                inflight: VecDeque::new(),
                acked: 0,
                sent: 0,
                last_progress: Instant::now(),
            }),
            cv: Condvar::new(),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failure: Mutex::new(None),
            streams,
        });
        {
            let mut out = self.out.write().unwrap_or_else(|p| p.into_inner());
            if out.contains_key(&local) {
                return Err(err(format!("connection {local} is already connected")));
            }
            out.insert(local, conn.clone());
        }
        for (i, s) in conn.streams.iter().enumerate() {
            let reader = s.try_clone().map_err(|e| err(e.to_string()))?;
            let c = conn.clone();
            self.shared
                .spawn(format!("weft-tcp-ack-{local}-{i}"), move |sh| ack_loop(&sh, &c, reader))
                .map_err(|e| err(e.to_string()))?;
        }
        let c = conn.clone();
        self.shared
            .spawn(format!("weft-tcp-send-{local}"), move |sh| send_loop(&sh, &c))
            .map_err(|e| err(e.to_string()))?;
        Ok(())
    }

    /// Errors the receiving side met (malformed frames, writes outside memories), for diagnostics.
    pub fn inbound_errors(&self) -> Vec<String> {
        lock(&self.shared.inbound_errors).clone()
    }

    /// The flow control of this endpoint's connections.
    pub fn flow(&self) -> &FlowControl {
        &self.shared.flow
    }

    /// Why outgoing `connection` failed, even when nothing was outstanding on it (which
    /// [`Transport::completed`] does not count as an error): a rank waiting for a peer's signal
    /// asks this to tell a dead peer (an error naming it) from a slow one.
    pub fn failure(&self, connection: ConnectionId) -> Result<Option<TransportError>, TransportError> {
        Ok(lock(&self.conn(connection)?.failure).clone())
    }

    /// The failure of the lowest-numbered outgoing connection that failed.
    fn first_failure(&self) -> Option<TransportError> {
        let out = self.out.read().unwrap_or_else(|p| p.into_inner());
        let mut ids: Vec<&ConnectionId> = out.keys().collect();
        ids.sort_unstable();
        ids.into_iter().find_map(|id| lock(&out[id].failure).clone())
    }

    fn conn(&self, connection: ConnectionId) -> Result<Arc<OutConn>, TransportError> {
        self.out
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&connection)
            .cloned()
            .ok_or(TransportError::UnknownConnection { transport: NAME, connection })
    }
}

impl Transport for TcpTransport {
    fn name(&self) -> &'static str {
        NAME
    }

    fn submit(&self, connection: ConnectionId, ops: &[Op]) -> Result<Submitted, TransportError> {
        let conn = self.conn(connection)?;
        conn.check()?;
        if self.shared.closing() {
            return Err(TransportError::Shutdown { transport: NAME });
        }
        for op in ops {
            if let Op::Put { src_memory, src_offset, len, .. } = *op {
                self.shared.memories.checked(src_memory, src_offset, len).map_err(|source| TransportError::Memory {
                    transport: NAME,
                    connection,
                    source,
                })?;
            }
        }
        if ops.is_empty() {
            return Ok(Submitted::Accepted { last: conn.submitted.load(Ordering::Acquire).wrapping_sub(1) });
        }
        if !self.shared.flow.try_acquire(usize::from(connection), ops.len() as u64) {
            return Ok(Submitted::Full);
        }
        let mut state = lock(&conn.state);
        let first = conn.submitted.fetch_add(ops.len() as u64, Ordering::AcqRel);
        for (i, op) in ops.iter().enumerate() {
            state.queue.push_back((first + i as u64, *op));
        }
        drop(state);
        conn.cv.notify_all();
        Ok(Submitted::Accepted { last: first + ops.len() as u64 - 1 })
    }

    fn completed(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        let conn = self.conn(connection)?;
        // A connection that failed after everything submitted on it was applied (a peer closing
        // it once done, at the end of a job) owes nothing: only outstanding work fails.
        let done = conn.completed.load(Ordering::Acquire);
        if done < conn.submitted.load(Ordering::Acquire) {
            conn.check()?;
        }
        Ok(done)
    }

    fn submitted(&self, connection: ConnectionId) -> Result<u64, TransportError> {
        Ok(self.conn(connection)?.submitted.load(Ordering::Acquire))
    }

    fn shutdown(&self) {
        // Set before `closing`, which the receivers see as their cue to pass it on.
        if !self.shared.closing() {
            // "after", not "because": a peer that closed an idle connection at the end of a job
            // is not the reason a later endpoint stops, but what went before it.
            *lock(&self.shared.farewell) =
                self.first_failure().map(|e| format!("{} stopped after its connection failed: {e}", self.shared.name));
        }
        if self.shared.closing.swap(true, Ordering::AcqRel) {
            return;
        }
        for s in lock(&self.shared.outbound_sockets).iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
        // Receivers stop reading but may still acknowledge what they applied: a peer whose
        // flush waits for the acknowledgement of data its partner already saw (and then shut
        // down on) must get it, not a lost connection.
        for s in lock(&self.shared.inbound_sockets).iter() {
            let _ = s.shutdown(Shutdown::Read);
        }
        for conn in self.out.read().unwrap_or_else(|p| p.into_inner()).values() {
            conn.cv.notify_all();
        }
        // Every thread checks `closing` at least every TICK and every socket call is bounded by
        // the timeout (and the sockets are shut down), so these joins end.
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for t in threads {
            let _ = t.join();
        }
        // Threads spawned while we joined (a late accept) joined here.
        let late = std::mem::take(&mut *lock(&self.shared.threads));
        for t in late {
            let _ = t.join();
        }
        for s in lock(&self.shared.inbound_sockets).iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        self.shutdown();
    }
}

// ---------------------------------------------------------------------------------------------
// Sending side.

#[derive(Debug)]
struct OutConn {
    id: ConnectionId,
    peer: String,
    state: Mutex<OutState>,
    cv: Condvar,
    submitted: AtomicU64,
    completed: AtomicU64,
    failure: Mutex<Option<TransportError>>,
    streams: Vec<TcpStream>,
}

#[derive(Debug)]
struct OutState {
    /// Operations not yet turned into frames, with their tickets.
    queue: VecDeque<(u64, Op)>,
    /// Operations sent, not yet acknowledged: (ticket, sequence of its last frame).
    inflight: VecDeque<(u64, u64)>,
    /// Next sequence the receiver expects (everything below is applied).
    acked: u64,
    /// Next sequence to hand out.
    sent: u64,
    /// Last acknowledgement, or when frames became outstanding.
    last_progress: Instant,
}

impl OutConn {
    fn check(&self) -> Result<(), TransportError> {
        lock(&self.failure).clone().map_or(Ok(()), Err)
    }

    fn fail(&self, shared: &Shared, error: TransportError) {
        // A peer that closes an idle connection (everything submitted was applied) is shutting
        // down (ranks stop at different times); it is an error only for the operations that
        // follow.
        let idle = self.completed.load(Ordering::Acquire) == self.submitted.load(Ordering::Acquire);
        {
            let mut failure = lock(&self.failure);
            if failure.is_some() {
                return;
            }
            match (shared.closing(), idle) {
                (true, _) => {}
                (false, true) => tracing::debug!(connection = self.id, "{error}"),
                (false, false) => tracing::warn!(connection = self.id, "{error}"),
            }
            *failure = Some(error);
        }
        for s in &self.streams {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.cv.notify_all();
    }

    fn lost(&self, detail: String) -> TransportError {
        TransportError::PeerLost { transport: NAME, connection: self.id, peer: self.peer.clone(), detail }
    }
}

fn send_loop(shared: &Shared, conn: &OutConn) {
    if let Err(e) = send_until_closed(shared, conn) {
        conn.fail(shared, e);
    }
}

fn send_until_closed(shared: &Shared, conn: &OutConn) -> Result<(), TransportError> {
    let config = &shared.config;
    let mut rng = rand::rngs::StdRng::seed_from_u64(config.shuffle_seed ^ u64::from(conn.id));
    let mut next_stream = 0usize;
    let mut pending: Vec<Vec<u8>> = Vec::new();
    let group = config.shuffle_window.max(1);
    let mut send = |pending: &mut Vec<Vec<u8>>| -> Result<(), TransportError> {
        if config.shuffle_window > 1 {
            pending.shuffle(&mut rng);
        }
        for frame in pending.drain(..) {
            let mut stream = &conn.streams[next_stream % conn.streams.len()];
            next_stream += 1;
            stream.write_all(&frame).map_err(|e| conn.lost(format!("write: {e}")))?;
        }
        Ok(())
    };
    loop {
        let ops: Vec<(u64, Op)> = {
            let mut state = lock(&conn.state);
            loop {
                if shared.closing() || conn.check().is_err() {
                    return Ok(());
                }
                check_progress(config, conn, &mut state)?;
                if !state.queue.is_empty() {
                    break state.queue.drain(..).collect();
                }
                state = conn.cv.wait_timeout(state, TICK).unwrap_or_else(|p| p.into_inner()).0;
            }
        };
        for (ticket, op) in ops {
            match op {
                Op::Put { src_memory, src_offset, dst_memory, dst_offset, len } => {
                    // Checked at submit; memories are never unregistered.
                    let memory_error = |source| TransportError::Memory { transport: NAME, connection: conn.id, source };
                    let (memory, start) = shared.memories.checked(src_memory, src_offset, len).map_err(memory_error)?;
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    // Frame by frame, the data read straight into the frame as it is sent, so
                    // reading a frame (a staged copy out of a GPU) overlaps sending the last.
                    let mut done = 0usize;
                    loop {
                        let n = (len - done).min(config.max_frame_payload);
                        let seq = wait_window(shared, conn, &mut pending, &mut send)?;
                        let frame = Frame::encode_put(seq, dst_memory, dst_offset + done as u64, n, |out| {
                            memory.read(start + done, out)
                        })
                        .map_err(memory_error)?;
                        pending.push(frame);
                        if pending.len() >= group {
                            send(&mut pending)?;
                        }
                        done += n;
                        if done >= len {
                            break;
                        }
                    }
                }
                Op::Signal | Op::Counter { .. } => {
                    let seq = wait_window(shared, conn, &mut pending, &mut send)?;
                    let frame = match op {
                        Op::Counter { imm } => Frame::Counter { seq, imm },
                        _ => Frame::Signal { seq },
                    };
                    pending.push(frame.encode());
                    if pending.len() >= group {
                        send(&mut pending)?;
                    }
                }
            }
            // The op's frames may already be acknowledged (they can be sent above before this
            // entry exists), so completion is also checked here, not only when an ack arrives.
            let mut state = lock(&conn.state);
            let last = state.sent - 1;
            state.inflight.push_back((ticket, last));
            complete_acked(shared, conn, state);
        }
        send(&mut pending)?;
    }
}

/// Takes the next sequence number once fewer than `window_frames` frames are unacknowledged,
/// sending the frames held back first (the receiver cannot acknowledge what it never got).
fn wait_window(
    shared: &Shared,
    conn: &OutConn,
    pending: &mut Vec<Vec<u8>>,
    send: &mut impl FnMut(&mut Vec<Vec<u8>>) -> Result<(), TransportError>,
) -> Result<u64, TransportError> {
    let window = shared.config.window_frames;
    let mut state = lock(&conn.state);
    if state.sent - state.acked >= window {
        drop(state);
        send(pending)?;
        state = lock(&conn.state);
        while state.sent - state.acked >= window {
            if shared.closing() {
                return Err(TransportError::Shutdown { transport: NAME });
            }
            conn.check()?;
            check_progress(&shared.config, conn, &mut state)?;
            state = conn.cv.wait_timeout(state, TICK).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
    if state.sent == state.acked {
        state.last_progress = Instant::now();
    }
    let seq = state.sent;
    state.sent += 1;
    Ok(seq)
}

/// Fails with `PeerTimeout` when frames are outstanding and nothing was acknowledged for
/// `timeout`.
fn check_progress(config: &TcpConfig, conn: &OutConn, state: &mut OutState) -> Result<(), TransportError> {
    if state.sent == state.acked {
        state.last_progress = Instant::now();
        return Ok(());
    }
    let waited = state.last_progress.elapsed();
    if waited > config.timeout {
        return Err(TransportError::PeerTimeout {
            transport: NAME,
            connection: conn.id,
            peer: conn.peer.clone(),
            waited,
            pending: state.inflight.len() as u64 + state.queue.len() as u64,
        });
    }
    Ok(())
}

/// Completes every in-flight operation whose last frame is acknowledged: advances `completed`
/// and returns the operations' flow-control credits.
fn complete_acked(shared: &Shared, conn: &OutConn, mut state: MutexGuard<'_, OutState>) {
    let mut done = 0;
    while let Some(&(ticket, last)) = state.inflight.front() {
        if last >= state.acked {
            break;
        }
        state.inflight.pop_front();
        conn.completed.store(ticket + 1, Ordering::Release);
        done += 1;
    }
    drop(state);
    if done > 0 {
        shared.flow.release(usize::from(conn.id), done);
        conn.cv.notify_all();
    }
}

fn ack_loop(shared: &Shared, conn: &OutConn, mut stream: TcpStream) {
    loop {
        let frame = match read_frame(shared, &mut stream, 1024, &|| Ok(())) {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                if !shared.closing() {
                    conn.fail(shared, conn.lost("connection closed by the peer".into()));
                }
                return;
            }
            Err(e) => {
                if !shared.closing() {
                    conn.fail(shared, conn.lost(e.to_string()));
                }
                return;
            }
        };
        match frame {
            Frame::Ack { next } => {
                let mut state = lock(&conn.state);
                if next > state.sent {
                    drop(state);
                    let detail = format!("acknowledged sequence {next} that was never sent");
                    conn.fail(shared, conn.lost(detail));
                    return;
                }
                if next > state.acked {
                    state.acked = next;
                    state.last_progress = Instant::now();
                    complete_acked(shared, conn, state);
                }
            }
            Frame::Error { message } => {
                let error = TransportError::Protocol {
                    transport: NAME,
                    connection: conn.id,
                    peer: conn.peer.clone(),
                    detail: format!("the peer closed the connection with an error: {message}"),
                };
                conn.fail(shared, error);
                return;
            }
            other => {
                conn.fail(shared, conn.lost(format!("unexpected frame {other:?} on a sending socket")));
                return;
            }
        }
    }
}

/// What went wrong on a socket: recorded, and told to the peer where it can still hear.
#[derive(Debug, thiserror::Error)]
enum WireError {
    /// The stream ended inside a frame.
    #[error("connection closed in the middle of a frame ({got} of {len} bytes)")]
    Truncated { got: usize, len: usize },
    /// The socket failed.
    #[error("read: {0}")]
    Read(io::Error),
    /// A malformed frame.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// A sequence number seen before.
    #[error("sequence {seq} arrived twice")]
    Duplicate { seq: u64 },
    /// A sequence number beyond the receive window.
    #[error("sequence {seq} is beyond the window (next {next}, window {window})")]
    BeyondWindow { seq: u64, next: u64, window: u64 },
    /// A frame other than a put, signal or counter where sequence numbers are expected.
    #[error("only puts, signals and counters carry sequence numbers")]
    Unsequenced,
    /// Applying a counter update failed (its stream's ordering or store).
    #[error(transparent)]
    Counter(#[from] CounterError),
    /// Applying a put or signal failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// What a reading thread does at each read timeout while it waits for bytes.
type Idle<'a> = &'a dyn Fn() -> Result<(), WireError>;

/// Reads exactly `buf.len()` bytes, riding out read timeouts (they only exist so the thread
/// can notice shutdown, and check `idle`). `Ok(false)`: clean end of stream before the first
/// byte, or shutdown.
fn read_full(shared: &Shared, stream: &mut TcpStream, buf: &mut [u8], idle: Idle<'_>) -> Result<bool, WireError> {
    let mut got = 0;
    while got < buf.len() {
        if shared.closing() {
            return Ok(false);
        }
        match stream.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(WireError::Truncated { got, len: buf.len() }),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => idle()?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(WireError::Read(e)),
        }
    }
    Ok(true)
}

/// One frame, `None` at a clean end of stream or shutdown; errors describe what went wrong.
fn read_frame(
    shared: &Shared,
    stream: &mut TcpStream,
    limit: usize,
    idle: Idle<'_>,
) -> Result<Option<Frame>, WireError> {
    let mut header = [0u8; HEADER_LEN];
    if !read_full(shared, stream, &mut header, idle)? {
        return Ok(None);
    }
    let (kind, len) = decode_header(&header, limit)?;
    // `len` is at most `limit`, a usize.
    let len = len as usize;
    if kind == PUT_KIND && len >= PUT_PREFIX_LEN {
        // The data goes straight into a buffer of its own: no copy out of a whole body.
        let mut prefix = [0u8; PUT_PREFIX_LEN];
        let mut data = vec![0u8; len - PUT_PREFIX_LEN];
        if !read_full(shared, stream, &mut prefix, idle)? || !read_full(shared, stream, &mut data, idle)? {
            return Ok(None);
        }
        return Ok(Some(Frame::decode_put(&prefix, data)));
    }
    let mut body = vec![0u8; len];
    if !read_full(shared, stream, &mut body, idle)? && len > 0 {
        return Ok(None);
    }
    Ok(Some(Frame::decode_body(kind, &body)?))
}

// ---------------------------------------------------------------------------------------------
// Receiving side.

#[derive(Debug)]
struct InConn {
    id: ConnectionId,
    state: Mutex<InState>,
}

#[derive(Debug, Default)]
struct InState {
    /// Next sequence number to apply.
    next: u64,
    /// Frames that arrived early.
    early: BTreeMap<u64, Frame>,
}

impl InConn {
    /// Buffers `frame` and applies every frame now in order; returns the next expected sequence.
    fn deliver(&self, shared: &Shared, seq: u64, frame: Frame) -> Result<u64, WireError> {
        let mut state = lock(&self.state);
        let window = shared.config.window_frames;
        if seq < state.next || state.early.contains_key(&seq) {
            return Err(WireError::Duplicate { seq });
        }
        if seq >= state.next + window {
            return Err(WireError::BeyondWindow { seq, next: state.next, window });
        }
        state.early.insert(seq, frame);
        loop {
            let next = state.next;
            let Some(frame) = state.early.remove(&next) else { break };
            match frame {
                Frame::Put { dst_memory, dst_offset, data, .. } => {
                    shared.inbox.write(dst_memory, dst_offset, &data)?;
                }
                Frame::Signal { .. } => shared.inbox.signal(self.id)?,
                Frame::Counter { imm, .. } => {
                    shared.inbox.counter(self.id, imm, Instant::now())?;
                }
                _ => return Err(WireError::Unsequenced),
            }
            state.next += 1;
        }
        Ok(state.next)
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    while !shared.closing() {
        match listener.accept() {
            Ok((stream, addr)) => {
                let clone = stream.try_clone();
                if let Ok(clone) = clone {
                    lock(&shared.inbound_sockets).push(clone);
                }
                let name = format!("weft-tcp-recv-{}", addr.port());
                if let Err(e) = shared.spawn(name, move |s| receive_loop(&s, stream, addr)) {
                    lock(&shared.inbound_errors).push(format!("cannot start a receiver for {addr}: {e}"));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(TICK),
            Err(e) => {
                lock(&shared.inbound_errors).push(format!("accept: {e}"));
                std::thread::sleep(TICK);
            }
        }
    }
}

fn receive_loop(shared: &Shared, mut stream: TcpStream, addr: SocketAddr) {
    let setup = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(TICK)))
        .and_then(|()| stream.set_write_timeout(Some(shared.config.timeout)))
        .and_then(|()| stream.set_nodelay(true));
    if let Err(e) = setup {
        lock(&shared.inbound_errors).push(format!("{addr}: {e}"));
        return;
    }
    let (conn, peer) = match read_frame(shared, &mut stream, 1024, &|| Ok(())) {
        Ok(Some(Frame::Hello { connection, name, .. })) if usize::from(connection) < MAX_CONNECTIONS => {
            let mut inbound = lock(&shared.inbound);
            let conn = inbound
                .entry(connection)
                .or_insert_with(|| Arc::new(InConn { id: connection, state: Mutex::new(InState::default()) }))
                .clone();
            (conn, name)
        }
        Ok(None) => return say_farewell(shared, &mut stream),
        Ok(Some(other)) => {
            refuse(shared, &mut stream, &addr.to_string(), format!("expected a hello, got {other:?}"));
            return;
        }
        Err(e) => {
            refuse(shared, &mut stream, &addr.to_string(), e.to_string());
            return;
        }
    };
    // A hole in the connection's counter stream that never fills is found while waiting.
    let expire = || Ok(shared.inbox.expire_counters(conn.id, Instant::now())?);
    loop {
        let frame = match read_frame(shared, &mut stream, shared.frame_limit(), &expire) {
            Ok(Some(frame)) => frame,
            // A clean close (the sender shut down) or our own shutdown.
            Ok(None) => return say_farewell(shared, &mut stream),
            Err(e) => {
                if shared.closing() {
                    say_farewell(shared, &mut stream);
                } else {
                    refuse(shared, &mut stream, &peer, e.to_string());
                }
                return;
            }
        };
        let seq = match frame {
            Frame::Put { seq, .. } | Frame::Signal { seq } | Frame::Counter { seq, .. } => seq,
            other => {
                refuse(shared, &mut stream, &peer, format!("unexpected frame {other:?} on a receiving socket"));
                return;
            }
        };
        match conn.deliver(shared, seq, frame) {
            Ok(next) => {
                if let Err(e) = stream.write_all(&Frame::Ack { next }.encode()) {
                    if !shared.closing() {
                        lock(&shared.inbound_errors).push(format!("{peer}: ack: {e}"));
                    }
                    return;
                }
            }
            Err(e) => {
                refuse(shared, &mut stream, &peer, format!("connection {}: {e}", conn.id));
                return;
            }
        }
    }
}

/// On a shutdown caused by a failed connection, tells the sender on `stream` (best effort)
/// why, as an `Error` frame ahead of the close. Only this socket's receiving thread writes to
/// it, so the frame never interleaves with an acknowledgement.
fn say_farewell(shared: &Shared, stream: &mut TcpStream) {
    if !shared.closing() {
        return;
    }
    if let Some(message) = lock(&shared.farewell).clone() {
        let _ = stream.write_all(&Frame::Error { message }.encode());
    }
}

/// Records `detail`, tells the peer (best effort) and closes the socket.
fn refuse(shared: &Shared, stream: &mut TcpStream, peer: &str, detail: String) {
    lock(&shared.inbound_errors).push(format!("{peer}: {detail}"));
    let _ = stream.write_all(&Frame::Error { message: detail }.encode());
    let _ = stream.shutdown(Shutdown::Both);
}
