"""A CPU process with a busy thread beside it (``busy_neighbour``): which ranks the rule names."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.busy_neighbour import busy_neighbours
from mapp.analysis.detect.peer_evidence import PeerEvidence

COORDS = {r: {"tp": 0, "pp": 0, "dp": r} for r in range(4)}
MS = 1e6


def _evidence(busy: dict[int, float], *, pace: float = 1.5, floor: float = 1.0, gaps: bool = True,
              counted: bool = True, iterations: int = 8) -> PeerEvidence:
    """Four ranks of one program; rank 2 as the arguments say, the others at their peers' pace."""
    per = pl.DataFrame([(r, i, busy[r] * MS) for r in range(4) for i in range(iterations)], orient="row",
                       schema={"rank": pl.Int32, "iteration": pl.Int32, "busy_ns": pl.Float64})
    ranks = pl.DataFrame({
        "rank": pl.Series(range(4), dtype=pl.Int32),
        "pace": [1.0, 1.0, pace, 1.0], "pace_kinds": [60] * 4,
        "input_floor": [1.0, 1.0, floor, 1.0], "input_kinds": [30] * 4,
        "gap_flagged": [False, False, gaps, False], "gap_excess_ns": [0.0, 0.0, 12 * MS, 0.0],
    })
    return PeerEvidence("program peers", rank_iterations=per, ranks=ranks, min_effect=0.1, counted=counted)


def test_a_rank_summing_far_more_at_its_peers_pace_of_quickest_calls_is_a_slow_host():
    named = busy_neighbours(_evidence({0: 100, 1: 104, 2: 160, 3: 98}), COORDS, 700 * MS)
    assert [(s.rank, s.kind) for s in named] == [(2, "slow_host")]
    # its slowdown: over the median of its peers' sums (100 of 98, 100, 104); its cost adds its idle time
    assert abs(named[0].slowdown - 1.6) < 1e-9
    assert abs(named[0].excess_ns - (60 + 12) * MS) < 1e-3
    assert named[0].iterations == list(range(8))


def test_a_rank_busier_beside_another_busy_rank_is_the_programs_split():
    # one row of a 2x2 grid busier than the other: 1.6x the median of its peers, 1.23x the busiest
    assert busy_neighbours(_evidence({0: 130, 1: 100, 2: 160, 3: 98}), COORDS, 700 * MS) == []


def test_larger_or_smaller_inputs_are_no_neighbour():
    for floor in (1.5, 0.73):   # its quickest calls slower or faster than its peers': other work
        assert busy_neighbours(_evidence({0: 100, 1: 104, 2: 160, 3: 98}, floor=floor), COORDS, 700 * MS) == []


def test_without_lasting_idle_time_or_a_slower_pace_no_one_is_named():
    assert busy_neighbours(_evidence({0: 100, 1: 104, 2: 160, 3: 98}, gaps=False), COORDS, 700 * MS) == []
    assert busy_neighbours(_evidence({0: 100, 1: 104, 2: 160, 3: 98}, pace=1.05), COORDS, 700 * MS) == []


def test_uncounted_calls_or_a_sum_under_contention_name_no_one():
    assert busy_neighbours(_evidence({0: 100, 1: 104, 2: 160, 3: 98}, counted=False), COORDS, 700 * MS) == []
    assert busy_neighbours(_evidence({0: 100, 1: 104, 2: 125, 3: 98}), COORDS, 700 * MS) == []
