"""Kill one rank of a traced 4-rank run mid-training: every file stays loadable."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.capture._read import read_v1

from ._torchrun import ROOT, env, torchrun_cmd


def _iterations_written(path) -> int:
    try:
        return path.read_text().count('"cat":"iteration"')
    except FileNotFoundError:
        return 0


def test_killed_rank_leaves_loadable_partial_traces(tmp_path):
    trace = tmp_path / "trace"
    cmd = torchrun_cmd(4, ["--tp", "2", "--pp", "2", "--iterations", "100000", "--trace",
                           "--trace-dir", str(trace), "--trace-interval", "1",
                           "--continuous-trace-iterations", "1"])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(), cwd=ROOT,
                            start_new_session=True)
    victim = trace / "rank-00002.json"
    try:
        deadline = time.monotonic() + 120
        while _iterations_written(victim) < 2:
            assert proc.poll() is None, "training ended before the kill"
            assert time.monotonic() < deadline, "no traced iteration reached the file in time"
            time.sleep(0.2)
        pid = read_v1(victim)[0][0]["args"]["tracer"]["pid"]
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0
    for rank in range(4):
        events, _cut = read_v1(trace / f"rank-{rank:05d}.json")
        assert events[0]["name"] == "mapp" and events[0]["args"]["rank"] == rank
        iterations = [e["args"]["iteration"] for e in events if e.get("cat") == "iteration"]
        assert iterations == list(range(len(iterations)))
        keys = [(e["name"], e["tid"], e["ts"]) for e in events if e.get("ph") == "X"]
        assert len(keys) == len(set(keys))
    victim_events, _ = read_v1(victim)
    assert len([e for e in victim_events if e.get("name") == "layer.forward"]) >= 2 * 4 * 2

    # What the analysis reads of it: every rank, each with exactly the complete lines of its file.
    ingest = pytest.importorskip("mapp.analysis.ingest")
    import polars as pl

    files = {rank: read_v1(trace / f"rank-{rank:05d}.json") for rank in range(4)}
    bundle = ingest.load_bundle(trace)
    assert bundle.ranks.select("rank", "tp", "pp").rows() == [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]
    _assert_bundle_holds(bundle, files, pl)
    # one warning for each file that a write was cut off in (the tracer writes whole lines: usually none)
    warned = sorted(w.split(": line ")[0] for w in bundle.warnings if "is cut off" in w)
    assert warned == [str(trace / f"rank-{rank:05d}.json") for rank, (_, cut) in files.items() if cut]
    # The victim finished iterations 0 and 1 before the kill, so every rank finished iteration 0
    # (stage 0 ends it before its forward of iteration 1, which the victim needed).
    for rank, (events, _) in files.items():
        done = [e["args"]["iteration"] for e in events if e.get("cat") == "iteration"]
        assert done[:2 if rank == 2 else 1] == ([0, 1] if rank == 2 else [0]), rank

    # A crash that leaves the victim's last line half written (the tracer writes whole lines, so
    # cut it ourselves, in a copy): that line alone is dropped, with one warning naming it.
    cut_dir = tmp_path / "cut"
    cut_dir.mkdir()
    for rank in range(4):
        (cut_dir / f"rank-{rank:05d}.json").write_bytes((trace / f"rank-{rank:05d}.json").read_bytes())
    lines = (cut_dir / "rank-00002.json").read_text().rstrip("\n").split("\n")
    if files[2][1]:  # already cut by the kill: start from its complete lines
        lines = lines[:-1]
    last = lines[-1]
    assert last.startswith("{") and last.endswith(","), last
    (cut_dir / "rank-00002.json").write_text("\n".join(lines[:-1] + [last[: len(last) // 2]]))
    victim_events, _ = files[2]
    shorter = dict(files)
    shorter[2] = (victim_events[:-1], True)
    assert read_v1(cut_dir / "rank-00002.json") == shorter[2]
    salvaged = ingest.load_bundle(cut_dir)
    _assert_bundle_holds(salvaged, shorter, pl)
    warned = [w for w in salvaged.warnings if "is cut off" in w]
    assert warned == [f"{cut_dir / 'rank-00002.json'}: line {len(lines)} is cut off "
                      "(crash or copy in progress?); kept the events before it"]
    before, after = _per_rank(bundle, pl), _per_rank(salvaged, pl)
    assert after == {**before, 2: before[2] - 1}  # the cut-off rank lost its last event only


def _per_rank(bundle, pl) -> dict[int, int]:
    n = bundle.scan().group_by("rank").agg(pl.len()).collect()
    return dict(zip(n["rank"].to_list(), n["len"].to_list()))


def _assert_bundle_holds(bundle, files: dict, pl) -> None:
    """The bundle's events of each rank are its file's complete events (metadata aside): as many
    of each phase, the same completed iterations."""
    events = bundle.scan().select("rank", "ph", "cat", "iteration").collect()
    assert sorted(events["rank"].unique().to_list()) == sorted(files)
    for rank, (file_events, _) in files.items():
        mine = events.filter(pl.col("rank") == rank)
        phases = {}
        for e in file_events:
            if e.get("ph") != "M":
                phases[e["ph"]] = phases.get(e["ph"], 0) + 1
        counted = mine.group_by("ph").agg(pl.len())
        assert dict(zip(counted["ph"].to_list(), counted["len"].to_list())) == phases, rank
        done = sorted(e["args"]["iteration"] for e in file_events if e.get("cat") == "iteration")
        assert sorted(mine.filter(pl.col("cat") == "iteration")["iteration"].to_list()) == done, rank
