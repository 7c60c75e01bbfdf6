"""Work sized by a rank's data: a rank slower than its peers on a few ops only, at their pace on
the ops that make most of their compute, computes on more data there, not on a slower device.

A slower GPU, or a core another process shares, is slower on everything it computes. Work that
the data or the sharding plan sizes swells only the ops that handle it: the owner of a recommender
model's hottest embedding tables takes longer over its sparse gradients and their optimizer's
update (4 gloo processes on 2 cores, a user's DLRM by hand, the bags of rank 0's tables 6x longer:
its ``aten::coalesce`` 66.7 ms a step against its peers' 9.6-25.0, its sparse backward 27.5 against
1.8-3.9, while its matmuls, most of their compute, ran at 0.9-1.0x theirs: "slow compute 0",
1.57x, before). Without recorded shapes such calls pair with its peers' as the same work, slower.

So a rank's *pace* is the median, over its peers' compute, of how much slower it ran each op:
the ratio of its time to its peers' on each op name, weighted by their time on it. A device
slower by f gives a pace of about f; work swollen on ops that are a minority of the peers'
compute leaves it near 1 while the whole compute's ratio grows. ``paced_split`` measures it
(stage 1's evidence), ``gates`` judges by it. Ops a rank calls more often than its peers are work
added, which ``added_work`` weighs and which passes that gate.

Data can also run a program's loops more often: a recurrent net steps its cells once per token,
so a replica of longer sentences calls each op of its loop more often, each call at its peers'
pace. How many times its peers' calls it makes is its ``data_scale`` (``same_work._data_scales``);
``looped_by_data`` takes a compute no slower than that scale for its data's.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from mapp.analysis.detect._stats import others_median
from mapp.analysis.detect.added_work import added_cost_ns
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.peers import nth_call
from mapp.analysis.detect.same_work import self_times
from mapp.analysis.ingest.kineto import OPTIMIZER_STEP

__all__ = ["PACED_KINDS", "PACED_PART", "PACED_RANKS", "heavier_than_its_optimizer", "input_floors", "larger_inputs",
           "looped_by_data", "paced_split", "sized_by_data", "sizes_unseen_notes"]

PACED_KINDS = 20
"""The fewest op names a rank's peers must spend their compute on for its pace to mean anything:
a profiler's op-level trace has hundreds; a trace of spans per layer a handful, where the median
over them is one layer's."""


PACED_RANKS = 3
"""The fewest ranks of a stage for their paces to mean anything: of two, each doing work of its own
reads slower than the other on it, and its peer's pace is one rank's (HTA's public
``trace_filter`` traces, 2 of a 128-rank job's ranks with a sample of their events: rank 0 1.73x
its peer at a pace of 0.41x, rank 1 1.17x at 1.02x; neither named either way, ``verdict._mirrored_pair``
says why)."""


FLOOR_RANKS = 2
"""The fewest ranks of a program whose fastest calls ``input_floors`` compares. Unlike a pace, a
floor says which of two is the odd one: the rank handed larger inputs is slower on even its
fastest calls of most ops, its optimizer's no slower (its peer reads faster on both), and a
slower device is slower on its optimizer too. (A user's replica exchange on 4 gloo processes,
its swap partners two programs of two ranks, rank 3 handed 3x the chains every step: "slow
compute 3", 2.9x, before.)"""


def paced_split(events: pl.DataFrame, coords: pl.DataFrame) -> pl.DataFrame | None:
    """Per rank of a pipeline stage (``coords``' ``pp``) of ``PACED_RANKS`` ranks or more:
    ``pace``, the weighted median over op names of its compute (self time, per traced iteration)
    against its peers' (the median of the other ranks of its stage), each name weighted by its
    peers' time on it, and ``pace_kinds``, how many names that median is over. None where no
    stage has that many ranks."""
    timed = events.filter(pl.col("iteration").is_not_null())
    # (spans per layer, as mapp's capture and the simulator write them, name too few ops for a
    # pace: not worth their self times, 1,024 ranks' worth in the analysis-time benchmark)
    if timed.filter(pl.col("cat") == "compute")["name"].n_unique() < PACED_KINDS:
        return None
    ops = self_times(timed)
    if ops.is_empty():
        return None
    stage = coords.select("rank", pp=pl.col("pp").fill_null(0)) if "pp" in coords.columns else \
        coords.select("rank", pp=pl.lit(0))
    steps = ops.group_by("rank").agg(steps=pl.col("iteration").n_unique())
    per = (ops.group_by("rank", "name").agg(t=pl.col("self_ns").sum()).join(steps, on="rank")
           .with_columns(t=pl.col("t") / pl.col("steps")).drop("steps")
           .join(stage, on="rank", how="left").with_columns(pl.col("pp").fill_null(0)))
    ranks = per.select("rank", "pp").unique().filter(pl.len().over("pp") >= PACED_RANKS)
    if ranks.is_empty():
        return None
    # every rank of a stage with every name the stage calls (0 where it never called it)
    grid = (ranks.join(per.select("pp", "name").unique(), on="pp")
            .join(per, on=["rank", "pp", "name"], how="left").with_columns(pl.col("t").fill_null(0.0))
            .sort("pp", "name", "rank"))
    gid = grid.select(pl.struct("pp", "name").rank("dense")).to_series().to_numpy()
    grid = grid.with_columns(peer=pl.Series(others_median(gid, grid["t"].to_numpy().astype(float))))
    rows = []
    for (rank,), g in grid.filter(pl.col("peer") > 0).group_by("rank"):
        ratio = (g["t"] / g["peer"]).to_numpy()
        weight = g["peer"].to_numpy()
        order = np.argsort(ratio)
        cum = np.cumsum(weight[order])
        pace = float(ratio[order][np.searchsorted(cum, 0.5 * cum[-1])])
        rows.append((rank, pace, len(ratio)))
    if not rows:
        return None
    return pl.DataFrame(rows, schema={"rank": grid.schema["rank"], "pace": pl.Float64, "pace_kinds": pl.Int64},
                        orient="row")


def sized_by_data(row: dict, threshold: float) -> bool:
    """Whether a rank's slowness lies in a few ops: while its compute as a whole is slower by the
    ``threshold``, its pace (``paced_split``, over ``PACED_KINDS`` op names or more) is within half
    the threshold of its peers', or within a quarter of its whole slowdown (``PACED_PART``): its
    data swelled those ops (imbalance), no device ran slower. Not where the calls it makes beyond
    its peers' (``added_work``), or of kinds no peer ran (``same_work``'s ``alone_ns``), cost it the
    threshold's share of its compute: extra calls are work added, and on cores shared by more
    processes the rank that makes them gets the cores while its peers wait, its other ops faster
    than theirs (Lightning DDP, 4x the layers' matmuls on one of 4 processes on 2 cores: pace 0.87,
    its surplus calls 100 ms a step by its clock, 358 ms busy)."""
    pace, kinds, slowdown = row.get("pace"), row.get("pace_kinds"), row.get("slowdown")
    if pace is None or kinds is None or slowdown is None or kinds < PACED_KINDS:
        return False
    added = max(added_cost_ns(row), row.get("alone_ns") or 0.0)
    if added > 0 and added >= threshold * (row.get("busy_ns") or 0.0):
        return False
    slowdown = float(slowdown)
    return slowdown >= 1 + threshold and pace < 1 + max(threshold / 2, PACED_PART * (slowdown - 1))


def looped_by_data(row: dict, threshold: float) -> bool:
    """Whether a rank's data ran the program's loops more often than its peers' by the threshold
    or more (its ``data_scale``, ``same_work._data_scales``: its calls of the kinds of op whose
    calls differ between ranks, over its peers'), and its compute is no slower than that scale
    allows (``slowdown`` at most half a threshold over it, or over it by no more than the ranks'
    scatter explains: ``above_scale`` false): its data's work (imbalance), no device ran slower.
    Not where the calls it makes beyond its peers' at its scale (``added_work``), or of kinds no
    peer ran, cost it the threshold's share of its compute (as ``sized_by_data``).
    (A user's LSTM seq2seq under DDP, one replica's sentences 1.6x as long: its scale 1.54, its
    compute 1.41x its peers', "slow compute" before.)"""
    scale, slowdown = row.get("data_scale"), row.get("slowdown")
    if scale is None or slowdown is None or scale < 1 + threshold:
        return False
    # (nor where the rank calls nearly every kind of op more often: its whole step run again, not
    # a loop its data runs longer, outside which the step's other work stays)
    if runs_step_again(row, threshold):
        return False
    added = max(added_cost_ns(row), row.get("alone_ns") or 0.0)
    if added > 0 and added >= threshold * (row.get("busy_ns") or 0.0):
        return False
    # no slower than its scale, or not by more than the ranks' scatter singles out (stage 1's own
    # test at the scale, ``above_scale``): one replica's sentences 1.6x as long on 4 processes
    # sharing 2 cores, its scale 1.54 and its compute 1.73x, the others' 0.84-1.0x (1.12x its
    # scale at z 0.9, "slow compute" before)
    return float(slowdown) <= scale * (1 + threshold / 2) or row.get("above_scale") is False


def runs_step_again(row: dict, threshold: float) -> bool:
    """Whether a rank calls nearly every kind of op more often than its peers, by the threshold
    or more (its ``data_scale``, the kinds it calls as often under ``WHOLE_STEP`` of its peers'
    time): its whole step run again, counted, not timed."""
    scale, fixed = row.get("data_scale"), row.get("fixed_part")
    return scale is not None and fixed is not None and scale >= 1 + threshold and fixed < WHOLE_STEP

WHOLE_STEP = 0.3
"""A rank whose data runs the program's loops more often still calls the rest of its step as
often as its peers: the kinds it calls as often hold at least this share of its peers' time on
the kinds they share (a user's LSTM seq2seq, one replica's sentences 1.5x as long: 63-66%). Under
it, the rank runs its whole step again (a BFS rank expanding its frontier and pushing PageRank 2-3x:
16%; a tempering chain's Langevin passes 2.5x: 5%; a PBT member's training 4-5x: 4-7%): work
added, not its data's loops (``looped_by_data``). A rank handed more data that its program takes
by running the whole step again reads the same (a DSGD rank of 3x the ratings, a Chimera stage of
3x the block passes: named "slow compute"): its calls cannot tell the two apart."""


PACED_PART = 0.4
"""A rank whose pace is slower than its peers' by less than this part of its whole slowdown is
slower on a few ops only (``sized_by_data``): a device slower by f runs its ops at a pace of about
f, whatever their share. The owner of a recommender's hot tables, 4 gloo processes with 4 cores
each, ran 1.59-1.65x its peers' compute at a pace of 1.07-1.08 (a user's DLRM by hand, the bags
of its tables 3-6x longer), past half a threshold of 0.1. Of the 18 ranks a fault slowed by 10%
or more in the committed corpora whose pace is known, 12 ran at a pace 0.86-2.7 times their
slowdown's excess (1.18 at 1.20, 1.43 at 1.22, 3.61 at 1.96); the other 6 made calls beyond their
peers' worth 26-62% of their compute (the guard above) or slept on their host (no device).

0.4, not 0.25 (until the ninety-first session): a user's megatron-core MoE, one replica's
sequences 2x (no shapes), computed 1.54x its peers at a pace of 1.20 on the GPU host's cores
(0.36 of its excess) and 1.62x at 1.15 on 2 cores (0.25): its attention 4x theirs, its share of
the experts' matmuls, which the all-to-all spreads over every rank, 1.0x, its optimizer 0.99x.
Read "slow compute 2" on the first. Over the flagged ranks of 741 recorded jobs (the corpora
and the users74-91 batteries), the ranks whose pace lies between 0.25 and 0.4 of their excess
were all of imbalance jobs but one, a rank not the faulted one; no faulted rank without calls
beyond its peers' ran under 0.5."""


def sizes_unseen_notes(peers: PeerEvidence, suspects: list, threshold: float) -> list[str]:
    """A note for each rank named slow compute on its ops' times alone where the trace records no
    input shapes (``PeerEvidence.by_order``) and the rank makes no calls beyond its peers' (``added``): a
    replica handed larger inputs in every step (its token budget, its graphs, its images 1.5x
    its peers') runs the same calls each slower by one factor, which is what a slower device
    does, and its ops' times tell the two apart only where its optimizer's can be set beside them
    (``larger_inputs``: a slower device slows the optimizer too; not where the trace holds no
    optimizer spans, as a job stepping its parameters by hand). Recorded shapes do: the same op
    on larger inputs is other work (``same_work``)."""
    if not peers.by_order or peers.ranks.is_empty():
        return []
    rows = {r["rank"]: r for r in peers.ranks.iter_rows(named=True)}
    out = []
    for s in suspects:
        row = rows.get(s.rank)
        # (calls it makes beyond its peers', worth the threshold of their time on those ops, are
        # work added, which larger inputs do not make)
        if s.kind != "slow_compute" or row is None or (row.get("added") or 1.0) >= 1 + threshold:
            continue
        # (where its fastest calls could be set against its optimizer's, ``larger_inputs`` judged it)
        if (row.get("input_kinds") or 0) >= PACED_KINDS and (row.get("param_kinds") or 0) >= PARAM_KINDS:
            continue
        out.append(f"rank {s.rank}: named on its ops' times alone, the trace recording no input shapes; a "
                   "replica handed larger inputs in every step would read the same (profile with "
                   "record_shapes=True to tell its data from its device)")
    return out


UNSLICED_NS = (200_000, 2_000_000)
"""The calls whose fastest run on a rank tells its work per call (ns, by its peers' fastest run):
long enough that dispatch does not make their time, short enough that some run uninterrupted on
cores shared by more processes (a scheduler's time slice is a few ms)."""

PARAM_KINDS = 5
"""The fewest op kinds inside the optimizer's step for their time to tell a slower device."""


def input_floors(events: pl.DataFrame, coords: pl.DataFrame) -> pl.DataFrame | None:
    """Per rank of a program of ``FLOOR_RANKS`` ranks or more, on CPU processes recorded without
    input shapes: ``input_floor``, the median over its op kinds of its fastest call against its
    peers' (the median of the others' fastest), over the kinds whose peers' fastest call lies in
    ``UNSLICED_NS``, and ``input_kinds``, how many; ``param_floor``, the median over the ops
    inside the optimizer's step and ``zero_grad`` (``cat`` "optimizer" spans), which work on the
    parameters whatever the data, of each one's call against its peers' in the same iteration
    (``_iteration_ratios``), and ``param_kinds``, how many; where fewer than ``PARAM_KINDS`` pair
    one to one, the whole steps' (``_whole_steps``). None where the trace has shapes or GPU
    kernels (their sizes tell), or no optimizer spans.

    The optimizer's calls are compared iteration by iteration, not by their fastest: they take
    microseconds, which no time slice interrupts, but which the machine's state of the moment
    sets (the lent GPU host's cores, a user's fine-tune, one replica's batch 2x: its optimizer's
    calls took 6.4-7.1 us in every step, its peers' 3.9-4.4 us in some steps and 6.3-7.4 us in
    the others, in the same steps as its own; by their fastest its optimizer read 1.56x, a slower
    device, and it was named "slow compute 0", 1.74x; step by step it reads 1.05x).

    A kind is an op's n-th call in an iteration, where every rank of the program calls it as
    often (``peers.nth_call``; only called where stage 1 paired calls so, every rank's ``pp``
    known). A replica handed larger inputs in every step (a token
    budget, graphs, images 1.5x its peers') runs each such call on more data, so even its
    fastest is slower (4 gloo processes on 2 cores: 1.4-2.1x on the mid-sized calls of an MLM,
    a GNN, a ResNet) while its optimizer's are its peers' (0.8-1.1x). A process descheduled by
    a busy thread beside it stretches its calls, but not the quickest of each on calls shorter
    than a time slice (1.0-1.05x), and a slower device slows the optimizer too."""
    timed = events.filter(pl.col("iteration").is_not_null())
    if timed.filter(pl.col("lane").str.starts_with("stream:")).height:
        return None
    if "shape" in timed.columns and timed["shape"].null_count() < len(timed):
        return None
    spans = timed.filter(pl.col("cat") == "optimizer").select(
        "rank", "lane", opt_start=pl.col("ts_ns"), opt_end=pl.col("ts_ns") + pl.col("dur_ns")).sort("opt_start")
    if spans.is_empty():
        return None
    # (the n-th call of an op that every rank of its program calls as often: ``shape`` "#n")
    ops = self_times(nth_call(timed, coords)).filter(pl.col("shape").str.starts_with("#"))
    if ops.is_empty():
        return None
    ops = (ops.sort("ts_ns").join_asof(spans, left_on="ts_ns", right_on="opt_start", by=["rank", "lane"],
                                       strategy="backward", check_sortedness=False)
           .with_columns(param=pl.col("opt_end").is_not_null() & (pl.col("ts_ns") + pl.col("dur_ns") <= pl.col("opt_end")))
           .drop("pp", strict=False).join(coords.select("rank", "pp"), on="rank", how="left"))
    ranks = ops.group_by("pp").agg(n=pl.col("rank").n_unique())
    kind = ["pp", "name", "shape"]
    fast = (ops.group_by("rank", *kind).agg(fast=pl.col("self_ns").min(), param=pl.col("param").all(),
                                            its=pl.col("iteration").n_unique())
            .filter(pl.col("its") >= 3).join(ranks, on="pp")
            .filter((pl.col("n") >= FLOOR_RANKS) & (pl.len().over(kind) == pl.col("n")))
            .sort(*kind, "rank"))
    if fast.is_empty():
        return None
    gid = fast.select(pl.struct(*kind).rank("dense")).to_series().to_numpy()
    fast = fast.with_columns(peer=pl.Series(others_median(gid, fast["fast"].to_numpy().astype(float))))
    fast = fast.filter(pl.col("peer") > 0).join(_iteration_ratios(ops, kind), on=["rank", *kind], how="left")
    lo, hi = UNSLICED_NS
    rows = []
    for (rank,), g in fast.group_by("rank"):
        mid = g.filter(~pl.col("param") & pl.col("peer").is_between(lo, hi))
        par = g.filter(pl.col("param"))
        rows.append((rank, _median(mid["fast"] / mid["peer"]), mid.height, _median(par["ratio"]), par.height))
    floors = pl.DataFrame(rows, schema={"rank": fast.schema["rank"], "input_floor": pl.Float64, "input_kinds": pl.Int64,
                                        "param_floor": pl.Float64, "param_kinds": pl.Int64}, orient="row")
    whole = _whole_steps(timed, coords)
    if whole is None:
        return floors
    # (where too few of the optimizer's calls pair one to one, its whole steps)
    few = pl.col("param_kinds") < PARAM_KINDS
    return floors.join(whole, on="rank", how="left").with_columns(
        param_floor=pl.when(few & pl.col("step_floor").is_not_null()).then("step_floor").otherwise("param_floor"),
        param_kinds=pl.when(few & pl.col("step_floor").is_not_null()).then("step_kinds").otherwise("param_kinds"),
    ).drop("step_floor", "step_kinds")


def _whole_steps(timed: pl.DataFrame, coords: pl.DataFrame) -> pl.DataFrame | None:
    """Per rank of a program of ``FLOOR_RANKS`` ranks or more: ``step_floor``, the median over
    iterations of its optimizer's steps' time (``torch.optim``'s ``kineto.OPTIMIZER_STEP`` spans)
    against its peers' median in the same iteration, and ``step_kinds``, the fewest op names any
    rank of its program calls inside them. A distributed optimizer steps each rank's shard of the
    parameters, of one size on every rank but of other tensors, so its calls pair with no peer's
    one to one (megatron-core's, 4 gloo processes: 5, 7, 8 and 10 ``aten::addcdiv_`` calls a step
    by rank), while its whole step is the same work: a replica handed twice the batch stepped in
    0.95x its peers' time on 2 cores (its compute 1.72x) and 1.05x on the lent host's cores (1.65x).
    None where no program has that many ranks with steps."""
    steps = timed.filter((pl.col("cat") == "optimizer") & pl.col("name").str.starts_with(OPTIMIZER_STEP))
    if steps.is_empty():
        return None
    program = coords.select("rank", "pp")
    per = (steps.group_by("rank", "iteration").agg(t=pl.col("dur_ns").sum().cast(pl.Float64))
           .join(program, on="rank", how="left")
           .filter(pl.col("rank").n_unique().over("pp") >= FLOOR_RANKS)
           .filter(pl.len().over("pp", "iteration") >= FLOOR_RANKS).sort("pp", "iteration", "rank"))
    if per.is_empty():
        return None
    gid = per.select(pl.struct("pp", "iteration").rank("dense")).to_series().to_numpy()
    per = per.with_columns(peer=pl.Series(others_median(gid, per["t"].to_numpy()))).filter(pl.col("peer") > 0)
    spans = steps.select("rank", "lane", s=pl.col("ts_ns"), e=pl.col("ts_ns") + pl.col("dur_ns")).sort("s")
    inside = (timed.filter(pl.col("cat") == "compute").sort("ts_ns")
              .join_asof(spans, left_on="ts_ns", right_on="s", by=["rank", "lane"], strategy="backward",
                         check_sortedness=False)
              .filter(pl.col("e").is_not_null() & (pl.col("ts_ns") + pl.col("dur_ns") <= pl.col("e")))
              .group_by("rank").agg(kinds=pl.col("name").n_unique()).join(program, on="rank", how="left"))
    kinds = inside.group_by("pp").agg(step_kinds=pl.col("kinds").min())
    return (per.group_by("rank", "pp").agg(step_floor=(pl.col("t") / pl.col("peer")).median())
            .join(kinds, on="pp", how="left").with_columns(pl.col("step_kinds").fill_null(0).cast(pl.Int64))
            .select("rank", "step_floor", "step_kinds"))


def _median(ratios: pl.Series) -> float | None:
    """The median of a rank's ratios to its peers, one per kind, each one vote (how broadly the
    rank is slower: work added to a few ops, a layer's wider matmuls, moves a few kinds, larger
    inputs most); None for no kinds."""
    return float(ratios.median()) if len(ratios) else None


def _iteration_ratios(ops: pl.DataFrame, kind: list[str]) -> pl.DataFrame:
    """Per (rank, ``kind``): ``ratio``, the median over iterations of its call's time
    against the median of its peers' calls of the kind in the same iteration."""
    per = (ops.group_by("rank", *kind, "iteration").agg(t=pl.col("self_ns").min().cast(pl.Float64))
           .filter(pl.len().over(*kind, "iteration") >= 2).sort(*kind, "iteration", "rank"))
    if per.is_empty():
        return pl.DataFrame(schema={"rank": ops.schema["rank"], **{k: ops.schema[k] for k in kind if k in ops.columns},
                                    "ratio": pl.Float64})
    gid = per.select(pl.struct(*kind, "iteration").rank("dense")).to_series().to_numpy()
    per = per.with_columns(peer_t=pl.Series(others_median(gid, per["t"].to_numpy())))
    per = per.filter(pl.col("peer_t") > 0)
    return per.group_by("rank", *kind).agg(ratio=(pl.col("t") / pl.col("peer_t")).median())


def larger_inputs(row: dict, threshold: float) -> bool:
    """Whether a rank's slower compute is its inputs': even its fastest calls of mid-sized work
    are slower, most kinds of them, by twice the threshold or more (``input_floor``, over
    ``PACED_KINDS`` kinds or more) and by that much more than its optimizer's, which ran at its
    peers' pace (``param_floor`` within half a threshold, over ``PARAM_KINDS`` kinds or more);
    its compute no slower than its inputs explain (a threshold over), and no calls beyond its
    peers' worth the threshold: a replica handed larger inputs in every step (imbalance), no
    device ran slower. (A busy thread beside one of 4 processes on 2 cores, no skew: its floor
    1.17, its optimizer's 1.04, named; replicas of 1.5-2x inputs: 1.28-2.29 against 0.79-1.08.)"""
    floor, kinds = row.get("input_floor"), row.get("input_kinds")
    param, pkinds = row.get("param_floor"), row.get("param_kinds")
    if floor is None or param is None or (pkinds or 0) < PARAM_KINDS:
        return False
    apart = floor >= INPUTS_APART * param
    if (kinds or 0) < (PACED_KINDS // 2 if apart else PACED_KINDS):
        return False
    if (row.get("added") or 1.0) >= 1 + threshold:
        return False
    slowdown = float(row.get("slowdown") or 1.0)
    return (floor >= 1 + 2 * threshold and floor >= param * (1 + 2 * threshold)
            and (param < 1 + threshold / 2 or apart) and slowdown <= floor * (1 + threshold))



def heavier_than_its_optimizer(row: dict, threshold: float) -> bool:
    """Whether a rank's slower compute is its inputs' where too few of its calls are mid-sized for
    their fastest runs to tell (``input_floor`` over fewer than half of ``PACED_KINDS`` kinds): its
    compute as a whole, over the same calls as its peers' (no ``data_scale`` and no calls beyond
    theirs worth the threshold), is ``INPUTS_APART`` times its optimizer's or more, which ran at
    its peers' pace (``param_floor`` within half a threshold, over ``PARAM_KINDS`` kinds or more).
    A slower device slows its optimizer alike, and a process descheduled by a busy thread beside
    it reads a little slower on its typical calls only (a busy thread beside one of 4 processes on
    2 cores: 1.36x, its optimizer 1.04x). A user's evolution strategies on 4 gloo processes, one
    rank handed 3x the episodes of a small MLP policy in one batch: its calls take microseconds,
    2 kinds mid-sized, its compute 2.19x at z 28.8, its optimizer's 0.95x over 8 kinds: "slow
    compute 3" before. (Where its calls are mid-sized, ``larger_inputs`` asks for more.)"""
    param, pkinds, slowdown = row.get("param_floor"), row.get("param_kinds"), row.get("slowdown")
    if param is None or slowdown is None or (pkinds or 0) < PARAM_KINDS or param <= 0:
        return False
    if (row.get("input_kinds") or 0) >= PACED_KINDS // 2:
        return False
    if (row.get("added") or 1.0) >= 1 + threshold or (row.get("data_scale") or 1.0) >= 1 + threshold:
        return False
    return param < 1 + threshold / 2 and float(slowdown) >= INPUTS_APART * param

INPUTS_APART = 2.0
"""An input floor this many times the rank's optimizer's floor is larger inputs (``larger_inputs``)
however its optimizer compares with its peers', and over half of ``PACED_KINDS`` kinds: a device
slower by f runs its parameter work f times slower too, so no one device makes a rank's
mid-sized calls twice as slow as its optimizer's. A user's skip-gram with sparse embeddings, one
replica's batch 4x (4 processes on 2 cores): its floor 4.16 over 14 kinds, its optimizer's 1.17
(its sparse updates a little larger), "slow compute 1" at 2.67x before. Over the ranks of 399
recorded jobs with floors over 8 kinds or more (the corpora, the users74-93 batteries but 93b;
``benchmarks/detect_evidence.py``'s "larger inputs" rules measure it), no faulted rank without calls beyond its peers' came above
1.38 (a data-path sleep on a loader's workers); with them, 1.58, a rank also handed 1.6x the
data; ranks of imbalance jobs up to 3.6."""
