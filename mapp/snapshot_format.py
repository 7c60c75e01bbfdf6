"""MegaScope snapshots on disk: the contract between capture and offline reading.

A snapshot is two files per step in one directory (``--scope-dir``):

- ``step-00000120.safetensors``: the tensors, named ``layer<N>.<kind>`` (``N`` the layer
  number, 0 for the embeddings): the reduced rows of each kind (``q``, ``k``, ``v``,
  ``fc1``, ``fc2``, ``residual``; ``[prompts, tokens, bins]``), and the full ``attention``
  (``[prompts, heads, tokens, tokens]``) and ``hidden`` (residual stream, ``[prompts,
  tokens, hidden]``) of each layer;
- ``step-00000120.json``: the index. ``{"format": "mapp-scope-snapshot", "version": 1,
  "step", "source", "reducer", "bins", "prompts", "tokens", "tensors": {name: {"layer",
  "kind", "shape", "dtype", "stats": {"mean", "std", "min", "max", "absmax", "rms",
  "zeros"}}}}``; the statistics are of the full activation before reduction, computed on
  the device (``zeros``: the fraction of exact zeros).

Readable without torch: :func:`read_snapshot` (numpy, through ``safetensors.numpy``) and
:func:`snapshot_stats` (the rows of ``mapp sql``'s ``snapshots`` table). The index file is
written last, so a step whose index exists is complete.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

__all__ = ["FORMAT_NAME", "VERSION", "STATS", "index_name", "tensors_name", "Snapshot", "read_snapshot",
           "find_snapshots", "snapshot_stats"]

FORMAT_NAME = "mapp-scope-snapshot"
VERSION = 1
STATS = ("mean", "std", "min", "max", "absmax", "rms", "zeros")


def index_name(step: int) -> str:
    return f"step-{step:08d}.json"


def tensors_name(step: int) -> str:
    return f"step-{step:08d}.safetensors"


@dataclass
class Snapshot:
    """One step: the index (``meta``) and, when read with ``tensors=True``, the arrays."""

    path: Path
    meta: dict[str, Any]
    tensors: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.meta["step"])

    def get(self, layer: int, kind: str):
        """The array of ``kind`` at ``layer`` (``KeyError`` if the snapshot has none)."""
        return self.tensors[f"layer{layer}.{kind}"]


def _is_index(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == FORMAT_NAME else None


def read_snapshot(path: str | Path, *, tensors: bool = True) -> Snapshot:
    """Read one snapshot from its index (``step-*.json``) or its ``.safetensors`` file.

    ``tensors=False`` reads the index only (the statistics are there)."""
    from mapp.errors import InputError

    path = Path(path)
    index = path.with_suffix(".json")
    meta = _is_index(index)
    if meta is None:
        raise InputError(f"{index} is not a MegaScope snapshot index", "give a step-*.json written by --scope-dir")
    if meta.get("version") != VERSION:
        raise InputError(f"{index} is snapshot version {meta.get('version')}; this mapp reads version {VERSION}",
                         "read it with the mapp version that wrote it")
    arrays: dict[str, Any] = {}
    if tensors:
        from safetensors.numpy import load_file

        arrays = load_file(str(index.with_suffix(".safetensors")))
    return Snapshot(index, meta, arrays)


def find_snapshots(directory: str | Path) -> list[Path]:
    """The snapshot indexes under ``directory`` (any depth, hidden directories skipped), by step."""
    found = []
    for path in sorted(Path(directory).rglob("step-*.json")):
        if any(part.startswith(".") for part in path.relative_to(directory).parts):
            continue
        meta = _is_index(path)
        if meta is not None:
            found.append((int(meta.get("step", 0)), str(path), path))
    return [p for _, _, p in sorted(found)]


def snapshot_stats(directory: str | Path) -> Iterator[dict[str, Any]]:
    """One row per tensor of every snapshot under ``directory``: step, source, layer, kind,
    numel and the statistics (the ``snapshots`` table of ``mapp sql``)."""
    for path in find_snapshots(directory):
        meta = read_snapshot(path, tensors=False).meta
        for name, info in meta.get("tensors", {}).items():
            stats = info.get("stats") or {}
            numel = 1
            for n in info.get("full_shape") or info.get("shape", []):
                numel *= int(n)
            yield {"step": int(meta["step"]), "source": meta.get("source"), "tensor": name,
                   "layer": int(info["layer"]), "kind": info["kind"], "numel": numel,
                   **{s: stats.get(s) for s in STATS}, "file": str(path)}
