"""The merged timeline puts every rank on one clock, drift included."""

from __future__ import annotations

import json
from collections import defaultdict

from mapp.analysis.ingest import load_bundle
from mapp.analysis.simulate import SimConfig, simulate
from mapp.analysis.timeline import merge_timeline


def test_collective_members_end_together_in_the_merged_trace(tmp_path):
    # Clocks drift by up to 50 ppm over a trace of several seconds: a constant shift per rank
    # would leave members of late collectives tens of microseconds apart.
    config = SimConfig(tp=2, pp=2, dp=2, microbatches=4, iterations=10, layers=8, hidden=4096,
                       seq_length=4096, max_drift_ppm=50.0, seed=3)
    simulate(config, tmp_path / "job")
    truth = json.loads((tmp_path / "job" / "ground_truth.json").read_text())
    assert max(abs(c["drift_ppm"]) for c in truth["clocks"].values()) > 10

    bundle = load_bundle(tmp_path / "job")
    timeline = merge_timeline(bundle, tmp_path / "merged.json")
    events = json.loads((tmp_path / "merged.json").read_text())["traceEvents"]
    ends: dict[tuple, list[float]] = defaultdict(list)
    span = [float("inf"), float("-inf")]
    for e in events:
        if e["ph"] == "X" and e["cat"] == "collective":
            key = (e["args"]["group"], tuple(e["args"]["group_ranks"]), e["args"]["seq"])
            ends[key].append(e["ts"] + e["dur"])
            span = [min(span[0], e["ts"]), max(span[1], e["ts"])]
    assert span[1] - span[0] > 1e6, "the trace should span over a second"
    spread = max(max(v) - min(v) for v in ends.values())
    assert spread < 1.0, f"members of one collective end {spread:.3f} us apart"
    assert timeline.clock is not None and timeline.clock_path.exists()
