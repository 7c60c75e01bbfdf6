"""The schedule simulator (issue 17): formulas, invariants on the event list, and the issue's figures."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from typer.testing import CliRunner

from mapp.cli.app import app
from mapp.scheduling.simulate import (SCHEDULES, ScheduleConfig, activation_caps, interleaved_bubble,
                                      one_f_one_b_bubble, simulate, simulate_step)

# --- bubble formulas (no jitter, equal task times, free links) -------------------------------
# 1F1B: each rank works m (f + b) inside (m + p - 1)(f + b): bubble (p-1)/(m+p-1).
# Interleaved, v chunks per stage, per-chunk times f and b, m a multiple of p: each rank works
# v m (f + b); the fill costs (p - 1) f before the last rank starts and the drain (p - 1) b
# after it ends, so the step is (v m + p - 1)(f + b): bubble (p-1)/(v m + p - 1).


@pytest.mark.parametrize("pp, m", [(2, 5), (4, 8), (4, 16), (8, 16), (8, 32)])
def test_1f1b_bubble_is_the_formula(pp, m):
    got = simulate(ScheduleConfig(schedule="1f1b", pp=pp, microbatches=m)).bubble_ratio
    assert got == pytest.approx((pp - 1) / (m + pp - 1), rel=0.01)
    assert one_f_one_b_bubble(pp, m) == pytest.approx((pp - 1) / (m + pp - 1))


@pytest.mark.parametrize("pp, v, m", [(2, 2, 4), (4, 2, 8), (4, 2, 16), (4, 3, 12), (8, 2, 16), (4, 4, 8)])
def test_interleaved_bubble_is_the_formula(pp, v, m):
    summary = simulate(ScheduleConfig(schedule="interleaved", pp=pp, vpp=v, microbatches=m))
    assert summary.bubble_ratio == pytest.approx((pp - 1) / (v * m + pp - 1), rel=0.01)
    assert summary.makespan == pytest.approx((v * m + pp - 1) * 3.0, rel=0.01)
    assert interleaved_bubble(pp, v, m) == pytest.approx((pp - 1) / (v * m + pp - 1))


@pytest.mark.parametrize("pp, m", [(4, 8), (4, 16), (8, 16)])
def test_zb_h1_fills_the_drain_with_weight_gradients(pp, m):
    # f = 1, B = W = 1 (backward 2 split in half). The last rank starts after (p-1) f and, held to
    # one activation (W frees it), runs F B W without a gap; its last B leaves (p-1) B for the
    # other ranks, then rank 0's last W: m (f+B+W) + (p-1)(f+B), against 1F1B's (m+p-1)(f+B+W).
    summary = simulate(ScheduleConfig(schedule="zb-h1", pp=pp, microbatches=m))
    assert summary.makespan == pytest.approx(3 * m + 2 * (pp - 1), rel=0.01)
    assert summary.peak_activations == [pp - r for r in range(pp)]  # 1F1B's


def test_the_interleaved_order_is_megatrons():
    # megatron-core's own example (schedules.py, PP2 with N=3, M=5, VP2): microbatch and chunk
    # per virtual microbatch id 0 1 2 0 1 2 3 4 3 4 / 0 0 0 1 1 1 0 0 1 1
    from mapp.scheduling.simulate.orders import schedule_table

    assert schedule_table(5, 2, 3) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (3, 0), (4, 0), (3, 1), (4, 1)]
    # peak activations of rank r: 2 (p - r - 1) + (v - 1) p warm-up forwards, plus the first
    # steady-state forward
    assert activation_caps(ScheduleConfig(schedule="interleaved", pp=4, vpp=2, microbatches=16)) == [11, 9, 7, 5]


# --- invariants, checked on the produced event list -------------------------------------------

def _check_events(config: ScheduleConfig, seed: int) -> None:
    step = simulate_step(config, seed)
    events = step.replay.events
    pp, stages = config.pp, config.stages
    split = config.schedule == "zb-h1"
    kinds = "FBW" if split else "FB"
    at = {(e.kind, e.chunk * pp + e.rank, e.microbatch): e for e in events}
    assert len(at) == len(events) == len(kinds) * stages * config.microbatches
    eps = 1e-9
    for (kind, j, m), e in at.items():
        assert e.rank == j % pp
        hop = config.latency if kind != "W" else 0.0
        if kind == "F" and j > 0:
            crossed = (j - 1) % pp != j % pp
            assert e.start >= at["F", j - 1, m].end + (hop if crossed else 0) - eps
        if kind == "B":
            assert e.start >= at["F", j, m].end - eps
            if j < stages - 1:
                crossed = (j + 1) % pp != j % pp
                assert e.start >= at["B", j + 1, m].end + (hop if crossed else 0) - eps
        if kind == "W":
            assert e.start >= at["B", j, m].end - eps
    by_rank = defaultdict(list)
    for e in events:
        by_rank[e.rank].append(e)
    caps = activation_caps(config)
    for rank, mine in by_rank.items():
        mine.sort(key=lambda e: (e.start, e.end))
        for a, b in zip(mine, mine[1:]):
            assert b.start >= a.end - eps, f"rank {rank} runs two tasks at once: {a} {b}"
        # activations: a forward takes one at its start, the backward (W under ZB-H1) frees it at its end
        changes = sorted([(e.start, 1) for e in mine if e.kind == "F"]
                         + [(e.end, -1) for e in mine if e.kind == ("W" if split else "B")], key=lambda c: (c[0], c[1]))
        held = peak = 0
        for _, d in changes:
            held += d
            peak = max(peak, held)
        assert peak == step.replay.peak_activations[rank]
        if config.schedule != "1f1b" and config.schedule != "interleaved":
            assert peak <= caps[rank]
    assert step.makespan >= step.lower_bound - eps


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("links", [(0.0, float("inf")), (0.3, 4.0)])
def test_dependencies_one_task_at_a_time_and_the_memory_cap(schedule, links):
    vpp = 1 if schedule in ("1f1b", "zb-h1") else 2
    config = ScheduleConfig(schedule=schedule, pp=4, vpp=vpp, microbatches=8, jitter=0.3, length_sigma=0.6,
                            slow_stage=(1, 1.5), latency=links[0], bandwidth=links[1], plan_search=10)
    for seed in range(3):
        _check_events(config, seed)


@pytest.mark.parametrize("pp, v, m", [(2, 2, 4), (4, 2, 8), (4, 2, 16), (4, 3, 12), (8, 2, 16)])
@pytest.mark.parametrize("rule", ["dpp-depth", "dpp-breadth", "dpp-adaptive"])
def test_dpp_with_equal_lengths_and_no_jitter_is_never_slower_than_interleaved(pp, v, m, rule):
    base = simulate(ScheduleConfig(schedule="interleaved", pp=pp, vpp=v, microbatches=m, slow_stage=(pp - 1, 1.3)))
    dpp = simulate(ScheduleConfig(schedule=rule, pp=pp, vpp=v, microbatches=m, slow_stage=(pp - 1, 1.3)))
    assert dpp.makespan <= 1.01 * base.makespan
    assert all(d <= i for d, i in zip(dpp.peak_activations, base.peak_activations))


# --- the "Done when" figures: PP4, vpp 2, 16 microbatches, 30 seeds, stage 2 at 1.3x -----

def _pair(pp: int, jitter: float, length_sigma: float, seeds: int = 30):
    common = dict(pp=pp, vpp=2, microbatches=16, jitter=jitter, length_sigma=length_sigma, slow_stage=(2, 1.3))
    return (simulate(ScheduleConfig(schedule="interleaved", **common), seed=0, seeds=seeds),
            simulate(ScheduleConfig(schedule="dpp-adaptive", **common), seed=0, seeds=seeds))


@pytest.mark.parametrize("jitter", [0.0, 0.2])
def test_adaptive_dpp_is_never_more_than_1pc_slower_than_interleaved(jitter):
    base, dpp = _pair(4, jitter, 0.0)
    for a, b in zip(dpp.steps, base.steps):  # every seed, not only the mean
        assert a.makespan <= 1.01 * b.makespan
    assert all(d <= i for d, i in zip(dpp.peak_activations, base.peak_activations))


# fewer seeds here than the 30 to keep the file short; benchmarks/schedule_sim.py runs all 30
@pytest.mark.parametrize("pp, length_sigma, gain, seeds", [(4, 0.5, 0.06, 15), (4, 1.0, 0.15, 15), (8, 0.5, 0.07, 8)])
def test_adaptive_dpp_beats_interleaved_in_data_order_on_variable_lengths(pp, length_sigma, gain, seeds):
    base, dpp = _pair(pp, 0.2, length_sigma, seeds)
    assert dpp.makespan <= (1 - gain) * base.makespan
    assert all(d <= i for d, i in zip(dpp.peak_activations, base.peak_activations))
    assert dpp.lower_bound == pytest.approx(base.lower_bound)  # the same work: the same task times


# --- the command ----------------------------------------------------------------------------

def test_the_command_writes_the_figures_and_a_trace(tmp_path):
    out, trace = tmp_path / "sim.json", tmp_path / "trace.json"
    result = CliRunner().invoke(app, ["schedule", "simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8",
                                      "--seeds", "2", "--json", str(out), "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["makespan"] == pytest.approx(33.0)  # (m + p - 1)(f + b)
    assert figures["bubble_ratio"] == pytest.approx(3 / 11)
    assert figures["peak_activations"] == [4, 3, 2, 1]
    assert figures["lower_bound"] == pytest.approx(max(8 * 3.0, 4 * 3.0))
    events = json.loads(trace.read_text())
    tasks = [e for e in events if e["ph"] == "X"]
    assert len(tasks) == 2 * 4 * 8 and {e["pid"] for e in tasks} == {0, 1, 2, 3}
    assert {"chunk", "microbatch"} <= set(tasks[0]["args"])


@pytest.mark.parametrize("args", [
    ["--schedule", "dpp-adaptive", "--pp", "4", "--vpp", "2", "--microbatches", "16", "--slow-stage", "9:2"],
    ["--schedule", "interleaved", "--pp", "4", "--vpp", "2", "--microbatches", "10"],
    ["--schedule", "1f1b", "--pp", "4", "--vpp", "2", "--microbatches", "8"],
    ["--schedule", "gpipe", "--pp", "4", "--microbatches", "8"],
    ["--schedule", "1f1b", "--pp", "4", "--microbatches", "8", "--slow-stage", "two"],
    ["--schedule", "1f1b", "--pp", "0", "--microbatches", "8"],
])
def test_bad_input_is_one_line_and_a_failing_exit(args):
    result = CliRunner().invoke(app, ["schedule", "simulate", *args])
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert result.output.strip().startswith("error:") and len(result.output.strip().splitlines()) == 1


def test_the_json_cannot_go_where_no_directory_is(tmp_path):
    result = CliRunner().invoke(app, ["schedule", "simulate", "--schedule", "1f1b", "--pp", "2", "--microbatches", "4",
                                      "--json", str(tmp_path / "missing" / "x.json")])
    assert result.exit_code != 0 and "does not exist" in result.output
