"""Stage 2's waits for communication a rank only launched (``lateness._launched_waits``)."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.lateness import _launched_waits


def _launches(rows):
    """Members of launch-only collectives: (instance, op, rank, start ms); the last launcher is
    the member that started last."""
    m = pl.DataFrame([{"instance_id": i, "op": op, "rank": r, "start": int(t * 1e6), "n_members": 2, "launched": True}
                      for i, op, r, t in rows]).with_columns(pl.col("rank").cast(pl.Int32))
    m = m.with_columns(last=pl.col("start").max().over("instance_id"))
    blame = m.group_by("instance_id").agg(who=pl.col("rank").sort_by("start").last(), op=pl.col("op").first())
    return m, blame


def _waits(rows):
    return pl.DataFrame([{"rank": r, "name": n, "start": int(t * 1e6), "dur_ns": int(d * 1e6), "iteration": 0}
                         for r, n, t, d in rows]).with_columns(pl.col("rank", "iteration").cast(pl.Int32))


def test_a_wait_is_for_the_last_launch_of_its_kind_and_only_for_the_launch_skew():
    # DP2: rank 1 launches its gradient reduce-scatter 30 ms after rank 0; rank 0 then waits
    # 35 ms in grad_sync_wait: 30 of them for rank 1, 5 for the transfer. A parameter gather
    # launched (by both at once) between them is not what grad_sync_wait waits for.
    m, blame = _launches([(0, "grad_reduce", 0, 10.0), (0, "grad_reduce", 1, 40.0),
                          (1, "param_gather", 0, 41.0), (1, "param_gather", 1, 41.0)])
    out = _launched_waits(m, blame, _waits([(0, "grad_sync_wait", 42.0, 35.0), (1, "grad_sync_wait", 42.0, 33.0)]))
    assert out.select("rank", "who", "dur").rows() == [(0, 1, 30e6)]   # rank 1 launched last: its wait is no one's


def test_a_gather_launched_inside_its_own_wait_is_what_the_wait_is_for():
    # finish_param_sync launches the first bucket's all-gather inside its own wait
    m, blame = _launches([(0, "param_gather", 0, 5.0), (0, "param_gather", 1, 25.0)])
    out = _launched_waits(m, blame, _waits([(0, "param_sync_wait", 4.0, 30.0)]))
    assert out.select("rank", "who", "dur").rows() == [(0, 1, 20e6)]
