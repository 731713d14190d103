"""``weft.ep.Buffer``: DeepEP V1's ``deep_ep.Buffer`` over weft's EP kernels. Each method checks
its arguments (``_checks.py``), then makes one call through ``_native.py`` and returns DeepEP's
tuple shapes."""

from __future__ import annotations

import sys

from .._stream import stream_handle
from . import _native
from ._checks import Checker, event_args, non_negative, positive
from .config import Config
from .event import EventHandle, EventOverlap

# Ranks weft's EP kernels serve: one node of NVLink peers, or in all across nodes.
MAX_RANKS = 8


class Buffer:
    """The communication buffers of one rank for MoE dispatch and combine (normal mode and
    low-latency mode, within a node and between nodes). Collective: every rank of ``group``
    makes it alike. Where the group spans nodes (the communicator's topology: hosts, or
    ``WEFT_RANKS_PER_NODE`` virtual nodes), ``num_rdma_bytes`` carries both modes across the
    network and the normal mode runs in two hops (a rail hop to the destination node, then
    NVLink within it), with the same calls; its handle is weft's 4-tuple, not DeepEP's
    internode 10-tuple (pass it back as it came)."""

    num_sms: int = 24

    def __init__(
        self,
        group,
        num_nvl_bytes: int = 0,
        num_rdma_bytes: int = 0,
        low_latency_mode: bool = False,
        num_qps_per_rank: int = 24,
        allow_nvlink_for_low_latency_mode: bool = True,
        allow_mnnvl: bool = False,
        explicitly_destroy: bool = False,
        enable_shrink: bool = False,
        comm=None,
    ) -> None:
        if group is not None:
            self.rank, self.group_size, self.group = group.rank(), group.size(), group
        elif comm is not None:
            self.rank, self.group_size, self.group = comm.Get_rank(), comm.Get_size(), comm
        else:
            raise ValueError("group: either group or comm must be given")
        if not 1 <= self.group_size <= MAX_RANKS:
            raise ValueError(f"group: weft's EP kernels serve 1 to {MAX_RANKS} ranks, got {self.group_size}")
        for name, value in (("num_nvl_bytes", num_nvl_bytes), ("num_rdma_bytes", num_rdma_bytes)):
            non_negative(value, name)
            if value % 128:
                raise ValueError(f"{name}: must be a multiple of 128 bytes, got {value}")
        if num_nvl_bytes == 0 and num_rdma_bytes == 0:
            raise ValueError("num_nvl_bytes: a buffer needs NVLink bytes (normal mode) or RDMA bytes (low-latency mode)")
        if low_latency_mode:
            positive(num_qps_per_rank, "num_qps_per_rank")
        if enable_shrink:
            raise ValueError("enable_shrink: weft has no shrink mode (masking failed ranks)")
        self.num_nvl_bytes, self.num_rdma_bytes = num_nvl_bytes, num_rdma_bytes
        self.low_latency_mode, self.explicitly_destroy = low_latency_mode, explicitly_destroy
        self.device = _current_device()
        self.runtime = None
        if _native.KERNELS_AVAILABLE:
            self.runtime = _native.create_runtime(
                group=self.group, rank=self.rank, num_ranks=self.group_size, device=self.device,
                num_nvl_bytes=num_nvl_bytes, num_rdma_bytes=num_rdma_bytes, low_latency_mode=low_latency_mode,
                num_qps_per_rank=num_qps_per_rank, allow_nvlink_for_low_latency_mode=allow_nvlink_for_low_latency_mode,
                allow_mnnvl=allow_mnnvl, explicitly_destroy=explicitly_destroy,
            )
        if num_rdma_bytes and not low_latency_mode and self.num_nodes == 1:
            # Only now is the topology known; the native buffer made for nothing goes back.
            if self.runtime is not None:
                _native.destroy(self.runtime)
                self.runtime = None
            raise ValueError(
                "num_rdma_bytes: within one node only the low-latency mode uses the RDMA buffer (pass "
                "low_latency_mode=True, or 0)"
            )

    @property
    def num_nodes(self) -> int:
        """The (possibly virtual) nodes the group spans, from the communicator's topology (1
        without a native buffer)."""
        return getattr(self.runtime, "nodes", 1)

    def destroy(self) -> None:
        """Releases the buffers (only with ``explicitly_destroy=True``)."""
        if not self.explicitly_destroy:
            raise RuntimeError("destroy: the buffer was made without explicitly_destroy=True")
        _native.destroy(self.runtime)
        self.runtime = None

    # --- class-level settings ---------------------------------------------------------------

    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        """The SMs normal-mode kernels use (even: a channel is 2 SMs)."""
        positive(new_num_sms, "new_num_sms")
        if new_num_sms % 2:
            raise ValueError(f"new_num_sms: must be even, got {new_num_sms}")
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture() -> EventOverlap:
        """An event recorded on torch's current stream."""
        return EventOverlap(EventHandle())

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        """The default dispatch config for ``num_ranks`` ranks."""
        _ranks(num_ranks)
        return Config(Buffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        """The default combine config for ``num_ranks`` ranks."""
        _ranks(num_ranks)
        return Config(Buffer.num_sms)

    @staticmethod
    def get_low_latency_rdma_size_hint(
        num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int, num_experts: int, *,
        spans_nodes: bool | None = None,
    ) -> int:
        """The low-latency buffer bytes (``num_rdma_bytes``) weft's kernels need: weft-ep's
        one-node area, or where the group spans nodes the larger area of the path through the
        proxy (about twice as much). ``spans_nodes=None`` decides as the communicator's
        topology will: more than ``WEFT_RANKS_PER_NODE`` ranks span virtual nodes; hosts are
        known only once the ranks have met, so a group over several hosts (without virtual
        nodes) passes ``spans_nodes=True``."""
        positive(num_max_dispatch_tokens_per_rank, "num_max_dispatch_tokens_per_rank")
        _hidden_ll(hidden, "hidden")
        _ranks(num_ranks)
        Checker(num_ranks, None, None).experts(num_experts)
        if spans_nodes is None:
            ranks_per_node = _native.env_ranks_per_node()
            spans_nodes = ranks_per_node is not None and num_ranks > ranks_per_node
        elif not isinstance(spans_nodes, bool):
            raise ValueError(f"spans_nodes: must be True, False or None, got {spans_nodes!r}")
        return _native.low_latency_rdma_size_hint(
            spans_nodes=spans_nodes, num_max_dispatch_tokens_per_rank=num_max_dispatch_tokens_per_rank,
            hidden=hidden, num_ranks=num_ranks, num_experts=num_experts,
        )

    def get_comm_stream(self):
        """The stream weft's EP kernels run on when ``async_finish`` is set."""
        return _native.comm_stream(self.runtime)

    # --- normal mode ------------------------------------------------------------------------

    def get_dispatch_layout(
        self, topk_idx, num_experts: int, previous_event=None, async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ):
        """From ``topk_idx`` (int64 ``[T, K]``, -1 for no expert): ``(num_tokens_per_rank [R]
        int32, None, num_tokens_per_expert [E] int32, is_token_in_rank [T, R] bool, event)``.
        Between nodes too: weft's dispatch counts the tokens per node itself, so the second
        item stays ``None``."""
        c = self._checker()
        idx = c.tensor(topk_idx, "topk_idx", ("i64",), (None, None))
        c.experts(num_experts)
        event_args(previous_event, async_finish, allocate_on_comm_stream)
        per_rank, per_rdma_rank, per_expert, in_rank, event = _native.get_dispatch_layout(
            self.runtime, topk_idx=idx, num_experts=num_experts, previous_event=previous_event,
            async_finish=async_finish, allocate_on_comm_stream=allocate_on_comm_stream, stream=c.stream,
        )
        return per_rank, per_rdma_rank, per_expert, in_rank, EventOverlap(event)

    def dispatch(
        self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None, is_token_in_rank=None,
        num_tokens_per_expert=None, topk_idx=None, topk_weights=None, expert_alignment: int = 1,
        num_worst_tokens: int = 0, config: Config | None = None, previous_event=None, async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ):
        """Sends each token to the ranks of its experts. Returns ``(recv_x or (recv_x,
        recv_x_scales), recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, handle,
        event)``; with a ``handle`` (cached layout) the middle four are ``None``."""
        c = self._checker()
        between = self.num_nodes > 1
        data, scales = c.tokens(x)
        tokens, r = data.shape[0], self.group_size
        positive(expert_alignment, "expert_alignment")
        if non_negative(num_worst_tokens, "num_worst_tokens"):
            raise ValueError("num_worst_tokens: weft sizes the outputs from the notify's counts (leave it 0)")
        config = _config(config, "config") or self.get_dispatch_config(self.group_size)
        event_args(previous_event, async_finish, allocate_on_comm_stream)
        if num_tokens_per_rdma_rank is not None:
            if not between:
                raise ValueError("num_tokens_per_rdma_rank: must be None within one node")
            c.tensor(num_tokens_per_rdma_rank, "num_tokens_per_rdma_rank", ("i32",), (self.num_nodes,))
        if handle is not None:
            if topk_idx is not None or topk_weights is not None:
                raise ValueError("topk_idx: a dispatch with a cached handle takes no topk_idx or topk_weights")
            cached = c.internode_handle(handle, tokens) if between else c.intranode_handle(handle, tokens)
            layout, idx, weights = {"handle": cached}, None, None
        else:
            per_expert = c.tensor(num_tokens_per_expert, "num_tokens_per_expert", ("i32",), (None,))
            c.experts(per_expert.shape[0], "num_tokens_per_expert (its length)")
            layout = {
                "num_tokens_per_rank": c.tensor(num_tokens_per_rank, "num_tokens_per_rank", ("i32",), (r,)),
                "is_token_in_rank": c.tensor(is_token_in_rank, "is_token_in_rank", ("bool",), (tokens, r)),
                "num_tokens_per_expert": per_expert,
            }
            if (topk_idx is None) != (topk_weights is None):
                raise ValueError("topk_weights: topk_idx and topk_weights go together (both or neither)")
            idx = c.optional(topk_idx, "topk_idx", ("i64",), (tokens, None))
            k = idx.shape[1] if idx is not None else None
            weights = c.optional(topk_weights, "topk_weights", ("f32",), (tokens, k))
        run = _native.dispatch_between_nodes if between else _native.dispatch
        recv_x, recv_scales, recv_idx, recv_weights, per_expert_list, new_handle, event = run(
            self.runtime, x=data, x_scales=scales, topk_idx=idx, topk_weights=weights, expert_alignment=expert_alignment,
            num_worst_tokens=num_worst_tokens, config=config, previous_event=previous_event, async_finish=async_finish,
            allocate_on_comm_stream=allocate_on_comm_stream, stream=c.stream, **layout,
        )
        received = recv_x if scales is None else (recv_x, recv_scales)
        if handle is not None:
            return received, None, None, None, None, EventOverlap(event)
        return received, recv_idx, recv_weights, per_expert_list, new_handle, EventOverlap(event)

    def combine(
        self, x, handle, topk_weights=None, bias=None, config: Config | None = None, previous_event=None,
        async_finish: bool = False, allocate_on_comm_stream: bool = False,
    ):
        """Sums each received token's rows back on its source rank (without weights, as DeepEP),
        plus ``bias`` (one or two bf16 ``[T, H]``). Returns ``(combined_x,
        combined_topk_weights, event)``."""
        c = self._checker()
        between = self.num_nodes > 1
        if between:
            parts = c.internode_handle(handle)
            received, tokens, topk = parts[1].shape[0], parts[2].shape[0], getattr(parts[3], "topk", None)
        else:
            parts = c.intranode_handle(handle)
            received, tokens, topk = parts[3].shape[0], parts[4].shape[0], None
        data = c.tensor(x, "x", ("bf16",), (received, None))
        hidden = data.shape[1]
        weights = c.optional(topk_weights, "topk_weights", ("f32",), (received, topk))
        biases = bias if isinstance(bias, tuple) else (bias,) if bias is not None else ()
        if len(biases) > 2:
            raise ValueError(f"bias: at most two tensors, got {len(biases)}")
        biases = tuple(c.tensor(b, f"bias[{i}]", ("bf16",), (tokens, hidden)) for i, b in enumerate(biases))
        config = _config(config, "config") or self.get_combine_config(self.group_size)
        event_args(previous_event, async_finish, allocate_on_comm_stream)
        combined, combined_weights, event = _native.combine(
            self.runtime, x=data, handle=parts, topk_weights=weights, bias=biases, config=config,
            previous_event=previous_event, async_finish=async_finish, allocate_on_comm_stream=allocate_on_comm_stream,
            stream=c.stream,
        )
        return combined, combined_weights, EventOverlap(event)

    # --- low-latency mode -------------------------------------------------------------------

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        """DeepEP zeroes its low-latency buffer after normal-mode use; weft has nothing to
        clean: within a node the normal mode never touches the low-latency area, and between
        nodes, where its rail hop shares it, the next low-latency call first waits for every
        rank's normal-mode work; its signals carry tags that advance on the device. The
        arguments are checked as DeepEP's."""
        positive(num_max_dispatch_tokens_per_rank, "num_max_dispatch_tokens_per_rank")
        _hidden_ll(hidden, "hidden")
        self._checker().experts(num_experts)

    def low_latency_dispatch(
        self, x, topk_idx, num_max_dispatch_tokens_per_rank: int, num_experts: int,
        cumulative_local_expert_recv_stats=None, dispatch_wait_recv_cost_stats=None, use_fp8: bool = True,
        round_scale: bool = False, use_ue8m0: bool = False, async_finish: bool = False, return_recv_hook: bool = False,
    ):
        """Sends each token to its experts' fixed-size receive slots. Returns ``(recv_x or (recv_x,
        recv_x_scales), recv_count, handle, event, hook)``."""
        c = self._checker()
        self._low_latency_only("low_latency_dispatch")
        data = c.tensor(x, "x", ("bf16",), (None, None))
        tokens, hidden = data.shape
        _hidden_ll(hidden, "x (hidden)")
        positive(num_max_dispatch_tokens_per_rank, "num_max_dispatch_tokens_per_rank")
        if tokens > num_max_dispatch_tokens_per_rank:
            raise ValueError(f"x: {tokens} tokens, more than num_max_dispatch_tokens_per_rank ({num_max_dispatch_tokens_per_rank})")
        idx = c.tensor(topk_idx, "topk_idx", ("i64",), (tokens, None))
        local = c.experts(num_experts) // self.group_size
        stats = c.optional(cumulative_local_expert_recv_stats, "cumulative_local_expert_recv_stats", ("i32",), (local,))
        _not_offered(dispatch_wait_recv_cost_stats, "dispatch_wait_recv_cost_stats", "receive-cost statistics")
        if use_ue8m0 and not (use_fp8 and round_scale):
            raise ValueError("use_ue8m0: needs use_fp8=True and round_scale=True")
        if round_scale and not use_fp8:
            raise ValueError("round_scale: applies to FP8 dispatch only (use_fp8=True)")
        _hook_or_async(async_finish, return_recv_hook)
        recv_x, recv_scales, recv_count, handle, event, hook = _native.low_latency_dispatch(
            self.runtime, x=data, topk_idx=idx, num_max_dispatch_tokens_per_rank=num_max_dispatch_tokens_per_rank,
            num_experts=num_experts, cumulative_local_expert_recv_stats=stats, use_fp8=use_fp8,
            round_scale=round_scale, use_ue8m0=use_ue8m0, async_finish=async_finish, return_recv_hook=return_recv_hook,
            num_sms=self.num_sms, stream=c.stream,
        )
        received = (recv_x, recv_scales) if use_fp8 else recv_x
        return received, recv_count, handle, EventOverlap(event), hook

    def low_latency_combine(
        self, x, topk_idx, topk_weights, handle, use_logfmt: bool = False, zero_copy: bool = False,
        async_finish: bool = False, return_recv_hook: bool = False, out=None, combine_wait_recv_cost_stats=None,
    ):
        """Sums each token's expert outputs weighted by ``topk_weights`` back on its source
        rank. Returns ``(combined_x, event, hook)``."""
        c = self._checker()
        self._low_latency_only("low_latency_combine")
        src_info, layout, max_tokens, hidden, experts = c.low_latency_handle(handle)
        local = experts // self.group_size
        data = c.tensor(x, "x", ("bf16",), (local, self.group_size * max_tokens, hidden))
        idx = c.tensor(topk_idx, "topk_idx", ("i64",), (None, None))
        tokens, k = idx.shape
        if tokens > max_tokens:
            raise ValueError(f"topk_idx: {tokens} tokens, more than the handle's num_max_dispatch_tokens_per_rank ({max_tokens})")
        weights = c.tensor(topk_weights, "topk_weights", ("f32",), (tokens, k))
        output = c.optional(out, "out", ("bf16",), (tokens, hidden))
        _not_offered(use_logfmt or None, "use_logfmt", "LogFMT")
        _not_offered(zero_copy or None, "zero_copy", "zero-copy combine")
        _not_offered(combine_wait_recv_cost_stats, "combine_wait_recv_cost_stats", "receive-cost statistics")
        _hook_or_async(async_finish, return_recv_hook)
        combined, event, hook = _native.low_latency_combine(
            self.runtime, x=data, topk_idx=idx, topk_weights=weights, handle=(src_info, layout, max_tokens, hidden, experts),
            async_finish=async_finish, return_recv_hook=return_recv_hook, out=output, num_sms=self.num_sms,
            stream=c.stream,
        )
        return combined, EventOverlap(event), hook

    def get_next_low_latency_combine_buffer(self, handle):
        """DeepEP's buffer a ``zero_copy`` combine reads: weft has no zero-copy combine."""
        self._low_latency_only("get_next_low_latency_combine_buffer")
        self._checker().low_latency_handle(handle)
        raise ValueError("handle: weft has no zero-copy combine, so no buffer to write its input into")

    # --- helpers ----------------------------------------------------------------------------

    def _checker(self) -> Checker:
        return Checker(self.group_size, self.device, stream_handle(None, self.device))

    def _low_latency_only(self, method: str) -> None:
        if not self.low_latency_mode:
            raise ValueError(f"{method}: the buffer was made without low_latency_mode=True")


def _current_device() -> int | None:
    """torch's current CUDA device, or ``None`` (unknown: then only the kernels check devices)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda.current_device()


def _ranks(num_ranks) -> int:
    positive(num_ranks, "num_ranks")
    if num_ranks > MAX_RANKS:
        raise ValueError(f"num_ranks: weft's EP kernels serve at most {MAX_RANKS} ranks, got {num_ranks}")
    return num_ranks


def _hidden_ll(hidden, name: str) -> int:
    positive(hidden, name)
    if hidden % 128:
        raise ValueError(f"{name}: the low-latency kernels take a hidden size that is a multiple of 128, got {hidden}")
    return hidden


def _config(config, name: str) -> Config | None:
    if config is not None and not isinstance(config, Config):
        raise ValueError(f"{name}: must be a weft.ep.Config or None, got {type(config).__name__}")
    return config


def _not_offered(value, name: str, what: str) -> None:
    if value is not None:
        raise ValueError(f"{name}: weft's EP kernels offer no {what} (pass None or False)")


def _hook_or_async(async_finish: bool, return_recv_hook: bool) -> None:
    if async_finish and return_recv_hook:
        raise ValueError("return_recv_hook: cannot be combined with async_finish")
