"""Stage 1 for traces that record what each op worked on (profiler traces): time on the same work.

A PyTorch profiler trace numbers no microbatch or layer, but it records each CPU op's input
shapes and each kernel's grid and block (and, by its External id, the op that launched it:
``detector._launched_by``). So the work is compared per *kind*: per (iteration, op name,
shape), the time a rank spent on it against its peers' median for the same kind.
A rank whose GPU is slow takes longer on every kind; a rank that does extra work of a kind
(more matmuls of one shape) spends more time on it; a replica that got longer sequences has
other shapes, which its peers never ran, so it is not compared on them at all (imbalance in
the data is not a fault).

Noise on oversubscribed CPUs (a process descheduled in the middle of an op) makes any call
take longer, by up to several times, and hits different calls of different ranks; the number
of calls a rank makes of each kind is exact. So a rank's work per iteration is estimated as
sum over kinds of (calls x typical call time), the typical time being a low quantile of the
kind's call times (``QUICK``); its slowdown is that over its peers' median calls x typical
time, for the same kinds (on CPU processes sharing cores, the lesser of that and the same at
each kind's fastest call: ``_least_slowdown``; a kernel's, on a GPU, the mean of its calls that
ran with no collective beside them: ``_kernels_alone``). A GPU 20% slower on everything reads 1.2; extra matmuls that double
a third of the work read about 1.5. A fault lasts: a rank is flagged when the slowdown is
beyond the scatter of healthy ranks and it is slower in nearly every iteration
(``CONSISTENT``). Idle gaps (a slow host) are judged alike: the median excess over the
iterations, positive in nearly all of them.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from mapp.analysis.detect._stats import (MAD_TO_SIGMA, MEDIAN_SE, others_median, robust_scale, weighted_quantiles,
                                         within_rank_scale, z_critical)
from mapp.analysis.detect.added_work import (ADDED_COLUMNS, DATA_SLACK, LAUNCHED, added_work, graded_work, launched,
                                             launched_with_dims, op_calls, op_of, with_added)
from mapp.analysis.detect.idle import data_stalls
from mapp.analysis.detect.layout import middle_stages
from mapp.analysis.detect.thresholds import CONSISTENT
from mapp.analysis.ingest.schema import COMM_OP_PREFIXES, RUNTIME_PATTERN

__all__ = ["self_times", "compare_same_work"]

QUICK = 0.25
"""The quantile of a kind's call times taken as its typical call: robust to descheduling."""

_FEW_CALLS = 3
"""On shared CPUs, kinds a rank called fewer times than this in the whole trace are not timed."""

_FLOOR = 0.005
"""Below half a percent no difference in work is told from the timers' own noise."""


SUBCLASS_DISPATCH = "PythonSubclass"
"""The profiler's span for a dispatch to a tensor subclass's ``__torch_dispatch__`` (DTensor,
FSDP2's sharded parameters): the op it sits in is a shell around the ops nested in it."""


def self_times(events: pl.DataFrame) -> pl.DataFrame:
    """Every compute op with ``self_ns``: its duration minus that of the ops directly inside it
    on the same thread or stream (a profiler's "self time"). An ``aten::addmm`` spends its time
    in its own kernel, not in the tiny ``aten::resolve_conj`` it calls first, so the finest
    spans alone (leaves) would miss most of the work.

    An op that issues a collective or p2p call itself (a ``c10d::*`` dispatch op or a
    functional collective's, ``schema.COMM_OP_PREFIXES``, directly
    inside it, as a tensor-parallel autograd function does) waits for its peers inside its own
    time: that is communication, not compute, so such ops are left out. So is an op dispatched
    to a tensor subclass (a ``PythonSubclass`` span directly inside it: DTensor's ``aten::mm``
    runs its shard's ``aten::mm`` in there), a shell of dispatch whose work is the nested op's:
    counted as a call of its own, its few microseconds made the typical call of the kind (a
    user's DTensor TP2 x FSDP2 job on 4 processes sharing 2 cores: 55 such shells among 120
    ``aten::mm`` calls a rank, the kind's price 3.7 us where its real calls took 330-450 us, and
    90 extra real matmuls a step on one rank read as 0.4 ms of added work). An op's time inside
    CUDA runtime calls (``schema.RUNTIME_PATTERN``, kept where a GPU job was traced host-only)
    is its host waiting on the GPU's queue, not the op's own work (2 H200s, DDP profiled with
    ``ProfilerActivity.CPU`` alone: the batch's ``aten::copy_`` to the GPU waited 90-113 ms a
    step in ``cudaMemcpyAsync`` for the stream to drain, and read as "compute 1.26x")."""
    marks = (pl.any_horizontal([pl.col("name").str.starts_with(p) for p in COMM_OP_PREFIXES])
             | (pl.col("name") == SUBCLASS_DISPATCH))
    waits = (pl.col("cat") == "other") & pl.col("name").str.contains(RUNTIME_PATTERN)
    comp = (
        events.filter((pl.col("cat") == "compute") | marks | waits)
        .with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"), mark=marks, host_wait=waits)
        .sort(["rank", "lane", "ts_ns", "dur_ns"], descending=[False, False, False, True])
    )
    if comp.is_empty():
        return comp.with_columns(self_ns=pl.lit(0, pl.Int64))
    thread = comp.select(pl.struct("rank", "lane").rank("dense")).to_series().to_numpy()
    child, waits = _child_time(thread, comp["ts_ns"].to_numpy(), comp["end_ns"].to_numpy(), comp["dur_ns"].to_numpy(),
                               comp["mark"].to_numpy())
    return comp.with_columns(
        self_ns=pl.Series(np.maximum(comp["dur_ns"].to_numpy() - child, 0)), waits=pl.Series(waits),
    ).filter(~pl.col("mark") & ~pl.col("waits") & ~pl.col("host_wait")).drop("mark", "waits", "host_wait")


def _child_time(thread: np.ndarray, start: np.ndarray, end: np.ndarray, dur: np.ndarray,
                mark: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per span (sorted by thread, start, longest first): the summed duration of its direct
    children, and whether a marked span (a comm dispatch) is one of them."""
    out = np.zeros(len(start), dtype=np.int64)
    waits = np.zeros(len(start), dtype=bool)
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
            if mark[i]:
                waits[stack[-1]] = True
        stack.append(i)
    return out, waits


def _fastest(shared_cpus: bool) -> pl.Expr:
    """A kind's second typical call (``_least_slowdown``): on CPU processes sharing cores its
    fastest call; elsewhere the ``QUICK`` quantile again, so that the two agree."""
    return pl.col("self_ns").min() if shared_cpus else pl.col("self_ns").quantile(QUICK)


def _alone(ops: pl.DataFrame) -> list[pl.Expr]:
    """Per (rank, kind): the mean time of its kernel calls that ran without a collective beside
    them (``contention``), and whether the kind is kernels; none where contention is unknown."""
    if "contended" not in ops.columns or "lane" not in ops.columns:
        return []
    return [pl.col("self_ns").filter(~pl.col("contended")).mean().cast(pl.Float64).alias("alone"),
            pl.col("lane").str.starts_with("stream:").all().alias("kernels")]


def _kernels_alone(per_call: pl.DataFrame, kind: list[str]) -> pl.DataFrame:
    """A kernel kind's typical call is the mean of its calls that ran alone, where every rank
    that ran the kind has such calls. On a GPU nothing deschedules a kernel midway, so the low
    quantile that guards CPU ops against it only hides what does slow a GPU part of the time (a
    neighbour process time-slicing with it: 25-50% of each 20 ms, the quarter-quantile kernel of
    the rank it shared read 1.0x, its mean 1.2-2.7x); and the calls beside a collective are
    slowed by it, on the victim (``contention``). A kernel kind some rank ran only beside
    collectives is timed alike on every rank (its calls still counted). CPU ops keep the
    quarter quantile, and so do the stages of a pipeline compared with each other (one rank a
    stage): there a kernel kind's mean follows what else each stage runs (2 H200s, PP2 under the
    profiler's defaults, lognormal lengths, no fault: the last stage's kernels 1.07x by their
    means, 1.01x by their quicker calls, and "slow host 1"); a neighbour on a stage's GPU is
    found there by where its slowed kernels land (``time_slices``)."""
    alone = pl.col("alone").is_not_null().all().over(kind)
    timed = pl.col("kernels") & alone
    beside = pl.col("kernels") & ~alone
    # (a kind some rank ran only beside collectives: every rank at the kind's median call, its
    # calls counted, its time no rank's own: left out, the kinds compared would be the rank's
    # forward pass alone, where a DDP rank's added GEMMs are twice the share they are of its work)
    typical = pl.col("q").median().over(kind)
    return per_call.with_columns(
        q=pl.when(timed).then("alone").when(beside).then(typical).otherwise("q"),
        fast=pl.when(timed).then("alone").when(beside).then(typical).otherwise("fast"),
    ).drop("alone", "kernels")


def _fair_time(work: pl.DataFrame) -> pl.DataFrame:
    """``work`` with ``t_fair``: a kind's time in an iteration with each call that ran beside a
    collective (``contention``) taken at the kind's typical call (``q``, its calls alone where
    it has them: ``_kernels_alone``), the others' as measured; what ``added_work`` costs a kind
    of unknown problem sizes at, in place of its measured time.

    The waiting rank's kernels run beside its spinning collectives and slow down (2 H200s, a
    user's DDP transformer under autocast, 1.5x the forward's matmuls on rank 0: its peer's
    backward GEMMs, all beside its all-reduces, 7.3-8.0 ms a step of ``aten::mm`` at their
    measured time, rank 0's 6.2 ms in 122 calls to the peer's 74: its added calls read as less
    work than none, "slow host" by the idle time its extra launches cost)."""
    return work.with_columns(t_fair=pl.col("t_alone") + pl.col("beside") * pl.col("q")).drop("t_alone", "beside")


_ALIKE = 0.15
"""How much longer, at most, one n-th call of an op may typically take than another's for the
two to count as the same work where no shapes were recorded (``_nth_fastest``): calls of one
shape on quiet cores differ by a few percent, a layer's GEMMs of other shapes by a third or more."""


def _nth_fastest(per_call: pl.DataFrame, peers: list[str]) -> pl.DataFrame:
    """``per_call`` with the fastest call of each n-th-call kind (``peers.nth_call``: a trace
    without shapes) taken over every n-th call of its op that typically takes as long
    (``_ALIKE``), the same work by its time, where shapes would have pooled them.

    The fastest call is what guards a rank against being descheduled on shared CPUs
    (``_least_slowdown``); an n-th call has one sample an iteration, and the least of four is
    no guard: megatron-core PP2 x DP2 under the profiler without shapes, 4 processes on 2 cores,
    no fault: one rank of a DP pair read 1.39x its peer by the fastest n-th calls, where the
    same trace with shapes reads 1.06x (the least of ~96 calls of each shape): its 18th and 20th
    ``aten::mm`` took 4-7x its peer's in every step, where the other stage's ranks computed
    beside it. How long a kind's call takes is told by its quickest call on any rank (being
    descheduled only makes calls longer), so all ranks pool the same kinds. Kinds by name
    (``*``) and with shapes keep their own."""
    nth = per_call.filter(pl.col("shape").str.starts_with("#"))
    if nth.is_empty():
        return per_call
    where = [*peers, "name"]
    size = (nth.group_by([*where, "shape"]).agg(size=pl.col("fast").min())
            .sort([*where, "size"]).with_columns(op=pl.struct(where).rank("dense")))
    # a new pool where a kind takes more than _ALIKE longer than its pool's quickest
    ops, sizes = size["op"].to_numpy(), size["size"].to_numpy()
    pool = np.zeros(len(size), dtype=np.int64)
    first, current = 0.0, -1
    for i in range(len(size)):
        if i == 0 or ops[i] != ops[i - 1] or sizes[i] > (1 + _ALIKE) * first:
            current += 1
            first = sizes[i]
        pool[i] = current
    size = size.select(*where, "shape", pool=pl.Series(pool))
    pooled = (nth.join(size, on=[*where, "shape"])
              .with_columns(fast=pl.col("fast").min().over(["rank", *peers, "pool"])).drop("pool"))
    return pl.concat([per_call.filter(~pl.col("shape").str.starts_with("#")), pooled.select(per_call.columns)])


def _sizes_unknown() -> pl.Expr:
    """A GPU kernel whose launching op's input dimensions the trace lacks (recorded without
    ``record_shapes``): its kind, name and grid, may hold calls of several problem sizes, for a
    persistent GEMM kernel launches one block per SM whatever the problem (2 H200s, megatron-core
    DP2 under the profiler, 1.3x the layers' FLOPs on rank 1 as (tokens x hidden) @ (hidden x
    hidden) matmuls: one ``nvjet`` kernel and grid ran 198 calls a step on rank 0, 73 ms, and 630
    on rank 1, 125 ms, 432 of them the smaller extra GEMMs at 0.12 ms where the model's took 0.33
    ms). ``added_work`` costs such a kind's calls at their real time, not at a typical call: at
    the quicker quartile rank 1's 630 calls read 73 ms, 1.12x its peer. (A kernel timed on the
    GPU is never descheduled, which the typical call guards against on CPUs.) So also a kernel
    tied to its op by name alone (``<- op`` with no ``[dims]``: ``detector._launched_by``)."""
    return pl.col("lane").str.starts_with("stream:") & ~launched_with_dims()


OTHER_SIZES = 0.1
"""Share of a rank's kernel time in kernels of sizes no peer ran (``_other_sizes``) from which
its replicas are taken to have worked on data of other sizes."""


def _one_grid() -> pl.Expr:
    """Per kind of kernel whose launching op's dims are unknown (``sizes_unknown``, ``shape``
    ``grid <- op``): whether its name and launching op ran with one grid only in the whole
    trace, on every rank. A kernel whose grid follows its problem (an elementwise kernel's
    blocks, a softmax's rows) shows each size as its own kind; a persistent GEMM launches one
    block per SM whatever it multiplies, so its one grid hides every size it ran, and so does a
    kernel of one size only (the optimizer's)."""
    grid = pl.col("shape").str.split(LAUNCHED).list.first()
    return pl.col("sizes_unknown") & launched() & (grid.n_unique().over("name", op_of()) == 1)


def _other_sizes(work: pl.DataFrame, peers: list[str]) -> pl.Expr:
    """Per row of ``work``: a kernel kind of one grid (``_one_grid``) in a group of peers whose
    replicas worked on data of other sizes, which such a kind's per-call time follows: some rank
    spent ``OTHER_SIZES`` or more of its kernel time in a typical iteration on kernels whose
    grid tells their size and that no peer ran (``n`` 1). There a rank's time on the same work
    is read off the kernels whose grids it shares with a peer; its calls of the others are
    still counted (``added_work``).

    2 H200s, megatron-core DP2 under the profiler without shapes, lognormal lengths per replica,
    no fault: 32% and 40% of the two ranks' kernel time in kernels of grids the other never ran;
    on the kinds of two grids or more they shared, rank 1 computed 1.0004x its peer, on the
    persistent GEMMs and the other one-grid kernels 1.19x, and it was named "slow compute
    1.13x". A GPU that is slow is slow on every kernel, and work a rank adds is counted by its
    calls."""
    group = peers or ["_all"]
    marked = work.with_columns(pl.lit(0).alias("_all"), one=_one_grid(), kernel=pl.col("sizes_unknown") & launched(),
                               row=pl.int_range(pl.len()))
    lone = marked.group_by(["rank", *group, "iteration"]).agg(
        share=pl.col("t").filter(pl.col("kernel") & ~pl.col("one") & (pl.col("n") == 1)).sum()
        / pl.col("t").filter(pl.col("kernel")).sum())
    differ = (lone.group_by(["rank", *group]).agg(pl.col("share").median())
              .group_by(group).agg(differ=pl.col("share").max() >= OTHER_SIZES))
    flags = marked.join(differ, on=group, how="left").sort("row").select(
        (pl.col("kernel") & pl.col("one") & pl.col("differ").fill_null(False)).alias("f"))["f"]
    return pl.lit(flags)


VARIES = 0.3
"""How much a rank's calls paired by order (no shapes) may vary from one iteration to the next
(the standard deviation of log(time), ``_varies``) before its data is taken to vary: its
microbatches are of other sizes each step. Two gloo processes on 2 cores, megatron-core DP2 and
TP2, plain DDP and FSDP2 under the profiler's defaults, 26 held-out jobs twice each: healthy or
with a fault, 0.02-0.32 on a rank and at most 0.19 on the lesser of the two; lognormal lengths,
0.37-0.91 on each."""


def _varies(work: pl.DataFrame) -> pl.DataFrame | None:
    """Per rank: how much its calls paired by order (``peers.nth_call``: a trace without
    shapes) vary between iterations: over its kinds called in three or more of them, the
    standard deviation of log(the kind's time in an iteration), the median over the kinds
    weighted by their time; None where it has no such kinds.

    A kind paired by order is the same layer's same op in the same microbatch of every
    iteration: its time is the same each step unless what it works on changes size. Replicas
    of heavy-tailed sequence lengths draw other lengths every microbatch, and their n-th calls
    are other work each step, as each is the other's (2 gloo processes on 2 cores, megatron-core
    DP2 under the profiler's defaults, lognormal lengths, no fault: the replica with the longer
    sequences in all four traced steps computed 1.41x its peer and read "slow compute 0"; its
    calls varied 0.81 between steps, its peer's 0.74). A rank slow or doing added work is slow
    or adds it every step alike, and its peer's calls stay put (held-out DP2, TP2 and plain
    DDP/FSDP2 pairs with a fault: at most 0.24 on the peer)."""
    nth = work.filter(pl.col("shape").str.starts_with("#") & (pl.col("t") > 0))
    kinds = nth.group_by("rank", "name", "shape").agg(
        sd=pl.col("t").log().std(), w=pl.col("t").mean(), steps=pl.len()).filter(pl.col("steps") >= 3)
    if kinds.is_empty():
        return None
    return weighted_quantiles(kinds.select("rank", "sd", "w"), "sd", "w", ["rank"], {"varies": 0.5})


def _replicas_vary(work: pl.DataFrame, coords: pl.DataFrame) -> bool:
    """Whether the ranks of ``work`` are replicas (of other data-parallel ranks) whose data
    varies from step to step (``_varies``) on one of them at least: their calls paired by order
    are then no same work. Ranks of one replica (tensor-parallel peers) see the same data: their
    n-th calls are the same work however it varies. One replica's is enough: lengths clipped at
    a longest one can pad a replica that draws long samples to it every step, whose calls then
    hold still while its peer's vary (``transformers.Trainer``, DDP2 on 2 cores, lognormal lengths of
    sigma 1 clipped at 4x: rank 1's calls 0.04, rank 0's 0.36; rank 1 1.06-2.8x its peer's busy
    time, "slow compute 1" 1.64x). Over the 1,028 jobs recorded before, no verdict moved: a
    faulted pair's slow rank may vary, but the rank named there added calls, which still count."""
    ranks = work["rank"].unique()
    dps = coords.filter(pl.col("rank").is_in(ranks.implode()))["dp"]
    if dps.n_unique() < len(ranks) or (spread := _varies(work)) is None or len(spread) < len(ranks):
        return False
    return bool(spread["varies"].max() >= VARIES)


def _mostly_pairs(work: pl.DataFrame) -> bool:
    """Whether most of the time compared (``t``) is on kinds that only two ranks call (``n``):
    each rank is then measured against the other, and the ranks' slowdowns mirror each other.
    Not a few stray calls: among four replicas under ``transformers.Trainer`` on lognormal
    lengths, three ``aten::set_`` calls that only two ranks made (31 us of 2.7 s) took the
    ranks' scatter out of the comparison, and a replica whose batches happened longer (1.54x,
    the four ranks 0.54-1.54x) stood out at z 86: "slow compute 2"."""
    total = float(work["t"].sum() or 0.0)
    return total > 0 and float(work.filter(pl.col("n") < 3)["t"].sum() or 0.0) >= 0.5 * total


def _held(per: pl.DataFrame, gaps: pl.DataFrame) -> pl.DataFrame:
    """``per`` with each rank's time held in its GPU's queue beyond its peers' (``idle.idle_gaps``:
    idle while its next kernel was already launched) added to its work, as its GPU's: a GPU
    another process shares runs that process's time slices between this one's kernels, which
    take no longer, or not by as much (2 H200s, DDP under autocast, a neighbour busy 30% of each
    20 ms on rank 0's GPU: its kernels 1.17x its peer's, 3.4 ms a step held beyond its peer's,
    1.29x with it, "slow host 0" before; FSDP2 under autocast, one busy 30% on rank 1's GPU: 14.8
    ms a step held, 1.58x, "slow host 1" before). A healthy GPU holds a launched kernel only for
    the microseconds between two kernels, as its peers do."""
    if "queued_excess_ns" not in gaps.columns:
        return per.with_columns(held_ns=pl.lit(0.0))
    held = gaps.select("rank", "iteration", held_ns=pl.col("queued_excess_ns").clip(lower_bound=0.0))
    per = per.join(held, on=["rank", "iteration"], how="left").with_columns(pl.col("held_ns").fill_null(0.0))
    grown = 1 + pl.col("held_ns") / pl.max_horizontal(pl.col("busy_ns"), pl.lit(1.0))
    return per.with_columns(own=pl.col("own") * grown, own_fast=pl.col("own_fast") * grown,
                            busy_ns=pl.col("busy_ns") + pl.col("held_ns"))


def _least_slowdown(per: pl.DataFrame) -> pl.DataFrame:
    """``per`` with each rank's ``own`` and ``peer`` work taken at whichever typical call makes
    it the less slow over the iterations: each kind's ``QUICK`` quantile or its fastest call.

    On CPU processes sharing cores a call's time depends on what the processes beside it do
    at that moment, for as long as the job runs, and which process is unlucky is chance: one
    whose core is busier is descheduled in a good share of its calls of every kind, and one
    that finds a core to itself for a while has some calls far quicker than its peer ever does
    (megatron-core PP2 x DP2 under the profiler, 4 processes on 2 cores, no fault, 4 runs: one
    rank of a DP pair 1.16-1.57x its peer by each kind's quarter quantile and 1.03-1.09x by
    its fastest call, in 3 of them; in the fourth 0.97x by the quantile, 1.22x by the fastest
    call). A slow rank is slow by both. Calls are counted either way, so work a rank adds
    counts whole (plain DDP, 1.5x the forward's matmuls on one rank: 1.14x and 1.19x)."""
    ratio = per.group_by("rank").agg(
        quantile=pl.col("own").median() / pl.col("peer").median(),
        fastest=pl.col("own_fast").median() / pl.col("peer_fast").median())
    per = per.join(ratio, on="rank").with_columns(fast=pl.col("fastest") < pl.col("quantile"))
    return per.with_columns(
        own=pl.when(pl.col("fast")).then(pl.col("own_fast")).otherwise(pl.col("own")),
        peer=pl.when(pl.col("fast")).then(pl.col("peer_fast")).otherwise(pl.col("peer")),
    ).drop("own_fast", "peer_fast", "quantile", "fastest", "fast")


def _extra_work(work: pl.DataFrame, peers: list[str], scales: pl.DataFrame | None = None,
                others: pl.DataFrame | None = None) -> pl.DataFrame | None:
    """Per (rank, iteration): work of kinds none of its peers ran (``extra_own`` and
    ``extra_fast``, calls x either typical time, and ``extra_t``, measured; ``extra_base``, the
    peers' median time on the ops it was counted on, at the rank's scale), counted only where
    the rank also made more calls of that op than its peers did (``added_work.op_calls``): work *added* to the same
    program (extra matmuls of a shape the model never uses), not work *replaced* by other shapes
    (a replica whose sequences were longer runs other shapes, with as many calls of each op as
    its peers: no fault).

    The surplus of calls of a name is the rank's count less the median of its peers' (0 for a
    peer that never ran that name); the kinds only the rank ran are counted up to that surplus.
    ``scales`` (``rank``, ``iteration``, ``scale``): where programs differ, the peers' median is
    taken at the rank's scale (``_program_scale``: a stage of twice the layers makes twice the
    calls of every op, its optimizer's of shapes its own). ``others``: every rank's work, of
    which ``work`` holds the ranks judged (default: ``work``)."""
    lone = work.filter(pl.col("n") == 1)
    if lone.is_empty():
        return None
    others = work if others is None else others
    group = [*peers, "iteration"]
    calls = op_calls(others, ["rank", *group]).select("rank", *group, "calls", "own", name="op")
    # every rank of the group in that iteration, with 0 calls of a name it never ran
    ranks = others.select("rank", *group).unique()
    names = calls.select(*group, "name").unique()
    grid = ranks.join(names, on=group).join(calls, on=["rank", *group, "name"], how="left").with_columns(
        pl.col("calls", "own").fill_null(0.0)).sort([*group, "name", "calls"])
    grid = grid.with_columns(size=pl.len().over([*group, "name"])).filter(pl.col("size") >= 2)
    if grid.is_empty():
        return None
    gid = grid.select(pl.struct(*group, "name").rank("dense")).to_series().to_numpy()
    grid = grid.with_columns(median=pl.Series(others_median(gid, grid["calls"].to_numpy())),
                             peer_own=pl.Series(others_median(gid, grid["own"].to_numpy())))
    if scales is not None:
        grid = grid.join(scales, on=["rank", "iteration"], how="left").with_columns(
            median=pl.col("median") * pl.col("scale").fill_null(1.0),
            peer_own=pl.col("peer_own") * pl.col("scale").fill_null(1.0))
    grid = grid.with_columns(surplus=(pl.col("calls") - pl.col("median")).clip(lower_bound=0.0))
    # (its calls counted as the peers' are: a launching op's, not its kernels', ``op_calls``)
    lone_calls = op_calls(lone, ["rank", *group]).select("rank", *group, name="op", lone_calls="calls")
    lone = lone.with_columns(name=op_of()).group_by(["rank", *group, "name"]).agg(
        lone_own=(pl.col("calls") * pl.col("q")).sum(),
        lone_fast=(pl.col("calls") * pl.col("fast")).sum(), lone_t=pl.col("t").sum()).join(
        lone_calls, on=["rank", *group, "name"])
    added = lone.join(grid.select("rank", *group, "name", "surplus", "peer_own"),
                      on=["rank", *group, "name"]).with_columns(
        # (lone kinds that began no call, a call's second kernels where ops are known by name
        # only, are added whole where the op's calls are)
        share=pl.when(pl.col("lone_calls") > 0).then(pl.col("surplus") / pl.col("lone_calls"))
        .otherwise((pl.col("surplus") > 0).cast(pl.Float64)).clip(upper_bound=1.0)).filter(pl.col("share") > 0)
    if added.is_empty():
        return None
    return added.group_by(["rank", "iteration"]).agg(
        extra_own=(pl.col("lone_own") * pl.col("share")).sum(),
        extra_fast=(pl.col("lone_fast") * pl.col("share")).sum(), extra_t=(pl.col("lone_t") * pl.col("share")).sum(),
        extra_base=pl.col("peer_own").sum())


def _added_alone(extra: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame | None:
    """``added_work``'s columns where ranks run different programs (one rank per pipeline stage),
    from the work a rank alone does and counts as added (``_extra_work``): its time on the ops it
    calls more often, over its peers' on those ops, in nearly every traced iteration (``CONSISTENT``).

    ``added_work`` compares calls of ops between peers of one program and has none there; yet the
    calls are as exact (PP4 under the profiler, 4 processes on 2 cores, 1.5x the layers' matmuls
    on stage 2: 40.5 ``aten::mm`` calls a step of a shape no stage runs, 24 ms; its whole compute
    1.26x by times alone, under what contention makes, "it calls no op more often than its peers":
    no suspect)."""
    traced = work.group_by("rank").agg(n_it=pl.col("iteration").n_unique())
    per = (extra.filter(pl.col("extra_base") > 0).group_by("rank")
           .agg(n=pl.len(), own=pl.col("extra_own").median(), base=pl.col("extra_base").median())
           .join(traced, on="rank").filter(pl.col("n") >= CONSISTENT * pl.col("n_it")))
    if per.is_empty():
        return None
    return per.select("rank", added=(pl.col("base") + pl.col("own")) / pl.col("base"),
                      added_excess_ns=pl.col("own"), added_base_ns=pl.col("base"))


def _added_sum(a: pl.DataFrame | None, b: pl.DataFrame | None) -> pl.DataFrame | None:
    """Two readings of ``added_work``'s columns over different kinds, summed per rank."""
    parts = [x for x in (a, b) if x is not None]
    if not parts:
        return None
    both = pl.concat([x.select("rank", "added_excess_ns", "added_base_ns") for x in parts])
    return both.group_by("rank").agg(pl.col("added_excess_ns", "added_base_ns").sum()).select(
        "rank", added=(pl.col("added_base_ns") + pl.col("added_excess_ns")) / pl.col("added_base_ns"),
        added_excess_ns="added_excess_ns", added_base_ns="added_base_ns")


def _program_scale(work: pl.DataFrame, peer_calls: np.ndarray, peer_ns: np.ndarray) -> np.ndarray:
    """Per row of ``work``, how many times its rank's program runs its peers' programs, where
    they differ (one rank per pipeline stage), in that iteration: the median over the kinds it
    shares with them of its calls over their median's (``peer_calls``), each kind weighted by
    the lesser of its peers' time on it (``peer_ns``) and the rank's own (its calls x typical
    call), so that a few kinds called once a microbatch do not outvote the layers' work however
    many kinds a layer has, and work a peer added to one kind does not outweigh the rest of
    the program (2 processes on 2 CPUs, megatron-core PP2 under the profiler, 21 ms of matmuls
    before each of the last stage's microbatches, of the shape of its MLP's first GEMM: 9.75x
    the first stage's calls of it and 44 ms a step, more than half its peer-time weight; the
    first stage read as a tenth of the last and as calling everything else 10x too often,
    "slow compute" 4.97x beside the real one).

    Stages split the layers as the job was set up, not always evenly; a stage of 3x the layers
    calls every kind of a layer 3x as often, each call as fast (2 H200s, megatron-core PP2 under
    the profiler, 6 layers on the last stage and 2 on the first: its work counted against its
    peer's read 3.05x, a slow GPU). Work added to a layer (extra matmuls) calls a few kinds more
    often and leaves the median where the program puts it."""
    own_ns = work["calls"].to_numpy() * work["q"].to_numpy()
    frame = work.select("rank", "iteration").with_columns(
        r=pl.Series(work["calls"].to_numpy() / np.maximum(peer_calls, 1e-9)), w=pl.Series(np.minimum(peer_ns, own_ns)),
        row=pl.int_range(pl.len()))
    g = ["rank", "iteration"]
    scale = weighted_quantiles(frame, "r", "w", g, {"scale": 0.5})
    return frame.join(scale, on=g, how="left").sort("row")["scale"].fill_null(1.0).to_numpy()


DATA_SCALED_PART = 0.05
"""Share of the ranks' compute that the ops every rank calls a different number of times
(``graded_work``) must take for the ranks' calls to be compared at their data's scales
(``_data_scales``): the share ``imbalance`` names such a split at."""

LOOP_KINDS = 20
"""How many kinds of op one rank must call more often than its peers, each by about one factor,
for its data to be running the program's loops more often (``_data_scales``), where the ranks'
calls are not graded: work added to a replica in the corpora's jobs calls 6-10 kinds more often
(extra matmuls in a GNN's, a DLRM's, an MoE's, a Megatron TP2 x DP2 layer's), a replica whose
sentences are 1.6x as long calls each of 40 kinds of its recurrent loop 1.5x as often."""


def _data_scales(shared: pl.DataFrame, peer_calls: np.ndarray, peer_q: np.ndarray,
                 graded: pl.DataFrame | None) -> pl.DataFrame | None:
    """(``rank``, ``iteration``, ``scale``) where ranks of one program run its loops as often as
    their data makes them: the ops every rank calls a different number of times (``graded``)
    take ``DATA_SCALED_PART`` of the work or more, or a rank calls ``LOOP_KINDS`` kinds or more
    more often than its peers, by about one factor, in most iterations (``_loop_kinds``). A rank's
    scale is the median, over the kinds whose calls differ between ranks (and that both it and its
    peers spend time on), of its calls over its peers' median; 1 where there are none. None
    elsewhere.

    A recurrent net steps its cells once per token: a replica whose shard holds longer sentences
    calls every op of its loop more often, each call as fast, and its ops over whole sequences
    take longer (a user's LSTM seq2seq under DDP, 4 gloo processes on 2 cores, rank 2's
    sentences 1.6x as long: 1.5x its peers' calls of each of 40 ops a step and 1.41x their
    compute; "slow compute 2" by its surplus calls and by its lateness). Work added to a rank
    adds calls of a few ops over its scale; a slower device makes each call slower, at any
    scale (``data_sized.looped_by_data`` weighs the two)."""
    ratio = shared["calls"].to_numpy() / np.maximum(peer_calls, 1e-9)
    frame = shared.select("rank", "iteration", "name").with_columns(
        r=pl.Series(ratio), w=pl.Series(np.minimum(peer_calls * peer_q, shared["calls"].to_numpy() * shared["q"].to_numpy())),
        varies=pl.Series(ratio != 1.0))
    graded_part = 0.0 if graded is None else float(graded["share"].sum())
    if graded_part < DATA_SCALED_PART and _loop_kinds(frame) < LOOP_KINDS:
        return None
    varying = frame.group_by("name").agg(pl.col("varies").any()).filter(pl.col("varies"))["name"]
    # (each kind one vote: work added to a rank's loop calls a few kinds more often, however
    # dear, and a median by time would follow those: the LSTM above with 2x its matmuls on rank
    # 2 too read a scale of 1.62 by time where its loops' kinds say 1.5, its extra calls inside)
    scale = (frame.filter(pl.col("name").is_in(varying.implode()) & (pl.col("w") > 0))
             .group_by("rank", "iteration").agg(scale=pl.col("r").median()))
    # what of its peers' work the rank's data left as it was: the kinds it calls as often as they
    # do (``data_sized.looped_by_data`` reads it)
    peer_ns = pl.Series(peer_calls * peer_q)
    fixed = shared.select("rank", "iteration").with_columns(peer_ns=peer_ns, same=pl.Series(ratio == 1.0)).group_by(
        "rank", "iteration").agg(fixed_part=pl.col("peer_ns").filter(pl.col("same")).sum() / pl.col("peer_ns").sum())
    return (shared.select("rank", "iteration").unique().join(scale, on=["rank", "iteration"], how="left")
            .join(fixed, on=["rank", "iteration"], how="left").with_columns(pl.col("scale").fill_null(1.0)))


def _loop_kinds(frame: pl.DataFrame) -> int:
    """The most kinds one rank calls more often than its peers (by ``added_work.DATA_SLACK``) in
    most iterations and by about one factor: within ``DATA_SLACK`` of the median of its kinds'
    ratios. ``frame``: ``rank``, ``iteration``, ``name`` and ``r``, the rank's calls over its peers'.

    A loop run more often runs all its ops more often by its trip count (a user's LSTM, one
    replica's sentences 1.6x as long: 43 of its 59 kinds called more often at 1.35-1.65x, around
    1.5). Work added to a rank repeats a few ops, each a chain of nested kinds, and the ops around
    them stay (a user's PowerSGD CNN, every convolution run twice on rank 0: 21 kinds more often,
    from 1.11x to 4x, 9 of them at 2x, the convolutions' chain from ``aten::conv2d`` down to
    ``mkldnn_convolution`` and its backward's; its batch norms and activations as often as the
    peers'). Counted without the factor, that rank's 21 kinds read as a data loop of scale 2, its
    doubled convolutions as its data, and it was no suspect."""
    kinds = (frame.group_by("rank", "name").agg(more=(pl.col("r") > 1 + DATA_SLACK).mean(), r=pl.col("r").median())
             .filter(pl.col("more") >= CONSISTENT))
    if kinds.is_empty():
        return 0
    about = ((pl.col("r") / pl.col("r").median().over("rank") - 1).abs() <= DATA_SLACK)
    return int(kinds.filter(about).group_by("rank").len()["len"].max() or 0)


OFTEN = 2.0
"""One rank a stage, how many times as often a rank must call what it runs beside its layers to
have added work to them: a kind only an end stage runs, over the rank's most-called kind of the
same op that a peer runs too (``_layers_often``); an op over its peers' calls at the rank's scale
(``added_work``'s ``often``). An end stage's own program is called once a microbatch or a step,
and shares its layers' shapes at most twice over."""


def _layers_often(work: pl.DataFrame) -> pl.Expr:
    """Per row of ``work``: a kind of one rank alone (``n`` 1) called more than ``OFTEN`` x as often
    in the iteration as the rank's most-called kind of the same op that a peer runs too.

    What the first and the last pipeline stage alone run is their program, called once a
    microbatch or a step: the embedding, the output layer, the loss, their parameters' updates.
    Their layers' kinds, which every stage runs, are called as often at least: once a layer and
    microbatch. Work added inside the layers is called many times a layer instead (megatron-core
    PP4 under the profiler, 4 processes on 8 and on 2 CPUs, 1.75x the layers' matmuls on the last
    stage: 47.5 ``aten::mm`` calls a step of a shape no stage runs, 43.5 ms, where its most-called
    shared ``aten::mm`` kind and its output layer's are called 2-4 times; read as its program, it
    was no suspect).

    Only kinds that are calls of an op, not kernels (``shape`` without ``<- op``): a library
    launches one op's kernels in chunks, as many as its tensors need (4 H200s, PP4 under the
    profiler: the first stage's optimizer launched 20-40 ``multi_tensor_apply`` kernels a step
    over the embedding's parameters, other stages' a handful)."""
    op = op_of()
    shared_max = pl.when(pl.col("n") >= 2).then(pl.col("calls")).max().over(["rank", "iteration", op])
    a_call = ~launched()
    return (pl.col("n") == 1) & a_call & (pl.col("calls") > OFTEN * shared_max.fill_null(float("inf")))


def _z(effect: pl.Expr, low: pl.Expr, spread: float) -> pl.Expr:
    """A rank's z (``compare_same_work``): its slowdown (``effect``, a log) over its standard error
    ``se``, or, over three iterations or more, its slowest iteration's (``low``) over the ranks'
    scatter, whichever is larger."""
    return (pl.when(pl.col("n_it") >= 3).then(pl.max_horizontal(effect / pl.col("se"), low / max(spread, _FLOOR)))
            .otherwise(effect / pl.col("se")))


def compare_same_work(ops: pl.DataFrame, gaps: pl.DataFrame, coords: pl.DataFrame, group: list[str], *,
                      slow_op: float, min_effect: float, shared_cpus: bool = False,
                      programs_differ: bool = False,
                      stages_alone: bool = False
                      ) -> tuple[pl.DataFrame, pl.DataFrame, float, bool, pl.DataFrame | None] | None:
    """Stage 1 over ``ops`` (``rank``, ``iteration``, ``name``, ``shape``, ``self_ns``);
    ``gaps`` per (rank, iteration) from ``peers._gaps``. Returns the per (rank, iteration) and
    per-rank tables of ``peer_evidence.PeerEvidence``, the cut-off, whether some kind had two peers
    only and the ops the program splits unevenly by rank (``added_work.graded_work``; None for
    none, and where programs differ); None when no kind of work ran on two or more peers.

    ``shared_cpus``: compute is timed on CPU processes that share cores; a rank's time on the
    same work is then the lesser of two estimates (``_least_slowdown``), kinds called under
    ``_FEW_CALLS`` times are not timed, and the work it adds is counted at one price
    (``added_work``). ``programs_differ``: the ranks compared run different programs (one rank
    per pipeline stage) and their kinds are shapes, whose calls are counted. ``stages_alone``:
    the ranks compared are one a pipeline stage (shapes or the n-th calls of an op), whose
    kernels keep the quarter quantile (``_kernels_alone``)."""

    kind = ["name", "shape"]
    ops = ops.join(coords.select("rank", "tp", "pp", "dp"), on="rank", how="left")
    peers = [c for c in group if c != "rank"]
    # per (rank, kind): the typical time of one call, from its quicker calls (being descheduled
    # only ever makes a call longer)
    per_call = ops.group_by(["rank", *peers, *kind]).agg(
        q=pl.col("self_ns").quantile(QUICK).cast(pl.Float64),
        fast=_fastest(shared_cpus).cast(pl.Float64), total=pl.len(),
        sizes_unknown=_sizes_unknown().all(), *(_alone(ops) if not stages_alone else []))
    if "alone" in per_call.columns:
        per_call = _kernels_alone(per_call, [*peers, *kind])
    if shared_cpus:
        per_call = _nth_fastest(per_call, peers)
    # (``launches``: the op calls a kind's kernels began, where a kernel's op is known by name only)
    launches = [pl.col("launch").sum().cast(pl.Float64).alias("launches")] if "launch" in ops.columns else []
    # (``t_alone``, ``beside``: the kind's time in calls that ran alone and its calls that did
    # not, for ``_fair_time``)
    beside = ([pl.col("self_ns").filter(~pl.col("contended")).sum().cast(pl.Float64).alias("t_alone"),
               pl.col("contended").sum().cast(pl.Float64).alias("beside")]
              if "contended" in ops.columns and not stages_alone else [])
    # (``calls_trip``: where a loop's trips differ between ranks of one program, each call inside
    # it at its peers' trips, ``loop_trips``, for the calls a rank adds (below); not between
    # pipeline stages, whose programs differ)
    at_trips = "trips" in ops.columns and not programs_differ and bool((ops["trips"] != 1.0).any())
    trips = [pl.col("trips").sum().cast(pl.Float64).alias("calls_trip")] if at_trips else []
    counts = ops.group_by(["rank", *peers, "iteration", *kind]).agg(calls=pl.len().cast(pl.Float64), *trips,
                                                                      t=pl.col("self_ns").sum().cast(pl.Float64),
                                                                      q_it=pl.col("self_ns").quantile(QUICK).cast(pl.Float64),
                                                                      longest=pl.col("self_ns").max().cast(pl.Float64),
                                                                      *launches, *beside)
    work = counts.join(per_call, on=["rank", *peers, *kind])
    if beside:
        work = _fair_time(work)
    key = [*peers, "iteration", *kind]
    work = work.with_columns(n=pl.len().over(key))
    # On shared CPUs a kind a rank calls once or twice in the whole trace has no typical call:
    # one call descheduled midway is all there is (megatron-core TP2 x DP2, heavy-tailed
    # sequence lengths, most kinds called once: a rank's one GELU 9.1 ms where its TP peer's
    # took 1.0 ms). Its time is not compared there; its calls are still counted (below).
    # (its work, and its peers' on it, still count in the rank's whole: ``busy_ns``, ``work_ns``)
    timed = (pl.col("total") >= _FEW_CALLS) if shared_cpus else pl.lit(True)
    work = work.with_columns(other_sizes=_other_sizes(work, peers))
    if not work.filter((pl.col("n") >= 2) & timed & ~pl.col("other_sizes")).is_empty():
        timed = timed & ~pl.col("other_sizes")
    # all the rank's work, every kind at its typical call, shared with a peer or not: what work
    # it adds is weighed against (``added_work.adds_work``). Where replicas drew other sequence
    # lengths, the kinds two peers share are a sliver of it (CPU gloo, PP2 x DP2, lognormal
    # lengths: 2.6 ms of a last stage's ~40 ms a step). Untimed kinds too: there most kinds are
    # called once or twice. (A descheduled single call overstates it, which only makes counted
    # work harder to name, never a healthy rank a suspect.)
    all_work = work.group_by("rank", "iteration").agg(all_work_ns=(pl.col("calls") * pl.col("q")).sum())
    shared = work.filter(pl.col("n") >= 2).with_columns(gid=pl.struct(key).rank("dense"))
    if shared.filter(timed).is_empty():
        return None
    # each rank against the median of the *others*: with four ranks a slow one would otherwise
    # pull the median of all four halfway to itself (and two peers compare with each other)
    gid = shared["gid"].to_numpy()
    peer_calls = others_median(gid, shared["calls"].to_numpy())
    peer_q = others_median(gid, shared["q"].to_numpy())
    scale = _program_scale(shared, peer_calls, peer_calls * peer_q) if programs_differ else None
    own_program, data_scales = None, None
    # Ranks of different programs (one rank per pipeline stage), their calls of each kind
    # counted: work only one of them does is its program (the embedding, the loss, the output
    # layer's GEMMs), not work added, and a program's calls are compared at its scale
    # (``_program_scale``). (Kinds that are the n-th call of an op, ``peers.nth_call``, pair the
    # calls one to one: no scale, and a rank's calls beyond its peer's are work it added.)
    # Only the first stage (the embedding) and the last (the output layer, the loss) have work
    # of their own: a stage between them runs layers only, so what it alone runs is added
    # (megatron-core PP4 under the profiler, 4 processes on 2 cores: 1.5x the layers' matmuls
    # on stage 1, of a shape no stage runs, read as stage 1's program, no suspect).
    if programs_differ:
        middle = list(middle_stages(coords))
        # (a stage of more layers makes more calls of every op: its surplus is over its scale)
        scales = shared.select("rank", "iteration").with_columns(scale=pl.Series(scale)).unique(["rank", "iteration"])
        program = (pl.col("n") == 1) & ~pl.col("rank").is_in(middle) & ~_layers_often(work)
        extra = _extra_work(work.filter(~program), peers, scales, others=work)
        # (their time is still the stage's: ``busy_ns`` weighs stages against each other)
        own_program = (work.filter(program).group_by("rank", "iteration").agg(own_program_ns=pl.col("t").sum()))
        peer_calls = peer_calls * scale
    else:
        extra = _extra_work(work, peers)
    if programs_differ:
        # one group of all, each rank's peers taken at its scale, on the kinds two or more run;
        # and the work a rank alone does, counted as added
        added = _added_sum(added_work(shared.with_columns(job=pl.lit(0)), ["job"], shared_cpus=shared_cpus,
                                      scales=scales, often=OFTEN),
                           None if extra is None else _added_alone(extra, work))
        graded = None
    else:
        graded = graded_work(work, peers, shared_cpus=shared_cpus)
        data_scales = _data_scales(shared, peer_calls, peer_q, graded)
        if at_trips:
            # the calls a rank adds, counted at its peers' trips of the loops the data runs
            # unevenly (``loop_trips``); its program's uneven split stays read from the calls made
            counted = work.with_columns(calls=pl.col("calls_trip"))
            at = shared.with_columns(calls=pl.col("calls_trip"))
            at_scales = _data_scales(at, others_median(gid, at["calls"].to_numpy()), peer_q, graded)
            added = added_work(counted, peers, shared_cpus=shared_cpus, data_scales=at_scales)
        else:
            added = added_work(work, peers, shared_cpus=shared_cpus, data_scales=data_scales)
    work = shared.with_columns(
        own=pl.col("calls") * pl.col("q"),
        peer=pl.Series(peer_calls * peer_q),
        own_fast=pl.col("calls") * pl.col("fast"),
        peer_fast=pl.Series(peer_calls * others_median(gid, shared["fast"].to_numpy())),
        own_it=pl.col("calls") * pl.col("q_it"),
        peer_it=pl.Series(peer_calls * others_median(gid, shared["q_it"].to_numpy())),
    )
    whole = work.group_by(["rank", "iteration"]).agg(work_ns=pl.col("peer").sum(), busy_ns=pl.col("t").sum()).join(
        all_work, on=["rank", "iteration"], how="left")
    work = work.filter(timed)
    pairs = _mostly_pairs(work)
    per = work.group_by(["rank", "iteration"]).agg(
        pl.col("own", "peer", "own_fast", "peer_fast").sum(), n_ops=pl.len(),
        # how far the iteration's own typical calls stray from the whole trace's, against its
        # peers': a fault that set in midway moves the calls of its iterations only (``onset``)
        pace=(pl.col("own_it").sum() / pl.col("own").sum()).log() - (pl.col("peer_it").sum() / pl.col("peer").sum()).log(),
        share_slow=pl.col("t").filter(pl.col("own") > (1 + slow_op) * pl.col("peer")).sum() / pl.col("t").sum(),
    ).join(whole, on=["rank", "iteration"], how="left")
    if extra is not None:   # work no peer did: the rank's own, against nothing of the peers'
        # Added to its work on the kinds it shares, as a share of all its work (kinds no peer
        # ran included, ``all_work_ns``): where replicas drew other sequence lengths the kinds
        # they share are a sliver of it, and the few ops a rank calls more often by design
        # would read as many times that sliver (4 H200s, PP2 x DP2, the distributed optimizer,
        # lognormal lengths, no fault: one rank's optimizer shard held more parameters, 37 more
        # norm and copy kernels a step, 3.4 ms against 7 ms of shared kinds: "1.47x"). Where it
        # shares every kind, the same as adding it.
        extra_own, extra_fast = pl.col("extra_own").fill_null(0.0), pl.col("extra_fast").fill_null(0.0)
        base = pl.max_horizontal(pl.col("all_work_ns") - extra_own, pl.col("own"))
        base_fast = pl.max_horizontal(pl.col("all_work_ns") - extra_own, pl.col("own_fast"))
        per = per.join(extra, on=["rank", "iteration"], how="left").with_columns(
            own=pl.col("own") * (1 + extra_own / base),
            own_fast=pl.col("own_fast") * (1 + extra_fast / base_fast),
            busy_ns=pl.col("busy_ns") + pl.col("extra_t").fill_null(0.0),
            alone_ns=pl.col("extra_t").fill_null(0.0),
        ).drop("extra_own", "extra_fast", "extra_t")
    if own_program is not None:
        per = per.join(own_program, on=["rank", "iteration"], how="left").with_columns(
            busy_ns=pl.col("busy_ns") + pl.col("own_program_ns").fill_null(0.0)).drop("own_program_ns")
    per = _held(per, gaps)
    per = (per.join(data_scales.rename({"scale": "data_scale"}), on=["rank", "iteration"], how="left")
           if data_scales is not None else per.with_columns(data_scale=pl.lit(None, pl.Float64),
                                                             fixed_part=pl.lit(None, pl.Float64)))
    per = _least_slowdown(per)
    per = per.with_columns(effect=(pl.col("own") / pl.col("peer")).log())
    per = per.with_columns(excess_ns=pl.col("busy_ns") * (1 - (-pl.col("effect")).exp()))
    per = per.join(gaps, on=["rank", "iteration"], how="left")
    # Idle time in a job of two ranks: their excesses mirror each other, so their scatter is
    # their difference itself, and whatever it was each rank's z came out 0.93 with three
    # iterations (2 H200s, FSDP, a 20 ms sleep in rank 0's data path: 20.4 ms more idle a step,
    # in every step, at z 0.93). There the noise is how much a rank's own excess varies from one
    # iteration to the next (three or more of them: with one it is nothing), and the idle time
    # judged its stalls (gaps of 1 ms and more, ``idle.LONG_GAP_NS``), in every step: two healthy
    # hosts pace their GPUs in short gaps differently, by up to 160 ms a step, steadily (2 H100s
    # and H200s, megatron-core TP2 under the profiler). (Not where two pairs mirror each other: a
    # stage-0 rank of PP2 x DP2, 4 processes on 2 cores, waiting on a heavier last stage stalls
    # 20 ms a step more than its DP peer, at z 1.1 across the ranks, which the verdict's
    # ``big_stalls`` weighs.)
    two = pairs and per["rank"].n_unique() == 2 and per["iteration"].n_unique() >= 3
    idle = "long_excess_ns" if two else "gap_excess_ns"
    ranks = per.group_by("rank").agg(
        effect=(pl.col("own").median() / pl.col("peer").median()).log(), n_it=pl.len(),
        scatter=(pl.col("effect") - pl.col("effect").median()).abs().median() * MAD_TO_SIGMA,
        consistent=(pl.col("effect").exp() - 1 >= min_effect).mean(),
        share_slow=pl.col("share_slow").median(), n_ops=pl.col("n_ops").sum(),
        busy_ns=pl.col("busy_ns").median(), work_ns=pl.col("work_ns").median(), all_work_ns=pl.col("all_work_ns").median(),
        gap_excess_ns=pl.col("gap_excess_ns").median(), gap_ns=pl.col("gap_ns").mean(),
        long_excess_ns=pl.col("long_excess_ns").median(), held_ns=pl.col("held_ns").median(),
        alone_ns=(pl.col("alone_ns") if "alone_ns" in per.columns else pl.lit(0.0)).median(),
        data_scale=pl.col("data_scale").median(), fixed_part=pl.col("fixed_part").median(),
        gap_consistent=(pl.col(idle) > 0).mean(),
        data_stalls=data_stalls(min_effect),
        low=pl.col("effect").min(),
        slow_its=pl.col("iteration").filter(pl.col("effect").exp() - 1 >= min_effect).sort(),
        gap_its=pl.col("iteration").filter(pl.col(idle) > 0).sort(),
    ).with_columns(excess_ns=pl.col("busy_ns") * (1 - (-pl.col("effect")).exp()))
    ranks = with_added(ranks, added)
    # Replicas whose data varies every step do different work in their calls paired by order
    # (``_replicas_vary``): their time on them is not compared (added calls still count, and
    # idle time). Between two processes only: with four on two cores, descheduled call by call,
    # healthy and faulted ranks' calls vary as much from step to step (megatron-core DP4, TP2 x
    # DP2, PP2 x DP2, TP2 x PP2, plain DDP/FSDP under the profiler's defaults, 25 jobs, most run twice:
    # 0.12-0.92 on the least varying of the four; DP4 on lognormal lengths 0.94-1.11).
    if shared_cpus and work["rank"].n_unique() == 2 and _replicas_vary(work, coords):
        ranks = ranks.with_columns(*[pl.lit(0.0).alias(c) for c in ("effect", "low", "consistent", "excess_ns")])
    # Noise: how far ranks' slowdowns scatter (most ranks are healthy), and how much a rank's
    # own slowdown varies between iterations; with two peers only the latter means anything.
    spread = 0.0 if pairs else float((ranks["effect"].abs()).median() or 0.0)
    ranks = ranks.with_columns(
        se=pl.max_horizontal(pl.lit(spread), MEDIAN_SE * pl.col("scatter") / pl.col("n_it").cast(pl.Float64).sqrt(),
                             pl.lit(_FLOOR)))
    noise = within_rank_scale(idle) if two else robust_scale(idle)
    gap_scale = max(per.select(noise).item() or 0.0, 1000.0)
    z_crit = z_critical(len(ranks))
    # A rank slower in every iteration is slower, however much its slowdown varies: work it adds
    # whose amount varies per microbatch scatters its iterations widely (megatron-core PP4 under
    # the profiler, 4 processes on 2 cores, matmuls before each microbatch drawn lognormal: 1.2x to
    # 1.9x its peers, in every step, at z 2.4 by the scatter). There its slowest iteration is
    # what is tested, against the ranks' scatter (with two peers of a kind, none: the timers'
    # floor). Counted work hardly varies on a healthy rank (each kind's typical call is one for
    # the whole trace; only its calls move), and it must still be slower by ``min_effect`` in
    # nearly every iteration (``consistent``).
    ranks = ranks.with_columns(
        z=_z(pl.col("effect"), pl.col("low"), spread),
        gap_z=pl.col(idle) / (MEDIAN_SE * gap_scale / pl.col("n_it").cast(pl.Float64).sqrt()),
    ).with_columns(
        flagged=(pl.col("z") > z_crit) & (pl.col("effect").exp() - 1 >= min_effect) & (pl.col("consistent") >= CONSISTENT),
        gap_flagged=(pl.col("gap_z") > z_crit) & ((pl.col("gap_consistent") >= CONSISTENT) | pl.col("data_stalls"))
        # (and, between two, stalls that are a real share of its work: a steady 4.6 ms a step,
        # 2.8%, beside a host pacing its GPU 163 ms a step more in short gaps, is no stall; and
        # between pipeline stages, which idle differently by the schedule's design: ``peers``)
        & (pl.lit(not (two or programs_differ)) | (pl.col(idle) >= min_effect * pl.col("busy_ns"))),
        # (a rank whose data runs the loops more often, its z as above taken at its data's scale:
        # ``data_sized.looped_by_data``)
        above_scale=_z(pl.col("effect") - pl.col("data_scale").log(), pl.col("low") - pl.col("data_scale").log(),
                       spread) > z_crit,
    ).with_columns(
        slowdown=pl.col("effect").exp(),
        iterations=pl.when(pl.col("flagged")).then(pl.col("slow_its")).when(pl.col("gap_flagged"))
        .then(pl.col("gap_its")).otherwise(pl.lit([], pl.List(pl.Int32))),
    ).select("rank", "slowdown", "z", "share_slow", "n_ops", "flagged", "iterations", "excess_ns", "busy_ns",
             "gap_excess_ns", "gap_z", "gap_flagged", "gap_ns", "long_excess_ns", "data_stalls", *ADDED_COLUMNS,
             "work_ns", "all_work_ns", "held_ns", "alone_ns", "data_scale", "fixed_part", "above_scale").sort("rank")
    flagged_ranks = ranks.filter(pl.col("flagged"))["rank"].to_list()
    per = per.with_columns(
        z=pl.col("effect") / max(spread, _FLOOR),
        flagged=pl.col("rank").is_in(flagged_ranks) & (pl.col("effect").exp() - 1 >= min_effect),
        # (a kind's quickest calls timed at 0 make the log infinite: no evidence either way)
        onset_effect=pl.col("effect") + pl.when(pl.col("pace").is_finite()).then(pl.col("pace")).otherwise(0.0),
    ).select("rank", "iteration", "effect", "z", "n_ops", "share_slow", "excess_ns", "busy_ns", "flagged",
             "gap_ns", "gap_excess_ns", "gap_z", "gap_flagged", "onset_effect").sort(["rank", "iteration"])
    return per, ranks, z_crit, pairs, graded
