"""The detector on real GPU runs in the original MegatronApp tracer's records
(``tests/corpus/cases-ma``: megatron-core on 2 H200s over NCCL under mapp's capture, rewritten by
``tests/corpus/to_megatronapp.py`` into what the original writes: the layers' forward scopes, the
1F1B steps and p2p calls, no backward layer, no loss). The answer is what was injected.

Before these, that format had been tried on the simulator alone, whose last stage has no output
layer outside the traced scopes and whose pipelines were never judged one rank a stage by their
layers: each PP2 case below was "no suspect" or a slow host on the wrong evidence.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mapp.analysis.detect import detect_bundle
from mapp.analysis.ingest import load_bundle
from mapp.bench.real import load_corpus

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "cases-ma"
CASES = {c.id: c for c in load_corpus(CORPUS)}


def _verdict(tmp_path: Path, case_id: str):
    job = tmp_path / case_id        # a copy: the cache goes beside the traces
    shutil.copytree(CASES[case_id].directory, job)
    return detect_bundle(load_bundle(job), threshold=0.1)


@pytest.mark.parametrize("case_id,rank,kind", [
    # one rank a stage: the stages' ``transformer_layer`` scopes are the same layers' work
    # (compared per microbatch, as mapp's ``layer.forward`` spans are); its own history alone
    # never flagged a GPU whose layers ran 1.19x the other stage's in every step
    ("gpt-pp2-mapp-layer1.5x-r0-gpu2-ma", 0, "slow_compute"),
    # the last stage computes its output layer and loss between its last layer scope and its
    # backward step, outside any scope: its own program, not a host's stall (once the layers
    # were compared, it made this GPU fault a slow host, as it made 20% GPU neighbours there)
    ("gpt-pp2-mapp-layer1.25x-r1-f49-gpu2-ma", 1, "slow_compute"),
    # a sleep before each microbatch still stalls before a forward step: a host
    ("gpt-pp2-mapp-beforemb30ms-r1-v-gpu2-ma", 1, "slow_host"),
    ("gpt-pp2-mapp-hostsleep25ms-r1-f89-gpu2-ma", 1, "slow_host"),
    # TP2: slower than its TP peer between their reductions (right before these changes too)
    ("gpt-tp2-mapp-layer1.5x-r1-gpu2-ma", 1, "slow_compute"),
])
def test_faults_in_the_original_records(tmp_path, case_id, rank, kind):
    assert CASES[case_id].expect["rank"] == rank and kind in CASES[case_id].expect["kinds"]
    v = _verdict(tmp_path, case_id)
    assert [(s.rank, s.kind) for s in v.suspects[:1]] == [(rank, kind)]


@pytest.mark.parametrize("case_id", ["gpt-pp2-mapp-healthy-gpu2-ma", "gpt-pp2-mapp-laststage-gpu2-ma",
                                     "gpt-pp2-mapp-laststage3of4-f85-gpu2-ma", "gpt-dp2-mapp-healthy-gpu2-ma",
                                     "gpt-tp2-mapp-healthy-gpu2-ma"])
def test_no_fault_in_the_original_records_has_no_suspect(tmp_path, case_id):
    assert CASES[case_id].negative
    assert _verdict(tmp_path, case_id).suspects == []


def test_a_slow_gpu_of_two_data_parallel_ranks(tmp_path):
    # no collective recorded (the original records no gradient reduction without a pipeline):
    # stage 1's finding, slower in every iteration, stands alone
    v = _verdict(tmp_path, "gpt-dp2-mapp-layer1.5x-r1-gpu2-ma")
    assert [(s.rank, s.kind) for s in v.suspects] == [(1, "slow_compute")]
    assert v.suspects[0].evidence["lateness"] is None
