"""``mapp demo``, the README's first command: simulate, merge, and name the slowed GPU."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mapp.analysis.simulate.presets import DEMO_SLOW_RANK, demo_config
from mapp.cli.app import app


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """One demo run (a few seconds), shared: tests that change its directory work on a copy."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    return out, CliRunner().invoke(app, ["demo", "-o", str(out)])


def _files(directory: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_demo_writes_traces_and_a_merged_timeline(first_run):
    out, result = first_run
    assert result.exit_code == 0, result.output
    assert len(list(out.glob("rank-*.json"))) == 64
    truth = json.loads((out / "ground_truth.json").read_text())
    assert truth["faults"][0]["rank"] == DEMO_SLOW_RANK
    merged = json.loads((out / "merged.json").read_text())["traceEvents"]
    assert {e["pid"] for e in merged if e["ph"] == "X"} == set(range(64))
    # The detector's suspects table names the slowed GPU first.
    assert re.search(rf"1 │\s+{DEMO_SLOW_RANK} │ .* │ slow compute", result.output), result.output
    assert (out / ".mapp" / "clock.json").exists()


def _refused(out: Path) -> None:
    """``mapp demo -o OUT`` fails with one line and leaves every file in OUT as it was."""
    before = _files(out)
    result = CliRunner().invoke(app, ["demo", "-o", str(out)])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and str(out) in lines[0], result.output
    assert _files(out) == before


def test_demo_runs_again_over_its_own_output_and_nothing_else(first_run, tmp_path):
    out = tmp_path / "demo"
    shutil.copytree(first_run[0], out)
    names = sorted(p.relative_to(out) for p in out.rglob("*"))
    again = CliRunner().invoke(app, ["demo", "-o", str(out), "--seed", "8"])
    assert again.exit_code == 0, again.output
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == names
    assert json.loads((out / "ground_truth.json").read_text())["config"]["seed"] == 8  # replaced, not kept
    (out / "notes.txt").write_text("mine")
    _refused(out)


def test_demo_refuses_traces_it_did_not_write(tmp_path):
    out = tmp_path / "job"
    out.mkdir()
    (out / "rank-00000.json").write_text('{"traceEvents": []}')   # a user's trace, no ground truth
    _refused(out)
    (out / "ground_truth.json").write_text(json.dumps({"format": "mapp-simulation", "layout": {"tp": 1}}))
    _refused(out)  # another simulation's key, not the demo's


def test_readme_describes_the_demo_it_runs():
    c = demo_config()
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"{c.world_size}-rank job (TP{c.tp} x PP{c.pp} x DP{c.dp})" in readme
