"""Loops the data runs a different number of times on each rank, read from the ranges around them.

A profiler trace holds the user's ranges (``record_function``) beside the ops. Where a loop's
body is such a range (``block_0``, ``block_1``, ... around each layer; a range per decode step),
the ranges say how many times each rank ran the loop in an iteration. Ranks of one program can
run it a different number of times by design: LayerDrop skips each layer at random on each rank,
a generation loop stops at each request's length. Their calls of the ops inside then differ in
every iteration, one rank above its peers in one step and below in the next, and work added to
one rank's loop body (a slower device's extra matmuls) is lost among them (a user's masked LM
with LayerDrop under DDP, 4 gloo processes on 2 cores, 1.6x the layers' matmuls on rank 3: 8
``aten::linear`` calls a layer against its peers' 4, 17-49 a step against 13-25 that changed
with the layers each rank kept; "no suspect", the counts read as the program's uneven split).

Counted per trip of the loop, the work is the same work again: each call inside a loop's range
is weighed by how many times the program's ranks typically ran that loop (their median) over
how many times it did (``with_trips``), and ``same_work`` counts the calls a rank adds
(``added_work``) so weighed. Its compute and its program's uneven split stay read from the calls
made: weighed there too, a rank of LayerDrop handed twice the batch read "slow compute" 1.64x,
where the blocks' uneven counts are what it is judged by (its input floor needs calls that every
rank makes as often, and the blocks' are not: pairing calls by their place in a loop's range would
give it them).
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["LOOP_DIGITS", "loop_ranges", "with_trips"]

LOOP_DIGITS = r"\d+"
"""A loop's ranges are one family whatever their numbers (``block_0`` ... ``block_5``): the
family's name has its digits replaced by ``#``."""


def _user_ranges(timed: pl.DataFrame) -> pl.DataFrame:
    """The user's ranges on the profiler's CPU threads: ``other`` spans with no ``::`` in their
    name (a dispatcher's op or a library's span has one), with their ``family``."""
    return timed.filter((pl.col("cat") == "other") & ~pl.col("name").str.contains("::", literal=True)
                        & pl.col("lane").str.starts_with("cpu:")).with_columns(
        family=pl.col("name").str.replace_all(LOOP_DIGITS, "#"))


def loop_ranges(timed: pl.DataFrame, coords: pl.DataFrame) -> pl.DataFrame | None:
    """Per (``rank``, ``iteration``, ``family``) of a loop whose trips differ between the ranks of
    one program (``coords``' ``pp``) in some iteration, and that some rank runs more than once in
    an iteration: ``trips``, how many ranges of the family the rank ran there, and ``scale``, the
    median trips of the program's ranks that ran it there over its own. None where there is no
    such loop."""
    ranges = _user_ranges(timed).filter(pl.col("iteration").is_not_null())
    if ranges.is_empty():
        return None
    program = coords.select("rank", pp=pl.col("pp").fill_null(0))
    trips = ranges.group_by("rank", "iteration", "family").agg(trips=pl.len().cast(pl.Float64))
    ranks = timed.select("rank", "iteration").drop_nulls().unique().join(program, on="rank", how="left")
    # every rank of a program in every iteration, with 0 trips of a loop it never entered there
    grid = (ranks.join(trips.join(program, on="rank", how="left").select("pp", "family").unique(), on="pp")
            .join(trips, on=["rank", "iteration", "family"], how="left").with_columns(pl.col("trips").fill_null(0.0)))
    grid = grid.filter(pl.len().over("pp", "iteration", "family") >= 2)
    # a loop: some rank runs it more than once an iteration, the ranks' trips differ in some, and
    # every rank of the program runs it (a range around work one rank alone does, its extra
    # matmuls, is that work: megatron-core TP2 x DP2, 5x the layers' matmuls on rank 2 in a range
    # of their own, 0 trips on its peers, would have counted them away)
    loops = (grid.group_by("pp", "iteration", "family").agg(differ=pl.col("trips").max() > pl.col("trips").min(),
                                                           most=pl.col("trips").max())
             .group_by("pp", "family").agg(pl.col("differ").any(), most=pl.col("most").max())
             .filter(pl.col("differ") & (pl.col("most") >= 2)))
    everyone = (grid.group_by("pp", "family", "rank").agg(ran=(pl.col("trips") > 0).any())
                .group_by("pp", "family").agg(pl.col("ran").all()).filter(pl.col("ran")))
    loops = loops.join(everyone.select("pp", "family"), on=["pp", "family"])
    if loops.is_empty():
        return None
    grid = grid.join(loops.select("pp", "family"), on=["pp", "family"]).sort("pp", "iteration", "family", "rank")
    # Every rank's calls are counted at one number of trips, the program's median in that
    # iteration: each rank at its own peers' median would count ranks at different trips, so
    # that ranks whose loops run as often per trip read apart (a distributed Shampoo dealing its
    # blocks' inverse roots out unevenly, 10, 4, 8 and 4 ``eigh`` ranges a step: the ranks of
    # 4 counted at 8 trips, those of 10 and 8 at 4, and the ones that called least read as
    # adding work, "slow compute 1" and "3")
    ran = pl.when(pl.col("trips") > 0).then(pl.col("trips"))
    common = grid.with_columns(common=ran.median().over("pp", "iteration", "family"))["common"].to_numpy()
    own = grid["trips"].to_numpy()
    # (a step in which the rank or all its peers skipped the loop altogether: no trip to count by)
    scale = np.where((own > 0) & (common > 0), common / np.maximum(own, 1e-9), 1.0)
    return grid.with_columns(scale=pl.Series(scale)).select("rank", "iteration", "family", "trips", "scale")


def with_trips(ops: pl.DataFrame, timed: pl.DataFrame, coords: pl.DataFrame) -> pl.DataFrame:
    """``ops`` (``self_times``' rows) with ``trips``: 1 for a call outside any loop of
    ``loop_ranges``, and for a call inside one of its ranges (on the same thread) the loop's
    ``scale`` for its rank and iteration, so that its calls summed count at its peers' trips.
    Unchanged (all 1) where no loop's trips differ."""
    loops = loop_ranges(timed, coords)
    if loops is None:
        return ops.with_columns(trips=pl.lit(1.0))
    ranges = (_user_ranges(timed).join(loops.select("rank", "iteration", "family", "scale"),
                                       on=["rank", "iteration", "family"])
              .select("rank", "lane", r_start=pl.col("ts_ns"), r_end=pl.col("ts_ns") + pl.col("dur_ns"),
                      r_scale=pl.col("scale")).sort("r_start"))
    end = pl.col("end_ns") if "end_ns" in ops.columns else pl.col("ts_ns") + pl.col("dur_ns")
    out = (ops.with_row_index("_row").sort("ts_ns")
           .join_asof(ranges, left_on="ts_ns", right_on="r_start", by=["rank", "lane"], strategy="backward",
                      check_sortedness=False)
           .with_columns(trips=pl.when(pl.col("r_end").is_not_null() & (end <= pl.col("r_end")))
                         .then(pl.col("r_scale")).otherwise(1.0))
           .sort("_row").drop("_row", "r_start", "r_end", "r_scale"))
    return out
