"""A trace bundle: one directory of per-rank traces, read once into the events table.

The events table is kept as Parquet in ``DIR/.mapp/events.parquet`` (beside ``ranks.parquet``
and a manifest of the inputs it was built from), or, by :func:`ingest_partitioned`, as the
partitioned dataset of :mod:`mapp.analysis.ingest.dataset`; either is reused while the inputs
are unchanged and the cache is intact (see :mod:`mapp.analysis.ingest.cache`). Readers stream batches into it,
so a bundle larger than memory can still be ingested; analyses scan only the columns they need.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from mapp import __version__
from mapp.analysis.ingest import cache as cache_files
from mapp.analysis.ingest import dataset
from mapp.analysis.ingest.cache import CACHE_DIR
from mapp.analysis.ingest.discover import discover, read_events
from mapp.analysis.ingest.schema import COORDS, RANKS_SCHEMA, conform
from mapp.analysis.ingest.writer import write_events
from mapp.errors import LayoutError

__all__ = ["TraceBundle", "load_bundle", "ingest_partitioned", "CACHE_DIR"]

@dataclass(slots=True)
class TraceBundle:
    """The traces of one run: where they are, what format, the ranks table and the events."""

    directory: Path
    format: str
    events_path: Path
    ranks: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    from_cache: bool = False
    # The Parquet files that hold the events, in row order: ``(events_path,)`` for the single
    # file; a partitioned dataset's files (``events_path`` is then its directory).
    parts: tuple[Path, ...] = ()
    # Only these iterations' events (``window``); None: every event.
    iterations: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.parts:
            self.parts = (self.events_path,)

    @property
    def partitioned(self) -> bool:
        return self.events_path.is_dir()

    def events_stamp(self) -> tuple[int, int]:
        """The events files' total size and latest modification time (ns): what tells a table
        derived from them (the matching cache, a --db database) that they changed."""
        stats = [p.stat() for p in self.parts]
        return sum(s.st_size for s in stats), max(s.st_mtime_ns for s in stats)

    def scan(self) -> pl.LazyFrame:
        """The events table, lazily: select and filter before collecting."""
        # the files as a list, not the directory: block 10 must come after block 9, and the
        # partition key is not one of the events' columns
        scan = pl.scan_parquet(list(self.parts), hive_partitioning=False)
        if self.iterations is not None:
            scan = scan.filter(pl.col("iteration").is_in(list(self.iterations)))
        return scan

    def window(self, iterations: Iterable[int]) -> TraceBundle:
        """The same bundle seen through some iterations only: what it scans, and what is
        matched and detected on it, holds only their events (``mapp detect --window``)."""
        return replace(self, iterations=tuple(sorted({int(i) for i in iterations})), warnings=list(self.warnings))

    def traced_iterations(self) -> list[int]:
        """The iterations the events carry, ascending (a streaming pass over one column)."""
        scan = pl.scan_parquet(list(self.parts), hive_partitioning=False)
        found = scan.select(pl.col("iteration").drop_nulls().unique()).collect(engine="streaming")
        return sorted(int(i) for i in found["iteration"].to_list())

    @property
    def events(self) -> pl.DataFrame:
        """The whole events table in memory."""
        return self.scan().collect()

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
            "traces of two runs (or a file and its copy) are mixed in one directory; move all but one run's "
            "files elsewhere (a profiler's repeated cycles of one process are read together)",
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
    warnings, _warn = _collecting(warn)
    found, cache, wanted = _inputs(directory, format, _warn)
    with cache_files.building(cache):           # one builder at a time; the next finds it built
        checked = cache_files.check(cache, wanted) if use_cache else cache_files.Cached(False)
        if checked.fresh:
            ranks = _cached_ranks(cache)
            if ranks is not None:
                return _cached_bundle(directory, found.format, cache, checked.manifest, ranks, warnings)
            checked = cache_files.Cached(False, f"{cache_files.RANKS}: unreadable")
        damaged = cache if checked.problem is not None else None
        try:
            cache_files.clear(cache)
        except OSError:                         # cannot put things right in place
            cache = cache_files.fallback(directory, cache, _warn)
        ranks = _build(directory, found, cache, wanted, _warn, progress)
    if damaged is not None:
        _warn(f"{damaged} was damaged ({checked.problem}); rebuilt it"
              + ("" if cache == damaged else f" in {cache}"))
    return TraceBundle(directory, found.format, cache / cache_files.EVENTS, ranks, warnings)


def _collecting(warn: Callable[[str], None] | None) -> tuple[list[str], Callable[[str], None]]:
    """A list that keeps every warning, and the function that adds to it and passes each on."""
    warnings: list[str] = []

    def _warn(message: str) -> None:
        warnings.append(message)
        if warn:
            warn(message)

    return warnings, _warn


def _inputs(directory: Path, format: str | None, _warn):
    """The bundle's trace files, where its cache goes, and the identity a cache of them has."""
    found = _discover(directory, format, _warn)
    cache = cache_files.location(directory, _warn)
    wanted = cache_files.identity(found.format, _fingerprint(directory, found.files), __version__)
    return found, cache, wanted


def _discover(directory: Path, format: str | None, _warn):
    found = discover(directory, format)
    if found.format == "kineto" and found.ignored:
        # Kineto traces have no naming convention: a damaged one looks like any other file.
        names = ", ".join(p.relative_to(directory).as_posix() for p in found.ignored[:3])
        names += ", ..." if len(found.ignored) > 3 else ""
        _warn(f"{directory}: skipped {len(found.ignored)} .json file(s) that are not PyTorch profiler "
              f"traces ({names}); if one should be, it is damaged")
    return found


def ingest_partitioned(
    directory: Path | str,
    *,
    format: str | None = None,
    run: Callable[[list[dataset.PartitionTask]], list[dataset.PartitionResult]] | None = None,
    ranks_per_partition: int = dataset.DEFAULT_RANKS_PER_PARTITION,
    engine: dict | None = None,
    warn: Callable[[str], None] | None = None,
) -> tuple[TraceBundle, list[dataset.PartitionResult]]:
    """Read the traces in ``directory`` into the partitioned dataset (``DIR/.mapp/events/``),
    always anew, replacing whichever form of the cache was there.

    ``run`` turns the blocks' tasks into their results: :func:`dataset.ingest_local` (in this
    process, the default) or a cluster engine's (``mapp.analysis.cluster``), which must run
    every task once. ``engine`` (its name, workers...) is recorded in the manifest.
    """
    directory = Path(directory)
    warnings, _warn = _collecting(warn)
    found, cache, wanted = _inputs(directory, format, _warn)
    with cache_files.building(cache):           # a load of this bundle meanwhile waits for it
        try:
            cache_files.clear(cache)
            (cache / cache_files.EVENTS).unlink(missing_ok=True)   # the single file this replaces
        except OSError:
            cache = cache_files.fallback(directory, cache, _warn)
        build = cache_files.new_build()
        tasks = dataset.plan(found.files, found.format, cache / dataset.EVENTS_DIR, build, ranks_per_partition)
        try:
            results = (run or dataset.ingest_local)(tasks)
            for result in sorted(results, key=lambda r: r.index):
                for message in result.warnings:
                    _warn(message)
            ranks = dataset.ranks_table(results)
            _validate_ranks(ranks)
        except BaseException:
            dataset.clear(cache)
            raise
        ranks = conform(ranks, RANKS_SCHEMA).sort("rank")
        rows = sum(r.rows for r in results)
        if rows == 0:
            _warn(f"{directory}: the trace files hold no events")
        _seal(cache, ranks, {**wanted, "build": build, "layout": cache_files.PARTITIONED,
                             "rows": {dataset.EVENTS_DIR: rows},
                             "partitions": dataset.manifest_entry(cache, results, ranks_per_partition),
                             **({"engine": engine} if engine else {})})
        manifest = cache_files.read_manifest(cache)
        bundle = TraceBundle(directory, found.format, cache / dataset.EVENTS_DIR, ranks, warnings,
                             parts=dataset.files_of(cache, manifest))
        return bundle, results


def _seal(cache: Path, ranks: pl.DataFrame, manifest: dict) -> None:
    """Write ``ranks.parquet``, then the manifest that makes the cache valid (with the ranks
    table's rows and CRC added to the ones ``manifest`` gives)."""
    ranks_path = cache / cache_files.RANKS
    tmp = ranks_path.with_suffix(".parquet.tmp")
    ranks.write_parquet(tmp, metadata={cache_files.BUILD_KEY: manifest["build"]})
    os.replace(tmp, ranks_path)
    rows = {**manifest.get("rows", {}), cache_files.RANKS: ranks.height}
    crcs = {**manifest.get("crc32", {}), cache_files.RANKS: cache_files.crc32(ranks_path)}
    cache_files.write_manifest(cache, {**manifest, "rows": rows, "crc32": crcs})


def _cached_bundle(directory: Path, fmt: str, cache: Path, manifest: dict, ranks: pl.DataFrame,
                   warnings: list[str]) -> TraceBundle:
    if manifest.get("layout") == cache_files.PARTITIONED:
        return TraceBundle(directory, fmt, cache / dataset.EVENTS_DIR, ranks, warnings, from_cache=True,
                           parts=dataset.files_of(cache, manifest))
    return TraceBundle(directory, fmt, cache / cache_files.EVENTS, ranks, warnings, from_cache=True)


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
    events_path = cache / cache_files.EVENTS
    total = sum(p.stat().st_size for p in found.files)
    done = 0

    def _progress(finished: int) -> None:
        nonlocal done
        done += finished
        if progress:
            progress(done, total)

    batches, ranks = read_events(found.format, found.files, _warn, _progress)
    try:
        _validate_ranks(ranks)
    except BaseException:
        if hasattr(batches, "close"):
            batches.close()
        raise
    ranks = conform(ranks, RANKS_SCHEMA).sort("rank")
    build = cache_files.new_build()
    rows = write_events(batches, events_path, build)
    if rows == 0:
        _warn(f"{directory}: the trace files hold no events")
    _seal(cache, ranks, {**wanted, "build": build, "rows": {cache_files.EVENTS: rows},
                         "crc32": {cache_files.EVENTS: cache_files.crc32(events_path)}})
    return ranks
