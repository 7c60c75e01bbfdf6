"""``mapp detect --window N``: the detector run N iterations at a time and the verdicts merged,
so that memory follows the window, not the trace."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest

from mapp.analysis.detect import detect_bundle, detect_windows
from mapp.analysis.ingest import load_bundle
from tests.analysis.detect._sim import simulated

FOUR = dict(iterations=4, tp=2, pp=2, dp=2)


def _top(verdict) -> tuple | None:
    s = verdict.suspects[0] if verdict.suspects else None
    return None if s is None else (s.kind, s.rank)


def test_a_lasting_slow_gpu_is_found_in_every_window_as_at_once(tmp_path):
    out, _ = simulated(tmp_path, "slow_gpu:5:1.4", **FOUR)
    bundle = load_bundle(out)
    whole = detect_bundle(bundle, threshold=0.1)
    merged = detect_windows(bundle, window=2, threshold=0.1)
    assert _top(whole) == _top(merged) == ("slow_compute", 5)
    top = merged.suspects[0]
    assert top.evidence["windows"] == {"found_in": 2, "of": 2, "iterations": [0, 1, 2, 3]}
    assert top.slowdown == pytest.approx(1.4, abs=0.06)
    assert merged.grid.filter(pl.col("rank") == 5)["role"].item() == "suspect"
    assert any("2 windows of 2 iterations" in n for n in merged.notes)


def test_a_fault_that_came_and_went_is_named_with_the_windows_it_struck_in(tmp_path):
    out, _ = simulated(tmp_path, "slow_gpu:3:1.5:2-3", **FOUR)
    merged = detect_windows(load_bundle(out), window=1, threshold=0.1)
    assert _top(merged) == ("slow_compute", 3)
    assert merged.suspects[0].evidence["windows"]["found_in"] == 2     # of 4: two windows are no hiccup
    assert set(merged.suspects[0].iterations) == {2, 3}


def test_one_window_that_stands_out_is_taken_for_noise(tmp_path):
    # slower in one window of two: what a busy host's noise does
    out, _ = simulated(tmp_path, "slow_gpu:3:1.15:3-3", **FOUR)
    bundle = load_bundle(out)
    assert _top(detect_bundle(bundle.window([3]), threshold=0.1)) == ("slow_compute", 3)
    merged = detect_windows(bundle, window=2, threshold=0.1)
    assert merged.suspects == []
    assert any(n.startswith("in one window only (taken for noise)") and "slow compute 3" in n for n in merged.notes)


def test_a_healthy_job_stays_healthy_in_windows(tmp_path):
    out, _ = simulated(tmp_path, **FOUR)
    merged = detect_windows(load_bundle(out), window=1, threshold=0.1)
    assert merged.suspects == []
    assert len(merged.stages) == 3 and all(s.ran for s in merged.stages)


def test_a_window_reads_only_its_iterations_and_leaves_the_jobs_matching_cache_alone(tmp_path):
    out, _ = simulated(tmp_path, **FOUR)
    bundle = load_bundle(out)
    detect_bundle(bundle, threshold=0.1)          # matches the whole job and keeps it
    key = (bundle.cache_dir / "matching" / "key").read_text()
    part = bundle.window([1, 2])
    assert sorted(part.scan().select(pl.col("iteration").unique()).collect()["iteration"].to_list()) == [1, 2]
    assert bundle.traced_iterations() == [0, 1, 2, 3]
    detect_bundle(part, threshold=0.1)
    assert (bundle.cache_dir / "matching" / "key").read_text() == key


def _mapp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mapp", *args], capture_output=True, text=True, timeout=300)


def test_the_command_merges_windows_into_one_verdict(tmp_path):
    out, _ = simulated(tmp_path, "slow_gpu:5:1.4", **FOUR)
    said = _mapp("detect", str(out), "--window", "3", "--json", str(tmp_path / "v.json"))
    assert said.returncode == 0, said.stderr
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert verdict["suspects"][0]["rank"] == 5
    assert verdict["suspects"][0]["evidence"]["windows"]["of"] == 2     # iterations 0-2 and 3


@pytest.mark.parametrize("args, says", [
    (["--window", "0"], "--window 0: must be at least 1"),
    (["--engine", "ray"], "--engine needs --window"),
    (["--window", "2", "--engine", "dask"], "--engine dask: unknown engine"),
    (["--workers", "2"], "--address and --workers need --engine ray"),
])
def test_window_options_that_do_not_fit_get_one_line(tmp_path, args, says):
    out, _ = simulated(tmp_path, **FOUR)
    said = _mapp("detect", str(out), *args)
    assert said.returncode == 2 and says in said.stderr and "Traceback" not in said.stderr, said.stderr


def test_a_rank_below_the_threshold_in_the_windows_is_listed_below_it_in_the_merged_verdict(tmp_path):
    # a 1.06x GPU at a threshold of 0.1: no suspect in any window; the merged verdict lists it
    # below the threshold once, as the whole run's does (and its notes say so)
    out, _ = simulated(tmp_path, "slow_gpu:5:1.06", **FOUR)
    bundle = load_bundle(out)
    whole = detect_bundle(bundle, threshold=0.1)
    merged = detect_windows(bundle, window=2, threshold=0.1)
    assert whole.suspects == merged.suspects == []
    assert [(b.rank, b.kind) for b in whole.below] == [(5, "slow_compute")]
    assert [(b.rank, b.kind) for b in merged.below] == [(5, "slow_compute")]
    assert merged.to_json()["below_threshold"][0]["rank"] == 5
    assert any(n.startswith("below threshold") for n in merged.notes)
