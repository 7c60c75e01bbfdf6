"""Asynchronous p2p (a span that is only the call's post, ``"async": true``) in matching and
clock alignment: such a pair is never an equal anchor; with a blocking receive it still bounds
the clocks (the receive cannot end before its send starts).

The real trace is ``tests/fixtures/dpp_async`` (see its README): MegaDPP, PP2 x VPP2, whose
sends are their posts. Both ranks ran on one host and wrote the Unix time of their trace's zero
(``clock_anchor``), so the true offset between their clocks is known to a few microseconds.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import polars as pl
import pytest
from typer.testing import CliRunner

from mapp.analysis.align import align_bundle, anchors_from
from mapp.analysis.graph import match_bundle
from mapp.analysis.ingest import load_bundle
from mapp.cli.app import app
from tests.analysis.graph.builders import Job

DPP = pathlib.Path(__file__).parent.parent.parent / "fixtures" / "dpp_async"


@pytest.fixture()
def dpp(tmp_path) -> pathlib.Path:
    """A copy of the fixture: the analysis writes its cache beside the traces."""
    for f in DPP.glob("rank-*.json"):
        shutil.copy(f, tmp_path / f.name)
    return tmp_path


def _true_offset_ns(directory: pathlib.Path, rank: int, reference: int = 0) -> float:
    """ns to add to ``rank``'s trace time to read it on ``reference``'s, from the clock anchors."""
    def anchor(r):
        with open(directory / f"rank-{r:05d}.json") as f:
            f.readline()
            meta = json.loads(f.readline().rstrip().rstrip(","))
        a = meta["args"]["clock_anchor"]
        return a["unix_ns"] - a["trace_us"] * 1000.0
    return anchor(rank) - anchor(reference)


def test_real_dpp_trace_every_send_pairs_with_its_receive(dpp):
    events = load_bundle(dpp).scan().filter(pl.col("cat") == "p2p").collect()
    matching = match_bundle(load_bundle(dpp))
    sends, recvs = events.filter(pl.col("name") == "send"), events.filter(pl.col("name") == "recv")
    assert len(sends) == len(recvs) == len(matching.p2p) == 192
    assert not [f for f in matching.findings if f.kind.startswith("unmatched") or f.severity == "error"]
    p2p = matching.p2p
    assert p2p["bytes_match"].all() and (p2p["send_name"] == "send").all() and (p2p["recv_name"] == "recv").all()
    # DPP's sends are their posts; its receives are the wait until the tensor was in hand
    assert p2p["send_async"].all() and not p2p["recv_async"].any()
    assert sorted(p2p.group_by("src", "dst").len().rows()) == [(0, 1, 96), (1, 0, 96)]


def test_real_dpp_trace_aligns_without_contradictions(dpp):
    bundle = load_bundle(dpp)
    matching = match_bundle(bundle)
    anchors = anchors_from(matching)
    assert anchors.equal.is_empty()  # no collective, and no send/recv end together
    assert len(anchors.after) == 192
    clock = align_bundle(bundle, matching)
    assert clock.connected and clock.violations == 0
    assert not any("cannot be ordered" in n for n in clock.notes), clock.notes
    # placed between the bounds the two directions give; the clock anchors say where the truth is
    truth = _true_offset_ns(dpp, 1)
    # raw clocks differ by ~39 ms; the bounds leave +/-353 us, the middle is ~20 us from the truth
    assert clock.ranks[1].offset_ns == pytest.approx(truth, abs=400_000)
    aligned = matching.with_clock(clock).p2p
    assert (aligned["recv_end_aligned_ns"] >= aligned["send_start_aligned_ns"]).all()


def test_real_dpp_trace_merges_without_warning(dpp):
    out = dpp / "merged.json"
    result = CliRunner().invoke(app, ["trace", "merge", str(dpp), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "cannot be ordered" not in result.output and "warning" not in result.output, result.output
    clock = json.loads((dpp / ".mapp" / "clock.json").read_text())
    assert clock["violations"] == 0 and clock["components"] == [[0, 1]]


def _async_job(*, async_recv: bool) -> Job:
    """Two ranks, rank 1's clock 5 ms ahead; 10 messages each way. Each send is posted at t and
    its span ends 20 us later (async); the receive waits from t - 100 us until t + 300 us. A
    blocking receive is marked only when ``async_recv`` is false; an async one (megatron's
    overlapped p2p) is recorded up to its launch: t - 100 us to t - 80 us."""
    job = Job(tp=1, pp=2, dp=1, offsets_us={1: 5_000.0})
    for k in range(10):
        for src, dst in ((0, 1), (1, 0)):
            t = 1_000.0 * k + (0 if src == 0 else 500.0)
            job._event(src, "send", "p2p", t, t + 20, "comm",
                       {"peer": dst, "seq": k, "bytes": 64, "async": True})
            end = t - 80 if async_recv else t + 300
            args = {"peer": src, "seq": k, "bytes": 64}
            if async_recv:
                args["async"] = True
            job._event(dst, "recv", "p2p", t - 100, end, "comm", args)
    return job


def test_async_send_is_only_an_after_anchor(tmp_path):
    bundle = load_bundle(_async_job(async_recv=False).write(tmp_path))
    matching = match_bundle(bundle)
    assert len(matching.p2p) == 20 and matching.p2p["send_async"].all() and not matching.p2p["recv_async"].any()
    anchors = anchors_from(matching)
    assert anchors.equal.is_empty() and len(anchors.after) == 20
    clock = align_bundle(bundle, matching)
    # bounds: each way the receive ends 300 us after the send starts, so the offset is within
    # +/-300 us of the truth and the symmetric middle is exact
    assert clock.connected and clock.violations == 0
    assert clock.ranks[1].offset_ns == pytest.approx(-5_000_000, abs=1_000)


def test_async_receive_bounds_nothing(tmp_path):
    bundle = load_bundle(_async_job(async_recv=True).write(tmp_path))
    matching = match_bundle(bundle)
    assert matching.p2p["send_async"].all() and matching.p2p["recv_async"].all()
    anchors = anchors_from(matching)
    assert anchors.equal.is_empty() and anchors.after.is_empty()
    clock = align_bundle(bundle, matching)
    assert not clock.connected and clock.violations == 0


def test_blocking_pairs_stay_equal_anchors(tmp_path):
    job = Job(tp=1, pp=2, dp=1, offsets_us={1: 5_000.0})
    for k in range(4):
        job.p2p(0, 1, send_at=1000.0 * k, recv_at=1000.0 * k + 10, end=1000.0 * k + 50)
    matching = match_bundle(load_bundle(job.write(tmp_path)))
    assert not matching.p2p["send_async"].any() and not matching.p2p["recv_async"].any()
    anchors = anchors_from(matching)
    assert len(anchors.equal) == 4 and len(anchors.after) == 4
