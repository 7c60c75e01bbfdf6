"""Weights from the backward workers to the forward workers, resharded to the forward TP.

A backward worker packs its shard into one flat tensor after each optimizer step; its forward
partner receives the ``k = backward TP / forward TP`` shards of its slice and rebuilds each
tensor-parallel weight by concatenating the shards along the weight's partition dimension
(megatron-core's ``partition_dim`` attribute: column-parallel weights and biases, vocabulary
embedding and output layer along dim 0, row-parallel weights along dim 1). Replicated tensors
(norms, row-parallel biases, position embeddings) come from the first shard only.

Concatenation is right for megatron-core's layouts with ``partition_stride == 1``: the QKV
weight is grouped by query group and TP splits whole groups, so shards in TP order are the
groups in order. Strided partitions (gated MLP ``fc1``) are refused rather than mixed up.

Each transfer carries the *version* (optimizer steps taken) beside the weights; the forward
worker checks it, and copies the weights in only once every shard arrived, so a forward pass
never sees a half-updated model.
"""

from __future__ import annotations

from typing import Iterable

import torch

__all__ = ["ShardPacker", "ShardAssembler", "partition_of"]


def partition_of(param: torch.Tensor) -> int | None:
    """The dimension a tensor-parallel weight is split along, or None when replicated."""
    if not getattr(param, "tensor_model_parallel", False):
        return None
    stride = getattr(param, "partition_stride", 1)
    if stride != 1:
        raise NotImplementedError(f"a weight split with partition_stride={stride} cannot be resharded by "
                                  "concatenation (gated MLP?); run --fbd-forward-tp equal to --tp")
    return int(getattr(param, "partition_dim", 0))


def _named(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return list(module.named_parameters())


class ShardPacker:
    """Backward side: the flat tensor of one shard (``index`` among ``k``)."""

    def __init__(self, module: torch.nn.Module, index: int, k: int):
        named = _named(module)
        self.params = [p for _, p in named if k == 1 or index == 0 or partition_of(p) is not None]
        self.numel = sum(p.numel() for p in self.params)
        dtypes = {p.dtype for p in self.params}
        if len(dtypes) > 1:
            raise ValueError(f"weights of one dtype expected, got {sorted(map(str, dtypes))}")
        self.dtype = dtypes.pop() if dtypes else torch.float32

    def pack(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """A copy of the weights, flat (into ``out`` when given)."""
        if out is None:
            out = torch.empty(self.numel, dtype=self.dtype, device=self.params[0].device)
        at = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                out[at:at + n].copy_(p.reshape(-1))
                at += n
        return out


class ShardAssembler:
    """Forward side: the sizes of the ``k`` shards to expect and how to put them together."""

    def __init__(self, module: torch.nn.Module, k: int):
        self.k = k
        self.params = _named(module)
        self.sizes = [0] * k
        self.layout: list[tuple[torch.Tensor, int | None, torch.Size]] = []
        for name, p in self.params:
            dim = partition_of(p) if k > 1 else None
            if dim is None:
                self.sizes[0] += p.numel()
                self.layout.append((p, None, p.shape))
                continue
            if p.shape[dim] % k:
                raise ValueError(f"{name}: dim {dim} of {tuple(p.shape)} does not split into {k} shards")
            shard = list(p.shape)
            shard[dim] //= k
            for i in range(k):
                self.sizes[i] += p.numel() // k
            self.layout.append((p, dim, torch.Size(shard)))
        self.dtype = self.params[0][1].dtype if self.params else torch.float32

    def assemble(self, flats: Iterable[torch.Tensor]) -> None:
        """Copy the weights of the ``k`` flat shards (in shard order) into the module."""
        flats = list(flats)
        if len(flats) != self.k or any(f.numel() != n for f, n in zip(flats, self.sizes)):
            raise ValueError(f"expected {self.k} shards of {self.sizes} elements, got "
                             f"{[f.numel() for f in flats]}")
        at = [0] * self.k
        with torch.no_grad():
            for p, dim, shard in self.layout:
                if dim is None:
                    n = p.numel()
                    p.copy_(flats[0][at[0]:at[0] + n].view(p.shape))
                    at[0] += n
                    continue
                n = shard.numel()
                pieces = [flats[i][at[i]:at[i] + n].view(shard) for i in range(self.k)]
                p.copy_(torch.cat(pieces, dim=dim))
                at = [a + n for a in at]
