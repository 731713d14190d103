//! The handler of FIFO op 10: a kernel's [`TransferCmd`]s (the expert-parallel network path).
//!
//! - **Write**: a put from the connection's source memory to the peer's destination memory
//!   (both bound with [`TransferHandler::connect`]); popped once queued, like a PortChannel put.
//! - **CounterAdd / CounterSet**: stamps the update with the next sequence number of the
//!   connection's counter stream and sends it as a [`CounterImmediate`] ([`Op::Counter`]),
//!   after every earlier write of the connection. Stamping and submitting happen under the
//!   connection's lock, so the stream's numbers follow the submission order even when several
//!   proxy threads serve the connection. At most `window` updates of a stream are
//!   unacknowledged (the receiver's [`ImmediateOrder`](super::ordering::ImmediateOrder) relies on
//!   it): a further one stays in its FIFO (backpressure, the proxy thread moves on), and one
//!   that finds the window full for longer than `timeout` fails the proxy with an error naming
//!   this rank, the peer and the connection.
//! - **Quiet**: popped once every earlier operation of the connection is applied at the peer.
//!
//! Every error names the rank, the op, the peer and the connection. Puts, flushes and the
//! drain's bookkeeping are the [`TransportHandler`]'s.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use weft_types::{CounterUpdate, FifoCommand, TRANSFER_FIFO_OP, Transfer, TransferCmd};

use super::immediate::{CounterImmediate, DEFAULT_WINDOW, MAX_WINDOW, wire_seq};
use super::service::{CommandHandler, Handled, Pending, ProxyError, TransportHandler};
use super::transport::{ConnectionId, MAX_CONNECTIONS, Op, Transport};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking holder leaves plain counts behind; keep going with them.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Options of a [`TransferHandler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferConfig {
    /// Counter updates of a stream that may be unacknowledged, `1..=MAX_WINDOW`; the receiver's
    /// [`CounterConfig::window`](super::counters::CounterConfig) must be the same.
    pub window: u32,
    /// How long a counter update may wait for the window before the proxy fails.
    pub timeout: Duration,
}

impl Default for TransferConfig {
    fn default() -> Self {
        Self { window: DEFAULT_WINDOW, timeout: Duration::from_secs(5) }
    }
}

/// What a connection of transfers is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferLink {
    /// The peer's rank (for errors).
    pub peer: u32,
    /// Local memory writes read from.
    pub src_memory: u8,
    /// The peer's memory writes land in.
    pub dst_memory: u8,
}

#[derive(Debug)]
struct Link {
    link: TransferLink,
    counters: Mutex<CounterStream>,
}

/// The sending side of one connection's counter stream.
#[derive(Debug, Default)]
struct CounterStream {
    /// Updates stamped so far: the position of the next one.
    stamped: u64,
    /// End tickets of the updates not yet applied at the peer, oldest first.
    outstanding: VecDeque<u64>,
    /// Since when the next update has found the window full.
    full_since: Option<Instant>,
}

/// The handler of op [`TRANSFER_FIFO_OP`] (see the module docs).
#[derive(Debug)]
pub struct TransferHandler {
    rank: u32,
    config: TransferConfig,
    ops: TransportHandler,
    links: Box<[OnceLock<Link>]>,
}

impl TransferHandler {
    /// A handler for rank `rank` sending over `transport`.
    pub fn new(rank: u32, transport: Arc<dyn Transport>, config: TransferConfig) -> Result<Self, ProxyError> {
        if !(1..=MAX_WINDOW).contains(&config.window) {
            return Err(ProxyError::Config(format!("transfer window {} is outside 1..={MAX_WINDOW}", config.window)));
        }
        Ok(Self {
            rank,
            config,
            ops: TransportHandler::new(transport),
            links: (0..MAX_CONNECTIONS).map(|_| OnceLock::new()).collect(),
        })
    }

    /// Binds `connection` (already connected on the transport) to `link`; once per connection.
    pub fn connect(&self, connection: ConnectionId, link: TransferLink) -> Result<(), ProxyError> {
        let slot = self.links.get(usize::from(connection)).ok_or_else(|| {
            ProxyError::Config(format!("rank {}: connection {connection} is beyond {MAX_CONNECTIONS}", self.rank))
        })?;
        slot.set(Link { link, counters: Mutex::default() })
            .map_err(|_| ProxyError::Config(format!("rank {}: connection {connection} is already bound", self.rank)))
    }

    fn link(&self, connection: ConnectionId) -> Result<&Link, ProxyError> {
        self.links.get(usize::from(connection)).and_then(OnceLock::get).ok_or_else(|| ProxyError::Handler {
            op: TRANSFER_FIFO_OP as u8,
            detail: format!("rank {}: a transfer on connection {connection}, which is not bound", self.rank),
        })
    }

    /// `error` with the rank, the op, the peer and the connection in front.
    fn context(&self, what: &str, connection: ConnectionId, peer: u32, error: ProxyError) -> ProxyError {
        ProxyError::Handler {
            op: TRANSFER_FIFO_OP as u8,
            detail: format!("rank {}: {what} to peer {peer} on connection {connection}: {error}", self.rank),
        }
    }

    fn counter(
        &self,
        connection: ConnectionId,
        link: &Link,
        counter: u16,
        update: CounterUpdate,
    ) -> Result<Handled, ProxyError> {
        let mut stream = lock(&link.counters);
        let completed = self.ops.transport().completed(connection)?;
        while stream.outstanding.front().is_some_and(|&end| end <= completed) {
            stream.outstanding.pop_front();
        }
        if stream.outstanding.len() >= self.config.window as usize {
            let since = *stream.full_since.get_or_insert_with(Instant::now);
            let waited = since.elapsed();
            if waited > self.config.timeout {
                return Err(ProxyError::Handler {
                    op: TRANSFER_FIFO_OP as u8,
                    detail: format!(
                        "update {} (sequence {}) waited {waited:?} for the window: {} updates unacknowledged",
                        stream.stamped,
                        wire_seq(stream.stamped),
                        stream.outstanding.len()
                    ),
                });
            }
            return Ok(Handled::Backpressure);
        }
        let imm = CounterImmediate { seq: wire_seq(stream.stamped), counter, update }
            .encode()
            .map_err(|e| ProxyError::Handler { op: TRANSFER_FIFO_OP as u8, detail: e.to_string() })?;
        let Some(end) = self.ops.submit(connection, &[Op::Counter { imm }])? else {
            return Ok(Handled::Backpressure);
        };
        stream.stamped += 1;
        stream.outstanding.push_back(end);
        stream.full_since = None;
        drop(stream);
        self.ops.finish(connection, end, false)
    }
}

impl CommandHandler for TransferHandler {
    fn handle(&self, command: &FifoCommand) -> Result<Handled, ProxyError> {
        let transfer = TransferCmd::from_fifo_command(command).decode().map_err(|e| ProxyError::Handler {
            op: TRANSFER_FIFO_OP as u8,
            detail: format!("rank {}: {e}", self.rank),
        })?;
        let (connection, what) = match transfer {
            Transfer::Write { connection, .. } => (connection, "a write"),
            Transfer::Counter { connection, .. } => (connection, "a counter update"),
            Transfer::Quiet { connection } => (connection, "a quiet"),
        };
        let link = self.link(connection)?;
        let peer = link.link.peer;
        let handled = match transfer {
            Transfer::Write { src_offset, dst_offset, len, .. } => {
                let put = Op::Put {
                    src_memory: link.link.src_memory,
                    src_offset: src_offset.into(),
                    dst_memory: link.link.dst_memory,
                    dst_offset: dst_offset.into(),
                    len: len.into(),
                };
                match self.ops.submit(connection, &[put]) {
                    Ok(Some(end)) => self.ops.finish(connection, end, false),
                    Ok(None) => Ok(Handled::Backpressure),
                    Err(e) => Err(e),
                }
            }
            Transfer::Counter { counter, update, .. } => self.counter(connection, link, counter, update),
            Transfer::Quiet { .. } => self.ops.submit(connection, &[]).and_then(|end| match end {
                Some(end) => self.ops.finish(connection, end, true),
                None => Ok(Handled::Backpressure),
            }),
        };
        match handled.map_err(|e| self.context(what, connection, peer, e))? {
            Handled::Pending(mut pending) => {
                // The quiet's completion check, its errors named like the others.
                let context = format!("rank {}: a quiet to peer {peer} on connection {connection}", self.rank);
                Ok(Handled::Pending(Pending::new(move || {
                    pending.poll().map_err(|e| ProxyError::Handler {
                        op: TRANSFER_FIFO_OP as u8,
                        detail: format!("{context}: {e}"),
                    })
                })))
            }
            other => Ok(other),
        }
    }

    fn progress(&self) -> Result<(), ProxyError> {
        self.ops
            .progress()
            .map_err(|e| ProxyError::Handler { op: TRANSFER_FIFO_OP as u8, detail: format!("rank {}: {e}", self.rank) })
    }

    fn unfinished(&self) -> Result<u64, ProxyError> {
        self.ops
            .unfinished()
            .map_err(|e| ProxyError::Handler { op: TRANSFER_FIFO_OP as u8, detail: format!("rank {}: {e}", self.rank) })
    }

    fn shutdown(&self) -> u64 {
        self.ops.shutdown()
    }
}
