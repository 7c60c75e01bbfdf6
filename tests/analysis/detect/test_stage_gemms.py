"""GEMMs a pipeline stage of one rank adds to its layers, counted where no shapes were recorded."""

import polars as pl
import pytest

from mapp.analysis.detect.stage_gemms import layer_units, stage_gemms

# a layer's ops a microbatch, GEMMs aside, and a step's own ops (called once a step on every stage)
LAYER_OPS = {"aten::gelu": 1, "aten::_softmax": 1, "aten::native_layer_norm": 2, "aten::baddbmm": 1}
STEP_OPS = {"aten::pow": 1, "aten::randint": 1}


def _ops(stages: list[dict], iterations=(2, 3, 4)) -> pl.DataFrame:
    """One row a call (1 us each): per stage (its rank's index) ``layers`` layers of
    ``LAYER_OPS`` for 2 microbatches, ``STEP_OPS`` once a step, and ``mm`` ``aten::mm`` calls a step."""
    rows = []
    for rank, stage in enumerate(stages):
        for it in iterations:
            calls = {name: n * 2 * stage["layers"] for name, n in LAYER_OPS.items()} | STEP_OPS
            calls["aten::mm"] = stage["mm"]
            for name, n in calls.items():
                rows += [{"rank": rank, "iteration": it, "name": name, "self_ns": 1000}] * n
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "iteration": pl.Int32, "name": pl.Utf8, "self_ns": pl.Int64})


def _coords(n: int) -> pl.DataFrame:
    return pl.DataFrame({"rank": list(range(n)), "pp": list(range(n))}, schema={"rank": pl.Int32, "pp": pl.Int32})


def test_a_stages_layers_are_the_ratio_its_layers_ops_share_not_its_once_a_step_ops():
    units = layer_units(_ops([{"layers": 1, "mm": 24}, {"layers": 3, "mm": 78}])).sort("rank", "iteration")
    # each layer op 2 calls against 6, their median 4: 0.5 and 1.5 (the once-a-step ops say 1.0)
    assert units.filter(pl.col("rank") == 0)["units"].to_list() == [0.5] * 3
    assert units.filter(pl.col("rank") == 1)["units"].to_list() == [1.5] * 3


def test_gemms_the_first_stage_calls_beyond_the_last_stages_per_layer_are_added():
    # one layer a stage: the last calls 30 GEMMs a step (its layers' 24 and its output layer's 6),
    # the first 37 where its layers alone call 24
    added = stage_gemms(_ops([{"layers": 1, "mm": 37}, {"layers": 1, "mm": 30}]), _coords(2))
    assert added is not None and added["rank"].to_list() == [0]
    row = added.row(0, named=True)
    assert row["added"] == pytest.approx(37 / 30)
    assert row["added_excess_ns"] == pytest.approx(7 * 1000)


def test_the_last_stages_output_layer_is_its_program_not_added_work():
    assert stage_gemms(_ops([{"layers": 1, "mm": 24}, {"layers": 1, "mm": 30}]), _coords(2)) is None
    # and of a stage of three layers, at its scale
    assert stage_gemms(_ops([{"layers": 1, "mm": 24}, {"layers": 3, "mm": 78}]), _coords(2)) is None


def test_gemms_the_last_stage_calls_beyond_its_layers_and_output_layer_are_added():
    # its layers' 24 and at most a quarter of them for the output layer: 30 its program's
    added = stage_gemms(_ops([{"layers": 1, "mm": 24}, {"layers": 1, "mm": 61}]), _coords(2))
    assert added is not None and added["rank"].to_list() == [1]
    assert added.row(0, named=True)["added"] == pytest.approx(61 / 30)


def test_a_last_stage_under_twice_its_layers_gemms_can_have_added_work():
    # megatron-core PP2 under the profiler's defaults, 1.44x the last stage's layer matmuls: 40-43
    # GEMM calls a step where its layers call 24 (under 2x, once the bound)
    added = stage_gemms(_ops([{"layers": 1, "mm": 24}, {"layers": 1, "mm": 42}]), _coords(2))
    assert added is not None and added["rank"].to_list() == [1]
    row = added.row(0, named=True)
    assert row["added"] == pytest.approx(42 / 30)
    assert row["added_excess_ns"] == pytest.approx(12 * 1000)
    # one call over its program's, rounding, is not
    assert stage_gemms(_ops([{"layers": 1, "mm": 24}, {"layers": 1, "mm": 30}]), _coords(2)) is None


def test_a_middle_stage_is_held_to_the_leanest_stages_gemms_a_layer():
    stages = [{"layers": 1, "mm": 24}, {"layers": 1, "mm": 30}, {"layers": 1, "mm": 24}, {"layers": 1, "mm": 30}]
    added = stage_gemms(_ops(stages), _coords(4))
    assert added is not None and added["rank"].to_list() == [1]
    assert added.row(0, named=True)["added"] == pytest.approx(30 / 24)


def test_work_added_in_one_iteration_only_is_not_added_work():
    ops = pl.concat([_ops([{"layers": 1, "mm": 24}, {"layers": 1, "mm": 30}], iterations=(2, 3, 4)),
                     _ops([{"layers": 1, "mm": 40}, {"layers": 1, "mm": 30}], iterations=(5,))])
    assert stage_gemms(ops, _coords(2)) is None
