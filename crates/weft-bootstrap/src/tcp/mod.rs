//! [`TcpBootstrap`]: rendezvous through rank 0, then a mesh of authenticated TCP connections.

mod peer;
mod root;
mod wire;

use std::{
    collections::HashMap,
    fmt,
    io::Write,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use crate::{
    Bootstrap, BootstrapError, DEFAULT_MAX_FRAME_BYTES, MIN_MAX_FRAME_BYTES, TorchrunEnv, UniqueId,
    codec::{CodecError, Message, Purpose, RejectReason},
    env,
    mailbox::{Mailbox, Wait},
    ops::{self, Transport},
    unique_id::SECRET_BYTES,
};

use wire::Ctx;

/// How long a rank waits for the root's answer beyond its own deadline. The root answers at the
/// earliest registered deadline, so this only matters if the root itself is gone or stuck.
const ROOT_GRACE: Duration = Duration::from_secs(1);

/// First pause between attempts to reach a root that is not listening yet; doubles up to
/// [`CONNECT_RETRY_MAX`].
const CONNECT_RETRY_MIN: Duration = Duration::from_millis(10);
const CONNECT_RETRY_MAX: Duration = Duration::from_millis(200);

/// How long `Drop` waits to wake its own acceptor thread.
const WAKE_TIMEOUT: Duration = Duration::from_millis(200);

/// Configures and creates a [`TcpBootstrap`].
///
/// ```no_run
/// use std::time::Duration;
/// use weft_bootstrap::TcpBootstrap;
///
/// // Under torchrun: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set for every process.
/// let bootstrap = TcpBootstrap::builder()
///     .timeout(Duration::from_secs(60))
///     .from_env()?;
/// # Ok::<(), weft_bootstrap::BootstrapError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct TcpBootstrapBuilder {
    timeout: Option<Duration>,
    max_frame_bytes: Option<usize>,
    listen_ip: Option<IpAddr>,
}

impl TcpBootstrapBuilder {
    /// A builder with every value at its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bound on the rendezvous and on every later operation. Wins over
    /// `WEFT_BOOTSTRAP_TIMEOUT`; default 30 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Largest frame body this rank accepts (and sends); default
    /// [`DEFAULT_MAX_FRAME_BYTES`], at least [`MIN_MAX_FRAME_BYTES`]. A `send` or collective part
    /// is limited to this size minus at most 9 bytes of framing.
    pub fn max_frame_bytes(mut self, limit: usize) -> Self {
        self.max_frame_bytes = Some(limit);
        self
    }

    /// The IP this rank's peer listener binds and advertises. Default: the local IP of this
    /// rank's connection to the root, which is the interface that routes towards the root. An
    /// unspecified IP (`0.0.0.0`) binds every interface and advertises that default.
    pub fn listen_ip(mut self, ip: IpAddr) -> Self {
        self.listen_ip = Some(ip);
        self
    }

    /// Joins the job identified by `id` as `rank` of `world_size`. Rank 0 hosts the rendezvous
    /// root on `id.address()`. Returns once every rank has registered, or fails with an error
    /// that names the ranks that did not.
    pub fn connect(self, id: &UniqueId, rank: usize, world_size: usize) -> Result<TcpBootstrap, BootstrapError> {
        self.connect_inner(id, rank, world_size, id.address())
    }

    /// Joins the job described by the torchrun variables (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
    /// `MASTER_PORT`; see [`TorchrunEnv`]). The secret comes from `WEFT_BOOTSTRAP_SECRET` (64 hex
    /// digits) if set, else it is derived from `MASTER_ADDR:MASTER_PORT`
    /// ([`TorchrunEnv::default_secret`]): without `WEFT_BOOTSTRAP_SECRET` this mode only keeps
    /// other jobs out and is meant for trusted clusters.
    pub fn from_env(self) -> Result<TcpBootstrap, BootstrapError> {
        let torchrun = TorchrunEnv::from_env()?;
        let secret = env::secret_from(env::lookup_process_env)?;
        self.connect_torchrun(&torchrun, secret)
    }

    /// [`from_env`](TcpBootstrapBuilder::from_env) with the variables already parsed: joins as
    /// `torchrun.rank` of `torchrun.world_size`, with `secret` or, if `None`, the default secret.
    ///
    /// Rank 0 binds the root on `MASTER_PORT` of every interface (like torch's TCPStore), unless
    /// `MASTER_ADDR` is a loopback address, which it then binds exactly.
    pub fn connect_torchrun(
        self,
        torchrun: &TorchrunEnv,
        secret: Option<[u8; SECRET_BYTES]>,
    ) -> Result<TcpBootstrap, BootstrapError> {
        let id = torchrun.unique_id(secret)?;
        let address = id.address();
        let root_bind = if address.ip().is_loopback() {
            address
        } else {
            let any = match address.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            };
            SocketAddr::new(any, address.port())
        };
        self.connect_inner(&id, torchrun.rank, torchrun.world_size, root_bind)
    }

    fn connect_inner(
        self,
        id: &UniqueId,
        rank: usize,
        world_size: usize,
        root_bind: SocketAddr,
    ) -> Result<TcpBootstrap, BootstrapError> {
        if world_size == 0 {
            return Err(BootstrapError::InvalidConfig("the world size must be at least 1".to_owned()));
        }
        if u32::try_from(world_size).is_err() {
            return Err(BootstrapError::InvalidConfig(format!(
                "the world size {world_size} does not fit the wire format (at most {})",
                u32::MAX
            )));
        }
        if rank >= world_size {
            return Err(BootstrapError::RankOutOfRange { rank, world_size });
        }
        let timeout = env::resolve_timeout(self.timeout, env::lookup_process_env)?;
        let max_frame_bytes = self.max_frame_bytes.unwrap_or(DEFAULT_MAX_FRAME_BYTES);
        if max_frame_bytes < MIN_MAX_FRAME_BYTES {
            return Err(BootstrapError::InvalidConfig(format!(
                "the frame limit {max_frame_bytes} is below the minimum of {MIN_MAX_FRAME_BYTES} bytes"
            )));
        }
        let config =
            Config { rank, world_size, timeout, max_frame_bytes, listen_ip: self.listen_ip, secret: id.secret() };
        let wait = Wait::new(timeout, "rendezvous");
        if rank == 0 {
            start_root(&config, id, root_bind, wait.deadline)?;
        }
        let joined = rendezvous(&config, id.address(), &wait)?;
        TcpBootstrap::start(config, joined)
    }
}

/// The settled configuration of one rank.
#[derive(Debug, Clone)]
struct Config {
    rank: usize,
    world_size: usize,
    timeout: Duration,
    max_frame_bytes: usize,
    listen_ip: Option<IpAddr>,
    secret: [u8; SECRET_BYTES],
}

/// Binds (or takes the listener [`UniqueId::new`] bound for) the root address and starts the
/// root thread.
fn start_root(config: &Config, id: &UniqueId, bind: SocketAddr, deadline: Instant) -> Result<(), BootstrapError> {
    let listener = match id.take_prebound() {
        Some(listener) => listener,
        None => TcpListener::bind(bind)
            .map_err(|e| BootstrapError::io(Some(0), format!("binding the rendezvous root listener on {bind}"), e))?,
    };
    root::spawn(
        listener,
        root::RootConfig {
            secret: config.secret,
            world_size: config.world_size,
            max_frame_bytes: config.max_frame_bytes,
            timeout: config.timeout,
            stop_at: deadline + ROOT_GRACE,
        },
    )
    .map_err(|e| BootstrapError::io(Some(0), "starting the rendezvous root thread", e))
}

/// What a rank has once the rendezvous succeeded.
#[derive(Debug)]
struct Joined {
    listener: TcpListener,
    listen: SocketAddr,
    peers: Vec<SocketAddr>,
}

/// Registers with the root and waits for the address table.
fn rendezvous(config: &Config, root: SocketAddr, wait: &Wait) -> Result<Joined, BootstrapError> {
    let rank = config.rank;
    let mut stream = connect_root(root, rank, wait)?;
    let ctx = Ctx { rank, peer: 0, addr: root, during: "rendezvous", timeout: wait.timeout };
    let io = |context: &str, e| BootstrapError::io(Some(rank), format!("{context} (rendezvous with {root})"), e);
    stream
        .set_nodelay(true)
        .and_then(|()| wire::set_deadline(&stream, wait.deadline))
        .map_err(|e| io("configuring the root connection", e))?;
    wire::handshake_connect(&mut stream, &ctx, &config.secret, Purpose::Rendezvous)?;

    let local_ip = stream.local_addr().map_err(|e| io("reading the local address", e))?.ip();
    let bind_ip = config.listen_ip.unwrap_or(local_ip);
    let listener =
        TcpListener::bind((bind_ip, 0)).map_err(|e| io(&format!("binding the peer listener on {bind_ip}"), e))?;
    let mut listen = listener.local_addr().map_err(|e| io("reading the peer listener's address", e))?;
    if listen.ip().is_unspecified() {
        listen.set_ip(local_ip);
    }

    let budget_ms = wait.deadline.saturating_duration_since(Instant::now()).as_millis();
    ctx.write(
        &mut stream,
        &Message::Register {
            world_size: config.world_size as u32,
            listen,
            budget_ms: u64::try_from(budget_ms).unwrap_or(u64::MAX),
        },
    )?;

    // The root answers at the latest when the earliest registered deadline passes.
    wire::set_deadline(&stream, wait.deadline + ROOT_GRACE).map_err(|e| io("configuring the root connection", e))?;
    let waiting = Ctx { during: "waiting for the rendezvous root", ..ctx };
    let peers = waiting.read(&mut stream, config.max_frame_bytes, |message| match message {
        Message::Table { listen } => Ok(listen),
        Message::Reject(reason) => Err(rejected(config, reason)),
        other => Err(waiting.unexpected(other.kind())),
    })?;
    let bad_table = |field, value| BootstrapError::Malformed {
        rank,
        peer: Some(0),
        source: CodecError::InvalidValue { field, value },
    };
    if peers.len() != config.world_size {
        return Err(bad_table("address table length", peers.len() as u64));
    }
    if peers[rank] != listen {
        return Err(bad_table("address table entry of this rank", rank as u64));
    }
    Ok(Joined { listener, listen, peers })
}

/// Turns the root's rejection into this rank's error.
fn rejected(config: &Config, reason: RejectReason) -> BootstrapError {
    let rank = config.rank;
    match reason {
        RejectReason::DuplicateRank { rank } => BootstrapError::DuplicateRank { rank: rank as usize },
        RejectReason::RankOutOfRange { rank, world_size } => {
            BootstrapError::RankOutOfRange { rank: rank as usize, world_size: world_size as usize }
        }
        RejectReason::WorldSizeMismatch { expected, got } => {
            BootstrapError::WorldSizeMismatch { rank, expected: expected as usize, got: got as usize }
        }
        RejectReason::Timeout { missing } => BootstrapError::Timeout {
            rank,
            missing: missing.into_iter().map(|r| r as usize).collect(),
            during: "rendezvous",
            timeout: config.timeout,
        },
        RejectReason::RankLeft { rank: peer } => {
            BootstrapError::PeerClosed { rank, peer: peer as usize, during: "rendezvous" }
        }
    }
}

/// Connects to the root, retrying while it is not listening yet, until the deadline.
fn connect_root(root: SocketAddr, rank: usize, wait: &Wait) -> Result<TcpStream, BootstrapError> {
    let mut pause = CONNECT_RETRY_MIN;
    let mut last_error = None;
    loop {
        let left = wait.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            if let Some(error) = last_error {
                tracing::warn!(rank, %root, %error, "giving up on the rendezvous root");
            }
            return Err(BootstrapError::Timeout {
                rank,
                missing: vec![0],
                during: "connecting to the rendezvous root",
                timeout: wait.timeout,
            });
        }
        match TcpStream::connect_timeout(&root, left) {
            Ok(stream) => return Ok(stream),
            Err(e) => {
                tracing::debug!(rank, %root, error = %e, "rendezvous root not reachable yet");
                last_error = Some(e);
            }
        }
        thread::sleep(pause.min(wait.deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(CONNECT_RETRY_MAX);
    }
}

/// Bounds how many not-yet-authenticated connections are served at once (each takes a thread
/// for up to the timeout), so a flood of connections cannot exhaust threads. A legitimate job
/// never has more than `world_size` handshakes in flight at one listener.
#[derive(Debug)]
struct Gate {
    inside: AtomicUsize,
    max: usize,
}

/// Extra handshake slots beyond `world_size`, for strangers and retries.
const GATE_HEADROOM: usize = 64;

impl Gate {
    fn new(world_size: usize) -> Arc<Self> {
        Arc::new(Self { inside: AtomicUsize::new(0), max: world_size.saturating_add(GATE_HEADROOM) })
    }

    /// A pass if fewer than `max` are inside; the pass lets the next one in when dropped.
    fn enter(self: &Arc<Self>) -> Option<GatePass> {
        if self.inside.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.inside.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(GatePass(self.clone()))
    }
}

#[derive(Debug)]
struct GatePass(Arc<Gate>);

impl Drop for GatePass {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the acceptor and reader threads share with the [`TcpBootstrap`].
#[derive(Debug)]
struct Shared {
    rank: usize,
    world_size: usize,
    timeout: Duration,
    max_frame_bytes: usize,
    secret: [u8; SECRET_BYTES],
    mailbox: Mailbox,
    incoming: Mutex<Incoming>,
    /// Set by `Drop`; threads that see it stop.
    closing: AtomicBool,
    /// Bounds handshakes in flight at the peer listener.
    gate: Arc<Gate>,
}

#[derive(Debug)]
struct Incoming {
    /// Clones of the accepted streams still being served, shut down by `Drop` to stop their
    /// readers; keyed by a serial number so that each reader can remove its own when done.
    streams: HashMap<u64, TcpStream>,
    next_serial: u64,
    /// `connected[r]`: rank `r` has an authenticated connection to this rank.
    connected: Vec<bool>,
}

/// This rank's sending side of its connection to one peer.
#[derive(Debug)]
enum Link {
    /// Not connected yet; the first send connects.
    Idle,
    /// Connected and authenticated.
    Up(TcpStream),
    /// A write failed midway; the connection is unusable.
    Broken,
}

/// A rank of a job whose ranks reach each other over TCP (processes on one or many hosts).
///
/// Created by [`TcpBootstrap::builder`]`().connect(..)` or `.from_env()`. After the rendezvous,
/// this rank opens one connection to each peer it sends to, on first use; each connection is
/// authenticated by the handshake described in the [crate docs](crate). One thread accepts
/// connections and one thread per incoming connection reads it, so a world of `n` ranks uses up
/// to `n` threads and `2(n - 1)` sockets per rank once every pair has talked: this bootstrap is
/// built for the worlds of a GPU job (up to a few hundred ranks), not for thousands.
///
/// Dropping it closes its connections; peers waiting on it then fail with
/// [`BootstrapError::PeerClosed`].
pub struct TcpBootstrap {
    shared: Arc<Shared>,
    /// This rank's advertised listen address.
    listen: SocketAddr,
    /// Every rank's listen address, indexed by rank.
    peers: Vec<SocketAddr>,
    links: Vec<Mutex<Link>>,
    seq: AtomicU64,
}

impl TcpBootstrap {
    /// A builder with every value at its default.
    pub fn builder() -> TcpBootstrapBuilder {
        TcpBootstrapBuilder::new()
    }

    fn start(config: Config, joined: Joined) -> Result<Self, BootstrapError> {
        let rank = config.rank;
        let shared = Arc::new(Shared {
            rank,
            world_size: config.world_size,
            timeout: config.timeout,
            max_frame_bytes: config.max_frame_bytes,
            secret: config.secret,
            mailbox: Mailbox::new(rank),
            incoming: Mutex::new(Incoming {
                streams: HashMap::new(),
                next_serial: 0,
                connected: vec![false; config.world_size],
            }),
            closing: AtomicBool::new(false),
            gate: Gate::new(config.world_size),
        });
        peer::spawn_acceptor(shared.clone(), joined.listener)
            .map_err(|e| BootstrapError::io(Some(rank), "starting the peer acceptor thread", e))?;
        tracing::debug!(rank, world_size = config.world_size, listen = %joined.listen, "bootstrap ready");
        Ok(Self {
            shared,
            listen: joined.listen,
            links: (0..config.world_size).map(|_| Mutex::new(Link::Idle)).collect(),
            peers: joined.peers,
            seq: AtomicU64::new(0),
        })
    }

    /// The address where this rank accepts peer connections.
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// The address where `rank` accepts peer connections, if `rank` exists. Ranks whose
    /// addresses share an IP are (very likely) on the same host.
    pub fn peer_addr(&self, rank: usize) -> Option<SocketAddr> {
        self.peers.get(rank).copied()
    }

    /// The bound on every operation.
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// The largest frame body this rank accepts and sends.
    pub fn max_frame_bytes(&self) -> usize {
        self.shared.max_frame_bytes
    }

    /// Opens and authenticates this rank's connection to `peer`.
    fn open(&self, peer: usize, deadline: Instant) -> Result<TcpStream, BootstrapError> {
        let addr = self.peers[peer];
        let ctx =
            Ctx { rank: self.shared.rank, peer, addr, during: "connecting to a peer", timeout: self.shared.timeout };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ctx.timed_out());
        }
        let mut stream = TcpStream::connect_timeout(&addr, left).map_err(|e| {
            // The peer's listener was up before the rendezvous finished, so a refusal means the
            // peer has gone.
            if e.kind() == std::io::ErrorKind::ConnectionRefused { ctx.closed() } else { ctx.write_error(e) }
        })?;
        stream
            .set_nodelay(true)
            .and_then(|()| wire::set_deadline(&stream, deadline))
            .map_err(|e| ctx.write_error(e))?;
        wire::handshake_connect(&mut stream, &ctx, &self.shared.secret, Purpose::Peer)?;
        Ok(stream)
    }
}

impl Transport for TcpBootstrap {
    fn rank(&self) -> usize {
        self.shared.rank
    }

    fn world_size(&self) -> usize {
        self.shared.world_size
    }

    fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    fn mailbox(&self) -> &Mailbox {
        &self.shared.mailbox
    }

    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    fn post(&self, peer: usize, message: &Message<'_>, deadline: Instant) -> Result<(), BootstrapError> {
        let rank = self.shared.rank;
        let len = message.body_len();
        let limit = self.shared.max_frame_bytes;
        if len > limit as u64 {
            return Err(BootstrapError::FrameTooLarge { rank, peer: Some(peer), len, limit });
        }
        let frame = message.encode();
        let ctx = Ctx { rank, peer, addr: self.peers[peer], during: "send", timeout: self.shared.timeout };
        // Holding the lock while connecting and writing keeps frames to one peer whole and in
        // order; sends to other peers are not blocked.
        let mut link = self.links[peer].lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*link, Link::Idle) {
            *link = Link::Up(self.open(peer, deadline)?);
        }
        let Link::Up(stream) = &mut *link else {
            return Err(ctx.closed());
        };
        let written = wire::set_deadline(stream, deadline).and_then(|()| stream.write_all(&frame));
        if let Err(e) = written {
            // Part of the frame may be on the wire: the connection cannot carry another one.
            *link = Link::Broken;
            return Err(ctx.write_error(e));
        }
        Ok(())
    }
}

impl Bootstrap for TcpBootstrap {
    fn rank(&self) -> usize {
        self.shared.rank
    }

    fn advertised_ip(&self) -> Option<std::net::IpAddr> {
        Some(self.listen.ip())
    }

    fn world_size(&self) -> usize {
        self.shared.world_size
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

impl fmt::Debug for TcpBootstrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpBootstrap")
            .field("rank", &self.shared.rank)
            .field("world_size", &self.shared.world_size)
            .field("listen", &self.listen)
            .field("timeout", &self.shared.timeout)
            .finish_non_exhaustive()
    }
}

impl Drop for TcpBootstrap {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        let streams = std::mem::take(&mut self.shared.incoming.lock().unwrap_or_else(PoisonError::into_inner).streams);
        for stream in streams.values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        // The acceptor is blocked in accept(): one connection wakes it, and it sees `closing`.
        if let Err(e) = TcpStream::connect_timeout(&self.listen, WAKE_TIMEOUT) {
            tracing::debug!(rank = self.shared.rank, error = %e, "cannot wake the acceptor thread");
        }
        // Outgoing links close when `links` drops.
    }
}

#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod tests;
