"""Forward passes a pipeline stage runs outside autograd beyond its peers' share, where stages
of one rank each were recorded without input shapes on CPUs.

There the stages are compared on the ops every stage calls as often (``peers.nth_call``), and a
stage that runs its layers' forward again under ``torch.no_grad`` (its passes discarded: a
slower device emulated by repeated work) calls every op of its layers more often than the
others, so none of its ops is compared and its extra calls read as more layers (a user's PP4 of
variable lengths, 1F1B, one stage running each microbatch's forward 2-3 times with the extra
passes under ``no_grad``: "no suspect", the slowed stage "computes 2.4x the lightest stage (more
layers)", four jobs of four).

The profiler tells the two apart: an op dispatched with autograd on carries a ``Sequence
number`` in its args, one under ``torch.no_grad`` none. A stage of more layers calls its
layers' ops more often inside its graph and out of it alike; one that repeats its forward
outside the graph calls them as often inside it as its peers and many times more outside. Per
rank and iteration, over the forward ops (not the backward's, not ``autograd::`` spans) that
every stage calls inside its graph (GEMMs with them), each op's calls to those made inside the
graph is held to the stages' median, and the stage's share is the median of those ratios
weighted by each op's time (``_outside_share``): views and copies, called by the dozen for any
bookkeeping, weigh little beside a layer's GEMMs. (Evaluation forwards and ``no_grad`` helpers
are run by every stage alike and cancel; a forward replayed inside the backward, activation
recomputation, is not counted: ``recompute``; a teacher or a frozen tower run under ``no_grad``
on one stage would read as added work.)

A stage whose forward runs outside its graph 1 + 2t times its peers' share (``_OUTSIDE``, t the
threshold) in nearly every iteration (``CONSISTENT``), while its graph holds its peers' layers
(``graph_units`` within t of 1: a stage of more layers calls more in its graph too), adds
that work: ``added`` (``added_work``'s columns), each op's calls beyond its peers' share priced
at the ranks' median typical call, for the times of processes sharing cores say more of their
neighbours than of the work. How it was set: over 512 jobs of 32 user-written families (4
processes on 2 cores), the stages of 4-stage pipelines that repeated their forward read 1.5-2.6x
counted call for call (a variable-length 1F1B, a zero-bubble and a broadcast pipeline), a
chimera pipeline's 1.2-1.3x (named by other evidence); the stages no fault touched read at most
1.12x, a chimera's stage of three times the layers 1.23x, its graph 1.86x its peers'. Weighed by
time (the 1F1B, the zero-bubble and a 1F1B recomputing 0-2 blocks a stage, 48 jobs): the
repeating stages read 1.75-3.0x, a zero-bubble's stage repeating its forward through its
activation store 1.59x (its graph 1.12x: left to other evidence), every stage no fault touched
0.85-1.02x, recomputing stages 1.00x. Of other programs, where the rule is not asked, a
distillation's teacher ranks read 1.7-1.9x and an actor-learner's learner 1.7-2.2x, their graphs
a fraction of their peers'. With two stages the median is their mean and either could be the odd
one: three stages or more are asked.
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect._stats import weighted_quantiles
from mapp.analysis.detect.recompute import FORWARD as _FORWARD
from mapp.analysis.detect.recompute import replayed
from mapp.analysis.detect.stage_gemms import call_prices
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["forward_calls", "graph_units", "no_grad_passes"]

_OUTSIDE = 2.0
"""How many thresholds above its peers' a stage's share of calls made outside its graph must
stand (at t = 0.1: 1.2x; weighed by time, faults read 1.59x and more, stages no fault touched
1.02x at most)."""


def forward_calls(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (``rank``, ``iteration``, ``name``) of a forward op every rank calls inside its graph
    in that iteration: its calls (``calls``), less those that replay a forward pass inside the
    backward (``replayed``), and those inside the graph (``inside``)."""
    n = ops["rank"].n_unique()
    return (replayed(ops).filter(_FORWARD).with_columns(inside=pl.col("in_graph"))
            .group_by("rank", "iteration", "name")
            .agg(calls=(pl.len() - pl.col("replayed").sum()).cast(pl.Float64),
                 inside=pl.col("inside").sum().cast(pl.Float64))
            .filter((pl.col("inside") > 0).sum().over("iteration", "name") == n))


def graph_units(counts: pl.DataFrame) -> pl.DataFrame:
    """Per (``rank``, ``iteration``): how many layers the rank's graph holds, relative to the
    others (``units``): the ratio, of its calls inside the graph to the ranks' median, that the
    most calls vote for (each op's vote its median calls: ops called once a step, the optimizer's
    or a loss's, are many kinds but few calls, and vote 1 beside a stage of 2.5x the blocks)."""
    g = ["rank", "iteration"]
    per = (counts.with_columns(w=pl.col("inside").median().over("iteration", "name"))
           .with_columns(r=(pl.col("inside") / pl.col("w")).round(6)))
    votes = per.group_by(*g, "r").agg(votes=pl.col("w").sum()).sort([*g, "votes", "r"], descending=[False, False, True, False])
    return votes.group_by(g).agg(units=pl.col("r").first())


def _outside_share(counts: pl.DataFrame, price: pl.DataFrame) -> pl.DataFrame:
    """Per (``rank``, ``iteration``): ``rel``, how many times its peers' share of its calls it
    makes outside its graph: per op, its calls to those inside (``outside``) over the ranks'
    median, and of those the median weighted by the op's time (the ranks' median calls at its
    price). A layer's work is its GEMMs, attention and activations, each called once a layer a
    pass; views, copies and detaches are called by the dozen for any bookkeeping (a checkpoint's
    saved inputs and restored RNG state: 2.8x its peers' ``aten::select`` calls on a stage
    recomputing its blocks, its layers' own ops 1.0x), so counted call for call they outweighed
    the layers (1.26x)."""
    per = (counts.join(price, on="name").filter(pl.col("inside") > 0)
           .with_columns(outside=pl.col("calls") / pl.col("inside"))
           .with_columns(rel=pl.col("outside") / pl.col("outside").median().over("iteration", "name"),
                         w=pl.col("calls").median().over("iteration", "name") * pl.col("price")))
    return weighted_quantiles(per, "rel", "w", ["rank", "iteration"], {"rel": 0.5})


def no_grad_passes(ops: pl.DataFrame, threshold: float) -> pl.DataFrame | None:
    """Per rank (one rank a pipeline stage) whose forward runs outside its graph beyond its
    peers' share in nearly every iteration (the module doc): ``added``, ``added_excess_ns``,
    ``added_base_ns`` and ``added_outside_graph`` (true: what the report says the added work
    is); None where no stage does or the trace records no autograd numbers.
    ``ops``: every compute op of the stages (``rank``, ``iteration``, ``name``, ``self_ns``,
    ``in_graph``: the detector's, whether the profiler recorded the op with autograd on)."""
    if "in_graph" not in ops.columns or ops["rank"].n_unique() < 3:
        return None
    counts = forward_calls(ops)
    if counts.is_empty():
        return None
    g = ["rank", "iteration"]
    price = call_prices(ops.filter(_FORWARD))
    share = _outside_share(counts, price).join(graph_units(counts), on=g)
    share = share.with_columns(repeats=(pl.col("rel") >= 1 + _OUTSIDE * threshold)
                               & ((pl.col("units") - 1).abs() <= threshold))
    ranks = (share.group_by("rank").agg(pl.col("repeats").mean())
             .filter(pl.col("repeats") >= CONSISTENT)["rank"].to_list())
    if not ranks:
        return None
    # each op's calls beyond its peers' share outside the graph, at one price a call
    per = (counts.with_columns(expected=pl.col("inside") * (pl.col("calls") / pl.col("inside")).median().over("iteration", "name"))
           .filter(pl.col("rank").is_in(ranks)).join(price, on="name")
           .with_columns(extra=pl.max_horizontal(pl.col("calls") - pl.col("expected"), pl.lit(0.0)))
           .group_by(g).agg(excess=(pl.col("extra") * pl.col("price")).sum(),
                            base=((pl.col("calls") - pl.col("extra")) * pl.col("price")).sum())
           .join(share.filter(pl.col("repeats")).select(g), on=g)
           .filter(pl.col("base") > 0)
           .group_by("rank").agg(pl.col("excess", "base").median()))
    if per.is_empty():
        return None
    return per.select("rank", added=(pl.col("base") + pl.col("excess")) / pl.col("base"),
                      added_excess_ns="excess", added_base_ns="base", added_outside_graph=pl.lit(True))
