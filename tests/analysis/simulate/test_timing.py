"""Iteration times against the analytic pipeline model, and what a slow GPU does to its peers."""

from __future__ import annotations

import polars as pl
import pytest

from mapp.analysis.simulate import SimConfig, parse_fault
from mapp.analysis.simulate.cost import CostModel

from ._sim import QUIET, run


def step_times(cfg: SimConfig) -> tuple[float, float, float]:
    """Healthy forward and backward of one stage (all its layers, TP all-reduces included)
    and one p2p hop (the layouts below put every stage on its own node, or all on one)."""
    c = CostModel.from_config(cfg)
    layers = cfg.layers // cfg.pp
    ar = c.transfer_us("all_reduce", c.activation_bytes, cfg.tp, cfg.tp > cfg.gpus_per_node) if cfg.tp > 1 else 0.0
    comp = c.attention_forward_us + c.mlp_forward_us
    inter = cfg.tp * cfg.dp >= cfg.gpus_per_node
    return (layers * (comp + 2 * ar), layers * (2 * comp + 2 * ar),
            c.transfer_us("p2p", c.activation_bytes, 2, inter))


def tail_time(cfg: SimConfig) -> float:
    """Gradient reduce-scatter, optimizer step and parameter all-gather after the pipeline."""
    c = CostModel.from_config(cfg)
    inter = cfg.tp * cfg.dp > cfg.gpus_per_node
    sync = sum(c.transfer_us(k, c.grad_bytes, cfg.dp, inter) for k in ("reduce_scatter", "all_gather"))
    return (cfg.vpp * sync if cfg.dp > 1 else 0.0) + c.optimizer_us(cfg.vpp)


BIG = dict(layers=24, hidden=2048, seq_length=2048, **QUIET)


@pytest.mark.parametrize(("tp", "pp", "dp", "m", "gpus_per_node"),
                         [(2, 4, 2, 8, 4), (1, 4, 1, 12, 8), (2, 3, 2, 6, 64), (4, 8, 1, 16, 4)])
def test_healthy_1f1b_matches_the_analytic_bubble(tmp_path, tp, pp, dp, m, gpus_per_node):
    fields = dict(tp=tp, pp=pp, dp=dp, microbatches=m, iterations=2, gpus_per_node=gpus_per_node, **BIG)
    result, _ = run(tmp_path, **fields)
    cfg = SimConfig(**fields)
    f, b, hop = step_times(cfg)
    # m + p - 1 steps, each a forward and a backward plus an activation and a gradient hop
    expected = (m + pp - 1) * (f + b + 2 * hop) + tail_time(cfg)
    for got in result.ground_truth["iteration_us"]:
        assert got == pytest.approx(expected, rel=0.02)
    assert result.ground_truth["healthy_iteration_us"] == pytest.approx(expected, rel=0.02)


def test_interleaving_shrinks_the_bubble(tmp_path):
    fields = dict(tp=2, pp=4, dp=1, microbatches=8, iterations=1, **BIG)
    plain, _ = run(tmp_path, "plain", **fields)
    inter, _ = run(tmp_path, "inter", vpp=2, **fields)
    cfg = SimConfig(**fields)
    f, b, _ = step_times(cfg)
    t_plain = plain.ground_truth["iteration_us"][0]
    t_inter = inter.ground_truth["iteration_us"][0]
    bubble = (cfg.pp - 1) * (f + b)
    assert t_inter < t_plain
    # the bubble shrinks by a factor vpp: (p - 1)(f + b) / v
    assert t_plain - t_inter == pytest.approx(bubble / 2, rel=0.15)


def reference_1f1b(f: list[float], b: list[float], m: int) -> float:
    """Makespan of megatron-core's 1F1B order with free communication: a longest-path walk."""
    p = len(f)
    orders = []
    for s in range(p):
        w = min(p - s - 1, m)
        order = [("F", i) for i in range(w)]
        for i in range(m - w):
            order += [("F", w + i), ("B", i)]
        orders.append(order + [("B", i) for i in range(m - w, m)])
    done: dict[tuple, float] = {}
    clock, pos = [0.0] * p, [0] * p
    while any(pos[s] < len(orders[s]) for s in range(p)):
        for s in range(p):
            while pos[s] < len(orders[s]):
                kind, i = orders[s][pos[s]]
                dep = (s - 1, "F", i) if kind == "F" and s > 0 else (s + 1, "B", i) if kind == "B" and s < p - 1 else None
                if dep is not None and dep not in done:
                    break
                start = max(clock[s], done[dep] if dep else 0.0)
                clock[s] = done[(s, kind, i)] = start + (f[s] if kind == "F" else b[s])
                pos[s] += 1
    return max(clock)


def compute_and_wait(ev: pl.DataFrame) -> pl.DataFrame:
    """Per rank: pure compute (per-layer kernels) and time inside TP and DP collectives."""
    return ev.group_by("rank").agg(
        compute=pl.col("dur_ns").filter(pl.col("layer").is_not_null()).sum() / 1e3,
        tp_wait=pl.col("dur_ns").filter(pl.col("group") == "tp").sum() / 1e3,
        dp_wait=pl.col("dur_ns").filter(pl.col("group") == "dp").sum() / 1e3,
    ).sort("rank")


def test_slow_gpu_slows_its_pipeline_and_its_peers_wait(tmp_path):
    # tp4 x pp4 x dp2, communication nearly free; rank 1 is tp1 of stage 0 in replica 0
    free = dict(intra_node_bandwidth_gbs=1e6, inter_node_bandwidth_gbs=1e6,
                intra_node_latency_us=0.0, inter_node_latency_us=0.0)
    fields = dict(tp=4, pp=4, dp=2, microbatches=8, iterations=1, per_layer=True, **BIG, **free)
    factor = 1.5
    healthy, hev = run(tmp_path, "healthy", **fields)
    slow, sev = run(tmp_path, "slow", faults=[parse_fault(f"slow_gpu:1:{factor}")], **fields)
    cfg = SimConfig(**fields)
    f, b, _ = step_times(cfg)
    p, m = cfg.pp, cfg.microbatches

    # the culprit's whole TP group runs at its pace, so stage 0 of replica 0 is `factor` x
    # slower; replica 1 waits for it at the gradient sync
    t_h = healthy.ground_truth["iteration_us"][0] - tail_time(cfg)
    t_s = slow.ground_truth["iteration_us"][0] - tail_time(cfg)
    assert t_h == pytest.approx(reference_1f1b([f] * p, [b] * p, m), rel=0.005)
    slowed = reference_1f1b([factor * f] + [f] * (p - 1), [factor * b] + [b] * (p - 1), m)
    assert t_s == pytest.approx(slowed, rel=0.005)
    assert slow.ground_truth["healthy_iteration_us"] == pytest.approx(healthy.ground_truth["iteration_us"][0])
    assert slow.ground_truth["faults"] == [{"kind": "slow_gpu", "rank": 1, "coords": {"tp": 1, "pp": 0, "dp": 0},
                                            "factor": factor, "iterations": [0, 0], "hardware": True}]

    h, s = compute_and_wait(hev), compute_and_wait(sev)
    culprit, tp_peers, dp_peer = 1, [0, 2, 3], 5
    rel = (s["compute"] / h["compute"]).to_list()
    assert rel[culprit] == pytest.approx(factor, rel=1e-6)
    for r in range(cfg.world_size):
        if r != culprit:
            assert rel[r] == pytest.approx(1.0, rel=1e-6)  # victims do not compute longer
    extra = (factor - 1) * h["compute"][culprit]
    for r in tp_peers:  # ... they wait in the TP all-reduces for the culprit
        assert s["tp_wait"][r] == pytest.approx(h["tp_wait"][r] + extra, rel=0.01)
        assert s["tp_wait"][culprit] < 0.01 * s["tp_wait"][r]
    # the culprit's DP peer (other replica) waits in the gradient reduce-scatter
    assert s["dp_wait"][dp_peer] > h["dp_wait"][dp_peer] + 0.9 * (slowed - t_h)


def test_transient_fault_only_slows_its_window(tmp_path):
    fields = dict(tp=2, pp=2, dp=1, microbatches=4, iterations=4, **BIG)
    result, _ = run(tmp_path, faults=[parse_fault("slow_gpu:0:2.0:1-2")], **fields)
    t = result.ground_truth["iteration_us"]
    healthy = result.ground_truth["healthy_iteration_us"]
    assert t[0] == pytest.approx(healthy, rel=1e-6)
    assert t[1] > 1.3 * healthy and t[2] > 1.3 * healthy
    assert t[3] == pytest.approx(healthy, rel=0.05)


@pytest.mark.parametrize("spec", ["slow_link:0-4:4", "slow_nic:0:4", "slow_host:0:50"])
def test_link_nic_and_host_faults_slow_the_job(tmp_path, spec):
    # 2 GPUs per node so that stage 0 -> 1 (rank 0 -> 4) crosses nodes
    fields = dict(tp=2, pp=2, dp=2, microbatches=4, iterations=1, gpus_per_node=2, **BIG)
    result, _ = run(tmp_path, faults=[parse_fault(spec)], **fields)
    assert result.ground_truth["iteration_us"][0] > 1.01 * result.ground_truth["healthy_iteration_us"]


def test_negative_controls_are_in_the_healthy_time(tmp_path):
    fields = dict(tp=1, pp=4, dp=1, microbatches=4, iterations=1, **BIG)
    base, _ = run(tmp_path, "base", **fields)
    imb, _ = run(tmp_path, "imb", faults=[parse_fault("stage_imbalance:3:1.3")], **fields)
    assert imb.ground_truth["iteration_us"][0] > base.ground_truth["iteration_us"][0]
    assert imb.ground_truth["healthy_iteration_us"] == imb.ground_truth["iteration_us"][0]
    assert imb.ground_truth["faults"][0]["hardware"] is False
