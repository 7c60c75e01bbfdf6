"""Where a stall recurs (``idle._recurring``): at the n-th call of an op in each iteration, or at
the n-th call of an op inside a range of its own thread, for threads that run on a timer. And whose
idle time counts: a CPU process's, or its driving thread's (``idle._driving_threads``, ``_idler``)."""

import polars as pl

from mapp.analysis.detect.idle import LONG_GAP_NS, _driving_threads, _idler, _in_sites, _per_iteration, _recurring


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


def _two_threads(sleep_ns: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(events, timeline) of one rank over two iterations: a main thread (``cpu:1``) that computes
    in a ``step`` range after sleeping ``sleep_ns`` outside any range, and a background thread
    (``cpu:2``) whose all-reduce spans run through the sleep."""
    ev = []
    for it in range(2):
        t = it * 100_000_000
        ev += [(it, "cpu:1", "step", "other", t + sleep_ns, 50_000_000),
               (it, "cpu:1", "aten::mm", "compute", t + sleep_ns + 1_000_000, 20_000_000),
               (it, "cpu:1", "aten::add", "compute", t + sleep_ns + 30_000_000, 10_000_000),
               (it, "cpu:2", "all_reduce", "collective", t, 60_000_000)]
    events = pl.DataFrame(ev, schema={"iteration": pl.Int64, "lane": pl.String, "name": pl.String, "cat": pl.String,
                                      "ts_ns": pl.Int64, "dur_ns": pl.Int64}, orient="row").with_columns(
        rank=pl.lit(0, pl.Int32))
    timeline = events.filter(pl.col("name") != "step").select(
        "rank", "iteration", "ts_ns", end_ns=pl.col("ts_ns") + pl.col("dur_ns"), name="name", lane="lane",
        launch_ns=pl.lit(None, pl.Int64), compute=pl.col("cat") == "compute", memory=pl.lit(False)).sort("ts_ns")
    return events, timeline


def test_the_driving_thread_is_the_one_that_computes_and_its_ranges_are_busy():
    events, timeline = _two_threads(sleep_ns=40_000_000)
    own = _driving_threads(timeline, events)
    assert set(own["lane"]) == {"cpu:1"}
    assert "step" in own["name"].to_list()    # the range holds the thread between its ops


def test_no_driving_thread_where_one_thread_runs_everything_or_a_gpu_is_traced():
    events, timeline = _two_threads(sleep_ns=40_000_000)
    one = timeline.filter(pl.col("lane") == "cpu:1")
    assert _driving_threads(one, events) is None
    gpu = timeline.with_columns(lane=pl.when(pl.col("lane") == "cpu:2").then(pl.lit("stream:7")).otherwise("lane"))
    assert _driving_threads(gpu, events) is None
    # mapp's capture writes lanes of its own, no threads
    mapp = timeline.with_columns(lane=pl.when(pl.col("lane") == "cpu:1").then(pl.lit("compute")).otherwise(pl.lit("comm")))
    assert _driving_threads(mapp, events) is None


def test_the_larger_excess_of_the_process_and_its_driving_thread_is_kept():
    process = pl.DataFrame({"rank": [0, 1], "iteration": [0, 0], "gap_ns": [5, 9], "n_gaps": [3, 3],
                            "gap_excess_ns": [1.0, 8.0], "long_excess_ns": [0.0, 8.0], "handover_excess_ns": [0.0, 0.0],
                            "data_excess_ns": [0.0, 0.0], "queued_excess_ns": [0.0, 0.0], "span_ns": [100, 100],
                            "n_peers": [4, 4]})
    thread = process.with_columns(gap_ns=pl.Series([45, 2]), gap_excess_ns=pl.Series([40.0, -3.0]),
                                  long_excess_ns=pl.Series([40.0, 0.0]))
    kept = _idler(process, thread).sort("rank")
    assert kept["gap_excess_ns"].to_list() == [40.0, 8.0]   # rank 0's thread slept; rank 1's process stalled
    assert kept["long_excess_ns"].to_list() == [40.0, 8.0]
    assert kept["gap_ns"].to_list() == [45, 9]


def test_two_peers_keep_the_process_view_whose_excesses_mirror():
    process = pl.DataFrame({"rank": [0, 1], "iteration": [0, 0], "gap_ns": [5, 1], "n_gaps": [3, 3],
                            "gap_excess_ns": [2.0, -2.0], "long_excess_ns": [0.0, 0.0], "handover_excess_ns": [0.0, 0.0],
                            "data_excess_ns": [0.0, 0.0], "queued_excess_ns": [0.0, 0.0], "span_ns": [100, 100],
                            "n_peers": [2, 2]})
    thread = process.with_columns(gap_excess_ns=pl.Series([-9.0, 9.0]))
    assert _idler(process, thread).sort("rank")["gap_excess_ns"].to_list() == [2.0, -2.0]


def _thread_idle(events: pl.DataFrame, timeline: pl.DataFrame) -> list[int]:
    """Per iteration, the driving thread's idle time (``_per_iteration`` over its timeline)."""
    own = _driving_threads(timeline, events)
    return _per_iteration(own, events, list(timeline.columns[:-1]), recurring=False).sort("iteration")["gap_ns"].to_list()


def test_a_sleep_that_outlasts_no_transfer_of_another_thread_is_the_threads_idle_time():
    events, timeline = _two_threads(sleep_ns=40_000_000)   # the all-reduce ends 20 ms after it
    idle = _thread_idle(events, timeline)
    # (the first iteration has nothing before its sleep; the second's idle time runs from the
    # first's step to its own: 10 ms after that step, and the sleep)
    assert [round(g / 1e6) for g in idle] == [0, 10 + 40]


def test_time_outside_ranges_until_another_threads_transfer_ends_is_waiting():
    events, timeline = _two_threads(sleep_ns=40_000_000)
    ends_sooner = pl.col("lane") == "cpu:2"
    events = events.with_columns(dur_ns=pl.when(ends_sooner).then(39_500_000).otherwise(pl.col("dur_ns")))
    timeline = timeline.with_columns(end_ns=pl.when(ends_sooner).then(pl.col("ts_ns") + 39_500_000)
                                     .otherwise(pl.col("end_ns")))
    idle = _thread_idle(events, timeline)
    assert [round(g / 1e5) for g in idle] == [5, 5]   # only the 0.5 ms after each transfer's end
