"""weft.ep's adapter (``_native.py``) without a GPU: a stand-in for the few torch calls it makes
(allocation, streams, events) and a recorder in place of ``weft._weft`` that binds every call to
the real entry point's signature. Checked: each Buffer method reaches its entry points with
arguments the native signatures take, outputs of DeepEP's shapes and types, the handle tuples,
the stream and event order of ``previous_event``, ``async_finish`` and
``allocate_on_comm_stream``, and the low-latency receive hook."""

import inspect
import itertools
import sys
import types

import pytest
from fakes import FakeGroup, FakeTensor

import weft._weft as real_native
from weft.ep import Buffer, EventOverlap, _native

T, H, K, E, R = 16, 256, 4, 8, 2
RECEIVED = 24
# The native handle of a dispatch between nodes, with the two counts it answers.
RAIL = types.SimpleNamespace(num_recv_tokens=RECEIVED, topk=K)
pytestmark = pytest.mark.skipif(not _native.KERNELS_AVAILABLE, reason="needs the EP entry points' signatures")
_addresses = itertools.count(1 << 20, 1 << 16)


class Tensor:
    """What the adapter and weft's tensor boundary use of a torch tensor."""

    layout = "torch.strided"

    def __init__(self, shape, dtype, device):
        self.shape, self.dtype = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), dtype
        self.device = types.SimpleNamespace(type="cuda", index=0)
        self.recorded = []
        numel = 1
        for n in self.shape:
            numel *= n
        self._ptr = next(_addresses) if numel else 0

    def data_ptr(self):
        return self._ptr

    def stride(self):
        strides, at = [], 1
        for n in reversed(self.shape):
            strides.insert(0, at)
            at *= n
        return tuple(strides)

    def transpose(self, a, b):
        t = Tensor(self.shape, self.dtype, self.device)
        shape = list(self.shape)
        shape[a], shape[b] = shape[b], shape[a]
        t.shape, t._ptr = tuple(shape), self._ptr
        return t

    def record_stream(self, stream):
        self.recorded.append(stream)


class Stream:
    def __init__(self, name):
        self.name, self.cuda_stream, self.waits = name, next(_addresses), []

    def wait_event(self, event):
        self.waits.append(("event", event))

    def wait_stream(self, stream):
        self.waits.append(("stream", stream.name))

    def synchronize(self):
        pass


class Event:
    def record(self, stream):
        self.stream = stream


def fake_torch():
    cuda = types.SimpleNamespace(Event=Event, Stream=lambda device: Stream("comm"), is_available=lambda: False)
    torch = types.SimpleNamespace(Tensor=Tensor, cuda=cuda, empty=lambda shape, dtype, device: Tensor(shape, dtype, device))
    for name in ("int32", "int64", "float32", "bfloat16", "bool", "uint8", "float8_e4m3fn"):
        setattr(torch, name, name)
    compute = Stream("compute")
    state = {"current": compute}
    cuda.current_stream = lambda device=None: state["current"]
    cuda.set_stream = lambda s: state.update(current=s)
    return torch, compute, state


class Recorder:
    """``weft._weft``'s EP entry points as signatures: records each bound call and answers the
    notify with ``RECEIVED`` rows."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        real = getattr(real_native, name)

        def call(*args, **kwargs):
            self.calls.append((name, inspect.signature(real).bind(*args, **kwargs).arguments))
            if name == "ep_notify_dispatch":
                return RECEIVED, [3, 5, 7, 9]
            if name == "ep_notify_between_nodes":
                return RECEIVED, [3, 5, 7, 9], RAIL
            return None

        return call


@pytest.fixture
def env(monkeypatch):
    torch, compute, state = fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    recorder = Recorder()
    monkeypatch.setattr(_native, "_weft", recorder)
    monkeypatch.setattr(_native, "create_runtime", lambda **settings: None)
    comm = types.SimpleNamespace(world_size=R)
    runtime = _native.Runtime(comm, object(), Stream("comm"), 0, Tensor((256,), "uint8", 0))
    return types.SimpleNamespace(torch=torch, compute=compute, state=state, calls=recorder.calls, runtime=runtime)


def buffer(env, **kwargs):
    b = Buffer(FakeGroup(0, R), **kwargs)
    b.runtime = env.runtime
    return b


def test_layout_dispatch_and_combine(env):
    b = buffer(env, num_nvl_bytes=1 << 20)
    per_rank, per_rdma, per_expert, in_rank, event = b.get_dispatch_layout(FakeTensor((T, K), "i64"), E)
    assert (per_rank.shape, per_rdma, per_expert.shape, in_rank.shape) == ((R,), None, (E,), (T, R))
    assert (per_rank.dtype, in_rank.dtype, event.event) == ("int32", "bool", None)
    assert env.compute.waits == [("stream", "comm")]  # without async_finish the compute stream waits

    recv_x, recv_idx, recv_w, per_expert_list, handle, _ = b.dispatch(
        (FakeTensor((T, H), "f8e4m3"), FakeTensor((T, H // 128), "f32")), num_tokens_per_rank=per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=FakeTensor((T, K), "i64"),
        topk_weights=FakeTensor((T, K), "f32"),
    )
    (x, scales) = recv_x
    assert (x.shape, x.dtype, scales.shape, recv_idx.shape, recv_w.dtype) == ((RECEIVED, H), "float8_e4m3fn", (RECEIVED, 2), (RECEIVED, K), "float32")
    assert per_expert_list == [3, 5, 7, 9]
    assert [p.shape for p in handle] == [(R, R), (R, 12), (R, 12), (RECEIVED,), (T, R), (T, R)]
    assert handle[4] is in_rank
    names = [name for name, _ in env.calls]
    assert names == ["ep_get_dispatch_layout", "ep_notify_dispatch", "ep_dispatch"]
    notify, dispatch = env.calls[1][1], env.calls[2][1]
    assert notify["routing"] == (T, K, E) and notify["num_sms"] == 24
    assert dispatch["handle"][6:] == (RECEIVED, 12) and dispatch["cached"] is False
    assert dispatch["x_scales"] != 0 and dispatch["recv_x_scales"] == scales.data_ptr()
    assert dispatch["stream"] == env.runtime.comm_stream.cuda_stream

    cached, *rest = b.dispatch(FakeTensor((T, H), "bf16"), handle=handle)
    assert rest[:4] == [None, None, None, None] and cached.dtype == "bfloat16"
    call = env.calls[-1][1]
    assert call["cached"] is True and call["topk_idx"] == 0 and call["routing"] == (T, 0, R)

    combined, combined_w, _ = b.combine(
        FakeTensor((RECEIVED, H), "bf16"), handle, topk_weights=FakeTensor((RECEIVED, K), "f32"),
        bias=(FakeTensor((T, H), "bf16"), FakeTensor((T, H), "bf16")),
    )
    assert (combined.shape, combined_w.shape) == ((T, H), (T, K))
    call = env.calls[-1][1]
    assert call["tokens"] == T and call["topk"] == K and 0 not in call["bias"]


def test_async_dispatch_on_the_comm_stream(env):
    b = buffer(env, num_nvl_bytes=1 << 20)
    previous = Buffer.capture()
    in_rank = Tensor((T, R), "bool", 0)
    out = b.dispatch(
        FakeTensor((T, H), "bf16"), num_tokens_per_rank=FakeTensor((R,), "i32"), is_token_in_rank=in_rank,
        num_tokens_per_expert=FakeTensor((E,), "i32"), previous_event=previous, async_finish=True,
        allocate_on_comm_stream=True,
    )
    recv_x, event = out[0], out[5]
    comm = env.runtime.comm_stream
    assert comm.waits == [("event", previous.event.event)]
    assert event.event.event.stream is comm and isinstance(event, EventOverlap)
    assert recv_x.recorded == [comm, env.compute] and in_rank.recorded == [comm, env.compute]
    assert env.state["current"] is env.compute and env.compute.waits == []


def test_empty_tensors_cross_with_the_scratch_address(env):
    b = buffer(env, num_nvl_bytes=1 << 20)
    b.get_dispatch_layout(FakeTensor((0, K), "i64", ptr=0), E)
    assert env.calls[-1][1]["topk_idx"] == env.runtime.scratch.data_ptr()
    assert env.calls[-1][1]["is_token_in_rank"] == env.runtime.scratch.data_ptr()


def test_low_latency_with_and_without_the_hook(env):
    b = buffer(env, num_rdma_bytes=1 << 20, low_latency_mode=True)
    x, idx = FakeTensor((T, H), "bf16"), FakeTensor((T, K), "i64")
    (recv_x, scales), count, handle, event, hook = b.low_latency_dispatch(x, idx, 32, E)
    assert (recv_x.shape, scales.shape, count.shape, hook, event.event) == ((E // R, R * 32, H), (E // R, R * 32, 2), (E // R,), None, None)
    assert handle[2:] == (32, H, E) and [p.shape for p in handle[:2]] == [(E // R, R * 32), (E // R, R)]
    assert env.calls[-1][1]["phase"] == "both" and env.calls[-1][1]["sizes"] == (T, K, E, H, 32)

    recv_x, _, handle, _, hook = b.low_latency_dispatch(x, idx, 32, E, use_fp8=False, return_recv_hook=True)
    assert recv_x.dtype == "bfloat16" and env.calls[-1][1]["phase"] == "send"
    assert env.calls[-1][1]["stream"] == env.compute.cuda_stream
    hook()
    assert env.calls[-1][1]["phase"] == "recv" and env.calls[-1][1]["recv_x"] == recv_x.data_ptr()

    ll_handle = (FakeTensor((E // R, R * 32), "i32"), FakeTensor((E // R, R), "i64"), 32, H, E)
    combined, _, hook = b.low_latency_combine(
        FakeTensor((E // R, R * 32, H), "bf16"), idx, FakeTensor((T, K), "f32"), ll_handle, return_recv_hook=True,
    )
    assert combined.shape == (T, H) and env.calls[-1][1]["phase"] == "send"
    hook()
    assert env.calls[-1][1]["phase"] == "recv" and env.calls[-1][1]["combined_x"] == combined.data_ptr()


CREATE_RUNTIME = _native.create_runtime  # the env fixture replaces it


def create(env, monkeypatch, nodes, ranks_per_node=1, **settings):
    """``create_runtime`` over a communicator whose topology has ``nodes`` nodes."""
    topology = types.SimpleNamespace(node_count=nodes, ranks_per_node=ranks_per_node)
    comm = types.SimpleNamespace(_native=topology, world_size=R)
    monkeypatch.setattr(_native, "_communicator", lambda group, rank, num_ranks, device: comm)
    args = dict(group=FakeGroup(0, R), rank=0, num_ranks=R, device=0, num_nvl_bytes=1 << 20, num_rdma_bytes=1 << 21,
                low_latency_mode=True) | settings
    return CREATE_RUNTIME(**args), topology


def test_runtime_between_nodes(env, monkeypatch):
    runtime, topology = create(env, monkeypatch, nodes=2)
    assert (runtime.nodes, runtime.ranks_per_node) == (2, 1)
    # Both areas: the normal mode stages its hop within the node in num_nvl_bytes.
    assert env.calls == [("ep_buffer_create", {"comm": topology, "num_nvl_bytes": 1 << 20, "num_rdma_bytes": 1 << 21})]

    runtime, topology = create(env, monkeypatch, nodes=1, ranks_per_node=None, low_latency_mode=False)
    assert (runtime.nodes, runtime.ranks_per_node) == (1, None)
    assert env.calls[-1] == ("ep_buffer_create", {"comm": topology, "num_nvl_bytes": 1 << 20, "num_rdma_bytes": 1 << 21})

    create(env, monkeypatch, nodes=2, low_latency_mode=False)  # the normal mode between nodes
    env.calls.clear()
    with pytest.raises(ValueError, match=r"^num_rdma_bytes: the group spans 2 nodes \(WEFT_RANKS_PER_NODE=1\), where "
                                         "the normal mode's tokens cross the network through it"):
        create(env, monkeypatch, nodes=2, low_latency_mode=False, num_rdma_bytes=0)
    with pytest.raises(ValueError, match=r"^num_rdma_bytes: the group spans 4 nodes \(hosts\), where the low-latency"):
        create(env, monkeypatch, nodes=4, ranks_per_node=None, num_rdma_bytes=0)
    assert env.calls == []  # refused before the buffer is made


def test_normal_mode_between_nodes_takes_the_same_calls(env):
    env.runtime.nodes, env.runtime.ranks_per_node = 2, 1
    b = buffer(env, num_nvl_bytes=1 << 20, num_rdma_bytes=1 << 21, low_latency_mode=True)
    per_rank, per_rdma, per_expert, in_rank, _ = b.get_dispatch_layout(FakeTensor((T, K), "i64"), E)
    assert per_rdma is None and in_rank.shape == (T, R)
    recv_x, recv_idx, recv_w, per_expert_list, handle, _ = b.dispatch(
        (FakeTensor((T, H), "f8e4m3"), FakeTensor((T, H // 128), "f32")), num_tokens_per_rank=per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert, topk_idx=FakeTensor((T, K), "i64"),
        topk_weights=FakeTensor((T, K), "f32"),
    )
    (x, scales) = recv_x
    assert (x.shape, x.dtype, scales.shape, recv_idx.shape, recv_w.shape) == ((RECEIVED, H), "float8_e4m3fn", (RECEIVED, 2), (RECEIVED, K), (RECEIVED, K))
    assert per_expert_list == [3, 5, 7, 9]
    prefix, src_idx, handle_in_rank, rail = handle
    assert (prefix.shape, src_idx.shape, rail) == ((R, R), (RECEIVED,), RAIL) and handle_in_rank is in_rank
    names = [name for name, _ in env.calls]
    assert names == ["ep_get_dispatch_layout", "ep_notify_between_nodes", "ep_dispatch_between_nodes"]
    notify, dispatch = env.calls[1][1], env.calls[2][1]
    assert notify["routing"] == (T, K, E) and notify["num_sms"] == 24
    assert notify["rank_prefix_matrix"] == prefix.data_ptr() and notify["layout"][2] == in_rank.data_ptr()
    assert dispatch["rail"] is RAIL and dispatch["recv_src_idx"] == src_idx.data_ptr()
    assert dispatch["x_scales"] != 0 and dispatch["recv_x_scales"] == scales.data_ptr()
    assert dispatch["stream"] == env.runtime.comm_stream.cuda_stream

    # A cached dispatch: the same handle, no top-k, into the same received rows.
    cached, *rest = b.dispatch(FakeTensor((T, H), "bf16"), handle=handle)
    assert rest[:4] == [None, None, None, None] and (cached.shape, cached.dtype) == ((RECEIVED, H), "bfloat16")
    call = env.calls[-1]
    assert call[0] == "ep_dispatch_between_nodes" and call[1]["topk_idx"] == 0 and call[1]["rail"] is RAIL

    combined, combined_w, _ = b.combine(
        FakeTensor((RECEIVED, H), "bf16"), handle, topk_weights=FakeTensor((RECEIVED, K), "f32"),
        bias=FakeTensor((T, H), "bf16"),
    )
    assert (combined.shape, combined_w.shape) == ((T, H), (T, K))
    name, call = env.calls[-1]
    assert name == "ep_combine_between_nodes" and call["rail"] is RAIL and call["topk"] == K
    assert call["bias"][0] != 0 and call["bias"][1] == 0 and call["combined_x"] == combined.data_ptr()

    # The native handle's counts hold the tuple to its dispatch: a recv_src_idx of another
    # length, or weights of another top-k, are refused before any native call.
    start = len(env.calls)
    forged = (handle[0], FakeTensor((RECEIVED - 1,), "i32"), handle[2], RAIL)
    with pytest.raises(ValueError, match=r"^handle\[1\] \(recv_src_idx\): 23 rows, but the native handle's dispatch receives 24"):
        b.combine(FakeTensor((RECEIVED - 1, H), "bf16"), forged)
    with pytest.raises(ValueError, match="^topk_weights"):
        b.combine(FakeTensor((RECEIVED, H), "bf16"), handle, topk_weights=FakeTensor((RECEIVED, K - 1), "f32"))
    assert env.calls[start:] == []


def test_low_latency_between_nodes_takes_the_same_calls(env):
    calls = {}
    for nodes in (1, 2):
        env.runtime.nodes, env.runtime.ranks_per_node = nodes, 1
        b = buffer(env, num_rdma_bytes=1 << 20, low_latency_mode=True)
        x, idx = FakeTensor((T, H), "bf16"), FakeTensor((T, K), "i64")
        start = len(env.calls)
        _, _, handle, _, hook = b.low_latency_dispatch(x, idx, 32, E, return_recv_hook=True)
        hook()
        combined, _, hook = b.low_latency_combine(
            FakeTensor((E // R, R * 32, H), "bf16"), idx, FakeTensor((T, K), "f32"), handle, return_recv_hook=True,
        )
        hook()
        b.low_latency_dispatch(x, idx, 32, E, use_fp8=False)
        calls[nodes] = [(name, args["phase"], args["sizes"]) for name, args in env.calls[start:]]
    assert calls[2] == calls[1] == [
        ("ep_low_latency_dispatch", "send", (T, K, E, H, 32)), ("ep_low_latency_dispatch", "recv", (T, K, E, H, 32)),
        ("ep_low_latency_combine", "send", (T, K, E, H, 32)), ("ep_low_latency_combine", "recv", (T, K, E, H, 32)),
        ("ep_low_latency_dispatch", "both", (T, K, E, H, 32)),
    ]
