"""Reducers that shrink a captured activation on the device, before it is copied anywhere.

A token's feature vector (a head's query, an MLP output, the residual stream) is cut into
``bins`` slices of (nearly) equal width and each slice becomes one number. The reducers are a
fixed list chosen by name (``mapp.scope.protocol.REDUCERS`` names the same ones): a client
picks one, it never sends code. Everything runs in float32 on the tensor's own device, so a
GPU job copies ``tokens x bins`` numbers to the host instead of ``tokens x features``.
"""

from __future__ import annotations

import torch

__all__ = ["REDUCERS", "reduce_bins"]


def _mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(-1)


def _absmax(x: torch.Tensor) -> torch.Tensor:
    return x.abs().amax(-1)


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x.square().mean(-1).sqrt()


def _zeros(x: torch.Tensor) -> torch.Tensor:
    # exact zeros: what a ReLU or a dead unit leaves, and what a stuck-at fault looks like
    return (x == 0).float().mean(-1)


REDUCERS = {"mean": _mean, "absmax": _absmax, "rms": _rms, "zeros": _zeros}


def reduce_bins(x: torch.Tensor, reducer: str, bins: int) -> torch.Tensor:
    """``x[..., features]`` -> ``[..., min(bins, features)]``: ``reducer`` over each slice.

    Slices are equal when ``bins`` divides ``features`` (one reshape); otherwise the first
    ``features % bins`` slices are one wider (``torch.tensor_split``'s rule)."""
    if reducer not in REDUCERS:
        raise ValueError(f"unknown reducer {reducer!r}; choose one of {', '.join(REDUCERS)}")
    if bins < 1:
        raise ValueError(f"bins must be at least 1, not {bins}")
    fn = REDUCERS[reducer]
    x = x.detach().float()
    features = x.shape[-1]
    bins = min(bins, features)
    if features % bins == 0:
        return fn(x.reshape(*x.shape[:-1], bins, features // bins))
    return torch.stack([fn(part) for part in torch.tensor_split(x, bins, dim=-1)], dim=-1)
