"""A rank no peer runs beside, judged by the waits it imposes: the one rank that sends the
messages every other rank receives.

A data-service rank builds every batch and ``isend``s it to the trainers, which ``recv`` it
before each step (``tests/corpus/user_data_service.py``). It runs a program of its own, so stage
1 has no peer to compare it with, and stage 2 sees the trainers' collectives only: gloo recorded
without input shapes names no peer for a send or receive, so nothing ties its sends to their
receives either. Its own slowness shows only in its receivers: they wait in their receives.

Healthy, the trainers of that job waited 1-3 ms of a 116-230 ms step in their receives; with the
service sleeping 50 or 75 ms before each batch, the trainer it served last waited 95 and 177 ms
a step, the others all-reducing with it after. The job loses what the receiver that waits most
waits (they synchronise among themselves), so the estimate is the step over the step less that
wait, the median over iterations.

What the sender did meanwhile says which kind: a sender idle for more of its steps than it
computed slept or stalled (a slow host); one that computed more was slow at its work.
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.findings import Suspect

__all__ = ["sole_sender", "sender_waits"]

_ASYNC = '"async":true'
"""An ``isend``/``irecv`` span runs from the post to the wait's end: not a wait of the caller's."""


def _blocking_p2p(p2p: pl.DataFrame) -> pl.DataFrame:
    return p2p.filter(~pl.col("args").fill_null("").str.contains(_ASYNC, literal=True))


def sender_waits(p2p: pl.DataFrame, alone: set[int]) -> tuple[int, pl.DataFrame] | None:
    """``(sender, waits)`` where one rank, without a peer (``alone``), sends every p2p message of
    the job and receives none, and every other rank that makes p2p calls only receives; ``waits``:
    per receiver and iteration, ``wait_ns`` in its blocking receives. None otherwise (a pipeline's
    stages both send and receive; a ring's every rank sends)."""
    if p2p.is_empty():
        return None
    lname = pl.col("name").str.to_lowercase()
    senders = set(p2p.filter(lname.str.contains("send"))["rank"].unique().to_list())
    receivers = set(p2p.filter(lname.str.contains("recv"))["rank"].unique().to_list())
    if len(senders) != 1 or senders & receivers or not receivers or not senders <= alone:
        return None
    sender = senders.pop()
    waits = (_blocking_p2p(p2p.filter(lname.str.contains("recv") & pl.col("iteration").is_not_null()))
             .group_by("rank", "iteration").agg(wait_ns=pl.col("dur_ns").sum()))
    return sender, waits


def _union_ns(spans: pl.DataFrame) -> int:
    """Total time the spans (``ts_ns``, ``end_ns``) cover, overlaps counted once."""
    if spans.is_empty():
        return 0
    s = spans.sort("ts_ns").with_columns(reach=pl.col("end_ns").cum_max().shift(1))
    s = s.with_columns(block=(pl.col("reach").is_null() | (pl.col("ts_ns") > pl.col("reach"))).cum_sum())
    blocks = s.group_by("block").agg(pl.col("ts_ns").min(), pl.col("end_ns").max())
    return int((blocks["end_ns"] - blocks["ts_ns"]).sum())


def _sender_kind(p2p: pl.DataFrame, events: pl.DataFrame, steps: pl.DataFrame, sender: int) -> tuple[str, float, float]:
    """(kind, compute share, idle share) of the sender's traced steps: compute is the union of its
    compute spans, idle what neither compute nor a blocking communication span covers."""
    own = steps.filter(pl.col("rank") == sender)
    span = int(own["dur_ns"].sum()) if len(own) else 0
    if span <= 0:
        return "slow_compute", 0.0, 0.0
    start, end = int(own["ts_ns"].min()), int((own["ts_ns"] + own["dur_ns"]).max())
    mine = events.filter((pl.col("rank") == sender) & ~pl.col("lane").str.starts_with("stream:")
                         & (pl.col("ts_ns") >= start) & (pl.col("ts_ns") < end)).with_columns(
        end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
    compute = _union_ns(mine.filter(pl.col("cat") == "compute").select("ts_ns", "end_ns"))
    # its communication, less the posts of its isends (spans to their waits' ends)
    comm = mine.filter((pl.col("cat") == "collective") | pl.col("name").str.starts_with("c10d::"))
    sent = _blocking_p2p(p2p.filter(pl.col("rank") == sender)).select(
        "ts_ns", end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
    busy = _union_ns(pl.concat([mine.filter(pl.col("cat") == "compute").select("ts_ns", "end_ns"),
                                comm.select("ts_ns", "end_ns"), sent]))
    idle = max(span - busy, 0)
    return ("slow_host" if idle > compute else "slow_compute"), compute / span, idle / span


def sole_sender(p2p: pl.DataFrame, events: pl.DataFrame, steps: pl.DataFrame, alone: set[int],
                iteration_ns: float | None) -> Suspect | None:
    """The job's sole sender (``sender_waits``) as a suspect, its slowdown the step over the step
    less the most any receiver waited in it (median over iterations), its kind from what it did
    (``_sender_kind``); None where there is none, or its receivers did not wait. The caller
    holds it to the threshold. ``p2p``: the p2p spans (``rank``, ``name``, ``iteration``,
    ``ts_ns``, ``dur_ns``, ``args``); ``events``: every rank's spans (``rank``, ``name``, ``cat``, ``lane``,
    ``ts_ns``, ``dur_ns``); ``steps``: the step spans (``rank``, ``ts_ns``, ``dur_ns``)."""
    found = sender_waits(p2p, alone)
    if found is None or not iteration_ns:
        return None
    sender, waits = found
    if waits.is_empty():
        return None
    worst = waits.group_by("iteration").agg(pl.col("wait_ns").max()).sort("iteration")
    wait = float(worst["wait_ns"].median())
    if wait <= 0 or wait >= iteration_ns:
        return None
    kind, compute, idle = _sender_kind(p2p, events, steps, sender)
    receivers = sorted(waits["rank"].unique().to_list())
    return Suspect(
        rank=sender, kind=kind, confidence=min(0.95, 0.5 + wait / iteration_ns), slowdown=iteration_ns / (iteration_ns - wait),
        iterations=[int(i) for i in worst["iteration"].to_list()], excess_ns=wait, iteration_ns=iteration_ns,
        evidence={"sole_sender": {"receivers": receivers, "wait_ms_per_iteration": round(wait / 1e6, 3),
                                  "compute_share": round(compute, 3), "idle_share": round(idle, 3)},
                  "note": (f"the only rank that sends to the others, and a program of its own (no peer to compare "
                           f"it with): ranks {', '.join(map(str, receivers))} waited in their receives from it up to "
                           f"{wait / 1e6:.2f} ms/it (median over iterations); meanwhile it "
                           + (f"was idle {idle:.0%} of its steps (computing {compute:.0%})" if kind == "slow_host"
                              else f"computed {compute:.0%} of its steps (idle {idle:.0%})"))},
    )
