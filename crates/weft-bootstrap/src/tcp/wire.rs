//! Frames over blocking sockets, and the handshake every connection starts with.

use std::{
    io::{self, Read, Write},
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use crate::{
    BootstrapError, auth,
    codec::{CodecError, FrameHeader, FrameKind, HEADER_LEN, Message, Purpose},
    unique_id::SECRET_BYTES,
};

/// Limit on frames read before the other side has proved it knows the secret. The largest
/// handshake frame (`Challenge`) has a 64-byte body.
pub(super) const HANDSHAKE_LIMIT: usize = 256;

/// How much of a frame body is allocated before its bytes arrive; the rest grows with the data,
/// so a peer that announces a large frame and sends nothing costs little.
const INITIAL_BODY_CAPACITY: usize = 64 << 10;

/// Why a frame could not be read.
#[derive(Debug)]
pub(super) enum ReadError {
    /// The connection ended (cleanly or by reset).
    Eof,
    /// The socket's read timeout passed.
    TimedOut,
    /// Another socket error.
    Io(io::Error),
    /// The bytes do not form a valid frame.
    Codec(CodecError),
}

fn classify(e: io::Error) -> ReadError {
    match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => ReadError::Eof,
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ReadError::TimedOut,
        _ => ReadError::Io(e),
    }
}

/// Reads one frame whose body may be at most `limit` bytes: the header is checked before any
/// body memory is allocated.
pub(super) fn read_frame(stream: &mut impl Read, limit: usize) -> Result<(FrameKind, Vec<u8>), ReadError> {
    let mut header = [0u8; HEADER_LEN];
    stream.read_exact(&mut header).map_err(classify)?;
    let header = FrameHeader::decode(&header, limit).map_err(ReadError::Codec)?;
    // `header.len` is at most `limit`, a usize.
    let len = header.len as usize;
    let mut body = Vec::with_capacity(len.min(INITIAL_BODY_CAPACITY));
    stream.take(header.len).read_to_end(&mut body).map_err(classify)?;
    if body.len() < len {
        return Err(ReadError::Eof);
    }
    Ok((header.kind, body))
}

/// Who is on the other end of a connection and what this rank is doing with it: turns socket
/// and codec failures into errors with that context.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ctx {
    /// This rank.
    pub(super) rank: usize,
    /// The rank on the other end (0 for the rendezvous root).
    pub(super) peer: usize,
    /// Its address.
    pub(super) addr: SocketAddr,
    /// What this rank is doing.
    pub(super) during: &'static str,
    /// The configured bound, for timeout errors.
    pub(super) timeout: Duration,
}

impl Ctx {
    pub(super) fn read_error(&self, e: ReadError) -> BootstrapError {
        match e {
            ReadError::Eof => self.closed(),
            ReadError::TimedOut => self.timed_out(),
            ReadError::Io(source) => BootstrapError::io(
                Some(self.rank),
                format!("reading from rank {} at {} during {}", self.peer, self.addr, self.during),
                source,
            ),
            ReadError::Codec(CodecError::FrameTooLarge { len, limit }) => {
                BootstrapError::FrameTooLarge { rank: self.rank, peer: Some(self.peer), len, limit }
            }
            ReadError::Codec(source) => BootstrapError::Malformed { rank: self.rank, peer: Some(self.peer), source },
        }
    }

    pub(super) fn write_error(&self, e: io::Error) -> BootstrapError {
        match classify(e) {
            ReadError::Eof => self.closed(),
            ReadError::TimedOut => self.timed_out(),
            ReadError::Io(source) => BootstrapError::io(
                Some(self.rank),
                format!("writing to rank {} at {} during {}", self.peer, self.addr, self.during),
                source,
            ),
            ReadError::Codec(source) => BootstrapError::Malformed { rank: self.rank, peer: Some(self.peer), source },
        }
    }

    pub(super) fn closed(&self) -> BootstrapError {
        BootstrapError::PeerClosed { rank: self.rank, peer: self.peer, during: self.during }
    }

    pub(super) fn timed_out(&self) -> BootstrapError {
        BootstrapError::Timeout {
            rank: self.rank,
            missing: vec![self.peer],
            during: self.during,
            timeout: self.timeout,
        }
    }

    pub(super) fn unexpected(&self, got: FrameKind) -> BootstrapError {
        BootstrapError::UnexpectedFrame { rank: self.rank, peer: Some(self.peer), got, during: self.during }
    }

    /// Writes one message.
    pub(super) fn write(&self, stream: &mut TcpStream, message: &Message<'_>) -> Result<(), BootstrapError> {
        stream.write_all(&message.encode()).map_err(|e| self.write_error(e))
    }

    /// Reads one frame of at most `limit` bytes and passes its decoded message to `f`.
    pub(super) fn read<R>(
        &self,
        stream: &mut TcpStream,
        limit: usize,
        f: impl FnOnce(Message<'_>) -> Result<R, BootstrapError>,
    ) -> Result<R, BootstrapError> {
        let (kind, body) = read_frame(stream, limit).map_err(|e| self.read_error(e))?;
        let message = Message::decode_body(kind, &body).map_err(|source| BootstrapError::Malformed {
            rank: self.rank,
            peer: Some(self.peer),
            source,
        })?;
        f(message)
    }
}

/// Sets both socket timeouts to the time left until `deadline` (at least 1 ms: a zero timeout
/// means "none" to the OS, and std rejects it).
pub(super) fn set_deadline(stream: &TcpStream, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    stream.set_read_timeout(Some(left))?;
    stream.set_write_timeout(Some(left))
}

/// The connecting side of the handshake: sends `Hello`, checks the acceptor's proof, sends its
/// own. Fails with [`BootstrapError::WrongSecret`] if the acceptor does not know `secret`.
pub(super) fn handshake_connect(
    stream: &mut TcpStream,
    ctx: &Ctx,
    secret: &[u8; SECRET_BYTES],
    purpose: Purpose,
) -> Result<(), BootstrapError> {
    // Ranks are below the world size, which fits in u32 (checked when the bootstrap is built).
    let rank = u32::try_from(ctx.rank).unwrap_or(u32::MAX);
    let connector_nonce = auth::nonce();
    ctx.write(stream, &Message::Hello { purpose, rank, nonce: connector_nonce })?;
    let acceptor_nonce = ctx.read(stream, HANDSHAKE_LIMIT, |message| match message {
        Message::Challenge { nonce, proof } => {
            let expected = auth::acceptor_proof(secret, purpose, rank, &connector_nonce, &nonce);
            if auth::proofs_equal(&proof, &expected) {
                Ok(nonce)
            } else {
                Err(BootstrapError::WrongSecret { rank: ctx.rank, peer_addr: ctx.addr })
            }
        }
        other => Err(ctx.unexpected(other.kind())),
    })?;
    ctx.write(
        stream,
        &Message::Proof { proof: auth::connector_proof(secret, purpose, rank, &connector_nonce, &acceptor_nonce) },
    )
}

/// What a connector said about itself in a verified handshake.
#[derive(Debug, Clone, Copy)]
pub(super) struct Greeting {
    pub(super) purpose: Purpose,
    pub(super) rank: u32,
}

/// The accepting side of the handshake. Errors are descriptions for the log: the connector is
/// not (yet) known to be part of the job, so there is nobody to report to.
pub(super) fn handshake_accept(stream: &mut TcpStream, secret: &[u8; SECRET_BYTES]) -> Result<Greeting, String> {
    let (kind, body) = read_frame(stream, HANDSHAKE_LIMIT).map_err(|e| format!("{e:?}"))?;
    let (purpose, rank, connector_nonce) = match Message::decode_body(kind, &body) {
        Ok(Message::Hello { purpose, rank, nonce }) => (purpose, rank, nonce),
        Ok(other) => return Err(format!("expected Hello, got {:?}", other.kind())),
        Err(e) => return Err(e.to_string()),
    };
    let acceptor_nonce = auth::nonce();
    let challenge = Message::Challenge {
        nonce: acceptor_nonce,
        proof: auth::acceptor_proof(secret, purpose, rank, &connector_nonce, &acceptor_nonce),
    };
    stream.write_all(&challenge.encode()).map_err(|e| e.to_string())?;
    let (kind, body) = read_frame(stream, HANDSHAKE_LIMIT).map_err(|e| format!("{e:?}"))?;
    match Message::decode_body(kind, &body) {
        Ok(Message::Proof { proof }) => {
            let expected = auth::connector_proof(secret, purpose, rank, &connector_nonce, &acceptor_nonce);
            if auth::proofs_equal(&proof, &expected) {
                Ok(Greeting { purpose, rank })
            } else {
                Err(format!("rank {rank} (claimed) failed the secret check"))
            }
        }
        Ok(other) => Err(format!("expected Proof, got {:?}", other.kind())),
        Err(e) => Err(e.to_string()),
    }
}
