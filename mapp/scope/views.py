"""Views answered from the last forward pass, without the model: attention matrices and PCA.

Plain numpy on rank 0's :class:`~mapp.scope.engine.LastPass`, so the server thread can answer
while the model works on something else.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .protocol import ProtocolError

__all__ = ["answer", "attention_view", "pca_view", "pca"]


def answer(last: Any, message: dict[str, Any]) -> dict[str, Any]:
    if last is None:
        raise ProtocolError("nothing to show yet: generate first")
    if message["type"] == "attention":
        return attention_view(last, message["layer"], message["head"], message["prompt"])
    if message["type"] == "pca":
        return pca_view(last, message["layer"])
    raise ProtocolError(f"'{message['type']}' is not a view")


def attention_view(last: Any, layer: int, head: int, prompt: int) -> dict[str, Any]:
    if layer not in last.attention:
        raise ProtocolError(f"no layer {layer}: layers are {_span(last.attention)}")
    probs = last.attention[layer]
    if prompt >= probs.shape[0]:
        raise ProtocolError(f"no prompt {prompt}: the last batch had {probs.shape[0]}")
    if head >= probs.shape[1]:
        raise ProtocolError(f"no head {head}: layer {layer} has {probs.shape[1]}")
    n = len(last.tokens[prompt])
    return {"type": "attention", "layer": layer, "head": head, "prompt": prompt,
            "tokens": last.tokens[prompt], "matrix": probs[prompt, head, :n, :n]}


def pca(points: np.ndarray, components: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """``points [n, features]`` -> (coordinates ``[n, components]``, explained variance ratio),
    by SVD of the centred points. Each axis's sign is fixed (its largest loading positive) so
    that the picture does not flip between runs."""
    centred = points - points.mean(axis=0, keepdims=True)
    u, s, vt = np.linalg.svd(centred, full_matrices=False)
    k = min(components, len(s))
    signs = np.sign(vt[np.arange(k), np.abs(vt[:k]).argmax(axis=1)])
    signs[signs == 0] = 1
    coords = (u[:, :k] * s[:k]) * signs
    total = float((s ** 2).sum())
    explained = (s[:k] ** 2) / total if total > 0 else np.zeros(k)
    if k < components:   # a single token has no second axis
        coords = np.pad(coords, ((0, 0), (0, components - k)))
        explained = np.pad(explained, (0, components - k))
    return coords, explained


def pca_view(last: Any, layer: int) -> dict[str, Any]:
    """Every token of every prompt after ``layer`` (0: embeddings), on two shared axes."""
    if layer not in last.residual:
        raise ProtocolError(f"no layer {layer}: the residual stream is kept after layers {_span(last.residual)}")
    hidden = last.residual[layer]
    lengths = [len(t) for t in last.tokens]
    stacked = np.concatenate([hidden[i, :n] for i, n in enumerate(lengths)]).astype(np.float64)
    coords, explained = pca(stacked)
    points, start = [], 0
    for n in lengths:
        points.append(coords[start: start + n].astype(np.float32))
        start += n
    return {"type": "pca", "layer": layer, "tokens": last.tokens, "points": points,
            "explained": [float(x) for x in explained]}


def _span(layers: dict) -> str:
    return f"{min(layers)}..{max(layers)}" if layers else "none"
