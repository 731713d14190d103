//! Counter updates as 32-bit immediate data: what a sending proxy attaches to a zero-length
//! send-with-immediate over verbs (or a transport's equivalent frame) when it executes a
//! [`TransferCmd`](weft_types::TransferCmd) of kind `CounterAdd`/`CounterSet`, and what the
//! receiving proxy decodes before [`ordering`](super::ordering) applies it.
//!
//! | bits | field |
//! | --- | --- |
//! | 0–5 | sequence number of the update on its (peer, channel) stream, modulo [`SEQ_MODULUS`] |
//! | 6 | 0 add, 1 set |
//! | 7–15 | counter index (`< 2^TRANSFER_COUNTER_BITS`) |
//! | 16–31 | value: add `i16` (two's complement), set `u16` |
//!
//! Every 32-bit word decodes to an update, so decoding cannot fail; the peer and channel are not
//! in the word: the receiver knows them from the connection the immediate arrived on.

use weft_types::{CounterUpdate, FieldOutOfRange, TRANSFER_COUNTER_BITS, TRANSFER_VALUE_BITS};

/// Width of the wire sequence number.
pub const SEQ_BITS: u32 = 6;
/// Wire sequence numbers count modulo this.
pub const SEQ_MODULUS: u64 = 1 << SEQ_BITS;
/// The largest reordering window: sequence numbers `next .. next + window` are ahead of the
/// receiver and `next - window .. next` behind it (duplicates), and the two ranges must not
/// overlap modulo [`SEQ_MODULUS`].
pub const MAX_WINDOW: u32 = 1 << (SEQ_BITS - 1);

/// The default window of a counter stream: the sender's ([`super::TransferConfig`]) and the
/// receiver's ([`super::counters::CounterConfig`]) must be equal, so both defaults are this one.
pub const DEFAULT_WINDOW: u32 = 16;

const SET_SHIFT: u32 = SEQ_BITS;
const COUNTER_SHIFT: u32 = SET_SHIFT + 1;
const VALUE_SHIFT: u32 = COUNTER_SHIFT + TRANSFER_COUNTER_BITS;
const _: () = assert!(VALUE_SHIFT + TRANSFER_VALUE_BITS == 32, "the immediate's fields fill 32 bits");

/// One counter update with its stream's sequence number, as carried in immediate data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CounterImmediate {
    /// The update's sequence number on its stream, modulo [`SEQ_MODULUS`] ([`wire_seq`]).
    pub seq: u8,
    /// The receiver's counter index.
    pub counter: u16,
    /// What to do to the counter.
    pub update: CounterUpdate,
}

/// The wire form of the `logical`-th update (counting from 0) of a stream.
pub fn wire_seq(logical: u64) -> u8 {
    // Reduced modulo 64 first, so the cast cannot truncate.
    (logical % SEQ_MODULUS) as u8
}

impl CounterImmediate {
    /// The 32-bit immediate; fails when the sequence number or the counter index exceeds its bits.
    pub fn encode(&self) -> Result<u32, FieldOutOfRange> {
        let seq = u64::from(self.seq);
        if seq >= SEQ_MODULUS {
            return Err(FieldOutOfRange { field: "seq", value: seq, max: SEQ_MODULUS - 1 });
        }
        let counter = u32::from(self.counter);
        if counter >> TRANSFER_COUNTER_BITS != 0 {
            let max = (1u64 << TRANSFER_COUNTER_BITS) - 1;
            return Err(FieldOutOfRange { field: "counter", value: counter.into(), max });
        }
        let (set, value) = match self.update {
            // The i16's bits, two's complement.
            CounterUpdate::Add(v) => (0, u32::from(v as u16)),
            CounterUpdate::Set(v) => (1, u32::from(v)),
        };
        Ok(u32::from(self.seq) | set << SET_SHIFT | counter << COUNTER_SHIFT | value << VALUE_SHIFT)
    }

    /// The update a 32-bit immediate carries.
    pub fn decode(word: u32) -> Self {
        // Each cast takes a field already masked to its width.
        let value = (word >> VALUE_SHIFT) as u16;
        let update =
            if word >> SET_SHIFT & 1 == 0 { CounterUpdate::Add(value as i16) } else { CounterUpdate::Set(value) };
        Self {
            seq: (word & ((1 << SEQ_BITS) - 1)) as u8,
            counter: ((word >> COUNTER_SHIFT) & ((1 << TRANSFER_COUNTER_BITS) - 1)) as u16,
            update,
        }
    }
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn update() -> impl Strategy<Value = CounterUpdate> {
        prop_oneof![any::<i16>().prop_map(CounterUpdate::Add), any::<u16>().prop_map(CounterUpdate::Set)]
    }

    proptest! {
        #[test]
        fn every_update_round_trips(seq in 0u8..64, counter in 0u16..512, update in update()) {
            let imm = CounterImmediate { seq, counter, update };
            prop_assert_eq!(CounterImmediate::decode(imm.encode().unwrap()), imm);
        }

        #[test]
        fn every_word_round_trips(word in any::<u32>()) {
            prop_assert_eq!(CounterImmediate::decode(word).encode().unwrap(), word);
        }
    }

    #[test]
    fn fields_beyond_their_bits_are_refused() {
        let imm = CounterImmediate { seq: 64, counter: 0, update: CounterUpdate::Add(1) };
        assert_eq!(imm.encode().unwrap_err().field, "seq");
        let imm = CounterImmediate { seq: 0, counter: 512, update: CounterUpdate::Add(1) };
        assert_eq!(imm.encode().unwrap_err().field, "counter");
        assert_eq!(wire_seq(64 * 3 + 5), 5);
        let word = CounterImmediate { seq: 63, counter: 511, update: CounterUpdate::Add(-1) }.encode().unwrap();
        assert_eq!(word, u32::MAX ^ (1 << SET_SHIFT), "every field at its top, add");
    }
}
