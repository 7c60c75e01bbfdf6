"""Collective and p2p matching, and the diagnosis lines, on traces whose construction states the answer."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from mapp.analysis.chrome import chrome_extras
from mapp.analysis.graph import build_graph, match_bundle
from mapp.analysis.ingest import load_bundle
from tests.analysis.graph.builders import Job, pipeline_job

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def small_job(**kwargs) -> Job:
    """4 ranks, tp=2 dp=2: three TP all-reduces on each TP group, a DP all-reduce, and two messages 0->1."""
    job = Job(tp=2, pp=1, dp=2, **kwargs)
    for k in range(3):
        t = 100.0 + 100 * k
        job.collective("all_reduce", "tp", [0, 1], arrive={0: t, 1: t + 10 + k}, end=t + 40)
        job.collective("all_reduce", "tp", [2, 3], arrive={2: t + 5, 3: t}, end=t + 40)
    job.collective("all_reduce", "dp", [0, 2], arrive={0: 500, 2: 520}, end=560, nbytes=1 << 20)
    job.collective("all_reduce", "dp", [1, 3], arrive={1: 500, 3: 530}, end=560, nbytes=1 << 20)
    job.p2p(0, 1, send_at=600, recv_at=590, end=650)
    job.p2p(0, 1, send_at=700, recv_at=720, end=760)
    return job


def match(job: Job, directory: Path):
    return match_bundle(load_bundle(job.write(directory)))


def test_collective_instances_by_seq(tmp_path):
    m = match(small_job(), tmp_path)
    c = m.collectives.sort("instance_id")
    assert len(c) == 8
    assert c["complete"].all() and not c["by_order"].any()
    assert c.select("group", "group_ranks", "seq").rows()[:4] == [
        ("dp", [0, 2], 0), ("dp", [1, 3], 0), ("tp", [0, 1], 0), ("tp", [0, 1], 1)]
    assert c["n_members"].to_list() == [2] * 8 and c["n_expected"].to_list() == [2] * 8
    tp01 = c.filter(pl.col("group_ranks") == [0, 1]).sort("seq")
    # rank 1 arrives 10, 11, 12 us after rank 0 (no clock skew in this job)
    assert tp01["last_arriver"].to_list() == [1, 1, 1]
    assert tp01["arrival_spread_ns"].to_list() == [10_000, 11_000, 12_000]
    assert c.filter(pl.col("group_ranks") == [1, 3])["bytes"].to_list() == [1 << 20]
    assert len(m.members) == 16
    assert m.findings == []


def test_members_carry_the_group_label(tmp_path):
    m = match(small_job(), tmp_path)
    members = m.members.join(m.collectives.select("instance_id", pl.col("group").alias("instance_group")),
                             on="instance_id")
    assert members["group"].to_list() == members["instance_group"].to_list()
    assert members.group_by("group").len().sort("group").rows() == [("dp", 4), ("tp", 12)]
    assert {"instance_id", "rank", "op", "group", "lane", "bytes", "start_ns", "end_ns"} <= set(m.members.columns)


def test_p2p_pairs_by_seq(tmp_path):
    m = match(small_job(), tmp_path)
    p = m.p2p.sort("pair_id")
    assert p.select("src", "dst", "seq", "bytes", "bytes_match").rows() == [(0, 1, 0, 8192, True), (0, 1, 1, 8192, True)]
    assert p["send_start_ns"].to_list() == [600_000, 700_000]
    assert p["recv_start_ns"].to_list() == [590_000, 720_000]
    assert p["recv_end_ns"].to_list() == [650_000, 760_000]


def test_missing_member_names_the_hang_culprit(tmp_path):
    job = Job(tp=4, pp=1, dp=1)
    for k in range(4):
        job.collective("all_reduce", "tp", [0, 1, 2, 3], arrive=100.0 * k, end=100.0 * k + 40,
                       iteration=7, skip=(3,) if k >= 2 else ())
    m = match(job, tmp_path)
    lines = [f.line() for f in m.findings]
    assert lines == [
        "error: rank 3 never reached all_reduce seq 2 on tp[0,1,2,3] (iteration 7) that 0,1,2 entered: "
        "likely hang culprit; 1 later instances up to seq 3 also lack it"
    ]
    finding = m.findings[0]
    assert (finding.kind, finding.ranks, finding.count) == ("missing_member", (3,), 2)
    assert m.collectives.sort("seq")["complete"].to_list() == [True, True, False, False]


def test_size_mismatch(tmp_path):
    job = Job(tp=4, pp=1, dp=1)
    job.collective("all_gather", "tp", [0, 1, 2, 3], arrive=100, end=150)
    job.collective("all_gather", "tp", [0, 1, 2, 3], arrive=200, end=250, sizes={2: 2048}, iteration=3)
    m = match(job, tmp_path)
    assert [f.line() for f in m.findings] == [
        "error: bytes mismatch in collective seq 1 on tp[0,1,2,3] (iteration 3): 4096 on ranks 0,1,3; 2048 on rank 2"
    ]
    assert m.findings[0].ranks == (2,)


def test_op_mismatch(tmp_path):
    job = Job(tp=4, pp=1, dp=1)
    job.collective("all_reduce", "tp", [0, 1, 2, 3], arrive=100, end=150, ops={1: "broadcast"})
    m = match(job, tmp_path)
    assert [f.line() for f in m.findings] == [
        "error: op mismatch in collective seq 0 on tp[0,1,2,3] (iteration 0): all_reduce on ranks 0,2,3; broadcast on rank 1"
    ]


def test_unmatched_send_and_p2p_size_mismatch(tmp_path):
    job = Job(tp=1, pp=2, dp=1)
    job.p2p(0, 1, send_at=100, recv_at=90, end=150)
    job.p2p(0, 1, send_at=200, recv_at=190, end=250, recv_bytes=4096, iteration=1)
    job.p2p(0, 1, send_at=300, recv_at=290, end=350, drop_recv=True, iteration=2)
    m = match(job, tmp_path)
    assert [f.line() for f in m.findings] == [
        "error: size mismatch: rank 0 sent 8192 bytes to rank 1 (send seq 1, iteration 1) but rank 1 received 4096 bytes",
        "error: rank 0 sent 1 message to rank 1 that rank 1 never received (first: send seq 2, iteration 2)",
    ]
    assert len(m.p2p) == 2 and m.p2p["bytes_match"].to_list() == [True, False]


def test_unmatched_recv(tmp_path):
    job = Job(tp=1, pp=2, dp=1)
    job.p2p(1, 0, send_at=100, recv_at=90, end=150, drop_send=True, iteration=4)
    m = match(job, tmp_path)
    assert [f.line() for f in m.findings] == [
        "error: rank 0 waited for 1 message from rank 1 that rank 1 never sent (first: recv seq 0, iteration 4)"
    ]


def _shape(m):
    members = m.members.join(m.collectives.select("instance_id", "group", "seq"), on="instance_id")
    inst = members.group_by("group", "seq").agg(pl.col("rank").sort()).sort("group", "seq")
    pairs = m.p2p.select("src", "dst", "send_start_ns", "recv_start_ns").sort("src", "dst", "send_start_ns")
    return inst, pairs


def test_without_seq_order_matching_equals_seq_matching(tmp_path):
    with_seq = match(pipeline_job(tp=2, pp=2, dp=2, steps=8, max_offset_us=0, max_drift_ppm=0), tmp_path / "a")
    no_seq = match(pipeline_job(tp=2, pp=2, dp=2, steps=8, max_offset_us=0, max_drift_ppm=0, with_seq=False),
                   tmp_path / "b")
    assert no_seq.collectives["by_order"].all() and no_seq.p2p["by_order"].all()
    a, b = _shape(with_seq), _shape(no_seq)
    assert a[0].equals(b[0]) and a[1].equals(b[1])
    assert {f.kind for f in no_seq.findings} == {"order_matched"}
    assert [f.kind for f in with_seq.findings] == []


def test_without_seq_unequal_call_counts_say_order_is_unsafe(tmp_path):
    job = Job(tp=2, pp=1, dp=1, with_seq=False)
    job.collective("_reduce", "tp", [0, 1], arrive=100, end=150)
    job.collective("_reduce", "tp", [0, 1], arrive=200, end=250, skip=(1,))
    job.collective("_reduce", "tp", [0, 1], arrive=300, end=350)
    m = match(job, tmp_path)
    kinds = [f.kind for f in m.findings]
    assert "order_unsafe" in kinds
    unsafe = next(f for f in m.findings if f.kind == "order_unsafe")
    assert unsafe.line() == (
        "warning: _reduce on tp[0,1]: no seq and ranks made different numbers of calls (rank 0: 3, rank 1: 2); "
        "matching by call order may pair the wrong calls after the first missing one"
    )


def test_shifting_one_rank_clock_changes_no_match(tmp_path):
    base = match(pipeline_job(tp=2, pp=2, dp=2, steps=8, max_offset_us=0, max_drift_ppm=0), tmp_path / "a")
    job = pipeline_job(tp=2, pp=2, dp=2, steps=8, max_offset_us=0, max_drift_ppm=0)
    for event in job.events[5]:
        event["ts"] += 123_456.0
    moved = match(job, tmp_path / "b")
    assert moved.collectives.select("group", "group_ranks", "seq").equals(base.collectives.select("group", "group_ranks", "seq"))
    assert moved.members.select("instance_id", "rank").equals(base.members.select("instance_id", "rank"))
    assert moved.p2p.select("src", "dst", "seq").equals(base.p2p.select("src", "dst", "seq"))


def test_megatronapp_fixture_matches_by_order_with_channels(tmp_path):
    directory = tmp_path / "m"
    shutil.copytree(FIXTURES / "megatronapp", directory)
    m = match_bundle(load_bundle(directory))
    # 4 ranks, tp=2 pp=2: each TP pair does 4 _reduce calls
    assert len(m.collectives) == 8 and m.collectives["complete"].all()
    pairs = m.p2p.select("src", "dst", "send_name", "recv_name").sort("src", "dst", "send_name").rows()
    # exchange-next/prev carries a message both ways; warmup goes down the pipe, cooldown comes back
    assert pairs == [
        (0, 2, "exchange-next", "exchange-prev"), (0, 2, "send-warmup", "recv-warmup"),
        (1, 3, "exchange-next", "exchange-prev"), (1, 3, "send-warmup", "recv-warmup"),
        (2, 0, "exchange-prev", "exchange-next"), (2, 0, "send-cooldown", "recv-cooldown"),
        (3, 1, "exchange-prev", "exchange-next"), (3, 1, "send-cooldown", "recv-cooldown"),
    ]
    assert [f.kind for f in m.findings] == ["order_matched", "order_matched"]


def test_graph_nodes_and_edges(tmp_path):
    m = match(small_job(), tmp_path)
    g = build_graph(m)
    assert g.number_of_nodes() == 16 + 4
    kinds = [d["kind"] for _, _, d in g.edges(data=True)]
    assert kinds.count("collective") == 8  # one edge per 2-member instance
    assert kinds.count("p2p") == 2
    # program order: each rank's calls in time order, one edge fewer than calls per rank
    calls = {0: 6, 1: 6, 2: 4, 3: 4}
    assert kinds.count("program") == sum(n - 1 for n in calls.values())
    assert g.has_edge((0, "send", 0), (1, "recv", 0))


def test_chrome_extras_are_flow_events_inside_their_slices(tmp_path):
    job = small_job()
    bundle = load_bundle(job.write(tmp_path))
    m = match_bundle(bundle)
    lines = list(chrome_extras(bundle, m)())
    events = [json.loads(line.rstrip().rstrip(",")) for chunk in lines for line in chunk.splitlines()]
    flows = [e for e in events if e["ph"] in "stf"]
    marks = [e for e in events if e["ph"] == "i"]
    assert sum(e["cat"] == "p2p" for e in flows) == 4
    assert sum(e["cat"] == "collective" for e in flows) == 16
    assert len(marks) == 8 and {e["name"] for e in marks} == {"last arriver"}
    first = next(e for e in flows if e["cat"] == "p2p" and e["ph"] == "s")
    assert first["pid"] == 0 and 600 <= first["ts"] <= 650 and first["bp"] == "e"
    tp_marks = sorted((e["pid"], e["ts"]) for e in marks if e["args"]["group"] == "tp" and e["pid"] in (0, 1))
    assert tp_marks == [(1, pytest.approx(110.0)), (1, pytest.approx(211.0)), (1, pytest.approx(312.0))]


def test_matching_is_cached_beside_the_events_table(tmp_path):
    job = Job(tp=4, pp=1, dp=1)
    job.collective("all_reduce", "tp", [0, 1, 2, 3], arrive=100, end=150)
    job.collective("all_reduce", "tp", [0, 1, 2, 3], arrive=200, end=250, skip=(3,))
    bundle = load_bundle(job.write(tmp_path))
    first = match_bundle(bundle)
    assert (tmp_path / ".mapp" / "matching" / "members.parquet").exists()
    again = match_bundle(bundle)
    assert again.collectives.equals(first.collectives) and again.members.equals(first.members)
    assert again.findings == first.findings and again.findings[0].ranks == (3,)


def _hta_copy(directory: Path, world_size: int | None = None) -> Path:
    """HTA's two sampled ranks of a 128-rank job (no process group on any call), with
    ``world_size`` rewritten where given."""
    directory.mkdir()
    for source in sorted((FIXTURES / "hta_trace_filter").glob("*.json.gz")):
        trace = json.loads(gzip.decompress(source.read_bytes()))
        if world_size is not None:
            trace["distributedInfo"]["world_size"] = world_size
        (directory / source.name).write_bytes(gzip.compress(json.dumps(trace).encode()))
    return directory


def test_calls_of_no_group_are_not_timed_across_a_part_of_the_world(tmp_path):
    # 2 traced ranks of 128: a call naming no group may be a collective of untraced ranks only,
    # so no instance paired by call order is complete, and the finding says why
    m = match_bundle(load_bundle(_hta_copy(tmp_path / "part")))
    assert len(m.collectives) == 10 and not m.collectives["complete"].any()
    unknown = [f for f in m.findings if f.kind == "unknown_group"]
    assert len(unknown) == 1 and "the traces hold 2 of the world's 128 ranks" in unknown[0].message
    # the same traces as a whole world of 2: the pairs of one size are complete (4 of 10)
    whole = match_bundle(load_bundle(_hta_copy(tmp_path / "whole", world_size=2)))
    assert whole.collectives["complete"].sum() == 4
    assert "world's" not in next(f.message for f in whole.findings if f.kind == "unknown_group")
