"""A forward pass replayed inside the backward: activation recomputation."""

import polars as pl

from mapp.analysis.detect.recompute import replayed

NODE = "autograd::engine::evaluate_function: CheckpointFunctionBackward"


def _ops(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "lane": pl.Utf8, "name": pl.Utf8, "ts_ns": pl.Int64,
                                      "dur_ns": pl.Int64, "in_graph": pl.Boolean}, orient="row")


def test_forward_ops_with_autograd_on_inside_a_backward_node_are_replays():
    ops = _ops([
        (0, "cpu:1", "aten::addmm", 0, 10, False),          # the no_grad forward pass
        (0, "cpu:1", NODE, 100, 100, True),
        (0, "cpu:1", "aten::addmm", 110, 10, True),         # its replay, autograd on
        (0, "cpu:1", "autograd::engine::evaluate_function: AddmmBackward0", 130, 50, True),
        (0, "cpu:1", "aten::mm", 140, 10, False),           # the backward's own GEMMs: no autograd
        (0, "cpu:1", "aten::gelu", 185, 5, True),           # still inside the outer node
        (0, "cpu:1", "aten::addmm", 250, 10, True),         # after it: a forward
        (0, "cpu:2", "aten::addmm", 120, 10, True),         # another thread's forward
        (1, "cpu:1", "aten::addmm", 110, 10, True),         # another rank's
    ])
    assert replayed(ops)["replayed"].to_list() == [False, False, True, False, False, True, False, False, False]


def test_without_times_or_backward_nodes_nothing_is_replayed():
    ops = _ops([(0, "cpu:1", "aten::addmm", 0, 10, True)])
    assert replayed(ops)["replayed"].to_list() == [False]
    assert replayed(ops.drop("ts_ns"))["replayed"].to_list() == [False]
