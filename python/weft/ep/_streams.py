"""The streams of one EP call, as DeepEP orders them: the kernels run on the buffer's
communication stream after ``previous_event`` (or after torch's current stream, the compute
stream); outputs are allocated on the compute stream, or on the communication stream with
``allocate_on_comm_stream``. At the end, with ``async_finish`` the call returns an event of the
communication stream and every tensor it touched is recorded on that stream (torch's allocator
keeps their memory until the kernels are done); without it the compute stream waits for the
communication stream."""

from __future__ import annotations

from .event import EventHandle


class CommScope:
    """``with CommScope(...) as scope``: run the call's kernels on ``scope.handle``; then
    ``scope.finish(tensors)`` returns the call's event (or ``None``)."""

    def __init__(self, comm_stream, previous_event, async_finish: bool, allocate_on_comm_stream: bool = False):
        import torch

        self.torch, self.comm = torch, comm_stream
        self.compute = torch.cuda.current_stream()
        self.previous_event, self.async_finish = previous_event, async_finish
        self.allocate_on_comm_stream = allocate_on_comm_stream
        self.handle = int(comm_stream.cuda_stream)

    def __enter__(self) -> "CommScope":
        if self.allocate_on_comm_stream:
            self.torch.cuda.set_stream(self.comm)
        if self.previous_event is not None:
            self.comm.wait_event(self.previous_event.event.event)
        else:
            self.comm.wait_stream(self.compute)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.allocate_on_comm_stream:
            self.torch.cuda.set_stream(self.compute)
        return False

    def finish(self, tensors) -> EventHandle | None:
        """Ends the call: its event with ``async_finish`` (``tensors`` recorded on the
        streams that use them), else the compute stream waits for the kernels."""
        if not self.async_finish:
            self.compute.wait_stream(self.comm)
            return None
        for t in tensors:
            if isinstance(t, self.torch.Tensor):
                t.record_stream(self.comm)
                if self.allocate_on_comm_stream:
                    t.record_stream(self.compute)
        return EventHandle(self.comm)
