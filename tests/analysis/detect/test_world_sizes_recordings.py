"""The detector on jobs of 3 and 6 ranks and on jobs with two ranks slowed alike (a slow node's),
recorded held out (tests/corpus/cases-fresh, ``make_corpus.py --set fresh189`` / ``fresh190``:
gloo processes on 2 cores; mapp's capture or the profiler).

No set before them had a world that is not a power of two (a pipeline of three stages, TP2 x
DP3, PP3 x DP2) or more than one slowed rank. Every ``fresh189`` job read right on its first
recording; these keep it so.
"""

from __future__ import annotations

from pathlib import Path

from mapp.analysis.detect import detect_bundle
from mapp.analysis.ingest import load_bundle
from mapp.bench.real import load_corpus

FRESH = {c.id: c for c in load_corpus(Path(__file__).resolve().parents[2] / "corpus" / "cases-fresh")}


def verdict_of(case_id: str):
    return detect_bundle(load_bundle(FRESH[case_id].directory), threshold=0.1)


def test_the_middle_of_three_pipeline_stages_doing_more_matmuls_is_named():
    # PP3, one rank a stage: rank 1's layers 1.5x their matmuls, timed against the same layers
    # of the first and the last stage
    verdict = verdict_of("gpt-pp3-mapp-layer1.5x-matmul-r1-f189")
    assert verdict.layout_sizes == {"tp": 1, "pp": 3, "dp": 1}
    assert [(s.rank, s.kind) for s in verdict.suspects] == [(1, "slow_compute")]
    assert verdict.suspects[0].slowdown > 1.3


def test_a_rank_of_three_tp_pairs_is_named_against_its_two_dp_peers():
    verdict = verdict_of("gpt-tp2dp3-mapp-layer1.5x-matmul-r3-f189")
    assert verdict.layout_sizes == {"tp": 2, "pp": 1, "dp": 3}
    assert [(s.rank, s.kind) for s in verdict.suspects] == [(3, "slow_compute")]


def test_a_host_sleeping_before_each_step_of_a_three_rank_ddp_job_is_named():
    # no layout in a profiler trace of plain DDP: every rank runs the same program, all 3 peers
    verdict = verdict_of("ddp3-prof-stepsleep24ms-r0-f189")
    assert [(s.rank, s.kind) for s in verdict.suspects] == [(0, "slow_host")]


def test_three_stages_of_two_replicas_on_lognormal_lengths_are_imbalance():
    assert verdict_of("gpt-pp3dp2-mapp-seqlognorm1-f189").suspects == []


def test_two_ddp_ranks_doing_more_matmuls_are_both_named():
    # ranks 1 and 2 of 4, 1.5x the forward's matmuls each: half the job, counted calls say which
    verdict = verdict_of("ddp4-prof-fwd1.5x-r1r2-f190")
    assert {(s.rank, s.kind) for s in verdict.suspects} == {(1, "slow_compute"), (2, "slow_compute")}


def test_a_sleeping_host_on_each_pipeline_stage_is_named_twice():
    # PP2 x DP2, ranks 1 (first stage) and 3 (last stage) sleep 24 ms before each microbatch
    verdict = verdict_of("gpt-pp2dp2-mapp-hostsleep24ms-r1r3-f190")
    assert {(s.rank, s.kind) for s in verdict.suspects} == {(1, "slow_host"), (3, "slow_host")}
