"""The tensor boundary: what weft reads of a tensor (address, shape, element type, device,
layout) from a torch.Tensor, a DLPack capsule or an object with ``__dlpack__``, or an object with
``__cuda_array_interface__``, and the checks every call makes on it. Nothing is copied and
torch is never imported here: a torch tensor is recognised only when the caller already
imported torch.

Element types carry weft's names (``bf16``, ``f8e4m3``, ...; see ``weft._weft``), plus ``bool``
and ``i16``/``u16`` for tensors weft reads but does not reduce.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass, field, replace
from math import prod

# DLPack's DLDeviceType for CUDA memory (kDLCUDA) and the DLDataType codes weft reads.
_DL_CUDA = 2
_DL_DTYPES = {
    (0, 8): "i8", (0, 16): "i16", (0, 32): "i32", (0, 64): "i64",
    (1, 8): "u8", (1, 16): "u16", (1, 32): "u32", (1, 64): "u64",
    (2, 16): "f16", (2, 32): "f32", (2, 64): "f64",
    (4, 16): "bf16", (6, 8): "bool",
    (10, 8): "f8e4m3",  # kDLFloat8_e4m3fn
    (12, 8): "f8e5m2",  # kDLFloat8_e5m2
}
# __cuda_array_interface__ type strings (numpy's); bf16 and fp8 have none there.
_CAI_DTYPES = {
    "|i1": "i8", "<i2": "i16", "<i4": "i32", "<i8": "i64",
    "|u1": "u8", "<u2": "u16", "<u4": "u32", "<u8": "u64",
    "<f2": "f16", "<f4": "f32", "<f8": "f64", "|b1": "bool",
}
TORCH_DTYPES = {
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "f16", "float32": "f32", "float64": "f64", "bfloat16": "bf16", "bool": "bool",
    "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2",
}
ITEM_SIZE = {
    "i8": 1, "u8": 1, "bool": 1, "f8e4m3": 1, "f8e5m2": 1,
    "i16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "i32": 4, "u32": 4, "f32": 4,
    "i64": 8, "u64": 8, "f64": 8,
}


@dataclass(frozen=True)
class TensorView:
    """What weft reads of a tensor. ``device`` is the CUDA ordinal, ``None`` for memory that is
    not CUDA memory (``host``) or whose device the producer does not say (``cuda array
    interface``: weft then checks the address itself). ``strides`` are in elements, ``None``
    when the producer states the tensor is C-contiguous."""

    name: str
    ptr: int
    shape: tuple[int, ...]
    dtype: str
    device: int | None
    on_cuda: bool
    strides: tuple[int, ...] | None
    source: str
    # The object read (callers that return or keep a tensor alive hand it on).
    obj: object = field(default=None, compare=False, repr=False)

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * ITEM_SIZE[self.dtype]

    @property
    def contiguous(self) -> bool:
        if self.strides is None:
            return True
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


def view(obj, name: str, stream: int | None = None) -> TensorView:
    """Reads ``obj`` (argument ``name`` of the call) without copying it. ``stream`` is the CUDA
    stream handle the call runs on: a DLPack producer is asked to order its work before it, and
    a CUDA-array-interface object ready on another stream is refused (weft does not add the wait
    for it). Raises ``ValueError`` naming ``name`` for anything that is not a tensor weft can
    read."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(obj, name)
    if hasattr(obj, "__dlpack__") or _is_capsule(obj):
        return replace(_from_dlpack(obj, name, stream), obj=obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return replace(_from_cai(obj, name, stream), obj=obj)
    raise ValueError(
        f"{name}: expected a torch.Tensor, a DLPack capsule or object with __dlpack__, or an object with "
        f"__cuda_array_interface__, got {type(obj).__name__}"
    )


def check(
    v: TensorView,
    *,
    device: int | None = None,
    dtypes: tuple[str, ...] | None = None,
    shape: tuple[int | None, ...] | None = None,
    ndim: int | None = None,
) -> TensorView:
    """Checks ``v`` is contiguous CUDA memory (of ``device`` when the producer says which), of
    one of ``dtypes`` and of ``shape`` (``None`` entries match any size) or ``ndim`` dimensions;
    raises ``ValueError`` naming the argument."""
    if not v.on_cuda:
        raise ValueError(f"{v.name}: must be CUDA device memory, got {v.source}")
    if device is not None and v.device is not None and v.device != device:
        raise ValueError(f"{v.name}: must be on cuda:{device}, got cuda:{v.device}")
    if not v.contiguous:
        raise ValueError(f"{v.name}: must be contiguous (shape {list(v.shape)}, strides {list(v.strides or ())})")
    if dtypes is not None and v.dtype not in dtypes:
        raise ValueError(f"{v.name}: dtype must be {' or '.join(dtypes)}, got {v.dtype}")
    if ndim is not None and len(v.shape) != ndim:
        raise ValueError(f"{v.name}: must have {ndim} dimensions, got shape {list(v.shape)}")
    if shape is not None:
        wanted = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        if len(v.shape) != len(shape) or any(w is not None and w != s for w, s in zip(shape, v.shape)):
            raise ValueError(f"{v.name}: shape must be {wanted}, got {list(v.shape)}")
    return v


def _from_torch(t, name: str) -> TensorView:
    dtype = TORCH_DTYPES.get(str(t.dtype).removeprefix("torch."))
    if dtype is None:
        raise ValueError(f"{name}: weft has no element type for {t.dtype}")
    if str(t.layout) != "torch.strided":
        raise ValueError(f"{name}: must be a dense (strided) tensor, got layout {t.layout}")
    on_cuda = t.device.type == "cuda"
    return TensorView(
        name=name,
        ptr=t.data_ptr(),
        shape=tuple(t.shape),
        dtype=dtype,
        device=t.device.index if on_cuda else None,
        on_cuda=on_cuda,
        strides=tuple(t.stride()),
        source=f"a torch tensor on {t.device}",
        obj=t,
    )


def _from_cai(obj, name: str, stream: int | None) -> TensorView:
    cai = obj.__cuda_array_interface__
    try:
        shape = tuple(int(s) for s in cai["shape"])
        typestr = cai["typestr"]
        ptr = int(cai["data"][0])
    except (KeyError, TypeError, IndexError) as e:
        raise ValueError(f"{name}: malformed __cuda_array_interface__ ({e!r})") from None
    dtype = _CAI_DTYPES.get(typestr)
    if dtype is None:
        raise ValueError(
            f"{name}: weft has no element type for __cuda_array_interface__ typestr {typestr!r} "
            "(bf16 and fp8 tensors cross as torch tensors or by DLPack)"
        )
    if cai.get("mask") is not None:
        raise ValueError(f"{name}: masked arrays are not supported")
    producer = cai.get("stream")
    if producer is not None and stream is not None and _stream_id(producer) != _stream_id(stream):
        raise ValueError(
            f"{name}: is ready on CUDA stream {producer:#x}, but the call runs on stream {stream:#x}: pass "
            f"stream={producer:#x} or synchronise the streams first"
        )
    strides = cai.get("strides")
    if strides is not None:
        size = ITEM_SIZE[dtype]
        if any(s % size for s in strides):
            raise ValueError(f"{name}: strides {list(strides)} are not whole elements")
        strides = tuple(s // size for s in strides)
    return TensorView(name, ptr, shape, dtype, None, True, strides, "a CUDA array interface object")


def _stream_id(handle: int) -> int:
    # The legacy default stream is 0 as a handle and 1 in the CUDA array interface.
    return 0 if handle == 1 else handle


# --- DLPack -----------------------------------------------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    """A capsule named ``dltensor`` (DLPack before 1.0)."""

    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class DLManagedTensorVersioned(ctypes.Structure):
    """A capsule named ``dltensor_versioned`` (DLPack 1.x)."""

    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


def _is_capsule(obj) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _from_dlpack(obj, name: str, stream: int | None) -> TensorView:
    if _is_capsule(obj):
        capsule = obj
    else:
        device_type = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else _DL_CUDA
        # The producer orders its pending work before `stream` (DLPack: 1 is the legacy default).
        kwargs = {"stream": None if stream is None or device_type != _DL_CUDA else (stream or 1)}
        try:
            capsule = obj.__dlpack__(max_version=(1, 0), **kwargs)
        except TypeError:
            capsule = obj.__dlpack__(**kwargs)
    label = _capsule_name(capsule)
    if label == b"dltensor_versioned":
        managed = DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, label))
        if managed.version.major != 1:
            raise ValueError(f"{name}: DLPack version {managed.version.major} is not supported (1.x is)")
    elif label == b"dltensor":
        managed = DLManagedTensor.from_address(_capsule_pointer(capsule, label))
    else:
        raise ValueError(f"{name}: not an unconsumed DLPack capsule (its name is {label!r})")
    t = managed.dl_tensor
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    dtype = _DL_DTYPES.get((code, bits)) if lanes == 1 else None
    if dtype is None:
        raise ValueError(f"{name}: weft has no element type for DLPack dtype (code {code}, bits {bits}, lanes {lanes})")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    on_cuda = t.device.device_type == _DL_CUDA
    return TensorView(
        name=name,
        ptr=(t.data or 0) + t.byte_offset,
        shape=shape,
        dtype=dtype,
        device=t.device.device_id if on_cuda else None,
        on_cuda=on_cuda,
        strides=strides,
        source=f"a DLPack tensor on device type {t.device.device_type}",
    )
