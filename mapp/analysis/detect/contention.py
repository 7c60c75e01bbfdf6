"""Kernels that ran beside a collective on their own GPU: slowed by it, not by their GPU.

A collective kernel occupies streaming multiprocessors for as long as it runs, and on a rank
that waits for a slower peer it runs long: NCCL's kernel spins until the peer's data arrives.
Under DDP the gradient buckets' all-reduces run beside the backward pass, so the waiting rank's
backward kernels share its GPU with its spinning all-reduces and take longer than the same
kernels on the rank that keeps it waiting: the victim looks slow. (2 H200s, a DDP transformer, a
neighbour process busy 30% of rank 1's GPU: rank 0 spent 226 ms a step inside all-reduces, its
backward GEMMs ran 1.2-1.5x rank 1's, and rank 0 read "1.23x its peers".) Same work is timed on
the calls that did not run beside a collective kernel (``contended`` false): on each rank those
ran on the GPU alone, or beside what else shares it (the neighbour process).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from mapp.analysis.ingest.schema import COMM_KERNEL_PATTERN

__all__ = ["contended"]


def contended(ops: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """``ops`` (with ``rank``, ``lane``, ``ts_ns``, ``end_ns``) with a ``contended`` column: a
    kernel (a ``stream:`` lane) that overlaps, on its rank, a collective or p2p kernel (of another
    stream: a stream runs one kernel at a time). CPU ops are never contended."""
    on_gpu = pl.col("lane").str.starts_with("stream:")
    comm = events.filter(on_gpu & (pl.col("cat").is_in(["collective", "p2p"])
                                   | pl.col("name").str.contains(f"(?i){COMM_KERNEL_PATTERN}")))
    if comm.is_empty() or ops.is_empty():
        return ops.with_columns(contended=pl.lit(False))
    flags = np.zeros(len(ops), dtype=bool)
    index = ops.with_row_index("_i").filter(on_gpu)
    for (rank,), kernels in index.group_by("rank"):
        spans = comm.filter(pl.col("rank") == rank).select("ts_ns", end=pl.col("ts_ns") + pl.col("dur_ns")).sort("ts_ns")
        if spans.is_empty():
            continue
        starts, ends = spans["ts_ns"].to_numpy(), np.maximum.accumulate(spans["end"].to_numpy())
        # a kernel overlaps some comm span when the last span starting before its end ends after
        # its start (ends made running maxima: a long span hides shorter ones inside it)
        at = np.searchsorted(starts, kernels["end_ns"].to_numpy(), side="left") - 1
        hit = (at >= 0) & (ends[np.maximum(at, 0)] > kernels["ts_ns"].to_numpy())
        flags[kernels["_i"].to_numpy()] = hit
    return ops.with_columns(contended=pl.Series(flags))
