"""The detector on real MegatronApp traces (``tests/fixtures/megatronapp_original``: two PP4 runs,
4 RTX 4090s, the original tracer of June 2025, nothing injected): the heavier last stage, which
carries the output layer and the loss, is the workload's imbalance, not a slow GPU (issue 13's
class 3)."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from mapp.analysis.detect import detector
from mapp.analysis.ingest import load_bundle

ORIGINAL = pathlib.Path(__file__).parent.parent.parent / "fixtures" / "megatronapp_original"


def _step_ms(path: pathlib.Path) -> float:
    """Forward and backward time in the file, from its own B/E records (each name's pairs follow
    one another, none nested in another of its name)."""
    total, begun = 0, {}
    for r in json.loads(path.read_text()):
        if r["name"] in ("forward", "backward"):
            if r["ph"] == "B":
                begun[r["name"]] = r["rel_ts"]
            else:
                total += r["rel_ts"] - begun.pop(r["name"])
    return total / 1e6


@pytest.mark.parametrize("run", ["pp", "app"])
def test_the_heavier_last_stage_is_imbalance_not_a_slow_gpu(tmp_path, run):
    computed = {p: _step_ms(ORIGINAL / run / f"benchmark-data-0-pipeline-{p}-tensor-0.json") for p in range(4)}
    heaviest = max(computed, key=computed.get)
    assert heaviest == 3 and computed[3] > 1.5 * min(computed.values())   # what the files say

    job = tmp_path / run        # a copy: the cache goes beside the traces
    shutil.copytree(ORIGINAL / run, job)
    verdict = detector.detect_bundle(load_bundle(job), threshold=0.1)
    assert verdict.suspects == [] and verdict.below == []
    stages = {i.evidence["stage"]: i.evidence["ratio"] for i in verdict.imbalance if i.kind == "stage"}
    assert heaviest in stages and stages[heaviest] == max(stages.values())
