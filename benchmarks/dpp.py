"""MegaDPP against megatron-core's interleaved schedule in real training, same machine, same run.

    python benchmarks/dpp.py [--rounds 3] [--iterations 8] [--rows pp2-len1.0,...] [--json OUT]
    python benchmarks/dpp.py --gpus 4 ...       # one process per GPU (NCCL): the multi-GPU issue

Each row trains ``examples/train_gpt.py`` (megatron-core GPT, gloo on CPU, one thread per
process) with variable-length microbatches (``--seq-lognormal``: the same lengths in both
schedules, drawn from the run's seed) under megatron-core's interleaved 1F1B and under
``--use-dpp``, alternating A B A B ... for ``--rounds`` rounds so that the machine's drift
falls on both alike. A run's step time is the median over its iterations after the first of
the slowest rank's step; a row reports the median over rounds and DPP's change.

On CPU a pipeline only runs in parallel with a core per process: the PP2 rows (2 processes)
fit a 2-core machine; PP4 (4 processes) on 2 cores shares them, so one rank's bubble is
another's compute there and a schedule's bubbles cost less than on real devices. ``--pin``
gives each row exactly one core per process (cores 0..N-1) on a larger host. With
``--gpus``, each process takes a GPU and NCCL carries the pipeline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ["--hidden", "128", "--heads", "4", "--seq", "512", "--vocab", "512", "--micro-batch-size", "2",
         "--num-microbatches", "16", "--optimizer", "sgd"]
ROWS = {  # name: (processes, flags)
    "pp2-len0.5": (2, ["--pp", "2", "--vpp", "2", "--layers", "8", "--seq-lognormal", "0.5"]),
    "pp2-len1.0": (2, ["--pp", "2", "--vpp", "2", "--layers", "8", "--seq-lognormal", "1.0"]),
    "pp2-fixed": (2, ["--pp", "2", "--vpp", "2", "--layers", "8"]),
    "pp4-len1.0": (4, ["--pp", "4", "--vpp", "2", "--layers", "8", "--seq-lognormal", "1.0"]),
}


def _env(gpus: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run(procs: int, flags: list[str], iterations: int, gpus: int, pin: bool = False) -> float:
    """Seconds per step of one training run (median over iterations after the first)."""
    with tempfile.TemporaryDirectory() as tmp:
        timings = Path(tmp) / "timings.json"
        extra = ["--bf16"] if gpus else []
        # --pin: exactly one core per process (taskset), so that a many-core host measures
        # what a pipeline of that many devices would, and nothing else shares those cores
        taskset = ["taskset", "-c", f"0-{procs - 1}"] if pin else []
        cmd = [*taskset, sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}",
               str(ROOT / "examples" / "train_gpt.py"), *MODEL, *flags, *extra, "--iterations", str(iterations),
               "--timings-json", str(timings)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(gpus), cwd=ROOT)
        if proc.returncode != 0:
            sys.exit(f"training failed: {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}")
        per_rank = json.loads(timings.read_text())["step_s"]
    slowest = [max(steps) for steps in zip(*per_rank)]
    return statistics.median(slowest[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated: " + ", ".join(ROWS))
    parser.add_argument("--policy", default="adaptive", choices=["depth", "breadth", "adaptive"])
    parser.add_argument("--gpus", type=int, default=0, help="processes per row = GPUs (NCCL); 0: CPU")
    parser.add_argument("--pin", action="store_true", help="CPU: pin each row's processes to cores 0..N-1")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    names = args.rows.split(",")
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        sys.exit(f"unknown row(s) {', '.join(unknown)}: choose from {', '.join(ROWS)}")

    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    results = []
    with Progress(transient=True) as progress:
        task = progress.add_task("training", total=len(names) * args.rounds * 2)
        for name in names:
            procs, flags = ROWS[name]
            if args.gpus and procs > args.gpus:
                continue
            times = {"interleaved": [], "dpp": []}
            for _ in range(args.rounds):
                for schedule, extra in (("interleaved", []), ("dpp", ["--use-dpp", "--dpp-policy", args.policy])):
                    progress.update(task, description=f"{name} {schedule}")
                    times[schedule].append(run(procs, flags + extra, args.iterations, args.gpus, args.pin))
                    progress.advance(task)
            a, b = statistics.median(times["interleaved"]), statistics.median(times["dpp"])
            results.append({"row": name, "processes": procs, "flags": flags, "interleaved_s": a, "dpp_s": b,
                            "change": b / a - 1, "rounds": times})

    table = Table(title=f"DPP ({args.policy}) vs megatron-core interleaved, {'GPU' if args.gpus else 'CPU gloo'}")
    for col in ("row", "procs", "interleaved ms/step", "DPP ms/step", "DPP vs interleaved", "rounds (int / dpp)"):
        table.add_column(col, justify="right" if col != "row" else "left")
    for r in results:
        rounds = " ".join(f"{x * 1e3:.0f}" for x in r["rounds"]["interleaved"]) + " / " + \
            " ".join(f"{x * 1e3:.0f}" for x in r["rounds"]["dpp"])
        table.add_row(r["row"], str(r["processes"]), f"{r['interleaved_s'] * 1e3:.1f}", f"{r['dpp_s'] * 1e3:.1f}",
                      f"{100 * r['change']:+.1f}%", rounds)
    Console().print(table)
    print("model: " + " ".join(MODEL))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
