"""A GPU's idle time with its next kernel already launched (``idle.idle_gaps``'s ``queued``) is
no host's: another process held the GPU. Counted apart, and as the GPU's (``same_work._held``).

On hand-built timelines, then on real profiler traces of 2 H200s (tests/corpus/cases-users): a
DDP job under autocast whose rank 0 shared its GPU with a neighbour busy 0.3 of every 20 ms,
beside healthy jobs whose ranks pad their batches to lengths of their own."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from mapp.analysis.detect.detector import stage_evidence
from mapp.analysis.detect.idle import QUEUED_NS, idle_gaps
from mapp.analysis.detect.thresholds import Thresholds
from mapp.analysis.ingest import load_bundle

USERS = Path(__file__).resolve().parents[2] / "corpus" / "cases-users"
MS = 1_000_000


def _gaps(kernels: dict[int, list[tuple[int, int, int | None]]],
          calls: dict[int, list[tuple[str, int, int]]] | None = None) -> pl.DataFrame:
    """``idle_gaps`` of two ranks of one DP group over one iteration, each rank's kernels given as
    (start, end, launch) in ns: one compute leaf each; ``calls``: each rank's host op calls
    (name, start, end) on its CPU thread."""
    rows = [{"rank": r, "iteration": 0, "ts_ns": s, "end_ns": e, "name": "k", "launch_ns": launch}
            for r, ks in kernels.items() for s, e, launch in ks]
    leaves = pl.DataFrame(rows, schema={"rank": pl.Int32, "iteration": pl.Int32, "ts_ns": pl.Int64,
                                        "end_ns": pl.Int64, "name": pl.String, "launch_ns": pl.Int64})
    events = pl.DataFrame([{"rank": r, "iteration": 0, "ts_ns": s, "dur_ns": e - s, "name": n, "cat": "other",
                            "lane": f"cpu:{100 + r}", "launch_ns": None} for r, cs in (calls or {}).items()
                           for n, s, e in cs],
                          schema={"rank": pl.Int32, "iteration": pl.Int32, "ts_ns": pl.Int64, "dur_ns": pl.Int64,
                                  "name": pl.String, "cat": pl.String, "lane": pl.String, "launch_ns": pl.Int64})
    coords = pl.DataFrame({"rank": [0, 1], "tp": [0, 0], "pp": [0, 0], "dp": [0, 1]},
                          schema={"rank": pl.Int32, "tp": pl.Int32, "pp": pl.Int32, "dp": pl.Int32})
    return idle_gaps(events, leaves, ["pp", "tp"], coords, 0.1).sort("rank")


def test_a_gap_before_work_already_launched_is_held_not_idle():
    # rank 0: 3 ms idle, its next kernel launched before the first ended; rank 1: 3 ms idle,
    # its next kernel launched at the end of the gap (its host was late)
    out = _gaps({0: [(0, 1 * MS, 0), (4 * MS, 5 * MS, MS // 2)],
                 1: [(0, 1 * MS, 0), (4 * MS, 5 * MS, 4 * MS)]})
    gap = dict(zip(out["rank"], out["gap_ns"]))
    assert gap == {0: 0, 1: 3 * MS}
    # two peers: each against the other, 3 ms held beyond its peer's
    assert out["queued_excess_ns"].to_list() == [3.0 * MS, -3.0 * MS]


def test_a_gap_is_the_hosts_until_the_launch_and_held_after_it():
    out = _gaps({0: [(0, 1 * MS, 0), (4 * MS, 5 * MS, 2 * MS)], 1: [(0, 1 * MS, 0), (4 * MS, 5 * MS, 4 * MS)]})
    assert dict(zip(out["rank"], out["gap_ns"])) == {0: 1 * MS, 1: 3 * MS}


def test_microseconds_between_queued_kernels_stay_the_hosts():
    # a GPU's hand-off between two queued kernels: under QUEUED_NS, not another process's slice
    short = QUEUED_NS // 2
    out = _gaps({0: [(0, MS, 0), (MS + short, 2 * MS, 0)], 1: [(0, MS, 0), (MS + short, 2 * MS, 0)]})
    assert out["gap_ns"].to_list() == [short, short]
    assert out["queued_excess_ns"].to_list() == [0.0, 0.0]


def _held(case: str) -> dict[int, float]:
    ev = stage_evidence(load_bundle(USERS / case), Thresholds.derive(0.1))
    return dict(zip(ev.peers.ranks["rank"], ev.peers.ranks["held_ns"]))


def test_the_gpu_a_neighbour_shared_holds_its_launched_work_and_its_peer_does_not():
    held = _held("ddp2-transformer-tb-gpu-amp-gpuhog0.3-r0")
    assert held[0] > 1 * MS and held[1] == 0


@pytest.mark.parametrize("case", ["ddp2-transformer-tb-gpu-seqlognorm0.8", "ddp2-transformer-tb-gpu-amp-seqlognorm0.7"])
def test_healthy_gpus_hold_next_to_nothing(case):
    # (a rank of the first held 0.2 ms a step beyond its peer: a slice of a millisecond's
    # scale, once; the neighbour's GPU above, every step, several)
    assert max(_held(case).values()) < 0.5 * MS


def test_the_verdict_names_the_shared_gpu_and_says_what_it_held():
    from mapp.analysis.detect import detect_bundle
    from mapp.report.verdict import _evidence_line

    top = detect_bundle(load_bundle(USERS / "ddp2-transformer-tb-gpu-amp-gpuhog0.3-r0"), threshold=0.1).suspects[0]
    assert (top.rank, top.kind) == (0, "slow_compute")
    assert top.evidence["peers"]["held_ms_per_iteration"] > 1
    assert "with its next kernel already launched" in _evidence_line(top)


def _calls(name: str, first_ns: int, launch_ns: int) -> list[tuple[str, int, int]]:
    """A host thread's calls of ``name``: one long one, from ``first_ns`` to just after it launched
    a kernel at ``launch_ns``, then twenty of 50 us (the op's usual call)."""
    return [(name, first_ns, launch_ns + 10_000)] + [(name, 10 * MS + k * 100_000, 10 * MS + k * 100_000 + 50_000)
                                                     for k in range(20)]


def test_idle_time_inside_a_call_every_rank_makes_long_is_setup_not_the_hosts():
    # both ranks' first aten::mm of the step runs 2-4 ms (a plan for a new shape) while their
    # GPUs idle; what it launches ends the idle time. Rank 1's ran 2 ms longer: its shape's.
    kernels = {0: [(0, MS, 0), (3 * MS, 4 * MS, 3 * MS)], 1: [(0, MS, 0), (5 * MS, 6 * MS, 5 * MS)]}
    calls = {0: _calls("aten::mm", MS // 2, 3 * MS), 1: _calls("aten::mm", MS // 2, 5 * MS)}
    out = _gaps(kernels, calls)
    assert out["gap_ns"].to_list() == [0, 0]
    # without the calls the same gaps are the hosts': 2 ms and 4 ms
    assert _gaps(kernels)["gap_ns"].to_list() == [2 * MS, 4 * MS]


def test_idle_time_outside_any_call_or_in_one_ranks_long_call_stays_the_hosts():
    kernels = {0: [(0, MS, 0), (3 * MS, 4 * MS, 3 * MS)], 1: [(0, MS, 0), (5 * MS, 6 * MS, 5 * MS)]}
    # rank 1's host was outside any call when its GPU went idle (a sleep, a data fetch): the long
    # call that launched came after, and the idle time stays its host's whole
    calls = {0: _calls("aten::mm", MS // 2, 3 * MS), 1: _calls("aten::mm", int(1.5 * MS), 5 * MS)}
    assert _gaps(kernels, calls)["gap_ns"].to_list() == [0, 4 * MS]
    # only rank 1 makes a long call of the op (a host stalled inside it): no program's setup
    calls = {0: [("aten::mm", 10 * MS, 10 * MS + 50_000)] * 3, 1: _calls("aten::mm", MS // 2, 5 * MS)}
    assert _gaps(kernels, calls)["gap_ns"].to_list() == [2 * MS, 4 * MS]
    # a kernel launched long before its GPU went idle: the calls around it are not what it waited for
    early = {0: [(0, MS, 0), (3 * MS, 4 * MS, MS // 4)], 1: [(0, MS, 0), (5 * MS, 6 * MS, MS // 4)]}
    calls = {0: _calls("aten::mm", 0, 3 * MS), 1: _calls("aten::mm", 0, 5 * MS)}
    assert _gaps(early, calls)["gap_ns"].to_list() == [0, 0]   # held (queued), as before
    assert _gaps(early, calls)["queued_excess_ns"].to_list() == [-2.0 * MS, 2.0 * MS]


def test_a_host_slowed_inside_more_calls_than_its_peers_make_long_keeps_their_idle_time():
    # both ranks' first aten::mm of the step is long (setup, taken out); rank 1's host is also
    # slowed inside a second one (CPU contention) while its GPU idles 3 ms: no peer makes a
    # second long call, so that idle time stays its host's
    kernels = {0: [(0, MS, 0), (3 * MS, 4 * MS, 3 * MS), (int(4.2 * MS), 5 * MS, int(4.2 * MS))],
               1: [(0, MS, 0), (3 * MS, 4 * MS, 3 * MS), (7 * MS, 8 * MS, 7 * MS)]}
    second = ("aten::mm", int(4.5 * MS), 7 * MS + 10_000)
    calls = {0: _calls("aten::mm", MS // 2, 3 * MS), 1: _calls("aten::mm", MS // 2, 3 * MS) + [second]}
    assert _gaps(kernels, calls)["gap_ns"].to_list() == [int(0.2 * MS), 3 * MS]


def test_idle_time_before_what_an_outer_setup_call_launches_after_a_nested_one_ended_is_setup():
    # scaled_dot_product_attention (0.5-5 ms) holds a cuDNN call (0.6-2 ms) that ended before the
    # outer call launched the kernel that ended its GPU's idle time
    kernels = {r: [(0, MS, 0), (5 * MS, 6 * MS, 5 * MS)] for r in (0, 1)}
    calls = {r: _calls("sdpa", MS // 2, 5 * MS) + _calls("cudnn", int(0.6 * MS), 2 * MS) for r in (0, 1)}
    assert _gaps(kernels, calls)["gap_ns"].to_list() == [0, 0]
