"""Writing MegaScope snapshots (the format is :mod:`mapp.snapshot_format`).

Rank 0 writes what the engine collected for one step: the reduced rows of every layer, the
full attention matrices and residual stream, and each activation's statistics. The tensors
go first and the index last, each through a temporary name and a rename, so a reader never
sees an index whose tensors are missing or half written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from mapp import snapshot_format as fmt

__all__ = ["write_snapshot"]


def _padded(rows: list[Any]) -> np.ndarray:
    """Per-prompt ``[tokens_i, bins]`` rows -> ``[prompts, max tokens, bins]``, NaN-padded
    (prompts differ in length; NaN cannot be mistaken for a value)."""
    arrays = [np.asarray(r, dtype=np.float32).reshape(len(r), -1) for r in rows]
    width = max(a.shape[1] for a in arrays)
    out = np.full((len(arrays), max(a.shape[0] for a in arrays), width), np.nan, dtype=np.float32)
    for i, a in enumerate(arrays):
        out[i, : a.shape[0], : a.shape[1]] = a
    return out


def write_snapshot(directory: str | Path, step: int, *, source: str, reducer: str, bins: int,
                   prompts: list[str], tokens: list[list[str]], layers: list[dict[str, Any]],
                   attention: dict[int, np.ndarray], residual: dict[int, np.ndarray],
                   stats: dict[int, dict[str, list[float]]]) -> Path:
    """Write step ``step``'s snapshot into ``directory``; returns the index's path."""
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, np.ndarray] = {}
    index: dict[str, Any] = {}
    for layer in layers:
        n = layer["layer"]
        for kind, rows in layer.items():
            if kind == "layer":
                continue
            name = f"layer{n}.{kind}"
            tensors[name] = _padded(rows)
            index[name] = {"layer": n, "kind": kind, "reduced": True,
                           "stats": dict(zip(fmt.STATS, stats.get(n, {}).get(kind, [])))}
    for kind, arrays in (("attention", attention), ("hidden", residual)):
        for n, array in arrays.items():
            name = f"layer{n}.{kind}"
            tensors[name] = np.ascontiguousarray(array, dtype=np.float32)
            index[name] = {"layer": n, "kind": kind, "reduced": False,
                           "stats": {s: float(v) for s, v in zip(fmt.STATS, _stats(tensors[name]))}}
    for name, info in index.items():
        info["shape"] = list(tensors[name].shape)
        info["dtype"] = str(tensors[name].dtype)
    tensor_path = directory / fmt.tensors_name(step)
    _atomic(tensor_path, lambda tmp: save_file(tensors, str(tmp)))
    meta = {"format": fmt.FORMAT_NAME, "version": fmt.VERSION, "step": step, "source": source,
            "reducer": reducer, "bins": bins, "prompts": prompts, "tokens": tokens, "tensors": index}
    index_path = directory / fmt.index_name(step)
    _atomic(index_path, lambda tmp: tmp.write_text(json.dumps(meta)))
    return index_path


def _stats(a: np.ndarray) -> list[float]:
    a = a[np.isfinite(a)] if a.size else a
    if a.size == 0:
        return [float("nan")] * len(fmt.STATS)
    return [float(a.mean()), float(a.std()), float(a.min()), float(a.max()), float(np.abs(a).max()),
            float(np.sqrt(np.square(a).mean())), float((a == 0).mean())]


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)
