"""The MegatronApp reader on real files of the original tracer (``tests/fixtures/megatronapp_original``:
two PP4 runs its authors published, written by the tracer of June 2025, whose records name no
global rank or coordinates)."""

from __future__ import annotations

import json
import pathlib

import polars as pl
import pytest

from mapp.analysis.ingest import megatronapp
from mapp.errors import TraceFormatError

ORIGINAL = pathlib.Path(__file__).parent.parent.parent / "fixtures" / "megatronapp_original"


def _read(directory: pathlib.Path):
    warnings: list[str] = []
    events, ranks = megatronapp.read(sorted(directory.glob("benchmark-data-*.json")), warn=warnings.append)
    return events, ranks, warnings


@pytest.mark.parametrize("run", ["pp", "app"])
def test_ranks_are_placed_by_their_file_names(run):
    events, ranks, warnings = _read(ORIGINAL / run)
    # benchmark-data-0-pipeline-{p}-tensor-0.json is stage p; TP 1 and DP 1 make it rank p
    assert ranks.sort("rank").select("rank", "pp", "tp", "dp").rows() == [(p, p, 0, 0) for p in range(4)]
    assert ranks["layout_pp"].unique().to_list() == [4] and ranks["world_size"].unique().to_list() == [4]
    assert any("g_rk" in w and "file names" in w for w in warnings)
    assert sorted(events["rank"].unique().to_list()) == [0, 1, 2, 3]


@pytest.mark.parametrize("run", ["pp", "app"])
def test_every_step_of_every_iteration_is_read(run):
    events, _, _ = _read(ORIGINAL / run)
    raw = json.loads((ORIGINAL / run / "benchmark-data-0-pipeline-2-tensor-0.json").read_text())
    # what the file holds, counted here from its records: B/E pairs per name
    ends = {name: sum(1 for r in raw if r["name"] == name and r["ph"] == "E") for name in ("iteration", "forward", "backward")}
    assert ends == {"iteration": 20, "forward": 640, "backward": 640}
    mine = events.filter(pl.col("rank") == 2)
    assert mine.group_by("name").len().sort("name").rows() == [("backward", 640), ("forward", 640), ("iteration", 20)]
    steps = mine.filter(pl.col("name").is_in(["forward", "backward"]))
    # the steps' own microbatch and model_chunk attributes: 8 microbatches through 4 model
    # chunks (the interleaved schedule), each pair once a direction an iteration
    pairs = steps.group_by("iteration", "name", "microbatch", "chunk").len()
    assert pairs["len"].unique().to_list() == [1] and pairs.height == 20 * 2 * 8 * 4
    assert sorted(steps["microbatch"].unique().to_list()) == list(range(8))
    assert sorted(steps["chunk"].unique().to_list()) == list(range(4))
    assert (steps["cat"] == "compute").all() and (steps["dur_ns"] > 0).all()


def test_a_file_named_for_a_rank_another_file_claims_is_refused(tmp_path):
    # stage 1's file copied under stage 0's name beside a file that names g_rk 0 itself
    run = tmp_path / "run"
    run.mkdir()
    (run / "benchmark-data-0-pipeline-1-tensor-0.json").write_bytes(
        (ORIGINAL / "pp" / "benchmark-data-0-pipeline-1-tensor-0.json").read_bytes())
    named = [{"name": "iteration", "ph": "B", "pad_before": 0},
             {"name": "forward", "ph": "B", "rel_ts": 10, "dp_rk": 0, "pp_rk": 0, "tp_rk": 0, "dev": 0, "g_rk": 1},
             {"name": "forward", "ph": "E", "rel_ts": 90, "dp_rk": 0, "pp_rk": 0, "tp_rk": 0, "dev": 0, "g_rk": 1},
             {"name": "iteration", "ph": "E", "rel_ts": 100, "duration_wall": 100, "duration_cuda": 100}]
    (run / "benchmark-data-0-pipeline-0-tensor-0.json").write_text(json.dumps(named))
    with pytest.raises(TraceFormatError, match="same global rank"):
        _read(run)
