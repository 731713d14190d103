"""The tensor boundary (weft._tensor): every producer kind read without a GPU, and every
refusal a ValueError naming the argument."""

import pytest
from fakes import KDL_CPU, FakeArray, FakeTensor

from weft._tensor import check, view


class LegacyProducer(FakeTensor):
    """A DLPack producer from before DLPack 1.0: no max_version, unversioned capsules."""

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self.capsule(versioned=False)


@pytest.mark.parametrize("kind", [FakeTensor, LegacyProducer])
def test_dlpack_producer_is_read_without_copy(kind):
    t = kind((4, 8), "bf16", device=1)
    v = view(t, "x", stream=0x1234)
    assert (v.ptr, v.shape, v.dtype, v.device, v.on_cuda, v.strides) == (t.ptr, (4, 8), "bf16", 1, True, None)
    assert (v.numel, v.nbytes, v.contiguous) == (32, 64, True)
    # The producer is asked to order its work before the call's stream.
    assert t.streams == [0x1234]


def test_dlpack_legacy_default_stream_is_1():
    t = FakeTensor((2,), "f32")
    view(t, "x", stream=0)
    assert t.streams == [1]


def test_dlpack_capsule_and_byte_offset():
    t = FakeTensor((3, 5), "f8e4m3", offset=256)
    v = view(t.capsule(versioned=False), "x")
    assert (v.ptr, v.shape, v.dtype) == (t.ptr, (3, 5), "f8e4m3")


@pytest.mark.parametrize("dtype", ["i8", "u8", "i32", "i64", "f16", "f32", "bf16", "bool", "f8e4m3", "f8e5m2"])
def test_dlpack_types(dtype):
    assert view(FakeTensor((1,), dtype), "x").dtype == dtype


def test_dlpack_unknown_type_names_the_argument():
    with pytest.raises(ValueError, match=r"^topk: weft has no element type for DLPack dtype \(code 5"):
        view(FakeTensor((2,), "c64"), "topk")


def test_strides_decide_contiguity():
    assert view(FakeTensor((4, 8), strides=(8, 1)), "x").contiguous
    assert view(FakeTensor((4, 1), strides=(1, 7)), "x").contiguous  # size-1 dims do not count
    transposed = view(FakeTensor((4, 8), strides=(1, 4)), "x")
    assert not transposed.contiguous
    with pytest.raises(ValueError, match=r"^x: must be contiguous \(shape \[4, 8\], strides \[1, 4\]\)"):
        check(transposed)


def test_host_memory_is_refused():
    v = view(FakeTensor((4,), device_type=KDL_CPU), "recv")
    assert not v.on_cuda
    with pytest.raises(ValueError, match="^recv: must be CUDA device memory"):
        check(v)


def test_numpy_array_as_a_real_dlpack_producer():
    np = pytest.importorskip("numpy")
    a = np.zeros((6, 4), dtype=np.float32).T  # a transposed view: strides (1, 4) elements
    v = view(a, "a")
    assert (v.ptr, v.shape, v.strides, v.dtype, v.on_cuda) == (a.ctypes.data, (4, 6), (1, 4), "f32", False)
    with pytest.raises(ValueError, match="^a: must be CUDA device memory"):
        check(v)


def test_cuda_array_interface():
    a = FakeArray((3, 4), "<f2")
    v = view(a, "x", stream=0)
    assert (v.ptr, v.shape, v.dtype, v.device, v.on_cuda, v.contiguous) == (a.ptr, (3, 4), "f16", None, True, True)
    strided = view(FakeArray((3, 4), "<i4", strides=(32, 4)), "x")
    assert (strided.strides, strided.contiguous) == ((8, 1), False)


def test_cuda_array_interface_refusals():
    with pytest.raises(ValueError, match="^x: weft has no element type for __cuda_array_interface__ typestr '<c8'"):
        view(FakeArray((3,), "<c8"), "x")
    with pytest.raises(ValueError, match="^x: strides \\[3\\] are not whole elements"):
        view(FakeArray((3,), "<f4", strides=(3,)), "x")
    with pytest.raises(ValueError, match="^x: masked arrays"):
        view(FakeArray((3,), mask=object()), "x")
    with pytest.raises(ValueError, match="^x: is ready on CUDA stream 0x10, but the call runs on stream 0x20"):
        view(FakeArray((3,), stream=0x10), "x", stream=0x20)
    # The interface's 1 is the legacy default stream, handle 0.
    view(FakeArray((3,), stream=1), "x", stream=0)


def test_not_a_tensor():
    with pytest.raises(ValueError, match="^tensor: expected a torch.Tensor, a DLPack capsule"):
        view([1, 2, 3], "tensor")


def test_check_names_the_argument():
    v = view(FakeTensor((4, 8), "f16", device=1), "out")
    check(v, device=1, dtypes=("f16",), shape=(4, None))
    with pytest.raises(ValueError, match="^out: must be on cuda:0, got cuda:1"):
        check(v, device=0)
    with pytest.raises(ValueError, match="^out: dtype must be bf16 or f32, got f16"):
        check(v, dtypes=("bf16", "f32"))
    with pytest.raises(ValueError, match=r"^out: shape must be \[\*, 7\], got \[4, 8\]"):
        check(v, shape=(None, 7))
    with pytest.raises(ValueError, match="^out: must have 3 dimensions"):
        check(v, ndim=3)
