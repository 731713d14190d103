//! The proxy's TCP wire format: versioned little-endian frames in the bootstrap's conventions
//! (same header shape, the bootstrap's `Writer`/`Reader`, limits checked before allocation,
//! truncation and trailing bytes rejected, decoding never panics), with its own magic.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `WFPX` ([`MAGIC`]) |
//! | 4 | 1 | wire version ([`VERSION`]) |
//! | 5 | 1 | kind ([`Frame`]) |
//! | 6 | 2 | reserved, zero |
//! | 8 | 8 | body length, `u64` |
//!
//! Bodies: `Hello` = connection `u16`, stream `u16`, streams `u16`, sender name (`u16` length +
//! UTF-8, at most 256 bytes); `Put` = sequence `u64`, destination memory `u8`, destination
//! offset `u64`, data (the rest); `Signal` = sequence `u64`; `Ack` = next expected sequence
//! `u64`; `Error` = message (`u16` length + UTF-8); `Counter` = sequence `u64`, counter
//! immediate `u32` ([`CounterImmediate`](crate::proxy::immediate::CounterImmediate)).
//!
//! Kinds: 1 `Hello`, 2 `Put`, 3 `Signal`, 4 `Ack`, 5 `Error`, 6 `Counter`.

use weft_bootstrap::codec::{CodecError, Reader, Writer};

/// First four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"WFPX";
/// Wire version this build speaks.
pub const VERSION: u8 = 1;
/// Header length.
pub const HEADER_LEN: usize = 16;
/// Longest sender name or error message.
pub const MAX_TEXT: usize = 256;

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// First frame on every socket: which connection and stream it carries.
    Hello {
        /// The receiver's connection index the frames are for.
        connection: u16,
        /// Index of this socket among the connection's sockets.
        stream: u16,
        /// Sockets of the connection.
        streams: u16,
        /// The sender's name, for errors.
        name: String,
    },
    /// Data for the receiver's memory.
    Put {
        /// Per-connection sequence number.
        seq: u64,
        /// Destination memory index.
        dst_memory: u8,
        /// Destination offset.
        dst_offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Increment the receiver's inbound token of the connection.
    Signal {
        /// Per-connection sequence number.
        seq: u64,
    },
    /// Every frame with a sequence below `next` is applied (receiver to sender).
    Ack {
        /// Next sequence number the receiver expects.
        next: u64,
    },
    /// The receiver refuses the connection; it closes it after this frame.
    Error {
        /// Why.
        message: String,
    },
    /// A counter update for the receiver's counter stream of the connection.
    Counter {
        /// Per-connection sequence number (the frame's, not the immediate's).
        seq: u64,
        /// The 32-bit counter immediate.
        imm: u32,
    },
}

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Not a proxy frame.
    #[error("bad magic {found:02x?}: not a weft proxy frame")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A field or the framing is malformed.
    #[error(transparent)]
    Codec(#[from] CodecError),
}

/// Kind byte of a `Put` frame.
pub const PUT_KIND: u8 = 2;
/// Kind byte of a `Counter` frame (the highest kind).
pub const COUNTER_KIND: u8 = 6;
/// Bytes of a `Put` body before its data: sequence (8), memory (1), offset (8).
pub const PUT_PREFIX_LEN: usize = 17;

impl Frame {
    /// The bytes of a `Put` frame of `len` data bytes, written by `fill` straight into the frame
    /// (one buffer, no copy of the data through a `Frame`); the same bytes [`Frame::encode`]
    /// makes of `Frame::Put` with that data.
    pub fn encode_put<E>(
        seq: u64,
        dst_memory: u8,
        dst_offset: u64,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<Vec<u8>, E> {
        let body_len = PUT_PREFIX_LEN + len;
        let mut out = Vec::with_capacity(HEADER_LEN + body_len);
        out.extend_from_slice(&encode_header(PUT_KIND, body_len as u64));
        out.extend_from_slice(&seq.to_le_bytes());
        out.push(dst_memory);
        out.extend_from_slice(&dst_offset.to_le_bytes());
        out.resize(HEADER_LEN + body_len, 0);
        fill(&mut out[HEADER_LEN + PUT_PREFIX_LEN..])?;
        Ok(out)
    }

    /// A `Put` frame from the prefix of its body and its data, read apart so the data lands in
    /// its own buffer (the receiver's path; [`Frame::decode_body`] gives the same frame).
    pub fn decode_put(prefix: &[u8; PUT_PREFIX_LEN], data: Vec<u8>) -> Self {
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&prefix[at..at + 8]);
            u64::from_le_bytes(w)
        };
        Frame::Put { seq: word(0), dst_memory: prefix[8], dst_offset: word(9), data }
    }

    fn kind(&self) -> u8 {
        match self {
            Frame::Hello { .. } => 1,
            Frame::Put { .. } => PUT_KIND,
            Frame::Signal { .. } => 3,
            Frame::Ack { .. } => 4,
            Frame::Error { .. } => 5,
            Frame::Counter { .. } => COUNTER_KIND,
        }
    }

    /// The frame's bytes (header and body).
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Writer::new();
        match self {
            Frame::Hello { connection, stream, streams, name } => {
                body.put_u16(*connection);
                body.put_u16(*stream);
                body.put_u16(*streams);
                put_text(&mut body, name);
            }
            Frame::Put { seq, dst_memory, dst_offset, data } => {
                body.put_u64(*seq);
                body.put_u8(*dst_memory);
                body.put_u64(*dst_offset);
                body.put_bytes(data);
            }
            Frame::Signal { seq } => body.put_u64(*seq),
            Frame::Ack { next } => body.put_u64(*next),
            Frame::Error { message } => put_text(&mut body, message),
            Frame::Counter { seq, imm } => {
                body.put_u64(*seq);
                body.put_u32(*imm);
            }
        }
        let body = body.into_inner();
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.extend_from_slice(&encode_header(self.kind(), body.len() as u64));
        out.extend_from_slice(&body);
        out
    }

    /// Decodes a body of `kind`.
    pub fn decode_body(kind: u8, body: &[u8]) -> Result<Self, FrameError> {
        let mut r = Reader::new(body);
        let frame = match kind {
            1 => Frame::Hello { connection: r.u16()?, stream: r.u16()?, streams: r.u16()?, name: text(&mut r)? },
            2 => Frame::Put { seq: r.u64()?, dst_memory: r.u8()?, dst_offset: r.u64()?, data: r.rest().to_vec() },
            3 => Frame::Signal { seq: r.u64()? },
            4 => Frame::Ack { next: r.u64()? },
            5 => Frame::Error { message: text(&mut r)? },
            COUNTER_KIND => Frame::Counter { seq: r.u64()?, imm: r.u32()? },
            _ => return Err(CodecError::UnknownKind { found: kind }.into()),
        };
        r.finish()?;
        Ok(frame)
    }

    /// Decodes one whole frame whose body may be at most `limit` bytes.
    pub fn decode(bytes: &[u8], limit: usize) -> Result<Self, FrameError> {
        let header: &[u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(CodecError::Truncated { needed: HEADER_LEN as u64, remaining: bytes.len() })?;
        let (kind, len) = decode_header(header, limit)?;
        let body = &bytes[HEADER_LEN..];
        // `len` is at most `limit`, a usize.
        if body.len() != len as usize {
            return Err(if body.len() < len as usize {
                CodecError::Truncated { needed: len, remaining: body.len() }
            } else {
                CodecError::TrailingBytes { count: body.len() - len as usize }
            }
            .into());
        }
        Self::decode_body(kind, body)
    }
}

fn put_text(w: &mut Writer, text: &str) {
    // Longer texts are cut at a character boundary: they are names and messages, not data.
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    // `end` <= MAX_TEXT fits a u16.
    w.put_u16(end as u16);
    w.put_bytes(&text.as_bytes()[..end]);
}

fn text(r: &mut Reader<'_>) -> Result<String, CodecError> {
    let len = usize::from(r.u16()?);
    if len > MAX_TEXT {
        return Err(CodecError::InvalidValue { field: "text length", value: len as u64 });
    }
    String::from_utf8(r.take(len)?.to_vec())
        .map_err(|_| CodecError::InvalidValue { field: "text (not UTF-8)", value: len as u64 })
}

/// The 16-byte header of a frame of `kind` with a body of `len` bytes.
pub fn encode_header(kind: u8, len: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..4].copy_from_slice(&MAGIC);
    h[4] = VERSION;
    h[5] = kind;
    h[8..].copy_from_slice(&len.to_le_bytes());
    h
}

/// Checks a header and returns `(kind, body length)`; the length is checked against `limit`
/// before the caller allocates anything.
pub fn decode_header(h: &[u8; HEADER_LEN], limit: usize) -> Result<(u8, u64), FrameError> {
    let mut r = Reader::new(h);
    let magic: [u8; 4] = r.array()?;
    if magic != MAGIC {
        return Err(FrameError::BadMagic { found: magic });
    }
    let version = r.u8()?;
    if version != VERSION {
        return Err(CodecError::UnsupportedVersion { found: version }.into());
    }
    let kind = r.u8()?;
    if !(1..=COUNTER_KIND).contains(&kind) {
        return Err(CodecError::UnknownKind { found: kind }.into());
    }
    let reserved = r.u16()?;
    if reserved != 0 {
        return Err(CodecError::ReservedBits { found: reserved }.into());
    }
    let len = r.u64()?;
    if len > limit as u64 {
        return Err(CodecError::FrameTooLarge { len, limit }.into());
    }
    Ok((kind, len))
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_frame() -> impl Strategy<Value = Frame> {
        prop_oneof![
            (any::<u16>(), any::<u16>(), any::<u16>(), "[a-z0-9@:.]{0,40}")
                .prop_map(|(connection, stream, streams, name)| Frame::Hello { connection, stream, streams, name }),
            (any::<u64>(), any::<u8>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..300))
                .prop_map(|(seq, dst_memory, dst_offset, data)| Frame::Put { seq, dst_memory, dst_offset, data }),
            any::<u64>().prop_map(|seq| Frame::Signal { seq }),
            any::<u64>().prop_map(|next| Frame::Ack { next }),
            "[ -~]{0,100}".prop_map(|message| Frame::Error { message }),
            (any::<u64>(), any::<u32>()).prop_map(|(seq, imm)| Frame::Counter { seq, imm }),
        ]
    }

    proptest! {
        #[test]
        fn frames_round_trip(frame in arb_frame()) {
            let bytes = frame.encode();
            prop_assert_eq!(Frame::decode(&bytes, 1 << 20).unwrap(), frame);
        }

        #[test]
        fn truncated_or_extended_frames_are_rejected(frame in arb_frame(), cut in 1usize..20) {
            let bytes = frame.encode();
            let cut = cut.min(bytes.len());
            prop_assert!(Frame::decode(&bytes[..bytes.len() - cut], 1 << 20).is_err());
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert!(Frame::decode(&longer, 1 << 20).is_err());
        }

        #[test]
        fn puts_encoded_in_place_and_decoded_apart_are_the_same_frames(
            seq in any::<u64>(),
            dst_memory in any::<u8>(),
            dst_offset in any::<u64>(),
            data in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let frame = Frame::Put { seq, dst_memory, dst_offset, data: data.clone() };
            let bytes = Frame::encode_put(seq, dst_memory, dst_offset, data.len(), |out| {
                out.copy_from_slice(&data);
                Ok::<(), ()>(())
            })
            .unwrap();
            prop_assert_eq!(&bytes, &frame.encode());
            let body = &bytes[HEADER_LEN..];
            let prefix: &[u8; PUT_PREFIX_LEN] = body[..PUT_PREFIX_LEN].try_into().unwrap();
            prop_assert_eq!(Frame::decode_put(prefix, body[PUT_PREFIX_LEN..].to_vec()), frame);
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Frame::decode(&bytes, 1 << 10);
        }
    }

    #[test]
    fn the_limit_is_checked_from_the_header() {
        let bytes = Frame::Put { seq: 0, dst_memory: 0, dst_offset: 0, data: vec![0; 100] }.encode();
        let header: [u8; HEADER_LEN] = bytes[..HEADER_LEN].try_into().unwrap();
        assert!(matches!(
            decode_header(&header, 50),
            Err(FrameError::Codec(CodecError::FrameTooLarge { len: 117, limit: 50 }))
        ));
        let mut bad = header;
        bad[0] = b'X';
        assert!(matches!(decode_header(&bad, 1000), Err(FrameError::BadMagic { .. })));
        let mut bad = header;
        bad[6] = 1;
        assert!(decode_header(&bad, 1000).is_err());
        let mut bad = header;
        bad[5] = 9;
        assert!(decode_header(&bad, 1000).is_err());
    }

    #[test]
    fn long_texts_are_cut_at_a_character_boundary() {
        let name = "é".repeat(200);
        let Frame::Hello { name: got, .. } =
            Frame::decode(&Frame::Hello { connection: 0, stream: 0, streams: 1, name }.encode(), 1024).unwrap()
        else {
            panic!("not a hello")
        };
        assert_eq!(got.len(), 256);
    }
}
