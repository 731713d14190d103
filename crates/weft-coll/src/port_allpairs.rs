//! The state of the AllReduce `port_allpairs` algorithm (kernel `weft_allreduce_port_allpairs`
//! in `device/kernels/coll/port_allpairs.cu`): every rank puts its input to every peer over
//! PortChannels and folds all inputs in rank order, one network crossing per call, so it is
//! the small-message AllReduce across nodes (`port_ring` takes the large ones). Set up on the
//! first call that uses it ([`PortSetup`]: a scratch of two sets of `ranks` slots registered
//! with the rank's proxy, a channel to every peer, the launch state).

use weft_core::Communicator;
use weft_gpu::DevicePtr;
use weft_net::PortProxy;
use weft_types::CollContext;

use crate::error::CollError;
use crate::params::PortAllPairsParams;
use crate::port_setup::{PortSetup, every_peer, rounds_us};

/// Bytes of one slot: a round of a call moves at most this much per rank (larger calls take
/// several rounds, each a full exchange).
pub(crate) const SLOT_BYTES: u64 = 1 << 20;

/// Scratch bytes for `ranks` ranks: two sets (rounds alternate) of one slot per rank.
pub(crate) fn scratch_bytes(ranks: usize) -> u64 {
    if ranks < 2 { 0 } else { 2 * ranks as u64 * SLOT_BYTES }
}

/// The α-β model's time, in µs, of a `port_allpairs` AllReduce of `bytes` when `remote_peers`
/// peers sit across `link` (the emulated NIC; the others are reached within the node, faster).
/// A call is rounds of at most [`SLOT_BYTES`]; in a round this rank's NIC serialises one message
/// of the round's bytes to every remote peer, and the last arrives `α` after it leaves; the
/// round ends when every peer's messages have arrived, which take as long.
pub fn alpha_beta_us(bytes: u64, remote_peers: usize, link: &weft_core::LinkModel) -> f64 {
    if remote_peers == 0 || bytes == 0 {
        return 0.0;
    }
    rounds_us(bytes, SLOT_BYTES, |round| link.message_time(round * remote_peers as u64))
}

/// The scratch, channels and launch state of `port_allpairs`.
pub(crate) struct PortAllPairs {
    /// Channel table: entry p leads to peer p (entry `rank` unused).
    setup: PortSetup,
}

impl PortAllPairs {
    /// Sets everything up on `proxy` for `worker_blocks` workers. Collective: every rank calls
    /// it at the same collective call with the same arguments.
    pub(crate) fn new(comm: &Communicator, proxy: &PortProxy, worker_blocks: u32) -> Result<Self, CollError> {
        let (rank, ranks) = (comm.rank(), comm.world_size());
        let links: Vec<(usize, usize)> = every_peer(rank, ranks).into_iter().map(|p| (p, p)).collect();
        let setup = PortSetup::new(comm, proxy, "port_allpairs", scratch_bytes(ranks), ranks, &links, worker_blocks)?;
        Ok(Self { setup })
    }

    /// The kernel's parameters for a call on `bytes` of `input` into `output` with context `c`.
    pub(crate) fn params(&self, c: CollContext, input: DevicePtr, output: DevicePtr, bytes: u64) -> PortAllPairsParams {
        let b = self.setup.kernel_buffers();
        let (channels, scratch, state, slot_bytes) = (b.channels, b.scratch, b.state, SLOT_BYTES);
        PortAllPairsParams { c, input, output, bytes, channels, scratch, slot_bytes, state }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alpha_beta_model_serialises_one_message_per_remote_peer_per_round() {
        use weft_core::LinkModel;
        // α = 5 µs, β = 25 GB/s: 2 remote peers, 1 MB in one round: 5 µs + 2 MB / 25 GB/s.
        let link = LinkModel::new(5.0, Some(25.0));
        let us = alpha_beta_us(1_000_000, 2, &link);
        assert!((us - (5.0 + 80.0)).abs() < 1e-3, "{us}");
        // Two rounds: a full slot, then the rest.
        let us = alpha_beta_us(SLOT_BYTES + 1000, 1, &link);
        let want = 2.0 * 5.0 + (SLOT_BYTES + 1000) as f64 / 25e3;
        assert!((us - want).abs() < 1e-3, "{us} vs {want}");
        assert_eq!(alpha_beta_us(1 << 20, 0, &link), 0.0);
    }

    #[test]
    fn the_scratch_holds_two_sets_of_a_slot_per_rank_under_the_limit() {
        assert_eq!(scratch_bytes(1), 0);
        assert_eq!(scratch_bytes(4), 8 << 20);
        assert!(scratch_bytes(weft_types::MAX_RANKS) <= crate::port_setup::MAX_SCRATCH);
        assert!(SLOT_BYTES.is_multiple_of(16));
    }
}
