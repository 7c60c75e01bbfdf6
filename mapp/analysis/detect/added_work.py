"""Work a rank adds: the ops it calls more often than its peers (profiler traces).

A count of calls is exact, however noisy the clocks. A rank that runs extra matmuls makes more
calls of some op names than its peers do, in every step; a slower GPU makes as many calls, each
slower. Where the added calls are most of a rank's excess compute, they are what makes it slow:
judged on them, extra GEMMs that the rank's other kernels dilute to 1.06-1.10x of its peers'
time are 1.3-1.9x on the GEMMs (real jobs on 2 and 4 GPUs), which is what ``--threshold``
judges; and the idle gaps of a rank that launches more are its extra work, not a slow host.

``added_work`` measures it in stage 1 (``same_work``), ``does_extra_work`` and
``added_slowdown`` decide in the verdict.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from mapp.analysis.detect._stats import others_median
from mapp.analysis.detect.findings import Overruled, Suspect
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["ADDED_COST", "ADDED_SHARE", "ADDED_PART", "LAUNCHED", "added_work", "launched", "launched_with_dims", "op_calls", "op_of",
           "with_added", "ADDED_COLUMNS", "added_cost_ns", "does_extra_work", "adds_work", "clocked", "added_slowdown", "added_evidence",
           "launches_more", "launched_evidence", "graded_work", "GRADED_RANKS"]

LAUNCHED = " <- "
"""Joins a kernel's grid and block to the op that launched it in ``shape``
(``detector._launched_by``): ``grid <- op [dims]``, or ``grid <- op`` where the trace recorded
no input shapes."""


def launched() -> pl.Expr:
    """``shape`` names the op that launched the kernel (``LAUNCHED``)."""
    return pl.col("shape").fill_null("").str.contains(LAUNCHED, literal=True)


def launched_with_dims() -> pl.Expr:
    """``shape`` names the op that launched the kernel and that op's input dims."""
    return pl.col("shape").fill_null("").str.contains(LAUNCHED + r".+ \[")


def op_calls(work: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per ``keys`` and ``op``: the calls a rank made of each op (``calls``), its time on them at
    their typical calls (``own``: calls x ``q``) and its dearest call (``top``).

    ``work`` has a row per kind (``name``, ``shape``) with ``calls`` and ``q``. A kernel launched
    by a CPU op (``shape`` ends in ``<- op [dims]``: ``detector._launched_by``) is a call of that
    op: a library picks a kernel for each problem size, so kernel names stand for shapes, not for
    work (4 H200s, megatron-core PP2 x DP2, lognormal lengths, no fault: one replica's GEMMs ran
    as ``nvjet ... 128x256`` kernels that its peer never called, the peer's as others, as many
    ``aten::mm`` calls on each). The calls of one launching op and its dims are those of the
    kernel it launched most often (a split-K GEMM launches a reduction kernel beside its own),
    its cost all its kernels' time. Where the op is known by name alone (no ``[dims]``), its calls
    are those its kernels began (``launches``). Elsewhere (CPU ops) an op is its name."""
    launcher = pl.col("shape").str.extract(LAUNCHED + r"(.+)$", 1)
    rows = work.with_columns(op=op_of(),
                             call=pl.coalesce(launcher, pl.concat_str(pl.col("name"), pl.col("shape").fill_null(""),
                                                                      separator=" ")))
    # (a kind of unknown problem sizes, ``same_work._sizes_unknown``, at its real time ``t``,
    # its calls beside a collective at its typical call where that is known: ``t_fair``)
    cost = pl.col("calls") * pl.col("q")
    if "sizes_unknown" in rows.columns and "t" in rows.columns:
        real = pl.col("t_fair") if "t_fair" in rows.columns else pl.col("t")
        cost = pl.when(pl.col("sizes_unknown")).then(real).otherwise(cost)
    calls = pl.col("calls")
    if "launches" in rows.columns:
        # kernels of an op known by name only: the op's calls are the launches its kernels began,
        # counted per kind and summed (a call's first kernel holds it: ``detector._launched_by``)
        by_launch = pl.col("sizes_unknown") & launched()
        rows = rows.with_columns(call=pl.when(by_launch).then(pl.concat_str(pl.col("name"), pl.col("shape"), separator=" "))
                                 .otherwise("call"))
        calls = pl.when(by_launch).then(pl.col("launches")).otherwise(calls)
    per_call = rows.group_by([*keys, "op", "call"]).agg(calls=calls.max(), own=cost.sum())
    return per_call.group_by([*keys, "op"]).agg(
        pl.col("calls").sum(), pl.col("own").sum(),
        top=(pl.col("own") / pl.col("calls").clip(lower_bound=1e-9)).max())


def op_of() -> pl.Expr:
    """A kind's op, as :func:`op_calls` counts it: the CPU op that launched a kernel (its
    ``shape``'s ``<- op [dims]``), else the kind's name."""
    return pl.coalesce(pl.col("shape").str.extract(LAUNCHED + r"(\S+)", 1), pl.col("name"))


ADDED_SHARE = 0.5
"""Share of a rank's excess compute that the ops it calls more often than its peers must
explain for them to be what makes it slow (``added_work``)."""

ADDED_PART = 0.02
"""Share of a rank's compute that its peers spend on the ops it calls more often, for those
ops to be a real part of its work: a log line's few extra ``item`` calls are not (0.6% of a
step in a test), the GEMMs that real jobs' extra matmuls call again are (6.5-11% of the
slowed rank's kernel time on 2 and 4 GPUs)."""


def added_work(work: pl.DataFrame, peers: list[str], *, shared_cpus: bool = False,
               scales: pl.DataFrame | None = None, often: float = 1.0,
               data_scales: pl.DataFrame | None = None) -> pl.DataFrame | None:
    """Per rank: ``added``, its time over its peers' on the ops it *calls more often* than they
    do (per op, every shape: ``op_calls``; calls x typical time), where it makes more calls of that op
    in nearly every traced iteration (``CONSISTENT``); ``added_excess_ns``, that time beyond
    the peers' per iteration, and ``added_base_ns``, the peers' time on those names;
    ``added_calls``, its calls of them beyond its peers' in a typical iteration, and
    ``calls_base``, its peers' calls of every op there (:func:`launches_more`);
    ``added_real_ns``, what its surplus calls took by its clock (``_with_real_surplus``), which
    costs it (:func:`added_cost_ns`) and decides nothing. None where
    no rank calls any op more often than its peers, or where ranks are compared across
    pipeline stages (``peers`` empty: stages run different programs, and an uneven split of
    layers is imbalance).

    A count of calls is exact, however noisy the clocks: a rank that runs 356 GEMMs of a shape
    where its peer runs 277 does 1.28x that work, while its other kernels, the same as its
    peer's, dilute its whole compute to 1.10x (a real 4-GPU job with extra GEMMs inside each
    layer on one rank). A GPU slow on everything makes no more calls.

    ``shared_cpus``: compute timed on CPU processes sharing cores, where a call's time says more
    of the processes beside it than of the work: every rank's calls of a kind are then costed
    at one price, the median of the ranks' typical times for it, and only the counts differ.
    (Plain DDP, 1.5x the forward's matmuls on one of 4 processes on 2 cores: the rank's linear
    layers, duplicates included, took half its peers' time a call, and 1.5x the calls read 0.73x
    at its own; in another run its GEMMs took 1.5x theirs, and costed at the others' median with
    its own among theirs, 6 calls against 4 read 1.01x over its added names.)

    ``scales`` (``rank``, ``iteration``, ``scale``): ranks of different programs (one rank per
    pipeline stage, ``peers`` then one group of all), whose peers' calls and time are taken at
    the rank's scale (``same_work._program_scale``: a stage of more layers calls every layer's
    kind more often); ``work`` then holds only kinds two or more ranks run, for what a stage alone
    runs is its program or counted apart (``same_work._extra_work``). ``often``: an op counts as
    called more often only beyond this many times its peers' calls (there ``same_work.OFTEN``: an
    end stage's own GEMMs share shapes with its layers' where the vocabulary is the hidden size,
    and call those up to twice as often, 4 H200s and CPUs alike, PP4 under the profiler, no fault;
    work added inside the layers, 16x on 4 H200s).

    ``data_scales`` (``rank``, ``iteration``, ``scale``): ranks of one program whose data sets
    how often its loops run (``same_work._data_scales``): its peers' median calls are taken at
    its scale where above 1 (a rank of less data still calls the ops outside the loops as often),
    an op is called more often only beyond ``DATA_SLACK`` over that, and an op stays graded by
    rank (``_graded``) only where the ranks' calls at their scales still all differ: one rank's
    surplus over its scale is work it added."""
    if not peers:
        return None
    grid = _calls_grid(work, peers, shared_cpus)
    if grid is None:
        return None
    key = [*peers, "iteration", "name"]
    gid = grid.select(pl.struct(*key).rank("dense")).to_series().to_numpy()
    at = np.ones(len(grid))
    if data_scales is not None:
        # every op at the rank's scale where its data runs the loops more often (never less: the
        # ops outside the loops a rank of less data still calls as often as its peers), and
        # called more often only beyond ``DATA_SLACK`` over it
        at = np.maximum(grid.join(data_scales, on=["rank", "iteration"], how="left", maintain_order="left")[
            "scale"].fill_null(1.0).to_numpy(), 1.0)
    more_often = often * (1 + DATA_SLACK) if data_scales is not None else often
    grid = grid.with_columns(peer_calls=pl.Series(others_median(gid, grid["calls"].to_numpy()) * at),
                             peer_own=pl.Series(others_median(gid, grid["own"].to_numpy()) * at),
                             at=pl.Series(at))
    grid = _with_real_surplus(grid, work, peers, gid)
    if scales is not None:
        grid = grid.join(scales, on=["rank", "iteration"], how="left").with_columns(
            pl.col("peer_calls", "peer_own") * pl.col("scale").fill_null(1.0)).drop("scale")
    # (trades are judged on the calls as made: at a rank's data scale the ops outside its loops
    # read as missing, and would take a surplus of work added away in trade)
    traded = _traded(grid.with_columns(pl.col("peer_calls") / pl.col("at")), peers, often) if scales is None else None
    more = grid.with_columns(more=pl.col("calls") > more_often * pl.col("peer_calls")).group_by("rank", *peers, "name").agg(
        more=pl.col("more").mean(), own=pl.col("own").median(), peer=pl.col("peer_own").median(),
        calls=pl.col("calls").median(), peer_calls=pl.col("peer_calls").median(), top=pl.col("top").median(),
        real=pl.col("real").median(), peer_real=pl.col("peer_real").median())
    more = more.filter((pl.col("more") >= CONSISTENT) & (pl.col("peer") > 0))
    if traded is not None:
        more = more.join(traded, on=["rank", "name"], how="anti")
    more = more.join(_graded(grid, peers, GRADE_STEP if data_scales is not None else 0.0).select(*peers, "name"),
                     on=[*peers, "name"], how="anti")
    # the peers' calls of every op in a typical iteration: what its surplus calls are a share of
    calls_base = grid.group_by("rank", "iteration").agg(pl.col("peer_calls").sum()).group_by("rank").agg(
        calls_base=pl.col("peer_calls").median())
    # What the rank adds on a name is at most its surplus calls, each at its dearest kind of
    # call of that name: time beyond that is calls of other shapes, which the data sets (a
    # replica that drew longer sequences copies longer tensors), not work added. (The last
    # stage of one replica, PP2 x DP2 under the profiler, lognormal lengths, no fault: one more
    # ``aten::copy_`` a step than its peer, its loss print, 60 calls to 59, and 1.0 ms more on
    # them, which read as 1.87x added work.)
    surplus = (pl.col("calls") - pl.col("peer_calls")).clip(lower_bound=0) * pl.col("top")
    more = more.with_columns(own=pl.min_horizontal("own", pl.col("peer") + surplus))
    if more.is_empty():
        return None
    return more.group_by("rank").agg(own=pl.col("own").sum(), peer=pl.col("peer").sum(), real=pl.col("real").sum(),
                                     peer_real=pl.col("peer_real").sum(),
                                     added_calls=(pl.col("calls") - pl.col("peer_calls")).sum()).join(
        calls_base, on="rank", how="left").select(
        "rank", added=pl.col("own") / pl.col("peer"), added_excess_ns=pl.col("own") - pl.col("peer"),
        added_base_ns=pl.col("peer"), added_calls="added_calls", calls_base="calls_base",
        added_real_ns=pl.col("real"), added_base_real_ns=pl.col("peer_real"))


GRADED_RANKS = 3
"""The fewest peers whose calls of an op must all differ for the op's work to be graded by rank
(``graded_work``): of two, one calling more is all a fault looks like."""


def _calls_grid(work: pl.DataFrame, peers: list[str], shared_cpus: bool) -> pl.DataFrame | None:
    """Per rank of a peer group, iteration and op (``name``): its ``calls``, ``own`` and ``top``
    (``op_calls``), sorted by group, iteration and name; None where no op has two ranks."""
    if shared_cpus:
        work = work.with_columns(q=pl.col("q").median().over([*peers, "iteration", "name", "shape"]))
    names = op_calls(work, ["rank", *peers, "iteration"]).rename({"op": "name"})
    # every rank of a peer group, in every iteration the group traced, with every name the
    # group ever called (0 calls where it made none): a name called in one step only (a log
    # line) is then "more" in that step alone
    grid = (work.select("rank", *peers).unique()
            .join(work.select(*peers, "iteration").unique(), on=peers)
            .join(names.select(*peers, "name").unique(), on=peers)
            .join(names, on=["rank", *peers, "iteration", "name"], how="left")
            .with_columns(pl.col("calls", "own", "top").fill_null(0.0)))
    key = [*peers, "iteration", "name"]
    grid = grid.with_columns(size=pl.len().over(key)).filter(pl.col("size") >= 2)
    return None if grid.is_empty() else grid.sort(key)


PARAMETER_OP = "AccumulateGrad"
"""In the name of the op autograd runs once per parameter that gets a gradient, each step: a
rank that calls it more often holds more parameters (``_held``)."""


def _held(grid: pl.DataFrame, peers: list[str]) -> pl.DataFrame:
    """Per (``peers``..., ``iteration``, ``name``): ``held``, the ranks that call the op more often
    than the group's fewest are exactly the ranks that hold more parameters than its fewest (more
    calls of ``PARAMETER_OP`` a step), some but not all of them. Per-parameter work is the sharding
    plan's: a rank that owns more embedding tables looks up, differentiates and updates each
    (a user's DLRM by hand on 4 gloo processes, 10 tables sharded 3, 3, 2, 2: 3 sparse backwards a
    step on ranks 0 and 1 where 2 and 3 make 2, 280 more calls of 40 ops in all, "slow compute 0"
    before). Work added to a rank adds calls whatever parameters its peers hold: where it is on
    one of two ranks that hold more, its op's surplus is that rank's alone. Judged in groups of
    ``GRADED_RANKS`` or more only (``_graded``): of two, the one calling more is all added work
    looks like, and work added inside autograd can add its ``AccumulateGrad`` calls too (a
    replica exchange's extra Langevin passes, each differentiating its samples: 36 calls a step
    on the slowed rank against its one peer's 26, "no suspect" before)."""
    params = (grid.filter(pl.col("name").str.contains(PARAMETER_OP, literal=True))
              .group_by("rank", *peers, "iteration").agg(params=pl.col("calls").max()))
    if params.is_empty():
        return grid.select(*peers, "iteration", "name").unique().with_columns(held=pl.lit(False))
    params = params.with_columns(
        holder=pl.col("params") > pl.col("params").min().over([*peers, "iteration"]))
    per = (grid.join(params.select("rank", *peers, "iteration", "holder"), on=["rank", *peers, "iteration"], how="left")
           .with_columns(pl.col("holder").fill_null(False),
                         surplus=pl.col("calls") > pl.col("calls").min().over([*peers, "iteration", "name"])))
    return per.group_by([*peers, "iteration", "name"]).agg(
        held=pl.col("holder").any() & ~pl.col("holder").all() & (pl.col("surplus") == pl.col("holder")).all())


DATA_SLACK = 0.1
"""How far over its peers' calls at its data's scale a rank's calls of an op may go before the
op is called more often (``added_work``'s ``data_scales``): a loop's op may be called beside the
loop too, a few times a step, and stray from the scale (a user's LSTM, one replica's sentences
1.6x as long: its scale 1.54, its calls of the loop's ops 1.31-1.58x its peers')."""

GRADE_STEP = 0.05
"""Where ranks' calls are taken at their data's scales (``added_work``'s ``data_scales``), how far
apart, as a share, two ranks' calls of an op must be to differ (``_graded``): a scale is a median
over the program's ops, and each op's calls stray from it by a few percent."""


def _dealt(per: pl.DataFrame, peers: list[str]) -> pl.DataFrame:
    """Per (``peers``..., ``name``): ``dealt``, the same two ranks or more (some, not all) call the
    op more often than the group's fewest, each a different number of times, in nearly every
    iteration (``CONSISTENT``): the program deals that work out unevenly, in grades, whatever
    else its steps vary by (a router's or a loop's data moves the ranks above the fewest from
    step to step; work added to one rank puts it alone above its peers, and two ranks above
    them alike are what two slow ranks look like). ``per``: ``_graded``'s rows, with ``above``
    (the ranks over the fewest, sorted), ``above_apart`` (their calls all differ) and ``ranks``."""
    typical = pl.col("above").mode().first()
    return (per.with_columns(above=pl.col("above").list.eval(pl.element().cast(pl.String)).list.join(","),
                             many=(pl.col("above").list.len() >= 2) & (pl.col("above").list.len() < pl.col("ranks"))
                             & pl.col("above_apart"))
            .group_by([*peers, "name"])
            .agg(dealt=((pl.col("above") == typical) & pl.col("many")).mean() >= CONSISTENT))


def _graded(grid: pl.DataFrame, peers: list[str], step: float = 0.0) -> pl.DataFrame:
    """(``peers``..., ``name``, ``ranks``, ``calls``: each rank's calls in a typical iteration)
    of the ops that every rank of a peer group calls a different number of times, in nearly
    every iteration (``CONSISTENT``), with ``GRADED_RANKS`` ranks or more, of those that the
    ranks holding more parameters call more often (``_held``), and of those that two ranks or
    more call more often than the group's fewest, by different counts, the same ranks in nearly
    every step (``_dealt``): ``graded_work``. Work added to one rank leaves its peers agreeing
    with each other; a program that deals its work out unevenly does not, whether or not some
    ranks get equal shares (a hand-written distributed Shampoo dealing the inverse roots of 26
    blocks round-robin by size: 20, 8, 16 and 8 ``aten::linalg_vector_norm`` calls a step,
    ranks 0 and 2 each read as adding work, "slow compute 0", 1.24x on those ops, +1.8% of its
    step, in a healthy run). ``step``: where the grid's calls are at the ranks' scales (its
    ``at`` column), two counts differ where more than this share apart."""
    at = pl.col("at") if "at" in grid.columns and step > 0 else pl.lit(1.0)
    c = (pl.col("calls") / at).sort()
    # (the ranks above the fewest as the calls were made, not at the ranks' data scales: a deal
    # is the program's, and a rank whose every op the data scales reads below its peers there
    # in some steps only)
    over = pl.col("calls") > (1 + step) * pl.col("calls").min()
    a = pl.col("calls").filter(over).sort()
    per = (grid.group_by([*peers, "iteration", "name"])
           .agg(ranks=pl.len(), least=pl.col("calls").min(),
                apart=((c.diff() > step * c.shift(1)) | c.shift(1).is_null()).all(),
                above=pl.col("rank").filter(over).sort(),
                above_apart=((a.diff() > step * a.shift(1)) | a.shift(1).is_null()).all())
           .join(_held(grid, peers), on=[*peers, "iteration", "name"], how="left"))
    per = (per.join(_dealt(per, peers), on=[*peers, "name"], how="left")
           .with_columns(graded=(pl.col("ranks") >= GRADED_RANKS)
                         & ((pl.col("apart") & (pl.col("least") > 0)) | pl.col("held").fill_null(False)
                            | pl.col("dealt").fill_null(False))))
    names = (per.group_by([*peers, "name"]).agg(pl.col("graded").mean())
             .filter(pl.col("graded") >= CONSISTENT).select(*peers, "name"))
    typical = grid.join(names, on=[*peers, "name"]).group_by([*peers, "name", "rank"]).agg(pl.col("calls").median())
    return (typical.sort("rank").group_by([*peers, "name"], maintain_order=True)
            .agg(ranks=pl.col("rank"), calls=pl.col("calls")).sort([*peers, "name"]))


def graded_work(work: pl.DataFrame, peers: list[str], *, shared_cpus: bool = False) -> pl.DataFrame | None:
    """The ops whose work the program splits unevenly by rank: every rank of a peer group (of
    ``GRADED_RANKS`` or more) calls them a different number of times, in nearly every iteration.
    No count is then its peers' normal, and none is work added (``added_work`` leaves them out):
    work added to a rank leaves its peers agreeing with each other, a split graded by position
    does not. (Ring attention over 4 ranks, each holding one contiguous chunk of a causal
    sequence: rank i attends to i + 1 chunks, 14, 28, 42 and 56 ``aten::bmm`` calls a step; rank
    3 read "slow compute", 1.33x, and rank 2 1.20x.) Per op (``name``): ``ranks`` and their
    ``calls`` in a typical iteration, and ``share``, its part of the group's compute (all ranks,
    every op at its typical call), dearest first; None where there is none. ``work``: as
    ``added_work`` takes it."""
    grid = _calls_grid(work, peers, shared_cpus) if peers else None
    if grid is None:
        return None
    found = _graded(grid, peers)
    if found.is_empty():
        return None
    cost = grid.group_by([*peers, "name"]).agg(own=pl.col("own").sum()).with_columns(
        share=pl.col("own") / pl.col("own").sum().over(peers))
    return found.join(cost, on=[*peers, "name"], how="left").sort("own", descending=True).drop("own")


TRADE_TOLERANCE = 0.25
"""A surplus op and a missing one are one trade where their counts differ by at most this share
(``_traded``)."""


def _traded(grid: pl.DataFrame, peers: list[str], often: float) -> pl.DataFrame | None:
    """(``rank``, ``name``) of the ops a rank calls more often than its peers *in trade* for
    others it calls less often: each surplus op matched, one to one, with a missing op of about
    as many calls (``TRADE_TOLERANCE``), in nearly every iteration. The data took the rank down
    another branch of the same program there; extra work adds calls without taking any away,
    and what is left unmatched stays work added. (A mixture of experts whose router favours the
    experts of one expert rank, PP2 x DP2 under the profiler, no fault: its peer, whose experts
    got few tokens, made 8 more calls a step of each of ``aten::empty`` and ``aten::fill_``, 8.7
    ms against 1.0 ms, and 8 fewer of each of ``aten::narrow`` and ``aten::as_strided``; read
    "slow compute", 3.93x on the ops it called more often, before.) None where no rank trades."""
    per = grid.with_columns(more=pl.col("calls") > often * pl.col("peer_calls"),
                            fewer=pl.col("calls") * often < pl.col("peer_calls"),
                            diff=pl.col("calls") - pl.col("peer_calls"))
    per = per.group_by("rank", *peers, "name").agg(pl.col("more", "fewer").mean(), pl.col("diff").median(),
                                                    excess=(pl.col("own") - pl.col("peer_own")).median())
    surplus = per.filter((pl.col("more") >= CONSISTENT) & (pl.col("diff") > 0))
    missing = per.filter((pl.col("fewer") >= CONSISTENT) & (pl.col("diff") < 0))
    both = set(surplus["rank"].to_list()) & set(missing["rank"].to_list())
    if not both:
        return None
    rows = []
    for rank in sorted(both):
        gaps = sorted(-d for d in missing.filter(pl.col("rank") == rank)["diff"].to_list())
        # of surplus ops as near a gap's count, the cheapest is traded first: a branch the data
        # took swaps bookkeeping ops; the op that carries the rank's extra time is work added.
        # (DDP with ZeroRedundancyOptimizer, 4 processes, extra MLP matmuls on rank 3: its
        # shard of the optimizer made 10 fewer calls of each of 3 ops a step, and 5 ops 12
        # more, ``aten::addmm`` 94 ms more among them; which 3 were traded followed the
        # group_by's row order, and the verdict changed from run to run of the same traces.)
        ordered = surplus.filter(pl.col("rank") == rank).sort("diff", "excess", "name")
        for name, d in ordered.select("name", "diff").iter_rows():
            match = next((g for g in gaps if abs(g - d) <= TRADE_TOLERANCE * max(d, g)), None)
            if match is not None:
                gaps.remove(match)
                rows.append((rank, name))
    if not rows:
        return None
    return pl.DataFrame(rows, schema={"rank": grid.schema["rank"], "name": grid.schema["name"]}, orient="row")


def _with_real_surplus(grid: pl.DataFrame, work: pl.DataFrame, peers: list[str], gid) -> pl.DataFrame:
    """``grid`` with ``real``: what a rank's surplus calls of an op took by its clock, for its
    cost (``added_cost_ns``): its time on the op beyond its peers' (the median of the others'),
    at most its surplus calls each at its longest call of the op there.

    The counted figure prices every call at a typical one (``op_calls``), and without recorded
    shapes an op's typical call is the model's: extra calls of a larger size are priced at the
    model's smaller one (megatron-core TP2 x DP2 under the profiler's defaults, 4 processes on
    4 cores, 24 ms of matmuls of another size before each of two microbatches on rank 2: 48
    surplus ``aten::mm`` calls a step, 47 ms more on them than its peers, counted at 7.9 ms)."""
    if "t" not in work.columns or "longest" not in work.columns:
        return grid.with_columns(real=pl.lit(0.0), peer_real=pl.lit(0.0))
    by_op = work.with_columns(name=op_of()).group_by("rank", *peers, "iteration", "name").agg(
        t=pl.col("t").sum(), longest=pl.col("longest").max())
    # (in ``grid``'s row order, which ``gid`` follows)
    grid = grid.join(by_op, on=["rank", *peers, "iteration", "name"], how="left", maintain_order="left").with_columns(
        pl.col("t", "longest").fill_null(0.0))
    peer_t = pl.Series(others_median(gid, grid["t"].to_numpy()))
    surplus = (pl.col("calls") - pl.col("peer_calls")).clip(lower_bound=0) * pl.col("longest")
    return grid.with_columns(real=pl.min_horizontal((pl.col("t") - peer_t).clip(lower_bound=0), surplus),
                             peer_real=peer_t).drop("t", "longest")


def added_cost_ns(row: dict) -> float:
    """What the work a rank adds costs a step: the greater of its counted figure
    (``added_excess_ns``) and what its surplus calls took by its clock (``added_real_ns``)."""
    return max(row.get("added_excess_ns") or 0.0, row.get("added_real_ns") or 0.0, 0.0)


ADDED_COLUMNS = ("added", "added_excess_ns", "added_base_ns", "added_calls", "calls_base", "added_real_ns",
                 "added_base_real_ns")
"""What :func:`added_work` gives each rank (``added_calls`` and ``calls_base`` only where ranks
run one program: the readings across pipeline stages count no calls; ``added_real_ns`` only
where ranks run one program too, for the cost alone)."""


def with_added(ranks: pl.DataFrame, added: pl.DataFrame | None) -> pl.DataFrame:
    """``ranks`` with :data:`ADDED_COLUMNS` (null where none)."""
    if added is not None:
        ranks = ranks.join(added, on="rank", how="left")
    return ranks.with_columns(pl.lit(None, pl.Float64).alias(c) for c in ADDED_COLUMNS if c not in ranks.columns)


def does_extra_work(row: dict, min_effect: float) -> bool:
    """Whether a rank does more work than its peers: the ops it calls more often
    (``added_work``) are a real part of its work (``ADDED_PART``), cost at least
    ``min_effect`` of it beyond its peers' time on them, and are most of its excess compute
    (``ADDED_SHARE``): :func:`adds_work`, and most of the excess."""
    return adds_work(row, min_effect) and row["added_excess_ns"] >= ADDED_SHARE * row["excess_ns"]


def adds_work(row: dict, min_effect: float, *, shared_cpus: bool = False, threshold: float | None = None) -> bool:
    """Whether the ops a rank calls more often than its peers, in nearly every iteration, make
    it slower by themselves: they are a real part of its work (``ADDED_PART``), it spends at
    least ``min_effect`` more on them than its peers do, relative to its compute and to their
    time on them, and its compute exceeds its peers'. Unlike :func:`does_extra_work` it does not
    ask whether they explain most of that excess: the counts are exact where the times of 4
    processes sharing 2 cores are not (plain DDP, 1.5x the forward's matmuls on one rank, three
    runs: 1.06-1.16x its peers' compute at z 0.6-2.1, below the cut-off; 1.28-1.64x on the ops
    it calls more often).

    ``shared_cpus``: compute timed on CPU processes sharing cores, where a rank's whole compute
    may read as less than its peers' though it does more (plain DDP, 2.5x the forward's matmuls
    on one of 4 processes on 2 cores with a fifth process busy beside them: 1.61x on the ops it
    calls more often, 23 ms more a step, its whole compute 0.95x its peers' by their times, whose
    own ranged 0.79-1.33x). There its counted work is not asked to show in its times, and is
    weighed against its peers' work on the same kinds at their typical calls (``work_ns``), not
    against its measured busy time, which descheduling stretches (1.5x the forward's matmuls
    beside a fifth busy process: its busy time 240 ms a step, its peers' typical work 121 ms;
    its added calls 24.9 ms at ``added_work``'s one price). Either way, where it is more, against
    all its own work at its typical calls, kinds no peer ran included (``all_work_ns``): where
    replicas drew other sequence lengths the kinds they share are a sliver of their work.

    ``threshold``: the suspects' cut. Where given, surplus calls that by the rank's own clock
    take the threshold's share of its work, and make it that much slower on those ops than its
    peers are on them (``clocked``), add work however little they cost at their typical call."""
    added, added_excess, base = row.get("added"), row.get("added_excess_ns"), row.get("added_base_ns")
    excess, busy = row.get("excess_ns") or 0.0, row.get("busy_ns") or 0.0
    if shared_cpus and row.get("work_ns"):
        busy = row["work_ns"]
    # against all its work, not only the kinds a peer ran too (``same_work``'s ``all_work_ns``)
    busy = max(busy, row.get("all_work_ns") or 0.0)
    if added is None or added_excess is None or base is None or (excess <= 0 and not shared_cpus) or busy <= 0:
        return False
    # a real part of its work by their typical calls, or by their clocks: without recorded
    # shapes an op's typical call is its smallest layers', and 8 calls of ``aten::addmm`` a step
    # (a DLRM's two MLPs) priced at it were 1.1 ms of 51, where they took 23 ms of 115 (4 gloo
    # processes on 2 cores, the MLPs' matmuls 3x on one rank: 480 more calls a step, 87 ms by its
    # clock; "slow host" before, as its extra calls read as 2.0% of its work, under ADDED_PART)
    real_base, real_busy = row.get("added_base_real_ns") or 0.0, row.get("busy_ns") or 0.0
    part = base >= ADDED_PART * busy or (real_busy > 0 and real_base >= ADDED_PART * real_busy)
    counted = added - 1 >= min_effect and added_excess >= min_effect * busy
    return (counted or clocked(row, threshold)) and part


def clocked(row: dict, threshold: float | None) -> bool:
    """Whether a rank's surplus calls (``added_work``) make it slower by ``threshold`` by its own
    clock: they took that share of its work (``busy_ns``, or its work at typical calls where more)
    and that much more than its peers' time on those ops. Without recorded shapes an op's typical
    call is its smallest layer's, and extra calls of its larger layers are priced at it: a user's
    GNN under DDP (4 gloo processes on 2 cores), 1.7x the linear layers' matmuls on rank 1: 336
    surplus ``aten::mm`` and ``aten::addmm`` calls a step, 3.8 ms at their typical call, 152 ms by
    its clock, against its peers' 141 ms on those ops; "no suspect" before. Data that routes more
    calls to a rank costs it little by its clock, as its calls are small ones (a mixture of experts
    whose router favours one rank's experts, PP2 x DP2 under the profiler: 2.4 ms a step of 64 ms,
    3.8%)."""
    real, real_base = row.get("added_real_ns") or 0.0, row.get("added_base_real_ns") or 0.0
    work = max(row.get("busy_ns") or 0.0, row.get("all_work_ns") or 0.0)
    return (threshold is not None and work > 0 and real_base > 0
            and real >= threshold * work and real >= threshold * real_base)


def added_slowdown(row: dict, min_effect: float, threshold: float) -> float | None:
    """The slowdown of the work a rank does *more of* than its peers (profiler traces: the op
    names it calls more often), where its whole compute's stays under the ``threshold``: extra
    matmuls that double one GEMM's calls are that GEMM's 2x, however many other kernels dilute
    the rank's total (a real 4-GPU job: extra GEMMs in each layer of one rank, 1.79x on those
    GEMMs, 1.10x over all its kernels). ``--threshold`` judges the work that is slow (an op is
    slow beyond (1 + t) x its peers'). Where the whole compute clears the threshold on its own,
    that stays the suspect's figure, the more telling one (one kernel called 4.5x as often by
    extra matmuls that make the rank's compute 1.59x), so the figure shown may be the added
    work's at a high threshold and the whole compute's at a low one. None where it does not
    apply."""
    if not does_extra_work(row, min_effect) or float(row["slowdown"]) >= 1 + threshold:
        return None
    return float(row["added"]) if row["added"] > float(row["slowdown"]) else None


def launches_more(row: dict, min_effect: float) -> bool:
    """Whether a rank calls ops more often than its peers by ``min_effect`` of all their calls,
    in nearly every iteration (``added_work``): on a GPU whose host launches slower than its
    kernels run, work added is the host's time launching it, not the kernels' (2 H200s, a user's
    DDP transformer under autocast, 1.4x the forward's matmuls on rank 1: 832 kernels a step to
    its peer's 717, in every step, its kernels' time no more than its peer's, its launch gaps
    24 ms a step more, "slow host 1"). Counts are exact: a host that sleeps, a GPU another
    process shares and lengths padded per step left no rank calling more than its peer in nearly
    every step (25 such runs of that job on 2 H200s; padded lengths moved either rank's count in
    some steps)."""
    calls, base = row.get("added_calls"), row.get("calls_base")
    return calls is not None and base is not None and base > 0 and calls >= min_effect * base


def added_evidence(row: dict) -> dict:
    """The suspect's evidence of its added work (``peers.added_work``)."""
    out = {"slowdown": round(float(row["added"]), 3),
           "excess_ms_per_iteration": round(float(row["added_excess_ns"]) / 1e6, 4),
           "peers_ms_per_iteration": round(float(row["added_base_ns"]) / 1e6, 4)}
    if (row.get("added_real_ns") or 0.0) > float(row["added_excess_ns"]):
        # (its surplus calls by its own clock, where that is more: what its cost counts)
        out["by_clock_ms_per_iteration"] = round(float(row["added_real_ns"]) / 1e6, 4)
    if row.get("added_outside_graph"):
        # (a stage's forward passes outside its autograd graph: ``no_grad_passes``)
        out["outside_graph"] = True
    return out


def launched_evidence(row: dict) -> dict:
    """The suspect's evidence of the calls it launches beyond its peers' (``peers.launched_more``):
    its surplus calls in a typical iteration, and its peers' calls of every op there."""
    return {"calls_per_iteration": round(float(row["added_calls"]), 1),
            "peers_calls_per_iteration": round(float(row["calls_base"]), 1)}


ADDED_COST = 1 / 3
"""A rank named for the ops it calls more often than its peers, its whole compute no slower than
the threshold, is a suspect only where that work costs its step at least this share of
``min_effect`` (1.1% of the iteration at ``--threshold 0.1``): its count says it does more, not
that the job waits on it. On cores shared by 4 gloo processes a rank's share of a program's
uneven calls comes and goes with the data (a user's distributed Cholesky, the owner of the
block-cyclic layout's last column blocks; a BFS rank whose frontier held more vertices): 0.1-0.7%
of their steps, named "slow compute" though no rank was slowed. Over the recorded jobs (the
committed corpora and 24 batteries of user-written families), the least costly right suspect so
named cost 2.5% (a zero-bubble pipeline stage's forward 3x, 31.6 ms of a 1.28 s step)."""


def added_slivers(suspects: list[Suspect], min_effect: float, threshold: float, iteration_ns: float | None,
                  overruled: list[Overruled]) -> list[Suspect]:
    """``suspects`` without the ranks named for added work that costs their step a sliver
    (``ADDED_COST``), each set aside with a note."""
    if not iteration_ns:
        return suspects
    kept = []
    for s in suspects:
        peers = s.evidence.get("peers") or {}
        by_added = s.kind == "slow_compute" and "added_work" in peers and peers.get("slowdown", 0.0) < 1 + threshold
        if by_added and 0 < s.excess_ns < ADDED_COST * min_effect * iteration_ns:
            overruled.append(Overruled(s.rank, (
                f"rank {s.rank} calls some ops more often than its peers ({peers['added_work']['slowdown']:.2f}x "
                f"their time on them), {s.excess_ns / 1e6:.2f} ms a step, {s.excess_ns / iteration_ns:.2%} of it: "
                f"not a suspect (work added is one where it costs the step {ADDED_COST * min_effect:.1%} or more)")))
            continue
        kept.append(s)
    return kept
