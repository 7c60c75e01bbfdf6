"""A rank slower in every K-th iteration and as fast as its peers in the others (``periodic``)."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.periodic import periodic_windows


def _per(idle_ms: dict[int, dict[int, float]], iterations=range(2, 10)) -> pl.DataFrame:
    """Stage 1's per (rank, iteration) evidence: no rank computes slower (``effect`` 0), each
    busy 200 ms an iteration, idle beyond its peers by ``idle_ms[rank][iteration]`` (0 elsewhere)."""
    rows = [(r, i, 0.0, idle_ms.get(r, {}).get(i, 0.0) * 1e6, 200e6) for r in range(4) for i in iterations]
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "iteration": pl.Int32, "effect": pl.Float64,
                                      "gap_excess_ns": pl.Float64, "busy_ns": pl.Float64}, orient="row")


def test_a_rank_stalling_every_third_iteration_is_found_with_those_iterations():
    per = _per({1: {2: 300, 5: 260, 8: 280}})
    assert periodic_windows(per, 0.1) == [(1, [2, 5, 8])]


def test_the_period_may_begin_at_any_of_its_first_iterations():
    per = _per({3: {3: 300, 5: 300, 7: 300, 9: 300}})
    assert periodic_windows(per, 0.1) == [(3, [3, 5, 7, 9])]


def test_noise_half_a_stall_high_off_the_period_is_no_period():
    # 300 ms stalls at 2, 5, 8, and 160 ms at 3: not as fast as its peers in the others
    per = _per({1: {2: 300, 5: 300, 8: 300, 3: 160}})
    assert periodic_windows(per, 0.1) == []


def test_noise_a_little_over_the_threshold_off_the_period_leaves_it():
    # 30 ms beyond its peers' (15% of its work) at 4, a tenth of its stalls
    per = _per({2: {3: 300, 5: 300, 7: 300, 9: 300, 4: 30}})
    assert periodic_windows(per, 0.1) == [(2, [3, 5, 7, 9])]


def test_a_missing_beat_or_too_few_beats_is_no_period():
    assert periodic_windows(_per({1: {2: 300, 8: 300}}), 0.1) == []          # two only
    assert periodic_windows(_per({1: {2: 300, 5: 300}}), 0.1) == []          # 8 missing
    assert periodic_windows(_per({1: {5: 300, 8: 300}}), 0.1) == []          # 2 missing
    assert periodic_windows(_per({1: {2: 300, 4: 300, 7: 300}}), 0.1) == []  # no one period


def test_a_rank_slower_in_every_iteration_is_no_period():
    # a lasting fault is the whole trace's to judge
    per = _per({1: {i: 300 for i in range(2, 10)}})
    assert periodic_windows(per, 0.1) == []


def test_stalls_under_the_threshold_are_no_period():
    # 15 ms beyond its peers' in a step of 200 ms of work: 7.5%, under 10%
    per = _per({1: {2: 15, 5: 15, 8: 15}})
    assert periodic_windows(per, 0.1) == []


def test_beats_unalike_are_no_period():
    # the same work stalls alike each time: 300, 40 and 100 ms are not one fault recurring
    # (a DCP save's coordinator, no fault: its score 0.54, 0.10 and 0.20 in its checkpoint steps)
    per = _per({2: {2: 300, 5: 40, 8: 100}})
    assert periodic_windows(per, 0.1) == []


def test_rank_0_coordinating_work_every_few_steps_is_not_judged_by_its_period():
    # DCP's planner and metadata writer, a logger: rank 0's extra host time at each checkpoint
    # is its role's (healthy DCP saves on a quiet host: 30-45% more idle in each checkpoint step)
    per = _per({0: {2: 80, 5: 80, 8: 80}, 3: {3: 300, 6: 300, 9: 300}})
    assert periodic_windows(per, 0.1) == [(3, [3, 6, 9])]
