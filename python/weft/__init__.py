"""weft: GPU communication for AI inference and training, from Python.

- ``weft.Communicator``: weft's collectives on tensors (torch, DLPack, CUDA array interface)
  with torch.distributed's names, on the current CUDA stream, CUDA-graph safe.
- ``weft.ep``: expert-parallel dispatch and combine with DeepEP's ``Buffer`` interface
  (``import weft.ep as deep_ep``; see docs/ep.md).

The native module (``weft._weft``) never imports torch; neither does this package until a
torch-only entry point (``Communicator.from_process_group``, ``weft.ep.Buffer``'s outputs) runs.
"""

from ._weft import InvalidArgumentError, WeftError, __version__
from .communicator import Communicator, P2POp, ReduceOp

__all__ = ["Communicator", "InvalidArgumentError", "P2POp", "ReduceOp", "WeftError", "__version__"]
