//! What a device communicator must hold, and the checks that keep it within what the device
//! API addresses (signal masks of 64 bits, 32-bit FIFO offsets, one word per rank).

use weft_types::{GIN_MAX_RANKS, GIN_MAX_SIGNALS};

/// The resources of a [`crate::DevComm`]; every rank passes the same.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requirements {
    /// User signals (indices `0..signals`).
    pub signals: u32,
    /// Counters (indices `0..counters`).
    pub counters: u32,
    /// World barriers (`Gin::barrier(index)`).
    pub world_barriers: u32,
    /// LSA barriers (`Gin::lsa_barrier(index)`).
    pub lsa_barriers: u32,
    /// Bytes of each window, in window order (the same layout on every rank).
    pub windows: Vec<u64>,
}

/// Why a device communicator cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum GinError {
    /// The requirements exceed what the device API addresses.
    #[error("GIN requirements: {0}")]
    Requirements(String),
    /// The ranks passed different requirements.
    #[error("GIN requirements differ between ranks: {0}")]
    Mismatch(String),
    /// A call's arguments do not fit its kernel or its device communicator.
    #[error("GIN call: {0}")]
    Call(String),
    /// Setting up the communicator failed.
    #[error(transparent)]
    Comm(#[from] weft_core::Error),
    /// A device call failed.
    #[error("GIN on rank {rank}: {source}")]
    Gpu {
        /// This rank.
        rank: usize,
        /// The failure.
        source: weft_gpu::GpuError,
    },
}

impl Requirements {
    /// Signal slots: the user's signals and one per barrier.
    pub fn signal_slots(&self) -> u32 {
        self.signals + self.world_barriers + self.lsa_barriers
    }

    /// Checks the requirements for a world of `world` ranks, `proxy_peers` of which go through
    /// the proxy (each takes a connection per signal slot plus one).
    pub fn check(&self, world: usize, proxy_peers: usize) -> Result<(), GinError> {
        let fail = |m: String| Err(GinError::Requirements(m));
        if world > GIN_MAX_RANKS {
            return fail(format!("{world} ranks (a device communicator covers at most {GIN_MAX_RANKS})"));
        }
        let slots = u64::from(self.signals) + u64::from(self.world_barriers) + u64::from(self.lsa_barriers);
        if slots > GIN_MAX_SIGNALS as u64 {
            return fail(format!(
                "{} signals + {} world barriers + {} LSA barriers = {slots} signal slots (at most {GIN_MAX_SIGNALS})",
                self.signals, self.world_barriers, self.lsa_barriers
            ));
        }
        let connections = proxy_peers as u64 * (slots + 1);
        let most = weft_types::FIFO_CONNECTION_BITS;
        if connections > 1u64 << most {
            return fail(format!(
                "{proxy_peers} proxy peers x ({slots} signal slots + 1) = {connections} proxy connections (at most {})",
                1u64 << most
            ));
        }
        if let Some(w) = self.windows.iter().position(|&b| b == 0) {
            return fail(format!("window {w} has 0 bytes"));
        }
        Ok(())
    }

    /// A stable encoding, compared between ranks.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + 8 * self.windows.len());
        for v in [self.signals, self.counters, self.world_barriers, self.lsa_barriers] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for w in &self.windows {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: &Requirements, world: usize, proxy: usize) -> String {
        match r.check(world, proxy) {
            Err(e) => e.to_string(),
            Ok(()) => String::new(),
        }
    }

    #[test]
    fn requirements_within_bounds_pass() {
        let r = Requirements { signals: 4, counters: 2, world_barriers: 1, lsa_barriers: 1, windows: vec![1 << 20] };
        assert!(r.check(8, 4).is_ok());
        assert_eq!(r.signal_slots(), 6);
    }

    #[test]
    fn too_many_signals_ranks_connections_or_an_empty_window_say_why() {
        let r = Requirements { signals: 62, world_barriers: 1, lsa_barriers: 1, ..Default::default() };
        assert!(err(&r, 2, 1).contains("= 64 signal slots (at most 63)"), "{}", err(&r, 2, 1));
        assert!(err(&Requirements::default(), 33, 0).contains("33 ranks"));
        let r = Requirements { signals: 40, ..Default::default() };
        assert!(err(&r, 32, 31).contains("proxy connections (at most 1024)"), "{}", err(&r, 32, 31));
        let r = Requirements { windows: vec![64, 0], ..Default::default() };
        assert!(err(&r, 2, 0).contains("window 1 has 0 bytes"));
    }

    #[test]
    fn the_encoding_tells_requirements_apart() {
        let a = Requirements { signals: 1, windows: vec![8], ..Default::default() };
        let b = Requirements { signals: 1, windows: vec![16], ..Default::default() };
        assert_ne!(a.encode(), b.encode());
        assert_eq!(a.encode(), a.clone().encode());
    }
}
