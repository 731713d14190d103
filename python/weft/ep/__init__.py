"""weft's expert parallelism (MoE dispatch and combine) behind DeepEP V1's Python interface:
a program written for ``deep_ep`` runs after ``import weft.ep as deep_ep``. What differs is
listed in docs/ep.md.

Every argument is checked here, in Python, before any native call (``ValueError`` naming the
argument); the native calls all go through ``weft.ep._native``. A weft built without the EP
kernels (``KERNELS_AVAILABLE`` is false) still checks arguments, then raises
``RuntimeError("weft was built without the EP kernels")``.
"""

from ._checks import positive
from ._native import KERNELS_AVAILABLE
from .buffer import Buffer
from .config import Config
from .event import EventHandle, EventOverlap


def nvl_bytes_hint(max_tokens: int, hidden: int, topk: int, num_ranks: int) -> int:
    """weft's own sizing of ``num_nvl_bytes`` (weft stages whole dispatches): enough to dispatch
    and combine up to ``max_tokens`` tokens per rank of ``hidden`` channels (BF16 or FP8) with
    ``topk`` experts each over ``num_ranks`` ranks."""
    for name, value in (("max_tokens", max_tokens), ("hidden", hidden), ("topk", topk), ("num_ranks", num_ranks)):
        positive(value, name)
    from . import _native

    return _native.nvl_bytes_hint(max_tokens, hidden, topk, num_ranks)


def __getattr__(name):
    # deep_ep.topk_idx_t is a torch dtype; torch is imported only when it is asked for.
    if name == "topk_idx_t":
        import torch

        return torch.int64
    raise AttributeError(f"module 'weft.ep' has no attribute {name!r}")


__all__ = ["Buffer", "Config", "EventHandle", "EventOverlap", "KERNELS_AVAILABLE", "nvl_bytes_hint", "topk_idx_t"]
