"""``mapp report`` end to end on a simulated run."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from mapp.analysis.simulate import SimConfig, parse_fault, simulate
from mapp.cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("reportcli")
    simulate(SimConfig(tp=2, pp=2, dp=1, microbatches=4, iterations=2, layers=8, hidden=1024,
                       faults=[parse_fault("slow_gpu:3:1.5")]), directory)
    return directory


def test_report_and_html(run_dir, tmp_path):
    target = tmp_path / "report.html"
    result = runner.invoke(app, ["report", str(run_dir), "--html", str(target), "--skip", "1"])
    assert result.exit_code == 0, result.output
    for heading in ("mapp report", "iteration time", "pipeline bubbles", "p2p bandwidth", "first 1 left out"):
        assert heading in result.output
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_report_with_db_and_no_detect(run_dir, tmp_path):
    result = runner.invoke(app, ["report", str(run_dir), "--db", str(tmp_path / "r.duckdb"), "--no-detect"])
    assert result.exit_code == 0, result.output
    assert "straggler verdict" not in result.output


@pytest.mark.parametrize("args, message", [
    (["{missing}"], "not a directory"),
    (["{run}", "--skip", "-1"], "--skip -1"),
    (["{run}", "--html", "{missing}/x/report.html"], "cannot write"),
])
def test_bad_input_is_one_line(run_dir, tmp_path, args, message):
    args = [a.replace("{run}", str(run_dir)).replace("{missing}", str(tmp_path / "nope")) for a in args]
    result = runner.invoke(app, ["report", *args])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.output


def test_report_matches_and_aligns_once(tmp_path, monkeypatch):
    # the SQL schema and the detector share one Analysis (issue 15): one matching, one clock
    import mapp.analysis.run as run
    from mapp.cli.app import app
    from tests.analysis.detect._sim import simulated

    out, _ = simulated(tmp_path, "slow_gpu:1:1.3", tp=2, pp=1, dp=2)
    calls = {"match": 0, "align": 0}
    match, align = run.match_bundle, run.align_bundle

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    import mapp.analysis.align as align_package
    import mapp.analysis.graph as graph_package

    # wherever it is called from: the package's name and the one run.py imported
    for module in (run, graph_package):
        monkeypatch.setattr(module, "match_bundle", counted("match", match))
    for module in (run, align_package):
        monkeypatch.setattr(module, "align_bundle", counted("align", align))
    calls.update(match=0, align=0)
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    assert "slow compute" in result.output  # the detector ran, on the same analysis
    assert calls == {"match": 1, "align": 1}
