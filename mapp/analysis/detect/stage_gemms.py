"""GEMMs a pipeline stage adds to its layers, where stages of one rank each were recorded
without input shapes (``record_shapes=False``, the profiler's default) on CPUs.

There the stages are compared on the ops every stage calls as often (``peers.nth_call``), and
the GEMMs are not among them: the last stage's output layer makes three ``aten::mm`` calls a
microbatch beside its layers' twelve a layer, so work added to one stage's layers went unseen
(2 processes on 2 cores, megatron-core PP2 under the profiler's defaults, one layer a stage:
1.4-1.55x the first stage's layers' matmuls read "no suspect"; 1.4x the last stage's too).

The calls are exact however the clocks scatter. Each stage's layers are counted by the calls of
every op that all stages run, GEMMs aside (``layer_units``: a stage of three layers calls each of
a layer's ops three times as often); the GEMM calls a layer makes are the leanest stage's per
layer. Beyond its layers' share a stage calls GEMMs only for its own program, which, in a
megatron-core GPT model, only the last stage has: its output layer (forward and two gradients:
at most a quarter of one layer's GEMMs, ``OUTPUT_SHARE``). The first stage's own program is the
embedding, a lookup; a middle stage runs layers only. What a stage calls beyond that is work
added to it, weighed as ``added_work`` weighs the ops a rank calls more often than its peers
(``added``, ``added_excess_ns``, ``added_base_ns``), every call of a GEMM op at one price (the
ranks' median typical call), for the times of processes sharing cores say more of their
neighbours than of the work.

(A first stage that runs GEMMs of its own, a vision encoder before the language model's layers,
would read as adding them; no such job was seen.)

The first stage may call *fewer*: where its input is data, not an embedding's output, nothing
asks for that input's gradient, and its first linear layer skips one of its backward GEMMs (a
``torch.distributed.pipelining`` PP8 of one MLP block a stage, no fault: the first stage 3
``aten::mm`` calls a microbatch to the others' 4; held to it, every middle stage read "slow
compute" 1.33x). So where three stages or more stand, the first stage's calls do not set a
layer's; of two, the last stage has no other to be held to, and they still do.
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.same_work import QUICK
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["GEMMS", "OUTPUT_SHARE", "call_prices", "layer_units", "stage_gemms", "with_stage_gemms"]

GEMMS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
"""The CPU ops that run a GEMM themselves (``aten::matmul`` and ``aten::linear`` call these)."""

OUTPUT_SHARE = 0.25
"""The most GEMM calls the last stage's output layer adds to its layers', as a share of them: 3 a
microbatch (its forward and two gradients) beside a transformer layer's 12 (four linear layers,
each a forward and two gradients), a smaller share the more layers a stage holds. Over 205 CPU
jobs of one rank a stage (PP2 and PP4 under the profiler, its shapes removed where it recorded
them), the last stages no fault touched called 1.0-1.25x their layers' share; those given extra
matmuls 1.67-4.1x (the loosest bound before, twice their layers', missed one at 1.67-1.73x:
megatron-core PP2, 1.44x the last stage's layer matmuls, "no suspect")."""


def layer_units(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (``rank``, ``iteration``): how many layers the rank's stage runs, relative to the
    others (``units``): the most common ratio, over the ops every rank calls in that iteration
    (GEMMs aside), of its calls to the ranks' median calls of that op (ties: the one nearest
    their median). A layer's ops are many and each called as often a layer, so their ratio is
    exact, the layers' ratio (2 processes on 2 cores, PP2 under the profiler without shapes,
    one layer on the first stage and two on the last: 0.667 and 1.333); ops called once a step
    or a microbatch, or by an end stage's own program, scatter (weighted by time, the ratios of
    PP4's four stages of one layer each read 0.96-1.18)."""
    n = ops["rank"].n_unique()
    g = ["rank", "iteration"]
    per = (ops.filter(~pl.col("name").is_in(GEMMS))
           .group_by(*g, "name").agg(calls=pl.len().cast(pl.Float64))
           .filter(pl.len().over("iteration", "name") == n)
           .with_columns(r=(pl.col("calls") / pl.col("calls").median().over("iteration", "name")).round(6)))
    votes = (per.group_by(*g, "r").agg(votes=pl.len())
             .join(per.group_by(g).agg(mid=pl.col("r").median()), on=g)
             .sort([*g, "votes", (pl.col("r") - pl.col("mid")).abs()], descending=[False, False, True, False]))
    return votes.group_by(g).agg(units=pl.col("r").first())


def call_prices(ops: pl.DataFrame) -> pl.DataFrame:
    """Per ``name``: one price a call (``price``), the ranks' median typical call (``QUICK``):
    work a stage adds is counted by its calls at this price, for the times of processes sharing
    cores say more of their neighbours than of the work."""
    return (ops.group_by("rank", "name").agg(q=pl.col("self_ns").quantile(QUICK).cast(pl.Float64))
            .group_by("name").agg(price=pl.col("q").median()))


def stage_gemms(ops: pl.DataFrame, coords: pl.DataFrame) -> pl.DataFrame | None:
    """Per rank (one rank a pipeline stage, ``coords``'s ``pp``): ``added``, ``added_excess_ns``
    and ``added_base_ns`` of the GEMMs its stage calls beyond its layers' (and, the last stage,
    its output layer's), where it does so in nearly every iteration (``CONSISTENT``); None where
    no stage does. ``ops``: every compute op of the stages (``rank``, ``iteration``, ``name``,
    ``self_ns``), recorded without shapes."""
    units = layer_units(ops)
    gemm = ops.filter(pl.col("name").is_in(GEMMS))
    if units.is_empty() or gemm.is_empty():
        return None
    price = call_prices(gemm)
    stages = coords.filter(pl.col("pp").is_not_null())
    last = stages.filter(pl.col("pp") == pl.col("pp").max())["rank"].to_list()
    calls = (gemm.group_by("rank", "iteration", "name").agg(calls=pl.len().cast(pl.Float64))
             .join(units, on=["rank", "iteration"]))
    # every rank in every iteration with every GEMM op (0 calls where it made none)
    grid = (calls.select("rank", "iteration").unique().join(calls.select("name").unique(), how="cross")
            .join(calls, on=["rank", "iteration", "name"], how="left").drop("units")
            .join(units, on=["rank", "iteration"]).with_columns(pl.col("calls").fill_null(0.0)))
    # a layer's calls: the leanest stage's per layer (a middle stage, like the first, is held to
    # them), the first stage's aside where another stage than the last stands beside it (its
    # input may need no gradient: the module doc); the last stage's, with its output layer's at
    # most (a call more for rounding)
    per_unit = pl.col("calls") / pl.col("units")
    first = stages.filter(pl.col("pp") == pl.col("pp").min())["rank"].to_list()
    if stages["pp"].n_unique() >= 3:
        per_unit = pl.when(pl.col("rank").is_in(first)).then(None).otherwise(per_unit)
    lean = pl.col("units") * per_unit.min().over("iteration", "name")
    grid = grid.with_columns(expected=pl.when(pl.col("rank").is_in(last)).then((1 + OUTPUT_SHARE) * lean).otherwise(lean))
    grid = grid.with_columns(more=pl.col("calls") > pl.col("expected") + 0.5).join(price, on="name")
    traced = grid.group_by("rank").agg(n_it=pl.col("iteration").n_unique())
    more = (grid.group_by("rank", "name").agg(more=pl.col("more").mean())
            .filter(pl.col("more") >= CONSISTENT).select("rank", "name"))
    if more.is_empty():
        return None
    per = (grid.join(more, on=["rank", "name"]).group_by("rank", "iteration")
           .agg(own=(pl.col("calls") * pl.col("price")).sum(), base=(pl.col("expected") * pl.col("price")).sum())
           .filter(pl.col("base") > 0)
           .group_by("rank").agg(pl.col("own", "base").median(), n=pl.len())
           .join(traced, on="rank").filter(pl.col("n") >= CONSISTENT * pl.col("n_it")))
    if per.is_empty():
        return None
    return per.select("rank", added=pl.col("own") / pl.col("base"), added_excess_ns=pl.col("own") - pl.col("base"),
                      added_base_ns="base")


def with_stage_gemms(ranks: pl.DataFrame, gemms: pl.DataFrame | None, ops: pl.DataFrame) -> pl.DataFrame:
    """``ranks`` (stage 1's per-rank table over the ops the stages call alike) with the GEMMs a
    stage adds (``stage_gemms``) as its added work and its excess time, and its whole compute (median per
    iteration, every op's self time) as ``all_work_ns``, against which added work is weighed
    (``added_work.adds_work``): the ops called alike are a few percent of a stage's work."""
    whole = (ops.group_by("rank", "iteration").agg(w=pl.col("self_ns").sum().cast(pl.Float64))
             .group_by("rank").agg(whole=pl.col("w").median()))
    ranks = ranks.join(whole, on="rank", how="left").with_columns(
        all_work_ns=pl.max_horizontal(pl.col("all_work_ns").fill_null(0.0), pl.col("whole").fill_null(0.0))).drop("whole")
    if gemms is None:
        return ranks
    g = gemms.rename({"added": "g_added", "added_excess_ns": "g_excess", "added_base_ns": "g_base"})
    # (where the stage's GEMMs are its added work, the clock's figure of the other reading is not)
    real = [pl.when(pl.col("g_excess").is_null()).then(pl.col(c)).alias(c)
            for c in ("added_real_ns", "added_base_real_ns") if c in ranks.columns]
    # (the time a stage loses over its peers is that work too: the ops called alike hold none of it)
    return ranks.join(g, on="rank", how="left").with_columns(
        *real,
        added=pl.coalesce("g_added", "added"),
        added_excess_ns=pl.coalesce("g_excess", "added_excess_ns"),
        added_base_ns=pl.coalesce("g_base", "added_base_ns"),
        excess_ns=pl.max_horizontal("excess_ns", pl.col("g_excess").fill_null(float("-inf"))),
    ).drop("g_added", "g_excess", "g_base")
