"""``mapp demo``, the README's first command: simulate, merge, and name the slowed GPU."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from mapp.analysis.simulate.presets import DEMO_SLOW_RANK
from mapp.cli.app import app


def test_demo_writes_traces_and_a_merged_timeline(tmp_path):
    out = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert len(list(out.glob("rank-*.json"))) == 64
    truth = json.loads((out / "ground_truth.json").read_text())
    assert truth["faults"][0]["rank"] == DEMO_SLOW_RANK
    merged = json.loads((out / "merged.json").read_text())["traceEvents"]
    assert {e["pid"] for e in merged if e["ph"] == "X"} == set(range(64))
    # The detector's suspects table names the slowed GPU first.
    assert re.search(rf"1 │\s+{DEMO_SLOW_RANK} │ .* │ slow compute", result.output), result.output
    assert (out / ".mapp" / "clock.json").exists()
    again = CliRunner().invoke(app, ["demo", "-o", str(out)])
    assert again.exit_code != 0 and "--force" in again.output
