"""A CPU process with a busy thread beside it: slower in sum at its peers' work, not at its quickest.

A thread that computes beside a rank's training loop in the same process (a metrics exporter
gone hot, a prefetcher spinning, a user's background evaluation) takes the process's share of
the cores from the loop: the loop's calls are descheduled now and then, so they sum slower, and
so does the time between them, which the interpreter spends waiting for its lock or a core. Its
median call is barely slower (most calls run between two slices), which is what stage 1 judges
(one op one vote, ``peers._rank_iterations``), and its arrivals alone are what contention makes
of any process on shared cores (``shared_cpus.CONTENTION``), so nothing else names it.

Where processes share cores, which one the scheduler slices more is chance, and lasts the whole
run; what tells a busy neighbour from that chance is how much and where, together:

- its summed compute is ``shared_cpus.CONTENTION`` times the busiest of its peers' or more (the
  median over the traced iterations, and slower than their median by the threshold in nearly
  every one): it stands alone, where a program that splits its work unevenly by design makes a
  few ranks busier together (a user's SUMMA on a 2x2 grid, no fault: one row's two ranks 1.2x
  and 1.5x the other row's, "slow host 0" at 1.32x its peers' median by this rule before);
- its pace (``data_sized.paced_split``: the time-weighted median over op kinds of its time on each
  against its peers') is slower by the threshold: the whole program, not a few ops;
- its fastest call of each mid-sized kind is its peers' (``data_sized.input_floors``, within the
  threshold either way): the same work, for larger inputs slow even the quickest call, and
  smaller ones speed it (imbalance: lognormal batch sizes, a rank's floor 0.73), where slices
  miss some calls altogether;
- its idle time between calls lasts beyond its peers' (``gap_flagged``): the loop waited.

Measured over the 28 batteries of user-written gloo jobs held out since the ninety-second
session (448 jobs, 4 processes on 2 cores; ``benchmarks/detect_real.py`` scores them): of 28 ranks
with a thread doing 192x192 matmuls beside them, 10 were named by other rules; this one names 6
more, their calls summed 1.45-1.76x their peers' (their median call 0.98-1.25x, under stage 1's
cut-off), at paces of 1.19-2.0, floors 0.98-1.00, idle lasting in all. No verdict of the 448's
healthy or imbalanced jobs changed, nor of the committed recordings; held out until after it, a
co-distillation family's busy thread was named too. The nearest healthy rank: a SUMMA rank at
1.31-1.37x its peers' median, 1.13-1.25x the busiest of them. Ranks handed 1.4-3x the data met
the first two with floors of 1.49-8.6; ranks computing 2-10x the layers' matmuls meet them too,
and stage 1 names them slow compute before this rule is asked.

Only where nothing else named anyone: the rule stands in for a verdict, it overrules none. And
only over the whole trace, not over the trailing iterations ``onset`` judges alone where the
whole trace names no one: on shared cores a neighbour that comes midway is what any other job
starting on the machine makes (a user's GPipe PP4 by broadcasts, no fault, helpers' jobs
starting beside it: a stage 1.6x its peers' sum from iteration 6 of 2-9, "slow host 2" from
there by this rule before it was kept to whole traces).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from mapp.analysis.detect._stats import others_max, others_median
from mapp.analysis.detect.data_sized import PACED_KINDS
from mapp.analysis.detect.findings import Suspect
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.shared_cpus import CONTENTION
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["busy_neighbours", "from_busy_neighbour"]

EVIDENCE = "busy_neighbour"
"""The evidence key of a suspect this rule names."""

PEERS = 3
"""The fewest ranks running one program for a sum to stand out: of two, either one's slices are
the other's lead."""


def busy_neighbours(peers: PeerEvidence, coords: dict, iteration_ns: float | None) -> list[Suspect]:
    """Slow host for each rank whose process a busy thread beside it slows (the module says how
    it is told): its slowdown its summed compute over its peers', its cost that sum's excess and
    its idle time's. Empty where stage 1 counted no calls (``PeerEvidence.counted``) or lacks the
    paces and floors."""
    ranks = peers.ranks
    if not peers.counted or ranks.is_empty() or not {"pace", "input_floor"} <= set(ranks.columns):
        return []
    sums = _summed(peers.rank_iterations, coords, peers.min_effect)
    if sums.is_empty():
        return []
    t = peers.min_effect
    out = []
    for row in ranks.join(sums, on="rank", how="inner").iter_rows(named=True):
        pace, floor = row["pace"], row["input_floor"]
        if (pace is None or floor is None or (row.get("pace_kinds") or 0) < PACED_KINDS
                or (row.get("input_kinds") or 0) < PACED_KINDS // 2):
            continue
        if not (row["lead"] >= CONTENTION and row["lasting"] >= CONSISTENT and pace >= 1 + t
                and abs(floor - 1) < t and row["gap_flagged"]):
            continue
        gap = max(row["gap_excess_ns"] or 0.0, 0.0)
        out.append(Suspect(
            rank=row["rank"], kind="slow_host", coords=coords.get(row["rank"]), confidence=0.5,
            slowdown=row["sum_ratio"], excess_ns=row["excess_ns_sum"] + gap, iteration_ns=iteration_ns,
            iterations=row["slower"], evidence={EVIDENCE: {
                "sum_ratio": round(row["sum_ratio"], 3), "pace": round(pace, 3), "input_floor": round(floor, 3),
                "idle_excess_ms_per_iteration": round(gap / 1e6, 3)},
                "note": (f"its calls summed {row['sum_ratio']:.2f}x its peers' at the same work (its quickest call "
                         f"of each kind {floor:.2f}x theirs) and it idled {gap / 1e6:.1f} ms an iteration more "
                         "between them: a busy thread beside it on its cores, most likely")}))
    return out


def from_busy_neighbour(suspect: Suspect) -> bool:
    """Whether ``suspect`` was named by this rule."""
    return EVIDENCE in suspect.evidence


def _summed(per: pl.DataFrame, coords: dict, threshold: float) -> pl.DataFrame:
    """Per rank of a program of ``PEERS`` ranks or more: ``sum_ratio``, the median over the
    traced iterations of its summed compute over the median of its program peers' in that
    iteration; ``lead``, the same over the busiest of them; ``lasting``, the share of iterations in which it is slower by ``threshold`` or
    more; ``slower``, those iterations; ``excess_ns_sum``, its mean summed excess an iteration."""
    if per.is_empty() or "busy_ns" not in per.columns:
        return pl.DataFrame()
    # (peers by program: a rank's ``pp`` is its program's, or its pipeline stage's)
    programs = pl.DataFrame([(r, c.get("pp")) for r, c in coords.items()], orient="row",
                            schema={"rank": per.schema["rank"], "program": pl.Int64})
    per = per.select("rank", "iteration", "busy_ns").drop_nulls().join(programs, on="rank", how="inner")
    per = per.filter(pl.len().over("program", "iteration") >= PEERS).sort("program", "iteration", "rank")
    if per.is_empty():
        return pl.DataFrame()
    gid = per.select(pl.struct("program", "iteration").rank("dense")).to_series().to_numpy()
    busy = per["busy_ns"].to_numpy().astype(np.float64)
    per = per.with_columns(peer=pl.Series(others_median(gid, busy)), busiest=pl.Series(others_max(gid, busy)))
    per = per.filter(pl.col("peer") > 0).with_columns(ratio=pl.col("busy_ns") / pl.col("peer"),
                                                      over_busiest=pl.col("busy_ns") / pl.col("busiest"))
    return per.group_by("rank").agg(
        sum_ratio=pl.col("ratio").median(), lead=pl.col("over_busiest").median(), lasting=(pl.col("ratio") >= 1 + threshold).mean(),
        slower=pl.col("iteration").filter(pl.col("ratio") >= 1 + threshold).sort(),
        excess_ns_sum=(pl.col("busy_ns") - pl.col("peer")).mean())

