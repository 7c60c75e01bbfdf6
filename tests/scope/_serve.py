"""Start ``mapp scope serve`` (one process, or under torchrun) and talk to it over its WebSocket."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + e.get("PYTHONPATH", ""),
             PYTHONWARNINGS="ignore", CUDA_VISIBLE_DEVICES="")
    return e


class Served:
    """``with Served(ckpt, nproc=2, args=["--tp", "2"]) as s: s.url``; the job is killed on exit."""

    def __init__(self, checkpoint: Path, *, nproc: int = 1, args: list[str] | None = None, timeout: float = 180):
        serve = ["-m", "mapp", "scope", "serve", str(checkpoint), "--port", "0", *(args or [])]
        if nproc > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *serve]
        else:
            cmd = [sys.executable, *serve]
        self.cmd, self.timeout = cmd, timeout
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.output: list[str] = []

    def __enter__(self) -> "Served":
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=env(), cwd=ROOT, start_new_session=True)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            match = re.search(r"MegaScope serving at (http://\S+)", line)
            if match:
                self.url = match.group(1)
                # keep reading what the job prints: a full pipe would stop the job mid-request
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.__exit__()
        raise AssertionError("server did not start:\n" + "".join(self.output)[-4000:])

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)

    def tail(self, chars: int = 3000) -> str:
        """The end of what the job printed (for a failing test's message)."""
        return "".join(self.output)[-chars:]

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://").rstrip("/") + "/ws"

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def request(ws, message: dict, until: str, timeout: float = 120) -> list[dict]:
    """Send ``message``; return every frame up to and including the first of type ``until``."""
    ws.send(json.dumps(message))
    frames = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = json.loads(ws.recv(timeout=max(1.0, deadline - time.monotonic())))
        frames.append(frame)
        if frame["type"] == until:
            return frames
        if frame["type"] == "error":
            raise AssertionError(frame["message"])
    raise AssertionError(f"no {until} frame within {timeout} s")
