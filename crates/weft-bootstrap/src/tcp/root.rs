//! The rendezvous root, hosted by rank 0 on a thread of its own.
//!
//! The root accepts connections on the [`UniqueId`](crate::UniqueId) address. A short-lived
//! greeter thread per connection runs the handshake and reads the `Register` frame; the root
//! thread then validates the registration and, once every rank is registered, sends everyone the
//! address table. Meanwhile it watches the registered connections (non-blocking peeks every few
//! milliseconds): if one closes, everyone is told which rank left; when the earliest deadline of a
//! registered rank passes, everyone is told which ranks never arrived. Either way the root
//! thread ends, and with it the listener.

use std::{
    io::{self, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{Arc, mpsc},
    thread,
    time::{Duration, Instant},
};

use crate::{
    codec::{Message, Purpose, RejectReason},
    unique_id::SECRET_BYTES,
};

use super::{Gate, wire};

/// How often the root looks for new connections, dead registrants and passed deadlines.
const POLL: Duration = Duration::from_millis(5);

/// Bound on writing one reply frame; replies are small and the socket buffer is empty.
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);

/// What the root needs to run.
#[derive(Debug)]
pub(super) struct RootConfig {
    pub(super) secret: [u8; SECRET_BYTES],
    pub(super) world_size: usize,
    pub(super) max_frame_bytes: usize,
    /// Bound on one greeter's handshake and registration.
    pub(super) timeout: Duration,
    /// When the root gives up even if nobody registered (rank 0's deadline plus grace).
    pub(super) stop_at: Instant,
}

/// A verified registration, handed from a greeter to the root thread.
#[derive(Debug)]
struct Arrival {
    rank: u32,
    world_size: u32,
    listen: SocketAddr,
    deadline: Instant,
    stream: TcpStream,
}

#[derive(Debug)]
struct Registered {
    listen: SocketAddr,
    deadline: Instant,
    stream: TcpStream,
}

/// Starts the root thread on `listener`.
pub(super) fn spawn(listener: TcpListener, config: RootConfig) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    thread::Builder::new()
        .name("weft-bootstrap-root".to_owned())
        .spawn(move || Root::new(config).serve(&listener))
        .map(drop)
}

struct Root {
    config: RootConfig,
    slots: Vec<Option<Registered>>,
    arrivals_tx: mpsc::Sender<Arrival>,
    arrivals: mpsc::Receiver<Arrival>,
    /// Bounds greeters in flight.
    gate: Arc<Gate>,
}

impl Root {
    fn new(config: RootConfig) -> Self {
        let (arrivals_tx, arrivals) = mpsc::channel();
        Self {
            slots: (0..config.world_size).map(|_| None).collect(),
            gate: Gate::new(config.world_size),
            config,
            arrivals_tx,
            arrivals,
        }
    }

    fn serve(mut self, listener: &TcpListener) {
        loop {
            self.accept_all(listener);
            while let Ok(arrival) = self.arrivals.try_recv() {
                self.admit(arrival);
            }
            if self.slots.iter().all(Option::is_some) {
                self.publish_table();
                return;
            }
            if let Some(rank) = self.first_departed() {
                tracing::warn!(rank, "rank left during rendezvous; aborting it for everyone");
                self.abort(&RejectReason::RankLeft { rank: rank as u32 });
                return;
            }
            let now = Instant::now();
            let earliest = self.slots.iter().flatten().map(|r| r.deadline).min();
            if earliest.is_some_and(|deadline| now >= deadline) || now >= self.config.stop_at {
                let missing: Vec<u32> =
                    (0..self.slots.len()).filter(|&rank| self.slots[rank].is_none()).map(|rank| rank as u32).collect();
                tracing::warn!(?missing, "rendezvous timed out");
                self.abort(&RejectReason::Timeout { missing });
                return;
            }
            if let Ok(arrival) = self.arrivals.recv_timeout(POLL) {
                self.admit(arrival);
            }
        }
    }

    fn accept_all(&self, listener: &TcpListener) {
        loop {
            match listener.accept() {
                Ok((stream, addr)) => {
                    let Some(pass) = self.gate.enter() else {
                        tracing::warn!(%addr, "too many handshakes in flight; connection dropped");
                        continue;
                    };
                    let tx = self.arrivals_tx.clone();
                    let secret = self.config.secret;
                    let (limit, timeout) = (self.config.max_frame_bytes, self.config.timeout);
                    let spawned = thread::Builder::new().name("weft-bootstrap-greeter".to_owned()).spawn(move || {
                        let greeted = greet(stream, &secret, limit, timeout);
                        drop(pass);
                        match greeted {
                            Ok(arrival) => {
                                // The root may have finished already; then nobody waits for it.
                                let _ = tx.send(arrival);
                            }
                            Err(reason) => {
                                tracing::debug!(%addr, %reason, "rendezvous connection rejected");
                            }
                        }
                    });
                    if let Err(e) = spawned {
                        tracing::warn!(%addr, error = %e, "cannot start a greeter thread");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(error = %e, "rendezvous accept failed");
                    return;
                }
            }
        }
    }

    /// Validates a registration; keeps it or tells the registrant why not.
    fn admit(&mut self, arrival: Arrival) {
        let world = self.slots.len();
        let world_u32 = world as u32;
        let reject = if arrival.world_size != world_u32 {
            Some(RejectReason::WorldSizeMismatch { expected: world_u32, got: arrival.world_size })
        } else if arrival.rank as usize >= world {
            Some(RejectReason::RankOutOfRange { rank: arrival.rank, world_size: world_u32 })
        } else if self.slots[arrival.rank as usize].is_some() {
            Some(RejectReason::DuplicateRank { rank: arrival.rank })
        } else {
            None
        };
        let mut stream = arrival.stream;
        if let Some(reason) = reject {
            tracing::warn!(rank = arrival.rank, ?reason, "registration rejected");
            reply(&mut stream, &Message::Reject(reason));
            return;
        }
        // Non-blocking, so that the root can peek at it to notice a departure. A stream that
        // cannot be watched is dropped (its rank sees the root close): a blocking peek would hang.
        if let Err(e) = stream.set_nonblocking(true) {
            tracing::warn!(rank = arrival.rank, error = %e, "cannot watch registered rank");
            return;
        }
        tracing::debug!(rank = arrival.rank, listen = %arrival.listen, "rank registered");
        self.slots[arrival.rank as usize] =
            Some(Registered { listen: arrival.listen, deadline: arrival.deadline, stream });
    }

    /// The first registered rank whose connection has closed. A registrant must wait quietly for
    /// the reply, so data from one counts as leaving too.
    fn first_departed(&self) -> Option<usize> {
        self.slots.iter().enumerate().find_map(|(rank, slot)| {
            let registered = slot.as_ref()?;
            match registered.stream.peek(&mut [0u8; 1]) {
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => None,
                _ => Some(rank),
            }
        })
    }

    fn publish_table(&mut self) {
        let listen = self.slots.iter().flatten().map(|r| r.listen).collect();
        let table = Message::Table { listen };
        tracing::debug!(world_size = self.slots.len(), "rendezvous complete");
        for registered in self.slots.iter_mut().flatten() {
            reply(&mut registered.stream, &table);
        }
    }

    fn abort(&mut self, reason: &RejectReason) {
        let message = Message::Reject(reason.clone());
        for registered in self.slots.iter_mut().flatten() {
            reply(&mut registered.stream, &message);
        }
    }
}

/// Best-effort reply: a registrant that cannot be written to has gone, and every other
/// registrant still gets its answer.
fn reply(stream: &mut TcpStream, message: &Message<'_>) {
    let written = stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_write_timeout(Some(REPLY_TIMEOUT)))
        .and_then(|()| stream.write_all(&message.encode()));
    if let Err(e) = written {
        tracing::debug!(error = %e, "cannot reply to a registrant");
    }
}

/// Runs the handshake and reads the registration of one connection.
fn greet(
    mut stream: TcpStream,
    secret: &[u8; SECRET_BYTES],
    limit: usize,
    timeout: Duration,
) -> Result<Arrival, String> {
    let deadline = Instant::now() + timeout;
    stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_nodelay(true))
        .and_then(|()| wire::set_deadline(&stream, deadline))
        .map_err(|e| e.to_string())?;
    let greeting = wire::handshake_accept(&mut stream, secret)?;
    if greeting.purpose != Purpose::Rendezvous {
        return Err(format!("expected a rendezvous connection, got {:?}", greeting.purpose));
    }
    let (kind, body) = wire::read_frame(&mut stream, limit).map_err(|e| format!("{e:?}"))?;
    match Message::decode_body(kind, &body) {
        Ok(Message::Register { world_size, listen, budget_ms }) => {
            let now = Instant::now();
            Ok(Arrival {
                rank: greeting.rank,
                world_size,
                listen,
                deadline: now.checked_add(Duration::from_millis(budget_ms)).unwrap_or(deadline),
                stream,
            })
        }
        Ok(other) => Err(format!("expected Register, got {:?}", other.kind())),
        Err(e) => Err(e.to_string()),
    }
}
