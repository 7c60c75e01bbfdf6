"""Stage 2's stand-ins (``stage2_alone.lasting_stand_ins``): a rank that stage 1 finds no slower is
named by stage 2 alone only where it keeps the others waiting in (nearly) every traced iteration,
more of them than ranks taking turns would by chance (``lasting_by_chance``).
The real runs that set the rule are in ``test_users_recordings.py``; here, its reach over traces
of other lengths, on the rows stage 2 writes."""

from __future__ import annotations

import polars as pl
import pytest

from mapp.analysis.detect.findings import Suspect
from mapp.analysis.detect.lateness import LatenessEvidence
from mapp.analysis.detect.stage2_alone import lasting_stand_ins


def _stage2(net_lasting: float) -> LatenessEvidence:
    ranks = pl.DataFrame({"rank": [0, 1], "instances": [40, 40], "last": [30, 10], "net_lasting": [net_lasting, 0.0]})
    return LatenessEvidence(ran=True, ranks=ranks, z_crit=2.6, iterations=10)


@pytest.mark.parametrize(("net_lasting", "kept"), [(1.0, True), (0.9, True), (0.8, False), (0.75, False)])
def test_a_stand_in_lasts_in_all_but_one_of_ten_steps_or_is_overruled_with_a_note(net_lasting, kept):
    # 10 traced steps: one step's hiccup does not clear a rank that keeps the others waiting in the
    # other nine; two do (and 3 of 4, a handful's "nearly every", is not enough alone)
    overruled = []
    out = lasting_stand_ins([Suspect(rank=0, kind="slow_compute", confidence=0.6, slowdown=1.4)],
                            _stage2(net_lasting), overruled)
    assert [s.rank for s in out] == ([0] if kept else [])
    assert len(overruled) == (0 if kept else 1)
    if not kept:
        assert overruled[0].rank == 0
        assert f"(last at 30 of 40 collectives) in {net_lasting:.0%} of the traced iterations" in overruled[0].line


def _turns(net_lasting: list[float], iterations: int) -> LatenessEvidence:
    n = len(net_lasting)
    ranks = pl.DataFrame({"rank": list(range(n)), "instances": [3 * iterations] * n,
                          "last": [2 * iterations] + [1] * (n - 1), "net_lasting": net_lasting})
    return LatenessEvidence(ran=True, ranks=ranks, z_crit=2.6, iterations=iterations)


@pytest.mark.parametrize(("net_lasting", "iterations", "kept"), [
    ([1.0, 1 / 3, 0.0, 0.0], 3, False),     # 4 ranks, 3 steps: 4 x (1/3)^3, about one time in 7
    ([1.0, 0.0, 0.0, 0.0], 3, False),       # 4 x (1/4)^3 = 1 in 16
    ([1.0, 1 / 3, 0.0, 0.0], 6, True),      # 4 x (1/3)^6, about 1 in 180
    ([1.0] + [0.0] * 7, 3, False),          # 8 x (1/8)^3 = 1 in 64, above the false-alarm budget of 1 in 100
    ([1.0] + [0.0] * 7, 4, True),           # 8 x (1/8)^4 = 1 in 512
])
def test_a_stand_in_that_every_step_names_is_kept_only_where_turns_of_chance_would_not(net_lasting, iterations, kept):
    overruled = []
    out = lasting_stand_ins([Suspect(rank=0, kind="slow_compute", confidence=0.6, slowdown=1.4)],
                            _turns(net_lasting, iterations), overruled)
    assert [s.rank for s in out] == ([0] if kept else [])
    if not kept:
        assert "in 100% of the traced iterations" in overruled[0].line
        assert f"with {iterations} iterations traced, one of {len(net_lasting)} ranks taking turns" in overruled[0].line
