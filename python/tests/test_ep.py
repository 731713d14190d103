"""weft.ep's DeepEP interface without a GPU: every argument check, and what a call whose
arguments pass does without its native half: a RuntimeError, naming the missing EP kernels in a
weft built without them, else the missing native buffer (these tests make buffers without one)."""

import types

import pytest
from fakes import FakeGroup, FakeTensor

import weft
import weft.ep as deep_ep
from weft.ep import Buffer, Config, EventOverlap, _native

T, H, K, E, R = 16, 256, 4, 8, 2
# What a call whose arguments pass raises here.
NO_KERNELS = "^weft.ep.Buffer: no EP buffer" if deep_ep.KERNELS_AVAILABLE else "^weft was built without the EP kernels"


@pytest.fixture(autouse=True)
def default_sms():
    yield
    Buffer.num_sms = 24


@pytest.fixture(autouse=True)
def no_native_buffer(monkeypatch):
    """Buffers without their native half (that needs GPUs and a process group)."""
    monkeypatch.setattr(_native, "create_runtime", lambda **settings: None)


def normal():
    return Buffer(FakeGroup(0, R), num_nvl_bytes=1 << 20)


def low_latency():
    return Buffer(FakeGroup(1, R), num_rdma_bytes=1 << 20, low_latency_mode=True, num_qps_per_rank=E // R)


def layout(tokens=T):
    return dict(
        num_tokens_per_rank=FakeTensor((R,), "i32"),
        is_token_in_rank=FakeTensor((tokens, R), "bool"),
        num_tokens_per_expert=FakeTensor((E,), "i32"),
        topk_idx=FakeTensor((tokens, K), "i64"),
        topk_weights=FakeTensor((tokens, K), "f32"),
    )


def intranode_handle(tokens=T, received=24, channels=12):
    return (
        FakeTensor((R, R), "i32"), FakeTensor((R, channels), "i32"), FakeTensor((R, channels), "i32"),
        FakeTensor((received,), "i32"), FakeTensor((tokens, R), "bool"), FakeTensor((tokens, R), "i32"),
    )


def ll_handle(max_tokens=T):
    return (FakeTensor((E // R, R * max_tokens), "i32"), FakeTensor((E // R, R), "i64"), max_tokens, H, E)


def test_module_surface():
    for name in ("Buffer", "Config", "EventOverlap", "EventHandle", "nvl_bytes_hint"):
        assert hasattr(deep_ep, name)


def test_constructor_checks():
    normal()
    low_latency()
    Buffer(None, num_nvl_bytes=128, comm=type("Comm", (), {"Get_rank": lambda s: 0, "Get_size": lambda s: 4})())
    cases = [
        (dict(group=None), "^group: either group or comm"),
        (dict(group=FakeGroup(0, 16)), "^group: weft's EP kernels serve 1 to 8 ranks, got 16"),
        (dict(num_nvl_bytes=100), "^num_nvl_bytes: must be a multiple of 128"),
        (dict(num_nvl_bytes=-128), "^num_nvl_bytes: must be a non-negative integer"),
        (dict(num_nvl_bytes=0), "^num_nvl_bytes: a buffer needs"),
        (dict(num_rdma_bytes=1024), "^num_rdma_bytes: within one node only the low-latency mode uses the RDMA buffer"),
        (dict(low_latency_mode=True, num_rdma_bytes=1024, num_qps_per_rank=0), "^num_qps_per_rank: must be a positive"),
        (dict(enable_shrink=True), "^enable_shrink: weft has no shrink mode"),
    ]
    for kwargs, message in cases:
        args = dict(group=FakeGroup(0, R), num_nvl_bytes=1 << 20) | kwargs
        with pytest.raises(ValueError, match=message):
            Buffer(**args)


def test_destroy():
    with pytest.raises(RuntimeError, match="^destroy: the buffer was made without explicitly_destroy=True"):
        normal().destroy()
    with pytest.raises(RuntimeError, match=NO_KERNELS):
        Buffer(FakeGroup(), num_nvl_bytes=128, explicitly_destroy=True).destroy()


def test_config():
    c = Config(24, 6, 256, 6, 100)
    assert c.num_max_rdma_chunked_recv_tokens == 102  # rounded up to a multiple of the send chunk
    for args, message in [
        ((23,), "^num_sms: must be even"),
        ((0,), "^num_sms: must be a positive integer"),
        ((24, 256, 256), "^num_max_nvl_chunked_send_tokens: must be below"),
        ((24, 6, 256, 128, 100), "^num_max_rdma_chunked_send_tokens: must be at most half"),
    ]:
        with pytest.raises(ValueError, match=message):
            Config(*args)
    with pytest.raises(ValueError, match="^hidden_bytes: must be a positive integer"):
        c.get_nvl_buffer_size_hint(0, R)
    assert c.get_rdma_buffer_size_hint(H * 2, R) == 0


@pytest.mark.skipif(not deep_ep.KERNELS_AVAILABLE, reason="needs the EP entry points")
def test_size_hints():
    # DeepEP's low-latency message: 16-byte header + max(2H, H + H/128 * 4) bytes; two halves of
    # dispatch and combine slots per expert and token.
    assert Buffer.get_low_latency_rdma_size_hint(128, 7168, 8, 256) == 2 * 256 * 128 * (14352 + 14336)
    # Staging grows with the tokens and ranks it holds; a DeepEP config's hint covers
    # num_sms / 2 channels of num_max_nvl_chunked_recv_tokens tokens.
    small, large = deep_ep.nvl_bytes_hint(128, H, K, R), deep_ep.nvl_bytes_hint(256, H, K, R)
    assert 0 < small < large == 2 * small
    assert deep_ep.nvl_bytes_hint(128, H, K, 2 * R) == 2 * small
    assert Config(24).get_nvl_buffer_size_hint(2 * H, R) == deep_ep.nvl_bytes_hint(12 * 256, H, 32, R)
    assert all(deep_ep.nvl_bytes_hint(t, 136, 3, 3) % 128 == 0 for t in range(1, 9))
    assert all(Buffer.get_low_latency_rdma_size_hint(t, 128, 2, 6) % 128 == 0 for t in range(1, 9))
    with pytest.raises(ValueError, match="^topk: must be a positive integer"):
        deep_ep.nvl_bytes_hint(128, H, 0, R)


@pytest.mark.skipif(not deep_ep.KERNELS_AVAILABLE, reason="needs the EP entry points")
def test_size_hints_between_nodes(monkeypatch):
    import weft._weft as native

    c = Config(24)
    # num_sms / 2 channels of the config's receive chunks, in tokens (the RDMA one rounded up
    # to a multiple of its send chunk: 258).
    nvl_tokens, rdma_tokens = 12 * 256, 12 * c.num_max_rdma_chunked_recv_tokens
    # Within a node no RDMA bytes; across nodes of 1 or 2 ranks the rail hop's regions, and the
    # hop within the node stages what it forwards.
    assert c.get_rdma_buffer_size_hint(2 * H, 4, ranks_per_node=4) == 0
    two_nodes = c.get_rdma_buffer_size_hint(2 * H, 4, ranks_per_node=2)
    four_nodes = c.get_rdma_buffer_size_hint(2 * H, 4, ranks_per_node=1)
    assert two_nodes == -(-native.ep_rdma_bytes_hint(rdma_tokens, H, 32, 4, 2) // 128) * 128
    assert 0 < two_nodes < four_nodes and two_nodes % 128 == four_nodes % 128 == 0
    nvl = c.get_nvl_buffer_size_hint(2 * H, 4, ranks_per_node=2)
    assert nvl == -(-native.ep_nvl_bytes_hint_between_nodes(nvl_tokens, H, 32, 4, 2) // 128) * 128
    # Without ranks_per_node: WEFT_RANKS_PER_NODE's virtual nodes, else one node.
    monkeypatch.setenv("WEFT_RANKS_PER_NODE", "2")
    assert c.get_rdma_buffer_size_hint(2 * H, 4) == two_nodes and c.get_nvl_buffer_size_hint(2 * H, 4) == nvl
    monkeypatch.delenv("WEFT_RANKS_PER_NODE")
    assert c.get_rdma_buffer_size_hint(2 * H, 4) == 0
    with pytest.raises(ValueError, match="^ranks_per_node: must be a positive integer"):
        c.get_rdma_buffer_size_hint(2 * H, 4, ranks_per_node=0)


@pytest.mark.skipif(not deep_ep.KERNELS_AVAILABLE, reason="needs the EP entry points")
def test_low_latency_size_hint_between_nodes(monkeypatch):
    # Between nodes weft-ep's area adds the send regions (as large as the receive regions, two
    # halves each) and two halves of count rows in and out (u64 per expert).
    one_node = 2 * 256 * 128 * (14352 + 14336)
    between = 2 * one_node + 4 * 256 * 8
    hint = Buffer.get_low_latency_rdma_size_hint
    monkeypatch.delenv("WEFT_RANKS_PER_NODE", raising=False)
    assert hint(128, 7168, 2, 256) == one_node  # a node is a host: one host, as far as one can tell
    assert hint(128, 7168, 2, 256, spans_nodes=True) == between
    # Virtual nodes: the communicator will split more than WEFT_RANKS_PER_NODE ranks.
    monkeypatch.setenv("WEFT_RANKS_PER_NODE", "1")
    assert hint(128, 7168, 2, 256) == between
    assert hint(128, 7168, 1, 256) == one_node
    assert hint(128, 7168, 2, 256, spans_nodes=False) == one_node
    monkeypatch.setenv("WEFT_RANKS_PER_NODE", "4")
    assert hint(128, 7168, 4, 256) == one_node and hint(128, 7168, 8, 256) == between
    assert all(hint(t, 128, 2, 6, spans_nodes=True) % 128 == 0 for t in range(1, 9))
    with pytest.raises(ValueError, match="^spans_nodes: must be True, False or None, got 'yes'"):
        hint(128, 7168, 2, 256, spans_nodes="yes")
    monkeypatch.setenv("WEFT_RANKS_PER_NODE", "two")
    with pytest.raises(weft.WeftError, match="WEFT_RANKS_PER_NODE"):
        hint(128, 7168, 2, 256)


def between_nodes(monkeypatch, nodes=2, ranks_per_node=1):
    """A buffer of both modes whose group spans ``nodes`` nodes (its native half stands in for
    the topology only)."""
    runtime = types.SimpleNamespace(nodes=nodes, ranks_per_node=ranks_per_node)
    monkeypatch.setattr(_native, "create_runtime", lambda **settings: runtime)
    b = Buffer(FakeGroup(0, R), num_rdma_bytes=1 << 20, low_latency_mode=True, num_qps_per_rank=E // R)
    assert b.num_nodes == nodes
    return b


@pytest.mark.skipif(not deep_ep.KERNELS_AVAILABLE, reason="the native half is made only with the EP entry points")
def test_normal_mode_between_nodes_checks_its_arguments(monkeypatch):
    b, x = between_nodes(monkeypatch), FakeTensor((T, H), "bf16")
    # The calls of one node, checked as there (test_ep_adapter.py follows them to the native
    # entry points between nodes).
    with pytest.raises(ValueError, match="^x: required"):
        b.dispatch(None)
    with pytest.raises(ValueError, match="^num_experts: must divide evenly"):
        b.get_dispatch_layout(FakeTensor((T, K), "i64"), 3)
    # The handle between nodes is weft's 4-tuple: a one-node handle is refused by name.
    with pytest.raises(ValueError, match="^handle: must be the 4-tuple a normal-mode dispatch between nodes returned"):
        b.combine(FakeTensor((24, H), "bf16"), intranode_handle())
    with pytest.raises(ValueError, match="^handle: must be the 4-tuple"):
        b.dispatch(x, handle=intranode_handle())
    handle = (FakeTensor((R, R), "i32"), FakeTensor((24,), "i32"), FakeTensor((T, R), "bool"), "rail")
    with pytest.raises(ValueError, match="^handle\\[3\\]: must be the native handle"):
        b.combine(FakeTensor((24, H), "bf16"), handle)
    # DeepEP's per-node counts are accepted between nodes (weft counts them itself), and must
    # have one entry per node.
    with pytest.raises(ValueError, match="^num_tokens_per_rdma_rank: "):
        b.dispatch(x, num_tokens_per_rdma_rank=FakeTensor((3,), "i32"), **layout())
    # One node: a one-node handle is what a combine takes, and no per-node counts.
    with pytest.raises(ValueError, match="^handle: must be the 6-tuple"):
        between_nodes(monkeypatch, nodes=1).combine(FakeTensor((24, H), "bf16"), handle)
    with pytest.raises(ValueError, match="^num_tokens_per_rdma_rank: must be None within one node"):
        between_nodes(monkeypatch, nodes=1).dispatch(x, num_tokens_per_rdma_rank=FakeTensor((1,), "i32"), **layout())


def test_class_settings():
    Buffer.set_num_sms(32)
    assert Buffer.get_dispatch_config(R).num_sms == 32 and Buffer.get_combine_config(8).num_sms == 32
    with pytest.raises(ValueError, match="^new_num_sms: must be even"):
        Buffer.set_num_sms(33)
    with pytest.raises(ValueError, match="^num_ranks: weft's EP kernels serve at most 8"):
        Buffer.get_dispatch_config(16)
    with pytest.raises(ValueError, match="^hidden: the low-latency kernels take a hidden size that is a multiple of 128"):
        Buffer.get_low_latency_rdma_size_hint(128, 100, R, E)
    with pytest.raises(ValueError, match="^num_experts: must divide evenly over 2 ranks"):
        Buffer.get_low_latency_rdma_size_hint(128, H, R, 7)
    if not deep_ep.KERNELS_AVAILABLE:
        with pytest.raises(RuntimeError, match=NO_KERNELS):
            Buffer.get_low_latency_rdma_size_hint(128, H, R, E)


def test_get_dispatch_layout():
    b = normal()
    with pytest.raises(ValueError, match="^topk_idx: dtype must be i64, got i32"):
        b.get_dispatch_layout(FakeTensor((T, K), "i32"), E)
    with pytest.raises(ValueError, match=r"^topk_idx: shape must be \[\*, \*\], got \[16\]"):
        b.get_dispatch_layout(FakeTensor((T,), "i64"), E)
    with pytest.raises(ValueError, match="^num_experts: must divide evenly over 2 ranks, got 5"):
        b.get_dispatch_layout(FakeTensor((T, K), "i64"), 5)
    with pytest.raises(ValueError, match="^allocate_on_comm_stream: needs a previous_event and async_finish"):
        b.get_dispatch_layout(FakeTensor((T, K), "i64"), E, allocate_on_comm_stream=True)
    with pytest.raises(ValueError, match="^previous_event: must be an EventOverlap"):
        b.get_dispatch_layout(FakeTensor((T, K), "i64"), E, previous_event="event")
    with pytest.raises(RuntimeError, match=NO_KERNELS):
        b.get_dispatch_layout(FakeTensor((T, K), "i64"), E, previous_event=EventOverlap(), async_finish=True,
                              allocate_on_comm_stream=True)


def test_dispatch_inputs():
    b = normal()
    bf16, fp8 = FakeTensor((T, H), "bf16"), (FakeTensor((T, H), "f8e4m3"), FakeTensor((T, H // 128), "f32"))
    for x in (bf16, fp8):
        with pytest.raises(RuntimeError, match=NO_KERNELS):
            b.dispatch(x, **layout())
    cases = [
        (FakeTensor((T, H), "f16"), "^x: dtype must be bf16, got f16"),
        (FakeTensor((T, 100), "bf16"), r"^x: hidden \(100\) must be a multiple of 8"),
        (FakeTensor((T, H), "bf16", strides=(1, T)), "^x: must be contiguous"),
        ((FakeTensor((T, 200), "f8e4m3"), FakeTensor((T, 1), "f32")), r"^x\[0\]: hidden \(200\) must be a multiple of 128"),
        ((FakeTensor((T, H), "f8e5m2"), FakeTensor((T, 2), "f32")), r"^x\[0\]: dtype must be f8e4m3"),
        ((FakeTensor((T, H), "f8e4m3"), FakeTensor((T, 4), "f32")), r"^x\[1\]: shape must be \[16, 2\], got \[16, 4\]"),
        ((FakeTensor((T, H), "f8e4m3"), FakeTensor((T, 2), "bf16")), r"^x\[1\]: dtype must be f32"),
        ((FakeTensor((T, H), "f8e4m3"),), "^x: an FP8 input is a pair"),
    ]
    for x, message in cases:
        with pytest.raises(ValueError, match=message):
            b.dispatch(x, **layout())


def test_dispatch_layout_arguments():
    b, x = normal(), FakeTensor((T, H), "bf16")
    cases = [
        (dict(topk_idx=FakeTensor((T, K), "i32")), "^topk_idx: dtype must be i64"),
        (dict(topk_weights=FakeTensor((T, K), "f16")), "^topk_weights: dtype must be f32"),
        (dict(topk_weights=FakeTensor((T, K + 1), "f32")), r"^topk_weights: shape must be \[16, 4\]"),
        (dict(topk_weights=None), "^topk_weights: topk_idx and topk_weights go together"),
        (dict(is_token_in_rank=FakeTensor((T, R + 1), "bool")), r"^is_token_in_rank: shape must be \[16, 2\]"),
        (dict(is_token_in_rank=FakeTensor((T, R), "u8")), "^is_token_in_rank: dtype must be bool"),
        (dict(num_tokens_per_rank=FakeTensor((R,), "i64")), "^num_tokens_per_rank: dtype must be i32"),
        (dict(num_tokens_per_rank=None), "^num_tokens_per_rank: required"),
        (dict(num_tokens_per_expert=FakeTensor((7,), "i32")), r"^num_tokens_per_expert \(its length\): must divide"),
        (dict(num_tokens_per_rdma_rank=FakeTensor((1,), "i32")), "^num_tokens_per_rdma_rank: must be None within one node"),
        (dict(expert_alignment=0), "^expert_alignment: must be a positive integer"),
        (dict(num_worst_tokens=-1), "^num_worst_tokens: must be a non-negative integer"),
        (dict(num_worst_tokens=64), "^num_worst_tokens: weft sizes the outputs from the notify's counts"),
        (dict(config=(24, 6, 256)), "^config: must be a weft.ep.Config"),
        (dict(allocate_on_comm_stream=True, async_finish=True), "^allocate_on_comm_stream: needs a previous_event"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            b.dispatch(x, **(layout() | change))
    with pytest.raises(RuntimeError, match=NO_KERNELS):
        b.dispatch(x, **(layout() | dict(topk_idx=None, topk_weights=None, config=Config(32))))


def test_cached_dispatch():
    b, x = normal(), FakeTensor((T, H), "bf16")
    with pytest.raises(RuntimeError, match=NO_KERNELS):
        b.dispatch(x, handle=intranode_handle())
    with pytest.raises(ValueError, match="^topk_idx: a dispatch with a cached handle takes no topk_idx"):
        b.dispatch(x, handle=intranode_handle(), topk_idx=FakeTensor((T, K), "i64"))
    with pytest.raises(ValueError, match="^handle: must be the 6-tuple"):
        b.dispatch(x, handle=intranode_handle()[:5])
    with pytest.raises(ValueError, match=r"^handle\[4\] \(is_token_in_rank\): shape must be \[16, 2\], got \[8, 2\]"):
        b.dispatch(x, handle=intranode_handle(tokens=8))


def test_handle_parts():
    b, x = normal(), FakeTensor((T, H), "bf16")
    good = intranode_handle()
    for index, bad, message in [
        (0, FakeTensor((R, R + 1), "i32"), r"^handle\[0\] \(rank_prefix_matrix\): shape must be \[2, 2\]"),
        (1, FakeTensor((R, 12), "i64"), r"^handle\[1\] \(channel_prefix_matrix\): dtype must be i32"),
        (2, FakeTensor((R, 10), "i32"), r"^handle\[2\] \(recv_channel_prefix_matrix\): shape must be \[2, 12\]"),
        (3, FakeTensor((24, 1), "i32"), r"^handle\[3\] \(recv_src_idx\): shape must be \[\*\]"),
        (5, FakeTensor((T, R), "bool"), r"^handle\[5\] \(send_head\): dtype must be i32"),
    ]:
        handle = good[:index] + (bad,) + good[index + 1:]
        with pytest.raises(ValueError, match=message):
            b.dispatch(x, handle=handle)


def test_combine():
    b, handle = normal(), intranode_handle(received=24)
    x = FakeTensor((24, H), "bf16")
    bias = FakeTensor((T, H), "bf16")
    for kwargs in ({}, dict(topk_weights=FakeTensor((24, K), "f32"), bias=bias), dict(bias=(bias, bias))):
        with pytest.raises(RuntimeError, match=NO_KERNELS):
            b.combine(x, handle, **kwargs)
    cases = [
        (dict(x=FakeTensor((23, H), "bf16")), r"^x: shape must be \[24, \*\], got \[23, 256\]"),
        (dict(x=FakeTensor((24, H), "f32")), "^x: dtype must be bf16"),
        (dict(topk_weights=FakeTensor((24, K), "bf16")), "^topk_weights: dtype must be f32"),
        (dict(bias=FakeTensor((T, H + 8), "bf16")), r"^bias\[0\]: shape must be \[16, 256\]"),
        (dict(bias=(bias, bias, bias)), "^bias: at most two tensors"),
        (dict(handle=(1, 2)), "^handle: must be the 6-tuple"),
    ]
    for change, message in cases:
        args = dict(x=x, handle=handle) | change
        with pytest.raises(ValueError, match=message):
            b.combine(**args)


def test_low_latency_dispatch():
    b, x, idx = low_latency(), FakeTensor((T, H), "bf16"), FakeTensor((T, K), "i64")
    for kwargs in ({}, dict(use_fp8=False), dict(round_scale=True, use_ue8m0=True, return_recv_hook=True),
                   dict(cumulative_local_expert_recv_stats=FakeTensor((E // R,), "i32"), async_finish=True)):
        with pytest.raises(RuntimeError, match=NO_KERNELS):
            b.low_latency_dispatch(x, idx, 128, E, **kwargs)
    cases = [
        (dict(x=FakeTensor((T, 200), "bf16")), "^x \\(hidden\\): the low-latency kernels take a hidden size that is a multiple of 128"),
        (dict(num_max_dispatch_tokens_per_rank=8), "^x: 16 tokens, more than num_max_dispatch_tokens_per_rank \\(8\\)"),
        (dict(topk_idx=FakeTensor((T + 1, K), "i64")), r"^topk_idx: shape must be \[16, \*\]"),
        (dict(num_experts=3), "^num_experts: must divide evenly"),
        (dict(use_ue8m0=True), "^use_ue8m0: needs use_fp8=True and round_scale=True"),
        (dict(use_fp8=False, round_scale=True), "^round_scale: applies to FP8 dispatch only"),
        (dict(async_finish=True, return_recv_hook=True), "^return_recv_hook: cannot be combined with async_finish"),
        (dict(cumulative_local_expert_recv_stats=FakeTensor((E,), "i32")), r"^cumulative_local_expert_recv_stats: shape must be \[4\]"),
        (dict(dispatch_wait_recv_cost_stats=FakeTensor((R,), "i64")), "^dispatch_wait_recv_cost_stats: weft's EP kernels offer no receive-cost"),
    ]
    for change, message in cases:
        args = dict(x=x, topk_idx=idx, num_max_dispatch_tokens_per_rank=128, num_experts=E) | change
        with pytest.raises(ValueError, match=message):
            b.low_latency_dispatch(**args)
    with pytest.raises(ValueError, match="^low_latency_dispatch: the buffer was made without low_latency_mode=True"):
        normal().low_latency_dispatch(x, idx, 128, E)


def test_low_latency_combine():
    b, handle = low_latency(), ll_handle(max_tokens=32)
    x = FakeTensor((E // R, R * 32, H), "bf16")
    idx, weights = FakeTensor((T, K), "i64"), FakeTensor((T, K), "f32")
    for kwargs in ({}, dict(out=FakeTensor((T, H), "bf16"), return_recv_hook=True)):
        with pytest.raises(RuntimeError, match=NO_KERNELS):
            b.low_latency_combine(x, idx, weights, handle, **kwargs)
    cases = [
        (dict(x=FakeTensor((E // R, R * 32, H), "f32")), "^x: dtype must be bf16"),
        (dict(x=FakeTensor((E // R, 32, H), "bf16")), r"^x: shape must be \[4, 64, 256\]"),
        (dict(topk_weights=FakeTensor((T, K), "bf16")), "^topk_weights: dtype must be f32"),
        (dict(topk_weights=FakeTensor((T, K - 1), "f32")), r"^topk_weights: shape must be \[16, 4\]"),
        (dict(topk_idx=FakeTensor((40, K), "i64")), "^topk_idx: 40 tokens, more than the handle's"),
        (dict(out=FakeTensor((T, H), "f32")), "^out: dtype must be bf16"),
        (dict(handle=handle[:4]), "^handle: must be the 5-tuple"),
        (dict(handle=(handle[0], FakeTensor((E // R, R), "i32")) + handle[2:]), r"^handle\[1\] \(packed_recv_layout_range\): dtype must be i64"),
        (dict(combine_wait_recv_cost_stats=FakeTensor((R,), "i64")), "^combine_wait_recv_cost_stats: weft's EP kernels offer no"),
        (dict(zero_copy=True), "^zero_copy: weft's EP kernels offer no zero-copy combine"),
        (dict(use_logfmt=True), "^use_logfmt: weft's EP kernels offer no LogFMT"),
    ]
    for change, message in cases:
        args = dict(x=x, topk_idx=idx, topk_weights=weights, handle=handle) | change
        with pytest.raises(ValueError, match=message):
            b.low_latency_combine(**args)
    with pytest.raises(ValueError, match="^handle: weft has no zero-copy combine"):
        b.get_next_low_latency_combine_buffer(handle)
    b.clean_low_latency_buffer(32, H, E)
    with pytest.raises(ValueError, match="^num_experts: must divide evenly"):
        b.clean_low_latency_buffer(32, H, 3)


def test_event_overlap_without_event():
    with EventOverlap() as e:
        assert e.event is None
    with pytest.raises(RuntimeError, match="^current_stream_wait: no event"):
        EventOverlap().current_stream_wait()
