"""A rank whose transformer layers are slower than its peers' in every traced iteration, on
shared CPUs, under mapp's capture (stage 1's steady route).

Where CPU processes share cores, a rank-iteration's effect (the median of its ops' log-ratios)
is judged against how much the ranks' effects scatter, and with two or three peers contention
makes that scatter as large as a fault: a rank whose layers took 1.45x its DP peers' in each
of 4 steps read z 2.0 against a cut-off of 3.2 (megatron-core DP4, 4 processes on 2 CPUs, a
1.45x layer fault). Contention moves from rank to rank between steps; a fault stays.

So a rank is flagged in every iteration where the summed time of its transformer layer spans
is at least ``STEADY`` x its peers' (the mean of the others of its peer group) on as many
tokens, in each traced iteration, three or more; where it alone of the job is so; and where no
other rank is flagged by its own ops in more steps than it is (a culprit its ops flag step after
step beside its steady victim, which they flag in none). Ranks that drew longer sequences are not
compared (megatron-core DP2, lognormal lengths: one replica's layers 2.4x its peer's on twice
the tokens). It is a fallback where contention hides every rank: a rank that shares a core with
a sleeping or busy culprit, or waits on it through the pipeline, is slowed steadily too (DP4,
rank 0's layers stretched 1.3x by sleeps: rank 2 read 1.55x at least, rank 0 1.19x in one step;
PP2 x DP2, rank 3's stretched 1.4x: rank 0, of the other stage, 1.98x). Its effect in those
iterations is at least the log of that ratio; the verdict's gates for shared CPUs judge it like
any flagged rank.

One rank a stage (a pipeline of three stages or more, no data parallel peers), the stages' same
layers are the peers, call for call: a stage's mean layer call against the mean of the other
stages' (a heavier last stage runs more calls, not slower ones). Megatron-core PP4 under mapp's
capture, 4 processes on 2 to 4 CPUs (sessions 28-33): the lowest per-step ratio of a rank with
no fault of its own at most 1.21x (446 ranks: healthy, heavier last stages, lognormal lengths,
other faults), of 30 layer faults of 1.4-1.85x on every stage 1.27x or more. Not with two stages,
where the others are one process and which of two contention slows is chance for the whole run
(PP2, no fault: the first stage's layers up to 1.66x the last's in every step).
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.own_time import own_ns

# Held-out jobs of megatron-core under mapp's capture with DP >= 2, CPU processes on shared cores
# (sessions 28-32), three or more traced steps: the lowest per-step ratio of a rank in a healthy or
# imbalanced job was at most 1.20x (456 ranks of 121 jobs) but once, 1.42x, a pair of CPUs on
# which rank 1 ran every op 1.4x slower (embedding and optimizer too); of 71 layer faults of
# 1.3-1.78x, 56 injected ranks read 1.25x or more.
STEADY = 1.25
SAME_TOKENS = 1.02
"""Ranks compared in an iteration worked on as many tokens, to this ratio (mapp's capture records
each layer call's: sequence x micro-batch)."""
LAYER_SPANS = "layer."


def steady_layers(timed: pl.DataFrame, coords: pl.DataFrame, group: list[str], per: pl.DataFrame,
                  per_call: bool = False) -> pl.DataFrame:
    """``per`` (rank, iteration, ``effect``, ``flagged``) with the job's steady rank, if one,
    flagged in every iteration and its ``effect`` raised to its layers' log-ratio against its
    peer group (``group``: the coordinates that peers share), and ``steady``: its smallest ratio
    over the iterations (null for every other rank). Its ``z`` stays what its ops say: the
    verdict shows both. ``per_call``: layers compared call for call (one rank a stage), not
    summed."""
    per = per.with_columns(steady=pl.lit(None, dtype=pl.Float64))
    if "tokens" not in timed.columns:
        return per
    ratios, traced = _layer_ratios(timed, coords, group, per_call)
    if ratios.is_empty():
        return per
    steady = ratios.group_by("rank", *group).agg(k=pl.len(), rmin=pl.col("r").min()).filter(
        (pl.col("k") == traced) & (pl.col("k") >= 3) & (pl.col("rmin") >= STEADY))
    # one rank of the job alone: a culprit's neighbours on its cores or in its pipeline are
    # slowed steadily too, more than it at times; and a fallback where contention hides every
    # rank's ops, not where another rank's own ops flag that rank in more steps than the steady
    # rank's flag it (a culprit beside its steady victim: flagged in 3 and 4 of 4 steps, the
    # victim in none); where they flag no rank more often, contention came and went (DP4, a 1.35x
    # layer fault: its layers 1.43-1.77x its peers' in every step, its ops and another rank's
    # each flagged in one step)
    if len(steady) != 1:
        return per
    counts = per.filter(pl.col("flagged")).group_by("rank").len()
    mine = counts.filter(pl.col("rank") == steady["rank"][0])["len"].sum()
    if (counts["len"] > mine).any():
        return per
    hit = ratios.join(steady.select("rank", "rmin"), on="rank").select("rank", "iteration", "rmin", lr=pl.col("r").log())
    return per.join(hit, on=["rank", "iteration"], how="left").with_columns(
        flagged=pl.col("flagged") | pl.col("lr").is_not_null(),
        effect=pl.max_horizontal(pl.col("effect"), pl.col("lr")),
        steady=pl.col("rmin")).drop("lr", "rmin")


def _layer_ratios(timed: pl.DataFrame, coords: pl.DataFrame, group: list[str],
                  per_call: bool = False) -> tuple[pl.DataFrame, int]:
    """Per (rank, iteration) of a group with two or more ranks that worked on as many tokens
    (``SAME_TOKENS``): ``r``, its layer spans' summed time (``per_call``: their mean, and tokens
    a call) over the mean of the group's other ranks'; and how many iterations were traced. A
    replica that drew longer sequences has more work, not a slower GPU: its iterations are not
    compared (``peers._fit`` weighs tokens op by op)."""
    layers = timed.filter(pl.col("name").str.starts_with(LAYER_SPANS))
    if layers.is_empty():
        return pl.DataFrame(), 0
    how = pl.Expr.mean if per_call else pl.Expr.sum
    per = layers.group_by("rank", "iteration").agg(t=how(own_ns(layers)), tokens=how(pl.col("tokens"))).join(
        coords.select("rank", *group), on="rank", how="left")
    over = [*group, "iteration"]
    same = pl.col("tokens").max().over(over) <= SAME_TOKENS * pl.col("tokens").min().over(over)
    per = per.with_columns(n=pl.len().over(over), total=pl.col("t").sum().over(over)).filter(
        (pl.col("n") >= 2) & (pl.col("tokens") > 0) & same & (pl.col("total") > pl.col("t")))
    return (per.with_columns(r=pl.col("t") / ((pl.col("total") - pl.col("t")) / (pl.col("n") - 1))),
            layers["iteration"].n_unique())
