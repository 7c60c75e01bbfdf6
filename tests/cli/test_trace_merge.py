"""``mapp trace merge`` end to end: the merged file, and every bad input getting one line."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mapp.cli.app import app
from tests.v1_builder import job

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def merge(*args: str):
    return runner.invoke(app, ["trace", "merge", *args])


def one_line_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error:")
    return lines[0]


def test_merged_trace_has_every_event_named_processes_and_lanes(tmp_path):
    traces = job(tmp_path, tp=2, pp=2, dp=2, events_per_rank=3)
    out = tmp_path / "out" / "merged.json"
    out.parent.mkdir()
    result = merge(str(tmp_path), "-o", str(out))
    assert result.exit_code == 0, result.output
    trace = json.loads(out.read_text())
    events = trace["traceEvents"]
    timed = [e for e in events if e["ph"] == "X"]
    assert len(timed) == sum(len(t.events) for t in traces)
    assert sorted({e["pid"] for e in timed}) == list(range(8))
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names[5] == "rank 5 · dp0 pp1 tp1"
    order = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
    by_position = [pid for pid, _ in sorted(order.items(), key=lambda kv: kv[1])]
    # (pp, tp, dp) order: stage 0's tp0 replicas first, then its tp1 ones, then stage 1.
    assert by_position == [0, 2, 1, 3, 4, 6, 5, 7]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert set(threads.values()) == {"compute", "comm"}
    reduce = next(e for e in timed if e["name"] == "all_reduce" and e["pid"] == 3)
    assert threads[(3, reduce["tid"])] == "comm"
    assert reduce["args"]["group_ranks"] == [1, 3, 5, 7] and reduce["args"]["bytes"] == 4096
    assert reduce["ts"] == pytest.approx(300.0) and reduce["dur"] == pytest.approx(50.0)
    assert (tmp_path / ".mapp" / "events.parquet").exists()


def test_default_output_lands_beside_the_traces_and_is_not_read_back(tmp_path):
    job(tmp_path, dp=2)
    assert merge(str(tmp_path)).exit_code == 0
    assert (tmp_path / "merged.json").exists()
    result = merge(str(tmp_path), "--no-cache")
    assert result.exit_code == 0, result.output
    assert "from 2 ranks" in result.output


def test_missing_directory(tmp_path):
    assert "does not exist" in one_line_error(merge(str(tmp_path / "nope")))


def test_empty_directory(tmp_path):
    assert "is empty" in one_line_error(merge(str(tmp_path)))


def test_directory_with_no_recognisable_traces(tmp_path):
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    assert "no recognisable traces" in one_line_error(merge(str(tmp_path)))


def test_a_directory_holding_only_a_merged_trace_says_so(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "out").mkdir()
    job(tmp_path / "run", dp=2)
    assert merge(str(tmp_path / "run"), "-o", str(tmp_path / "out" / "merged.json")).exit_code == 0
    line = one_line_error(merge(str(tmp_path / "out")))
    assert "holds only mapp's merged trace (merged.json)" in line and "merged from" in line


def test_file_that_is_not_json(tmp_path):
    job(tmp_path, dp=2)
    (tmp_path / "rank-00001.json").write_text("[\nthis is not json\n")
    line = one_line_error(merge(str(tmp_path)))
    assert "rank-00001.json" in line


def test_truncated_file_is_salvaged_and_merged(tmp_path):
    job(tmp_path, dp=2, events_per_rank=3)
    path = tmp_path / "rank-00000.json"
    path.write_text(path.read_text()[:-30])
    result = merge(str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "rank-00000.json" in result.output and "cut off" in result.output
    events = json.loads((tmp_path / "merged.json").read_text())["traceEvents"]
    assert len([e for e in events if e["ph"] == "X"]) == 11


def test_two_files_claiming_the_same_rank(tmp_path):
    job(tmp_path, dp=2)
    shutil.copy(tmp_path / "rank-00000.json", tmp_path / "rank-00005.json")
    assert "rank 0 is claimed by more than one file" in one_line_error(merge(str(tmp_path)))


def test_ranks_disagreeing_on_layout(tmp_path):
    job(tmp_path, dp=2)
    path = tmp_path / "rank-00000.json"
    path.write_text(path.read_text().replace('"world_size":2', '"world_size":4', 1))
    assert "disagree on world_size" in one_line_error(merge(str(tmp_path)))


def test_mix_of_formats(tmp_path):
    job(tmp_path, dp=2)
    for fixture in (FIXTURES / "megatronapp").glob("benchmark-data-*.json"):
        shutil.copy(fixture, tmp_path)
    line = one_line_error(merge(str(tmp_path)))
    assert "mixes trace formats" in line and "--format" in line
    assert merge(str(tmp_path), "--format", "mapp").exit_code == 0


def test_unwritable_output_path_keeps_existing_files(tmp_path):
    job(tmp_path, dp=2)
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me")
    line = one_line_error(merge(str(tmp_path), "-o", str(blocker / "merged.json")))
    assert "cannot write" in line
    assert blocker.read_text() == "keep me"
    assert "cannot write" in one_line_error(merge(str(tmp_path), "-o", "/proc/merged.json"))


def test_output_over_an_input_trace_is_refused(tmp_path):
    job(tmp_path, dp=2)
    before = (tmp_path / "rank-00001.json").read_text()
    line = one_line_error(merge(str(tmp_path), "-o", str(tmp_path / "rank-00001.json")))
    assert "one of the input traces" in line
    assert (tmp_path / "rank-00001.json").read_text() == before


def test_failed_merge_leaves_previous_output_intact(tmp_path):
    job(tmp_path, dp=2)
    out = tmp_path / "merged.json"
    assert merge(str(tmp_path), "-o", str(out)).exit_code == 0
    good = out.read_text()
    (tmp_path / "rank-00001.json").write_text("[\nnot json at all\n")
    one_line_error(merge(str(tmp_path), "-o", str(out)))
    assert out.read_text() == good


def test_console_script_exits_non_zero_without_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mapp", "trace", "merge", str(tmp_path / "none")],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("error:") and "Traceback" not in result.stderr


def test_output_onto_a_pipe_is_refused_and_the_pipe_kept(tmp_path):
    job(tmp_path, dp=2)
    pipe = tmp_path / "out.fifo"
    os.mkfifo(pipe)
    assert "not a regular file" in one_line_error(merge(str(tmp_path), "-o", str(pipe)))
    assert stat.S_ISFIFO(pipe.lstat().st_mode)


def test_output_through_a_symlink_replaces_the_file_it_points_at(tmp_path):
    (tmp_path / "traces").mkdir()
    job(tmp_path / "traces", dp=2)
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert merge(str(tmp_path / "traces"), "-o", str(link)).exit_code == 0
    assert link.is_symlink() and link.resolve() == target
    assert len(json.loads(target.read_text())["traceEvents"]) > 0


def test_written_files_get_the_usual_mode(tmp_path):
    job(tmp_path, dp=2)
    old = os.umask(0o022)
    try:
        assert merge(str(tmp_path)).exit_code == 0
    finally:
        os.umask(old)
    for path in (tmp_path / "merged.json", tmp_path / ".mapp" / "events.parquet"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def _kineto_job(directory: Path) -> Path:
    directory.mkdir()
    for fixture in sorted((FIXTURES / "kineto_gloo").glob("rank-*.json")):
        shutil.copy(fixture, directory / fixture.name)
    return directory


def test_damaged_profiler_trace_named_like_one_is_an_error(tmp_path):
    traces = _kineto_job(tmp_path / "traces")
    (traces / "worker1.1700000000.pt.trace.json").write_text("garbage")
    line = one_line_error(merge(str(traces)))
    assert "worker1.1700000000.pt.trace.json" in line and "kineto" in line


def test_other_json_beside_profiler_traces_is_named_not_dropped_silently(tmp_path):
    traces = _kineto_job(tmp_path / "traces")
    (traces / "notes.json").write_text("garbage")
    result = merge(str(traces))
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "notes.json" in line]
    assert len(warnings) == 1 and "not PyTorch profiler traces" in warnings[0]
    # the second run finds mapp's own merged.json beside the traces: not counted, not named
    again = [line for line in merge(str(traces)).output.splitlines() if "not PyTorch profiler traces" in line]
    assert len(again) == 1 and "skipped 1 " in again[0] and "merged.json" not in again[0]


def test_two_ranks_claiming_the_same_coordinates(tmp_path):
    job(tmp_path, dp=2)
    path = tmp_path / "rank-00001.json"
    path.write_text(path.read_text().replace('"dp":1', '"dp":0', 1))
    line = one_line_error(merge(str(tmp_path)))
    assert "ranks 0, 1 all claim" in line and "dp0" in line
