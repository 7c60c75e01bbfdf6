"""Kernels that ran beside a collective kernel on their own GPU (``detect.contention``)."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.contention import contended


def _ops(rows):
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "lane": pl.String, "ts_ns": pl.Int64, "end_ns": pl.Int64},
                        orient="row")


def test_a_kernel_overlapping_its_own_ranks_collective_is_contended():
    events = pl.DataFrame({
        "rank": [0, 0, 1], "lane": ["stream:20", "stream:20", "stream:20"],
        "cat": ["collective", "other", "collective"], "name": ["all_reduce", "ncclDevKernel_SendRecv", "all_reduce"],
        "ts_ns": [100, 1_000, 5_000], "dur_ns": [400, 100, 1_000],
    }, schema_overrides={"rank": pl.Int32})
    ops = _ops([
        (0, "stream:7", 0, 50),          # before the all-reduce
        (0, "stream:7", 450, 600),       # its start inside it
        (0, "stream:7", 200, 300),       # wholly inside
        (0, "stream:7", 600, 1_050),     # reaching into the uncounted NCCL kernel
        (0, "stream:7", 5_100, 5_200),   # when rank 1's all-reduce ran, not its own
        (0, "cpu:1", 150, 200),          # a CPU op: never contended
        (1, "stream:7", 5_900, 6_100),   # rank 1, inside its all-reduce's end
    ])
    assert contended(ops, events)["contended"].to_list() == [False, True, True, True, False, False, True]


def test_without_communication_kernels_nothing_is_contended():
    events = pl.DataFrame({"rank": [0], "lane": ["cpu:1"], "cat": ["collective"], "name": ["all_reduce"],
                           "ts_ns": [0], "dur_ns": [1_000]}, schema_overrides={"rank": pl.Int32})
    ops = _ops([(0, "stream:7", 10, 20)])
    assert contended(ops, events)["contended"].to_list() == [False]
