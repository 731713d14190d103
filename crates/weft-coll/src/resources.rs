//! The communication state every collective shares: scratch and packet buffers registered with
//! every peer, channels and (peer, block) semaphores with their device tables, the per-block LL
//! flags and the per-pair ones of send/receive over LL. Built once per communicator
//! (collectively); [`Resources::context`] (and, for `weft_p2p_ll`, [`Resources::ll_pairs`]) is
//! what kernels receive.

use weft_core::{Communicator, MemoryChannel, MemoryChannelConfig, RegisteredMemory, Semaphore};
use weft_gpu::{AllocKind, DeviceMemory};
use weft_types::{CollContext, LlPairs, MAX_RANKS, MemoryChannelDeviceHandle, SemaphoreDeviceHandle};

use crate::choice::Ll128Room;
use crate::config::CollConfig;
use crate::error::CollError;

/// Packet buffer geometry: the collective LL region (two parity halves of `2 * ranks` slots,
/// then the LL tokens), then the pair region of send/receive over LL (two parity halves of one
/// slot per sender, then the pairs' tokens). The regions are apart because their flags are: a
/// collective launch and a pair launch never wait for each other's tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PacketLayout {
    /// Bytes of one slot (LL16 packets: twice the payload).
    pub(crate) slot_bytes: u64,
    /// Bytes of one half.
    pub(crate) half_bytes: u64,
    /// Offset of the tokens (`u32[ll_lanes(config)][ranks]`: the LL16 blocks', then the LL128
    /// blocks').
    pub(crate) token_offset: u64,
    /// Offset of the pair region (16-byte aligned, as every packet).
    pub(crate) pair_offset: u64,
    /// Bytes of one sender's slot of the pair region: `p2p_ll_bytes` as LL16 packets.
    pub(crate) pair_slot_bytes: u64,
    /// Offset of the pairs' tokens (`u32[parts][ranks]`, see [`ll_pair_parts`]).
    pub(crate) pair_token_offset: u64,
    /// Offset of the LL128 region (128-aligned): two parity halves of `2 * ranks` slots of
    /// `ll128_slot_bytes`. LL128 lines have a region of their own because an LL16 reader could
    /// take a leftover line's data words for a packet's flags.
    pub(crate) ll128_offset: u64,
    /// Bytes of one LL128 slot: `slot_bytes` rounded up to 128.
    pub(crate) ll128_slot_bytes: u64,
    /// Bytes of one half of the LL128 region.
    pub(crate) ll128_half_bytes: u64,
    /// Whole buffer.
    pub(crate) total_bytes: u64,
}

impl PacketLayout {
    pub(crate) fn new(config: &CollConfig, ranks: usize) -> Self {
        let ranks64 = ranks as u64;
        let slot_bytes = (config.ll_slot_bytes.div_ceil(8) * 16) as u64;
        let half_bytes = 2 * ranks64 * slot_bytes;
        let token_offset = 2 * half_bytes;
        let pair_offset = (token_offset + 4 * u64::from(ll_lanes(config)) * ranks64).next_multiple_of(16);
        let pair_slot_bytes = (config.p2p_ll_bytes.div_ceil(8) * 16) as u64;
        let pair_token_offset = pair_offset + 2 * ranks64 * pair_slot_bytes;
        let pair_end = pair_token_offset + 4 * u64::from(ll_pair_parts(config.ll_blocks, ranks)) * ranks64;
        let ll128_offset = pair_end.next_multiple_of(128);
        let ll128_slot_bytes = slot_bytes.next_multiple_of(128);
        let ll128_half_bytes = 2 * ranks64 * ll128_slot_bytes;
        let total_bytes = ll128_offset + 2 * ll128_half_bytes;
        Self {
            slot_bytes,
            half_bytes,
            token_offset,
            pair_offset,
            pair_slot_bytes,
            pair_token_offset,
            ll128_offset,
            ll128_slot_bytes,
            ll128_half_bytes,
            total_bytes,
        }
    }

    /// What the LL128 algorithms carry with this layout: a slot's or a half's whole lines of
    /// the LL128 region, 120 bytes per 128.
    pub(crate) fn ll128_room(&self) -> Ll128Room {
        let payload = |bytes: u64| usize::try_from(bytes / 128 * 120).unwrap_or(usize::MAX);
        Ll128Room { slot: payload(self.ll128_slot_bytes), half: payload(self.ll128_half_bytes), nvlink: false }
    }
}

/// Lanes of the collective LL launches (each a flag and a row of tokens): one per LL16 block,
/// then one per LL128 block (`CollContext::ll128_lane` is the first of those).
pub(crate) fn ll_lanes(config: &CollConfig) -> u32 {
    config.ll_blocks + config.ll128_blocks
}

/// Blocks per (peer, direction) of a send/receive launch over LL packets, the parts a message is
/// dealt into: the LL grid shared by the `2 * ranks` directions, at least one each.
pub(crate) fn ll_pair_parts(ll_blocks: u32, ranks: usize) -> u32 {
    (ll_blocks / (2 * ranks as u32)).max(1)
}

/// Blocks per (peer, direction) of a send/receive launch: both directions of every pair fit
/// the semaphore table's `hb_blocks` per peer (given at least 2), and with at least `2 * ranks`
/// HB blocks so does the whole grid.
pub(crate) fn p2p_blocks(hb_blocks: u32, ranks: usize) -> u32 {
    (hb_blocks / (2 * ranks as u32)).max(1)
}

/// Blocks of a send/receive launch: `weft_p2p` runs `2 * ranks` directions of `p2p_blocks`
/// blocks each, and a direction without its blocks never runs, so its peer waits for it
/// forever. Never fewer than `hb_blocks`, the grid of every configuration where the directions
/// fit it (the blocks past them return at once).
pub(crate) fn p2p_grid(hb_blocks: u32, ranks: usize) -> u32 {
    hb_blocks.max(2 * ranks as u32 * p2p_blocks(hb_blocks, ranks))
}

/// The semaphore a `weft_p2p` block takes (mirrors the kernel), with `k = p2p_blocks`: block
/// `j < k` of the direction from the lower rank of a pair to the higher uses `j`, of the other
/// direction `k + j`; a wide direction's blocks `j ≥ k` use `2k + (j − k)` and `3k + (j − k)`.
/// So the two directions never share one, whichever of them is wide.
#[cfg(test)]
fn p2p_semaphore(k: u32, from_lower: bool, j: u32) -> u32 {
    let side = if from_lower { 0 } else { k };
    if j < k { side + j } else { 2 * k + side + (j - k) }
}

/// `CollContext::p2p_wide_mib` of `p2p_wide_bytes`: whole MiB, rounded up (0: never).
pub(crate) fn p2p_wide_mib(p2p_wide_bytes: usize) -> u32 {
    u32::try_from(p2p_wide_bytes.div_ceil(1 << 20)).unwrap_or(u32::MAX)
}

/// Blocks of a `weft_p2p` launch moving `bytes` in all: twice [`p2p_grid`] when they reach
/// `p2p_wide_bytes` (some direction may: a direction is at most the launch), so that a wide
/// direction finds its `2 * p2p_blocks` blocks (`weft_p2p` reads the width off its grid). Both
/// ends of a wide direction launch wide grids, each having at least its bytes. Only where its
/// semaphores, `2 * 2 * p2p_blocks` per peer, fit the table's `hb_blocks` per peer (always from
/// 2 ranks on but at the smallest HB grids); a narrow grid never leaves a direction room for
/// twice its blocks, so the kernel then stays narrow too.
pub(crate) fn p2p_launch_grid(hb_blocks: u32, ranks: usize, bytes: usize, p2p_wide_bytes: usize) -> u32 {
    let room = 4 * p2p_blocks(hb_blocks, ranks) <= hb_blocks;
    let wide = room && p2p_wide_bytes != 0 && bytes >= p2p_wide_mib(p2p_wide_bytes) as usize * (1 << 20);
    p2p_grid(hb_blocks, ranks) * if wide { 2 } else { 1 }
}

/// Most ranks of a communicator whose ranks span nodes: the plans' and the device API's limit.
pub(crate) const MAX_CROSS_NODE_RANKS: usize = weft_types::EXEC_MAX_RANKS;

/// Whether a communicator whose rank r is in node `nodes[r]` has a rank count the collectives
/// handle: at most [`MAX_RANKS`] on one node (the NVLink kernels' per-rank arrays); across
/// nodes at most [`MAX_CROSS_NODE_RANKS`], [`MAX_RANKS`] of them in any one node (only the
/// AllReduces that cross nodes run there; `Algorithm::available` says which).
pub(crate) fn check_rank_count(nodes: &[usize]) -> Result<(), String> {
    let ranks = nodes.len();
    let mut per_node = std::collections::BTreeMap::new();
    for &n in nodes {
        *per_node.entry(n).or_insert(0usize) += 1;
    }
    let busiest = per_node.values().copied().max().unwrap_or(0);
    if per_node.len() <= 1 && ranks > MAX_RANKS {
        return Err(format!("{ranks} ranks on one node (at most {MAX_RANKS})"));
    }
    if busiest > MAX_RANKS {
        return Err(format!("{busiest} ranks on one node of {} (at most {MAX_RANKS} per node)", per_node.len()));
    }
    if ranks > MAX_CROSS_NODE_RANKS {
        return Err(format!("{ranks} ranks across {} nodes (at most {MAX_CROSS_NODE_RANKS})", per_node.len()));
    }
    Ok(())
}

/// Why `config` cannot run on `ranks` ranks, if it cannot.
fn check_shapes(config: &CollConfig, ranks: usize) -> Result<(), String> {
    let chunk_ok =
        config.chunk_bytes >= 32 * ranks * config.hb_blocks as usize && config.chunk_bytes.is_multiple_of(16);
    if config.ll_blocks == 0 || config.ll128_blocks == 0 || config.hb_blocks == 0 || !chunk_ok {
        return Err(format!("collective configuration {config:?}"));
    }
    // Send/receive takes a semaphore per (peer, block) for each direction of a pair.
    if 2 * p2p_blocks(config.hb_blocks, ranks) > config.hb_blocks {
        return Err(format!(
            "{} HB blocks (WEFT_HB_BLOCKS): send/receive needs at least 2 (a semaphore per peer and direction)",
            config.hb_blocks
        ));
    }
    if !(1..=crate::config::MAX_PORT_RING_BLOCKS).contains(&config.port_ring_blocks) {
        return Err(format!("collective configuration {config:?}"));
    }
    // Whole warps: the LL128 kernels vote per warp.
    if config.ll_threads < 32 || !config.ll_threads.is_multiple_of(32) {
        return Err(format!("{} LL threads: a positive multiple of 32", config.ll_threads));
    }
    Ok(())
}

/// Registered buffers and device tables of one rank; see the module documentation.
pub(crate) struct Resources {
    context: CollContext,
    /// What the LL128 algorithms carry: none unless every packet buffer address (this rank's,
    /// the peers' mappings) is 128-aligned, as LL128 lines need.
    ll128_room: Ll128Room,
    _scratch: RegisteredMemory,
    _packets: RegisteredMemory,
    _channel_table: DeviceMemory,
    _semaphore_table: DeviceMemory,
    _flags: DeviceMemory,
    ll_pairs: LlPairs,
    _pair_flags: DeviceMemory,
    _channels: Vec<MemoryChannel>,
    _semaphores: Vec<Semaphore>,
    /// The first peer of another node (host or virtual node), which no kernel maps, and why.
    unreachable: Option<(usize, String)>,
}

/// Whether this rank's GPU reaches every other GPU of its host that a rank runs on over NVLink
/// (NVML; `false` where NVML cannot say). Ranks on other hosts never run LL kernels with it.
fn nvlink_to_every_peer(comm: &Communicator) -> bool {
    let topology = comm.topology();
    let Ok(own) = comm.device().pci_bus_id() else { return false };
    let peers = topology.peers().iter().filter(|p| p.rank != comm.rank() && topology.same_host(p.rank));
    weft_gpu::nvml::nvlink_to_all(&own, peers.map(|p| p.pci_bus_id.as_str()))
}

impl Resources {
    /// Allocates, registers and connects everything. Collective: every rank calls it with the
    /// same configuration.
    pub(crate) fn new(comm: &Communicator, config: &CollConfig) -> Result<Self, CollError> {
        let rank = comm.rank();
        let ranks = comm.world_size();
        let gpu = |source| CollError::Gpu { rank, source };
        let nodes: Vec<usize> = (0..ranks).map(|r| comm.topology().node(r).unwrap_or_default()).collect();
        check_rank_count(&nodes).map_err(|detail| CollError::Unsupported { rank, detail })?;
        // The shapes the NVLink kernels need, which run on at most MAX_RANKS ranks: more span
        // nodes, where only the AllReduces that cross nodes run.
        check_shapes(config, ranks.min(MAX_RANKS)).map_err(|detail| CollError::InvalidArgument { rank, detail })?;
        let p2p = p2p_blocks(config.hb_blocks, ranks);
        // The two-shot HB kernel keeps `ranks` shards of a round in the first half of the
        // scratch: make the round a multiple of 16 x ranks.
        let chunk_bytes = config.chunk_bytes - config.chunk_bytes % (16 * ranks);
        let scratch = comm.register(comm.alloc(2 * chunk_bytes)?)?;
        // Beyond MAX_RANKS the ranks span nodes and no LL kernel runs: the smallest slots, not
        // a slot per rank of the configured size (about 130 MiB a rank at 16 ranks).
        let layout = if ranks > MAX_RANKS {
            PacketLayout::new(&CollConfig { ll_slot_bytes: 8, p2p_ll_bytes: 8, ..config.clone() }, ranks)
        } else {
            PacketLayout::new(config, ranks)
        };
        let packets = comm.alloc(layout.total_bytes as usize)?;
        packets.fill(0, packets.len(), 0).map_err(gpu)?;
        let packets = comm.register(packets)?;

        let blocks = config.hb_blocks as usize;
        let mut channels = Vec::new();
        let mut channel_handles = vec![MemoryChannelDeviceHandle::default(); ranks];
        let mut semaphores = Vec::new();
        let mut semaphore_handles = vec![SemaphoreDeviceHandle::default(); ranks * blocks];
        let mut unreachable = None;
        for peer in (0..ranks).filter(|&p| p != rank) {
            // Peers of other nodes get no channel: only PortChannels (port_ring) reach them.
            // Decided by the topology, which every rank sees the same, so both sides of a pair
            // skip it together; a peer of this node that cannot be mapped still fails here.
            if !comm.topology().same_node(peer) {
                let reason = comm.can_map(peer).err().unwrap_or_else(|| "another node".into());
                unreachable.get_or_insert((peer, reason));
                continue;
            }
            let channel = comm.memory_channel(peer, &scratch, Some(&packets), MemoryChannelConfig::default())?;
            channel_handles[peer] = channel.device_handle();
            channels.push(channel);
            for b in 0..blocks {
                let s = comm.semaphore(peer, None)?;
                semaphore_handles[peer * blocks + b] = s.device_handle();
                semaphores.push(s);
            }
        }
        let device = comm.device();
        let table = |bytes: usize| DeviceMemory::alloc(device, bytes.max(1), AllocKind::Legacy).map_err(gpu);
        let channel_table = table(size_of_val(channel_handles.as_slice()))?;
        channel_table.write_pod(0, &channel_handles).map_err(gpu)?;
        let semaphore_table = table(size_of_val(semaphore_handles.as_slice()))?;
        semaphore_table.write_pod(0, &semaphore_handles).map_err(gpu)?;
        let flags = table(4 * ll_lanes(config) as usize)?;
        flags.fill(0, flags.len(), 0).map_err(gpu)?;
        let parts = ll_pair_parts(config.ll_blocks, ranks);
        let pair_flags = table(4 * 2 * ranks * parts as usize)?;
        pair_flags.fill(0, pair_flags.len(), 0).map_err(gpu)?;
        let ll_pairs = LlPairs {
            flags: pair_flags.ptr(),
            offset: layout.pair_offset,
            slot_bytes: layout.pair_slot_bytes,
            half_bytes: ranks as u64 * layout.pair_slot_bytes,
            token_offset: layout.pair_token_offset,
            parts,
            reserved: 0,
        };
        // LL128 lines must start on 128-byte boundaries in this rank's buffer and in every
        // peer's mapping of it (allocations are, so this only guards the assumption).
        let ll128_offset = u32::try_from(layout.ll128_offset).map_err(|_| CollError::InvalidArgument {
            rank,
            detail: format!("packet buffer of {} bytes (WEFT_LL_SLOT_BYTES too large)", layout.total_bytes),
        })?;
        let aligned_here = std::iter::once(packets.ptr())
            .chain(channel_handles.iter().map(|h| h.remote_packet_buffer).filter(|&p| p != 0))
            .all(|p| p.is_multiple_of(128));
        // Every rank must make the same choice (a forced ll128 refused on one rank only would
        // leave its peers' kernels waiting): aligned, and NVLink to every peer, on every rank.
        // Also the closing barrier.
        let votes = comm
            .bootstrap()
            .all_gather(&[u8::from(aligned_here), u8::from(nvlink_to_every_peer(comm))])
            .map_err(|source| weft_core::Error::Bootstrap { rank, source })?;
        let every = |i: usize| votes.iter().all(|v| v.get(i) == Some(&1));
        let ll128_room =
            if every(0) { Ll128Room { nvlink: every(1), ..layout.ll128_room() } } else { Ll128Room::default() };
        let context = CollContext {
            channels: channel_table.ptr(),
            semaphores: semaphore_table.ptr(),
            scratch: scratch.ptr(),
            chunk_bytes: chunk_bytes as u64,
            packets: packets.ptr(),
            packet_half_bytes: layout.half_bytes,
            packet_slot_bytes: layout.slot_bytes,
            token_offset: layout.token_offset,
            flags: flags.ptr(),
            rank: rank as u32,
            ranks: ranks as u32,
            hb_blocks: config.hb_blocks,
            p2p_blocks: p2p,
            ll128_offset,
            ll128_lane: config.ll_blocks,
            p2p_wide_mib: p2p_wide_mib(config.p2p_wide_bytes),
            // Per call: `launch` sets the call's PreMulSum scalar in its copy.
            ..CollContext::default()
        };
        Ok(Self {
            context,
            ll128_room,
            _scratch: scratch,
            _packets: packets,
            _channel_table: channel_table,
            _semaphore_table: semaphore_table,
            _flags: flags,
            ll_pairs,
            _pair_flags: pair_flags,
            _channels: channels,
            _semaphores: semaphores,
            unreachable,
        })
    }

    /// The first peer no kernel can map and why; `None`: every peer is in this node.
    pub(crate) fn unreachable(&self) -> Option<&(usize, String)> {
        self.unreachable.as_ref()
    }

    /// What every collective kernel receives. Its addresses stay valid while `self` lives.
    pub(crate) fn context(&self) -> CollContext {
        self.context
    }

    /// What `weft_p2p_ll` receives besides the context. Its addresses stay valid while `self`
    /// lives.
    pub(crate) fn ll_pairs(&self) -> LlPairs {
        self.ll_pairs
    }

    /// What the LL128 algorithms carry here (see [`Ll128Room`]).
    pub(crate) fn ll128_room(&self) -> Ll128Room {
        self.ll128_room
    }

    /// The largest direction `weft_p2p_ll` can carry: the payload of a pair slot (LL16 packets
    /// carry half their bytes).
    pub(crate) fn pair_payload(&self) -> u64 {
        self.ll_pairs.slot_bytes / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_than_8_ranks_only_across_nodes_with_at_most_8_in_each() {
        let nodes = |per: &[usize]| -> Vec<usize> { per.iter().enumerate().flat_map(|(n, &k)| vec![n; k]).collect() };
        assert!(check_rank_count(&nodes(&[8])).is_ok());
        assert!(check_rank_count(&nodes(&[1])).is_ok());
        let one = check_rank_count(&nodes(&[9])).unwrap_err();
        assert!(one.contains("9 ranks on one node"), "{one}");
        // 2 nodes of 8 and 4 of 8: the multi-node shapes of 8-GPU servers.
        assert!(check_rank_count(&nodes(&[8, 8])).is_ok());
        assert!(check_rank_count(&nodes(&[8, 8, 8, 8])).is_ok());
        assert!(check_rank_count(&nodes(&[3, 5, 8])).is_ok());
        let crowded = check_rank_count(&nodes(&[8, 9])).unwrap_err();
        assert!(crowded.contains("9 ranks on one node of 2"), "{crowded}");
        let many = check_rank_count(&nodes(&[8; 5])).unwrap_err();
        assert!(many.contains("40 ranks across 5 nodes"), "{many}");
    }

    #[test]
    fn the_ll128_region_comes_last_128_aligned_and_holds_what_the_fit_checks_admit() {
        for (slot, ranks) in [(512 << 10, 2), (512 << 10, 8), (8, 2), (24, 3), (1000, 5), (4096, 7), (72, 1)] {
            let config = CollConfig { ll_slot_bytes: slot, ..CollConfig::default() };
            let l = PacketLayout::new(&config, ranks);
            let pair_end = l.pair_token_offset + 4 * u64::from(ll_pair_parts(config.ll_blocks, ranks)) * ranks as u64;
            assert!(l.ll128_offset >= pair_end && l.ll128_offset.is_multiple_of(128), "{slot} {ranks}");
            assert!(l.ll128_slot_bytes >= l.slot_bytes && l.ll128_slot_bytes.is_multiple_of(128));
            // Two halves of a slot per sender for each of two phases (ranks), then the end.
            assert_eq!(l.ll128_half_bytes, 2 * ranks as u64 * l.ll128_slot_bytes);
            assert_eq!(l.total_bytes, l.ll128_offset + 2 * l.ll128_half_bytes);
            // The most bytes whose lines (128 per 120) fit a slot, and the chain's half.
            let (slot_most, half_most) = (l.ll128_slot_bytes / 128 * 120, l.ll128_half_bytes / 128 * 120);
            let room = l.ll128_room();
            assert_eq!((room.slot as u64, room.half as u64), (slot_most, half_most), "{slot} {ranks}");
        }
        // The default slot: 960 KiB of payload per slot (LL16: 512 KiB); the chain 3.75 MiB at
        // 2 ranks.
        let l = PacketLayout::new(&CollConfig::default(), 2);
        assert_eq!((l.ll128_room().slot, l.ll128_room().half), (983_040, 3_932_160));
    }

    #[test]
    fn packet_layout_fits_two_halves_of_two_slots_per_rank_and_the_tokens() {
        let config = CollConfig::default();
        let l = PacketLayout::new(&config, 4);
        assert_eq!(l.slot_bytes, 2 * config.ll_slot_bytes as u64);
        assert_eq!(l.half_bytes, 8 * l.slot_bytes);
        assert_eq!(l.token_offset, 2 * l.half_bytes);
        // Tokens: 64 LL16 lanes, then 128 LL128 lanes, of 4 ranks each.
        assert_eq!(l.pair_offset, 2 * l.half_bytes + 4 * (64 + 128) * 4);
        for ranks in 1..=MAX_RANKS {
            let k = p2p_blocks(config.hb_blocks, ranks);
            assert!(2 * k <= config.hb_blocks && 2 * ranks as u32 * k <= config.hb_blocks, "{ranks} ranks");
        }
    }

    #[test]
    fn the_pair_region_follows_the_collective_one_and_holds_every_sender_twice() {
        for ranks in 1..=MAX_RANKS {
            for (ll_blocks, p2p_ll_bytes, ll_slot_bytes) in [(64, 64 << 10, 512 << 10), (1, 0, 16 << 10), (3, 13, 7)] {
                let config = CollConfig { ll_blocks, p2p_ll_bytes, ll_slot_bytes, ..CollConfig::default() };
                let l = PacketLayout::new(&config, ranks);
                let case = format!("{ranks} ranks, {config:?}");
                // Tokens for every LL16 block and then every LL128 block.
                let collective_end = l.token_offset + 4 * u64::from(ll_blocks + config.ll128_blocks) * ranks as u64;
                assert!(l.pair_offset >= collective_end && l.pair_offset.is_multiple_of(16), "{case}");
                // LL16: 8 payload bytes per 16-byte packet, whole packets.
                let payload = l.pair_slot_bytes / 2;
                assert!(payload >= p2p_ll_bytes as u64 && payload < p2p_ll_bytes as u64 + 8, "{case}");
                assert!(l.pair_slot_bytes.is_multiple_of(16), "{case}");
                assert_eq!(l.pair_token_offset, l.pair_offset + 2 * ranks as u64 * l.pair_slot_bytes, "{case}");
                let parts = ll_pair_parts(ll_blocks, ranks);
                // The pair tokens end where the LL128 region begins (at the next 128-byte boundary).
                let pair_end = l.pair_token_offset + 4 * u64::from(parts) * ranks as u64;
                assert_eq!(l.ll128_offset, pair_end.next_multiple_of(128), "{case}");
                // Every direction gets its parts, inside the LL grid whenever it has a block each.
                assert!(parts >= 1, "{case}");
                if ll_blocks >= 2 * ranks as u32 {
                    assert!(2 * ranks as u32 * parts <= ll_blocks, "{case}");
                }
            }
        }
        assert_eq!(ll_pair_parts(64, 2), 16);
        assert_eq!(ll_pair_parts(64, 8), 4);
        assert_eq!(ll_pair_parts(4, 8), 1);
    }

    #[test]
    fn every_send_receive_direction_gets_its_blocks_at_every_block_count() {
        for ranks in 1..=MAX_RANKS {
            let directions = 2 * ranks as u32;
            for hb_blocks in 1..=1024 {
                let config = CollConfig { hb_blocks, chunk_bytes: 1 << 30, ..CollConfig::default() };
                let shapes = check_shapes(&config, ranks);
                if hb_blocks < 2 {
                    assert!(shapes.unwrap_err().contains("send/receive needs at least 2"));
                    continue;
                }
                assert_eq!(shapes, Ok(()), "{hb_blocks} blocks, {ranks} ranks");
                let (k, grid) = (p2p_blocks(hb_blocks, ranks), p2p_grid(hb_blocks, ranks));
                let case = format!("{hb_blocks} blocks, {ranks} ranks: {k} per direction, grid {grid}");
                // weft_p2p's last direction (2 * ranks - 1) runs on blocks up to 2 * ranks * k.
                assert!(k >= 1 && grid >= directions * k, "{case}");
                // Both directions of a pair find their semaphores in the table.
                assert!(2 * k <= hb_blocks, "{case}");
                // Configurations that already fit launch as before; the others only what they need.
                assert_eq!(grid, hb_blocks.max(directions), "{case}");
                // A wide launch gives every direction room for 2k blocks (weft_p2p's slots are
                // grid / directions), whose semaphores still fit the table with 2 ranks or more.
                // A narrow launch never does (so the kernel stays narrow).
                let wide = p2p_launch_grid(hb_blocks, ranks, 1 << 30, 256 << 20);
                assert!(grid / directions < 2 * k, "{case}");
                if 2 * 2 * k <= hb_blocks {
                    assert!(wide / directions >= 2 * k, "{case}");
                } else {
                    assert_eq!(wide, grid, "{case}: no room in the semaphore table");
                }
            }
        }
        // The reported hang: 4 ranks at WEFT_HB_BLOCKS=4 launched 4 blocks, the sends and
        // receives of peers 0 and 1 only.
        assert_eq!(p2p_grid(4, 4), 8);
    }

    /// The two directions of a pair take disjoint semaphores inside the peer's `hb_blocks`, at
    /// every width of each (a wide send one way and a narrow one back shared semaphores when the
    /// second range began at the direction's own block count), and the narrow ones are those
    /// every launch took before wide directions existed.
    #[test]
    fn the_directions_of_a_pair_never_share_a_semaphore() {
        for ranks in 2..=MAX_RANKS {
            for hb_blocks in 2..=512 {
                let k = p2p_blocks(hb_blocks, ranks);
                let wide_ok = p2p_launch_grid(hb_blocks, ranks, 1 << 30, 1 << 20) > p2p_grid(hb_blocks, ranks);
                let widths = if wide_ok { vec![k, 2 * k] } else { vec![k] };
                for &lower in &widths {
                    for &higher in &widths {
                        let up: Vec<u32> = (0..lower).map(|j| p2p_semaphore(k, true, j)).collect();
                        let down: Vec<u32> = (0..higher).map(|j| p2p_semaphore(k, false, j)).collect();
                        let case = format!("{ranks} ranks, {hb_blocks} HB blocks, widths {lower} / {higher}");
                        assert!(up.iter().chain(&down).all(|&i| i < hb_blocks), "{case}");
                        assert!(up.iter().all(|i| !down.contains(i)), "{case}");
                    }
                }
            }
        }
        let kernel = include_str!("../../../device/kernels/coll/p2p.cu");
        let mirrored = kernel.contains("side = src < dst ? 0 : k;")
            && kernel.contains("semaphore(c, peer, j < k ? side + j : 2 * k + side + (j - k))");
        assert!(mirrored, "the kernel is mirrored");
        assert_eq!((p2p_semaphore(32, true, 5), p2p_semaphore(32, false, 5)), (5, 37), "the narrow blocks as before");
    }

    #[test]
    fn a_launch_is_wide_from_the_threshold_and_never_at_0() {
        let wide = |bytes, threshold| p2p_launch_grid(128, 2, bytes, threshold);
        assert_eq!((wide(256 << 20, 256 << 20), wide((256 << 20) - 1, 256 << 20)), (256, 128));
        assert_eq!(wide(usize::MAX, 0), 128, "0: never");
        // The context holds whole MiB, rounded up, as the kernel compares them.
        assert_eq!((p2p_wide_mib(256 << 20), p2p_wide_mib((256 << 20) + 1), p2p_wide_mib(0)), (256, 257, 0));
        assert_eq!(wide((256 << 20) + 1, (256 << 20) + 1), 128, "a launch below the rounded threshold stays narrow");
    }
}
