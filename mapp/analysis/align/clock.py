"""The clock model: per rank, how to move its raw timestamps onto the reference rank's clock.

The mapping is stated once, in ``clock_mapping``: for rank ``r`` with first event at ``t0_ns``
(its raw clock), a raw time ``ts_ns`` is on the reference clock at::

    aligned_ns = ts_ns + round_half_even(offset_ns + slope * (ts_ns - t0_ns))
    slope = 1 / (1 + drift_ppm * 1e-6) - 1

where ``drift_ppm`` is how fast the rank's clock runs relative to the reference (positive: it
gains), and ``offset_ns`` is what to add to the rank's raw time at its first event. The shift is rounded to whole nanoseconds, halves to even. Every
form of the mapping is ``clock_mapping`` applied to that form's values: Python numbers
(``RankClock.aligned_ns``), polars expressions (``ClockModel.to_reference``), DuckDB SQL
(``sql_mapping``, for ``mapp sql``'s ``*_aligned_ns`` columns) and the text in ``clock.json``
(``MAPPING``; a test checks the lines above against it).

``clock.json`` (``ClockModel.write``, beside the events table) is an export: the whole model,
lossless, for other tools and scripts (``ClockModel.read`` gives the same model back). mapp
itself never reads it: every command derives the clock from the traces (see ``write``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

__all__ = ["RankClock", "ClockModel", "CLOCK_FILE", "CLOCK_FORMAT", "MAPPING", "SLOPE", "clock_mapping",
           "slope_from_drift", "sql_mapping"]

CLOCK_FILE = "clock.json"
CLOCK_FORMAT = 2
"""Version of ``clock.json``: 2 is lossless (ns, every rank's t0 and the solve's findings); 1 had
``offset_us``, ``drift_ppm`` and ``residual_us`` rounded, and no t0 (still written, as before)."""


def clock_mapping(ts: Any, offset_ns: Any, slope: Any, t0_ns: Any, to_int: Callable[[Any], Any]) -> Any:
    """THE clock mapping, for values of any form that has ``+``, ``-`` and ``*``: ``ts`` (a raw
    integer time of the rank) on the reference clock. ``to_int`` rounds the shift to an integer
    number of nanoseconds, halves to even, in that form."""
    return ts + to_int(offset_ns + slope * (ts - t0_ns))


def slope_from_drift(drift_ppm: float) -> float:
    """The mapping's ``slope`` from a rank's ``drift_ppm`` (its clock's rate relative to the
    reference), as ``SLOPE`` says."""
    return 1.0 / (1.0 + drift_ppm * 1e-6) - 1.0


SLOPE = "slope = 1 / (1 + drift_ppm * 1e-6) - 1"
"""``slope_from_drift`` as text (a test evaluates it against the function)."""


class _Sql:
    """A SQL expression under construction: ``+``, ``-`` and ``*`` build the text, with the
    parentheses that precedence needs (so that ``clock_mapping`` can write SQL)."""

    __slots__ = ("text", "precedence")

    def __init__(self, text: str, precedence: int = 3) -> None:
        self.text, self.precedence = text, precedence

    def _binary(self, op: str, other: Any, precedence: int, *, swap: bool = False) -> _Sql:
        left, right = (_sql(other), self) if swap else (self, _sql(other))
        # left-associative: a left operand of equal precedence needs no parentheses, a right one
        # does (a - (b + c)); always adding them there is also right for + and *
        lt = left.text if left.precedence >= precedence else f"({left.text})"
        rt = right.text if right.precedence > precedence else f"({right.text})"
        return _Sql(f"{lt} {op} {rt}", precedence)

    def __add__(self, other: Any) -> _Sql:
        return self._binary("+", other, 1)

    def __radd__(self, other: Any) -> _Sql:
        return self._binary("+", other, 1, swap=True)

    def __sub__(self, other: Any) -> _Sql:
        return self._binary("-", other, 1)

    def __rsub__(self, other: Any) -> _Sql:
        return self._binary("-", other, 1, swap=True)

    def __mul__(self, other: Any) -> _Sql:
        return self._binary("*", other, 2)

    def __rmul__(self, other: Any) -> _Sql:
        return self._binary("*", other, 2, swap=True)


def _sql(value: Any) -> _Sql:
    return value if isinstance(value, _Sql) else _Sql(repr(value))


def sql_mapping(ts: str, clock: str = "c") -> str:
    """DuckDB SQL for ``clock_mapping``: ``ts`` (a BIGINT column or expression) on the reference
    clock, from the clock row ``clock`` (columns ``offset_ns``, ``slope``, ``t0_ns``); NULL where
    the rank has no clock row."""
    def to_int(shift: _Sql) -> _Sql:
        return _Sql(f"CAST(round_even({shift.text}, 0) AS BIGINT)")

    return clock_mapping(_Sql(ts), _Sql(f"{clock}.offset_ns"), _Sql(f"{clock}.slope"), _Sql(f"{clock}.t0_ns"),
                         to_int).text


def _round_half_even(shift: float) -> int:
    return int(round(shift))  # Python's round: halves to even, as polars' and DuckDB's round_even


def _polars_round(shift: pl.Expr) -> pl.Expr:
    return shift.round(0, mode="half_to_even").cast(pl.Int64)


MAPPING = "aligned_ns = " + clock_mapping(
    _Sql("ts_ns"), _Sql("offset_ns"), _Sql("slope"), _Sql("t0_ns"),
    lambda shift: _Sql(f"round_half_even({shift.text})")).text
"""The mapping as text (for ``clock.json`` and the docs), written by ``clock_mapping``."""


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
        return slope_from_drift(self.drift_ppm)

    def aligned_ns(self, ts_ns: int) -> int:
        """The raw time ``ts_ns`` of this rank on the reference clock (``clock_mapping``)."""
        return clock_mapping(int(ts_ns), self.offset_ns, self.slope, self.t0_ns, _round_half_even)


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
        return clock_mapping(ts, off, slope, origin, _polars_round)

    def apply(self, frame: pl.LazyFrame | pl.DataFrame, ts: str = "ts_ns", out: str = "ts_aligned_ns"):
        """``frame`` with ``out`` added: its ``ts`` column on the reference clock."""
        return frame.with_columns(self.to_reference(pl.col(ts), pl.col("rank")).alias(out))

    def to_json(self) -> dict:
        """The whole model as ``clock.json`` holds it (version ``CLOCK_FORMAT``): lossless, every
        number as the solve left it, with the mapping written out; ``offset_us`` and
        ``residual_us`` are version 1's fields (rounded to 1 ns), kept for readers of that."""
        return {
            "format": "mapp-clock", "version": CLOCK_FORMAT,
            "mapping": MAPPING, "slope": SLOPE,
            "reference_rank": self.reference_rank,
            "ranks": {
                str(r): {
                    "offset_ns": c.offset_ns, "drift_ppm": c.drift_ppm, "t0_ns": c.t0_ns, "t1_ns": c.t1_ns,
                    "residual_ns": c.residual_ns, "anchors": c.anchors, "component": c.component,
                    "offset_us": round(c.offset_ns / 1000.0, 3), "residual_us": round(c.residual_ns / 1000.0, 3),
                }
                for r, c in sorted(self.ranks.items())
            },
            "components": [sorted(c) for c in self.components],
            "violations": self.violations, "anchors_rejected": self.anchors_rejected, "notes": list(self.notes),
        }

    def write(self, path: Path) -> Path:
        """Write ``clock.json`` atomically; returns the path.

        An export, for other tools and scripts (``read`` gives this model back, equal): mapp never
        reads it. Each command solves the clock from the traces it reads, which is cheap (0.05 s
        for 64 simulated ranks and 0.08 s for 256 on two cores, less than matching them), so the
        file cannot go stale (traces replaced, another mapp, --no-align) or be edited into an
        analysis, and nothing needs to check it.
        """
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def from_json(cls, data: dict, first_event_ns: dict[int, int] | None = None) -> ClockModel:
        """The model of ``clock.json`` content. A version 1 file (rounded, no ``t0_ns``) needs
        ``first_event_ns``, each rank's first raw time (e.g. from the events table)."""
        components = [list(c) for c in data.get("components", [])]
        where = {r: i for i, comp in enumerate(components) for r in comp}
        ranks = {}
        for key, value in data["ranks"].items():
            r = int(key)
            if "offset_ns" in value:  # version 2: lossless
                ranks[r] = RankClock(
                    rank=r, offset_ns=float(value["offset_ns"]), drift_ppm=float(value["drift_ppm"]),
                    t0_ns=int(value["t0_ns"]), t1_ns=None if value.get("t1_ns") is None else int(value["t1_ns"]),
                    residual_ns=float(value["residual_ns"]), anchors=int(value["anchors"]),
                    component=int(value["component"]),
                )
                continue
            if first_event_ns is None:
                raise ValueError("clock.json version 1 states offsets at each rank's first event but not when "
                                 "that was: pass first_event_ns")
            ranks[r] = RankClock(
                rank=r, offset_ns=value["offset_us"] * 1000.0, drift_ppm=value["drift_ppm"],
                t0_ns=int(first_event_ns.get(r, 0)), residual_ns=value.get("residual_us", 0.0) * 1000.0,
                component=where.get(r, 0),
            )
        if not components:
            components = [sorted(ranks)]
        return cls(int(data["reference_rank"]), ranks, components, violations=int(data.get("violations", 0)),
                   anchors_rejected=int(data.get("anchors_rejected", 0)), notes=list(data.get("notes", [])))

    @classmethod
    def read(cls, path: Path, first_event_ns: dict[int, int] | None = None) -> ClockModel:
        """The model in the ``clock.json`` at ``path`` (see ``from_json``)."""
        return cls.from_json(json.loads(Path(path).read_text()), first_event_ns)
