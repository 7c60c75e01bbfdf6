"""The self-describing header every message carries: the receiver learns dtype, shape and
device from it, never in advance (pipeline schedules send variable sequence lengths).

A header is ``HEADER_LEN`` int64 words: kind, tag, dtype code, device kind, byte count,
ndim, then the shape padded with zeros. Both backends send the same words: torch.distributed
as an int64 tensor ahead of the payload, the shared-memory rings in each descriptor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mapp.errors import TransportError

__all__ = ["HEADER_LEN", "MAX_NDIM", "DATA", "CLOSE", "CPU", "CUDA", "USER", "INTERNAL", "Header", "close_header", "dtype_code", "as_bytes", "from_bytes"]

MAX_NDIM = 10
HEADER_LEN = 6 + MAX_NDIM

# kinds
DATA = 0
CLOSE = 1  # the sender closed its transport: nothing more will come from it

# device kinds
CPU = 0
CUDA = 1

# channels of the shared-memory rings: the user's tags, and the transport's own messages
# (CUDA IPC set-up)
USER = 0
INTERNAL = 1

# Codes are positions in this list: append only, never reorder (both ends must agree, also
# across torch versions; names a torch lacks keep their place).
_DTYPE_NAMES = (
    "float32", "float64", "float16", "bfloat16", "uint8", "int8", "int16", "int32", "int64",
    "bool", "complex64", "complex128", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
    "complex32",
)
_DTYPES = tuple(getattr(torch, name, None) for name in _DTYPE_NAMES)
_CODES = {dtype: code for code, dtype in enumerate(_DTYPES) if dtype is not None}


def dtype_code(dtype: torch.dtype) -> int:
    try:
        return _CODES[dtype]
    except KeyError:
        raise TransportError(f"cannot send tensors of dtype {dtype}", "convert it to one of: " + ", ".join(n for n, d in zip(_DTYPE_NAMES, _DTYPES) if d is not None)) from None


@dataclass(frozen=True, slots=True)
class Header:
    """What a message is: its tag and the tensor it carries."""

    tag: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    device: int = CPU
    kind: int = DATA

    @classmethod
    def of(cls, tensor: torch.Tensor, tag: int) -> Header:
        if tensor.dim() > MAX_NDIM:
            raise TransportError(f"cannot send a tensor of {tensor.dim()} dimensions (at most {MAX_NDIM})", "reshape it before sending")
        if not -(2**63) <= tag < 2**63:
            raise TransportError(f"tag {tag} does not fit in int64")
        return cls(int(tag), tensor.dtype, tuple(tensor.shape), CUDA if tensor.is_cuda else CPU)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _element_size(self.dtype)

    def words(self) -> list[int]:
        shape = list(self.shape) + [0] * (MAX_NDIM - len(self.shape))
        code = dtype_code(self.dtype) if self.kind == DATA else 0
        return [self.kind, self.tag, code, self.device, self.nbytes if self.kind == DATA else 0, len(self.shape), *shape]

    @classmethod
    def from_words(cls, words: list[int]) -> Header:
        kind, tag, code, device, _nbytes, ndim = words[:6]
        if kind == CLOSE:
            return cls(tag, torch.uint8, (), CPU, CLOSE)
        if not (0 <= code < len(_DTYPES)) or _DTYPES[code] is None or not 0 <= ndim <= MAX_NDIM:
            raise TransportError(f"received a malformed message header {words[:6]}", "both ends must run the same mapp version")
        return cls(tag, _DTYPES[code], tuple(words[6 : 6 + ndim]), device, kind)


def close_header() -> Header:
    return Header(0, torch.uint8, (), CPU, CLOSE)


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's memory as a flat uint8 tensor (a view when it is contiguous)."""
    flat = tensor.contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8, device=tensor.device)


def from_bytes(data: torch.Tensor, header: Header) -> torch.Tensor:
    """The tensor ``header`` describes, over the uint8 ``data`` (a view, no copy)."""
    if header.nbytes == 0:
        return torch.empty(header.shape, dtype=header.dtype, device=data.device)
    return data.view(header.dtype).reshape(header.shape)
