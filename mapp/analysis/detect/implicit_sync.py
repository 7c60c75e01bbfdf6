"""Synchronisation the trace does not record, inferred from ranges whose ends meet.

A job whose communication no trace holds (a parameter server over ``torch.distributed.rpc``:
the profiler leaves the RPC agent's threads out) still synchronises: each trainer pushes its
gradients and waits, inside a range of its own (``push_grads``), until the server has them all
and replies. Stage 2 has no collective to judge, and every rank's idle time is alike: a trainer
that slept before its step waits less in that range by as much as it slept.

Such a range shows itself: its members enter it at different times and leave it together.
Over a parameter server's trainers (4 processes on 2 cores), one sleeping 40 ms before each
step, the starts of ``push_grads`` spread 75 ms an iteration (median), the ends 20 ms; healthy,
17 and 22 ms. A range whose ends spread less than half its starts (``MEET``), one a rank an
iteration on every rank that has it, stands for a collective: its instances go to stage 2 (who
entered last, who waited) and its time is waiting, not idle time (``as_waits``).

Only where the trace records no communication at all: where it does, stage 2 has the real thing.
"""

from __future__ import annotations

from types import SimpleNamespace

import polars as pl

__all__ = ["MEET", "SYNC_GROUP", "implicit_syncs", "as_waits", "as_matching", "inferred_at"]

SYNC_GROUP = "sync:"
"""The group label of an inferred synchronisation's instances, before the range's name: stage
2's per-group shares (``share_last_sync:push_grads``) say what a rank was last at."""

MEET = 0.5
"""A range's ends, spread across its ranks (median over iterations), under this share of its
starts' spread mark it as a synchronisation."""

LEAST_SPREAD_NS = 1_000_000
"""Starts spread less than this (1 ms, the median) say nothing of who waited."""

LEAST_ITERATIONS = 3


def inferred_at(keys) -> list[str]:
    """The ranges stage 2 judged as inferred synchronisations, from the names of its per-group
    shares (``LatenessEvidence.ranks``' columns, or a suspect's ``lateness`` evidence keys)."""
    prefix = "share_last_" + SYNC_GROUP
    return [k.removeprefix(prefix) for k in keys if k.startswith(prefix)]


def implicit_syncs(events: pl.DataFrame) -> pl.DataFrame | None:
    """The instances of the ranges inferred as synchronisation: ``name``, ``rank``,
    ``iteration``, ``ts_ns``, ``dur_ns``; None where the trace records communication, or no range
    qualifies (see the module doc)."""
    if events.filter(pl.col("cat").is_in(["collective", "p2p"])).height:
        return None
    spans = events.filter((pl.col("cat") == "other") & ~pl.col("lane").str.starts_with("stream:")
                          & pl.col("iteration").is_not_null())
    if spans.is_empty():
        return None
    once = (spans.group_by("name", "rank", "iteration").agg(pl.len().alias("n"), pl.col("ts_ns").first(),
                                                            pl.col("dur_ns").first())
            .filter(pl.col("n") == 1).drop("n"))
    # the ranks that have the range, each once in every iteration where it appears
    ranks = once.group_by("name").agg(pl.col("rank").n_unique().alias("ranks"))
    per = once.join(ranks, on="name").group_by("name", "iteration").agg(
        members=pl.len(), ranks=pl.col("ranks").first(),
        starts=pl.col("ts_ns").max() - pl.col("ts_ns").min(),
        ends=(pl.col("ts_ns") + pl.col("dur_ns")).max() - (pl.col("ts_ns") + pl.col("dur_ns")).min(),
    ).filter((pl.col("members") == pl.col("ranks")) & (pl.col("ranks") >= 2))
    meets = per.group_by("name").agg(iterations=pl.len(), starts=pl.col("starts").median(),
                                     ends=pl.col("ends").median()).filter(
        (pl.col("iterations") >= LEAST_ITERATIONS) & (pl.col("starts") >= LEAST_SPREAD_NS)
        & (pl.col("ends") < MEET * pl.col("starts")))
    if meets.is_empty():
        return None
    kept = per.join(meets.select("name"), on="name").select("name", "iteration")
    return once.join(kept, on=["name", "iteration"]).select("name", "rank", "iteration", "ts_ns", "dur_ns").sort(
        "name", "iteration", "rank")


def as_waits(events: pl.DataFrame, syncs: pl.DataFrame) -> pl.DataFrame:
    """``events`` with the inferred synchronisation's spans as collectives: time in them is
    waiting for the others (``idle.idle_gaps`` counts it so), not idle."""
    marks = syncs.select("rank", "name", "ts_ns", _sync=pl.lit(True))
    return (events.join(marks, on=["rank", "name", "ts_ns"], how="left", maintain_order="left")
            .with_columns(cat=pl.when(pl.col("_sync")).then(pl.lit("collective")).otherwise(pl.col("cat")))
            .drop("_sync"))


def as_matching(syncs: pl.DataFrame) -> SimpleNamespace:
    """The inferred instances as stage 2's input (``lateness.collective_lateness``): one
    instance per range and iteration, its members' arrivals their entries. The clocks are taken
    as they are: ends that meet across ranks say they agree to within that spread."""
    inst = syncs.select("name", "iteration").unique().sort("name", "iteration").with_row_index("instance_id")
    members = syncs.join(inst, on=["name", "iteration"]).select(
        "instance_id", "rank", op=pl.col("name"), start_aligned_ns=pl.col("ts_ns"))
    collectives = members.group_by("instance_id").agg(
        n_members=pl.len(), group_ranks=pl.col("rank").sort()).join(
        inst, on="instance_id").select(
        "instance_id", "iteration", "n_members", "group_ranks", group=pl.lit(SYNC_GROUP) + pl.col("name"),
        complete=pl.lit(True), launch_only=pl.lit(False))
    return SimpleNamespace(aligned=True, collectives=collectives, members=members)
