"""One Chrome trace of the whole job, for Perfetto UI and chrome://tracing.

pid = global rank, one named thread per lane (compute, comm, ...), processes ordered by
(pp, tp, dp). Events are streamed from the Parquet events table and encoded by polars
column expressions, so the merged file is written without holding the job in memory.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from mapp import trace_format
from mapp.analysis.ingest.bundle import TraceBundle

if TYPE_CHECKING:
    from mapp.analysis.align import ClockModel
from mapp.errors import InputError, OutputError
from mapp.output import is_stdout, open_beside, output_target, publish

__all__ = ["MERGED_MARKER", "MergeResult", "write_chrome_trace", "lane_ids", "process_order", "us_text"]

MERGED_MARKER = trace_format.MERGED_MARKER
# Lanes that get fixed, readable positions; any other lane follows in name order.
_LANE_ORDER = ("iteration", "compute", "comm", "optimizer", "data", "other")
_BATCH_ROWS = 1 << 18
_EVENT_COLUMNS = ["rank", "ph", "name", "cat", "lane", "ts_ns", "dur_ns", "thread_dur_ns", "runnable_ns", "args"]


@dataclass(frozen=True, slots=True)
class MergeResult:
    path: Path
    events: int
    ranks: int


def lane_ids(lanes: Iterable[str]) -> dict[str, int]:
    """Stable integer thread ids for lane names (Chrome traces want numeric tids)."""
    known = [lane for lane in _LANE_ORDER if lane in set(lanes)]
    others = sorted(set(lanes) - set(_LANE_ORDER))
    return {lane: i for i, lane in enumerate([*known, *others])}


def process_order(ranks: pl.DataFrame) -> list[int]:
    """Ranks sorted by (pp, tp, dp, rank): pipeline stages top to bottom, as people read them."""
    return ranks.sort(["pp", "tp", "dp", "rank"], nulls_last=True)["rank"].to_list()


def us_text(ns: pl.Expr) -> pl.Expr:
    """Integer nanoseconds as exact decimal microseconds text (no float rounding on large clocks)."""
    whole = (ns.abs() // 1000).cast(pl.String)
    frac = (ns.abs() % 1000).cast(pl.String).str.zfill(3)
    sign = pl.when(ns < 0).then(pl.lit("-")).otherwise(pl.lit(""))
    return pl.concat_str([sign, whole, pl.lit("."), frac])


def _us_field(key: str, column: str) -> pl.Expr:
    """``,"key":<column in us>`` where the column is set, else nothing."""
    return (pl.when(pl.col(column).is_not_null())
            .then(pl.concat_str([pl.lit(f',"{key}":'), us_text(pl.col(column))])).otherwise(pl.lit("")))


def _encode(frame: pl.DataFrame, tids: dict[str, int], clock: "ClockModel | None") -> pl.Series:
    frame = frame.with_columns(
        ts_ns=pl.col("ts_ns") if clock is None else clock.to_reference(pl.col("ts_ns"), pl.col("rank")),
        tid=pl.col("lane").replace_strict(tids, default=len(tids), return_dtype=pl.Int64),
        ph=pl.when(pl.col("ph") == "I").then(pl.lit("i")).otherwise(pl.col("ph")),
    )
    head = pl.struct(
        pl.col("name"), pl.col("cat"), pl.col("ph"), pid=pl.col("rank"), tid=pl.col("tid")
    ).struct.json_encode()
    dur = pl.when(pl.col("ph") == "X").then(pl.concat_str([pl.lit(',"dur":'), us_text(pl.col("dur_ns"))])).otherwise(pl.lit(""))
    # a host span's thread time and wait for a core, as the capture wrote them (Perfetto shows
    # ``tdur`` as the slice's thread duration)
    thread = pl.concat_str([_us_field("tdur", "thread_dur_ns"), _us_field("rdur", "runnable_ns")])
    scope = pl.when(pl.col("ph") == "i").then(pl.lit(',"s":"t"')).otherwise(pl.lit(""))
    line = pl.concat_str(
        [
            head.str.strip_suffix("}"),
            pl.lit(',"ts":'),
            us_text(pl.col("ts_ns")),
            dur,
            thread,
            scope,
            pl.lit(',"args":'),
            pl.col("args").fill_null("{}"),
            pl.lit("},\n"),
        ]
    )
    return frame.select(line.alias("line")).to_series()


def _write_lines(handle, lines: pl.Series) -> None:
    """Write a column of encoded lines straight from its Arrow data buffer (no Python strings)."""
    array = lines.to_arrow()
    for chunk in array.chunks if isinstance(array, pa.ChunkedArray) else [array]:
        chunk = chunk.cast(pa.large_string())
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int64)
        first, last = offsets[chunk.offset], offsets[chunk.offset + len(chunk)]
        handle.write(memoryview(chunk.buffers()[2])[first:last])


def _metadata_lines(bundle: TraceBundle, tids: dict[str, int], lanes_by_rank: dict[int, list[str]]) -> list[str]:
    events: list[dict] = [
        {"ph": "M", "name": MERGED_MARKER, "pid": 0, "tid": 0,
         "args": {"source": str(bundle.directory), "format": bundle.format, "layout": bundle.layout}},
    ]
    for order, rank in enumerate(process_order(bundle.ranks)):
        row = bundle.ranks.filter(pl.col("rank") == rank).row(0, named=True)
        coords = {axis: row[axis] for axis in ("tp", "pp", "dp", "cp", "ep")}
        has_coords = any(v is not None for v in coords.values())
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                       "args": {"name": trace_format.process_label(rank, coords if has_coords else None)}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": order}})
        for lane in lanes_by_rank.get(rank, []):
            tid = tids[lane]
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": lane}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}})
    return [json.dumps(e, separators=(",", ":")) + ",\n" for e in events]


def _open_output(out_path: Path, inputs: set[Path]) -> tuple[IO, Path | None, Path | None]:
    """(open temporary file, its path, the file it will replace); for ``-``, stdout and Nones."""
    if is_stdout(out_path):
        return _Unclosed(sys.stdout.buffer), None, None
    target = output_target(out_path)
    if target.resolve() in inputs:
        raise OutputError(f"{out_path} is one of the input traces", "choose another -o path; mapp never overwrites its input")
    parent = target.parent
    if not parent.is_dir():
        raise OutputError(f"cannot write {out_path}: {parent} does not exist", "create the directory first or choose another -o path")
    try:
        handle, tmp = open_beside(target)
    except OSError as error:
        raise OutputError(f"cannot write {out_path}: {error.strerror}", "choose a writable -o path") from None
    return handle, tmp, target


class _Unclosed:
    """stdout as the merged trace's file: written and flushed, never closed (the process still
    prints after it)."""

    def __init__(self, stream: IO) -> None:
        self.stream = stream
        self.write, self.writelines = stream.write, stream.writelines

    def __enter__(self) -> "_Unclosed":
        return self

    def __exit__(self, *exc) -> None:
        self.stream.flush()


def write_chrome_trace(
    bundle: TraceBundle,
    out_path: Path,
    *,
    clock: "ClockModel | None" = None,
    extra_lines: Callable[[], Iterable[str]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> MergeResult:
    """Write ``bundle`` as one Chrome trace at ``out_path`` (atomically: all or nothing).

    ``clock`` maps every rank's raw times onto the reference clock (offset and drift);
    ``extra_lines`` yields additional encoded event lines (flows, markers) written at the end.
    """
    inputs = {Path(p).resolve() for p in bundle.ranks["src_file"].to_list()}
    lane_pairs = bundle.scan().select("rank", "lane").unique().collect()
    tids = lane_ids(lane_pairs["lane"].drop_nulls().to_list())
    lanes_by_rank: dict[int, list[str]] = {}
    for rank, lane in lane_pairs.sort("lane").iter_rows():
        if lane is not None:
            lanes_by_rank.setdefault(rank, []).append(lane)
    for lanes in lanes_by_rank.values():
        lanes.sort(key=tids.__getitem__)

    handle, tmp, target = _open_output(Path(out_path), inputs)
    written = 0
    try:
        with handle:
            handle.write(b'{"displayTimeUnit":"ns","traceEvents":[\n')
            handle.writelines(line.encode() for line in _metadata_lines(bundle, tids, lanes_by_rank))
            parts = [pq.ParquetFile(path) for path in bundle.parts]
            total = sum(part.metadata.num_rows for part in parts)
            for parquet in parts:
                for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=_EVENT_COLUMNS):
                    frame = pl.from_arrow(batch)
                    _write_lines(handle, _encode(frame, tids, clock))
                    written += len(frame)
                    if progress:
                        progress(written, total)
            if extra_lines is not None:
                handle.writelines(line.encode() for line in extra_lines())
            handle.write(b'{"ph":"M","name":"mapp-end","pid":0,"tid":0,"args":{}}\n]}\n')
        if tmp is not None:
            publish(tmp, target)
    except BrokenPipeError:  # stdout's reader stopped early (| head): not a write failure
        raise
    except OSError as error:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if error.errno is None:  # not the file system refusing a write: Arrow failing to read the events
            raise InputError(f"cannot read the events table {bundle.events_path}: {str(error).splitlines()[0]}",
                             "run again with --no-cache to rebuild it from the traces") from None
        raise OutputError(f"cannot write {out_path}: {error.strerror}", "check free space and permissions") from None
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise
    return MergeResult(Path(out_path), written, len(bundle.ranks))
