"""The one adapter between ``weft.ep`` and native code. Each function serves one ``Buffer``
method (or size hint): it allocates the outputs (torch, on the buffer's device), orders the
streams as DeepEP does (``_streams.py``) and calls the entry points of ``weft._weft`` named
``ep_*`` with addresses, sizes and a stream handle. Arguments arrive checked by ``Buffer``,
tensors as ``weft._tensor.TensorView``. The entry points bind weft-ep's raw layer; a weft built
without them (``KERNELS_AVAILABLE`` false) raises ``RuntimeError`` naming the missing entry
point. Nothing here computes a result itself.
"""

from __future__ import annotations

from .. import _weft
from ._checks import between_nodes
from ._streams import CommScope

MISSING = "weft was built without the EP kernels"

KERNELS_AVAILABLE = hasattr(_weft, "ep_buffer_create")

# weft-ep's most top-k entries per token (the nvl hint's upper bound).
MAX_TOPK = 32
# FP8 scales: one float32 per 128 channels.
FP8_GROUP = 128


def _call(entry: str, *args, **kwargs):
    function = getattr(_weft, entry, None)
    if function is None:
        raise RuntimeError(f"{MISSING} (weft._weft.{entry} is missing)")
    return function(*args, **kwargs)


class Runtime:
    """The native half of a ``Buffer``: weft's communicator over the group, weft-ep's buffer on
    it, and the communication stream the normal-mode kernels run on."""

    def __init__(self, comm, native, comm_stream, device: int, scratch, nodes: int = 1, ranks_per_node=None):
        self.comm, self.native, self.comm_stream, self.device = comm, native, comm_stream, device
        # The address of empty tensors (torch gives them 0, which weft-ep refuses); with no
        # rows, nothing reads or writes it.
        self.scratch = scratch
        # The communicator's topology: (possibly virtual) nodes, and WEFT_RANKS_PER_NODE.
        self.nodes, self.ranks_per_node = nodes, ranks_per_node

    def address(self, t) -> int:
        """The device address of ``t`` (a ``TensorView``, a torch tensor, or ``None``: 0)."""
        if t is None:
            return 0
        ptr = t.ptr if hasattr(t, "ptr") else t.data_ptr()
        return ptr or self.scratch.data_ptr()


def _native(runtime):
    if not KERNELS_AVAILABLE:
        raise RuntimeError(MISSING)
    if runtime is None:
        raise RuntimeError("weft.ep.Buffer: no EP buffer (destroyed, or made without a GPU)")
    return runtime.native


def _communicator(group, rank: int, num_ranks: int, device: int):
    """weft's communicator over ``group``: a torch.distributed group broadcasts rank 0's unique
    id (``weft.Communicator.from_process_group``), an mpi4py communicator ``bcast``s it."""
    from ..communicator import Communicator, default_host

    if hasattr(group, "bcast"):
        uid = group.bcast(_weft.unique_id(default_host()) if rank == 0 else None, root=0)
        return Communicator(_weft.Communicator.from_unique_id(uid, rank, num_ranks, device))
    return Communicator.from_process_group(group, device=device)


def create_runtime(
    *, group, rank: int, num_ranks: int, device, num_nvl_bytes: int, num_rdma_bytes: int, low_latency_mode: bool,
    **_settings,
):
    """The native buffer of a ``Buffer`` (collective over its group). Where the communicator's
    topology has the group span nodes (hosts, or ``WEFT_RANKS_PER_NODE`` virtual nodes), weft-ep
    makes ``num_rdma_bytes`` window 0 of a device communicator whose proxy reaches the other
    nodes' ranks (the low-latency area, and the normal mode's rail hop: ``_checks.between_nodes``
    wants it), and ``num_nvl_bytes`` stages the normal mode's hop within the node. DeepEP's
    NVSHMEM settings (``_settings``) have no native counterpart."""
    import torch

    if device is None:
        raise RuntimeError("weft.ep.Buffer: needs torch with CUDA (the buffer lives on torch's current device)")
    comm = _communicator(group, rank, num_ranks, device)
    nodes, ranks_per_node = comm._native.node_count, comm._native.ranks_per_node
    between_nodes(nodes, ranks_per_node, low_latency_mode, num_rdma_bytes)
    native = _call("ep_buffer_create", comm._native, num_nvl_bytes, num_rdma_bytes)
    scratch = torch.empty(256, dtype=torch.uint8, device=f"cuda:{device}")
    return Runtime(comm, native, torch.cuda.Stream(device), device, scratch, nodes, ranks_per_node)


def destroy(runtime) -> None:
    native = _native(runtime)
    runtime.comm_stream.synchronize()
    _call("ep_buffer_destroy", native)


def nvl_buffer_size_hint(config, hidden_bytes: int, num_ranks: int, ranks_per_node: int | None) -> int:
    """weft-ep stages whole dispatches: the bytes for the tokens a DeepEP ring of ``config``
    holds per rank (``num_sms / 2`` channels of ``num_max_nvl_chunked_recv_tokens``), with up to
    ``MAX_TOPK`` experts per token; where ``num_ranks`` span nodes of ``ranks_per_node``, the
    hop within a node, which passes on every node's rows. ``weft.ep.nvl_bytes_hint`` sizes for
    a token count."""
    tokens = config.num_sms // 2 * config.num_max_nvl_chunked_recv_tokens
    hidden = -(-hidden_bytes // 2)
    if ranks_per_node is not None and num_ranks > ranks_per_node:
        return _aligned(_call("ep_nvl_bytes_hint_between_nodes", tokens, hidden, MAX_TOPK, num_ranks, ranks_per_node))
    return nvl_bytes_hint(tokens, hidden, MAX_TOPK, num_ranks)


def _aligned(nbytes: int) -> int:
    """Rounded up to the 128 bytes ``Buffer`` takes (as DeepEP's hints are)."""
    return -(-nbytes // 128) * 128


def nvl_bytes_hint(max_tokens: int, hidden: int, topk: int, num_ranks: int) -> int:
    return _aligned(_call("ep_nvl_bytes_hint", max_tokens, hidden, topk, num_ranks))


def rdma_buffer_size_hint(config, hidden_bytes: int, num_ranks: int, ranks_per_node: int | None) -> int:
    """The normal mode's rail hop between nodes of ``ranks_per_node`` for the tokens a DeepEP
    RDMA ring of ``config`` holds per rank (``num_sms / 2`` channels of
    ``num_max_rdma_chunked_recv_tokens``); 0 within one node (``ranks_per_node`` None or at
    least ``num_ranks``), where the normal mode uses no RDMA buffer."""
    if ranks_per_node is None or num_ranks <= ranks_per_node:
        return 0
    tokens = config.num_sms // 2 * config.num_max_rdma_chunked_recv_tokens
    return _aligned(_call("ep_rdma_bytes_hint", tokens, -(-hidden_bytes // 2), MAX_TOPK, num_ranks, ranks_per_node))


def low_latency_rdma_size_hint(*, spans_nodes: bool, num_ranks: int, **kwargs) -> int:
    """weft-ep's low-latency bytes: the one-node area, or between nodes the larger area of the
    path through the proxy (its send regions and count rows)."""
    if spans_nodes:
        return _aligned(_call("ep_low_latency_net_bytes_hint", **kwargs))
    return _aligned(_call("ep_low_latency_rdma_size_hint", num_ranks=num_ranks, **kwargs))


def env_ranks_per_node() -> int | None:
    """``WEFT_RANKS_PER_NODE`` as weft's configuration reads it (``None``: a node is a host)."""
    return _call("env_ranks_per_node")


def _empty(shape, dtype, device):
    import torch

    return torch.empty(shape, dtype=getattr(torch, dtype), device=f"cuda:{device}")


def _objects(*views):
    return [v.obj for v in views if v is not None]


def get_dispatch_layout(runtime, *, topk_idx, num_experts, previous_event, async_finish, allocate_on_comm_stream, stream):
    """Returns ``(num_tokens_per_rank, num_tokens_per_rdma_rank, num_tokens_per_expert,
    is_token_in_rank, event)``."""
    native = _native(runtime)
    (tokens, topk), ranks = topk_idx.shape, runtime.comm.world_size
    with CommScope(runtime.comm_stream, previous_event, async_finish, allocate_on_comm_stream) as scope:
        per_rank = _empty((ranks,), "int32", runtime.device)
        per_expert = _empty((num_experts,), "int32", runtime.device)
        in_rank = _empty((tokens, ranks), "bool", runtime.device)
        _call(
            "ep_get_dispatch_layout", native, runtime.address(topk_idx), (tokens, topk, num_experts),
            runtime.address(per_rank), runtime.address(per_expert), runtime.address(in_rank), scope.handle,
        )
        event = scope.finish([per_rank, per_expert, in_rank, topk_idx.obj])
    return per_rank, None, per_expert, in_rank, event


def _handle_arg(ptrs, received: int, channels: int) -> tuple:
    """The native handle: the six addresses in DeepEP's order, the received rows and the
    channels of the dispatch that made it."""
    return (*ptrs, received, channels)


def _view_handle(runtime, handle) -> tuple:
    return _handle_arg([runtime.address(p) for p in handle], handle[3].shape[0], handle[1].shape[1])


def _received(x_scales, topk_idx, topk_weights, received: int, hidden: int, topk: int, device):
    """A dispatch's outputs of ``received`` rows: ``recv_x`` (FP8 where ``x_scales`` is given,
    else BF16), its scales, and the received top-k indices and weights where they were sent."""
    fp8 = x_scales is not None
    recv_x = _empty((received, hidden), "float8_e4m3fn" if fp8 else "bfloat16", device)
    recv_scales = _empty((received, hidden // FP8_GROUP), "float32", device) if fp8 else None
    recv_idx = _empty((received, topk), "int64", device) if topk_idx is not None else None
    recv_weights = _empty((received, topk), "float32", device) if topk_weights is not None else None
    return recv_x, recv_scales, recv_idx, recv_weights


def dispatch(
    runtime, *, x, x_scales, topk_idx, topk_weights, expert_alignment, num_worst_tokens, config, previous_event,
    async_finish, allocate_on_comm_stream, stream, handle=None, num_tokens_per_rank=None, is_token_in_rank=None,
    num_tokens_per_expert=None,
):
    """Returns ``(recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights,
    num_recv_tokens_per_expert_list, handle, event)``, ``handle`` being DeepEP's 6-tuple (the
    given one for a cached dispatch). Without a handle, the notify's counts are read on the host
    (the one host sync, as DeepEP's)."""
    native = _native(runtime)
    (tokens, hidden), ranks, device = x.shape, runtime.comm.world_size, runtime.device
    topk = topk_idx.shape[1] if topk_idx is not None else 0
    # A cached dispatch sends no top-k, so the experts go unused; weft-ep still checks the
    # routing, which one expert per rank passes.
    num_experts = num_tokens_per_expert.shape[0] if handle is None else ranks
    with CommScope(runtime.comm_stream, previous_event, async_finish, allocate_on_comm_stream) as scope:
        if handle is None:
            channels = config.num_sms // 2
            prefix = _empty((ranks, ranks), "int32", device)
            channel_prefix = _empty((ranks, channels), "int32", device)
            layout = tuple(runtime.address(t) for t in (num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank))
            received, per_expert_list = _call(
                "ep_notify_dispatch", native, layout, (tokens, topk, num_experts), expert_alignment, config.num_sms,
                runtime.address(prefix), runtime.address(channel_prefix), scope.handle,
            )
            parts = (
                prefix, channel_prefix, _empty((ranks, channels), "int32", device), _empty((received,), "int32", device),
                is_token_in_rank.obj, _empty((tokens, ranks), "int32", device),
            )
            ptrs = [runtime.address(p) for p in (*parts[:4], is_token_in_rank, parts[5])]
            native_handle = _handle_arg(ptrs, received, channels)
        else:
            parts, per_expert_list, native_handle = tuple(p.obj for p in handle), None, _view_handle(runtime, handle)
            received = handle[3].shape[0]
        recv_x, recv_scales, recv_idx, recv_weights = _received(
            x_scales, topk_idx, topk_weights, received, hidden, topk, device
        )
        a = runtime.address
        _call(
            "ep_dispatch", native, a(x), a(x_scales), hidden, a(topk_idx), a(topk_weights), native_handle, a(recv_x),
            a(recv_scales), a(recv_idx), a(recv_weights), (tokens, topk, num_experts), config.num_sms,
            handle is not None, scope.handle,
        )
        outputs = [t for t in (recv_x, recv_scales, recv_idx, recv_weights) if t is not None]
        event = scope.finish([*outputs, *parts, *_objects(x, x_scales, topk_idx, topk_weights)])
    return recv_x, recv_scales, recv_idx, recv_weights, per_expert_list, parts, event


def combine(runtime, *, x, handle, topk_weights, bias, config, previous_event, async_finish, allocate_on_comm_stream, stream):
    """Returns ``(combined_x, combined_topk_weights, event)``; the combine runs on the channels
    of the dispatch that made ``handle`` (DeepEP's 6-tuple, or between nodes weft's 4-tuple of
    ``dispatch_between_nodes``)."""
    native = _native(runtime)
    between = runtime.nodes > 1
    tokens, hidden = handle[2 if between else 4].shape[0], x.shape[1]
    topk = topk_weights.shape[1] if topk_weights is not None else 0
    a = runtime.address
    with CommScope(runtime.comm_stream, previous_event, async_finish, allocate_on_comm_stream) as scope:
        combined = _empty((tokens, hidden), "bfloat16", runtime.device)
        combined_weights = _empty((tokens, topk), "float32", runtime.device) if topk_weights is not None else None
        rows = (a(x), hidden, a(topk_weights), topk, (a(bias[0]) if bias else 0, a(bias[1]) if len(bias) > 1 else 0))
        if between:
            _call("ep_combine_between_nodes", native, *rows, handle[3], a(combined), a(combined_weights), scope.handle)
        else:
            _call(
                "ep_combine", native, *rows, _view_handle(runtime, handle), a(combined), a(combined_weights), tokens,
                scope.handle,
            )
        outputs = [combined] + ([combined_weights] if combined_weights is not None else [])
        tensors = handle[:3] if between else handle
        event = scope.finish([*outputs, *_objects(x, topk_weights, *tensors, *bias)])
    return combined, combined_weights, event


def dispatch_between_nodes(
    runtime, *, x, x_scales, topk_idx, topk_weights, expert_alignment, config, previous_event, async_finish,
    allocate_on_comm_stream, stream, handle=None, num_tokens_per_rank=None, is_token_in_rank=None,
    num_tokens_per_expert=None, **_unused,
):
    """``dispatch`` on a group spanning nodes (weft-ep's two hops). Returns as ``dispatch``, the
    handle being weft's 4-tuple ``(rank_prefix_matrix, recv_src_idx, is_token_in_rank, rail)``
    (the given one for a cached dispatch; a cached dispatch keeps the first one's
    ``recv_src_idx``, which names the same rows). Without a handle the notify's counts are read
    on the host, as DeepEP's internode dispatch does."""
    native = _native(runtime)
    (tokens, hidden), ranks, device = x.shape, runtime.comm.world_size, runtime.device
    topk = topk_idx.shape[1] if topk_idx is not None else 0
    a = runtime.address
    with CommScope(runtime.comm_stream, previous_event, async_finish, allocate_on_comm_stream) as scope:
        if handle is None:
            num_experts = num_tokens_per_expert.shape[0]
            prefix = _empty((ranks, ranks), "int32", device)
            layout = tuple(a(t) for t in (num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank))
            received, per_expert_list, rail = _call(
                "ep_notify_between_nodes", native, layout, (tokens, topk, num_experts), expert_alignment,
                config.num_sms, a(prefix), scope.handle,
            )
            parts = (prefix, _empty((received,), "int32", device), is_token_in_rank.obj, rail)
        else:
            parts, per_expert_list = (handle[0].obj, handle[1].obj, handle[2].obj, handle[3]), None
            received = handle[1].shape[0]
        recv_x, recv_scales, recv_idx, recv_weights = _received(
            x_scales, topk_idx, topk_weights, received, hidden, topk, device
        )
        _call(
            "ep_dispatch_between_nodes", native, a(x), a(x_scales), hidden, a(topk_idx), a(topk_weights), parts[3],
            a(parts[1]), a(recv_x), a(recv_scales), a(recv_idx), a(recv_weights), scope.handle,
        )
        outputs = [t for t in (recv_x, recv_scales, recv_idx, recv_weights) if t is not None]
        event = scope.finish([*outputs, *parts[:3], *_objects(x, x_scales, topk_idx, topk_weights)])
    return recv_x, recv_scales, recv_idx, recv_weights, per_expert_list, parts, event


def _low_latency(runtime, entry: str, args: tuple, sizes: tuple, flags: tuple, async_finish, return_recv_hook, keep):
    """Launches a low-latency call (DeepEP's streams: the communication stream, or torch's
    current stream with ``return_recv_hook``, whose hook launches the receive half on the
    stream current when it is called). Returns ``(event, hook)``."""
    import torch

    native = _native(runtime)

    def launch(phase: str, stream_handle: int) -> None:
        _call(entry, native, *args, sizes, *flags, phase, stream_handle)

    if return_recv_hook:
        launch("send", int(torch.cuda.current_stream().cuda_stream))
        return None, lambda: launch("recv", int(torch.cuda.current_stream().cuda_stream))
    with CommScope(runtime.comm_stream, None, async_finish) as scope:
        launch("both", scope.handle)
        return scope.finish(keep), None


def low_latency_dispatch(
    runtime, *, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts, cumulative_local_expert_recv_stats,
    use_fp8, round_scale, async_finish, return_recv_hook, num_sms, stream, **_unused,
):
    """Returns ``(recv_x, recv_x_scales, recv_count, handle, event, hook)``, ``handle`` being
    DeepEP's 5-tuple."""
    _native(runtime)
    (tokens, hidden), (_, topk) = x.shape, topk_idx.shape
    ranks, device, max_tokens = runtime.comm.world_size, runtime.device, num_max_dispatch_tokens_per_rank
    local, rows = num_experts // ranks, ranks * max_tokens
    recv_x = _empty((local, rows, hidden), "float8_e4m3fn" if use_fp8 else "bfloat16", device)
    # DeepEP's scales: [E/R, R * max, H / 128] with the rows contiguous (column-major).
    recv_scales = _empty((local, hidden // FP8_GROUP, rows), "float32", device).transpose(1, 2) if use_fp8 else None
    recv_count = _empty((local,), "int32", device)
    src_info = _empty((local, rows), "int32", device)
    layout_range = _empty((local, ranks), "int64", device)
    tensors = (x, topk_idx, recv_x, recv_scales, recv_count, src_info, layout_range, cumulative_local_expert_recv_stats)
    args = tuple(runtime.address(t) for t in tensors)
    outputs = [t for t in (recv_x, recv_scales, recv_count, src_info, layout_range) if t is not None]
    keep = [*outputs, *_objects(x, topk_idx, cumulative_local_expert_recv_stats)]
    event, hook = _low_latency(
        runtime, "ep_low_latency_dispatch", args, (tokens, topk, num_experts, hidden, max_tokens),
        (use_fp8, round_scale, num_sms), async_finish, return_recv_hook, keep,
    )
    handle = (src_info, layout_range, max_tokens, hidden, num_experts)
    return recv_x, recv_scales, recv_count, handle, event, hook


def low_latency_combine(
    runtime, *, x, topk_idx, topk_weights, handle, async_finish, return_recv_hook, out, num_sms, stream, **_unused,
):
    """Returns ``(combined_x, event, hook)``."""
    _native(runtime)
    src_info, layout_range, max_tokens, hidden, num_experts = handle
    tokens, topk = topk_idx.shape
    combined = out.obj if out is not None else _empty((tokens, hidden), "bfloat16", runtime.device)
    args = tuple(runtime.address(t) for t in (x, topk_idx, topk_weights, src_info, layout_range, combined))
    keep = [combined, *_objects(x, topk_idx, topk_weights, src_info, layout_range)]
    event, hook = _low_latency(
        runtime, "ep_low_latency_combine", args, (tokens, topk, num_experts, hidden, max_tokens), (num_sms,),
        async_finish, return_recv_hook, keep,
    )
    return combined, event, hook


def comm_stream(runtime):
    _native(runtime)
    return runtime.comm_stream
