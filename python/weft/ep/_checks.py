"""The argument checks of ``weft.ep.Buffer``, on what ``weft._tensor`` reads of each tensor: a
wrong type, device, layout or shape is a ``ValueError`` naming the argument. Shapes follow
DeepEP V1: T tokens, H hidden, K top-k, E experts, R ranks, N received tokens."""

from __future__ import annotations

from .._tensor import TensorView, check, view
from .event import EventOverlap

# FP8 scales: one float32 per 128 channels of a token.
FP8_GROUP = 128


class Checker:
    """Checks the tensors of one buffer's calls: CUDA memory of ``device`` (when known),
    contiguous, of the named types and shapes; DLPack producers are ordered before ``stream``."""

    def __init__(self, num_ranks: int, device: int | None, stream: int | None):
        self.num_ranks, self.device, self.stream = num_ranks, device, stream

    def tensor(self, obj, name: str, dtypes: tuple[str, ...], shape: tuple[int | None, ...]) -> TensorView:
        if obj is None:
            raise ValueError(f"{name}: required")
        return check(view(obj, name, self.stream), device=self.device, dtypes=dtypes, shape=shape)

    def optional(self, obj, name: str, dtypes: tuple[str, ...], shape: tuple[int | None, ...]):
        return None if obj is None else self.tensor(obj, name, dtypes, shape)

    def tokens(self, x, name: str = "x") -> tuple[TensorView, TensorView | None]:
        """``x``: bf16 ``[T, H]`` (H a multiple of 8: 16-byte rows), or the FP8 pair ``(e4m3
        [T, H], float32 scales [T, H / 128])`` with H a multiple of 128."""
        if isinstance(x, (tuple, list)):
            if len(x) != 2:
                raise ValueError(f"{name}: an FP8 input is a pair (x, scales), got {len(x)} items")
            data = self.tensor(x[0], f"{name}[0]", ("f8e4m3",), (None, None))
            tokens, hidden = data.shape
            if hidden % FP8_GROUP:
                raise ValueError(f"{name}[0]: hidden ({hidden}) must be a multiple of {FP8_GROUP} for FP8")
            scales = self.tensor(x[1], f"{name}[1]", ("f32",), (tokens, hidden // FP8_GROUP))
            return data, scales
        data = self.tensor(x, name, ("bf16",), (None, None))
        if data.shape[1] % 8:
            raise ValueError(f"{name}: hidden ({data.shape[1]}) must be a multiple of 8 (16-byte rows)")
        return data, None

    def experts(self, num_experts, name: str = "num_experts") -> int:
        positive(num_experts, name)
        if num_experts % self.num_ranks:
            raise ValueError(f"{name}: must divide evenly over {self.num_ranks} ranks, got {num_experts}")
        return num_experts

    def intranode_handle(self, handle, num_tokens: int | None = None) -> tuple[TensorView, ...]:
        """DeepEP's intranode handle: ``(rank_prefix_matrix [R, R] int32, channel_prefix_matrix
        [R, C] int32, recv_channel_prefix_matrix [R, C] int32, recv_src_idx [N] int32,
        is_token_in_rank [T, R] bool, send_head [T, R] int32)``."""
        if not isinstance(handle, tuple) or len(handle) != 6:
            raise ValueError("handle: must be the 6-tuple a normal-mode dispatch returned")
        r = self.num_ranks
        prefix = self.tensor(handle[0], "handle[0] (rank_prefix_matrix)", ("i32",), (r, r))
        channels = self.tensor(handle[1], "handle[1] (channel_prefix_matrix)", ("i32",), (r, None))
        c = channels.shape[1]
        recv_channels = self.tensor(handle[2], "handle[2] (recv_channel_prefix_matrix)", ("i32",), (r, c))
        src_idx = self.tensor(handle[3], "handle[3] (recv_src_idx)", ("i32",), (None,))
        in_rank = self.tensor(handle[4], "handle[4] (is_token_in_rank)", ("bool",), (num_tokens, r))
        send_head = self.tensor(handle[5], "handle[5] (send_head)", ("i32",), (in_rank.shape[0], r))
        return prefix, channels, recv_channels, src_idx, in_rank, send_head

    def internode_handle(self, handle, num_tokens: int | None = None) -> tuple:
        """weft's handle of a normal-mode dispatch between nodes: ``(rank_prefix_matrix [R, R]
        int32, recv_src_idx [N] int32, is_token_in_rank [T, R] bool, the native rail handle)``."""
        if not isinstance(handle, tuple) or len(handle) != 4:
            raise ValueError("handle: must be the 4-tuple a normal-mode dispatch between nodes returned")
        r = self.num_ranks
        prefix = self.tensor(handle[0], "handle[0] (rank_prefix_matrix)", ("i32",), (r, r))
        src_idx = self.tensor(handle[1], "handle[1] (recv_src_idx)", ("i32",), (None,))
        in_rank = self.tensor(handle[2], "handle[2] (is_token_in_rank)", ("bool",), (num_tokens, r))
        native = handle[3]
        if native is None or isinstance(native, (int, float, str, bytes, tuple, list)):
            raise ValueError("handle[3]: must be the native handle a dispatch between nodes returned")
        received = getattr(native, "num_recv_tokens", src_idx.shape[0])
        if src_idx.shape[0] != received:
            raise ValueError(
                f"handle[1] (recv_src_idx): {src_idx.shape[0]} rows, but the native handle's dispatch receives {received}"
            )
        return prefix, src_idx, in_rank, native

    def low_latency_handle(self, handle) -> tuple:
        """DeepEP's low-latency handle: ``(packed_recv_src_info [E/R, R * max_tokens] int32,
        packed_recv_layout_range [E/R, R] int64, num_max_dispatch_tokens_per_rank, hidden,
        num_experts)``."""
        if not isinstance(handle, tuple) or len(handle) != 5:
            raise ValueError("handle: must be the 5-tuple a low-latency dispatch returned")
        max_tokens, hidden, num_experts = handle[2], handle[3], handle[4]
        positive(max_tokens, "handle[2] (num_max_dispatch_tokens_per_rank)")
        positive(hidden, "handle[3] (hidden)")
        experts = self.experts(num_experts, "handle[4] (num_experts)")
        local, r = experts // self.num_ranks, self.num_ranks
        src_info = self.tensor(handle[0], "handle[0] (packed_recv_src_info)", ("i32",), (local, r * max_tokens))
        layout = self.tensor(handle[1], "handle[1] (packed_recv_layout_range)", ("i64",), (local, r))
        return src_info, layout, max_tokens, hidden, experts


def between_nodes(nodes: int, ranks_per_node: int | None, low_latency_mode: bool, num_rdma_bytes: int) -> None:
    """A buffer whose group spans ``nodes`` nodes (the communicator's topology) needs
    ``num_rdma_bytes``: the low-latency area there, and the normal mode's rail hop
    (``ValueError`` naming the argument)."""
    if nodes <= 1 or num_rdma_bytes:
        return
    what = (
        "the low-latency mode needs its buffer (size it with Buffer.get_low_latency_rdma_size_hint)"
        if low_latency_mode
        else "the normal mode's tokens cross the network through it (size it with Config.get_rdma_buffer_size_hint)"
    )
    raise ValueError(f"num_rdma_bytes: {spread(nodes, ranks_per_node)}, where {what}")


def spread(nodes: int, ranks_per_node: int | None) -> str:
    """Where the group's ranks are, for messages: ``the group spans 2 nodes
    (WEFT_RANKS_PER_NODE=1)``."""
    how = f"WEFT_RANKS_PER_NODE={ranks_per_node}" if ranks_per_node is not None else "hosts"
    return f"the group spans {nodes} nodes ({how})"


def positive(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: must be a positive integer, got {value!r}")
    return value


def non_negative(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: must be a non-negative integer, got {value!r}")
    return value


def event_args(previous_event, async_finish: bool, allocate_on_comm_stream: bool) -> None:
    """DeepEP's rules for the stream arguments."""
    if previous_event is not None and not isinstance(previous_event, EventOverlap):
        raise ValueError(f"previous_event: must be an EventOverlap or None, got {type(previous_event).__name__}")
    if allocate_on_comm_stream and (previous_event is None or not async_finish):
        raise ValueError("allocate_on_comm_stream: needs a previous_event and async_finish=True")
