"""Writing the events table as Parquet: one file, written beside its target and published by
one rename, the build id in its footer (``cache.check`` reads it back). Used for the single-file
cache and for each file of a partitioned dataset (``dataset``), wherever the writing process runs.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mapp.analysis.ingest.schema import BUILD_KEY, EVENTS_ARROW_SCHEMA, to_arrow_events
from mapp.output import publish, scratch

__all__ = ["write_events"]

_DICTIONARY_COLUMNS = ["ph", "name", "cat", "lane", "group", "src_file"]
# Min/max statistics let a scan skip row groups by rank, time, iteration...; on the string and
# list columns they prune nothing (every row group holds many names) and cost ~10% of the encoding.
_STATISTICS_COLUMNS = [f.name for f in EVENTS_ARROW_SCHEMA if pa.types.is_integer(f.type)]
# Times and line numbers grow row by row within a file: stored as deltas they take ~10x less
# room than plain + zstd, and encode faster.
_DELTA_COLUMNS = {"ts_ns": "DELTA_BINARY_PACKED", "src_line": "DELTA_BINARY_PACKED"}
# Batches waiting for the Parquet writer thread (each ~15 MB at the readers' batch sizes).
_QUEUED_TABLES = 2


def write_events(batches: Iterator, target: Path, build: str) -> int:
    # the build id in the footer ties the file to its manifest (cache.check reads it back)
    schema = EVENTS_ARROW_SCHEMA.with_metadata({BUILD_KEY: build})
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


