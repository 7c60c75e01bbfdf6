"""Ctrl-C at any instant of any command: exit 130 with one line, inputs and cache left usable.

Interrupts land at random instants (seeded) once the process has started; whatever the
instant, the outcome must be a finished command (exit 0) or one ``interrupted`` line and exit
130, never a traceback, never a changed trace, and the next run must work.
"""

from __future__ import annotations

import hashlib
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.analysis.detect._sim import simulated

COMMANDS = (
    ["detect", "{dir}", "--no-cache"],
    ["trace", "merge", "{dir}", "-o", "{out}/merged.json", "--no-cache"],
    ["sql", "{dir}", "-c", "SELECT rank, count(*) AS n FROM events GROUP BY rank"],
    ["report", "{dir}", "--no-detect"],
)
# Python itself starts in a few tens of milliseconds before mapp's handler is installed (an
# interrupt then is the interpreter's, not mapp's); the instants start well after that.
EARLIEST_S, LATEST_S = 0.6, 3.0
ENV = {"PATH": "/usr/bin:/bin", "COLUMNS": "120", "PYTHONUNBUFFERED": "1"}


def _traces(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("rank-*.json"))}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out, _ = simulated(tmp_path_factory.mktemp("interrupts"), "slow_gpu:3:1.3", tp=2, pp=2, dp=4, iterations=4,
                       layers=8)
    return out


def _as_from_a_terminal() -> None:
    """In the child before it execs: SIGINT's default action, as a shell gives a command. A
    pytest-xdist worker ignores SIGINT and an ignored signal stays ignored across exec, so mapp
    would see it ignored (as under nohup), keep Python's handling off and run to the end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mapp", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV, preexec_fn=_as_from_a_terminal)


def _run_and_interrupt(args: list[str], delay_s: float) -> subprocess.CompletedProcess:
    proc = _start(args)
    time.sleep(delay_s)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _interrupt_once_running(args: list[str]) -> subprocess.CompletedProcess:
    """Interrupt ``args`` once it is surely mid-run, whatever the machine's load: when its
    process has mapped polars' library (imported after mapp's handler is installed, before any
    command reads a trace): random instants alone may all land after the end of the runs."""
    proc = _start(args)
    maps = Path(f"/proc/{proc.pid}/maps")
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if "polars" in maps.read_text():
                proc.send_signal(signal.SIGINT)
                break
        except OSError:
            break
        time.sleep(0.005)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _seconds(args: list[str]) -> float:
    """How long one uninterrupted run of ``args`` takes on this machine now."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mapp", *args], capture_output=True, env=ENV, timeout=300)
    return time.perf_counter() - start


def test_ctrl_c_at_random_instants_is_one_line_and_exit_130(bundle, tmp_path):
    rng = random.Random(14)
    before = _traces(bundle)
    # the instants span each command's own run on this machine (twice its time after the
    # earliest instant, within LATEST_S): fixed instants missed every run of a fast machine
    # and caught none mid-run, and a slow one finishes none before them
    runs = [[a.format(dir=bundle, out=tmp_path) for a in c] for c in COMMANDS]
    span = [min(LATEST_S, EARLIEST_S + 2 * max(_seconds(args) - EARLIEST_S, 0.2)) for args in runs]
    outcomes = []
    for i in range(13):
        args = runs[i % len(COMMANDS)]
        done = (_run_and_interrupt(args, rng.uniform(EARLIEST_S, span[i % len(COMMANDS)])) if i < 12
                else _interrupt_once_running(args))
        said = done.stdout + done.stderr
        assert "Traceback" not in said, (args, said[-2000:])
        assert done.returncode in (0, 130), (args, done.returncode, said[-2000:])
        if done.returncode == 130:
            lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("warning:")]
            assert lines == ["interrupted"], (args, done.stderr)
        outcomes.append(done.returncode)
        assert _traces(bundle) == before, "an interrupted command changed a trace"
    assert outcomes[-1] == 130  # an interrupt that reaches a running command stops it
    leftovers = [p for p in [*bundle.rglob(".*.tmp"), *bundle.rglob(".matching-*"), *tmp_path.rglob(".*.tmp")]]
    assert leftovers == [], "an interrupted run left its temporary files"
    # whatever state the interrupts left the cache in, the next run reads the bundle
    again = subprocess.run([sys.executable, "-m", "mapp", "detect", str(bundle)], capture_output=True, text=True,
                           env=ENV, timeout=300)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert "1 suspect" in again.stdout and "slow compute" in again.stdout
