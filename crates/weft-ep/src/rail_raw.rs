//! The normal mode between nodes on addresses (what `weft.ep`'s Python calls): the raw layer's
//! `notify_dispatch`, `dispatch` and `combine` for a group spanning nodes. DeepEP's internode
//! handle becomes a [`RailHandle`], owned by the caller, which holds what the two hops need
//! besides the caller's tensors (the rail hop's send head and plan, the NVL hop's layout and
//! handle over the node, the routing and the channels); the calls are those of the typed layer
//! (`crate::typed`, docs/ep.md "Normal mode between nodes") without its views.
//!
//! **Lifetimes.** The caller's stream may be borrowed (Python's), so the calls do not have it
//! retain the handle's memory (a borrowed stream waits for its work when dropped, which would
//! make every call synchronous). The buffer keeps that memory instead, until the next dispatch
//! between nodes has settled its stream, or until the buffer goes: a handle dropped while its
//! kernels run frees nothing under them. So these calls are made on one stream.

use std::sync::Arc;

use weft_gpu::{DeviceBuffer, DeviceMemory, DevicePtr, Stream};

use crate::buffer::{Buffer, Config};
use crate::error::EpError;
use crate::internode::{InternodeHandle, RailCombine, RailDispatch};
use crate::raw::{CombineInput, CombineOutput, DispatchInput, DispatchOutput, LayoutTensors, RecvCounts, RoutingShape};

/// What a notify between nodes leaves for the dispatches and the combine of its routing.
#[derive(Debug)]
pub struct RailHandle {
    inter: Box<InternodeHandle>,
    /// The group's `rank_prefix_matrix`, `int32[ranks][ranks]`, which the notify also copied
    /// into the caller's tensor.
    rank_prefix_matrix: DeviceBuffer<i32>,
    /// Every allocation above, shared with the buffer while kernels may use them.
    memories: Arc<[Arc<DeviceMemory>]>,
    shape: RoutingShape,
    config: Config,
    /// Whether a dispatch has run with it (the combine needs its receive layout).
    dispatched: bool,
}

impl RailHandle {
    /// What the notify counted for this rank.
    pub fn counts(&self) -> &RecvCounts {
        &self.inter.plan.counts
    }

    /// The routing of the notify.
    pub fn shape(&self) -> RoutingShape {
        self.shape
    }
}

impl Buffer {
    /// Keeps `handle`'s memory until the next dispatch between nodes settles (see the module
    /// docs).
    fn keep(&self, handle: &RailHandle) {
        let mut kept = self.rail_kept.lock().unwrap_or_else(|p| p.into_inner());
        if !kept.iter().any(|k| Arc::ptr_eq(k, &handle.memories)) {
            kept.push(Arc::clone(&handle.memories));
        }
    }

    fn check_spans_nodes(&self, call: &str) -> Result<(), EpError> {
        if self.spans_nodes() {
            return Ok(());
        }
        let detail = format!("{call} between nodes on a group of one node (call the one-node form)");
        Err(EpError::Unsupported { rank: self.rank(), detail })
    }

    /// The notify of a dispatch between nodes: the rail layout of `layout` and the host
    /// exchange of every rank's counts (which waits for `stream` and every rank), the group's
    /// `rank_prefix_matrix` (`int32[ranks][ranks]`) copied into the caller's on `stream`.
    /// Returns the handle of the routing, its counts read. Collective.
    ///
    /// # Safety
    /// As [`Buffer::raw_get_dispatch_layout`]: `layout`'s tensors are `shape`'s on this GPU
    /// (as `get_dispatch_layout` wrote them) and `rank_prefix_matrix` holds `ranks × ranks`
    /// entries, valid until the work on `stream` is done.
    pub unsafe fn raw_notify_between_nodes(
        &self,
        layout: &LayoutTensors,
        shape: RoutingShape,
        expert_alignment: usize,
        config: Config,
        rank_prefix_matrix: DevicePtr,
        stream: &Stream,
    ) -> Result<RailHandle, EpError> {
        self.check_spans_nodes("notify_dispatch")?;
        config.check(self.rank())?;
        let gpu = |source| EpError::Gpu { rank: self.rank(), source };
        let nodes = self.nodes()?;
        let rail_send_head = self.rail_send_head(shape, nodes)?;
        // SAFETY: `rail_send_head` holds tokens × nodes entries and lives in the handle; the
        // rest is the caller's contract.
        let plan = unsafe { self.notify_between_nodes(layout, shape, expert_alignment, rail_send_head.ptr(), stream)? };
        let mut prefix = DeviceBuffer::<i32>::new(self.comm.device(), plan.rank_prefix_matrix.len()).map_err(gpu)?;
        prefix.copy_from_host(&plan.rank_prefix_matrix).map_err(gpu)?;
        let entries = plan.rank_prefix_matrix.len();
        // Everything is allocated before the copy is queued: a failure leaves no copy pending.
        let inter = Box::new(self.internode_handle(plan, rail_send_head, shape, config)?);
        let memories = inter.memories().into_iter().chain([prefix.shared_memory()]).cloned().collect();
        let handle = RailHandle { inter, rank_prefix_matrix: prefix, memories, shape, config, dispatched: false };
        self.keep(&handle);
        // SAFETY: the caller's tensor holds ranks × ranks entries (its contract), the handle's
        // as many, kept by the buffer until the work on the stream is done.
        unsafe { stream.copy_async(rank_prefix_matrix, handle.rank_prefix_matrix.ptr(), 4 * entries) }.map_err(gpu)?;
        Ok(handle)
    }

    /// The dispatch between nodes of `handle`'s routing: `input`'s rows (with top-k on the
    /// handle's first dispatch; without, DeepEP's cached dispatch) into `output` and
    /// `recv_src_idx` (`handle.counts().num_recv_tokens` rows each). Collective.
    ///
    /// # Safety
    /// As [`Buffer::raw_dispatch`]: every address holds its tensor for the handle's routing on
    /// this GPU (the outputs the handle's received rows), valid until the work on `stream` is
    /// done.
    pub unsafe fn raw_dispatch_between_nodes(
        &self,
        input: &DispatchInput,
        output: &DispatchOutput,
        recv_src_idx: DevicePtr,
        handle: &mut RailHandle,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.check_spans_nodes("dispatch")?;
        let hidden = input.x.hidden();
        let rail = RailDispatch {
            x: input.x,
            hidden,
            topk_idx: input.topk_idx,
            topk_weights: input.topk_weights,
            output: *output,
            recv_src_idx,
        };
        let (shape, config) = (handle.shape, handle.config);
        // SAFETY: the handle's tensors are its notify's, kept by the buffer until the stream's
        // work is done (the dispatch settles first, so they are kept after it); the rest is
        // the caller's contract.
        let result = unsafe { self.dispatch_between_nodes(&rail, &mut handle.inter, shape, config, stream) };
        self.keep(handle);
        result?;
        handle.dispatched = true;
        Ok(())
    }

    /// The combine between nodes of a dispatched `handle`: `input`'s received rows back to
    /// their tokens' ranks, summed there into `output` (the routing's tokens). Collective.
    ///
    /// # Safety
    /// As [`Buffer::raw_combine`]: `input.x` holds the handle's received rows and the outputs
    /// the routing's tokens on this GPU, valid until the work on `stream` is done.
    pub unsafe fn raw_combine_between_nodes(
        &self,
        input: &CombineInput,
        output: &CombineOutput,
        handle: &RailHandle,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.check_spans_nodes("combine")?;
        if !handle.dispatched {
            let detail = "no dispatch has run with it: its receive layout is unwritten";
            return Err(self.invalid("handle", detail));
        }
        if let Some((_, topk)) = input.topk_weights.filter(|&(_, k)| k != handle.shape.topk) {
            let detail = format!("{topk} weights per row, but the handle's routing has {}", handle.shape.topk);
            return Err(self.invalid("topk_weights", detail));
        }
        let rail = RailCombine {
            x: input.x,
            hidden: input.hidden,
            topk_weights: input.topk_weights.map(|(ptr, _)| ptr),
            bias: input.bias,
            combined_x: output.combined_x,
            combined_topk_weights: output.combined_topk_weights,
        };
        self.keep(handle);
        // SAFETY: as in `raw_dispatch_between_nodes`.
        unsafe { self.combine_between_nodes(&rail, &handle.inter, handle.shape, handle.config, stream) }
    }
}
