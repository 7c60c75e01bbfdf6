"""A span's own time: its duration less the time its thread was runnable but waited for a core.

mapp's capture on the host clock records, for each span, the time its thread spent on a run
queue (``runnable_ns``, the trace's ``rdur``; ``capture.clock.ThreadTimeClock``). Where CPU
processes share cores, that wait is the other processes' doing, not the span's: megatron-core
DP4 under mapp's capture, 4 processes on 2 cores, no fault: over 4 steps one rank's
transformer layers took 316 ms of forward and another's 577 ms, of which 37 ms and 256 ms
waiting for a core, and 279 ms and 321 ms without it; with 1.4x real matmuls in one rank's
layers, that rank's forward layers took 446 ms without the wait against its peers' 265-297 ms,
where their wall times (603 against 399-667 ms) named no one. What is left is the span's
computing, and any sleep or lock inside it (a span that sleeps is not runnable): the same work
on every peer, however busy its cores were.

Traces without the field (profiler traces, the MegatronApp tracer, GPU clocks, older captures)
keep their durations.
"""

from __future__ import annotations

import polars as pl

__all__ = ["own_ns", "RUNNABLE"]

RUNNABLE = "runnable_ns"


def own_ns(frame: pl.DataFrame) -> pl.Expr:
    """``dur_ns`` less ``runnable_ns`` where ``frame`` has it (an expression over ``frame``)."""
    if RUNNABLE not in frame.columns:
        return pl.col("dur_ns")
    return pl.col("dur_ns") - pl.col(RUNNABLE).fill_null(0).clip(upper_bound=pl.col("dur_ns"))
