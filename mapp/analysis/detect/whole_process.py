"""A rank whose whole process ran slower, on CPU processes that share cores: contention, not its
work (stage 1's evidence, the verdict's gate ``gates.overruled_why``).

A fault slows the work it sits in: extra matmuls or sleeps inside a rank's transformer layers
leave its embedding, output layer and the rest of its step at its peers' pace. A process that the
cores it shares with others give less time runs everything slower alike, and on two cores shared
by two ranks that can last the whole run: megatron-core DP2 under mapp's capture, 2 processes on
2 CPUs, no fault (held-out sets of sessions 48-58): in 3 jobs rank 0's layers took 1.29-1.40x its
peer's over the steps, 1.25x or more in each, keeping it waiting at every gradient reduction,
"slow compute 0"; its spans outside the layers 1.27-1.31x theirs, 0.73-0.96 of its layers'
slowdown in logs, its layers 1.01-1.09x beyond them. Of 31 layer faults of 1.33-1.47x in DP2 and
TP2 there (layers 1.16-3.0x their peers'), one reached 0.48 of its layers' slowdown, a fault on
the rank the cores favoured less (layers 1.80x, other spans 1.33x: 1.36x beyond them), the rest
0.24 or less. The verdict's gate asks both: a share of ``WHOLE`` or more, and layers slower than
the other spans by less than the threshold.

Only where a rank's layers are compared with peers running the same program (data or tensor
parallel peers): a pipeline stage's spans outside its layers are its own (the first stage's
embedding, the last's output layer). And only in jobs of two ranks (``peers.compare_peers``):
with more processes than cores, a rank whose layers sleep gives its core away at each sleep and
waits to get it back, and its other spans stretch too (4 processes on 2 CPUs, DP4 and PP2 x DP2,
layer faults of 1.2-1.45x: 3 of 22 faulted ranks ran their other spans 1.44-1.62x their peers',
beside layers 1.62-1.67x).
"""

from __future__ import annotations

import polars as pl

__all__ = ["WHOLE", "whole_process"]

WHOLE = 0.5
"""Share of a rank's layers' slowdown over its peers (in logs) at or beyond which its spans
outside the layers being slower too says its whole process was slowed."""


def whole_process(leaves: pl.DataFrame, coords: pl.DataFrame, group: list[str], is_layer: pl.Expr) -> pl.DataFrame:
    """Per rank: ``layers_ratio`` and ``outside_ratio``, the self time per token of its
    transformer layer spans and of its other leaf spans (``peers.leaf_ops``: waits for peers
    nested in them left out; spans that record their tokens) over the mean of its group's other
    ranks' (``group``: the coordinates peers share), geometric means over the iterations, and
    ``whole_process``: its layers slower and its other spans by ``WHOLE`` or more of that. Only
    span names every rank of the group ran in an iteration count (the same work). Per token, for
    replicas that draw other lengths (on as many tokens it is their time): a small span's fixed cost
    makes the rank on fewer tokens read slower per token in both parts alike, which the share
    and the threshold's margin leave to the layers (DP2, lognormal lengths, 1.4x layers on rank
    1: layers 1.72x per token, other spans 1.29x, named). ``is_layer``: which spans are a
    transformer layer's or its parts' (``peers._IS_LAYER``, the one definition). Empty where
    nothing compares."""
    empty = pl.DataFrame(schema={"rank": pl.Int64, "layers_ratio": pl.Float64, "outside_ratio": pl.Float64,
                                 "whole_process": pl.Boolean})
    if "self_ns" not in leaves.columns or "tokens" not in leaves.columns:
        return empty
    rows = leaves.filter(pl.col("iteration").is_not_null() & (pl.col("tokens").fill_null(0) > 0)).with_columns(
        part=pl.when(is_layer).then(pl.lit("layers")).otherwise(pl.lit("outside")))
    per = rows.group_by("rank", "iteration", "part", "name").agg(t=pl.col("self_ns").sum(), tokens=pl.col("tokens").sum()).join(
        coords.select("rank", *group), on="rank")
    # a name some rank of the group did not run in that iteration is no one's same work
    per = per.with_columns(n=pl.len().over([*group, "iteration", "part", "name"])).filter(
        pl.col("n") == pl.col("rank").n_unique().over([*group, "iteration"]))
    per = per.group_by("rank", *group, "iteration", "part").agg(
        rate=pl.col("t").sum().cast(pl.Float64) / pl.col("tokens").sum().cast(pl.Float64))
    over = [*group, "iteration", "part"]
    per = per.with_columns(n=pl.len().over(over), total=pl.col("rate").sum().over(over)).filter(
        (pl.col("n") >= 2) & (pl.col("total") > pl.col("rate")) & (pl.col("rate") > 0))
    if per.is_empty():
        return empty
    per = per.with_columns(lr=(pl.col("rate") / ((pl.col("total") - pl.col("rate")) / (pl.col("n") - 1))).log())
    layers = pl.col("part") == "layers"
    both = per.filter(layers).select("rank", "iteration", "lr").join(
        per.filter(~layers).select("rank", "iteration", lo="lr"), on=["rank", "iteration"])
    out = both.group_by("rank").agg(pl.col("lr").mean(), pl.col("lo").mean())
    return out.select(pl.col("rank").cast(pl.Int64), layers_ratio=pl.col("lr").exp(), outside_ratio=pl.col("lo").exp(),
                      whole_process=(pl.col("lr") > 0) & (pl.col("lo") >= WHOLE * pl.col("lr")))
