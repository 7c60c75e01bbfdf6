"""Every named query against simulated jobs whose answer the ground truth states."""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest

from mapp.sql import open_database
from tests.sql.conftest import SLOW_LINK, SLOW_RANK, run


def test_iteration_times_match_the_simulated_job(faulty):
    db, truth, _ = faulty
    rows = run(db, "iteration_times")
    world = truth["world_size"]
    assert len(rows) == world * len(truth["iteration_us"])
    ends = {}
    for row in rows:
        ends[row["iteration"]] = max(ends.get(row["iteration"], 0), row["end_aligned_ns"])
    # The job's iteration time is the time between consecutive ends on the reference clock.
    for i in range(1, len(truth["iteration_us"])):
        measured_us = (ends[i] - ends[i - 1]) / 1000
        assert measured_us == pytest.approx(truth["iteration_us"][i], rel=0.005)
    assert all(0.5 < row["vs_median"] < 2 for row in rows)
    assert {row["iteration"] for row in run(db, "iteration_times", skip=1)} == {1, 2}


def test_rank_breakdown_shows_the_slow_gpu_and_adds_up(faulty):
    db, truth, _ = faulty
    rows = {row["rank"]: row for row in run(db, "rank_breakdown")}
    assert set(rows) == set(range(truth["world_size"]))
    for row in rows.values():
        parts = row["compute_ns"] + row["exposed_comm_ns"] + row["other_ns"] + row["idle_ns"]
        assert parts == row["window_ns"]
        assert row["overlap_ns"] + row["exposed_comm_ns"] == row["comm_ns"]
    peers = [rows[r]["compute_ns"] for r in (0, 2, 3)]  # same stage as the slow rank
    assert rows[SLOW_RANK]["compute_ns"] / statistics.mean(peers) == pytest.approx(1.5, rel=0.05)
    # Its stage-mates wait for it: they spend far more time in (exposed) communication.
    assert rows[SLOW_RANK]["exposed_comm_ns"] < min(rows[r]["exposed_comm_ns"] for r in (0, 2, 3)) / 2


def test_comm_overlap_tp_hidden_inside_compute_p2p_exposed(pipeline):
    db, _, _ = pipeline
    rows = run(db, "comm_overlap")
    by_kind: dict[str, list[dict]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], []).append(row)
    assert set(by_kind) == {"tp", "p2p"}
    # The simulator runs TP all-reduces inside forward/backward and p2p between them.
    assert all(row["overlap_frac"] > 0.99 for row in by_kind["tp"])
    assert all(row["overlap_frac"] < 0.01 for row in by_kind["p2p"])
    for row in rows:
        assert row["overlapped_ns"] + row["exposed_ns"] == row["comm_ns"]


def test_slowest_ops_are_the_slowed_rank(faulty):
    db, truth, _ = faulty
    rows = run(db, "slowest_ops", limit=12)
    assert len(rows) == 12
    assert {row["rank"] for row in rows} == {SLOW_RANK}
    for row in rows:
        assert row["vs_median"] == pytest.approx(1.5, rel=0.05)
    assert [r["dur_ns"] for r in rows] == sorted((r["dur_ns"] for r in rows), reverse=True)
    collectives = run(db, "slowest_ops", cat="collective", limit=3)
    assert len(collectives) == 3 and all(row["name"] in ("reduce_scatter", "all_gather") for row in collectives)


def test_collective_skew_names_the_slow_rank(faulty):
    db, _, _ = faulty
    rows = {(row["group"], row["op"]): row for row in run(db, "collective_skew")}
    reduce_scatter = rows[("dp", "reduce_scatter")]
    # Stage 0's gradient reduce-scatter waits for the slow rank every time (half the instances).
    assert reduce_scatter["top_last_arriver"] == SLOW_RANK
    assert reduce_scatter["top_last_share"] == pytest.approx(0.5)
    assert reduce_scatter["p50_spread_ns"] > 100 * reduce_scatter["mean_transfer_ns"] / 100
    assert list(rows)[0] == ("dp", "reduce_scatter")  # the most total waiting comes first


def test_last_arrivers_top_is_the_slow_rank(faulty):
    db, _, _ = faulty
    rows = run(db, "last_arrivers")
    top = rows[0]
    assert top["rank"] == SLOW_RANK
    assert top["last_share"] == 1.0
    assert top["waited_ns"] == 0
    assert top["caused_wait_ns"] == max(row["caused_wait_ns"] for row in rows)
    assert len(run(db, "last_arrivers", limit=2)) == 2


def test_p2p_bandwidth_of_the_slow_link_is_lower_by_the_factor(faulty):
    db, truth, _ = faulty
    factor = next(f["factor"] for f in truth["faults"] if f["kind"] == "slow_link")
    rows = {(row["src"], row["dst"]): row for row in run(db, "p2p_bandwidth")}
    a, b = SLOW_LINK
    healthy = statistics.median(row["bandwidth_gbs"] for key, row in rows.items() if set(key) != {a, b})
    for key in ((a, b), (b, a)):
        assert healthy / rows[key]["bandwidth_gbs"] == pytest.approx(factor, rel=0.05)
        assert rows[key]["vs_median"] == pytest.approx(1 / factor, rel=0.05)
    assert all(row["messages"] == truth["config"]["microbatches"] * 3 for row in rows.values())


def test_pipeline_bubbles_clean_1f1b(pipeline):
    db, truth, _ = pipeline
    rows = run(db, "pipeline_bubbles")
    p, m = truth["layout"]["pp"], truth["config"]["microbatches"]
    assert [row["pp"] for row in rows] == list(range(p))
    iteration_ns = statistics.mean(truth["iteration_us"]) * 1000
    for row in rows:
        # The window is the job's iteration; the bubble is what the stage did not compute of it.
        assert row["window_ns"] == pytest.approx(iteration_ns, rel=0.01)
        assert row["bubble_ratio"] == pytest.approx(1 - row["compute_ns"] / iteration_ns, abs=0.01)
        # At least the schedule's own bubble, (p-1)/(m+p-1).
        assert row["bubble_ratio"] >= (p - 1) / (m + p - 1) - 0.01


def test_pipeline_bubbles_smallest_on_the_heavy_stage(imbalanced):
    db, truth, _ = imbalanced
    rows = run(db, "pipeline_bubbles")
    heavy = next(f["stage"] for f in truth["faults"] if f["kind"] == "stage_imbalance")
    assert min(rows, key=lambda row: row["bubble_ratio"])["pp"] == heavy


def test_top_ops_counts_and_shares(faulty):
    db, truth, _ = faulty
    rows = run(db, "top_ops")
    cfg = truth["config"]
    calls = truth["world_size"] * cfg["iterations"] * cfg["microbatches"]
    counts = {row["name"]: row["count"] for row in rows}
    assert counts["forward"] == calls and counts["backward"] == calls
    assert sum(row["share"] for row in rows) == pytest.approx(1.0)
    assert [row["total_ns"] for row in rows] == sorted((row["total_ns"] for row in rows), reverse=True)
    assert len(run(db, "top_ops", limit=2)) == 2



def test_rank_breakdown_counts_the_coalesced_nccl_p2p_kernels_as_communication():
    # A real 4-GPU PP2 x DP2 profiler job: megatron-core's batched p2p launches one coalesced
    # ncclDevKernel_SendRecv per exchange, which no comm event stands for. HTA counts NCCL
    # kernels as communication; so must rank_breakdown (it had rank 0's 281 ms of them as "other")
    from pathlib import Path

    from mapp.sql.database import open_database

    case = Path(__file__).resolve().parents[1] / "corpus" / "cases-gpu4" / "gpt-pp2dp2-prof-layer1.5x-r2-gpu"
    db = open_database(case)
    try:
        # the kernels lie on one stream, one after another: their durations add up
        sendrecv = {r["rank"]: r["ns"] for r in db.query(
            "SELECT e.rank, sum(e.dur_ns) AS ns FROM events e JOIN iteration_windows w ON e.rank = w.rank "
            "AND e.ts_aligned_ns >= w.start_ns AND e.end_aligned_ns <= w.end_ns "
            "WHERE e.name LIKE 'ncclDevKernel_SendRecv%' GROUP BY 1").dicts()}
        rows = {r["rank"]: r for r in run(db, "rank_breakdown")}
    finally:
        db.close()
    assert sorted(sendrecv) == [0, 1, 2, 3] and sendrecv[0] > 200e6
    for rank, ns in sendrecv.items():
        assert rows[rank]["comm_ns"] >= ns, (rank, rows[rank]["comm_ns"], ns)
        assert rows[rank]["compute_ns"] + rows[rank]["exposed_comm_ns"] + rows[rank]["other_ns"] + rows[rank]["idle_ns"] \
            == rows[rank]["window_ns"]


def test_rank_breakdown_counts_the_wait_for_overlapped_gradient_reduction_as_communication():
    # A real 4-GPU DP4 job with overlap_grad_reduce, rank 1 slowed before each microbatch: its
    # peers spend ~100 ms a step in grad_sync_wait (the all-reduce itself only launches), which
    # rank_breakdown had as "other" time; it is waiting for peers, exposed communication
    from pathlib import Path

    from mapp.sql.database import open_database

    case = Path(__file__).resolve().parents[1] / "corpus" / "cases-sched" / "gpt-dp4-ogr-mapp-beforemb25ms-r1-s-gpu"
    db = open_database(case)
    try:
        waits = {r["rank"]: r["ns"] for r in db.query(
            "SELECT rank, sum(dur_ns)::BIGINT AS ns FROM events WHERE name = 'grad_sync_wait' GROUP BY 1").dicts()}
        rows = {r["rank"]: r for r in run(db, "rank_breakdown")}
    finally:
        db.close()
    for rank in (0, 2, 3):
        assert rows[rank]["exposed_comm_ns"] >= 0.9 * waits[rank] and rows[rank]["exposed_comm_frac"] > 0.15, rank
        assert rows[rank]["other_ns"] == 0
    assert rows[1]["exposed_comm_frac"] < 0.05


def test_gpu_neighbours_names_the_rank_whose_gpu_another_process_computed_on(tmp_path):
    # A real 2-H200 TP2 job under mapp's capture (tests/corpus/cases-gpu2-hog): another process
    # ran matmuls in bursts on rank 0's GPU; NVML caught it in 2 of 3 samples (2% and 48% of
    # the SMs), and nothing on rank 1's
    case = Path(__file__).parents[1] / "corpus" / "cases-gpu2-hog" / "gpt-tp2-mapp-gpuhogbursty0.2-r0-f46-gpu2"
    shutil.copytree(case, tmp_path / "job")
    db = open_database(tmp_path / "job")
    try:
        rows = run(db, "gpu_neighbours")
        assert [(r["rank"], r["samples"], r["neighbour_samples"], r["max_other_sm_pct"]) for r in rows] == [
            (0, 3, 2, 48.0), (1, 3, 0, 0.0)]
        assert rows[0]["device"] == 0 and rows[1]["device"] == 1
        samples = db.query("SELECT rank, other_sm_pct, other_processes FROM gpu_counters WHERE rank = 0").dicts()
        assert [(s["other_sm_pct"], s["other_processes"]) for s in samples] == [(2.0, 1), (0.0, 0), (48.0, 1)]
    finally:
        db.close()


def test_gpu_counters_are_empty_for_a_trace_without_them(faulty):
    db, _, _ = faulty
    assert run(db, "gpu_neighbours") == []
    assert db.query("SELECT count(*) AS n FROM gpu_counters").dicts() == [{"n": 0}]
