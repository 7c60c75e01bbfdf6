"""Helpers: simulate a small job with faults and run the detector on it."""

from __future__ import annotations

from pathlib import Path

from mapp.analysis.detect import detect_bundle
from mapp.analysis.ingest import load_bundle
from mapp.analysis.simulate import SimConfig, parse_fault, simulate

SMALL = dict(layers=4, hidden=1024, seq_length=1024, microbatches=4, iterations=2, seed=3)


def simulated(tmp_path: Path, *faults: str, name: str = "job", **fields) -> tuple[Path, dict]:
    """Simulate into ``tmp_path/name``; returns (directory, ground truth)."""
    cfg = SimConfig(**{**SMALL, **fields}, faults=[parse_fault(f) for f in faults])
    out = tmp_path / name
    return out, simulate(cfg, out).ground_truth


def detect(tmp_path: Path, *faults: str, **fields):
    """Simulate, load and detect; returns the verdict."""
    layout = fields.pop("detect_layout", None)
    threshold = fields.pop("threshold", 0.1)
    out, _ = simulated(tmp_path, *faults, **fields)
    return detect_bundle(load_bundle(out), layout=layout, threshold=threshold)
