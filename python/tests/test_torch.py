"""torch tensors at the boundary, where torch is installed (the GPU machines; CI has no torch)."""

import pytest

torch = pytest.importorskip("torch")

from weft._tensor import check, view  # noqa: E402


def test_host_tensor_is_read_and_refused():
    t = torch.zeros(4, 6, dtype=torch.bfloat16)
    v = view(t, "x")
    assert (v.ptr, v.shape, v.dtype, v.on_cuda, v.contiguous) == (t.data_ptr(), (4, 6), "bf16", False, True)
    with pytest.raises(ValueError, match="^x: must be CUDA device memory, got a torch tensor on cpu"):
        check(v)


def test_layouts():
    assert not view(torch.zeros(4, 6).t(), "x").contiguous
    assert not view(torch.zeros(1, 6).expand(4, 6), "x").contiguous
    with pytest.raises(ValueError, match="^x: must be a dense"):
        view(torch.zeros(4, 4).to_sparse(), "x")
    with pytest.raises(ValueError, match="^x: weft has no element type for torch.complex64"):
        view(torch.zeros(2, dtype=torch.complex64), "x")


@pytest.mark.parametrize(
    "dtype,name",
    [(torch.float8_e4m3fn, "f8e4m3"), (torch.float8_e5m2, "f8e5m2"), (torch.int64, "i64"), (torch.bool, "bool")],
)
def test_types(dtype, name):
    assert view(torch.zeros(2, dtype=dtype), "x").dtype == name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_tensor_and_its_dlpack():
    t = torch.zeros(3, 5, dtype=torch.bfloat16, device="cuda")
    for obj in (t, torch.utils.dlpack.to_dlpack(t)):
        v = check(view(obj, "x", stream=0), device=t.device.index)
        assert (v.ptr, v.shape, v.dtype, v.device) == (t.data_ptr(), (3, 5), "bf16", t.device.index)
