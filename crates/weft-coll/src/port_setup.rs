//! What the PortChannel algorithms (`port_ring`, `port_allpairs`) set up alike on their first
//! call: a scratch registered with the rank's [`PortProxy`] (one per `Collectives`, shared by
//! both: each proxy has its own polling thread), PortChannels to some peers in a device table,
//! and the launch state their blocks hand work over with (counters kept between launches).
//! Collective: every rank reaches the set-up at the same call (collective contract), and
//! channels are made pairwise in an order every pair of ranks agrees on. Also what their α-β
//! models share: a call is rounds.

use weft_core::{Communicator, RegisteredMemory};
use weft_gpu::{AllocKind, CaptureModeRelaxed, DeviceMemory, DevicePtr};
use weft_net::{PortChannel, PortProxy};
use weft_types::PortChannelDeviceHandle;

use crate::error::CollError;

/// Largest scratch: FIFO offsets are 32-bit.
pub(crate) const MAX_SCRATCH: u64 = 1 << 32;

/// Words of the launch state of a grid of one driver and `worker_blocks` workers (`PortGrid`):
/// the hand-off counter, then three per block (hand-offs, arrivals, rounds).
pub(crate) fn state_words(worker_blocks: u32) -> usize {
    1 + 3 * (worker_blocks as usize + 1)
}

/// The scratch, channel table and launch state of one PortChannel algorithm.
pub(crate) struct PortSetup {
    scratch: DevicePtr,
    table: DeviceMemory,
    state: DeviceMemory,
    // Dropped after the table: the channels keep the proxy, its FIFO and the scratch alive.
    _channels: Vec<PortChannel>,
    _scratch: RegisteredMemory,
}

impl PortSetup {
    /// `algorithm` (for errors) gets `scratch_bytes` of scratch registered with `proxy`, a table
    /// of `entries` channel handles (unused entries zero) and the state of `worker_blocks`
    /// workers (launches have `worker_blocks + 1` blocks).
    /// `links[i] = (peer, entry)`: a channel to `peer` goes into table entry `entry`; links are
    /// made in this order, which must meet every pair's common links in the same order on both
    /// ranks (the set-up is pairwise).
    pub(crate) fn new(
        comm: &Communicator,
        proxy: &PortProxy,
        algorithm: &str,
        scratch_bytes: u64,
        entries: usize,
        links: &[(usize, usize)],
        worker_blocks: u32,
    ) -> Result<Self, CollError> {
        let rank = comm.rank();
        let gpu = |source| CollError::Gpu { rank, source };
        if scratch_bytes > MAX_SCRATCH {
            return Err(CollError::Unsupported {
                rank,
                detail: format!(
                    "{algorithm} needs {scratch_bytes} bytes of scratch, over the 4 GiB a PortChannel memory may have"
                ),
            });
        }
        // A call captured into a graph may get here first: allocation, registration and the
        // channels' set-up touch other streams only, under a relaxed capture mode.
        let _relaxed = CaptureModeRelaxed::new().map_err(gpu)?;
        let scratch = comm.register(comm.alloc(scratch_bytes.max(16) as usize)?)?;
        let id = proxy.register(&scratch)?;
        let mut handles = vec![PortChannelDeviceHandle::default(); entries];
        let mut channels = Vec::with_capacity(links.len());
        for &(peer, entry) in links {
            let channel = proxy.channel(peer, id, None)?;
            handles[entry] = channel.device_handle();
            channels.push(channel);
        }
        let table = DeviceMemory::alloc(comm.device(), size_of_val(handles.as_slice()).max(16), AllocKind::Legacy)
            .map_err(gpu)?;
        if !handles.is_empty() {
            table.write_pod(0, &handles).map_err(gpu)?;
        }
        let words = state_words(worker_blocks);
        let state = DeviceMemory::alloc(comm.device(), 8 * words, AllocKind::Legacy).map_err(gpu)?;
        state.write_pod(0, &vec![0u64; words]).map_err(gpu)?;
        comm.barrier()?;
        Ok(Self { scratch: scratch.ptr(), table, state, _channels: channels, _scratch: scratch })
    }

    /// What the kernel takes of the set-up: the channel table, the scratch and the launch
    /// state, in this GPU's address space.
    pub(crate) fn kernel_buffers(&self) -> PortBuffers {
        PortBuffers { channels: self.table.ptr(), scratch: self.scratch, state: self.state.ptr() }
    }
}

/// The device addresses of a [`PortSetup`] a PortChannel AllReduce kernel takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PortBuffers {
    /// The channel table.
    pub(crate) channels: DevicePtr,
    /// The registered scratch.
    pub(crate) scratch: DevicePtr,
    /// The launch state.
    pub(crate) state: DevicePtr,
}

/// The pairs' set-up order of a channel to every peer: ascending peers. For any two ranks this
/// is the order of their unordered pairs sorted by (lower, higher), the same on both ends.
pub(crate) fn every_peer(rank: usize, ranks: usize) -> Vec<usize> {
    (0..ranks).filter(|&p| p != rank).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_met_in_one_global_order_of_pairs() {
        for ranks in 1..=8 {
            let order = |r: usize| -> Vec<(usize, usize)> {
                every_peer(r, ranks).into_iter().map(|p| (r.min(p), r.max(p))).collect()
            };
            for r in 0..ranks {
                let mine = order(r);
                assert!(mine.windows(2).all(|w| w[0] < w[1]), "sorted pairs");
                assert_eq!(mine.len(), ranks - 1);
            }
        }
        assert_eq!(state_words(32), 100);
    }
}
