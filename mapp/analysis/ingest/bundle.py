"""A trace bundle: one directory of per-rank traces, read once into the events table.

The events table is kept as Parquet in ``DIR/.mapp/events.parquet`` (beside ``ranks.parquet``
and a manifest of the inputs it was built from) and reused while the inputs are unchanged and
the cache is intact (see :mod:`mapp.analysis.ingest.cache`). Readers stream batches into it,
so a bundle larger than memory can still be ingested; analyses scan only the columns they need.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from mapp import __version__
from mapp.analysis.ingest import cache as cache_files
from mapp.analysis.ingest.cache import CACHE_DIR
from mapp.analysis.ingest.discover import discover, reader_module
from mapp.analysis.ingest.schema import COORDS, EVENTS_ARROW_SCHEMA, RANKS_SCHEMA, conform, to_arrow_events
from mapp.errors import LayoutError
from mapp.output import publish, scratch

__all__ = ["TraceBundle", "load_bundle", "CACHE_DIR"]

_DICTIONARY_COLUMNS = ["ph", "name", "cat", "lane", "group", "src_file"]
# Min/max statistics let a scan skip row groups by rank, time, iteration...; on the string and
# list columns they prune nothing (every row group holds many names) and cost ~10% of the encoding.
_STATISTICS_COLUMNS = [f.name for f in EVENTS_ARROW_SCHEMA if pa.types.is_integer(f.type)]
# Times and line numbers grow row by row within a file: stored as deltas they take ~10x less
# room than plain + zstd, and encode faster.
_DELTA_COLUMNS = {"ts_ns": "DELTA_BINARY_PACKED", "src_line": "DELTA_BINARY_PACKED"}
# Batches waiting for the Parquet writer thread (each ~15 MB at the readers' batch sizes).
_QUEUED_TABLES = 2


@dataclass(slots=True)
class TraceBundle:
    """The traces of one run: where they are, what format, the ranks table and the events."""

    directory: Path
    format: str
    events_path: Path
    ranks: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    from_cache: bool = False

    def scan(self) -> pl.LazyFrame:
        """The events table, lazily: select and filter before collecting."""
        return pl.scan_parquet(self.events_path)

    @property
    def events(self) -> pl.DataFrame:
        """The whole events table in memory."""
        return pl.read_parquet(self.events_path)

    @property
    def cache_dir(self) -> Path:
        return self.events_path.parent

    @property
    def layout(self) -> dict[str, int | None]:
        """Parallel layout shared by all ranks (``tp``, ``pp``, ``dp``, ``cp``, ``ep``, ``vpp``)."""
        row = self.ranks.row(0, named=True) if len(self.ranks) else {}
        return {axis: row.get(f"layout_{axis}") for axis in (*COORDS, "vpp")}

    @property
    def world_size(self) -> int | None:
        sizes = self.ranks["world_size"].drop_nulls()
        return int(sizes[0]) if len(sizes) else None


def _fingerprint(directory: Path, files: list[Path]) -> list[list]:
    # the path relative to the bundle, not the name: a file moved to another node's
    # subdirectory is another input
    return [[p.relative_to(directory).as_posix(), (s := p.stat()).st_size, s.st_mtime_ns] for p in files]


def _validate_ranks(ranks: pl.DataFrame) -> None:
    """Ranks must be unique and agree on world size and layout."""
    duplicated = ranks.filter(pl.col("rank").is_duplicated()).sort("rank")
    if len(duplicated):
        rank = duplicated["rank"][0]
        files = duplicated.filter(pl.col("rank") == rank)["src_file"].to_list()
        raise LayoutError(
            f"rank {rank} is claimed by more than one file: {', '.join(files)}",
            "traces of two runs are mixed in one directory; move one run's files elsewhere",
        )
    for column in ("world_size", *(f"layout_{a}" for a in (*COORDS, "vpp"))):
        values = ranks[column].drop_nulls().unique().sort()
        if len(values) > 1:
            counts = ranks.group_by(column).agg(pl.col("rank").min(), pl.len()).sort(column)
            detail = "; ".join(
                f"{column.removeprefix('layout_')}={v} on {n} files (e.g. rank {r})"
                for v, r, n in counts.iter_rows()
            )
            raise LayoutError(
                f"ranks disagree on {column.removeprefix('layout_')}: {detail}",
                "traces of different runs are mixed in one directory",
            )
    world = ranks["world_size"].drop_nulls()
    if len(world) and (ranks["rank"] >= world[0]).any():
        bad = ranks.filter(pl.col("rank") >= world[0])["rank"][0]
        raise LayoutError(f"rank {bad} is outside world_size {world[0]}", "the trace metadata is inconsistent")
    # Each rank has its own place in the (tp, pp, dp, cp) grid; ep subdivides data parallelism.
    placed = ranks.drop_nulls(["tp", "pp", "dp", "cp"])
    clash = placed.filter(pl.struct("tp", "pp", "dp", "cp").is_duplicated()).sort("rank")
    if len(clash):
        first = clash.row(0, named=True)
        same = clash.filter((pl.col("tp") == first["tp"]) & (pl.col("pp") == first["pp"])
                            & (pl.col("dp") == first["dp"]) & (pl.col("cp") == first["cp"]))["rank"].to_list()
        raise LayoutError(
            f"ranks {', '.join(map(str, same))} all claim tp{first['tp']} pp{first['pp']} dp{first['dp']} cp{first['cp']}",
            "the trace metadata is inconsistent: each rank has its own coordinates",
        )


def _write_parquet_atomically(batches: Iterator, target: Path, build: str) -> int:
    # the build id in the footer ties the file to its manifest (cache.check reads it back)
    schema = EVENTS_ARROW_SCHEMA.with_metadata({cache_files.BUILD_KEY: build})
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    scratch(Path(tmp))
    rows = 0
    # Parsing (DuckDB, releases the GIL) and compressing (pyarrow) overlap on two threads.
    pending: queue.Queue = queue.Queue(maxsize=_QUEUED_TABLES)
    failure: list[BaseException] = []

    def write() -> None:
        try:
            with pq.ParquetWriter(tmp, schema, compression="zstd", use_dictionary=_DICTIONARY_COLUMNS,
                                  write_statistics=_STATISTICS_COLUMNS, column_encoding=_DELTA_COLUMNS) as writer:
                while (table := pending.get()) is not None:
                    writer.write_table(table, row_group_size=1 << 20)
        except BaseException as error:  # reported on the calling thread
            failure.append(error)
            while pending.get() is not None:
                pass

    writer_thread = threading.Thread(target=write, name="mapp-parquet-writer", daemon=True)
    writer_thread.start()
    try:
        try:
            for batch in batches:
                table = to_arrow_events(batch)
                pending.put(table)
                rows += table.num_rows
        finally:
            pending.put(None)
            writer_thread.join()
        if failure:
            raise failure[0]
        publish(Path(tmp), target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return rows


def _read_all(module, files: list[Path], warn, progress) -> tuple[Iterator[pl.DataFrame], pl.DataFrame]:
    if hasattr(module, "read_batches"):
        return module.read_batches(files, warn=warn, progress=progress)
    events, ranks = module.read(files, warn=warn)
    if progress:
        progress(sum(p.stat().st_size for p in files))
    return iter([events]), ranks


def load_bundle(
    directory: Path | str,
    *,
    format: str | None = None,
    use_cache: bool = True,
    warn: Callable[[str], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TraceBundle:
    """Read the traces in ``directory`` into a bundle (reusing the Parquet cache when valid).

    ``progress(done_bytes, total_bytes)`` is called as input is read; ``warn`` receives one
    line per recoverable problem (a salvaged truncated file, skipped events...).
    """
    directory = Path(directory)
    warnings: list[str] = []

    def _warn(message: str) -> None:
        warnings.append(message)
        if warn:
            warn(message)

    found = discover(directory, format)
    if found.format == "kineto" and found.ignored:
        # Kineto traces have no naming convention: a damaged one looks like any other file.
        names = ", ".join(p.relative_to(directory).as_posix() for p in found.ignored[:3])
        names += ", ..." if len(found.ignored) > 3 else ""
        _warn(f"{directory}: skipped {len(found.ignored)} .json file(s) that are not PyTorch profiler "
              f"traces ({names}); if one should be, it is damaged")
    cache = cache_files.location(directory, _warn)
    wanted = cache_files.identity(found.format, _fingerprint(directory, found.files), __version__)
    checked = cache_files.check(cache, wanted) if use_cache else cache_files.Cached(False)
    if checked.fresh:
        ranks = _cached_ranks(cache)
        if ranks is not None:
            return TraceBundle(directory, found.format, cache / cache_files.EVENTS, ranks, warnings, from_cache=True)
        checked = cache_files.Cached(False, f"{cache_files.RANKS}: unreadable")
    damaged = cache if checked.problem is not None else None
    try:
        cache_files.clear(cache)
    except OSError:                             # cannot put things right in place
        cache = cache_files.fallback(directory, cache, _warn)
    ranks = _build(directory, found, cache, wanted, _warn, progress)
    if damaged is not None:
        _warn(f"{damaged} was damaged ({checked.problem}); rebuilt it"
              + ("" if cache == damaged else f" in {cache}"))
    return TraceBundle(directory, found.format, cache / cache_files.EVENTS, ranks, warnings)


def _cached_ranks(cache: Path) -> pl.DataFrame | None:
    """The cached ranks table, or None if its data cannot be read (the check read only the
    footer; the table is a few rows, so reading it all is what checks the rest)."""
    try:
        return pl.read_parquet(cache / cache_files.RANKS)
    except (OSError, pl.exceptions.PolarsError):
        return None


def _build(directory: Path, found, cache: Path, wanted: dict, _warn, progress) -> pl.DataFrame:
    """Read the traces and write the cache in ``cache``: events, ranks, then the manifest that
    makes them valid (a build cut short leaves no manifest, so it is merely absent)."""
    events_path, ranks_path = cache / cache_files.EVENTS, cache / cache_files.RANKS
    module = reader_module(found.format)
    total = sum(p.stat().st_size for p in found.files)
    done = 0

    def _progress(finished: int) -> None:
        nonlocal done
        done += finished
        if progress:
            progress(done, total)

    batches, ranks = _read_all(module, found.files, _warn, _progress)
    try:
        _validate_ranks(ranks)
    except BaseException:
        if hasattr(batches, "close"):
            batches.close()
        raise
    ranks = conform(ranks, RANKS_SCHEMA).sort("rank")
    build = cache_files.new_build()
    rows = _write_parquet_atomically(batches, events_path, build)
    if rows == 0:
        _warn(f"{directory}: the trace files hold no events")
    tmp = ranks_path.with_suffix(".parquet.tmp")
    ranks.write_parquet(tmp, metadata={cache_files.BUILD_KEY: build})
    os.replace(tmp, ranks_path)
    cache_files.write_manifest(cache, {**wanted, "build": build,
                                       "rows": {cache_files.EVENTS: rows, cache_files.RANKS: ranks.height},
                                       "crc32": {name: cache_files.crc32(cache / name)
                                                 for name in (cache_files.EVENTS, cache_files.RANKS)}})
    return ranks
