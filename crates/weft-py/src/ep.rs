//! The EP calls of `weft._weft` (`ep_*`): weft-ep's raw layer over device addresses, shapes
//! and a CUDA stream handle, for `weft.ep`'s one adapter (`python/weft/ep/_native.py`). Python
//! checks every tensor and allocates every output (torch); these functions only marshal, then
//! call weft-ep with the GIL released. weft-ep checks shapes and sizes again, so a wrong one is
//! an `InvalidArgumentError` naming the argument.
//!
//! The host syncs are [`ep_notify_dispatch`]'s and [`ep_notify_between_nodes`]' (a dispatch
//! without a handle must learn how many rows it receives before Python can allocate them, as
//! DeepEP's does) and, between nodes, the start of every dispatch (it waits for the stream's
//! earlier work and every rank, so no put lands where an earlier call still reads). Between
//! nodes the handle's own tensors are weft-ep's ([`EpRailHandle`]).

use std::sync::RwLock;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use weft::ep::low_latency::{LlCombineTensors, LlDispatchTensors, LlKernels, LlShape};
use weft::ep::raw::{
    CombineInput, CombineOutput, DispatchInput, DispatchOutput, Handle, LayoutTensors, MAX_TOPK, Payload, RoutingShape,
    Scales,
};
use weft::ep::{Buffer, Config, EpError, RailHandle};
use weft::gpu::{DevicePtr, Stream};

use crate::communicator::Communicator;
use crate::error::ep_to_py;

/// One rank's EP buffer (private: use `weft.ep.Buffer`). `ep_buffer_destroy` releases it; any
/// later call is a `RuntimeError`.
#[pyclass(module = "weft._weft", frozen)]
pub(crate) struct EpBuffer {
    buffer: RwLock<Option<Buffer>>,
}

/// A normal-mode routing: this rank's tokens, top-k entries per token and the group's experts.
type Routing = (usize, usize, usize);

fn routing((tokens, topk, num_experts): Routing) -> RoutingShape {
    RoutingShape { tokens, topk, num_experts }
}

fn optional(ptr: DevicePtr) -> Option<DevicePtr> {
    (ptr != 0).then_some(ptr)
}

/// Contiguous f32 scales, `[rows][hidden / 128]`, at `ptr` (0: none).
fn row_scales(ptr: DevicePtr, hidden: usize) -> Option<Scales> {
    optional(ptr).map(|ptr| Scales { ptr, token_stride: hidden.div_ceil(128) as u32, hidden_stride: 1 })
}

/// Rows of `hidden` channels at `x`: E4M3 with the scales at `x_scales`, or BF16 (0).
fn payload(x: DevicePtr, x_scales: DevicePtr, hidden: usize) -> Payload {
    match row_scales(x_scales, hidden) {
        Some(scales) => Payload::Fp8 { x, scales, hidden },
        None => Payload::Bf16 { x, hidden },
    }
}

/// A dispatch's rows (0: an absent tensor): `x` and its scales, the top-k indices and weights,
/// and the outputs `recv_x`, its scales, `recv_topk_idx` and `recv_topk_weights`.
fn dispatch_rows(
    (x, x_scales): (DevicePtr, DevicePtr),
    hidden: usize,
    (topk_idx, topk_weights): (DevicePtr, DevicePtr),
    (recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights): (DevicePtr, DevicePtr, DevicePtr, DevicePtr),
) -> (DispatchInput, DispatchOutput) {
    let input = DispatchInput {
        x: payload(x, x_scales, hidden),
        topk_idx: optional(topk_idx),
        topk_weights: optional(topk_weights),
    };
    let output = DispatchOutput {
        recv_x,
        recv_x_scales: row_scales(recv_x_scales, hidden),
        recv_topk_idx: optional(recv_topk_idx),
        recv_topk_weights: optional(recv_topk_weights),
    };
    (input, output)
}

/// A combine's rows (0: an absent tensor): `x` of `hidden` channels, the received top-k
/// weights (`topk` per row), up to two biases, and the outputs.
fn combine_rows(
    x: DevicePtr,
    hidden: usize,
    (topk_weights, topk): (DevicePtr, usize),
    bias: (DevicePtr, DevicePtr),
    (combined_x, combined_topk_weights): (DevicePtr, DevicePtr),
) -> (CombineInput, CombineOutput) {
    let input = CombineInput {
        x,
        hidden,
        topk_weights: optional(topk_weights).map(|p| (p, topk)),
        bias: [optional(bias.0), optional(bias.1)],
    };
    (input, CombineOutput { combined_x, combined_topk_weights: optional(combined_topk_weights) })
}

/// Runs `call` on `buffer`'s weft-ep buffer and the stream whose handle is `stream`, without
/// the GIL.
fn on_stream<R: Send>(
    buffer: &Bound<'_, EpBuffer>,
    stream: usize,
    call: impl FnOnce(&Buffer, &Stream) -> Result<R, EpError> + Send,
) -> PyResult<R> {
    let lock = &buffer.get().buffer;
    let result = buffer.py().detach(|| {
        let guard = lock.read().map_err(|_| Refused::Poisoned)?;
        let buffer = guard.as_ref().ok_or(Refused::Destroyed)?;
        // SAFETY: the handle is the caller's live stream of this GPU's primary context (the
        // Buffer's communication stream or torch's current stream), used only for this call's
        // enqueues.
        let stream = unsafe { Stream::borrowed(buffer.communicator().device(), stream as *mut std::ffi::c_void as _) };
        call(buffer, &stream).map_err(Refused::Ep)
    });
    result.map_err(|refused| match refused {
        Refused::Ep(error) => ep_to_py(error),
        Refused::Destroyed => PyRuntimeError::new_err("the EP buffer was destroyed (Buffer.destroy)"),
        Refused::Poisoned => PyRuntimeError::new_err("the EP buffer is unusable: a call on it panicked"),
    })
}

/// Why a call on an EP buffer failed.
enum Refused {
    Ep(EpError),
    Destroyed,
    Poisoned,
}

/// The EP buffer of `comm`'s rank: `num_nvl_bytes` of normal-mode staging, `num_rdma_bytes`
/// for the low-latency mode. On a communicator spanning nodes weft-ep makes `num_rdma_bytes`
/// window 0 of a device communicator, for the low-latency mode and the normal mode's rail hop;
/// `num_nvl_bytes` then stages the normal mode's hop within the node. Collective.
#[pyfunction]
fn ep_buffer_create(
    py: Python<'_>,
    comm: &Bound<'_, Communicator>,
    num_nvl_bytes: usize,
    num_rdma_bytes: usize,
) -> PyResult<EpBuffer> {
    let comm = comm.get().coll.communicator();
    let buffer = py.detach(|| Buffer::new(comm, num_nvl_bytes, num_rdma_bytes)).map_err(ep_to_py)?;
    Ok(EpBuffer { buffer: RwLock::new(Some(buffer)) })
}

/// Releases `buffer` (after the work queued on it is done: the caller synchronises first).
#[pyfunction]
fn ep_buffer_destroy(py: Python<'_>, buffer: &Bound<'_, EpBuffer>) -> PyResult<()> {
    let lock = &buffer.get().buffer;
    // The buffer is dropped (its memory freed) without the GIL.
    let taken = py.detach(|| lock.write().map(|mut b| b.take().is_some()).map_err(drop));
    match taken {
        Ok(true) => Ok(()),
        Ok(false) => Err(PyRuntimeError::new_err("the EP buffer was destroyed already")),
        Err(_) => Err(PyRuntimeError::new_err("the EP buffer is unusable: a call on it panicked")),
    }
}

/// `num_nvl_bytes` for dispatching and combining up to `max_tokens` tokens per rank of `hidden`
/// channels with up to `topk` experts each over `num_ranks` ranks.
#[pyfunction]
fn ep_nvl_bytes_hint(max_tokens: usize, hidden: usize, topk: usize, num_ranks: usize) -> usize {
    weft::ep::nvl_bytes_hint(max_tokens, hidden, topk.min(MAX_TOPK), num_ranks)
}

/// DeepEP's `get_low_latency_rdma_size_hint` for weft-ep's low-latency area on one node.
#[pyfunction]
fn ep_low_latency_rdma_size_hint(
    num_max_dispatch_tokens_per_rank: usize,
    hidden: usize,
    num_ranks: usize,
    num_experts: usize,
) -> usize {
    weft::ep::low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts)
}

/// The low-latency bytes (`num_rdma_bytes`) of a group spanning nodes: weft-ep's one-node area
/// plus the send regions and count rows of the path through the proxy.
#[pyfunction]
fn ep_low_latency_net_bytes_hint(num_max_dispatch_tokens_per_rank: usize, hidden: usize, num_experts: usize) -> usize {
    weft::ep::low_latency_net_bytes_hint(num_max_dispatch_tokens_per_rank, hidden, num_experts)
}

/// `get_dispatch_layout` of `topk_idx` into the three layout tensors.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // DeepEP's argument list, as addresses
fn ep_get_dispatch_layout(
    buffer: &Bound<'_, EpBuffer>,
    topk_idx: DevicePtr,
    routing: Routing,
    num_tokens_per_rank: DevicePtr,
    num_tokens_per_expert: DevicePtr,
    is_token_in_rank: DevicePtr,
    stream: usize,
) -> PyResult<()> {
    let out = LayoutTensors { num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank };
    // SAFETY: Python passes the addresses of live, checked tensors of this GPU of the shapes the
    // call documents, and keeps them referenced until the stream's work is done.
    on_stream(buffer, stream, |b, s| unsafe { b.raw_get_dispatch_layout(topk_idx, self::routing(routing), &out, s) })
}

/// The notify phase of a dispatch without a handle, then the host sync for its counts:
/// returns `(num_recv_tokens, num_recv_tokens_per_expert_list)`. Collective.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // DeepEP's argument list, as addresses
fn ep_notify_dispatch(
    buffer: &Bound<'_, EpBuffer>,
    layout: (DevicePtr, DevicePtr, DevicePtr),
    routing: Routing,
    expert_alignment: usize,
    num_sms: u32,
    rank_prefix_matrix: DevicePtr,
    channel_prefix_matrix: DevicePtr,
    stream: usize,
) -> PyResult<(usize, Vec<i32>)> {
    let layout =
        LayoutTensors { num_tokens_per_rank: layout.0, num_tokens_per_expert: layout.1, is_token_in_rank: layout.2 };
    let shape = self::routing(routing);
    on_stream(buffer, stream, |b, s| {
        b.communicator().settle_before_launch()?;
        // SAFETY: as in ep_get_dispatch_layout.
        unsafe {
            b.raw_notify_dispatch(
                &layout,
                shape,
                expert_alignment,
                Config { num_sms },
                rank_prefix_matrix,
                channel_prefix_matrix,
                s,
            )?;
        }
        let counts = b.recv_counts(s, shape.num_experts)?;
        Ok((counts.num_recv_tokens, counts.num_recv_tokens_per_expert))
    })
}

/// DeepEP's intranode handle as addresses in its order, then the rows this rank received and
/// the channels of the dispatch that made it (the width of its channel prefix matrices).
type HandleArg = (DevicePtr, DevicePtr, DevicePtr, DevicePtr, DevicePtr, DevicePtr, usize, u32);

fn handle(p: HandleArg) -> Handle {
    Handle {
        rank_prefix_matrix: p.0,
        channel_prefix_matrix: p.1,
        recv_channel_prefix_matrix: p.2,
        recv_src_idx: p.3,
        is_token_in_rank: p.4,
        send_head: p.5,
        num_recv_tokens: p.6,
        channels: p.7,
    }
}

/// `dispatch`: `x` (BF16, or E4M3 with `x_scales`) of `hidden` channels, optional top-k (0:
/// none), into the outputs and the handle's received parts. `cached`: the handle is a previous
/// dispatch's. Collective.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // DeepEP's argument list, as addresses
fn ep_dispatch(
    buffer: &Bound<'_, EpBuffer>,
    x: DevicePtr,
    x_scales: DevicePtr,
    hidden: usize,
    topk_idx: DevicePtr,
    topk_weights: DevicePtr,
    handle: HandleArg,
    recv_x: DevicePtr,
    recv_x_scales: DevicePtr,
    recv_topk_idx: DevicePtr,
    recv_topk_weights: DevicePtr,
    routing: Routing,
    num_sms: u32,
    cached: bool,
    stream: usize,
) -> PyResult<()> {
    let (input, output) = dispatch_rows(
        (x, x_scales),
        hidden,
        (topk_idx, topk_weights),
        (recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights),
    );
    let handle = self::handle(handle);
    let shape = self::routing(routing);
    on_stream(buffer, stream, |b, s| {
        b.communicator().settle_before_launch()?;
        // SAFETY: as in ep_get_dispatch_layout; the outputs hold the handle's received rows.
        unsafe { b.raw_dispatch(&input, &output, &handle, shape, Config { num_sms }, cached, s) }
    })
}

/// `combine` of `x` (`[received][hidden]` BF16) with optional received top-k weights (`topk`
/// per row) and up to two biases (0: none) into `combined_x` (and `combined_topk_weights`),
/// on the channels of the dispatch that made the handle. Collective.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // DeepEP's argument list, as addresses
fn ep_combine(
    buffer: &Bound<'_, EpBuffer>,
    x: DevicePtr,
    hidden: usize,
    topk_weights: DevicePtr,
    topk: usize,
    bias: (DevicePtr, DevicePtr),
    handle: HandleArg,
    combined_x: DevicePtr,
    combined_topk_weights: DevicePtr,
    tokens: usize,
    stream: usize,
) -> PyResult<()> {
    let (input, output) = combine_rows(x, hidden, (topk_weights, topk), bias, (combined_x, combined_topk_weights));
    let handle = self::handle(handle);
    on_stream(buffer, stream, |b, s| {
        b.communicator().settle_before_launch()?;
        // SAFETY: as in ep_get_dispatch_layout; `x` holds the handle's received rows.
        unsafe { b.raw_combine(&input, &output, &handle, tokens, s) }
    })
}

/// DeepEP's internode handle, as weft-ep keeps it: what the two hops of the normal mode
/// between nodes need besides the caller's tensors (private: `weft.ep` puts it in the handle
/// tuple it returns).
#[pyclass(module = "weft._weft", frozen)]
pub(crate) struct EpRailHandle {
    /// Taken only with the GIL released (a thread waiting for it holds no GIL another needs).
    rail: RwLock<RailHandle>,
}

#[pymethods]
impl EpRailHandle {
    /// Rows this rank receives (the notify's count).
    #[getter]
    fn num_recv_tokens(&self, py: Python<'_>) -> usize {
        py.detach(|| self.rail.read().unwrap_or_else(|p| p.into_inner()).counts().num_recv_tokens)
    }

    /// Top-k entries per token of the routing.
    #[getter]
    fn topk(&self, py: Python<'_>) -> usize {
        py.detach(|| self.rail.read().unwrap_or_else(|p| p.into_inner()).shape().topk)
    }
}

/// The normal mode's `num_rdma_bytes` between nodes (DeepEP's `get_rdma_buffer_size_hint`):
/// weft-ep's rail hop regions for up to `max_tokens` tokens per rank; 0 on one node.
#[pyfunction]
fn ep_rdma_bytes_hint(max_tokens: usize, hidden: usize, topk: usize, num_ranks: usize, ranks_per_node: usize) -> usize {
    weft::ep::rdma_bytes_hint(max_tokens, hidden, topk.min(MAX_TOPK), num_ranks, ranks_per_node)
}

/// The normal mode's `num_nvl_bytes` between nodes: the NVL hop's staging of the rows a rank
/// forwards.
#[pyfunction]
fn ep_nvl_bytes_hint_between_nodes(
    max_tokens: usize,
    hidden: usize,
    topk: usize,
    num_ranks: usize,
    ranks_per_node: usize,
) -> usize {
    weft::ep::nvl_bytes_hint_between_nodes(max_tokens, hidden, topk.min(MAX_TOPK), num_ranks, ranks_per_node)
}

/// The notify of a dispatch between nodes (the rail layout, then the host exchange of every
/// rank's counts), the group's `rank_prefix_matrix` written into the caller's: returns
/// `(num_recv_tokens, num_recv_tokens_per_expert_list, handle)`. Collective.
#[pyfunction]
fn ep_notify_between_nodes(
    buffer: &Bound<'_, EpBuffer>,
    layout: (DevicePtr, DevicePtr, DevicePtr),
    routing: Routing,
    expert_alignment: usize,
    num_sms: u32,
    rank_prefix_matrix: DevicePtr,
    stream: usize,
) -> PyResult<(usize, Vec<i32>, EpRailHandle)> {
    let layout =
        LayoutTensors { num_tokens_per_rank: layout.0, num_tokens_per_expert: layout.1, is_token_in_rank: layout.2 };
    let shape = self::routing(routing);
    let rail = on_stream(buffer, stream, |b, s| {
        b.communicator().settle_before_launch()?;
        // SAFETY: as in ep_get_dispatch_layout; `rank_prefix_matrix` holds ranks × ranks
        // entries (Python allocates it so).
        unsafe {
            b.raw_notify_between_nodes(&layout, shape, expert_alignment, Config { num_sms }, rank_prefix_matrix, s)
        }
    })?;
    let counts = rail.counts().clone();
    Ok((counts.num_recv_tokens, counts.num_recv_tokens_per_expert, EpRailHandle { rail: RwLock::new(rail) }))
}

/// `dispatch` between nodes of `rail`'s routing: `x` (BF16, or E4M3 with `x_scales`), top-k on
/// the handle's first dispatch (0: none, DeepEP's cached dispatch), into the outputs of the
/// handle's received rows and `recv_src_idx`. Collective.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // DeepEP's argument list, as addresses
fn ep_dispatch_between_nodes(
    buffer: &Bound<'_, EpBuffer>,
    x: DevicePtr,
    x_scales: DevicePtr,
    hidden: usize,
    topk_idx: DevicePtr,
    topk_weights: DevicePtr,
    rail: &Bound<'_, EpRailHandle>,
    recv_src_idx: DevicePtr,
    recv_x: DevicePtr,
    recv_x_scales: DevicePtr,
    recv_topk_idx: DevicePtr,
    recv_topk_weights: DevicePtr,
    stream: usize,
) -> PyResult<()> {
    let (input, output) = dispatch_rows(
        (x, x_scales),
        hidden,
        (topk_idx, topk_weights),
        (recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights),
    );
    let rail = rail.get();
    on_stream(buffer, stream, |b, s| {
        b.communicator().settle_before_launch()?;
        let mut handle = rail.rail.write().unwrap_or_else(|p| p.into_inner());
        // SAFETY: as in ep_dispatch; the outputs hold the handle's received rows.
        unsafe { b.raw_dispatch_between_nodes(&input, &output, recv_src_idx, &mut handle, s) }
    })
}

/// `combine` between nodes of `x` (`[received][hidden]` BF16, the rows `rail`'s dispatches
/// received) with optional received top-k weights (`topk` per row) and up to two biases (0:
/// none) into `combined_x` (and `combined_topk_weights`). Collective.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // DeepEP's argument list, as addresses
fn ep_combine_between_nodes(
    buffer: &Bound<'_, EpBuffer>,
    x: DevicePtr,
    hidden: usize,
    topk_weights: DevicePtr,
    topk: usize,
    bias: (DevicePtr, DevicePtr),
    rail: &Bound<'_, EpRailHandle>,
    combined_x: DevicePtr,
    combined_topk_weights: DevicePtr,
    stream: usize,
) -> PyResult<()> {
    let (input, output) = combine_rows(x, hidden, (topk_weights, topk), bias, (combined_x, combined_topk_weights));
    let rail = rail.get();
    on_stream(buffer, stream, |b, s| {
        b.communicator().settle_before_launch()?;
        let handle = rail.rail.read().unwrap_or_else(|p| p.into_inner());
        // SAFETY: as in ep_combine; `x` holds the handle's received rows.
        unsafe { b.raw_combine_between_nodes(&input, &output, &handle, s) }
    })
}

/// Which kernels of a low-latency call to launch: `"both"` (the call), `"send"` (the call with
/// `return_recv_hook`) or `"recv"` (the hook).
fn kernels(phase: &str) -> PyResult<LlKernels> {
    match phase {
        "both" => Ok(LlKernels::Both),
        "send" => Ok(LlKernels::Send),
        "recv" => Ok(LlKernels::Recv),
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "phase: \"both\", \"send\" or \"recv\", got {other:?}"
        ))),
    }
}

/// The sizes of a low-latency call: `(tokens, topk, num_experts, hidden, max_tokens)`.
type LlSizes = (usize, usize, usize, usize, usize);

fn ll_shape((tokens, topk, num_experts, hidden, max_tokens): LlSizes) -> LlShape {
    LlShape { routing: RoutingShape { tokens, topk, num_experts }, hidden, max_tokens }
}

/// `low_latency_dispatch` (or one of its halves, see `phase`): `x` and `topk_idx` into the
/// packed receive tensors and the handle's `recv_src_info` and `recv_layout_range`.
/// `recv_x_scales` and `cumulative_local_expert_recv_stats` may be 0. Collective.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // DeepEP's argument list, as addresses
fn ep_low_latency_dispatch(
    buffer: &Bound<'_, EpBuffer>,
    x: DevicePtr,
    topk_idx: DevicePtr,
    recv_x: DevicePtr,
    recv_x_scales: DevicePtr,
    recv_count: DevicePtr,
    recv_src_info: DevicePtr,
    recv_layout_range: DevicePtr,
    cumulative_local_expert_recv_stats: DevicePtr,
    sizes: LlSizes,
    use_fp8: bool,
    round_scale: bool,
    num_sms: u32,
    phase: &str,
    stream: usize,
) -> PyResult<()> {
    let kernels = kernels(phase)?;
    let t = LlDispatchTensors {
        x,
        topk_idx,
        recv_x,
        recv_x_scales: optional(recv_x_scales),
        recv_count,
        recv_src_info,
        recv_layout_range,
        cumulative_local_expert_recv_stats: optional(cumulative_local_expert_recv_stats),
    };
    let (shape, config) = (ll_shape(sizes), Config { num_sms });
    on_stream(buffer, stream, |b, s| {
        // SAFETY: as in ep_get_dispatch_layout; the hook passes the same tensors as the send.
        unsafe { b.raw_low_latency_dispatch(&t, &shape, use_fp8, round_scale, config, kernels, s) }
    })
}

/// `low_latency_combine` (or one of its halves, see `phase`): the packed rows `x` back into
/// `combined_x`, weighted by `topk_weights`. Collective.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // DeepEP's argument list, as addresses
fn ep_low_latency_combine(
    buffer: &Bound<'_, EpBuffer>,
    x: DevicePtr,
    topk_idx: DevicePtr,
    topk_weights: DevicePtr,
    src_info: DevicePtr,
    layout_range: DevicePtr,
    combined_x: DevicePtr,
    sizes: LlSizes,
    num_sms: u32,
    phase: &str,
    stream: usize,
) -> PyResult<()> {
    let kernels = kernels(phase)?;
    let t = LlCombineTensors { x, topk_idx, topk_weights, src_info, layout_range, combined_x };
    let (shape, config) = (ll_shape(sizes), Config { num_sms });
    on_stream(buffer, stream, |b, s| {
        // SAFETY: as in ep_get_dispatch_layout; the hook passes the same tensors as the send.
        unsafe { b.raw_low_latency_combine(&t, &shape, config, kernels, s) }
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<EpBuffer>()?;
    m.add_class::<EpRailHandle>()?;
    m.add_function(wrap_pyfunction!(ep_rdma_bytes_hint, m)?)?;
    m.add_function(wrap_pyfunction!(ep_nvl_bytes_hint_between_nodes, m)?)?;
    m.add_function(wrap_pyfunction!(ep_notify_between_nodes, m)?)?;
    m.add_function(wrap_pyfunction!(ep_dispatch_between_nodes, m)?)?;
    m.add_function(wrap_pyfunction!(ep_combine_between_nodes, m)?)?;
    m.add_function(wrap_pyfunction!(ep_buffer_create, m)?)?;
    m.add_function(wrap_pyfunction!(ep_buffer_destroy, m)?)?;
    m.add_function(wrap_pyfunction!(ep_nvl_bytes_hint, m)?)?;
    m.add_function(wrap_pyfunction!(ep_low_latency_rdma_size_hint, m)?)?;
    m.add_function(wrap_pyfunction!(ep_low_latency_net_bytes_hint, m)?)?;
    m.add_function(wrap_pyfunction!(ep_get_dispatch_layout, m)?)?;
    m.add_function(wrap_pyfunction!(ep_notify_dispatch, m)?)?;
    m.add_function(wrap_pyfunction!(ep_dispatch, m)?)?;
    m.add_function(wrap_pyfunction!(ep_combine, m)?)?;
    m.add_function(wrap_pyfunction!(ep_low_latency_dispatch, m)?)?;
    m.add_function(wrap_pyfunction!(ep_low_latency_combine, m)?)?;
    Ok(())
}
