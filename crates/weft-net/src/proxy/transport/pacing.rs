//! The emulated NIC's timing: a link with a per-message latency α and a bandwidth cap β, and
//! the messages of each connection held until their release.
//!
//! A [`Pacer`] decides when each message may be handed to the copy engine, as a NIC would
//! deliver it: messages leave one after the other, each occupying the link for `bytes / β`
//! (serialisation), and arrive α after they left. So a message submitted at `now` is released
//! at `max(now, link free) + bytes / β + α`, and the link is then free at
//! `max(now, link free) + bytes / β`. Release times never decrease, so messages keep their
//! order (a signal is never released before the puts submitted ahead of it).
//!
//! **Chaos** (`WEFT_EMU_NET_CHAOS=seed`, [`Pacer::chaotic`]): each message's release is delayed
//! further by a pseudo-random extra delay drawn uniformly from `[0, chaos_bound]`
//! ([`chaos_bound`]: 4α, at least 20 µs), from a generator seeded with the seed, so later writes
//! of a connection land before earlier ones; the same seed draws the same delays for the same
//! sequence of messages. The transport then no longer keeps order, and the proxy does:
//! [`Held`] releases a signal only once its [`Fence`] says every operation before it is
//! complete at the target.
//!
//! The copy the message then becomes takes its own time on top (a few microseconds of
//! launch plus `bytes` over the copy engine's ~390 GB/s on NVLink), so the emulation is slightly
//! slower than the α-β model it is configured with; [`LinkModel::message_time`] is that model's
//! prediction for one message. The copy-engine transport holds a long put of a connection in
//! order as several messages (`ce::PACED_PIECE`), so only the last piece's copy adds to it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weft_core::LinkModel;

use super::fence::Fence;

/// The chaos spread in multiples of α.
const CHAOS_ALPHAS: u32 = 4;
/// The least chaos spread, so a link without latency still reorders.
const CHAOS_MIN_SPREAD: Duration = Duration::from_micros(20);

/// The largest extra delay chaos adds to a message of a link following `model`: 4α, at least
/// 20 µs.
pub fn chaos_bound(model: LinkModel) -> Duration {
    (model.latency * CHAOS_ALPHAS).max(CHAOS_MIN_SPREAD)
}

/// Release times of the messages of one link (one GPU's emulated NIC).
#[derive(Debug)]
pub struct Pacer {
    model: LinkModel,
    free_at: Option<Instant>,
    /// Under chaos: the seeded generator of the extra delays.
    chaos: Option<StdRng>,
}

impl Pacer {
    /// An idle link following `model`.
    pub fn new(model: LinkModel) -> Self {
        Self { model, free_at: None, chaos: None }
    }

    /// An idle link following `model` whose messages are further delayed by up to
    /// [`chaos_bound`], drawn from a generator seeded with `seed`.
    pub fn chaotic(model: LinkModel, seed: u64) -> Self {
        Self { chaos: Some(StdRng::seed_from_u64(seed)), ..Self::new(model) }
    }

    /// The model.
    pub fn model(&self) -> LinkModel {
        self.model
    }

    /// Whether release times are shuffled by chaos (and so no longer keep the messages' order).
    pub fn is_chaotic(&self) -> bool {
        self.chaos.is_some()
    }

    /// When a message of `bytes` submitted at `now` is delivered (may be handed to the copy
    /// engine); occupies the link for its serialisation time. Chaos delays the delivery, not
    /// the link.
    pub fn schedule(&mut self, now: Instant, bytes: u64) -> Instant {
        let start = self.free_at.map_or(now, |free| free.max(now));
        let leave = start + self.model.serialization(bytes);
        self.free_at = Some(leave);
        let extra = self.chaos.as_mut().map_or(Duration::ZERO, |rng| {
            let bound = chaos_bound(self.model).as_nanos().try_into().unwrap_or(u64::MAX);
            Duration::from_nanos(rng.random_range(0..=bound))
        });
        leave + self.model.latency + extra
    }
}

/// A paced operation waiting for its release time.
#[derive(Debug)]
struct Message<I> {
    at: Instant,
    ticket: u64,
    item: I,
    signal: bool,
}

/// The paced operations of one connection not yet handed to the copy engine. In order (no
/// chaos), release times never decrease and the due messages are the front ones. Under chaos
/// any held message may be due, and a signal goes only once the connection's [`Fence`] clears
/// it; the copy engine then completes operations in the order they were issued, which is not
/// the tickets' order, so [`Held::completed`] translates.
#[derive(Debug)]
pub struct Held<I> {
    messages: VecDeque<Message<I>>,
    chaos: Option<Reordered>,
}

/// What a connection under chaos keeps beyond its held messages.
#[derive(Debug)]
struct Reordered {
    fence: Fence,
    /// Tickets in the order they were issued, from the first one the copy engine has not
    /// reached.
    issued: VecDeque<u64>,
    /// Issue positions the copy engine has reached (those popped from `issued`).
    reached: u64,
    /// Scratch of one release: (release time, ticket, index in `messages`) of the due messages.
    due: Vec<(Instant, u64, usize)>,
}

impl<I: Copy> Held<I> {
    /// Nothing held; messages are pushed in release order.
    pub fn in_order() -> Self {
        Self { messages: VecDeque::new(), chaos: None }
    }

    /// Nothing held; messages may be pushed in any release order, and signals wait for `fence`.
    pub fn reordered(fence: Fence) -> Self {
        let chaos = Reordered { fence, issued: VecDeque::new(), reached: 0, due: Vec::new() };
        Self { messages: VecDeque::new(), chaos: Some(chaos) }
    }

    /// Holds operation `ticket` until `at`.
    pub fn push(&mut self, at: Instant, ticket: u64, item: I, signal: bool) {
        self.messages.push_back(Message { at, ticket, item, signal });
    }

    /// Messages held.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Whether messages are pushed and released in order (no chaos).
    pub fn keeps_order(&self) -> bool {
        self.chaos.is_none()
    }

    /// Drops every held message (shutdown).
    pub fn clear(&mut self) {
        self.messages.clear();
    }

    /// Hands the messages due at `now` to `issue` (ticket, item), in release order, and
    /// returns how many went. Under chaos a due signal stays until the fence clears it.
    pub fn release<E>(&mut self, now: Instant, mut issue: impl FnMut(u64, I) -> Result<(), E>) -> Result<usize, E> {
        let Some(chaos) = &mut self.chaos else {
            let mut released = 0;
            while let Some(m) = self.messages.front().filter(|m| m.at <= now) {
                issue(m.ticket, m.item)?;
                self.messages.pop_front();
                released += 1;
            }
            return Ok(released);
        };
        let Reordered { fence, issued, due, .. } = chaos;
        let ready = |m: &Message<I>| m.at <= now && (!m.signal || fence.clears(m.ticket));
        due.clear();
        due.extend(self.messages.iter().enumerate().filter(|(_, m)| ready(m)).map(|(i, m)| (m.at, m.ticket, i)));
        due.sort_unstable();
        for &(_, ticket, index) in due.iter() {
            issue(ticket, self.messages[index].item)?;
            issued.push_back(ticket);
        }
        // The fence changes only on completion, so `ready` picks the same messages again.
        self.messages.retain(|m| !ready(m));
        Ok(due.len())
    }

    /// The copy engine reached the first `positions` issued operations; returns the tickets
    /// complete with every ticket before them (in order, positions are tickets).
    pub fn completed(&mut self, positions: u64) -> u64 {
        let Some(chaos) = &mut self.chaos else { return positions };
        while chaos.reached < positions {
            let Some(ticket) = chaos.issued.pop_front() else { break };
            chaos.fence.complete(ticket);
            chaos.reached += 1;
        }
        chaos.fence.completed()
    }

    /// Operation `ticket` landed at the target (a carrier completing operations in any order).
    #[cfg(test)]
    fn landed(&mut self, ticket: u64) {
        if let Some(chaos) = &mut self.chaos {
            chaos.issued.retain(|&t| t != ticket);
            chaos.fence.complete(ticket);
        }
    }
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    fn us(d: Duration) -> f64 {
        d.as_secs_f64() * 1e6
    }

    #[test]
    fn back_to_back_messages_queue_behind_each_other_and_keep_their_order() {
        let mut pacer = Pacer::new(LinkModel::new(10.0, Some(1.0))); // 1 GB/s: 1000 bytes per µs
        let t0 = Instant::now();
        let a = pacer.schedule(t0, 100_000); // 100 µs on the link
        let b = pacer.schedule(t0, 0); // a signal right behind it
        let c = pacer.schedule(t0, 50_000);
        assert!((us(a - t0) - 110.0).abs() < 1e-3);
        assert!((us(b - t0) - 110.0).abs() < 1e-3, "a signal leaves once the put ahead has left");
        assert!((us(c - t0) - 160.0).abs() < 1e-3);
        assert!(a <= b && b <= c);
    }

    #[test]
    fn an_idle_link_starts_at_submission() {
        let mut pacer = Pacer::new(LinkModel::new(3.0, Some(1.0)));
        let t0 = Instant::now();
        pacer.schedule(t0, 1000);
        let later = t0 + Duration::from_millis(1);
        let d = pacer.schedule(later, 2000);
        assert!((us(d - later) - 5.0).abs() < 1e-3, "the link was idle again: 2 µs + 3 µs");
    }

    #[test]
    fn chaos_delays_each_message_by_at_most_its_bound_the_same_way_for_the_same_seed() {
        let model = LinkModel::new(10.0, None);
        assert_eq!(chaos_bound(model), Duration::from_micros(40));
        assert_eq!(chaos_bound(LinkModel::new(0.0, None)), Duration::from_micros(20));
        let t0 = Instant::now();
        let delays = |seed| {
            let mut pacer = Pacer::chaotic(model, seed);
            (0..64).map(|_| pacer.schedule(t0, 0) - t0).collect::<Vec<_>>()
        };
        let first = delays(7);
        assert!(first.iter().all(|&d| d >= model.latency && d <= model.latency + chaos_bound(model)));
        assert!(first.windows(2).any(|w| w[1] < w[0]), "chaos reorders: {first:?}");
        assert_eq!(first, delays(7), "deterministic per seed");
        assert_ne!(first, delays(8));
        assert!(!Pacer::new(model).is_chaotic() && Pacer::chaotic(model, 0).is_chaotic());
    }

    /// Releases what is due at `now` into `out`; returns how many.
    fn release<I: Copy>(held: &mut Held<I>, now: Instant, out: &mut Vec<(u64, I)>) -> usize {
        let issued = held.release(now, |ticket, item| {
            out.push((ticket, item));
            Ok::<_, std::convert::Infallible>(())
        });
        issued.unwrap_or_else(|never| match never {})
    }

    #[test]
    fn in_order_messages_release_from_the_front_and_complete_by_position() {
        let mut held = Held::in_order();
        let t0 = Instant::now();
        let at = |us| t0 + Duration::from_micros(us);
        held.push(at(1), 0, 'a', false);
        held.push(at(2), 1, 's', true);
        held.push(at(5), 2, 'b', false);
        let mut out = Vec::new();
        let released = release(&mut held, at(3), &mut out);
        assert_eq!((released, out), (2, vec![(0, 'a'), (1, 's')]));
        assert_eq!(held.completed(2), 2);
    }

    #[test]
    fn under_chaos_positions_translate_to_the_completed_prefix_of_tickets() {
        let mut held = Held::reordered(Fence::new());
        let t0 = Instant::now();
        let at = |us| t0 + Duration::from_micros(us);
        held.push(at(9), 0, 'a', false);
        held.push(at(1), 1, 'b', false);
        held.push(at(2), 2, 's', true);
        let mut out = Vec::new();
        release(&mut held, at(3), &mut out);
        assert_eq!(out, vec![(1, 'b')], "the later write goes first; the signal waits for ticket 0");
        assert_eq!(held.completed(1), 0, "ticket 1 landed, ticket 0 has not");
        release(&mut held, at(9), &mut out);
        assert_eq!(out, vec![(1, 'b'), (0, 'a')], "the signal still waits: ticket 0 is not complete");
        assert_eq!(held.completed(2), 2);
        release(&mut held, at(9), &mut out);
        assert_eq!(out.last(), Some(&(2, 's')));
        assert_eq!(held.completed(3), 3);
        assert!(held.is_empty());
    }

    /// One run of the model: a connection's operations (`true`: a signal, else a write) held by
    /// the emulated NIC until their release offsets (µs), driven through `steps` of (time
    /// advance in µs, whether an issued operation lands, which one): the carrier lands issued
    /// operations in any order. Fails when a signal lands before a write submitted ahead of it,
    /// when the completed prefix (what a flush waits for) covers an operation that has not
    /// landed, or when the operations do not all land once time runs on.
    fn model(ops: &[(bool, u64)], steps: &[Step], fence: Fence) -> Result<(), String> {
        let t0 = Instant::now();
        let mut held = Held::reordered(fence);
        for (ticket, &(signal, at)) in (0..).zip(ops) {
            held.push(t0 + Duration::from_micros(at), ticket, signal, signal);
        }
        let mut in_flight: Vec<(u64, bool)> = Vec::new();
        let mut landed = vec![false; ops.len()];
        let mut now = t0;
        let mut land = |held: &mut Held<bool>, in_flight: &mut Vec<(u64, bool)>, k: usize| {
            let (ticket, signal) = in_flight.remove(k % in_flight.len());
            let t = ticket as usize;
            if signal && let Some(early) = (0..t).find(|&w| !ops[w].0 && !landed[w]) {
                return Err(format!("signal {ticket} landed before write {early}"));
            }
            landed[t] = true;
            held.landed(ticket);
            let prefix = held.completed(0) as usize;
            match landed[..prefix].iter().position(|&l| !l) {
                Some(w) => Err(format!("completed {prefix} with operation {w} still in flight")),
                None => Ok(()),
            }
        };
        for &(advance, lands, k) in steps.iter().chain(std::iter::repeat_n(&(1000, true, 0), 2 * ops.len())) {
            now += Duration::from_micros(advance);
            release(&mut held, now, &mut in_flight);
            if lands && !in_flight.is_empty() {
                land(&mut held, &mut in_flight, k)?;
            }
        }
        match held.completed(0) {
            n if n == ops.len() as u64 && held.is_empty() => Ok(()),
            n => Err(format!("stuck: {n} of {} operations complete", ops.len())),
        }
    }

    /// A step of the model: (time advance in µs, whether an issued operation lands, which one).
    type Step = (u64, bool, usize);

    fn cases() -> impl Strategy<Value = (Vec<(bool, u64)>, Vec<Step>)> {
        let ops = prop::collection::vec((prop::bool::weighted(0.35), 0u64..50), 1..12);
        let steps = prop::collection::vec((0u64..20, any::<bool>(), 0usize..16), 0..40);
        (ops, steps)
    }

    proptest! {
        #![proptest_config(Config { cases: 512, ..Config::default() })]

        /// Every interleaving of releases, out-of-order landings and signals keeps each signal
        /// behind the data before it, and flushes behind everything before them.
        #[test]
        fn under_chaos_no_signal_lands_before_the_data_before_it((ops, steps) in cases()) {
            model(&ops, &steps, Fence::new()).map_err(TestCaseError::fail)?;
        }
    }

    /// The same model with the fence taken out finds a signal landing before its data: the
    /// property above can fail.
    #[test]
    fn without_the_fence_the_model_finds_a_signal_before_its_data() {
        let mut runner = TestRunner::new(Config { cases: 512, failure_persistence: None, ..Config::default() });
        let found = runner
            .run(&cases(), |(ops, steps)| model(&ops, &steps, Fence::without_ordering()).map_err(TestCaseError::fail));
        match found {
            Err(e) => assert!(e.to_string().contains("landed before write"), "{e}"),
            Ok(()) => panic!("512 cases without the fence found no violation"),
        }
    }
}
