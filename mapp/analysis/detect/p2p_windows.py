"""Stage 3's p2p links whose messages are posted asynchronously, timed by their windows.

A gloo ``isend``/``irecv`` records one span a side, from the post to the caller's wait on it:
neither end is the message's delivery (``bandwidth._p2p`` leaves such pairs out), and without
recorded shapes no size either (``traffic.added_traffic`` cannot count its bytes). What the two
spans still bound is when the message moved: not before both sides had posted, and done by the
time the first of them saw it done. That *window*, ``min(ends) - max(starts)``, is no transfer
time (an end that waits on something else first stretches it), but a link whose messages take
longer keeps every window of its own open longer, whatever the ends do around them, where a late
end only delays when a window opens.

Compared with the like links of the same program (every link whose pairs are so posted, none of
them sized), a link is slow when its typical window over the run took ``WINDOW_RATIO`` x the other
links' and more than twice theirs in nearly every step (``CONSISTENT``). Measured on a user's
halo-exchange CG solver, 4 gloo processes on 2 shared cores, recorded without shapes: the windows
of links 0-1, 1-2 and 2-3 of a healthy run 0.19, 0.50 and 0.24 ms (the widest 2.4x the others');
with every message from rank 1 to rank 2 padded to 4096x its rows (8 MB), link 1-2's 6.0 ms,
8.7x the others' 0.52 and 0.85 ms. (A side's span starts at its ``c10d`` call, the post:
``ingest.kineto``.)

A link's typical window says little where most of its messages are not the slow ones: one
direction padded, the other not, each payload after a small header. So each direction is also
read on its own, by how long a step any of its windows was open (their union), against the other
directions' (``DIRECTION_RATIO``): the messages from one end to the other in flight far longer a
step, holding a real part of it.

Ends are compared on each rank's own clock, which the processes of one machine share (as
``ingest._gloo_groups`` pairs calls by their ends): the aligned clock, fitted to collectives,
moved one rank by up to 1.3 ms against another there, more than a healthy window.
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.findings import LinkFinding
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["DIRECTION_RATIO", "HELD_COST", "HELD_RATIO", "WINDOWED", "WINDOW_COST", "WINDOW_RATIO", "window_links"]

WINDOWED = "message windows"
"""An observation's ``compared`` where its link was timed by its messages' windows."""

WINDOW_RATIO = 6.0
"""A link whose typical message window over the run took this many times its like links' is slow.
Over the users' jobs so timed (halo exchange, wavefront, sequence-parallel scan, zero-bubble
pipeline; 4 gloo processes on 2 shared cores), no link of a healthy, imbalanced or slowed-rank
job above 4.1x (a healthy zero-bubble pipeline, its stages waiting on each other's sends: 4.0
was its false "slow link"); padded links 8.2x (a scan's carries), 8.4-9.5x (the halo) and 357x
(the wavefront); one padded scan link 5.2x, missed."""

UNPAIRED = 0.1
"""Where more than this share of the messages were received before they were sent, their sends
and receives were paired wrongly (peers found by when calls end, which a send waited on later
does not keep: a sequence-parallel scan's carries, 42-46% so; a halo exchange, paired right,
4-5% at its steps' edges), and no link is timed by its windows."""

STEP_RATIO = 2.0
"""...and more than this many times theirs in nearly every step (``CONSISTENT``)."""

WINDOW_COST = 0.05
"""...and open beyond theirs for at least this share of the job's iteration (the median step's
excess of the link's windows over its like links'): a link the job waits on holds a real part of
its step. Padded links so timed on 4 gloo processes (a halo exchange, a wavefront, a scan, a
GPipe PP2 x DP2, a DSGD ring, an evolution-strategies ring) held 25-47% of the iteration; a DSGD
ring of blocking sends ordered by rank parity, one rank computing 2.5x, read 8.5x on link 0-3 by
its windows, 10 ms of a 1.23 s step (0.8%), its neighbours' sends waiting on its receives."""


HELD_RATIO = 4.5
"""A link whose windows took this many times its like links' (not ``WINDOW_RATIO``) is slow where
they also hold ``HELD_COST`` of the iteration beyond theirs, in nearly every step as above. A
healthy or slowed-rank job's windows stretched that far hold little of its step: of the users'
jobs so timed (22 batteries of user-written families and the committed corpora, 4 gloo
processes on 2 shared cores), those at 3x or more held at most 6.3% (a DSGD ring, one rank
computing 3x: 6.9x its like links'); a link held 20% or more only under 3.3x (a GPipe PP4, its
last stage sleeping 25 ms a step: 3.2x, 33%; a GPipe PP2 x DP2, one stage computing 4x: 2.8x,
30%). The padded links so timed held 27-47%, two under 6x: a tensor-parallel all-gather ring of
isend/irecv hops, one hop's messages padded 32x (5.8x, 34% of the step), and a sequence-parallel
scan's carries padded 16384x (5.2x, 34%), both "no suspect" before."""

DIRECTION_RATIO = 12.0
"""One direction of a link (its messages from one end to the other) whose messages were in flight
this many times as long a step as the other directions' (the union of its windows, ``_in_flight``),
more than ``STEP_RATIO`` x theirs in nearly every step and beyond theirs by ``HELD_COST`` of the
iteration, is slow, where the link's typical window is not: a pipeline whose every payload
follows a shape header, one direction's payloads padded, keeps three of its link's four kinds of
message short (a user's PP4 of variable lengths, gradients from rank 3 to rank 2 padded 1024x:
27x the other directions' a step, 41% of the step, "no suspect" before). Over the users' jobs so
timed (176 jobs of 32 batteries of user-written families timing three directions or more, 4 gloo
processes on 2 shared cores), the padded directions read 16-152x, holding 25-52% of the step;
of the healthy, imbalanced and slowed-rank
jobs' directions none above 10.3x beyond 8% of the step (a GPipe PP2 x DP2 of a heavier stage 1:
the activations to it 10.3x, 19%), but for those into a rank computing 4-4.5x (11-18x, 35-41%:
its messages wait for it to take them), which ``verdict.combine`` leaves to that rank."""

HELD_COST = 0.2
"""...the share of the iteration (as ``WINDOW_COST``) such a link's windows must hold."""


def _windows(p2p: pl.DataFrame) -> pl.DataFrame:
    """Per message of an unsized pair with an asynchronous side: ``link`` (its ends, sorted),
    ``src``, ``dst``, ``iteration``, ``w`` (its window, 0 where one side was done before the
    other posted: a message small enough to wait in a buffer) and the window's ``lo``/``hi`` edges."""
    p = p2p.filter((pl.col("src") != pl.col("dst")) & (pl.col("send_async") | pl.col("recv_async"))
                   & pl.col("bytes").is_null() & pl.col("iteration").is_not_null())
    # A receive that ended before its send was posted is no pair of the two: a few are calls
    # paired by order across a step's edge, left out; many say the calls' peers were guessed
    # wrong, and then no window is the message's (``UNPAIRED``)
    impossible = pl.col("recv_end_ns") < pl.col("send_start_ns")
    unpaired = not p.is_empty() and p.select(impossible.mean()).item() > UNPAIRED
    p = p.clear() if unpaired else p.filter(~impossible)
    lo = pl.max_horizontal("send_start_ns", "recv_start_ns")
    hi = pl.min_horizontal("send_end_ns", "recv_end_ns")
    return p.select(link=pl.concat_list(pl.min_horizontal("src", "dst"), pl.max_horizontal("src", "dst"))
                    .cast(pl.List(pl.Int32)), iteration="iteration", lo=lo, hi=pl.max_horizontal(lo, hi),
                    w=(hi - lo).clip(lower_bound=0), src="src", dst="dst")


def _in_flight(w: pl.DataFrame) -> pl.DataFrame:
    """Per link and iteration, ``busy``: how long any of its windows was open (their union)."""
    w = w.sort("link", "iteration", "lo")
    # a window opens a new run where it starts after every earlier one of its link and step ended
    prev = pl.col("hi").cum_max().shift(1).over("link", "iteration")
    w = w.with_columns(run=(pl.col("lo") > prev).fill_null(True).cast(pl.Int32).cum_sum().over("link", "iteration"))
    runs = w.group_by("link", "iteration", "run").agg(span=pl.col("hi").max() - pl.col("lo").min())
    return runs.group_by("link", "iteration").agg(busy=pl.col("span").sum())


def window_links(p2p: pl.DataFrame, iteration_ns: float | None = None) -> list[LinkFinding]:
    """Links slower than their like links by their messages' windows (module doc); [] where
    fewer than two links have such messages in most steps. ``iteration_ns``: the job's
    iteration, of which a slow link's windows must hold ``WINDOW_COST`` (not asked where None)."""
    w = _windows(p2p)
    if w.is_empty():
        return []
    per = w.group_by("link", "iteration").agg(w=pl.col("w").median(), n=pl.len())
    steps = per["iteration"].n_unique()
    per = per.filter(pl.len().over("link") >= CONSISTENT * steps)
    links = per["link"].unique().to_list()
    if len(links) < 2:
        return []
    busy = _in_flight(w)
    findings = []
    for link in links:
        mine = per.filter(pl.col("link") == link)
        others = per.filter(pl.col("link") != link)
        theirs = others.group_by("link").agg(w=pl.col("w").median())["w"].median()
        own = mine["w"].median()
        if not theirs or own is None or own < HELD_RATIO * theirs:
            continue
        by_step = mine.join(others.group_by("iteration").agg(other=pl.col("w").median()), on="iteration")
        raised = by_step.filter(pl.col("w") > STEP_RATIO * pl.col("other"))
        if len(by_step) == 0 or len(raised) < CONSISTENT * len(by_step):
            continue
        mine_busy = busy.filter(pl.col("link") == link)
        their_busy = busy.filter(pl.col("link") != link).group_by("iteration").agg(other=pl.col("busy").median())
        excess = mine_busy.join(their_busy, on="iteration").select((pl.col("busy") - pl.col("other")).clip(lower_bound=0)
                                                                   .median()).item() or 0.0
        if iteration_ns and excess < WINDOW_COST * iteration_ns:
            continue
        # (under ``WINDOW_RATIO`` only a link whose windows hold a large part of the step)
        if own < WINDOW_RATIO * theirs and not (iteration_ns and excess >= HELD_COST * iteration_ns):
            continue
        ratio = float(own) / float(theirs)
        findings.append(LinkFinding(
            kind="slow_link", ranks=tuple(link), slowdown=ratio, z=0.0, excess_ns=float(excess),
            observations=[{"ranks": list(link), "what": "p2p", "ratio": round(ratio, 3),
                           "iterations": sorted(int(i) for i in raised["iteration"].to_list()),
                           "compared": WINDOWED, "window_ms": round(float(own) / 1e6, 3),
                           "like_ms": round(float(theirs) / 1e6, 3)}],
        ))
    named = {f.ranks for f in findings}
    findings += [f for f in _slow_directions(w, iteration_ns) if f.ranks not in named]
    return sorted(findings, key=lambda f: -f.slowdown)


def _slow_directions(w: pl.DataFrame, iteration_ns: float | None) -> list[LinkFinding]:
    """Each direction of a link whose messages are in flight far longer a step than the other
    directions' (``DIRECTION_RATIO``, ``HELD_COST``), where three directions or more are timed."""
    if not iteration_ns:
        return []
    busy = _in_flight(w.with_columns(link=pl.concat_list("src", "dst").cast(pl.List(pl.Int32))))
    steps = busy["iteration"].n_unique()
    busy = busy.filter(pl.len().over("link") >= CONSISTENT * steps)
    directions = busy["link"].unique().to_list()
    if len(directions) < 3:
        return []
    findings = []
    for direction in directions:
        mine = busy.filter(pl.col("link") == direction)
        others = busy.filter(pl.col("link") != direction).group_by("iteration").agg(other=pl.col("busy").median())
        by_step = mine.join(others, on="iteration")
        theirs, own = others["other"].median(), mine["busy"].median()
        if not by_step.height or not theirs or own < DIRECTION_RATIO * theirs:
            continue
        raised = by_step.filter(pl.col("busy") > STEP_RATIO * pl.col("other"))
        excess = by_step.select((pl.col("busy") - pl.col("other")).clip(lower_bound=0).median()).item() or 0.0
        if len(raised) < CONSISTENT * by_step.height or excess < HELD_COST * iteration_ns:
            continue
        ratio = float(own) / float(theirs)
        findings.append(LinkFinding(
            kind="slow_link", ranks=tuple(sorted(direction)), slowdown=ratio, z=0.0, excess_ns=float(excess),
            observations=[{"ranks": sorted(direction), "what": "p2p", "direction": list(direction),
                           "ratio": round(ratio, 3), "compared": WINDOWED,
                           "iterations": sorted(int(i) for i in raised["iteration"].to_list()),
                           "in_flight_ms": round(float(own) / 1e6, 3), "like_ms": round(float(theirs) / 1e6, 3)}],
        ))
    return findings
