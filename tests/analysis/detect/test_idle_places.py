"""Where a stall recurs (``idle._recurring``): at the n-th call of an op in each iteration, or at
the n-th call of an op inside a range of its own thread, for threads that run on a timer."""

import polars as pl

from mapp.analysis.detect.idle import LONG_GAP_NS, _in_sites, _recurring


def _timer_thread(stall_at_first_in_range: bool) -> pl.DataFrame:
    """Four iterations of a thread that calls ``c10d::allreduce_`` a varying number of times
    (1, 3, 2, 4) in ``negotiate`` ranges before the one in its ``reduce`` range; the stall (2 ms)
    comes before the ``reduce`` one, or else before a negotiation call at a varying place."""
    rows, ranges = [], []
    t = 0
    for it, before in enumerate([1, 3, 2, 4]):
        for k in range(before):
            ranges.append(("negotiate", t, 1_000))
            stalled = not stall_at_first_in_range and k == (it % before)
            rows.append((it, t + 100, 2 * LONG_GAP_NS if stalled else 10_000))
            t += 10_000_000
        ranges.append(("reduce", t, 1_000))
        rows.append((it, t + 100, 2 * LONG_GAP_NS if stall_at_first_in_range else 10_000))
        t += 10_000_000
    tl = pl.DataFrame(rows, schema={"iteration": pl.Int64, "ts_ns": pl.Int64, "gap": pl.Int64}, orient="row").with_columns(
        rank=pl.lit(0, pl.Int32), name=pl.lit("c10d::allreduce_"), in_data=pl.lit(False))
    events = pl.concat([
        tl.select("rank", "name", "ts_ns", cat=pl.lit("other"), lane=pl.lit("cpu:7"), dur_ns=pl.lit(50, pl.Int64)),
        pl.DataFrame(ranges, schema={"name": pl.String, "ts_ns": pl.Int64, "dur_ns": pl.Int64}, orient="row")
        .select(rank=pl.lit(0, pl.Int32), name="name", ts_ns="ts_ns", cat=pl.lit("other"), lane=pl.lit("cpu:7"),
                dur_ns="dur_ns"),
    ])
    return _in_sites(tl, events)


def test_a_stall_at_the_first_call_inside_one_range_recurs_however_many_calls_came_before_it():
    tl = _timer_thread(stall_at_first_in_range=True)
    assert tl.filter(pl.col("gap") > LONG_GAP_NS)["site"].to_list() == ["reduce"] * 4
    recurring = tl.with_columns(r=_recurring(tl)).filter(pl.col("gap") > LONG_GAP_NS)["r"]
    assert recurring.to_list() == [True] * 4


def test_stalls_at_varying_places_inside_a_range_do_not_recur():
    tl = _timer_thread(stall_at_first_in_range=False)
    recurring = tl.with_columns(r=_recurring(tl)).filter(pl.col("gap") > LONG_GAP_NS)["r"]
    assert recurring.to_list() == [False] * 4
