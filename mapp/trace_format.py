"""Trace format v1: the contract between capture (and the simulator) and analysis.

Pure standard library, so the capture side can import it inside a training job without
pulling in the offline toolkit. The full description is ``docs/trace-format.md``.

A v1 file is a Chrome Trace Event JSON array with one event per line. The opening ``[``
is on its own line and every event line ends with ``,``; the closing ``]`` is optional
(the Chrome format allows it to be missing), so a file cut off by a crash stays loadable.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "FORMAT_NAME",
    "VERSION",
    "CATEGORIES",
    "file_name",
    "metadata_events",
    "encode_event",
    "process_label",
    "HEADER",
    "MERGED_MARKER",
    "CACHE_DIR",
    "dtype_name",
    "GPU_COUNTER",
    "GPU_COUNTER_FIELDS",
]

FORMAT_NAME = "mapp-trace"
VERSION = 1
CATEGORIES = ("compute", "collective", "p2p", "optimizer", "data", "iteration", "other")
HEADER = "[\n"
# Name of the first metadata event of a merged trace; discovery never reads such a file as input.
MERGED_MARKER = "mapp-merged"
# Directory beside the traces where mapp keeps what it derived from them (events table,
# clock, matching); nothing may be written there but the cache itself.
CACHE_DIR = ".mapp"
# The device counters the capture samples (NVML, ``mapp.capture.nvml``) once per traced
# iteration: ``C`` events of this name on the ``counters`` lane, one field of ``args`` each.
GPU_COUNTER = "gpu"
GPU_COUNTER_FIELDS: dict[str, str] = {
    "device": "int32",            # NVML's index of the rank's GPU
    "sm_clock_mhz": "float64",
    "power_w": "float64",
    "temperature_c": "float64",
    "throttle_reasons": "int64",  # NVML's clock-event reasons bit mask, 0: none
    "sm_pct": "float64",          # share of NVML's last sampling period this process ran a kernel, %
    "other_sm_pct": "float64",    # the same summed over every other process on the GPU (a neighbour), %
    "other_processes": "int32",   # how many other processes ran a kernel in that period
}
"""Field -> type of a ``gpu`` counter event's args. Any field may be missing (NVML refusing it,
an older capture); readers take a missing one as null."""
# ``args.dtype`` of collectives and p2p: torch's dtype names, the common ones shortened.
_DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


def dtype_name(dtype: Any) -> str:
    """A tensor dtype as traces name it (``torch.bfloat16`` -> ``bf16``; others as torch spells them)."""
    text = str(dtype).replace("torch.", "")
    return _DTYPE_SHORT.get(text, text)


def file_name(rank: int) -> str:
    """Per-rank file name, e.g. ``rank-00012.json``."""
    return f"rank-{rank:05d}.json"


def process_label(rank: int, coords: dict[str, int] | None) -> str:
    """Human name of a rank's process, e.g. ``rank 12 · dp3 pp0 tp0``."""
    if not coords:
        return f"rank {rank}"
    parts = [f"{axis}{coords[axis]}" for axis in ("dp", "pp", "tp") if coords.get(axis) is not None]
    parts += [f"{axis}{coords[axis]}" for axis in ("cp", "ep") if coords.get(axis)]
    return f"rank {rank} · " + " ".join(parts)


def metadata_events(
    rank: int,
    world_size: int,
    layout: dict[str, int],
    coords: dict[str, int],
    *,
    clock: str = "host",
    host: str | None = None,
    device: str | None = None,
    run_id: str | None = None,
    **extra: Any,
) -> list[dict[str, Any]]:
    """The two events every v1 file starts with: the ``mapp`` record and the process name."""
    args: dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": VERSION,
        "rank": rank,
        "world_size": world_size,
        "layout": layout,
        "coords": coords,
        "clock": clock,
        "host": host,
        "device": device,
        "run_id": run_id,
    }
    args.update(extra)
    return [
        {"ph": "M", "name": "mapp", "pid": rank, "tid": 0, "args": args},
        {"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
         "args": {"name": process_label(rank, coords)}},
    ]


def encode_event(event: dict[str, Any]) -> str:
    """One event as a v1 line (compact JSON, trailing comma and newline)."""
    return json.dumps(event, separators=(",", ":")) + ",\n"
