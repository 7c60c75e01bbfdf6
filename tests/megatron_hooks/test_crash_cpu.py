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

    ingest = pytest.importorskip("mapp.analysis.ingest")
    bundle = ingest.load_bundle(trace)
    assert bundle is not None
