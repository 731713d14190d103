//! The receiving proxy's ordering of counter immediates (`weft_net::proxy::ordering`): what
//! another node's proxy sends decides every sequence number, counter and value it sees.
//!
//! Input: a window byte (`1..=MAX_WINDOW` after reduction), then records of 5 bytes: a stream
//! byte (its low bit picks one of two streams, bit 1 advances the clock past the gap timeout)
//! and a 32-bit immediate, little-endian.

use std::time::{Duration, Instant};

use weft_net::proxy::immediate::{CounterImmediate, MAX_WINDOW, wire_seq};
use weft_net::proxy::ordering::{Arrival, ImmediateOrder, OrderingError, StreamKey};
use weft_types::CounterUpdate;

const GAP_TIMEOUT: Duration = Duration::from_millis(10);
const STREAMS: [StreamKey; 2] = [StreamKey { peer: 1, channel: 0 }, StreamKey { peer: 2, channel: 3 }];

/// Per stream, whatever arrives: an arrival applies exactly as many updates as it reports and
/// moves nothing otherwise; what is held never exceeds the window; an update carrying the next
/// expected sequence number is always applied; the gap check fails only with holes open past
/// the timeout, naming a stream that has them. Returns whether any update was applied.
pub fn check(data: &[u8]) -> bool {
    let Some((&window, records)) = data.split_first() else { return false };
    let window = u32::from(window) % MAX_WINDOW + 1;
    #[allow(clippy::expect_used)] // the window is in range by construction
    let mut order = ImmediateOrder::new(window, GAP_TIMEOUT).expect("a window in range");
    let start = Instant::now();
    let mut now = start;
    let mut held = [0u64; 2];
    let mut any = false;
    for record in records.chunks_exact(5) {
        let which = usize::from(record[0] & 1);
        if record[0] & 2 != 0 {
            now += GAP_TIMEOUT * 2;
        }
        let stream = STREAMS[which];
        let word = u32::from_le_bytes([record[1], record[2], record[3], record[4]]);
        let imm = CounterImmediate::decode(word);
        let before = order.applied(stream);
        let was_next = imm.seq == wire_seq(before);
        let mut calls = 0u64;
        let arrival = order.arrive(stream, imm, now, |_counter: u16, _update: CounterUpdate| calls += 1);
        let after = order.applied(stream);
        if was_next {
            assert!(matches!(arrival, Ok(Arrival::Applied(_))), "the next expected update gave {arrival:?}");
        }
        match arrival {
            Ok(Arrival::Applied(n)) => {
                assert!(n >= 1 && calls == n && after == before + n, "applied {n}: {calls} calls, {before} -> {after}");
                // The arrival itself and the n - 1 held ones it released.
                held[which] = held[which].checked_sub(n - 1).unwrap_or_else(|| panic!("released more than held"));
                any = true;
            }
            Ok(Arrival::Held) => held[which] += 1,
            Ok(Arrival::Duplicate)
            | Err(OrderingError::BeyondWindow { .. } | OrderingError::ConflictingDuplicate { .. }) => {}
            Err(other) => panic!("arrive failed with {other}"),
        }
        if !matches!(arrival, Ok(Arrival::Applied(_))) {
            assert!(calls == 0 && after == before, "nothing applied, yet {calls} calls, {before} -> {after}");
        }
        assert!(held[which] <= u64::from(window), "{} held with a window of {window}", held[which]);
        match order.expire(now) {
            Ok(()) => {}
            Err(OrderingError::GapTimeout { stream, held: waiting, .. }) => {
                let index = STREAMS.iter().position(|s| *s == stream).unwrap_or_else(|| panic!("unknown {stream}"));
                assert!(waiting > 0 && u64::from(waiting) == held[index], "gap of {stream} with {waiting} held");
                assert!(now > start, "a gap expired before any time passed");
            }
            Err(other) => panic!("expire failed with {other}"),
        }
    }
    any
}

/// An immediate word: sequence `seq`, an add of `value` to counter `counter`.
fn add(seq: u64, counter: u16, value: i16) -> [u8; 4] {
    let imm = CounterImmediate { seq: wire_seq(seq), counter, update: CounterUpdate::Add(value) };
    #[allow(clippy::expect_used)] // a sequence below the modulus and a small counter encode
    imm.encode().expect("an encodable immediate").to_le_bytes()
}

/// In order over a wrap of the sequence numbers; two streams interleaved and reversed in
/// windows; a hole left open past the timeout.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let record = |stream: u8, word: [u8; 4]| [&[stream][..], &word[..]].concat();
    let in_order: Vec<u8> = std::iter::once(31).chain((0..80).flat_map(|s| record(0, add(s, 1, 1)))).collect();
    // Each stream's block of 4 arrives last first.
    let reversed: Vec<u8> =
        std::iter::once(7)
            .chain((0..6).flat_map(|block| {
                (0..8u64).rev().flat_map(move |i| record((i % 2) as u8, add(block * 4 + i / 2, 2, -1)))
            }))
            .collect();
    // Update 0 applied, 2 and then (after the timeout) 3 held behind the missing 1.
    let hole: Vec<u8> = std::iter::once(3)
        .chain([record(0, add(0, 0, 5)), record(0, add(2, 0, 5)), record(2, add(3, 0, 5))].concat())
        .collect();
    vec![("in_order", in_order), ("reversed", reversed), ("hole", hole)]
}
