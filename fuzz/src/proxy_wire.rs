//! The wire formats expert-parallel and GIN traffic takes to other nodes: the 16-byte
//! [`FifoCommand`] a kernel pushes to its proxy (a `PortChannel` put, signal or flush), and the
//! proxy's TCP [`Frame`]s that carry it to the peer.

use weft_net::proxy::transport::frame::{Frame, HEADER_LEN, PUT_KIND, PUT_PREFIX_LEN, decode_header};
use weft_types::{FifoCommand, FifoCommandFields, FifoOp};

/// Body limit of the decode: large enough for any input libFuzzer makes.
const LIMIT: usize = 1 << 20;

/// The reserved bit of a FIFO command's `snd` word (bit 62; the command ignores it).
const SND_RESERVED: u64 = 1 << 62;

/// A frame that decodes re-encodes to the same bytes, its header passes the receiver's own
/// header check, and a put read apart (prefix, then data, as the receiver reads it) is the same
/// frame. The first 16 bytes as a FIFO command: its fields encode back to its words (valid and
/// reserved bits aside) unless its op is 0, which `encode` reports. Returns whether `data`
/// decoded as a frame or is a command of a nonzero op.
pub fn check(data: &[u8]) -> bool {
    let frame = Frame::decode(data, LIMIT);
    if let Ok(frame) = &frame {
        assert_eq!(frame.encode(), data, "{frame:?} re-encodes to other bytes");
        let header = data.first_chunk::<HEADER_LEN>().map(|h| decode_header(h, LIMIT));
        let Some(Ok((kind, _))) = header else { panic!("a decoded frame's header does not decode: {header:?}") };
        if kind == PUT_KIND {
            let body = &data[HEADER_LEN..];
            let prefix = body.first_chunk::<PUT_PREFIX_LEN>();
            let Some(prefix) = prefix else { panic!("a decoded put has a body of {} bytes", body.len()) };
            assert_eq!(&Frame::decode_put(prefix, body[PUT_PREFIX_LEN..].to_vec()), frame);
        }
    }
    let mut command_encodes = false;
    if let Some((fst, rest)) = data.split_first_chunk::<8>()
        && let Some(snd) = rest.first_chunk::<8>()
    {
        let command = FifoCommand { fst: u64::from_le_bytes(*fst), snd: u64::from_le_bytes(*snd) };
        let fields = command.fields();
        assert_eq!(fields.op, command.op());
        let bare = command.without_valid_bits();
        let bare = FifoCommand { snd: bare.snd & !SND_RESERVED, ..bare };
        match FifoCommand::encode(fields) {
            Ok(again) => {
                assert_eq!(again, bare, "{fields:?} encode to other words");
                command_encodes = true;
            }
            // Every field but `op` is masked to its width when decoded, so only op 0 (a slot
            // never written) fails to encode.
            Err(e) => assert_eq!((e.field, fields.op), ("op", 0), "{fields:?}: {e}"),
        }
    }
    frame.is_ok() || (data.len() == 16 && command_encodes)
}

/// A frame of every kind and a FIFO command (a put with signal and flush).
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let frames = [
        ("hello", Frame::Hello { connection: 3, stream: 0, streams: 2, name: "rank 1".into() }),
        ("put", Frame::Put { seq: 7, dst_memory: 1, dst_offset: 4096, data: vec![0xab; 24] }),
        ("signal", Frame::Signal { seq: 8 }),
        ("ack", Frame::Ack { next: 9 }),
        ("error", Frame::Error { message: "no connection 3".into() }),
        ("counter", Frame::Counter { seq: 10, imm: 0x0005_0183 }),
    ];
    let mut seeds: Vec<_> = frames.iter().map(|(name, f)| (*name, f.encode())).collect();
    let fields = FifoCommandFields {
        op: FifoOp::PutSignalFlush as u8,
        connection: 5,
        src_memory: 1,
        dst_memory: 2,
        src_offset: 256,
        dst_offset: 512,
        size: 1024,
    };
    // The fields are within their widths.
    #[allow(clippy::expect_used)]
    let command = FifoCommand::encode(fields).expect("a valid command").for_position(0, 4);
    seeds.push(("fifo_command", [command.fst.to_le_bytes(), command.snd.to_le_bytes()].concat()));
    seeds
}
