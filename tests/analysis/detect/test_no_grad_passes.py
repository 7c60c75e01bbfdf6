"""Forward passes a pipeline stage of one rank runs outside autograd beyond its peers' share."""

import polars as pl
import pytest

from mapp.analysis.detect.no_grad_passes import forward_calls, graph_units, no_grad_passes

# a layer's forward ops a microbatch, recorded with autograd on; ``aten::view`` is also called as
# often under ``no_grad`` by every stage (a helper's, an evaluation's)
LAYER_OPS = {"aten::gelu": 1, "aten::native_layer_norm": 2, "aten::addmm": 4, "aten::view": 4}
HELPER_OPS = {"aten::view": 4}
MICROBATCHES = 2


def _ops(stages: list[dict], iterations=(2, 3, 4, 5)) -> pl.DataFrame:
    """One row a call (1 us each) per stage (its rank's index): ``layers`` layers of forward ops
    inside the graph for each microbatch, the helpers' calls outside it, their backward nodes
    (inside, not forward ops), the optimizer's zeroing once a step, and ``passes - 1`` more
    forward passes of its layers outside the graph (in the iterations ``repeat_in``, all by
    default); ``frozen`` layers run outside the graph only; ``extra_views`` more ``aten::view``
    calls outside it a step."""
    rows = []

    def add(rank, it, name, n, inside):
        rows.extend([{"rank": rank, "iteration": it, "name": name, "self_ns": 1000, "in_graph": inside}] * n)

    for rank, stage in enumerate(stages):
        for it in iterations:
            per_layer = int(MICROBATCHES * stage.get("layers", 1))
            repeats = stage.get("passes", 1) - 1 if it in stage.get("repeat_in", iterations) else 0
            for name, n in LAYER_OPS.items():
                add(rank, it, name, n * per_layer, True)
                add(rank, it, name, int(n * MICROBATCHES * (repeats * stage.get("layers", 1) + stage.get("frozen", 0))), False)
                add(rank, it, f"autograd::engine::evaluate_function: {name}Backward0", n * per_layer, True)
            for name, n in HELPER_OPS.items():
                add(rank, it, name, n * per_layer, False)
            add(rank, it, "aten::view", stage.get("extra_views", 0), False)
            add(rank, it, "aten::_foreach_zero_", 1, True)
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "iteration": pl.Int32, "name": pl.Utf8, "self_ns": pl.Int64,
                                      "in_graph": pl.Boolean})


HEALTHY = {"layers": 1}


def test_a_stage_repeating_its_forward_under_no_grad_adds_that_work():
    added = no_grad_passes(_ops([HEALTHY, {"layers": 1, "passes": 2}, HEALTHY, HEALTHY]), threshold=0.1)
    assert added is not None and added["rank"].to_list() == [1]
    row = added.row(0, named=True)
    # a stage calls 23 forward ops a step inside its graph (two microbatches: gelu 2, layer norm
    # 4, addmm 8, view 8; the zeroing 1) and 8 views outside; the repeating one calls its second
    # pass's 22 outside too, each beyond its peers' share: 53 calls, 31 of them its peers' share
    assert row["added_excess_ns"] == pytest.approx(22 * 1000)
    assert row["added_base_ns"] == pytest.approx(31 * 1000)
    assert row["added"] == pytest.approx(53 / 31)


def test_a_stage_of_more_layers_calls_more_inside_its_graph_too_and_adds_nothing():
    ops = _ops([HEALTHY, {"layers": 3}, HEALTHY, HEALTHY])
    assert no_grad_passes(ops, threshold=0.1) is None
    units = graph_units(forward_calls(ops)).sort("rank", "iteration")
    assert units.filter(pl.col("rank") == 1)["units"].to_list() == [3.0] * 4
    assert units.filter(pl.col("rank") == 0)["units"].to_list() == [1.0] * 4


def test_the_zeroing_once_a_step_does_not_outvote_the_layers_units():
    # many kinds of once-a-step ops against few kinds of layer ops: the calls vote, not the kinds
    units = graph_units(forward_calls(_ops([HEALTHY, {"layers": 2.5}, HEALTHY, HEALTHY])))
    assert units.filter(pl.col("rank") == 1)["units"].unique().to_list() == [2.5]


def test_a_stage_with_a_frozen_part_under_no_grad_holds_fewer_layers_in_its_graph_and_is_left_alone():
    # its peers hold two layers in the graph, it one, and runs one more outside (a teacher's, a frozen tower's)
    ops = _ops([{"layers": 2}, {"layers": 1, "frozen": 1}, {"layers": 2}, {"layers": 2}])
    assert no_grad_passes(ops, threshold=0.1) is None


def test_repeats_in_half_the_iterations_do_not_last():
    stage = {"layers": 1, "passes": 3, "repeat_in": (2, 3)}
    assert no_grad_passes(_ops([HEALTHY, HEALTHY, stage, HEALTHY]), threshold=0.1) is None
    stage = {"layers": 1, "passes": 3, "repeat_in": (2, 3, 4)}
    assert no_grad_passes(_ops([HEALTHY, HEALTHY, stage, HEALTHY]), threshold=0.1)["rank"].to_list() == [2]


def test_the_share_outside_the_graph_is_weighed_by_time_not_by_calls():
    # 40 more views a step outside the graph (a checkpoint's bookkeeping: saved inputs, restored
    # RNG state), each a tenth of a layer op's time: 2.3x its peers' calls outside-and-in for the
    # ops it calls in its graph, but its layers' own ops at their share, and they weigh most
    ops = _ops([HEALTHY, HEALTHY, HEALTHY, {"layers": 1, "extra_views": 40}])
    ops = ops.with_columns(self_ns=pl.when(pl.col("name") == "aten::view").then(100).otherwise(pl.col("self_ns")))
    assert no_grad_passes(ops, threshold=0.1) is None
    assert no_grad_passes(ops, threshold=0.02) is None
    # its layers' ops run again outside the graph in every step: those weigh
    added = no_grad_passes(_ops([HEALTHY, HEALTHY, HEALTHY, {"layers": 1, "passes": 2}]), threshold=0.1)
    assert added is not None and added["rank"].to_list() == [3]


def test_a_forward_replayed_inside_the_backward_is_recomputation_not_added_work():
    # a reentrant checkpoint: the stage's forward under no_grad, its layers' forward again with
    # autograd on inside its backward node's span; the no_grad pass is then its forward
    stages = [HEALTHY, {"layers": 1, "passes": 2}, HEALTHY, HEALTHY]
    ops = _ops(stages).with_columns(ts_ns=pl.int_range(pl.len()).cast(pl.Int64) * 10_000, dur_ns=pl.lit(1000, pl.Int64),
                                    lane=pl.lit("cpu:1"))
    assert no_grad_passes(ops, threshold=0.1) is not None      # no backward node around any pass
    # the layers' in-graph calls of rank 1 inside a checkpoint's backward node: one node spanning them
    inside = ops.filter((pl.col("rank") == 1) & pl.col("in_graph") & ~pl.col("name").str.contains("Backward"))
    node = inside.group_by("iteration").agg(ts_ns=pl.col("ts_ns").min() - 1, end=pl.col("ts_ns").max() + 1).select(
        rank=pl.lit(1, pl.Int32), iteration="iteration", name=pl.lit("autograd::engine::evaluate_function: CheckpointFunctionBackward"),
        self_ns=pl.lit(1000, pl.Int64), in_graph=pl.lit(True), ts_ns="ts_ns", dur_ns=pl.col("end") - pl.col("ts_ns"),
        lane=pl.lit("cpu:1"))
    replaying = pl.concat([ops, node.select(ops.columns).cast(ops.schema)])
    assert no_grad_passes(replaying, threshold=0.1) is None
    counts = forward_calls(replaying).filter((pl.col("rank") == 1) & (pl.col("name") == "aten::addmm"))
    assert counts["calls"].to_list() == [8.0] * 4 and counts["inside"].to_list() == [8.0] * 4


def test_without_autograd_numbers_or_with_two_stages_nothing_is_read():
    ops = _ops([HEALTHY, {"layers": 1, "passes": 2}, HEALTHY, HEALTHY])
    assert no_grad_passes(ops.drop("in_graph"), threshold=0.1) is None
    assert no_grad_passes(ops.filter(pl.col("rank") < 2), threshold=0.1) is None
