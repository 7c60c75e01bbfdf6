"""Stage 2's waits for communication a rank only launched (``lateness._launched_waits``), the
waiting a rank imposes at one point of every iteration (``lateness._recurring``), and a rank's
net wait against the others' (``others_median``, ``waits_more_than_most``)."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.lateness import _launched_waits, _recurring, others_median, waits_more_than_most


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


def _members(rows):
    """Members of 3-rank collectives: (iteration, instance, {rank: start ms}); the last to start
    is last and the others wait for it."""
    out = []
    for it, i, starts in rows:
        last = max(starts.values())
        out += [{"instance_id": i, "iteration": it, "rank": r, "start": int(t * 1e6), "is_last": t == last}
                for r, t in starts.items()]
    m = pl.DataFrame(out).with_columns(pl.col("rank").cast(pl.Int32))
    blame = m.group_by("instance_id").agg(
        blame=(pl.col("start").max() - pl.col("start")).sum().cast(pl.Float64),
        n=pl.len(), who=pl.col("rank").filter(pl.col("is_last")).first())
    return m, blame


def test_a_rank_last_at_the_same_point_of_every_iteration_imposes_recurring_waits():
    # rank 0 arrives 20 ms late at each iteration's first collective; who is last at the second
    # is chance (rank 1, then 2, then 1): rank 0's 20 ms an iteration recur, nobody else's do
    rows = []
    for it, chance in ((0, 1), (1, 2), (2, 1)):
        rows.append((it, 2 * it, {0: 20.0, 1: 0.0, 2: 0.0}))
        rows.append((it, 2 * it + 1, {0: 30.0, 1: 30.0, 2: 30.0} | {chance: 33.0}))
    m, blame = _members(rows)
    out = dict(_recurring(m, blame).select("rank", "recurring_ns").rows())
    assert out[0] == 20e6
    assert 1 not in out and 2 not in out   # rank 1 last at the second in 2 of 3 iterations: under CONSISTENT


def test_each_rank_is_measured_against_the_median_of_the_others():
    # (by hand) of 1, 2, 3, 4: rank 0's others 2, 3, 4 -> 3; rank 3's 1, 2, 3 -> 2
    assert others_median([1.0, 2.0, 3.0, 4.0]) == [3.0, 3.0, 2.0, 2.0]
    # an even number of others: the middle two's mean (rank 0's 1, 2, 7, 10 -> 4.5); order kept
    assert others_median([1.0, 1.0, 2.0, 10.0, 7.0]) == [4.5, 4.5, 4.0, 1.5, 1.5]
    assert others_median([5.0]) == [None]


def test_a_steady_rank_waits_more_than_most_only_where_its_net_stands_out():
    # 8 ranks on 2 cores: rank 6 waits 225 ms net more than the others' median, within the
    # scatter (net_z -0.37): enough against any rank, not against the job's steady one
    late = {"net_ns": -863e6, "others_net_ns": -638e6, "net_z": -0.37}
    assert waits_more_than_most(late)
    assert not waits_more_than_most(late, steady=True)
    assert waits_more_than_most({**late, "net_z": -1.3}, steady=True)
    # above the others' median, or above zero: no waiter whatever its z
    assert not waits_more_than_most({**late, "others_net_ns": -900e6})
    assert not waits_more_than_most({"net_ns": 5e6, "others_net_ns": 9e6, "net_z": -2.0})
