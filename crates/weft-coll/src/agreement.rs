//! The host exchange that decides, identically on every rank, whether one collective call
//! writes straight into the peers' user buffers. Ranks may see different registration states
//! (one reuses an allocation, another hands over a fresh one), so no rank decides alone: each
//! contributes an [`Offer`] (whether its buffer can be shared, where it lies, and the
//! allocation's descriptor while the peers have not mapped it yet), every rank maps what it
//! was offered, and a second exchange of one byte says whether everyone is ready. Zero-copy
//! runs only when all are; both exchanges go to every rank, so every rank sees the same bytes
//! and takes the same decision.
//!
//! Wire format of an offer (little-endian): `usable u8` and, when usable, `base u64 | size u64 |
//! buffer id u64 | offset u64 | descriptor (u32 length + bytes; length 0: already sent)`.

use weft_bootstrap::codec::{CodecError, Reader, Writer};
use weft_gpu::AllocationKey;

/// One rank's contribution to the first exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    /// The buffer cannot be shared (not 16-byte aligned, or its allocation cannot be mapped by
    /// other processes).
    Unusable,
    /// The buffer lies at `offset` of allocation `key`; `descriptor` is the allocation's encoded
    /// memory descriptor until every peer has mapped it, empty afterwards.
    Usable { key: AllocationKey, offset: u64, descriptor: Vec<u8> },
}

impl Offer {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Offer::Unusable => w.put_u8(0),
            Offer::Usable { key, offset, descriptor } => {
                w.put_u8(1);
                for field in [key.base, key.size, key.buffer_id, *offset] {
                    w.put_u64(field);
                }
                // A descriptor is a few hundred bytes; u32 is the codec's natural length.
                w.put_u32(descriptor.len() as u32);
                w.put_bytes(descriptor);
            }
        }
        w.into_inner()
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, CodecError> {
        let mut r = Reader::new(bytes);
        let offer = match r.u8()? {
            0 => Offer::Unusable,
            1 => {
                let key = AllocationKey { base: r.u64()?, size: r.u64()?, buffer_id: r.u64()? };
                let offset = r.u64()?;
                let len = r.u32()? as usize;
                let descriptor = r.take(len)?.to_vec();
                Offer::Usable { key, offset, descriptor }
            }
            other => return Err(CodecError::InvalidValue { field: "zero-copy offer kind", value: other.into() }),
        };
        r.finish()?;
        Ok(offer)
    }
}

/// The decision of the second exchange: zero-copy when every rank said it is ready.
pub(crate) fn everyone_ready(answers: &[Vec<u8>]) -> bool {
    !answers.is_empty() && answers.iter().all(|a| a.as_slice() == [1])
}

/// Whether `len` bytes at `offset` fit the offered allocation (a peer never trusts an offset
/// it would write through blindly).
pub(crate) fn fits(key: &AllocationKey, offset: u64, len: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= key.size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> AllocationKey {
        AllocationKey { base: 0x7f00_0000_0000, size: 1 << 20, buffer_id: 42 }
    }

    #[test]
    fn offers_round_trip_with_and_without_descriptor() {
        for offer in [
            Offer::Unusable,
            Offer::Usable { key: key(), offset: 256, descriptor: vec![1, 2, 3] },
            Offer::Usable { key: key(), offset: 0, descriptor: Vec::new() },
        ] {
            assert_eq!(Offer::decode(&offer.encode()).unwrap(), offer);
        }
    }

    #[test]
    fn golden_bytes_of_a_usable_offer() {
        let bytes = Offer::Usable { key: key(), offset: 16, descriptor: vec![0xab] }.encode();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            concat!(
                "01",
                "00000000007f0000",
                "0000100000000000",
                "2a00000000000000",
                "1000000000000000",
                "01000000",
                "ab"
            )
        );
    }

    #[test]
    fn malformed_offers_are_errors() {
        assert!(Offer::decode(&[]).is_err());
        assert!(Offer::decode(&[2]).is_err());
        assert!(Offer::decode(&[0, 0]).is_err(), "trailing bytes");
        let mut truncated = Offer::Usable { key: key(), offset: 0, descriptor: vec![9; 4] }.encode();
        truncated.pop();
        assert!(Offer::decode(&truncated).is_err());
    }

    #[test]
    fn one_rank_not_ready_stops_everyone() {
        let yes = vec![1u8];
        assert!(everyone_ready(&[yes.clone(), yes.clone()]));
        assert!(!everyone_ready(&[yes.clone(), vec![0]]));
        assert!(!everyone_ready(&[yes, Vec::new()]));
        assert!(!everyone_ready(&[]));
    }

    #[test]
    fn a_buffer_fits_only_inside_its_allocation() {
        assert!(fits(&key(), 0, 1 << 20));
        assert!(!fits(&key(), 16, 1 << 20));
        assert!(!fits(&key(), u64::MAX, 2));
    }
}
