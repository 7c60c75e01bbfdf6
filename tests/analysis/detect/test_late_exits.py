"""Stage 3's links inside a collective, found by the two members that leave it last
(``late_exits.late_pairs``): an all-to-all's slow link keeps its two ends in, the rest leave."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.late_exits import LEFT_LAST, late_pairs
from mapp.analysis.graph._load import P2P_COLUMNS
from mapp.analysis.graph.matching import match_events

MS = 1_000_000


def _job(*, slow: tuple[int, int] | None = None, slow_steps: range | None = None, late_rank: int | None = None,
         early_leaver: int | None = None, ranks: int = 4, steps: int = 4):
    """``ranks`` processes calling one all_to_all a step, arriving 0-3 ms apart and leaving 2 ms
    after the last arrival; ``slow``'s two ranks leave 40 ms later (in ``slow_steps``, default
    all); ``late_rank`` arrives 30 ms after the rest; ``early_leaver`` leaves before the last
    member arrives (what no member of a collective that met can do)."""
    rows = []
    for it in range(steps):
        t0 = it * 200 * MS
        starts = {r: t0 + (r % 3) * MS + (30 * MS if r == late_rank else 0) for r in range(ranks)}
        last_in = max(starts.values())
        for r in range(ranks):
            end = last_in + 2 * MS + r * 100_000
            if slow and r in slow and (slow_steps is None or it in slow_steps):
                end += 40 * MS
            if r == early_leaver:
                end = last_in - MS
            rows.append({"rank": r, "name": "all_to_all", "lane": 0, "ts_ns": starts[r], "dur_ns": end - starts[r],
                         "iteration": it, "group": None, "group_ranks": None, "seq": it, "bytes": None,
                         "async": False})
    calls = pl.DataFrame(rows, schema_overrides={"rank": pl.Int32, "iteration": pl.Int32, "bytes": pl.Int64,
                                                 "group": pl.Utf8, "group_ranks": pl.List(pl.Int32),
                                                 "seq": pl.Int64, "lane": pl.Int32})
    no_p2p = pl.DataFrame(schema={c: pl.Int64 for c in P2P_COLUMNS})
    return match_events(calls, no_p2p, list(range(ranks)))


def test_the_two_members_that_leave_an_all_to_all_last_in_every_step_are_a_slow_link():
    found = late_pairs(_job(slow=(1, 3)))
    assert [(f.kind, f.ranks) for f in found] == [("slow_link", (1, 3))]
    o = found[0].observations[0]
    assert o["compared"] == LEFT_LAST and o["iterations"] == [0, 1, 2, 3] and o["what"] == "all_to_all"
    # rank 1 left 40.1 ms after the last arrival's 2 ms + 0.2 ms by rank 2: a gap of 39.9 ms
    assert 39.8 < o["gap_ms"] < 40.0 and 2.1 < o["rest_ms"] < 2.3
    assert 17 < found[0].slowdown < 19
    assert 39.8e6 < found[0].excess_ns < 40.0e6


def test_healthy_or_a_late_arrival_is_no_slow_link():
    assert late_pairs(_job()) == []
    # a rank that arrives late keeps the others in until it comes; then all leave together
    assert late_pairs(_job(late_rank=2)) == []


def test_a_pair_that_left_last_in_one_step_only_is_no_slow_link():
    assert late_pairs(_job(slow=(0, 2), slow_steps=range(1, 2))) == []


def test_collectives_that_did_not_meet_or_of_three_members_say_nothing():
    # a member left before the last came in: no rendezvous (a broadcast's root; calls matched
    # across a step's edge), so who left last says nothing of a link
    assert late_pairs(_job(slow=(1, 3), early_leaver=0)) == []
    # three members: the one left over is no rest to compare the pair with
    assert late_pairs(_job(slow=(0, 1), ranks=3)) == []
