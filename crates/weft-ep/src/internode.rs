//! The normal mode between nodes, host side (docs/ep.md, "Normal mode between nodes"): the
//! notify's exchange of counts, and the sequence of launches of a dispatch and a combine in
//! two hops. Rank `(node n, local l)` sends each token once to rank `(d, l)` of every node `d`
//! holding one of its experts (the rail hop, `weft_ep_rail_*`, GIN puts through the proxy),
//! which passes it on to its node's ranks with the one-node kernels run over the node (an
//! `EpContext` of the node's ranks: the NVL hop); the combine reverses both. The CPU model
//! is [`crate::model::dispatch_internode`] and [`crate::model::combine_internode`].
//!
//! Each dispatch starts with a host barrier (after its stream is idle): every rank's earlier
//! calls are then done, so no put of this call lands in a region an earlier call still reads.
//! A combine right after a dispatch needs none: its puts land in regions whose last readers ran
//! before that dispatch began. A combine after another combine (or after a low-latency call)
//! settles first: a peer's sum of the earlier combine may still read the rows its puts land in.
//!
//! A rail hop's readers overlap its exchange (docs/ep.md, "Overlapping the rail hop"): the
//! puts go out chunk by chunk, and the NVL hop of a cached dispatch, or the combine's sum,
//! reads each chunk as it lands (`rail_arrival.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use weft_gpu::{DeviceBuffer, DeviceMemory, DevicePtr, Stream};
use weft_types::{EpDispatchArgs, EpRailArgs, EpRailArrival};

use crate::buffer::{Buffer, Config};
use crate::error::EpError;
use crate::launch::{RAIL_COMBINE_PUTS, RAIL_COMBINE_SIGNAL, RAIL_DISPATCH_PUTS, RAIL_DISPATCH_SIGNAL, RailStep};
use crate::phase_timer::PhaseTimer;
use crate::rail_arrival::{RailPhase, RailSide, Source, rail_chunks};
use crate::raw::{
    CombineInput, CombineOutput, DispatchInput, DispatchOutput, Group, Handle, LayoutTensors, Payload, RecvCounts,
    RoutingShape, Scales, dispatch_rows,
};
use crate::region::{MAX_RANKS, RailRegions, Staging, rdma_bytes_hint};
use crate::typed::{HandleBuffers, LayoutBuffers};

/// Where the inverse of the rail send head at `rail_send_head` lies (see
/// [`Buffer::rail_send_head`]) for `tokens` tokens and `nodes` nodes.
fn row_token(rail_send_head: DevicePtr, tokens: usize, nodes: usize) -> DevicePtr {
    rail_send_head + 4 * (tokens * nodes) as u64
}

/// Where a rank sits among equal nodes of consecutive ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Nodes {
    /// Nodes of the group.
    pub(crate) nodes: usize,
    /// Ranks per node.
    pub(crate) per_node: usize,
    /// This rank's node.
    pub(crate) node: usize,
    /// This rank's index in its node (its rail).
    pub(crate) local: usize,
}

/// What the notify's exchange gives one rank: its rail hop's rows and its receive counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RailPlan {
    pub(crate) nodes: Nodes,
    /// Per node d: the row where this rank's rows start at d's forwarder.
    pub(crate) before: [u32; MAX_RANKS],
    /// Per node d: the rows this rank sends to d.
    pub(crate) sent: [u32; MAX_RANKS],
    /// Per source node s: this forwarder's first row from s.
    pub(crate) from: [u32; MAX_RANKS],
    /// Per source node s: this forwarder's rows from s.
    pub(crate) received: [u32; MAX_RANKS],
    /// Rows this rank forwards (its NVL hop's tokens).
    pub(crate) forwarded: usize,
    /// The most rows any rank of the group forwards: every rank checks the NVL hop's staging
    /// against it, so all refuse a call or none does (a rank refusing alone would leave its
    /// peers waiting on it until the timeout).
    pub(crate) most_forwarded: usize,
    /// What this rank receives.
    pub(crate) counts: RecvCounts,
    /// `[ranks][ranks]`: entry `[s][d]` counts the tokens ranks `0..=s` send to `d`.
    pub(crate) rank_prefix_matrix: Vec<i32>,
    /// The notify's expert alignment (the NVL hop's notify rounds with it).
    pub(crate) expert_alignment: usize,
}

impl RailPlan {
    /// The plan of rank `(nodes.node, nodes.local)` from every rank's exchanged counts: row r
    /// is rank r's tokens per node (`nodes`), per rank (`ranks`), per expert (`experts`).
    pub(crate) fn new(nodes: Nodes, experts: usize, expert_alignment: usize, rows: &[Vec<i32>]) -> Self {
        let ranks = rows.len();
        let (n, k) = (nodes.nodes, nodes.per_node);
        let me = nodes.node * k + nodes.local;
        let per_node = |r: usize, d: usize| rows[r][d].max(0) as u32;
        let per_rank = |r: usize, d: usize| rows[r][n + d];
        let mut plan = Self {
            nodes,
            before: [0; MAX_RANKS],
            sent: [0; MAX_RANKS],
            from: [0; MAX_RANKS],
            received: [0; MAX_RANKS],
            forwarded: 0,
            most_forwarded: 0,
            counts: RecvCounts { num_recv_tokens: 0, num_recv_tokens_per_expert: Vec::new() },
            rank_prefix_matrix: vec![0; ranks * ranks],
            expert_alignment,
        };
        for d in 0..n {
            plan.sent[d] = per_node(me, d);
            plan.before[d] = (0..nodes.node).map(|s| per_node(s * k + nodes.local, d)).sum();
            plan.received[d] = per_node(d * k + nodes.local, nodes.node);
            plan.from[d] = (0..d).map(|s| per_node(s * k + nodes.local, nodes.node)).sum();
        }
        plan.forwarded = plan.received[..n].iter().map(|&r| r as usize).sum();
        // Rank (m, l) forwards what rank (d, l) of every node d sends to node m.
        let forwarded_by = |m: usize, l: usize| (0..n).map(|d| per_node(d * k + l, m) as usize).sum::<usize>();
        plan.most_forwarded =
            (0..n).flat_map(|m| (0..k).map(move |l| (m, l))).map(|(m, l)| forwarded_by(m, l)).max().unwrap_or(0);
        for s in 0..ranks {
            for d in 0..ranks {
                let before = if s == 0 { 0 } else { plan.rank_prefix_matrix[(s - 1) * ranks + d] };
                plan.rank_prefix_matrix[s * ranks + d] = before + per_rank(s, d);
            }
        }
        let local = experts / ranks.max(1);
        let align = expert_alignment.clamp(1, i32::MAX as usize) as i64;
        plan.counts = RecvCounts {
            num_recv_tokens: (0..ranks).map(|s| per_rank(s, me).max(0) as usize).sum(),
            num_recv_tokens_per_expert: (0..local)
                .map(|e| {
                    let sum: i64 = (0..ranks).map(|s| i64::from(rows[s][n + ranks + me * local + e])).sum();
                    ((sum + align - 1) / align * align) as i32
                })
                .collect(),
        };
        plan
    }
}

/// The tensors a handle between nodes holds besides DeepEP's: the rail hop's send head and the
/// NVL hop's layout and handle over the node's ranks, sized by the rows this rank forwards.
#[derive(Debug)]
pub(crate) struct InternodeHandle {
    pub(crate) plan: RailPlan,
    /// `int32[tokens][nodes]`: a token's position among the tokens sent to a node, or -1.
    pub(crate) rail_send_head: DeviceBuffer<i32>,
    /// The NVL hop's layout of the forwarded rows: `[per_node]`, `[node experts]`,
    /// `[forwarded][per_node]`.
    pub(crate) node_layout: LayoutBuffers,
    /// The NVL hop's handle: `[per_node][per_node]`, `[per_node][channels]` twice,
    /// `[forwarded][per_node]`.
    pub(crate) node_handle: HandleBuffers,
    /// Channels per row of the dispatches (the rail regions' layout), fixed by the first.
    pub(crate) hidden: Option<usize>,
    /// Whether the NVL hop's notify has run (the first dispatch runs it).
    pub(crate) node_notified: bool,
}

impl InternodeHandle {
    /// Every allocation of the handle.
    pub(crate) fn memories(&self) -> [&Arc<DeviceMemory>; 8] {
        let (l, h) = (&self.node_layout, &self.node_handle);
        [
            self.rail_send_head.shared_memory(),
            l.num_tokens_per_rank.shared_memory(),
            l.num_tokens_per_expert.shared_memory(),
            l.is_token_in_rank.shared_memory(),
            h.rank_prefix_matrix.shared_memory(),
            h.channel_prefix_matrix.shared_memory(),
            h.recv_channel_prefix_matrix.shared_memory(),
            h.send_head.shared_memory(),
        ]
    }

    /// Has `stream` keep every tensor until its work has run.
    pub(crate) fn retain_on(&self, stream: &Stream) {
        for memory in self.memories() {
            stream.retain(memory);
        }
    }

    fn node_raw(&self, recv_src_idx: DevicePtr, channels: u32) -> Handle {
        let h = &self.node_handle;
        Handle {
            rank_prefix_matrix: h.rank_prefix_matrix.ptr(),
            channel_prefix_matrix: h.channel_prefix_matrix.ptr(),
            recv_channel_prefix_matrix: h.recv_channel_prefix_matrix.ptr(),
            recv_src_idx,
            is_token_in_rank: self.node_layout.is_token_in_rank.ptr(),
            send_head: h.send_head.ptr(),
            num_recv_tokens: self.plan.counts.num_recv_tokens,
            channels,
        }
    }
}

/// A dispatch's rows and outputs between nodes, as addresses (the typed layer checked them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RailDispatch {
    pub(crate) x: Payload,
    pub(crate) hidden: usize,
    pub(crate) topk_idx: Option<DevicePtr>,
    pub(crate) topk_weights: Option<DevicePtr>,
    pub(crate) output: DispatchOutput,
    pub(crate) recv_src_idx: DevicePtr,
}

/// A combine's rows and outputs between nodes, as addresses (the typed layer checked them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RailCombine {
    pub(crate) x: DevicePtr,
    pub(crate) hidden: usize,
    pub(crate) topk_weights: Option<DevicePtr>,
    pub(crate) bias: [Option<DevicePtr>; 2],
    pub(crate) combined_x: DevicePtr,
    pub(crate) combined_topk_weights: Option<DevicePtr>,
}

/// What a dispatch's NVL hop starts from: the call, where its forwarded rows lie, and where
/// they arrive from other nodes.
struct NodeHop<'a> {
    d: &'a RailDispatch,
    regions: &'a RailRegions,
    /// Top-k slots the rows carry (0: a cached dispatch).
    topk: usize,
    num_scales: usize,
    arrival: EpRailArrival,
}

impl NodeHop<'_> {
    /// The forwarded rows, where they lie in the buffer at `base`, as a dispatch's input.
    fn input(&self, base: u64) -> DispatchInput {
        let recv = self.regions.dispatch_recv;
        let forwarded_x = base + recv.x as u64;
        DispatchInput {
            x: match self.d.x {
                Payload::Bf16 { hidden, .. } => Payload::Bf16 { x: forwarded_x, hidden },
                Payload::Fp8 { hidden, .. } => Payload::Fp8 {
                    x: forwarded_x,
                    scales: Scales {
                        ptr: base + recv.scales as u64,
                        token_stride: self.num_scales as u32,
                        hidden_stride: 1,
                    },
                    hidden,
                },
            },
            topk_idx: (self.topk > 0).then_some(base + recv.topk_idx as u64),
            topk_weights: (self.topk > 0).then_some(base + recv.topk_weights as u64),
        }
    }
}

impl Buffer {
    /// This rank's place among the nodes, or `Err` where the nodes are not equal groups of
    /// consecutive ranks (the rail hop pairs rank `(n, l)` with `(d, l)`).
    pub(crate) fn nodes(&self) -> Result<Nodes, EpError> {
        let (rank, ranks, topology) = (self.rank(), self.num_ranks(), self.comm.topology());
        let per_node = (0..ranks).filter(|&p| topology.same_node(p)).count().max(1);
        let node = rank / per_node;
        let equal =
            ranks.is_multiple_of(per_node) && (0..ranks).all(|p| topology.same_node(p) == (p / per_node == node));
        if !equal {
            let detail = "the normal mode between nodes needs nodes of equal size, each of consecutive ranks".into();
            return Err(EpError::Unsupported { rank, detail });
        }
        Ok(Nodes { nodes: ranks / per_node, per_node, node, local: rank % per_node })
    }

    /// Waits for `stream`, then for every rank to get here: every rank's earlier EP work is
    /// done. Collective.
    fn settle_rail(&self, stream: &Stream) -> Result<(), EpError> {
        self.finish_beside(stream, "EP rail hop")?;
        // The raw handles' memory kept for work on this stream is free to go (the raw calls
        // between nodes are made on one stream).
        self.rail_kept.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.comm.barrier()?;
        self.ll_since_rail.store(false, Ordering::Relaxed);
        self.rail_combined.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Before a low-latency call: if a normal-mode call between nodes ran since the last, waits
    /// for every rank's to be done (the two modes share `num_rdma_bytes`); then marks that a
    /// low-latency call ran. Collective.
    pub(crate) fn settle_after_rail(&self, stream: &Stream) -> Result<(), EpError> {
        if self.rail_dirty.swap(false, Ordering::Relaxed) {
            self.settle_rail(stream)?;
        }
        self.ll_since_rail.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Before a normal-mode combine between nodes (the one call between nodes that does not
    /// always settle first): if a low-latency call or another combine ran since the dispatch,
    /// waits for every rank's to be done (the low-latency calls share `num_rdma_bytes`; a
    /// peer's sum of the earlier combine may still read its partial rows). Collective: every
    /// rank makes the same calls, so every rank settles here or none.
    fn settle_before_combine(&self, stream: &Stream) -> Result<(), EpError> {
        if self.ll_since_rail.load(Ordering::Relaxed) || self.rail_combined.load(Ordering::Relaxed) {
            self.settle_rail(stream)?;
        }
        self.rail_combined.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// `Err` naming `num_nvl_bytes` where `staging` (the NVL hop's, over a node) holds fewer
    /// rows than the group's busiest forwarder passes on: the same verdict on every rank.
    fn check_node_staging(
        &self,
        plan: &RailPlan,
        staging: Staging,
        shape: RoutingShape,
        hidden: usize,
    ) -> Result<(), EpError> {
        if plan.most_forwarded <= staging.capacity {
            return Ok(());
        }
        let (nodes, ranks) = (plan.nodes.nodes, self.num_ranks());
        let most_tokens = plan.most_forwarded.div_ceil(nodes.max(1));
        let detail = format!(
            "a rank of the group forwards {} rows within its node, and the staging holds {} per rank (about \
             nvl_bytes_hint_between_nodes({most_tokens}, {hidden}, {}, {ranks}, {}) bytes would do)",
            plan.most_forwarded, staging.capacity, shape.topk, plan.nodes.per_node
        );
        Err(self.invalid("num_nvl_bytes", detail))
    }

    /// The rail hop's send head of a notify of `shape`, `int32[tokens][nodes]`, followed by its
    /// inverse, `int32[nodes][tokens]` (the token of each row sent to a node: [`row_token`]).
    pub(crate) fn rail_send_head(&self, shape: RoutingShape, nodes: Nodes) -> Result<DeviceBuffer<i32>, EpError> {
        DeviceBuffer::<i32>::new(self.comm.device(), (2 * shape.tokens * nodes.nodes).max(1))
            .map_err(|source| EpError::Gpu { rank: self.rank(), source })
    }

    /// What a notify between nodes leaves a handle: `plan`, the send head its layout kernel
    /// wrote, and the NVL hop's tensors, allocated for the rows this rank forwards.
    pub(crate) fn internode_handle(
        &self,
        plan: RailPlan,
        rail_send_head: DeviceBuffer<i32>,
        shape: RoutingShape,
        config: Config,
    ) -> Result<InternodeHandle, EpError> {
        let gpu = |source| EpError::Gpu { rank: self.rank(), source };
        let device = self.comm.device();
        let alloc = |len: usize| DeviceBuffer::<i32>::new(device, len.max(1)).map_err(gpu);
        let (k, forwarded, channels) = (plan.nodes.per_node, plan.forwarded, config.channels() as usize);
        let node_layout = LayoutBuffers {
            num_tokens_per_rank: alloc(k)?,
            num_tokens_per_expert: alloc(shape.num_experts / plan.nodes.nodes)?,
            is_token_in_rank: DeviceBuffer::<u8>::new(device, (forwarded * k).max(1)).map_err(gpu)?,
        };
        let node_handle = HandleBuffers {
            rank_prefix_matrix: alloc(k * k)?,
            channel_prefix_matrix: alloc(k * channels)?,
            recv_channel_prefix_matrix: alloc(k * channels)?,
            send_head: alloc(forwarded * k)?,
        };
        Ok(InternodeHandle { plan, rail_send_head, node_layout, node_handle, hidden: None, node_notified: false })
    }

    /// The device communicator's handle (a group spanning nodes has one).
    fn gin_between_nodes(&self) -> Result<weft_types::DevCommHandle, EpError> {
        self.gin_handle().ok_or_else(|| EpError::Unsupported {
            rank: self.rank(),
            detail: "the rail hop on a group of one node".into(),
        })
    }

    /// The node's ranks as the one-node kernels see them.
    fn node_group(&self, nodes: Nodes) -> Group {
        Group { context: self.node_context, ranks: nodes.per_node, arrival: EpRailArrival::default() }
    }

    /// Where the rows this rank receives in `phase` arrive from, one source per node (this
    /// node's own rows are here): the dispatch's forwarded rows (`received[s]` from row
    /// `from[s]`), or the combine's partials of the rows it sent (`sent[s]`, in node s's block
    /// of the partial receive rows). Claims the call's increments of the phase's signal, so
    /// call it only once the call will be launched.
    fn claim_arrival(&self, plan: &RailPlan, phase: RailPhase, capacity: usize) -> Result<EpRailArrival, EpError> {
        let n = plan.nodes;
        let (signal, puts) = match phase {
            RailPhase::Dispatch => (RAIL_DISPATCH_SIGNAL, RAIL_DISPATCH_PUTS),
            RailPhase::Combine => (RAIL_COMBINE_SIGNAL, RAIL_COMBINE_PUTS),
        };
        let mut sources = [Source::default(); MAX_RANKS];
        for (s, source) in sources.iter_mut().enumerate().take(n.nodes) {
            let peer = s * n.per_node + n.local;
            let (from, rows) = match phase {
                RailPhase::Dispatch => (plan.from[s], plan.received[s]),
                RailPhase::Combine => ((s * capacity) as u32, plan.sent[s]),
            };
            let word = if s == n.node { 0 } else { self.rail_signal_word(peer, signal) };
            if s != n.node && word == 0 {
                let detail = format!("rank {peer} of node {s} is not reached through the proxy");
                return Err(EpError::Unsupported { rank: self.rank(), detail });
            }
            *source = Source { word, peer: peer as u32, from, rows };
        }
        let wait = self.comm.wait_context(self.rank(), None);
        Ok(self.rail_signals.claim(phase, &sources[..n.nodes], puts, wait))
    }

    /// This rank's buffer as this GPU maps it.
    fn own_base(&self) -> u64 {
        self.node_context.peers[self.node_context.rank as usize]
    }

    /// The rail regions of a call of `hidden` channels and `topk` slots, or `Err` where they
    /// end past 4 GiB (GIN's commands carry 32-bit offsets).
    fn rail_regions(&self, nodes: Nodes, hidden: usize, topk: usize) -> Result<RailRegions, EpError> {
        let regions = RailRegions::new(self.layout.ll_offset, self.layout.ll_bytes, hidden, topk, nodes.nodes);
        if regions.end > u32::MAX as usize {
            let detail = format!("the buffer's regions end at {} bytes (at most 4 GiB between nodes)", regions.end);
            return Err(self.invalid("num_rdma_bytes", detail));
        }
        Ok(regions)
    }

    /// The arguments every rail kernel shares: the group's shape and, with `regions`, where
    /// the rows lie; with `plan` and `phase`, how the rows of each put are split in chunks.
    fn rail_args(
        &self,
        plan: Option<&RailPlan>,
        phase: Option<RailPhase>,
        nodes: Nodes,
        regions: Option<&RailRegions>,
    ) -> EpRailArgs {
        let mut a = EpRailArgs {
            base: self.own_base(),
            nodes: nodes.nodes as u32,
            node: nodes.node as u32,
            ranks_per_node: nodes.per_node as u32,
            local: nodes.local as u32,
            ranks: self.num_ranks() as u32,
            ..Default::default()
        };
        if let Some(p) = plan {
            (a.before, a.sent, a.from, a.received) = (p.before, p.sent, p.from, p.received);
        }
        if let (Some(p), Some(phase)) = (plan, phase) {
            // Per node d: the chunks of this rank's puts to d, split as d's reader expects.
            let rows = match phase {
                RailPhase::Dispatch => p.sent,
                RailPhase::Combine => p.received,
            };
            for (chunks, &rows) in a.chunks.iter_mut().zip(&rows).take(nodes.nodes) {
                *chunks = rail_chunks(rows);
            }
        }
        if let Some(r) = regions {
            // Every offset fits 32 bits: `rail_regions` refused a larger buffer.
            let o = |offset: usize| offset as u32;
            a.capacity = r.capacity as u32;
            let (d, s) = (r.dispatch_recv, r.dispatch_send);
            (a.recv_x, a.recv_scales, a.recv_topk_idx, a.recv_topk_weights, a.recv_src_idx) =
                (o(d.x), o(d.scales), o(d.topk_idx), o(d.topk_weights), o(d.src_idx));
            (a.send_x, a.send_scales, a.send_topk_idx, a.send_topk_weights, a.send_src_idx) =
                (o(s.x), o(s.scales), o(s.topk_idx), o(s.topk_weights), o(s.src_idx));
            (a.part_x, a.part_topk_weights) = (o(r.combine_send.x), o(r.combine_send.topk_weights));
            (a.part_recv_x, a.part_recv_topk_weights) = (o(r.combine_recv.x), o(r.combine_recv.topk_weights));
        }
        a
    }

    /// The notify between nodes: the rail layout of `layout` (its send head into
    /// `rail_send_head`, `int32[tokens][nodes]`), then the host exchange of every rank's counts
    /// (DeepEP's host sync; it also waits for every rank). Collective.
    ///
    /// # Safety
    /// The layout's tensors must be `shape`'s on this GPU and `rail_send_head` hold
    /// `tokens × nodes` entries, valid until the work on `stream` is done.
    pub(crate) unsafe fn notify_between_nodes(
        &self,
        layout: &LayoutTensors,
        shape: RoutingShape,
        expert_alignment: usize,
        rail_send_head: DevicePtr,
        stream: &Stream,
    ) -> Result<RailPlan, EpError> {
        let nodes = self.nodes()?;
        let ranks = self.num_ranks();
        self.check_routing_over(shape, ranks)?;
        let gpu = |source| EpError::Gpu { rank: self.rank(), source };
        let args = EpRailArgs {
            is_token_in_rank: layout.is_token_in_rank,
            counts: self.rail_counts.ptr(),
            num_tokens_per_rank: layout.num_tokens_per_rank,
            num_tokens_per_expert: layout.num_tokens_per_expert,
            rail_send_head,
            rail_row_token: row_token(rail_send_head, shape.tokens, nodes.nodes),
            tokens: shape.tokens as u32,
            experts: shape.num_experts as u32,
            ..self.rail_args(None, None, nodes, None)
        };
        self.rail_dirty.store(true, Ordering::Relaxed);
        let timer = PhaseTimer::start("notify between nodes", self.rank(), stream);
        // SAFETY: `rail_counts` is ours and holds MAX_RANKS * (2 + MAX_LOCAL_EXPERTS) entries
        // (at least nodes + ranks + experts: checked above); the kernel touches no region of
        // the buffer; the rest is the caller's contract.
        unsafe { self.kernels.rail_layout(stream, args) }.map_err(gpu)?;
        self.synchronize(stream, "EP rail layout")?;
        let words = nodes.nodes + ranks + shape.num_experts;
        let mut bytes = vec![0u8; 4 * words];
        self.rail_counts.read(0, &mut bytes).map_err(gpu)?;
        let rows = self
            .comm
            .bootstrap()
            .all_gather(&bytes)
            .map_err(|source| EpError::Core(weft_core::Error::Bootstrap { rank: self.rank(), source }))?;
        let rows: Vec<Vec<i32>> = rows
            .iter()
            .map(|r| r.chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
            .collect();
        if rows.len() != ranks || rows.iter().any(|r| r.len() != words) {
            let detail = "the ranks' counts differ in shape (every rank must notify the same routing shape)".into();
            return Err(EpError::Unsupported { rank: self.rank(), detail });
        }
        if let Some(t) = timer {
            t.finish("layout, counts exchanged", stream);
        }
        Ok(RailPlan::new(nodes, shape.num_experts, expert_alignment, &rows))
    }

    /// The dispatch between nodes: the rail hop (pack, puts, waits), then the NVL hop (on the
    /// handle's first dispatch its layout and notify over the node, then the one-node dispatch
    /// over the node). Collective.
    ///
    /// # Safety
    /// Every address in `d` must hold its tensor for `shape` on this GPU (outputs
    /// `num_recv_tokens` rows), valid until the work on `stream` is done.
    pub(crate) unsafe fn dispatch_between_nodes(
        &self,
        d: &RailDispatch,
        inter: &mut InternodeHandle,
        shape: RoutingShape,
        config: Config,
        stream: &Stream,
    ) -> Result<(), EpError> {
        let nodes = inter.plan.nodes;
        config.check(self.rank())?;
        if !inter.node_notified && d.topk_idx.is_none() {
            return Err(self.invalid("topk_idx", "required by a handle's first dispatch between nodes"));
        }
        if *inter.hidden.get_or_insert(d.hidden) != d.hidden {
            let detail =
                format!("{} channels, but the handle's first dispatch had {}", d.hidden, inter.hidden.unwrap_or(0));
            return Err(self.invalid("x", detail));
        }
        let (hidden_bytes, num_scales) = (d.x.hidden_bytes(), d.x.num_scales());
        if hidden_bytes == 0 || !hidden_bytes.is_multiple_of(16) {
            return Err(self.invalid("x", format!("rows of {hidden_bytes} bytes (a positive multiple of 16)")));
        }
        self.check_aligned("x", d.x.x())?;
        self.check_aligned("recv_x", d.output.recv_x)?;
        if d.x.scales().is_some() != d.output.recv_x_scales.is_some() {
            return Err(self.invalid("recv_x_scales", "given exactly when x is FP8"));
        }
        let regions = self.rail_regions(nodes, d.hidden, shape.topk)?;
        if shape.tokens > regions.capacity {
            let need = rdma_bytes_hint(shape.tokens, d.hidden, shape.topk, self.num_ranks(), nodes.per_node);
            let detail = format!(
                "{} tokens between nodes need {need} bytes (rdma_bytes_hint); the buffer's {} hold {} tokens",
                shape.tokens, self.layout.ll_bytes, regions.capacity
            );
            return Err(self.invalid("num_rdma_bytes", detail));
        }
        let gpu = |source| EpError::Gpu { rank: self.rank(), source };
        let gin = self.gin_between_nodes()?;
        let topk = if d.topk_idx.is_some() { shape.topk } else { 0 };
        if nodes.per_node > 1 {
            let staging = Staging::dispatch(self.layout.data_bytes, nodes.per_node, hidden_bytes, num_scales, topk);
            self.check_node_staging(&inter.plan, staging, shape, d.hidden)?;
        }
        let scales = match d.x {
            Payload::Fp8 { scales, .. } => Some(scales),
            Payload::Bf16 { .. } => None,
        };
        let x = d.x.x();
        self.settle_rail(stream)?;
        let mut timer = PhaseTimer::start("dispatch between nodes", self.rank(), stream);
        self.rail_dirty.store(true, Ordering::Relaxed);
        let arrival = self.claim_arrival(&inter.plan, RailPhase::Dispatch, regions.capacity)?;
        let args = EpRailArgs {
            rail_send_head: inter.rail_send_head.ptr(),
            rail_row_token: row_token(inter.rail_send_head.ptr(), shape.tokens, nodes.nodes),
            arrival,
            x,
            x_scales: scales.map_or(0, |s| s.ptr),
            scale_token_stride: scales.map_or(0, |s| s.token_stride),
            scale_hidden_stride: scales.map_or(0, |s| s.hidden_stride),
            topk_idx: d.topk_idx.unwrap_or(0),
            topk_weights: d.topk_weights.unwrap_or(0),
            tokens: shape.tokens as u32,
            hidden_bytes: hidden_bytes as u32,
            num_scales: num_scales as u32,
            topk: topk as u32,
            experts: shape.num_experts as u32,
            ..self.rail_args(Some(&inter.plan), Some(RailPhase::Dispatch), nodes, Some(&regions))
        };
        // A dispatch's exchange runs beside its pack, putting each chunk once its tokens are
        // packed, and its NVL hop reads each forwarded row once its chunk has landed; but the
        // first dispatch over a node of several ranks needs every row before its layout, so
        // its exchange follows the pack and the NVL hop follows the exchange (docs/ep.md,
        // "Overlapping the rail hop").
        let cached = inter.node_notified;
        let overlap = cached || nodes.per_node == 1;
        if overlap {
            let side = self.rail_side()?;
            let args = side.beside_pack(args, config.num_sms);
            side.follow(stream).map_err(gpu)?;
            let step = RailStep::PutsAndFlush;
            // SAFETY: the node context addresses this rank's live buffer; the regions lie in
            // it (RailRegions fits them in the low-latency area); the progress words are the
            // side's own; the rest is the caller's contract.
            unsafe { self.kernels.rail_exchange(&side.stream, args, gin, RailPhase::Dispatch, step) }.map_err(gpu)?;
            // SAFETY: as above.
            unsafe { self.kernels.rail(stream, args, config.num_sms, false) }.map_err(gpu)?;
        } else {
            // SAFETY: as above.
            unsafe {
                self.kernels.rail(stream, args, config.num_sms, false).map_err(gpu)?;
                self.exchange_on_rail(stream, args, gin)?;
            }
        }
        if let Some(t) = &mut timer {
            t.mark(if overlap { "pack" } else { "pack and rail exchange" }, stream);
        }
        let hop = NodeHop {
            d,
            regions: &regions,
            topk,
            num_scales,
            arrival: if overlap { arrival } else { Default::default() },
        };
        // SAFETY: as above; the outputs are the caller's, `num_recv_tokens` rows.
        let launched = unsafe {
            if nodes.per_node == 1 {
                self.unpack_forwarded(&hop, inter, config, stream)
            } else {
                self.node_dispatch(&hop, inter, shape, config, &mut timer, stream)
            }
        };
        let finished = if overlap { self.finish_beside(stream, "EP rail dispatch") } else { Ok(()) };
        launched.and(finished)?;
        inter.node_notified = true;
        if let Some(t) = timer {
            t.finish(if overlap { "rail exchange and NVL hop" } else { "NVL hop" }, stream);
        }
        Ok(())
    }

    /// The NVL hop of a dispatch over a node of one rank (docs/ep.md, "One rank per node"): the
    /// forwarded rows are this rank's received rows in the same order, copied into the
    /// outputs as they arrive (`weft_ep_rail_unpack`), with no layout, notify or staging.
    ///
    /// # Safety
    /// As [`Buffer::dispatch_between_nodes`].
    unsafe fn unpack_forwarded(
        &self,
        hop: &NodeHop<'_>,
        inter: &InternodeHandle,
        config: Config,
        stream: &Stream,
    ) -> Result<(), EpError> {
        let unpack = EpDispatchArgs {
            recv_src_idx: hop.d.recv_src_idx,
            tokens: inter.plan.forwarded as u32,
            topk: hop.topk as u32,
            rail: hop.arrival,
            ..dispatch_rows(&hop.input(self.own_base()), &hop.d.output)
        };
        // SAFETY: the forwarded rows lie in this rank's buffer; the outputs are the caller's
        // contract, `forwarded` rows (its `num_recv_tokens` with one rank per node).
        unsafe { self.kernels.rail_unpack(stream, unpack, config.num_sms) }
            .map_err(|source| EpError::Gpu { rank: self.rank(), source })
    }

    /// The NVL hop of a dispatch over a node of several ranks: on the handle's first dispatch
    /// the node's layout and notify of the forwarded rows, then the one-node dispatch over the
    /// node, whose senders wait for each row's chunk where `hop.arrival` says.
    ///
    /// # Safety
    /// As [`Buffer::dispatch_between_nodes`].
    unsafe fn node_dispatch(
        &self,
        hop: &NodeHop<'_>,
        inter: &InternodeHandle,
        shape: RoutingShape,
        config: Config,
        timer: &mut Option<PhaseTimer>,
        stream: &Stream,
    ) -> Result<(), EpError> {
        let (nodes, cached, d) = (inter.plan.nodes, inter.node_notified, hop.d);
        let base = self.own_base();
        let group = Group { arrival: hop.arrival, ..self.node_group(nodes) };
        let node_shape = RoutingShape {
            tokens: inter.plan.forwarded,
            topk: shape.topk,
            num_experts: shape.num_experts / nodes.nodes,
        };
        let recv = hop.regions.dispatch_recv;
        let input = hop.input(base);
        if !cached {
            let l = &inter.node_layout;
            let node_layout = LayoutTensors {
                num_tokens_per_rank: l.num_tokens_per_rank.ptr(),
                num_tokens_per_expert: l.num_tokens_per_expert.ptr(),
                is_token_in_rank: l.is_token_in_rank.ptr(),
            };
            let h = &inter.node_handle;
            // SAFETY: the forwarded top-k indices lie in this rank's buffer, `forwarded` rows
            // of them once the exchange above ran; the node's tensors are sized for them.
            unsafe {
                self.layout_over(base + recv.topk_idx as u64, node_shape, &node_layout, nodes.per_node, stream)?;
                self.notify_in(
                    group,
                    &node_layout,
                    node_shape,
                    inter.plan.expert_alignment,
                    config,
                    h.rank_prefix_matrix.ptr(),
                    h.channel_prefix_matrix.ptr(),
                    stream,
                )?;
            }
            if let Some(t) = timer {
                t.mark("node layout and notify", stream);
            }
        }
        let handle = inter.node_raw(d.recv_src_idx, config.channels());
        // SAFETY: as above; the outputs are the caller's, `num_recv_tokens` rows.
        unsafe { self.dispatch_in(group, &input, &d.output, &handle, node_shape, config, cached, stream) }
    }

    /// The combine between nodes: the one-node combine over the node into this rank's
    /// partials (one per forwarded row), the rail hop back, and the sum of the nodes' partials
    /// in node order. Collective.
    ///
    /// # Safety
    /// Every address in `c` must hold its tensor on this GPU (`x` the handle's received rows,
    /// the outputs `tokens` rows), valid until the work on `stream` is done.
    pub(crate) unsafe fn combine_between_nodes(
        &self,
        c: &RailCombine,
        inter: &InternodeHandle,
        shape: RoutingShape,
        config: Config,
        stream: &Stream,
    ) -> Result<(), EpError> {
        let nodes = inter.plan.nodes;
        if inter.hidden != Some(c.hidden) {
            let detail = format!("{} channels, but the handle's dispatches had {:?}", c.hidden, inter.hidden);
            return Err(self.invalid("x", detail));
        }
        if c.hidden == 0 || !c.hidden.is_multiple_of(8) {
            return Err(self.invalid("x", format!("{} channels per row (a positive multiple of 8)", c.hidden)));
        }
        self.check_aligned("combined_x", c.combined_x)?;
        for (bias, name) in c.bias.iter().zip(["bias[0]", "bias[1]"]) {
            if let Some(b) = *bias {
                self.check_aligned(name, b)?;
            }
        }
        let regions = self.rail_regions(nodes, c.hidden, shape.topk)?;
        let topk = if c.topk_weights.is_some() { shape.topk } else { 0 };
        let one_rank_nodes = nodes.per_node == 1;
        if one_rank_nodes {
            self.check_aligned("x", c.x)?;
        } else {
            let staging = Staging::combine(self.layout.data_bytes, nodes.per_node, c.hidden, topk);
            self.check_node_staging(&inter.plan, staging, shape, c.hidden)?;
        }
        let base = self.own_base();
        let gpu = |source| EpError::Gpu { rank: self.rank(), source };
        let gin = self.gin_between_nodes()?;
        let input = CombineInput {
            x: c.x,
            hidden: c.hidden,
            topk_weights: c.topk_weights.map(|w| (w, topk)),
            bias: [None, None],
        };
        let output = CombineOutput {
            combined_x: base + regions.combine_send.x as u64,
            combined_topk_weights: (topk > 0).then_some(base + regions.combine_send.topk_weights as u64),
        };
        let handle = inter.node_raw(0, config.channels());
        self.settle_before_combine(stream)?;
        self.rail_dirty.store(true, Ordering::Relaxed);
        let mut timer = PhaseTimer::start("combine between nodes", self.rank(), stream);
        let forwarded = inter.plan.forwarded;
        if one_rank_nodes {
            // A node of one rank: the partial of a forwarded row is the row itself (its
            // one-node combine sums that one row from 0, the same bits but for the sign of a
            // zero and a NaN's payload, which the sum of the nodes then treats alike: docs/ep.md,
            // "One rank per node"), so the row and its weights are copied in whole.
            let copies = [
                (output.combined_x, Some(c.x), 2 * c.hidden),
                (output.combined_topk_weights.unwrap_or(0), c.topk_weights, 4 * topk),
            ];
            for (dst, src, row_bytes) in copies {
                if let Some(src) = src.filter(|_| row_bytes > 0) {
                    // SAFETY: `dst` lies in this rank's buffer, sized for `forwarded` rows of
                    // the region; `src` holds `forwarded` rows (the caller's contract: the
                    // handle's received rows).
                    unsafe { stream.copy_async(dst, src, forwarded * row_bytes) }.map_err(gpu)?;
                }
            }
        } else {
            // SAFETY: the partials lie in this rank's buffer, one per forwarded row; the rest
            // is the caller's contract.
            unsafe { self.combine_in(self.node_group(nodes), &input, &output, &handle, forwarded, stream) }?;
        }
        if let Some(t) = &mut timer {
            t.mark("node combine", stream);
        }
        let args = EpRailArgs {
            rail_send_head: inter.rail_send_head.ptr(),
            arrival: self.claim_arrival(&inter.plan, RailPhase::Combine, regions.capacity)?,
            bias0: c.bias[0].unwrap_or(0),
            bias1: c.bias[1].unwrap_or(0),
            combined_x: c.combined_x,
            combined_topk_weights: if topk > 0 { c.combined_topk_weights.unwrap_or(0) } else { 0 },
            tokens: shape.tokens as u32,
            hidden: c.hidden as u32,
            topk: topk as u32,
            experts: shape.num_experts as u32,
            ..self.rail_args(Some(&inter.plan), Some(RailPhase::Combine), nodes, Some(&regions))
        };
        // The sum reads each node's partials once their chunk has landed, while the exchange
        // runs beside it. SAFETY: as in `dispatch_between_nodes`.
        unsafe { self.exchange_beside(stream, args, gin)? };
        // SAFETY: as above.
        let launched = unsafe { self.kernels.rail(stream, args, config.num_sms, true) }.map_err(gpu);
        launched.and(self.finish_beside(stream, "EP rail combine"))?;
        if let Some(t) = timer {
            t.finish("rail exchange and sum of the nodes", stream);
        }
        Ok(())
    }

    /// A dispatch's whole `weft_ep_rail_exchange` on `stream`, waiting for the peers' puts,
    /// then waits for it on
    /// the host, so nothing is queued behind the kernel while it spins on the proxy's work
    /// (docs/ep.md, "The proxy's copies and the hardware queues"): CUDA serves streams through
    /// a few hardware queues, and a copy of the proxy's stream queued behind a launch that
    /// cannot start before the spinning kernel ends would wait for that kernel, which waits for
    /// the copy. The kernel itself ends only once this rank's own puts of the call are
    /// complete, so no proxy work of the call is left to be stuck behind what the caller queues
    /// next.
    ///
    /// # Safety
    /// As [`Kernels::rail_exchange`].
    unsafe fn exchange_on_rail(
        &self,
        stream: &Stream,
        args: EpRailArgs,
        gin: weft_types::DevCommHandle,
    ) -> Result<(), EpError> {
        // SAFETY: the caller's contract.
        unsafe { self.kernels.rail_exchange(stream, args, gin, RailPhase::Dispatch, RailStep::Whole) }
            .map_err(|source| EpError::Gpu { rank: self.rank(), source })?;
        self.synchronize(stream, "EP rail exchange")
    }

    /// The rail exchange of a combine, whose sum overlaps it (docs/ep.md, "Overlapping the rail
    /// hop"): `weft_ep_rail_exchange`'s puts on `stream`, which never wait for another rank, so
    /// the reader the caller enqueues next on `stream` starts once they are posted and waits for
    /// each chunk of the peers' as it lands; then the flush of this rank's puts on the side
    /// stream, after the puts. So no launch ever waits behind a kernel that spins on the proxy,
    /// and the reader never waits for a kernel that might not find an SM. The caller ends the
    /// call with [`Buffer::finish_beside`].
    ///
    /// # Safety
    /// As [`Kernels::rail_exchange`].
    unsafe fn exchange_beside(
        &self,
        stream: &Stream,
        args: EpRailArgs,
        gin: weft_types::DevCommHandle,
    ) -> Result<(), EpError> {
        let gpu = |source| EpError::Gpu { rank: self.rank(), source };
        let side = self.rail_side()?;
        let phase = RailPhase::Combine;
        // SAFETY: the caller's contract.
        unsafe { self.kernels.rail_exchange(stream, args, gin, phase, RailStep::Puts) }.map_err(gpu)?;
        side.follow(stream).map_err(gpu)?;
        // SAFETY: as above.
        unsafe { self.kernels.rail_exchange(&side.stream, args, gin, phase, RailStep::Flush) }.map_err(gpu)
    }

    /// What the rail hop runs beside the caller's stream (a group spanning nodes has it).
    fn rail_side(&self) -> Result<&RailSide, EpError> {
        self.rail_side.as_ref().ok_or_else(|| EpError::Unsupported {
            rank: self.rank(),
            detail: "the rail hop on a group of one node".into(),
        })
    }

    /// Waits for `stream` and the side stream (each bounded as [`Buffer::synchronize`]), then
    /// checks the device's error record: the first failure, if any.
    fn finish_beside(&self, stream: &Stream, what: &str) -> Result<(), EpError> {
        let main = self.synchronize(stream, what);
        let side = self.rail_side.as_ref().map_or(Ok(()), |side| self.synchronize(&side.stream, what));
        main.and(side)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DispatchShape, RankRouting, dispatch, dispatch_internode, dispatch_layout};

    /// The plan each rank computes from the exchanged counts places its rows where the model's
    /// rail hop does, and counts what the model says it receives.
    /// What each rank contributes to the count exchange, as the notify between nodes sends it:
    /// its tokens per node, per rank and per expert.
    fn exchanged_rows(
        routes: &[(Vec<i64>, Vec<f32>)],
        topk: usize,
        experts: usize,
        nodes: usize,
        ranks: usize,
    ) -> Vec<Vec<i32>> {
        routes
            .iter()
            .map(|(idx, _)| {
                let by_node = dispatch_layout(idx, topk, experts, nodes);
                let by_rank = dispatch_layout(idx, topk, experts, ranks);
                [by_node.tokens_per_rank, by_rank.tokens_per_rank, by_rank.tokens_per_expert].concat()
            })
            .collect()
    }

    #[test]
    fn every_ranks_plan_follows_the_model() {
        for (ranks, k, seed) in [(4, 2, 1u64), (2, 1, 2), (8, 4, 3), (8, 2, 4), (6, 3, 5)] {
            let (experts, topk, tokens) = (ranks * 3, 4, 37);
            let spec = crate::model::RoutingSpec { tokens, topk, experts: 0..experts, drop_one_in: 5 };
            let routes: Vec<_> =
                (0..ranks).map(|r| crate::model::random_routing(seed * 100 + r as u64, &spec)).collect();
            let routing: Vec<RankRouting<'_>> =
                routes.iter().map(|(i, w)| RankRouting { topk_idx: i, topk_weights: w }).collect();
            let shape = DispatchShape { ranks, experts, topk, channels: 3, expert_alignment: 4 };
            let flat = dispatch(shape, &routing);
            let two_hop = dispatch_internode(shape, k, &routing);
            let nodes = ranks / k;
            let rows = exchanged_rows(&routes, topk, experts, nodes, ranks);
            for me in 0..ranks {
                let place = Nodes { nodes, per_node: k, node: me / k, local: me % k };
                let plan = RailPlan::new(place, experts, 4, &rows);
                let rail = &two_hop[me].rail;
                assert_eq!(plan.forwarded, rail.src_node.len(), "rank {me}");
                assert_eq!(plan.counts.num_recv_tokens, flat[me].len(), "rank {me}");
                assert_eq!(plan.counts.num_recv_tokens_per_expert, flat[me].recv_tokens_per_expert, "rank {me}");
                assert_eq!(plan.rank_prefix_matrix, flat[me].rank_prefix_matrix, "rank {me}");
                for d in 0..nodes {
                    let prefix = &two_hop[d * k + me % k].rail.rail_prefix_matrix;
                    let before = if place.node == 0 { 0 } else { prefix[(place.node - 1) * nodes + d] };
                    assert_eq!(plan.before[d] as i32, before, "rank {me} node {d}");
                    let sent = rail.rail_send_head.chunks(nodes).filter(|h| h[d] >= 0).count();
                    assert_eq!(plan.sent[d] as usize, sent);
                    // Forwarded rows from source node d: contiguous from `from[d]`.
                    let from = plan.from[d] as usize;
                    let got = &rail.src_node[from..from + plan.received[d] as usize];
                    assert!(got.iter().all(|&s| s == d), "rank {me} node {d}");
                }
                assert_eq!(plan.received[..nodes].iter().sum::<u32>() as usize, rail.src_node.len());
            }
            // Every rank knows the busiest forwarder of the group alike.
            let plans: Vec<RailPlan> = (0..ranks)
                .map(|me| RailPlan::new(Nodes { nodes, per_node: k, node: me / k, local: me % k }, experts, 4, &rows))
                .collect();
            let busiest = (0..ranks).map(|me| two_hop[me].rail.src_node.len()).max().unwrap();
            assert!(plans.iter().all(|p| p.most_forwarded == busiest), "{ranks} ranks, {k} per node");
        }
    }

    /// A node of one rank forwards each row to itself, in order, as `weft_ep_rail_unpack` and
    /// the combine's copies assume: the NVL hop's received row i is forwarded row i, with the
    /// forwarded experts and their weights (0 where no expert is named); and the node's
    /// one-node combine of a row is the row itself, weights included.
    #[test]
    fn a_node_of_one_rank_passes_its_forwarded_rows_on_unchanged() {
        use crate::model::{CombineInput, combine};
        use half::bf16;
        for (ranks, seed) in [(2, 21u64), (3, 22), (4, 23)] {
            let (experts, topk, hidden) = (ranks * 4, 4, 16);
            let routes: Vec<_> = (0..ranks)
                .map(|r| {
                    let spec =
                        crate::model::RoutingSpec { tokens: 20 + 3 * r, topk, experts: 0..experts, drop_one_in: 5 };
                    crate::model::random_routing(seed * 10 + r as u64, &spec)
                })
                .collect();
            let routing: Vec<RankRouting<'_>> =
                routes.iter().map(|(i, w)| RankRouting { topk_idx: i, topk_weights: w }).collect();
            let shape = DispatchShape { ranks, experts, topk, channels: 3, expert_alignment: 1 };
            for (me, r) in dispatch_internode(shape, 1, &routing).iter().enumerate() {
                let rows = r.rail.src_node.len();
                assert_eq!(r.nvl.recv_src_idx, (0..rows as i32).collect::<Vec<_>>(), "rank {me}");
                assert_eq!(r.nvl.recv_topk_idx, r.rail.topk_idx, "rank {me}");
                let named = |(&e, &w): (&i64, &f32)| if e >= 0 { w } else { 0.0 };
                let weights: Vec<f32> = r.rail.topk_idx.iter().zip(&r.rail.topk_weights).map(named).collect();
                assert_eq!(r.nvl.recv_topk_weights, weights, "rank {me}");
                let x: Vec<bf16> = (0..rows * hidden).map(|i| bf16::from_f32((i % 29) as f32 - 14.0)).collect();
                let input = CombineInput { x: &x, topk_weights: Some(&weights), bias: [None, None] };
                let partial = combine(std::slice::from_ref(&r.nvl), &[input], hidden, topk);
                assert_eq!(partial[0].x, x, "rank {me}");
                assert_eq!(partial[0].topk_weights.as_deref(), Some(&weights[..]), "rank {me}");
            }
        }
    }

    /// The rail kernels' index arithmetic, replayed on host buffers laid out by `RailRegions`
    /// with each rank's `RailPlan`: `weft_ep_rail_pack` (own node's rows into the receive rows
    /// at `before[node] + head`, the others' into send block `d · capacity + head`), the
    /// dispatch's `weft_ep_rail_exchange` (each field array from `d · capacity` to the rail
    /// peer's receive rows from `before[d]`), the combine's (partials from `from[s]` to the
    /// source's partial rows from `node · capacity`) and `weft_ep_rail_sum`'s reads. A
    /// forwarder's receive rows must be the model's forwarded rows, and every partial the sum
    /// reads must be its own token's from the right node.
    #[test]
    fn the_rail_kernels_offsets_deliver_the_models_rows() {
        for (ranks, k, seed) in [(4, 2, 7u64), (2, 1, 8), (8, 2, 9), (6, 2, 10), (8, 4, 11)] {
            let (experts, topk, hidden) = (ranks * 2, 3, 8);
            let tokens = |r: usize| 5 + 3 * r;
            let routes: Vec<_> = (0..ranks)
                .map(|r| {
                    let spec =
                        crate::model::RoutingSpec { tokens: tokens(r), topk, experts: 0..experts, drop_one_in: 4 };
                    crate::model::random_routing(seed * 31 + r as u64, &spec)
                })
                .collect();
            let routing: Vec<RankRouting<'_>> =
                routes.iter().map(|(i, w)| RankRouting { topk_idx: i, topk_weights: w }).collect();
            let shape = DispatchShape { ranks, experts, topk, channels: 2, expert_alignment: 1 };
            let two_hop = dispatch_internode(shape, k, &routing);
            let nodes = ranks / k;
            let node_experts = experts / nodes;
            let rows = exchanged_rows(&routes, topk, experts, nodes, ranks);
            let plans: Vec<RailPlan> = (0..ranks)
                .map(|me| RailPlan::new(Nodes { nodes, per_node: k, node: me / k, local: me % k }, experts, 1, &rows))
                .collect();
            let max_tokens = (0..ranks).map(tokens).max().unwrap();
            let bytes = rdma_bytes_hint(max_tokens, hidden, topk, ranks, k);
            let r = RailRegions::new(0, bytes, hidden, topk, nodes);
            assert!(r.capacity >= max_tokens);
            let mut mem = vec![vec![0u8; r.end]; ranks];
            let put = |m: &mut [u8], at: usize, v: &[u8]| m[at..at + v.len()].copy_from_slice(v);
            let get = |m: &[u8], at: usize| i64::from_le_bytes(m[at..at + 8].try_into().unwrap());
            // The rail send head (weft_ep_rail_layout) and the pack. The payload's 16 bytes
            // name (source rank, token); fields as the kernel writes them.
            let heads: Vec<Vec<i32>> = (0..ranks).map(|me| two_hop[me].rail.rail_send_head.clone()).collect();
            for me in 0..ranks {
                let (node, plan) = (me / k, &plans[me]);
                for t in 0..tokens(me) {
                    for d in 0..nodes {
                        let h = heads[me][t * nodes + d];
                        if h < 0 {
                            continue;
                        }
                        let mine = d == node;
                        let row = if mine { plan.before[d] as usize } else { d * r.capacity } + h as usize;
                        let f = if mine { r.dispatch_recv } else { r.dispatch_send };
                        put(
                            &mut mem[me],
                            f.x + row * 2 * hidden,
                            &[(me as i64).to_le_bytes(), (t as i64).to_le_bytes()].concat(),
                        );
                        for j in 0..topk {
                            let e = routes[me].0[t * topk + j];
                            let first = (d * node_experts) as i64;
                            let local = if e >= first && e < first + node_experts as i64 { e - first } else { -1 };
                            put(&mut mem[me], f.topk_idx + (row * topk + j) * 8, &local.to_le_bytes());
                        }
                        put(&mut mem[me], f.src_idx + row * 4, &(t as i32).to_le_bytes());
                    }
                }
            }
            // The dispatch's exchange: thread d of rank (node, l) puts to (d, l).
            let snapshot = mem.clone();
            for me in 0..ranks {
                let (node, l, plan) = (me / k, me % k, &plans[me]);
                for d in (0..nodes).filter(|&d| d != node) {
                    let (rows, at, from) = (plan.sent[d] as usize, plan.before[d] as usize, d * r.capacity);
                    let (src, dst) = (r.dispatch_send, r.dispatch_recv);
                    for (s_off, d_off, b) in [
                        (src.x, dst.x, 2 * hidden),
                        (src.topk_idx, dst.topk_idx, 8 * topk),
                        (src.src_idx, dst.src_idx, 4),
                    ] {
                        let bytes = snapshot[me][s_off + from * b..s_off + (from + rows) * b].to_vec();
                        put(&mut mem[d * k + l], d_off + at * b, &bytes);
                    }
                }
            }
            // Every forwarder holds the model's forwarded rows, in order.
            for f in 0..ranks {
                let want = &two_hop[f].rail;
                assert_eq!(plans[f].forwarded, want.src_node.len());
                for row in 0..plans[f].forwarded {
                    let source = get(&mem[f], r.dispatch_recv.x + row * 2 * hidden) as usize;
                    let token = get(&mem[f], r.dispatch_recv.x + row * 2 * hidden + 8);
                    assert_eq!(
                        (source / k, source % k),
                        (want.src_node[row], f % k),
                        "ranks {ranks} rank {f} row {row}"
                    );
                    assert_eq!(token, i64::from(want.src_idx[row]));
                    for j in 0..topk {
                        assert_eq!(
                            get(&mem[f], r.dispatch_recv.topk_idx + (row * topk + j) * 8),
                            want.topk_idx[row * topk + j]
                        );
                    }
                }
                // The forwarder's partial of each row names it (the NVL combine's output).
                for row in 0..plans[f].forwarded {
                    let named = mem[f][r.dispatch_recv.x + row * 2 * hidden..][..16].to_vec();
                    let at = r.combine_send.x + row * 2 * hidden;
                    put(&mut mem[f], at, &named);
                }
            }
            // The combine's exchange: thread s of forwarder (node, l) puts to (s, l).
            let snapshot = mem.clone();
            for f in 0..ranks {
                let (node, l, plan) = (f / k, f % k, &plans[f]);
                for s in (0..nodes).filter(|&s| s != node) {
                    let (rows, from, at) = (plan.received[s] as usize, plan.from[s] as usize, node * r.capacity);
                    let b = 2 * hidden;
                    let bytes = snapshot[f][r.combine_send.x + from * b..r.combine_send.x + (from + rows) * b].to_vec();
                    put(&mut mem[s * k + l], r.combine_recv.x + at * b, &bytes);
                }
            }
            // The sum's reads: every node's partial of every token is that token's.
            for me in 0..ranks {
                let (node, plan) = (me / k, &plans[me]);
                for t in 0..tokens(me) {
                    for d in 0..nodes {
                        let h = heads[me][t * nodes + d];
                        if h < 0 {
                            continue;
                        }
                        let at = if d == node {
                            r.combine_send.x + (plan.before[d] as usize + h as usize) * 2 * hidden
                        } else {
                            r.combine_recv.x + (d * r.capacity + h as usize) * 2 * hidden
                        };
                        assert_eq!(
                            (get(&mem[me], at), get(&mem[me], at + 8)),
                            (me as i64, t as i64),
                            "rank {me} token {t} node {d}"
                        );
                    }
                }
            }
        }
    }
}
