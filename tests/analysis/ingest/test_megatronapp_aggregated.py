"""MegatronApp's aggregated Chrome trace (what its ``aggregate.py`` makes of the per-rank files):
the published June 2025 ones (``tests/fixtures/megatronapp_original``) and one made by its current
aggregator (``tests/fixtures/megatronapp_aggregate``), read as the per-rank files they came from."""

from __future__ import annotations

import json
import pathlib
import shutil

import polars as pl
import pytest
from typer.testing import CliRunner

from mapp.analysis.detect import detector
from mapp.analysis.ingest import discover, load_bundle, megatronapp
from mapp.cli.app import app

FIXTURES = pathlib.Path(__file__).parent.parent.parent / "fixtures"
ORIGINAL = FIXTURES / "megatronapp_original"
CURRENT = FIXTURES / "megatronapp_aggregate"
# the p2p pairs the current aggregator moves onto the shorter of the two (``amendP2P``: these
# names and the records their ``expect`` pairs them with, ``recv-extra`` with ``send-warmup``)
_AMENDED = {"send-warmup", "recv-warmup", "exchange-next", "exchange-prev", "recv-extra"}


def _read(files: list[pathlib.Path]):
    warnings: list[str] = []
    events, ranks = megatronapp.read(files, warn=warnings.append)
    return events, ranks, warnings


def _steps(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(pl.col("name") != "iteration").sort("rank", "ts_ns", "name")


def test_the_published_aggregated_copy_holds_the_per_rank_files_steps():
    per_rank, ranks, _ = _read(sorted((ORIGINAL / "pp").glob("benchmark-data-*.json")))
    merged, merged_ranks, warnings = _read([ORIGINAL / "pp-aggregated" / "data-1-pipeline-4-tensor-1-pp-aggregated.json"])
    # pid p is stage p (dp x PP + pp, TP 1 and DP 1): the same ranks and coordinates
    cols = ["rank", "tp", "pp", "dp", "layout_tp", "layout_pp", "layout_dp", "world_size"]
    assert merged_ranks.sort("rank").select(cols).rows() == ranks.sort("rank").select(cols).rows()
    assert any("g_rk" in w for w in warnings)
    a, b = _steps(per_rank), _steps(merged)
    assert a.height == b.height == 4 * 2 * 640
    assert a.select("rank", "name", "iteration", "microbatch", "chunk").rows() == \
        b.select("rank", "name", "iteration", "microbatch", "chunk").rows()
    # the aggregator kept microseconds (int(ns / 1000) of start and end): 1 us either way
    assert (a["dur_ns"] - b["dur_ns"]).abs().max() <= 1000


def test_iteration_instants_bracket_each_rank_s_iteration():
    path = ORIGINAL / "profiling" / "data-1-pipeline-4-tensor-1-pp-aggregated-iter10.json"
    raw = json.loads(path.read_text())
    bracket = {}
    for r in raw:
        if r["ph"] == "i" and r["name"] in ("iteration begin", "iteration end"):
            bracket.setdefault(r["pid"], {})[r["name"]] = r["ts"]
    events, _, _ = _read([path])
    its = events.filter(pl.col("name") == "iteration").sort("rank")
    assert its["iteration"].to_list() == [10] * 4
    assert its.select("rank", "ts_ns", "dur_ns").rows() == [
        (pid, b["iteration begin"] * 1000, (b["iteration end"] - b["iteration begin"]) * 1000)
        for pid, b in sorted(bracket.items())]
    # the reduce instants have no duration: nothing to read
    assert set(events["name"].unique().to_list()) == {"iteration", "forward", "backward"}


def test_the_current_aggregator_s_output_reads_as_its_inputs():
    per_rank, ranks, _ = _read(sorted((CURRENT / "per-rank").glob("benchmark-data-*.json")))
    merged, merged_ranks, warnings = _read([CURRENT / "aggregated" / "benchmark.json"])
    assert warnings == []                     # g_rk and coordinates on every record
    cols = ["rank", "tp", "pp", "dp", "device", "world_size"]
    assert merged_ranks.sort("rank").select(cols).rows() == ranks.sort("rank").select(cols).rows()
    a, b = _steps(per_rank), _steps(merged)
    same = ["rank", "name", "cat", "iteration", "microbatch", "group", "group_ranks", "peer", "bytes"]
    key = ["rank", "iteration", "name", "microbatch", "ts_ns"]
    assert a.sort(key).select(same).rows() == b.sort(key).select(same).rows()
    kept = (~pl.col("name").is_in(list(_AMENDED)))
    da, db = a.filter(kept).sort(key)["dur_ns"], b.filter(kept).sort(key)["dur_ns"]
    assert len(da) > 500 and (da - db).abs().max() <= 1000


def test_the_aggregated_trace_is_found_by_its_content_whatever_its_name(tmp_path):
    shutil.copy(CURRENT / "aggregated" / "benchmark.json", tmp_path / "benchmark_20251103_101500.json")
    found = discover(tmp_path)
    assert found.format == "megatronapp" and [p.name for p in found.files] == ["benchmark_20251103_101500.json"]
    # forcing the format takes it too, and not a simulated job's key beside the per-rank files
    assert discover(tmp_path, "megatronapp").files == found.files
    assert [p.name for p in discover(CURRENT / "per-rank", "megatronapp").files if not p.name.startswith("bench")] == []


def test_beside_its_per_rank_files_the_aggregated_copy_is_not_read_twice(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(CURRENT / "per-rank", job)
    shutil.copy(CURRENT / "aggregated" / "benchmark.json", job)
    warnings: list[str] = []
    bundle = load_bundle(job, warn=warnings.append)
    assert sorted(bundle.ranks["rank"].to_list()) == list(range(8))
    assert set(bundle.ranks["src_file"].map_elements(lambda s: pathlib.Path(s).name, return_dtype=pl.String)) \
        == {p.name for p in (CURRENT / "per-rank").glob("benchmark-data-*.json")}
    assert any("not the aggregated trace" in w and "benchmark.json" in w for w in warnings)


def test_two_aggregated_traces_of_one_run_are_refused_in_one_line(tmp_path):
    for name in ("a.json", "b.json"):
        shutil.copy(CURRENT / "aggregated" / "benchmark.json", tmp_path / name)
    result = CliRunner().invoke(app, ["detect", str(tmp_path)])
    assert result.exit_code == 3
    assert "rank 0 is in two traces (a.json and b.json)" in result.output
    assert "Traceback" not in result.output
    # nothing cached from them (the cache's lock file is kept: ``ingest.cache.LOCK``)
    assert [p.name for p in (tmp_path / ".mapp").rglob("*")] in ([], [".lock"])


@pytest.mark.parametrize("form", ["per-rank", "aggregated"])
def test_the_slow_gpu_is_named_first_from_either_form(tmp_path, form):
    key = json.loads((CURRENT / "per-rank" / "ground_truth.json").read_text())["faults"][0]
    job = tmp_path / form
    shutil.copytree(CURRENT / form, job)
    verdict = detector.detect_bundle(load_bundle(job), threshold=0.1)
    assert (verdict.suspects[0].rank, verdict.suspects[0].kind) == (key["rank"], "slow_compute")
    # devices 0-7 for ranks 0-7: one node of 8, which the device indices do not split
    assert not any(n.startswith("hosts not recorded") for n in verdict.notes)


def test_the_published_aggregated_run_is_the_per_rank_run_s_verdict(tmp_path):
    job = tmp_path / "pp"
    shutil.copytree(ORIGINAL / "pp-aggregated", job)
    verdict = detector.detect_bundle(load_bundle(job), threshold=0.1)
    # the per-rank files' verdict (test_megatronapp_original_runs): the heavier last stage is
    # imbalance, no suspect
    assert verdict.suspects == [] and verdict.below == []
    stages = {i.evidence["stage"]: i.evidence["ratio"] for i in verdict.imbalance if i.kind == "stage"}
    assert max(stages, key=stages.get) == 3
