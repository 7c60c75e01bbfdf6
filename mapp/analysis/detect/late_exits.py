"""Stage 3's links inside a collective, found by the two members that leave it last.

In an all-to-all every member trades with every other directly, and leaves once its own trades
are done: the ends of a slow link leave together, long after the rest, who had nothing to wait
for once the last of them came in. No other member's slowness does that. A member that comes in
late holds the others inside until it arrives, and then all leave about together; a ring (a
gloo all-reduce) passes every member's data through every link, so a slow one keeps them all.

So a link is slow when, in nearly every step (``CONSISTENT``), some collective of the step left
the same two members inside ``EXIT_RATIO`` x longer than the rest took from the last arrival to
their own leaving. Measured on a user's sample sort (4 gloo processes on 2 shared cores, an
uneven ``all_to_all_single``, recorded without shapes): with every chunk from rank 3 to rank 1
padded to 512x its rows, ranks 1 and 3 left 160-270 ms after ranks 0 and 2 in every step (8 of
8), who had taken 1-15 ms since the last arrival. In its 15 other jobs (healthy, slowed ranks,
sleeps, a busy thread, imbalance) no pair left last so in more than 1 of 8 steps; in a BFS's 15
jobs without a link fault, in at most 4 of 8 (its padded link, weak, 4 of 8 too: not named).

Ends are compared on each rank's own clock, which the processes of one machine share (as
``p2p_windows`` does): only run there.
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.findings import LinkFinding
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["DIRECT", "EXIT_RATIO", "LEFT_LAST", "late_pairs"]

LEFT_LAST = "left last"
"""An observation's ``compared`` where its link was found by the members that left last."""

EXIT_RATIO = 4.0
"""The last two members left this many times the rest's own time after the rest, for the step to
count for them (a padded all-to-all link: 19x at the typical step). One step's small collective
can stray so by chance; the same pair in nearly every step does not (module doc)."""

DIRECT = ("all_to_all",)
"""Collectives whose members trade with each other directly. Not a ring's or a tree's (gloo's
all-reduce, all-gather, broadcast): their members leave in an order the ring or tree sets, the
same in every step (a user's healthy ring all-reduce job: ranks 1 and 2 left its one logging
all-reduce of a step last, 6-30x the rest's own time after them, in 3 of its 4 steps).
(``ingest.kineto`` names every all-to-all variant so.)"""

MIN_MEMBERS = 4
"""A group of three has one other member only, whose leaving alone says nothing of the rest."""


def _exits(matching) -> pl.DataFrame:
    """Per complete all-to-all (``DIRECT``) of ``MIN_MEMBERS`` or more that met: ``instance_id``,
    ``op``, ``iteration``, ``pair`` (the two members that left last, sorted), ``gap`` (how long
    after the rest's last member the pair's first left) and ``own`` (the rest's time from the last
    arrival to the last of them leaving)."""
    inst = matching.collectives.filter(pl.col("complete") & (pl.col("n_members") >= MIN_MEMBERS)
                                       & pl.col("op").is_in(DIRECT) & pl.col("iteration").is_not_null())
    if inst.is_empty():
        return pl.DataFrame()
    m = matching.members.join(inst.select("instance_id"), on="instance_id", how="semi")
    per = m.group_by("instance_id").agg(
        ends=pl.col("end_ns").sort(descending=True),
        order=pl.col("rank").sort_by("end_ns", descending=True),
        last_in=pl.col("start_ns").max(),
    )
    # a collective that met: no member left before the last came in (a broadcast's root may, and
    # calls matched across a step's edge do)
    per = per.filter(pl.col("ends").list.last() >= pl.col("last_in"))
    per = per.select(
        "instance_id",
        pair=pl.concat_list(pl.col("order").list.get(0), pl.col("order").list.get(1)).list.sort().cast(pl.List(pl.Int32)),
        gap=pl.col("ends").list.get(1) - pl.col("ends").list.get(2),
        own=(pl.col("ends").list.get(2) - pl.col("last_in")).clip(lower_bound=0),
    )
    return inst.select("instance_id", "op", "iteration").join(per, on="instance_id")


def late_pairs(matching) -> list[LinkFinding]:
    """Links whose two ends left their collectives last, far after the rest, in nearly every
    step (module doc); [] where none did."""
    x = _exits(matching)
    if x.is_empty():
        return []
    steps = x["iteration"].n_unique()
    late = x.filter((pl.col("gap") > EXIT_RATIO * pl.col("own")) & (pl.col("own") > 0))
    # one pair a step: the step's widest gap (a step's small collectives leave by other orders)
    widest = late.sort("gap", descending=True).group_by("iteration").first()
    findings = []
    for (pair,), rows in widest.group_by("pair"):
        if len(rows) < CONSISTENT * steps:
            continue
        gap, own = rows["gap"].median(), rows["own"].median()
        ratio = float(gap) / max(float(own), 1.0)
        # what the link cost a step: every gap of its ends that step (SUMMA broadcasts a panel
        # over the slow link several times a step)
        excess = (late.filter(pl.col("pair") == pair).group_by("iteration").agg(pl.col("gap").sum())["gap"].median())
        findings.append(LinkFinding(
            kind="slow_link", ranks=tuple(int(r) for r in pair), slowdown=ratio, z=0.0, excess_ns=float(excess),
            observations=[{"ranks": [int(r) for r in pair], "what": rows["op"][0], "ratio": round(ratio, 3),
                           "iterations": sorted(int(i) for i in rows["iteration"].to_list()),
                           "compared": LEFT_LAST, "gap_ms": round(float(gap) / 1e6, 3),
                           "rest_ms": round(float(own) / 1e6, 3)}],
        ))
    return sorted(findings, key=lambda f: -f.slowdown)
