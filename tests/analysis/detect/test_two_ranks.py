"""Two-rank jobs (one node, two GPUs): each rank can only be compared with the other."""

from __future__ import annotations

import pytest

from mapp.analysis.detect import detect_bundle
from mapp.analysis.ingest import load_bundle
from mapp.analysis.simulate import SimConfig, parse_fault, simulate


@pytest.mark.parametrize(("tp", "dp"), [(1, 2), (2, 1)])
def test_slow_gpu_of_two_is_found_at_its_factor(tmp_path, tp, dp):
    simulate(SimConfig(tp=tp, pp=1, dp=dp, microbatches=8, iterations=4, layers=8, hidden=2048,
                       faults=[parse_fault("slow_gpu:1:1.5")], seed=4), tmp_path)
    verdict = detect_bundle(load_bundle(tmp_path))
    assert [s.rank for s in verdict.suspects] == [1]
    assert verdict.suspects[0].kind == "slow_compute"
    assert verdict.suspects[0].slowdown == pytest.approx(1.5, rel=0.05)


@pytest.mark.parametrize(("tp", "dp"), [(1, 2), (2, 1)])
def test_healthy_pair_has_no_suspect(tmp_path, tp, dp):
    simulate(SimConfig(tp=tp, pp=1, dp=dp, microbatches=8, iterations=4, layers=8, hidden=2048, seed=5), tmp_path)
    verdict = detect_bundle(load_bundle(tmp_path))
    assert verdict.suspects == [] and verdict.healthy
