"""Sync anchors: pairs of raw timestamps on two ranks that the true clocks relate.

- *equal* anchors: the members of a collective leave it together, so each member's end equals
  the end on the instance's lowest-ranked member; a blocking p2p message completes on both
  sides at once, so a send's end equals its receive's end (NCCL's semantics; weighted by
  ``p2p_weight`` because eager sends may end early, and robustly rejected where they do not
  hold).
- *after* anchors: a receive cannot end before its send starts.

An asynchronous side (``send_async``/``recv_async``: the span is only the call's post) breaks
the equality: an async send's end is its post, not the delivery (MegaDPP's sends, megatron's
overlapped p2p), so such a pair is never an equal anchor. The bound still holds while the
receive is blocking (its end is when the data was in hand), so the pair is an after anchor;
an async receive's end is its post, which may come before the send, so it bounds nothing.
A collective that a member only launched (``launch_only``: megatron-core's overlapped gradient
reduce-scatter and parameter all-gather) is no anchor either: each member leaves its launch at
once, whenever the others come.

Only complete instances (every member once, one op, one size) of a group whose members are
known (``group_ranks``; a call that names neither group nor members is matched across every rank
that logged it, which says nothing about who waited for whom) and size-consistent pairs count.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

__all__ = ["Anchors", "anchors_from"]

KIND_COLLECTIVE = 0
KIND_P2P = 1


@dataclass(slots=True)
class Anchors:
    """``equal``: i, j (ranks), u_ns (raw, on i), v_ns (raw, on j), kind, weight: aligned u = aligned v.
    ``after``: i, j, u_ns, v_ns: aligned v (on j) >= aligned u (on i)."""

    equal: pl.DataFrame
    after: pl.DataFrame


def anchors_from(matching, *, p2p_weight: float = 1.0) -> Anchors:
    """Anchors from a :class:`~mapp.analysis.graph.Matching`."""
    complete = matching.collectives.filter(
        pl.col("complete") & (pl.col("n_members") > 1) & pl.col("group_ranks").is_not_null()
        & ~pl.col("launch_only")
    ).select("instance_id")
    members = (
        matching.members.join(complete, on="instance_id", how="semi")
        .select("instance_id", "rank", "end_ns")
        .sort(["instance_id", "rank"])
        .with_columns(
            hub=pl.col("rank").first().over("instance_id"),
            hub_end=pl.col("end_ns").first().over("instance_id"),
        )
    )
    coll = members.filter(pl.col("rank") != pl.col("hub")).select(
        pl.col("hub").cast(pl.Int32).alias("i"), pl.col("rank").cast(pl.Int32).alias("j"),
        pl.col("hub_end").alias("u_ns"), pl.col("end_ns").alias("v_ns"),
        pl.lit(KIND_COLLECTIVE, pl.Int8).alias("kind"), pl.lit(1.0).alias("weight"),
    )
    pairs = matching.p2p.filter(pl.col("bytes_match") & (pl.col("src") != pl.col("dst")))
    p2p = pairs.filter(~pl.col("send_async") & ~pl.col("recv_async")).select(
        pl.col("src").cast(pl.Int32).alias("i"), pl.col("dst").cast(pl.Int32).alias("j"),
        pl.col("send_end_ns").alias("u_ns"), pl.col("recv_end_ns").alias("v_ns"),
        pl.lit(KIND_P2P, pl.Int8).alias("kind"), pl.lit(float(p2p_weight)).alias("weight"),
    )
    equal = pl.concat([coll, p2p]) if p2p_weight > 0 else coll
    after = pairs.filter(~pl.col("recv_async")).select(
        pl.col("src").cast(pl.Int32).alias("i"), pl.col("dst").cast(pl.Int32).alias("j"),
        pl.col("send_start_ns").alias("u_ns"), pl.col("recv_end_ns").alias("v_ns"),
    )
    return Anchors(equal, after)
