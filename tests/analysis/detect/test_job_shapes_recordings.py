"""The detector on jobs shaped as no earlier set had, recorded held out (tests/corpus/cases-fresh,
``make_corpus.py --set fresh189`` to ``fresh192``: gloo processes on 2 cores or 2 CPUs; mapp's
capture or the profiler): worlds of 3 and 6 ranks, two ranks slowed alike (a slow node's), one
microbatch a step, and a vocabulary large enough that the model's two ends make the pipeline
stages uneven.

No set before them had a world that is not a power of two (a pipeline of three stages, TP2 x
DP3, PP3 x DP2), more than one slowed rank, a step of one microbatch, or a CPU vocabulary beyond
256. These read right on their first recording; the tests keep them so.
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


def test_one_microbatch_a_step_still_tells_a_sleeping_host():
    # DP4 without gradient accumulation: rank 1 sleeps 23 ms in the data path before its one
    # microbatch, a fifth of its step
    verdict = verdict_of("gpt-dp4-mb1-mapp-hostsleep23ms-r1-f191")
    assert [(s.rank, s.kind) for s in verdict.suspects] == [(1, "slow_host")]


def test_a_last_stage_made_heavier_by_the_output_layer_and_the_loss_is_imbalance():
    # PP2 x DP2, vocabulary 8192, nothing injected: the last stage computes 1.5-1.7x the first
    for case_id in ("gpt-pp2dp2-vocab8192-mapp-heavyends-f192", "gpt-pp2dp2-vocab8192-prof-heavyends-f192"):
        verdict = verdict_of(case_id)
        assert verdict.suspects == [], case_id
        assert [(i.kind, i.evidence["stage"]) for i in verdict.imbalance] == [("stage", 1)], case_id
        assert verdict.imbalance[0].evidence["ratio"] > 1.3, case_id


def test_a_slowed_middle_stage_is_named_beside_the_heavier_ends():
    # PP4, vocabulary 8192: rank 1's layers 1.5x their matmuls
    verdict = verdict_of("gpt-pp4-vocab8192-mapp-layer1.5x-matmul-r1-f192")
    assert [(s.rank, s.kind) for s in verdict.suspects] == [(1, "slow_compute")]
