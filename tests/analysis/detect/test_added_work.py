"""Work a rank adds (``added_work``): the ops it calls more often than its peers, and what that costs."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.added_work import added_work


def _work(rows):
    """``same_work``'s per (rank, iteration, kind) table from (rank, name, shape, calls, q_us), two
    data-parallel peers (``dp``) of one stage, three iterations alike."""
    out = [{"rank": r, "dp": r, "pp": 0, "iteration": it, "name": n, "shape": s, "calls": float(c), "q": q * 1e3}
           for it in range(3) for r, n, s, c, q in rows]
    return pl.DataFrame(out).cast({"rank": pl.Int32, "dp": pl.Int32, "pp": pl.Int32, "iteration": pl.Int32})


def test_extra_calls_of_a_name_are_the_work_added():
    # rank 1 runs a third more of the layer's GEMMs, same shape, same time a call
    work = _work([(0, "aten::mm", "[[512,256],[256,1024]]", 60, 100.0),
                  (1, "aten::mm", "[[512,256],[256,1024]]", 80, 100.0),
                  (0, "aten::add", "[[512,1024]]", 40, 5.0), (1, "aten::add", "[[512,1024]]", 40, 5.0)])
    added = added_work(work, ["pp"]).row(0, named=True)
    assert added["rank"] == 1 and abs(added["added"] - 80 / 60) < 1e-9
    assert abs(added["added_excess_ns"] - 20 * 100e3) < 1e-3


def test_one_more_call_of_a_name_adds_one_call_not_the_names_other_shapes():
    # two replicas of other sequence lengths: rank 1 copies longer tensors (other shapes, dearer
    # calls) and makes one copy more a step (a log line). What it adds is that one call at most,
    # not the 1.0 ms more its copies of longer tensors take
    work = _work([(0, "aten::copy_", "[[2,8,206,206]]", 59, 10.0),
                  (1, "aten::copy_", "[[2,8,256,256]]", 59, 26.0),
                  (1, "aten::copy_", "[[38,2]]", 1, 6.0)])
    added = added_work(work, ["pp"]).row(0, named=True)
    assert added["rank"] == 1
    assert added["added_excess_ns"] <= 26e3 + 1e-3          # one call at its dearest kind
    assert added["added"] < 1.05                            # not (59 x 26 + 6) / (59 x 10) = 2.6x
