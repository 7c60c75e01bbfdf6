"""One output policy for every command that writes (issue 14): no output replaces an input trace
or lands in the cache or adds a trace-like file to the bundle; the path is checked before any
analysis; ``-`` is stdout, which then carries the output alone."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.analysis.detect._sim import simulated


def _hashes(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def mapp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mapp", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in lines[0], lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A bundle that has never been read (no cache yet): a refused command must leave it so."""
    out, _ = simulated(tmp_path_factory.mktemp("policy"), "slow_gpu:1:1.3", tp=2, pp=1, dp=2)
    return out


@pytest.mark.parametrize("command, option, name, words", [
    ("detect", "--json", "rank-00001.json", ["would replace one of the input traces"]),
    ("report", "--html", "rank-00002.json", ["would replace one of the input traces"]),
    ("trace merge", "-o", "rank-00003.json", ["would replace one of the input traces"]),
    ("detect", "--json", "verdict.json", ["would be read as a trace"]),
    ("report", "--html", ".mapp/events.parquet", ["inside mapp's cache"]),
    ("detect", "--json", ".mapp/manifest.json", ["inside mapp's cache"]),
    ("report", "--db", "run.duckdb", ["inside the trace bundle"]),
    ("sql", "--allow-files", ".", ["overlaps the trace bundle"]),
])
def test_outputs_into_the_bundle_are_refused_before_any_work(fresh, command, option, name, words):
    before = _hashes(fresh)
    extra = ["-c", "SELECT 1"] if command == "sql" else []
    refused(mapp(*command.split(), fresh, option, fresh / name, *extra), *words)
    assert _hashes(fresh) == before  # nothing replaced, and no cache built: refused before reading
    assert not (fresh / ".mapp").exists()


def test_a_symlink_outside_the_bundle_to_an_input_trace_is_refused(fresh, tmp_path):
    link = tmp_path / "looks-harmless.json"
    link.symlink_to(fresh / "rank-00000.json")
    before = _hashes(fresh)
    refused(mapp("detect", fresh, "--json", link), "one of the input traces")
    assert _hashes(fresh) == before


def test_a_bad_output_directory_is_reported_before_the_analysis(fresh, tmp_path):
    refused(mapp("detect", fresh, "--json", tmp_path / "missing" / "v.json"), "does not exist")
    assert not (fresh / ".mapp").exists()


def test_dash_sends_the_verdict_alone_to_stdout(tmp_path):
    out, _ = simulated(tmp_path, "slow_gpu:1:1.3", tp=2, pp=1, dp=2)
    proc = mapp("detect", out, "--json", "-")
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)  # stdout is the JSON and nothing else
    assert verdict["suspects"][0]["rank"] == 1
    assert "suspect" in proc.stderr  # the report went to stderr
    assert not (tmp_path / "-").exists() and not Path("-").exists()


def test_dash_sends_the_page_and_the_merged_trace_to_stdout(tmp_path):
    out, _ = simulated(tmp_path, tp=2, pp=1, dp=2)
    page = mapp("report", out, "--html", "-", "--no-detect")
    assert page.returncode == 0, page.stderr
    assert page.stdout.lstrip().startswith("<!DOCTYPE html>") and page.stdout.rstrip().endswith("</html>")
    merged = mapp("trace", "merge", out, "-o", "-")
    assert merged.returncode == 0, merged.stderr
    events = json.loads(merged.stdout)["traceEvents"]
    assert {e["pid"] for e in events if e.get("ph") == "X"} == {0, 1, 2, 3}
    assert "merged" in merged.stderr and not (out / "merged.json").exists()


def test_a_merged_trace_may_be_written_again_beside_the_traces(tmp_path):
    out, _ = simulated(tmp_path, tp=2, pp=1, dp=2)
    for _ in range(2):  # the second run replaces mapp's own output, which is not an input
        proc = mapp("trace", "merge", out, "-o", out / "timeline.json")
        assert proc.returncode == 0, proc.stderr
    assert "mapp-merged" in (out / "timeline.json").read_text()[:4096]
