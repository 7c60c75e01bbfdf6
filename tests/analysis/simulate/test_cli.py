"""``mapp simulate`` through Typer: output, one-line errors and exit codes."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from mapp.cli.simulate import commands

app = typer.Typer()
app.add_typer(commands)  # registered as mapp.cli.app registers it


@app.callback()
def _root() -> None:
    """Test root so that ``simulate`` is a subcommand."""


runner = CliRunner()
BASE = ["simulate", "--tp", "2", "--pp", "2", "--dp", "2", "--layers", "4", "--hidden", "512",
        "--seq-length", "256", "--microbatches", "4", "--iterations", "2"]


def test_simulate_writes_traces_and_key(tmp_path):
    out = tmp_path / "o"
    result = runner.invoke(app, [*BASE, "-o", str(out), "--fault", "slow_gpu:1:1.4",
                                 "--fault", "slow_gpu:2:2.0:1-1", "--seed", "7", "--no-skew"])
    assert result.exit_code == 0, result.output
    assert "simulated 8 ranks" in result.output
    truth = json.loads((out / "ground_truth.json").read_text())
    assert [f["rank"] for f in truth["faults"]] == [1, 2]
    assert truth["faults"][1]["iterations"] == [1, 1]
    assert truth["config"]["skew"] is False and truth["config"]["seed"] == 7
    assert len(list(out.glob("rank-*.json"))) == 8


def one_line_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert "Traceback" not in result.output
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error:")
    return lines[0]


def test_bad_fault_is_one_line(tmp_path):
    result = runner.invoke(app, [*BASE, "-o", str(tmp_path / "o"), "--fault", "slow_gpu:x"])
    assert result.exit_code == 2
    assert "slow_gpu:x" in one_line_error(result)


def test_impossible_layout_is_one_line(tmp_path):
    result = runner.invoke(app, [*BASE, "-o", str(tmp_path / "o"), "--layers", "5"])
    assert result.exit_code == 2
    assert "--layers 5" in one_line_error(result)


def test_existing_traces_need_force(tmp_path):
    out = str(tmp_path / "o")
    assert runner.invoke(app, [*BASE, "-o", out]).exit_code == 0
    again = runner.invoke(app, [*BASE, "-o", out])
    assert again.exit_code == 4 and "--force" in one_line_error(again)
    assert runner.invoke(app, [*BASE, "-o", out, "--force", "--format", "megatronapp"]).exit_code == 0
