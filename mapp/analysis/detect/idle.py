"""Stage 1's host evidence: idle time between a rank's ops, stalls inside its step spans, and
spans a slow-launching host stretched.

A slow host launches every op late, which shows as idle gaps on its timeline (its GPU waits);
a starved data loader stalls a forward step. Both are compared with the peers' like
``peers.compare_peers`` compares compute, per (rank, iteration). On CPU processes of several
threads, the thread that computes idles too where another thread's events fill the process's
gaps (``_driving_threads``). Where spans are timed on the GPU, a host slower than its kernels also
stretches the spans themselves, unlike a slow GPU (``launch_bound``).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from mapp.analysis.detect._stats import MEDIAN_SE, robust_scale, within_rank_scale, z_critical
from mapp.analysis.detect.thresholds import CONSISTENT
from mapp.analysis.ingest import megatronapp
from mapp.analysis.ingest.schema import COMM_KERNEL_PATTERN, COMM_OP_PREFIXES, COMM_WAIT_NAMES, DATA_WAIT_PREFIX

__all__ = ["idle_gaps", "stalls", "lasting_gaps", "launch_bound", "data_stalls", "BACKWARD", "STALL", "STEADY"]

LONG_GAP_NS = 1_000_000
"""An idle gap this long (1 ms) is a stall, time the host spent on something other than
launching (a sleep, a data fetch, a pause), not a launch that came a little late: a host that
paces its GPU leaves gaps of tens to hundreds of microseconds (2 H100s, megatron-core TP2 under
the profiler: 50-500 us)."""


QUEUED_NS = 50_000
"""The least time a GPU holds launched work idle that ``idle_gaps`` counts as held, not its
host's: between two queued kernels a GPU idles a few microseconds, which over thousands of
kernels a step add up to milliseconds, more on the rank whose host ran further ahead (2 H200s,
a user's DDP transformer under autocast with ``--clip``, no fault: 19.5 ms over four steps on
one rank in 2,906 gaps under 50 us, 3.6 ms on its peer in 1,112; counted as held, 3.6-4.4 ms a
step beyond the peer's and "slow host 0" 1.73x, 1.2-1.7 ms and 1.31x in a second run; at this
floor no suspect in either). Another process's time slice lasts far longer (a neighbour's 4096 x 4096
matmuls: 0.2-3 ms). Held beyond its peer's, a step, at this floor: at
most 0.11 ms on any rank of 63 jobs on 2 H200s without a neighbour (healthy, imbalanced, other
faults), 1.6-17.8 ms on the shared GPU of 18 of 20 jobs with one."""


def idle_gaps(events: pl.DataFrame, leaves: pl.DataFrame, group: list[str], coords: pl.DataFrame,
              min_effect: float, starts: pl.DataFrame | None = None,
              stalled: pl.DataFrame | None = None, recurring: bool = False,
              loss_stage: bool = False) -> pl.DataFrame:
    """Idle time between a rank's consecutive leaf events (compute leaves, communication,
    optimizer), per iteration, compared with its peers'. A slow host launches every op late,
    which shows as such gaps; a slow GPU does not. ``leaves``: ``rank``, ``iteration``,
    ``ts_ns``, ``end_ns`` of the compute leaves; ``starts``: iteration starts, as zero-length
    marks on the timeline (the time before an iteration's first op is idle too); ``stalled``:
    ``rank``, ``iteration``, ``stall_ns`` from :func:`stalls`, host time inside step spans,
    counted with the idle time. ``recurring``: stalls count only where they recur at one place
    of the program (``_recurring``); ``leaves`` then carry each leaf's ``name``. Where they do,
    ``handover_excess_ns`` is the excess of the stalls before a backward span whose compute span
    before it was a forward one (0 without names). ``loss_stage``: stages are compared with each
    other (one rank per stage), or processes share CPUs under mapp's capture (a profiler trace
    records the loss's ops), so the last stage's hand-over stalls, where it computes the loss
    outside the traced spans, are its program's, not idle time (``_loss_stage``). Where ``leaves``
    carry their ``lane`` and a profiler traced CPU processes of several threads, each rank's
    idle time is also measured on the thread that computes (``_driving_threads``), and the larger
    excess over its peers of the two is kept (``_idler``)."""
    # GPU communication kernels that no comm event stands for (schema.COMM_KERNEL_PATTERN) are
    # waiting for peers too: without them a pipeline's first stage, idle on its GPU while a
    # coalesced SendRecv waited for a slow next stage, looked like a slow host (real 4-GPU job)
    comm_kernel = ((pl.col("cat") == "other") & pl.col("lane").str.starts_with("stream:")
                   & pl.col("name").str.contains("(?i)" + COMM_KERNEL_PATTERN))
    # and so is a host's wait for overlapped DP communication (4 GPUs, DP4 with
    # overlap_grad_reduce: the peers of a rank slow before each microbatch waited ~100 ms a step
    # in grad_sync_wait, as much as its own extra time, and nobody's idle time stood out)
    waiting = comm_kernel | ((pl.col("cat") == "other") & pl.col("name").is_in(COMM_WAIT_NAMES))
    # On CPUs alone (gloo), a ``c10d::`` dispatch op is the host inside a communication call: a
    # blocking send or receive waits there for its peer before gloo's own span of the transfer
    # begins (2 processes on 2 cores, megatron-core PP2 under the profiler, two layers on the
    # last stage and one on the first, no fault: the last stage's ``c10d::send`` calls took
    # 23 ms a step before their ``gloo:send``, its idle time 49 ms a step more than the first
    # stage's, "slow host 1"). (On GPUs such an op only launches the collective's kernel.) So
    # is a functional collective's ``wait_tensor`` (``schema.COMM_OP_PREFIXES``)
    if not events.filter(pl.col("lane").str.starts_with("stream:")).height:
        dispatch = pl.any_horizontal([pl.col("name").str.starts_with(p) for p in COMM_OP_PREFIXES])
        waiting = waiting | ((pl.col("cat") == "other") & dispatch)
    cols = ["rank", "iteration", "ts_ns", "end_ns"] + (["name"] if recurring or "name" in leaves.columns else [])
    lane = ["lane"] if "lane" in leaves.columns else []
    other = events.filter((pl.col("cat").is_in(["collective", "p2p", "optimizer"]) | waiting)
                          & pl.col("iteration").is_not_null()).select(
        "rank", "iteration", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"), "name", "lane",
        _launched(events)
    ).select(cols + ["launch_ns"] + lane)
    leaves = leaves.with_columns(_launched(leaves)).select(cols + ["launch_ns"] + lane).with_columns(compute=pl.lit(True))
    cols = cols + ["launch_ns"] + lane + ["compute"]
    other = other.with_columns(compute=pl.lit(False)).select(cols)
    # a GPU's own copies and fills (``memory``) say only whether the GPU was busy with this
    # rank's work while its next kernel waited (``_held_apart``)
    memory = events.filter((pl.col("cat") == "memory") & pl.col("iteration").is_not_null()).select(
        "rank", "iteration", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"), "name", "lane",
        _launched(events)
    ).select(cols[:-1]).with_columns(compute=pl.lit(False), memory=pl.lit(True))
    schema = leaves.schema | {"memory": pl.Boolean}
    parts = [leaves.with_columns(memory=pl.lit(False)), other.with_columns(memory=pl.lit(False)).cast(schema)]
    if starts is not None and len(starts):
        marks = starts.join(leaves.select("rank", "iteration").unique(), on=["rank", "iteration"], how="semi")
        parts.append(marks.with_columns(end_ns=pl.col("ts_ns"), name=pl.lit("<start>"), launch_ns=pl.lit(None, pl.Int64),
                                        lane=pl.lit(None, pl.String), compute=pl.lit(False)).select(cols)
                     .with_columns(memory=pl.lit(False)).cast(schema))
    if len(memory):
        parts.append(memory.cast(schema))
    if recurring:
        parts.append(_data_marks(events, cols).cast(schema))
    timeline = pl.concat(parts).sort(["rank", "ts_ns"])
    g = [c for c in group if c != "rank"] + ["iteration"] if group != ["rank"] else ["rank"]

    def excess(tl: pl.DataFrame) -> pl.DataFrame:
        per = _per_iteration(tl, events, cols, recurring)
        if stalled is not None and len(stalled):   # host time spent inside a coarse step span
            per = per.join(stalled, on=["rank", "iteration"], how="left").with_columns(
                gap_ns=pl.col("gap_ns") + pl.col("stall_ns").fill_null(0).cast(pl.Int64),
                long_ns=pl.col("long_ns") + pl.col("stall_ns").fill_null(0).cast(pl.Int64)).drop("stall_ns")
        per = per.join(coords.select("rank", "tp", "pp", "dp"), on="rank", how="left")
        if loss_stage:
            per = _loss_stage(per, coords["pp"].max())
        return per.with_columns(
            gap_excess_ns=(pl.col("gap_ns") - pl.col("gap_ns").median().over(g)).cast(pl.Float64),
            long_excess_ns=(pl.col("long_ns") - pl.col("long_ns").median().over(g)).cast(pl.Float64),
            handover_excess_ns=(pl.col("handover_ns") - pl.col("handover_ns").median().over(g)).cast(pl.Float64),
            data_excess_ns=(pl.col("data_ns") - pl.col("data_ns").median().over(g)).cast(pl.Float64),
            queued_excess_ns=(pl.col("queued_ns") - pl.col("queued_ns").median().over(g)).cast(pl.Float64),
            n_peers=pl.len().over(g))

    per = excess(timeline)
    driving = _driving_threads(timeline, events) if lane else None
    if driving is not None:
        per = _idler(per, excess(driving))
    per = _readers_wait(per)
    if group != ["rank"] and per["n_peers"].min() == 2:
        # two peers: their excesses mirror each other, so the scatter across ranks is the
        # difference being tested; the noise is how much a rank's excess varies by itself
        scale = per.select(within_rank_scale("gap_excess_ns")).item() or 0.0
        # against the other, not the mean
        per = per.with_columns(gap_excess_ns=2 * pl.col("gap_excess_ns"), long_excess_ns=2 * pl.col("long_excess_ns"),
                               data_excess_ns=2 * pl.col("data_excess_ns"),
                               handover_excess_ns=2 * pl.col("handover_excess_ns"),
                               queued_excess_ns=2 * pl.col("queued_excess_ns"))
    else:
        scale = per.select(robust_scale("gap_excess_ns")).item() or 0.0
    # Trace timestamps are microseconds: each gap carries up to 1 us of rounding, which adds up
    # like noise over a rank's gaps. Below that no difference in gaps means anything.
    floor = 1000.0 * float(per["n_gaps"].mean() or 1.0) ** 0.5
    z_crit = z_critical(len(per))
    # and, as for compute, at least ``min_effect`` of the rank's iteration: a simulated trace's
    # 1 us timestamps make the scale so small that a 0.1 ms excess had a z in the hundreds
    # (``gap_share`` says so; a rank whose compute stands out anyway is told a slow host from a
    # slow GPU by its idle time's z alone: ``_per_rank``)
    return per.with_columns(gap_z=pl.col("gap_excess_ns") / max(scale, floor)).with_columns(
        gap_flagged=pl.col("gap_z") > z_crit, gap_share=pl.col("gap_excess_ns") >= min_effect * pl.col("span_ns")
    ).select("rank", "iteration", "gap_ns", "gap_excess_ns", "gap_z", "gap_flagged", "gap_share", "long_excess_ns",
             "handover_excess_ns", "queued_excess_ns", "data_excess_ns")


def _per_iteration(timeline: pl.DataFrame, events: pl.DataFrame, cols: list[str], recurring: bool) -> pl.DataFrame:
    """Per (rank, iteration) of ``timeline`` (``idle_gaps``' events, sorted by rank and start):
    its idle time (``gap_ns``, ``n_gaps``, ``queued_ns``), its stalls (``long_ns``), those in its
    data loader (``data_ns``) and at the forward's hand-over to the backward (``handover_ns``),
    and ``span_ns``."""
    tl = _in_setup(_held_apart(timeline), events)
    if "name" in tl.columns:   # a driving thread's wait for another thread's transfer is not idle
        tl = tl.filter(pl.col("name") != WAKE)
    stall = pl.col("gap") >= LONG_GAP_NS
    # a stall where the forward pass hands over to the backward: the next span a backward one,
    # the compute span before it (collectives and transfers between them) a forward one
    # (``verdict`` reads it)
    # (in the original MegatronApp tracer's records: a backward step after a layer's forward
    # scope, for it times no backward layer)
    last_compute = pl.when(pl.col("compute")).then(pl.col("name")).shift(1).forward_fill().over("rank")
    backward = pl.col("name").str.ends_with(".backward") | pl.col("name").is_in(list(megatronapp.BACKWARD_STEPS))
    forward = last_compute.str.ends_with(".forward") | last_compute.is_in(list(megatronapp.LAYER_SCOPES))
    handover = (stall & backward & forward.fill_null(False) if "name" in cols else pl.lit(False))
    tl = tl.with_columns(handover=handover)
    if recurring:
        tl = _in_data(tl, events)
        tl = tl.with_columns(_recurring(_in_sites(tl, events)).alias("recurring"))
        stall = stall & pl.col("recurring")
    in_data = pl.col("in_data") if recurring else pl.lit(False)
    return tl.group_by(["rank", "iteration"]).agg(gap_ns=pl.col("gap").sum(), n_gaps=pl.len(),
                                                  queued_ns=pl.col("queued_gap").sum(),
                                                  long_ns=pl.col("gap").filter(stall).sum(),
                                                  data_ns=pl.col("gap").filter(stall & in_data).sum(),
                                                  handover_ns=pl.col("gap").filter(pl.col("handover")).sum(),
                                                  span_ns=pl.col("end_ns").max() - pl.col("ts_ns").min())


def _driving_threads(timeline: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame | None:
    """Each rank's driving thread, the one that runs most of its compute, as a timeline of all
    its events (ops and the ranges around them) and the marks of no thread, on CPU processes (no
    GPU stream) where some rank's events lie on two threads or more of a profiler's trace; None
    elsewhere. Its gaps are the time the thread spent outside everything the trace records.

    Another thread's events fill the gaps of a process's timeline, and on a CPU the thread that
    computes is the device: while it sleeps, nothing is computed, whatever another thread waits
    on (Horovod-style, 4 processes on 2 cores, rank 2 sleeping 40 ms before each step: its main
    thread outside any range 40 ms a step, its peers' 0.1-0.3 ms, while its background thread's
    negotiation all-reduces ran through the sleep; a user's speech model under DDP, rank 3
    sleeping 60 ms: gloo's asynchronous all-reduce spans of the step before, on a thread of
    their own, covered it; "no suspect" in both). Its ranges count as busy: a thread waits for
    its peers inside them, between ops (the leaves alone left each rank's main thread idle
    for 0-75 ms a step by turns there). So does its time outside them until a transfer of
    another thread of its rank ends (``WAKE``): it waits there for a collective no op of its own
    records (plain DDP, 4 processes on 2 cores, no fault: its main thread outside any range
    3-65 ms a step by turns, nearly every such gap ending 0.02-0.6 ms after a gloo all-reduce of
    another thread did; of the 40 ms sleeps, 2-40 ms were left after the last transfer's end)."""
    if timeline.filter(pl.col("lane").str.starts_with("stream:")).height:
        return None
    # (a profiler's threads, ``cpu:<tid>``; mapp's capture writes lanes of its own, compute and
    # comm, that are no threads)
    thread = pl.col("lane").str.starts_with("cpu:")
    threads = timeline.filter(thread).group_by("rank").agg(n=pl.col("lane").n_unique())
    if threads.is_empty() or threads["n"].max() < 2:
        return None
    driver = (timeline.filter(pl.col("compute") & thread).group_by("rank", "lane").len()
              .sort("len", "lane", descending=[True, False]).group_by("rank", maintain_order=True).first()
              .select("rank", "lane"))
    own = events.filter(pl.col("iteration").is_not_null() & pl.col("dur_ns").is_not_null()).join(
        driver, on=["rank", "lane"], how="semi").select(
        "rank", "iteration", "ts_ns", end_ns=pl.col("ts_ns") + pl.col("dur_ns"), name="name", lane="lane",
        launch_ns=pl.lit(None, pl.Int64), compute=pl.col("cat") == "compute", memory=pl.lit(False))
    marks = timeline.filter(pl.col("lane").is_null()).join(driver.select("rank"), on="rank", how="semi")
    # the end of each transfer of the rank's other threads: the thread waiting on it idles only
    # from there (``_per_iteration`` takes the gap before such a mark as waiting)
    wakes = events.filter(pl.col("iteration").is_not_null() & pl.col("cat").is_in(["collective", "p2p"])
                          & thread & pl.col("dur_ns").is_not_null()).join(
        driver, on="rank").filter(pl.col("lane") != pl.col("lane_right")).select(
        "rank", "iteration", ts_ns=pl.col("ts_ns") + pl.col("dur_ns"), end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
        name=pl.lit(WAKE), lane="lane_right", launch_ns=pl.lit(None, pl.Int64), compute=pl.lit(False),
        memory=pl.lit(False))
    return pl.concat([own.select(marks.columns).cast(marks.schema), marks, wakes.select(marks.columns).cast(marks.schema)]
                     ).sort(["rank", "ts_ns"])


WAKE = "<transfer done>"
"""The mark ``_driving_threads`` leaves where a transfer of another thread of the rank ended."""


_CHOSEN = ["gap_ns", "n_gaps", "gap_excess_ns", "long_excess_ns", "handover_excess_ns", "data_excess_ns",
           "queued_excess_ns"]


def _idler(process: pl.DataFrame, thread: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, iteration), the process's idle time against its peers' or its driving
    thread's against theirs (``_driving_threads``), whichever exceeds its peers' more. A stall of
    a thread of its own (a background thread sleeping before each all-reduce it runs) leaves
    every rank's driving thread waiting alike, where only the process's timeline shows whose it
    was; a sleep of the driving thread, where another thread's events run through it, only the
    thread's. Among three peers or more: two peers' excesses mirror each other, and the larger of
    two views, taken for each, breaks the mirror (a user's ring all-reduce by hand, programs of two
    ranks each, its threads outside any recorded range while waiting on transfers: one rank's
    thread 2-27 ms a step more than its peer's, "slow host 1" first where a slow link was)."""
    thread = thread.select("rank", "iteration", *[pl.col(c).alias(f"_{c}") for c in _CHOSEN])
    out = process.join(thread, on=["rank", "iteration"], how="left")
    own = (pl.col("_gap_excess_ns").fill_null(float("-inf")) > pl.col("gap_excess_ns")) & (pl.col("n_peers") >= 3)
    return out.with_columns([pl.when(own).then(pl.col(f"_{c}")).otherwise(pl.col(c)).alias(c) for c in _CHOSEN]
                            ).drop([f"_{c}" for c in _CHOSEN])


def _held_apart(tl: pl.DataFrame) -> pl.DataFrame:
    """A rank's timeline (sorted by start, ``memory`` marking its GPU's copies and fills) with
    each event's ``gap``, the idle time before it, split into the host's and ``queued_gap``.

    A gap is its host's only until the GPU work after it was launched: from then on the work
    sat in the queue while the GPU ran something else, another process's time slices (2 H200s,
    FSDP2 under autocast, a neighbour busy 35% of each 20 ms on rank 0's GPU: 47 ms of its idle
    time over four steps with the next kernel already queued, 4.5 ms on its peer; read as its
    host's, rank 0 idled less than its peer, whose host paced its GPU more slowly, and nothing
    was found). Not the microseconds a GPU takes between two queued kernels (``QUEUED_NS``), nor
    while the GPU ran this rank's own copies or fills (their time stays in the gap, as before),
    nor where the launch is unknown (host events, the marks of iteration starts)."""
    prev = pl.when(~pl.col("memory")).then(pl.col("end_ns")).cum_max().forward_fill().shift(1).over("rank")
    busy_until = pl.col("end_ns").cum_max().shift(1).over("rank")
    tl = tl.with_columns(gap=(pl.col("ts_ns") - prev).clip(lower_bound=0).fill_null(0), busy_until=busy_until)
    waited = pl.col("ts_ns") - pl.max_horizontal(pl.col("launch_ns"), pl.col("busy_until"))
    held = pl.when(pl.col("launch_ns").is_not_null() & pl.col("busy_until").is_not_null()).then(
        pl.min_horizontal(pl.col("gap"), waited.clip(lower_bound=0))).otherwise(0)
    held = pl.when(held >= QUEUED_NS).then(held).otherwise(0)
    return tl.filter(~pl.col("memory")).with_columns(queued_gap=held).with_columns(
        gap=pl.col("gap") - pl.col("queued_gap")).drop("memory", "busy_until")


SETUP_CALL = 20.0
"""A host op call this many times its op's median call of the rank's iteration (and
``LONG_GAP_NS`` or longer), where every traced rank makes such calls of that op in the
iteration, is setup for new work rather than launching: a library building a plan for a shape it
has not seen (cuDNN's attention under dynamic padding), an autotuner, a recompile."""


def _in_setup(tl: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """``tl`` (``_held_apart``'s) with each gap its host spent inside a setup call
    (``SETUP_CALL``) taken out of ``gap``: the call began before the GPU went idle and launched
    the work that ended the idle time.

    Such a call takes as long as its data asks: each rank pads its batch to its own length, so
    each builds plans for other shapes, for other times (2 H200s, a user's DDP transformer under
    autocast on lognormal lengths, no fault: the first cuDNN attention call of each step, forward
    and backward, 50-93 ms against 0.1-0.2 ms for the rest, on both ranks; rank 0's GPU idled
    144 ms a step inside them, its peer's 118 ms, and rank 0 was a "slow host" 1.36x by its launch
    gaps). A slow host is slow at every launch, not in one call the whole program makes long."""
    if "launch_ns" not in tl.columns or tl["launch_ns"].is_null().all():
        return tl
    host = events.filter(pl.col("lane").str.starts_with("cpu:") & pl.col("iteration").is_not_null())
    calls = host.filter(pl.col("dur_ns") >= LONG_GAP_NS)
    if calls.is_empty():
        return tl
    typical = host.group_by("rank", "iteration", "name").agg(typical=pl.col("dur_ns").median())
    ranks = events.filter(pl.col("iteration").is_not_null()).group_by("iteration").agg(n=pl.col("rank").n_unique())
    setup = calls.join(typical, on=["rank", "iteration", "name"]).filter(pl.col("dur_ns") >= SETUP_CALL * pl.col("typical"))
    # the program's, not one host's hiccups: the k-th such call of the op in the iteration counts
    # where every traced rank makes k or more (a host slowed inside calls of an op the program
    # makes long once a step keeps the idle time of its extra long calls)
    setup = setup.sort("ts_ns").with_columns(k=pl.int_range(pl.len()).over("rank", "iteration", "name"))
    setup = setup.join(setup.group_by("iteration", "name", "k").agg(having=pl.col("rank").n_unique()),
                       on=["iteration", "name", "k"]).join(ranks, on="iteration").filter(pl.col("having") == pl.col("n"))
    if setup.is_empty():
        return tl
    # a call nested in a longer one (cuDNN's attention inside scaled_dot_product_attention) ends
    # where the outer one does, for what the outer one launched after it
    setup = setup.select("rank", call_ns="ts_ns", call_end=pl.col("ts_ns") + pl.col("dur_ns")).sort("rank", "call_ns"
                                                                                                   ).with_columns(
        call_end=pl.col("call_end").cum_max().over("rank"))
    tl = tl.with_columns(_start=pl.col("ts_ns") - pl.col("gap") - pl.col("queued_gap"), _row=pl.int_range(pl.len()))
    inside = tl.filter((pl.col("gap") > 0) & pl.col("launch_ns").is_not_null()).sort("_start").join_asof(
        setup, left_on="_start", right_on="call_ns", by="rank", strategy="backward", check_sortedness=False
    ).filter((pl.col("launch_ns") > pl.col("_start")) & (pl.col("call_end") >= pl.col("launch_ns")))["_row"]
    return tl.with_columns(gap=pl.when(pl.col("_row").is_in(inside.implode())).then(0).otherwise(pl.col("gap"))
                           ).drop("_start", "_row")


def _launched(frame: pl.DataFrame) -> pl.Expr:
    """``launch_ns`` where ``frame`` has it (GPU work of a profiler trace), else null."""
    return pl.col("launch_ns") if "launch_ns" in frame.columns else pl.lit(None, pl.Int64).alias("launch_ns")


def _loss_stage(per: pl.DataFrame, last_stage: int | None) -> pl.DataFrame:
    """The last pipeline stage's hand-over stalls taken out of its idle time. Between its last
    forward span and its first backward one it runs the loss (cross-entropy over the vocabulary,
    the start of autograd), which no layer span records; the other stages spend that time in a
    transfer. Compared with its own stage peers this cancels out; compared across stages it
    made a healthy last stage a slow host (megatron-core PP4 under mapp's capture, 4 processes
    on 2 cores: 10.9-15.8 ms of stalls a step, all of it at the hand-over). Work in the data path
    or before a microbatch stalls before a forward span, not there. Also against the last stage's
    own peers on shared CPUs under mapp's capture (``peers.compare_peers``), where the loss's time
    varies with their sequences and cores. ``last_stage``: the layout's (not the last stage among
    the ranks traced: without its trace no stage's stalls are taken)."""
    if last_stage is None:
        return per
    last = pl.col("pp") == last_stage
    return per.with_columns(
        gap_ns=pl.when(last).then(pl.col("gap_ns") - pl.col("handover_ns")).otherwise(pl.col("gap_ns")),
        long_ns=pl.when(last).then(pl.col("long_ns") - pl.col("handover_ns")).otherwise(pl.col("long_ns")),
        handover_ns=pl.when(last).then(0).otherwise(pl.col("handover_ns")),
    )


def _recurring(tl: pl.DataFrame) -> pl.Series:
    """Per gap of ``tl`` (``rank``, ``iteration``, ``name``, ``ts_ns``, ``gap``): whether the rank
    stalls (``LONG_GAP_NS``) before the n-th call of that op in nearly every iteration
    (``CONSISTENT``), or in its data loader (``_data_marks``). A host that sleeps, waits on its
    data or runs work of its own does so at one place of its program each step; a process
    descheduled on a shared core stalls wherever it was (megatron-core TP2 x DP2 under the
    profiler, 4 processes on 2 cores beside a fifth: a healthy rank's stalls 45 ms before one
    all-reduce in one step, 83 ms before another in the next, 10 ms in the two after; a rank
    sleeping 20 ms before each microbatch: before the same two ops in all four steps).

    Where the profiler names the place as the data loader, a stall there is the input pipeline's
    however few steps it stalls in: loader workers that fall behind hand a batch over late every
    few steps, not every step (4 processes on 4 cores, a ``transformers.Trainer`` job whose
    dataset sleeps 30 ms a sample on rank 2, two loader workers: 85 and 117 ms in its loader in
    two steps of four, none in the others; the step 115 ms against 84 without the sleep)."""
    nth = pl.int_range(pl.len()).over("rank", "iteration", "name", order_by="ts_ns")
    stalls = (pl.col("gap") >= LONG_GAP_NS).sum().over("rank", "name", "nth")
    iterations = pl.col("iteration").n_unique().over("rank")
    at_op = stalls / iterations >= CONSISTENT
    # A thread of its own on a timer is not in step with the iterations: how many calls of an
    # op came before the stalled one in the iteration varies, its place in its range does not
    # (Horovod-style, 4 processes on 2 cores, a background thread that sleeps 20 ms before each
    # fused all-reduce of rank 3, after a varying number of negotiation all-reduces: stalls
    # before 24 of the 25 first calls in ``hvd_allreduce``, in all 10 iterations; at no n-th
    # call of the iteration in nearly all, "no suspect"). There, in nearly every iteration and
    # before nearly every such call: a range that comes several times an iteration gives a
    # descheduled process as many chances to stall in it
    key = ["rank", "site", "name", "in_site"]
    in_site = pl.int_range(pl.len()).over("rank", "site_ts", "name", order_by="ts_ns")
    stalled = pl.col("gap") >= LONG_GAP_NS
    stalled_its = pl.col("iteration").filter(stalled).n_unique().over(key)
    at_site = (pl.col("site").is_not_null() & (stalled_its / iterations >= CONSISTENT)
               & (stalled.sum().over(key) / pl.len().over(key) >= CONSISTENT))
    return tl.with_columns(nth=nth, in_site=in_site).select(at_op | at_site | pl.col("in_data")).to_series()


def _in_sites(tl: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """``tl`` with ``site`` and ``site_ts``: the name and start of the range begun last before each
    event on its own thread, where that range still holds the event's start (the innermost one
    holding it, ranges on a thread being nested); null where it has ended (the event follows a
    closed range: its enclosing one is not looked for), where the thread has no range before it,
    or where the event is no thread's (a GPU stream's)."""
    lanes = events.filter(~pl.col("lane").str.starts_with("stream:")).select("rank", "name", "ts_ns", "lane").unique(
        subset=["rank", "name", "ts_ns"], keep="first")
    comm = pl.any_horizontal([pl.col("name").str.starts_with(p) for p in COMM_OP_PREFIXES])
    ranges = events.filter((pl.col("cat") == "other") & ~pl.col("lane").str.starts_with("stream:") & ~comm
                           & (pl.col("dur_ns") > 0)).select(
        "rank", "lane", site="name", site_ts="ts_ns", site_end=pl.col("ts_ns") + pl.col("dur_ns")).sort("site_ts")
    out = tl.with_columns(_row=pl.int_range(pl.len())).join(lanes, on=["rank", "name", "ts_ns"], how="left")
    found = out.filter(pl.col("lane").is_not_null()).sort("ts_ns").join_asof(
        ranges, left_on="ts_ns", right_on="site_ts", by=["rank", "lane"], strategy="backward",
        check_sortedness=False).filter(pl.col("site_end") >= pl.col("ts_ns")).select("_row", "site", "site_ts")
    return out.join(found, on="_row", how="left").sort("_row").drop("_row", "lane")


def _data_spans(events: pl.DataFrame) -> pl.DataFrame:
    """Each rank's data-loader spans (``schema.DATA_WAIT_PREFIX``): ``rank``, ``iteration``,
    ``ts_ns``, ``lane``, ``end_ns``."""
    return events.filter(pl.col("name").str.starts_with(DATA_WAIT_PREFIX) & pl.col("iteration").is_not_null()).select(
        "rank", "iteration", "ts_ns", "lane", end_ns=pl.col("ts_ns") + pl.col("dur_ns"))


def _data_marks(events: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """Marks of no length at the end of each data-loader span on a rank's timeline: the idle
    time before one is its host fetching or waiting for a batch, where no op ran after it in
    the span."""
    return _data_spans(events).select(
        "rank", "iteration", "lane", ts_ns=pl.col("end_ns"), end_ns=pl.col("end_ns"), name=pl.lit("<data>"),
        launch_ns=pl.lit(None, pl.Int64), compute=pl.lit(False), memory=pl.lit(False)).select(*cols, "memory")


def _in_data(tl: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """``tl`` with ``in_data``: the gap before the event ends inside one of its rank's data-loader
    spans, or at its end."""
    spans = _data_spans(events).select("rank", data_ts="ts_ns", data_end="end_ns").sort("data_ts")
    if spans.is_empty():
        return tl.with_columns(in_data=pl.lit(False))
    order = tl.with_columns(_row=pl.int_range(pl.len())).sort("ts_ns")
    found = order.join_asof(spans, left_on="ts_ns", right_on="data_ts", by="rank", strategy="backward",
                            check_sortedness=False)
    return found.with_columns(in_data=(pl.col("ts_ns") <= pl.col("data_end")).fill_null(False)).sort("_row").drop(
        "_row", "data_ts", "data_end")


DATA_STEPS = 2
"""The least traced iterations in which a rank must wait in its data loader beyond its peers
(a stall of ``LONG_GAP_NS`` or more) for those waits to name its input pipeline."""


def data_stalls(min_effect: float) -> pl.Expr:
    """Over a rank's iterations (``data_excess_ns`` from :func:`idle_gaps`, ``busy_ns``): it waited
    in its data loader beyond its peers in ``DATA_STEPS`` iterations or more, by ``min_effect`` of
    its work over all of them. Idle time names a host where it exceeds the peers' in nearly every
    iteration; loader workers that fall behind hand batches over in bursts instead (4 processes on
    4 cores, a ``transformers.Trainer`` job recorded with shapes, rank 0's dataset sleeping 30 ms
    a sample behind 2 workers: 46 and 52 ms in its loader in two steps of four, none in the
    others, its idle time 22 ms a step beyond its peers' at z 38, "no suspect")."""
    excess = pl.col("data_excess_ns").fill_null(0.0)
    return (((excess >= LONG_GAP_NS).sum() >= DATA_STEPS)
            & (excess.mean() >= min_effect * pl.col("busy_ns").mean()))


def _readers_wait(per: pl.DataFrame) -> pl.DataFrame:
    """On the stages that read data (the first and the last), TP rank 0 reads each batch and
    broadcasts it to its TP peers (``get_batch_on_this_tp_rank``), a broadcast no trace of
    megatron-core's hooks records: while the reader idles on a starved loader its peers idle
    in that broadcast, the same time. So what a TP peer's idle excess shares with its reader's
    in an iteration is the reader's, and only the rest is its own. (This is Megatron's data
    path; it is applied wherever the layout gives TP coordinates, profiler traces of other
    programs included, where a TP peer that idles on its own keeps what exceeds rank 0's.)"""
    if per["tp"].drop_nulls().n_unique() < 2:
        return per
    ends = [0, int(per["pp"].max())]
    reader = pl.col("gap_excess_ns").filter(pl.col("tp") == 0).max().over("pp", "dp", "iteration")
    return per.with_columns(gap_excess_ns=pl.when(
        (pl.col("tp") != 0) & pl.col("pp").is_in(ends) & (reader > 0))
        .then(pl.col("gap_excess_ns") - pl.min_horizontal(reader, pl.col("gap_excess_ns").clip(lower_bound=0.0)))
        .otherwise(pl.col("gap_excess_ns")))


STALL = 2.0
"""An op this many times as long as the rest of its rank's ops say it should be held a stall."""

_STALL_MIN_NS = 1_000_000


def stalls(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, iteration): ``stall_ns``, time inside single forward steps far beyond what the
    rank's other ops and its peers say they take (at least ``STALL`` x, and 1 ms).

    A trace with one span per forward step (no layer spans inside it) holds the data fetch
    inside that span: a starved data loader makes one microbatch's forward step tens of ms
    long, which a median over the rank's ops rightly ignores as compute, and which no idle gap
    shows. It is host time, and is judged with the launch gaps. In Megatron the data is read
    by tensor-parallel rank 0 of the first and last stages (``get_batch_on_this_tp_rank``) and
    broadcast to its TP peers, which wait inside the same step: a stall that TP rank 0 of a
    stage shows in a microbatch is its own, and its TP peers' in the same step are its too."""
    eff = pl.col("r_adj") - pl.col("r_adj").median().over("rank", "iteration")
    # only a forward step holds the data fetch (a span of that name that holds no other span)
    long = ops.with_columns(d=eff).filter((pl.col("name") == "forward") & (pl.col("microbatch") >= 0)).filter(pl.col("d") > float(np.log(STALL))).with_columns(
        stall_ns=pl.col("self_ns").cast(pl.Float64) * (1 - (-pl.col("d")).exp())).filter(pl.col("stall_ns") >= _STALL_MIN_NS)
    if long.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "iteration": pl.Int32, "stall_ns": pl.Float64})
    # where TP rank 0 stalled in a step, its TP peers that stalled with it waited for its batch
    step = ["pp", "dp", "iteration", "microbatch"]
    long = long.with_columns(reader=(pl.col("tp") == 0).any().over(step))
    long = long.filter(~pl.col("reader") | (pl.col("tp") == 0))
    return long.group_by("rank", "iteration").agg(pl.col("stall_ns").sum())


STEADY = 0.5
"""A GPU slower by x stretches its ops by about x alike: the spread (interquartile range) of
its backward ops' log-ratios to their peers stays under this share of their median, beyond
twice the spread of the ranks that are not flagged."""

NOISE = 0.1
"""Beyond this spread of the unflagged ranks' ops, spans are host-paced and judge no GPU."""

BACKWARD = pl.col("name").str.contains("backward")
"""The ops that judge a GPU where spans are timed on it: autograd launches them far faster than
its kernels run, so no host paces them (``launch_bound``)."""


def launch_bound(ops: pl.DataFrame, per: pl.DataFrame, min_effect: float) -> pl.DataFrame:
    """Per rank flagged by its compute: ``launch_bound``, True where its slowdown is not its
    GPU's but its host's, which cannot launch kernels as fast as the GPU runs them;
    ``launch_why`` says which rule decided, and ``ops_spread``, ``ops_median`` (log-ratios of
    the ops judged; the spread within each op name) and ``peers_spread`` (the spread of the
    unflagged ranks' ops) by how much; ``ops_floor``, what its fastest ops say (``_floor``);
    ``gpu_alike``, its backward ops slower alike whatever its forward pass (bound only by that:
    the verdict reads it as a GPU where no idle time names a host).
    For spans timed on the GPU (CUDA events) only.

    Such a span lasts from the GPU reaching its first mark to reaching its last, and the GPU
    reaches the last no sooner than the host has launched every kernel in between: where the
    host is slower than the kernels, the span is the host's time. Megatron launches a forward
    pass from Python, layer by layer, and the backward pass from autograd's engine, far faster:
    on 4 H100s a healthy rank's forward ops ran 1.4x its peers' in one iteration, at the pace of
    its host, beside backward ops that matched theirs to 0.1%. So the backward ops judge the
    GPU (all ops, where a trace has none): a slow GPU slows them, and by about its factor alike,
    as kernels of one shape repeat within a few percent (a rank given 1.2x the layers' FLOPs:
    every backward op 1.12-1.13x its peer's, while its forward ops ran 0.6-2.3x, host-paced on
    both ranks). A host that falls behind its GPU leaves them unchanged, or stretches some and
    not others (one rank whose host paced its GPU at ~2 ms per layer whatever the sequence
    length: its backward ops 1-4x), or stretches its forward ops far more than its backward
    ones (a simulated host 10x slower at every launch)."""
    flagged = per.filter(pl.col("flagged")).select("rank", "iteration")
    if flagged.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "ops_spread": pl.Float64, "ops_median": pl.Float64,
                                    "peers_spread": pl.Float64, "launch_bound": pl.Boolean, "launch_why": pl.String,
                                    "gpu_alike": pl.Boolean, "ops_floor": pl.Float64})
    has_backward = ops.select(BACKWARD.any()).item()
    judged = ops.filter(BACKWARD) if has_backward else ops
    # every rank's ops scatter a little (kernel timing, data the fit did not take out): that
    # much spread is allowed on top. Where the unflagged ranks' ops scatter by more than
    # NOISE, their spans are host-paced too (4 H100s, short sequences: layers of 0.3-0.9 ms of
    # kernels, ~2 ms of launching) and no rank's spans there say how fast its GPU is.
    noise = _calm_spread(judged, flagged, pairs=True)
    # per rank-iteration as the noise is (a rank's ops over two iterations also scatter by
    # what differs between iterations), the median over its flagged ones
    out = _by_name(judged).join(flagged, on=["rank", "iteration"], how="semi").group_by("rank", "iteration").agg(
        s=_SPREAD, m=pl.col("r_adj").median()).group_by("rank").agg(
        ops_spread=pl.col("s").median(), ops_median=pl.col("m").median())
    floor = float(np.log1p(min_effect))
    unchanged = no_slower(min_effect)
    # twice the noise: a slow GPU's ops are no steadier than a healthy one's, and a 5% GPU
    # among ops that scatter by 2% must not be taken for its host by chance
    uneven = pl.col("ops_spread") > STEADY * pl.col("ops_median") + 2 * noise
    paced = pl.lit(noise > NOISE)
    what = "backward ops" if has_backward else "ops"
    why = (pl.when(paced).then(pl.lit(f"every rank's {what} scatter like host-paced spans"))
           .when(unchanged).then(pl.lit(f"its {what} no slower than its peers'"))
           .when(uneven).then(pl.lit(f"its {what} slower unevenly")))
    bound = paced | unchanged | uneven
    # what is left is backward ops slower alike, as a GPU's are: only a forward pass slower
    # still can make the rank a host's (``gpu_alike`` says the verdict may read it as a GPU's
    # where no idle time makes it a host)
    alike = ~bound
    forward = _forward_median(ops.filter(~BACKWARD), flagged) if has_backward else None
    if forward is not None:
        # a slow GPU slows its forward ops as much as its backward ones (the same kernels), or
        # less where the forward pass is host-paced on its peers; a host several times slower
        # at launching slows the forward pass far more (a simulated 10x host: forward 4.1x,
        # backward 1.45x, every one alike)
        out = out.join(forward, on="rank", how="left")
        ahead = (pl.col("fwd_median") - pl.col("ops_median") > pl.max_horizontal("ops_median", pl.lit(floor)))
        why = why.when(ahead.fill_null(False)).then(pl.lit("its forward ops far slower than its backward ones"))
        bound = bound | ahead.fill_null(False)
    out = out.join(_floor(judged, flagged), on="rank", how="left")
    return out.with_columns(peers_spread=pl.lit(noise), launch_bound=bound, launch_why=why,
                            gpu_alike=alike).select(
        "rank", "ops_spread", "ops_median", "peers_spread", "launch_bound", "launch_why", "gpu_alike", "ops_floor")


FLOOR_STEADY = 0.05
"""A GPU runs kernels of one shape at one speed, within a few percent, step after step: a rank's
floor (``_floor``) says how fast its GPU is only where it moves between its flagged iterations
by no more than this log-ratio. Measured on slowed GPUs: 0.3-1%; on healthy ranks whose hosts
paced every span: 21-26%."""


def _floor(judged: pl.DataFrame, flagged: pl.DataFrame) -> pl.DataFrame:
    """Per flagged rank, ``ops_floor``: the log-ratio to its peers' at which its most frequent
    judged op (a layer's backward) runs when its GPU, not its host, sets the pace; None where no
    such floor holds steady (``FLOOR_STEADY``) over its flagged iterations.

    A host that paces spans stretches some of them, by however late it was; in the rest the
    GPU sets the pace, and a slow GPU is slower there too, by its own factor, the same in every
    step. Two readings of that pace, each per iteration: the fastest tenth of its ratios to its
    peers' same op (2 H200s, megatron-core TP2 under mapp's capture, 1.45x the layers' FLOPs on
    rank 0, its host launching the extra work: 1.18x in each of three steps, 2.1x in the
    median); and its fastest run of each layer's op against its stage peers' fastest run of the
    same op, on as many tokens, which the peer's own host pacing does not blur (4 H200s, TP2 x
    PP2, 1.8x the FLOPs on rank 2: 1.27x in each of four steps, while its ratios scattered
    0.75-1.56x). A host that paces every span moves both from step to step (4 H100s, TP2 x DP2,
    lognormal lengths, no fault, two runs: one rank's fastest runs 2.1-2.7x its TP peer's,
    the fastest tenth of its ratios 1.0-1.2x in healthy pairs). The lower steady reading is
    taken."""
    empty = pl.DataFrame(schema={"rank": pl.Int32, "ops_floor": pl.Float64})
    if judged.is_empty():
        return empty
    top = judged.group_by("name").len().sort(["len", "name"], descending=[True, False])["name"][0]
    ops = judged.filter(pl.col("name") == top).join(flagged, on=["rank", "iteration"], how="semi")
    tenth = ops.group_by("rank", "iteration").agg(f=pl.col("r_adj").quantile(0.1))
    readings = [tenth]
    if {"self_ns", "pp"} <= set(judged.columns):
        readings.append(_fastest_runs(judged.filter(pl.col("name") == top), flagged))
    steady = []
    for per in readings:
        steady.append(per.group_by("rank").agg(f=pl.col("f").median(), moved=pl.col("f").max() - pl.col("f").min())
                      .filter(pl.col("moved") <= FLOOR_STEADY).select("rank", "f"))
    both = pl.concat(steady)
    if both.is_empty():
        return empty
    return both.group_by("rank").agg(ops_floor=pl.col("f").min())


def _fastest_runs(ops: pl.DataFrame, flagged: pl.DataFrame) -> pl.DataFrame:
    """Per flagged (rank, iteration): ``f``, the median over its layers of its fastest run of an
    op (over the iteration's microbatches) against its stage peers' fastest run of the same op
    on as many tokens (their median), log-ratio."""
    key = ["pp", "iteration", "name", "layer", "chunk"] + (["tokens"] if "tokens" in ops.columns else [])
    fastest = ops.group_by("rank", *key).agg(lmin=pl.col("self_ns").min().cast(pl.Float64).log())
    pairs = fastest.join(fastest.select(*key, peer="rank", peer_lmin="lmin"), on=key, nulls_equal=True).filter(
        pl.col("rank") != pl.col("peer"))
    by_op = pairs.group_by("rank", *key).agg(d=pl.col("lmin").first() - pl.col("peer_lmin").median())
    return by_op.join(flagged, on=["rank", "iteration"], how="semi").group_by("rank", "iteration").agg(
        f=pl.col("d").median())


def no_slower(min_effect: float) -> pl.Expr:
    """A rank's judged ops (``ops_median``, their median log-ratio to its peers') no slower than
    its peers' by ``min_effect``: no GPU of its is slow."""
    return pl.col("ops_median") < float(np.log1p(min_effect))


_SPREAD = pl.col("r_within").quantile(0.75) - pl.col("r_within").quantile(0.25)
"""The spread of ``r_adj`` within each op name (:func:`_by_name`)."""


def _by_name(ops: pl.DataFrame) -> pl.DataFrame:
    """``r_within``: ``r_adj`` less its median over the rank-iteration's ops of one name: how far
    each op strays from the ops of its own kind. A GPU slower by x stretches the kernels of one shape by x
    alike, but work added to some ops (a layer's matmuls) leaves others (the output layer's)
    as they were: 4 H200s, TP2 x PP2, extra matmuls in each layer of rank 3: its layers'
    backward ops 1.16-1.23x their peers' (the middle half), its output layer's 0.89-1.00x,
    which read as spread 0.136 over all its backward ops."""
    return ops.with_columns(r_within=pl.col("r_adj") - pl.col("r_adj").median().over("rank", "iteration", "name"))


def _calm_spread(ops: pl.DataFrame, flagged: pl.DataFrame, pairs: bool = False) -> float:
    """The median spread of ``r_adj`` (within each op name) over the rank-iterations that are not
    flagged (0 if none).

    ``pairs``: where no unflagged op has an unflagged peer (two ranks, one flagged), each is its
    own baseline (``peers._fit`` leaves the flagged out of it), its ``r_adj`` 0 by construction,
    and its spread says nothing; measured against its one peer it scatters as much as that peer
    does against it, so the flagged rank-iterations' spread is taken. Two ranks whose spans
    disagree unevenly cannot say whose host paces them: 2 H200s, megatron-core TP2 under mapp's
    capture, lognormal lengths, no fault, twice: one rank's layers at ~1.5 ms whatever their
    tokens (0.4-3.8 k), its peer's scaling with them, rank 0 the paced one in one run ("not a
    suspect": it was not a clear outlier, so its peer's spread stood), rank 1 in the other
    ("slow host 1.39x" on this 0), their stalls 2-4% of their work."""
    named = _by_name(ops)
    calm = named.join(flagged, on=["rank", "iteration"], how="anti")
    if pairs and len(calm) and "gk" in calm.columns and calm.select((pl.len().over("gk") == 1).all()).item():
        calm = named.join(flagged, on=["rank", "iteration"], how="semi")
    spread = calm.group_by("rank", "iteration").agg(s=_SPREAD)
    return float(spread["s"].median() or 0.0) if len(spread) else 0.0


def _forward_median(forward: pl.DataFrame, flagged: pl.DataFrame) -> pl.DataFrame | None:
    """Per flagged rank, the median ``r_adj`` of its forward ops (``fwd_median``); None where
    the unflagged ranks' forward ops scatter beyond NOISE: host-paced there themselves, a slow
    GPU's forward ratios scatter too (0.6-2.3x on 4 H100s) and say nothing."""
    if forward.is_empty() or _calm_spread(forward, flagged) > NOISE or forward.join(
            flagged, on=["rank", "iteration"], how="anti").is_empty():
        return None
    return forward.join(flagged, on=["rank", "iteration"], how="semi").group_by("rank").agg(
        fwd_median=pl.col("r_adj").median())


def lasting_gaps(gap: pl.Expr, z_crit: float, together: bool = True) -> pl.Expr:
    """Per (rank, iteration): idle-time flags ``gap`` that last.

    A slow host is a lasting condition (no transient exemption: a first traced iteration often
    idles longer on one rank while the others warm up): flagged in nearly every iteration, or
    idling longer than its peers in nearly every iteration by a median beyond the cut-off
    (every iteration's z has the same scale, so the median's standard error is MEDIAN_SE /
    sqrt(iterations) of it): on busy hosts one iteration's gaps scatter by tens of ms, and a
    stall of that size is judged on all iterations together. Only with three traced iterations
    or more: the median of two is their mean, one far iteration and one barely positive would
    pass, and that is a hiccup, not a lasting stall. ``together`` False: flags in nearly every
    iteration only (``peers._per_rank`` says where)."""
    n_it = pl.col("gap_z").count().over("rank").cast(pl.Float64)
    median_z = pl.col("gap_z").median().over("rank") * n_it.sqrt() / MEDIAN_SE
    positive = (pl.col("gap_excess_ns") > 0).mean().over("rank") >= CONSISTENT
    judged_together = (n_it >= 3) & (median_z > z_crit) & positive & pl.lit(together)
    lasting = (gap.mean().over("rank") >= CONSISTENT) | judged_together
    return (gap | (pl.col("gap_excess_ns") > 0)) & lasting
