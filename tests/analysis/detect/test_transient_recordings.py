"""The detector on a fault that sets in midway, recorded held out (tests/corpus/cases-fresh,
``make_corpus.py --set fresh194``: 4 gloo processes on 2 CPUs, the profiler): megatron-core
TP2 x DP2 whose rank 1 runs 1.6x its layers' matmuls from iteration 3 on (``--slow-from 3``),
iterations 2-5 traced. Named on its first recording, and only for the iterations the fault
acted in; the test keeps it so."""

from __future__ import annotations

from pathlib import Path

from mapp.analysis.detect import detect_bundle
from mapp.analysis.ingest import load_bundle
from mapp.bench.real import load_corpus

FRESH = {c.id: c for c in load_corpus(Path(__file__).resolve().parents[2] / "corpus" / "cases-fresh")}


def test_a_fault_from_the_second_traced_iteration_on_is_named_for_those_iterations_only():
    case = FRESH["gpt-tp2dp2-prof-layer1.6x-r1-from3-f194"]
    assert case.injected[0]["from_iteration"] == 3
    verdict = detect_bundle(load_bundle(case.directory), threshold=0.1)
    assert [(s.rank, s.kind) for s in verdict.suspects] == [(1, "slow_compute")]
    assert verdict.suspects[0].iterations == [3, 4, 5]   # not iteration 2, before it set in
