"""Work sized by an all_to_all exchange: a rank slower only on the ops between its all_to_all
calls computes on the tokens routed to it, which no trace without shapes can weigh.

An all_to_all is the one collective whose output differs in size from rank to rank by design:
a mixture of experts' dispatch sends each token to the rank of the expert its router chose, so
the ops between a rank's dispatch and the exchange that returns the results run on as many
tokens as it was sent. A router that favours one rank's experts gives that rank more of the same
ops' work in every step, each call larger, none more often: an imbalance of the data, not a
slower GPU. Without recorded shapes its calls are paired with its peers' by their order and
read as the same work, slower (4 gloo processes on 2 cores, a user's expert parallelism by hand
over ``all_to_all_single``, the router's logits of rank 0's experts +1.5: its ops between the
exchanges 4.56x its peers', the rest 0.85x; "slow compute 0", 4.36x).

A slower GPU is slower on everything it computes, outside the exchanges as well: the embedding,
the first layer's attention and router before the iteration's first all_to_all, their backward
and the optimizer after its last. So a rank whose ops between its first and last all_to_all of
an iteration are slower than its peers' by the threshold, while its ops outside them are within
half of it, or slower by a small part of that (cores shared by more processes stretch any
rank's ops), computed on more tokens (``gates``' gate 9 and ``stage2_alone``; not where the
calls it makes beyond its peers' cost it the threshold's share of its compute: extra calls are work
added whatever the routing).
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect._stats import others_median
from mapp.analysis.detect.added_work import added_cost_ns
from mapp.analysis.detect.same_work import self_times

__all__ = ["UNROUTED_AT_MOST", "UNROUTED_PART", "routed_split", "sized_by_routing"]

UNROUTED_PART = 0.1
"""Share of its peers' compute that must lie outside their all_to_all exchanges for a rank's pace
there to speak for its GPU (its own share may be less: the tokens routed to it swell the rest;
a router's favourite on 2 shared cores: 9%, its peers' 45%)."""

UNROUTED_AT_MOST = 0.25
"""How much slower a rank's ops outside its exchanges may be, as a share of how much slower its
ops between them are, for its slowness to lie between them: a slower GPU is slower alike on
both, while on cores shared by more processes the outside ops of any rank stretch by chance (a
router's favourite, 4 processes on 2 cores: 4.79x between its exchanges, 1.21x outside, its
peers 0.81-1.17x outside)."""


def routed_split(events: pl.DataFrame, coords: pl.DataFrame, collectives: pl.DataFrame) -> pl.DataFrame | None:
    """Per rank that calls all_to_all: ``routed_ratio``, its compute (self time) between its
    first and last all_to_all of an iteration against its peers' (the median of the other ranks
    of its pipeline stage, ``coords``' ``pp``), per iteration at the median; ``unrouted_ratio``
    the same for the rest of its compute; ``unrouted_share``, that rest's share of its peers'
    compute.
    None where no rank calls all_to_all, or fewer than two of a stage do, or no all_to_all was
    matched with every member of its group traced (``collectives``: ``matching``'s): only there
    are the compared ranks known to exchange their tokens with each other. (HTA's public
    ``trace_filter`` traces hold 2 of a 128-rank job's ranks, a sample of their events: each
    reads slower than the other on ops of its own, and neither is named.)"""
    if collectives.is_empty() or collectives.filter((pl.col("op") == "all_to_all") & pl.col("complete")).is_empty():
        return None
    a2a = events.filter((pl.col("cat") == "collective") & (pl.col("name") == "all_to_all")
                        & pl.col("iteration").is_not_null())
    if a2a.is_empty():
        return None
    window = a2a.group_by("rank", "iteration").agg(t0=pl.col("ts_ns").min(),
                                                   t1=(pl.col("ts_ns") + pl.col("dur_ns")).max())
    ops = self_times(events.filter(pl.col("iteration").is_not_null()))
    if ops.is_empty():
        return None
    inside = (pl.col("ts_ns") >= pl.col("t0")) & (pl.col("ts_ns") < pl.col("t1"))
    per = (ops.join(window, on=["rank", "iteration"]).group_by("rank", "iteration")
           .agg(routed=pl.col("self_ns").filter(inside).sum(), outside=pl.col("self_ns").filter(~inside).sum())
           .group_by("rank").agg(pl.col("routed", "outside").median()))
    stage = coords.select("rank", pp=pl.col("pp").fill_null(0)) if "pp" in coords.columns else \
        coords.select("rank", pp=pl.lit(0))
    per = (per.join(stage, on="rank", how="left").with_columns(pl.col("pp").fill_null(0))
           .filter(pl.len().over("pp") >= 2).sort("pp", "rank"))
    if per.is_empty():
        return None
    gid = per["pp"].to_numpy()
    per = per.with_columns(peer_routed=pl.Series(others_median(gid, per["routed"].to_numpy().astype(float))),
                           peer_unrouted=pl.Series(others_median(gid, per["outside"].to_numpy().astype(float))))
    per = per.filter((pl.col("peer_routed") > 0) & (pl.col("peer_unrouted") > 0)
                     & (pl.col("routed") + pl.col("outside") > 0))
    if per.is_empty():
        return None
    return per.select("rank", routed_ratio=pl.col("routed") / pl.col("peer_routed"),
                      unrouted_ratio=pl.col("outside") / pl.col("peer_unrouted"),
                      unrouted_share=pl.col("peer_unrouted") / (pl.col("peer_routed") + pl.col("peer_unrouted")))


def sized_by_routing(row: dict, threshold: float) -> bool:
    """Whether a rank's slowness lies in the ops between its all_to_all exchanges: those slower
    than its peers' by ``threshold``, the rest (a real share of its peers' compute) within half
    of it or slower by under a quarter as much as the routed ones (``UNROUTED_AT_MOST``), and the
    calls it makes beyond its peers' (``added_work``) not costing it the threshold's share of its
    compute themselves: extra calls are work added, however the tokens fell. (A favoured rank
    makes a few more calls of little ops, its experts never short of tokens: megatron-core's
    dispatcher, 56 more a step, 0.03 ms; with 2x its experts' matmuls again, 294 more, 259 ms.)"""
    routed, unrouted = row.get("routed_ratio"), row.get("unrouted_ratio")
    if routed is None or unrouted is None or not routed >= 1 + threshold:
        return False
    if (added := added_cost_ns(row)) > 0 and added >= threshold * (row.get("busy_ns") or 0.0):
        return False
    near = unrouted < 1 + threshold / 2 or unrouted - 1 <= UNROUTED_AT_MOST * (routed - 1)
    return near and (row.get("unrouted_share") or 0.0) >= UNROUTED_PART
