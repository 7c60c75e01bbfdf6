"""Helpers: simulate a small job and read it back through the ingest path in true time."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from mapp.analysis.ingest import load_bundle
from mapp.analysis.simulate import SimConfig, simulate

QUIET = dict(jitter_sigma=0.0, skew=False)


def run(tmp_path: Path, name: str = "sim", **fields):
    """Simulate into ``tmp_path/name``; return (result, events with true times in us)."""
    fields.setdefault("layers", 8)
    fields.setdefault("hidden", 1024)
    fields.setdefault("seq_length", 1024)
    cfg = SimConfig(**fields)
    out = tmp_path / name
    result = simulate(cfg, out)
    return result, true_events(out, result.ground_truth)


def true_events(out: Path, truth: dict) -> pl.DataFrame:
    """Events with ``start``/``end`` on the true clock (microseconds), using the ground truth."""
    bundle = load_bundle(out, use_cache=False)
    clocks = pl.DataFrame({
        "rank": [int(r) for r in truth["clocks"]],
        "offset_us": [c["offset_us"] for c in truth["clocks"].values()],
        "drift_ppm": [c["drift_ppm"] for c in truth["clocks"].values()],
    }).with_columns(pl.col("rank").cast(pl.Int32))
    ev = bundle.events.join(clocks, on="rank", how="left")
    scale = 1 + pl.col("drift_ppm") * 1e-6
    return ev.with_columns(
        start=(pl.col("ts_ns") / 1e3 - pl.col("offset_us")) / scale,
        end=((pl.col("ts_ns") + pl.col("dur_ns")) / 1e3 - pl.col("offset_us")) / scale,
    )
