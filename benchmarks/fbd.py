"""MegaFBD: peak activation memory per worker, and what the recomputation costs.

    python benchmarks/fbd.py [--iterations 5] [--rows pp2,pp4,tp2] [--json OUT]        # CPU
    python benchmarks/fbd.py --device cuda --rows pp1                # one GPU: both workers on it
    python benchmarks/fbd.py --device cuda --rows pp1-split          # two GPUs: backward on GPU 0, forward on GPU 1

Each row trains the same model twice with ``examples/train_gpt.py`` under torchrun (one
thread per process, the example's weights from one seed): coupled (megatron-core's 1F1B) and
with ``--fbd`` (a forward and a backward worker per stage). CPU: gloo, ``--model small``
(default there). GPU: NCCL for the coupled run, and ``--model large`` (default there); rows
``pp1`` (the whole model on one GPU, coupled, against a forward and a backward worker sharing
that GPU) and ``pp1-split`` (the same model coupled on GPU 0, against ``--fbd-placement
split``: the backward worker on GPU 0, the forward worker on GPU 1; the row also trains the
model coupled as ``--pp 2`` on both GPUs, for the step time of the same two GPUs used the
usual way). A run of several processes needs a GPU each (the example puts a process on its
local rank's GPU, and NCCL refuses two ranks of one group on one GPU): with two GPUs, FBD
with ``--pp 2`` (four workers) does not fit. A probe around the example (this file, run by
torchrun with ``--probe``) measures, per rank:

- **peak**: the peak bytes allocated by the compute thread during one step's forward and
  backward passes (iteration 1), above what was allocated when they started: all
  microbatches' passes of a coupled stage (megatron-core's ``forward_backward_func``), the
  forward passes of a forward worker, the recomputations and backward passes of a backward
  worker; CPU: the profiler's allocation record (``mapp.scheduling.fbd.memory``), GPU: the
  CUDA allocator's peak;
- **times** (iterations 2 and later, unprofiled), per step: the forward passes (``forward_step``
  with autograd: coupled forward or FBD recomputation; without: FBD forward worker) and the
  backward passes (``torch.autograd.backward``); on a GPU each timed call ends with a
  synchronisation (so that the time is the kernels', not their launch).

Prints one table and the losses of both runs; all processes share the machine's cores, so
step times are the ratio to read, not the absolute figures.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "small": ["--layers", "8", "--hidden", "128", "--heads", "4", "--seq", "128", "--vocab", "256",
              "--micro-batch-size", "4", "--num-microbatches", "8"],
    "large": ["--layers", "8", "--hidden", "1024", "--heads", "16", "--seq", "1024", "--vocab", "256",
              "--micro-batch-size", "4", "--num-microbatches", "8"],
}
ROWS = {  # name: (parallel flags, coupled processes, FBD flags, FBD processes[, reference flags, processes])
    "pp2": (["--pp", "2"], 2, ["--fbd"], 4),
    "pp4": (["--pp", "4"], 4, ["--fbd"], 8),
    "tp2": (["--tp", "2", "--pp", "2"], 4, ["--fbd", "--fbd-forward-tp", "1"], 6),
    "pp1": (["--pp", "1"], 1, ["--fbd"], 2),
    "pp1-split": (["--pp", "1"], 1, ["--fbd", "--fbd-placement", "split"], 2, ["--pp", "2"], 2),
}
DEFAULT_ROWS = {"cpu": "pp2,pp4,tp2", "cuda": "pp1"}
LINE = re.compile(r"^iteration (\d+) loss (\d+\.\d+) step ([\d.]+) ms$", re.M)
MEMORY_ITERATION = 1


# -- the probe (runs inside every torchrun process) ------------------------------------------
def probe(out: Path, argv: list[str]) -> None:
    import torch

    sys.argv = [os.environ.get("XX_EXAMPLE", str(ROOT / "examples" / "train_gpt.py")), *argv]
    torch.manual_seed(1234)  # the example draws its CPU weights from the default generator
    spec = importlib.util.spec_from_file_location("train_gpt", sys.argv[0])
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    from megatron.core.pipeline_parallel import schedules

    from mapp.scheduling.fbd.backward import BackwardWorker
    from mapp.scheduling.fbd.forward import ForwardWorker
    from mapp.scheduling.fbd.memory import PeakMemory

    report = {"rank": int(os.environ["RANK"]), "role": None, "stage": None, "peak_bytes": None, "iterations": []}
    times: dict = {}

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)

    def timed(key_of, fn):
        @functools.wraps(fn)
        def inner(*a, **k):
            sync()
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                sync()
                key = key_of()
                times[key] = times.get(key, 0.0) + time.perf_counter() - t0

        return inner

    example.forward_step = timed(lambda: "forward" if torch.is_grad_enabled() else "forward_nograd",
                                 example.forward_step)
    torch.autograd.backward = timed(lambda: "backward", torch.autograd.backward)

    def passes(role_of, fn):
        @functools.wraps(fn)
        def inner(*a, **k):
            role, stage, device = role_of(*a)
            report["role"], report["stage"] = role, stage
            index = len(report["iterations"])
            times.clear()
            if index == MEMORY_ITERATION:
                with PeakMemory(device) as peak:
                    result = fn(*a, **k)
                report["peak_bytes"] = peak.bytes
            else:
                result = fn(*a, **k)
            report["iterations"].append(dict(times))
            return result

        return inner

    def coupled(*_):
        from megatron.core import parallel_state as ps

        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        return "coupled", ps.get_pipeline_model_parallel_rank(), device

    original_get = schedules.get_forward_backward_func
    schedules.get_forward_backward_func = lambda *a, **k: passes(coupled, original_get(*a, **k))
    ForwardWorker.forward_passes = passes(lambda self, *_: ("forward", self.me.stage, self.transfers.device),
                                          ForwardWorker.forward_passes)
    BackwardWorker.passes = passes(lambda self, *_: ("backward", self.me.stage, self.transfers.device),
                                   BackwardWorker.passes)
    example.main()
    (out / f"rank-{report['rank']}.json").write_text(json.dumps(report))


# -- the driver -------------------------------------------------------------------------------
def launch(out: Path, nproc: int, args: list[str], timeout: float, device: str = "cpu") -> dict:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if device == "cpu":  # the example picks the GPU whenever torch sees one
        env["CUDA_VISIBLE_DEVICES"] = ""
    # each rank's stdout in a file too: console lines of two ranks can interleave mid-line
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "--log-dir", str(out / "logs"), "--tee", "3", str(Path(__file__).resolve()), "--probe", str(out), *args]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)}: exit {proc.returncode}\n{(proc.stdout + proc.stderr)[-4000:]}")
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]
    stdouts = "".join(p.read_text() for p in sorted((out / "logs").rglob("stdout.log")))
    lines = [(int(m[1]), float(m[2]), float(m[3])) for m in LINE.finditer(stdouts)]
    return {"ranks": ranks, "lines": lines, "wall_s": time.perf_counter() - started}


def _per_step(rank: dict, key: str) -> float:
    values = [it.get(key, 0.0) for it in rank["iterations"][MEMORY_ITERATION + 1:]]
    return statistics.median(values) * 1e3 if values else float("nan")


def summarize(name: str, coupled: dict, fbd: dict) -> list[dict]:
    rows = []
    by_stage = {r["stage"]: r for r in coupled["ranks"] if r["role"] == "coupled"}
    for run, label in ((coupled, "coupled"), (fbd, "fbd")):
        seen = set()
        for r in sorted(run["ranks"], key=lambda r: (r["stage"], r["role"] != "coupled", r["role"] != "forward",
                                                       r["rank"])):
            key = (r["role"], r["stage"])
            if key in seen:  # TP ranks of one stage: the first one stands for them
                continue
            seen.add(key)
            base = by_stage.get(r["stage"])
            forward = _per_step(r, "forward_nograd" if r["role"] == "forward" else "forward")
            rows.append({
                "row": name, "run": label, "role": r["role"], "stage": r["stage"], "rank": r["rank"],
                "peak_mib": r["peak_bytes"] / 2**20,
                "peak_vs_coupled": r["peak_bytes"] / base["peak_bytes"] if base else float("nan"),
                "forward_ms": forward if r["role"] != "backward" else float("nan"),
                "recompute_ms": forward if r["role"] == "backward" else float("nan"),
                "backward_ms": _per_step(r, "backward") if r["role"] != "forward" else float("nan"),
                "coupled_forward_ms": _per_step(base, "forward") if base else float("nan"),
            })
    return rows


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--probe":
        return probe(Path(sys.argv[2]), sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rows", default=None,
                        help=f"comma-separated, of {', '.join(ROWS)} (default: cpu {DEFAULT_ROWS['cpu']}, "
                             f"cuda {DEFAULT_ROWS['cuda']})")
    parser.add_argument("--model", default=None, choices=list(MODELS),
                        help="model size (default: small on cpu, large on cuda)")
    parser.add_argument("--json", default=None, help="also write the rows here")
    parser.add_argument("--timeout", type=float, default=600)
    opts = parser.parse_args()
    rows = (opts.rows or DEFAULT_ROWS[opts.device]).split(",")
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {', '.join(unknown)} (choose from {', '.join(ROWS)})")
    model = MODELS[opts.model or ("small" if opts.device == "cpu" else "large")]
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"MegaFBD on {opts.device}: peak activation memory (one step's passes) and pass times "
                        "per step")
    for column in ("row", "run", "worker", "stage", "peak MiB", "vs coupled stage", "forward ms",
                   "recompute ms", "backward ms", "recompute / coupled forward"):
        table.add_column(column, justify="left" if column in ("row", "run", "worker") else "right")
    summary, everything = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in rows:
            parallel, n_coupled, fbd_flags, n_fbd, *reference = ROWS[name]
            common = [*model, *parallel, "--iterations", str(opts.iterations)]
            coupled = launch(Path(tmp, name, "coupled"), n_coupled, common, opts.timeout, opts.device)
            fbd = launch(Path(tmp, name, "fbd"), n_fbd, [*common, *fbd_flags], opts.timeout, opts.device)
            if reference:
                ref_flags, n_ref = reference
                ref = launch(Path(tmp, name, "reference"), n_ref, [*model, *ref_flags, "--iterations", str(opts.iterations)],
                             opts.timeout, opts.device)
                ref_step = statistics.median(s for i, _, s in ref["lines"] if i > MEMORY_ITERATION)
                ref_diff = max(abs(a[1] - b[1]) for a, b in zip(ref["lines"], fbd["lines"]))
                ref_peak = max(r["peak_bytes"] for r in ref["ranks"]) / 2**20
                summary.append(f"{name}: the same model coupled with {' '.join(ref_flags)} on {n_ref} processes: "
                               f"step {ref_step:.0f} ms, peak {ref_peak:.0f} MiB per stage (largest); its losses differ "
                               f"from the decoupled run's by at most {ref_diff:.4f} (each stage draws its own "
                               "initial weights, so not the same start)")
            rows = summarize(name, coupled, fbd)
            everything += rows
            for r in rows:
                ratio = r["recompute_ms"] / r["coupled_forward_ms"] if r["role"] == "backward" else float("nan")
                table.add_row(name, r["run"], r["role"], str(r["stage"]), f"{r['peak_mib']:.2f}",
                              "" if r["run"] == "coupled" else f"{r['peak_vs_coupled']:.2f}x",
                              _ms(r["forward_ms"]), _ms(r["recompute_ms"]), _ms(r["backward_ms"]),
                              "" if ratio != ratio else f"{ratio:.2f}x")
            steps = {label: statistics.median(s for i, _, s in run["lines"] if i > MEMORY_ITERATION)
                     for label, run in (("coupled", coupled), ("fbd", fbd))}
            worst = max(abs(a[1] - b[1]) for a, b in zip(coupled["lines"], fbd["lines"]))
            summary.append(f"{name}: step {steps['coupled']:.0f} ms coupled ({n_coupled} processes), "
                           f"{steps['fbd']:.0f} ms decoupled ({n_fbd}); printed losses differ by at most {worst:.4f} "
                           f"over {len(fbd['lines'])} steps")
            table.add_section()
    console.print(table)
    for line in summary:
        console.print(line)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"rows": everything, "summary": summary}, indent=1))


def _ms(value: float) -> str:
    return "" if value != value else f"{value:.1f}"


if __name__ == "__main__":
    main()
