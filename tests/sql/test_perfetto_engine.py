"""The optional Perfetto engine: refused clearly without its package or binary; results as Arrow.

The ``perfetto`` package installs from PyPI, but its ``trace_processor_shell`` binary is
downloaded from the internet at first use, which these machines cannot do. So:

- the engine is driven through a stand-in ``perfetto.trace_processor`` that records what it is
  handed (the trace, the binary, every SQL statement, verbatim) and answers in the real output
  format: a ``QueryResultIterator`` over cell batches as trace_processor_shell sends them (type
  codes per cell, NUL-separated strings). Where the real package is importable its own
  ``QueryResultIterator`` parses them, else a copy of its documented behaviour does;
- with the real package, a binary that does not start is refused (no shell needed);
- with a real shell (``MAPP_PERFETTO_BIN`` or ``trace_processor_shell`` on PATH) a real query
  runs over a hand-written Chrome trace; skipped, saying why, where none can be had.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import types
from types import SimpleNamespace

import pytest

from mapp.sql.errors import EngineUnavailable, QueryError

# trace_processor's QueryResult cell types (protos/perfetto/trace_processor/trace_processor.proto)
NULL, VARINT, FLOAT64, STRING = 1, 2, 3, 4

try:  # the real parser of those batches, when the package is installed
    from perfetto.common.query_result_iterator import QueryResultIterator as RealIterator
except ImportError:
    RealIterator = None


class _Iterator:
    """What ``perfetto.common.query_result_iterator.QueryResultIterator`` does (0.59): rows as
    objects with one attribute per column, ``column_names``, cells taken in type order."""

    class Row:
        pass

    def __init__(self, column_names, batches):
        assert batches and batches[-1].is_last_batch
        self.column_names = list(column_names)
        pools = {VARINT: [], FLOAT64: [], STRING: []}
        for b in batches:
            pools[VARINT] += list(b.varint_cells)
            pools[FLOAT64] += list(b.float64_cells)
            pools[STRING] += b.string_cells.split("\0")[:-1]
        taken = {k: iter(v) for k, v in pools.items()}
        self._cells = [None if t == NULL else next(taken[t]) for b in batches for t in b.cells]

    def __iter__(self):
        n = len(self.column_names)
        for i in range(0, len(self._cells), n):
            row = self.Row()
            for name, value in zip(self.column_names, self._cells[i:i + n]):
                setattr(row, name, value)
            yield row


def batch(rows: list[tuple], *, last: bool = True) -> SimpleNamespace:
    """One ``QueryResult.CellsBatch`` as the shell encodes ``rows``."""
    cells, varints, floats, strings = [], [], [], ""
    for row in rows:
        for value in row:
            if value is None:
                cells.append(NULL)
            elif isinstance(value, bool) or isinstance(value, int):
                cells.append(VARINT)
                varints.append(int(value))
            elif isinstance(value, float):
                cells.append(FLOAT64)
                floats.append(value)
            else:
                cells.append(STRING)
                strings += value + "\0"
    return SimpleNamespace(cells=cells, varint_cells=varints, float64_cells=floats, string_cells=strings,
                           blob_cells=[], is_last_batch=last)


ANSWERS = {
    # two batches, as the shell splits long results; a NULL and every cell type
    "SELECT name, dur, ts, depth FROM slice ORDER BY ts": (
        ["name", "dur", "ts", "depth"],
        [batch([("forward", 10_000, 1.5, 0), ("backward", 20_000, 2.25, None)], last=False),
         batch([("optimizer", 5_000, 3.0, 1)])],
    ),
    "SELECT name FROM slice WHERE 0": (["name"], [batch([])]),
}


@pytest.fixture(params=["real parser", "documented copy"] if RealIterator else ["documented copy"])
def fake_perfetto(monkeypatch, request):
    """A stand-in for perfetto.trace_processor (the real one needs a downloaded binary)."""
    iterator = RealIterator if request.param == "real parser" else _Iterator
    calls = {"sql": []}

    class TraceProcessorConfig:
        def __init__(self, bin_path=None, **rest):
            assert not rest, rest
            self.bin_path = bin_path

    class TraceProcessor:
        def __init__(self, trace=None, addr=None, config=None, file_path=None):
            assert addr is None and file_path is None
            calls["trace"], calls["bin"] = trace, config.bin_path

        def query(self, sql):
            calls["sql"].append(sql)
            if sql not in ANSWERS:  # the package raises TraceProcessorException(response.error)
                raise RuntimeError(f"Traceback (most recent call last):\n  File \"stdin\" line 1 col 15\n"
                                   f"    {sql}\n\nno such table: {sql.split()[-1]}\n")
            names, batches = ANSWERS[sql]
            return iterator(names, batches)

        def close(self):
            calls["closed"] = True

    package = types.ModuleType("perfetto")
    module = types.ModuleType("perfetto.trace_processor")
    module.TraceProcessor, module.TraceProcessorConfig = TraceProcessor, TraceProcessorConfig
    monkeypatch.setitem(sys.modules, "perfetto", package)
    monkeypatch.setitem(sys.modules, "perfetto.trace_processor", module)
    return calls


def _binary(tmp_path, body: str = "exit 0"):
    binary = tmp_path / "trace_processor_shell"
    binary.write_text(f"#!/bin/sh\n{body}\n")
    binary.chmod(0o755)
    return binary


def test_results_and_errors(fake_perfetto, tmp_path):
    from mapp.sql.perfetto_engine import PerfettoEngine

    binary = _binary(tmp_path)
    engine = PerfettoEngine(tmp_path / "merged.json", binary)
    # the trace and binary are handed over as strings, by keyword
    assert fake_perfetto == {"sql": [], "trace": str(tmp_path / "merged.json"), "bin": str(binary)}
    sql = "SELECT name, dur, ts, depth FROM slice ORDER BY ts"
    table = engine.query(sql)
    assert fake_perfetto["sql"] == [sql]  # verbatim, once
    assert table.column_names == ["name", "dur", "ts", "depth"]  # the query's order, not the rows'
    assert table.to_pylist() == [
        {"name": "forward", "dur": 10_000, "ts": 1.5, "depth": 0},
        {"name": "backward", "dur": 20_000, "ts": 2.25, "depth": None},
        {"name": "optimizer", "dur": 5_000, "ts": 3.0, "depth": 1},
    ]
    assert [str(t) for t in table.schema.types] == ["string", "int64", "double", "int64"]
    empty = engine.query("SELECT name FROM slice WHERE 0")
    assert empty.column_names == ["name"] and empty.num_rows == 0  # no row: the columns stay
    with pytest.raises(QueryError, match="no such table: bad") as caught:
        engine.query("SELECT * FROM bad")
    assert not str(caught.value).endswith("\n")  # the shell's message, stripped
    assert "slice" in caught.value.hint
    assert fake_perfetto["sql"] == [sql, "SELECT name FROM slice WHERE 0", "SELECT * FROM bad"]
    engine.close()
    assert fake_perfetto["closed"] is True


def test_binary_must_be_given_and_executable(fake_perfetto, tmp_path):
    from mapp.sql.perfetto_engine import PerfettoEngine

    with pytest.raises(EngineUnavailable, match="--perfetto-bin"):
        PerfettoEngine(tmp_path / "merged.json", None)
    with pytest.raises(EngineUnavailable, match="not an executable"):
        PerfettoEngine(tmp_path / "merged.json", tmp_path / "missing")
    not_executable = tmp_path / "tp"
    not_executable.write_text("#!/bin/sh\n")
    with pytest.raises(EngineUnavailable, match="not an executable"):
        PerfettoEngine(tmp_path / "merged.json", not_executable)
    assert "trace" not in fake_perfetto  # refused before the trace processor was started


def test_without_the_package(monkeypatch, tmp_path):
    from mapp.sql.perfetto_engine import PerfettoEngine

    monkeypatch.setitem(sys.modules, "perfetto", None)
    with pytest.raises(EngineUnavailable, match="pip install perfetto"):
        PerfettoEngine(tmp_path / "merged.json", tmp_path / "bin")


def test_real_package_refuses_a_binary_that_does_not_start(tmp_path):
    pytest.importorskip("perfetto.trace_processor", reason="the perfetto package is not installed "
                        "(pip install perfetto); the stand-in tests above cover the engine without it")
    from mapp.sql.perfetto_engine import PerfettoEngine

    (tmp_path / "merged.json").write_text('{"traceEvents": []}')
    binary = _binary(tmp_path, "echo 'not a trace processor' >&2; exit 3")
    with pytest.raises(EngineUnavailable, match="did not start"):
        PerfettoEngine(tmp_path / "merged.json", binary)


def _real_shell() -> str | None:
    path = os.environ.get("MAPP_PERFETTO_BIN") or shutil.which("trace_processor_shell")
    return path if path and os.access(path, os.X_OK) else None


def test_real_trace_processor_answers_over_a_chrome_trace(tmp_path):
    pytest.importorskip("perfetto.trace_processor", reason="the perfetto package is not installed "
                        "(pip install perfetto)")
    shell = _real_shell()
    if shell is None:
        pytest.skip("no trace_processor_shell: the perfetto package downloads it from the internet at first "
                    "use, which this machine cannot reach; set MAPP_PERFETTO_BIN to one copied here")
    from mapp.sql.perfetto_engine import PerfettoEngine

    trace = tmp_path / "merged.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "forward", "pid": 0, "tid": 0, "ts": 100, "dur": 10},
        {"ph": "X", "name": "backward", "pid": 0, "tid": 0, "ts": 120, "dur": 20},
    ]}))
    engine = PerfettoEngine(trace, shell)
    try:
        table = engine.query("SELECT name, dur FROM slice ORDER BY ts")
        assert table.to_pylist() == [{"name": "forward", "dur": 10_000}, {"name": "backward", "dur": 20_000}]
        with pytest.raises(QueryError, match="nosuch"):
            engine.query("SELECT * FROM nosuch")
    finally:
        engine.close()
