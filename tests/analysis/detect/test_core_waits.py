"""Waits for a core (``detect.core_waits``) on hand-made events tables."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.core_waits import absorbed, records_waits, waited


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


def _flagged(ranks):
    return pl.DataFrame({"rank": ranks, "flagged": [True] * len(ranks)}, schema={"rank": pl.Int32, "flagged": pl.Boolean})


def _nets(nets_ms, others_ms, net_z=None):
    """Stage 2's table as ``lateness`` writes it: each rank's net, the others' median (given by
    hand), and ``net_z`` where a test needs it."""
    return pl.DataFrame({"rank": list(range(len(nets_ms))), "net_ns": [n * 1e6 for n in nets_ms],
                         "others_net_ns": [o * 1e6 for o in others_ms],
                         "net_z": net_z or [0.0] * len(nets_ms)},
                        schema={"rank": pl.Int32, "net_ns": pl.Float64, "others_net_ns": pl.Float64, "net_z": pl.Float64})


def test_a_rank_that_waited_on_net_more_than_the_others_is_absorbed():
    # (hand-made) rank 1's own time grew with cold caches, yet it waited for its peers 104 ms
    # more than they waited for it, the others above zero on net: its extra time cost no one
    out = absorbed(_flagged([1]), _nets([40, -104, 30, 34], [32, 34, 34, 30]))
    assert out["flagged"].to_list() == [False]


def test_where_every_rank_waits_on_net_the_highest_net_still_made_the_others_wait():
    # fresh207's DP8 on 2 cores, rank 5's layers 1.8x: every rank below zero, rank 5 the highest
    nets = [-2239, -2466, -1001, -1750, -1136, -488, -2329, -1812]
    # the others' medians: rank 5's -1,812; rank 1's -1,750
    out = absorbed(_flagged([5, 1]), _nets(nets, [-1812, -1750, -1812, -1812, -1812, -1812, -1812, -1781]))
    assert dict(zip(out["rank"].to_list(), out["flagged"].to_list())) == {5: True, 1: False}


def _steady(flagged_ranks, steady_rank, ratio):
    return _flagged(flagged_ranks).with_columns(
        steady=pl.when(pl.col("rank") == steady_rank).then(ratio).otherwise(None).cast(pl.Float64))


def test_a_steady_rank_is_absorbed_only_where_its_net_wait_stands_out():
    # fresh209's PP2 x DP4 on 2 cores, rank 6's matmul layers 1.39x its peers' at least in every
    # step: its net 225 ms under the others' median but within their scatter (net_z -0.37)
    nets = [-1164, -638, -986, -567, -1447, -595, -863, -523]
    others = [-638, -863, -638, -863, -638, -863, -638, -863]
    z = [-1.1, 0.3, -0.6, 0.5, -2.0, 0.4, -0.37, 0.6]
    out = absorbed(_steady([6], 6, 1.39), _nets(nets, others, z))
    assert out["flagged"].to_list() == [True]
    # a steady victim waits clearly more: the same nets with rank 6's at net_z -1.3 absorb it
    z[6] = -1.3
    out = absorbed(_steady([6], 6, 1.39), _nets(nets, others, z))
    assert out["flagged"].to_list() == [False]
    # and a rank that is not the job's steady one is absorbed below the median, however near
    out = absorbed(_steady([6], 2, 1.3), _nets(nets, others, [-0.37 if r == 6 else 0.0 for r in range(8)]))
    assert out["flagged"].to_list() == [False]
