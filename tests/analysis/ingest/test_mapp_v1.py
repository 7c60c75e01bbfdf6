"""The v1 reader and the bundle it feeds: columns, line numbers, salvage, cache, validation."""

from __future__ import annotations

import os

import polars as pl
import pytest

from mapp.analysis.ingest import load_bundle
from mapp.errors import InputError, LayoutError, TraceFormatError
from tests.v1_builder import RankTrace, job

LAYOUT = {"tp": 2, "pp": 1, "dp": 1, "cp": 1, "ep": 1}


def two_ranks(tmp_path):
    a = RankTrace(0, 2, LAYOUT, {"tp": 0, "pp": 0, "dp": 0, "cp": 0, "ep": 0})
    a.x("forward", "compute", 10.0, 5.5, iteration=3, microbatch=1, chunk=0, layer=7, note="kept")
    a.x("all_reduce", "collective", 16.25, 2.0, lane="comm", iteration=3, group="tp", group_ranks=[0, 1], seq=0,
        bytes=1024, dtype="bf16")
    b = RankTrace(1, 2, LAYOUT, {"tp": 1, "pp": 0, "dp": 0, "cp": 0, "ep": 0})
    b.x("send", "p2p", 86_400_000_123.457, 1.0, lane="comm", iteration=3, peer=0, seq=4, bytes=64)
    a.write(tmp_path), b.write(tmp_path)


def test_columns_are_lifted_from_args(tmp_path):
    two_ranks(tmp_path)
    events = load_bundle(tmp_path).events.sort("rank", "ts_ns")
    forward, reduce, send = events.iter_rows(named=True)
    assert (forward["rank"], forward["tp"], forward["name"], forward["cat"], forward["lane"]) == (0, 0, "forward", "compute", "compute")
    assert (forward["ts_ns"], forward["dur_ns"]) == (10_000, 5_500)
    assert (forward["iteration"], forward["microbatch"], forward["chunk"], forward["layer"]) == (3, 1, 0, 7)
    assert '"note":"kept"' in forward["args"]
    assert (reduce["group"], reduce["group_ranks"], reduce["seq"], reduce["bytes"]) == ("tp", [0, 1], 0, 1024)
    assert reduce["ts_ns"] == 16_250
    assert (send["rank"], send["tp"], send["peer"], send["seq"], send["bytes"]) == (1, 1, 0, 4, 64)
    # A day-long microsecond clock keeps nanosecond precision.
    assert send["ts_ns"] == 86_400_000_123_457


def test_source_file_and_line_point_at_the_event(tmp_path):
    two_ranks(tmp_path)
    events = load_bundle(tmp_path).events.filter(pl.col("rank") == 0).sort("ts_ns")
    # line 1 is "[", lines 2-3 the metadata events, events follow one per line.
    assert events["src_line"].to_list() == [4, 5]
    assert events["src_file"].to_list() == [str(tmp_path / "rank-00000.json")] * 2
    lines = (tmp_path / "rank-00000.json").read_text().splitlines()
    assert '"name":"all_reduce"' in lines[5 - 1]


def test_ranks_table_carries_layout_and_coords(tmp_path):
    job(tmp_path, tp=2, pp=2, dp=2)
    bundle = load_bundle(tmp_path)
    assert bundle.ranks["rank"].to_list() == list(range(8))
    assert bundle.layout == {"tp": 2, "pp": 2, "dp": 2, "cp": 1, "ep": 1, "vpp": None}
    row = bundle.ranks.filter(pl.col("rank") == 5).row(0, named=True)
    assert (row["tp"], row["dp"], row["pp"]) == (1, 0, 1)


def test_cache_is_reused_until_an_input_changes(tmp_path):
    traces = job(tmp_path, dp=2)
    first = load_bundle(tmp_path)
    assert not first.from_cache
    assert load_bundle(tmp_path).from_cache
    traces[1].x("backward", "compute", 9000.0, 1.0, iteration=0).write(tmp_path)
    os.utime(tmp_path / "rank-00001.json", ns=(1, 1))
    again = load_bundle(tmp_path)
    assert not again.from_cache
    assert again.events.filter(pl.col("name") == "backward").height == 1


def test_phases_other_than_x_i_c_are_skipped_and_counted(tmp_path):
    trace = RankTrace(0, 2, LAYOUT, {"tp": 0, "pp": 0, "dp": 0, "cp": 0, "ep": 0})
    trace.x("forward", "compute", 1.0, 1.0)
    trace.events += [
        {"ph": "B", "name": "open", "cat": "c", "pid": 0, "tid": "compute", "ts": 2.0, "args": {}},
        {"ph": "i", "name": "mark", "cat": "c", "pid": 0, "tid": "compute", "ts": 3.0, "args": {"iteration": 1}},
        {"ph": "XX", "name": "odd", "cat": "c", "pid": 0, "tid": "compute", "ts": 4.0, "args": {}},
        {"name": "no phase", "cat": "c", "pid": 0, "tid": "compute", "ts": 5.0, "args": {}},
        {"ph": "B", "name": "open", "cat": "c", "pid": 0, "tid": "compute", "ts": 6.0, "args": {}},
        {"ph": "C", "name": "memory", "cat": "c", "pid": 0, "tid": "compute", "ts": 7.0, "args": {"bytes": 8}},
    ]
    trace.write(tmp_path)
    # The second rank's events follow in the same batch: per-file columns and lines restart.
    second = RankTrace(1, 2, LAYOUT, {"tp": 1, "pp": 0, "dp": 0, "cp": 0, "ep": 0})
    second.x("backward", "compute", 1.0, 2.0).write(tmp_path)
    warnings = []
    events = load_bundle(tmp_path, warn=warnings.append).events
    assert events.select("rank", "tp", "ph", "name", "src_line").rows() == [
        (0, 0, "X", "forward", 4), (0, 0, "i", "mark", 6), (0, 0, "C", "memory", 10), (1, 1, "X", "backward", 4)]
    assert events["src_file"].to_list() == [str(tmp_path / "rank-00000.json")] * 3 + [str(tmp_path / "rank-00001.json")]
    assert (events["iteration"][1], events["bytes"][2]) == (1, 8)
    assert warnings == ["skipped 2 events with ph='B' (v1 analyses use X, i and C events)",
                        "skipped 1 events with ph='XX' (v1 analyses use X, i and C events)"]


def test_truncated_file_is_salvaged_with_a_warning(tmp_path):
    job(tmp_path, dp=2, events_per_rank=3)
    path = tmp_path / "rank-00001.json"
    text = path.read_text()
    path.write_text(text[: len(text) - 25])  # cut the last event mid-line
    last_line = len(text.splitlines())
    warnings: list[str] = []
    bundle = load_bundle(tmp_path, warn=warnings.append)
    counts = dict(bundle.events.group_by("rank").len().iter_rows())
    assert counts == {0: 6, 1: 5}
    assert any(str(path) in w and f"line {last_line}" in w for w in warnings), warnings
    assert path.read_text() == text[: len(text) - 25], "the input is never rewritten"


@pytest.mark.parametrize("ending", ["]\n", "\n]", ""])
def test_closed_or_comma_less_files_are_read(tmp_path, ending):
    job(tmp_path, dp=2, events_per_rank=2)
    path = tmp_path / "rank-00000.json"
    text = path.read_text()
    if ending == "":
        text = text.rstrip().rstrip(",")  # last event without a comma, no newline
    else:
        text = text + ending if ending == "]\n" else text.rstrip().rstrip(",") + ending
    path.write_text(text)
    warnings: list[str] = []
    events = load_bundle(tmp_path, warn=warnings.append).events
    assert events.filter(pl.col("rank") == 0).height == 4
    assert not any("cut off" in w for w in warnings)


def test_file_that_is_not_json_names_the_file(tmp_path):
    job(tmp_path, dp=2)
    bad = tmp_path / "rank-00001.json"
    bad.write_text(bad.read_text().replace('"name":"forward"', '"name":forward', 1))
    with pytest.raises(TraceFormatError, match="rank-00001.json"):
        load_bundle(tmp_path)


def test_two_files_claiming_one_rank(tmp_path):
    job(tmp_path, dp=2)
    (tmp_path / "rank-00009.json").write_text((tmp_path / "rank-00001.json").read_text())
    with pytest.raises(LayoutError, match=r"rank 1 is claimed by more than one file"):
        load_bundle(tmp_path)


def test_ranks_disagreeing_on_world_size(tmp_path):
    job(tmp_path, dp=2)
    RankTrace(2, 4, {"tp": 1, "pp": 1, "dp": 4, "cp": 1, "ep": 1}, {"tp": 0, "pp": 0, "dp": 2}).write(tmp_path)
    with pytest.raises(LayoutError, match="disagree on world_size"):
        load_bundle(tmp_path)


def test_ranks_disagreeing_on_layout(tmp_path):
    job(tmp_path, dp=2)
    path = tmp_path / "rank-00001.json"
    path.write_text(path.read_text().replace('"tp":1,"pp":1,"dp":2', '"tp":2,"pp":1,"dp":1', 1))
    with pytest.raises(LayoutError, match="disagree on tp"):
        load_bundle(tmp_path)


def test_missing_and_empty_directories(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_bundle(tmp_path / "nope")
    with pytest.raises(InputError, match="is empty"):
        load_bundle(tmp_path)


def test_directory_without_traces(tmp_path):
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(InputError, match="no recognisable traces"):
        load_bundle(tmp_path)


def test_progress_is_reported_file_by_file_and_adds_up(tmp_path, monkeypatch):
    from mapp.analysis.ingest import mapp_v1

    job(tmp_path, tp=2, dp=4, events_per_rank=3000)
    files = sorted(tmp_path.glob("rank-*.json"))
    monkeypatch.setattr(mapp_v1, "_BATCH_ROWS", 2048)  # several batches per file
    steps: list[int] = []
    batches, _ = mapp_v1.read_batches(files, warn=lambda m: None, progress=steps.append)
    rows = sum(b.num_rows for b in batches)
    # every event of every file came through (each file: "[", two metadata lines, events)
    assert rows == sum(len(f.read_text().splitlines()) - 3 for f in files)
    assert sum(steps) == sum(f.stat().st_size for f in files)
    assert len(steps) >= len(files) // 2  # while reading, not once at the end
