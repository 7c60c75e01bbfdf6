"""The messages a test rank sends: mixed dtypes and shapes, reproducible from (src, dst)."""

from __future__ import annotations

import hashlib
import random

import torch

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64, torch.int8)


def messages(src: int, dst: int, count: int, big: int = 0) -> list[tuple[int, torch.Tensor]]:
    """``count`` (tag, tensor) pairs from ``src`` to ``dst``; every 8th one has ``big``
    float32 elements when ``big`` is set. Tags are unique per pair, with a few repeated ones
    (they must arrive in send order)."""
    rng = random.Random(src * 7919 + dst)
    gen = torch.Generator().manual_seed(src * 104729 + dst)
    out = []
    for i in range(count):
        dtype = DTYPES[i % len(DTYPES)]
        shape = (big,) if big and i % 8 == 3 else tuple(rng.randint(0, 6) if rng.random() < 0.1 else rng.randint(1, 24) for _ in range(rng.randint(0, 3)))
        tag = 1000 * src + (i if i % 10 else 5)  # tag 1000*src + 5 repeats: FIFO among equals
        out.append((tag, _tensor(shape, dtype, gen)))
    return out


def _tensor(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=dtype if dtype != torch.bfloat16 else torch.float32).to(dtype)
    return torch.randint(0, 100, shape, generator=gen, dtype=dtype)


def expected_digest(rank: int, world: int, count: int, big: int = 0) -> str:
    """What ``rank`` receives from all others, in (src, tag, send order) order."""
    received = [(src, tag, i, tensor) for src in range(world) if src != rank for i, (tag, tensor) in enumerate(messages(src, rank, count, big))]
    return digest([tensor for *_, tensor in sorted(received, key=lambda r: r[:3])])


def digest(tensors: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(f"{t.dtype}{tuple(t.shape)}{t.device.type}".encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and got.device == want.device and torch.equal(got, want)
