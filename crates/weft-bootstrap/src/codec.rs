//! The bootstrap wire format: versioned, little-endian frames, decoded strictly.
//!
//! Every message travels as one frame: a 16-byte header and a body.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic, the ASCII bytes `WFBS` ([`MAGIC`]) |
//! | 4 | 1 | wire version ([`VERSION`]) |
//! | 5 | 1 | frame kind ([`FrameKind`]) |
//! | 6 | 2 | reserved, must be zero |
//! | 8 | 8 | body length in bytes, `u64` |
//! | 16 | length | body, laid out per kind (see [`Message`]) |
//!
//! All integers are little-endian. The decoder checks the header (magic, version, reserved bits,
//! kind, and the length against a caller-given limit *before* anything is allocated) and then the
//! body with a [`Reader`], which rejects truncated input and trailing bytes. Decoding never
//! panics, whatever the input.
//!
//! Socket addresses are encoded as a family byte (4 or 6), the IP (4 or 16 bytes), the port
//! (`u16`) and, for IPv6 only, the scope id (`u32`).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// First four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"WFBS";

/// Wire version this build speaks; frames of any other version are rejected.
pub const VERSION: u8 = 1;

/// Length of the frame header in bytes.
pub const HEADER_LEN: usize = 16;

/// Length of handshake nonces in bytes.
pub const NONCE_LEN: usize = 32;

/// Length of handshake proofs (HMAC-SHA-256 tags) in bytes.
pub const PROOF_LEN: usize = 32;

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The frame does not start with [`MAGIC`]: not a weft bootstrap peer.
    #[error("bad magic {found:02x?} (expected {MAGIC:02x?}): not a weft bootstrap frame")]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// The frame was written by another wire version.
    #[error("unsupported wire version {found} (this build speaks version {VERSION})")]
    UnsupportedVersion {
        /// The version byte found.
        found: u8,
    },
    /// Reserved header bits are set.
    #[error("reserved header bits are set: {found:#06x}")]
    ReservedBits {
        /// The reserved field.
        found: u16,
    },
    /// The kind byte names no known frame kind.
    #[error("unknown frame kind {found}")]
    UnknownKind {
        /// The kind byte found.
        found: u8,
    },
    /// The announced body length exceeds the limit.
    #[error("frame of {len} bytes exceeds the limit of {limit} bytes")]
    FrameTooLarge {
        /// The announced length.
        len: u64,
        /// The limit it was checked against.
        limit: usize,
    },
    /// The input ends before the value being read.
    #[error("truncated input: {needed} more bytes needed, {remaining} left")]
    Truncated {
        /// Bytes the value needs.
        needed: u64,
        /// Bytes left in the input.
        remaining: usize,
    },
    /// Bytes are left after the message.
    #[error("{count} trailing bytes after the message")]
    TrailingBytes {
        /// How many bytes are left over.
        count: usize,
    },
    /// A field holds a value outside its domain.
    #[error("invalid {field}: {value}")]
    InvalidValue {
        /// The field.
        field: &'static str,
        /// The value found.
        value: u64,
    },
}

/// The kind byte of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum FrameKind {
    /// [`Message::Hello`].
    Hello = 1,
    /// [`Message::Challenge`].
    Challenge = 2,
    /// [`Message::Proof`].
    Proof = 3,
    /// [`Message::Register`].
    Register = 4,
    /// [`Message::Table`].
    Table = 5,
    /// [`Message::Reject`].
    Reject = 6,
    /// [`Message::Data`].
    Data = 7,
    /// [`Message::Collective`].
    Collective = 8,
}

impl FrameKind {
    /// The kind with wire value `value`, if any.
    pub fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            1 => Self::Hello,
            2 => Self::Challenge,
            3 => Self::Proof,
            4 => Self::Register,
            5 => Self::Table,
            6 => Self::Reject,
            7 => Self::Data,
            8 => Self::Collective,
            _ => return None,
        })
    }

    /// The wire value.
    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

/// What a connection is for; sent in [`Message::Hello`] and bound into the handshake proofs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum Purpose {
    /// A rank registering with the rendezvous root.
    Rendezvous = 1,
    /// A rank opening its data connection to a peer.
    Peer = 2,
}

impl Purpose {
    fn from_u8(value: u8) -> Option<Self> {
        match value {
            1 => Some(Self::Rendezvous),
            2 => Some(Self::Peer),
            _ => None,
        }
    }
}

/// Which collective a [`Message::Collective`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum CollectiveOp {
    /// `Bootstrap::all_gather`.
    AllGather = 1,
    /// `Bootstrap::broadcast`.
    Broadcast = 2,
    /// `Bootstrap::barrier`.
    Barrier = 3,
}

impl CollectiveOp {
    fn from_u8(value: u8) -> Option<Self> {
        match value {
            1 => Some(Self::AllGather),
            2 => Some(Self::Broadcast),
            3 => Some(Self::Barrier),
            _ => None,
        }
    }

    /// The name of the operation as it appears in errors (`"all_gather"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::AllGather => "all_gather",
            Self::Broadcast => "broadcast",
            Self::Barrier => "barrier",
        }
    }
}

/// Why the rendezvous root turned a rank away (or gave up on the whole rendezvous).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectReason {
    /// Another connection already registered `rank`. Code 1.
    DuplicateRank {
        /// The rank claimed twice.
        rank: u32,
    },
    /// `rank` is not below the root's world size. Code 2.
    RankOutOfRange {
        /// The rank.
        rank: u32,
        /// The root's world size.
        world_size: u32,
    },
    /// The rank's world size differs from the root's. Code 3.
    WorldSizeMismatch {
        /// The root's world size.
        expected: u32,
        /// The rank's world size.
        got: u32,
    },
    /// A registered rank's deadline passed; `missing` never registered. Code 4.
    Timeout {
        /// Ranks that never arrived, ascending.
        missing: Vec<u32>,
    },
    /// Registered rank `rank` disconnected before the table was sent. Code 5.
    RankLeft {
        /// The rank that left.
        rank: u32,
    },
}

/// One protocol message. Payloads borrow from the buffer they were decoded from.
///
/// Body layouts (after the header):
///
/// | kind | body |
/// | --- | --- |
/// | `Hello` | purpose `u8`, rank `u32`, nonce `[u8; 32]` |
/// | `Challenge` | nonce `[u8; 32]`, proof `[u8; 32]` |
/// | `Proof` | proof `[u8; 32]` |
/// | `Register` | world size `u32`, listen address, remaining budget in ms `u64` |
/// | `Table` | count `u32`, then `count` addresses |
/// | `Reject` | code `u8`, then the reason's fields as `u32`s (`Timeout`: count `u32` then ranks) |
/// | `Data` | tag `u32`, payload (the rest of the body) |
/// | `Collective` | sequence number `u64`, op `u8`, payload (the rest of the body) |
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Message<'a> {
    /// Connector → acceptor: opens the handshake.
    Hello {
        /// What the connection is for.
        purpose: Purpose,
        /// The connector's rank.
        rank: u32,
        /// The connector's fresh random nonce.
        nonce: [u8; NONCE_LEN],
    },
    /// Acceptor → connector: the acceptor's nonce and its proof of the secret.
    Challenge {
        /// The acceptor's fresh random nonce.
        nonce: [u8; NONCE_LEN],
        /// HMAC over both nonces, keyed by the secret.
        proof: [u8; PROOF_LEN],
    },
    /// Connector → acceptor: the connector's proof of the secret.
    Proof {
        /// HMAC over both nonces, keyed by the secret.
        proof: [u8; PROOF_LEN],
    },
    /// Rank → root: join the rendezvous.
    Register {
        /// The world size this rank was started with.
        world_size: u32,
        /// Where this rank accepts peer connections.
        listen: SocketAddr,
        /// Milliseconds left before this rank gives up.
        budget_ms: u64,
    },
    /// Root → rank: every rank's listen address, indexed by rank.
    Table {
        /// The addresses.
        listen: Vec<SocketAddr>,
    },
    /// Root → rank: the rendezvous failed for this rank.
    Reject(RejectReason),
    /// Rank → rank: a user message.
    Data {
        /// The user's tag.
        tag: u32,
        /// The user's bytes.
        payload: &'a [u8],
    },
    /// Rank → rank: one rank's part of a collective.
    Collective {
        /// The sender's collective sequence number.
        seq: u64,
        /// Which collective.
        op: CollectiveOp,
        /// The sender's bytes.
        payload: &'a [u8],
    },
}

impl<'a> Message<'a> {
    /// The frame kind this message is sent as.
    pub fn kind(&self) -> FrameKind {
        match self {
            Self::Hello { .. } => FrameKind::Hello,
            Self::Challenge { .. } => FrameKind::Challenge,
            Self::Proof { .. } => FrameKind::Proof,
            Self::Register { .. } => FrameKind::Register,
            Self::Table { .. } => FrameKind::Table,
            Self::Reject(_) => FrameKind::Reject,
            Self::Data { .. } => FrameKind::Data,
            Self::Collective { .. } => FrameKind::Collective,
        }
    }

    /// Length of the encoded body (without the header), computed without encoding.
    pub fn body_len(&self) -> u64 {
        let len = match self {
            Self::Hello { .. } => 1 + 4 + NONCE_LEN,
            Self::Challenge { .. } => NONCE_LEN + PROOF_LEN,
            Self::Proof { .. } => PROOF_LEN,
            Self::Register { listen, .. } => 4 + addr_len(listen) + 8,
            Self::Table { listen } => 4 + listen.iter().map(addr_len).sum::<usize>(),
            Self::Reject(reason) => {
                1 + match reason {
                    RejectReason::DuplicateRank { .. } | RejectReason::RankLeft { .. } => 4,
                    RejectReason::RankOutOfRange { .. } | RejectReason::WorldSizeMismatch { .. } => 8,
                    RejectReason::Timeout { missing } => 4 + 4 * missing.len(),
                }
            }
            Self::Data { payload, .. } => 4 + payload.len(),
            Self::Collective { payload, .. } => 8 + 1 + payload.len(),
        };
        len as u64
    }

    /// Encodes the whole frame: header and body.
    pub fn encode(&self) -> Vec<u8> {
        let body_len = self.body_len();
        let mut w = Writer::with_capacity(HEADER_LEN.saturating_add(body_len as usize));
        w.put_bytes(&FrameHeader { kind: self.kind(), len: body_len }.encode());
        self.encode_body(&mut w);
        let frame = w.into_inner();
        debug_assert_eq!(frame.len() as u64, HEADER_LEN as u64 + body_len);
        frame
    }

    /// Appends the body (without the header) to `w`.
    pub fn encode_body(&self, w: &mut Writer) {
        match self {
            Self::Hello { purpose, rank, nonce } => {
                w.put_u8(*purpose as u8);
                w.put_u32(*rank);
                w.put_bytes(nonce);
            }
            Self::Challenge { nonce, proof } => {
                w.put_bytes(nonce);
                w.put_bytes(proof);
            }
            Self::Proof { proof } => w.put_bytes(proof),
            Self::Register { world_size, listen, budget_ms } => {
                w.put_u32(*world_size);
                w.put_addr(listen);
                w.put_u64(*budget_ms);
            }
            Self::Table { listen } => {
                // A table longer than u32::MAX entries cannot be built: world sizes are u32.
                w.put_u32(u32::try_from(listen.len()).unwrap_or(u32::MAX));
                for addr in listen {
                    w.put_addr(addr);
                }
            }
            Self::Reject(reason) => match reason {
                RejectReason::DuplicateRank { rank } => {
                    w.put_u8(1);
                    w.put_u32(*rank);
                }
                RejectReason::RankOutOfRange { rank, world_size } => {
                    w.put_u8(2);
                    w.put_u32(*rank);
                    w.put_u32(*world_size);
                }
                RejectReason::WorldSizeMismatch { expected, got } => {
                    w.put_u8(3);
                    w.put_u32(*expected);
                    w.put_u32(*got);
                }
                RejectReason::Timeout { missing } => {
                    w.put_u8(4);
                    w.put_u32(u32::try_from(missing.len()).unwrap_or(u32::MAX));
                    for rank in missing {
                        w.put_u32(*rank);
                    }
                }
                RejectReason::RankLeft { rank } => {
                    w.put_u8(5);
                    w.put_u32(*rank);
                }
            },
            Self::Data { tag, payload } => {
                w.put_u32(*tag);
                w.put_bytes(payload);
            }
            Self::Collective { seq, op, payload } => {
                w.put_u64(*seq);
                w.put_u8(*op as u8);
                w.put_bytes(payload);
            }
        }
    }

    /// Decodes one whole frame (header and body, nothing more) whose body may be at most `limit`
    /// bytes.
    pub fn decode(frame: &'a [u8], limit: usize) -> Result<Self, CodecError> {
        let mut r = Reader::new(frame);
        let header = FrameHeader::decode(&r.array::<HEADER_LEN>()?, limit)?;
        let body = r.rest();
        // `len` is at most `limit`, a usize, so the conversion is lossless.
        let len = header.len as usize;
        if body.len() < len {
            return Err(CodecError::Truncated { needed: header.len, remaining: body.len() });
        }
        if body.len() > len {
            return Err(CodecError::TrailingBytes { count: body.len() - len });
        }
        Self::decode_body(header.kind, body)
    }

    /// Decodes a body of kind `kind`; the body must be consumed exactly.
    pub fn decode_body(kind: FrameKind, body: &'a [u8]) -> Result<Self, CodecError> {
        let mut r = Reader::new(body);
        let message = match kind {
            FrameKind::Hello => {
                let purpose = r.u8()?;
                let purpose = Purpose::from_u8(purpose)
                    .ok_or(CodecError::InvalidValue { field: "purpose", value: purpose.into() })?;
                Self::Hello { purpose, rank: r.u32()?, nonce: r.array()? }
            }
            FrameKind::Challenge => Self::Challenge { nonce: r.array()?, proof: r.array()? },
            FrameKind::Proof => Self::Proof { proof: r.array()? },
            FrameKind::Register => Self::Register { world_size: r.u32()?, listen: r.addr()?, budget_ms: r.u64()? },
            FrameKind::Table => {
                let count = r.u32()?;
                r.expect_at_least(count, MIN_ADDR_LEN)?;
                let mut listen = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    listen.push(r.addr()?);
                }
                Self::Table { listen }
            }
            FrameKind::Reject => {
                let code = r.u8()?;
                Self::Reject(match code {
                    1 => RejectReason::DuplicateRank { rank: r.u32()? },
                    2 => RejectReason::RankOutOfRange { rank: r.u32()?, world_size: r.u32()? },
                    3 => RejectReason::WorldSizeMismatch { expected: r.u32()?, got: r.u32()? },
                    4 => {
                        let count = r.u32()?;
                        r.expect_at_least(count, 4)?;
                        let mut missing = Vec::with_capacity(count as usize);
                        for _ in 0..count {
                            missing.push(r.u32()?);
                        }
                        RejectReason::Timeout { missing }
                    }
                    5 => RejectReason::RankLeft { rank: r.u32()? },
                    other => {
                        return Err(CodecError::InvalidValue { field: "reject code", value: other.into() });
                    }
                })
            }
            FrameKind::Data => Self::Data { tag: r.u32()?, payload: r.rest() },
            FrameKind::Collective => {
                let seq = r.u64()?;
                let op = r.u8()?;
                let op = CollectiveOp::from_u8(op)
                    .ok_or(CodecError::InvalidValue { field: "collective op", value: op.into() })?;
                Self::Collective { seq, op, payload: r.rest() }
            }
        };
        r.finish()?;
        Ok(message)
    }
}

/// The fixed-size frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The frame kind.
    pub kind: FrameKind,
    /// Body length in bytes.
    pub len: u64,
}

impl FrameHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = self.kind.as_u8();
        // out[6..8]: reserved, zero.
        out[8..16].copy_from_slice(&self.len.to_le_bytes());
        out
    }

    /// Decodes and checks a header; the body length must be at most `limit`.
    ///
    /// Checks run in order magic, version, reserved bits, kind, length, so a stranger speaking
    /// another protocol is reported as [`CodecError::BadMagic`] rather than as a huge frame.
    pub fn decode(bytes: &[u8; HEADER_LEN], limit: usize) -> Result<Self, CodecError> {
        let mut r = Reader::new(bytes);
        let magic = r.array::<4>()?;
        if magic != MAGIC {
            return Err(CodecError::BadMagic { found: magic });
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(CodecError::UnsupportedVersion { found: version });
        }
        let kind = r.u8()?;
        let reserved = r.u16()?;
        if reserved != 0 {
            return Err(CodecError::ReservedBits { found: reserved });
        }
        let kind = FrameKind::from_u8(kind).ok_or(CodecError::UnknownKind { found: kind })?;
        let len = r.u64()?;
        if len > limit as u64 {
            return Err(CodecError::FrameTooLarge { len, limit });
        }
        r.finish()?;
        Ok(Self { kind, len })
    }
}

/// Appends little-endian values to a byte vector.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty writer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self { buf: Vec::with_capacity(capacity) }
    }

    /// Appends one byte.
    pub fn put_u8(&mut self, value: u8) {
        self.buf.push(value);
    }

    /// Appends a `u16`.
    pub fn put_u16(&mut self, value: u16) {
        self.buf.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends a `u32`.
    pub fn put_u32(&mut self, value: u32) {
        self.buf.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends a `u64`.
    pub fn put_u64(&mut self, value: u64) {
        self.buf.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends raw bytes (no length prefix).
    pub fn put_bytes(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Appends a socket address (see the module docs).
    pub fn put_addr(&mut self, addr: &SocketAddr) {
        match addr {
            SocketAddr::V4(v4) => {
                self.put_u8(4);
                self.put_bytes(&v4.ip().octets());
                self.put_u16(v4.port());
            }
            SocketAddr::V6(v6) => {
                self.put_u8(6);
                self.put_bytes(&v6.ip().octets());
                self.put_u16(v6.port());
                self.put_u32(v6.scope_id());
            }
        }
    }

    /// The bytes written so far.
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

/// Shortest encoded socket address (IPv4).
const MIN_ADDR_LEN: usize = 1 + 4 + 2;

fn addr_len(addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(_) => MIN_ADDR_LEN,
        SocketAddr::V6(_) => 1 + 16 + 2 + 4,
    }
}

/// Reads little-endian values from a byte slice, refusing to read past its end.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if n > self.buf.len() {
            return Err(CodecError::Truncated { needed: n as u64, remaining: self.buf.len() });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.array::<1>()?[0])
    }

    /// The next `u16`.
    pub fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// The next `u32`.
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// The next `u64`.
    pub fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// The next socket address (see the module docs).
    pub fn addr(&mut self) -> Result<SocketAddr, CodecError> {
        match self.u8()? {
            4 => {
                let ip = Ipv4Addr::from(self.array::<4>()?);
                let port = self.u16()?;
                Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)))
            }
            6 => {
                let ip = Ipv6Addr::from(self.array::<16>()?);
                let port = self.u16()?;
                let scope_id = self.u32()?;
                Ok(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope_id)))
            }
            family => Err(CodecError::InvalidValue { field: "address family", value: family.into() }),
        }
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    /// Succeeds only if every byte was read.
    pub fn finish(self) -> Result<(), CodecError> {
        if self.buf.is_empty() { Ok(()) } else { Err(CodecError::TrailingBytes { count: self.buf.len() }) }
    }

    /// Fails unless `count` items of at least `item_len` bytes each can still be read; lets a
    /// decoder size a vector from an untrusted count without allocating more than the input.
    fn expect_at_least(&self, count: u32, item_len: usize) -> Result<(), CodecError> {
        let needed = u64::from(count) * item_len as u64;
        if needed > self.buf.len() as u64 {
            return Err(CodecError::Truncated { needed, remaining: self.buf.len() });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use proptest::prelude::*;

    const LIMIT: usize = 1 << 20;

    fn sample_messages() -> Vec<Message<'static>> {
        let v4: SocketAddr = "10.1.2.3:4567".parse().unwrap();
        let v6: SocketAddr = "[fe80::1%3]:9".parse().unwrap();
        vec![
            Message::Hello { purpose: Purpose::Peer, rank: 7, nonce: [9; NONCE_LEN] },
            Message::Challenge { nonce: [1; NONCE_LEN], proof: [2; PROOF_LEN] },
            Message::Proof { proof: [3; PROOF_LEN] },
            Message::Register { world_size: 8, listen: v6, budget_ms: 30_000 },
            Message::Table { listen: vec![v4, v6, v4] },
            Message::Table { listen: vec![] },
            Message::Reject(RejectReason::DuplicateRank { rank: 3 }),
            Message::Reject(RejectReason::RankOutOfRange { rank: 9, world_size: 4 }),
            Message::Reject(RejectReason::WorldSizeMismatch { expected: 2, got: 3 }),
            Message::Reject(RejectReason::Timeout { missing: vec![1, 5] }),
            Message::Reject(RejectReason::RankLeft { rank: 2 }),
            Message::Data { tag: 42, payload: b"hello" },
            Message::Data { tag: 0, payload: b"" },
            Message::Collective { seq: u64::MAX, op: CollectiveOp::Barrier, payload: &[0xff; 3] },
        ]
    }

    #[test]
    fn every_sample_round_trips() {
        for message in sample_messages() {
            let frame = message.encode();
            assert_eq!(frame.len() as u64, HEADER_LEN as u64 + message.body_len());
            assert_eq!(Message::decode(&frame, LIMIT).unwrap(), message);
        }
    }

    #[test]
    fn golden_data_frame() {
        let frame = Message::Data { tag: 0x0102_0304, payload: b"hi" }.encode();
        #[rustfmt::skip]
        let expected: &[u8] = &[
            b'W', b'F', b'B', b'S', // magic
            0x01,                   // version
            0x07,                   // kind: Data
            0x00, 0x00,             // reserved
            0x06, 0, 0, 0, 0, 0, 0, 0, // body length 6, u64 LE
            0x04, 0x03, 0x02, 0x01, // tag, u32 LE
            b'h', b'i',             // payload
        ];
        assert_eq!(frame, expected);
    }

    #[test]
    fn golden_register_frame() {
        let frame =
            Message::Register { world_size: 2, listen: "127.0.0.1:258".parse().unwrap(), budget_ms: 1000 }.encode();
        #[rustfmt::skip]
        let expected: &[u8] = &[
            b'W', b'F', b'B', b'S', 0x01, 0x04, 0x00, 0x00,
            19, 0, 0, 0, 0, 0, 0, 0,
            2, 0, 0, 0,             // world size
            4, 127, 0, 0, 1, 2, 1,  // family, ip, port 258 LE
            0xe8, 0x03, 0, 0, 0, 0, 0, 0, // budget 1000 ms
        ];
        assert_eq!(frame, expected);
    }

    #[test]
    fn every_truncation_is_rejected() {
        for message in sample_messages() {
            let frame = message.encode();
            for cut in 0..frame.len() {
                assert!(Message::decode(&frame[..cut], LIMIT).is_err(), "{message:?} cut at {cut} decoded");
            }
        }
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        for message in sample_messages() {
            let mut frame = message.encode();
            frame.push(0);
            assert_eq!(Message::decode(&frame, LIMIT), Err(CodecError::TrailingBytes { count: 1 }));
        }
    }

    #[test]
    fn trailing_bytes_inside_the_body_are_rejected() {
        // A Proof frame whose header announces one more byte than a proof holds.
        let mut frame = Message::Proof { proof: [0; 32] }.encode();
        frame.push(0xaa);
        frame[8] += 1;
        assert_eq!(Message::decode(&frame, LIMIT), Err(CodecError::TrailingBytes { count: 1 }));
    }

    #[test]
    fn bad_headers_are_rejected() {
        let good = Message::Proof { proof: [0; 32] }.encode();
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(matches!(Message::decode(&bad, LIMIT), Err(CodecError::BadMagic { .. })));
        let mut bad = good.clone();
        bad[4] = 2;
        assert_eq!(Message::decode(&bad, LIMIT), Err(CodecError::UnsupportedVersion { found: 2 }));
        let mut bad = good.clone();
        bad[5] = 0;
        assert_eq!(Message::decode(&bad, LIMIT), Err(CodecError::UnknownKind { found: 0 }));
        let mut bad = good.clone();
        bad[7] = 1;
        assert_eq!(Message::decode(&bad, LIMIT), Err(CodecError::ReservedBits { found: 0x100 }));
    }

    #[test]
    fn oversized_length_is_rejected_before_allocation() {
        // If the decoder allocated the announced length, this test would abort.
        let header = FrameHeader { kind: FrameKind::Data, len: u64::MAX }.encode();
        assert_eq!(FrameHeader::decode(&header, LIMIT), Err(CodecError::FrameTooLarge { len: u64::MAX, limit: LIMIT }));
        assert_eq!(Message::decode(&header, LIMIT), Err(CodecError::FrameTooLarge { len: u64::MAX, limit: LIMIT }));
        // At the limit is fine, one past is not.
        let at = FrameHeader { kind: FrameKind::Data, len: LIMIT as u64 };
        assert_eq!(FrameHeader::decode(&at.encode(), LIMIT), Ok(at));
        let past = FrameHeader { kind: FrameKind::Data, len: LIMIT as u64 + 1 };
        assert!(FrameHeader::decode(&past.encode(), LIMIT).is_err());
    }

    #[test]
    fn huge_counts_do_not_allocate() {
        // A table claiming u32::MAX addresses in a 4-byte body.
        let mut body = Writer::new();
        body.put_u32(u32::MAX);
        let body = body.into_inner();
        assert!(matches!(Message::decode_body(FrameKind::Table, &body), Err(CodecError::Truncated { .. })));
        let mut body = Writer::new();
        body.put_u8(4);
        body.put_u32(u32::MAX);
        let body = body.into_inner();
        assert!(matches!(Message::decode_body(FrameKind::Reject, &body), Err(CodecError::Truncated { .. })));
    }

    #[test]
    fn invalid_enum_values_are_rejected() {
        let mut frame = Message::Hello { purpose: Purpose::Peer, rank: 0, nonce: [0; 32] }.encode();
        frame[HEADER_LEN] = 9;
        assert_eq!(Message::decode(&frame, LIMIT), Err(CodecError::InvalidValue { field: "purpose", value: 9 }));
        let mut frame =
            Message::Register { world_size: 1, listen: "1.2.3.4:5".parse().unwrap(), budget_ms: 0 }.encode();
        frame[HEADER_LEN + 4] = 5;
        assert_eq!(Message::decode(&frame, LIMIT), Err(CodecError::InvalidValue { field: "address family", value: 5 }));
    }

    fn arb_addr() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((Ipv4Addr::from(ip), port))),
            (any::<[u8; 16]>(), any::<u16>(), any::<u32>()).prop_map(|(ip, port, scope)| {
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, scope))
            }),
        ]
    }

    /// Owned form of a message, so proptest can generate it; `Data`/`Collective` borrow from it.
    #[derive(Debug, Clone)]
    enum Owned {
        Hello(u8, u32, [u8; 32]),
        Challenge([u8; 32], [u8; 32]),
        Proof([u8; 32]),
        Register(u32, SocketAddr, u64),
        Table(Vec<SocketAddr>),
        Reject(RejectReason),
        Data(u32, Vec<u8>),
        Collective(u64, u8, Vec<u8>),
    }

    impl Owned {
        fn message(&self) -> Message<'_> {
            match self {
                Self::Hello(p, rank, nonce) => {
                    Message::Hello { purpose: Purpose::from_u8(*p).unwrap(), rank: *rank, nonce: *nonce }
                }
                Self::Challenge(nonce, proof) => Message::Challenge { nonce: *nonce, proof: *proof },
                Self::Proof(proof) => Message::Proof { proof: *proof },
                Self::Register(world_size, listen, budget_ms) => {
                    Message::Register { world_size: *world_size, listen: *listen, budget_ms: *budget_ms }
                }
                Self::Table(listen) => Message::Table { listen: listen.clone() },
                Self::Reject(reason) => Message::Reject(reason.clone()),
                Self::Data(tag, payload) => Message::Data { tag: *tag, payload },
                Self::Collective(seq, op, payload) => {
                    Message::Collective { seq: *seq, op: CollectiveOp::from_u8(*op).unwrap(), payload }
                }
            }
        }
    }

    fn arb_reason() -> impl Strategy<Value = RejectReason> {
        prop_oneof![
            any::<u32>().prop_map(|rank| RejectReason::DuplicateRank { rank }),
            (any::<u32>(), any::<u32>())
                .prop_map(|(rank, world_size)| RejectReason::RankOutOfRange { rank, world_size }),
            (any::<u32>(), any::<u32>()).prop_map(|(expected, got)| RejectReason::WorldSizeMismatch { expected, got }),
            proptest::collection::vec(any::<u32>(), 0..16).prop_map(|missing| RejectReason::Timeout { missing }),
            any::<u32>().prop_map(|rank| RejectReason::RankLeft { rank }),
        ]
    }

    fn arb_owned() -> impl Strategy<Value = Owned> {
        let bytes = proptest::collection::vec(any::<u8>(), 0..512);
        prop_oneof![
            (1u8..=2, any::<u32>(), any::<[u8; 32]>()).prop_map(|(p, r, n)| Owned::Hello(p, r, n)),
            (any::<[u8; 32]>(), any::<[u8; 32]>()).prop_map(|(n, p)| Owned::Challenge(n, p)),
            any::<[u8; 32]>().prop_map(Owned::Proof),
            (any::<u32>(), arb_addr(), any::<u64>()).prop_map(|(w, a, b)| Owned::Register(w, a, b)),
            proptest::collection::vec(arb_addr(), 0..16).prop_map(Owned::Table),
            arb_reason().prop_map(Owned::Reject),
            (any::<u32>(), bytes.clone()).prop_map(|(t, p)| Owned::Data(t, p)),
            (any::<u64>(), 1u8..=3, bytes).prop_map(|(s, o, p)| Owned::Collective(s, o, p)),
        ]
    }

    proptest! {
        #[test]
        fn random_messages_round_trip(owned in arb_owned()) {
            let message = owned.message();
            let frame = message.encode();
            prop_assert_eq!(frame.len() as u64, HEADER_LEN as u64 + message.body_len());
            prop_assert_eq!(Message::decode(&frame, LIMIT), Ok(message));
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Message::decode(&bytes, LIMIT);
            for kind in 1..=8u8 {
                let _ = Message::decode_body(FrameKind::from_u8(kind).unwrap(), &bytes);
            }
        }

        #[test]
        fn random_bodies_behind_a_valid_header_never_panic(
            kind in 1u8..=8,
            body in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let kind = FrameKind::from_u8(kind).unwrap();
            let mut frame = FrameHeader { kind, len: body.len() as u64 }.encode().to_vec();
            frame.extend_from_slice(&body);
            if let Ok(message) = Message::decode(&frame, LIMIT) {
                // Whatever decodes must re-encode to the same bytes: the format is canonical.
                prop_assert_eq!(message.encode(), frame);
            }
        }

        #[test]
        fn corrupting_one_byte_never_panics(owned in arb_owned(), index in any::<usize>(), value in any::<u8>()) {
            let mut frame = owned.message().encode();
            let index = index % frame.len();
            frame[index] = value;
            let _ = Message::decode(&frame, LIMIT);
        }
    }
}
