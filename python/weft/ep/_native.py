"""The one adapter between ``weft.ep`` and native code. Each function maps one ``Buffer``
method (or size hint) onto an entry point of ``weft._weft`` named ``ep_<method>``, called as
``ep_<method>(runtime, **arguments)`` with the arguments already checked by ``Buffer``: tensors
as ``weft._tensor.TensorView`` (address, shape, element type, device), the stream handle, and
the method's other arguments unchanged. Those entry points bind weft-ep's raw layer, 1:1 with
the ``Buffer`` methods. A weft built without them (``KERNELS_AVAILABLE`` false) raises
``RuntimeError`` naming the missing entry point; nothing here computes a result itself.
"""

from __future__ import annotations

from .. import _weft

MISSING = "weft was built without the EP kernels"

KERNELS_AVAILABLE = hasattr(_weft, "ep_buffer_create")


def _call(entry: str, *args, **kwargs):
    function = getattr(_weft, entry, None)
    if function is None:
        raise RuntimeError(f"{MISSING} (weft._weft.{entry} is missing)")
    return function(*args, **kwargs)


def create_runtime(**kwargs):
    """The native buffer of a ``Buffer`` (collective over its group)."""
    return _call("ep_buffer_create", **kwargs)


def destroy(runtime) -> None:
    _call("ep_buffer_destroy", runtime)


def nvl_buffer_size_hint(config, hidden_bytes: int, num_ranks: int) -> int:
    return _call("ep_nvl_buffer_size_hint", config=config, hidden_bytes=hidden_bytes, num_ranks=num_ranks)


def rdma_buffer_size_hint(config, hidden_bytes: int, num_ranks: int) -> int:
    return _call("ep_rdma_buffer_size_hint", config=config, hidden_bytes=hidden_bytes, num_ranks=num_ranks)


def low_latency_rdma_size_hint(**kwargs) -> int:
    return _call("ep_low_latency_rdma_size_hint", **kwargs)


def get_dispatch_layout(runtime, **kwargs):
    """Returns ``(num_tokens_per_rank, num_tokens_per_rdma_rank, num_tokens_per_expert,
    is_token_in_rank, event)``."""
    return _call("ep_get_dispatch_layout", runtime, **kwargs)


def dispatch(runtime, **kwargs):
    """Returns ``(recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights,
    num_recv_tokens_per_expert_list, handle, event)``, ``handle`` being DeepEP's 6-tuple."""
    return _call("ep_dispatch", runtime, **kwargs)


def combine(runtime, **kwargs):
    """Returns ``(combined_x, combined_topk_weights, event)``."""
    return _call("ep_combine", runtime, **kwargs)


def low_latency_dispatch(runtime, **kwargs):
    """Returns ``(recv_x, recv_x_scales, recv_count, handle, event, hook)``, ``handle`` being
    DeepEP's 5-tuple."""
    return _call("ep_low_latency_dispatch", runtime, **kwargs)


def low_latency_combine(runtime, **kwargs):
    """Returns ``(combined_x, event, hook)``."""
    return _call("ep_low_latency_combine", runtime, **kwargs)


def clean_low_latency_buffer(runtime, **kwargs) -> None:
    _call("ep_clean_low_latency_buffer", runtime, **kwargs)


def next_low_latency_combine_buffer(runtime, **kwargs):
    return _call("ep_next_low_latency_combine_buffer", runtime, **kwargs)


def comm_stream(runtime):
    return _call("ep_comm_stream", runtime)
