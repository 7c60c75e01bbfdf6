"""Output files: v1 layout, ground truth, determinism, MegatronApp format, progress."""

from __future__ import annotations

import hashlib
import json

import orjson

from mapp.analysis.ingest import load_bundle
from mapp.analysis.simulate import SimConfig, parse_fault, simulate

SMALL = dict(tp=2, pp=2, dp=2, layers=4, hidden=512, seq_length=256, microbatches=4, iterations=2)


def digest(paths) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_same_seed_same_bytes(tmp_path):
    faults = [parse_fault("slow_gpu:3:1.4"), parse_fault("seqlen_imbalance::0.3")]
    a = simulate(SimConfig(**SMALL, faults=faults, seed=7), tmp_path / "a")
    b = simulate(SimConfig(**SMALL, faults=faults, seed=7), tmp_path / "b")
    c = simulate(SimConfig(**SMALL, faults=faults, seed=8), tmp_path / "c")
    assert digest(a.files) == digest(b.files)
    assert digest(a.files) != digest(c.files)


def test_v1_files_follow_the_format(tmp_path):
    result = simulate(SimConfig(**SMALL, vpp=2, seed=1), tmp_path / "t")
    lines = result.files[3].read_text().splitlines(keepends=True)
    assert lines[0] == "[\n"
    assert all(line.endswith(",\n") for line in lines[1:])
    events = [orjson.loads(line[:-2]) for line in lines[1:]]
    meta = events[0]
    assert meta["name"] == "mapp" and meta["args"]["rank"] == 3 and meta["args"]["world_size"] == 8
    assert meta["args"]["layout"] == {"tp": 2, "pp": 2, "dp": 2, "cp": 1, "ep": 1, "vpp": 2}
    assert meta["args"]["coords"] == {"tp": 1, "pp": 0, "dp": 1, "cp": 0, "ep": 0}
    body = events[2:]
    assert {e["cat"] for e in body} == {"iteration", "compute", "collective", "p2p", "optimizer"}
    ts = [e["ts"] for e in body]
    assert ts == sorted(ts)
    for e in body:
        assert e["ph"] == "X" and e["pid"] == 3 and e["dur"] >= 0 and "iteration" in e["args"]
        if e["cat"] == "collective":
            assert e["args"]["group"] in ("tp", "dp") and 3 in e["args"]["group_ranks"]
        if e["cat"] == "p2p":
            assert e["args"]["peer"] == 7  # rank 3 is stage 0: both neighbours are rank 7


def test_ground_truth_key(tmp_path):
    faults = [parse_fault("slow_link:1-5:4:0-0"), parse_fault("stage_imbalance:1:1.3")]
    result = simulate(SimConfig(**SMALL, faults=faults, seed=2), tmp_path / "g")
    truth = json.loads((tmp_path / "g" / "ground_truth.json").read_text())
    assert truth == result.ground_truth
    assert truth["layout"] == {"tp": 2, "pp": 2, "dp": 2, "vpp": 1, "cp": 1, "ep": 1}
    assert truth["faults"][0] == {"kind": "slow_link", "ranks": [1, 5], "factor": 4.0, "iterations": [0, 0],
                                  "hardware": True}
    assert truth["faults"][1]["stage"] == 1 and truth["faults"][1]["iterations"] == [0, 1]
    assert set(truth["clocks"]) == {str(r) for r in range(8)}
    assert all(abs(c["offset_us"]) <= 100_000 and abs(c["drift_ppm"]) <= 50 for c in truth["clocks"].values())
    assert truth["healthy_iteration_us"] > 0 and len(truth["iteration_us"]) == 2


def test_no_skew_means_identical_clocks(tmp_path):
    result = simulate(SimConfig(**SMALL, skew=False), tmp_path / "s")
    assert {(c["offset_us"], c["drift_ppm"]) for c in result.ground_truth["clocks"].values()} == {(0.0, 0.0)}


def test_megatronapp_format_reads_back(tmp_path):
    out = tmp_path / "m"
    result = simulate(SimConfig(**SMALL, format="megatronapp", per_layer=True), out)
    names = sorted(p.name for p in result.files[:-1])
    assert names[0] == "benchmark-data-0-pipeline-0-tensor-0.json" and len(names) == 8
    records = json.loads((out / "benchmark-data-1-pipeline-1-tensor-0.json").read_text())
    assert records[0] == {"name": "iteration", "ph": "B", "pad_before": 0}
    assert records[1]["g_rk"] == 6 and records[1]["dp_rk"] == 1 and records[1]["pp_rk"] == 1
    ends = [r for r in records if r["ph"] == "E" and r["name"] == "iteration"]
    assert len(ends) == 2 and all(r["duration_wall"] >= r["duration_cuda"] > 0 for r in ends)
    assert {r["name"] for r in records} >= {"forward", "backward", "_reduce", "optimizer", "recv-extra",
                                           "send-extra", "allreduce", "loss", "decoder", "MLP.forward"}
    exchanges = [r for r in records if r["ph"] == "E" and r["name"] in ("exchange-next", "exchange-prev")]
    assert all(r["expect"] in ("exchange-next", "exchange-prev") and r["expect"] != r["name"] for r in exchanges)
    bundle = load_bundle(out)
    assert bundle.format == "megatronapp"
    assert bundle.events.height * 2 == result.events  # one event per B/E pair


def test_progress_reaches_the_world_size(tmp_path):
    seen = []
    simulate(SimConfig(**SMALL), tmp_path / "p", progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (8, 8)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_demo_job_is_64_ranks_with_one_slow_gpu(tmp_path):
    from mapp.analysis.simulate import demo_config

    cfg = demo_config(iterations=1)
    cfg.layers, cfg.hidden, cfg.seq_length = 8, 512, 256  # keep the test quick
    result = simulate(cfg, tmp_path / "demo")
    assert len(result.files) == 65
    [fault] = result.ground_truth["faults"]
    assert fault["kind"] == "slow_gpu" and abs(fault["factor"] - 1.414) < 1e-9
    assert result.ground_truth["iteration_us"][0] > result.ground_truth["healthy_iteration_us"]
