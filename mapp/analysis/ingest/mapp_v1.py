"""Reader for mapp trace format v1 (``rank-*.json``, one event per line).

DuckDB's JSON reader parses the files (in C++) straight into Arrow batches, which are
streamed to the caller: the whole table never has to sit in memory at once. The work is a
pipeline over threads: one thread parses (DuckDB reads a JSON array file on one thread
anyway), the consuming thread lifts the ``args`` fields into columns, and the caller's writer
encodes Parquet. A file cut off mid-line by a crash is salvaged up to its last complete event.
"""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import orjson
import polars as pl
import pyarrow as pa

from mapp import trace_format
from mapp.analysis.ingest.schema import ARG_COLUMNS, COORDS, EVENTS_ARROW_SCHEMA, EVENTS_SCHEMA, RANKS_SCHEMA, conform
from mapp.errors import TraceFormatError

__all__ = ["NAME", "sniff", "read", "read_batches", "read_header"]

NAME = "mapp"
_TAIL_BYTES = 1 << 16
# Rows per Arrow batch handed to the Parquet writer: small enough that the few batches in
# flight stay a few tens of MB, large enough that per-batch costs vanish (measured at 3.2 M
# events: 48k rows ~20 MB less peak RSS than 64k at the same speed; 32k is ~15% slower).
_BATCH_ROWS = int(os.environ.get("MAPP_INGEST_BATCH_ROWS", 49152))
_KEPT_PHASES = ("X", "i", "I", "C")
_KEPT_BYTE = np.zeros(256, dtype=bool)  # the first byte of a one-character phase -> kept?
_KEPT_BYTE[np.frombuffer("".join(_KEPT_PHASES).encode(), dtype=np.uint8)] = True
# DuckDB names the item of a LIST 'l'; the events table's lists name it 'item' (same layout).
_GROUP_RANKS_TYPE = EVENTS_ARROW_SCHEMA.field("group_ranks").type
_COLUMNS = (
    "{ph:'VARCHAR',name:'VARCHAR',cat:'VARCHAR',pid:'BIGINT',tid:'VARCHAR',"
    "ts:'DOUBLE',dur:'DOUBLE',tdur:'DOUBLE',rdur:'DOUBLE',args:'JSON'}"
)
# DuckDB parses a JSON array file on one thread, and rows must come out in file order: parsing
# files side by side makes DuckDB hold the files ahead (and a 32 MiB read buffer per thread),
# ~150 MB more at peak. On 2 cores one parsing thread plus the lifting and Parquet threads
# use both; with more cores a second parser helps until the single lifting and Parquet
# threads are the limit (from their CPU time, ~3 M events/s; not measured on such a machine).
_PARSE_THREADS = int(os.environ.get("MAPP_INGEST_PARSE_THREADS", 1 if (os.cpu_count() or 1) <= 2 else 2))
_DUCKDB_CONFIG = {"memory_limit": os.environ.get("MAPP_DUCKDB_MEMORY", "1GB"), "threads": _PARSE_THREADS}
# Parsed batches waiting for the lifting thread (each ~10 MB at the default batch size). The
# parser is the pipeline's critical path: with one slot it waited ~0.2 s in all for the lifting
# thread to take a batch (3.2 M events); three slots let it run on (~10% faster overall, the
# same peak RSS within the noise: the allocator reuses the freed batches).
_QUEUED_BATCHES = 3
_ARG_SPEC = "{" + ",".join(f'"{k}":"{v}"' for k, v in ARG_COLUMNS.items()) + "}"
_LIFT = f"unnest(json_transform(args, '{_ARG_SPEC}'))"


def sniff(path: Path, head: bytes) -> bool:
    """A v1 file opens with ``[`` and a ``mapp`` metadata event declaring ``mapp-trace``."""
    return head.lstrip().startswith(b"[") and f'"format":"{trace_format.FORMAT_NAME}"'.encode() in head.replace(b" ", b"")


class _Scratch:
    """The temporary directory for salvaged copies: made only when a file needs one, removed by
    :meth:`remove` (``mapp-salvage-*`` in the temp directory)."""

    __slots__ = ("_path",)

    def __init__(self) -> None:
        self._path: Path | None = None

    def path(self) -> Path:
        if self._path is None:
            self._path = Path(tempfile.mkdtemp(prefix="mapp-salvage-"))
        return self._path

    def remove(self) -> None:
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
            self._path = None


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A file ready for DuckDB: the path to parse (the original or a salvaged copy)."""

    original: Path
    parse_path: Path
    rank_row: dict


def read_header(path: Path) -> dict:
    """The ``args`` of the file's ``mapp`` metadata event (rank, world_size, layout, coords...)."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if number > 16:
                break
            text = line.strip().rstrip(b",")
            if not text or text in (b"[", b"]"):
                continue
            try:
                event = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise TraceFormatError(
                    f"{path}: line {number} is not JSON",
                    "a v1 trace has one JSON event per line; is this file a trace?",
                ) from None
            if isinstance(event, dict) and event.get("ph") == "M" and event.get("name") == "mapp":
                return event.get("args") or {}
    raise TraceFormatError(
        f"{path}: no 'mapp' metadata event in the first lines",
        "a v1 trace starts with the metadata event; pass --format if this is another format",
    )


def _clock_base(anchor) -> int | None:
    """The wall-clock time at trace time 0 from the ``clock_anchor`` (``unix_ns`` read when the
    trace's clock read ``trace_us``), or None where it is missing or malformed."""
    if not isinstance(anchor, dict):
        return None
    unix, at = anchor.get("unix_ns"), anchor.get("trace_us", 0.0)
    if not isinstance(unix, int) or isinstance(unix, bool) or not isinstance(at, (int, float)):
        return None
    return unix - round(at * 1000)


def _rank_row(path: Path, header: dict) -> dict:
    layout = header.get("layout") or {}
    coords = header.get("coords") or {}
    row = {
        "rank": header.get("rank"),
        "world_size": header.get("world_size"),
        "host": header.get("host"),
        "device": header.get("device"),
        "clock": header.get("clock"),
        "clock_base_unix_ns": _clock_base(header.get("clock_anchor")),
        "run_id": header.get("run_id"),
        "format": NAME,
        "src_file": str(path),
    }
    for axis in COORDS:
        row[axis] = coords.get(axis)
        row[f"layout_{axis}"] = layout.get(axis)
    row["layout_vpp"] = layout.get("vpp")
    if row["rank"] is None:
        raise TraceFormatError(f"{path}: metadata event has no rank", "the 'mapp' event must carry args.rank")
    return row


def _salvage_length(path: Path, warn: Callable[[str], None]) -> int | None:
    """Byte length of the file up to the ``}`` of its last complete event, or None if DuckDB
    can parse the file as it is.

    DuckDB accepts an unclosed array whose last event ends with ``,`` (the normal state of a
    v1 file being written) and a properly closed one; anything else (a line cut off by a
    crash, a missing comma, ``,`` before the closing ``]``) is parsed from a repaired copy.
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - _TAIL_BYTES))
        tail = f.read()
    lines = tail.split(b"\n")
    offset = len(tail)
    dropped = False
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        offset -= len(line) + (1 if index < len(lines) - 1 else 0)
        text = line.strip()
        if not text or text == b"]":
            continue
        if index == 0 and size > len(tail):
            break
        try:
            orjson.loads(text.rstrip(b","))
        except orjson.JSONDecodeError:
            if text == b"[":
                return None
            dropped = True
            continue
        if not dropped:
            closed = tail.rstrip().endswith(b"]")
            if (closed and not text.endswith(b",")) or (not closed and text.endswith(b",")):
                return None
        if dropped:
            warn(f"{path}: line {_line_of(path, size - len(tail) + offset) + 1} is cut off "
                 "(crash or copy in progress?); kept the events before it")
        return size - len(tail) + offset + len(line.rstrip().rstrip(b","))
    raise TraceFormatError(f"{path}: no complete event in its last {_TAIL_BYTES} bytes",
                           "the file is damaged beyond salvage; move it aside to read the rest")


def _line_of(path: Path, byte_offset: int) -> int:
    newlines = 0
    with open(path, "rb") as f:
        while byte_offset > 0:
            chunk = f.read(min(byte_offset, 1 << 22))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            byte_offset -= len(chunk)
    return newlines + 1


def _prepare(path: Path, scratch: _Scratch, warn: Callable[[str], None]) -> _Prepared:
    header = read_header(path)
    keep = _salvage_length(path, warn)
    parse_path = path
    if keep is not None:
        parse_path = scratch.path() / f"{len(os.listdir(scratch.path()))}-{path.name}"
        with open(path, "rb") as src, open(parse_path, "wb") as dst:
            _copy_prefix(src, dst, keep)
            dst.write(b"\n]\n")
    return _Prepared(path, parse_path, _rank_row(path, header))


def _copy_prefix(src, dst, length: int) -> None:
    remaining = length
    while remaining > 0:
        chunk = src.read(min(remaining, 1 << 22))
        if not chunk:
            break
        dst.write(chunk)
        remaining -= len(chunk)


def _query(paths: list[str]) -> str:
    """The parse: every event of ``paths`` in file order, ``file_index`` numbering the files.

    The ``args`` fields are lifted into columns later, on another thread (``_LIFT``)."""
    file_list = "[" + ",".join(_sql_string(p) for p in paths) + "]"
    return f"""
        SELECT file_index, ph, name, cat, tid AS lane,
               CAST(round(ts * 1000) AS BIGINT) AS ts_ns,
               CAST(round(coalesce(dur, 0) * 1000) AS BIGINT) AS dur_ns,
               CAST(round(tdur * 1000) AS BIGINT) AS thread_dur_ns,
               CAST(round(rdur * 1000) AS BIGINT) AS runnable_ns,
               CAST(args AS VARCHAR) AS args
        FROM read_json({file_list}, format = 'array', columns = {_COLUMNS})
    """


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _runs(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of each run of equal codes (a stretch of consecutive rows of one file)."""
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if len(codes) else np.empty(0, dtype=np.int64)
    return starts, np.diff(np.r_[starts, len(codes)])


def _line_numbers(codes: np.ndarray, next_line: np.ndarray,
                  runs: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Line of each row in its file; ``next_line[file]`` carries on across batches.

    Rows of one file are contiguous and in file order (DuckDB preserves insertion order), so
    a run of equal codes is a stretch of consecutive lines of one file (line 1 is ``[``).
    """
    n = len(codes)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    starts, lengths = runs if runs is not None else _runs(codes)
    first = next_line[codes[starts]]
    np.add.at(next_line, codes[starts], lengths)
    if len(starts) == 1:
        return np.arange(first[0], first[0] + n, dtype=np.int64)
    # arange within each run, shifted to the run's first line
    return np.arange(n) - np.repeat(starts, lengths) + np.repeat(first, lengths)


def read_batches(
    files: list[Path],
    *,
    warn: Callable[[str], None],
    progress: Callable[[int], None] | None = None,
    batch_bytes: int = 4 << 30,
) -> tuple[Iterator[pa.RecordBatch], pl.DataFrame]:
    """Stream the events of ``files`` as events-table Arrow batches; also return the ranks table.

    Files are parsed in groups of about ``batch_bytes``, one DuckDB query each (a query takes
    ~0.05 s to start: groups are large; memory does not grow with them, since one thread
    parses one file at a time); ``progress`` is called with the number of input bytes
    finished as each file is done.
    """
    scratch = _Scratch()
    try:
        prepared = [_prepare(path, scratch, warn) for path in files]
    except BaseException:
        scratch.remove()
        raise
    ranks = conform(pl.DataFrame([p.rank_row for p in prepared]), RANKS_SCHEMA)
    batches = _stream(prepared, scratch, warn, progress, batch_bytes)
    # The stream removes the copies when it ends; a stream closed or dropped before its first
    # batch (the caller found the ranks inconsistent) never runs that code: this does instead.
    weakref.finalize(batches, scratch.remove)
    return batches, ranks


def _groups(prepared: list[_Prepared], batch_bytes: int) -> Iterator[list[_Prepared]]:
    group: list[_Prepared] = []
    size = 0
    for item in prepared:
        group.append(item)
        size += item.parse_path.stat().st_size
        if size >= batch_bytes:
            yield group
            group, size = [], 0
    if group:
        yield group


@dataclass(slots=True)
class _FileTable:
    """Per-file values of one group of files, indexed by DuckDB's ``file_index`` in the group.

    Columns are built with numpy (no Arrow compute kernels, whose library ingest need not load)."""

    per_file: dict[str, tuple[np.ndarray, np.ndarray | None]]  # int32 values, null mask
    originals: list[bytes]
    next_line: np.ndarray

    @classmethod
    def of(cls, group: list[_Prepared]) -> "_FileTable":
        per_file = {}
        for name in ("rank", *COORDS):
            values = [p.rank_row[name] for p in group]
            nulls = np.array([v is None for v in values])
            per_file[name] = (np.array([0 if v is None else v for v in values], dtype=np.int32),
                              nulls if nulls.any() else None)
        return cls(per_file, [str(p.original).encode() for p in group], np.full(len(group), 2, dtype=np.int64))

    def column(self, name: str, codes: np.ndarray, runs: tuple[np.ndarray, np.ndarray]) -> pa.Array:
        values, nulls = self.per_file[name]
        if len(runs[0]) == 1 and (nulls is None or not nulls[codes[0]]):  # one file: a constant
            return pa.array(np.full(len(codes), values[codes[0]], dtype=np.int32))
        return pa.array(values[codes], mask=None if nulls is None else nulls[codes])

    def src_file(self, codes: np.ndarray, runs: tuple[np.ndarray, np.ndarray]) -> pa.Array:
        """The original path of each row's file, built run by run (rows come in runs of one file)."""
        offsets = np.zeros(len(codes) + 1, dtype=np.int32)
        pieces, end = [], 0
        for start, code, length in zip(runs[0].tolist(), codes[runs[0]].tolist(), runs[1].tolist()):
            name = self.originals[code]
            pieces.append(name * length)
            offsets[start + 1:start + length + 1] = np.arange(1, length + 1, dtype=np.int64) * len(name) + end
            end += len(name) * length
        return pa.StringArray.from_buffers(len(codes), pa.py_buffer(offsets), pa.py_buffer(b"".join(pieces)))


_END = object()


@dataclass(frozen=True, slots=True)
class _GroupDone:
    """Marker from the parsing thread: every batch of the files in ``group`` has been queued."""

    group: list[_Prepared]


def _stream(prepared, scratch, warn, progress, batch_bytes) -> Iterator[pa.RecordBatch]:
    names = {str(p.parse_path): str(p.original) for p in prepared}
    skipped_phases: dict[str, int] = {}
    con = duckdb.connect(config=_DUCKDB_CONFIG)
    lift = con.cursor()
    parsed: queue.Queue = queue.Queue(maxsize=_QUEUED_BATCHES)
    stop = threading.Event()

    def parse() -> None:
        # DuckDB releases the GIL while it parses, so this thread runs beside the lifting and
        # Parquet threads; its batches wait in ``parsed`` (bounded, so memory stays flat).
        try:
            for group in _groups(prepared, batch_bytes):
                files = _FileTable.of(group)
                finished = 0
                for batch in con.sql(_query([str(p.parse_path) for p in group])).to_arrow_reader(_BATCH_ROWS):
                    if stop.is_set():
                        return
                    parsed.put(_events(batch, files, skipped_phases))
                    # Rows come in file order: the files before this batch's last one are done.
                    last = batch.column("file_index")[-1].as_py() if batch.num_rows else finished
                    if last > finished:
                        parsed.put(_GroupDone(group[finished:last]))
                        finished = last
                parsed.put(_GroupDone(group[finished:]))
        except BaseException as error:  # raised again on the consuming thread
            parsed.put(error)
        finally:
            parsed.put(_END)

    parser = threading.Thread(target=parse, name="mapp-json-parser", daemon=True)
    parser.start()
    try:
        while (item := parsed.get()) is not _END:
            if isinstance(item, BaseException):
                if isinstance(item, (duckdb.Error, OSError)):
                    raise _format_error(item, names) from None
                raise item
            if isinstance(item, _GroupDone):
                if progress:
                    progress(sum(p.original.stat().st_size for p in item.group))
                continue
            try:
                events = _lift(item, lift)
            except duckdb.Error as error:
                raise _format_error(error, names) from None
            yield events
    finally:
        stop.set()
        while parser.is_alive():  # unblock a parser waiting to queue a batch
            try:
                parsed.get(timeout=0.05)
            except queue.Empty:
                pass
        parser.join()
        lift.close()
        con.close()
        scratch.remove()
    for phase, count in sorted(skipped_phases.items()):
        warn(f"skipped {count} events with ph={phase!r} (v1 analyses use X, i and C events)")


def _events(batch: pa.RecordBatch, files: _FileTable, skipped_phases: dict[str, int]) -> pa.Table:
    """DuckDB's batch -> the events table without the ``args`` fields: per-file columns filled
    in, metadata dropped (on the parsing thread)."""
    codes = batch.column("file_index").to_numpy(zero_copy_only=False).astype(np.int64)
    runs = _runs(codes)
    columns = {name: files.column(name, codes, runs) for name in ("rank", *COORDS)}
    columns["src_file"] = files.src_file(codes, runs)
    columns["src_line"] = pa.array(_line_numbers(codes, files.next_line, runs))
    columns["launch_ns"] = pa.nulls(len(codes), pa.int64())   # v1 records no launches
    events = pa.table({name: columns[name] if name in columns else batch.column(name)
                       for name in EVENTS_ARROW_SCHEMA.names if name not in ARG_COLUMNS})
    keep, other = _phase_masks(batch.column("ph"))
    if other.any():
        phases = batch.column("ph").to_pylist()
        for index in np.flatnonzero(other).tolist():
            skipped_phases[str(phases[index])] = skipped_phases.get(str(phases[index]), 0) + 1
    return _keep_rows(events, keep)


def _lift(events: pa.Table, lift: duckdb.DuckDBPyConnection) -> pa.Table:
    """``events`` with the ``args`` fields lifted into their columns (by DuckDB, on ``lift``,
    the consuming thread's cursor): an events-table batch."""
    lifted = lift.from_arrow(events.select(["args"])).select(_LIFT).to_arrow_table()
    arrays = []
    for name in EVENTS_ARROW_SCHEMA.names:
        if name == "group_ranks":
            column = lifted.column(name)
            arrays.append(pa.chunked_array([chunk.view(_GROUP_RANKS_TYPE) for chunk in column.chunks],
                                           _GROUP_RANKS_TYPE))
        else:
            arrays.append(lifted.column(name) if name in ARG_COLUMNS else events.column(name))
    return pa.Table.from_arrays(arrays, schema=EVENTS_ARROW_SCHEMA)


def _phase_masks(ph: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(kept, other): rows whose phase is kept, and rows neither kept nor metadata (``M``,
    dropped silently); a null phase is neither. Read off the string buffers: every phase is
    one character."""
    n = len(ph)
    if pa.types.is_string(ph.type) and n:
        offsets = np.frombuffer(ph.buffers()[1], dtype=np.int32, count=n + 1, offset=ph.offset * 4)
        data = ph.buffers()[2]
        if data is None:
            data = b""
        data = np.frombuffer(data, dtype=np.uint8)
        one = np.diff(offsets) == 1
        if one.all():  # the usual case: read the characters in one slice
            first = data[offsets[0]:offsets[n]]
            keep = _KEPT_BYTE[first]
            other = ~(keep | (first == ord("M")))
        else:
            first = np.zeros(n, dtype=np.uint8)
            first[one] = data[offsets[:-1][one]]
            keep = one & _KEPT_BYTE[first]
            other = ~(keep | (one & (first == ord("M"))))
    else:
        values = np.array(ph.to_pylist(), dtype=object)
        keep = np.isin(values, np.array(_KEPT_PHASES, dtype=object))
        other = ~(keep | (values == "M"))
    if ph.null_count:
        other &= np.array([value is not None for value in ph.to_pylist()])
    return keep, other


def _keep_rows(table: pa.Table, keep: np.ndarray) -> pa.Table:
    """``table`` without the rows where ``keep`` is False, as zero-copy slices.

    The rows dropped are metadata events, a couple at the head of each file: slicing around
    them avoids copying every column (a filter would copy the whole batch)."""
    if keep.all():
        return table
    edges = np.flatnonzero(np.diff(np.r_[False, keep, False].astype(np.int8)))
    runs = list(zip(edges[::2], edges[1::2]))
    if not runs:
        return table.slice(0, 0)
    if len(runs) > 64:  # scattered drops: one copying filter is cheaper than many slices
        return table.filter(pa.array(keep))
    return pa.concat_tables([table.slice(start, end - start) for start, end in runs])


def _format_error(error: Exception, names: dict[str, str]) -> TraceFormatError:
    message = str(error).splitlines()[0]
    for parse_path, original in names.items():
        message = message.replace(parse_path, original)
    message = message.replace("Invalid Input Error: ", "")
    return TraceFormatError(
        f"not a valid v1 trace: {message}",
        "each line must be one JSON event; fix or move the file, or pass --format",
    )


def read(files: list[Path], *, warn: Callable[[str], None]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read ``files`` whole into (events, ranks) tables."""
    batches, ranks = read_batches(files, warn=warn)
    table = pa.Table.from_batches(list(batches), schema=EVENTS_ARROW_SCHEMA)
    return conform(pl.from_arrow(table), EVENTS_SCHEMA), ranks
