"""Run ``examples/train_gpt.py`` (coupled or ``--fbd``) under torchrun on CPU and read its losses."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.megatron_hooks._torchrun import env

ROOT = Path(__file__).resolve().parents[3]
LAUNCH = Path(__file__).resolve().parent / "_launch.py"

# tiny GPT: 4 layers, hidden 64, seq 32, 4 microbatches of 2; 5 steps
TINY = ["--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "256",
        "--micro-batch-size", "2", "--num-microbatches", "4", "--iterations", "5"]
LINE = re.compile(r"^iteration (\d+) loss (\d+\.\d+) step ([\d.]+) ms$", re.M)


@dataclass
class Run:
    output: str
    printed: list[tuple[int, float]]
    """(iteration, loss) of the ``iteration N loss X step T ms`` lines, in order."""
    losses: list[float]
    """The same losses at full precision (recorded by the launcher)."""
    out: Path


def run(out: Path, nproc: int, args: list[str], timeout: float = 600,
        extra_env: dict[str, str] | None = None) -> Run:
    """Launch ``nproc`` processes of the example with ``TINY`` and ``args`` (later flags win);
    ``timeout`` is generous: 6 processes take about 40 s on 2 idle cores, minutes on busy ones."""
    out.mkdir(parents=True, exist_ok=True)
    # each rank's stdout also goes to a file of its own: on the console, lines that two ranks
    # print at the same moment can interleave mid-line and hide a loss line from the pattern
    logs = out / "logs"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "--log-dir", str(logs), "--tee", "3", str(LAUNCH), str(out), *TINY, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**env(), **(extra_env or {})},
                          cwd=ROOT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    stdouts = "".join(p.read_text() for p in sorted(logs.rglob("stdout.log")))
    printed = [(int(m[1]), float(m[2])) for m in LINE.finditer(stdouts)]
    files = sorted(out.glob("losses-rank*.json"), key=lambda p: int(p.stem.removeprefix("losses-rank")))
    assert files, output[-3000:]
    return Run(output, printed, json.loads(files[-1].read_text()), out)
