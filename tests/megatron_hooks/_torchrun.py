"""Run ``examples/train_gpt.py`` under torchrun (CPU, gloo) and read what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.capture._read import read_v1

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_gpt.py"

# tiny GPT: 4 layers, hidden 64, seq 32, 4 microbatches of 2
TINY = ["--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "256",
        "--micro-batch-size", "2", "--num-microbatches", "4"]


@dataclass
class Run:
    trace_dir: Path
    groups: dict
    events: dict[int, list[dict]]  # rank -> events (metadata first)
    meta: dict[int, dict]          # rank -> args of the mapp metadata event
    cut: dict[int, bool]
    output: str


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + e.get("PYTHONPATH", ""),
             PYTHONWARNINGS="ignore", CUDA_VISIBLE_DEVICES="")
    return e


def torchrun_cmd(nproc: int, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            str(EXAMPLE), *TINY, *args]


def run_example(trace_dir: Path, args: list[str], nproc: int = 4, timeout: float = 240) -> Run:
    trace_dir.mkdir(parents=True, exist_ok=True)
    groups_json = trace_dir.parent / (trace_dir.name + "-groups.json")
    cmd = torchrun_cmd(nproc, ["--trace", "--trace-dir", str(trace_dir), "--groups-json", str(groups_json), *args])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env(), cwd=ROOT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    return load(trace_dir, json.loads(groups_json.read_text()), output)


def load(trace_dir: Path, groups: dict, output: str = "") -> Run:
    events, meta, cut = {}, {}, {}
    for path in sorted(trace_dir.glob("rank-*.json")):
        evs, was_cut = read_v1(path)
        rank = evs[0]["args"]["rank"]
        events[rank], meta[rank], cut[rank] = evs, evs[0]["args"], was_cut
    return Run(trace_dir, groups, events, meta, cut, output)
