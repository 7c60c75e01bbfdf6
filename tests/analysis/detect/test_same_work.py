"""Time on the same work where a profiler recorded no shapes: the n-th calls of an op pooled by time."""

import polars as pl

from mapp.analysis.detect.same_work import _nth_fastest


def _per_call(fast: dict[tuple[int, str, str], float]) -> pl.DataFrame:
    """``compare_same_work``'s per (rank, kind) table: ``fast`` ms per (rank, name, shape), one
    pipeline stage, its ``q`` a tenth above its fastest call."""
    rows = [{"rank": r, "pp": 0, "name": n, "shape": s, "q": 1.1e6 * ms, "fast": 1e6 * ms, "total": 4,
             "sizes_unknown": False} for (r, n, s), ms in fast.items()]
    return pl.DataFrame(rows)


def _fast(table: pl.DataFrame) -> dict[tuple[int, str, str], float]:
    return {(r, n, s): round(f / 1e6, 3) for r, n, s, f in table.select("rank", "name", "shape", "fast").iter_rows()}


def test_a_call_descheduled_in_every_step_takes_the_time_of_its_ops_like_calls():
    # rank 1's second matmul was 6 ms in each of its four steps, its first 1.05 ms: both 1 ms
    # on rank 0, the same work by its time; the third matmul is other work (3 ms)
    out = _fast(_nth_fastest(_per_call({
        (0, "aten::mm", "#0"): 1.0, (0, "aten::mm", "#1"): 1.02, (0, "aten::mm", "#2"): 3.0,
        (1, "aten::mm", "#0"): 1.05, (1, "aten::mm", "#1"): 6.0, (1, "aten::mm", "#2"): 3.1,
        (0, "aten::add", "*"): 0.2, (1, "aten::add", "*"): 0.9,
    }), ["pp"]))
    assert out[(1, "aten::mm", "#1")] == 1.05
    assert out[(0, "aten::mm", "#1")] == 1.0
    assert out[(1, "aten::mm", "#2")] == 3.1        # not pooled with the 1 ms calls
    assert out[(1, "aten::add", "*")] == 0.9        # kinds by name keep their own


def test_a_rank_slower_on_every_call_stays_slower():
    out = _fast(_nth_fastest(_per_call({
        (0, "aten::mm", "#0"): 1.0, (0, "aten::mm", "#1"): 1.1,
        (1, "aten::mm", "#0"): 1.5, (1, "aten::mm", "#1"): 1.65,
    }), ["pp"]))
    assert out[(1, "aten::mm", "#0")] == out[(1, "aten::mm", "#1")] == 1.5
    assert out[(0, "aten::mm", "#1")] == 1.0


def test_ops_of_other_names_are_not_pooled():
    out = _fast(_nth_fastest(_per_call({
        (0, "aten::mm", "#0"): 1.0, (1, "aten::mm", "#0"): 4.0,
        (0, "aten::bmm", "#0"): 1.0, (1, "aten::bmm", "#0"): 1.0,
    }), ["pp"]))
    assert out[(1, "aten::mm", "#0")] == 4.0
