"""Readers that turn per-rank trace files into the one events table.

``load_bundle(DIR)`` finds the traces, detects their format (mapp v1, MegatronApp, PyTorch
profiler), reads them and caches the events table as Parquet beside them.

The names below are imported on first use (PEP 562), so that ``mapp --help`` and the CLI's
option texts do not load polars, DuckDB and Arrow.
"""

from mapp._lazy import lazy_exports
from mapp.analysis.ingest.discover import FORMATS, discover  # light: no polars, DuckDB or Arrow

__all__ = ["CACHE_DIR", "EVENTS_SCHEMA", "FORMATS", "RANKS_SCHEMA", "TraceBundle", "discover", "ingest_partitioned", "load_bundle"]

_HOMES = {"CACHE_DIR": "bundle", "TraceBundle": "bundle", "load_bundle": "bundle",
          "ingest_partitioned": "bundle",
          "EVENTS_SCHEMA": "schema", "RANKS_SCHEMA": "schema"}


__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
