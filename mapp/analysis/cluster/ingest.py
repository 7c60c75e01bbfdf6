"""Ingest on a Ray cluster: one task per block of ranks, each parsing its trace files and
writing its Parquet file of the partitioned dataset where it runs (the file system is shared);
the driver gets back counts and the block's ranks rows, never events."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mapp.analysis.cluster.engine import RayEngine
from mapp.analysis.ingest import dataset
from mapp.analysis.ingest.bundle import TraceBundle, ingest_partitioned

__all__ = ["IngestProgress", "ingest_on_cluster"]


@dataclass(slots=True)
class IngestProgress:
    """Where a cluster ingest stands, handed to the caller after every finished block."""

    files_done: int = 0
    files: int = 0
    blocks_done: int = 0
    blocks: int = 0
    events: int = 0
    input_bytes: int = 0
    started: float = 0.0

    @property
    def events_per_s(self) -> float:
        elapsed = time.perf_counter() - self.started
        return self.events / elapsed if elapsed > 0 else 0.0


def ingest_on_cluster(
    directory: Path | str,
    engine: RayEngine,
    *,
    format: str | None = None,
    ranks_per_partition: int = dataset.DEFAULT_RANKS_PER_PARTITION,
    warn: Callable[[str], None] | None = None,
    progress: Callable[[IngestProgress], None] | None = None,
) -> tuple[TraceBundle, list[dataset.PartitionResult]]:
    """Read ``directory``'s traces into its partitioned dataset on ``engine``'s workers."""

    def run(tasks: list[dataset.PartitionTask]) -> list[dataset.PartitionResult]:
        state = IngestProgress(files=sum(len(t.files) for t in tasks), blocks=len(tasks), started=time.perf_counter())
        if progress:
            progress(state)

        def done(result: dataset.PartitionResult) -> None:
            state.files_done += result.files
            state.blocks_done += 1
            state.events += result.rows
            state.input_bytes += result.input_bytes
            if progress:
                progress(state)

        return engine.map(dataset.ingest_partition, tasks, on_done=done)

    return ingest_partitioned(directory, format=format, run=run, ranks_per_partition=ranks_per_partition,
                              engine=engine.describe(), warn=warn)
