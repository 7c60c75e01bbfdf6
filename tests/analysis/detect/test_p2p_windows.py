"""Stage 3's links whose messages are posted asynchronously and unsized, timed by their windows
(``p2p_windows.window_links``): from both sides' posts to the first side's wait that saw it done."""

from __future__ import annotations

import polars as pl
import pytest

from mapp.analysis.detect.p2p_windows import WINDOWED, window_links

MS = 1_000_000


def _halo(slow: tuple[int, int] | None = None, transfer_ms: float = 6.0, late_end: int | None = None,
          steps: int = 4, up_ms: float = 0.3) -> pl.DataFrame:
    """A line of 4 ranks trading rows with both neighbours 10 times a step by isend/irecv,
    each message's window 0.3 ms (``up_ms`` to a lower rank); ``slow``'s messages (both ways) take
    ``transfer_ms``;
    ``late_end``'s rank posts every exchange 5 ms after its neighbours (its window opens late)."""
    rows, i = [], 0
    for it in range(steps):
        for k in range(10):
            t = it * 200 * MS + k * 15 * MS
            for a, b in [(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)]:
                post_a = t + (5 * MS if a == late_end else 0)
                post_b = t + (5 * MS if b == late_end else 0)
                if slow and {a, b} == set(slow):
                    move = transfer_ms * MS
                else:
                    move = (up_ms if b < a else 0.3) * MS
                done = max(post_a, post_b) + int(move)
                # both sides wait on the exchange when it is done; the receiver a little later
                rows.append({"pair_id": i, "src": a, "dst": b, "bytes": None, "iteration": it,
                             "send_start_ns": post_a, "send_end_ns": done + 50_000,
                             "recv_start_ns": post_b, "recv_end_ns": done + 80_000,
                             "bytes_match": True, "send_async": True, "recv_async": False})
                i += 1
    return pl.DataFrame(rows, schema_overrides={"src": pl.Int32, "dst": pl.Int32, "iteration": pl.Int32,
                                                "bytes": pl.Int64})


def test_a_link_whose_messages_stay_in_flight_longer_than_its_like_links_is_slow():
    found = window_links(_halo(slow=(1, 2)))
    assert [(f.kind, f.ranks) for f in found] == [("slow_link", (1, 2))]
    o = found[0].observations[0]
    assert o["compared"] == WINDOWED and o["iterations"] == [0, 1, 2, 3]
    # the link's windows 6.05 ms, its like links' 0.35 ms
    assert 17 < found[0].slowdown < 17.5


def test_healthy_links_and_a_late_end_are_not_slow():
    assert window_links(_halo()) == []
    # a rank that posts late makes its neighbours wait, not its messages take longer
    assert window_links(_halo(late_end=2)) == []


def test_a_link_a_little_slower_or_slower_in_one_step_only_is_not_slow():
    assert window_links(_halo(slow=(1, 2), transfer_ms=0.9)) == []
    one = _halo(slow=(1, 2))
    fast = _halo()
    mixed = pl.concat([one.filter(pl.col("iteration") == 0), fast.filter(pl.col("iteration") > 0)])
    assert window_links(mixed) == []


def test_sized_or_blocking_pairs_are_left_to_the_other_measures():
    sized = _halo(slow=(1, 2)).with_columns(bytes=pl.lit(4096, pl.Int64))
    assert window_links(sized) == []
    blocking = _halo(slow=(1, 2)).with_columns(send_async=pl.lit(False))
    assert window_links(blocking) == []


def test_no_link_is_timed_where_many_messages_arrive_before_they_were_sent():
    # peers guessed wrong (paired by when calls end, a send waited on at the end of the step):
    # the pairs' windows are no message's, whatever they read
    p = _halo(slow=(1, 2))
    odd = pl.col("pair_id") % 5 == 0          # a fifth of the messages "received before sent"
    wrong = p.with_columns(send_start_ns=pl.when(odd).then(pl.col("recv_end_ns") + MS).otherwise(pl.col("send_start_ns")))
    assert window_links(wrong) == []
    # a few such pairs at the steps' edges are left out, the rest still timed
    few = p.with_columns(send_start_ns=pl.when(pl.col("pair_id") % 50 == 0).then(pl.col("recv_end_ns") + MS)
                         .otherwise(pl.col("send_start_ns")))
    assert [f.ranks for f in window_links(few)] == [(1, 2)]


def test_messages_one_way_that_wait_longer_on_every_link_are_no_slow_link():
    # a pipeline's gradients waiting longer than its activations on every link alike
    assert window_links(_halo(up_ms=5.0)) == []


def test_a_link_whose_windows_hold_a_sliver_of_the_step_is_not_slow():
    # link 1-2's windows open 57 ms a step beyond its like links' (its two ways' messages side by
    # side): of a 200 ms step (28%), the job waiting on it; of a 10 s step (0.6%), a sliver its
    # ends' scheduling can make
    p = _halo(slow=(1, 2))
    assert [f.ranks for f in window_links(p, iteration_ns=200 * MS)] == [(1, 2)]
    assert window_links(p, iteration_ns=10_000 * MS) == []


def test_a_link_under_the_ratio_is_slow_only_where_its_windows_hold_a_large_part_of_the_step():
    # link 1-2's windows 1.85 ms, 5.3x its like links' 0.35 ms (under ``WINDOW_RATIO``), open
    # about 15 ms a step beyond theirs: a quarter of a 60 ms step is a link the job waits on; of a
    # 200 ms step (7.5%), no more than its ends' scheduling can make of so small a ratio
    p = _halo(slow=(1, 2), transfer_ms=1.8)
    assert [(f.ranks, round(f.slowdown, 1)) for f in window_links(p, iteration_ns=60 * MS)] == [((1, 2), 5.3)]
    assert window_links(p, iteration_ns=200 * MS) == []
    assert window_links(p) == []


def _headed(padded: tuple[int, int] | None = None, transfer_ms: float = 10.0, steps: int = 4) -> pl.DataFrame:
    """A line of 4 ranks trading a payload with both neighbours 10 times a step, each payload
    preceded by a small shape header, every window 0.3 ms; ``padded`` (src, dst): that one
    direction's payloads take ``transfer_ms`` (its headers and the other way's messages do not)."""
    rows, i = [], 0
    for it in range(steps):
        for k in range(10):
            t = it * 200 * MS + k * 15 * MS
            for a, b in [(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)]:
                for header in (True, False):
                    start = t + (0 if header else 1 * MS)
                    move = transfer_ms if (a, b) == padded and not header else 0.3
                    done = start + int(move * MS)
                    rows.append({"pair_id": i, "src": a, "dst": b, "bytes": None, "iteration": it,
                                 "send_start_ns": start, "send_end_ns": done + 50_000,
                                 "recv_start_ns": start, "recv_end_ns": done + 80_000,
                                 "bytes_match": True, "send_async": True, "recv_async": False})
                    i += 1
    return pl.DataFrame(rows, schema_overrides={"src": pl.Int32, "dst": pl.Int32, "iteration": pl.Int32,
                                                "bytes": pl.Int64})


def test_one_direction_in_flight_far_longer_than_the_others_is_a_slow_link_its_typical_window_not():
    # link 1-2's typical window is a header's or the other way's (30 of its 40 messages a step),
    # but its messages from 2 to 1 are in flight 10 x 0.35 + 10 x 10.05 = 104 ms a step, the
    # other directions' 20 x 0.35 = 7 ms: 14.9x, and 97 ms of the 200 ms step beyond theirs
    found = window_links(_headed(padded=(2, 1)), iteration_ns=200 * MS)
    assert [(f.kind, f.ranks) for f in found] == [("slow_link", (1, 2))]
    o = found[0].observations[0]
    assert o["compared"] == WINDOWED and o["direction"] == [2, 1] and o["iterations"] == [0, 1, 2, 3]
    assert found[0].slowdown == pytest.approx(104 / 7)
    assert found[0].excess_ns == pytest.approx(97 * MS)
    # without the job's iteration there is no share of it to weigh: not read
    assert window_links(_headed(padded=(2, 1))) == []


def test_a_direction_a_little_longer_in_flight_or_holding_little_of_the_step_is_not_slow():
    assert window_links(_headed(), iteration_ns=200 * MS) == []
    # 10 x 0.35 + 10 x 7.05 = 74 ms a step against 7 ms: 10.6x
    assert window_links(_headed(padded=(2, 1), transfer_ms=7.0), iteration_ns=200 * MS) == []
    # 14.9x, but 97 ms of a 1 s step (9.7%)
    assert window_links(_headed(padded=(2, 1)), iteration_ns=1000 * MS) == []
