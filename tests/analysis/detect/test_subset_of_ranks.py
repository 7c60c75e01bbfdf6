"""Traces of some of a job's ranks only (a user who profiled a few ranks, a file lost): real
recordings of ``tests/corpus/cases-fresh`` copied without one rank's file.

The rank that is there and slowed is still named; where the slowed rank is the one missing, no
traced rank is blamed for waiting on it; the missing ranks are said.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mapp.analysis.detect import detect_bundle
from mapp.analysis.ingest import load_bundle

FRESH = Path(__file__).resolve().parents[2] / "corpus" / "cases-fresh"
CASES = Path(__file__).resolve().parents[2] / "corpus" / "cases"


def verdict_without(tmp_path: Path, case_id: str, missing: int):
    files = sorted(p for p in (FRESH / case_id).iterdir() if p.name.startswith("rank-"))
    out = tmp_path / case_id
    out.mkdir()
    for rank, f in enumerate(files):
        if rank != missing:
            shutil.copy(f, out / f.name)
    return detect_bundle(load_bundle(out), threshold=0.1)


@pytest.mark.parametrize("case_id, missing, expected", [
    ("gpt-tp2dp3-mapp-layer1.5x-matmul-r3-f189", 0, (3, "slow_compute")),   # TP2 x DP3, rank 3's layers 1.5x
    ("gpt-tp2dp3-mapp-layer1.5x-matmul-r3-f189", 5, (3, "slow_compute")),
    ("gpt-dp4-mb1-mapp-hostsleep23ms-r1-f191", 3, (1, "slow_host")),        # DP4, rank 1 sleeps in the data path
])
def test_the_slowed_rank_is_named_though_another_rank_was_not_traced(tmp_path, case_id, missing, expected):
    verdict = verdict_without(tmp_path, case_id, missing)
    assert [(s.rank, s.kind) for s in verdict.suspects] == [expected]
    assert verdict.unrecorded == [missing]
    assert f"1 rank was not recorded ({missing}): not judged" in verdict.notes


@pytest.mark.parametrize("case_id, missing", [
    ("gpt-tp2dp3-mapp-layer1.5x-matmul-r3-f189", 3),
    ("gpt-dp4-mb1-mapp-hostsleep23ms-r1-f191", 1),
])
def test_no_traced_rank_is_blamed_for_waiting_on_a_slowed_rank_that_was_not_traced(tmp_path, case_id, missing):
    assert verdict_without(tmp_path, case_id, missing).suspects == []


def test_of_two_traced_ranks_an_idler_is_not_named_where_no_collective_says_who_waits(tmp_path):
    # plain DDP3 under the profiler, rank 0 sleeping 24 ms before each step, rank 2's trace gone:
    # gloo names no group, so no collective is timed with all three members; of two ranks compared
    # the detector names one only where stage 2 says which waits, and here it says why it cannot
    verdict = verdict_without(tmp_path, "ddp3-prof-stepsleep24ms-r0-f189", 2)
    assert verdict.suspects == []
    assert any(n.startswith("rank 0 idles") and "stage 2 timed none of its collectives with every member" in n
               for n in verdict.notes)


def test_a_pipeline_link_whose_twin_joins_an_untraced_rank_is_not_weighed_alone(tmp_path):
    # PP2 x DP2, nothing injected, rank 3's trace gone: link 1<->3 is unseen, and link 0<->2 is
    # no longer the job's only link to weigh against the fabric ("slow link 0<->2" 3.5x before)
    files = sorted((CASES / "gpt-pp2dp2-mapp-healthy").glob("rank-*.json"))
    out = tmp_path / "pp2dp2"
    out.mkdir()
    for f in files[:3]:
        shutil.copy(f, out / f.name)
    verdict = detect_bundle(load_bundle(out), threshold=0.1)
    assert [s for s in verdict.suspects if s.kind == "slow_link"] == []
    bandwidth = next(s for s in verdict.stages if s.name == "3 bandwidth")
    assert not bandwidth.ran and "its like may join untraced ranks" in bandwidth.reason
