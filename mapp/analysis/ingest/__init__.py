"""Readers that turn per-rank trace files into the one events table.

``load_bundle(DIR)`` finds the traces, detects their format (mapp v1, MegatronApp, PyTorch
profiler), reads them and caches the events table as Parquet beside them.
"""

from mapp.analysis.ingest.bundle import CACHE_DIR, TraceBundle, load_bundle
from mapp.analysis.ingest.discover import FORMATS, discover
from mapp.analysis.ingest.schema import EVENTS_SCHEMA, RANKS_SCHEMA

__all__ = ["CACHE_DIR", "EVENTS_SCHEMA", "FORMATS", "RANKS_SCHEMA", "TraceBundle", "discover", "load_bundle"]
