"""``EventHandle`` and ``EventOverlap``: a CUDA event recorded on a stream, and
DeepEP's wrapper that lets the compute stream wait for it (``current_stream_wait``, or a
``with`` block that waits at its end) while keeping tensors alive (``extra_tensors``, the
CUDA-graph-safe stand-in for ``record_stream``)."""

from __future__ import annotations


class EventHandle:
    """A CUDA event recorded when made on ``stream`` (default: torch's current stream)."""

    def __init__(self, stream=None):
        import torch

        self.event = torch.cuda.Event()
        self.event.record(torch.cuda.current_stream() if stream is None else stream)

    def current_stream_wait(self) -> None:
        import torch

        torch.cuda.current_stream().wait_event(self.event)


class EventOverlap:
    """An optional ``EventHandle`` and the tensors that must live until it completes."""

    def __init__(self, event: EventHandle | None = None, extra_tensors: tuple | None = None):
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self) -> None:
        """Makes torch's current stream wait for the event (which must exist: the call that
        returned it ran with ``async_finish=True``)."""
        if self.event is None:
            raise RuntimeError("current_stream_wait: no event (the call ran without async_finish)")
        self.event.current_stream_wait()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.event is not None:
            self.event.current_stream_wait()
        return False
