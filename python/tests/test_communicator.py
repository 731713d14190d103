"""weft.Communicator without a GPU: what each collective hands the native module (recorded by a
double of the bindings), the argument refusals, and the native module's own errors."""

import pytest
from fakes import FakeArray, FakeTensor

import weft
import weft._weft as native
from weft.communicator import op_name


class Native:
    """What weft.Communicator reads of a native communicator."""

    def __init__(self, rank=0, world_size=2, device=0):
        self.rank, self.world_size, self.device = rank, world_size, device


class Recorder:
    """The bindings' double: records each call as (function, arguments)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda comm, *args: self.calls.append((name, args))


@pytest.fixture
def comm():
    return weft.Communicator(Native(), Recorder())


def calls(comm):
    return comm._bind.calls


def test_all_reduce_in_place_and_out_of_place(comm):
    t, out = FakeTensor((4, 8), "bf16"), FakeTensor((32,), "bf16")
    comm.all_reduce(t)
    comm.all_reduce(t, weft.ReduceOp.MAX, out=out, stream=0x77)
    assert calls(comm) == [
        ("all_reduce", (t.ptr, t.ptr, 32, "bf16", "sum", 0)),
        ("all_reduce", (t.ptr, out.ptr, 32, "bf16", "max", 0x77)),
    ]


def test_all_reduce_refusals(comm):
    t = FakeTensor((4, 8), "bf16")
    with pytest.raises(ValueError, match="^out: dtype must be bf16, got f32"):
        comm.all_reduce(t, out=FakeTensor((32,), "f32"))
    with pytest.raises(ValueError, match=r"^out: must hold 32 elements, got shape \[31\]"):
        comm.all_reduce(t, out=FakeTensor((31,), "bf16"))
    with pytest.raises(ValueError, match="^tensor: must be on cuda:0, got cuda:1"):
        comm.all_reduce(FakeTensor((4,), "f32", device=1))
    with pytest.raises(ValueError, match="^tensor: must be contiguous"):
        comm.all_reduce(FakeTensor((4, 8), "f32", strides=(1, 4)))
    with pytest.raises(ValueError, match="^tensor: dtype must be"):
        comm.all_reduce(FakeTensor((4,), "bool"))
    with pytest.raises(ValueError, match="^op: weft reduces with"):
        comm.all_reduce(t, "xor")
    assert calls(comm) == []


def test_op_names_of_torch_distributed():
    class RedOpType:
        def __init__(self, name):
            self.name = name

    assert [op_name(RedOpType(n)) for n in ("SUM", "PRODUCT", "MIN", "MAX", "AVG")] == ["sum", "prod", "min", "max", "avg"]
    assert op_name("ReduceOp.SUM") == "sum"


def test_all_gather_into_tensor_and_reduce_scatter_tensor(comm):
    small, big = FakeTensor((3,), "f32"), FakeTensor((2, 3), "f32")
    comm.all_gather_into_tensor(big, small)
    comm.reduce_scatter_tensor(small, big, "avg")
    assert calls(comm) == [
        ("all_gather", (small.ptr, big.ptr, 3, "f32", 0)),
        ("reduce_scatter", (big.ptr, small.ptr, 3, "f32", "avg", 0)),
    ]
    with pytest.raises(ValueError, match="^output_tensor: must hold 6 elements"):
        comm.all_gather_into_tensor(FakeTensor((5,), "f32"), small)
    with pytest.raises(ValueError, match="^input: must hold 6 elements"):
        comm.reduce_scatter_tensor(small, FakeTensor((7,), "f32"))


def test_all_gather_list(comm):
    t, whole = FakeTensor((3,), "f32"), FakeTensor((2, 3), "f32")
    comm.all_gather([whole.row(0), whole.row(1)], t)
    a, b = FakeTensor((3,), "f32"), FakeTensor((3,), "f32")
    comm.all_gather([a, b], t)
    assert calls(comm) == [
        ("all_gather", (t.ptr, whole.ptr, 3, "f32", 0)),
        ("send_recv", ([(True, 0, t.ptr, 3, "f32"), (True, 1, t.ptr, 3, "f32"),
                        (False, 0, a.ptr, 3, "f32"), (False, 1, b.ptr, 3, "f32")], 0)),
    ]
    with pytest.raises(ValueError, match=r"^tensor_list: must hold one tensor per rank \(2\), got 1"):
        comm.all_gather([a], t)
    with pytest.raises(ValueError, match=r"^tensor_list\[1\]: dtype must be f32"):
        comm.all_gather([a, FakeTensor((3,), "f16")], t)


def test_reduce_scatter_list_needs_back_to_back_tensors(comm):
    out, whole = FakeTensor((3,), "f32"), FakeTensor((2, 3), "f32")
    comm.reduce_scatter(out, [whole.row(0), whole.row(1)])
    assert calls(comm) == [("reduce_scatter", (whole.ptr, out.ptr, 3, "f32", "sum", 0))]
    with pytest.raises(ValueError, match="^input_list: its tensors must lie back to back"):
        comm.reduce_scatter(out, [FakeTensor((3,), "f32"), FakeTensor((3,), "f32")])


def test_rooted(comm):
    t = FakeTensor((5,), "i32")
    comm.broadcast(t, src=1)
    comm.reduce(t, dst=0, op="min")
    assert calls(comm) == [
        ("broadcast", (t.ptr, t.ptr, 5, "i32", 1, 0)),
        ("reduce", (t.ptr, t.ptr, 5, "i32", "min", 0, 0)),
    ]
    with pytest.raises(ValueError, match=r"^src: must be a rank of the communicator \(0..1\), got 2"):
        comm.broadcast(t, src=2)


def test_all_to_all_single(comm):
    src, dst = FakeTensor((4, 3), "bf16"), FakeTensor((4, 3), "bf16")
    comm.all_to_all_single(dst, src)
    comm.all_to_all_single(src, src)  # in place
    comm.all_to_all_single(FakeTensor((5, 3), "bf16", ptr=dst.ptr), src, [2, 3], [1, 3])
    assert calls(comm) == [
        ("all_to_all", (src.ptr, dst.ptr, 6, "bf16", 0)),
        ("all_to_all", (src.ptr, src.ptr, 6, "bf16", 0)),
        ("all_to_allv", (src.ptr, [3, 9], [0, 3], dst.ptr, [6, 9], [0, 6], "bf16", 0)),
    ]
    with pytest.raises(ValueError, match=r"^input_split_sizes: must be 2 sizes, none negative, summing to 4"):
        comm.all_to_all_single(dst, src, [2, 2], [1, 2])
    with pytest.raises(ValueError, match=r"^input: without split sizes the first dimension \(3\) must divide by 2"):
        comm.all_to_all_single(dst, FakeTensor((3, 3), "bf16"))


def test_point_to_point(comm):
    a, b = FakeTensor((8,), "u8"), FakeTensor((8,), "u8")
    comm.send(a, 1)
    comm.recv(b, 1)
    comm.batch_isend_irecv([weft.P2POp(comm.send, a, 1), weft.P2POp("irecv", b, 0)], stream=FakeStream(9))
    assert calls(comm) == [
        ("send_recv", ([(True, 1, a.ptr, 8, "u8")], 0)),
        ("send_recv", ([(False, 1, b.ptr, 8, "u8")], 0)),
        ("send_recv", ([(True, 1, a.ptr, 8, "u8"), (False, 0, b.ptr, 8, "u8")], 9)),
    ]
    with pytest.raises(ValueError, match=r"^p2p_op_list\[0\].op: must be 'send' or 'recv'"):
        comm.batch_isend_irecv([weft.P2POp("put", a, 1)])
    with pytest.raises(ValueError, match=r"^dst: must be a rank"):
        comm.send(a, -1)


class FakeStream:
    def __init__(self, handle):
        self.cuda_stream = handle


def test_cuda_array_interface_objects_work_without_torch(comm):
    a = FakeArray((16,), "<f4", stream=1)
    comm.all_reduce(a)
    assert calls(comm) == [("all_reduce", (a.ptr, a.ptr, 16, "f32", "sum", 0))]
    with pytest.raises(ValueError, match="^tensor: is ready on CUDA stream"):
        comm.all_reduce(a, stream=5)


def test_prepare(comm):
    comm.prepare("bf16")
    with pytest.raises(ValueError, match="^dtype: weft's collectives take"):
        comm.prepare("bool")
    assert calls(comm) == [("prepare", ("bf16", "sum"))]


def test_windows(comm):
    t = FakeTensor((64,), "bf16")
    w = comm.register_window(t)
    assert (w.tensor, w.ptr, w.nbytes) == (t, t.ptr, 128)
    assert comm._windows == [w]  # the communicator keeps the tensor alive while registered
    comm.deregister_window(w)
    assert calls(comm) == [("register_window", (t.ptr, 128)), ("deregister_window", (None,))]
    assert comm._windows == []
    with pytest.raises(ValueError, match="^window: not a registered window of this communicator"):
        comm.deregister_window(w)
    with pytest.raises(ValueError, match="^tensor: must be on cuda:0, got cuda:1"):
        comm.register_window(FakeTensor((4,), "f32", device=1))
    with pytest.raises(ValueError, match="^tensor: a window needs at least one byte"):
        comm.register_window(FakeTensor((0,), "f32"))
    with pytest.raises(ValueError, match="^tensor: must be contiguous"):
        comm.register_window(FakeTensor((4, 8), "f32", strides=(1, 4)))


def test_stream_refusal(comm):
    with pytest.raises(ValueError, match="^stream: expected a CUDA stream"):
        comm.all_reduce(FakeTensor((1,), "f32"), stream="default")


# --- the native module --------------------------------------------------------------------


def test_error_classes():
    assert issubclass(weft.WeftError, RuntimeError)
    assert issubclass(weft.InvalidArgumentError, weft.WeftError)
    assert issubclass(weft.InvalidArgumentError, ValueError)
    assert weft.WeftError.__module__ == "weft._weft"


def test_window_bindings_exist():
    assert callable(native.register_window) and callable(native.deregister_window)
    assert native.Window.__module__ == "weft._weft"


def test_unique_id():
    a, b = native.unique_id("127.0.0.1"), native.unique_id("127.0.0.1")
    assert len(a) == len(b) == 128 and a != b
    with pytest.raises(ValueError, match="^host \"nowhere\""):
        native.unique_id("nowhere")


def test_communicator_errors_carry_weft_messages():
    with pytest.raises(ValueError, match="^id: "):
        native.Communicator.from_unique_id(b"short", 0, 1, 0)
    try:
        c = native.Communicator.from_unique_id(native.unique_id("127.0.0.1"), 0, 1, 0)
    except weft.WeftError as e:
        # No GPU here: weft's own message (for example that libcuda could not be loaded).
        assert str(e)
    else:  # a GPU machine: a one-rank communicator
        assert (c.rank, c.world_size, c.device) == (0, 1, 0)


class DictStore:
    """torch's store interface (set, blocking get) over a dict, shared by the fake ranks."""

    def __init__(self):
        self.values = {}

    def set(self, key, value):
        self.values[key] = value

    def get(self, key):
        if key not in self.values:
            raise KeyError(f"{key} was never set (a real store would block and time out)")
        return self.values[key]


def test_torchrun_ranks_trade_rank_zeros_id_per_call():
    from weft.communicator import trade_unique_id

    store = DictStore()
    made = iter([b"first-id", b"second-id"])
    first = trade_unique_id(store, 0, lambda: next(made))
    # Rank 1's process reads the same key: reset the per-process call counter as a new process.
    import weft.communicator as module

    calls = module._trades
    module._trades = calls - 1
    assert trade_unique_id(store, 1, lambda: pytest.fail("only rank 0 makes the id")) == first == b"first-id"
    second = trade_unique_id(store, 0, lambda: next(made))
    assert second == b"second-id" and len(store.values) == 2
