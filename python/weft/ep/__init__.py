"""weft's expert parallelism (MoE dispatch and combine) behind DeepEP V1's Python interface:
a program written for ``deep_ep`` runs after ``import weft.ep as deep_ep``. What differs is
listed in docs/ep.md.

Every argument is checked here, in Python, before any native call (``ValueError`` naming the
argument); the native calls all go through ``weft.ep._native``. A weft built without the EP
kernels (``KERNELS_AVAILABLE`` is false) still checks arguments, then raises
``RuntimeError("weft was built without the EP kernels")``.
"""

from ._native import KERNELS_AVAILABLE
from .buffer import Buffer
from .config import Config
from .event import EventHandle, EventOverlap


def __getattr__(name):
    # deep_ep.topk_idx_t is a torch dtype; torch is imported only when it is asked for.
    if name == "topk_idx_t":
        import torch

        return torch.int64
    raise AttributeError(f"module 'weft.ep' has no attribute {name!r}")


__all__ = ["Buffer", "Config", "EventHandle", "EventOverlap", "KERNELS_AVAILABLE", "topk_idx_t"]
