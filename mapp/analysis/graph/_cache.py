"""The matching kept beside the events table (``DIR/.mapp/matching/``), reused while the events
table it came from is unchanged. Best effort: a cache that cannot be read or written is ignored."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

import polars as pl

from mapp import __version__
from mapp.analysis.graph.diagnose import Finding
from mapp.output import scratch

_VERSION = 4
_DIR = "matching"
_TABLES = ("collectives", "members", "p2p")


def _key(bundle) -> str:
    parts = [str(_VERSION), __version__]
    manifest = Path(bundle.cache_dir) / "manifest.json"
    if manifest.exists():
        parts.append(manifest.read_text())
    parts += [str(n) for n in bundle.events_stamp()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def load(bundle) -> tuple[dict[str, pl.DataFrame], list[Finding]] | None:
    """The cached matching's tables (by name) and findings, or None; ``Matching`` checks that
    each table is of the right kind (``matching._from_cache``)."""
    if bundle.iterations is not None:  # a window's matching is not the job's
        return None
    where = Path(bundle.cache_dir) / _DIR
    try:
        if (where / "key").read_text() != _key(bundle):
            return None
        tables = {name: pl.read_parquet(where / f"{name}.parquet") for name in _TABLES}
        findings = [
            Finding(**{k: tuple(v) if k in ("ranks", "group_ranks") and v is not None else v for k, v in row.items()})
            for row in json.loads((where / "findings.json").read_text())
        ]
    except Exception:  # damaged in any way (garbage, files swapped, cut off): matched again
        return None
    return tables, findings


def store(bundle, matching) -> None:
    """Keep ``matching`` (raw clocks) beside the events table; silently skipped if not writable
    (and for a window of the bundle's iterations: the cache holds the whole job's)."""
    if bundle.iterations is not None:
        return
    where = Path(bundle.cache_dir) / _DIR
    tmp: Path | None = None
    try:
        tmp = scratch(Path(tempfile.mkdtemp(dir=bundle.cache_dir, prefix=".matching-")))
        for name in _TABLES:
            getattr(matching, name).write_parquet(tmp / f"{name}.parquet")
        (tmp / "findings.json").write_text(json.dumps([asdict(f) for f in matching.findings]))
        (tmp / "key").write_text(_key(bundle))
        if where.exists():
            shutil.rmtree(where)
        os.replace(tmp, where)
    except OSError:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
