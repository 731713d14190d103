"""Which CUDA stream a call runs on: the one the caller names (a handle, or an object with
``cuda_stream`` like ``torch.cuda.Stream`` or ``ptr`` like ``cupy.cuda.Stream``), else torch's
current stream on the communicator's device when torch is loaded (with CUDA), else the legacy
default stream (handle 0)."""

from __future__ import annotations

import sys


def stream_handle(stream, device: int | None) -> int:
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            return 0
        return int(torch.cuda.current_stream(device).cuda_stream)
    if isinstance(stream, int):
        handle = stream
    elif hasattr(stream, "cuda_stream"):
        handle = int(stream.cuda_stream)
    elif hasattr(stream, "ptr"):
        handle = int(stream.ptr)
    else:
        raise ValueError(f"stream: expected a CUDA stream handle or stream object, got {type(stream).__name__}")
    if handle < 0:
        raise ValueError(f"stream: a CUDA stream handle is not negative, got {handle}")
    return handle
