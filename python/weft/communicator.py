"""``weft.Communicator``: weft's collectives on tensors, with torch.distributed's names and
semantics, enqueued on the current CUDA stream. Each call reads its tensors at the boundary
(``_tensor.py``: address, shape, element type, device, layout; a wrong one is a ``ValueError``
naming the argument), derives weft's arguments and makes one call into the native module.
Calls never synchronise with the host and never allocate, so they can be captured in CUDA
graphs (run each call shape once before capturing, or call ``prepare``, so that kernels are
compiled outside the capture). weft's own errors are ``weft.WeftError`` (and
``weft.InvalidArgumentError``, also a ``ValueError``) carrying weft's messages.

Tensors must stay alive until the stream's work is done, as with torch.distributed.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from . import _weft
from ._stream import stream_handle
from ._tensor import ITEM_SIZE, TORCH_DTYPES, TensorView, check, view

# Element types weft's collectives move and reduce.
COLLECTIVE_DTYPES = ("i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2")


class ReduceOp:
    """Reduction operators (torch.distributed.ReduceOp's values are accepted as well)."""

    SUM = "sum"
    PRODUCT = "prod"
    MIN = "min"
    MAX = "max"
    AVG = "avg"


_OP_NAMES = {"sum": "sum", "prod": "prod", "product": "prod", "min": "min", "max": "max", "avg": "avg"}


def op_name(op) -> str:
    """weft's name of ``op``: a ``ReduceOp`` value, a name, or a torch.distributed.ReduceOp."""
    key = getattr(op, "name", None) or str(op)
    key = key.rsplit(".", 1)[-1].lower()
    if key not in _OP_NAMES:
        raise ValueError(f"op: weft reduces with sum, prod, min, max or avg, got {op!r}")
    return _OP_NAMES[key]


@dataclass(frozen=True)
class P2POp:
    """One operation of ``Communicator.batch_isend_irecv``: ``op`` is ``"send"`` or ``"recv"``
    (or the communicator's ``send``/``recv`` methods, as torch.distributed.P2POp takes
    ``isend``/``irecv``)."""

    op: object
    tensor: object
    peer: int


class Communicator:
    """One rank of a weft communicator. Make it with ``from_torchrun`` or
    ``from_process_group`` (collective: every rank calls it)."""

    def __init__(self, native, bindings=_weft):
        # `bindings` is the module whose functions make the native calls (tests pass a double).
        self._native = native
        self._bind = bindings
        # Registered windows: each keeps its tensor (so its memory) alive until deregistered.
        self._windows: list[Window] = []

    @classmethod
    def from_torchrun(cls, device: int | None = None) -> "Communicator":
        """Joins the job torchrun started (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
        ``MASTER_PORT``), on GPU ``device`` (default: ``LOCAL_RANK``). Under torchrun, whose
        agent already serves ``MASTER_PORT`` (``TORCHELASTIC_USE_AGENT_STORE``), rank 0 makes a
        unique id and the ranks trade it through the agent's store; elsewhere (the variables set
        by hand) weft's own rendezvous listens on ``MASTER_PORT``."""
        if device is None:
            device = int(os.environ.get("LOCAL_RANK", "0"))
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
            return cls(_weft.Communicator.from_torchrun(device))
        from datetime import timedelta

        from torch.distributed import TCPStore

        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        store = TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
            timeout=timedelta(seconds=120),
        )
        uid = trade_unique_id(store, rank, lambda: _weft.unique_id(default_host()))
        return cls(_weft.Communicator.from_unique_id(uid, rank, world, device))

    @classmethod
    def from_process_group(cls, group=None, device: int | None = None, host: str | None = None) -> "Communicator":
        """A communicator over the ranks of a torch.distributed process group (default: the
        world): the group's rank 0 makes a unique id, whose rendezvous listens on ``host``
        (default: the address of this host's default route), and the group broadcasts it with
        ``broadcast_object_list``. ``device`` defaults to torch's current device."""
        import torch
        import torch.distributed as dist

        rank, world = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise ValueError("group: this process is not a member of the group")
        if device is None:
            device = torch.cuda.current_device()
        ids = [_weft.unique_id(host or default_host()) if rank == 0 else None]
        root = 0 if group is None else dist.get_global_rank(group, 0)
        dist.broadcast_object_list(ids, src=root, group=group)
        return cls(_weft.Communicator.from_unique_id(ids[0], rank, world, device))

    @property
    def rank(self) -> int:
        return self._native.rank

    @property
    def world_size(self) -> int:
        return self._native.world_size

    @property
    def device(self) -> int:
        return self._native.device

    def __repr__(self) -> str:
        return f"weft.Communicator(rank={self.rank}, world_size={self.world_size}, device={self.device})"

    # --- collectives ------------------------------------------------------------------------

    def all_reduce(self, tensor, op=ReduceOp.SUM, *, out=None, stream=None) -> None:
        """Reduces ``tensor`` over the ranks into ``tensor`` (torch.distributed.all_reduce), or
        into ``out`` (same shape and type) when given."""
        s = self._stream(stream)
        src = self._tensor(tensor, "tensor", s)
        dst = src if out is None else self._like(out, "out", src, s)
        self._bind.all_reduce(self._native, src.ptr, dst.ptr, src.numel, src.dtype, op_name(op), s)

    def all_gather_into_tensor(self, output_tensor, input_tensor, *, stream=None) -> None:
        """Every rank's ``input_tensor`` into ``output_tensor`` (world_size times as many
        elements, rank order)."""
        s = self._stream(stream)
        src = self._tensor(input_tensor, "input_tensor", s)
        dst = self._sized(output_tensor, "output_tensor", src, src.numel * self.world_size, s)
        self._bind.all_gather(self._native, src.ptr, dst.ptr, src.numel, src.dtype, s)

    def all_gather(self, tensor_list, tensor, *, stream=None) -> None:
        """Every rank's ``tensor`` into ``tensor_list[rank]`` (one tensor per rank, each like
        ``tensor``). One AllGather when the list's tensors lie back to back in memory (views
        of one tensor), else a group of sends and receives."""
        s = self._stream(stream)
        src = self._tensor(tensor, "tensor", s)
        dsts = self._list(tensor_list, "tensor_list", src, s)
        if _back_to_back(dsts):
            self._bind.all_gather(self._native, src.ptr, dsts[0].ptr, src.numel, src.dtype, s)
            return
        ops = [(True, p, src.ptr, src.numel, src.dtype) for p in range(self.world_size)]
        ops += [(False, p, d.ptr, d.numel, d.dtype) for p, d in enumerate(dsts)]
        self._bind.send_recv(self._native, ops, s)

    def reduce_scatter_tensor(self, output, input, op=ReduceOp.SUM, *, stream=None) -> None:
        """Block r of every rank's ``input`` (world_size times ``output``'s elements) reduced
        into rank r's ``output``."""
        s = self._stream(stream)
        dst = self._tensor(output, "output", s)
        src = self._sized(input, "input", dst, dst.numel * self.world_size, s)
        self._bind.reduce_scatter(self._native, src.ptr, dst.ptr, dst.numel, dst.dtype, op_name(op), s)

    def reduce_scatter(self, output, input_list, op=ReduceOp.SUM, *, stream=None) -> None:
        """``input_list[r]`` of every rank reduced into rank r's ``output``. The list's tensors
        must lie back to back in memory (views of one tensor: weft does not allocate to gather
        them); otherwise use ``reduce_scatter_tensor``."""
        s = self._stream(stream)
        dst = self._tensor(output, "output", s)
        srcs = self._list(input_list, "input_list", dst, s)
        if not _back_to_back(srcs):
            raise ValueError(
                "input_list: its tensors must lie back to back in memory (views of one tensor); "
                "use reduce_scatter_tensor with one input tensor"
            )
        self._bind.reduce_scatter(self._native, srcs[0].ptr, dst.ptr, dst.numel, dst.dtype, op_name(op), s)

    def broadcast(self, tensor, src: int, *, stream=None) -> None:
        """Rank ``src``'s ``tensor`` into every rank's ``tensor``."""
        s = self._stream(stream)
        t = self._tensor(tensor, "tensor", s)
        self._bind.broadcast(self._native, t.ptr, t.ptr, t.numel, t.dtype, self._peer(src, "src"), s)

    def reduce(self, tensor, dst: int, op=ReduceOp.SUM, *, stream=None) -> None:
        """Every rank's ``tensor`` reduced into rank ``dst``'s ``tensor``."""
        s = self._stream(stream)
        t = self._tensor(tensor, "tensor", s)
        self._bind.reduce(self._native, t.ptr, t.ptr, t.numel, t.dtype, op_name(op), self._peer(dst, "dst"), s)

    def all_to_all_single(
        self, output, input, output_split_sizes=None, input_split_sizes=None, *, stream=None
    ) -> None:
        """Splits ``input`` along its first dimension and sends split p to rank p; split p of
        ``output`` comes from rank p. Without split sizes the splits are equal (and ``output``
        may be ``input``)."""
        s = self._stream(stream)
        src = self._tensor(input, "input", s)
        dst = self._tensor(output, "output", s, dtypes=(src.dtype,))
        n = self.world_size
        if input_split_sizes is None and output_split_sizes is None:
            count = _splits(src, None, "input", n)[0]
            self._sized(output, "output", src, count * n, s)
            # In place too (output is input): weft stages the input.
            self._bind.all_to_all(self._native, src.ptr, dst.ptr, count, src.dtype, s)
            return
        send_counts = _splits(src, input_split_sizes, "input_split_sizes", n)
        recv_counts = _splits(dst, output_split_sizes, "output_split_sizes", n)
        self._bind.all_to_allv(
            self._native, src.ptr, send_counts, _displs(send_counts), dst.ptr, recv_counts, _displs(recv_counts),
            src.dtype, s,
        )

    def send(self, tensor, dst: int, *, stream=None) -> None:
        """Sends ``tensor`` to rank ``dst`` (which posts the matching ``recv``)."""
        self.batch_isend_irecv([P2POp("send", tensor, self._peer(dst, "dst"))], stream=stream)

    def recv(self, tensor, src: int, *, stream=None) -> None:
        """Receives ``tensor`` from rank ``src``."""
        self.batch_isend_irecv([P2POp("recv", tensor, self._peer(src, "src"))], stream=stream)

    def batch_isend_irecv(self, p2p_op_list, *, stream=None) -> None:
        """Sends and receives that progress together; operations with the same peer and
        direction match the peer's in order."""
        s = self._stream(stream)
        ops = []
        for i, p in enumerate(p2p_op_list):
            is_send = _is_send(p.op, f"p2p_op_list[{i}].op")
            t = self._tensor(p.tensor, f"p2p_op_list[{i}].tensor", s)
            ops.append((is_send, self._peer(p.peer, f"p2p_op_list[{i}].peer"), t.ptr, t.numel, t.dtype))
        self._bind.send_recv(self._native, ops, s)

    def prepare(self, dtype, op=ReduceOp.SUM) -> None:
        """Compiles (or loads from weft's kernel cache) every kernel calls on ``dtype`` (a weft
        type name or a torch dtype) with ``op`` may use: call it before capturing a CUDA graph."""
        name = _dtype_name(dtype)
        self._bind.prepare(self._native, name, op_name(op))

    # --- windows ----------------------------------------------------------------------------

    def register_window(self, tensor) -> "Window":
        """Registers ``tensor``'s memory as a window (NCCL's ``ncclCommWindowRegister``):
        collective, every rank registers a tensor of the same byte size, in the same order. A
        later call whose output lies in a window writes straight into the peers' buffers, and an
        AllReduce whose input lies in one too reads the peers' inputs in place; every rank must
        then pass the same offset into its window (NCCL's contract). The tensor must be
        contiguous CUDA memory of this GPU from ``cudaMalloc`` (torch's default allocator) or
        exportable VMM memory; the communicator keeps it alive until ``deregister_window``."""
        v = check(view(tensor, "tensor"), device=self.device)
        if v.nbytes == 0:
            raise ValueError("tensor: a window needs at least one byte")
        window = Window(self._bind.register_window(self._native, v.ptr, v.nbytes), tensor, v.ptr, v.nbytes)
        self._windows.append(window)
        return window

    def deregister_window(self, window: "Window") -> None:
        """Deregisters ``window`` (collective, in the same order on every rank): waits for this
        GPU's work, then the ranks unmap each other's buffers. A CUDA graph captured with calls
        in the window must not be replayed afterwards."""
        if not any(w is window for w in self._windows):
            raise ValueError("window: not a registered window of this communicator")
        self._bind.deregister_window(self._native, window._native)
        self._windows = [w for w in self._windows if w is not window]

    # --- argument reading -------------------------------------------------------------------

    def _stream(self, stream) -> int:
        return stream_handle(stream, self.device)

    def _tensor(self, obj, name: str, stream: int, dtypes=COLLECTIVE_DTYPES) -> TensorView:
        return check(view(obj, name, stream), device=self.device, dtypes=dtypes)

    def _like(self, obj, name: str, like: TensorView, stream: int) -> TensorView:
        return self._sized(obj, name, like, like.numel, stream)

    def _sized(self, obj, name: str, like: TensorView, numel: int, stream: int) -> TensorView:
        v = self._tensor(obj, name, stream, dtypes=(like.dtype,))
        if v.numel != numel:
            raise ValueError(f"{name}: must hold {numel} elements, got shape {list(v.shape)} ({v.numel})")
        return v

    def _list(self, tensors, name: str, like: TensorView, stream: int) -> list[TensorView]:
        if len(tensors) != self.world_size:
            raise ValueError(f"{name}: must hold one tensor per rank ({self.world_size}), got {len(tensors)}")
        return [self._like(t, f"{name}[{i}]", like, stream) for i, t in enumerate(tensors)]

    def _peer(self, peer: int, name: str) -> int:
        if not 0 <= peer < self.world_size:
            raise ValueError(f"{name}: must be a rank of the communicator (0..{self.world_size - 1}), got {peer}")
        return peer


@dataclass(frozen=True, eq=False)
class Window:
    """A registered window: the tensor it covers (kept alive while registered) and its bytes."""

    _native: object
    tensor: object
    ptr: int
    nbytes: int


def _back_to_back(views: list[TensorView]) -> bool:
    return all(b.ptr == a.ptr + a.nbytes for a, b in zip(views, views[1:]))


def _splits(v: TensorView, sizes, name: str, ranks: int) -> list[int]:
    """Element counts per rank of a split along the first dimension of ``v``."""
    rows = v.shape[0] if v.shape else 1
    row = v.numel // rows if rows else 0
    if sizes is None:
        if rows % ranks:
            raise ValueError(f"{name}: without split sizes the first dimension ({rows}) must divide by {ranks} ranks")
        return [rows // ranks * row] * ranks
    sizes = [int(x) for x in sizes]
    if len(sizes) != ranks or any(x < 0 for x in sizes) or sum(sizes) != rows:
        raise ValueError(f"{name}: must be {ranks} sizes, none negative, summing to {rows}, got {sizes}")
    return [x * row for x in sizes]


def _displs(counts: list[int]) -> list[int]:
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += c
    return out


def _is_send(op, name: str) -> bool:
    label = getattr(op, "__name__", op)
    if label in ("send", "isend"):
        return True
    if label in ("recv", "irecv"):
        return False
    raise ValueError(f"{name}: must be 'send' or 'recv' (or isend/irecv), got {op!r}")


def _dtype_name(dtype) -> str:
    if isinstance(dtype, str) and dtype in ITEM_SIZE:
        name = dtype
    else:
        name = TORCH_DTYPES.get(str(dtype).removeprefix("torch."), str(dtype))
    if name not in COLLECTIVE_DTYPES:
        raise ValueError(f"dtype: weft's collectives take {', '.join(COLLECTIVE_DTYPES)}, got {dtype!r}")
    return name


def default_host() -> str:
    """The address of the interface that routes to the outside (a UDP ``connect`` picks the
    route; nothing is sent), or loopback when there is none."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))
            ip = probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    return ip if ip != "0.0.0.0" else "127.0.0.1"


__all__ = ["Communicator", "P2POp", "ReduceOp", "Window", "COLLECTIVE_DTYPES", "default_host", "op_name"]


_trades = 0


def trade_unique_id(store, rank: int, make_id) -> bytes:
    """Rank 0's unique id (``make_id()``) for every rank, through ``store`` (anything with
    torch's ``set(key, value)`` and blocking ``get(key)``). Each call in a process takes the next
    key, so every rank, making the same calls in the same order, reads the id its rank 0 wrote
    for that call."""
    global _trades
    key = f"weft/unique_id/{_trades}"
    _trades += 1
    if rank == 0:
        uid = bytes(make_id())
        store.set(key, uid)
        return uid
    return bytes(store.get(key))
