//! The device communicator: allocation and set-up of everything a [`DevCommHandle`] points to.
//!
//! Set-up is collective. The ranks first compare their requirements (an all-gather), then
//! every rank, for each peer in ascending order, either maps the peer's heap (a peer of its node:
//! the LSA backend) or opens one PortChannel per signal slot plus one through its proxy (any
//! other peer: the proxy backend). Both are pairwise calls made in the same order on both sides.

use std::sync::Arc;

use weft_core::{Communicator, RegisteredMemory, RemoteMemory};
use weft_gpu::{DeviceMemory, DevicePtr};
use weft_net::{PortChannel, PortProxy, PortProxyConfig};
use weft_types::{DevCommHandle, PortChannelDeviceHandle};

use crate::{GinError, HeapLayout, Requirements, Teams};

/// How this rank reaches a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Loads and stores into the peer's mapped heap (a peer of this node, or this rank).
    Lsa,
    /// FIFO commands executed by this rank's proxy on PortChannels.
    Proxy,
}

/// A window of a [`DevComm`]: its index (what kernels name) and where it lies in this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GinWindow {
    /// Index kernels pass as `dst_window` / `src_window`.
    pub index: u32,
    /// This rank's first byte of the window (device address).
    pub ptr: DevicePtr,
    /// Bytes of the window.
    pub len: u64,
}

/// A device communicator (see the crate docs). Holding it keeps every allocation, mapping and
/// PortChannel its handle points to; drop it only after the kernels using the handle ended.
#[derive(Debug)]
pub struct DevComm {
    handle: DevCommHandle,
    /// Rank r's heap as this GPU addresses it (0: a proxy peer).
    peer_heaps: Vec<u64>,
    teams: Teams,
    backends: Vec<Backend>,
    windows: Vec<GinWindow>,
    /// The device's port table (`ports[peer * connections + c]`), as written to it.
    ports: Vec<PortChannelDeviceHandle>,
    heap: RegisteredMemory,
    _tables: Vec<Arc<DeviceMemory>>,
    _mapped: Vec<RemoteMemory>,
    _channels: Vec<PortChannel>,
    _proxy: Option<PortProxy>,
}

impl DevComm {
    /// Allocates and connects a device communicator over `comm` (collective: every rank calls
    /// it with the same requirements).
    pub fn new(comm: &Communicator, requirements: &Requirements) -> Result<Self, GinError> {
        Self::with_proxy(comm, requirements, None)
    }

    /// As [`DevComm::new`], with the proxy peers served by `proxy` (the rank's proxy, which
    /// other users of the communicator share: one polling thread) rather than a proxy of its
    /// own; `None` starts one when some peer needs it.
    pub fn with_proxy(
        comm: &Communicator,
        requirements: &Requirements,
        proxy: Option<PortProxy>,
    ) -> Result<Self, GinError> {
        let rank = comm.rank();
        let world = comm.world_size();
        let topology = comm.topology();
        let backends: Vec<Backend> = (0..world)
            .map(|p| if p == rank || topology.same_node(p) { Backend::Lsa } else { Backend::Proxy })
            .collect();
        let proxy_peers = backends.iter().filter(|&&b| b == Backend::Proxy).count();
        requirements.check(world, proxy_peers)?;
        let mine = requirements.encode();
        let all = comm.bootstrap().all_gather(&mine).map_err(|source| weft_core::Error::Bootstrap { rank, source })?;
        if let Some(other) = all.iter().position(|theirs| *theirs != mine) {
            return Err(GinError::Mismatch(format!("rank {rank} and rank {other} passed different Requirements")));
        }
        let teams =
            Teams::of(comm).ok_or_else(|| GinError::Requirements(format!("rank {rank} outside a world of {world}")))?;
        let layout = HeapLayout::new(requirements)?;
        let gpu = |source| GinError::Gpu { rank, source };
        let to_usize = |n: u64| usize::try_from(n).map_err(|_| GinError::Requirements(format!("{n} bytes")));

        let heap = comm.register(comm.alloc(to_usize(layout.heap_bytes)?)?)?;
        heap.memory().fill(0, heap.len(), 0).map_err(gpu)?;
        let state = comm.alloc(to_usize(layout.state_bytes)?)?;
        state.fill(0, state.len(), 0).map_err(gpu)?;

        let mut peer_heaps = vec![0u64; world];
        let mut mapped = Vec::new();
        let mut channels = Vec::new();
        let connections = requirements.signal_slots() as usize + 1;
        let mut ports = vec![PortChannelDeviceHandle::default(); world * connections];
        let proxy = match proxy {
            _ if proxy_peers == 0 => None,
            Some(shared) => Some(shared),
            None => Some(PortProxy::new(comm, PortProxyConfig::default())?),
        };
        let heap_id = proxy.as_ref().map(|p| p.register(&heap)).transpose()?;
        for peer in 0..world {
            match (backends[peer], &proxy, heap_id) {
                _ if peer == rank => peer_heaps[peer] = heap.ptr(),
                (Backend::Lsa, _, _) => {
                    let remote = comm.connect_memory(peer, &heap)?;
                    peer_heaps[peer] = remote.ptr();
                    mapped.push(remote);
                }
                (Backend::Proxy, Some(proxy), Some(id)) => {
                    for c in 0..connections {
                        let channel = proxy.channel(peer, id, None)?;
                        ports[peer * connections + c] = channel.device_handle();
                        channels.push(channel);
                    }
                }
                (Backend::Proxy, _, _) => {
                    return Err(GinError::Requirements(format!("no proxy for rank {peer} (a proxy peer needs one)")));
                }
            }
        }

        let mut window_table = Vec::with_capacity(2 * layout.windows.len());
        let mut windows = Vec::with_capacity(layout.windows.len());
        for (i, &(offset, len)) in layout.windows.iter().enumerate() {
            window_table.extend([offset, len]);
            windows.push(GinWindow { index: i as u32, ptr: heap.ptr() + offset, len });
        }
        let table = |values: &[u64]| -> Result<Arc<DeviceMemory>, GinError> {
            let memory = comm.alloc((8 * values.len()).max(8))?;
            memory.write_pod(0, values).map_err(gpu)?;
            Ok(memory)
        };
        let ranks_table = |members: &[usize]| -> Result<Arc<DeviceMemory>, GinError> {
            let words: Vec<u32> = members.iter().map(|&m| m as u32).collect();
            let memory = comm.alloc((4 * words.len()).max(8))?;
            memory.write_pod(0, &words).map_err(gpu)?;
            Ok(memory)
        };
        let heaps_mem = table(&peer_heaps)?;
        let windows_mem = table(&window_table)?;
        let ports_mem = comm.alloc(size_of::<PortChannelDeviceHandle>() * ports.len())?;
        ports_mem.write_pod(0, &ports).map_err(gpu)?;
        let lsa_mem = ranks_table(teams.lsa.members())?;
        let rail_mem = ranks_table(teams.rail.members())?;
        let proxy_mask = (0..world).filter(|&p| backends[p] == Backend::Proxy).fold(0u64, |m, p| m | 1 << p);
        let handle = DevCommHandle {
            heap: heap.ptr(),
            peer_heaps: heaps_mem.ptr(),
            windows: windows_mem.ptr(),
            ports: ports_mem.ptr(),
            state: state.ptr(),
            lsa_ranks: lsa_mem.ptr(),
            rail_ranks: rail_mem.ptr(),
            proxy_mask,
            wait: comm.wait_context(rank, None),
            rank: rank as u32,
            world: world as u32,
            lsa_rank: teams.lsa.rank() as u32,
            lsa_size: teams.lsa.size() as u32,
            rail_rank: teams.rail.rank() as u32,
            rail_size: teams.rail.size() as u32,
            signals: requirements.signals,
            signal_slots: requirements.signal_slots(),
            counters: requirements.counters,
            world_barriers: requirements.world_barriers,
            lsa_barriers: requirements.lsa_barriers,
            window_count: windows.len() as u32,
            staging_offset: layout.staging_offset as u32,
            reserved: 0,
        };
        // Every rank's heap is zeroed before any peer's kernel may write it.
        comm.barrier()?;
        Ok(Self {
            handle,
            peer_heaps,
            teams,
            backends,
            windows,
            ports,
            heap,
            _tables: vec![state, heaps_mem, windows_mem, ports_mem, lsa_mem, rail_mem],
            _mapped: mapped,
            _channels: channels,
            _proxy: proxy,
        })
    }

    /// The handle kernels receive by value; valid while `self` lives.
    pub fn handle(&self) -> DevCommHandle {
        self.handle
    }

    /// This rank's teams.
    pub fn teams(&self) -> &Teams {
        &self.teams
    }

    /// How this rank reaches world rank `peer`.
    pub fn backend(&self, peer: usize) -> Option<Backend> {
        self.backends.get(peer).copied()
    }

    /// The windows, in the order of [`Requirements::windows`].
    pub fn windows(&self) -> &[GinWindow] {
        &self.windows
    }

    /// The word at this rank counting proxy peer `peer`'s increments of signal `signal` (the
    /// device's `gin_proxy_signal_word`), for a kernel that must know which peer's signals
    /// arrived (it reads it with `ld.acquire.sys`); `None` for an LSA peer (its increments land
    /// in the heap's slot, unseparated) or an index out of range.
    pub fn proxy_signal_word(&self, peer: usize, signal: u32) -> Option<u64> {
        if self.backend(peer) != Some(Backend::Proxy) || signal > self.handle.signal_slots {
            return None;
        }
        let connections = self.handle.signal_slots as usize + 1;
        Some(self.ports.get(peer * connections + signal as usize)?.semaphore.inbound)
    }

    /// Where window `window` of world rank `peer` lies in this GPU's address space: this
    /// rank's own, or an LSA peer's as mapped here; `None` for a proxy peer (its memory is
    /// reached only by puts) or an index out of range.
    pub fn lsa_window(&self, peer: usize, window: usize) -> Option<u64> {
        let heap = *self.peer_heaps.get(peer).filter(|&&p| p != 0)?;
        let w = self.windows.get(window)?;
        Some(heap + (w.ptr - self.heap.ptr()))
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.handle.rank as usize
    }

    /// `source`, a failed device call of this rank.
    pub(crate) fn gpu_error(&self, source: weft_gpu::GpuError) -> GinError {
        GinError::Gpu { rank: self.rank(), source }
    }

    /// This rank's heap (signals, staging, windows).
    pub fn heap(&self) -> &RegisteredMemory {
        &self.heap
    }
}
