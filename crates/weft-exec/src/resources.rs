//! One rank's executor state on the device, built collectively: the registered input stage,
//! output stage (two halves, unless launches start with a fence) and scratch (two halves under
//! LL packets), sized for the
//! executor's capacity, their peers' counterparts mapped here, a semaphore per link and
//! replica and a fence semaphore per peer, and the uploaded tables of [`ExecContext`]. Every
//! rank builds its side with the same plan, capacity and replicas.
//!
//! A plan with port links also gets this rank's proxy ([`PortProxy`]), its scratch registered
//! there, and a port channel per port link and replica, set up at both ends of each link.
//! A peer in another node is never mapped ([`peer_routes`]): the plan reaches it through port
//! channels alone, and its launch fence crosses on a port channel of its own.
//!
//! The buffer table ([`ExecBuffers`]) carries, per rank, that rank's scratch layout table
//! (uploaded here from the plan): a rank that writes or reads a chunk of a peer's scratch places
//! it by the peer's table, since ranks' scratch layouts differ.

use weft_core::{Communicator, RegisteredMemory, RemoteMemory, Semaphore};
use weft_gpu::{AllocKind, DeviceMemory, Pod};
use weft_net::{PortChannel, PortProxy, PortProxyConfig};
use weft_types::{
    EXEC_ENTRY_FENCE, EXEC_EXIT_FENCE, EXEC_PACKETS, EXEC_ROW_CACHE_ENTRY_BYTES, ExecBuffers, ExecContext, ExecOp,
    PortChannelDeviceHandle, SemaphoreDeviceHandle,
};

use crate::error::ExecError;
use crate::geometry::Sizing;
use crate::lower::{DevicePlan, DeviceRankPlan};
use crate::tables::{PeerRoute, RankTables, needs_entry_fence, packet_launches_chain, peer_routes};

/// Launch shape and buffer capacity of an executor's resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Largest input in bytes per rank.
    pub(crate) capacity: u64,
    /// Blocks of the grid.
    pub(crate) grid: u32,
    /// Replicas of every plan thread block.
    pub(crate) replicas: u32,
}

/// Every rank's `value`, in rank order (set-up only: a bootstrap exchange).
pub(crate) fn all_gather_u64(comm: &Communicator, value: u64) -> Result<Vec<u64>, ExecError> {
    let rank = comm.rank();
    let gathered = comm
        .bootstrap()
        .all_gather(&value.to_le_bytes())
        .map_err(|source| weft_core::Error::Bootstrap { rank, source })?;
    gathered
        .iter()
        .map(|b| b.as_slice().try_into().map(u64::from_le_bytes))
        .collect::<Result<_, _>>()
        .map_err(|_| ExecError::Unsupported(format!("rank {rank}: a peer sent a malformed set-up value")))
}

/// Bytes of a rank's input stage, output stage and scratch that carry any input of at most
/// `capacity` bytes, whatever the element size (at least 16 each).
pub fn buffer_lengths(plan: &DevicePlan, rank: usize, capacity: u64) -> [u64; 3] {
    let blocks = u64::from(plan.input_chunks / plan.size_classes.max(1)).max(1);
    let mut lengths = [16u64; 3];
    let Some(rp) = plan.ranks.get(rank) else { return lengths };
    for elem in [1u64, 2, 4, 8] {
        let count = capacity / elem / blocks * blocks;
        if let Some(sizing) = Sizing::new(plan, count) {
            for (l, need) in lengths.iter_mut().zip(sizing.padded_lengths(rp, elem)) {
                *l = (*l).max(need);
            }
        }
    }
    lengths
}

/// Bytes between the two halves of every rank's scratch under packets: the largest rank's
/// scratch, so that every rank computes the same from the plan (ranks' scratch layouts differ).
pub fn packet_scratch_flip(plan: &DevicePlan, capacity: u64) -> u64 {
    (0..plan.ranks.len()).map(|r| buffer_lengths(plan, r, capacity)[2]).max().unwrap_or(16).next_multiple_of(16)
}

/// Whether the plan's launches fence on entry: LL packets need none where every receiver of a
/// launch reaches back to its senders (see `packet_launches_chain`).
pub(crate) fn fences_on_entry(plan: &DevicePlan) -> bool {
    needs_entry_fence(plan) || (plan.packets && !packet_launches_chain(plan))
}

/// Bytes between the two halves of `rank`'s output stage and of its scratch for an executor
/// of `capacity` (0: one half), 16-byte aligned. Launches that do not fence on entry alternate
/// output-stage halves, since a fast peer's next launch may write a rank's output stage while
/// the rank still copies its last one out; under LL packets peers never write a rank's output
/// stage (packets land in scratch), so one half serves. Packet scratch always has two halves
/// (a launch's packets carry its flag and land in its half).
pub(crate) fn stage_flips(plan: &DevicePlan, rank: usize, capacity: u64) -> (u64, u64) {
    let alternate_outputs = !fences_on_entry(plan) && !plan.packets;
    let output = if alternate_outputs { buffer_lengths(plan, rank, capacity)[1].next_multiple_of(16) } else { 0 };
    let scratch = if plan.packets { packet_scratch_flip(plan, capacity) } else { 0 };
    (output, scratch)
}

/// A table copied to the device as it is.
/// A rank's operations laid out at a stride of `max_tb_ops` per thread block (zero past a thread
/// block's own), and each thread block's count: the kernel fetches a block's operations and
/// their count at once.
pub fn strided_ops(rp: &DeviceRankPlan, max_tb_ops: u32) -> (Vec<ExecOp>, Vec<u32>) {
    let stride = max_tb_ops as usize;
    let threadblocks = rp.tb_starts.len() - 1;
    let mut ops = vec![ExecOp::default(); threadblocks * stride];
    let mut counts = Vec::with_capacity(threadblocks);
    for (tb, w) in rp.tb_starts.windows(2).enumerate() {
        let own = &rp.ops[w[0] as usize..w[1] as usize];
        ops[tb * stride..][..own.len()].copy_from_slice(own);
        counts.push(own.len() as u32);
    }
    (ops, counts)
}

trait Upload {
    fn bytes(&self) -> usize;
    fn write(&self, memory: &DeviceMemory) -> Result<(), weft_gpu::GpuError>;
}

impl<T: Pod> Upload for Vec<T> {
    fn bytes(&self) -> usize {
        size_of_val(self.as_slice())
    }
    fn write(&self, memory: &DeviceMemory) -> Result<(), weft_gpu::GpuError> {
        memory.write_pod(0, self)
    }
}

/// See the module documentation. Dropping it releases everything the context points to.
pub(crate) struct ExecResources {
    /// The context with every table filled in (the call's fields zero).
    pub(crate) context: ExecContext,
    /// Registered input stage, output stage and scratch (kept alive for the context).
    _buffers: [RegisteredMemory; 3],
    /// Bytes of each a launch may use: the whole buffer, but one half of a two-half output stage.
    pub(crate) usable: [u64; 3],
    _remote: Vec<RemoteMemory>,
    _semaphores: Vec<Semaphore>,
    _tables: Vec<DeviceMemory>,
    // Dropped after the tables: the channels keep the proxy, its FIFO and the scratch alive.
    _port_channels: Vec<PortChannel>,
    _proxy: Option<PortProxy>,
}

impl ExecResources {
    pub(crate) fn new(
        comm: &Communicator,
        plan: &DevicePlan,
        tables: &RankTables,
        shape: Shape,
    ) -> Result<Self, ExecError> {
        let (rank, ranks) = (comm.rank(), comm.world_size());
        let gpu = |source| ExecError::Gpu { rank, source };
        let rp = &plan.ranks[rank];
        // LL packets need no exit fence, and no entry fence where every receiver of a launch
        // reaches back to its senders (see `packet_launches_chain`).
        let entry_fence = fences_on_entry(plan);
        let mut lengths = buffer_lengths(plan, rank, shape.capacity);
        let (output_flip, scratch_flip) = stage_flips(plan, rank, shape.capacity);
        // A rank places a peer's half by its own flip: every rank's must be the same (same plan
        // and capacity, which the caller promises; checked, as a mismatch corrupts silently).
        let differ = |flip: u64| Ok::<_, ExecError>(all_gather_u64(comm, flip)?.iter().any(|&f| f != flip));
        if differ(output_flip)? || differ(scratch_flip)? {
            return Err(ExecError::Unsupported(format!(
                "rank {rank}: the ranks' output stages or scratch differ in size (plan {} with different capacities?)",
                plan.name
            )));
        }
        let usable = lengths;
        lengths[1] += output_flip;
        if plan.packets {
            lengths[2] = 2 * scratch_flip;
        }
        let mut buffers = Vec::with_capacity(3);
        for (i, len) in lengths.into_iter().enumerate() {
            let len = usize::try_from(len).map_err(|_| ExecError::Unsupported(format!("a {len}-byte buffer")))?;
            let memory = comm.alloc(len)?;
            // Packets are told apart by their flag alone: a fresh allocation may hold a freed
            // buffer's packets, whose flags (small launch numbers) the first launches expect.
            // Zeroed before the set-up's closing barrier, so before any peer's launch.
            if plan.packets && i == 2 {
                memory.fill(0, len, 0).map_err(gpu)?;
            }
            buffers.push(comm.register(memory)?);
        }
        let [input, output, scratch]: [RegisteredMemory; 3] =
            buffers.try_into().map_err(|_| ExecError::Unsupported("buffer registration".into()))?;
        let mut uploaded = Vec::new();
        let mut upload = |values: &dyn Upload| -> Result<u64, ExecError> {
            let memory = DeviceMemory::alloc(comm.device(), values.bytes().max(16), AllocKind::Legacy).map_err(gpu)?;
            values.write(&memory).map_err(gpu)?;
            let ptr = memory.ptr();
            uploaded.push(memory);
            Ok(ptr)
        };
        // Every rank's scratch layout, for the ranks this one may address (itself and its peers).
        let mut table = vec![ExecBuffers::default(); ranks];
        for (r, entry) in table.iter_mut().enumerate() {
            if r == rank || tables.peer_mask & (1 << r) != 0 {
                entry.scratch_counts = upload(&plan.ranks[r].scratch_class_counts)?;
            }
        }
        table[rank] = ExecBuffers { input: input.ptr(), output: output.ptr(), scratch: scratch.ptr(), ..table[rank] };
        let (stride, replicas) = (tables.link_stride as usize, shape.replicas as usize);
        let mut links = vec![SemaphoreDeviceHandle::default(); ranks * stride * replicas];
        let mut fences = vec![SemaphoreDeviceHandle::default(); ranks];
        let mut port_fences = vec![PortChannelDeviceHandle::default(); ranks];
        let (mut remote, mut semaphores) = (Vec::new(), Vec::new());
        // The proxy and the scratch's index in it, when this rank has port links.
        let proxy = if rp.ports.is_empty() {
            None
        } else {
            let proxy = PortProxy::new(comm, PortProxyConfig::default())?;
            let id = proxy.register(&scratch)?;
            Some((proxy, id))
        };
        let port_stride = tables.port_stride as usize;
        let mut ports = vec![PortChannelDeviceHandle::default(); ranks * port_stride * replicas];
        let mut port_channels = Vec::new();
        let routes = peer_routes(plan, rank, tables, |p| comm.topology().same_node(p))?;
        let mut port_peer_mask = 0u32;
        // Pairwise calls in one order on both sides: peers ascending; per peer, over memory the
        // three buffers and the fence, over a port the fence's channel (both sides route a pair
        // alike); then the links of the pair by channel and replica (the pair's channel sets are
        // equal: a wait on one side is a signal on the other; a port-only pair has none), then
        // its port links by channel and replica (lowering lists them at both ends).
        for (peer, route) in routes {
            match (route, &proxy) {
                (PeerRoute::Memory, _) => {
                    let [i, o, s] = [&input, &output, &scratch].map(|b| comm.connect_memory(peer, b));
                    let (i, o, s) = (i?, o?, s?);
                    table[peer] = ExecBuffers { input: i.ptr(), output: o.ptr(), scratch: s.ptr(), ..table[peer] };
                    remote.extend([i, o, s]);
                    let fence = comm.semaphore(peer, None)?;
                    fences[peer] = fence.device_handle();
                    semaphores.push(fence);
                }
                (PeerRoute::Port, Some((proxy, id))) => {
                    let fence = proxy.channel(peer, *id, None)?;
                    port_fences[peer] = fence.device_handle();
                    port_channels.push(fence);
                    port_peer_mask |= 1 << peer;
                }
                // `peer_routes` routes over a port only peers of port links, and the proxy
                // exists exactly when `rp.ports` is not empty.
                (PeerRoute::Port, None) => {
                    return Err(ExecError::Unsupported(format!("rank {rank}: peer {peer} has no port link")));
                }
            }
            for &(_, channel) in rp.links.iter().filter(|(p, _)| *p as usize == peer) {
                for replica in 0..replicas {
                    let s = comm.semaphore(peer, None)?;
                    links[tables.link_index(peer as u32, channel) * replicas + replica] = s.device_handle();
                    semaphores.push(s);
                }
            }
            let Some((proxy, id)) = &proxy else { continue };
            for &(_, channel) in rp.ports.iter().filter(|(p, _)| *p as usize == peer) {
                for replica in 0..replicas {
                    let c = proxy.channel(peer, *id, None)?;
                    ports[tables.port_index(peer as u32, channel) * replicas + replica] = c.device_handle();
                    port_channels.push(c);
                }
            }
        }
        let plan_blocks = (rp.tb_starts.len() - 1) * replicas;
        let state = vec![0u64; 3 * shape.grid as usize + 2 + plan_blocks];
        let row_cache = upload(&vec![0u8; 2 * plan_blocks * EXEC_ROW_CACHE_ENTRY_BYTES])?;
        let (ops, tb_ops) = strided_ops(rp, tables.max_tb_ops);
        let (ops, tb_ops, tb_rows) = (upload(&ops)?, upload(&tb_ops)?, upload(&tables.tb_rows)?);
        let (written, buffers_table) = (upload(&tables.written)?, upload(&table)?);
        let (links_table, fences_table, state) = (upload(&links)?, upload(&fences)?, upload(&state)?);
        let ports_table = if ports.is_empty() { 0 } else { upload(&ports)? };
        let port_fences_table = if port_peer_mask == 0 { 0 } else { upload(&port_fences)? };
        let context = ExecContext {
            ops,
            tb_ops,
            written,
            buffers: buffers_table,
            links: links_table,
            ports: ports_table,
            fences: fences_table,
            state,
            row_cache,
            tb_rows,
            wait: comm.wait_context(rank, None),
            rank: rank as u32,
            ranks: ranks as u32,
            threadblocks: (rp.tb_starts.len() - 1) as u32,
            link_stride: tables.link_stride,
            size_classes: plan.size_classes,
            input_chunks: plan.input_chunks,
            output_chunks: plan.output_chunks,
            plan_barriers: tables.plan_barriers,
            peer_mask: tables.peer_mask,
            port_fences: port_fences_table,
            port_peer_mask,
            replicas: shape.replicas,
            active_replicas: shape.replicas,
            max_tb_ops: tables.max_tb_ops,
            port_stride: tables.port_stride,
            output_flip,
            scratch_flip,
            flags: if plan.packets { EXEC_PACKETS } else { EXEC_EXIT_FENCE }
                | if entry_fence { EXEC_ENTRY_FENCE } else { 0 },
            ..ExecContext::default()
        };
        comm.barrier()?;
        Ok(Self {
            context,
            _buffers: [input, output, scratch],
            usable,
            _remote: remote,
            _semaphores: semaphores,
            _tables: uploaded,
            _port_channels: port_channels,
            _proxy: proxy.map(|(p, _)| p),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::lower;
    use crate::tests::shipped;

    #[test]
    fn strided_operations_keep_every_thread_block_s_own_in_order() {
        for plan in shipped() {
            let lowered = lower(&plan).unwrap();
            for (r, rp) in lowered.ranks.iter().enumerate() {
                let stride = crate::tables::rank_tables(&lowered, r).unwrap().max_tb_ops;
                let (ops, counts) = strided_ops(rp, stride);
                for (tb, w) in rp.tb_starts.windows(2).enumerate() {
                    let own = &rp.ops[w[0] as usize..w[1] as usize];
                    let at = &ops[tb * stride as usize..][..stride as usize];
                    assert_eq!(counts[tb] as usize, own.len());
                    assert_eq!(&at[..own.len()], own, "{} rank {r} thread block {tb}", plan.name);
                    assert!(at[own.len()..].iter().all(|op| *op == ExecOp::default()));
                }
            }
        }
    }

    #[test]
    fn the_buffers_carry_every_count_and_element_size_up_to_the_capacity() {
        for plan in shipped() {
            let lowered = lower(&plan).unwrap();
            let blocks = u64::from(plan.input_chunks / plan.size_classes);
            let capacity = 4096 + 7;
            for r in 0..plan.ranks.len() {
                let have = buffer_lengths(&lowered, r, capacity);
                for elem in [1u64, 2, 4, 8] {
                    for count in (0..=capacity / elem).filter(|c| c % blocks == 0).step_by(37) {
                        let need = Sizing::new(&lowered, count).unwrap().padded_lengths(&lowered.ranks[r], elem);
                        assert!(need.iter().zip(&have).all(|(n, h)| n <= h), "{} rank {r} {count}x{elem}", plan.name);
                    }
                }
            }
        }
    }
}
