"""``onset``: which trailing windows are judged again, which ranks lean slower there, and how far
back from the trace's end a suspect's iterations run."""

from __future__ import annotations

import math

import polars as pl

from mapp.analysis.detect.onset import ONSET_LEAST, lasting_to_end, leaning, since_onset, trailing_windows


def test_trailing_windows_cover_every_onset_three_or_more_iterations_from_the_end():
    assert trailing_windows(4) == []            # 3 of 4 is nearly every one: the whole trace judges it
    assert trailing_windows(5) == [4]
    assert trailing_windows(10) == [9, 6, 4]
    assert trailing_windows(20) == [18, 13, 9, 6, 4]
    # a fault the last r iterations of n, n * 0.75 > r >= 3, fills 3/4 of some window
    for n in range(5, 40):
        for r in range(ONSET_LEAST, n):
            if r >= 0.75 * n:
                continue
            assert any(r <= m and r >= 0.75 * m for m in trailing_windows(n)), (n, r)


def test_lasting_to_end_is_the_run_of_flagged_iterations_that_reaches_the_last():
    window = [7, 8, 9, 10, 11]
    assert lasting_to_end([7, 8, 9, 10, 11], window) == [7, 8, 9, 10, 11]
    assert lasting_to_end([5, 8, 10, 11], window) == [10, 11]
    assert lasting_to_end([8, 9, 10], window) == []        # not slower in the last one: no onset
    assert lasting_to_end(None, window) == []


def test_one_iteration_that_reads_as_not_slower_is_borne_inside_a_run_one_longer_than_the_least():
    window = [6, 7, 8, 9, 10, 11]
    # a slowed rank that had the core to itself in iteration 9: four slower around it
    assert lasting_to_end([7, 8, 10, 11], window) == [7, 8, 10, 11]
    assert lasting_to_end([6, 7, 8, 10, 11], window) == [6, 7, 8, 10, 11]
    # three around it are the least without a dip: the run stops at the dip
    assert lasting_to_end([8, 10, 11], window) == [10, 11]
    # two dips, or the dip last: no more than the strict run
    assert lasting_to_end([6, 8, 10, 11], window) == [10, 11]
    assert lasting_to_end([7, 8, 9, 10], window) == []


def _per(effects: dict[int, list[float]], gaps: dict[int, list[float]] | None = None) -> pl.DataFrame:
    rows = []
    for rank, row in effects.items():
        for i, e in enumerate(row):
            gap = (gaps or {}).get(rank, [0.0] * len(row))[i]
            rows.append({"rank": rank, "iteration": 2 + i, "effect": math.log(e), "busy_ns": 100e6,
                         "gap_excess_ns": gap * 1e6})
    return pl.DataFrame(rows)


def test_a_rank_slower_after_than_before_leans_and_one_slower_throughout_does_not():
    per = _per({0: [1.0] * 6 + [1.3] * 4,      # 1.3x from iteration 8
                1: [1.2] * 10,                   # slower all along: the whole trace's to judge
                2: [1.0] * 10})
    assert leaning(per, [8, 9, 10, 11], 0.1) == [0]


def test_a_host_idling_beyond_its_peers_from_some_iteration_on_leans():
    # 20 ms more idle a 100 ms of work from iteration 9: log1p(0.2) over the bar, log1p(0.1) / 2
    per = _per({0: [1.0] * 10, 1: [1.0] * 10}, gaps={1: [0.0] * 7 + [20.0] * 3})
    assert leaning(per, [9, 10, 11], 0.1) == [1]
    assert leaning(per, [9, 10, 11], 0.5) == []      # under half of log1p(0.5)


def test_since_onset_needs_the_verdict_and_the_ranks_own_evidence_in_each_iteration_to_the_end():
    from mapp.analysis.detect.findings import Suspect

    def suspect(iterations):
        return Suspect(rank=1, kind="slow_host", confidence=0.6, slowdown=1.15, iterations=iterations)

    window = [8, 9, 10, 11]
    # idle 2.1x and 2.2x in two iterations, as its peers' in the last: the verdict's median
    # over the window says all four, the rank's own evidence not the last
    per = _per({0: [1.0] * 10, 1: [1.0] * 10}, gaps={1: [0.0] * 6 + [0.0, 110.0, 120.0, 0.0]})
    assert since_onset(per, suspect([8, 9, 10, 11]), window, 0.1) == []
    per = _per({0: [1.0] * 10, 1: [1.0] * 6 + [1.3] * 4})
    assert since_onset(per, suspect([8, 9, 10, 11]), window, 0.1) == [8, 9, 10, 11]
    assert since_onset(per, suspect([8, 9, 10]), window, 0.1) == []      # not the last by the verdict
    assert since_onset(per, suspect([10, 11]), window, 0.1) == [10, 11]
