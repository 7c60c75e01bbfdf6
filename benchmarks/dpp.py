"""MegaDPP against megatron-core's interleaved schedule in real training, same machine, same run.

    python benchmarks/dpp.py [--rounds 3] [--iterations 8] [--rows pp2-len1.0,...] [--json OUT]
    python benchmarks/dpp.py --gpus 2 [--rows pp2-len1.0,pp2-len1.0-jitter,...]   # one process per GPU (NCCL)

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
``--gpus``, each process takes a GPU and NCCL carries the pipeline, the model is larger
(``MODEL_GPU``, bf16) and the table adds each schedule's peak GPU memory (the allocator's
high-water mark, largest over ranks).

Rows ending in ``-jitter`` slow the last rank by turns: before each microbatch's forward it
runs matmuls for ``--slow-ms`` times a lognormal factor (``--slow-jitter 0.5``, drawn from the
seed, so both schedules see the same draws in call order). Every row also checks the losses:
the last rank's printed loss per iteration under both schedules, the largest difference
reported (the order in which microbatches' gradients accumulate differs, nothing else).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ["--hidden", "128", "--heads", "4", "--seq", "512", "--vocab", "512", "--micro-batch-size", "2",
         "--num-microbatches", "16", "--optimizer", "sgd"]
# on GPUs: wide enough that a microbatch's kernels, not their launches, take the time
MODEL_GPU = ["--hidden", "2048", "--heads", "16", "--seq", "2048", "--vocab", "32000", "--micro-batch-size", "1",
             "--num-microbatches", "16", "--optimizer", "sgd", "--bf16"]
# ms of matmuls before each microbatch on the jittered rank (about a microbatch's forward)
JITTER_MS = {"cpu": "20", "gpu": "3"}
ROWS = {  # name: (processes, flags)
    "pp2-len0.5": (2, ["--pp", "2", "--vpp", "2", "--layers", "8", "--seq-lognormal", "0.5"]),
    "pp2-len1.0": (2, ["--pp", "2", "--vpp", "2", "--layers", "8", "--seq-lognormal", "1.0"]),
    "pp2-fixed": (2, ["--pp", "2", "--vpp", "2", "--layers", "8"]),
    "pp4-len1.0": (4, ["--pp", "4", "--vpp", "2", "--layers", "8", "--seq-lognormal", "1.0"]),
    "pp2-len1.0-jitter": (2, ["--pp", "2", "--vpp", "2", "--layers", "8", "--seq-lognormal", "1.0", "--slow-rank", "1",
                              "--slow-mode", "before-microbatch", "--slow-jitter", "0.5"]),
    "pp2-fixed-jitter": (2, ["--pp", "2", "--vpp", "2", "--layers", "8", "--slow-rank", "1",
                             "--slow-mode", "before-microbatch", "--slow-jitter", "0.5"]),
    "pp4-len1.0-jitter": (4, ["--pp", "4", "--vpp", "2", "--layers", "8", "--seq-lognormal", "1.0", "--slow-rank", "3",
                              "--slow-mode", "before-microbatch", "--slow-jitter", "0.5"]),
}
DEFAULT_ROWS = {"cpu": "pp2-len0.5,pp2-len1.0,pp2-fixed,pp4-len1.0", "gpu": "pp2-len1.0,pp2-len1.0-jitter,pp2-fixed-jitter"}
LOSS = re.compile(r"^iteration (\d+) loss (\d+\.\d+)", re.M)


def _env(gpus: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run(procs: int, flags: list[str], iterations: int, gpus: int, pin: bool = False) -> dict:
    """One training run: seconds per step (median over iterations after the first, of the
    slowest rank), the printed losses, the peak GPU memory (largest over ranks; None on CPU)."""
    if "--slow-jitter" in flags:
        flags = [*flags, "--slow-ms", JITTER_MS["gpu" if gpus else "cpu"]]
    with tempfile.TemporaryDirectory() as tmp:
        timings = Path(tmp) / "timings.json"
        # --pin: exactly one core per process (taskset), so that a many-core host measures
        # what a pipeline of that many devices would, and nothing else shares those cores
        taskset = ["taskset", "-c", f"0-{procs - 1}"] if pin else []
        cmd = [*taskset, sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}",
               str(ROOT / "examples" / "train_gpt.py"), *(MODEL_GPU if gpus else MODEL), *flags, "--iterations", str(iterations),
               "--timings-json", str(timings)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(gpus), cwd=ROOT)
        if proc.returncode != 0:
            sys.exit(f"training failed: {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-3000:]}")
        record = json.loads(timings.read_text())
    slowest = [max(steps) for steps in zip(*record["step_s"])]
    peaks = [p for p in record.get("peak_bytes") or [] if p is not None]
    return {"step_s": statistics.median(slowest[1:]), "losses": [float(m[2]) for m in LOSS.finditer(proc.stdout)],
            "peak_bytes": max(peaks) if peaks else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--rows", default=None, help="comma-separated: " + ", ".join(ROWS)
                        + f" (default: CPU {DEFAULT_ROWS['cpu']}; GPU {DEFAULT_ROWS['gpu']})")
    parser.add_argument("--policy", default="adaptive", choices=["depth", "breadth", "adaptive"])
    parser.add_argument("--transport", default="auto", choices=["auto", "shm", "dist"],
                        help="DPP's transport (the example's --dpp-transport)")
    parser.add_argument("--gpus", type=int, default=0, help="processes per row = GPUs (NCCL); 0: CPU")
    parser.add_argument("--pin", action="store_true", help="CPU: pin each row's processes to cores 0..N-1")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    names = (args.rows or DEFAULT_ROWS["gpu" if args.gpus else "cpu"]).split(",")
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
            runs = {"interleaved": [], "dpp": []}
            for _ in range(args.rounds):
                for schedule, extra in (("interleaved", []), ("dpp", ["--use-dpp", "--dpp-policy", args.policy, "--dpp-transport", args.transport])):
                    progress.update(task, description=f"{name} {schedule}")
                    runs[schedule].append(run(procs, flags + extra, args.iterations, args.gpus, args.pin))
                    progress.advance(task)
            times = {k: [r["step_s"] for r in v] for k, v in runs.items()}
            a, b = statistics.median(times["interleaved"]), statistics.median(times["dpp"])
            # every run starts from the same weights and data: each DPP run against the
            # first interleaved one, iteration by iteration
            reference = runs["interleaved"][0]["losses"]
            loss_diff = max((abs(x - y) for r in runs["dpp"] + runs["interleaved"][1:]
                             for x, y in zip(reference, r["losses"])), default=float("nan"))
            peak = {k: max((r["peak_bytes"] or 0) for r in v) or None for k, v in runs.items()}
            results.append({"row": name, "processes": procs, "flags": flags, "interleaved_s": a, "dpp_s": b,
                            "change": b / a - 1, "rounds": times, "losses": {k: [r["losses"] for r in v] for k, v in runs.items()},
                            "max_loss_diff": loss_diff, "peak_bytes": peak})

    table = Table(title=f"DPP ({args.policy}, transport {args.transport}) vs megatron-core interleaved, "
                        f"{'GPU' if args.gpus else 'CPU gloo'}")
    columns = ["row", "procs", "interleaved ms/step", "DPP ms/step", "DPP vs interleaved", "rounds (int / dpp)",
               "max loss diff"] + (["peak GiB (int / dpp)"] if args.gpus else [])
    for col in columns:
        table.add_column(col, justify="right" if col != "row" else "left")
    for r in results:
        rounds = " ".join(f"{x * 1e3:.0f}" for x in r["rounds"]["interleaved"]) + " / " + \
            " ".join(f"{x * 1e3:.0f}" for x in r["rounds"]["dpp"])
        cells = [r["row"], str(r["processes"]), f"{r['interleaved_s'] * 1e3:.1f}", f"{r['dpp_s'] * 1e3:.1f}",
                 f"{100 * r['change']:+.1f}%", rounds, f"{r['max_loss_diff']:.4f}"]
        if args.gpus:
            cells.append(" / ".join(f"{(r['peak_bytes'][k] or 0) / 2**30:.2f}" for k in ("interleaved", "dpp")))
        table.add_row(*cells)
    Console().print(table)
    print("model: " + " ".join(MODEL_GPU if args.gpus else MODEL)
          + f"; -jitter rows: --slow-ms {JITTER_MS['gpu' if args.gpus else 'cpu']} on the last rank")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
