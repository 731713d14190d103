//! Proofs of the job secret: HMAC-SHA-256 over the handshake transcript.
//!
//! Each side proves it knows the secret by tagging both nonces (and what the connection is for)
//! with a role label, so a proof can be neither replayed on another connection (fresh nonces)
//! nor reflected back at its sender (the labels differ).

use sha2::{Digest, Sha256};

use crate::codec::{NONCE_LEN, PROOF_LEN, Purpose};
use crate::unique_id::SECRET_BYTES;

const ACCEPTOR_LABEL: &[u8] = b"weft-bootstrap v1 acceptor";
const CONNECTOR_LABEL: &[u8] = b"weft-bootstrap v1 connector";

/// SHA-256 block size, which HMAC pads the key to.
const BLOCK: usize = 64;

/// HMAC-SHA-256 (RFC 2104) of the concatenation of `parts`.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    for part in parts {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// The transcript both proofs cover.
struct Transcript<'a> {
    purpose: Purpose,
    rank: u32,
    connector_nonce: &'a [u8; NONCE_LEN],
    acceptor_nonce: &'a [u8; NONCE_LEN],
}

impl Transcript<'_> {
    fn tag(&self, secret: &[u8; SECRET_BYTES], label: &[u8]) -> [u8; PROOF_LEN] {
        hmac_sha256(
            secret,
            &[label, &[self.purpose as u8], &self.rank.to_le_bytes(), self.connector_nonce, self.acceptor_nonce],
        )
    }
}

/// The proof the accepting side sends in its `Challenge`.
pub(crate) fn acceptor_proof(
    secret: &[u8; SECRET_BYTES],
    purpose: Purpose,
    rank: u32,
    connector_nonce: &[u8; NONCE_LEN],
    acceptor_nonce: &[u8; NONCE_LEN],
) -> [u8; PROOF_LEN] {
    Transcript { purpose, rank, connector_nonce, acceptor_nonce }.tag(secret, ACCEPTOR_LABEL)
}

/// The proof the connecting side sends in its `Proof`.
pub(crate) fn connector_proof(
    secret: &[u8; SECRET_BYTES],
    purpose: Purpose,
    rank: u32,
    connector_nonce: &[u8; NONCE_LEN],
    acceptor_nonce: &[u8; NONCE_LEN],
) -> [u8; PROOF_LEN] {
    Transcript { purpose, rank, connector_nonce, acceptor_nonce }.tag(secret, CONNECTOR_LABEL)
}

/// Compares two proofs in time independent of where they differ.
pub(crate) fn proofs_equal(a: &[u8; PROOF_LEN], b: &[u8; PROOF_LEN]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh random nonce from the thread-local CSPRNG.
pub(crate) fn nonce() -> [u8; NONCE_LEN] {
    rand::random()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn rfc4231_test_case_2() {
        let tag = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(hex(&tag), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn rfc4231_test_case_6_long_key() {
        let key = [0xaau8; 131];
        let tag = hmac_sha256(&key, &[b"Test Using Larger Than Block-Size Key - Hash Key First"]);
        assert_eq!(hex(&tag), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    }

    #[test]
    fn proofs_depend_on_role_secret_and_transcript() {
        let secret = [7u8; SECRET_BYTES];
        let (nc, na) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let a = acceptor_proof(&secret, Purpose::Peer, 3, &nc, &na);
        let c = connector_proof(&secret, Purpose::Peer, 3, &nc, &na);
        assert!(!proofs_equal(&a, &c));
        assert!(proofs_equal(&a, &acceptor_proof(&secret, Purpose::Peer, 3, &nc, &na)));
        assert_ne!(a, acceptor_proof(&[8; SECRET_BYTES], Purpose::Peer, 3, &nc, &na));
        assert_ne!(a, acceptor_proof(&secret, Purpose::Rendezvous, 3, &nc, &na));
        assert_ne!(a, acceptor_proof(&secret, Purpose::Peer, 4, &nc, &na));
        assert_ne!(a, acceptor_proof(&secret, Purpose::Peer, 3, &na, &nc));
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(nonce(), nonce());
    }
}
