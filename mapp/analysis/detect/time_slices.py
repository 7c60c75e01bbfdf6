"""A rank whose GPU another process time-slices: slower in every step, at no op in particular.

A neighbour on a rank's GPU (another job's process, a stray inference server) takes the device
for a slice now and then; the rank's kernels wait meanwhile, so whichever of its ops runs then
is stretched, by about a slice, and the rest run at full speed. The rank loses real time every
step and keeps its peers waiting, but its median op is no slower, which is what stage 1 judges
(one op one vote, ``peers._rank_iterations``), so it goes unnamed. Its summed self time is no
proof either: under mapp's capture on GPUs, healthy TP ranks summed 1.10-1.35x their peers'
(the rank that reads the data, a host that launches later), at the same ops step after step.

What tells slices apart is where they land. Everything else that makes one rank's ops slower
is tied to the model: a slow GPU or a layer fault slows every op or the same ones each step, a
longer sequence slows all the layers of its microbatch. A neighbour's slices land where its
clock says, so the rank's slowed ops are placed as if at random: in two steps at the same op
no more often than chance, and no more often beside each other in one microbatch than chance.
2 H200s, megatron-core TP2 and DP2 under mapp's capture, another process running matmuls for
0.15 or 0.2 of every 20 ms on one rank's GPU (``--set fresh27``, three runs): the rank summed
1.14-1.37x its peer's in every step, its median op 1.01-1.08x, its slowed ops placed with a
lift over chance of 0.08 at most across steps and 0.19 within microbatches. Every other rank
of the GPU battery (224 jobs) that summed 1.1x or more in nearly every step with 20 slowed ops a
step or more and kept its peers waiting (35: healthy, imbalanced, injected) had one of the two
lifts at 0.34 or more (``benchmarks/detect_evidence.py``, its "time slices" row). The
profiler's kernels alike (``kernel_places``): DP2 at 0.15 of every 20 ms, the rank's same
kernels summed 1.24-1.26x, lifts 0.08 and 0.21 at most; plain DDP and FSDP ranks that a slow peer kept waiting summed 1.09-1.12x, slower at the
same kernels each step (place lift 0.51-0.85), and kept no one waiting.

Where the capture sampled NVML and saw another process computing on the rank's GPU
(``device.neighbours``), the cause is seen, not inferred: the rank is then named wherever its
summed time is slower in nearly every step (in most, where stage 2 measures it holding its
peers up in nearly every step: ``SEEN_MOST``) and it keeps its peers waiting, however its slowed
ops cluster. That is what names a neighbour that bursts for several ops at a time: its slices
slow runs of consecutive ops, several layers of one microbatch, which is how placement alone
reads whatever slows whole microbatches (healthy TP2 x PP2 ranks, a lognormal-lengths
replica: their placement lifts overlap a bursty neighbour's).

Only for ops timed on the GPU: processes that share CPU cores (the CPU jobs) are each other's
neighbours, and which one the scheduler slices more is chance (healthy DP4 on 2 cores: a rank
1.11x by its sum in every step, its slowed ops placed at random). With one rank a pipeline
stage, its peers are the other stages' same layers, and no collective says who waits on whom:
the rank of the stage that computes the most stands for one its peers wait on
(``verdict._waited_on``).
"""

from __future__ import annotations

import itertools

import polars as pl

from mapp.analysis.detect._stats import others_median
from mapp.analysis.detect.findings import Suspect, in_place_of_lower
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["RANDOM", "MIN_SLOW_OPS", "SEEN_MOST", "kernel_places", "neighbour_notes", "scattered", "sliced_suspects"]

RANDOM = 0.25
"""The most a rank's slowed ops may cluster, by place across steps and within a microbatch
(each a lift over chance: 0 as random, 1 at the same ops always), to be a neighbour's slices.
Measured (see the module): slices 0.21 at most; healthy, imbalanced and injected ranks 0.34 or
more on one of the two."""

MIN_SLOW_OPS = 20
"""Fewer slowed ops a step than this say nothing about where they land."""

SEEN_MOST = 0.5
"""A rank whose neighbour NVML saw is named where its summed self time is slower in more than
this share of its traced steps (not nearly all of them, ``CONSISTENT``) when stage 2 measures
it keeping its peers waiting in nearly every step: a neighbour that bursts at irregular times
may miss a step's layers and still hold the step up (2 H200s, DP2 under mapp's capture, a
neighbour at 0.15 of its GPU in irregular bursts, seen in 3 of 3 samples: the rank's layers
summed 1.26x its peer's in 2 of 3 steps, and it was last at all 3 all-reduces, 113 ms a step
imposed)."""

_PLACE = ["name", "microbatch", "chunk", "layer", "ordinal"]


def scattered(ops: pl.DataFrame, min_effect: float) -> pl.DataFrame:
    """Per rank of ``ops`` (each op against its peers': ``rank``, ``iteration``, the place
    columns ``name``, ``microbatch``, ``chunk``, ``layer``, ``ordinal``, and ``self_ns``,
    ``excess``, ``slow``, ``r_adj``, ``gk``, as ``peers._fit`` makes them): ``sum_ratio`` (its
    self time over its peers' at the same ops, the median over its iterations), ``lasting``
    (share of iterations at least ``1 + min_effect``), ``excess_ns`` (per iteration, the
    median), ``iterations`` (those), ``raw_ratio``, ``raw_lasting``, ``raw_excess_ns`` and
    ``raw_iterations`` (the same against the peers' same op without the data fit), ``slow_ops``
    (per iteration, the median), ``place_lift``
    (its slowed ops at the same op in two iterations, over chance) and ``microbatch_lift`` (a
    slowed op's neighbours in its microbatch slowed too, over chance), and ``flagged``: lasting,
    enough slowed ops and both lifts under ``RANDOM``."""
    if ops.is_empty():   # (``kernel_places`` found no kernels to place: a frame without its columns)
        return _empty()
    ops = _same_work(ops.filter(pl.col("r_adj").is_not_null()))
    if ops.is_empty():
        return _empty()
    lasting = pl.col("ratio") >= 1 + min_effect
    # the peers' same op as they timed it, no data fit (the median of the others' self time):
    # for the rank whose neighbour was seen (``sliced_suspects``), since a burst that slows
    # several layers of one microbatch is what ``peers._fit`` reads as that replica's data
    ops = _with_peers_raw(ops)
    raw = pl.col("peer_raw_ns")
    per = ops.group_by("rank", "iteration").agg(
        ratio=pl.col("self_ns").sum() / (pl.col("self_ns") - pl.col("excess")).sum(),
        excess=pl.col("excess").sum(), slow=pl.col("slow").sum(),
        raw_ratio=pl.col("self_ns").sum() / raw.sum(), raw_excess=(pl.col("self_ns") - raw).sum(),
    ).group_by("rank").agg(
        sum_ratio=pl.col("ratio").median(), lasting=lasting.mean(), excess_ns=pl.col("excess").median(),
        iterations=pl.col("iteration").filter(lasting).sort().cast(pl.Int64),
        slow_ops=pl.col("slow").median().cast(pl.Float64), traced=pl.len(),
        raw_ratio=pl.col("raw_ratio").median(), raw_lasting=(pl.col("raw_ratio") >= 1 + min_effect).mean(),
        raw_excess_ns=pl.col("raw_excess").median(),
        raw_iterations=pl.col("iteration").filter(pl.col("raw_ratio") >= 1 + min_effect).sort().cast(pl.Int64))
    out = per.join(_place_lift(ops), on="rank", how="left").join(_microbatch_lift(ops), on="rank", how="left")
    return out.with_columns(flagged=(
        (pl.col("traced") >= 2) & (pl.col("lasting") >= CONSISTENT) & (pl.col("slow_ops") >= MIN_SLOW_OPS)
        & (pl.col("place_lift") < RANDOM) & (pl.col("microbatch_lift") < RANDOM)).fill_null(False)
    ).select(list(_SCHEMA)).cast(_SCHEMA).sort("rank")


def kernel_places(ops: pl.DataFrame, coords: pl.DataFrame, group: list[str], slow_op: float) -> pl.DataFrame:
    """A profiler trace's kernels (``self_times`` of its timed events) as ``scattered`` reads
    them: each call against the median of its peers' (``group``: the coordinates peers share)
    same call, the n-th call of a kernel of one shape (grid, block and the op that launched it)
    in an iteration. Kernels only: their times are the GPU's, which a host that launches late
    does not stretch. A kernel records no microbatch, so all the calls of one shape in an
    iteration stand for a microbatch: a slow GPU that slows one kind of kernel slows every call
    of it."""
    kernels = ops.filter(pl.col("lane").str.starts_with("stream:") & pl.col("iteration").is_not_null())
    if kernels.is_empty():
        return kernels
    kernels = kernels.sort("rank", "iteration", "ts_ns").with_columns(
        ordinal=pl.int_range(pl.len()).over("rank", "iteration", "name", "shape"),
        name=pl.concat_str(pl.col("name"), pl.col("shape").fill_null(""), separator=" "),
    ).join(coords.select("rank", *group), on="rank", how="left").with_columns(
        microbatch=pl.lit(-1), chunk=pl.lit(-1), layer=pl.lit(-1))
    kernels = kernels.with_columns(gk=pl.struct(*group, "iteration", "name", "ordinal").hash())
    kernels = kernels.filter(pl.len().over("gk") >= 2)
    if kernels.is_empty():
        return kernels
    kernels = _with_peers_raw(kernels).rename({"peer_raw_ns": "peer_ns"}).filter(pl.col("peer_ns") > 0)
    return kernels.with_columns(
        excess=pl.col("self_ns") - pl.col("peer_ns"), r_adj=(pl.col("self_ns") / pl.col("peer_ns")).log(),
        slow=pl.col("self_ns") > (1 + slow_op) * pl.col("peer_ns"))


def sliced_suspects(sliced: pl.DataFrame | None, suspects: list[Suspect], keeping_waiting: set[int], coords: dict,
                    iteration_ns: float | None, neighbours: dict[int, dict] | None = None,
                    measured_waits: bool = False) -> list[Suspect]:
    """``suspects`` with slow compute for each rank that stage 2 finds keeping its peers waiting
    in nearly every iteration (``keeping_waiting``, by ``gates.keeps_waiting``: the time it loses
    is theirs too) and that ``scattered`` flags, or whose summed self time is slower in nearly
    every traced step while NVML saw another process computing on its GPU (``neighbours``, by
    ``device.neighbours``); in most steps (``SEEN_MOST``) where ``measured_waits`` (the waits are
    stage 2's measure, not a stand-in for it: ``verdict._waited_on``). Its slowdown its summed
    self time over its peers', in place of a verdict on that rank of a lower slowdown."""
    if sliced is None or sliced.is_empty():
        return suspects
    neighbours = neighbours or {}
    out = []
    for row in sliced.iter_rows(named=True):
        rank, seen = row["rank"], neighbours.get(row["rank"])
        by_sight = seen is not None and row["traced"] >= 2 and (
            row["raw_lasting"] >= CONSISTENT or (measured_waits and row["raw_lasting"] > SEEN_MOST))
        if not (row["flagged"] or by_sight) or rank not in keeping_waiting:
            continue
        # seen: what its ops lost against its peers' same ops, none of it put down to data
        ratio, excess, iterations = ((row["raw_ratio"], row["raw_excess_ns"], row["raw_iterations"]) if by_sight
                                     else (row["sum_ratio"], row["excess_ns"], row["iterations"]))
        evidence = {"time_slices": {"sum_ratio": round(ratio, 3), "slow_ops": row["slow_ops"],
                                    "place_lift": _rounded(row["place_lift"]),
                                    "microbatch_lift": _rounded(row["microbatch_lift"])}}
        if seen is not None:
            evidence["neighbour"] = dict(seen)
            # seen, not inferred: as sure as a verdict of stage 1 and 2 together
            confidence = 0.85
            note = (f"NVML saw another process computing on its GPU (up to {seen['other_sm_pct']:g}% of its SMs, in "
                    f"{seen['seen']} of {seen['samples']} samples) while its ops summed slower than its peers' in "
                    f"{len(iterations)} of {row['traced']} traced steps and it kept them waiting: a neighbour "
                    "time-slicing its GPU")
        else:
            # the further from the cut both lifts are, the surer: 0.8 where placement is random
            worst = max(row["place_lift"], row["microbatch_lift"])
            confidence = 0.5 + 0.3 * min(1.0, max(0.0, 1.0 - worst / RANDOM))
            note = ("its ops summed slower than its peers' in nearly every step, at different ops each step and no "
                    "more often together in a microbatch than chance, while its median op was not slower: another "
                    "process time-slicing its GPU, most likely")
        evidence["note"] = note
        out.append(Suspect(
            rank=rank, kind="slow_compute", coords=coords.get(rank), confidence=confidence, slowdown=ratio,
            excess_ns=excess, iteration_ns=iteration_ns, iterations=iterations, evidence=evidence))
    return in_place_of_lower(suspects, out)


def neighbour_notes(neighbours: dict[int, dict], named: list[Suspect]) -> list[str]:
    """A note for each rank on whose GPU NVML saw another process computing that no suspect or
    would-be suspect (``named``) stands for: the neighbour is a fact worth knowing even where
    the trace cannot show what it cost (a pipeline stage of one rank has no peer to compare)."""
    told = {s.rank for s in named}
    return [f"another process computed on rank {rank}'s GPU (NVML: up to {seen['other_sm_pct']:g}% of its SMs, in "
            f"{seen['seen']} of {seen['samples']} samples); not a suspect: the traces do not show it slower than its "
            "peers at the same work in most steps while they waited for it in nearly every one"
            for rank, seen in sorted(neighbours.items()) if rank not in told]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _with_peers_raw(ops: pl.DataFrame) -> pl.DataFrame:
    """``peer_raw_ns``: the median of the other ranks' self time at the same op (``gk``), as
    measured; the op's own time where it has no peer left (so it adds nothing to a sum)."""
    ops = ops.with_columns(n_same=pl.len().over("gk"))
    paired = ops.filter(pl.col("n_same") >= 2)
    paired = paired.with_columns(peer_raw_ns=pl.Series(
        others_median(paired["gk"].to_numpy(), paired["self_ns"].to_numpy()), dtype=pl.Float64))
    alone = ops.filter(pl.col("n_same") < 2).with_columns(peer_raw_ns=pl.col("self_ns").cast(pl.Float64))
    return pl.concat([paired, alone]).drop("n_same")


def _same_work(ops: pl.DataFrame) -> pl.DataFrame:
    """The ops whose tokens (where the trace records them) are their peers' at the same op: a
    neighbour's slices stretch the same work, where a longer sequence is more work."""
    if "tokens" not in ops.columns or ops["tokens"].null_count() == len(ops):
        return ops
    return ops.filter(pl.col("tokens").is_null() | (pl.col("tokens") == pl.col("tokens").median().over("gk")))


def _place_lift(ops: pl.DataFrame) -> pl.DataFrame:
    """Per rank: the mean over consecutive pairs of its iterations of the overlap (Jaccard) of
    their slowed places (among the places both have), as a lift over what placing each
    iteration's slowed ops at random would give: (J - E) / (1 - E). Null with fewer than two
    iterations. (Consecutive pairs, not all: a trace of many steps costs as many passes.)"""
    wide = ops.select("rank", "iteration", *_PLACE, "slow").sort("iteration").pivot(
        on="iteration", index=["rank", *_PLACE], values="slow", aggregate_function="first")
    its = [c for c in wide.columns if c not in ("rank", *_PLACE)]
    lifts = []
    for a, b in itertools.pairwise(its):
        here = pl.col(a).is_not_null() & pl.col(b).is_not_null()
        n = wide.group_by("rank").agg(
            common=here.sum(), in_a=(here & pl.col(a)).sum(), in_b=(here & pl.col(b)).sum(),
            both=(here & pl.col(a) & pl.col(b)).sum())
        expected_both = pl.col("in_a") * pl.col("in_b") / pl.col("common")
        union = pl.col("in_a") + pl.col("in_b")
        expected = expected_both / (union - expected_both)
        observed = pl.col("both") / (union - pl.col("both"))
        lifts.append(n.filter((pl.col("common") > 0) & (union > 0)).select(
            "rank", lift=pl.when(expected < 1).then((observed - expected) / (1 - expected))))
    if not lifts:
        return pl.DataFrame(schema={"rank": pl.Int32, "place_lift": pl.Float64})
    return pl.concat(lifts).group_by("rank").agg(place_lift=pl.col("lift").mean())


def _microbatch_lift(ops: pl.DataFrame) -> pl.DataFrame:
    """Per rank: of the other ops of a slowed op's microbatch (same iteration, microbatch,
    chunk and op name), the share slowed too, averaged over its slowed ops, as a lift over its
    iteration's share of slowed ops: (c - b) / (1 - b)."""
    g = ["rank", "iteration", "microbatch", "chunk", "name"]
    ops = ops.with_columns(s=pl.col("slow").cast(pl.Float64)).with_columns(
        group_slow=pl.col("s").sum().over(g), group_n=pl.len().over(g),
        base=pl.col("s").mean().over("rank", "iteration"))
    slowed = ops.filter(pl.col("slow") & (pl.col("group_n") >= 2) & (pl.col("base") < 1))
    return slowed.group_by("rank").agg(microbatch_lift=(
        ((pl.col("group_slow") - 1) / (pl.col("group_n") - 1) - pl.col("base")) / (1 - pl.col("base"))).mean())


_SCHEMA = {"rank": pl.Int32, "sum_ratio": pl.Float64, "lasting": pl.Float64, "excess_ns": pl.Float64,
           "iterations": pl.List(pl.Int64), "slow_ops": pl.Float64, "traced": pl.UInt32,
           "raw_ratio": pl.Float64, "raw_lasting": pl.Float64, "raw_excess_ns": pl.Float64,
           "raw_iterations": pl.List(pl.Int64),
           "place_lift": pl.Float64, "microbatch_lift": pl.Float64, "flagged": pl.Boolean}


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=_SCHEMA)
