"""The detector on real recorded jobs (tests/corpus/cases): the answer is what was injected.

Every case is a real execution (torchrun, gloo, 4 processes on 2 cores), made by
tests/corpus/make_corpus.py; its manifest states what was injected and what the detector must
say. The cases listed here are those the detector gets right today, one or more per failure
class of issue 13; the rest are measured by `mapp bench detect --real tests/corpus/cases`
(BENCHMARKS.md), not asserted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mapp.analysis.detect import detect_bundle
from mapp.analysis.ingest import load_bundle
from mapp.bench.real import load_corpus, run_case

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "cases"
CASES = {c.id: c for c in load_corpus(CORPUS)}

RIGHT_TODAY = [
    # 1. profiler traces without a Megatron layout: peers from the program, same work compared
    "ddp4-prof-healthy", "ddp4-prof-fwd2.5x-r3",
    "tp2dp2-plain-prof-healthy", "tp2dp2-plain-prof-1.6x-r1", "tp2dp2-plain-prof-2.5x-r2",
    "gpt-tp2dp2-prof-healthy", "gpt-tp2dp2-prof-layer1.5x-r1", "gpt-pp2dp2-prof-healthy",
    # mapp's own capture of megatron-core: compute and host faults, healthy runs
    "gpt-tp2dp2-mapp-healthy", "gpt-tp2dp2-mapp-layer1.5x-r1", "gpt-pp2dp2-mapp-healthy",
    "gpt-pp2dp2-mapp-layer1.5x-r2", "gpt-tp2pp2-mapp-healthy", "gpt-tp2pp2-mapp-layer1.5x-r3",
    "gpt-tp2dp2-mapp-hostsleep20ms-r3", "gpt-pp2dp2-mapp-hostsleep20ms-r0", "gpt-pp2dp2-mapp-beforemb20ms-r1",
    "gpt-tp2dp2-mapp-beforemb20ms-r2",
    # 1. plain DDP profiler traces (one world group): who waits for whom, a host stall from the step's start
    "ddp4-prof-fwd1.5x-r2", "ddp4-prof-datasleep20ms-r1",
    # 3. imbalance without a fault: a heavier last stage, heavy-tailed sequence lengths
    "gpt-pp2dp2-mapp-laststage3of4", "gpt-pp2dp2-prof-laststage2of3",
    "gpt-tp2dp2-mapp-seqlognorm0.8", "gpt-pp2dp2-mapp-seqlognorm0.8",
]


@pytest.mark.parametrize("case_id", RIGHT_TODAY)
def test_recorded_job_gets_the_injected_answer(case_id):
    case = CASES[case_id]
    result = run_case(case, threshold=0.1)
    assert result.error is None, result.error
    expected = "none" if case.expect is None else f"{case.expect['kinds']} rank {case.expect['rank']}"
    assert result.right, f"{case_id}: expected {expected}, got {result.top or 'none'}"


def test_every_listed_case_is_in_the_corpus_with_its_files():
    assert set(RIGHT_TODAY) <= set(CASES)
    for case_id in RIGHT_TODAY:
        assert any(CASES[case_id].directory.iterdir())


def test_a_slowdown_below_the_threshold_is_not_a_suspect(tmp_path):
    # 5. --threshold t: slower than (1 + t) x its peers. Rank 1's layers were slowed about 1.5x
    # (as measured when the corpus was made); at t = 0.1 it is the suspect; at a threshold half
    # as large again as its slowdown it is not one, and the note says what fell below.
    case = CASES["gpt-tp2dp2-mapp-layer1.5x-r1"]
    shutil.copytree(case.directory, tmp_path / "job")
    bundle = load_bundle(tmp_path / "job")
    at_ten = detect_bundle(bundle, threshold=0.1)
    assert [(s.rank, s.kind) for s in at_ten.suspects][:1] == [(1, "slow_compute")]
    slowdown = at_ten.suspects[0].slowdown
    assert 1.1 < slowdown < 5.0
    above = detect_bundle(bundle, threshold=1.5 * (slowdown - 1))
    assert above.suspects == []
    assert any(n.startswith("below threshold") and "slow compute 1 " in n for n in above.notes)


def test_without_a_layout_the_slow_rank_is_the_one_that_makes_others_wait(tmp_path):
    # 1. a plain DP2 x TP2 profiler job records no layout: the four ranks run one program and
    # are compared on it, and the rank named is the one stage 2 sees keeping the others waiting
    case = CASES["tp2dp2-plain-prof-1.6x-r1"]
    shutil.copytree(case.directory, tmp_path / "job")
    verdict = detect_bundle(load_bundle(tmp_path / "job"), threshold=0.1)
    top = verdict.suspects[0]
    assert (top.rank, top.kind) == (1, "slow_compute")
    assert top.evidence["lateness"]["net_delay_ms"] > 0      # it made the others wait
    assert "peers by program" in verdict.layout


def _verdict(tmp_path, case_id):
    case = CASES[case_id]
    shutil.copytree(case.directory, tmp_path / "job")
    return detect_bundle(load_bundle(tmp_path / "job"), threshold=0.1)


def test_in_a_plain_ddp_job_the_rank_that_keeps_the_others_waiting_is_named(tmp_path):
    # 1. Plain DDP over one world group, rank 2 running 1.5x the forward matmuls, 4 processes
    # on 2 cores. Single op times say little there (rank 2's backward runs alone, and fast,
    # while the others wait in the all-reduce), but stage 2 measures it directly: rank 2 is
    # last at 4 of the 5 all-reduces and imposes far more waiting than it suffers. Being the
    # only such rank among the ranks of its program, it is the suspect, at a finite slowdown
    # over the threshold, and the evidence says stage 2 stood in.
    verdict = _verdict(tmp_path, "ddp4-prof-fwd1.5x-r2")
    top = verdict.suspects[0]
    assert (top.rank, top.kind) == (2, "slow_compute")
    assert 1.1 < top.slowdown < 2.0
    assert top.evidence["lateness"]["share_last"] >= 0.8
    assert top.evidence["lateness"]["net_delay_ms"] > 0
    assert "stage 2 stands in" in top.evidence["note"]
    assert [s.rank for s in verdict.suspects] == [2]


def test_a_host_stall_before_the_first_op_of_the_first_traced_step_counts(tmp_path):
    # 1. Rank 1's dataset sleeps 20 ms before each batch, at the very start of every step. In
    # the first traced step nothing of rank 1 precedes the sleep, so the idle time is measured
    # from the step's start (ProfilerStep#N): otherwise one of five steps shows no stall, the
    # median excess halves and the host fell below the threshold (1.065x).
    verdict = _verdict(tmp_path, "ddp4-prof-datasleep20ms-r1")
    top = verdict.suspects[0]
    assert (top.rank, top.kind) == (1, "slow_host")
    assert top.slowdown > 1.1
    assert top.evidence["launch_gaps"]["excess_ms_per_iteration"] > 15
    assert not any(n.startswith("below threshold") for n in verdict.notes)


def test_a_stall_that_busy_cores_blur_per_iteration_is_judged_on_all_iterations(tmp_path):
    # 1./host: rank 2 runs 20 ms of untraced work before each microbatch (mapp's capture sees
    # it as idle time between spans). On 2 shared cores one iteration's gaps scatter by tens of
    # ms, so the stall clears the cut-off in only 2 of 4 iterations on its own; its median
    # excess over all four (~70 ms per iteration, positive in every one) is far beyond it.
    verdict = _verdict(tmp_path, "gpt-tp2dp2-mapp-beforemb20ms-r2")
    top = verdict.suspects[0]
    assert top.rank == 2 and top.kind in ("slow_host", "slow_compute")
    assert top.slowdown > 1.1
    assert top.evidence["launch_gaps"]["excess_ms_per_iteration"] > 40
    assert top.evidence["lateness"]["net_delay_ms"] > 0      # its TP peer waited for it
