"""The labelled suite in its reduced (CI) form: the accuracy targets hold on it."""

from __future__ import annotations

from mapp.bench.suite import run_scenario, run_suite, scenarios


def test_full_suite_has_the_promised_size_and_mix():
    items = scenarios("full", 0)
    faults = [s for s in items if not s.negative]
    negatives = [s for s in items if s.negative]
    assert len(faults) >= 200 and len(negatives) >= 100
    sizes = {s.config.world_size for s in items}
    assert min(sizes) == 8 and max(sizes) == 1024
    assert {s.cls for s in faults} >= {"slow_gpu 5%", "slow_gpu >=10%", "slow_link", "slow_nic", "slow_host",
                                       "transient", "two faults"}
    assert {s.cls for s in negatives} == {"healthy", "stage imbalance", "seqlen imbalance", "seqlen heavy tail",
                                          "heavy last stage"}
    assert "data stall" in {s.cls for s in faults}
    assert [s.config.seed for s in scenarios("full", 0)] == [s.config.seed for s in items]  # fixed seeds


def test_ci_suite_meets_the_targets(tmp_path):
    # With the simulator's realism on (host noise and a host running ahead of its GPU, heavy-
    # tailed sequence lengths, data stalls), what holds today: every slow GPU of 10% or more is
    # the top suspect, no negative control gets a compute verdict, and the suite as a whole
    # stays above its measured level. Known gaps, measured in BENCHMARKS.md: 5% GPUs, data
    # stalls and hosts that barely slow the job.
    items = scenarios("ci", 0)
    assert len(items) == 30
    result = run_suite(items, workdir=tmp_path)
    assert not any(r.error for r in result.results), [r.error for r in result.results if r.error]
    strong = [r for r in result.results if r.scenario.cls == "slow_gpu >=10%"]
    assert all(r.top1 for r in strong), [(r.scenario.id, r.top) for r in strong if not r.top1]
    negatives = [r for r in result.results if r.scenario.negative]
    assert not any((r.top or "").startswith("slow_compute") for r in negatives), \
        [(r.scenario.id, r.top) for r in negatives if r.top]
    faults = [r for r in result.results if not r.scenario.negative]
    assert sum(r.top1 for r in faults) >= 0.9 * len(faults), [(r.scenario.id, r.top) for r in faults if not r.top1]
    stalls = [r for r in faults if r.scenario.cls == "data stall"]
    assert stalls and all(r.top1 for r in stalls), [(r.scenario.id, r.top) for r in stalls]


def test_one_preemption_of_a_healthy_host_is_no_slow_host(tmp_path):
    # The full suite's healthy-256 (TP4 x PP4 x DP4): rank 42's host is preempted 10 ms once,
    # in one of two iterations, and idles a little longer than its peers in the other. The
    # trace's 1 us timestamps make the idle-time scale tiny, so that second excess (a fraction
    # of a percent of the iteration) had a z in the hundreds and the rank was a "slow host".
    # Idle time, like compute, must also be min_effect of the iteration.
    sc = next(s for s in scenarios("full", 0) if s.id == "healthy-256")
    result = run_scenario(sc, tmp_path)
    assert result.error is None, result.error
    assert result.top is None and result.false == 0
