"""``mapp sql``'s ``snapshots`` table: MegaScope snapshots under a bundle, read from their JSON
indexes without torch, one row per tensor with the full activation's statistics."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from mapp.capture.snapshots import write_snapshot
from mapp.cli.app import app
from mapp.snapshot_format import read_snapshot
from tests.v1_builder import job

runner = CliRunner()


def _snapshot(directory, step: int) -> None:
    rows = [np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((2, 2), dtype=np.float32)]
    write_snapshot(directory, step, source="training", reducer="rms", bins=2, prompts=["abc", "xy"],
                   tokens=[["a", "b", "c"], ["x", "y"]],
                   layers=[{"layer": 1, "q": rows, "fc1": rows}],
                   attention={1: np.full((2, 1, 3, 3), 1 / 3, dtype=np.float32)},
                   residual={1: np.zeros((2, 3, 4), dtype=np.float32)},
                   stats={1: {"q": [0.5, 1.0, -2.0, 3.0, 3.0, 1.2, 0.25], "fc1": [0.0] * 7}})


def test_snapshots_table_has_one_row_per_tensor(tmp_path):
    job(tmp_path, tp=2, dp=1, events_per_rank=3)
    for step in (10, 20):
        _snapshot(tmp_path / "scope", step)
    result = runner.invoke(app, ["sql", str(tmp_path), "--format", "json", "-c",
                                 "SELECT step, tensor, kind, numel, mean, absmax, zeros FROM snapshots ORDER BY step, tensor"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["step"], r["tensor"]) for r in rows] == [
        (s, t) for s in (10, 20) for t in ("layer1.attention", "layer1.fc1", "layer1.hidden", "layer1.q")]
    q = rows[3]
    assert (q["kind"], q["numel"], q["mean"], q["absmax"], q["zeros"]) == ("q", 12, 0.5, 3.0, 0.25)
    hidden = rows[2]
    assert hidden["kind"] == "hidden" and hidden["numel"] == 24 and hidden["zeros"] == 1.0


def test_a_snapshot_reads_back_with_its_rows_padded(tmp_path):
    _snapshot(tmp_path, 5)
    snap = read_snapshot(tmp_path / "step-00000005.json")
    q = snap.get(1, "q")
    assert q.shape == (2, 3, 2)
    np.testing.assert_array_equal(q[0], np.arange(6).reshape(3, 2))
    assert np.isnan(q[1, 2]).all()
    assert snap.meta["tokens"] == [["a", "b", "c"], ["x", "y"]]


def test_no_snapshots_means_an_empty_table(tmp_path):
    job(tmp_path, tp=2, dp=1, events_per_rank=3)
    result = runner.invoke(app, ["sql", str(tmp_path), "--format", "json", "-c", "SELECT count(*) AS n FROM snapshots"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [{"n": 0}]
