"""``mapp detect`` and ``mapp bench detect`` end to end: output, JSON, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

from typer.testing import CliRunner

from mapp.cli.app import app
from tests.analysis.detect._sim import simulated

runner = CliRunner()


def one_line_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error:")
    return lines[0]


def test_detect_prints_the_suspect_and_writes_json(tmp_path):
    out, _ = simulated(tmp_path, "slow_gpu:9:1.3", tp=2, pp=2, dp=4)
    target = tmp_path / "verdict.json"
    result = runner.invoke(app, ["detect", str(out), "--json", str(target)])
    assert result.exit_code == 0, result.output
    assert "1 suspect" in result.output and "slow compute" in result.output
    data = json.loads(target.read_text())
    assert data["suspects"][0]["rank"] == 9 and data["suspects"][0]["kind"] == "slow_compute"
    assert data["healthy"] is False


def test_fail_on_suspect_sets_the_exit_code(tmp_path):
    out, _ = simulated(tmp_path, "slow_gpu:9:1.3", tp=2, pp=2, dp=4)
    assert runner.invoke(app, ["detect", str(out), "--fail-on-suspect"]).exit_code == 1
    healthy, _ = simulated(tmp_path, name="ok", tp=2, pp=2, dp=4)
    result = runner.invoke(app, ["detect", str(healthy), "--fail-on-suspect"])
    assert result.exit_code == 0 and "no suspect" in result.output


def test_bad_arguments_are_one_line(tmp_path):
    out, _ = simulated(tmp_path, tp=2, pp=1, dp=2)
    assert "--layout" in one_line_error(runner.invoke(app, ["detect", str(out), "--layout", "tp=two"]))
    assert "--threshold" in one_line_error(runner.invoke(app, ["detect", str(out), "--threshold", "0"]))
    one_line_error(runner.invoke(app, ["detect", str(tmp_path / "missing")]))
    assert "--scale" in one_line_error(runner.invoke(app, ["bench", "detect", "--scale", "huge"]))


def test_commands_have_help():
    for args in (["detect", "--help"], ["bench", "detect", "--help"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "Usage" in result.output


def test_json_verdict_is_published_with_the_usual_mode_and_never_over_a_pipe(tmp_path):
    out, _ = simulated(tmp_path, tp=2, pp=1, dp=2)
    pipe = tmp_path / "verdict.fifo"
    os.mkfifo(pipe)
    result = runner.invoke(app, ["detect", str(out), "--json", str(pipe)])
    assert result.exit_code != 0 and "not a regular file" in result.output
    assert stat.S_ISFIFO(pipe.lstat().st_mode)
    old = os.umask(0o022)
    try:
        assert runner.invoke(app, ["detect", str(out), "--json", str(tmp_path / "v.json")]).exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "v.json").stat().st_mode) == 0o644
    assert not list(tmp_path.glob(".v.json.*"))  # no temporary file left behind


def test_bench_detect_scores_a_real_corpus_and_leaves_it_unwritten(tmp_path):
    import shutil
    from pathlib import Path

    source = Path(__file__).resolve().parents[1] / "corpus" / "cases"
    cases = [c for c in json.loads((source / "manifest.json").read_text())["cases"]
             if c["id"] in ("tp2dp2-plain-prof-healthy", "tp2dp2-plain-prof-2.5x-r2")]
    for c in cases:
        shutil.copytree(source / c["path"], tmp_path / c["path"])
    cases.append({**cases[0], "id": "wrong-on-purpose", "expect": {"suspect": {"rank": 0, "kinds": ["slow_link"]}}})
    (tmp_path / "manifest.json").write_text(json.dumps({"version": 1, "cases": cases}))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = runner.invoke(app, ["bench", "detect", "--scale", "none", "--real", str(tmp_path)],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[-1] for line in result.output.splitlines()
            if line.strip() and line.split()[0] in {c["id"] for c in cases}}
    assert rows == {"tp2dp2-plain-prof-healthy": "yes", "tp2dp2-plain-prof-2.5x-r2": "yes", "wrong-on-purpose": "NO"}
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before   # no cache beside the corpus


def test_bench_detect_real_without_a_manifest_is_one_line(tmp_path):
    line = one_line_error(runner.invoke(app, ["bench", "detect", "--scale", "none", "--real", str(tmp_path)]))
    assert "manifest.json" in line


def test_input_format_is_one_option_and_the_former_name_still_works(tmp_path):
    # --input-format on every command that reads traces; detect and merge took --format before
    out, _ = simulated(tmp_path, "slow_gpu:1:1.3", tp=2, pp=1, dp=2)
    for spelling in ("--input-format", "--format"):
        result = runner.invoke(app, ["detect", str(out), spelling, "mapp"])
        assert result.exit_code == 0 and "1 suspect" in result.output, (spelling, result.output)
    wrong = one_line_error(runner.invoke(app, ["detect", str(out), "--input-format", "kineto"]))
    assert "PyTorch profiler" in wrong  # read as the format asked for, which these are not
    both = one_line_error(runner.invoke(app, ["detect", str(out), "--input-format", "mapp", "--format", "kineto"]))
    assert "give the input format once" in both
    for command in (["detect"], ["trace", "merge"], ["sql"], ["report"]):
        help_text = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"}).output
        assert "--input-format" in help_text, command


def test_one_traced_rank_gets_no_verdict_rather_than_a_clean_bill(tmp_path):
    # a real one-GPU profiler trace: with nobody to compare it with, "no suspect ... slower than
    # its peers" would claim a health nobody measured
    source = Path(__file__).parents[1] / "fixtures" / "kineto_nccl_h200" / "rank-0.json"
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(source, alone / "rank-0.json")
    result = runner.invoke(app, ["detect", str(alone), "--no-cache"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("no verdict: one traced rank, no peer to compare it with"), first
    assert "no suspect" not in result.output
    assert "1 traced rank," in result.output
    # the JSON says the same: nothing compared, so no "healthy": true for scripts to trust
    verdict_path = tmp_path / "verdict.json"
    result = runner.invoke(app, ["detect", str(alone), "--json", str(verdict_path)])
    assert result.exit_code == 0, result.output
    data = json.loads(verdict_path.read_text())
    assert data["compared"] is False and data["healthy"] is None and data["suspects"] == [], data
