"""What a run report says, computed from the named queries: plain frames in one dataclass.

``build_summary(db)`` runs the library's queries on a ``TraceDatabase`` and keeps their rows
(polars frames) plus a few figures derived from them; ``terminal.py`` and ``html.py`` only
display it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from mapp.errors import MappError
from mapp.sql.database import TraceDatabase
from mapp.sql.library import get_query

__all__ = ["RunSummary", "build_summary", "detect_verdict", "renderable"]


@dataclass(slots=True)
class RunSummary:
    """One run, summarised. Frames are the named queries' rows (columns as the query documents)."""

    bundle: dict[str, Any]
    """The ``bundle`` row: directory, format, world size, layout, aligned, notes."""
    job_iterations: pl.DataFrame
    """Per iteration: ``iteration``, ``time_ns`` (the job's), ``slowest_rank``, ``spread`` (max/min rank)."""
    iterations: pl.DataFrame
    """``iteration_times``."""
    breakdown: pl.DataFrame
    """``rank_breakdown``."""
    stages: pl.DataFrame
    """``rank_breakdown`` summed per pipeline stage (same columns, ``ranks`` instead of coords)."""
    overlap: pl.DataFrame
    """``comm_overlap`` summed per kind: ``kind``, ``comm_ns``, ``overlapped_ns``, ``exposed_ns``, ``overlap_frac``."""
    skew: pl.DataFrame
    """``collective_skew``."""
    last_arrivers: pl.DataFrame
    """``last_arrivers`` (ranks that caused the most waiting first)."""
    bandwidth: pl.DataFrame
    """``p2p_bandwidth``."""
    bubbles: pl.DataFrame
    """``pipeline_bubbles``."""
    top_ops: pl.DataFrame
    """``top_ops``."""
    slowest_ops: pl.DataFrame
    """``slowest_ops`` (compute)."""
    findings: pl.DataFrame
    """Matching findings: ``kind``, ``severity``, ``message``."""
    skip: int = 0
    """Warm-up iterations left out of the time-based figures."""
    verdict: Any = None
    """The straggler detector's verdict, when the detector is installed and ran."""
    notes: list[str] = field(default_factory=list)

    @property
    def median_iteration_ns(self) -> float | None:
        times = self.job_iterations.filter(pl.col("iteration") >= self._first + self.skip)["time_ns"]
        return float(times.median()) if len(times) else None

    @property
    def _first(self) -> int:
        return int(self.job_iterations["iteration"].min()) if len(self.job_iterations) else 0


def _run(db: TraceDatabase, name: str, **params: Any) -> pl.DataFrame:
    query = get_query(name)
    result = db.query(query.sql, query.bind({k: str(v) for k, v in params.items()}))
    return pl.from_arrow(result.table)


def _job_iterations(iterations: pl.DataFrame, aligned: bool) -> pl.DataFrame:
    if iterations.is_empty():
        return pl.DataFrame(schema={"iteration": pl.Int32, "time_ns": pl.Int64, "slowest_rank": pl.Int32,
                                    "spread": pl.Float64})
    per = iterations.group_by("iteration").agg(
        end=pl.col("end_aligned_ns").max(), start=pl.col("start_aligned_ns").min(),
        longest=pl.col("dur_ns").max(), shortest=pl.col("dur_ns").min(),
        slowest_rank=pl.col("rank").get(pl.col("dur_ns").arg_max()),
    ).sort("iteration")
    if aligned:
        previous = pl.col("end").shift(1).fill_null(pl.col("start"))
        time = (pl.col("end") - previous).cast(pl.Int64)
    else:
        time = pl.col("longest").cast(pl.Int64)
    return per.select("iteration", time.alias("time_ns"), "slowest_rank",
                      (pl.col("longest") / pl.col("shortest")).alias("spread"))


def _stages(breakdown: pl.DataFrame) -> pl.DataFrame:
    sums = ["window_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "other_ns", "idle_ns"]
    if breakdown.is_empty():
        return breakdown
    return (
        breakdown.group_by("pp").agg(pl.len().alias("ranks"), *[pl.col(c).sum() for c in sums])
        .with_columns(
            compute_frac=pl.col("compute_ns") / pl.col("window_ns"),
            exposed_comm_frac=pl.col("exposed_comm_ns") / pl.col("window_ns"),
            idle_frac=pl.col("idle_ns") / pl.col("window_ns"),
        ).sort("pp")
    )


def _overlap(rows: pl.DataFrame) -> pl.DataFrame:
    if rows.is_empty():
        return pl.DataFrame(schema={"kind": pl.String, "comm_ns": pl.Int64, "overlapped_ns": pl.Int64,
                                    "exposed_ns": pl.Int64, "overlap_frac": pl.Float64})
    return (
        rows.group_by("kind").agg(pl.col("comm_ns").sum(), pl.col("overlapped_ns").sum(), pl.col("exposed_ns").sum())
        .with_columns(overlap_frac=pl.col("overlapped_ns") / pl.col("comm_ns"))
        .sort("kind")
    )


def detect_verdict(analysis, notes: list[str] | None = None) -> Any:
    """The detector's verdict on ``analysis`` (``mapp.analysis.run.Analysis``) as a renderable
    with ``to_json()``, or None when it cannot judge this bundle (a line in ``notes``)."""
    from mapp.analysis.detect import detect_bundle
    from mapp.report.verdict import DetectReport

    try:
        verdict = detect_bundle(analysis.bundle, analysis=analysis)
    except MappError as error:
        if notes is not None:
            notes.append(f"straggler detector: {error}")
        return None
    return DetectReport(verdict)


def renderable(verdict: Any) -> Any:
    """Something rich can print for ``verdict``: itself, or its JSON."""
    if hasattr(verdict, "__rich_console__") or hasattr(verdict, "__rich__") or isinstance(verdict, str):
        return verdict
    if hasattr(verdict, "to_json"):
        import json

        return json.dumps(verdict.to_json(), indent=1, default=str)
    return str(verdict)


def build_summary(db: TraceDatabase, *, skip: int = 0, verdict: Any = None,
                  notes: list[str] | None = None) -> RunSummary:
    """Run the named queries on ``db`` and gather what the report shows."""
    info = db.info
    iterations = _run(db, "iteration_times")
    breakdown = _run(db, "rank_breakdown", skip=skip)
    findings = pl.from_arrow(db.query("SELECT kind, severity, message FROM findings").table)
    return RunSummary(
        bundle=info,
        job_iterations=_job_iterations(iterations, bool(info.get("aligned"))),
        iterations=iterations,
        breakdown=breakdown,
        stages=_stages(breakdown),
        overlap=_overlap(_run(db, "comm_overlap", skip=skip)),
        skew=_run(db, "collective_skew"),
        last_arrivers=_run(db, "last_arrivers", limit=10),
        bandwidth=_run(db, "p2p_bandwidth"),
        bubbles=_run(db, "pipeline_bubbles", skip=skip),
        top_ops=_run(db, "top_ops", limit=10),
        slowest_ops=_run(db, "slowest_ops", limit=10),
        findings=findings,
        skip=skip,
        verdict=verdict,
        notes=list(info.get("notes") or []) + list(notes or []),
    )
