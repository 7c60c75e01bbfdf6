"""A process killed mid-run leaves a loadable file: whole flushed lines after ``[``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ._read import read_v1

SCRIPT = """
import sys, time
from mapp.capture import Tracer, TracerConfig, Window, Granularity
t = Tracer(TracerConfig(trace_dir=sys.argv[1], rank=2, world_size=4, flush_ms=10,
                        window=Window(interval=1, length=1)))
i = 0
while True:
    with t.iteration(i):
        for mb in range(4):
            with t.scope("forward", cat="compute", level=Granularity.SCHEDULE, microbatch=mb):
                time.sleep(0.001)
    i += 1
    if i == 20:
        print("ready", flush=True)
"""


def test_sigkill_leaves_loadable_partial_trace(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    events, _cut = read_v1(tmp_path / "rank-00002.json")
    assert events[0]["name"] == "mapp"
    iterations = [e["args"]["iteration"] for e in events if e.get("cat") == "iteration"]
    assert len(iterations) >= 15
    assert iterations == list(range(len(iterations)))  # in order, none twice
    forwards = [(e["args"]["iteration"], e["args"]["microbatch"]) for e in events if e.get("name") == "forward"]
    assert len(forwards) == len(set(forwards))
