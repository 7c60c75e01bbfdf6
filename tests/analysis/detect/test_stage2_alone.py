"""Stage 2's stand-ins (``stage2_alone.lasting_stand_ins``): a rank that stage 1 finds no slower is
named by stage 2 alone only where it keeps the others waiting in (nearly) every traced iteration.
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
