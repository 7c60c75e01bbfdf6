"""Waits for a core (``detect.core_waits``) on hand-made events tables."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.core_waits import records_waits, waited


def _spans(rows):
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "cat": pl.String, "iteration": pl.Int32,
                                      "dur_ns": pl.Int64, "runnable_ns": pl.Int64}, orient="row")


def test_a_kernel_that_keeps_no_scheduler_statistics_records_no_waits():
    # every span's wait 0: schedstat read but never counted; judged as a trace without the field
    assert not records_waits(_spans([(0, "compute", 1, 100, 0), (1, "compute", 1, 100, 0)]))
    assert not records_waits(_spans([(0, "compute", 1, 100, None)]))
    assert records_waits(_spans([(0, "compute", 1, 100, 0), (1, "compute", 1, 100, 3)]))


def test_a_rank_waits_stand_out_only_in_every_iteration():
    rows = []
    for it in (1, 2, 3):
        for rank in (0, 1, 2, 3):
            # rank 1 waits 30 of 100 in every iteration, its peers 2-3; rank 2 waits 40 in one only
            wait = 30 if rank == 1 else (40 if rank == 2 and it == 2 else 2 + rank % 2)
            rows.append((rank, "compute", it, 100, wait))
    found = waited(_spans(rows))
    assert set(found) == {1}
    # its peers: ranks 0 and 2 wait 2, rank 3 waits 3 (rank 2 40 once): their median 2 of 100
    assert found[1]["share"] == 0.3 and found[1]["peers_share"] == 0.02
    assert found[1]["iterations"] == [1, 2, 3]
