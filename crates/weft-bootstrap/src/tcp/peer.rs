//! The receiving half of the mesh: one acceptor thread per rank, and one reader thread per
//! incoming connection that drains frames into the rank's mailbox. Because readers always drain,
//! a sender never waits for the matching `recv`.

use std::{
    io,
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    sync::{Arc, PoisonError, atomic::Ordering},
    thread,
    time::Duration,
};

use crate::{
    codec::{CodecError, Message, Purpose},
    mailbox::{Channel, Parcel, PeerFailure},
};

use super::{GatePass, Shared, wire};

/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Starts the acceptor thread.
pub(super) fn spawn_acceptor(shared: Arc<Shared>, listener: TcpListener) -> io::Result<()> {
    thread::Builder::new()
        .name(format!("weft-bootstrap-{}-accept", shared.rank))
        .spawn(move || accept_loop(&shared, &listener))
        .map(drop)
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    loop {
        let accepted = listener.accept();
        if shared.closing.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((stream, addr)) => {
                let Some(pass) = shared.gate.enter() else {
                    tracing::warn!(%addr, "too many handshakes in flight; connection dropped");
                    continue;
                };
                let shared = shared.clone();
                let spawned = thread::Builder::new()
                    .name(format!("weft-bootstrap-{}-read", shared.rank))
                    .spawn(move || serve(&shared, stream, addr, pass));
                if let Err(e) = spawned {
                    tracing::warn!(%addr, error = %e, "cannot start a reader thread");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "peer accept failed");
                thread::sleep(ACCEPT_BACKOFF);
            }
        }
    }
}

/// Handshakes one incoming connection and, if it is a peer of this job, drains it.
/// `pass` is held until the handshake is over.
fn serve(shared: &Shared, mut stream: TcpStream, addr: SocketAddr, pass: GatePass) {
    let Some(_registration) = Registration::new(shared, &stream, addr) else {
        return;
    };
    // Checked after registering: `Drop` sets `closing` before shutting registered streams down.
    if shared.closing.load(Ordering::SeqCst) {
        return;
    }
    let peer = match handshake(shared, &mut stream) {
        Ok(peer) => peer,
        Err(reason) => {
            tracing::debug!(rank = shared.rank, %addr, %reason, "incoming connection rejected");
            return;
        }
    };
    drop(pass);
    tracing::debug!(rank = shared.rank, peer, %addr, "peer connected");
    let failure = drain(shared, &mut stream, peer);
    if !shared.closing.load(Ordering::SeqCst) {
        if !matches!(failure, PeerFailure::Closed) {
            tracing::warn!(rank = shared.rank, peer, ?failure, "connection from peer failed");
        }
        shared.mailbox.fail(peer, failure);
    }
}

/// A clone of an incoming stream in [`Shared::incoming`], so that `Drop` of the bootstrap can shut
/// it down. Dropping the registration removes the clone and shuts the connection down.
struct Registration<'a> {
    shared: &'a Shared,
    serial: u64,
}

impl<'a> Registration<'a> {
    fn new(shared: &'a Shared, stream: &TcpStream, addr: SocketAddr) -> Option<Self> {
        let clone = match stream.try_clone() {
            Ok(clone) => clone,
            Err(e) => {
                tracing::warn!(%addr, error = %e, "cannot register an incoming connection");
                return None;
            }
        };
        let mut incoming = shared.incoming.lock().unwrap_or_else(PoisonError::into_inner);
        let serial = incoming.next_serial;
        incoming.next_serial += 1;
        incoming.streams.insert(serial, clone);
        Some(Self { shared, serial })
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let clone = self.shared.incoming.lock().unwrap_or_else(PoisonError::into_inner).streams.remove(&self.serial);
        if let Some(clone) = clone {
            let _ = clone.shutdown(Shutdown::Both);
        }
    }
}

/// Verifies the connector and claims its rank's slot. Returns the peer's rank.
fn handshake(shared: &Shared, stream: &mut TcpStream) -> Result<usize, String> {
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_read_timeout(Some(shared.timeout)))
        .and_then(|()| stream.set_write_timeout(Some(shared.timeout)))
        .map_err(|e| e.to_string())?;
    let greeting = wire::handshake_accept(stream, &shared.secret)?;
    let peer = greeting.rank as usize;
    if greeting.purpose != Purpose::Peer {
        return Err(format!("expected a peer connection, got {:?}", greeting.purpose));
    }
    if peer >= shared.world_size || peer == shared.rank {
        return Err(format!("rank {peer} is not a peer of rank {}", shared.rank));
    }
    {
        let mut incoming = shared.incoming.lock().unwrap_or_else(PoisonError::into_inner);
        if incoming.connected[peer] {
            return Err(format!("rank {peer} is already connected"));
        }
        incoming.connected[peer] = true;
    }
    stream.set_read_timeout(None).map_err(|e| e.to_string())?;
    Ok(peer)
}

/// Moves frames from `stream` into the mailbox until the connection ends; returns why it ended.
fn drain(shared: &Shared, stream: &mut TcpStream, peer: usize) -> PeerFailure {
    loop {
        let (kind, body) = match wire::read_frame(stream, shared.max_frame_bytes) {
            Ok(frame) => frame,
            Err(wire::ReadError::Eof) => return PeerFailure::Closed,
            Err(wire::ReadError::Codec(CodecError::FrameTooLarge { len, limit })) => {
                return PeerFailure::FrameTooLarge { len, limit };
            }
            Err(wire::ReadError::Codec(e)) => return PeerFailure::Malformed(e),
            Err(wire::ReadError::TimedOut) => {
                return PeerFailure::Io { kind: io::ErrorKind::TimedOut, message: "read timed out".to_owned() };
            }
            Err(wire::ReadError::Io(e)) => {
                return PeerFailure::Io { kind: e.kind(), message: e.to_string() };
            }
        };
        let (channel, parcel) = match Message::decode_body(kind, &body) {
            Ok(Message::Data { tag, payload }) => (Channel::User(tag), Parcel { op: None, payload: payload.to_vec() }),
            Ok(Message::Collective { seq, op, payload }) => {
                (Channel::Collective(seq), Parcel { op: Some(op), payload: payload.to_vec() })
            }
            Ok(other) => return PeerFailure::Unexpected(other.kind()),
            Err(e) => return PeerFailure::Malformed(e),
        };
        shared.mailbox.deliver(peer, channel, parcel);
    }
}
