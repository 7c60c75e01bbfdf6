"""Stage 1, peer comparison: is a rank's own compute slower than that of ranks doing the same work?

Ranks with the same pipeline stage and TP coordinate run the same kernels on different data;
with equal TP shards every rank of a stage does. For each op instance (iteration, name,
microbatch, chunk, layer, and its ordinal among equal keys) the rank's *self time* (the op's
duration minus the communication nested inside it, i.e. minus any waiting for peers) is
compared with its peers' median. Peers are the DP peers when DP >= 3, else every rank of the
stage; with a single rank per stage each rank is compared with its own other iterations.

Everything is judged in log space (a slowdown is a ratio), per (rank, iteration) so that a
fail-slow window of one iteration is not averaged away, with robust scales (median/MAD):

- an op's log time less what its replica's data explains (``replicas.polish``), against its
  peers' median: its residual;
- the *effect* of a (rank, iteration) is the median residual of its ops;
- its standard error comes from the scatter of single ops around that median, and of its
  microbatches where data moves them together;
- a rank-iteration is an outlier when its effect is beyond a Bonferroni cut-off in units of
  the larger of that standard error and the spread of effects across all rank-iterations.

Beside it, because they are per-rank timelines compared in the same way: idle time and stalls
where a slow host shows (``idle``), and here the per-stage compute balance (a heavy pipeline
stage is imbalance, not a fault).
"""

from __future__ import annotations


import polars as pl

from mapp.analysis.detect._stats import MAD_TO_SIGMA, MEDIAN_SE, robust_scale, z_critical
from mapp.analysis.detect.contention import contended
from mapp.analysis.detect.idle import (BACKWARD, NOISE, data_stalls, idle_gaps, lasting_gaps, launch_bound, no_slower,
                                      stalls)
from mapp.analysis.detect.loop_trips import with_trips
from mapp.analysis.detect.more_layers import layer_paces
from mapp.analysis.detect.no_grad_passes import no_grad_passes
from mapp.analysis.detect.own_time import RUNNABLE, own_ns
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.replicas import polish
from mapp.analysis.detect.same_work import compare_same_work, self_times
from mapp.analysis.detect.slow_blocks import slow_blocks
from mapp.analysis.detect.stage_gemms import layer_units, stage_gemms, with_stage_gemms
from mapp.analysis.detect.steady import steady_layers
from mapp.analysis.detect.thresholds import CONSISTENT
from mapp.analysis.detect.time_slices import kernel_places, scattered
from mapp.analysis.detect.whole_process import whole_process
from mapp.analysis.ingest import megatronapp

__all__ = ["leaf_ops", "compare_peers"]

_KEY = ["iteration", "name", "microbatch", "chunk", "layer"]
# One rank per pipeline stage: no rank does another's work, but every stage's transformer
# layers do the same work on the same microbatch (the k-th layer call of one stage against the
# k-th of another, told apart by order). Only spans mapp's capture names as transformer layers
# or their parts, and the original MegatronApp tracer's scopes of a layer's forward
# (``transformer_layer`` ...: judged against their own history alone, a PP2 GPU whose layers ran
# 1.19x the other stage's in every step went unnamed), are compared so; the embedding, output
# layer and loss are one stage's, and ops of other names may differ between stages.
_LAYER_KEY = ["iteration", "name", "microbatch"]
_LAYER_SPANS = ("layer.", "attention.", "mlp.", "self_attention.", "core_attention.", "linear_qkv.", "linear_proj.",
                "linear_fc1.", "linear_fc2.")
_IS_LAYER = pl.any_horizontal(pl.col("name").is_in(list(megatronapp.LAYER_SCOPES)),
                              *(pl.col("name").str.starts_with(w) for w in _LAYER_SPANS))


def leaf_ops(events: pl.DataFrame) -> pl.DataFrame:
    """Compute events that contain no other compute event, with ``self_ns``: their duration
    minus the collective/p2p time nested inside them (time spent waiting for peers).
    (Profiler traces, whose ops nest differently, use ``same_work.self_times``.)"""
    # A span of no duration is a mark, not work: it times nothing (the MegatronApp tracer's
    # ``loss`` is a begin and an end at one timestamp), and taken for a leaf it would hide the
    # span it sits in (its ``backward``) and dilute every rank's median with exact ties.
    comp = (
        events.filter((pl.col("cat") == "compute") & (pl.col("dur_ns") > 0))
        .with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
        .sort(["rank", "lane", "ts_ns", "dur_ns"], descending=[False, False, False, True])
    )
    # A parent span is followed (in start order) by its first child, which ends inside it;
    # the next op of a sequence ends after it (timestamps rounded to 1 us may make it start
    # a hair before the previous op's end, so start order alone would mistake it for a child).
    nxt_end = pl.col("end_ns").shift(-1).over(["rank", "lane"])
    leaves = comp.filter(nxt_end.is_null() | (nxt_end > pl.col("end_ns") + 1000)).with_row_index("op_id")
    comm = (
        events.filter(pl.col("cat").is_in(["collective", "p2p"]))
        .select("rank", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("c_end"),
                (pl.col("dur_ns") - own_ns(events)).alias("c_waited"))
        .sort(["rank", "ts_ns"])
    )
    if len(comm) and len(leaves):
        right = leaves.select("rank", pl.col("ts_ns").alias("l_ts"), pl.col("end_ns").alias("l_end"), "op_id").sort(["rank", "l_ts"])
        nested = (
            comm.join_asof(right, left_on="ts_ns", right_on="l_ts", by="rank", strategy="backward", check_sortedness=False)
            .filter(pl.col("op_id").is_not_null() & (pl.col("c_end") <= pl.col("l_end") + 1000))
            .group_by("op_id")
            # (less what the op's own time already left out: the waits for a core inside them)
            .agg(nested_ns=(pl.min_horizontal("c_end", "l_end") - pl.col("ts_ns") - pl.col("c_waited")).sum())
        )
        leaves = leaves.join(nested, on="op_id", how="left")
    else:
        leaves = leaves.with_columns(nested_ns=pl.lit(0, pl.Int64))
    # never below the 1 us resolution of the traces: a fully nested op keeps a finite log
    # (on shared cores, less the time the op waited for one: ``own_time``)
    return leaves.with_columns(
        self_ns=pl.max_horizontal(own_ns(leaves) - pl.col("nested_ns").fill_null(0), pl.lit(1000))
    )


def _launches(ops: pl.DataFrame) -> list[str]:
    """``launch_ns`` where the ops have it (``idle.idle_gaps`` tells queued GPU work by it)."""
    return ["launch_ns"] if "launch_ns" in ops.columns else []


def _lanes(ops: pl.DataFrame) -> list[str]:
    """``lane`` where the ops have it (``idle.idle_gaps`` finds each rank's driving thread by it)."""
    return ["lane"] if "lane" in ops.columns else []


def _mode(sizes: dict[str, int] | None, iterations: int, programs: bool) -> tuple[str, list[str], list[str], str | None]:
    if sizes is None and programs:
        return "program peers", ["pp"], _KEY, None
    if sizes is None:
        return "skipped", [], [], "no layout: the traces carry none and --layout was not given"
    if sizes["dp"] >= 3:
        return "dp peers", ["pp", "tp"], _KEY, None
    if sizes["dp"] * sizes["tp"] >= 2:
        return "stage peers", ["pp"], _KEY, None
    if sizes["pp"] >= 2:
        return "layer peers", [], _LAYER_KEY, None
    if iterations >= 2:
        return "own history", ["rank"], _KEY[1:], None
    return "skipped", [], [], "one rank per pipeline stage and a single iteration: no peer to compare with"


def compare_peers(events: pl.DataFrame, coords: pl.DataFrame, sizes: dict[str, int] | None, *,
                  slow_op: float, min_effect: float, judge_gaps: bool = True,
                  starts: pl.DataFrame | None = None, gpu_spans: bool = False,
                  shared_cpus: bool = False, time_slices: bool = False) -> PeerEvidence:
    """Run stage 1 (and the launch-gap and stage-balance checks) over ``events``.

    ``slow_op``: an op slower than (1 + this) x its peers counts as slow (``share_slow``,
    evidence only). ``min_effect``: a rank-iteration is flagged, and its launch gaps count,
    only when at least this much slower than its peers (``Thresholds`` says why and the defaults).

    ``judge_gaps=False`` where idle gaps say nothing of the host (a tracer that synchronizes
    the GPU inside the traced path): no rank is then flagged for them.

    ``events`` has the events-table columns of timed events; ``coords`` maps ``rank`` to
    ``tp``, ``pp``, ``dp``. ``starts`` (``rank``, ``iteration``, ``ts_ns``): where each traced
    iteration began, when the trace marks it; idle time from there to a rank's first op counts
    as a launch gap (a stall at the start of the first traced iteration has nothing before it).
    ``shared_cpus``: compute is timed on CPU processes sharing cores (``same_work``).
    ``gpu_spans``: the spans are timed on the GPU (CUDA events), where a host that launches
    slowly stretches them too (``idle.launch_bound`` tells it from a slow GPU) and a rank is
    flagged by its backward ops alone too (``_backward_judged``).
    ``time_slices``: judge where each rank's slowed ops land (``time_slices.scattered``), where
    ops are timed on GPUs (spans timed so, or a profiler's kernels) and hold no waits for peers.
    """
    iterations = events["iteration"].drop_nulls().n_unique()
    programs = sizes is None and len(coords) > 0 and coords["pp"].null_count() == 0
    mode, group, key, reason = _mode(sizes, iterations, programs)
    if mode == "skipped":
        return PeerEvidence(mode, reason, min_effect=min_effect)
    timed = events.filter(pl.col("iteration").is_not_null())
    by_order = "shape" in timed.columns and timed["shape"].null_count() == len(timed) and coords["pp"].null_count() == 0
    if by_order:
        timed = nth_call(timed, coords, stages_alone=mode == "layer peers")
    if "shape" in timed.columns and timed["shape"].null_count() < len(timed):
        ops = self_times(timed)
        if ops.is_empty():
            return PeerEvidence("skipped", "no compute events to compare", min_effect=min_effect)
        ops = with_trips(contended(ops, timed), timed, coords)
        leaves = ops.select("rank", "iteration", "ts_ns", "end_ns", "name", *_launches(ops), *_lanes(ops))
        gaps = idle_gaps(events, leaves, group, coords, min_effect, starts, recurring=shared_cpus)
        # (ops the stages do not call alike are no one's same work; the gaps above were measured
        # between all ops, so their time stays busy, not idle)
        compared = ops.filter(pl.col("shape") != _UNLIKE) if by_order and mode == "layer peers" else ops
        found = compare_same_work(compared, gaps, coords, group, slow_op=slow_op, min_effect=min_effect,
                                  shared_cpus=shared_cpus, programs_differ=mode == "layer peers" and not by_order,
                                  stages_alone=mode == "layer peers")
        if found is None:
            return PeerEvidence("skipped", "no op ran on two or more peers with the same shapes", min_effect=min_effect)
        per, ranks, z_crit, pairs, graded = found
        if by_order and mode == "layer peers":
            # the GEMMs a stage calls beyond its layers', and the forward passes it runs outside
            # its graph beyond its peers', which the ops called alike leave out
            added = _more_added(stage_gemms(ops, coords), no_grad_passes(ops, slow_op))
            ranks = with_stage_gemms(ranks, added, ops)
            # and how many layers each stage holds, and at what pace it runs their calls
            # (``more_layers``: the ops called alike are mostly the parameters' work)
            units = layer_units(ops).group_by("rank").agg(layer_units=pl.col("units").median())
            ranks = ranks.join(units, on="rank", how="left").join(layer_paces(ops, _UNLIKE), on="rank", how="left")
        if not judge_gaps:
            ranks = ranks.with_columns(gap_flagged=pl.lit(False))
        # (a stage's compute is all its ops', compared or not)
        busy = per if compared is ops else per.drop("busy_ns").join(
            ops.group_by("rank", "iteration").agg(busy_ns=pl.col("self_ns").sum().cast(pl.Float64)),
            on=["rank", "iteration"], how="left")
        stages = _stage_balance(busy, coords) if sizes and sizes["pp"] >= 2 else None
        sliced = scattered(kernel_places(ops, coords, group, slow_op), min_effect) if time_slices else None
        return PeerEvidence(mode, None, per, ranks, z_crit, min_effect, None, stages, pairs=pairs, counted=True,
                            sliced=sliced, scope=None if compared is ops else _scope(compared, ops), graded=graded,
                            by_order=by_order)
    ops = all_leaves = leaf_ops(timed)
    if ops.is_empty():
        return PeerEvidence("skipped", "no compute events to compare", min_effect=min_effect)
    leaves = ops.select("rank", "iteration", "ts_ns", "end_ns", "name", *_lanes(ops))
    stage_gaps = False
    if mode == "layer peers":
        ops = ops.filter(_IS_LAYER)
        if ops.is_empty() or ops["rank"].n_unique() < 2:   # no layer spans: each rank against itself
            if iterations < 2:
                return PeerEvidence("skipped", "one rank per pipeline stage, no layer spans and a single "
                                    "iteration: no peer to compare with", min_effect=min_effect)
            mode, group, key = "own history", ["rank"], _KEY[1:]
            ops = leaf_ops(timed)
        else:
            # different stages idle differently by the schedule's design (the first waits for
            # gradients, the last for activations), by a few percent of a step (2.5-5% on 2
            # GPUs, PP2: healthy, a heavy last stage, a slow layer): an iteration's launch gaps
            # are flagged only where they are a real share of it, whatever its compute says.
            # Work outside the model before each microbatch leaves its rank idle far beyond
            # that (30 ms of matmuls a microbatch on the last stage: 135 ms a step, 34%).
            # (Iterations judged together, ``idle.lasting_gaps``, are not held to the share;
            # the verdict names a host only for gaps of at least ``min_effect`` of its work.)
            stage_gaps = True
    ops, seqlen, block, lead = _fit(ops, coords, group, key, min_effect=min_effect, slow_op=slow_op, blocks=not shared_cpus)
    sliced = scattered(ops, min_effect) if time_slices and gpu_spans else None
    per = _rank_iterations(ops, min_effect, use_spread=True, baseline_spread=bool(block))
    z_crit = z_critical(len(per))
    # On shared CPUs the last stage's hand-over stalls are its loss, compute no span records,
    # also against its own stage peers: a longer sequence or a busier core stretches it (megatron-
    # core DP2 under mapp's capture, lognormal lengths, no fault: rank 0 idled 57 ms a step more
    # than its peer, nearly all of it there; PP2 x DP2 with a heavier last stage, 19 ms), where
    # work or a sleep before each microbatch stalls before the forward. (On GPUs the hand-over
    # tells a host pacing its forward pass from a slow GPU: ``verdict._compute_suspect``.)
    per = per.join(idle_gaps(events, leaves, group, coords, min_effect, starts, stalls(ops),
                             loss_stage=stage_gaps or shared_cpus),
                   on=["rank", "iteration"], how="left")
    if not judge_gaps:
        per = per.with_columns(gap_flagged=pl.lit(False))
    elif stage_gaps:
        per = per.with_columns(gap_flagged=pl.col("gap_flagged") & pl.col("gap_share"))
    if gpu_spans:
        per = _backward_judged(ops, per, min_effect)
    if shared_cpus and (mode in ("dp peers", "stage peers") or (mode == "layer peers" and sizes["pp"] >= 3)):
        per = steady_layers(timed, coords, group, per, per_call=mode == "layer peers")
    # One rank a stage on shared CPUs, idle time names a host only where it stands out in nearly
    # every iteration, not by its median over them (``idle.lasting_gaps``' ``together``): the
    # stages run different programs between their ops (the first reads data and embeds, the
    # last computes the loss) on cores that slow either by turns, so a stage idling a little
    # longer in most iterations is no stall (megatron-core PP2 under mapp's capture, 2
    # processes on 2 cores, no fault: stage 0 idled 0.6-4.8 ms a step more, beyond the cut-off
    # in one step of four, "slow host 0" 1.13x. Of 452 recorded jobs that one alone changed:
    # the injected sleeps and work before each microbatch of PP2 and PP4 jobs there are still
    # named)
    ranks = _per_rank(per, z_crit, judge_gaps, min_effect,
                      together=STAGES_IDLE_TOGETHER or not (stage_gaps and shared_cpus))
    if shared_cpus and mode in ("dp peers", "stage peers") and coords.height == 2:
        # (a rank whose spans outside its layers are as slow: contention, ``whole_process``)
        whole = whole_process(all_leaves, coords, group, _IS_LAYER)
        ranks = ranks.join(whole.with_columns(pl.col("rank").cast(ranks["rank"].dtype)), on="rank", how="left")
    if gpu_spans:
        # what the GPU-bound ops say is the GPU's slowdown: host-paced forward ops, where a slow
        # GPU merely idles less, would water it down (4 H100s: 1.18x on every backward op of
        # the slowed rank, 1.09x over all its ops)
        # Also for a rank that stage 2 may yet make a suspect at half the cut-off (the verdict's
        # joint rule), where every rank's spans are host-paced: then no span says how fast a GPU
        # is (4 H100s, lognormal lengths, no fault: a rank's spans 2.13x its TP peer's at z 2.3
        # was "slow compute" by that rule). Not for its ops merely slower unevenly: a simulated
        # 1.3x GPU among uneven sequence lengths is that too.
        maybe = ranks.filter(~pl.col("flagged") & (pl.col("z") > z_crit / 2)
                             & (pl.col("slowdown") - 1 >= min_effect))["rank"]
        candidate = pl.col("rank").is_in(maybe.implode())
        # and a rank flagged only by its iterations judged together (``_judged_together``), none
        # of which ``per`` records: 4 H200s, PP2 x DP2, lognormal lengths, no fault: a rank whose
        # host paced its forward spans at ~2.2 ms whatever their length, its backward ops like
        # its peer's, read 1.28x with no iteration flagged on its own (a rank with some flagged
        # iterations keeps to those: a transient fault is judged where it was)
        alone = per.filter(pl.col("flagged"))["rank"].unique()
        only_together = ranks.filter(pl.col("flagged") & ~pl.col("rank").is_in(alone.implode()))["rank"]
        together = pl.col("rank").is_in(only_together.implode())
        judged = per.with_columns(flagged=pl.col("flagged") | candidate | together)
        # Nor for its backward ops no slower than its peers': its GPU is not, and where TP
        # collectives run inside its spans, stage 2 is no second witness either, for the rank that
        # launches later waits less in them and is last there for the same reason its spans are
        # longer (4 H200s, megatron-core TP2 x PP2 under mapp's capture, no fault: rank 1's spans
        # 1.26x its TP peer's at z 1.9, backward ops 0.97x, forward 2.2x, last at 63%)
        unchanged = no_slower(min_effect)
        bound = launch_bound(ops, judged, min_effect).with_columns(
            launch_bound=pl.col("launch_bound") & (~candidate | (pl.col("peers_spread") > NOISE) | unchanged),
            # its slowdown stays its own: only a flagged rank's is read off its backward ops
            ops_median=pl.when(candidate).then(None).otherwise(pl.col("ops_median")))
        ranks = ranks.join(bound, on="rank", how="left").with_columns(
            pl.col("launch_bound").fill_null(False), pl.col("gpu_alike").fill_null(False)).with_columns(
            slowdown=pl.when(~pl.col("launch_bound") & pl.col("ops_median").is_not_null())
            .then(pl.max_horizontal(pl.col("ops_median").exp(), pl.col("slowdown"))).otherwise(pl.col("slowdown")))
    pairs = _two_peers(ops)
    if pairs and sizes and sizes["pp"] >= 2 and ranks["flagged"].any():
        ranks = ranks.join(_layer_alone(timed, coords, min_effect=min_effect, slow_op=slow_op), on="rank",
                           how="left").with_columns(pl.col("layer_alone").fill_null(False))
    stages = _stage_balance(per, coords) if sizes and sizes["pp"] >= 2 else None
    return PeerEvidence(mode, None, per.sort(["rank", "iteration"]), ranks, z_crit, min_effect, seqlen, stages,
                        by_order=by_order,
                        pairs=pairs, sliced=sliced, own_time=RUNNABLE in events.columns, leading=lead)


def _scope(compared: pl.DataFrame, ops: pl.DataFrame) -> str:
    """The stage's word on comparing stages on the ops they call alike (``nth_call``)."""
    share = float(compared["self_ns"].sum()) / max(float(ops["self_ns"].sum()), 1.0)
    return (f"on the ops every stage calls as often, {share:.0%} of their compute (recorded without input "
            "shapes: record_shapes=True compares the rest)")


def _more_added(*found: pl.DataFrame | None) -> pl.DataFrame | None:
    """Per rank, of the work found added to it (``stage_gemms``, ``no_grad_passes``), the most
    (by its excess time)."""
    frames = [f for f in found if f is not None]
    if not frames:
        return None
    return (pl.concat(frames, how="diagonal").sort("added_excess_ns", descending=True)
            .group_by("rank", maintain_order=True).first())


_UNLIKE = "!"
"""``nth_call``'s shape of an op the pipeline stages, one rank each, do not call alike."""


def nth_call(timed: pl.DataFrame, coords: pl.DataFrame, *, stages_alone: bool = False) -> pl.DataFrame:
    """Where a profiler recorded no shapes (``record_shapes=False``, its default), the n-th
    call of an op in an iteration stands for its shape among the ranks of one program (one
    pipeline stage, or found by ``program`` without a layout): ranks of one program make their
    calls in the same order, so the n-th ``aten::mm`` of each is the
    same layer's matmul. Only for an op that every rank of the program (``coords.pp``) called as
    often in that iteration: one extra call shifts every later n-th, and a rank whose layers run
    extra GEMMs made its peer's GEMMs look slow by the shift (CPU PP2 x DP2, no shapes). Such an
    op's calls keep one shape, ``*``, and are compared by name, their count included.

    ``stages_alone``: one rank a pipeline stage, each its own program. There the n-th call of a
    stage is not the n-th of another (the first stage's embedding, the last's output layer and
    loss, and each stage's own order of microbatches under 1F1B come between), nor are the calls
    of an op the same work where the stages call it differently often (the output layer's GEMMs
    are ``aten::mm`` calls beside the layers'). Only an op that every stage calls as often in an
    iteration is compared, by name (``*``): the same layers' calls on the same microbatches, in
    another order. The others keep the shape ``_UNLIKE`` and are left out of the comparison
    (``compare_peers``), not out of the time the ranks were busy (2 processes on 2 cores,
    megatron-core PP2 under the profiler without shapes, 16 jobs: by the n-th call, a last stage
    of three times the layers read "slow compute" 2.4x, a stage of lognormal lengths 1.2x, and
    work added before each of the last stage's microbatches named the first stage)."""
    # the program under a name of its own: ``timed`` may carry coordinate columns of its own
    program = timed.join(coords.select("rank", _program=pl.col("pp")), on="rank", how="left")
    calls = pl.len().over("rank", "iteration", "name")
    among = ["iteration", "name"] if stages_alone else ["_program", "iteration", "name"]
    alike = calls.min().over(among) == calls.max().over(among)
    nth = pl.int_range(pl.len()).over("rank", "iteration", "name", order_by="ts_ns")
    if stages_alone:
        # (an op only some stages call: the others' count of it is 0)
        everywhere = pl.col("rank").n_unique().over(among) == timed["rank"].n_unique()
        same = pl.when(alike & everywhere).then(pl.lit("*")).otherwise(pl.lit(_UNLIKE))
    else:
        same = pl.when(alike).then(pl.format("#{}", nth)).otherwise(pl.lit("*"))
    shape = pl.when(pl.col("cat") != "compute").then(None).otherwise(same)
    return program.with_columns(shape=shape).drop("_program")


def _backward_judged(ops: pl.DataFrame, per: pl.DataFrame, min_effect: float) -> pl.DataFrame:
    """Spans timed on the GPU: a rank-iteration is flagged also where its backward ops alone
    are slower than their peers' (``idle.launch_bound`` then tells a GPU from a host by them).

    A forward span there is often the host's pace, in which a slow GPU merely idles less, and
    a host hiccup stretches one span several times: averaged with them, the GPU's signal drowns
    (simulated 1,024 ranks, a 5% GPU: its 16 backward ops 1.02-1.07x, its forward ops ~1.0x but
    three of eight stretched 1.1-2.9x by the host; all ops read 1.04x and cleared no cut). Two
    tests per rank-iteration instead of one: this one's cut counts both."""
    backward = ops.filter(BACKWARD)
    if backward.is_empty() or backward["rank"].n_unique() < 3 or backward.height == ops.height:
        return per
    tests = 2 * len(per)
    bw = _rank_iterations(backward, min_effect, use_spread=True, tests=tests)
    bw = _judged_together(bw, min_effect, families=2)
    return per.join(bw.select("rank", "iteration", bw=pl.col("flagged")), on=["rank", "iteration"], how="left").with_columns(
        flagged=pl.col("flagged") | pl.col("bw").fill_null(False)).drop("bw")


def _layer_alone(timed: pl.DataFrame, coords: pl.DataFrame, *, min_effect: float, slow_op: float) -> pl.DataFrame:
    """Per rank: ``layer_alone``, True where its transformer layers are slower than the same
    layers on every other rank, the other stages' included, in nearly every iteration, and no
    other rank of its stage's are.

    With two ranks to a stage (PP x DP2) either could be the slow one, and the verdict asks
    stage 2 which keeps the other waiting; but in a pipeline a stage's DP reduce falls where the
    schedule puts it, and a slow rank can wait more than it imposes there (simulated PP4 x DP2,
    a 1.3x GPU: last at 3 of 4 all-reduces, yet a net waiter). Every stage's layers do the same
    work on the same microbatch, so the other stages say which of the two is the odd one."""
    empty = pl.DataFrame(schema={"rank": pl.Int32, "layer_alone": pl.Boolean})
    # the ops every stage runs (its layers'; not the embedding's or the output layer's)
    ops = leaf_ops(timed).join(coords.select("rank", pl.col("pp").alias("stage")), on="rank", how="left")
    ops = ops.filter(pl.col("stage").n_unique().over("name") == ops["stage"].n_unique()).drop("stage")
    if ops.is_empty() or ops["rank"].n_unique() < 3:
        return empty
    ops, _, _, _ = _fit(ops, coords, [], _LAYER_KEY, min_effect=min_effect, slow_op=slow_op)
    if ops.is_empty():
        return empty
    per = _rank_iterations(ops, min_effect, use_spread=True)
    slow = per.group_by("rank").agg(slow=pl.col("flagged").mean() >= CONSISTENT).join(
        coords.select("rank", "pp", "tp"), on="rank", how="left")
    return slow.with_columns(layer_alone=pl.col("slow") & (pl.col("slow").sum().over("pp", "tp") == 1)).select(
        "rank", "layer_alone")


def _fit(ops: pl.DataFrame, coords: pl.DataFrame, group: list[str], key: list[str], *,
         min_effect: float, slow_op: float, blocks: bool = False
         ) -> tuple[pl.DataFrame, dict | None, list[int], list[int]]:
    """Each op against its peers' (``group`` + ``key``): ``r_adj``, its log-ratio less what its
    replica's data explains, ``slow`` and ``excess``; and the data fit's summary (``polish``).
    ``blocks``: a block of peers slowed alike (``slow_blocks``) is left out of the baseline too:
    its ranks are the third item returned; the fourth, the ranks that lead their peers in nearly
    every microbatch, alone or in such a block (``slow_blocks.Blocks``)."""
    ops = ops.join(coords.select("rank", "tp", "pp", "dp"), on="rank", how="left").with_columns(
        pl.col(c).fill_null(-1) for c in ("microbatch", "chunk", "layer")
    )
    # repeated keys on one rank (a format without microbatch numbers) are told apart by order
    if ops.select(pl.struct("rank", *_KEY).is_duplicated().any()).item():
        ops = ops.with_columns(ordinal=pl.int_range(pl.len()).over(["rank", *_KEY]))
    else:
        ops = ops.with_columns(ordinal=pl.lit(0, pl.Int64))
    # one hashed column for the peer group + op key: grouping on it is much cheaper than on seven
    ops = ops.with_columns(gk=pl.struct(*group, *key, "ordinal").hash(), lx=pl.col("self_ns").cast(pl.Float64).log(),
                           use=pl.lit(True))
    g = ["gk"]
    ops = ops.with_columns(n_peers=pl.len().over(g)).filter(pl.col("n_peers") >= 2)
    # Two passes: a slow rank pulls its peers' median up (with two slow ranks out of four the
    # healthy ones even look fast), so ranks that are clear outliers in the first pass are left
    # out of the baseline of the second.
    # fitted once, on every rank: in the second pass the outliers are out of the baseline,
    # and with two peers what is left could not show how time grows with tokens
    beta = _token_slope(_relative(ops, g), g)
    ops = _token_free(ops, beta)
    ops, seqlen = polish(ops, g)
    first = _rank_iterations(ops, min_effect, use_spread=False)
    outliers = first.filter(pl.col("flagged")).select("rank", "iteration", out=pl.lit(True))
    # (not where compute varied with the data: a replica's data and a block of its ranks slowed
    # alike are one to the fit, ``slow_blocks``)
    block, lead = slow_blocks(ops, group, min_effect) if blocks and seqlen is None else ([], [])
    if block:
        outliers = pl.concat([outliers, first.filter(pl.col("rank").is_in(block)).select(
            "rank", "iteration", out=pl.lit(True))]).unique(["rank", "iteration"])
    if len(outliers):
        ops = ops.join(outliers, on=["rank", "iteration"], how="left").with_columns(
            use=pl.col("out").is_null()).drop("out")
        ops, seqlen = polish(ops, g, first=seqlen or False)
    ops = ops.with_columns(
        slow=(pl.col("r").exp() > 1 + slow_op),
        excess=(pl.col("self_ns") - pl.col("self_ns") / pl.col("r_adj").exp()),
    )
    return ops, seqlen, block, lead


def _relative(ops: pl.DataFrame, g: list[str]) -> pl.DataFrame:
    """``r``: each op's log-ratio to the median of its peers' (rows with ``use``) same op."""
    base = ops.filter(pl.col("use")).group_by(g).agg(
        n_base=pl.len(), med=pl.col("lx").median(), mean=pl.col("lx").mean()
    )
    ops = ops.drop([c for c in ("n_base", "med", "mean") if c in ops.columns]).join(base, on=g, how="left")
    # With two peers the median is their mean and would halve the difference; compare with
    # the other one instead (leave-one-out), which is what a median of the others means.
    # Where every peer was left out the op keeps no baseline and drops out.
    return ops.with_columns(
        r=pl.when((pl.col("n_base") == 2) & pl.col("use")).then(2 * (pl.col("lx") - pl.col("mean")))
        .otherwise(pl.col("lx") - pl.col("med"))
    ).filter(pl.col("r").is_not_null())


def _token_x(ops: pl.DataFrame, g: list[str]) -> pl.DataFrame:
    """``x``: each op's log token count against its peers' (rows with ``use``), as ``r`` is;
    0 where the trace records no tokens."""
    lt = pl.col("tokens").cast(pl.Float64).log()
    t = ops.filter(pl.col("use") & pl.col("tokens").is_not_null() & (pl.col("tokens") > 0))
    base = t.group_by(g).agg(t_med=lt.median(), t_mean=lt.mean(), t_n=pl.len())
    return ops.join(base, on=g, how="left").with_columns(
        x=pl.when(pl.col("tokens").is_null() | (pl.col("tokens") <= 0)).then(0.0)
        .when((pl.col("t_n") == 2) & pl.col("use")).then(2 * (lt - pl.col("t_mean")))
        .otherwise(lt - pl.col("t_med")).fill_null(0.0)
    ).drop("t_med", "t_mean", "t_n")


def _token_slope(ops: pl.DataFrame, g: list[str]) -> pl.DataFrame | None:
    """How each op's time grows with its tokens, where the trace records them: ``name`` and
    ``beta`` per op name (None: no tokens, or lengths hardly vary).

    Peers run the same op on different data: with sequence lengths that differ between data
    parallel replicas, one replica's layers take longer because they have more tokens, not
    because its GPU is slow, and a replica of one rank has no peer of its own to share that
    with (``polish`` cannot remove it). A slope per op name (a layer's backward, its
    forward, the embedding and the output layer grow differently: 0.2-1.0 measured on one CPU
    job), fitted within each rank (``r`` and ``x`` less their rank's means; kept between 0 and
    2: linear layers scale with tokens, attention up to their square); a name with too little
    variation of its own takes the slope of all ops. Within a rank, because between ranks a
    slow GPU and a replica of longer sequences are both offsets of the whole rank: a pooled fit
    would let one explain the other (with two ranks, a slow rank 1 beside a rank 0 of longer
    sequences drove the slope down and hid rank 1). A rank's microbatch lengths vary, its GPU's
    speed does not.
    """
    if "tokens" not in ops.columns or ops["tokens"].drop_nulls().is_empty():
        return None
    used = _token_x(ops, g).filter(pl.col("use")).with_columns(
        dr=pl.col("r") - pl.col("r").mean().over("rank", "name"),
        dx=pl.col("x") - pl.col("x").mean().over("rank", "name"))
    fit = dict(sxy=(pl.col("dr") * pl.col("dx")).sum(), sxx=(pl.col("dx") ** 2).sum(),
               varied=(pl.col("dx").abs() > 0.05).sum())
    sxy, sxx, varied = used.select(**fit).row(0)
    if not sxx or varied < 8:   # equal lengths everywhere (or nearly): nothing to explain
        return None
    pooled = sxy / sxx
    return used.group_by("name").agg(**fit).select(
        "name", beta=pl.when((pl.col("varied") >= 8) & (pl.col("sxx") > 0)).then(pl.col("sxy") / pl.col("sxx"))
        .otherwise(pooled).clip(0.0, 2.0))


def _token_free(ops: pl.DataFrame, beta: pl.DataFrame | None) -> pl.DataFrame:
    """``y``: each op's log time less what its tokens explain (``beta`` per op name from
    :func:`_token_slope`); the log time itself where the trace records no tokens. A slow GPU is
    slow whatever its tokens, so it stays."""
    if beta is None:
        return ops.with_columns(y=pl.col("lx"))
    lt = pl.when(pl.col("tokens") > 0).then(pl.col("tokens").cast(pl.Float64).log()).otherwise(0.0)
    return ops.join(beta, on="name", how="left").with_columns(
        y=pl.col("lx") - pl.col("beta").fill_null(0.0) * lt).drop("beta")


def _rank_iterations(ops: pl.DataFrame, min_effect: float, *, use_spread: bool, tests: int | None = None,
                     baseline_spread: bool = False) -> pl.DataFrame:
    """Per (rank, iteration): the median log-ratio ``effect`` (centred), its ``z`` and ``flagged``.

    The standard error of a median of n ops is MEDIAN_SE x sigma / sqrt(n), sigma the scatter
    of single ops around their rank-iteration's median. With ``use_spread`` the spread of
    effects across rank-iterations is a floor too: when healthy ranks differ among themselves
    (data-dependent work) a rank must stand out from that, not only from its own noise.

    Ops of one microbatch are not independent where the data sets their time (a longer
    sequence makes all of its layers longer together): there the rank-iteration's effect is
    as uncertain as its microbatches' medians scatter (``_microbatch_se``), whatever the count
    of ops. A GPU slower on everything is slower on every microbatch alike.

    ``baseline_spread``: the scatter of single ops and of the effects is that of the baseline's
    rank-iterations alone, where a block of peers slowed alike was left out of it
    (``slow_blocks``): the block's lead over the rest is the slowdown, not the noise.
    """
    if "slow" not in ops.columns:
        ops = ops.with_columns(slow=pl.lit(False), excess=pl.lit(0.0))
    # One op one vote, not weighed by time: on cores shared by more processes than they have,
    # a timeslice lost inside a long span stretches it by a ratio that a short span seldom
    # suffers, so weighing the spans by time reads contention as a slow rank (tried on 890 real
    # jobs, megatron-core under mapp's capture: time-weighted, it found the layer faults of two
    # DP4 jobs on CPUs and of a TP2 job on 2 H200s, but named a rank in five healthy or
    # imbalanced CPU jobs, at 2.1x and 4.7x its peer in two of them, and in a healthy job on 4
    # H200s, and lost a PP4 layer fault; ``same_work`` compares time summed per kind, where
    # counted calls, not spans, carry the evidence)
    per = ops.group_by(["rank", "iteration"]).agg(
        effect=pl.col("r_adj").median(), n_ops=pl.len(), share_slow=pl.col("slow").mean(),
        data_se=pl.col("data_se").max() if "data_se" in ops.columns else pl.lit(0.0),
        excess_ns=pl.col("excess").sum(), busy_ns=pl.col("self_ns").sum(), baseline=pl.col("use").all(),
    )
    # sigma from the scatter of single ops around their peers (not around the rank's own
    # median, which fits the same ops and so understates it for a dozen ops)
    pairs = _two_peers(ops)
    if pairs:  # the ops' scatter around peers is the slowdown itself: use their own medians
        sigma = ops.select(robust_scale(pl.col("r_adj") - pl.col("r_adj").median().over(["rank", "iteration"]))).item() or 0.0
    else:
        # (a block left out of the baseline is no noise of the rest: ``slow_blocks``)
        base_ops = ops.filter(pl.col("use")) if baseline_spread and "use" in ops.columns and ops["use"].any() else ops
        sigma = base_ops.select(robust_scale("r_adj")).item() or 0.0
    spread = _effect_spread(per.filter(pl.col("baseline")) if baseline_spread and per["baseline"].any() else per,
                            pairs) if use_spread else 0.0
    per = per.join(_microbatch_se(ops), on=["rank", "iteration"], how="left").with_columns(
        pl.col("mb_se").fill_null(0.0))
    # centred on the rank-iterations that form the baseline (the first pass's outliers do not)
    base = per.filter(pl.col("baseline"))["effect"]
    center = base.median() if len(base) else per["effect"].median()
    z_crit = z_critical(tests or len(per))
    return per.with_columns(effect=pl.col("effect") - center).with_columns(
        se=pl.max_horizontal(((MEDIAN_SE * sigma) ** 2 / pl.col("n_ops").cast(pl.Float64) + pl.col("data_se") ** 2).sqrt(),
                             pl.col("mb_se"), pl.lit(spread), pl.lit(1e-6))
    ).with_columns(z=pl.col("effect") / pl.col("se")).with_columns(
        flagged=(pl.col("z") > z_crit) & (pl.col("effect").exp() - 1 >= min_effect)
    ).drop("baseline", "mb_se", "data_se")


def _microbatch_se(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, iteration) with three microbatches or more: ``mb_se``, MEDIAN_SE x the
    scatter of its microbatches' median ``r_adj`` around their median / sqrt(microbatches).
    The scatter is the larger of the rank-iteration's own (robust, so one odd microbatch
    does not make it) and that pooled over all rank-iterations (four microbatches alone can
    happen to agree)."""
    mb = ops.filter(pl.col("microbatch") >= 0).group_by("rank", "iteration", "microbatch").agg(m=pl.col("r_adj").median())
    if mb.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "iteration": pl.Int32, "mb_se": pl.Float64})
    mb = mb.with_columns(d=pl.col("m") - pl.col("m").median().over("rank", "iteration"))
    pooled = mb.select(robust_scale("d")).item() or 0.0
    return mb.group_by("rank", "iteration").agg(n_mb=pl.len(), own=MAD_TO_SIGMA * pl.col("d").abs().median()).filter(
        pl.col("n_mb") >= 3).select("rank", "iteration", mb_se=MEDIAN_SE * pl.max_horizontal(pl.col("own"), pl.lit(pooled))
                                     / pl.col("n_mb").cast(pl.Float64).sqrt())


def _two_peers(ops: pl.DataFrame) -> bool:
    """Whether some op is compared between two ranks only (each is then measured against the other)."""
    smallest = ops.group_by("gk").agg(pl.col("rank").n_unique().alias("n"))["n"].min()
    return smallest is not None and smallest < 3


def _effect_spread(per: pl.DataFrame, pairs: bool) -> float:
    """How much healthy rank-iterations' effects scatter: the floor of a standard error.

    Across rank-iterations when every peer group has three or more ranks (then the healthy
    majority sets the scale). With two peers the two ranks' effects are mirror images, so
    their scatter *is* the slowdown being tested; there the floor is how much each rank's
    effect varies from iteration to iteration.
    """
    if not pairs:
        return per.select(robust_scale("effect")).item() or 0.0
    within = per.with_columns(d=pl.col("effect") - pl.col("effect").median().over("rank"))
    return within.select(robust_scale("d")).item() or 0.0


STAGES_IDLE_TOGETHER = False
"""One rank a stage on shared CPUs, whether a rank's idle time may also stand out by its median
over the iterations (``idle.lasting_gaps``' ``together``), as it may elsewhere. False: there it
must stand out in nearly every iteration (``compare_peers`` says why); tests switch it on to
reach the rules that judged such idle time before."""


def _per_rank(per: pl.DataFrame, z_crit: float, judge_gaps: bool = True, min_effect: float = 0.0,
              together: bool = True) -> pl.DataFrame:
    """Per rank. ``lasting``: a fault lasts, while noise on shared or busy hosts can make one
    iteration of one rank stand out; a rank's compute flags last when it is flagged in nearly
    every traced iteration (``CONSISTENT``) or, for a fault that came and went (a transient
    window, told from a hiccup with three traced iterations or more), in fewer but far beyond the cut-off; launch-gap flags only in nearly every
    iteration. Verdicts need it (``verdict.combine``)."""
    if "se" in per.columns:
        per = _judged_together(per, min_effect)
    per = per.with_columns(gap_raw=pl.col("gap_flagged").fill_null(False))
    if "gap_share" in per.columns:   # idle time alone names a host only when it is a real share
        per = per.with_columns(gap_flagged=pl.col("gap_raw") & (
            pl.col("gap_share").fill_null(False) | pl.col("flagged").any().over("rank"))).drop("gap_share")
    # ``gap_idle``: by the z of idle time alone, which tells a rank that is a suspect by another
    # route (stage 2 with its compute leaning the same way) a slow host rather than a slow GPU
    per = per.with_columns(gap_idle=lasting_gaps(pl.col("gap_raw"), z_crit, together) if judge_gaps else pl.lit(False),
                           gap_flagged=lasting_gaps(pl.col("gap_flagged").fill_null(False), z_crit, together)
                           if judge_gaps else pl.lit(False)).drop("gap_raw")
    gap = pl.col("gap_flagged")
    # A window is told from a hiccup only against traced iterations on its sides: with two, a
    # rank slow in one of them and normal in the other is as likely a busy host's noise as a
    # fault that came and went (a lasting fault that noise put under the cut-off once still
    # leans the same way in the other iteration).
    window = per["iteration"].n_unique() >= 3
    far = (pl.col("z").filter(pl.col("flagged")).max() >= 2 * z_crit) & (pl.lit(window) | (pl.col("z").min() > z_crit / 2))
    lasting = (pl.col("flagged").mean() >= CONSISTENT) | far | gap.any()
    flagged = pl.col("flagged") | gap
    return per.group_by("rank").agg(
        lasting=lasting.fill_null(False),
        slowdown=pl.when(pl.col("flagged").any()).then(pl.col("effect").filter(pl.col("flagged")).median())
        .otherwise(pl.col("effect").median()).exp(),
        z=pl.col("z").max(),
        share_slow=(pl.col("share_slow") * pl.col("n_ops")).sum() / pl.col("n_ops").sum(),
        n_ops=pl.col("n_ops").sum(),
        flagged=pl.col("flagged").any(),
        iterations=pl.col("iteration").filter(flagged).sort(),
        excess_ns=pl.when(flagged.any()).then(pl.col("excess_ns").filter(flagged).mean()).otherwise(pl.col("excess_ns").mean()),
        busy_ns=pl.col("busy_ns").mean(),
        gap_excess_ns=pl.when(pl.col("gap_flagged").any()).then(pl.col("gap_excess_ns").filter(pl.col("gap_flagged")).mean())
        .otherwise(pl.col("gap_excess_ns").mean()),
        gap_z=pl.col("gap_z").max(),
        gap_flagged=pl.col("gap_flagged").fill_null(False).any(),
        gap_idle=pl.col("gap_idle").fill_null(False).any(),
        gap_ns=pl.col("gap_ns").mean(),
        long_excess_ns=pl.col("long_excess_ns").mean(),
        data_stalls=data_stalls(min_effect) if "data_excess_ns" in per.columns else pl.lit(False),
        handover_excess_ns=pl.col("handover_excess_ns").mean() if "handover_excess_ns" in per.columns else pl.lit(0.0),
        steady=pl.col("steady").max() if "steady" in per.columns else pl.lit(None, dtype=pl.Float64),
    ).sort("rank")


def _judged_together(per: pl.DataFrame, min_effect: float, *, families: int = 1) -> pl.DataFrame:
    """A rank slower in every traced iteration by an amount that no single iteration's
    evidence clears is flagged when their median clears the cut-off. The median over n
    iterations is uncertain by MEDIAN_SE x (a typical iteration's standard error) / sqrt(n);
    over one or two it is their mean, uncertain by the root of the summed squares over n.
    This is one test per rank (per rank and family of ops judged), not per rank-iteration: its
    cut-off counts those.
    Where data sets the time (a replica's microbatches longer or shorter than its peers' by
    chance, in each iteration anew: ``data_se``) one iteration says little, and a 1.3x GPU
    beside it only shows across iterations. Slower in nearly every iteration
    (``CONSISTENT``), and by at least ``min_effect``."""
    z_rank = z_critical(families * per["rank"].n_unique())
    n_it = pl.len().over("rank").cast(pl.Float64)
    med = pl.col("effect").median().over("rank")
    se = (pl.when(n_it <= 2).then((pl.col("se") ** 2).sum().over("rank").sqrt() / n_it)
          .otherwise(MEDIAN_SE * pl.col("se").median().over("rank") / n_it.sqrt()))
    together = ((med / se > z_rank)
                & ((pl.col("effect") > 0).mean().over("rank") >= CONSISTENT) & (med.exp() - 1 >= min_effect))
    return per.with_columns(flagged=pl.col("flagged") | (together & (pl.col("effect") > 0)))


def _stage_balance(per: pl.DataFrame, coords: pl.DataFrame) -> pl.DataFrame:
    """Per stage, the compute of its fastest rank (a faulty GPU does not move a minimum; a
    heavier stage moves all its ranks), relative to the lightest stage."""
    st = (
        per.join(coords.select("rank", "pp"), on="rank").group_by(["pp", "iteration"]).agg(pl.col("busy_ns").min())
        .group_by("pp").agg(compute_ns=pl.col("busy_ns").median()).sort("pp")
    )
    return st.with_columns(ratio=pl.col("compute_ns") / pl.col("compute_ns").min())
