"""NVML counters in the traces end up beside a suspect's evidence (and never make one)."""

from __future__ import annotations

from mapp.analysis.detect.device import device_counters, device_evidence, neighbours
from mapp.analysis.ingest import load_bundle
from tests.v1_builder import RankTrace

LAYOUT = {"tp": 1, "pp": 1, "dp": 3, "cp": 1, "ep": 1}


def counter(trace: RankTrace, ts: float, clock: int, throttle: int) -> None:
    trace.events.append({"ph": "C", "name": "gpu", "cat": "other", "pid": trace.rank, "tid": "counters",
                         "ts": ts, "args": {"sm_clock_mhz": clock, "power_w": 500.0, "temperature_c": 60,
                                            "throttle_reasons": throttle, "device": 0}})


def test_counters_are_summarised_per_rank_and_compared_with_peers(tmp_path):
    clocks = {0: [1980, 1980, 1970], 1: [1410, 1400, 1420], 2: [1980, 1990, 1980]}
    for rank, samples in clocks.items():
        trace = RankTrace(rank, 3, LAYOUT, {"tp": 0, "pp": 0, "dp": rank, "cp": 0, "ep": 0})
        trace.x("forward", "compute", 0.0, 10.0, iteration=0, microbatch=0)
        for i, clock in enumerate(samples):
            counter(trace, 100.0 * i, clock, throttle=4 if rank == 1 and i == 1 else 0)
        trace.write(tmp_path)
    counters = device_counters(load_bundle(tmp_path).scan())
    assert counters["rank"].to_list() == [0, 1, 2]
    assert counters["sm_clock_mhz"].to_list() == [1980.0, 1410.0, 1980.0]
    evidence = device_evidence(counters, 1)
    assert evidence["sm_clock_mhz"] == 1410.0 and evidence["peers_sm_clock_mhz"] == 1980.0
    assert evidence["throttle_reasons"] == 4 and evidence["samples"] == 3


def test_no_counters_no_device_evidence(tmp_path):
    trace = RankTrace(0, 1, {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1}, {"tp": 0, "pp": 0, "dp": 0})
    trace.x("forward", "compute", 0.0, 10.0, iteration=0).write(tmp_path)
    assert device_evidence(device_counters(load_bundle(tmp_path).scan()), 0) is None


def test_a_process_computing_on_a_ranks_gpu_is_a_neighbour_and_one_holding_a_context_is_not(tmp_path):
    # NVML's snapshots: on rank 1 another process ran kernels in two of three samples (a
    # neighbour that bursts: 4% of the SMs in one, 33% in another), on rank 0 one only held a
    # context (0%); rank 2's capture sampled no processes
    others = {0: [0.0, 0.0, 0.0], 1: [4.0, 33.0, 0.0], 2: [None, None, None]}
    for rank, samples in others.items():
        trace = RankTrace(rank, 3, LAYOUT, {"tp": 0, "pp": 0, "dp": rank, "cp": 0, "ep": 0})
        trace.x("forward", "compute", 0.0, 10.0, iteration=0, microbatch=0)
        for i, other in enumerate(samples):
            counter(trace, 100.0 * i, 1980, throttle=0)
            if other is not None:
                trace.events[-1]["args"].update(other_sm_pct=other, sm_pct=100.0 - other,
                                                other_processes=int(other > 0))
        trace.write(tmp_path)
    counters = device_counters(load_bundle(tmp_path).scan())
    assert neighbours(counters) == {1: {"other_sm_pct": 33.0, "seen": 2, "samples": 3}}
    assert device_evidence(counters, 1)["other_sm_pct"] == 33.0
    assert "other_sm_pct" not in device_evidence(counters, 2)
