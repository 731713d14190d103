//! The α-β description of a network link: a per-message latency α and a bandwidth cap β.
//!
//! `WEFT_EMU_NET_LATENCY_US` / `WEFT_EMU_NET_GBPS` describe the emulated NIC between virtual
//! nodes with one ([`crate::Env::emulated_net`]); weft-net's pacer releases messages by it and
//! the collectives' cost model predicts with it.

use std::time::Duration;

/// An α-β link: per-message latency and bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkModel {
    /// α: added to every message.
    pub latency: Duration,
    /// β in bytes per second; `None`: no bandwidth cap.
    pub bytes_per_second: Option<u64>,
}

impl LinkModel {
    /// A link of `latency_us` microseconds per message and `gbps` GB/s (10^9 bytes per second;
    /// `None` or a non-positive value: uncapped).
    pub fn new(latency_us: f64, gbps: Option<f64>) -> Self {
        Self {
            latency: Duration::from_secs_f64(latency_us.max(0.0) * 1e-6),
            // Rounded to whole bytes per second; a cap below 1 B/s is no cap.
            bytes_per_second: gbps.filter(|g| g.is_finite()).map(|g| (g * 1e9).round() as u64).filter(|&b| b > 0),
        }
    }

    /// How long `bytes` occupy the link (`bytes / β`).
    pub fn serialization(&self, bytes: u64) -> Duration {
        self.bytes_per_second.map_or(Duration::ZERO, |b| Duration::from_secs_f64(bytes as f64 / b as f64))
    }

    /// The α-β time of one message of `bytes` on an idle link: `α + bytes / β`.
    pub fn message_time(&self, bytes: u64) -> Duration {
        self.latency + self.serialization(bytes)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;

    fn us(d: Duration) -> f64 {
        d.as_secs_f64() * 1e6
    }

    #[test]
    fn the_model_is_alpha_plus_bytes_over_beta() {
        let link = LinkModel::new(5.0, Some(25.0));
        assert!((us(link.message_time(0)) - 5.0).abs() < 1e-6);
        // 25 GB/s: 1 MB (10^6 bytes) takes 40 µs.
        assert!((us(link.message_time(1_000_000)) - 45.0).abs() < 1e-3);
        let uncapped = LinkModel::new(2.0, None);
        assert_eq!(uncapped.serialization(1 << 30), Duration::ZERO);
        assert_eq!(LinkModel::new(-1.0, Some(0.0)), LinkModel { latency: Duration::ZERO, bytes_per_second: None });
    }
}
