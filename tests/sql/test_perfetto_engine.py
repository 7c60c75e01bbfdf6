"""The optional Perfetto engine: refused clearly without its package or binary; results as Arrow."""

from __future__ import annotations

import sys
import types

import pytest

from mapp.sql.errors import EngineUnavailable, QueryError


@pytest.fixture
def fake_perfetto(monkeypatch):
    """A stand-in for perfetto.trace_processor (the real one needs a downloaded binary)."""
    calls = {}

    class Row:
        pass

    class Result(list):
        column_names = ["name", "dur"]

    class TraceProcessorConfig:
        def __init__(self, bin_path):
            calls["bin"] = bin_path

    class TraceProcessor:
        def __init__(self, trace, config):
            calls["trace"] = trace

        def query(self, sql):
            if "bad" in sql:
                raise RuntimeError("no such table: bad")
            rows = Result()
            for name, dur in (("forward", 10), ("backward", 20)):
                row = Row()
                row.name, row.dur = name, dur
                rows.append(row)
            return rows

        def close(self):
            calls["closed"] = True

    package = types.ModuleType("perfetto")
    module = types.ModuleType("perfetto.trace_processor")
    module.TraceProcessor, module.TraceProcessorConfig = TraceProcessor, TraceProcessorConfig
    monkeypatch.setitem(sys.modules, "perfetto", package)
    monkeypatch.setitem(sys.modules, "perfetto.trace_processor", module)
    return calls


def test_results_and_errors(fake_perfetto, tmp_path):
    from mapp.sql.perfetto_engine import PerfettoEngine

    binary = tmp_path / "trace_processor_shell"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    engine = PerfettoEngine(tmp_path / "merged.json", binary)
    table = engine.query("SELECT name, dur FROM slice")
    assert table.to_pylist() == [{"name": "forward", "dur": 10}, {"name": "backward", "dur": 20}]
    with pytest.raises(QueryError, match="no such table: bad"):
        engine.query("SELECT * FROM bad")
    engine.close()
    assert fake_perfetto == {"bin": str(binary), "trace": str(tmp_path / "merged.json"), "closed": True}


def test_binary_must_be_given_and_executable(fake_perfetto, tmp_path):
    from mapp.sql.perfetto_engine import PerfettoEngine

    with pytest.raises(EngineUnavailable, match="--perfetto-bin"):
        PerfettoEngine(tmp_path / "merged.json", None)
    with pytest.raises(EngineUnavailable, match="not an executable"):
        PerfettoEngine(tmp_path / "merged.json", tmp_path / "missing")


def test_without_the_package(monkeypatch, tmp_path):
    from mapp.sql.perfetto_engine import PerfettoEngine

    monkeypatch.setitem(sys.modules, "perfetto", None)
    with pytest.raises(EngineUnavailable, match="pip install perfetto"):
        PerfettoEngine(tmp_path / "merged.json", tmp_path / "bin")
