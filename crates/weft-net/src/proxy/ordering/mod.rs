//! The receiving proxy's sequence ordering of counter immediates.
//!
//! A carrier that does not keep order (EFA's SRD, the emulated NIC under chaos, several sockets
//! or queue pairs per connection) may deliver the counter updates of one (peer, channel) stream
//! in any order, yet a set followed by an add, or a tail raised in steps, means something only
//! in the sender's order. [`ImmediateOrder`] restores it: each stream has a next expected
//! sequence number; an update carrying it is applied at once, together with every held update
//! that follows it without a hole; a later one is held in the stream's window until its
//! predecessors arrive. Memory is bounded by the window (at most [`MAX_WINDOW`] updates per
//! stream); a sequence number beyond it is an error naming the peer, since the sender's flow
//! control never lets that many updates be outstanding. A hole that stays open longer than the
//! gap timeout is an error naming the peer, the channel and the missing sequence number:
//! [`ImmediateOrder::expire`] checks it against a time the caller passes in, so tests drive the
//! clock. Sequence numbers travel modulo [`SEQ_MODULUS`] and are extended to 64 bits relative to
//! the next expected one, which stays correct across wrap-around because the window is at most
//! half the modulus.
//!
//! Duplicates: the transports weft has deliver each message at most once (TCP's receiver drops
//! repeated frames, RC and SRD queue pairs deliver once, the emulated NIC only delays), so a
//! duplicate is not expected; one arriving within a window of the stream's progress is
//! nevertheless recognised and dropped (a repeated add must not count twice), and one that
//! differs from the held update of its sequence number is an error.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use weft_types::CounterUpdate;

use super::immediate::{CounterImmediate, MAX_WINDOW, SEQ_MODULUS, wire_seq};

#[cfg(all(test, not(weft_loom)))]
mod tests;

/// One ordered stream of updates: a sending peer and a channel of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamKey {
    /// The sending rank.
    pub peer: u32,
    /// The sender's channel (its connection to this rank).
    pub channel: u16,
}

impl fmt::Display for StreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "peer {} channel {}", self.peer, self.channel)
    }
}

/// What became of an arriving update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// It was next: it and this many held ones after it (the count includes it) were applied.
    Applied(u64),
    /// It is early: held until its predecessors arrive.
    Held,
    /// A repeat of an update already applied or held: dropped.
    Duplicate,
}

/// The ordering of a stream failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OrderingError {
    /// The window must hold at least one update and at most [`MAX_WINDOW`].
    #[error("immediate ordering window {window} is outside 1..={MAX_WINDOW}")]
    Window {
        /// The window asked for.
        window: u32,
    },
    /// An update arrived further ahead than the window allows.
    #[error("counter immediate from {stream}: sequence {seq} is beyond the window of {window} after {expected}")]
    BeyondWindow {
        /// The stream.
        stream: StreamKey,
        /// Its wire sequence number.
        seq: u8,
        /// The wire sequence number expected next.
        expected: u8,
        /// The window.
        window: u32,
    },
    /// Two different updates arrived with one sequence number.
    #[error("counter immediate from {stream}: sequence {seq} arrived twice with different contents")]
    ConflictingDuplicate {
        /// The stream.
        stream: StreamKey,
        /// The wire sequence number.
        seq: u8,
    },
    /// A hole in a stream stayed open longer than the gap timeout.
    #[error(
        "counter immediate from {stream}: sequence {missing} (update {logical}) missing for {waited:?} while {held} later ones wait"
    )]
    GapTimeout {
        /// The stream.
        stream: StreamKey,
        /// The missing wire sequence number.
        missing: u8,
        /// The missing update's position in the stream, counting from 0.
        logical: u64,
        /// Updates held behind it.
        held: u32,
        /// How long the stream has made no progress with updates held.
        waited: Duration,
    },
}

/// One stream's position and held updates.
#[derive(Debug)]
struct Stream {
    /// Updates applied so far: the position of the next expected one.
    next: u64,
    /// Held updates; the one at position `p` sits in slot `p % window`.
    held: Box<[Option<CounterImmediate>]>,
    /// Number of `Some` entries of `held`.
    held_count: u32,
    /// Since when updates are held without the stream making progress.
    stalled_since: Option<Instant>,
}

/// Per-stream sequence ordering of counter immediates (see the module docs).
#[derive(Debug)]
pub struct ImmediateOrder {
    window: u32,
    gap_timeout: Duration,
    streams: BTreeMap<StreamKey, Stream>,
}

impl ImmediateOrder {
    /// Ordering with at most `window` updates outstanding per stream (the sender's flow-control
    /// bound, `1..=MAX_WINDOW`) and holes allowed to stay open for `gap_timeout`.
    pub fn new(window: u32, gap_timeout: Duration) -> Result<Self, OrderingError> {
        if !(1..=MAX_WINDOW).contains(&window) {
            return Err(OrderingError::Window { window });
        }
        Ok(Self { window, gap_timeout, streams: BTreeMap::new() })
    }

    /// Updates of `stream` applied so far (what the receiver acknowledges to the sender's flow control).
    pub fn applied(&self, stream: StreamKey) -> u64 {
        self.streams.get(&stream).map_or(0, |s| s.next)
    }

    /// Takes `imm`, arrived on `stream` at `now`: applies it and every held update it unblocks,
    /// in sequence order, through `apply(counter, update)`, or holds it.
    pub fn arrive(
        &mut self,
        stream: StreamKey,
        imm: CounterImmediate,
        now: Instant,
        mut apply: impl FnMut(u16, CounterUpdate),
    ) -> Result<Arrival, OrderingError> {
        let window = self.window;
        let state = self.streams.entry(stream).or_insert_with(|| Stream {
            next: 0,
            held: vec![None; window as usize].into_boxed_slice(),
            held_count: 0,
            stalled_since: None,
        });
        // How far ahead of the next expected update `imm` is, modulo the wire's range.
        let ahead = (u64::from(imm.seq) + SEQ_MODULUS - state.next % SEQ_MODULUS) % SEQ_MODULUS;
        if ahead >= SEQ_MODULUS - u64::from(window) {
            return Ok(Arrival::Duplicate);
        }
        if ahead >= u64::from(window) {
            return Err(OrderingError::BeyondWindow { stream, seq: imm.seq, expected: wire_seq(state.next), window });
        }
        let position = state.next + ahead;
        let slot = state.slot(position);
        if let Some(held) = state.held[slot] {
            return if held == imm {
                Ok(Arrival::Duplicate)
            } else {
                Err(OrderingError::ConflictingDuplicate { stream, seq: imm.seq })
            };
        }
        if ahead > 0 {
            state.held[slot] = Some(imm);
            state.held_count += 1;
            state.stalled_since.get_or_insert(now);
            return Ok(Arrival::Held);
        }
        apply(imm.counter, imm.update);
        state.next += 1;
        let mut applied = 1;
        loop {
            let slot = state.slot(state.next);
            let Some(held) = state.held[slot].take() else { break };
            apply(held.counter, held.update);
            state.next += 1;
            state.held_count -= 1;
            applied += 1;
        }
        // Progress restarts the clock of a hole further on.
        state.stalled_since = (state.held_count > 0).then_some(now);
        Ok(Arrival::Applied(applied))
    }

    /// The first stream (in key order) whose hole has been open longer than the gap timeout at
    /// `now`, as an error naming its peer, channel and missing sequence number.
    pub fn expire(&self, now: Instant) -> Result<(), OrderingError> {
        for (&stream, state) in &self.streams {
            let Some(since) = state.stalled_since else { continue };
            let waited = now.saturating_duration_since(since);
            if waited > self.gap_timeout {
                return Err(OrderingError::GapTimeout {
                    stream,
                    missing: wire_seq(state.next),
                    logical: state.next,
                    held: state.held_count,
                    waited,
                });
            }
        }
        Ok(())
    }
}

impl Stream {
    fn slot(&self, position: u64) -> usize {
        // The remainder is below the window's length, a usize.
        (position % self.held.len() as u64) as usize
    }
}
