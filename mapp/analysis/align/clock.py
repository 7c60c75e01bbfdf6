"""The clock model: per rank, how to move its raw timestamps onto the reference rank's clock.

For rank ``r`` with first event at ``t0`` (its raw clock), a raw time ``ts`` maps to
``ts + offset_ns + slope * (ts - t0)`` on the reference clock, where
``slope = 1 / (1 + drift_ppm * 1e-6) - 1``: ``drift_ppm`` is how fast the rank's clock runs
relative to the reference (positive: it gains), and ``offset_ns`` is what to add to the rank's
raw time at its first event.

``clock.json`` (written beside the events table) has exactly this shape::

    {"reference_rank": 0,
     "ranks": {"<rank>": {"offset_us": .., "drift_ppm": .., "residual_us": ..}}}

plus, only when the ranks fall into several groups with no anchor between them, a
``"components"`` list of rank lists (each aligned to its own lowest rank, or the reference).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

__all__ = ["RankClock", "ClockModel", "CLOCK_FILE"]

CLOCK_FILE = "clock.json"


@dataclass(frozen=True, slots=True)
class RankClock:
    """One rank's mapping onto the reference clock, and how well the anchors fit it."""

    rank: int
    offset_ns: float
    """Nanoseconds to add to the rank's raw time at its first event (``t0_ns``)."""
    drift_ppm: float
    """Rate of the rank's clock relative to the reference, parts per million (positive: faster)."""
    t0_ns: int
    """Raw time of the rank's first event."""
    t1_ns: int | None = None
    """Raw time of the rank's last event start (to place a constant shift mid-trace)."""
    residual_ns: float = 0.0
    """Root mean square of the inlier anchor residuals touching this rank."""
    anchors: int = 0
    """Anchors (equalities) that involve this rank and were kept as inliers."""
    component: int = 0
    """Index into ``ClockModel.components``: ranks linked to each other by anchors."""

    @property
    def slope(self) -> float:
        return 1.0 / (1.0 + self.drift_ppm * 1e-6) - 1.0

    def at(self, ts_ns: int) -> float:
        """Nanoseconds to add to the raw time ``ts_ns``."""
        return self.offset_ns + self.slope * (ts_ns - self.t0_ns)


@dataclass(slots=True)
class ClockModel:
    """Per-rank clocks relative to ``reference_rank``. ``components[0]`` holds the reference."""

    reference_rank: int
    ranks: dict[int, RankClock]
    components: list[list[int]] = field(default_factory=list)
    violations: int = 0
    """p2p messages whose receive still ends before its send starts after alignment."""
    anchors_rejected: int = 0
    """Equality anchors rejected as outliers by the robust solve."""
    notes: list[str] = field(default_factory=list)
    """Lines on how weakly linked groups of ranks were placed (send/recv bounds only), and why
    groups of ranks could not be put on the reference clock."""

    @property
    def connected(self) -> bool:
        return len(self.components) <= 1

    @property
    def unaligned(self) -> list[int]:
        """Ranks not on the reference clock (outside ``components[0]``): no anchor links them to
        it (none logged, or every one rejected as an outlier). Each such group is aligned to its
        own lowest rank only; ``notes`` says why. Their offsets and drifts are finite."""
        return sorted(r for comp in self.components[1:] for r in comp)

    def to_reference(self, ts: pl.Expr, rank: pl.Expr) -> pl.Expr:
        """Expression: raw ``ts`` (int ns) of ``rank`` on the reference clock (int ns)."""
        if not self.ranks:
            return ts
        offsets = {r: c.offset_ns for r, c in self.ranks.items()}
        slopes = {r: c.slope for r, c in self.ranks.items()}
        t0 = {r: c.t0_ns for r, c in self.ranks.items()}
        off = rank.replace_strict(offsets, default=0.0, return_dtype=pl.Float64)
        slope = rank.replace_strict(slopes, default=0.0, return_dtype=pl.Float64)
        origin = rank.replace_strict(t0, default=0, return_dtype=pl.Int64)
        shift = off + slope * (ts - origin).cast(pl.Float64)
        return ts + shift.round(0).cast(pl.Int64)

    def apply(self, frame: pl.LazyFrame | pl.DataFrame, ts: str = "ts_ns", out: str = "ts_aligned_ns"):
        """``frame`` with ``out`` added: its ``ts`` column on the reference clock."""
        return frame.with_columns(self.to_reference(pl.col(ts), pl.col("rank")).alias(out))

    def to_json(self) -> dict:
        data: dict = {
            "reference_rank": self.reference_rank,
            "ranks": {
                str(r): {
                    "offset_us": round(c.offset_ns / 1000.0, 3),
                    "drift_ppm": round(c.drift_ppm, 4),
                    "residual_us": round(c.residual_ns / 1000.0, 3),
                }
                for r, c in sorted(self.ranks.items())
            },
        }
        if not self.connected:
            data["components"] = [sorted(c) for c in self.components]
        return data

    def write(self, path: Path) -> Path:
        """Write ``clock.json`` atomically; returns the path."""
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def from_json(cls, data: dict, first_event_ns: dict[int, int]) -> "ClockModel":
        """Rebuild a model from ``clock.json`` content; ``first_event_ns`` gives each rank's
        ``t0`` (the offsets are stated at the first event), e.g. from the events table."""
        components = [list(c) for c in data.get("components", [])]
        where = {r: i for i, comp in enumerate(components) for r in comp}
        ranks = {}
        for key, value in data["ranks"].items():
            r = int(key)
            ranks[r] = RankClock(
                rank=r, offset_ns=value["offset_us"] * 1000.0, drift_ppm=value["drift_ppm"],
                t0_ns=int(first_event_ns.get(r, 0)), residual_ns=value.get("residual_us", 0.0) * 1000.0,
                component=where.get(r, 0),
            )
        if not components:
            components = [sorted(ranks)]
        return cls(int(data["reference_rank"]), ranks, components)

    @classmethod
    def read(cls, path: Path, first_event_ns: dict[int, int]) -> "ClockModel":
        return cls.from_json(json.loads(Path(path).read_text()), first_event_ns)
