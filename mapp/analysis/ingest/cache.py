"""The Parquet cache of a bundle: ``DIR/.mapp/`` with ``events.parquet`` (or, written by
``mapp trace ingest --engine``, the partitioned ``events/`` of :mod:`~mapp.analysis.ingest.dataset`),
``ranks.parquet`` and ``manifest.json`` (what they were built from, how many rows each holds, a build id and each
file's CRC-32).

The cache is reused only after a check on open: the manifest names the same inputs (path
relative to the bundle, size, mtime), format and mapp; both Parquet files open, have the
events/ranks schema, hold the rows the manifest counted and carry the manifest's build id in
their footer (so a file copied from another bundle's cache is told apart even where its rows
happen to agree); and their bytes have the CRC-32 the manifest recorded (damage inside a data
page leaves the footer whole: it would surface later as a decoding error in the middle of an
analysis). The CRC reads each file once, at ~1 GB/s: ~40 ms for ten million events.

* stale (inputs changed, another mapp, no manifest yet): rebuilt quietly;
* damaged or foreign (garbage, a cut-off file, a manifest that is not JSON, a file of another
  build): rebuilt with one warning naming what was wrong;
* not writable in place (a read-only bundle, ``.mapp`` that is not a directory): built in a
  temporary directory that is removed when the process exits.

Two commands opening one bundle at once (``mapp detect`` beside ``mapp report``, two notebook
kernels) take turns (:func:`building`): the second waits while the first checks and builds, then
finds its cache valid.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from mapp.analysis.ingest import dataset
from mapp.analysis.ingest.schema import BUILD_KEY, EVENTS_ARROW_SCHEMA, RANKS_SCHEMA
from mapp.trace_format import CACHE_DIR  # one name for the cache, also in the output policy

__all__ = ["CACHE_DIR", "CACHE_VERSION", "EVENTS", "RANKS", "BUILD_KEY", "Cached", "location", "fallback",
           "building", "identity", "check", "clear", "crc32", "new_build", "read_manifest", "write_manifest"]

CACHE_VERSION = 30  # 3: row counts and build id; 4: CRC-32 of each file; 5: kineto gloo peers, groups, async sends;
# 6: kineto p2p of batched NCCL exchanges from their CPU records; 7: gloo collectives of a
# one-group job keep their members; 8: kineto coordinates from megatron-core's pg_config;
# 9: gloo calls placed by how tightly their members end them; 10: kineto iterations from
# optimizer steps where a trace has no ProfilerStep spans; 11: kineto steps looked up on the
# host first (the GPU copy of a step no longer hides the rest of it); 12: kineto ranks name a
# GPU only where they ran GPU work (not a CPU job's machine's GPUs); 13: ``launch_ns`` of GPU work;
# 14: MegatronApp layer scopes take the microbatch of the pipeline step they ran inside;
# 15: kineto's functional collectives (``_c10d_functional::*``) are ``other``, not compute;
# 16: gloo p2p without input shapes goes to a pipeline neighbour; 17: interleaved pipelines' ends to
# each other; 18: not in interleaved pipelines; 19: a world-only job's p2p along its ranks' order;
# 20: p2p ends paired among 16 receives a side, not 4; 21: a pipeline whose ends call half as
# often as its middle is no interleaved one; 22: a world-only pipeline paired only where its ends
# show a line; 23: ``thread_dur_ns`` and ``runnable_ns`` of host-timed spans; 24: gloo p2p spans
# start at their ``c10d`` call (the post); 25: a pipeline's send not paired with a receive done
# before it was posted; 26: a GPU rank's p2p timed by its kernel is not marked async (25's slip);
# 27: gloo p2p calls with no peer recorded, each rank sending to one partner (a ring, pairs), paired by causality;
# 28: not where a member of the ranks' groups was not traced, or some calls have peers
# 29: gloo p2p with no peer recorded, one rank the other end of every message (a hub) paired
# 30: 27's partners where a rank sends more than it receives (pairs of unequal ways: prefill/decode)
EVENTS, RANKS, MANIFEST = "events.parquet", "ranks.parquet", "manifest.json"
LOCK = ".lock"   # ``building``: held while the cache is checked and built
# The manifest's "layout" of a partitioned events table (``dataset``); absent for the one file.
PARTITIONED = "partitioned"
# Fallback caches of this process, by bundle directory: a second load in the same process
# reuses the first one's instead of building another.
_FALLBACKS: dict[Path, Path] = {}


@dataclass(frozen=True, slots=True)
class Cached:
    """What :func:`check` found: ``fresh`` (reuse it), else ``problem`` (None: merely stale)."""

    fresh: bool
    problem: str | None = None
    manifest: dict | None = None   # the fresh cache's manifest


def location(directory: Path, warn) -> Path:
    """``DIR/.mapp`` when it can be written; else a fallback for this process (see :func:`fallback`)."""
    cache = directory / CACHE_DIR
    try:
        cache.mkdir(exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=cache, prefix=".probe-", delete=True)
        probe.close()
        return cache
    except OSError:
        return fallback(directory, cache, warn)


def fallback(directory: Path, cache: Path, warn) -> Path:
    """A temporary cache directory for ``directory``, removed when the process exits.

    At exit, not when the bundle object goes away: the events file's path escapes the bundle
    (a ``scan()`` LazyFrame, DuckDB views that read it by path), so it must outlive the object.
    """
    key = directory.resolve()
    where = _FALLBACKS.get(key)
    if where is None or not where.is_dir():
        where = Path(tempfile.mkdtemp(prefix="mapp-cache-"))
        _FALLBACKS[key] = where
        atexit.register(shutil.rmtree, where, ignore_errors=True)
    warn(f"cannot write the cache in {cache}; using {where} for this run only")
    return where


@contextlib.contextmanager
def building(cache: Path):
    """Hold ``cache``'s lock (``.lock`` in it, never removed) while it is checked and built:
    the build writes fixed names, and two processes building one cache at once clobbered each
    other's files (measured: two detectors over the same new bundles, one stopped by a
    FileNotFoundError when the other had renamed its ``ranks.parquet.tmp``). The lock is
    ``flock``'s, released when the process ends however it ends. Where the lock file cannot be
    made (a read-only or fallback cache that another process cannot share anyway), no lock."""
    try:
        fd = os.open(cache / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def identity(fmt: str, inputs: list[list], version: str) -> dict:
    """The manifest keys that say which inputs, format and mapp a cache was built from."""
    return {"cache_version": CACHE_VERSION, "mapp_version": version, "format": fmt, "inputs": inputs}


def new_build() -> str:
    return uuid.uuid4().hex


def check(cache: Path, wanted: dict) -> Cached:
    """Whether the cache in ``cache`` was built from ``wanted`` and is intact (footers only)."""
    try:
        text = (cache / MANIFEST).read_text()
    except FileNotFoundError:
        return Cached(False)                    # never built, or a build that did not finish
    except (OSError, UnicodeDecodeError) as exc:
        return Cached(False, f"{MANIFEST}: unreadable ({_reason(exc)})")
    try:
        manifest = json.loads(text)
    except ValueError:
        return Cached(False, f"{MANIFEST}: not JSON")
    if not isinstance(manifest, dict):
        return Cached(False, f"{MANIFEST}: not a JSON object")
    if any(manifest.get(k) != v for k, v in wanted.items()):
        return Cached(False)                    # stale: other inputs, format or mapp
    rows, build, crcs = manifest.get("rows"), manifest.get("build"), manifest.get("crc32")
    if not isinstance(rows, dict) or not isinstance(build, str) or not isinstance(crcs, dict):
        return Cached(False, f"{MANIFEST}: no row counts, build id or checksums")
    if manifest.get("layout") == PARTITIONED:
        problem = dataset.check(cache, manifest, _events_schema_ok)
        if problem is not None:
            return Cached(False, problem)
        files = ((RANKS, _ranks_schema_ok),)
    else:
        files = ((EVENTS, _events_schema_ok), (RANKS, _ranks_schema_ok))
    for name, expected in files:
        problem = _check_parquet(cache / name, expected, rows.get(name), build)
        if problem is None and crc32(cache / name) != crcs.get(name):
            problem = "its bytes changed since it was written (checksum)"
        if problem is not None:
            return Cached(False, f"{name}: {problem}")
    return Cached(True, manifest=manifest)


def crc32(path: Path) -> int | None:
    """CRC-32 of the file's bytes; None if it cannot be read."""
    crc = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
    except OSError:
        return None
    return crc


def _check_parquet(path: Path, schema_ok, rows: object, build: str) -> str | None:
    if path.is_dir():
        return "a directory, not a file"
    try:
        meta = pq.read_metadata(path)
    except FileNotFoundError:
        return "missing"
    except OSError as exc:                      # a directory, no permission
        return f"unreadable ({_reason(exc)})"
    except (pa.ArrowException, ValueError):  # garbage, or cut off: no footer
        return "not a Parquet file"
    try:
        good_schema = schema_ok(path, meta)
    except (pa.ArrowException, pl.exceptions.PolarsError, OSError, ValueError):
        good_schema = False
    if not good_schema:
        return "not the expected schema"
    if meta.num_rows != rows:
        return f"{meta.num_rows} rows where the manifest counted {rows}"
    if (meta.metadata or {}).get(BUILD_KEY.encode()) != build.encode():
        return "from another build"
    return None


def _events_schema_ok(path: Path, meta: pq.FileMetaData) -> bool:
    return meta.schema.to_arrow_schema().remove_metadata().equals(EVENTS_ARROW_SCHEMA)


def _ranks_schema_ok(path: Path, meta: pq.FileMetaData) -> bool:
    return dict(pl.read_parquet_schema(path)) == dict(RANKS_SCHEMA)


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


def clear(cache: Path) -> None:
    """Remove the manifest first (a rebuild cut short is then merely absent, not damaged) and
    whatever stands where the Parquet files go that a rename cannot replace (a directory).
    Only these names and the partitioned dataset's directory (``dataset.EVENTS_DIR``): other
    things in ``.mapp`` (the matching cache) look after themselves. Raises OSError when that
    cannot be done."""
    for name in (MANIFEST, EVENTS, RANKS):
        path = cache / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif name == MANIFEST or path.is_symlink():
            path.unlink(missing_ok=True)
    dataset.clear(cache)


def read_manifest(cache: Path) -> dict:
    return json.loads((cache / MANIFEST).read_text())


def write_manifest(cache: Path, manifest: dict) -> None:
    tmp = cache / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, cache / MANIFEST)
