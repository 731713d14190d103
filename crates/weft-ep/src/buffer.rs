//! The EP buffer of one rank: its registered memory, every peer's mapped into this GPU (or, on
//! a group spanning nodes, window 0 of a GIN device communicator: this node's peers mapped,
//! the others reached by puts), the kernels, and the configuration of the normal-mode kernels
//! (DeepEP's `Buffer` and `Config`).

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weft_core::env::vars;
use weft_core::trace::{RankTrace, TraceError, Tracer};
use weft_core::{Communicator, RegisteredMemory, RemoteMemory};
use weft_gin::{DevComm, Requirements};
use weft_gpu::{AllocKind, DeviceMemory, Stream};
use weft_types::{EpContext, EpLlNet};

use crate::error::EpError;
use crate::launch::Kernels;
use crate::rail_arrival::{RailSide, RailSignals};
use crate::region::{BufferLayout, LlRegions, MAX_CHANNELS, MAX_LOCAL_EXPERTS, MAX_RANKS};

/// Signals of the EP device communicator between nodes: the low-latency dispatch's and
/// combine's (`kLlDispatchSignal`, `kLlCombineSignal`), then the rail hop's of the normal mode
/// (`kRailDispatchSignal`, `kRailCombineSignal`).
const EP_SIGNALS: u32 = 4;

/// SMs of the normal-mode kernels unless a [`Config`] says otherwise (DeepEP's test setting).
pub const DEFAULT_NUM_SMS: u32 = 24;

/// DeepEP's `Config` as far as weft uses it: the SMs of a normal-mode dispatch or combine
/// (even: a channel is one sending and one receiving SM). DeepEP's chunk sizes size its ring
/// buffers; weft stages whole dispatches, so it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// SMs of the kernel: an even number from 2 to `2 * MAX_CHANNELS`.
    pub num_sms: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self { num_sms: DEFAULT_NUM_SMS }
    }
}

impl Config {
    /// Channels of the kernel: half its SMs.
    pub fn channels(&self) -> u32 {
        self.num_sms / 2
    }

    pub(crate) fn check(&self, rank: usize) -> Result<(), EpError> {
        if self.num_sms < 2 || !self.num_sms.is_multiple_of(2) || self.num_sms as usize > 2 * MAX_CHANNELS {
            return Err(EpError::InvalidArgument {
                rank,
                argument: "config.num_sms",
                detail: format!("{} (an even number from 2 to {})", self.num_sms, 2 * MAX_CHANNELS),
            });
        }
        Ok(())
    }
}

/// One rank's EP buffer; see the crate documentation for the calls it offers.
#[derive(Debug)]
pub struct Buffer {
    pub(crate) comm: Communicator,
    pub(crate) layout: BufferLayout,
    pub(crate) context: EpContext,
    pub(crate) kernels: Kernels,
    /// Set when `WEFT_TRACE` is: the traced kernels write into it.
    tracer: Option<Tracer>,
    /// `int32_t[1 + MAX_LOCAL_EXPERTS]`: what the last notify counted for this rank.
    pub(crate) recv_counts: DeviceMemory,
    /// Normal-mode calls launched so far (notify, dispatch, combine): a typed dispatch
    /// continues its handle's notify only if nothing ran in between.
    pub(crate) normal_calls: AtomicU64,
    /// The experts of the low-latency calls of a group spanning nodes, fixed by the first.
    pub(crate) ll_experts: crate::low_latency::PinnedExperts,
    /// The normal-mode kernels' context over this rank's node (the NVL hop between nodes;
    /// the same as `context` on one node).
    pub(crate) node_context: EpContext,
    /// `int32_t[MAX_RANKS + MAX_RANKS + MAX_RANKS * MAX_LOCAL_EXPERTS]`: what the rail layout
    /// counted for the host's exchange (tokens per node, per rank, per expert).
    pub(crate) rail_counts: DeviceMemory,
    /// The increments of each rail phase's signal every rail peer has made so far: the counts
    /// the waits for a call's chunks start from.
    pub(crate) rail_signals: RailSignals,
    /// Between nodes: the stream the rail exchange runs on beside the caller's.
    pub(crate) rail_side: Option<RailSide>,
    /// Set by a normal-mode call between nodes: a low-latency call after it first waits for
    /// every rank (the two modes share `num_rdma_bytes`, as DeepEP's do).
    pub(crate) rail_dirty: AtomicBool,
    /// Set by a low-latency call: a normal-mode combine between nodes after it first waits for
    /// every rank's (its rail puts land in the area the low-latency calls use).
    pub(crate) ll_since_rail: AtomicBool,
    /// Set by a normal-mode combine between nodes, cleared when a call settles: a combine
    /// right after another first waits for every rank.
    pub(crate) rail_combined: AtomicBool,
    /// Device memory of raw handles between nodes (`RailHandle`) that their owner may drop
    /// while the kernels using it still run (Python's handles): kept until the next dispatch
    /// between nodes has settled its stream, or until the buffer goes.
    /// Each entry is one handle's allocations, kept once however many calls used it.
    pub(crate) rail_kept: Mutex<Vec<Arc<[Arc<DeviceMemory>]>>>,
    memory: Memory,
}

/// Where a buffer's memory comes from.
#[derive(Debug)]
enum Memory {
    /// One node: this rank's registered allocation and every peer's, mapped.
    Node { _memory: RegisteredMemory, _peers: Vec<RemoteMemory> },
    /// A group spanning nodes: window 0 of a device communicator.
    Net(Box<DevComm>),
}

impl Buffer {
    /// The EP buffer of this rank with `num_nvl_bytes` of staging for the normal mode (see
    /// [`crate::nvl_bytes_hint`]) and `num_rdma_bytes` for the low-latency mode (see
    /// [`crate::low_latency_rdma_size_hint`], and [`crate::low_latency_net_bytes_hint`] for a
    /// group spanning nodes). Collective: every rank
    /// calls it with the same sizes. On one node
    /// (or one virtual node) every peer's buffer is mapped; on a group spanning nodes the buffer
    /// is window 0 of a GIN device communicator (the ranks of other nodes are reached through
    /// the proxy; docs/ep.md, "Low latency between nodes" and "Normal mode between nodes"),
    /// whose normal mode also needs [`crate::rdma_bytes_hint`] bytes of `num_rdma_bytes`.
    pub fn new(comm: &Communicator, num_nvl_bytes: usize, num_rdma_bytes: usize) -> Result<Self, EpError> {
        let (rank, ranks) = (comm.rank(), comm.world_size());
        let gpu = |source| EpError::Gpu { rank, source };
        if ranks > MAX_RANKS {
            return Err(EpError::Unsupported { rank, detail: format!("{ranks} ranks (at most {MAX_RANKS})") });
        }
        // The ranks' nodes (hosts, or virtual nodes) decide the path, as they do for weft.ep in
        // Python; every peer of this node must be mapped either way (direct stores reach them).
        let topology = comm.topology();
        // Between nodes the staging area serves the NVL hop of the normal mode, and the
        // low-latency area its rail hop too (docs/ep.md, "Normal mode between nodes").
        let nvl_bytes = num_nvl_bytes.next_multiple_of(16);
        let layout = BufferLayout::new(nvl_bytes, num_rdma_bytes.next_multiple_of(16));
        let unmapped =
            (0..ranks).filter(|&p| topology.same_node(p)).find_map(|p| comm.can_map(p).err().map(|e| (p, e)));
        if let Some((peer, reason)) = unmapped {
            return Err(EpError::Unsupported {
                rank,
                detail: format!(
                    "rank {peer} of this node is not reachable over NVLink ({reason}); the kernels store to every peer of the node"
                ),
            });
        }
        let (memory, ptrs) = if !topology.spans_nodes() {
            let memory = comm.alloc(layout.total_bytes())?;
            // Barrier tokens, sequences and signals start at zero; the data areas need no value.
            memory.fill(0, layout.data_offset, 0).map_err(gpu)?;
            let memory = comm.register(memory)?;
            let mut ptrs = vec![memory.ptr(); ranks];
            let mut peers = Vec::new();
            for peer in (0..ranks).filter(|&p| p != rank) {
                let remote = comm.connect_memory(peer, &memory)?;
                ptrs[peer] = remote.ptr();
                peers.push(remote);
            }
            (Memory::Node { _memory: memory, _peers: peers }, ptrs)
        } else {
            let requirements = Requirements {
                signals: EP_SIGNALS,
                counters: 0,
                world_barriers: 0,
                lsa_barriers: 0,
                windows: vec![layout.total_bytes() as u64],
            };
            // The device communicator zeroes its heap, the window included.
            let gin = DevComm::new(comm, &requirements).map_err(|e| EpError::Gin { rank, source: Box::new(e) })?;
            let ptrs = (0..ranks).map(|p| gin.lsa_window(p, 0).unwrap_or(0)).collect();
            (Memory::Net(Box::new(gin)), ptrs)
        };
        let rail_side =
            matches!(memory, Memory::Net(_)).then(|| RailSide::new(comm.device())).transpose().map_err(gpu)?;
        let context = layout.context(&ptrs, rank, comm.wait_context(rank, None));
        // The node's ranks: consecutive in the group (`WEFT_RANKS_PER_NODE`, or hosts in order).
        let node: Vec<usize> = (0..ranks).filter(|&p| topology.same_node(p)).collect();
        let consecutive = node.windows(2).all(|w| w[1] == w[0] + 1) && ranks.is_multiple_of(node.len());
        let node_context = if !topology.spans_nodes() {
            context
        } else if consecutive {
            let node_ptrs: Vec<u64> = node.iter().map(|&p| ptrs[p]).collect();
            layout.context(&node_ptrs, rank - node[0], comm.wait_context(rank, None))
        } else {
            // The normal mode between nodes refuses such a group (`Buffer::nodes`).
            context
        };
        let tracer = Tracer::from_env(comm.env(), comm.device(), rank, ranks).map_err(|e| match e {
            TraceError::Gpu(source) => EpError::Gpu { rank, source },
            e => EpError::InvalidArgument { rank, argument: "WEFT_TRACE", detail: e.to_string() },
        })?;
        let ll_early = comm.env().var(&vars::WEFT_EARLY_LAUNCH).is_none_or(|v| v.trim() != "0");
        let kernels =
            Kernels::load(comm.device(), comm.env().cache_dir.clone(), tracer.as_ref(), ll_early).map_err(gpu)?;
        let recv_counts =
            DeviceMemory::alloc(comm.device(), 4 * (1 + MAX_LOCAL_EXPERTS), AllocKind::Legacy).map_err(gpu)?;
        let rail_counts =
            DeviceMemory::alloc(comm.device(), 4 * MAX_RANKS * (2 + MAX_LOCAL_EXPERTS), AllocKind::Legacy)
                .map_err(gpu)?;
        comm.barrier()?;
        Ok(Self {
            comm: comm.clone(),
            layout,
            context,
            kernels,
            tracer,
            recv_counts,
            normal_calls: AtomicU64::new(0),
            ll_experts: Default::default(),
            node_context,
            rail_counts,
            rail_signals: RailSignals::default(),
            rail_side,
            rail_dirty: AtomicBool::new(false),
            ll_since_rail: AtomicBool::new(false),
            rail_combined: AtomicBool::new(false),
            rail_kept: Mutex::default(),
            memory,
        })
    }

    /// Whether the group spans nodes (the low-latency kernels put to the ranks of other nodes).
    pub fn spans_nodes(&self) -> bool {
        matches!(self.memory, Memory::Net(_))
    }

    /// The low-latency kernels' path to other nodes for `regions`: the device communicator's
    /// handle and the network regions, or zeros on one node (no rank is remote).
    pub(crate) fn ll_net(&self, regions: &LlRegions) -> EpLlNet {
        match (&self.memory, regions.net) {
            (Memory::Net(gin), Some(net)) => EpLlNet {
                gin: gin.handle(),
                dispatch_send_offset: net.dispatch_send_offset as u64,
                combine_send_offset: net.combine_send_offset as u64,
                counts_in_offset: net.counts_in_offset as u64,
                counts_out_offset: net.counts_out_offset as u64,
            },
            _ => EpLlNet::default(),
        }
    }

    /// `Err` for a raw normal-mode call (`call`) on a group spanning nodes: these raw calls
    /// drive the one-node kernels only; between nodes the typed calls and the raw
    /// `*_between_nodes` calls run the two hops (docs/ep.md, "Normal mode between nodes").
    pub(crate) fn check_one_node(&self, call: &str) -> Result<(), EpError> {
        if !self.spans_nodes() {
            return Ok(());
        }
        let detail = format!(
            "raw {call} across nodes (the typed calls and raw_{call}_between_nodes run the normal mode between nodes)"
        );
        Err(EpError::Unsupported { rank: self.rank(), detail })
    }

    /// The device communicator's handle between nodes.
    pub(crate) fn gin_handle(&self) -> Option<weft_types::DevCommHandle> {
        match &self.memory {
            Memory::Net(gin) => Some(gin.handle()),
            Memory::Node { .. } => None,
        }
    }

    /// The word counting rail peer `peer`'s increments of `signal` at this rank (a proxy peer
    /// of the device communicator between nodes), or 0.
    pub(crate) fn rail_signal_word(&self, peer: usize, signal: u32) -> u64 {
        match &self.memory {
            Memory::Net(gin) => gin.proxy_signal_word(peer, signal).unwrap_or(0),
            Memory::Node { .. } => 0,
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Ranks of the group.
    pub fn num_ranks(&self) -> usize {
        self.comm.world_size()
    }

    /// Staging bytes of the buffer (DeepEP's `num_nvl_bytes`, rounded up to 16).
    pub fn num_nvl_bytes(&self) -> usize {
        self.layout.data_bytes
    }

    /// The communicator the buffer was made on.
    pub fn communicator(&self) -> &Communicator {
        &self.comm
    }

    /// What the traced kernels recorded since the last take (waiting for the device to be
    /// idle first), or `None` when tracing is off (`WEFT_TRACE` unset). What is not taken is
    /// written to the `WEFT_TRACE` file when the buffer is dropped.
    pub fn take_trace(&self) -> Result<Option<RankTrace>, EpError> {
        let Some(tracer) = &self.tracer else { return Ok(None) };
        tracer.take().map(Some).map_err(|source| EpError::Gpu { rank: self.rank(), source })
    }

    /// `Err` naming the rank, peer and phase if an EP kernel's wait gave up (the kernel exited
    /// early; its outputs are incomplete).
    pub fn check(&self) -> Result<(), EpError> {
        Ok(self.comm.check_device()?)
    }

    /// Waits for `stream`, then [`Buffer::check`]. The bound is twice the kernels' own spin
    /// bound (the rail exchange waits for its peer, then flushes its own puts, each bounded by
    /// `WEFT_TIMEOUT`) plus a margin, so a stalled wait ends the kernel, which records the rank,
    /// the peer and the phase, before the host gives up. Where the host gives up anyway, the
    /// kernel is still running: the error is the stream's timeout, and the record is not read
    /// (a synchronous read could wait for that kernel, when the caller's stream is CUDA's
    /// legacy default stream). Polls back to back at first ([`Stream::wait_idle_spinning`]):
    /// every EP wait is on a call's critical path (a rail hop lasts about a millisecond at
    /// DeepEP's shape), where napping would overshoot by hundreds of microseconds.
    pub fn synchronize(&self, stream: &Stream, what: &str) -> Result<(), EpError> {
        let bound = 2 * self.comm.env().device_timeout + Duration::from_secs(5);
        stream.wait_idle_spinning(bound, what).map_err(|source| EpError::Gpu { rank: self.rank(), source })?;
        self.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bindings hold a buffer behind a shared reference from any thread.
    #[test]
    fn a_buffer_can_be_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Buffer>();
    }

    #[test]
    fn configs_take_even_sm_counts_up_to_two_per_channel() {
        assert!(Config::default().check(0).is_ok());
        assert_eq!(Config::default().channels(), DEFAULT_NUM_SMS / 2);
        for bad in [0, 1, 3, 2 * MAX_CHANNELS as u32 + 2] {
            let err = Config { num_sms: bad }.check(3).unwrap_err().to_string();
            assert!(err.contains("rank 3: config.num_sms"), "{err}");
        }
    }
}
