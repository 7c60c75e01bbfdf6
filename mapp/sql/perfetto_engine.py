"""Optional engine: the user's own ``trace_processor_shell`` over the merged Chrome trace.

mapp's SQL engine is DuckDB; this one exists for people who already write PerfettoSQL. It needs
two things mapp does not install: the ``perfetto`` Python package (``pip install perfetto``)
and a ``trace_processor_shell`` binary (the package would download one at first use, which
fails on machines without internet: download it where you can, from Perfetto's releases page
or ``curl -LO https://get.perfetto.dev/trace_processor``, copy it over, and pass
``--perfetto-bin PATH``). The merged trace is ``DIR/merged.json`` when it is current, else it is
written to a temporary file (the bundle is never written).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

from mapp.sql.errors import EngineUnavailable, QueryError

__all__ = ["PerfettoEngine", "merged_trace_for"]

_INSTALL = ("pip install perfetto, and pass --perfetto-bin PATH to a trace_processor_shell downloaded "
            "elsewhere (https://get.perfetto.dev/trace_processor); DuckDB (the default engine) needs neither")


def _trace_processor():
    try:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    except ImportError:
        raise EngineUnavailable("--engine perfetto needs the perfetto package, which is not installed",
                                _INSTALL) from None
    return TraceProcessor, TraceProcessorConfig


def merged_trace_for(directory: Path, bundle) -> Path:
    """A merged Chrome trace of ``bundle``: ``DIR/merged.json`` if newer than the events table,
    else a new one in a temporary directory."""
    existing = Path(directory) / "merged.json"
    if existing.is_file() and existing.stat().st_mtime_ns >= bundle.events_stamp()[1]:
        return existing
    from mapp.analysis.chrome import write_chrome_trace

    target = Path(tempfile.mkdtemp(prefix="mapp-perfetto-")) / "merged.json"
    write_chrome_trace(bundle, target)
    return target


class PerfettoEngine:
    """Runs PerfettoSQL through ``perfetto.trace_processor.TraceProcessor``; results as Arrow."""

    def __init__(self, trace: Path, bin_path: Path | None):
        TraceProcessor, TraceProcessorConfig = _trace_processor()
        if bin_path is None:
            raise EngineUnavailable("--engine perfetto needs --perfetto-bin PATH (a trace_processor_shell)", _INSTALL)
        bin_path = Path(bin_path)
        if not bin_path.is_file() or not os.access(bin_path, os.X_OK):
            raise EngineUnavailable(f"--perfetto-bin {bin_path}: not an executable file", _INSTALL)
        try:
            self._tp = TraceProcessor(trace=str(trace), config=TraceProcessorConfig(bin_path=str(bin_path)))
        except Exception as error:  # the package raises plain Exceptions for a binary that fails to start
            raise EngineUnavailable(f"trace processor {bin_path} did not start: {error}", _INSTALL) from None

    def query(self, sql: str) -> pa.Table:
        """Rows of one PerfettoSQL statement."""
        try:
            result = self._tp.query(sql)
            rows = [dict(vars(row)) for row in result]
        except Exception as error:
            raise QueryError(f"trace processor: {str(error).strip()}",
                             "PerfettoSQL tables: slice, thread_track, process, args (see perfetto.dev/docs)") from None
        names = list(getattr(result, "column_names", None) or (rows[0].keys() if rows else []))
        columns: dict[str, list[Any]] = {name: [row.get(name) for row in rows] for name in names}
        return pa.table(columns) if names else pa.table({})

    def close(self) -> None:
        self._tp.close()
