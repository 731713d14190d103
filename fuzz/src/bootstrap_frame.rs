//! The bootstrap's wire: frames ([`Message`]) between ranks and the rendezvous root, and the
//! 128-byte [`UniqueId`] handed to every process.

use std::net::SocketAddr;

use weft_bootstrap::UniqueId;
use weft_bootstrap::codec::{CollectiveOp, Message, Purpose, RejectReason};

/// Body limit of the decode: large enough for any input libFuzzer makes, so the limit check
/// and the body's own checks both run.
const LIMIT: usize = 1 << 20;

/// Frames decode strictly: what decodes re-encodes to the very same bytes. A unique id decodes
/// to the id its parts make. Returns whether `data` decoded as either.
pub fn check(data: &[u8]) -> bool {
    let message = Message::decode(data, LIMIT);
    if let Ok(message) = &message {
        let bytes = message.encode();
        assert_eq!(bytes, data, "{message:?} re-encodes to other bytes");
        assert_eq!(message.body_len() as usize + weft_bootstrap::codec::HEADER_LEN, data.len());
    }
    let id = UniqueId::from_bytes(data);
    if let Ok(id) = id {
        assert_eq!(id.to_bytes().as_slice(), data);
        assert_eq!(UniqueId::from_parts(id.address(), id.secret()).ok(), Some(id));
    }
    message.is_ok() || id.is_ok()
}

/// One frame of every kind, and a unique id of each address family.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let v4 = SocketAddr::from(([10, 1, 2, 3], 4567));
    let v6 = SocketAddr::V6(std::net::SocketAddrV6::new([0xfe80, 0, 0, 0, 0, 0, 0, 1].into(), 9, 0, 3));
    let messages = [
        ("hello", Message::Hello { purpose: Purpose::Rendezvous, rank: 3, nonce: [7; 32] }),
        ("challenge", Message::Challenge { nonce: [1; 32], proof: [2; 32] }),
        ("proof", Message::Proof { proof: [3; 32] }),
        ("register", Message::Register { world_size: 4, listen: v4, budget_ms: 30_000 }),
        ("table", Message::Table { listen: vec![v4, v6] }),
        ("reject_timeout", Message::Reject(RejectReason::Timeout { missing: vec![1, 2] })),
        ("reject_mismatch", Message::Reject(RejectReason::WorldSizeMismatch { expected: 4, got: 2 })),
        ("data", Message::Data { tag: 5, payload: b"payload" }),
        ("collective", Message::Collective { seq: 9, op: CollectiveOp::AllGather, payload: b"xy" }),
    ];
    let mut seeds: Vec<_> = messages.iter().map(|(name, m)| (*name, m.encode())).collect();
    for (name, address) in [("unique_id_v4", v4), ("unique_id_v6", v6)] {
        // The address is connectable and the secret not all zero: `from_parts` accepts them.
        #[allow(clippy::expect_used)]
        let id = UniqueId::from_parts(address, [0x5a; 32]).expect("a valid unique id");
        seeds.push((name, id.to_bytes().to_vec()));
    }
    seeds
}
