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
use crate::port_setup::{PortSetup, every_peer};

/// Bytes of one slot: a round of a call moves at most this much per rank (larger calls take
/// several rounds, each a full exchange).
pub(crate) const SLOT_BYTES: u64 = 1 << 20;

/// Scratch bytes for `ranks` ranks: two sets (rounds alternate) of one slot per rank.
pub(crate) fn scratch_bytes(ranks: usize) -> u64 {
    if ranks < 2 { 0 } else { 2 * ranks as u64 * SLOT_BYTES }
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
    fn the_scratch_holds_two_sets_of_a_slot_per_rank_under_the_limit() {
        assert_eq!(scratch_bytes(1), 0);
        assert_eq!(scratch_bytes(4), 8 << 20);
        assert!(scratch_bytes(weft_types::MAX_RANKS) <= crate::port_setup::MAX_SCRATCH);
        assert!(SLOT_BYTES.is_multiple_of(16));
    }
}
