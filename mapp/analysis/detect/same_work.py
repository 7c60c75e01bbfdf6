"""Stage 1 for traces that record what each op worked on (profiler traces): time on the same work.

A PyTorch profiler trace numbers no microbatch or layer, but it records each CPU op's input
shapes and each kernel's grid and block. So the work is compared per *kind*: per (iteration,
op name, shape), the time a rank spent on it against its peers' median for the same kind.
A rank whose GPU is slow takes longer on every kind; a rank that does extra work of a kind
(more matmuls of one shape) spends more time on it; a replica that got longer sequences has
other shapes, which its peers never ran, so it is not compared on them at all (imbalance in
the data is not a fault).

Per (rank, iteration) the *effect* is the log of the rank's time on the compared work over its
peers' median time for it, so that every kind counts by its share of the time. A rank is
flagged when its median effect over the iterations stands out from the scatter of effects of
healthy rank-iterations and it is slower in (nearly) every iteration: a real fault lasts, while
noise on oversubscribed CPUs (a process descheduled in the middle of an op) hits one op of one
iteration. For the same reason a rank's time on one kind is capped at three times its own
median over the iterations before it is summed. Idle gaps (a slow host) are judged the same
way: the median excess over the iterations, and positive in nearly all of them.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from mapp.analysis.detect._stats import MEDIAN_SE, robust_scale, z_critical

__all__ = ["CONSISTENT", "self_times", "compare_same_work"]

CONSISTENT = 0.75
"""Share of the traced iterations in which a rank must be slower for a lasting verdict."""

_SPIKE = 3.0


def self_times(events: pl.DataFrame) -> pl.DataFrame:
    """Every compute op with ``self_ns``: its duration minus that of the ops directly inside it
    on the same thread or stream (a profiler's "self time"). An ``aten::addmm`` spends its time
    in its own kernel, not in the tiny ``aten::resolve_conj`` it calls first, so the finest
    spans alone (leaves) would miss most of the work."""
    comp = (
        events.filter(pl.col("cat") == "compute")
        .with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
        .sort(["rank", "lane", "ts_ns", "dur_ns"], descending=[False, False, False, True])
    )
    if comp.is_empty():
        return comp.with_columns(self_ns=pl.lit(0, pl.Int64))
    thread = comp.select(pl.struct("rank", "lane").rank("dense")).to_series().to_numpy()
    child = _child_time(thread, comp["ts_ns"].to_numpy(), comp["end_ns"].to_numpy(), comp["dur_ns"].to_numpy())
    return comp.with_columns(self_ns=pl.Series(np.maximum(comp["dur_ns"].to_numpy() - child, 0)))


def _child_time(thread: np.ndarray, start: np.ndarray, end: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Per span (sorted by thread, start, longest first): the summed duration of its direct children."""
    out = np.zeros(len(start), dtype=np.int64)
    stack: list[int] = []
    current = None
    for i in range(len(start)):
        if thread[i] != current:
            stack.clear()
            current = thread[i]
        while stack and end[stack[-1]] < end[i]:
            stack.pop()
        if stack:
            out[stack[-1]] += dur[i]
        stack.append(i)
    return out


def compare_same_work(ops: pl.DataFrame, gaps: pl.DataFrame, coords: pl.DataFrame, sizes: dict | None, mode: str,
                      group: list[str], *, min_effect: float):
    """Stage 1 over leaf ``ops`` (``rank``, ``iteration``, ``name``, ``shape``, ``self_ns``);
    ``gaps`` per (rank, iteration) from ``peers._gaps``. Returns a ``PeerEvidence``."""
    from mapp.analysis.detect.peers import PeerEvidence, _stage_balance

    work = ops.group_by(["rank", "iteration", "name", "shape"]).agg(t=pl.col("self_ns").sum().cast(pl.Float64))
    work = work.join(coords.select("rank", "tp", "pp", "dp"), on="rank", how="left")
    iterations = work["iteration"].n_unique()
    kind = ["name", "shape"]
    if iterations >= 3:
        own = pl.col("t").median().over(["rank", *kind])
        work = work.with_columns(t=pl.min_horizontal("t", _SPIKE * own))
    peer_key = [c for c in group if c != "rank"] + (["iteration"] if group != ["rank"] else []) + kind
    work = work.with_columns(n=pl.len().over(peer_key), total=pl.col("t").sum().over(peer_key),
                             med=pl.col("t").median().over(peer_key)).filter(pl.col("n") >= 2)
    if work.is_empty():
        return PeerEvidence("skipped", "no op ran on two or more peers with the same shapes", min_effect=min_effect)
    # with two peers the median is their mean and halves a difference: compare with the other one
    work = work.with_columns(base=pl.when(pl.col("n") == 2).then(pl.col("total") - pl.col("t")).otherwise(pl.col("med")))
    pairs = bool(work["n"].min() < 3)
    per = work.group_by(["rank", "iteration"]).agg(
        busy_ns=pl.col("t").sum(), expected_ns=pl.col("base").sum(), n_ops=pl.len(),
        share_slow=pl.col("t").filter(pl.col("t") > (1 + min_effect * 3) * pl.col("base")).sum() / pl.col("t").sum(),
    ).with_columns(effect=(pl.col("busy_ns") / pl.col("expected_ns")).log(),
                   excess_ns=pl.col("busy_ns") - pl.col("expected_ns"))
    if pairs:   # two ranks' effects mirror each other: noise is how much each varies by itself
        sigma = per.select(robust_scale(pl.col("effect") - pl.col("effect").median().over("rank"))).item() or 0.0
    else:
        sigma = per.select(robust_scale("effect")).item() or 0.0
    sigma = max(sigma, 1e-3)
    z_crit = z_critical(per["rank"].n_unique())
    per = per.with_columns(z=pl.col("effect") / sigma).join(gaps, on=["rank", "iteration"], how="left")
    gap_scale = max(per.select(robust_scale("gap_excess_ns")).item() or 0.0, 1000.0)
    ranks = per.group_by("rank").agg(
        effect=pl.col("effect").median(), n_it=pl.len(),
        consistent=(pl.col("effect").exp() - 1 >= min_effect).mean(),
        share_slow=(pl.col("share_slow") * pl.col("busy_ns")).sum() / pl.col("busy_ns").sum(),
        n_ops=pl.col("n_ops").sum(), excess_ns=pl.col("excess_ns").mean(), busy_ns=pl.col("busy_ns").mean(),
        gap_excess_ns=pl.col("gap_excess_ns").median(), gap_ns=pl.col("gap_ns").mean(),
        gap_consistent=(pl.col("gap_excess_ns") > 0).mean(),
        its=pl.col("iteration").sort(), slow_its=pl.col("iteration").filter(pl.col("effect").exp() - 1 >= min_effect).sort(),
        gap_its=pl.col("iteration").filter(pl.col("gap_excess_ns") > 0).sort(),
    ).with_columns(
        se=MEDIAN_SE * sigma / pl.col("n_it").cast(pl.Float64).sqrt(),
        gap_se=MEDIAN_SE * gap_scale / pl.col("n_it").cast(pl.Float64).sqrt(),
    ).with_columns(
        z=pl.col("effect") / pl.col("se"), gap_z=pl.col("gap_excess_ns") / pl.col("gap_se"),
    ).with_columns(
        flagged=(pl.col("z") > z_crit) & (pl.col("effect").exp() - 1 >= min_effect) & (pl.col("consistent") >= CONSISTENT),
        gap_flagged=(pl.col("gap_z") > z_crit) & (pl.col("gap_consistent") >= CONSISTENT),
    ).with_columns(
        slowdown=pl.col("effect").exp(),
        iterations=pl.when(pl.col("flagged")).then(pl.col("slow_its")).when(pl.col("gap_flagged"))
        .then(pl.col("gap_its")).otherwise(pl.lit([], pl.List(pl.Int32))),
    ).select("rank", "slowdown", "z", "share_slow", "n_ops", "flagged", "iterations", "excess_ns", "busy_ns",
             "gap_excess_ns", "gap_z", "gap_flagged", "gap_ns", "consistent").sort("rank")
    flagged_ranks = ranks.filter(pl.col("flagged") | pl.col("gap_flagged"))["rank"].to_list()
    per = per.with_columns(
        flagged=pl.col("rank").is_in(flagged_ranks) & (pl.col("effect").exp() - 1 >= min_effect),
    ).select("rank", "iteration", "effect", "z", "n_ops", "share_slow", "excess_ns", "busy_ns", "flagged",
             "gap_ns", "gap_excess_ns", "gap_z", "gap_flagged").sort(["rank", "iteration"])
    stages = _stage_balance(per, coords) if sizes and sizes["pp"] >= 2 else None
    return PeerEvidence(mode, None, per, ranks, z_crit, min_effect, None, stages, pairs=pairs)
