"""The events table as a partitioned dataset, for jobs too large for one file or one process.

Layout, beside the single-file cache it replaces (``DIR/.mapp/``)::

    events/rank_block=0/part-0.parquet    # the events of trace files 0..N-1 (in discovery order)
    events/rank_block=1/part-0.parquet    # files N..2N-1, ...
    ranks.parquet
    manifest.json                         # "layout": "partitioned", and every file below

Hive-style directories, so DuckDB (``read_parquet('events/*/*.parquet', hive_partitioning=true)``),
Spark, Polars, Arrow and Ray Data read it as it is and can prune on ``rank_block``. Block K holds
the trace files K*N to K*N+N-1 in discovery order (their path in the bundle), which for files
named by rank (``rank-00012.json``) is ranks K*N to K*N+N-1; the manifest records each block's
first and last rank. Every file has the events schema, the build id in its footer and holds whole
ranks, so per-rank work on one file needs no other.

One block is one unit of work: :func:`ingest_partition` reads its trace files and writes its
Parquet file, in this process (:func:`ingest_local`) or on any worker of a cluster that sees the
same file system (``mapp.analysis.cluster``). Everything it takes and returns is plain, picklable
data. The driver then checks the ranks, writes ``ranks.parquet`` and, last, the manifest that
makes the dataset valid: a build cut short leaves no manifest, so it is merely absent.

The check on open reads each file's footer (schema, rows, build id) and size, not a CRC of every
byte as the single-file cache does: at the sizes this layout is for, that would read terabytes.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from mapp.analysis.ingest.discover import read_events
from mapp.analysis.ingest.schema import BUILD_KEY, RANKS_SCHEMA, conform

__all__ = ["EVENTS_DIR", "PARTITION_KEY", "DEFAULT_RANKS_PER_PARTITION", "PartitionTask",
           "PartitionResult", "WorkerSummary", "plan", "ingest_partition", "ingest_local", "per_worker", "manifest_entry",
           "files_of", "check", "clear", "ranks_table"]

EVENTS_DIR = "events"
PARTITION_KEY = "rank_block"
# 256 ranks a file: a 10,240-rank job at layer granularity makes 40 files of ~4 MB each, and a
# worker's memory does not grow with a file's size (readers stream, the writer writes row groups).
DEFAULT_RANKS_PER_PARTITION = 256
PART_FILE = "part-0.parquet"


@dataclass(frozen=True, slots=True)
class PartitionTask:
    """One block: which trace files to read and where its Parquet file goes."""

    index: int
    format: str
    files: tuple[str, ...]
    target: str
    build: str


@dataclass(slots=True)
class PartitionResult:
    """What one block's ingest returns to the driver: counts and the block's few ranks rows."""

    index: int
    rows: int
    bytes: int          # Parquet written
    input_bytes: int    # trace files read
    files: int
    ranks: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    worker: str = ""    # host:pid of the process that ran it
    peak_rss: int = 0   # that process's peak resident memory so far, bytes


def plan(files: list[Path], fmt: str, events_dir: Path, build: str,
         ranks_per_partition: int = DEFAULT_RANKS_PER_PARTITION) -> list[PartitionTask]:
    """Cut the discovered files (in discovery order) into blocks of ``ranks_per_partition``."""
    if ranks_per_partition < 1:
        raise ValueError("ranks_per_partition must be at least 1")
    tasks = []
    for index, start in enumerate(range(0, len(files), ranks_per_partition)):
        chunk = files[start:start + ranks_per_partition]
        target = events_dir / f"{PARTITION_KEY}={index}" / PART_FILE
        tasks.append(PartitionTask(index, fmt, tuple(str(p) for p in chunk), str(target), build))
    return tasks


def ingest_partition(task: PartitionTask, progress: Callable[[int], None] | None = None) -> PartitionResult:
    """Read one block's trace files and write its Parquet file (atomically). Runs anywhere the
    files can be read: no state but the arguments."""
    from mapp.analysis.ingest.writer import write_events  # pyarrow's writer, only where it writes

    started = time.perf_counter()
    warnings: list[str] = []
    files = [Path(p) for p in task.files]
    target = Path(task.target)
    target.parent.mkdir(parents=True, exist_ok=True)
    batches, ranks = read_events(task.format, files, warnings.append, progress)
    rows = write_events(batches, target, task.build)
    return PartitionResult(
        index=task.index, rows=rows, bytes=target.stat().st_size,
        input_bytes=sum(p.stat().st_size for p in files), files=len(files),
        ranks=conform(ranks, RANKS_SCHEMA), warnings=warnings, seconds=time.perf_counter() - started,
        worker=f"{os.uname().nodename}:{os.getpid()}",
        peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    )


def ingest_local(tasks: list[PartitionTask], on_done: Callable[[PartitionResult], None] | None = None
                 ) -> list[PartitionResult]:
    """Every block in this process, one after another (the embedded engine); ``on_done`` gets
    each result as it is done, as a cluster engine's ``map`` does."""
    results = []
    for task in tasks:
        results.append(ingest_partition(task))
        if on_done is not None:
            on_done(results[-1])
    return results


@dataclass(slots=True)
class WorkerSummary:
    """What one worker process did in an ingest: its blocks, files, events, time and peak RSS."""

    worker: str
    blocks: int
    files: int
    rows: int
    seconds: float
    peak_rss: int


def per_worker(results: list[PartitionResult]) -> list[WorkerSummary]:
    """The blocks' results summed per worker process (a process's peak RSS is the largest any
    of its blocks saw: the peak so far when the block ended)."""
    by_worker: dict[str, list[PartitionResult]] = {}
    for result in results:
        by_worker.setdefault(result.worker, []).append(result)
    return [WorkerSummary(worker, len(done), sum(r.files for r in done), sum(r.rows for r in done),
                          sum(r.seconds for r in done), max(r.peak_rss for r in done))
            for worker, done in sorted(by_worker.items())]


def manifest_entry(cache: Path, results: list[PartitionResult], ranks_per_partition: int) -> dict:
    """The manifest's description of the dataset: every file, its rows, bytes and ranks."""
    files = []
    for result in sorted(results, key=lambda r: r.index):
        ranks = result.ranks["rank"].drop_nulls()
        files.append({
            "path": f"{EVENTS_DIR}/{PARTITION_KEY}={result.index}/{PART_FILE}",
            PARTITION_KEY: result.index, "rows": result.rows, "bytes": result.bytes,
            "ranks": len(ranks), "first_rank": int(ranks.min()) if len(ranks) else None,
            "last_rank": int(ranks.max()) if len(ranks) else None,
        })
    return {"by": PARTITION_KEY, "ranks_per_partition": ranks_per_partition, "files": files}


def files_of(cache: Path, manifest: dict) -> tuple[Path, ...]:
    """The dataset's Parquet files in block order (the order of the single file's rows)."""
    return tuple(cache / entry["path"] for entry in manifest["partitions"]["files"])


def check(cache: Path, manifest: dict, schema_ok) -> str | None:
    """None if every file the manifest names is there, whole and of this build; else what is wrong."""
    partitions, build = manifest.get("partitions"), manifest.get("build")
    if not isinstance(partitions, dict) or not isinstance(partitions.get("files"), list):
        return "manifest.json: no list of partition files"
    for entry in partitions["files"]:
        try:
            path = cache / entry["path"]
            size, rows = entry["bytes"], entry["rows"]
        except (TypeError, KeyError):
            return "manifest.json: a partition entry without path, bytes or rows"
        try:
            if path.stat().st_size != size:
                return f"{entry['path']}: {path.stat().st_size} bytes where the manifest recorded {size}"
            meta = pq.read_metadata(path)
        except FileNotFoundError:
            return f"{entry['path']}: missing"
        except OSError as exc:
            return f"{entry['path']}: unreadable ({exc.strerror or type(exc).__name__})"
        except Exception:       # pyarrow's errors for garbage or a cut-off file
            return f"{entry['path']}: not a Parquet file"
        if not schema_ok(path, meta):
            return f"{entry['path']}: not the expected schema"
        if meta.num_rows != rows:
            return f"{entry['path']}: {meta.num_rows} rows where the manifest counted {rows}"
        if (meta.metadata or {}).get(BUILD_KEY.encode()) != str(build).encode():
            return f"{entry['path']}: from another build"
    return None


def clear(cache: Path) -> None:
    """Remove the dataset's directory (the manifest is removed first by ``cache.clear``)."""
    events = cache / EVENTS_DIR
    if events.is_symlink() or events.is_file():
        events.unlink()
    elif events.is_dir():
        shutil.rmtree(events)


def ranks_table(results: list[PartitionResult]) -> pl.DataFrame:
    """Every block's ranks, as one table."""
    frames = [r.ranks for r in sorted(results, key=lambda r: r.index)]
    return pl.concat(frames) if frames else conform(pl.DataFrame(), RANKS_SCHEMA)
