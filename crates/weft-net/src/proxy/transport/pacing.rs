//! The emulated NIC's timing: a link with a per-message latency α and a bandwidth cap β.
//!
//! A [`Pacer`] decides when each message may be handed to the copy engine, as a NIC would
//! deliver it: messages leave one after the other, each occupying the link for `bytes / β`
//! (serialisation), and arrive α after they left. So a message submitted at `now` is released
//! at `max(now, link free) + bytes / β + α`, and the link is then free at
//! `max(now, link free) + bytes / β`. Release times never decrease, so messages keep their
//! order (a signal is never released before the puts submitted ahead of it).
//!
//! The copy the message then becomes takes its own time on top (a few microseconds of
//! launch plus `bytes` over the copy engine's ~390 GB/s on NVLink), so the emulation is slightly
//! slower than the α-β model it is configured with; [`LinkModel::message_time`] is that model's
//! prediction for one message.

use std::time::Instant;

use weft_core::LinkModel;

/// Release times of the messages of one link (one GPU's emulated NIC).
#[derive(Debug)]
pub struct Pacer {
    model: LinkModel,
    free_at: Option<Instant>,
}

impl Pacer {
    /// An idle link following `model`.
    pub fn new(model: LinkModel) -> Self {
        Self { model, free_at: None }
    }

    /// The model.
    pub fn model(&self) -> LinkModel {
        self.model
    }

    /// When a message of `bytes` submitted at `now` is delivered (may be handed to the copy
    /// engine); occupies the link for its serialisation time.
    pub fn schedule(&mut self, now: Instant, bytes: u64) -> Instant {
        let start = self.free_at.map_or(now, |free| free.max(now));
        let leave = start + self.model.serialization(bytes);
        self.free_at = Some(leave);
        leave + self.model.latency
    }
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests {
    use super::*;
    use std::time::Duration;

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
}
