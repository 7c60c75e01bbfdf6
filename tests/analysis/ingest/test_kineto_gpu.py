"""GPU profiler traces: compute is kernels, annotations are not work, a collective is its kernel.

Checked against the real 2 x H200 NCCL capture (tests/fixtures/kineto_nccl_h200); expected
values are read straight from the JSON files here, not from mapp.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from mapp.analysis.ingest import load_bundle
from mapp.sql import open_database
from tests.sql.conftest import run

H200 = Path(__file__).resolve().parents[2] / "fixtures" / "kineto_nccl_h200"


def _step_kernels(path: Path) -> tuple[float, float]:
    """(compute kernel us, nccl kernel us) inside ProfilerStep windows, read from the raw trace."""
    trace = json.loads(path.read_text())["traceEvents"]
    launches = {e["args"]["correlation"]: e["ts"] for e in trace
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in trace if e.get("name", "").startswith("ProfilerStep#")]
    compute = comm = 0.0
    for e in trace:
        if e.get("cat") != "kernel":
            continue
        launched = launches.get(e["args"].get("correlation"))
        if launched is None or not any(a <= launched < b for a, b in steps):
            continue
        if e["name"].startswith("nccl"):
            comm += e["dur"]
        else:
            compute += e["dur"]
    return compute, comm


@pytest.fixture()
def h200(tmp_path):
    shutil.copytree(H200, tmp_path / "h200")
    return tmp_path / "h200"


def test_compute_is_kernels_and_annotations_are_not_work(h200):
    events = load_bundle(h200).scan().collect()
    compute = events.filter(pl.col("cat") == "compute")
    # every compute event is a GPU kernel; CPU ops and the step/optimizer annotations are not
    assert compute["lane"].str.starts_with("stream:").all()
    assert not compute["name"].str.starts_with("nccl").any()
    for name in ("train_step", "Optimizer.step#AdamW.step", "aten::mm"):
        assert events.filter(pl.col("name") == name)["cat"].unique().to_list() == ["other"]


def test_rank_breakdown_counts_kernels_as_compute(h200):
    db = open_database(h200)
    try:
        rows = {r["rank"]: r for r in run(db, "rank_breakdown")}
    finally:
        db.close()
    for rank in (0, 1):
        compute_us, comm_us = _step_kernels(h200 / f"rank-{rank}.json")
        row = rows[rank]
        # kernels never overlap on this trace's streams at these sizes: the union is the sum (to 1 us)
        assert row["compute_ns"] == pytest.approx(compute_us * 1000, abs=2000)
        assert row["comm_ns"] == pytest.approx(comm_us * 1000, abs=2000)
        # the steps are mostly host time: a few percent compute, not the 80% annotations made of it
        assert row["compute_frac"] < 0.2


def test_a_collective_is_timed_by_its_kernel_also_when_only_the_cpu_op_names_it(h200):
    # Older PyTorch releases put the comm args on the CPU record_param_comms op only: take them
    # off the kernels and the collective must still be dated by its kernel on the GPU stream.
    kernels = {}
    for rank in (0, 1):
        path = h200 / f"rank-{rank}.json"
        doc = json.loads(path.read_text())
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and "Collective name" in e.get("args", {}):
                kernels.setdefault(rank, []).append((round(e["ts"] * 1000), e["name"]))
                for key in [k for k in e["args"] if k not in ("correlation", "stream", "device", "External id")]:
                    del e["args"][key]
        path.write_text(json.dumps(doc))
    events = load_bundle(h200, use_cache=False).scan().filter(
        pl.col("cat").is_in(["collective", "p2p"])).collect()
    for rank, expected in kernels.items():
        mine = events.filter(pl.col("rank") == rank).sort("ts_ns")
        assert mine["lane"].str.starts_with("stream:").all()
        base = mine["ts_ns"] - pl.Series([t for t, _ in sorted(expected)])
        assert base.n_unique() == 1      # every comm event sits exactly on its kernel (one clock base)
        assert [json.loads(a)["kernel"] for a in mine["args"]] == [n for _, n in sorted(expected)]


def test_megatron_batched_p2p_on_nccl_is_read_from_the_cpu_records(tmp_path):
    # A real 4 x H200 PP2 x DP2 job (tests/corpus/cases-gpu4): megatron-core's batched p2p
    # records each send and receive on the CPU (record_param_comms, peer as a global rank in
    # Dst/Src Rank and as a group rank in "Rank") but launches one coalesced SendRecv kernel
    # without comm args, so the reader once kept no p2p at all. Each CPU record is the call,
    # timed by its post (async): 4 messages each way a step between the stages of each pipeline
    # (the case keeps 3 steps).
    from mapp.analysis.graph import match_bundle

    case = Path(__file__).resolve().parents[2] / "corpus" / "cases-gpu4" / "gpt-pp2dp2-prof-layer1.5x-r2-gpu"
    shutil.copytree(case, tmp_path / "job")
    bundle = load_bundle(tmp_path / "job")
    calls = bundle.scan().filter(pl.col("cat") == "p2p").select("rank", "name", "peer", "args").collect()
    assert sorted(calls.group_by("rank", "name", "peer").len().rows()) == [
        (0, "recv", 2, 12), (0, "send", 2, 12), (1, "recv", 3, 12), (1, "send", 3, 12),
        (2, "recv", 0, 12), (2, "send", 0, 12), (3, "recv", 1, 12), (3, "send", 1, 12)]
    assert (calls["args"].str.json_path_match("$.async") == "true").all()
    pairs = match_bundle(bundle).p2p
    assert sorted(pairs.group_by("src", "dst").len().rows()) == [(0, 2, 12), (1, 3, 12), (2, 0, 12), (3, 1, 12)]
    assert pairs["send_async"].all() and pairs["recv_async"].all()
    # the 1-rank TP group's all-reduces (no kernel: NCCL skips them) stay copies, not collectives
    groups = bundle.scan().filter(pl.col("cat") == "collective").select(pl.col("group_ranks").list.len()).collect()
    assert groups.to_series().min() == 2
