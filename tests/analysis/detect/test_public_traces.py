"""The detector on public traces that mapp did not make and that carry no answer
(``tests/fixtures/hta_trace_filter``: 2 of a 128-rank job's ranks, a sample of their events, no
process group recorded): what it must be is coherent."""

from __future__ import annotations

import shutil
from pathlib import Path

from mapp.analysis.detect import detect_bundle
from mapp.analysis.ingest import load_bundle

HTA = Path(__file__).resolve().parents[2] / "fixtures" / "hta_trace_filter"


def test_two_ranks_each_slower_than_the_other_are_neither_named(tmp_path):
    # rank 0 reads 1.73x its peer, rank 1 1.17x, each on ops of its own; with the calls' groups
    # unknown in a world of 128, no collective is timed and nothing says who waits on whom.
    # Before: first rank 1 "slow host" from collectives paired by call order (6 of 10 pairs of
    # different sizes), then, with those set aside, both ranks "slow compute"
    shutil.copytree(HTA, tmp_path / "hta", ignore=shutil.ignore_patterns("*.md", "LICENSE"))
    verdict = detect_bundle(load_bundle(tmp_path / "hta"), threshold=0.1)
    assert verdict.suspects == []
    mirrored = [n for n in verdict.notes if "each of the two ranks reads slower than the other" in n]
    assert [n.split()[1] for n in mirrored] == ["0", "1"]
    assert any("126 ranks were not recorded" in n for n in verdict.notes)
