"""Tensors without a GPU: objects that describe device memory through DLPack or the CUDA array
interface exactly as a GPU library would, at addresses nothing dereferences (weft's Python layer
only reads the description). The DLPack structures are declared here from the DLPack header,
independently of weft's own declarations, so that a layout mistake on either side shows."""

import ctypes
import itertools
from math import prod

_addresses = itertools.count(0x7F00_0000_0000, 1 << 24)

# (DLPack type code, bits) of each weft type name.
DL_TYPES = {
    "i8": (0, 8), "i32": (0, 32), "i64": (0, 64), "u8": (1, 8), "f16": (2, 16), "f32": (2, 32),
    "bf16": (4, 16), "bool": (6, 8), "f8e4m3": (10, 8), "f8e5m2": (12, 8), "c64": (5, 64),
}
ITEM = {"i8": 1, "u8": 1, "bool": 1, "f8e4m3": 1, "f8e5m2": 1, "f16": 2, "bf16": 2, "i32": 4, "f32": 4, "i64": 8, "c64": 8}
KDL_CPU, KDL_CUDA = 1, 2


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
        ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    _fields_ = [("tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _ManagedVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("tensor", _Tensor),
    ]


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeTensor:
    """A DLPack producer (``__dlpack__``, ``__dlpack_device__``) of a CUDA tensor. ``strides`` in
    elements (``None``: contiguous, described with a null strides pointer)."""

    def __init__(self, shape, dtype="bf16", device=0, strides=None, ptr=None, device_type=KDL_CUDA, offset=0):
        self.shape, self.dtype, self.device, self.strides = tuple(shape), dtype, device, strides
        self.ptr = next(_addresses) if ptr is None else ptr
        self.device_type, self.offset = device_type, offset
        self.streams = []  # the `stream` argument of every __dlpack__ call
        self._keep = []

    @property
    def nbytes(self):
        return prod(self.shape) * ITEM[self.dtype]

    def __dlpack_device__(self):
        return (self.device_type, self.device)

    def __dlpack__(self, stream=None, max_version=None):
        self.streams.append(stream)
        return self.capsule(versioned=max_version is not None and max_version >= (1, 0))

    def capsule(self, versioned=True):
        n = len(self.shape)
        shape = (ctypes.c_int64 * n)(*self.shape)
        strides = None if self.strides is None else (ctypes.c_int64 * n)(*self.strides)
        code, bits = DL_TYPES[self.dtype]
        tensor = _Tensor(
            self.ptr - self.offset, self.device_type, self.device, n, code, bits, 1,
            ctypes.addressof(shape), None if strides is None else ctypes.addressof(strides), self.offset,
        )
        managed = _ManagedVersioned(1, 0, None, None, 0, tensor) if versioned else _Managed(tensor, None, None)
        self._keep += [shape, strides, managed]
        name = b"dltensor_versioned" if versioned else b"dltensor"
        return _new_capsule(ctypes.addressof(managed), name, None)

    def row(self, i):
        """Row ``i`` of a 2-D tensor, as a contiguous tensor of its own."""
        return FakeTensor(self.shape[1:], self.dtype, self.device, ptr=self.ptr + i * self.nbytes // self.shape[0])


class FakeArray:
    """An object with ``__cuda_array_interface__`` (version 3). ``strides`` in bytes."""

    def __init__(self, shape, typestr="<f4", strides=None, ptr=None, stream=None, mask=None):
        self.ptr = next(_addresses) if ptr is None else ptr
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "data": (self.ptr, False), "version": 3,
            "strides": strides, "stream": stream, "mask": mask,
        }


class FakeGroup:
    """What weft.ep.Buffer reads of a torch.distributed process group."""

    def __init__(self, rank=0, size=2):
        self._rank, self._size = rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size
