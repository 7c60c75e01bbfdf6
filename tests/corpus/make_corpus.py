"""(Re)generate the real-trace corpus with known answers for the straggler detector.

    python tests/corpus/make_corpus.py [--out DIR] [--set NAME] [--only ID_SUBSTRING] [--gpu|--cpu]

``NAME`` is a key of ``SETS`` (``--help`` lists them; ``--list`` prints a set's case ids).

Every case is one real ``torchrun`` job of 4 processes (2 in ``--set gpu2``; CPU: gloo,
``OMP_NUM_THREADS=1``, ``CUDA_VISIBLE_DEVICES=""``, all processes on however many cores the
machine has, so the timings are noisy on purpose), traced either by torch.profiler (format
``kineto``) or by mapp's own capture hooks (format ``mapp-v1``). Nothing is written by hand: the
trace files are what the job wrote, except that profiler traces lose the event kinds mapp's
Kineto reader ignores (flow events, instant events, ``python_function``, and on CPU-only traces
``cuda_runtime`` / ``cuda_driver``), are re-serialised compactly and gzip-compressed
(``rank-<r>.json.gz``; the reader takes ``*.json.gz``). mapp v1 files are copied as the capture
wrote them.

Sets: ``--set small`` (the default) is the committed corpus, written to ``tests/corpus/cases``;
``--set full`` adds repeats with other seeds and more variants (default out:
``tests/corpus/cases-full``, not committed); ``--set gpu2`` is a set of 2-rank jobs (plain DDP,
megatron-core DP2, TP2, PP2) for a machine of 2 GPUs, 5 iterations of which 3 are recorded
(default out: ``tests/corpus/cases-gpu2``). Held out (for scoring, not tuning): ``--set vary`` /
``--set vary2`` (other values of the same jobs), ``--set pp4`` (4 pipeline stages, 4 ranks) and
``--set wide`` (8 ranks), ``--set sched`` (interleaved 1F1B, overlapped gradient reduction),
``--set prod`` / ``--set prodv`` / ``--set prodw`` (GPUs only: distributed optimizer, sequence parallelism),
``--set fresh`` / ``--set fresh2`` (every 4-rank layout again, a third and a fourth GPU model shape), see
``vary_set``, ``pp4_set``, ``wide_set``, ``sched_set``, ``prod_set``, ``prodv_set``, ``prodw_set``.

Device: ``--gpu`` runs a set with NCCL, one process per GPU, with GPU-sized models and extra GPU
kernels as the injected work (ids end in ``-gpu``, or ``-gpu2`` for ``--set gpu2``; default out
``tests/corpus/cases-gpu`` / ``cases-full-gpu`` / ``cases-gpu2``); ``--cpu`` runs it with gloo
on CPU. ``--set gpu2`` defaults to ``--gpu`` (it stops at once when fewer than 2 GPUs are
found); ``--set gpu2 --cpu`` is its smoke test on CPU: the same cases with the CPU model sizes
(ids without ``-gpu2``, default out ``tests/corpus/cases-gpu2-cpu``). ``--nproc`` defaults to
the set's world size and must equal it; on CPU a set of several world sizes (``fresh189``) runs
each job with its own.

``--only S`` (re)generates the cases whose id contains S and keeps the other entries of an
existing manifest. ``--keep-weak`` keeps a fault case whose injected effect measured under 10%
(of its rank's step time and of the injected part); by default it is left out. ``--list``
prints a set's ids, ``--table`` the README's table of a generated set.

The manifest (``manifest.json`` beside the cases) lists, per case: what was injected where,
what the detector is expected to say, what was measured at generation, and the command.
See ``tests/corpus/README.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TRAIN_GPT = "examples/train_gpt.py"
DDP_JOB = "tests/corpus/ddp_job.py"
TP_JOB = "tests/corpus/tp_job.py"

# -----------------------------------------------------------------------------------------
# the cases

# megatron-core model sizes: mapp capture (2 layers per pipeline stage, hidden 64, 4
# microbatches), torch.profiler (1 layer per stage, 2 microbatches, SGD without gradient clipping: a profiler records ~1,000 CPU ops per
# microbatch of this model whatever its width, and Adam + clipping add ~1,100 per step; hidden
# 512 so that matmuls, not per-op overhead, are most of the compute)
GPT_MAPP = ["--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "256",
            "--micro-batch-size", "2", "--num-microbatches", "4"]
GPT_PROF = ["--layers", "2", "--hidden", "512", "--heads", "8", "--seq", "32", "--vocab", "256",
            "--micro-batch-size", "2", "--num-microbatches", "2", "--optimizer", "sgd", "--clip-grad", "0"]
# on GPUs: a model whose GEMMs, not elementwise kernels, are most of a layer's time on an
# H100/H200 (at hidden 1024 and seq 1024 the unfused attention softmax and copies dominated)
GPT_GPU = ["--layers", "8", "--hidden", "4096", "--heads", "32", "--seq", "2048", "--vocab", "32000",
           "--micro-batch-size", "1", "--num-microbatches", "4", "--bf16"]
MAPP_WINDOW = ["--iterations", "6", "--trace", "--trace-interval", "1", "--trace-start", "2",
               "--continuous-trace-iterations", "4"]
PROF_WINDOW = ["--iterations", "6", "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "4"]
JOB_WINDOW = ["--steps", "7", "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "5"]
DDP_ARGS = ["--layers", "4", "--width", "256", "--batch", "2048"]
TP_ARGS = ["--tp", "2", "--layers", "4", "--width", "256", "--ffn", "1024", "--batch", "512"]
DDP_GPU = ["--layers", "8", "--width", "4096", "--batch", "4096"]
TP_GPU = ["--tp", "2", "--layers", "8", "--width", "4096", "--ffn", "16384", "--batch", "2048"]
# the 2-rank set (--set gpu2): 5 iterations, 3 of them traced (2-4), to keep a GPU run short;
# the detector's per-iteration rules want at least 3
MAPP_WINDOW_SHORT = ["--iterations", "5", "--trace", "--trace-interval", "1", "--trace-start", "2",
                     "--continuous-trace-iterations", "3"]
PROF_WINDOW_SHORT = ["--iterations", "5", "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "3"]
JOB_WINDOW_SHORT = ["--steps", "5", "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "3"]
# --set gpu2 on GPUs: host sleep per microbatch in the GPT's data iterator. A GPU microbatch of
# GPT_GPU takes ~50-120 ms and the rank's CPU waits for it only at the next batch's host->device
# copy, so a sleep shorter than that hides behind the GPU's work except before the first
# microbatch of a step (after the step's synchronize): 100 ms shows at least once per step.
GPU2_HOSTSLEEP_MS = 100.0

LAYOUTS = {"tp2dp2": {"tp": 2, "pp": 1, "dp": 2}, "pp2dp2": {"tp": 1, "pp": 2, "dp": 2},
           "tp2pp2": {"tp": 2, "pp": 2, "dp": 1}, "dp4": {"tp": 1, "pp": 1, "dp": 4},
           "dp2": {"tp": 1, "pp": 1, "dp": 2}, "tp2": {"tp": 2, "pp": 1, "dp": 1},
           "pp2": {"tp": 1, "pp": 2, "dp": 1}, "pp4": {"tp": 1, "pp": 4, "dp": 1},
           "pp4dp2": {"tp": 1, "pp": 4, "dp": 2}, "pp2dp4": {"tp": 1, "pp": 2, "dp": 4},
           "tp2pp2dp2": {"tp": 2, "pp": 2, "dp": 2}, "dp8": {"tp": 1, "pp": 1, "dp": 8},
           "pp2dp32": {"tp": 1, "pp": 2, "dp": 32},
           "pp4dp4": {"tp": 1, "pp": 4, "dp": 4}, "pp2dp8": {"tp": 1, "pp": 2, "dp": 8},
           "tp2pp2dp4": {"tp": 2, "pp": 2, "dp": 4}, "dp16": {"tp": 1, "pp": 1, "dp": 16},
           "pp2dp16": {"tp": 1, "pp": 2, "dp": 16}, "pp4dp8": {"tp": 1, "pp": 4, "dp": 8},
           "tp2pp2dp8": {"tp": 2, "pp": 2, "dp": 8}, "dp32": {"tp": 1, "pp": 1, "dp": 32},
           # worlds of 3 and 6 (``fresh189``)
           "dp3": {"tp": 1, "pp": 1, "dp": 3}, "pp3": {"tp": 1, "pp": 3, "dp": 1},
           "tp2dp3": {"tp": 2, "pp": 1, "dp": 3}, "pp3dp2": {"tp": 1, "pp": 3, "dp": 2},
           "pp2dp3": {"tp": 1, "pp": 2, "dp": 3}, "dp6": {"tp": 1, "pp": 1, "dp": 6}}
GPT_LAYOUT_ARGS = {"tp2dp2": ["--tp", "2", "--pp", "1"], "pp2dp2": ["--tp", "1", "--pp", "2"],
                   "tp2pp2": ["--tp", "2", "--pp", "2"], "dp4": ["--tp", "1", "--pp", "1"],
                   "dp2": ["--tp", "1", "--pp", "1"], "tp2": ["--tp", "2", "--pp", "1"],
                   "pp2": ["--tp", "1", "--pp", "2"], "pp4": ["--tp", "1", "--pp", "4"],
                   "pp4dp2": ["--tp", "1", "--pp", "4"], "pp2dp4": ["--tp", "1", "--pp", "2"],
                   "tp2pp2dp2": ["--tp", "2", "--pp", "2"], "dp8": ["--tp", "1", "--pp", "1"],
                   "pp2dp32": ["--tp", "1", "--pp", "2"],
                   "pp4dp4": ["--tp", "1", "--pp", "4"], "pp2dp8": ["--tp", "1", "--pp", "2"],
                   "tp2pp2dp4": ["--tp", "2", "--pp", "2"], "dp16": ["--tp", "1", "--pp", "1"],
                   "pp2dp16": ["--tp", "1", "--pp", "2"], "pp4dp8": ["--tp", "1", "--pp", "4"],
                   "tp2pp2dp8": ["--tp", "2", "--pp", "2"], "dp32": ["--tp", "1", "--pp", "1"],
                   "dp3": ["--tp", "1", "--pp", "1"], "pp3": ["--tp", "1", "--pp", "3"],
                   "tp2dp3": ["--tp", "2", "--pp", "1"], "pp3dp2": ["--tp", "1", "--pp", "3"],
                   "pp2dp3": ["--tp", "1", "--pp", "2"], "dp6": ["--tp", "1", "--pp", "1"]}


def world_of(layout: dict) -> int:
    return layout["tp"] * layout["pp"] * layout["dp"]


@dataclass
class Case:
    id: str
    job: str                      # "ddp", "tp", "gpt"
    fmt: str                      # "kineto" or "mapp-v1"
    layout: dict
    cls: str                      # "healthy", "fault", "imbalance"
    args: list[str]               # job arguments (without trace dir / timings)
    injected: list = field(default_factory=list)
    expect: dict = field(default_factory=lambda: {"suspect": None})
    part: str | None = None       # what the injection slows: "layers", "matmuls", "link", "stages", "microbatches", "gpu"
    baseline: str | None = None   # id of the healthy case of the same job/layout/format (for readers;
    # step times of separate runs are not compared: other work on the shared cores varies)
    gpu_args: list[str] | None = None  # replaces the model-size arguments on GPUs
    gpu_injected: list | None = None   # ``injected`` on GPUs, where it differs
    job_window: list[str] | None = None  # ddp/tp jobs: steps and profiler schedule (default JOB_WINDOW)

    @property
    def slow_rank(self) -> int | None:
        for inj in self.injected:
            if "rank" in inj:
                return inj["rank"]
        return None


def _slow(rank, kinds):
    return {"suspect": {"rank": rank, "kinds": kinds}}


def _link(src, dst):
    return {"suspect": {"rank": src, "peer": dst, "kinds": ["slow_link"]}}


def ddp_cases(seed: int = 1234, tag: str = "") -> list[Case]:
    base = "ddp4-prof-healthy" + tag
    s = ["--seed", str(seed)]
    lay = LAYOUTS["dp4"]
    return [
        Case(base, "ddp", "kineto", lay, "healthy", [*DDP_ARGS, *s], gpu_args=DDP_GPU),
        Case("ddp4-prof-fwd1.5x-r2" + tag, "ddp", "kineto", lay, "fault",
             [*DDP_ARGS, *s, "--slow-rank", "2", "--slow-factor", "1.5"],
             [{"how": "extra matmuls inside forward (1.5x the forward's matmuls: duplicate F.linear of "
                      "blocks 1 and 3, same shapes, results discarded)", "rank": 2, "factor": 1.5}],
             _slow(2, ["slow_compute"]), "matmuls", base, DDP_GPU),
        Case("ddp4-prof-datasleep20ms-r1" + tag, "ddp", "kineto", lay, "fault",
             [*DDP_ARGS, *s, "--slow-rank", "1", "--slow-mode", "data-sleep", "--slow-ms", "20"],
             [{"how": "host sleep in the data path (time.sleep(20 ms) in the dataset before each batch, "
                      "inside DataLoader.__next__)", "rank": 1, "sleep_ms": 20}],
             _slow(1, ["slow_host"]), "host", base, DDP_GPU),
        Case("ddp4-prof-fwd2.5x-r3" + tag, "ddp", "kineto", lay, "fault",
             [*DDP_ARGS, *s, "--slow-rank", "3", "--slow-factor", "2.5"],
             [{"how": "extra matmuls inside forward (2.5x the forward's matmuls: 6 duplicate F.linear, "
                      "same shapes, results discarded)", "rank": 3, "factor": 2.5}],
             _slow(3, ["slow_compute"]), "matmuls", base, DDP_GPU),
    ]


def fsdp_cases(seed: int = 1234, tag: str = "", world: int = 4, gpu_tag: str = "") -> list[Case]:
    """The plain DDP job's model and faults under FSDP2 (``--fsdp``: every block's parameters
    sharded over the world group, all-gathered before use, gradients reduce-scattered)."""
    base = f"fsdp{world}-prof-healthy" + tag
    s = ["--seed", str(seed), "--fsdp"]
    lay = LAYOUTS[f"dp{world}"]
    slow, sleepy = (2, 1) if world == 4 else (1, 0)
    w = JOB_WINDOW_SHORT if world == 2 else None
    gpu = [*DDP_GPU, "--fsdp"]
    return [
        Case(base, "ddp", "kineto", lay, "healthy", [*DDP_ARGS, *s], gpu_args=gpu, job_window=w),
        Case(f"fsdp{world}-prof-fwd1.5x-r{slow}" + tag, "ddp", "kineto", lay, "fault",
             [*DDP_ARGS, *s, "--slow-rank", str(slow), "--slow-factor", "1.5"],
             [{"how": "extra matmuls inside forward (1.5x the forward's matmuls: duplicate F.linear of every "
                      "other block's own weights on its input, inside the block's forward, same shapes, results "
                      "discarded)", "rank": slow, "factor": 1.5}],
             _slow(slow, ["slow_compute"]), "matmuls", base, gpu, job_window=w),
        Case(f"fsdp{world}-prof-datasleep20ms-r{sleepy}" + tag, "ddp", "kineto", lay, "fault",
             [*DDP_ARGS, *s, "--slow-rank", str(sleepy), "--slow-mode", "data-sleep", "--slow-ms", "20"],
             [{"how": "host sleep in the data path (time.sleep(20 ms) in the dataset before each batch, "
                      "inside DataLoader.__next__)", "rank": sleepy, "sleep_ms": 20}],
             _slow(sleepy, ["slow_host"]), "host", base, gpu, job_window=w),
    ]


def tp_cases(seed: int = 1234, tag: str = "") -> list[Case]:
    base = "tp2dp2-plain-prof-healthy" + tag
    s = ["--seed", str(seed)]
    lay = LAYOUTS["tp2dp2"]
    out = [Case(base, "tp", "kineto", lay, "healthy", [*TP_ARGS, *s], gpu_args=TP_GPU)]
    for rank, factor in ((1, 1.6), (2, 2.5)):
        out.append(Case(
            f"tp2dp2-plain-prof-{factor}x-r{rank}" + tag, "tp", "kineto", lay, "fault",
            [*TP_ARGS, *s, "--slow-rank", str(rank), "--slow-factor", str(factor)],
            [{"how": f"extra matmuls inside forward ({factor}x the blocks' forward+backward matmul count, "
                     "same shapes, results discarded)", "rank": rank, "factor": factor}],
            _slow(rank, ["slow_compute"]), "matmuls", base, TP_GPU))
    return out


def gpt_case(layout: str, fmt: str, variant: str, seed: int = 1234, tag: str = "", rank: int | None = None,
             factor: float = 1.5, ms: float = 20.0, link: tuple[int, int] | None = None,
             link_bytes: int = 4_000_000, last_layers: int = 3, sigma: float = 0.8,
             windows: tuple[list[str], list[str]] | None = None, gpu_ms: float | None = None,
             numbered: bool = True, duty: float = 0.3, work: str | None = None) -> Case:
    """One megatron-core case: ``variant`` is healthy, layer, beforemb, hostsleep, link, laststage,
    seqlognorm, gpuhog (GPUs only: another process shares the rank's GPU ``duty`` of the time) or
    cpuhog (CPUs only: another process spins on the rank's core ``duty`` of the time).

    ``work``: how a layer fault slows its layers on CPUs, ``sleep`` or ``matmul`` (default: sleep
    under mapp's capture, matmuls under the profiler); the id says ``-matmul`` where it is not
    the default.

    ``windows``: (mapp capture, profiler) iteration windows, default (MAPP_WINDOW, PROF_WINDOW).
    ``gpu_ms``: the before-microbatch / host-sleep ms on GPUs where it differs from ``ms``.
    ``numbered=False``: ids without the numbers that differ between CPU and GPU runs (the
    sleep's ms, the last stage's layer counts, the lognormal's sigma): ``hostsleep``, not
    ``hostsleep20ms``; the manifest's ``injected`` has the numbers."""
    short = "mapp" if fmt == "mapp-v1" else "prof"
    model = list(GPT_MAPP if fmt == "mapp-v1" else GPT_PROF)
    # two transformer layers per pipeline stage under mapp's capture, one under the profiler
    per_stage = 2 if fmt == "mapp-v1" else 1
    model[model.index("--layers") + 1] = str(per_stage * LAYOUTS[layout]["pp"])
    mapp_window, prof_window = windows or (MAPP_WINDOW, PROF_WINDOW)
    window = mapp_window if fmt == "mapp-v1" else prof_window
    args = [*GPT_LAYOUT_ARGS[layout], *model, *window, "--seed", str(seed)]
    base = f"gpt-{layout}-{short}-healthy" + tag
    lay = LAYOUTS[layout]
    gpu = [*GPT_LAYOUT_ARGS[layout], *GPT_GPU, *window, "--seed", str(seed)]
    gms = ms if gpu_ms is None else gpu_ms
    if variant == "healthy":
        return Case(base, "gpt", fmt, lay, "healthy", args, gpu_args=gpu)
    if variant == "layer":
        default = "sleep" if fmt == "mapp-v1" else "matmul"
        work = work or default
        extra = ["--slow-rank", str(rank), "--slow-factor", str(factor), "--slow-work", work]
        head = "extra work inside forward/backward of each transformer layer's attention and MLP: "
        how = (head + ("sleep for" if work == "sleep" else "real matmuls of the layer's activations for")
               + f" ({factor}-1)x each call's measured time")
        gpu_how = (head + "real (hidden x hidden) matmuls of the layer's activations, "
                   f"({factor}-1)x the module's FLOPs")
        mark = "" if work == default else f"-{work}"
        return Case(f"gpt-{layout}-{short}-layer{factor}x{mark}-r{rank}" + tag, "gpt", fmt, lay, "fault",
                    args + extra, [{"how": how, "rank": rank, "factor": factor}],
                    _slow(rank, ["slow_compute"]), "layers" if fmt == "mapp-v1" else "matmuls", base,
                    gpu + ["--slow-rank", str(rank), "--slow-factor", str(factor)],
                    [{"how": gpu_how, "rank": rank, "factor": factor}])
    if variant == "beforemb":
        def extra(m):
            return ["--slow-rank", str(rank), "--slow-mode", "before-microbatch", "--slow-ms", f"{m:g}"]

        def how(m):
            return [{"how": f"extra real work before each microbatch's forward (matmuls for {m:g} ms, "
                            "in the forward step function, outside the model)", "rank": rank, "ms": m}]

        kinds = ["slow_compute", "slow_host"] if fmt == "mapp-v1" else ["slow_compute"]
        name = f"beforemb{ms:g}ms" if numbered else "beforemb"
        return Case(f"gpt-{layout}-{short}-{name}-r{rank}" + tag, "gpt", fmt, lay, "fault", args + extra(ms),
                    how(ms), _slow(rank, kinds), "host" if fmt == "mapp-v1" else "matmuls", base, gpu + extra(gms),
                    how(gms) if gms != ms else None)
    if variant == "hostsleep":
        def extra(m):
            return ["--slow-rank", str(rank), "--slow-mode", "host-sleep", "--slow-ms", f"{m:g}"]

        def how(m):
            return [{"how": f"host sleep in the data path (time.sleep({m:g} ms) in the data iterator before "
                            "each microbatch)", "rank": rank, "sleep_ms": m}]

        name = f"hostsleep{ms:g}ms" if numbered else "hostsleep"
        return Case(f"gpt-{layout}-{short}-{name}-r{rank}" + tag, "gpt", fmt, lay, "fault", args + extra(ms),
                    how(ms), _slow(rank, ["slow_host"]), "host", base, gpu + extra(gms),
                    how(gms) if gms != ms else None)
    if variant == "link":
        src, dst = link
        gpu_bytes = link_bytes * 128   # NVLink moves 4 MB in ~10 us: 512 MB to matter next to 16 MB activations

        def how(n):
            return [{"how": "heavier traffic on one pipeline link: every p2p exchange between the two ranks also "
                            f"moves an extra {n}-byte tensor (both directions, own process group, inside "
                            "P2PCommunicator._communicate, not in the recorded bytes)",
                     "ranks": [src, dst], "extra_bytes": n}]

        extra = ["--link-slow", f"{src},{dst}", "--link-extra-bytes", str(link_bytes)]
        return Case(f"gpt-{layout}-{short}-link{src}-{dst}" + tag, "gpt", fmt, lay, "fault", args + extra,
                    how(link_bytes), _link(src, dst), "link", base,
                    gpu + ["--link-slow", f"{src},{dst}", "--link-extra-bytes", str(gpu_bytes)], how(gpu_bytes))
    if variant == "gpuhog":
        extra = ["--slow-rank", str(rank), "--slow-mode", "gpu-hog", "--slow-duty", f"{duty:g}"]
        how = [{"how": f"another process on the rank's GPU runs bf16 matmuls for {duty:g} of every 20 ms (the GPU "
                       "time-slices between the two contexts: every kernel of the rank may wait)",
                "rank": rank, "duty": duty}]
        return Case(f"gpt-{layout}-{short}-gpuhog{duty:g}-r{rank}" + tag, "gpt", fmt, lay, "fault", args + extra,
                    how, _slow(rank, ["slow_compute"]), "gpu", base, gpu + extra)
    if variant == "cpuhog":
        extra = ["--slow-rank", str(rank), "--slow-mode", "cpu-hog", "--slow-duty", f"{duty:g}"]
        how = [{"how": f"the rank's main thread pinned to one core, and another process pinned there spinning for {duty:g} of "
                       "every 20 ms (the kernel shares the core between the two: every op of the rank may run at "
                       "half speed)", "rank": rank, "duty": duty}]
        # the whole process slows: its layers (compute) and its host work alike
        return Case(f"gpt-{layout}-{short}-cpuhog{duty:g}-r{rank}" + tag, "gpt", fmt, lay, "fault", args + extra,
                    how, _slow(rank, ["slow_compute", "slow_host"]), "host", base, gpu + extra)
    if variant == "laststage":
        pp = lay["pp"]
        n = last_layers + pp - 1   # every other stage keeps one layer
        args[args.index("--layers") + 1] = str(n)
        extra = ["--last-stage-layers", str(last_layers)]
        name = f"laststage{last_layers}of{n}" if numbered else "laststage"
        # on GPUs: GPT_GPU's 8 layers, 6 on the last stage and 2 on the first of 2 stages; of 4
        # stages, 5 on the last and 1 on each other
        gpu_last = "6" if pp == 2 else str(8 - (pp - 1))
        return Case(f"gpt-{layout}-{short}-{name}" + tag, "gpt", fmt, lay, "imbalance",
                    args + extra, [], {"suspect": None}, "stages", base, gpu + ["--last-stage-layers", gpu_last])
    if variant == "seqlognorm":
        extra = ["--seq-lognormal", f"{sigma:g}", "--seq", "256", "--hidden", "256"]
        name = f"seqlognorm{sigma:g}" if numbered else "seqlognorm"
        return Case(f"gpt-{layout}-{short}-{name}" + tag, "gpt", fmt, lay, "imbalance", args + extra,
                    [], {"suspect": None}, "microbatches", None, gpu + ["--seq-lognormal", f"{sigma:g}"])
    raise ValueError(variant)


def small_set(seed: int = 1234, tag: str = "") -> list[Case]:
    g = lambda *a, **k: gpt_case(*a, seed=seed, tag=tag, **k)  # noqa: E731
    return [
        *ddp_cases(seed, tag),
        *tp_cases(seed, tag),
        # C: megatron-core, mapp capture
        g("tp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=1),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "layer", rank=2),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "layer", rank=3),
        g("tp2dp2", "mapp-v1", "beforemb", rank=2),
        g("pp2dp2", "mapp-v1", "beforemb", rank=1),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=3),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=0),
        g("pp2dp2", "mapp-v1", "link", link=(1, 3)),
        g("tp2pp2", "mapp-v1", "link", link=(0, 2)),
        # D: megatron-core, torch.profiler
        g("tp2dp2", "kineto", "healthy"),
        g("tp2dp2", "kineto", "layer", rank=1),
        g("pp2dp2", "kineto", "healthy"),
        g("pp2dp2", "kineto", "layer", rank=2),
        # E: imbalance without a fault
        g("pp2dp2", "mapp-v1", "laststage"),
        g("pp2dp2", "kineto", "laststage", last_layers=2),
        g("tp2dp2", "mapp-v1", "seqlognorm"),
        g("pp2dp2", "mapp-v1", "seqlognorm"),
    ]


def full_set() -> list[Case]:
    cases = small_set() + fsdp_cases()
    g = gpt_case
    cases += [
        g("dp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "layer", rank=2),
        g("dp4", "mapp-v1", "seqlognorm"),
        g("tp2dp2", "mapp-v1", "layer", rank=0, factor=1.2),
        g("tp2dp2", "mapp-v1", "layer", rank=0, factor=2.0),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.2),
        g("tp2pp2", "mapp-v1", "beforemb", rank=1),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=2),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=5),
        g("pp2dp2", "mapp-v1", "link", link=(0, 2), link_bytes=1_000_000),
        g("tp2dp2", "kineto", "beforemb", rank=2),
        g("tp2dp2", "kineto", "hostsleep", rank=0),
        g("pp2dp2", "kineto", "link", link=(1, 3)),
        g("tp2pp2", "kineto", "healthy"),
        g("tp2pp2", "kineto", "layer", rank=3),
        g("tp2dp2", "kineto", "seqlognorm"),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.5),
    ]
    for seed in (1, 2):
        cases += small_set(seed=seed, tag=f"-s{seed}")
    return cases


def ddp2_cases(seed: int = 1234) -> list[Case]:
    """Plain DDP over 2 ranks (the gpu2 set): healthy, extra forward matmuls on rank 1, data sleep on rank 0."""
    base = "ddp2-prof-healthy"
    s = ["--seed", str(seed)]
    lay = LAYOUTS["dp2"]
    w = JOB_WINDOW_SHORT
    return [
        Case(base, "ddp", "kineto", lay, "healthy", [*DDP_ARGS, *s], gpu_args=DDP_GPU, job_window=w),
        Case("ddp2-prof-fwd1.5x-r1", "ddp", "kineto", lay, "fault",
             [*DDP_ARGS, *s, "--slow-rank", "1", "--slow-factor", "1.5"],
             [{"how": "extra matmuls inside forward (1.5x the forward's matmuls: 0.5 x --layers duplicate F.linear "
                      "of every other block's own weights on its input, same shapes, results discarded)",
               "rank": 1, "factor": 1.5}],
             _slow(1, ["slow_compute"]), "matmuls", base, DDP_GPU, job_window=w),
        Case("ddp2-prof-datasleep-r0", "ddp", "kineto", lay, "fault",
             [*DDP_ARGS, *s, "--slow-rank", "0", "--slow-mode", "data-sleep", "--slow-ms", "20"],
             [{"how": "host sleep in the data path (time.sleep(20 ms) in the dataset before each batch, "
                      "inside DataLoader.__next__)", "rank": 0, "sleep_ms": 20}],
             _slow(0, ["slow_host"]), "host", base, DDP_GPU, job_window=w),
    ]


def gpu2_set(seed: int = 1234) -> list[Case]:
    """The 2-rank set, made for a machine of 2 GPUs (``--set gpu2``; runs on CPU too, with ``--cpu``).

    Plain DDP under the profiler; megatron-core DP2, TP2, PP2 under mapp's capture (healthy, a slow
    layer, before-microbatch work or a host sleep, a heavy last stage, lognormal sequence lengths)
    and TP2, PP2, DP2 under the profiler (healthy, a slow layer, work before each microbatch). 5 iterations, 3 recorded. No link case: a 2-rank job has one
    link, so a slow link has no other link to be slower than."""
    g = lambda *a, **k: gpt_case(*a, seed=seed, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT),  # noqa: E731
                                 numbered=False, **k)
    return [
        *ddp2_cases(seed),
        *fsdp_cases(seed, world=2),
        # megatron-core, mapp capture
        g("dp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "layer", rank=1),
        g("dp2", "mapp-v1", "hostsleep", rank=0, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("tp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "layer", rank=1),
        g("tp2", "mapp-v1", "beforemb", rank=0),
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "layer", rank=0),
        # imbalance without a fault
        g("pp2", "mapp-v1", "laststage"),
        g("dp2", "mapp-v1", "seqlognorm"),
        # megatron-core, torch.profiler
        g("tp2", "kineto", "healthy"),
        g("tp2", "kineto", "layer", rank=1),
        g("pp2", "kineto", "healthy"),
        # the victim that looks slow (issue 13, class 2): rank 1 runs extra GPU work before each
        # microbatch; its TP peer waits for it inside every all-reduce kernel
        g("tp2", "kineto", "beforemb", rank=1),
        g("dp2", "kineto", "healthy"),
        g("dp2", "kineto", "layer", rank=1),
        g("pp2", "kineto", "layer", rank=1),
    ]


# --set vary on GPUs: another model shape than GPT_GPU (other GEMM shapes, a longer sequence,
# a larger vocabulary), so that a held-out run differs from the tuned ones in its kernels too
GPT_GPU_VARY = ["--layers", "8", "--hidden", "3072", "--heads", "24", "--seq", "3072", "--vocab", "50304",
                "--micro-batch-size", "1", "--num-microbatches", "4", "--bf16"]
VARY_SEED = 7


def _plain(job: str, layout: str, seed: int, rank: int | None = None, factor: float | None = None,
           sleep_ms: float | None = None, tag: str = "-v", step_sleep_ms: float | None = None) -> Case:
    """A plain DDP / FSDP2 (``job`` ddp4, fsdp4, ddp2, fsdp2) or DP x TP (tp2dp2) profiler job of ``vary_set``:
    healthy, ``factor`` x the forward's matmuls on ``rank``, a ``sleep_ms`` data-path sleep or a
    ``step_sleep_ms`` sleep in the training loop before each step (DDP / FSDP2 only)."""
    script = "tp" if job.startswith("tp") else "ddp"   # (tp2dp2, tp2dp3: the DP x TP job)
    base_args = [*(TP_ARGS if script == "tp" else DDP_ARGS), "--seed", str(seed)]
    gpu = list(TP_GPU if script == "tp" else DDP_GPU)   # each case its own list
    if job.startswith("fsdp"):
        base_args.append("--fsdp")
        gpu = [*DDP_GPU, "--fsdp"]
    stem = f"{layout}-plain" if script == "tp" else job
    lay = LAYOUTS[layout]
    w = JOB_WINDOW_SHORT if world_of(lay) == 2 else None
    base = f"{stem}-prof-healthy{tag}"
    if factor is not None:
        return Case(f"{stem}-prof-fwd{factor:g}x-r{rank}{tag}", script, "kineto", lay, "fault",
                    [*base_args, "--slow-rank", str(rank), "--slow-factor", str(factor)],
                    [{"how": f"extra matmuls inside forward ({factor:g}x the forward's matmuls, same shapes, "
                             "results discarded)", "rank": rank, "factor": factor}],
                    _slow(rank, ["slow_compute"]), "matmuls", base, gpu, job_window=w)
    if sleep_ms is not None:
        return Case(f"{stem}-prof-datasleep{sleep_ms:g}ms-r{rank}{tag}", script, "kineto", lay, "fault",
                    [*base_args, "--slow-rank", str(rank), "--slow-mode", "data-sleep", "--slow-ms", f"{sleep_ms:g}"],
                    [{"how": f"host sleep in the data path (time.sleep({sleep_ms:g} ms) in the dataset before each "
                             "batch, inside DataLoader.__next__)", "rank": rank, "sleep_ms": sleep_ms}],
                    _slow(rank, ["slow_host"]), "host", base, gpu, job_window=w)
    if step_sleep_ms is not None:
        assert script == "ddp", job
        return Case(f"{stem}-prof-stepsleep{step_sleep_ms:g}ms-r{rank}{tag}", script, "kineto", lay, "fault",
                    [*base_args, "--slow-rank", str(rank), "--slow-mode", "step-sleep", "--slow-ms", f"{step_sleep_ms:g}"],
                    [{"how": f"host sleep in the training loop (time.sleep({step_sleep_ms:g} ms) at the start of each "
                             "step, before the batch is fetched, outside the data loader)", "rank": rank,
                      "sleep_ms": step_sleep_ms}],
                    _slow(rank, ["slow_host"]), "host", base, gpu, job_window=w)
    return Case(base, script, "kineto", lay, "healthy", base_args, gpu_args=gpu, job_window=w)


def _vary_gpt(layout: str, fmt: str, variant: str, *, seed: int, **k) -> Case:
    """A megatron-core case of the variations: ``gpt_case`` with ids ending in ``-v`` and, on
    GPUs, GPT_GPU_VARY's model shape in place of GPT_GPU's."""
    return _reshaped(gpt_case(layout, fmt, variant, seed=seed, tag="-v", **k), layout, GPT_GPU_VARY)


def _reshaped(case: Case, layout: str, shape: list[str]) -> Case:
    """``case`` (of ``layout``) with ``shape`` in place of GPT_GPU's model shape on GPUs."""
    n = len(GPT_LAYOUT_ARGS[layout])   # gpu_args: layout, GPT_GPU, window and the variant's own
    assert case.gpu_args[n:n + len(GPT_GPU)] == GPT_GPU, case.id
    case.gpu_args[n:n + len(GPT_GPU)] = shape
    return case


def _held_out_gpt(seed: int, tag: str, shape: list[str], windows: tuple[list[str], list[str]] | None = None):
    """The megatron-core case maker of a held-out set (``--set fresh`` ...): ``gpt_case`` with the
    set's seed, id tag and iteration windows, and on GPUs the set's model shape."""
    def g(layout: str, fmt: str, variant: str, **k) -> Case:
        return _reshaped(gpt_case(layout, fmt, variant, seed=seed, tag=tag, windows=windows, **k), layout, shape)

    return g


# ``--profile-record`` of the jobs (tests/corpus/_job.py, examples/train_gpt.py): how a source says it
PROFILE_RECORD_TEXT = {"shapes": "", "default": " with its defaults (record_shapes=False)",
                       "tutorial": " as PyTorch's tutorial calls it (record_shapes, profile_memory, with_stack)"}


def _recorded(case: Case, how: str) -> Case:
    """A profiler case recorded with ``--profile-record how`` (its id's tag gains ``-nosh`` or ``-stk``)."""
    assert case.fmt == "kineto" and how in PROFILE_RECORD_TEXT, (case.id, how)
    mark = {"default": "-nosh", "tutorial": "-stk"}[how]
    case.id = case.id.replace("-prof-", f"-prof{mark}-", 1)
    case.args += ["--profile-record", how]
    if case.job == "gpt":   # the other jobs' GPU arguments are their model size, then ``args``
        case.gpu_args += ["--profile-record", how]
    return case


def _jittering(case: Case, sigma: float = 0.7) -> Case:
    """A before-microbatch case whose load varies per microbatch (``--slow-jitter``)."""
    case.id = case.id.replace("ms-r", "ms-jitter-r", 1)
    case.args += ["--slow-jitter", f"{sigma:g}"]
    case.gpu_args += ["--slow-jitter", f"{sigma:g}"]
    case.injected[0]["jitter_sigma"] = sigma
    return case


def vary_set(seed: int = VARY_SEED) -> list[Case]:
    """Held-out variations (``--set vary``, 4 ranks): the same jobs and injectors as the other
    sets with values none of them uses (other slowdown factors, ranks, sleeps, links, sigmas, a
    jittering before-microbatch load, another seed, and on GPUs another model shape). For scoring
    the detector on jobs it was not tuned on: ids end in ``-v`` (``-v-gpu`` on GPUs)."""
    def g(*a, **k):
        return _vary_gpt(*a, seed=seed, **k)

    return [
        _plain("ddp4", "dp4", seed),
        _plain("ddp4", "dp4", seed, rank=0, factor=1.3),
        _plain("ddp4", "dp4", seed, rank=3, sleep_ms=30),
        _plain("fsdp4", "dp4", seed, rank=1, factor=2.0),
        _plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.3),
        # megatron-core, mapp capture
        g("tp2pp2", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.3),
        g("pp2dp2", "mapp-v1", "layer", rank=3, factor=1.5),
        g("tp2pp2", "mapp-v1", "layer", rank=0, factor=1.3),
        g("dp4", "mapp-v1", "layer", rank=1, factor=1.25),
        g("tp2pp2", "mapp-v1", "beforemb", rank=3, ms=30),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=1, ms=30),
        g("tp2pp2", "mapp-v1", "link", link=(1, 3)),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=2),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        # megatron-core, torch.profiler
        g("pp2dp2", "kineto", "healthy"),
        g("tp2dp2", "kineto", "layer", rank=2, factor=1.3),
        g("pp2dp2", "kineto", "layer", rank=0, factor=1.5),
        g("tp2pp2", "kineto", "layer", rank=1, factor=1.5),
        _jittering(g("pp2dp2", "kineto", "beforemb", rank=3, ms=30)),
        g("pp2dp2", "kineto", "hostsleep", rank=2, ms=30),
        g("pp2dp2", "kineto", "link", link=(0, 2)),
        g("tp2dp2", "kineto", "seqlognorm", sigma=1.0),
    ]


def vary2_set(seed: int = VARY_SEED) -> list[Case]:
    """``vary_set`` for 2 ranks (``--set vary2``, a machine of 2 GPUs, like ``--set gpu2``): 5
    iterations, 3 recorded; on GPUs GPT_GPU_VARY and GPU2_HOSTSLEEP_MS's sleep."""
    def g(*a, **k):
        return _vary_gpt(*a, seed=seed, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT), **k)

    return [
        _plain("ddp2", "dp2", seed, rank=0, factor=1.3),
        _plain("ddp2", "dp2", seed, rank=1, sleep_ms=30),
        _plain("fsdp2", "dp2", seed, rank=0, factor=2.0),
        _plain("fsdp2", "dp2", seed),
        # megatron-core, torch.profiler
        g("tp2", "kineto", "layer", rank=0, factor=1.3),
        g("dp2", "kineto", "layer", rank=0, factor=1.3),
        g("pp2", "kineto", "layer", rank=0, factor=1.5),
        _jittering(g("tp2", "kineto", "beforemb", rank=0, ms=30)),
        g("dp2", "kineto", "hostsleep", rank=1, ms=30, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("dp2", "kineto", "healthy"),
        g("pp2", "kineto", "laststage", last_layers=2),
        # megatron-core, mapp capture
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.3),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.3),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.5),
        g("tp2", "mapp-v1", "hostsleep", rank=1, ms=30, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("pp2", "mapp-v1", "beforemb", rank=1, ms=30),
        g("tp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "seqlognorm", sigma=1.0),
        _plain("ddp2", "dp2", seed),
    ]


DEEP_SEED = 11


def pp4_set(seed: int = DEEP_SEED) -> list[Case]:
    """Held-out depth (``--set pp4``, 4 ranks): megatron-core with 4 pipeline stages, which no
    other set runs (a 1F1B schedule whose warm-up differs on every stage, three links, a last
    stage of 5 of 8 layers on GPUs). Ids end in ``-d``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-d", **k)

    return [
        g("pp4", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "layer", rank=2, factor=1.3),
        g("pp4", "mapp-v1", "layer", rank=0, factor=1.5),
        g("pp4", "mapp-v1", "beforemb", rank=1, ms=20),
        g("pp4", "mapp-v1", "hostsleep", rank=3, ms=20, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("pp4", "mapp-v1", "link", link=(1, 2)),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("pp4", "mapp-v1", "seqlognorm", sigma=0.8),
        g("pp4", "kineto", "healthy"),
        g("pp4", "kineto", "layer", rank=1, factor=1.5),
        g("pp4", "kineto", "layer", rank=3, factor=1.3),
        _jittering(g("pp4", "kineto", "beforemb", rank=2, ms=20)),
        g("pp4", "kineto", "hostsleep", rank=0, ms=20, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("pp4", "kineto", "link", link=(2, 3)),
        g("pp4", "kineto", "laststage", last_layers=2),
    ]


def wide_set(seed: int = DEEP_SEED) -> list[Case]:
    """Held-out width (``--set wide``, 8 ranks): PP4 x DP2, PP2 x DP4, TP2 x PP2 x DP2 and plain
    DDP / FSDP2 over 8 ranks, none of which another set runs. Made on CPU (gloo; a machine of 8
    GPUs runs it with ``--gpu``). Ids end in ``-w``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-w", **k)

    return [
        _plain("ddp8", "dp8", seed, tag="-w"),
        _plain("ddp8", "dp8", seed, rank=5, factor=1.5, tag="-w"),
        _plain("ddp8", "dp8", seed, rank=2, sleep_ms=30, tag="-w"),
        _plain("fsdp8", "dp8", seed, rank=6, factor=2.0, tag="-w"),
        # megatron-core, mapp capture
        g("pp4dp2", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "layer", rank=5, factor=1.5),
        g("pp4dp2", "mapp-v1", "hostsleep", rank=2, ms=30),
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=0.8),
        g("pp2dp4", "mapp-v1", "layer", rank=3, factor=1.3),
        g("tp2pp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2dp2", "mapp-v1", "layer", rank=6, factor=1.5),
        g("tp2pp2dp2", "mapp-v1", "link", link=(1, 5)),
        # megatron-core, torch.profiler
        g("pp4dp2", "kineto", "healthy"),
        g("pp4dp2", "kineto", "layer", rank=6, factor=1.5),
        g("pp4dp2", "kineto", "laststage", last_layers=2),
        g("pp2dp4", "kineto", "beforemb", rank=4, ms=30),
        g("tp2pp2dp2", "kineto", "layer", rank=1, factor=1.5),
    ]


SCHED_SEED = 23


def _scheduled(case: Case, vpp: int | None = None, overlap: bool = False) -> Case:
    """``case`` under another schedule: ``vpp`` model chunks per rank (interleaved 1F1B) and/or
    the data-parallel gradient reduction overlapped with the backward (``--overlap-grad-reduce``,
    bucketed and asynchronous). The id names the schedule after the layout."""
    layout = next(k for k, v in LAYOUTS.items() if v == case.layout and case.id.startswith(f"gpt-{k}-"))
    names = ([f"vpp{vpp}"] if vpp else []) + (["ogr"] if overlap else [])
    case.id = case.id.replace(f"gpt-{layout}-", f"gpt-{layout}-{'-'.join(names)}-", 1)
    if case.baseline:
        case.baseline = case.baseline.replace(f"gpt-{layout}-", f"gpt-{layout}-{'-'.join(names)}-", 1)
    flags = (["--vpp", str(vpp)] if vpp else []) + (["--overlap-grad-reduce"] if overlap else [])
    if vpp:
        # each rank holds ``vpp`` chunks of at least one layer; interleaving wants the
        # microbatches a multiple of the stages
        pp = case.layout["pp"]
        at = case.args.index("--layers") + 1
        case.args[at] = str(max(int(case.args[at]), pp * vpp))
        at = case.args.index("--num-microbatches") + 1
        case.args[at] = str(max(int(case.args[at]), pp))
    case.args += flags
    case.gpu_args += flags
    return case


def sched_set(seed: int = SCHED_SEED) -> list[Case]:
    """Held-out schedules (``--set sched``, 4 ranks): megatron-core's interleaved 1F1B (2 model
    chunks per rank) and the DP gradient all-reduce overlapped with the backward, which no other
    set runs. Ids end in ``-s``. (Of interleaved PP4 the heavier link is 2-3: on link 1-2 the
    injector's extra exchange, made after megatron-core's batch rather than inside it, pairs
    differently on its two ends and the job hangs.)"""
    def g(layout, fmt, variant, vpp=None, overlap=False, **k):
        return _scheduled(gpt_case(layout, fmt, variant, seed=seed, tag="-s", **k), vpp, overlap)

    return [
        # interleaved 1F1B
        g("pp2dp2", "mapp-v1", "healthy", vpp=2),
        g("pp2dp2", "mapp-v1", "layer", vpp=2, rank=1, factor=1.4),
        g("pp2dp2", "mapp-v1", "hostsleep", vpp=2, rank=2, ms=25, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("pp2dp2", "mapp-v1", "link", vpp=2, link=(1, 3)),
        g("pp4", "mapp-v1", "layer", vpp=2, rank=2, factor=1.5),
        g("pp4", "mapp-v1", "healthy", vpp=2),
        g("pp2dp2", "kineto", "healthy", vpp=2),
        g("pp2dp2", "kineto", "layer", vpp=2, rank=3, factor=1.4),
        g("pp2dp2", "kineto", "beforemb", vpp=2, rank=0, ms=25),
        g("pp4", "kineto", "layer", vpp=2, rank=1, factor=1.5),
        g("pp4", "mapp-v1", "link", vpp=2, link=(2, 3)),
        g("pp4", "kineto", "link", vpp=2, link=(2, 3)),
        g("pp2dp2", "mapp-v1", "seqlognorm", vpp=2, sigma=0.9),
        # the gradient all-reduce overlapped with the backward
        g("tp2dp2", "mapp-v1", "healthy", overlap=True),
        g("tp2dp2", "mapp-v1", "layer", overlap=True, rank=2, factor=1.35),
        g("dp4", "mapp-v1", "beforemb", overlap=True, rank=1, ms=25),
        g("pp2dp2", "mapp-v1", "layer", vpp=2, overlap=True, rank=0, factor=1.5),
        g("dp4", "kineto", "healthy", overlap=True),
        g("dp4", "kineto", "layer", overlap=True, rank=3, factor=1.4),
        g("tp2dp2", "kineto", "hostsleep", overlap=True, rank=1, ms=25, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("pp2dp2", "kineto", "seqlognorm", overlap=True, sigma=0.9),
    ]


PROD_SEED = 29


def _production(case: Case, sp: bool = False, overlap: bool = True, vpp: int | None = None) -> Case:
    """``case`` with the settings of a production megatron-core job: the distributed optimizer
    (gradients reduce-scattered over DP, updated parameters all-gathered), with ``overlap`` the
    reduce-scatter overlapped with the backward and the all-gather with the next forward
    (``--overlap-grad-reduce --overlap-param-gather``), with ``sp`` sequence parallelism (TP's
    all-reduces become all-gathers and reduce-scatters), with ``vpp`` interleaved 1F1B."""
    layout = next(k for k, v in LAYOUTS.items() if v == case.layout and case.id.startswith(f"gpt-{k}-"))
    names = ["dopt"] + (["sp"] if sp else []) + (["opg"] if overlap else []) + ([f"vpp{vpp}"] if vpp else [])
    head = f"gpt-{layout}-{'-'.join(names)}-"
    case.id = case.id.replace(f"gpt-{layout}-", head, 1)
    if case.baseline:
        case.baseline = case.baseline.replace(f"gpt-{layout}-", head, 1)
    flags = (["--distributed-optimizer"] + (["--sequence-parallel"] if sp else [])
             + (["--overlap-grad-reduce", "--overlap-param-gather"] if overlap else [])
             + (["--vpp", str(vpp)] if vpp else []))
    if vpp:
        at = case.gpu_args.index("--num-microbatches") + 1
        case.gpu_args[at] = str(max(int(case.gpu_args[at]), case.layout["pp"]))
    case.args += flags
    case.gpu_args += flags
    return case


def prod_set(seed: int = PROD_SEED) -> list[Case]:
    """Held-out production settings (``--set prod``, 4 ranks, GPUs only: megatron-core's
    distributed optimizer takes CUDA tensors): the distributed optimizer, its reduce-scatter and
    all-gather overlapped with the backward and the forward, sequence parallelism on TP, bf16.
    No other set runs them. Ids end in ``-p``."""
    def g(layout, fmt, variant, sp=False, overlap=True, vpp=None, **k):
        return _production(gpt_case(layout, fmt, variant, seed=seed, tag="-p", **k), sp, overlap, vpp)

    return [
        # mapp capture
        g("dp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "beforemb", rank=1, ms=25),
        g("dp4", "mapp-v1", "layer", rank=3, factor=1.4),
        g("tp2dp2", "mapp-v1", "healthy", sp=True),
        g("tp2dp2", "mapp-v1", "layer", sp=True, rank=2, factor=1.4),
        g("tp2dp2", "mapp-v1", "hostsleep", sp=True, rank=1, ms=25, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.5),
        g("pp2dp2", "mapp-v1", "link", link=(0, 2)),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2pp2", "mapp-v1", "layer", sp=True, overlap=False, rank=3, factor=1.5),
        # torch.profiler
        g("dp4", "kineto", "healthy"),
        g("dp4", "kineto", "layer", rank=2, factor=1.4),
        g("tp2dp2", "kineto", "healthy", sp=True),
        g("tp2dp2", "kineto", "layer", sp=True, rank=0, factor=1.5),
        g("pp2dp2", "kineto", "beforemb", rank=3, ms=25),
        g("pp2dp2", "kineto", "seqlognorm", sigma=0.9),
        g("pp2dp2", "kineto", "layer", vpp=2, rank=2, factor=1.5),
    ]


PRODV_SEED = 31


def prodv_set(seed: int = PRODV_SEED) -> list[Case]:
    """Variations of ``--set prod`` (``--set prodv``, 4 GPUs): the same settings with other
    faults, ranks and layouts' combinations, seed 31, made after the detector was changed on
    ``prod``'s jobs, to score it on jobs it was not changed on. Ids end in ``-pv``."""
    def g(layout, fmt, variant, sp=False, overlap=True, vpp=None, **k):
        return _production(gpt_case(layout, fmt, variant, seed=seed, tag="-pv", **k), sp, overlap, vpp)

    return [
        g("dp4", "mapp-v1", "hostsleep", rank=2, ms=25, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("dp4", "kineto", "beforemb", rank=3, ms=25),
        g("tp2dp2", "mapp-v1", "beforemb", sp=True, rank=3, ms=25),
        g("tp2dp2", "kineto", "hostsleep", sp=True, rank=1, ms=25, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("tp2dp2", "kineto", "seqlognorm", sp=True, sigma=0.9),
        g("pp2dp2", "mapp-v1", "beforemb", rank=2, ms=25),
        g("pp2dp2", "kineto", "link", link=(1, 3)),
        g("pp2dp2", "kineto", "healthy"),
        g("pp2dp2", "kineto", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "layer", vpp=2, rank=3, factor=1.6),
        g("tp2pp2", "mapp-v1", "healthy", sp=True, overlap=False),
        g("tp2pp2", "kineto", "layer", sp=True, overlap=False, rank=1, factor=1.6),
        g("pp2dp2", "mapp-v1", "healthy", vpp=2),
        g("dp4", "mapp-v1", "layer", rank=0, factor=1.6),
    ]


PRODW_SEED = 37


def prodw_set(seed: int = PRODW_SEED) -> list[Case]:
    """More jobs of ``--set prod``'s settings (``--set prodw``, 4 GPUs, seed 37), made after the
    detector was changed on ``prod``'s and ``prodv``'s: TP pairs with no fault above all (where
    one TP rank's host pacing its GPU was named a slow host), beside faults of every kind on
    ranks and layouts neither set used. Ids end in ``-pw``."""
    def g(layout, fmt, variant, sp=False, overlap=True, vpp=None, **k):
        return _production(gpt_case(layout, fmt, variant, seed=seed, tag="-pw", **k), sp, overlap, vpp)

    return [
        g("tp2dp2", "mapp-v1", "healthy", sp=True, overlap=False),
        g("tp2pp2", "mapp-v1", "healthy", sp=True, overlap=False, vpp=2),
        g("tp2dp2", "mapp-v1", "seqlognorm", sp=True, sigma=0.9),
        g("tp2pp2", "mapp-v1", "laststage", sp=True, overlap=False, last_layers=3),
        g("tp2dp2", "mapp-v1", "hostsleep", sp=True, rank=2, ms=25, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("tp2pp2", "mapp-v1", "beforemb", sp=True, overlap=False, rank=0, ms=25),
        g("pp2dp2", "mapp-v1", "layer", rank=3, factor=1.6),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2dp2", "kineto", "healthy", sp=True, overlap=False),
        g("tp2pp2", "kineto", "healthy", sp=True, overlap=False),
        g("tp2pp2", "kineto", "seqlognorm", sp=True, overlap=False, sigma=0.9),
        g("dp4", "kineto", "hostsleep", rank=1, ms=25, gpu_ms=GPU2_HOSTSLEEP_MS),
        g("pp2dp2", "kineto", "layer", rank=0, factor=1.5),
        g("tp2dp2", "kineto", "beforemb", sp=True, rank=2, ms=25),
        g("pp2dp2", "kineto", "link", link=(0, 2)),
        g("dp4", "kineto", "healthy", overlap=False),
    ]


SCALE_SEED = 41


def scale_set(seed: int = SCALE_SEED) -> list[Case]:
    """Held-out scale (``--set scale``, 64 ranks): megatron-core PP2 x DP32 on CPU (gloo, one
    process per core of a 64-core machine), the job of issue 13's class 3 (heavy-tailed
    sequence lengths per replica named 52 GPU suspects) and faults at that width, which only
    the simulator had reached. Ids end in ``-x``. Megatron's rank order: stage ``r // 32``,
    replica ``r % 32``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-x", **k)

    return [
        g("pp2dp32", "mapp-v1", "healthy"),
        g("pp2dp32", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp32", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp32", "mapp-v1", "layer", rank=37, factor=1.5),
        g("pp2dp32", "mapp-v1", "hostsleep", rank=20, ms=30),
        g("pp2dp32", "kineto", "seqlognorm", sigma=0.9),
        g("pp2dp32", "kineto", "layer", rank=5, factor=1.5),
        g("pp2dp32", "kineto", "healthy"),
    ]


FRESH_SEED = 43
# --set fresh on GPUs: a third model shape (other GEMM shapes again) and twice the microbatches,
# so that a pipeline's steady state, not its warm-up, is most of a step
GPT_GPU_FRESH = ["--layers", "8", "--hidden", "2560", "--heads", "20", "--seq", "2048", "--vocab", "51200",
                 "--micro-batch-size", "1", "--num-microbatches", "8", "--bf16"]


def fresh_set(seed: int = FRESH_SEED) -> list[Case]:
    """Held out again (``--set fresh``, 4 ranks, seed 43), made after session 23's changes: every
    layout of 4 ranks with values no other set uses (slowdowns 1.2-2x, 15 ms before-microbatch
    work, 40 ms host sleeps on GPUs, sigma 1.1, other ranks and links) and on GPUs a third model
    shape with 8 microbatches. Ids end in ``-f``."""
    g = _held_out_gpt(seed, "-f", GPT_GPU_FRESH)

    return [
        _plain("ddp4", "dp4", seed, tag="-f"),
        _plain("ddp4", "dp4", seed, rank=1, factor=1.4, tag="-f"),
        _plain("fsdp4", "dp4", seed, rank=2, sleep_ms=40, tag="-f"),
        _plain("tp2dp2", "tp2dp2", seed, rank=0, factor=1.8, tag="-f"),
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=1, factor=1.2),
        g("pp2dp2", "mapp-v1", "layer", rank=2, factor=1.35),
        g("tp2pp2", "mapp-v1", "layer", rank=2, factor=1.8),
        g("pp4", "mapp-v1", "layer", rank=3, factor=1.4),
        g("pp2dp2", "mapp-v1", "beforemb", rank=0, ms=15),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=0, ms=15, gpu_ms=40),
        g("pp4", "mapp-v1", "link", link=(2, 3)),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=1.1),
        # megatron-core, torch.profiler
        g("tp2dp2", "kineto", "healthy"),
        g("pp4", "kineto", "healthy"),
        g("dp4", "kineto", "layer", rank=0, factor=1.3),
        g("pp2dp2", "kineto", "layer", rank=1, factor=2.0),
        g("tp2pp2", "kineto", "beforemb", rank=3, ms=15),
        g("pp4", "kineto", "hostsleep", rank=1, ms=15, gpu_ms=40),
        g("pp2dp2", "kineto", "link", link=(1, 3)),
        g("pp2dp2", "kineto", "laststage", last_layers=3),
        g("dp4", "kineto", "seqlognorm", sigma=1.1),
    ]


FRESH2_SEED = 47
# --set fresh2 on GPUs: a fourth model shape (wider, shorter sequences, 2 sequences a microbatch)
GPT_GPU_FRESH2 = ["--layers", "8", "--hidden", "3584", "--heads", "28", "--seq", "1024", "--vocab", "32768",
                  "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]


def fresh2_set(seed: int = FRESH2_SEED) -> list[Case]:
    """Held out after ``--set fresh``'s changes (``--set fresh2``, 4 ranks, seed 47): every
    4-rank layout again with other values (slowdowns 1.25-2x, 20 ms before-microbatch work, 60 ms
    host sleeps on GPUs, other ranks and links) and on GPUs a fourth model shape. Ids end in
    ``-f2``."""
    g = _held_out_gpt(seed, "-f2", GPT_GPU_FRESH2)

    return [
        _plain("ddp4", "dp4", seed, rank=2, factor=2.0, tag="-f2"),
        _plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.5, tag="-f2"),
        _plain("fsdp4", "dp4", seed, tag="-f2"),
        # megatron-core, mapp capture
        g("tp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=2, factor=1.5),
        g("pp2dp2", "mapp-v1", "layer", rank=3, factor=1.25),
        g("pp4", "mapp-v1", "layer", rank=1, factor=1.6),
        g("tp2pp2", "mapp-v1", "beforemb", rank=1, ms=20),
        g("dp4", "mapp-v1", "hostsleep", rank=2, ms=20, gpu_ms=60),
        g("tp2pp2", "mapp-v1", "link", link=(0, 2)),
        g("pp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        # megatron-core, torch.profiler
        g("pp2dp2", "kineto", "healthy"),
        g("tp2pp2", "kineto", "layer", rank=0, factor=1.5),
        g("pp4", "kineto", "layer", rank=2, factor=1.5),
        g("dp4", "kineto", "beforemb", rank=3, ms=20),
        g("tp2dp2", "kineto", "hostsleep", rank=3, ms=20, gpu_ms=60),
        g("tp2pp2", "kineto", "seqlognorm", sigma=1.0),
        g("pp4", "kineto", "link", link=(1, 2)),
    ]


FRESH3_SEED = 53
# --set fresh3 on GPUs: a fifth model shape (head dim 128 at hidden 4608, sequence 1536, a larger
# vocabulary) with 6 microbatches a step
GPT_GPU_FRESH3 = ["--layers", "8", "--hidden", "4608", "--heads", "36", "--seq", "1536", "--vocab", "65536",
                  "--micro-batch-size", "1", "--num-microbatches", "6", "--bf16"]


def fresh3_set(seed: int = FRESH3_SEED) -> list[Case]:
    """Held out after ``--set fresh2``'s changes, on 2 ranks (``--set fresh3``, a machine of 2 GPUs
    like ``--set vary2``, seed 53): plain DDP / FSDP2 and megatron-core DP2, TP2, PP2 with values no
    other set uses (slowdowns 1.25-1.8x, 25 ms before-microbatch work, 45 ms data sleeps, 80 ms host
    sleeps on GPUs, lognormal sigma 1.2, a last stage of 4 layers) and on GPUs a fifth model shape.
    5 iterations, 3 recorded. Ids end in ``-f3`` (``-f3-gpu2``)."""
    g = _held_out_gpt(seed, "-f3", GPT_GPU_FRESH3, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, tag="-f3"),
        _plain("ddp2", "dp2", seed, rank=1, factor=1.6, tag="-f3"),
        _plain("fsdp2", "dp2", seed, rank=1, sleep_ms=45, tag="-f3"),
        _plain("fsdp2", "dp2", seed, rank=0, factor=1.3, tag="-f3"),
        # megatron-core, mapp capture
        g("dp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.4),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.8),
        g("dp2", "mapp-v1", "beforemb", rank=0, ms=25),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=25, gpu_ms=80),
        g("tp2", "mapp-v1", "seqlognorm", sigma=1.2),
        g("pp2", "mapp-v1", "laststage", last_layers=4),
        # megatron-core, torch.profiler
        g("tp2", "kineto", "healthy"),
        g("dp2", "kineto", "layer", rank=1, factor=1.6),
        g("tp2", "kineto", "layer", rank=0, factor=1.25),
        g("pp2", "kineto", "beforemb", rank=0, ms=25),
        g("tp2", "kineto", "hostsleep", rank=0, ms=25, gpu_ms=80),
        g("dp2", "kineto", "seqlognorm", sigma=1.2),
        g("pp2", "kineto", "laststage", last_layers=4),
    ]


FRESH4_SEED = 59
# --set fresh4 on GPUs: a sixth model shape (narrow and long: hidden 2048, sequence 4096, attention
# a larger share of a layer's time)
GPT_GPU_FRESH4 = ["--layers", "8", "--hidden", "2048", "--heads", "16", "--seq", "4096", "--vocab", "50304",
                  "--micro-batch-size", "1", "--num-microbatches", "6", "--bf16"]


def fresh4_set(seed: int = FRESH4_SEED) -> list[Case]:
    """Held out after ``--set fresh3``'s changes (``--set fresh4``, 4 ranks, seed 59): every 4-rank
    layout again with values no other set uses (slowdowns 1.3-1.9x, 18 ms before-microbatch work,
    12 ms host sleeps, 50 ms on GPUs, 35 ms data sleeps, sigma 0.95, other ranks and links) and on
    GPUs a sixth model shape. Ids end in ``-f4``."""
    g = _held_out_gpt(seed, "-f4", GPT_GPU_FRESH4)

    return [
        _plain("ddp4", "dp4", seed, rank=3, factor=1.45, tag="-f4"),
        _plain("fsdp4", "dp4", seed, rank=0, sleep_ms=35, tag="-f4"),
        _plain("tp2dp2", "tp2dp2", seed, tag="-f4"),
        # megatron-core, mapp capture
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.45),
        g("tp2pp2", "mapp-v1", "layer", rank=0, factor=1.7),
        g("pp4", "mapp-v1", "layer", rank=2, factor=1.9),
        g("dp4", "mapp-v1", "beforemb", rank=1, ms=18),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=12, gpu_ms=50),
        g("pp2dp2", "mapp-v1", "link", link=(0, 2)),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.95),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=3),
        # megatron-core, torch.profiler
        g("dp4", "kineto", "healthy"),
        g("tp2dp2", "kineto", "layer", rank=2, factor=1.3),
        g("pp4", "kineto", "beforemb", rank=3, ms=18),
        g("tp2pp2", "kineto", "hostsleep", rank=1, ms=12, gpu_ms=50),
        g("pp4", "kineto", "layer", rank=0, factor=1.7),
        g("tp2dp2", "kineto", "seqlognorm", sigma=0.95),
        g("pp4", "kineto", "laststage", last_layers=3),
    ]


FRESH5_SEED = 61
# --set fresh5 on GPUs: a seventh model shape (wide and short: hidden 5120, sequence 1024, 2
# sequences a microbatch, 4 microbatches)
GPT_GPU_FRESH5 = ["--layers", "8", "--hidden", "5120", "--heads", "40", "--seq", "1024", "--vocab", "32000",
                  "--micro-batch-size", "2", "--num-microbatches", "4", "--bf16"]


def fresh5_set(seed: int = FRESH5_SEED) -> list[Case]:
    """Held out after ``--set fresh3``'s changes on 2 ranks (``--set fresh5``, a machine of 2 GPUs
    like ``--set fresh3``, seed 61): plain DDP / FSDP2 and megatron-core DP2, TP2, PP2 with values
    no other set uses (slowdowns 1.35-2.2x, 12 ms before-microbatch work, 15 ms host sleeps, 70 ms
    on GPUs, 25 ms data sleeps, sigma 0.85, a last stage of 5 layers) and on GPUs a seventh model
    shape. 5 iterations, 3 recorded. Ids end in ``-f5`` (``-f5-gpu2``)."""
    g = _held_out_gpt(seed, "-f5", GPT_GPU_FRESH5, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=0, factor=2.2, tag="-f5"),
        _plain("fsdp2", "dp2", seed, tag="-f5"),
        _plain("ddp2", "dp2", seed, rank=1, sleep_ms=25, tag="-f5"),
        # megatron-core, mapp capture
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.35),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.5),
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=12),
        g("dp2", "mapp-v1", "hostsleep", rank=1, ms=15, gpu_ms=70),
        g("pp2", "mapp-v1", "seqlognorm", sigma=0.85),
        g("pp2", "mapp-v1", "laststage", last_layers=5),
        # megatron-core, torch.profiler
        g("pp2", "kineto", "healthy"),
        g("dp2", "kineto", "healthy"),
        g("tp2", "kineto", "layer", rank=1, factor=1.5),
        g("pp2", "kineto", "layer", rank=0, factor=1.35),
        g("dp2", "kineto", "beforemb", rank=0, ms=12),
        g("pp2", "kineto", "hostsleep", rank=0, ms=15, gpu_ms=70),
        g("tp2", "kineto", "seqlognorm", sigma=0.85),
    ]


FRESH6_SEED = 67
# --set fresh6 on GPUs: an eighth model shape (hidden 3072, sequence 2048, a 128k vocabulary as in
# recent production models) with 8 microbatches a step
GPT_GPU_FRESH6 = ["--layers", "8", "--hidden", "3072", "--heads", "24", "--seq", "2048", "--vocab", "128256",
                  "--micro-batch-size", "1", "--num-microbatches", "8", "--bf16"]


def fresh6_set(seed: int = FRESH6_SEED) -> list[Case]:
    """Held out after ``--set fresh5``'s changes on 2 ranks (``--set fresh6``, a machine of 2 GPUs
    like ``--set fresh3``, seed 67): plain DDP / FSDP2 and megatron-core DP2, TP2, PP2 with values
    no other set uses (slowdowns 1.2-2.0x, 20 ms before-microbatch work, 20 ms host sleeps, 60 ms
    on GPUs, 40 ms data sleeps, sigma 1.1, a last stage of 3 layers, a heavier PP2 link) and on
    GPUs an eighth model shape. 5 iterations, 3 recorded. Ids end in ``-f6`` (``-f6-gpu2``)."""
    g = _held_out_gpt(seed, "-f6", GPT_GPU_FRESH6, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, tag="-f6"),
        _plain("ddp2", "dp2", seed, rank=0, factor=1.45, tag="-f6"),
        _plain("fsdp2", "dp2", seed, rank=1, factor=1.7, tag="-f6"),
        _plain("fsdp2", "dp2", seed, rank=0, sleep_ms=40, tag="-f6"),
        # megatron-core, mapp capture
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.7),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.45),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.55),
        g("pp2", "mapp-v1", "beforemb", rank=0, ms=20),
        g("tp2", "mapp-v1", "hostsleep", rank=1, ms=20, gpu_ms=60),
        g("dp2", "mapp-v1", "seqlognorm", sigma=1.1),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        # megatron-core, torch.profiler
        g("pp2", "kineto", "healthy"),
        g("tp2", "kineto", "layer", rank=1, factor=2.0),
        g("dp2", "kineto", "layer", rank=0, factor=1.2),
        g("tp2", "kineto", "beforemb", rank=0, ms=20),
        g("dp2", "kineto", "hostsleep", rank=0, ms=20, gpu_ms=60),
        g("pp2", "kineto", "seqlognorm", sigma=1.1),
        g("pp2", "kineto", "link", link=(0, 1)),
    ]


FRESH7_SEED = 71
# --set fresh7 on GPUs: a ninth model shape (hidden 2816, sequence 2560, 8 microbatches)
GPT_GPU_FRESH7 = ["--layers", "8", "--hidden", "2816", "--heads", "22", "--seq", "2560", "--vocab", "50304",
                  "--micro-batch-size", "1", "--num-microbatches", "8", "--bf16"]


def fresh7_set(seed: int = FRESH7_SEED) -> list[Case]:
    """Held out after ``--set fresh5``'s changes (``--set fresh7``, 4 ranks, seed 71): every 4-rank
    layout with values no other set uses (slowdowns 1.35-1.6x, 22 ms before-microbatch work, 16 ms
    host sleeps, 55 ms on GPUs, 25 ms data sleeps, sigma 1.05, a last stage of 2 layers, other ranks
    and links) and on GPUs a ninth model shape. Ids end in ``-f7``."""
    g = _held_out_gpt(seed, "-f7", GPT_GPU_FRESH7)

    return [
        _plain("ddp4", "dp4", seed, rank=1, factor=1.6, tag="-f7"),
        _plain("fsdp4", "dp4", seed, tag="-f7"),
        _plain("ddp4", "dp4", seed, rank=2, sleep_ms=25, tag="-f7"),
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "layer", rank=2, factor=1.6),
        g("tp2pp2", "mapp-v1", "layer", rank=3, factor=1.5),
        g("pp4", "mapp-v1", "layer", rank=1, factor=1.4),
        g("tp2dp2", "mapp-v1", "beforemb", rank=0, ms=22),
        g("dp4", "mapp-v1", "hostsleep", rank=2, ms=16, gpu_ms=55),
        g("tp2pp2", "mapp-v1", "link", link=(1, 3)),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.05),
        g("pp4", "mapp-v1", "laststage", last_layers=2),
        # megatron-core, torch.profiler
        g("tp2pp2", "kineto", "healthy"),
        g("pp2dp2", "kineto", "layer", rank=1, factor=1.55),
        g("dp4", "kineto", "layer", rank=3, factor=1.35),
        g("tp2pp2", "kineto", "beforemb", rank=2, ms=22),
        g("pp4", "kineto", "hostsleep", rank=2, ms=16, gpu_ms=55),
        g("pp2dp2", "kineto", "link", link=(1, 3)),
        g("dp4", "kineto", "seqlognorm", sigma=1.05),
        g("tp2pp2", "kineto", "laststage", last_layers=2),
    ]


FRESH8_SEED = 73
# --set fresh8 on GPUs: a tenth model shape (hidden 4096, sequence 1024, 4 sequences a microbatch)
GPT_GPU_FRESH8 = ["--layers", "8", "--hidden", "4096", "--heads", "32", "--seq", "1024", "--vocab", "50304",
                  "--micro-batch-size", "4", "--num-microbatches", "4", "--bf16"]


def fresh8_set(seed: int = FRESH8_SEED) -> list[Case]:
    """Held out after ``--set fresh6``'s changes on 2 ranks (``--set fresh8``, a machine of 2 GPUs
    like ``--set fresh3``, seed 73): plain DDP / FSDP2 and megatron-core DP2, TP2, PP2 with values
    no other set uses (slowdowns 1.3-1.9x, 15 ms before-microbatch work, 30 ms host sleeps, 90 ms
    on GPUs, 30 ms data sleeps, sigma 1.3 and 0.9, a last stage of 2 layers), healthy TP2 jobs
    under both captures, and on GPUs a tenth model shape. 5 iterations, 3 recorded. Ids end in
    ``-f8`` (``-f8-gpu2``)."""
    g = _held_out_gpt(seed, "-f8", GPT_GPU_FRESH8, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=1, factor=1.5, tag="-f8"),
        _plain("fsdp2", "dp2", seed, tag="-f8"),
        _plain("ddp2", "dp2", seed, rank=0, sleep_ms=30, tag="-f8"),
        # megatron-core, mapp capture
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.3),
        g("tp2", "mapp-v1", "seqlognorm", sigma=1.3),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.65),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.5),
        g("tp2", "mapp-v1", "beforemb", rank=0, ms=15),
        g("dp2", "mapp-v1", "hostsleep", rank=1, ms=30, gpu_ms=90),
        g("pp2", "mapp-v1", "laststage", last_layers=2),
        # megatron-core, torch.profiler
        g("tp2", "kineto", "healthy"),
        g("tp2", "kineto", "layer", rank=0, factor=1.9),
        g("dp2", "kineto", "layer", rank=1, factor=1.5),
        g("pp2", "kineto", "beforemb", rank=1, ms=15),
        g("tp2", "kineto", "hostsleep", rank=1, ms=30, gpu_ms=90),
        g("dp2", "kineto", "seqlognorm", sigma=0.9),
        g("pp2", "kineto", "layer", rank=1, factor=1.65),
    ]


FRESH9_SEED = 79
# --set fresh9 on GPUs: an eleventh model shape (hidden 3328, 26 heads, sequence 1792, 2 sequences a
# microbatch, 6 microbatches a step)
GPT_GPU_FRESH9 = ["--layers", "8", "--hidden", "3328", "--heads", "26", "--seq", "1792", "--vocab", "49152",
                  "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]


def fresh9_set(seed: int = FRESH9_SEED) -> list[Case]:
    """Held out after ``--set fresh8`` (``--set fresh9``, 4 ranks, seed 79, made for a machine of 4
    GPUs and for CPUs): every 4-rank layout with values no other set uses (slowdowns 1.25-1.75x,
    26 ms before-microbatch work, 18 ms host sleeps, 65 ms on GPUs, 35 ms data sleeps, sigma 0.95,
    healthy PP4 and TP2 x DP2 under mapp's capture, a heavier link in PP4 and TP2 x PP2) and on GPUs
    an eleventh model shape. Ids end in ``-f9``."""
    g = _held_out_gpt(seed, "-f9", GPT_GPU_FRESH9)

    return [
        _plain("ddp4", "dp4", seed, tag="-f9"),
        _plain("fsdp4", "dp4", seed, rank=3, factor=1.45, tag="-f9"),
        _plain("ddp4", "dp4", seed, rank=0, sleep_ms=35, tag="-f9"),
        # megatron-core, mapp capture
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "layer", rank=0, factor=1.3),
        g("tp2dp2", "mapp-v1", "layer", rank=1, factor=1.55),
        g("pp2dp2", "mapp-v1", "beforemb", rank=3, ms=26),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=1, ms=18, gpu_ms=65),
        g("pp4", "mapp-v1", "link", link=(2, 3)),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.95),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        # megatron-core, torch.profiler
        g("dp4", "kineto", "healthy"),
        g("pp4", "kineto", "layer", rank=3, factor=1.75),
        g("tp2dp2", "kineto", "layer", rank=2, factor=1.25),
        g("pp2dp2", "kineto", "hostsleep", rank=0, ms=18, gpu_ms=65),
        g("dp4", "kineto", "beforemb", rank=1, ms=26),
        g("tp2pp2", "kineto", "link", link=(0, 2)),
        g("pp4", "kineto", "seqlognorm", sigma=0.95),
        g("tp2pp2", "kineto", "laststage", last_layers=3),
    ]


FRESH10_SEED = 83
# --set fresh10 on GPUs: a twelfth model shape (hidden 2304, 18 heads, sequence 3584, 4 microbatches)
GPT_GPU_FRESH10 = ["--layers", "8", "--hidden", "2304", "--heads", "18", "--seq", "3584", "--vocab", "65024",
                   "--micro-batch-size", "1", "--num-microbatches", "4", "--bf16"]


def fresh10_set(seed: int = FRESH10_SEED) -> list[Case]:
    """Held out after the twenty-seventh session's changes (``--set fresh10``, 4 ranks, seed 83,
    for a machine of 4 GPUs and for CPUs): every 4-rank layout with values no other set uses
    (slowdowns 1.3-1.85x, 24 ms before-microbatch work, 22 ms host sleeps, 75 ms on GPUs, 28 ms
    data sleeps, sigma 1.15; PP4 under the profiler slowed on its first, a middle and its last
    stage; heavier links in TP2 x PP2 and PP4; healthy PP4 under both captures) and on GPUs a
    twelfth model shape. Ids end in ``-f10``."""
    g = _held_out_gpt(seed, "-f10", GPT_GPU_FRESH10)

    return [
        # megatron-core, torch.profiler
        g("pp4", "kineto", "healthy"),
        g("pp4", "kineto", "layer", rank=0, factor=1.6),
        g("pp4", "kineto", "layer", rank=2, factor=1.45),
        g("pp4", "kineto", "layer", rank=3, factor=1.35),
        g("pp4", "kineto", "beforemb", rank=3, ms=24),
        g("tp2pp2", "kineto", "link", link=(1, 3)),
        g("pp2dp2", "kineto", "laststage", last_layers=3),
        g("tp2dp2", "kineto", "layer", rank=3, factor=1.3),
        # megatron-core, mapp capture
        g("tp2pp2", "mapp-v1", "link", link=(0, 2)),
        g("pp4", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "layer", rank=3, factor=1.85),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=2, ms=22, gpu_ms=75),
        g("pp4", "mapp-v1", "seqlognorm", sigma=1.15),
        g("dp4", "mapp-v1", "layer", rank=2, factor=1.4),
        g("pp2dp2", "mapp-v1", "healthy"),
        _plain("ddp4", "dp4", seed, rank=1, sleep_ms=28, tag="-f10"),
        _plain("fsdp4", "dp4", seed, rank=2, factor=1.55, tag="-f10"),
        _plain("ddp4", "dp4", seed, tag="-f10"),
    ]


FRESH11_SEED = 89
# --set fresh11 on GPUs: a thirteenth model shape (hidden 2816, 22 heads, sequence 2560, 8 microbatches)
GPT_GPU_FRESH11 = ["--layers", "8", "--hidden", "2816", "--heads", "22", "--seq", "2560", "--vocab", "40960",
                   "--micro-batch-size", "1", "--num-microbatches", "8", "--bf16"]


def fresh11_set(seed: int = FRESH11_SEED) -> list[Case]:
    """Held out after the twenty-seventh session (``--set fresh11``, 4 ranks, seed 89, for a
    machine of 4 GPUs and for CPUs): every 4-rank layout with values no other set uses (slowdowns
    1.22-2.2x, 19 ms before-microbatch work, 27 ms host sleeps, 85 ms on GPUs, 24 ms data sleeps,
    sigma 1.25; PP4 slowed on a middle stage under mapp's capture and its first by a host sleep;
    a heavier first link of PP4) and on GPUs a thirteenth model shape. Ids end in ``-f11``."""
    g = _held_out_gpt(seed, "-f11", GPT_GPU_FRESH11)

    return [
        _plain("ddp4", "dp4", seed, rank=2, factor=1.35, tag="-f11"),
        _plain("fsdp4", "dp4", seed, rank=0, sleep_ms=24, tag="-f11"),
        _plain("tp2dp2", "tp2dp2", seed, rank=1, factor=1.6, tag="-f11"),
        _plain("fsdp4", "dp4", seed, tag="-f11"),
        # megatron-core, mapp capture
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "layer", rank=1, factor=1.62),
        g("pp2dp2", "mapp-v1", "layer", rank=2, factor=1.38),
        g("dp4", "mapp-v1", "beforemb", rank=0, ms=19),
        g("pp4", "mapp-v1", "hostsleep", rank=0, ms=27, gpu_ms=85),
        g("tp2pp2", "mapp-v1", "seqlognorm", sigma=1.25),
        g("pp4", "mapp-v1", "link", link=(0, 1)),
        g("tp2pp2", "mapp-v1", "layer", rank=3, factor=1.7),
        # megatron-core, torch.profiler
        g("pp2dp2", "kineto", "healthy"),
        g("tp2pp2", "kineto", "layer", rank=0, factor=1.22),
        g("dp4", "kineto", "layer", rank=3, factor=2.2),
        g("pp4", "kineto", "beforemb", rank=2, ms=19),
        g("tp2dp2", "kineto", "hostsleep", rank=3, ms=27, gpu_ms=85),
        g("pp4", "kineto", "laststage", last_layers=3),
        g("pp2dp2", "kineto", "seqlognorm", sigma=1.25),
        g("pp2dp2", "kineto", "link", link=(0, 2)),
    ]


FRESH12_SEED = 97
# --set fresh12 on GPUs: a fourteenth model shape (hidden 3584, 28 heads, sequence 1280, 2 sequences
# a microbatch, 6 microbatches)
GPT_GPU_FRESH12 = ["--layers", "8", "--hidden", "3584", "--heads", "28", "--seq", "1280", "--vocab", "57344",
                   "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]


def fresh12_set(seed: int = FRESH12_SEED) -> list[Case]:
    """Held out after the twenty-eighth session's first change (``--set fresh12``, 2 ranks, seed 97,
    for a machine of 2 GPUs and for CPUs): plain DDP / FSDP2 and megatron-core DP2, TP2, PP2 with
    values no other set uses (slowdowns 1.27-1.8x, 21 ms before-microbatch work, 23 ms host
    sleeps, 70 ms on GPUs, 33 ms data sleeps, sigma 1.05), healthy jobs of every layout, TP2 with
    work before each of rank 1's microbatches under both captures (issue 13's class 2; added after
    the rest was first run), and on GPUs a fourteenth model shape. 5 iterations, 3 recorded. Ids end in ``-f12``."""
    g = _held_out_gpt(seed, "-f12", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=0, factor=1.42, tag="-f12"),
        _plain("fsdp2", "dp2", seed, rank=1, sleep_ms=33, tag="-f12"),
        _plain("ddp2", "dp2", seed, tag="-f12"),
        _plain("fsdp2", "dp2", seed, rank=0, factor=1.7, tag="-f12"),
        # megatron-core, mapp capture
        g("tp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.33),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.58),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.45),
        g("dp2", "mapp-v1", "beforemb", rank=0, ms=21),
        g("tp2", "mapp-v1", "hostsleep", rank=1, ms=23, gpu_ms=70),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        # megatron-core, torch.profiler
        g("dp2", "kineto", "healthy"),
        g("tp2", "kineto", "layer", rank=1, factor=1.27),
        g("pp2", "kineto", "layer", rank=0, factor=1.8),
        g("dp2", "kineto", "hostsleep", rank=0, ms=23, gpu_ms=70),
        g("tp2", "kineto", "seqlognorm", sigma=1.05),
        g("pp2", "kineto", "beforemb", rank=1, ms=21),
        # issue 13's class 2 job: TP2, extra work before each of rank 1's microbatches
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=21),
        g("tp2", "kineto", "beforemb", rank=1, ms=21),
    ]


FRESH13_SEED = 101


def fresh13_set(seed: int = FRESH13_SEED) -> list[Case]:
    """Held out after the twenty-eighth session's second change (``--set fresh13``, 8 ranks, seed
    101, for CPUs; a machine of 8 GPUs runs it with ``--gpu``): PP4 x DP2, PP2 x DP4, TP2 x PP2 x
    DP2 and plain DDP / FSDP2 over 8 ranks with values no other set uses (slowdowns 1.35-1.6x,
    23 ms before-microbatch work, 21 ms host sleeps, 26 ms data sleeps, sigma 1.2), the heavier
    last stage of issue 13's 8-rank job under both captures, and healthy jobs. Ids end in ``-f13``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f13", **k)

    return [
        _plain("ddp8", "dp8", seed, rank=6, factor=1.4, tag="-f13"),
        _plain("fsdp8", "dp8", seed, rank=3, sleep_ms=26, tag="-f13"),
        # megatron-core, mapp capture
        g("pp4dp2", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp2", "mapp-v1", "layer", rank=5, factor=1.55),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=1.2),
        g("pp2dp4", "mapp-v1", "beforemb", rank=2, ms=23),
        g("tp2pp2dp2", "mapp-v1", "hostsleep", rank=4, ms=21),
        g("tp2pp2dp2", "mapp-v1", "link", link=(2, 6)),
        # megatron-core, torch.profiler
        g("pp4dp2", "kineto", "healthy"),
        g("pp4dp2", "kineto", "laststage", last_layers=3),
        g("pp2dp4", "kineto", "layer", rank=6, factor=1.45),
        g("tp2pp2dp2", "kineto", "layer", rank=3, factor=1.6),
        g("pp2dp4", "kineto", "seqlognorm", sigma=1.2),
        g("tp2pp2dp2", "kineto", "healthy"),
        g("pp4dp2", "kineto", "layer", rank=1, factor=1.35),
    ]


FRESH14_SEED = 107
# --set fresh14 on GPUs: a fifteenth model shape (hidden 3072, 24 heads, sequence 1792, 6 microbatches)
GPT_GPU_FRESH14 = ["--layers", "8", "--hidden", "3072", "--heads", "24", "--seq", "1792", "--vocab", "49152",
                   "--micro-batch-size", "1", "--num-microbatches", "6", "--bf16"]


def fresh14_set(seed: int = FRESH14_SEED) -> list[Case]:
    """Held out at the start of the twenty-ninth session (``--set fresh14``, 4 ranks, seed 107, for
    CPUs and for a machine of 4 GPUs): issue 13's 4-process gloo classes (plain DDP with one rank
    doing more forward work or sleeping in its data path, DP2 x TP2 from process groups) and
    every 4-rank megatron-core layout under both captures with values no other set uses
    (slowdowns 1.25-1.95x, 26 ms before-microbatch work, 25 ms host sleeps, 80 ms on GPUs, 31 ms
    data sleeps, sigma 1.1), a heavier last stage and healthy jobs, and on GPUs a fifteenth
    model shape. Ids end in ``-f14``."""
    g = _held_out_gpt(seed, "-f14", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=1, factor=1.52, tag="-f14"),
        _plain("ddp4", "dp4", seed, rank=3, sleep_ms=31, tag="-f14"),
        _plain("tp2dp2", "tp2dp2", seed, rank=2, factor=1.75, tag="-f14"),
        _plain("tp2dp2", "tp2dp2", seed, tag="-f14"),
        _plain("fsdp4", "dp4", seed, rank=3, factor=1.48, tag="-f14"),
        # megatron-core, mapp capture
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=2, factor=1.66),
        g("pp4", "mapp-v1", "layer", rank=2, factor=1.52),
        g("tp2pp2", "mapp-v1", "beforemb", rank=1, ms=26),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=25, gpu_ms=80),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.1),
        g("tp2pp2", "mapp-v1", "link", link=(1, 3)),
        # megatron-core, torch.profiler
        g("tp2dp2", "kineto", "healthy"),
        g("pp4", "kineto", "layer", rank=1, factor=1.25),
        g("pp2dp2", "kineto", "layer", rank=1, factor=1.95),
        g("dp4", "kineto", "beforemb", rank=2, ms=26),
        g("tp2pp2", "kineto", "hostsleep", rank=0, ms=25, gpu_ms=80),
        g("pp4", "kineto", "seqlognorm", sigma=1.1),
        g("tp2pp2", "kineto", "laststage", last_layers=3),
        g("pp2dp2", "kineto", "link", link=(1, 3)),
    ]


FRESH15_SEED = 109


def fresh15_set(seed: int = FRESH15_SEED) -> list[Case]:
    """Held out after the twenty-ninth session's first changes (``--set fresh15``, 4 ranks, seed
    109, for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s):
    issue 13's 4-process gloo classes again (plain DDP and FSDP with more forward work or a
    data-path sleep on one rank, DP2 x TP2 from process groups, healthy jobs)
    and megatron-core under both captures with values no other set uses (slowdowns
    1.28-2.05x, 28 ms before-microbatch work, 19 ms host sleeps, 90 ms on GPUs, 22 and 37 ms
    data sleeps, sigma 0.9), two heavier last stages and healthy jobs. Ids end in ``-f15``."""
    g = _held_out_gpt(seed, "-f15", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=0, factor=1.65, tag="-f15"),
        _plain("ddp4", "dp4", seed, rank=2, sleep_ms=22, tag="-f15"),
        _plain("ddp4", "dp4", seed, tag="-f15"),
        _plain("tp2dp2", "tp2dp2", seed, rank=3, factor=2.05, tag="-f15"),
        _plain("fsdp4", "dp4", seed, rank=1, sleep_ms=37, tag="-f15"),
        _plain("tp2dp2", "tp2dp2", seed, tag="-f15"),
        _plain("fsdp4", "dp4", seed, rank=3, factor=1.58, tag="-f15"),
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "layer", rank=0, factor=1.44),
        g("pp2dp2", "mapp-v1", "beforemb", rank=1, ms=28),
        g("pp4", "mapp-v1", "hostsleep", rank=2, ms=19, gpu_ms=90),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4", "mapp-v1", "laststage", last_layers=4),
        g("pp2dp2", "mapp-v1", "link", link=(0, 2)),
        # megatron-core, torch.profiler
        g("pp2dp2", "kineto", "healthy"),
        g("tp2dp2", "kineto", "layer", rank=0, factor=1.28),
        g("dp4", "kineto", "hostsleep", rank=1, ms=19, gpu_ms=90),
        g("tp2pp2", "kineto", "beforemb", rank=3, ms=28),
        g("pp4", "kineto", "layer", rank=3, factor=1.72),
        g("pp2dp2", "kineto", "laststage", last_layers=4),
        g("tp2pp2", "kineto", "link", link=(0, 2)),
    ]


FRESH16_SEED = 113


def fresh16_set(seed: int = FRESH16_SEED) -> list[Case]:
    """Held out after the twenty-ninth session's changes (``--set fresh16``, 4 ranks, seed 113,
    for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): issue
    13's 4-process gloo classes and megatron-core under both captures with values no other set
    uses (slowdowns 1.36-1.9x, 17 ms before-microbatch work, 29 ms host sleeps, 95 ms on GPUs,
    27 and 40 ms data sleeps, sigma 1.3), heavier last stages and healthy jobs. Ids end in ``-f16``."""
    g = _held_out_gpt(seed, "-f16", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=3, factor=1.36, tag="-f16"),
        _plain("ddp4", "dp4", seed, rank=0, sleep_ms=40, tag="-f16"),
        _plain("fsdp4", "dp4", seed, rank=2, sleep_ms=27, tag="-f16"),
        _plain("tp2dp2", "tp2dp2", seed, rank=0, factor=1.9, tag="-f16"),
        _plain("fsdp4", "dp4", seed, tag="-f16"),
        # megatron-core, mapp capture
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "layer", rank=0, factor=1.78),
        g("dp4", "mapp-v1", "beforemb", rank=3, ms=17),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=3, ms=29, gpu_ms=95),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.3),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4", "mapp-v1", "link", link=(1, 2)),
        g("pp4", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        g("dp4", "kineto", "healthy"),
        g("tp2pp2", "kineto", "layer", rank=2, factor=1.5),
        g("pp2dp2", "kineto", "beforemb", rank=0, ms=17),
        g("pp4", "kineto", "hostsleep", rank=3, ms=29, gpu_ms=95),
        g("tp2dp2", "kineto", "layer", rank=1, factor=1.42),
        g("pp4", "kineto", "laststage", last_layers=4),
        g("tp2pp2", "kineto", "seqlognorm", sigma=1.3),
        g("pp4", "kineto", "link", link=(0, 1)),
    ]


FRESH17_SEED = 127


def fresh17_set(seed: int = FRESH17_SEED) -> list[Case]:
    """Held out before the thirtieth session's changes (``--set fresh17``, 2 ranks, seed 127, for
    CPUs and for a machine of 2 GPUs, on which the GPU model shape is ``fresh12``'s): issue 13's
    2-rank classes (plain DDP / FSDP2 with more forward work or a data-path sleep on one rank) and
    megatron-core DP2, TP2, PP2 under both captures with values no other set uses (slowdowns
    1.3-1.85x, 19 ms before-microbatch work, 27 ms host sleeps, 85 ms on GPUs, 29 ms data sleeps,
    sigma 0.95), a heavier last stage and healthy jobs. 5 iterations, 3 recorded. Ids end in ``-f17``."""
    g = _held_out_gpt(seed, "-f17", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=1, factor=1.38, tag="-f17"),
        _plain("ddp2", "dp2", seed, rank=0, sleep_ms=29, tag="-f17"),
        _plain("fsdp2", "dp2", seed, tag="-f17"),
        _plain("fsdp2", "dp2", seed, rank=1, factor=1.62, tag="-f17"),
        # megatron-core, mapp capture
        g("dp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.42),
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.67),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.36),
        g("tp2", "mapp-v1", "beforemb", rank=0, ms=19),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=27, gpu_ms=85),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.95),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        # megatron-core, torch.profiler
        g("tp2", "kineto", "healthy"),
        g("pp2", "kineto", "healthy"),
        g("dp2", "kineto", "layer", rank=1, factor=1.85),
        g("tp2", "kineto", "layer", rank=0, factor=1.3),
        g("pp2", "kineto", "layer", rank=1, factor=1.55),
        g("dp2", "kineto", "beforemb", rank=1, ms=19),
        g("tp2", "kineto", "hostsleep", rank=1, ms=27, gpu_ms=85),
        g("pp2", "kineto", "laststage", last_layers=3),
    ]


FRESH18_SEED = 131


def fresh18_set(seed: int = FRESH18_SEED) -> list[Case]:
    """Held out before the thirtieth session's changes (``--set fresh18``, 4 ranks, seed 131, for
    CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): issue 13's
    4-process gloo classes and every 4-rank megatron-core layout under both captures with values
    no other set uses (slowdowns 1.32-1.7x, 22 ms before-microbatch work, 33 ms host sleeps, 75 ms
    on GPUs, 25 and 35 ms data sleeps, sigma 1.15), heavier last stages and healthy jobs. Ids end
    in ``-f18``."""
    g = _held_out_gpt(seed, "-f18", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=2, factor=1.45, tag="-f18"),
        _plain("ddp4", "dp4", seed, rank=1, sleep_ms=25, tag="-f18"),
        _plain("fsdp4", "dp4", seed, rank=0, sleep_ms=35, tag="-f18"),
        _plain("tp2dp2", "tp2dp2", seed, rank=1, factor=1.7, tag="-f18"),
        _plain("ddp4", "dp4", seed, tag="-f18"),
        # megatron-core, mapp capture
        g("pp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "layer", rank=1, factor=1.32),
        g("tp2pp2", "mapp-v1", "layer", rank=3, factor=1.6),
        g("pp2dp2", "mapp-v1", "beforemb", rank=2, ms=22),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=0, ms=33, gpu_ms=75),
        g("pp4", "mapp-v1", "seqlognorm", sigma=1.15),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=4),
        g("tp2pp2", "mapp-v1", "link", link=(0, 2)),
        # megatron-core, torch.profiler
        g("tp2pp2", "kineto", "healthy"),
        g("pp2dp2", "kineto", "layer", rank=3, factor=1.38),
        g("pp4", "kineto", "layer", rank=0, factor=1.55),
        g("tp2dp2", "kineto", "beforemb", rank=3, ms=22),
        g("pp2dp2", "kineto", "hostsleep", rank=1, ms=33, gpu_ms=75),
        g("dp4", "kineto", "seqlognorm", sigma=1.15),
        g("pp4", "kineto", "laststage", last_layers=3),
        g("pp4", "kineto", "link", link=(2, 3)),
    ]


FRESH19_SEED = 137
# --set fresh19: 20 traced iterations, where every other set traces 3-5 (a profiler schedule
# with a long active phase; issue 13's 2-GPU DDP trace held 20 all-reduces)
MAPP_WINDOW_LONG = ["--iterations", "22", "--trace", "--trace-interval", "1", "--trace-start", "2",
                    "--continuous-trace-iterations", "20"]
PROF_WINDOW_LONG = ["--iterations", "22", "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "20"]
JOB_WINDOW_LONG = ["--steps", "22", "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "20"]


def fresh19_set(seed: int = FRESH19_SEED) -> list[Case]:
    """Held out after the thirtieth session's changes (``--set fresh19``, 4 ranks, seed 137, for
    CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): 20 traced
    iterations a job, where every other set traces 3-5, of issue 13's own 4-process classes
    (plain DDP with 1.5x the forward's matmuls on one rank or a 20 ms data-path sleep, DP2 x TP2
    with one rank 1.6x, the heavier last stage of PP4) and megatron-core under both captures,
    healthy jobs among them. Ids end in ``-f19``."""
    g = _held_out_gpt(seed, "-f19", GPT_GPU_FRESH14, windows=(MAPP_WINDOW_LONG, PROF_WINDOW_LONG))

    def long(case: Case) -> Case:
        case.job_window = JOB_WINDOW_LONG
        return case

    return [
        long(_plain("ddp4", "dp4", seed, rank=1, factor=1.5, tag="-f19")),
        long(_plain("ddp4", "dp4", seed, rank=2, sleep_ms=20, tag="-f19")),
        long(_plain("ddp4", "dp4", seed, tag="-f19")),
        long(_plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.6, tag="-f19")),
        long(_plain("fsdp4", "dp4", seed, tag="-f19")),
        # megatron-core, mapp capture
        g("tp2dp2", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "layer", rank=2, factor=1.4),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=1, ms=20, gpu_ms=80),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2dp2", "mapp-v1", "link", link=(1, 3)),
        # megatron-core, torch.profiler
        g("pp2dp2", "kineto", "healthy"),
        g("tp2dp2", "kineto", "layer", rank=0, factor=1.5),
        g("pp4", "kineto", "beforemb", rank=2, ms=20),
        g("dp4", "kineto", "hostsleep", rank=3, ms=25, gpu_ms=80),
        g("pp4", "kineto", "laststage", last_layers=3),
        g("pp2dp2", "kineto", "seqlognorm", sigma=1.0),
    ]


FRESH20_SEED = 139


def fresh20_set(seed: int = FRESH20_SEED) -> list[Case]:
    """Held out before the thirty-first session's changes (``--set fresh20``, 4 ranks, seed 139, for
    CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): issue 13's
    4-process classes with a fault no other set injects (plain DDP and FSDP2 with a host sleep in
    the training loop before each step, outside the data loader: "one rank stalling ~20 ms per step
    on the host before its step"), data-path sleeps and more forward work with values no other set
    uses, and megatron-core under both captures, healthy jobs among them. Ids end in ``-f20``."""
    g = _held_out_gpt(seed, "-f20", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=3, step_sleep_ms=21, tag="-f20"),
        _plain("fsdp4", "dp4", seed, rank=1, step_sleep_ms=30, tag="-f20"),
        _plain("ddp4", "dp4", seed, rank=0, sleep_ms=23, tag="-f20"),
        _plain("ddp4", "dp4", seed, rank=2, factor=1.55, tag="-f20"),
        _plain("tp2dp2", "tp2dp2", seed, rank=2, factor=1.65, tag="-f20"),
        _plain("ddp4", "dp4", seed, tag="-f20"),
        _plain("fsdp4", "dp4", seed, tag="-f20"),
        # megatron-core, mapp capture
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.48),
        g("dp4", "mapp-v1", "beforemb", rank=0, ms=23),
        g("pp4", "mapp-v1", "hostsleep", rank=1, ms=24, gpu_ms=70),
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.1),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        # megatron-core, torch.profiler
        g("dp4", "kineto", "healthy"),
        g("tp2pp2", "kineto", "layer", rank=1, factor=1.46),
        g("pp2dp2", "kineto", "hostsleep", rank=2, ms=22, gpu_ms=70),
        g("tp2dp2", "kineto", "beforemb", rank=0, ms=24),
        g("pp2dp2", "kineto", "seqlognorm", sigma=1.05),
        g("tp2pp2", "kineto", "link", link=(1, 3)),
    ]


FRESH21_SEED = 149


def fresh21_set(seed: int = FRESH21_SEED) -> list[Case]:
    """Held out during the thirty-first session (``--set fresh21``, 4 ranks, seed 149, for CPUs
    and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): where the
    detector was weakest on shared CPUs, megatron-core under mapp's capture (layer faults of
    1.35-1.5x in every 4-rank layout, the last stage's host sleep and work before each
    microbatch, heavier last stages and healthy jobs), with the last stage's faults and
    imbalance under the profiler too, and issue 13's plain DDP with a sleep before each step.
    Ids end in ``-f21``."""
    g = _held_out_gpt(seed, "-f21", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=1, step_sleep_ms=18, tag="-f21"),
        _plain("ddp4", "dp4", seed, tag="-f21"),
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "layer", rank=1, factor=1.35),
        g("pp2dp2", "mapp-v1", "layer", rank=3, factor=1.4),
        g("tp2pp2", "mapp-v1", "layer", rank=0, factor=1.45),
        g("pp4", "mapp-v1", "layer", rank=2, factor=1.5),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=21, gpu_ms=70),
        g("pp4", "mapp-v1", "beforemb", rank=3, ms=21),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=4),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.2),
        # megatron-core, torch.profiler
        g("pp2dp2", "kineto", "laststage", last_layers=3),
        g("pp2dp2", "kineto", "hostsleep", rank=3, ms=26, gpu_ms=70),
        g("dp4", "kineto", "layer", rank=3, factor=1.4),
    ]


FRESH22_SEED = 151


def fresh22_set(seed: int = FRESH22_SEED) -> list[Case]:
    """Held out during the thirty-first session (``--set fresh22``, 2 ranks, seed 151, for CPUs
    and for a machine of 2 GPUs, on which the GPU model shape is ``fresh12``'s): megatron-core
    DP2, TP2, PP2 under mapp's capture (layer faults of 1.35-1.5x on either stage, the last
    stage's host sleep and work before each microbatch, a heavier last stage, healthy jobs),
    under the profiler too, and issue 13's plain DDP with a sleep before each step. 5
    iterations, 3 recorded. Ids end in ``-f22``."""
    g = _held_out_gpt(seed, "-f22", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=0, step_sleep_ms=24, tag="-f22"),
        _plain("fsdp2", "dp2", seed, tag="-f22"),
        # megatron-core, mapp capture
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.38),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.4),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.5),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.35),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=22, gpu_ms=70),
        g("pp2", "mapp-v1", "beforemb", rank=1, ms=21),
        g("dp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        g("dp2", "mapp-v1", "seqlognorm", sigma=1.1),
        # megatron-core, torch.profiler
        g("pp2", "kineto", "laststage", last_layers=4),
        g("dp2", "kineto", "layer", rank=0, factor=1.45),
    ]


FRESH23_SEED = 157


def fresh23_set(seed: int = FRESH23_SEED) -> list[Case]:
    """Held out after the thirty-first session's changes (``--set fresh23``, 4 ranks, seed 157,
    for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): issue
    13's 4-process classes (plain DDP with more forward work, a sleep before each step or in the
    data path, FSDP2, DP2 x TP2 from process groups) and megatron-core under both captures
    (layer faults on every stage position, host sleeps and work before each microbatch, heavier
    last stages, lognormal lengths, healthy jobs), with values no other set uses. Ids end in
    ``-f23``."""
    g = _held_out_gpt(seed, "-f23", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=0, factor=1.6, tag="-f23"),
        _plain("ddp4", "dp4", seed, rank=2, step_sleep_ms=23, tag="-f23"),
        _plain("fsdp4", "dp4", seed, rank=3, sleep_ms=32, tag="-f23"),
        _plain("tp2dp2", "tp2dp2", seed, rank=0, factor=1.75, tag="-f23"),
        _plain("fsdp4", "dp4", seed, tag="-f23"),
        _plain("tp2dp2", "tp2dp2", seed, tag="-f23"),
        # megatron-core, mapp capture
        g("pp4", "mapp-v1", "layer", rank=1, factor=1.55),
        g("pp2dp2", "mapp-v1", "layer", rank=0, factor=1.6),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=2, ms=26, gpu_ms=70),
        g("pp2dp2", "mapp-v1", "beforemb", rank=3, ms=19),
        g("pp4", "mapp-v1", "laststage", last_layers=4),
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.05),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        g("tp2dp2", "kineto", "healthy"),
        g("pp4", "kineto", "layer", rank=2, factor=1.45),
        g("dp4", "kineto", "beforemb", rank=1, ms=21),
        g("tp2pp2", "kineto", "hostsleep", rank=3, ms=24, gpu_ms=70),
        g("pp2dp2", "kineto", "laststage", last_layers=4),
        g("dp4", "kineto", "seqlognorm", sigma=1.25),
    ]


FRESH24_SEED = 163


def fresh24_set(seed: int = FRESH24_SEED) -> list[Case]:
    """Held out after the thirty-first session's changes (``--set fresh24``, 2 ranks, seed 163,
    for CPUs and for a machine of 2 GPUs, on which the GPU model shape is ``fresh12``'s): issue
    13's 2-rank classes and megatron-core DP2, TP2, PP2 under both captures with values no other
    set uses, healthy and imbalanced jobs among them. 5 iterations, 3 recorded. Ids end in ``-f24``."""
    g = _held_out_gpt(seed, "-f24", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=1, factor=1.5, tag="-f24"),
        _plain("ddp2", "dp2", seed, rank=1, step_sleep_ms=26, tag="-f24"),
        _plain("ddp2", "dp2", seed, tag="-f24"),
        _plain("fsdp2", "dp2", seed, rank=0, sleep_ms=31, tag="-f24"),
        # megatron-core, mapp capture
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.55),
        g("pp2", "mapp-v1", "hostsleep", rank=0, ms=25, gpu_ms=70),
        g("dp2", "mapp-v1", "beforemb", rank=0, ms=22),
        g("pp2", "mapp-v1", "laststage", last_layers=4),
        g("dp2", "mapp-v1", "seqlognorm", sigma=1.2),
        g("pp2", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        g("dp2", "kineto", "healthy"),
        g("tp2", "kineto", "layer", rank=0, factor=1.6),
        g("pp2", "kineto", "hostsleep", rank=1, ms=24, gpu_ms=70),
        g("dp2", "kineto", "seqlognorm", sigma=1.2),
        g("pp2", "kineto", "layer", rank=0, factor=1.45),
    ]


FRESH25_SEED = 167


def fresh25_set(seed: int = FRESH25_SEED) -> list[Case]:
    """Held out at the start of the thirty-second session (``--set fresh25``, 4 ranks, seed 167,
    for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): issue
    13's 4-process classes and megatron-core under both captures in every 4-rank layout (layer
    faults on every position, host sleeps, work before each microbatch, a loaded pipeline link,
    heavier last stages, lognormal lengths, healthy jobs), with values no other set uses. Ids
    end in ``-f25``."""
    g = _held_out_gpt(seed, "-f25", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=3, factor=1.45, tag="-f25"),
        _plain("fsdp4", "dp4", seed, rank=1, step_sleep_ms=20, tag="-f25"),
        _plain("ddp4", "dp4", seed, rank=2, sleep_ms=28, tag="-f25"),
        _plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.5, tag="-f25"),
        _plain("ddp4", "dp4", seed, tag="-f25"),
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "layer", rank=2, factor=1.45),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.5),
        g("tp2pp2", "mapp-v1", "layer", rank=3, factor=1.4),
        g("pp4", "mapp-v1", "layer", rank=0, factor=1.45),
        g("tp2dp2", "mapp-v1", "layer", rank=1, factor=1.5),
        g("pp4", "mapp-v1", "hostsleep", rank=2, ms=22, gpu_ms=70),
        g("tp2pp2", "mapp-v1", "beforemb", rank=1, ms=20),
        g("pp2dp2", "mapp-v1", "link", link=(1, 3)),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.15),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        g("pp4", "kineto", "healthy"),
        g("tp2pp2", "kineto", "layer", rank=2, factor=1.5),
        g("pp2dp2", "kineto", "layer", rank=0, factor=1.4),
        g("dp4", "kineto", "hostsleep", rank=0, ms=25, gpu_ms=70),
        g("pp4", "kineto", "link", link=(1, 2)),
        g("tp2pp2", "kineto", "seqlognorm", sigma=1.1),
    ]


FRESH26_SEED = 173


def fresh26_set(seed: int = FRESH26_SEED) -> list[Case]:
    """Held out at the start of the thirty-second session (``--set fresh26``, 2 ranks, seed 173,
    for CPUs and for a machine of 2 GPUs, on which the GPU model shape is ``fresh12``'s): issue
    13's 2-rank classes (plain DDP / FSDP2 with more forward work, sleeps before each step or in
    the data path) and megatron-core DP2, TP2, PP2 under both captures (layer faults on either
    rank, host sleeps, work before each microbatch, heavier last stages, lognormal lengths,
    healthy jobs), with values no other set uses. 5 iterations, 3 recorded. Ids end in ``-f26``."""
    g = _held_out_gpt(seed, "-f26", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=0, factor=1.4, tag="-f26"),
        _plain("fsdp2", "dp2", seed, rank=1, step_sleep_ms=22, tag="-f26"),
        _plain("ddp2", "dp2", seed, rank=1, sleep_ms=27, tag="-f26"),
        _plain("fsdp2", "dp2", seed, tag="-f26"),
        # megatron-core, mapp capture
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.45),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.5),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.55),
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=19),
        g("dp2", "mapp-v1", "hostsleep", rank=1, ms=24, gpu_ms=70),
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        # megatron-core, torch.profiler
        g("tp2", "kineto", "healthy"),
        g("pp2", "kineto", "healthy"),
        g("tp2", "kineto", "layer", rank=1, factor=1.4),
        g("dp2", "kineto", "beforemb", rank=0, ms=20),
        g("pp2", "kineto", "laststage", last_layers=3),
        g("tp2", "kineto", "seqlognorm", sigma=1.15),
    ]


FRESH27_SEED = 179
# --set fresh27 (GPUs only): a fifteenth model shape (hidden 3072, 24 heads, sequence 1536, 2
# sequences a microbatch, 6 microbatches)
GPT_GPU_FRESH27 = ["--layers", "8", "--hidden", "3072", "--heads", "24", "--seq", "1536", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]
GPU_ONLY_SETS = ("fresh27", "fresh45", "fresh46", "fresh47", "fresh48", "fresh49", "fresh50", "fresh53")


def fresh27_set(seed: int = FRESH27_SEED) -> list[Case]:
    """Held out during the thirty-second session (``--set fresh27``, 2 ranks, seed 179, for a
    machine of 2 GPUs only): a slow GPU no set had, a neighbour sharing it (``--slow-mode
    gpu-hog``: another process keeps the rank's GPU busy part of the time, so every kernel of the
    rank, NCCL's too, may wait), under both captures in DP2, TP2 and PP2, beside healthy jobs, a
    layer fault and lognormal lengths of a fifteenth model shape. 5 iterations, 3 recorded. Ids
    end in ``-f27``."""
    g = _held_out_gpt(seed, "-f27", GPT_GPU_FRESH27, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        # one H200 alone (``train_gpt.py``, this shape, 1 rank): duty 0.3 made its steps 1.64x
        # (422 -> 693 ms), 0.6 2.18x: the time-slicing costs more than the duty
        g("tp2", "mapp-v1", "gpuhog", rank=1, duty=0.15),
        g("tp2", "kineto", "gpuhog", rank=0, duty=0.1),
        g("dp2", "mapp-v1", "gpuhog", rank=0, duty=0.2),
        g("dp2", "kineto", "gpuhog", rank=1, duty=0.15),
        g("pp2", "mapp-v1", "gpuhog", rank=0, duty=0.1),
        g("pp2", "kineto", "gpuhog", rank=1, duty=0.2),
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "kineto", "healthy"),
        g("pp2", "mapp-v1", "healthy"),
        g("tp2", "kineto", "layer", rank=1, factor=1.3),
        g("dp2", "mapp-v1", "seqlognorm", sigma=1.0),
    ]


def _bursty(case: Case, sigma: float = 1.0) -> Case:
    """A ``gpuhog`` case whose neighbour bursts irregularly (``--slow-jitter``: each burst's length
    and the wait to the next vary, as requests to a neighbour serving a model would)."""
    case.id = case.id.replace("gpuhog", "gpuhogbursty", 1)
    case.gpu_args += ["--slow-jitter", f"{sigma:g}"]
    case.injected[0]["jitter_sigma"] = sigma
    case.injected[0]["how"] += f" in bursts of irregular length and spacing (each x exp({sigma:g} N(0, 1)))"
    return case


FRESH45_SEED = 277


def fresh45_set(seed: int = FRESH45_SEED) -> list[Case]:
    """Held out after the thirty-seventh session's change (``--set fresh45``, 2 ranks, seed 277,
    for a machine of 2 GPUs only): neighbours on one rank's GPU with other duties, ranks and
    captures than ``fresh27``'s, some bursting irregularly (``--slow-jitter``: each burst's
    length and the wait to the next vary, as requests to a neighbour serving a model would), in
    another model shape (``fresh12``'s), beside healthy jobs, a longer-sequence replica and a
    layer fault. 5 iterations, 3 recorded. Ids end in ``-f45``."""
    g = _held_out_gpt(seed, "-f45", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        g("tp2", "mapp-v1", "gpuhog", rank=0, duty=0.25),
        g("dp2", "mapp-v1", "gpuhog", rank=1, duty=0.12),
        g("dp2", "kineto", "gpuhog", rank=0, duty=0.25),
        g("tp2", "kineto", "gpuhog", rank=1, duty=0.25),
        _bursty(g("tp2", "mapp-v1", "gpuhog", rank=1, duty=0.2)),
        _bursty(g("dp2", "mapp-v1", "gpuhog", rank=0, duty=0.2)),
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "healthy"),
        g("tp2", "kineto", "healthy"),
        g("tp2", "mapp-v1", "seqlognorm", sigma=0.8),
        g("dp2", "kineto", "layer", rank=1, factor=1.25),
    ]

FRESH46_SEED = 283


def fresh46_set(seed: int = FRESH46_SEED) -> list[Case]:
    """Made in the thirty-eighth session to study neighbours that burst (``--set fresh46``, 2
    ranks, seed 283, for a machine of 2 GPUs only): six bursty neighbours of other duties, spreads
    (``--slow-jitter`` 0.6-1.4), ranks and captures than ``fresh45``'s, one regular one, beside
    what slows whole microbatches or the same ops without a fault (healthy jobs, a replica of
    lognormal lengths) and a layer fault, in a sixteenth model shape (``fresh9``'s). 5 iterations,
    3 recorded. Ids end in ``-f46``."""
    g = _held_out_gpt(seed, "-f46", GPT_GPU_FRESH9, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))
    b = _bursty

    return [
        b(g("tp2", "mapp-v1", "gpuhog", rank=0, duty=0.2), 1.0),
        b(g("tp2", "mapp-v1", "gpuhog", rank=1, duty=0.3), 0.6),
        b(g("dp2", "mapp-v1", "gpuhog", rank=1, duty=0.25), 1.0),
        b(g("dp2", "mapp-v1", "gpuhog", rank=0, duty=0.15), 1.4),
        b(g("dp2", "kineto", "gpuhog", rank=1, duty=0.25), 1.0),
        b(g("tp2", "kineto", "gpuhog", rank=0, duty=0.3), 1.0),
        g("tp2", "mapp-v1", "gpuhog", rank=1, duty=0.2),
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "healthy"),
        g("dp2", "kineto", "healthy"),
        g("dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.2),
    ]

FRESH47_SEED = 293


def fresh47_set(seed: int = FRESH47_SEED) -> list[Case]:
    """Held out from the thirty-eighth session's work on bursty neighbours (``--set fresh47``, 2
    ranks, seed 293, for a machine of 2 GPUs only; made before that work and scored only after
    it was committed): bursty neighbours of other duties and spreads on both ranks, both
    captures, TP2 and DP2, beside healthy jobs, lognormal lengths and a layer fault, in another
    model shape (``fresh7``'s). 5 iterations, 3 recorded. Ids end in ``-f47``."""
    g = _held_out_gpt(seed, "-f47", GPT_GPU_FRESH7, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))
    b = _bursty

    return [
        b(g("tp2", "mapp-v1", "gpuhog", rank=1, duty=0.25), 0.8),
        b(g("dp2", "mapp-v1", "gpuhog", rank=0, duty=0.3), 1.2),
        b(g("tp2", "mapp-v1", "gpuhog", rank=0, duty=0.15), 1.0),
        b(g("dp2", "kineto", "gpuhog", rank=0, duty=0.2), 0.8),
        b(g("tp2", "kineto", "gpuhog", rank=1, duty=0.25), 1.2),
        g("dp2", "mapp-v1", "gpuhog", rank=1, duty=0.2),
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "healthy"),
        g("tp2", "kineto", "healthy"),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.8),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.25),
    ]


FRESH48_SEED = 307


def fresh48_set(seed: int = FRESH48_SEED) -> list[Case]:
    """Held out from the thirty-eighth session's rule for neighbours that NVML sees (``--set
    fresh48``, 2 ranks, seed 307, for a machine of 2 GPUs only; made in the thirty-ninth session
    and scored before any change): mapp's capture only (it alone records NVML's process
    samples), neighbours bursty and regular on both ranks in TP2, DP2 and PP2 (no set had a
    bursty PP2 neighbour), beside healthy jobs of each layout, lognormal lengths and a layer
    fault, in another model shape (``fresh10``'s). 5 iterations, 3 recorded. Ids end in
    ``-f48``."""
    g = _held_out_gpt(seed, "-f48", GPT_GPU_FRESH10, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))
    b = _bursty

    return [
        b(g("tp2", "mapp-v1", "gpuhog", rank=0, duty=0.2), 1.0),
        b(g("dp2", "mapp-v1", "gpuhog", rank=1, duty=0.25), 0.8),
        b(g("pp2", "mapp-v1", "gpuhog", rank=1, duty=0.2), 1.0),
        b(g("pp2", "mapp-v1", "gpuhog", rank=0, duty=0.3), 1.2),
        g("pp2", "mapp-v1", "gpuhog", rank=0, duty=0.15),
        g("tp2", "mapp-v1", "gpuhog", rank=1, duty=0.15),
        g("dp2", "mapp-v1", "gpuhog", rank=0, duty=0.1),
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.3),
    ]


FRESH49_SEED = 311


def fresh49_set(seed: int = FRESH49_SEED) -> list[Case]:
    """Held out from the thirty-ninth session's rule for a neighbour seen on a pipeline stage's
    GPU (``--set fresh49``, 2 ranks, seed 311, for a machine of 2 GPUs only; made before that
    rule was committed and scored only after): mapp's capture, PP2 neighbours bursty and
    regular on both stages, beside what a per-stage rule could mistake for one (a healthy
    pipeline, a heavier last stage, lognormal lengths, a layer fault), and TP2/DP2 neighbours, in
    another model shape (``fresh6``'s, whose large vocabulary weighs the last stage). 5
    iterations, 3 recorded. Ids end in ``-f49``."""
    g = _held_out_gpt(seed, "-f49", GPT_GPU_FRESH6, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))
    b = _bursty

    return [
        b(g("pp2", "mapp-v1", "gpuhog", rank=0, duty=0.25), 1.0),
        b(g("pp2", "mapp-v1", "gpuhog", rank=1, duty=0.15), 0.8),
        b(g("pp2", "mapp-v1", "gpuhog", rank=1, duty=0.3), 1.2),
        g("pp2", "mapp-v1", "gpuhog", rank=1, duty=0.2),
        g("pp2", "mapp-v1", "gpuhog", rank=0, duty=0.1),
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage"),
        g("pp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.25),
        b(g("tp2", "mapp-v1", "gpuhog", rank=1, duty=0.2), 1.0),
        b(g("dp2", "mapp-v1", "gpuhog", rank=0, duty=0.2), 1.0),
        g("dp2", "mapp-v1", "healthy"),
    ]


FRESH50_SEED = 313


def fresh50_set(seed: int = FRESH50_SEED) -> list[Case]:
    """Held out from the thirty-ninth session's rules for neighbours on a pipeline stage's GPU
    (``--set fresh50``, 2 ranks, seed 313, for a machine of 2 GPUs only; scored only after they
    were committed): PP2 neighbours bursty and regular on both stages under the profiler (no
    NVML samples: placement alone) and under mapp's capture, beside healthy pipelines, a heavier
    last stage and lognormal lengths, in another model shape (``fresh8``'s). 5 iterations, 3
    recorded. Ids end in ``-f50``."""
    g = _held_out_gpt(seed, "-f50", GPT_GPU_FRESH8, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))
    b = _bursty

    return [
        g("pp2", "kineto", "gpuhog", rank=0, duty=0.2),
        b(g("pp2", "kineto", "gpuhog", rank=1, duty=0.25), 1.0),
        g("pp2", "kineto", "healthy"),
        g("pp2", "kineto", "laststage"),
        b(g("pp2", "mapp-v1", "gpuhog", rank=0, duty=0.2), 0.8),
        g("pp2", "mapp-v1", "gpuhog", rank=1, duty=0.15),
        b(g("pp2", "mapp-v1", "gpuhog", rank=1, duty=0.3), 1.0),
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "seqlognorm", sigma=0.8),
        g("pp2", "mapp-v1", "laststage"),
    ]


FRESH51_SEED = 317
# --set fresh51 on GPUs: a seventeenth model shape (hidden 3840, 30 heads, sequence 1280, 3
# sequences a microbatch, 5 microbatches)
GPT_GPU_FRESH51 = ["--layers", "8", "--hidden", "3840", "--heads", "30", "--seq", "1280", "--vocab", "50304",
                   "--micro-batch-size", "3", "--num-microbatches", "5", "--bf16"]


def fresh51_set(seed: int = FRESH51_SEED) -> list[Case]:
    """Held out at the start of the fortieth session, before any change (``--set fresh51``, 2
    ranks, seed 317, for CPUs and for a machine of 2 GPUs, on which the model shape is a
    seventeenth): issue 13's classes again rather than the neighbours the last sessions studied --
    plain DDP under the profiler (extra forward matmuls, a data-path sleep), megatron-core's
    victim that looks slow (work before each microbatch in TP2), layer faults and host sleeps in
    DP2, TP2 and PP2 under both captures, healthy jobs, a heavier last stage and lognormal
    lengths, with values no other set uses. 5 iterations, 3 recorded. Ids end in ``-f51``."""
    g = _held_out_gpt(seed, "-f51", GPT_GPU_FRESH51, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=0, factor=1.4, tag="-f51"),
        _plain("ddp2", "dp2", seed, rank=1, sleep_ms=27, tag="-f51"),
        _plain("ddp2", "dp2", seed, tag="-f51"),
        # megatron-core, mapp capture
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=19),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.3),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.35),
        g("dp2", "mapp-v1", "hostsleep", rank=1, ms=24, gpu_ms=65),
        g("tp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "seqlognorm", sigma=0.95),
        # megatron-core, torch.profiler
        g("tp2", "kineto", "beforemb", rank=0, ms=21),
        g("tp2", "kineto", "layer", rank=1, factor=1.35),
        g("pp2", "kineto", "layer", rank=0, factor=1.4),
        g("pp2", "kineto", "hostsleep", rank=1, ms=22, gpu_ms=75),
        g("dp2", "kineto", "healthy"),
        g("pp2", "kineto", "laststage", last_layers=3),
        g("dp2", "kineto", "seqlognorm", sigma=1.05),
    ]


FRESH52_SEED = 331


def fresh52_set(seed: int = FRESH52_SEED) -> list[Case]:
    """Held out at the start of the fortieth session, before any change (``--set fresh52``, 4
    ranks, seed 331, for CPUs: 4 gloo processes on 2 cores, as issue 13's jobs were; a machine of
    4 GPUs runs it in ``fresh14``'s shape): issue 13's 4-process classes with values no other set
    uses -- plain DDP and DP2 x TP2 under the profiler (extra forward matmuls, a data-path sleep,
    healthy), megatron-core TP2 x DP2, PP2 x DP2 and TP2 x PP2 under both captures (layer faults,
    work before each microbatch, host sleeps, healthy jobs, a heavier last stage, lognormal
    lengths). Ids end in ``-f52``."""
    g = _held_out_gpt(seed, "-f52", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=2, factor=1.45, tag="-f52"),
        _plain("ddp4", "dp4", seed, rank=0, sleep_ms=26, tag="-f52"),
        _plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.7, tag="-f52"),
        _plain("ddp4", "dp4", seed, tag="-f52"),
        # megatron-core, mapp capture
        g("tp2dp2", "mapp-v1", "layer", rank=0, factor=1.45),
        g("pp2dp2", "mapp-v1", "layer", rank=3, factor=1.4),
        g("tp2dp2", "mapp-v1", "beforemb", rank=1, ms=22),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=2, ms=24, gpu_ms=70),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.85),
        # megatron-core, torch.profiler
        g("tp2dp2", "kineto", "layer", rank=3, factor=1.5),
        g("pp2dp2", "kineto", "beforemb", rank=0, ms=21),
        g("tp2dp2", "kineto", "healthy"),
        g("pp2dp2", "kineto", "laststage", last_layers=3),
    ]


FRESH53_SEED = 337


def fresh53_set(seed: int = FRESH53_SEED) -> list[Case]:
    """Held out from the fortieth session's rule for a neighbour NVML sees that slows most
    steps, not all (``--set fresh53``, 2 ranks, seed 337, for a machine of 2 GPUs only; made
    before the rule and scored after): mapp's capture, neighbours of small duties that burst
    irregularly (the kind that skips a step) on both ranks of TP2 and DP2, beside healthy jobs,
    lognormal lengths and a layer fault of each layout, in ``fresh51``'s model shape. 5
    iterations, 3 recorded. Ids end in ``-f53``."""
    g = _held_out_gpt(seed, "-f53", GPT_GPU_FRESH51, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))
    b = _bursty

    return [
        b(g("dp2", "mapp-v1", "gpuhog", rank=1, duty=0.15), 1.3),
        b(g("dp2", "mapp-v1", "gpuhog", rank=0, duty=0.12), 1.4),
        b(g("tp2", "mapp-v1", "gpuhog", rank=0, duty=0.18), 1.2),
        b(g("tp2", "mapp-v1", "gpuhog", rank=1, duty=0.12), 1.4),
        b(g("dp2", "mapp-v1", "gpuhog", rank=0, duty=0.2), 1.3),
        b(g("tp2", "mapp-v1", "gpuhog", rank=1, duty=0.15), 1.1),
        g("dp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "seqlognorm", sigma=1.1),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.3),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.35),
    ]


FRESH54_SEED = 347
# --set fresh54 on GPUs: an eighteenth model shape (hidden 4352, 34 heads, sequence 1152, 2
# sequences a microbatch, 6 microbatches)
GPT_GPU_FRESH54 = ["--layers", "8", "--hidden", "4352", "--heads", "34", "--seq", "1152", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]


def fresh54_set(seed: int = FRESH54_SEED) -> list[Case]:
    """Held out at the start of the forty-first session, before any change (``--set fresh54``, 2
    ranks, seed 347, for CPUs and for a machine of 2 GPUs, on which the model shape is an
    eighteenth): issue 13's classes with values no other set uses -- plain DDP and FSDP2 under the
    profiler (extra forward matmuls, a data-path sleep, a sleep before each step, healthy),
    layer faults, work before each microbatch, host sleeps and a heavier pipeline link in DP2,
    TP2 and PP2 under both captures, healthy jobs, a heavier last stage and lognormal lengths of
    three sigmas. 5 iterations, 3 recorded. Ids end in ``-f54``."""
    g = _held_out_gpt(seed, "-f54", GPT_GPU_FRESH54, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=1, factor=1.3, tag="-f54"),
        _plain("fsdp2", "dp2", seed, rank=0, sleep_ms=23, tag="-f54"),
        _plain("ddp2", "dp2", seed, rank=1, step_sleep_ms=19, tag="-f54"),
        _plain("fsdp2", "dp2", seed, tag="-f54"),
        # megatron-core, mapp capture
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.25),
        g("dp2", "mapp-v1", "beforemb", rank=1, ms=17),
        g("pp2", "mapp-v1", "hostsleep", rank=0, ms=21, gpu_ms=60),
        g("pp2", "mapp-v1", "link", link=(0, 1)),
        g("dp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage", last_layers=4),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        # megatron-core, torch.profiler
        g("dp2", "kineto", "layer", rank=1, factor=1.3),
        g("tp2", "kineto", "hostsleep", rank=0, ms=23, gpu_ms=70),
        g("pp2", "kineto", "beforemb", rank=1, ms=18),
        g("tp2", "kineto", "healthy"),
        g("pp2", "kineto", "seqlognorm", sigma=1.15),
        g("tp2", "kineto", "seqlognorm", sigma=0.75),
    ]


FRESH55_SEED = 349


def fresh55_set(seed: int = FRESH55_SEED) -> list[Case]:
    """Held out at the start of the forty-first session, before any change (``--set fresh55``, 4
    ranks, seed 349, for CPUs: 4 gloo processes on 2 cores, as issue 13's jobs were; a machine of
    4 GPUs runs it in ``fresh14``'s shape): plain DDP, FSDP2 and DP2 x TP2 under the profiler,
    megatron-core TP2 x DP2, PP2 x DP2 and TP2 x PP2 under both captures (layer faults, work before
    each microbatch, host sleeps, a heavier pipeline link, healthy jobs, a heavier last stage,
    lognormal lengths), with values no other set uses. Ids end in ``-f55``."""
    g = _held_out_gpt(seed, "-f55", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=3, factor=1.55, tag="-f55"),
        _plain("fsdp4", "dp4", seed, rank=1, sleep_ms=22, tag="-f55"),
        _plain("tp2dp2", "tp2dp2", seed, rank=0, factor=1.6, tag="-f55"),
        _plain("fsdp4", "dp4", seed, tag="-f55"),
        # megatron-core, mapp capture
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.35),
        g("tp2pp2", "mapp-v1", "beforemb", rank=3, ms=19),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=2, ms=23),
        g("pp2dp2", "mapp-v1", "link", link=(1, 3)),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=4),
        # megatron-core, torch.profiler
        g("tp2dp2", "kineto", "beforemb", rank=2, ms=20),
        g("pp2dp2", "kineto", "layer", rank=0, factor=1.45),
        g("pp2dp2", "kineto", "healthy"),
        g("tp2dp2", "kineto", "seqlognorm", sigma=0.95),
    ]


FRESH56_SEED = 353
# --set fresh56 on GPUs: a nineteenth model shape (hidden 3456, 36 heads, sequence 1408, 2
# sequences a microbatch, 6 microbatches)
GPT_GPU_FRESH56 = ["--layers", "8", "--hidden", "3456", "--heads", "36", "--seq", "1408", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]


def fresh56_set(seed: int = FRESH56_SEED) -> list[Case]:
    """Held out at the start of the forty-second session, before any change (``--set fresh56``, 2
    ranks, seed 353, for CPUs and for a machine of 2 GPUs, on which the model shape is a
    nineteenth): issue 13's classes with values no other set uses, weighted to torch.profiler
    jobs (which are also scored without input shapes) -- plain DDP and FSDP2 (extra forward
    matmuls, a data-path sleep, a sleep before each step, healthy), megatron-core layer faults,
    work before each microbatch, host sleeps, a heavier pipeline link, healthy jobs, a heavier
    last stage and lognormal lengths in DP2, TP2 and PP2. 5 iterations, 3 recorded. Ids end in
    ``-f56``."""
    g = _held_out_gpt(seed, "-f56", GPT_GPU_FRESH56, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=0, factor=1.35, tag="-f56"),
        _plain("fsdp2", "dp2", seed, rank=1, sleep_ms=26, tag="-f56"),
        _plain("ddp2", "dp2", seed, tag="-f56"),
        _plain("fsdp2", "dp2", seed, rank=0, step_sleep_ms=21, tag="-f56"),
        # megatron-core, mapp capture
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.2),
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=16),
        g("pp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "seqlognorm", sigma=1.05),
        # megatron-core, torch.profiler
        g("dp2", "kineto", "layer", rank=0, factor=1.25),
        g("pp2", "kineto", "layer", rank=1, factor=1.4),
        g("tp2", "kineto", "beforemb", rank=0, ms=15),
        g("dp2", "kineto", "hostsleep", rank=1, ms=24, gpu_ms=65),
        g("pp2", "kineto", "link", link=(0, 1)),
        g("dp2", "kineto", "healthy"),
        g("pp2", "kineto", "healthy"),
        g("dp2", "kineto", "seqlognorm", sigma=0.95),
        g("pp2", "kineto", "laststage", last_layers=3),
    ]


FRESH57_SEED = 359


def fresh57_set(seed: int = FRESH57_SEED) -> list[Case]:
    """Held out at the start of the forty-second session, before any change (``--set fresh57``, 4
    ranks, seed 359, for CPUs: 4 gloo processes on 2 cores; a machine of 4 GPUs runs it in
    ``fresh14``'s shape): plain DDP, FSDP2 and DP2 x TP2 under the profiler, megatron-core TP2 x
    DP2, PP2 x DP2 and TP2 x PP2 under both captures, weighted to the profiler, with values no
    other set uses. Ids end in ``-f57``."""
    g = _held_out_gpt(seed, "-f57", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=2, factor=1.45, tag="-f57"),
        _plain("fsdp4", "dp4", seed, rank=3, sleep_ms=24, tag="-f57"),
        _plain("tp2dp2", "tp2dp2", seed, rank=1, factor=1.7, tag="-f57"),
        _plain("ddp4", "dp4", seed, tag="-f57"),
        # megatron-core, mapp capture
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.4),
        g("pp2dp2", "mapp-v1", "beforemb", rank=0, ms=18),
        g("tp2pp2", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        g("pp2dp2", "kineto", "beforemb", rank=3, ms=21),
        g("tp2pp2", "kineto", "layer", rank=2, factor=1.5),
        g("tp2dp2", "kineto", "hostsleep", rank=1, ms=22),
        g("pp2dp2", "kineto", "link", link=(0, 2)),
        g("tp2dp2", "kineto", "healthy"),
        g("pp2dp2", "kineto", "seqlognorm", sigma=1.0),
        g("tp2pp2", "kineto", "laststage", last_layers=4),
    ]


FRESH58_SEED = 367
# --set fresh58 on GPUs: a twentieth model shape (hidden 2688, 42 heads, sequence 1664, 2
# sequences a microbatch, 5 microbatches)
GPT_GPU_FRESH58 = ["--layers", "8", "--hidden", "2688", "--heads", "42", "--seq", "1664", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "5", "--bf16"]


def fresh58_set(seed: int = FRESH58_SEED) -> list[Case]:
    """Held out at the start of the forty-third session, before any change (``--set fresh58``, 2
    ranks, seed 367, for CPUs and for a machine of 2 GPUs, on which the model shape is a
    twentieth): issue 13's classes with values no other set uses, the profiler jobs recorded as
    users record them as well as with shapes -- with the profiler's defaults (no shapes: ids
    ``-prof-nosh-``) and as PyTorch's tutorial calls it (shapes, memory and Python stacks:
    ``-prof-stk-``), kept whole as written. Plain DDP and FSDP2, megatron-core layer faults,
    work before each microbatch, host sleeps, healthy jobs, a heavier last stage and lognormal
    lengths in DP2, TP2 and PP2. 5 iterations, 3 recorded. Ids end in ``-f58``."""
    g = _held_out_gpt(seed, "-f58", GPT_GPU_FRESH58, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))
    r = _recorded

    return [
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.5, tag="-f58"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, sleep_ms=22, tag="-f58"), "tutorial"),
        r(_plain("ddp2", "dp2", seed, tag="-f58"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, step_sleep_ms=19, tag="-f58"), "tutorial"),
        _plain("fsdp2", "dp2", seed, rank=1, factor=1.3, tag="-f58"),
        # megatron-core, mapp capture
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.3),
        g("tp2", "mapp-v1", "hostsleep", rank=0, ms=20, gpu_ms=60),
        g("pp2", "mapp-v1", "seqlognorm", sigma=0.9),
        # megatron-core, torch.profiler
        r(g("dp2", "kineto", "layer", rank=1, factor=1.35), "default"),
        r(g("tp2", "kineto", "beforemb", rank=1, ms=17), "default"),
        r(g("tp2", "kineto", "layer", rank=0, factor=1.3), "tutorial"),
        r(g("pp2", "kineto", "hostsleep", rank=1, ms=23, gpu_ms=62), "default"),
        r(g("dp2", "kineto", "healthy"), "tutorial"),
        r(g("tp2", "kineto", "healthy"), "default"),
        r(g("tp2", "kineto", "seqlognorm", sigma=1.0), "default"),
        g("dp2", "kineto", "seqlognorm", sigma=0.9),
        r(g("pp2", "kineto", "laststage", last_layers=3), "default"),
    ]


FRESH59_SEED = 373


def fresh59_set(seed: int = FRESH59_SEED) -> list[Case]:
    """Held out at the start of the forty-third session, before any change (``--set fresh59``, 4
    ranks, seed 373, for CPUs: 4 gloo processes on 2 cores; a machine of 4 GPUs runs it in
    ``fresh14``'s shape): plain DDP, FSDP2 and DP2 x TP2 and megatron-core TP2 x DP2, PP2 x DP2
    and TP2 x PP2, weighted to the profiler and most of those recorded as users record them
    (``-prof-nosh-``: the profiler's defaults; ``-prof-stk-``: the tutorial's shapes, memory and
    Python stacks), with values no other set uses. Ids end in ``-f59``."""
    g = _held_out_gpt(seed, "-f59", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(_plain("ddp4", "dp4", seed, rank=3, factor=1.5, tag="-f59"), "default"),
        r(_plain("ddp4", "dp4", seed, rank=1, step_sleep_ms=20, tag="-f59"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=2, factor=1.6, tag="-f59"), "tutorial"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=0, factor=2.5, tag="-f59"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f59"), "default"),
        _plain("ddp4", "dp4", seed, rank=0, sleep_ms=27, tag="-f59"),
        # megatron-core, mapp capture
        g("pp2dp2", "mapp-v1", "layer", rank=2, factor=1.45),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=0.85),
        # megatron-core, torch.profiler
        r(g("tp2dp2", "kineto", "layer", rank=0, factor=1.4), "default"),
        r(g("pp2dp2", "kineto", "hostsleep", rank=1, ms=19), "default"),
        r(g("tp2pp2", "kineto", "beforemb", rank=1, ms=22), "tutorial"),
        r(g("pp2dp2", "kineto", "healthy"), "default"),
        r(g("tp2dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        g("pp2dp2", "kineto", "laststage", last_layers=3),
    ]


FRESH60_SEED = 379


def fresh60_set(seed: int = FRESH60_SEED) -> list[Case]:
    """Held out after the forty-third session's change to a job's only link (``--set fresh60``,
    2 ranks, seed 379, for CPUs): megatron-core PP2, whose one pipeline link is weighed against
    the slowest fabric (``bandwidth._only_link``), with 3 and 6 MB more on every exchange, beside
    the jobs the rule must leave alone (healthy, a host sleep, a heavier last stage, lognormal
    lengths, a layer fault), under mapp's capture and the profiler. Ids end in ``-f60``."""
    g = _held_out_gpt(seed, "-f60", GPT_GPU_FRESH58)

    return [
        g("pp2", "mapp-v1", "link", link=(0, 1), link_bytes=3_000_000),
        g("pp2", "mapp-v1", "link", link=(1, 0), link_bytes=6_000_000),
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=18),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2", "mapp-v1", "seqlognorm", sigma=1.1),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.5),
        g("pp2", "kineto", "link", link=(0, 1), link_bytes=5_000_000),
        g("pp2", "kineto", "healthy"),
    ]


FRESH61_SEED = 383


def fresh61_set(seed: int = FRESH61_SEED) -> list[Case]:
    """Held out to test a change of the forty-third session (``--set fresh61``, 2 ranks, seed
    383, for CPUs; ``fresh62`` has the 4-rank jobs): megatron-core under mapp's capture, data- and
    tensor-parallel peers, healthy jobs beside layer faults at the low end (1.25-1.3x) and
    lognormal lengths. The change held a rank slower by its spans alone to 1.3x on shared CPUs;
    fresh62's TP2 x DP2 1.25x fault read 1.23x in one run, and it was reverted. Ids end in
    ``-f61``."""
    g = _held_out_gpt(seed, "-f61", GPT_GPU_FRESH58)

    return [
        g("dp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.25),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.85),
        g("tp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.3),
    ]


FRESH62_SEED = 389


def fresh62_set(seed: int = FRESH62_SEED) -> list[Case]:
    """``fresh61``'s 4-rank jobs (``--set fresh62``, seed 389, 4 gloo processes on 2 cores):
    DP4, TP2 x DP2 and PP2 x DP2 under mapp's capture, healthy and with a 1.25-1.3x layer fault.
    Ids end in ``-f62``."""
    g = _held_out_gpt(seed, "-f62", GPT_GPU_FRESH14)

    return [
        g("dp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "layer", rank=3, factor=1.3),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=2, factor=1.25),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.3),
    ]


FRESH63_SEED = 397
# --set fresh63 on GPUs: a twenty-first model shape (hidden 2944, 46 heads, sequence 1920, 2
# sequences a microbatch, 5 microbatches)
GPT_GPU_FRESH63 = ["--layers", "8", "--hidden", "2944", "--heads", "46", "--seq", "1920", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "5", "--bf16"]


def fresh63_set(seed: int = FRESH63_SEED) -> list[Case]:
    """Held out in the forty-fourth session (``--set fresh63``, 2 ranks, seed 397, for CPUs and
    for a machine of 2 GPUs, on which the model shape is a twenty-first), to test its change to
    a host on a pipeline stage lighter than another (``gates.idle_in_slack``): PP2 with a heavier
    last stage beside the faults and healthy jobs that rule must leave alone (host sleeps on
    either stage, a layer fault, lognormal lengths), under mapp's capture and the profiler, and
    issue 13's other classes in DP2 and TP2 with values no other set uses. Ids end in ``-f63``."""
    g = _held_out_gpt(seed, "-f63", GPT_GPU_FRESH63)
    r = _recorded

    return [
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2", "mapp-v1", "laststage", last_layers=4),
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "hostsleep", rank=0, ms=16),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=14),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.4),
        g("pp2", "mapp-v1", "seqlognorm", sigma=0.95),
        g("pp2", "kineto", "laststage", last_layers=3),
        r(g("pp2", "kineto", "hostsleep", rank=0, ms=19), "default"),
        r(g("pp2", "kineto", "healthy"), "default"),
        g("dp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.35),
        r(g("tp2", "kineto", "layer", rank=1, factor=1.4), "default"),
        g("tp2", "mapp-v1", "beforemb", rank=0, ms=19),
        r(_plain("ddp2", "dp2", seed, rank=0, factor=1.45, tag="-f63"), "default"),
        _plain("ddp2", "dp2", seed, tag="-f63"),
    ]


FRESH64_SEED = 401


def fresh64_set(seed: int = FRESH64_SEED) -> list[Case]:
    """``fresh63``'s 4-rank jobs (``--set fresh64``, seed 401, 4 gloo processes on 2 cores):
    PP4, TP2 x PP2 and PP2 x DP2 with a heavier last stage beside host sleeps and healthy jobs
    of the same layouts, and plain DDP. Ids end in ``-f64``."""
    g = _held_out_gpt(seed, "-f64", GPT_GPU_FRESH14)

    return [
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("pp4", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "hostsleep", rank=2, ms=17),
        g("pp4", "kineto", "laststage", last_layers=2),
        g("pp4", "kineto", "hostsleep", rank=0, ms=18),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "kineto", "hostsleep", rank=0, ms=21),
        _plain("ddp4", "dp4", seed, rank=2, factor=1.4, tag="-f64"),
    ]


FRESH65_SEED = 409
# --set fresh65 on GPUs: a twenty-second model shape (hidden 3328, 52 heads, sequence 1664, 2
# sequences a microbatch, 6 microbatches)
GPT_GPU_FRESH65 = ["--layers", "8", "--hidden", "3328", "--heads", "52", "--seq", "1664", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]


def fresh65_set(seed: int = FRESH65_SEED) -> list[Case]:
    """Held out at the start of the forty-fifth session, before any change (``--set fresh65``, 2
    ranks, seed 409, for CPUs and for a machine of 2 GPUs, on which the model shape is a
    twenty-second): every class of issue 13 in DP2, TP2 and PP2 under both captures and plain
    DDP/FSDP2 under the profiler, with values no other set uses; the ``gpuhog`` jobs run on GPUs
    only. Ids end in ``-f65``."""
    g = _held_out_gpt(seed, "-f65", GPT_GPU_FRESH65)
    r = _recorded

    return [
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.33),
        g("dp2", "mapp-v1", "hostsleep", rank=0, ms=23),
        r(g("dp2", "kineto", "beforemb", rank=1, ms=17), "default"),
        g("dp2", "mapp-v1", "seqlognorm", sigma=1.15),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.42),
        r(g("tp2", "kineto", "healthy"), "tutorial"),
        _jittering(g("tp2", "kineto", "beforemb", rank=1, ms=21), sigma=0.6),
        g("tp2", "mapp-v1", "seqlognorm", sigma=0.75),
        g("pp2", "mapp-v1", "link", link=(1, 0), link_bytes=3_500_000),
        r(g("pp2", "kineto", "layer", rank=0, factor=1.55), "default"),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=13),
        g("pp2", "kineto", "seqlognorm", sigma=1.0),
        g("pp2", "mapp-v1", "laststage", last_layers=5),
        r(_plain("ddp2", "dp2", seed, rank=1, sleep_ms=26, tag="-f65"), "default"),
        _plain("fsdp2", "dp2", seed, rank=0, step_sleep_ms=19, tag="-f65"),
        r(_plain("ddp2", "dp2", seed, tag="-f65"), "tutorial"),
        # GPUs only
        g("tp2", "mapp-v1", "gpuhog", rank=0, duty=0.18),
        r(g("dp2", "kineto", "gpuhog", rank=1, duty=0.22), "default"),
    ]


FRESH66_SEED = 419


def fresh66_set(seed: int = FRESH66_SEED) -> list[Case]:
    """``fresh65``'s 4-rank jobs (``--set fresh66``, seed 419, 4 gloo processes on 2 cores): DP4,
    TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures with faults of every kind beside
    healthy and imbalanced jobs, and plain DDP/FSDP2/DP2 x TP2 under the profiler. Ids end in
    ``-f66``."""
    g = _held_out_gpt(seed, "-f66", GPT_GPU_FRESH14)
    r = _recorded

    return [
        g("dp4", "mapp-v1", "hostsleep", rank=2, ms=22),
        r(g("dp4", "kineto", "layer", rank=1, factor=1.45), "default"),
        g("tp2dp2", "mapp-v1", "beforemb", rank=3, ms=18),
        r(g("tp2dp2", "kineto", "seqlognorm", sigma=1.05), "default"),
        g("pp2dp2", "mapp-v1", "layer", rank=3, factor=1.38),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=1, ms=16),
        r(g("tp2pp2", "kineto", "healthy"), "default"),
        g("pp4", "mapp-v1", "layer", rank=1, factor=1.48),
        g("pp4", "mapp-v1", "link", link=(2, 3), link_bytes=4_500_000),
        r(_plain("ddp4", "dp4", seed, rank=2, step_sleep_ms=18, tag="-f66"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=3, factor=1.45, tag="-f66"), "tutorial"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=1, factor=1.7, tag="-f66"), "default"),
    ]


FRESH67_SEED = 421


def fresh67_set(seed: int = FRESH67_SEED) -> list[Case]:
    """Held out, before it was written, for the forty-fifth session's change to pipeline stages
    of one rank each under the profiler's defaults (``--set fresh67``, 2 ranks, seed 421, for
    CPUs): megatron-core PP2 recorded without input shapes, extra matmuls in either stage's layers
    and before either stage's microbatches, beside the jobs the change must leave alone (healthy,
    heavier last stages, lognormal lengths, a host sleep, a loaded link) and two recorded with
    shapes. Ids end in ``-f67``."""
    g = _held_out_gpt(seed, "-f67", GPT_GPU_FRESH65)
    r = _recorded

    return [
        r(g("pp2", "kineto", "layer", rank=0, factor=1.3), "default"),
        r(g("pp2", "kineto", "layer", rank=0, factor=1.45), "default"),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.35), "default"),
        r(g("pp2", "kineto", "beforemb", rank=0, ms=16), "default"),
        r(g("pp2", "kineto", "beforemb", rank=1, ms=20), "default"),
        r(g("pp2", "kineto", "hostsleep", rank=0, ms=18), "default"),
        r(g("pp2", "kineto", "healthy"), "default"),
        r(g("pp2", "kineto", "laststage", last_layers=2), "default"),
        r(g("pp2", "kineto", "laststage", last_layers=4), "default"),
        r(g("pp2", "kineto", "seqlognorm", sigma=1.2), "default"),
        r(g("pp2", "kineto", "link", link=(0, 1), link_bytes=4_200_000), "default"),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.3), "tutorial"),
        r(g("pp2", "kineto", "laststage", last_layers=3), "tutorial"),
    ]


FRESH68_SEED = 431


def fresh68_set(seed: int = FRESH68_SEED) -> list[Case]:
    """``fresh67``'s 4-rank jobs (``--set fresh68``, seed 431, 4 gloo processes on 2 cores): PP4,
    PP2 x DP2 and TP2 x PP2 under the profiler's defaults, extra matmuls in the layers of a first,
    middle or last stage beside healthy and heavier-last-stage jobs. Ids end in ``-f68``."""
    g = _held_out_gpt(seed, "-f68", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("pp4", "kineto", "layer", rank=0, factor=1.45), "default"),
        r(g("pp4", "kineto", "layer", rank=1, factor=1.5), "default"),
        r(g("pp4", "kineto", "layer", rank=2, factor=1.4), "default"),
        r(g("pp4", "kineto", "layer", rank=3, factor=1.4), "default"),
        r(g("pp4", "kineto", "beforemb", rank=2, ms=19), "default"),
        r(g("pp4", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "laststage", last_layers=3), "default"),
        r(g("pp2dp2", "kineto", "layer", rank=0, factor=1.4), "default"),
        r(g("pp2dp2", "kineto", "healthy"), "default"),
        r(g("tp2pp2", "kineto", "layer", rank=2, factor=1.45), "default"),
        r(g("tp2pp2", "kineto", "laststage", last_layers=3), "default"),
    ]


FRESH69_SEED = 433


def fresh69_set(seed: int = FRESH69_SEED) -> list[Case]:
    """Held out after the forty-fifth session's change to pipeline stages of one rank each
    recorded without shapes (``--set fresh69``, 2 ranks, seed 433, for CPUs), made and run before
    its results were seen: PP2 under the profiler's defaults with values ``fresh67`` does not use,
    and DP2/TP2 jobs whose counted work the change's verdict step also reads. Ids end in
    ``-f69``."""
    g = _held_out_gpt(seed, "-f69", GPT_GPU_FRESH65)
    r = _recorded

    return [
        r(g("pp2", "kineto", "layer", rank=0, factor=1.6), "default"),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.25), "default"),
        r(g("pp2", "kineto", "beforemb", rank=1, ms=14), "default"),
        r(g("pp2", "kineto", "hostsleep", rank=1, ms=21), "default"),
        r(g("pp2", "kineto", "healthy"), "default"),
        r(g("pp2", "kineto", "laststage", last_layers=3), "default"),
        r(g("pp2", "kineto", "seqlognorm", sigma=0.85), "default"),
        r(g("dp2", "kineto", "layer", rank=0, factor=1.4), "default"),
        r(g("tp2", "kineto", "beforemb", rank=0, ms=18), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.5, tag="-f69"), "default"),
    ]


FRESH70_SEED = 439


def fresh70_set(seed: int = FRESH70_SEED) -> list[Case]:
    """``fresh69``'s 4-rank jobs (``--set fresh70``, seed 439, 4 gloo processes on 2 cores): PP4
    under the profiler's defaults with extra matmuls on each kind of stage and before a middle
    stage's microbatches, healthy and heavier-last-stage jobs, and plain DDP whose added calls
    are counted. Ids end in ``-f70``."""
    g = _held_out_gpt(seed, "-f70", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("pp4", "kineto", "layer", rank=0, factor=1.6), "default"),
        r(g("pp4", "kineto", "layer", rank=2, factor=1.55), "default"),
        r(g("pp4", "kineto", "layer", rank=3, factor=1.3), "default"),
        r(g("pp4", "kineto", "beforemb", rank=1, ms=16), "default"),
        r(g("pp4", "kineto", "hostsleep", rank=3, ms=20), "default"),
        r(g("pp4", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "laststage", last_layers=2), "default"),
        r(g("pp4", "kineto", "seqlognorm", sigma=1.0), "default"),
        r(_plain("ddp4", "dp4", seed, rank=0, factor=1.4, tag="-f70"), "default"),
    ]


FRESH71_SEED = 443
# --set fresh71 on GPUs: a twenty-third model shape (hidden 2688, 42 heads, sequence 2176, 2
# sequences a microbatch, 5 microbatches)
GPT_GPU_FRESH71 = ["--layers", "8", "--hidden", "2688", "--heads", "42", "--seq", "2176", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "5", "--bf16"]


def fresh71_set(seed: int = FRESH71_SEED) -> list[Case]:
    """Held out at the end of the forty-fifth session (``--set fresh71``, 2 ranks, seed 443, for
    CPUs and for a machine of 2 GPUs, on which the model shape is a twenty-third), scored with
    the session's first and last code: issue 13's classes in DP2, TP2 and PP2 under both captures
    (the profiler mostly with its defaults) and plain DDP/FSDP2, with values no other set uses.
    Ids end in ``-f71``."""
    g = _held_out_gpt(seed, "-f71", GPT_GPU_FRESH71)
    r = _recorded

    return [
        g("dp2", "mapp-v1", "beforemb", rank=1, ms=21),
        r(g("dp2", "kineto", "healthy"), "default"),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.45),
        g("tp2", "mapp-v1", "hostsleep", rank=1, ms=17),
        r(g("tp2", "kineto", "layer", rank=0, factor=1.5), "default"),
        g("tp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.5),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.45), "default"),
        r(g("pp2", "kineto", "hostsleep", rank=0, ms=22), "default"),
        g("pp2", "mapp-v1", "laststage", last_layers=4),
        r(g("pp2", "kineto", "seqlognorm", sigma=1.05), "default"),
        r(_plain("ddp2", "dp2", seed, rank=0, sleep_ms=24, tag="-f71"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, factor=1.5, tag="-f71"), "default"),
    ]


FRESH72_SEED = 449


def fresh72_set(seed: int = FRESH72_SEED) -> list[Case]:
    """``fresh71``'s 4-rank jobs (``--set fresh72``, seed 449, 4 gloo processes on 2 cores): DP4,
    TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures, faults of every kind beside
    healthy and imbalanced jobs, and plain DDP/DP2 x TP2 under the profiler. Ids end in ``-f72``."""
    g = _held_out_gpt(seed, "-f72", GPT_GPU_FRESH14)
    r = _recorded

    return [
        g("dp4", "mapp-v1", "layer", rank=0, factor=1.4),
        r(g("tp2dp2", "kineto", "hostsleep", rank=1, ms=21), "default"),
        g("pp2dp2", "mapp-v1", "beforemb", rank=2, ms=17),
        r(g("pp2dp2", "kineto", "seqlognorm", sigma=0.95), "default"),
        g("tp2pp2", "mapp-v1", "layer", rank=3, factor=1.45),
        r(g("pp4", "kineto", "layer", rank=2, factor=1.45), "default"),
        g("pp4", "mapp-v1", "healthy"),
        r(_plain("ddp4", "dp4", seed, rank=3, sleep_ms=23, tag="-f72"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, tag="-f72"), "default"),
    ]


FRESH73_SEED = 457
# --set fresh73 on GPUs: a twenty-fourth model shape (hidden 3200, 50 heads, sequence 1856, 2
# sequences a microbatch, 5 microbatches)
GPT_GPU_FRESH73 = ["--layers", "8", "--hidden", "3200", "--heads", "50", "--seq", "1856", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "5", "--bf16"]


def fresh73_set(seed: int = FRESH73_SEED) -> list[Case]:
    """Held out at the start of the forty-sixth session, before any change (``--set fresh73``, 2
    ranks, seed 457, for CPUs and for a machine of 2 GPUs, on which the model shape is a
    twenty-fourth): issue 13's classes in DP2, TP2 and PP2 under both captures (the profiler
    mostly with its defaults) and plain DDP/FSDP2, with values no other set uses; the ``gpuhog``
    jobs run on GPUs only. Ids end in ``-f73``."""
    g = _held_out_gpt(seed, "-f73", GPT_GPU_FRESH73)
    r = _recorded

    return [
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.4),
        r(g("dp2", "kineto", "hostsleep", rank=0, ms=19), "default"),
        g("dp2", "mapp-v1", "healthy"),
        r(g("tp2", "kineto", "beforemb", rank=0, ms=23), "default"),
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.48),
        r(g("tp2", "kineto", "seqlognorm", sigma=0.85), "default"),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.52),
        r(g("pp2", "kineto", "layer", rank=0, factor=1.47), "default"),
        r(g("pp2", "kineto", "healthy"), "default"),
        g("pp2", "mapp-v1", "beforemb", rank=1, ms=18),
        r(g("pp2", "kineto", "laststage", last_layers=3), "default"),
        g("pp2", "mapp-v1", "link", link=(0, 1), link_bytes=4_200_000),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.45, tag="-f73"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, sleep_ms=21, tag="-f73"), "default"),
        # GPUs only
        r(g("tp2", "kineto", "gpuhog", rank=1, duty=0.2), "default"),
    ]


FRESH74_SEED = 461


def fresh74_set(seed: int = FRESH74_SEED) -> list[Case]:
    """``fresh73``'s 4-rank jobs (``--set fresh74``, seed 461, 4 gloo processes on 2 cores): DP4,
    TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures, faults of every kind beside
    healthy and imbalanced jobs (several under the profiler's defaults, without shapes), and
    plain DDP under the profiler. Ids end in ``-f74``."""
    g = _held_out_gpt(seed, "-f74", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("dp4", "kineto", "layer", rank=2, factor=1.42), "default"),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=0, ms=20),
        r(g("tp2dp2", "kineto", "healthy"), "default"),
        r(g("pp2dp2", "kineto", "healthy"), "default"),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.45),
        r(g("tp2pp2", "kineto", "beforemb", rank=2, ms=19), "default"),
        r(g("pp4", "kineto", "layer", rank=0, factor=1.5), "default"),
        g("pp4", "mapp-v1", "seqlognorm", sigma=1.1),
        r(_plain("ddp4", "dp4", seed, rank=2, factor=1.5, tag="-f74"), "default"),
    ]


FRESH75_SEED = 463
# --set fresh75 on GPUs: a twenty-fifth model shape (hidden 2432, 38 heads, sequence 2304, 2
# sequences a microbatch, 5 microbatches)
GPT_GPU_FRESH75 = ["--layers", "8", "--hidden", "2432", "--heads", "38", "--seq", "2304", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "5", "--bf16"]


def fresh75_set(seed: int = FRESH75_SEED) -> list[Case]:
    """Held out at the end of the forty-sixth session (``--set fresh75``, 2 ranks, seed 463, for
    CPUs and for a machine of 2 GPUs, on which the model shape is a twenty-fifth), scored with
    the session's first and last code: issue 13's classes in DP2, TP2 and PP2 under both captures
    (the profiler mostly with its defaults) and plain DDP/FSDP2, with values no other set uses.
    Ids end in ``-f75``."""
    g = _held_out_gpt(seed, "-f75", GPT_GPU_FRESH75)
    r = _recorded

    return [
        g("dp2", "mapp-v1", "healthy"),
        r(g("dp2", "kineto", "layer", rank=0, factor=1.43), "default"),
        g("dp2", "mapp-v1", "beforemb", rank=1, ms=22),
        g("tp2", "mapp-v1", "healthy"),
        r(g("tp2", "kineto", "hostsleep", rank=1, ms=24), "default"),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.38),
        r(g("pp2", "kineto", "healthy"), "default"),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.5),
        r(g("pp2", "kineto", "beforemb", rank=0, ms=19), "default"),
        g("pp2", "mapp-v1", "seqlognorm", sigma=1.0),
        r(g("pp2", "kineto", "laststage", last_layers=5), "default"),
        r(_plain("ddp2", "dp2", seed, tag="-f75"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, factor=1.45, tag="-f75"), "default"),
    ]


FRESH76_SEED = 467


def fresh76_set(seed: int = FRESH76_SEED) -> list[Case]:
    """``fresh75``'s 4-rank jobs (``--set fresh76``, seed 467, 4 gloo processes on 2 cores): DP4,
    TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures, faults of every kind beside
    healthy and imbalanced jobs (several under the profiler's defaults), and plain DDP/FSDP under
    the profiler. Ids end in ``-f76``."""
    g = _held_out_gpt(seed, "-f76", GPT_GPU_FRESH14)
    r = _recorded

    return [
        g("dp4", "mapp-v1", "healthy"),
        r(g("tp2dp2", "kineto", "layer", rank=3, factor=1.45), "default"),
        r(g("pp2dp2", "kineto", "hostsleep", rank=0, ms=21), "default"),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2pp2", "mapp-v1", "layer", rank=1, factor=1.5),
        r(g("pp4", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "beforemb", rank=3, ms=18), "default"),
        r(_plain("ddp4", "dp4", seed, tag="-f76"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=0, factor=1.5, tag="-f76"), "default"),
    ]


FRESH77_SEED = 479


def fresh77_set(seed: int = FRESH77_SEED) -> list[Case]:
    """Held out at the end of the forty-sixth session (``--set fresh77``, CPUs only, 2 gloo
    processes, seed 479): the 2-rank jobs the session's changes bear on, healthy and faulted,
    scored after the last change: DP2 and TP2 under mapp's capture (healthy, lognormal lengths,
    layer faults of 1.25-1.3x, the weakest the corpus names, a host sleep). Ids end in ``-f77``."""
    g = _held_out_gpt(seed, "-f77", GPT_GPU_FRESH14)

    return [
        g("dp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.25),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.3),
        g("dp2", "mapp-v1", "hostsleep", rank=0, ms=20),
    ]


FRESH78_SEED = 487


def fresh78_set(seed: int = FRESH78_SEED) -> list[Case]:
    """``fresh77``'s 4-rank jobs (``--set fresh78``, seed 487, 4 gloo processes on 2 cores): under
    the profiler's defaults (no shapes), healthy and lognormal jobs beside layer faults of
    1.3-1.4x and a PP4 data-path sleep. Ids end in ``-f78``."""
    g = _held_out_gpt(seed, "-f78", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("pp2dp2", "kineto", "healthy"), "default"),
        r(g("tp2dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("pp2dp2", "kineto", "layer", rank=2, factor=1.35), "default"),
        r(g("tp2dp2", "kineto", "layer", rank=0, factor=1.3), "default"),
        r(g("dp4", "kineto", "layer", rank=3, factor=1.4), "default"),
        r(g("pp4", "kineto", "hostsleep", rank=1, ms=17), "default"),
    ]

FRESH79_SEED = 491
# --set fresh79 on GPUs: a twenty-sixth model shape (hidden 3712, 58 heads, sequence 1472, 2
# sequences a microbatch, 5 microbatches)
GPT_GPU_FRESH79 = ["--layers", "8", "--hidden", "3712", "--heads", "58", "--seq", "1472", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "5", "--bf16"]


def fresh79_set(seed: int = FRESH79_SEED) -> list[Case]:
    """Held out at the start of the forty-seventh session, before any change (``--set fresh79``, 2
    ranks, seed 491, for CPUs and for a machine of 2 GPUs, on which the model shape is a
    twenty-sixth): issue 13's classes in DP2, TP2 and PP2 under both captures (the profiler
    mostly with its defaults) and plain DDP/FSDP2, with values no other set uses; the ``gpuhog``
    job runs on GPUs only. Ids end in ``-f79``."""
    g = _held_out_gpt(seed, "-f79", GPT_GPU_FRESH79)
    r = _recorded

    return [
        r(g("dp2", "kineto", "healthy"), "default"),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.46),
        r(g("dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        g("tp2", "mapp-v1", "hostsleep", rank=1, ms=22),
        r(g("tp2", "kineto", "layer", rank=1, factor=1.41), "default"),
        g("tp2", "mapp-v1", "seqlognorm", sigma=0.95),
        r(g("pp2", "kineto", "beforemb", rank=1, ms=21), "default"),
        g("pp2", "mapp-v1", "healthy"),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.44), "default"),
        g("pp2", "mapp-v1", "laststage", last_layers=4),
        g("pp2", "mapp-v1", "link", link=(0, 1), link_bytes=5_000_000),
        r(_plain("ddp2", "dp2", seed, rank=0, sleep_ms=18, tag="-f79"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, factor=1.5, tag="-f79"), "default"),
        # GPUs only
        r(g("tp2", "kineto", "gpuhog", rank=0, duty=0.25), "default"),
    ]


FRESH80_SEED = 499


def fresh80_set(seed: int = FRESH80_SEED) -> list[Case]:
    """``fresh79``'s 4-rank jobs (``--set fresh80``, seed 499, 4 gloo processes on 2 cores): DP4,
    TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures, faults of every kind beside
    healthy and imbalanced jobs (several under the profiler's defaults), and plain DDP/FSDP under
    the profiler. Ids end in ``-f80``."""
    g = _held_out_gpt(seed, "-f80", GPT_GPU_FRESH14)
    r = _recorded

    return [
        g("dp4", "mapp-v1", "layer", rank=1, factor=1.44),
        r(g("tp2dp2", "kineto", "beforemb", rank=1, ms=20), "default"),
        g("tp2dp2", "mapp-v1", "healthy"),
        r(g("pp2dp2", "kineto", "seqlognorm", sigma=1.05), "default"),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=19),
        r(g("tp2pp2", "kineto", "layer", rank=0, factor=1.45), "default"),
        g("pp4", "mapp-v1", "layer", rank=3, factor=1.4),
        r(g("pp4", "kineto", "laststage", last_layers=3), "default"),
        r(_plain("ddp4", "dp4", seed, rank=1, sleep_ms=22, tag="-f80"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=2, sleep_ms=20, tag="-f80"), "default"),
    ]


FRESH81_SEED = 503
# --set fresh81 on GPUs: a twenty-seventh model shape (hidden 2176, 34 heads, sequence 2688, 2
# sequences a microbatch, 5 microbatches)
GPT_GPU_FRESH81 = ["--layers", "8", "--hidden", "2176", "--heads", "34", "--seq", "2688", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "5", "--bf16"]


def fresh81_set(seed: int = FRESH81_SEED) -> list[Case]:
    """Held out at the end of the forty-seventh session, after its last change (``--set fresh81``,
    2 ranks, seed 503, for CPUs and for a machine of 2 GPUs, on which the model shape is a
    twenty-seventh): the classes the session's changes bear on (pipeline stages under the
    profiler's defaults, faults on either stage, healthy and heavier last stages) beside DP2/TP2
    and plain DDP/FSDP2 jobs. Ids end in ``-f81``."""
    g = _held_out_gpt(seed, "-f81", GPT_GPU_FRESH81)
    r = _recorded

    return [
        r(g("pp2", "kineto", "layer", rank=1, factor=1.38), "default"),
        r(g("pp2", "kineto", "layer", rank=0, factor=1.42), "default"),
        r(g("pp2", "kineto", "healthy"), "default"),
        r(g("pp2", "kineto", "laststage", last_layers=2), "default"),
        r(g("pp2", "kineto", "beforemb", rank=1, ms=17), "default"),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.4),
        r(g("dp2", "kineto", "layer", rank=1, factor=1.45), "default"),
        r(g("tp2", "kineto", "healthy"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.55, tag="-f81"), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f81"), "default"),
    ]


FRESH82_SEED = 509


def fresh82_set(seed: int = FRESH82_SEED) -> list[Case]:
    """``fresh81``'s 4-rank jobs (``--set fresh82``, seed 509, 4 gloo processes on 2 cores): PP4
    under the profiler's defaults (a last-stage and a middle-stage fault, healthy), PP2 x DP2 and
    plain DDP. Ids end in ``-f82``."""
    g = _held_out_gpt(seed, "-f82", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("pp4", "kineto", "layer", rank=3, factor=1.35), "default"),
        r(g("pp4", "kineto", "layer", rank=1, factor=1.45), "default"),
        r(g("pp4", "kineto", "healthy"), "default"),
        r(g("pp2dp2", "kineto", "layer", rank=3, factor=1.4), "default"),
        r(_plain("ddp4", "dp4", seed, rank=2, factor=1.5, tag="-f82"), "default"),
        r(_plain("ddp4", "dp4", seed, tag="-f82"), "default"),
    ]


FRESH83_SEED = 521
# --set fresh83 on GPUs: a twenty-eighth model shape (hidden 3968, 62 heads, sequence 1216, 2
# sequences a microbatch, 6 microbatches)
GPT_GPU_FRESH83 = ["--layers", "8", "--hidden", "3968", "--heads", "62", "--seq", "1216", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]


def fresh83_set(seed: int = FRESH83_SEED) -> list[Case]:
    """Held out at the start of the forty-eighth session, before any change (``--set fresh83``, 2
    ranks, seed 521, for CPUs and for a machine of 2 GPUs, on which the model shape is a
    twenty-eighth): issue 13's classes in DP2, TP2 and PP2 under both captures (the profiler
    mostly with its defaults) and plain DDP/FSDP2, with values no other set uses; the ``gpuhog``
    job runs on GPUs only. Ids end in ``-f83``."""
    g = _held_out_gpt(seed, "-f83", GPT_GPU_FRESH83)
    r = _recorded

    return [
        r(g("dp2", "kineto", "hostsleep", rank=1, ms=23), "default"),
        g("dp2", "mapp-v1", "healthy"),
        r(g("tp2", "kineto", "beforemb", rank=0, ms=19), "default"),
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.37),
        r(g("tp2", "kineto", "seqlognorm", sigma=1.1), "default"),
        r(g("pp2", "kineto", "layer", rank=0, factor=1.47), "default"),
        r(g("pp2", "kineto", "laststage", last_layers=3), "default"),
        g("pp2", "mapp-v1", "beforemb", rank=0, ms=18),
        r(g("pp2", "kineto", "healthy"), "default"),
        r(_plain("ddp2", "dp2", seed, tag="-f83"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, sleep_ms=21, tag="-f83"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.43, tag="-f83"), "default"),
        # GPUs only
        r(g("tp2", "kineto", "gpuhog", rank=1, duty=0.3), "default"),
    ]


FRESH84_SEED = 523


def fresh84_set(seed: int = FRESH84_SEED) -> list[Case]:
    """``fresh83``'s 4-rank jobs (``--set fresh84``, seed 523, 4 gloo processes on 2 cores): DP4,
    TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures, faults beside healthy and
    imbalanced jobs, and plain DDP/FSDP under the profiler. Ids end in ``-f84``."""
    g = _held_out_gpt(seed, "-f84", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("dp4", "kineto", "layer", rank=3, factor=1.42), "default"),
        g("tp2dp2", "mapp-v1", "beforemb", rank=2, ms=21),
        r(g("pp2dp2", "kineto", "healthy"), "default"),
        r(g("tp2pp2", "kineto", "hostsleep", rank=1, ms=20), "default"),
        g("pp4", "mapp-v1", "seqlognorm", sigma=1.0),
        r(g("pp4", "kineto", "layer", rank=2, factor=1.43), "default"),
        r(_plain("ddp4", "dp4", seed, rank=3, factor=1.45, tag="-f84"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f84"), "default"),
    ]


FRESH85_SEED = 541
# --set fresh85 on GPUs: a twenty-ninth model shape (hidden 2816, 44 heads, sequence 1792, 2
# sequences a microbatch, 5 microbatches)
GPT_GPU_FRESH85 = ["--layers", "8", "--hidden", "2816", "--heads", "44", "--seq", "1792", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "5", "--bf16"]


def fresh85_set(seed: int = FRESH85_SEED) -> list[Case]:
    """Held out at the start of the forty-ninth session, before any change (``--set fresh85``, 2
    ranks, seed 541, for CPUs and for a machine of 2 GPUs, on which the model shape is a
    twenty-ninth): issue 13's classes in DP2, TP2 and PP2 under both captures and plain DDP/FSDP2,
    with values no other set uses; the ``gpuhog`` job runs on GPUs only. Ids end in ``-f85``."""
    g = _held_out_gpt(seed, "-f85", GPT_GPU_FRESH85)
    r = _recorded

    return [
        r(g("dp2", "kineto", "layer", rank=0, factor=1.39), "default"),
        r(g("dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        g("dp2", "mapp-v1", "hostsleep", rank=1, ms=24),
        r(g("tp2", "kineto", "hostsleep", rank=1, ms=22), "default"),
        g("tp2", "mapp-v1", "healthy"),
        r(g("tp2", "kineto", "layer", rank=0, factor=1.44), "default"),
        r(g("pp2", "kineto", "beforemb", rank=1, ms=21), "default"),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        r(g("pp2", "kineto", "seqlognorm", sigma=1.0), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, factor=1.46, tag="-f85"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=0, sleep_ms=24, tag="-f85"), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f85"), "default"),
        # GPUs only
        r(g("dp2", "kineto", "gpuhog", rank=0, duty=0.35), "default"),
    ]


FRESH86_SEED = 547


def fresh86_set(seed: int = FRESH86_SEED) -> list[Case]:
    """``fresh85``'s 4-rank jobs (``--set fresh86``, seed 547, 4 gloo processes on 2 cores): DP4,
    TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures, faults beside healthy and
    imbalanced jobs, and plain DDP/FSDP under the profiler. Ids end in ``-f86``."""
    g = _held_out_gpt(seed, "-f86", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("tp2dp2", "kineto", "layer", rank=1, factor=1.41), "default"),
        g("dp4", "mapp-v1", "hostsleep", rank=2, ms=22),
        r(g("pp2dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        g("tp2pp2", "mapp-v1", "healthy"),
        r(g("pp4", "kineto", "beforemb", rank=3, ms=20), "default"),
        r(g("pp2dp2", "kineto", "layer", rank=0, factor=1.44), "default"),
        r(_plain("ddp4", "dp4", seed, rank=1, sleep_ms=21, tag="-f86"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=2, factor=1.47, tag="-f86"), "default"),
    ]


FRESH87_SEED = 557
# --set fresh87 on GPUs: a thirtieth model shape (hidden 3456, 54 heads, sequence 1408, 2
# sequences a microbatch, 6 microbatches)
GPT_GPU_FRESH87 = ["--layers", "8", "--hidden", "3456", "--heads", "54", "--seq", "1408", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]


def fresh87_set(seed: int = FRESH87_SEED) -> list[Case]:
    """Held out after the forty-ninth session's changes (``--set fresh87``, 2 ranks, seed 557,
    for CPUs and for a machine of 2 GPUs, on which the model shape is a thirtieth): the classes
    those changes bear on (DP2 under the profiler's defaults with lognormal lengths, healthy and
    faulty) beside TP2/PP2 and plain DDP/FSDP2 jobs. Ids end in ``-f87``."""
    g = _held_out_gpt(seed, "-f87", GPT_GPU_FRESH87)
    r = _recorded

    return [
        r(g("dp2", "kineto", "seqlognorm", sigma=1.05), "default"),
        r(g("dp2", "kineto", "layer", rank=1, factor=1.43), "default"),
        r(g("dp2", "kineto", "beforemb", rank=0, ms=20), "default"),
        r(g("dp2", "kineto", "healthy"), "default"),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.95),
        r(g("tp2", "kineto", "layer", rank=1, factor=1.41), "default"),
        r(g("pp2", "kineto", "hostsleep", rank=0, ms=23), "default"),
        g("tp2", "mapp-v1", "hostsleep", rank=0, ms=21),
        r(_plain("ddp2", "dp2", seed, rank=1, sleep_ms=22, tag="-f87"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, factor=1.44, tag="-f87"), "default"),
        r(_plain("ddp2", "dp2", seed, tag="-f87"), "default"),
        # GPUs only
        r(g("dp2", "kineto", "gpuhog", rank=1, duty=0.3), "default"),
    ]


FRESH88_SEED = 563


def fresh88_set(seed: int = FRESH88_SEED) -> list[Case]:
    """``fresh87``'s 4-rank jobs (``--set fresh88``, seed 563, 4 gloo processes on 2 cores): DP4
    and PP2 x DP2 with lognormal lengths under the profiler's defaults, faults of TP2 x DP2, PP4
    and plain DDP/FSDP. Ids end in ``-f88``."""
    g = _held_out_gpt(seed, "-f88", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("dp4", "kineto", "seqlognorm", sigma=1.0), "default"),
        r(g("pp2dp2", "kineto", "seqlognorm", sigma=1.1), "default"),
        r(g("tp2dp2", "kineto", "beforemb", rank=3, ms=22), "default"),
        g("pp4", "mapp-v1", "layer", rank=1, factor=1.42),
        r(g("dp4", "kineto", "layer", rank=2, factor=1.45), "default"),
        r(_plain("ddp4", "dp4", seed, rank=0, factor=1.46, tag="-f88"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f88"), "default"),
    ]



FRESH89_SEED = 569
# --set fresh89 on GPUs: a thirty-first model shape (hidden 3200, 50 heads, sequence 1664, 2
# sequences a microbatch, 5 microbatches)
GPT_GPU_FRESH89 = ["--layers", "8", "--hidden", "3200", "--heads", "50", "--seq", "1664", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "5", "--bf16"]


def fresh89_set(seed: int = FRESH89_SEED) -> list[Case]:
    """Held out at the start of the fiftieth session, before any change (``--set fresh89``, 2
    ranks, seed 569, for CPUs and for a machine of 2 GPUs, on which the model shape is a
    thirty-first): issue 13's classes in DP2, TP2 and PP2 under both captures and plain DDP/FSDP2
    (sleeps in the data path and in the training loop), with values no other set uses; the
    ``gpuhog`` job runs on GPUs only. Ids end in ``-f89``."""
    g = _held_out_gpt(seed, "-f89", GPT_GPU_FRESH89)
    r = _recorded

    return [
        r(g("dp2", "kineto", "hostsleep", rank=0, ms=26), "default"),
        r(g("dp2", "kineto", "healthy"), "default"),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.36),
        r(g("tp2", "kineto", "beforemb", rank=1, ms=24), "default"),
        r(g("tp2", "kineto", "seqlognorm", sigma=0.85), "default"),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.48),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.38), "default"),
        r(g("pp2", "kineto", "laststage", last_layers=2), "default"),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=25),
        r(_plain("ddp2", "dp2", seed, rank=1, step_sleep_ms=26, tag="-f89"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, sleep_ms=27, tag="-f89"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=0, factor=1.37, tag="-f89"), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f89"), "default"),
        # GPUs only
        r(g("tp2", "kineto", "gpuhog", rank=0, duty=0.33), "default"),
    ]


FRESH90_SEED = 571


def fresh90_set(seed: int = FRESH90_SEED) -> list[Case]:
    """``fresh89``'s 4-rank jobs (``--set fresh90``, seed 571, 4 gloo processes on 2 cores): DP4,
    TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures, faults beside healthy and
    imbalanced jobs, and plain DDP/FSDP under the profiler. Ids end in ``-f90``."""
    g = _held_out_gpt(seed, "-f90", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("dp4", "kineto", "hostsleep", rank=1, ms=24), "default"),
        r(g("tp2dp2", "kineto", "seqlognorm", sigma=0.95), "default"),
        g("pp2dp2", "mapp-v1", "layer", rank=2, factor=1.39),
        r(g("tp2pp2", "kineto", "layer", rank=3, factor=1.46), "default"),
        r(g("pp4", "kineto", "laststage", last_layers=2), "default"),
        g("dp4", "mapp-v1", "beforemb", rank=0, ms=23),
        r(g("pp2dp2", "kineto", "beforemb", rank=3, ms=22), "default"),
        r(_plain("ddp4", "dp4", seed, rank=2, step_sleep_ms=24, tag="-f90"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=1, sleep_ms=23, tag="-f90"), "default"),
        r(_plain("ddp4", "dp4", seed, tag="-f90"), "default"),
    ]



FRESH91_SEED = 577
# --set fresh91 on GPUs: a thirty-second model shape (hidden 2944, 46 heads, sequence 1600, 2
# sequences a microbatch, 6 microbatches)
GPT_GPU_FRESH91 = ["--layers", "8", "--hidden", "2944", "--heads", "46", "--seq", "1600", "--vocab", "50304",
                   "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]


def fresh91_set(seed: int = FRESH91_SEED) -> list[Case]:
    """Held out after the fiftieth session's change (a GPU's idle time with its next kernel
    already launched is held, not its host's: ``--set fresh91``, 2 ranks, seed 577, for a
    machine of 2 GPUs, on which the model shape is a thirty-second): neighbours on one GPU in
    DP2, TP2 and PP2 under the profiler beside healthy, imbalanced and other faults' jobs, where
    a GPU verdict from held time would be a false alarm. Ids end in ``-f91``."""
    g = _held_out_gpt(seed, "-f91", GPT_GPU_FRESH91)
    r = _recorded

    return [
        r(g("dp2", "kineto", "gpuhog", rank=1, duty=0.25), "default"),
        r(g("tp2", "kineto", "gpuhog", rank=1, duty=0.2), "default"),
        r(g("pp2", "kineto", "gpuhog", rank=0, duty=0.3), "default"),
        r(g("dp2", "kineto", "healthy"), "default"),
        r(g("tp2", "kineto", "healthy"), "default"),
        r(g("dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("pp2", "kineto", "laststage", last_layers=3), "default"),
        r(g("tp2", "kineto", "layer", rank=0, factor=1.4), "default"),
        r(g("dp2", "kineto", "beforemb", rank=1, ms=22), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f91"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.42, tag="-f91"), "default"),
    ]


FRESH92_SEED = 587


def fresh92_set(seed: int = FRESH92_SEED) -> list[Case]:
    """Held out at the start of the fifty-first session, before any change (``--set fresh92``, 2
    ranks, seed 587, for CPUs; its GPU runs take fresh91's model shape): issue 13's classes in
    DP2, TP2 and PP2 under both captures and plain DDP/FSDP2, with values no other set uses, a
    jittering before-microbatch load among them. Ids end in ``-f92``."""
    g = _held_out_gpt(seed, "-f92", GPT_GPU_FRESH91)
    r = _recorded

    return [
        r(g("dp2", "kineto", "layer", rank=0, factor=1.33), "default"),
        r(g("dp2", "kineto", "seqlognorm", sigma=1.05), "default"),
        g("dp2", "mapp-v1", "hostsleep", rank=1, ms=21),
        r(_jittering(g("tp2", "kineto", "beforemb", rank=0, ms=27), sigma=0.6), "default"),
        r(g("tp2", "kineto", "healthy"), "default"),
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=23),
        r(g("pp2", "kineto", "hostsleep", rank=0, ms=23), "default"),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.41),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        r(_plain("ddp2", "dp2", seed, rank=0, step_sleep_ms=22, tag="-f92"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, factor=1.44, tag="-f92"), "default"),
        r(_plain("ddp2", "dp2", seed, tag="-f92"), "default"),
    ]


FRESH93_SEED = 593


def fresh93_set(seed: int = FRESH93_SEED) -> list[Case]:
    """``fresh92``'s 4-rank jobs (``--set fresh93``, seed 593, 4 gloo processes on 2 cores): DP4,
    TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures, a heavier pipeline link beside
    slow ranks, healthy and imbalanced jobs, and plain DDP/FSDP and DP x TP under the profiler.
    Ids end in ``-f93``."""
    g = _held_out_gpt(seed, "-f93", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("tp2dp2", "kineto", "hostsleep", rank=2, ms=25), "default"),
        g("pp2dp2", "mapp-v1", "link", link=(0, 2), link_bytes=3_200_000),
        r(g("pp2dp2", "kineto", "layer", rank=1, factor=1.43), "default"),
        g("tp2pp2", "mapp-v1", "seqlognorm", sigma=0.9),
        r(g("dp4", "kineto", "beforemb", rank=3, ms=21), "default"),
        g("pp4", "mapp-v1", "layer", rank=2, factor=1.37),
        r(g("pp4", "kineto", "healthy"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=2, factor=1.45, tag="-f93"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=3, step_sleep_ms=25, tag="-f93"), "default"),
        r(_plain("ddp4", "dp4", seed, rank=1, sleep_ms=24, tag="-f93"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f93"), "default"),
    ]


def _on_lognormal(case: Case, sigma: float) -> Case:
    """A fault ``case`` of megatron-core whose replicas also draw their sequence lengths
    lognormal (``--seq-lognormal``, as ``gpt_case``'s ``seqlognorm``): the fault on data that
    varies every step. Its id gains ``-seqlognorm<sigma>`` after the variant."""
    assert case.job == "gpt" and case.cls == "fault", case.id
    head, _, rank_and_tag = case.id.rpartition("-r")
    case.id = f"{head}-seqlognorm{sigma:g}-r{rank_and_tag}"
    case.args += ["--seq-lognormal", f"{sigma:g}", "--seq", "256", "--hidden", "256"]
    case.gpu_args += ["--seq-lognormal", f"{sigma:g}"]
    case.baseline = None
    return case


FRESH94_SEED = 599


def fresh94_set(seed: int = FRESH94_SEED) -> list[Case]:
    """Made after the fifty-first session's change (replicas whose calls paired by order vary
    every step are not compared call by call), to find what it could hide (``--set fresh94``, 2
    ranks, seed 599, for CPUs): faults on replicas of lognormal lengths in DP2 under the
    profiler's defaults (a slower layer, a host sleep, work before each microbatch), the same in
    TP2 and with shapes recorded and under mapp's capture, beside lognormal jobs without a
    fault. Ids end in ``-f94``."""
    g = _held_out_gpt(seed, "-f94", GPT_GPU_FRESH91)
    r, ln = _recorded, _on_lognormal

    return [
        r(ln(g("dp2", "kineto", "layer", rank=1, factor=1.45), 0.9), "default"),
        r(ln(g("dp2", "kineto", "hostsleep", rank=0, ms=24), 1.0), "default"),
        r(ln(g("dp2", "kineto", "beforemb", rank=1, ms=22), 0.8), "default"),
        r(g("dp2", "kineto", "seqlognorm", sigma=0.7), "default"),
        r(g("dp2", "kineto", "seqlognorm", sigma=1.2), "default"),
        r(ln(g("tp2", "kineto", "layer", rank=0, factor=1.4), 0.9), "default"),
        ln(g("dp2", "kineto", "layer", rank=0, factor=1.4), 0.9),
        ln(g("dp2", "mapp-v1", "layer", rank=1, factor=1.4), 0.9),
    ]


FRESH95_SEED = 601


def fresh95_set(seed: int = FRESH95_SEED) -> list[Case]:
    """``fresh94``'s question for 4 gloo processes on 2 cores (``--set fresh95``, seed 601): DP4,
    TP2 x DP2 and PP2 x DP2 under the profiler's defaults on replicas of lognormal lengths, with and
    without a fault. Ids end in ``-f95``."""
    g = _held_out_gpt(seed, "-f95", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(g("dp4", "kineto", "seqlognorm", sigma=1.0), "default"),
        r(g("tp2dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("pp2dp2", "kineto", "seqlognorm", sigma=1.1), "default"),
        r(ln(g("dp4", "kineto", "layer", rank=2, factor=1.45), 0.9), "default"),
        r(ln(g("dp4", "kineto", "hostsleep", rank=1, ms=25), 0.9), "default"),
        r(ln(g("tp2dp2", "kineto", "layer", rank=3, factor=1.45), 0.8), "default"),
    ]


FRESH96_SEED = 607


def fresh96_set(seed: int = FRESH96_SEED) -> list[Case]:
    """Held out at the start of the fifty-second session, before any change (``--set fresh96``, 2
    ranks, seed 607, for CPUs; its GPU runs take fresh91's model shape): issue 13's classes in
    DP2, TP2 and PP2 under both captures and plain DDP/FSDP2, with values no other set uses, a
    heavier pipeline link and lognormal pipeline data among them. Ids end in ``-f96``."""
    g = _held_out_gpt(seed, "-f96", GPT_GPU_FRESH91)
    r = _recorded

    return [
        r(g("dp2", "kineto", "hostsleep", rank=0, ms=26), "default"),
        r(g("dp2", "kineto", "healthy"), "default"),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.36),
        r(g("tp2", "kineto", "layer", rank=1, factor=1.39), "default"),
        g("tp2", "mapp-v1", "hostsleep", rank=0, ms=24),
        r(_jittering(g("pp2", "kineto", "beforemb", rank=1, ms=25), sigma=0.5), "default"),
        g("pp2", "mapp-v1", "link", link=(0, 1), link_bytes=3_600_000),
        r(g("pp2", "kineto", "seqlognorm", sigma=0.95), "default"),
        r(g("pp2", "kineto", "laststage", last_layers=3), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, sleep_ms=25, tag="-f96"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.38, tag="-f96"), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f96"), "default"),
    ]


FRESH97_SEED = 613


def fresh97_set(seed: int = FRESH97_SEED) -> list[Case]:
    """``fresh96``'s 4-rank jobs (``--set fresh97``, seed 613, 4 gloo processes on 2 cores): DP4,
    TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures, a heavier pipeline link beside
    slow ranks, healthy and imbalanced jobs, and plain DDP/FSDP and DP x TP under the profiler.
    Ids end in ``-f97``."""
    g = _held_out_gpt(seed, "-f97", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(g("dp4", "kineto", "layer", rank=1, factor=1.42), "default"),
        g("tp2dp2", "mapp-v1", "beforemb", rank=3, ms=24),
        r(g("pp2dp2", "kineto", "hostsleep", rank=2, ms=26), "default"),
        g("pp4", "mapp-v1", "link", link=(1, 2), link_bytes=3_400_000),
        r(g("tp2pp2", "kineto", "layer", rank=0, factor=1.38), "default"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        r(g("tp2dp2", "kineto", "healthy"), "default"),
        r(_plain("ddp4", "dp4", seed, rank=2, factor=1.41, tag="-f97"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=1, sleep_ms=25, tag="-f97"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=0, step_sleep_ms=23, tag="-f97"), "default"),
        r(_plain("ddp4", "dp4", seed, tag="-f97"), "default"),
    ]


FRESH98_SEED = 617


def fresh98_set(seed: int = FRESH98_SEED) -> list[Case]:
    """Made after the fifty-second session's change (on shared CPUs a rank slower with its
    replica is not named), to find what it could hide (``--set fresh98``, seed 617, 4 gloo
    processes on 2 cores): PP2 x DP2 and TP2 x DP2 under both captures, faults of every kind on
    one rank of a replica beside jobs with none (healthy, a heavier last stage, lognormal
    lengths). Ids end in ``-f98``."""
    g = _held_out_gpt(seed, "-f98", GPT_GPU_FRESH14)
    r = _recorded

    return [
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "layer", rank=3, factor=1.4),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=1, ms=25),
        g("pp2dp2", "mapp-v1", "beforemb", rank=0, ms=22),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.8),
        r(g("pp2dp2", "kineto", "laststage", last_layers=3), "default"),
        r(g("pp2dp2", "kineto", "layer", rank=2, factor=1.4), "default"),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=2, factor=1.4),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        r(g("tp2dp2", "kineto", "hostsleep", rank=1, ms=24), "default"),
    ]


FRESH99_SEED = 619


def fresh99_set(seed: int = FRESH99_SEED) -> list[Case]:
    """Held out at the start of the fifty-third session, before any change (``--set fresh99``, 2
    ranks, seed 619, for CPUs; its GPU runs take fresh91's model shape): issue 13's classes in
    DP2, TP2 and PP2 under both captures and plain DDP/FSDP2, with values no other set uses (a
    mild layer fault under mapp's capture in DP2 among them). Ids end in ``-f99``."""
    g = _held_out_gpt(seed, "-f99", GPT_GPU_FRESH91)
    r = _recorded

    return [
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.33),
        g("dp2", "mapp-v1", "healthy"),
        r(g("dp2", "kineto", "layer", rank=1, factor=1.37), "default"),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.41),
        r(g("tp2", "kineto", "hostsleep", rank=1, ms=27), "default"),
        g("pp2", "mapp-v1", "beforemb", rank=0, ms=23),
        r(g("pp2", "kineto", "link", link=(0, 1), link_bytes=3_200_000), "default"),
        g("pp2", "mapp-v1", "seqlognorm", sigma=1.05),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        r(_plain("ddp2", "dp2", seed, rank=0, step_sleep_ms=22, tag="-f99"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, factor=1.4, tag="-f99"), "default"),
        r(_plain("ddp2", "dp2", seed, tag="-f99"), "default"),
    ]


FRESH100_SEED = 631


def fresh100_set(seed: int = FRESH100_SEED) -> list[Case]:
    """``fresh99``'s 4-rank jobs (``--set fresh100``, seed 631, 4 gloo processes on 2 cores): DP4
    (on lognormal lengths too), TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures,
    healthy and imbalanced jobs, and plain DDP/FSDP and DP x TP under the profiler. Ids end in
    ``-f100``."""
    g = _held_out_gpt(seed, "-f100", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        g("dp4", "mapp-v1", "layer", rank=3, factor=1.38),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        r(g("tp2dp2", "kineto", "layer", rank=0, factor=1.37), "default"),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=27),
        g("tp2pp2", "mapp-v1", "link", link=(0, 2), link_bytes=3_300_000),
        r(g("pp4", "kineto", "layer", rank=2, factor=1.4), "default"),
        g("pp4", "mapp-v1", "healthy"),
        r(g("tp2pp2", "kineto", "laststage", last_layers=3), "default"),
        r(ln(g("dp4", "kineto", "hostsleep", rank=0, ms=24), 0.8), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=2, factor=1.38, tag="-f100"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f100"), "default"),
        r(_plain("ddp4", "dp4", seed, rank=3, sleep_ms=26, tag="-f100"), "default"),
    ]


FRESH101_SEED = 641


def fresh101_set(seed: int = FRESH101_SEED) -> list[Case]:
    """Made after the fifty-third session's change (on shared CPUs with counted calls, recurring
    stalls standing out stand whatever stage 2 nets), to find what it could hide or invent
    (``--set fresh101``, seed 641, 4 gloo processes on 2 cores): profiler jobs with no fault
    (plain DDP/FSDP and DP x TP, megatron-core healthy, on lognormal lengths and with a heavier
    last stage) beside host sleeps, work before each microbatch and extra matmuls. Ids end in
    ``-f101``."""
    g = _held_out_gpt(seed, "-f101", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(_plain("ddp4", "dp4", seed, tag="-f101"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f101"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, tag="-f101"), "default"),
        r(g("dp4", "kineto", "seqlognorm", sigma=1.0), "default"),
        r(g("pp2dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("tp2dp2", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "laststage", last_layers=3), "default"),
        r(_plain("ddp4", "dp4", seed, rank=1, step_sleep_ms=24, tag="-f101"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=2, sleep_ms=27, tag="-f101"), "default"),
        r(g("dp4", "kineto", "hostsleep", rank=2, ms=26), "default"),
        r(g("tp2pp2", "kineto", "beforemb", rank=1, ms=24), "default"),
        r(_plain("ddp4", "dp4", seed, rank=0, factor=1.45, tag="-f101"), "default"),
    ]


FRESH102_SEED = 643


def fresh102_set(seed: int = FRESH102_SEED) -> list[Case]:
    """``fresh101``'s question for 2 ranks (``--set fresh102``, seed 643, 2 processes on 2
    cores; its GPU runs take fresh91's model shape): profiler jobs with no fault beside host
    sleeps, work before each microbatch and extra matmuls. Ids end in ``-f102``."""
    g = _held_out_gpt(seed, "-f102", GPT_GPU_FRESH91)
    r = _recorded

    return [
        r(_plain("ddp2", "dp2", seed, tag="-f102"), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f102"), "default"),
        r(g("dp2", "kineto", "healthy"), "default"),
        r(g("tp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("pp2", "kineto", "laststage", last_layers=3), "default"),
        g("dp2", "mapp-v1", "healthy"),
        r(_plain("ddp2", "dp2", seed, rank=1, step_sleep_ms=25, tag="-f102"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, sleep_ms=23, tag="-f102"), "default"),
        r(g("dp2", "kineto", "hostsleep", rank=1, ms=25), "default"),
        r(g("tp2", "kineto", "beforemb", rank=0, ms=22), "default"),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.4), "default"),
        r(_plain("ddp2", "dp2", seed, rank=0, factor=1.4, tag="-f102"), "default"),
    ]


FRESH103_SEED = 647


def fresh103_set(seed: int = FRESH103_SEED) -> list[Case]:
    """Held out at the start of the fifty-fourth session, before any change (``--set fresh103``,
    2 ranks, seed 647, for CPUs; its GPU runs take fresh91's model shape): issue 13's classes in
    DP2, TP2 and PP2 under both captures and plain DDP/FSDP2, healthy jobs beside faults, with
    values no other set uses. Ids end in ``-f103``."""
    g = _held_out_gpt(seed, "-f103", GPT_GPU_FRESH91)
    r = _recorded

    return [
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.42),
        g("dp2", "mapp-v1", "hostsleep", rank=0, ms=29),
        r(g("dp2", "kineto", "healthy"), "default"),
        r(g("tp2", "kineto", "layer", rank=0, factor=1.43), "default"),
        g("tp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "link", link=(0, 1), link_bytes=3_600_000),
        r(g("pp2", "kineto", "hostsleep", rank=1, ms=28), "default"),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.44),
        r(g("tp2", "kineto", "seqlognorm", sigma=1.1), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, step_sleep_ms=26, tag="-f103"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=0, sleep_ms=28, tag="-f103"), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f103"), "default"),
    ]


FRESH104_SEED = 653


def fresh104_set(seed: int = FRESH104_SEED) -> list[Case]:
    """``fresh103``'s 4-rank jobs (``--set fresh104``, seed 653, 4 gloo processes on 2 cores):
    DP4, TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures, healthy and imbalanced jobs,
    and plain DDP/FSDP and DP x TP under the profiler. Ids end in ``-f104``."""
    g = _held_out_gpt(seed, "-f104", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(g("dp4", "kineto", "layer", rank=1, factor=1.41), "default"),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=2, ms=28),
        g("pp2dp2", "mapp-v1", "layer", rank=0, factor=1.39),
        r(g("pp4", "kineto", "link", link=(1, 2), link_bytes=3_400_000), "default"),
        g("tp2pp2", "mapp-v1", "beforemb", rank=2, ms=26),
        g("dp4", "mapp-v1", "healthy"),
        r(g("pp2dp2", "kineto", "healthy"), "default"),
        g("pp4", "mapp-v1", "seqlognorm", sigma=0.95),
        r(ln(g("dp4", "kineto", "layer", rank=3, factor=1.4), 0.85), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=3, factor=1.42, tag="-f104"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=1, sleep_ms=27, tag="-f104"), "default"),
        r(_plain("ddp4", "dp4", seed, tag="-f104"), "default"),
    ]


FRESH105_SEED = 659


def fresh105_set(seed: int = FRESH105_SEED) -> list[Case]:
    """Made after the fifty-fourth session's change (on shared CPUs with counted calls, recurring
    stalls that stand out pass the two-peer gate too), to find what it could hide or invent
    (``--set fresh105``, seed 659, 4 gloo processes on 2 cores): profiler jobs with no fault
    (plain DDP/FSDP and DP x TP, megatron-core healthy and on lognormal lengths) beside host
    sleeps (one on lognormal lengths), sleeps before each step, data-path sleeps, extra matmuls
    and a PP2 x DP2 layer fault. Ids end in ``-f105``."""
    g = _held_out_gpt(seed, "-f105", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(_plain("ddp4", "dp4", seed, tag="-f105"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f105"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, tag="-f105"), "tutorial"),
        r(g("dp4", "kineto", "healthy"), "default"),
        r(g("tp2dp2", "kineto", "seqlognorm", sigma=0.95), "default"),
        r(ln(g("dp4", "kineto", "hostsleep", rank=2, ms=25), 0.9), "default"),
        r(_plain("ddp4", "dp4", seed, rank=2, step_sleep_ms=29, tag="-f105"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=1, step_sleep_ms=27, tag="-f105"), "default"),
        r(_plain("ddp4", "dp4", seed, rank=3, sleep_ms=31, tag="-f105"), "default"),
        r(g("dp4", "kineto", "hostsleep", rank=1, ms=28), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=0, factor=1.43, tag="-f105"), "default"),
        r(g("pp2dp2", "kineto", "layer", rank=3, factor=1.42), "default"),
    ]


FRESH106_SEED = 661


def fresh106_set(seed: int = FRESH106_SEED) -> list[Case]:
    """``fresh105``'s question for 2 ranks (``--set fresh106``, seed 661, 2 processes on 2
    cores; its GPU runs take fresh91's model shape): jobs with no fault under the profiler and
    mapp's capture (healthy, lognormal lengths) beside sleeps, extra matmuls and layer faults.
    Ids end in ``-f106``."""
    g = _held_out_gpt(seed, "-f106", GPT_GPU_FRESH91)
    r = _recorded

    return [
        r(_plain("ddp2", "dp2", seed, tag="-f106"), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f106"), "tutorial"),
        r(g("dp2", "kineto", "healthy"), "default"),
        r(g("pp2", "kineto", "seqlognorm", sigma=1.0), "default"),
        g("dp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "seqlognorm", sigma=0.9),
        r(_plain("ddp2", "dp2", seed, rank=0, step_sleep_ms=27, tag="-f106"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, sleep_ms=29, tag="-f106"), "default"),
        r(g("dp2", "kineto", "hostsleep", rank=0, ms=27), "default"),
        r(g("tp2", "kineto", "layer", rank=1, factor=1.41), "default"),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.43),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.42, tag="-f106"), "default"),
    ]


FRESH107_SEED = 673


def fresh107_set(seed: int = FRESH107_SEED) -> list[Case]:
    """Held out at the start of the fifty-fifth session, before any change (``--set fresh107``,
    seed 673, 4 gloo processes on 2 cores): issue 13's classes with values no other set uses,
    jittered extra work before each microbatch, data-path sleeps on lognormal lengths, a heavier
    last stage and healthy jobs beside layer faults, under both captures and plain DDP/FSDP2 and
    DP x TP. Ids end in ``-f107``."""
    g = _held_out_gpt(seed, "-f107", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(g("tp2dp2", "kineto", "layer", rank=3, factor=1.37), "default"),
        _jittering(g("dp4", "mapp-v1", "beforemb", rank=1, ms=27), 0.6),
        r(g("pp2dp2", "kineto", "laststage", last_layers=3), "default"),
        g("tp2pp2", "mapp-v1", "healthy"),
        r(ln(g("pp2dp2", "kineto", "hostsleep", rank=1, ms=26), 0.8), "default"),
        g("dp4", "mapp-v1", "layer", rank=2, factor=1.38),
        r(g("tp2pp2", "kineto", "seqlognorm", sigma=0.85), "default"),
        r(g("pp4", "kineto", "layer", rank=2, factor=1.46), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=2, sleep_ms=30, tag="-f107"), "default"),
        r(_plain("ddp4", "dp4", seed, rank=1, factor=1.39, tag="-f107"), "tutorial"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.44, tag="-f107"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f107"), "default"),
    ]


FRESH108_SEED = 677


def fresh108_set(seed: int = FRESH108_SEED) -> list[Case]:
    """``fresh107``'s question for 2 ranks (``--set fresh108``, seed 677, 2 processes on 2
    cores; its GPU runs take fresh91's model shape). Ids end in ``-f108``."""
    g = _held_out_gpt(seed, "-f108", GPT_GPU_FRESH91)
    r = _recorded

    return [
        r(g("pp2", "kineto", "layer", rank=1, factor=1.39), "default"),
        g("tp2", "mapp-v1", "beforemb", rank=0, ms=28),
        r(g("dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        g("pp2", "mapp-v1", "hostsleep", rank=0, ms=31),
        r(g("tp2", "kineto", "healthy"), "default"),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.47),
        r(g("pp2", "kineto", "laststage", last_layers=2), "default"),
        r(g("dp2", "kineto", "hostsleep", rank=1, ms=30), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, step_sleep_ms=30, tag="-f108"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, factor=1.41, tag="-f108"), "default"),
        r(_plain("ddp2", "dp2", seed, tag="-f108"), "tutorial"),
        r(_plain("fsdp2", "dp2", seed, rank=1, sleep_ms=33, tag="-f108"), "default"),
    ]


FRESH109_SEED = 683


def fresh109_set(seed: int = FRESH109_SEED) -> list[Case]:
    """Made after the fifty-fifth session's changes (on shared CPUs a rank whose added work is
    counted goes ahead of ranks slower by their times alone; a GPU host that launches more calls
    than its peers is slow compute), to find what they could hide or invent (``--set fresh109``,
    seed 683, 4 gloo processes on 2 cores): profiler jobs with extra matmuls (plain DDP/FSDP2,
    DP x TP, megatron-core layers and work before each microbatch) beside healthy and imbalanced
    jobs and host sleeps. Ids end in ``-f109``."""
    g = _held_out_gpt(seed, "-f109", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(_plain("ddp4", "dp4", seed, rank=3, factor=1.36, tag="-f109"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=0, factor=1.45, tag="-f109"), "tutorial"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=2, factor=1.4, tag="-f109"), "default"),
        r(g("dp4", "kineto", "layer", rank=0, factor=1.35), "default"),
        r(g("tp2dp2", "kineto", "beforemb", rank=1, ms=24), "default"),
        r(ln(g("dp4", "kineto", "layer", rank=2, factor=1.44), 0.9), "default"),
        r(_plain("ddp4", "dp4", seed, tag="-f109"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, tag="-f109"), "default"),
        r(g("dp4", "kineto", "seqlognorm", sigma=1.0), "default"),
        r(g("pp2dp2", "kineto", "healthy"), "tutorial"),
        r(_plain("fsdp4", "dp4", seed, rank=1, step_sleep_ms=28, tag="-f109"), "default"),
        r(g("tp2dp2", "kineto", "hostsleep", rank=3, ms=27), "default"),
    ]


FRESH110_SEED = 691


def fresh110_set(seed: int = FRESH110_SEED) -> list[Case]:
    """``fresh109``'s question for 2 ranks (``--set fresh110``, seed 691, 2 processes on 2
    cores; its GPU runs take fresh91's model shape). Ids end in ``-f110``."""
    g = _held_out_gpt(seed, "-f110", GPT_GPU_FRESH91)
    r = _recorded

    return [
        r(_plain("ddp2", "dp2", seed, rank=0, factor=1.38, tag="-f110"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, factor=1.46, tag="-f110"), "default"),
        r(g("dp2", "kineto", "layer", rank=0, factor=1.37), "default"),
        r(g("tp2", "kineto", "beforemb", rank=1, ms=26), "default"),
        r(g("pp2", "kineto", "layer", rank=0, factor=1.43), "default"),
        r(_plain("ddp2", "dp2", seed, tag="-f110"), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f110"), "default"),
        r(g("dp2", "kineto", "healthy"), "default"),
        r(g("tp2", "kineto", "seqlognorm", sigma=0.95), "default"),
        g("dp2", "mapp-v1", "healthy"),
        r(_plain("ddp2", "dp2", seed, rank=1, sleep_ms=31, tag="-f110"), "default"),
        r(g("dp2", "kineto", "hostsleep", rank=0, ms=29), "default"),
    ]


FRESH111_SEED = 701


def fresh111_set(seed: int = FRESH111_SEED) -> list[Case]:
    """Made after the fifty-fifth session's last changes (on shared CPUs a rank flagged on its
    times that does counted work is given the added work's slowdown; the same work timed slower
    names a rank only beyond 1.5x), to find what they could hide or invent (``--set fresh111``,
    seed 701, 2 processes on 2 cores; its GPU runs take fresh91's model shape): two-rank jobs
    with no fault, where one core of the pair may be slower all run, beside extra matmuls of
    1.3-1.4x and sleeps. Ids end in ``-f111``."""
    g = _held_out_gpt(seed, "-f111", GPT_GPU_FRESH91)
    r = _recorded

    return [
        r(_plain("ddp2", "dp2", seed, tag="-f111"), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f111"), "default"),
        r(_plain("ddp2", "dp2", seed, tag="-f111-b"), "tutorial"),
        r(g("dp2", "kineto", "healthy"), "default"),
        r(g("tp2", "kineto", "healthy"), "tutorial"),
        r(g("dp2", "kineto", "seqlognorm", sigma=1.1), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.32, tag="-f111"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, factor=1.36, tag="-f111"), "default"),
        r(g("dp2", "kineto", "layer", rank=1, factor=1.33), "default"),
        r(g("tp2", "kineto", "layer", rank=0, factor=1.38), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, step_sleep_ms=26, tag="-f111"), "default"),
        r(g("tp2", "kineto", "beforemb", rank=0, ms=23), "default"),
    ]


FRESH112_SEED = 709


def fresh112_set(seed: int = FRESH112_SEED) -> list[Case]:
    """``fresh111``'s question for 4 gloo processes on 2 cores (``--set fresh112``, seed 709).
    Ids end in ``-f112``."""
    g = _held_out_gpt(seed, "-f112", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(_plain("ddp4", "dp4", seed, tag="-f112"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f112"), "tutorial"),
        r(_plain("tp2dp2", "tp2dp2", seed, tag="-f112"), "default"),
        r(g("dp4", "kineto", "seqlognorm", sigma=1.05), "default"),
        r(g("tp2dp2", "kineto", "healthy"), "default"),
        r(g("pp2dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(_plain("ddp4", "dp4", seed, rank=0, factor=1.33, tag="-f112"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=3, factor=1.37, tag="-f112"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=1, factor=1.35, tag="-f112"), "default"),
        r(ln(g("dp4", "kineto", "layer", rank=1, factor=1.34), 0.9), "default"),
        r(g("tp2dp2", "kineto", "layer", rank=2, factor=1.36), "default"),
        r(_plain("ddp4", "dp4", seed, rank=2, sleep_ms=30, tag="-f112"), "default"),
    ]


FRESH113_SEED = 719


def fresh113_set(seed: int = FRESH113_SEED) -> list[Case]:
    """Held out at the start of the fifty-sixth session, before any change (``--set fresh113``,
    seed 719, 4 gloo processes on 2 cores): issue 13's classes with values no other set uses,
    under mapp's capture and the profiler, plain DDP/FSDP2 and DP x TP: layer faults of
    1.3-1.5x, a heavier pipeline link, jittered work before each microbatch, host and step
    sleeps, beside healthy, imbalanced and lognormal jobs. Ids end in ``-f113``."""
    g = _held_out_gpt(seed, "-f113", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        g("dp4", "mapp-v1", "layer", rank=3, factor=1.42),
        r(g("pp2dp2", "kineto", "link", link=(1, 3)), "default"),
        r(_jittering(g("tp2dp2", "kineto", "beforemb", rank=2, ms=25), 0.8), "default"),
        g("pp2dp2", "mapp-v1", "healthy"),
        r(ln(g("dp4", "kineto", "hostsleep", rank=0, ms=28), 0.7), "default"),
        r(g("tp2pp2", "kineto", "layer", rank=1, factor=1.41), "tutorial"),
        r(g("pp4", "kineto", "laststage", last_layers=2), "default"),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.75),
        r(_plain("ddp4", "dp4", seed, rank=0, step_sleep_ms=29, tag="-f113"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=2, factor=1.39, tag="-f113"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=0, factor=1.47, tag="-f113"), "tutorial"),
        r(_plain("ddp4", "dp4", seed, tag="-f113"), "tutorial"),
    ]


FRESH114_SEED = 727


def fresh114_set(seed: int = FRESH114_SEED) -> list[Case]:
    """``fresh113``'s question for 2 ranks (``--set fresh114``, seed 727, 2 processes on 2
    cores; its GPU runs take fresh91's model shape). Ids end in ``-f114``."""
    g = _held_out_gpt(seed, "-f114", GPT_GPU_FRESH91)
    r, ln = _recorded, _on_lognormal

    return [
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.39),
        g("dp2", "mapp-v1", "healthy"),
        r(g("pp2", "kineto", "hostsleep", rank=1, ms=27), "default"),
        r(g("tp2", "kineto", "layer", rank=1, factor=1.45), "default"),
        r(ln(g("dp2", "kineto", "layer", rank=0, factor=1.42), 0.8), "default"),
        r(g("pp2", "kineto", "healthy"), "tutorial"),
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=26),
        r(g("dp2", "kineto", "seqlognorm", sigma=0.85), "tutorial"),
        r(_plain("fsdp2", "dp2", seed, rank=1, factor=1.43, tag="-f114"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=0, sleep_ms=32, tag="-f114"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.37, tag="-f114"), "tutorial"),
        r(_plain("fsdp2", "dp2", seed, tag="-f114"), "default"),
    ]


FRESH115_SEED = 733


def fresh115_set(seed: int = FRESH115_SEED) -> list[Case]:
    """Made after the fifty-sixth session's change (a gloo p2p call recorded without shapes
    goes to a pipeline neighbour: the one, or the one whose call ended with it; where no size
    was recorded a link is counted by its messages), to find what it could hide or invent
    (``--set fresh115``, seed 733, 4 gloo processes on 2 cores): megatron-core pipelines under
    the profiler's defaults, heavier links on PP2 x DP2, TP2 x PP2 and PP4 (an end's link and a
    middle one, with and without interleaving), beside healthy, imbalanced and faulted
    pipelines, and one link with shapes recorded. Ids end in ``-f115``."""
    g = _held_out_gpt(seed, "-f115", GPT_GPU_FRESH14)
    r = _recorded

    def v(case: Case) -> Case:
        return _scheduled(case, vpp=2)

    return [
        r(g("pp2dp2", "kineto", "link", link=(0, 2)), "default"),
        r(g("tp2pp2", "kineto", "link", link=(1, 3)), "default"),
        r(g("pp4", "kineto", "link", link=(0, 1)), "default"),
        r(g("pp4", "kineto", "link", link=(2, 3)), "default"),
        r(v(g("pp4", "kineto", "link", link=(2, 3))), "default"),
        r(v(g("pp4", "kineto", "healthy")), "default"),
        r(v(g("pp2dp2", "kineto", "layer", rank=2, factor=1.43)), "default"),
        r(g("pp2dp2", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("tp2pp2", "kineto", "hostsleep", rank=0, ms=27), "default"),
        r(g("pp4", "kineto", "layer", rank=3, factor=1.38), "default"),
        r(g("pp2dp2", "kineto", "link", link=(1, 3)), "tutorial"),
    ]


FRESH116_SEED = 739


def fresh116_set(seed: int = FRESH116_SEED) -> list[Case]:
    """Made after the fifty-sixth session's second change (a pipeline's calls without a peer are
    paired with its two ends neighbours too where that pairs them far closer: interleaved 1F1B),
    to find what it could hide or invent (``--set fresh116``, seed 739, 4 gloo processes on 2
    cores): megatron-core pipelines under the profiler's defaults, interleaved (2 model chunks a
    rank) and not, healthy, imbalanced, faulted and with a heavier link. Ids end in ``-f116``."""
    g = _held_out_gpt(seed, "-f116", GPT_GPU_FRESH14)
    r = _recorded

    def v(case: Case) -> Case:
        return _scheduled(case, vpp=2)

    return [
        r(v(g("pp4", "kineto", "healthy")), "default"),
        r(v(g("pp4", "kineto", "layer", rank=1, factor=1.42)), "default"),
        r(v(g("pp4", "kineto", "hostsleep", rank=2, ms=28)), "default"),
        r(v(g("pp4", "kineto", "link", link=(2, 3))), "default"),
        r(v(g("pp4", "kineto", "seqlognorm", sigma=0.85)), "default"),
        r(v(g("pp2dp2", "kineto", "link", link=(1, 3))), "default"),
        r(v(g("pp2dp2", "kineto", "healthy")), "default"),
        r(v(g("pp2dp2", "kineto", "hostsleep", rank=0, ms=26)), "default"),
        r(g("pp4", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "beforemb", rank=2, ms=24), "default"),
        r(g("tp2pp2", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "laststage", last_layers=3), "default"),
    ]


FRESH117_SEED = 743


def fresh117_set(seed: int = FRESH117_SEED) -> list[Case]:
    """Made after the fifty-sixth session's third change (an interleaved pipeline's calls
    recorded without shapes keep no peer; a plain pipeline's are paired by their ends), to find
    what the three could hide or invent (``--set fresh117``, seed 743, 4 gloo processes on 2
    cores): megatron-core pipelines under the profiler's defaults, interleaved (2 model chunks
    a rank) and not, healthy, imbalanced, faulted and with a heavier link. Ids end in
    ``-f117``."""
    g = _held_out_gpt(seed, "-f117", GPT_GPU_FRESH14)
    r = _recorded

    def v(case: Case) -> Case:
        return _scheduled(case, vpp=2)

    return [
        r(v(g("pp4", "kineto", "healthy")), "default"),
        r(v(g("pp4", "kineto", "layer", rank=3, factor=1.37)), "default"),
        r(v(g("pp4", "kineto", "beforemb", rank=0, ms=26)), "default"),
        r(v(g("pp4", "kineto", "link", link=(2, 3))), "default"),
        r(v(g("pp4", "kineto", "hostsleep", rank=1, ms=25)), "default"),
        r(g("pp4", "kineto", "link", link=(1, 2)), "default"),
        r(g("pp4", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "seqlognorm", sigma=1.0), "default"),
        r(g("pp4", "kineto", "hostsleep", rank=3, ms=29), "default"),
        r(g("pp2dp2", "kineto", "link", link=(0, 2)), "default"),
        r(g("pp2dp2", "kineto", "seqlognorm", sigma=0.8), "default"),
        r(g("tp2pp2", "kineto", "layer", rank=2, factor=1.4), "default"),
    ]


FRESH118_SEED = 751


def fresh118_set(seed: int = FRESH118_SEED) -> list[Case]:
    """Held out at the start of the fifty-seventh session, before any change (``--set fresh118``,
    seed 751, 4 gloo processes on 2 cores): issue 13's classes across its 4-rank layouts, plain
    DDP/FSDP and DP x TP under the profiler, megatron-core under both captures, healthy and
    imbalanced jobs beside faults, with values no other set uses. Ids end in ``-f118``."""
    g = _held_out_gpt(seed, "-f118", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(_plain("ddp4", "dp4", seed, rank=2, factor=1.34, tag="-f118"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=1, factor=1.46, tag="-f118"), "tutorial"),
        r(_plain("fsdp4", "dp4", seed, rank=3, sleep_ms=31, tag="-f118"), "default"),
        r(_plain("ddp4", "dp4", seed, tag="-f118"), "default"),
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.41),
        g("pp2dp2", "mapp-v1", "beforemb", rank=1, ms=27),
        g("tp2pp2", "mapp-v1", "seqlognorm", sigma=0.95),
        g("dp4", "mapp-v1", "healthy"),
        r(g("tp2dp2", "kineto", "hostsleep", rank=0, ms=28), "default"),
        r(ln(g("pp2dp2", "kineto", "layer", rank=3, factor=1.44), 0.7), "tutorial"),
        r(g("pp4", "kineto", "laststage", last_layers=2), "default"),
        r(g("tp2pp2", "kineto", "healthy"), "default"),
    ]


FRESH119_SEED = 757


def fresh119_set(seed: int = FRESH119_SEED) -> list[Case]:
    """``fresh118``'s 2-rank companion (``--set fresh119``, seed 757, for CPUs; its GPU runs take
    fresh91's model shape): DP2, TP2 and PP2 under both captures and plain DDP/FSDP2, healthy and
    imbalanced jobs beside faults, with values no other set uses. Ids end in ``-f119``."""
    g = _held_out_gpt(seed, "-f119", GPT_GPU_FRESH91)
    r = _recorded

    return [
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.46),
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=29),
        g("pp2", "mapp-v1", "healthy"),
        r(g("dp2", "kineto", "hostsleep", rank=1, ms=31), "default"),
        r(g("tp2", "kineto", "layer", rank=1, factor=1.39), "tutorial"),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.42), "default"),
        r(g("dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("tp2", "kineto", "healthy"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.48, tag="-f119"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, step_sleep_ms=33, tag="-f119"), "default"),
        r(_plain("ddp2", "dp2", seed, tag="-f119"), "tutorial"),
        r(_plain("fsdp2", "dp2", seed, rank=1, sleep_ms=34, tag="-f119"), "default"),
    ]



FRESH120_SEED = 761


def fresh120_set(seed: int = FRESH120_SEED) -> list[Case]:
    """Held out at the start of the fifty-eighth session, before any change (``--set fresh120``,
    seed 761, 4 gloo processes on 2 cores): issue 13's classes across its 4-rank layouts, plain
    DDP/FSDP and DP x TP under the profiler, megatron-core under both captures, healthy and
    imbalanced jobs beside faults, with values no other set uses. Ids end in ``-f120``."""
    g = _held_out_gpt(seed, "-f120", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(_plain("ddp4", "dp4", seed, rank=1, sleep_ms=27, tag="-f120"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=0, factor=1.43, tag="-f120"), "tutorial"),
        r(_plain("tp2dp2", "tp2dp2", seed, tag="-f120"), "default"),
        r(_plain("ddp4", "dp4", seed, rank=3, step_sleep_ms=29, tag="-f120"), "default"),
        g("pp2dp2", "mapp-v1", "layer", rank=2, factor=1.38),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=1, ms=26),
        g("pp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.85),
        r(g("tp2pp2", "kineto", "beforemb", rank=3, ms=28), "default"),
        r(ln(g("dp4", "kineto", "layer", rank=2, factor=1.47), 0.75), "tutorial"),
        r(g("pp2dp2", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "layer", rank=1, factor=1.36), "default"),
    ]


FRESH121_SEED = 769


def fresh121_set(seed: int = FRESH121_SEED) -> list[Case]:
    """``fresh120``'s 2-rank companion (``--set fresh121``, seed 769, for CPUs; its GPU runs take
    fresh91's model shape): DP2, TP2 and PP2 under both captures and plain DDP/FSDP2, healthy and
    imbalanced jobs beside faults, with values no other set uses. Ids end in ``-f121``."""
    g = _held_out_gpt(seed, "-f121", GPT_GPU_FRESH91)
    r = _recorded

    return [
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.43),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=28),
        g("dp2", "mapp-v1", "healthy"),
        r(g("pp2", "kineto", "beforemb", rank=0, ms=30), "default"),
        r(g("dp2", "kineto", "layer", rank=1, factor=1.37), "tutorial"),
        r(g("tp2", "kineto", "hostsleep", rank=0, ms=27), "default"),
        r(g("pp2", "kineto", "seqlognorm", sigma=0.95), "default"),
        r(g("dp2", "kineto", "healthy"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, factor=1.41, tag="-f121"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=0, sleep_ms=32, tag="-f121"), "tutorial"),
        r(_plain("fsdp2", "dp2", seed, tag="-f121"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, step_sleep_ms=30, tag="-f121"), "default"),
    ]



FRESH122_SEED = 773


def fresh122_set(seed: int = FRESH122_SEED) -> list[Case]:
    """Held out after the fifty-eighth session's change (``--set fresh122``, seed 773, 4 gloo
    processes on 2 cores): issue 13's classes across its 4-rank layouts, plain DDP/FSDP and DP x
    TP under the profiler, megatron-core under both captures, healthy and imbalanced jobs beside
    faults, with values no other set uses. Ids end in ``-f122``."""
    g = _held_out_gpt(seed, "-f122", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(_plain("fsdp4", "dp4", seed, rank=2, sleep_ms=33, tag="-f122"), "default"),
        r(_plain("ddp4", "dp4", seed, rank=1, factor=1.44, tag="-f122"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.52, tag="-f122"), "tutorial"),
        r(_plain("fsdp4", "dp4", seed, tag="-f122"), "default"),
        g("dp4", "mapp-v1", "layer", rank=1, factor=1.42),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=2, ms=29),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        r(g("pp4", "kineto", "beforemb", rank=2, ms=27), "default"),
        r(ln(g("tp2dp2", "kineto", "layer", rank=0, factor=1.45), 0.8), "tutorial"),
        r(g("dp4", "kineto", "healthy"), "default"),
        r(g("pp2dp2", "kineto", "hostsleep", rank=3, ms=26), "default"),
    ]


FRESH123_SEED = 787


def fresh123_set(seed: int = FRESH123_SEED) -> list[Case]:
    """``fresh122``'s 2-rank companion (``--set fresh123``, seed 787, for CPUs; its GPU runs take
    fresh91's model shape): DP2, TP2 and PP2 under both captures and plain DDP/FSDP2, healthy and
    imbalanced jobs beside faults, with values no other set uses. Ids end in ``-f123``."""
    g = _held_out_gpt(seed, "-f123", GPT_GPU_FRESH91)
    r = _recorded

    return [
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.44),
        g("tp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "beforemb", rank=0, ms=27),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.85),
        r(g("tp2", "kineto", "layer", rank=0, factor=1.46), "default"),
        r(g("pp2", "kineto", "hostsleep", rank=1, ms=32), "tutorial"),
        r(g("dp2", "kineto", "beforemb", rank=0, ms=28), "default"),
        r(g("pp2", "kineto", "healthy"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=0, factor=1.45, tag="-f123"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, step_sleep_ms=31, tag="-f123"), "tutorial"),
        r(_plain("ddp2", "dp2", seed, tag="-f123"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, sleep_ms=29, tag="-f123"), "default"),
    ]


FRESH124_SEED = 797


def fresh124_set(seed: int = FRESH124_SEED) -> list[Case]:
    """Held out at the start of the fifty-ninth session, before any change (``--set fresh124``,
    seed 797, 4 gloo processes on 2 cores): issue 13's classes across its 4-rank layouts, plain
    DDP/FSDP and DP x TP under the profiler, megatron-core under both captures, healthy and
    imbalanced jobs beside faults, with values no other set uses. Ids end in ``-f124``."""
    g = _held_out_gpt(seed, "-f124", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(_plain("ddp4", "dp4", seed, rank=2, factor=1.39, tag="-f124"), "tutorial"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=0, sleep_ms=31, tag="-f124"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=3, step_sleep_ms=34, tag="-f124"), "default"),
        r(_plain("ddp4", "dp4", seed, tag="-f124"), "default"),
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.48),
        g("pp4", "mapp-v1", "beforemb", rank=1, ms=31),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "seqlognorm", sigma=0.95),
        r(g("dp4", "kineto", "hostsleep", rank=0, ms=33), "default"),
        r(ln(g("pp2dp2", "kineto", "layer", rank=1, factor=1.41), 0.85), "tutorial"),
        r(g("tp2pp2", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "layer", rank=3, factor=1.37), "default"),
    ]


FRESH125_SEED = 809


def fresh125_set(seed: int = FRESH125_SEED) -> list[Case]:
    """``fresh124``'s 2-rank companion (``--set fresh125``, seed 809, for CPUs; its GPU runs take
    fresh91's model shape): DP2, TP2 and PP2 under both captures and plain DDP/FSDP2, healthy and
    imbalanced jobs beside faults, with values no other set uses. Ids end in ``-f125``."""
    g = _held_out_gpt(seed, "-f125", GPT_GPU_FRESH91)
    r = _recorded

    return [
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.47),
        g("dp2", "mapp-v1", "hostsleep", rank=0, ms=33),
        g("tp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2", "mapp-v1", "healthy"),
        r(g("dp2", "kineto", "layer", rank=0, factor=1.38), "default"),
        r(g("tp2", "kineto", "beforemb", rank=1, ms=29), "tutorial"),
        r(g("dp2", "kineto", "seqlognorm", sigma=0.8), "default"),
        r(g("tp2", "kineto", "healthy"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, factor=1.49, tag="-f125"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, sleep_ms=35, tag="-f125"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=0, step_sleep_ms=33, tag="-f125"), "tutorial"),
        r(_plain("fsdp2", "dp2", seed, tag="-f125"), "default"),
    ]


FRESH126_SEED = 811


def fresh126_set(seed: int = FRESH126_SEED) -> list[Case]:
    """Held out after the fifty-ninth session's change (``--set fresh126``, seed 811, 4 gloo
    processes on 2 cores): issue 13's classes across its 4-rank layouts, plain DDP/FSDP and DP x
    TP under the profiler, megatron-core under both captures, healthy and imbalanced jobs beside
    faults, with values no other set uses. Ids end in ``-f126``."""
    g = _held_out_gpt(seed, "-f126", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(_plain("fsdp4", "dp4", seed, rank=1, sleep_ms=36, tag="-f126"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, tag="-f126"), "tutorial"),
        r(_plain("ddp4", "dp4", seed, rank=3, factor=1.46, tag="-f126"), "default"),
        g("pp4", "mapp-v1", "hostsleep", rank=2, ms=34),
        g("pp2dp2", "mapp-v1", "layer", rank=0, factor=1.44),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "seqlognorm", sigma=0.85),
        g("dp4", "mapp-v1", "beforemb", rank=3, ms=30),
        r(g("pp4", "kineto", "healthy"), "default"),
        r(ln(g("tp2pp2", "kineto", "layer", rank=1, factor=1.43), 0.9), "tutorial"),
        r(g("pp2dp2", "kineto", "beforemb", rank=2, ms=32), "default"),
        r(g("dp4", "kineto", "seqlognorm", sigma=0.95), "default"),
    ]


FRESH127_SEED = 821


def fresh127_set(seed: int = FRESH127_SEED) -> list[Case]:
    """``fresh126``'s 2-rank companion (``--set fresh127``, seed 821, for CPUs; its GPU runs take
    fresh91's model shape): PP2 under both captures above all (the change's layout), DP2 and TP2,
    plain DDP/FSDP2, healthy and imbalanced jobs beside faults, with values no other set uses.
    Ids end in ``-f127``."""
    g = _held_out_gpt(seed, "-f127", GPT_GPU_FRESH91)
    r = _recorded

    return [
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "beforemb", rank=1, ms=34),
        g("pp2", "mapp-v1", "seqlognorm", sigma=0.8),
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.42),
        r(g("pp2", "kineto", "healthy"), "tutorial"),
        r(g("pp2", "kineto", "hostsleep", rank=0, ms=31), "default"),
        r(g("pp2", "kineto", "layer", rank=0, factor=1.49), "default"),
        r(g("dp2", "kineto", "healthy"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.47, tag="-f127"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, sleep_ms=33, tag="-f127"), "tutorial"),
        r(_plain("ddp2", "dp2", seed, tag="-f127"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, step_sleep_ms=35, tag="-f127"), "default"),
    ]


FRESH128_SEED = 823


def fresh128_set(seed: int = FRESH128_SEED) -> list[Case]:
    """Held out at the start of the sixtieth session, before any change (``--set fresh128``, seed
    823, 4 gloo processes on 2 cores): issue 13's classes across its 4-rank layouts, a heavier
    pipeline link and a heavier last stage among them, plain DDP/FSDP and DP x TP under the
    profiler, megatron-core under both captures, with values no other set uses. Ids end in
    ``-f128``."""
    g = _held_out_gpt(seed, "-f128", GPT_GPU_FRESH14)
    r, ln = _recorded, _on_lognormal

    return [
        r(_plain("ddp4", "dp4", seed, rank=1, step_sleep_ms=32, tag="-f128"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=2, factor=1.43, tag="-f128"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f128"), "tutorial"),
        g("pp4", "mapp-v1", "link", link=(1, 2)),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=2),
        g("dp4", "mapp-v1", "hostsleep", rank=2, ms=35),
        g("pp2dp2", "mapp-v1", "beforemb", rank=3, ms=29),
        g("tp2dp2", "mapp-v1", "healthy"),
        r(g("pp2dp2", "kineto", "laststage", last_layers=2), "default"),
        r(g("tp2dp2", "kineto", "layer", rank=1, factor=1.45), "default"),
        r(ln(g("dp4", "kineto", "hostsleep", rank=3, ms=30), 0.9), "tutorial"),
        r(g("pp4", "kineto", "beforemb", rank=0, ms=33), "default"),
    ]


FRESH129_SEED = 827


def fresh129_set(seed: int = FRESH129_SEED) -> list[Case]:
    """``fresh128``'s 2-rank companion (``--set fresh129``, seed 827, for CPUs; its GPU runs take
    fresh91's model shape): DP2, TP2 and PP2 under both captures (a heavier last stage among
    them), plain DDP/FSDP2, healthy and imbalanced jobs beside faults, with values no other set
    uses. Ids end in ``-f129``."""
    g = _held_out_gpt(seed, "-f129", GPT_GPU_FRESH91)
    r = _recorded

    return [
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.44),
        g("tp2", "mapp-v1", "hostsleep", rank=0, ms=32),
        g("dp2", "mapp-v1", "healthy"),
        r(g("pp2", "kineto", "beforemb", rank=0, ms=30), "default"),
        r(g("tp2", "kineto", "seqlognorm", sigma=0.85), "tutorial"),
        r(g("dp2", "kineto", "hostsleep", rank=1, ms=34), "default"),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.46), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=1, factor=1.41, tag="-f129"), "default"),
        r(_plain("ddp2", "dp2", seed, rank=0, step_sleep_ms=31, tag="-f129"), "default"),
        r(_plain("fsdp2", "dp2", seed, tag="-f129"), "tutorial"),
        r(_plain("ddp2", "dp2", seed, rank=1, sleep_ms=36, tag="-f129"), "default"),
    ]


FRESH130_SEED = 829


def fresh130_set(seed: int = FRESH130_SEED) -> list[Case]:
    """Held out in the sixtieth session, before any change (``--set fresh130``, 8 ranks, seed 829,
    for CPUs: 8 gloo processes on 4 cores): the 8-rank jobs again, twenty-five sessions of
    changes after ``fresh42`` -- DP8, PP4 x DP2, PP2 x DP4 and TP2 x PP2 x DP2 under both
    captures, healthy, with issue 13's heavier last stage and lognormal lengths, and faults with
    values no other 8-rank set uses. Ids end in ``-f130``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f130", **k)
    r = _recorded

    return [
        r(_plain("ddp8", "dp8", seed, rank=3, factor=1.45, tag="-f130"), "default"),
        r(_plain("fsdp8", "dp8", seed, tag="-f130"), "default"),
        # megatron-core, mapp capture
        g("pp4dp2", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "layer", rank=2, factor=1.45),
        g("pp2dp4", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp4", "mapp-v1", "hostsleep", rank=5, ms=27),
        g("tp2pp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("dp8", "mapp-v1", "beforemb", rank=6, ms=26),
        # megatron-core, torch.profiler
        r(g("pp4dp2", "kineto", "laststage", last_layers=3), "default"),
        r(g("pp2dp4", "kineto", "layer", rank=4, factor=1.5), "default"),
        r(g("tp2pp2dp2", "kineto", "healthy"), "default"),
        r(g("dp8", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("pp4dp2", "kineto", "hostsleep", rank=7, ms=28), "tutorial"),
    ]


FRESH131_SEED = 839


def fresh131_set(seed: int = FRESH131_SEED) -> list[Case]:
    """Held out in the sixtieth session, before any change (``--set fresh131``, 16 ranks, seed
    839, for CPUs: 16 gloo processes on 8 cores): ``fresh44``'s widths again -- PP4 x DP4,
    PP2 x DP8, TP2 x PP2 x DP4 and DP16 under both captures, healthy, with a heavier last stage
    and lognormal lengths, and faults with values no other 16-rank set uses. Ids end in
    ``-f131``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f131", **k)
    r = _recorded

    return [
        r(_plain("ddp16", "dp16", seed, rank=12, sleep_ms=29, tag="-f131"), "default"),
        # megatron-core, mapp capture
        g("pp4dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4dp4", "mapp-v1", "hostsleep", rank=9, ms=26),
        g("pp2dp8", "mapp-v1", "layer", rank=11, factor=1.45),
        g("tp2pp2dp4", "mapp-v1", "healthy"),
        g("dp16", "mapp-v1", "layer", rank=5, factor=1.5),
        # megatron-core, torch.profiler
        r(g("pp4dp4", "kineto", "healthy"), "default"),
        r(g("pp2dp8", "kineto", "laststage", last_layers=3), "default"),
        r(g("tp2pp2dp4", "kineto", "layer", rank=10, factor=1.45), "default"),
        r(g("pp4dp4", "kineto", "beforemb", rank=14, ms=27), "default"),
    ]


FRESH132_SEED = 853


def _matmul_layers(seed: int, tag: str):
    """A held-out set's layer faults under mapp's capture on CPUs done with real matmuls of the
    layer's activations for (F-1)x each call's measured time (``gpt_case``'s ``work``)."""
    g = _held_out_gpt(seed, tag, GPT_GPU_FRESH91)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return mm


def fresh132_set(seed: int = FRESH132_SEED) -> list[Case]:
    """Held out in the sixtieth session (``--set fresh132``, seed 853, for CPUs: 2 gloo processes
    on 2 cores): issue 13's "extra matmuls inside forward" under mapp's capture, which no set had
    (its layer faults there slept, so that the ranks sharing the cores were not slowed too):
    megatron-core DP2, TP2 and PP2, each layer of one rank doing real matmuls of its activations
    (``_matmul_layers``). Ids end in ``-f132``."""
    mm = _matmul_layers(seed, "-f132")
    return [mm("dp2", 1, 1.5), mm("dp2", 0, 1.4), mm("tp2", 1, 1.45), mm("tp2", 0, 1.6),
            mm("pp2", 1, 1.5), mm("pp2", 0, 1.4)]


FRESH133_SEED = 857


def fresh133_set(seed: int = FRESH133_SEED) -> list[Case]:
    """``fresh132``'s 4-rank companion (``--set fresh133``, seed 857, 4 gloo processes on 2 cores):
    DP4, TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under mapp's capture, one rank's layers doing
    real matmuls (``_matmul_layers``). Ids end in ``-f133``."""
    mm = _matmul_layers(seed, "-f133")
    return [mm("dp4", 2, 1.5), mm("tp2dp2", 3, 1.45), mm("pp2dp2", 1, 1.5), mm("tp2pp2", 2, 1.4),
            mm("pp4", 1, 1.5), mm("dp4", 0, 1.4)]


FRESH134_SEED = 859


def fresh134_set(seed: int = FRESH134_SEED) -> list[Case]:
    """Held out in the sixty-first session, before any change (``--set fresh134``, 32 ranks, seed
    859, for CPUs: 32 gloo processes on 16 cores): a width between the 16-rank sets and ``scale``'s
    64, which no set had -- PP2 x DP16, PP4 x DP8, TP2 x PP2 x DP8 and DP32 under both captures,
    healthy, with issue 13's heavier last stage and lognormal lengths, and faults. Ids end in
    ``-f134``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f134", **k)
    r = _recorded

    return [
        r(_plain("ddp32", "dp32", seed, rank=17, factor=1.45, tag="-f134"), "default"),
        # megatron-core, mapp capture
        g("pp2dp16", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4dp8", "mapp-v1", "layer", rank=13, factor=1.5),
        g("tp2pp2dp8", "mapp-v1", "hostsleep", rank=22, ms=28),
        g("dp32", "mapp-v1", "healthy"),
        g("pp2dp16", "mapp-v1", "laststage", last_layers=3),
        # megatron-core, torch.profiler
        r(g("pp2dp16", "kineto", "layer", rank=27, factor=1.45), "default"),
        r(g("pp4dp8", "kineto", "healthy"), "default"),
        r(g("tp2pp2dp8", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("dp32", "kineto", "beforemb", rank=9, ms=27), "default"),
    ]


FRESH135_SEED = 863


def fresh135_set(seed: int = FRESH135_SEED) -> list[Case]:
    """Held out in the sixty-first session, before any change (``--set fresh135``, seed 863, for
    CPUs: 4 gloo processes on **4 cores**, one each, where every other 4-rank set of the last
    thirty sessions shared 2): issue 13's 4-rank classes -- plain DDP/FSDP and DP x TP under the
    profiler, megatron-core DP4, TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 under both captures,
    healthy, heavier last stages, lognormal lengths, a heavier link and faults, with values no
    other set uses. Ids end in ``-f135``."""
    g = _held_out_gpt(seed, "-f135", GPT_GPU_FRESH14)
    r = _recorded

    return [
        r(_plain("ddp4", "dp4", seed, rank=2, factor=1.5, tag="-f135"), "default"),
        r(_plain("ddp4", "dp4", seed, rank=0, step_sleep_ms=21, tag="-f135"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.6, tag="-f135"), "tutorial"),
        r(_plain("fsdp4", "dp4", seed, tag="-f135"), "default"),
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "layer", rank=3, factor=1.45),
        g("tp2dp2", "mapp-v1", "layer", rank=0, factor=1.5, work="matmul"),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=1, ms=26),
        g("pp2dp2", "mapp-v1", "link", link=(1, 3)),
        # megatron-core, torch.profiler
        r(g("tp2dp2", "kineto", "beforemb", rank=2, ms=24), "default"),
        r(g("dp4", "kineto", "layer", rank=1, factor=1.4), "default"),
        r(g("pp4", "kineto", "healthy"), "tutorial"),
        r(g("tp2pp2", "kineto", "seqlognorm", sigma=0.8), "default"),
        r(g("pp2dp2", "kineto", "hostsleep", rank=0, ms=31), "default"),
        r(g("pp2dp2", "kineto", "laststage", last_layers=3), "default"),
    ]


FRESH136_SEED = 877


def fresh136_set(seed: int = FRESH136_SEED) -> list[Case]:
    """``fresh135``'s 8-rank companion (``--set fresh136``, seed 877, for CPUs: 8 gloo processes on
    8 cores, one each): DDP8, megatron-core PP4 x DP2, PP2 x DP4, TP2 x PP2 x DP2 and DP8 under
    both captures, healthy, a heavier last stage, lognormal lengths and faults, with values no
    other 8-rank set uses. Ids end in ``-f136``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f136", **k)
    r = _recorded

    return [
        r(_plain("ddp8", "dp8", seed, rank=5, sleep_ms=24, tag="-f136"), "default"),
        # megatron-core, mapp capture
        g("pp4dp2", "mapp-v1", "layer", rank=6, factor=1.45),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=0.85),
        g("tp2pp2dp2", "mapp-v1", "beforemb", rank=4, ms=23),
        g("dp8", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        r(g("pp4dp2", "kineto", "laststage", last_layers=3), "default"),
        r(g("tp2pp2dp2", "kineto", "layer", rank=2, factor=1.5), "default"),
        r(g("pp2dp4", "kineto", "hostsleep", rank=1, ms=25), "tutorial"),
    ]


FRESH137_SEED = 881


def fresh137_set(seed: int = FRESH137_SEED) -> list[Case]:
    """Held out in the sixty-second session, before any change (``--set fresh137``, seed 881, for
    CPUs: 16 gloo processes on **16 cores**, one each, where ``fresh44`` and ``fresh131`` shared
    8): plain DDP16 under the profiler, megatron-core PP4 x DP4, PP2 x DP8, TP2 x PP2 x DP4 and
    DP16 under both captures, healthy, a heavier last stage, lognormal lengths and faults, with
    values no other 16-rank set uses. Ids end in ``-f137``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f137", **k)
    r = _recorded

    return [
        r(_plain("ddp16", "dp16", seed, rank=11, factor=1.5, tag="-f137"), "default"),
        r(_plain("ddp16", "dp16", seed, rank=3, step_sleep_ms=23, tag="-f137"), "tutorial"),
        # megatron-core, mapp capture
        g("pp4dp4", "mapp-v1", "layer", rank=7, factor=1.45),
        g("dp16", "mapp-v1", "layer", rank=10, factor=1.5),
        g("pp2dp8", "mapp-v1", "healthy"),
        g("tp2pp2dp4", "mapp-v1", "seqlognorm", sigma=0.85),
        g("pp4dp4", "mapp-v1", "beforemb", rank=2, ms=25),
        # megatron-core, torch.profiler
        r(g("pp2dp8", "kineto", "layer", rank=13, factor=1.45), "default"),
        r(g("dp16", "kineto", "healthy"), "default"),
        r(g("tp2pp2dp4", "kineto", "hostsleep", rank=6, ms=27), "default"),
        r(g("pp4dp4", "kineto", "laststage", last_layers=3), "tutorial"),
    ]


FRESH138_SEED = 883


def fresh138_set(seed: int = FRESH138_SEED) -> list[Case]:
    """Held out in the sixty-second session, before any change (``--set fresh138``, seed 883, for
    CPUs: **64 gloo processes on 16 cores**, four a core, where ``scale`` ran one a core of 64):
    issue 13's class 3 at its own width -- megatron-core PP2 x DP32 on lognormal lengths under
    both captures -- beside a layer fault, work before each microbatch and a healthy job.
    Ids end in ``-f138``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f138", **k)
    r = _recorded

    return [
        g("pp2dp32", "mapp-v1", "seqlognorm", sigma=0.95),
        r(g("pp2dp32", "kineto", "seqlognorm", sigma=0.95), "default"),
        g("pp2dp32", "mapp-v1", "layer", rank=45, factor=1.45),
        r(g("pp2dp32", "kineto", "healthy"), "default"),
        r(g("pp2dp32", "kineto", "beforemb", rank=50, ms=26), "default"),
    ]


FRESH139_SEED = 887


def fresh139_set(seed: int = FRESH139_SEED) -> list[Case]:
    """Held out in the sixty-third session, before any change (``--set fresh139``, seed 887, for
    CPUs: 8 gloo processes on 8 cores, one each): faults nearer issue 13's 10% floor than most
    sets use (layers 1.2-1.3x, forward matmuls 1.25x, a 15 ms sleep) and heavier pipeline links at
    8 ranks (PP4 x DP2, PP2 x DP4), which only two jobs of one other set had, beside a healthy
    job and lognormal lengths. Ids end in ``-f139``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f139", **k)
    r = _recorded

    return [
        r(_plain("ddp8", "dp8", seed, rank=2, factor=1.25, tag="-f139"), "default"),
        # megatron-core, mapp capture
        g("pp4dp2", "mapp-v1", "layer", rank=5, factor=1.25),
        g("pp2dp4", "mapp-v1", "layer", rank=2, factor=1.22),
        g("dp8", "mapp-v1", "layer", rank=3, factor=1.3),
        g("pp4dp2", "mapp-v1", "link", link=(2, 4)),
        g("pp2dp4", "mapp-v1", "hostsleep", rank=7, ms=15),
        g("tp2pp2dp2", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        r(g("dp8", "kineto", "layer", rank=6, factor=1.25), "default"),
        r(g("pp2dp4", "kineto", "link", link=(1, 5)), "default"),
        r(g("pp4dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
    ]


FRESH140_SEED = 907


def fresh140_set(seed: int = FRESH140_SEED) -> list[Case]:
    """Held out in the sixty-third session, before any change (``--set fresh140``, seed 907, for
    CPUs: 8 gloo processes on 8 cores, one each): a fault no other set injects, a stray process on
    one rank's core (``cpuhog``: the rank's main thread pinned to a core where another process spins ``duty``
    of every 20 ms) -- the CPU's form of two jobs sharing one GPU, every op of the rank slowed by
    turns -- in DP8, PP4 x DP2, PP2 x DP4 and TP2 x PP2 x DP2 under both captures, beside a healthy
    job and lognormal lengths. Ids end in ``-f140``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f140", **k)
    r = _recorded

    return [
        # megatron-core, mapp capture
        g("dp8", "mapp-v1", "cpuhog", rank=3, duty=0.5),
        g("pp4dp2", "mapp-v1", "cpuhog", rank=6, duty=0.6),
        g("pp2dp4", "mapp-v1", "cpuhog", rank=1, duty=0.4),
        g("tp2pp2dp2", "mapp-v1", "cpuhog", rank=5, duty=0.5),
        g("pp4dp2", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        r(g("dp8", "kineto", "cpuhog", rank=0, duty=0.5), "default"),
        r(g("pp4dp2", "kineto", "cpuhog", rank=2, duty=0.4), "default"),
        r(g("tp2pp2dp2", "kineto", "cpuhog", rank=7, duty=0.6), "default"),
        r(g("pp2dp4", "kineto", "seqlognorm", sigma=0.85), "default"),
    ]


FRESH141_SEED = 911


def fresh141_set(seed: int = FRESH141_SEED) -> list[Case]:
    """``fresh140``'s 4-rank companion (``--set fresh141``, seed 911, for CPUs: 4 gloo processes on
    4 cores, one each): a stray process on one rank's core in DP4, TP2 x DP2, PP2 x DP2, PP4 and
    TP2 x PP2 under both captures, beside a healthy job and a heavier last stage. Ids end in
    ``-f141``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f141", **k)
    r = _recorded

    return [
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "cpuhog", rank=2, duty=0.5),
        g("tp2dp2", "mapp-v1", "cpuhog", rank=1, duty=0.45),
        g("pp2dp2", "mapp-v1", "cpuhog", rank=3, duty=0.55),
        g("pp4", "mapp-v1", "cpuhog", rank=0, duty=0.5),
        g("tp2dp2", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        r(g("dp4", "kineto", "cpuhog", rank=1, duty=0.5), "default"),
        r(g("tp2pp2", "kineto", "cpuhog", rank=2, duty=0.5), "default"),
        r(g("pp2dp2", "kineto", "cpuhog", rank=0, duty=0.4), "default"),
        r(g("pp4", "kineto", "laststage", last_layers=3), "default"),
    ]


FRESH142_SEED = 919

# ``fresh142``'s CPU model shapes: every other CPU set ran GPT_MAPP's (hidden 64, seq 32) and
# GPT_PROF's (hidden 512, seq 32); these make each layer's ops tens of times longer
CPU_SHAPE_142 = {"mapp-v1": {"--hidden": "256", "--heads": "8", "--seq": "128"},
                 "kineto": {"--hidden": "768", "--heads": "12", "--seq": "64"}}


def _cpu_shaped(case: Case, shape: dict[str, dict[str, str]]) -> Case:
    """``case`` with the CPU model's ``--hidden``/``--heads``/``--seq`` of ``shape[case.fmt]`` (a
    variant's own later flags, such as lognormal lengths' ``--seq``, still win)."""
    for flag, value in shape[case.fmt].items():
        case.args[case.args.index(flag) + 1] = value
    return case


def fresh142_set(seed: int = FRESH142_SEED) -> list[Case]:
    """Held out in the sixty-third session, before any change (``--set fresh142``, seed 919, for
    CPUs: 4 gloo processes on 4 cores, one each): the CPU model shape no other set used
    (``CPU_SHAPE_142``: hidden 256 and seq 128 under mapp's capture, hidden 768 and seq 64 under
    the profiler), DP4, TP2 x DP2, PP2 x DP2, PP4 and TP2 x PP2 under both captures, healthy, a
    heavier last stage, lognormal lengths, a heavier link and faults. Ids end in ``-f142``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f142", **k), CPU_SHAPE_142)
    r = _recorded

    return [
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "layer", rank=1, factor=1.3),
        g("tp2dp2", "mapp-v1", "layer", rank=2, factor=1.35),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=20),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "link", link=(1, 3)),
        # megatron-core, torch.profiler
        r(g("dp4", "kineto", "layer", rank=0, factor=1.35), "default"),
        r(g("tp2dp2", "kineto", "beforemb", rank=3, ms=25), "default"),
        r(g("pp2dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("pp4", "kineto", "healthy"), "default"),
        r(g("tp2pp2", "kineto", "hostsleep", rank=1, ms=25), "default"),
    ]


FRESH143_SEED = 929


def fresh143_set(seed: int = FRESH143_SEED) -> list[Case]:
    """``fresh142``'s 2-rank companion (``--set fresh143``, seed 929, for CPUs: 2 gloo processes on
    2 cores, one each), the same CPU model shapes (``CPU_SHAPE_142``): megatron-core DP2, TP2 and
    PP2 under both captures, where issue 13 asks that a job of two ranks be decided -- healthy,
    a heavier last stage, lognormal lengths, a heavier link and faults. Ids end in ``-f143``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f143", **k), CPU_SHAPE_142)
    r = _recorded

    return [
        # megatron-core, mapp capture
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.35),
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=22),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        g("dp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "link", link=(0, 1)),
        # megatron-core, torch.profiler
        r(g("tp2", "kineto", "layer", rank=0, factor=1.4), "default"),
        r(g("dp2", "kineto", "hostsleep", rank=1, ms=24), "default"),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.35), "default"),
        r(g("dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("tp2", "kineto", "healthy"), "default"),
    ]


FRESH144_SEED = 941


def fresh144_set(seed: int = FRESH144_SEED) -> list[Case]:
    """Held out in the sixty-sixth session, after its three changes (``--set fresh144``, seed 941,
    for CPUs: 4 gloo processes on 4 cores, one each): lognormal lengths, where a replica draws
    the longest microbatches in most steps by chance, in DP4, TP2 x DP2 and PP2 x DP2 under both
    captures, beside healthy jobs and layer faults, host sleeps and work before each microbatch of
    the same layouts. Ids end in ``-f144``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f144", **k)
    r = _recorded

    return [
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.8),
        g("dp4", "mapp-v1", "layer", rank=2, factor=1.35),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "beforemb", rank=1, ms=20),
        # megatron-core, torch.profiler
        r(g("dp4", "kineto", "seqlognorm", sigma=1.0), "default"),
        r(g("tp2dp2", "kineto", "seqlognorm", sigma=0.8), "default"),
        r(g("dp4", "kineto", "hostsleep", rank=1, ms=25), "default"),
        r(g("tp2dp2", "kineto", "layer", rank=0, factor=1.4), "default"),
        r(g("pp2dp2", "kineto", "healthy"), "default"),
    ]


FRESH145_SEED = 947


def fresh145_set(seed: int = FRESH145_SEED) -> list[Case]:
    """``fresh144``'s 8-rank companion (``--set fresh145``, seed 947, for CPUs: 8 gloo processes on
    8 cores, one each): lognormal lengths in DP8, PP2 x DP4 and TP2 x PP2 x DP2 under both captures,
    beside a healthy job and layer faults and host sleeps. Ids end in ``-f145``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f145", **k)
    r = _recorded

    return [
        # megatron-core, mapp capture
        g("dp8", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("dp8", "mapp-v1", "layer", rank=5, factor=1.35),
        # megatron-core, torch.profiler
        r(g("dp8", "kineto", "seqlognorm", sigma=1.0), "default"),
        r(g("pp2dp4", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("dp8", "kineto", "hostsleep", rank=6, ms=20), "default"),
        r(g("tp2pp2dp2", "kineto", "healthy"), "default"),
    ]



FRESH146_SEED = 971
# ``fresh146``'s CPU model shapes: between GPT_MAPP's and ``CPU_SHAPE_142``'s, no other set's
CPU_SHAPE_146 = {"mapp-v1": {"--hidden": "192", "--heads": "6", "--seq": "192"},
                 "kineto": {"--hidden": "640", "--heads": "10", "--seq": "96"}}


def fresh146_set(seed: int = FRESH146_SEED) -> list[Case]:
    """Held out in the sixty-eighth session, before any change (``--set fresh146``, seed 971, for
    CPUs: 4 gloo processes on 4 cores, one each), a CPU model shape no other set used
    (``CPU_SHAPE_146``): issue 13's plain DDP / FSDP2 and DP x TP profiler jobs, megatron-core DP4,
    TP2 x DP2, PP2 x DP2, PP4 and TP2 x PP2 under both captures -- healthy, a heavier last stage,
    lognormal lengths, a rank sharing its core with a spinning process, and faults. Ids end in
    ``-f146``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f146", **k), CPU_SHAPE_146)
    r = _recorded

    return [
        _plain("ddp4", "dp4", seed, rank=2, factor=1.5, tag="-f146"),
        _plain("fsdp4", "dp4", seed, rank=1, sleep_ms=25, tag="-f146"),
        _plain("tp2dp2", "tp2dp2", seed, tag="-f146"),
        _plain("ddp4", "dp4", seed, rank=3, step_sleep_ms=24, tag="-f146"),
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "layer", rank=3, factor=1.4),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4", "mapp-v1", "layer", rank=1, factor=1.4),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=2, ms=25),
        g("dp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("dp4", "mapp-v1", "cpuhog", rank=0, duty=0.5),
        # megatron-core, torch.profiler
        r(g("dp4", "kineto", "beforemb", rank=2, ms=25), "default"),
        r(g("tp2dp2", "kineto", "healthy"), "default"),
        r(g("pp4", "kineto", "laststage", last_layers=3), "default"),
        r(g("pp2dp2", "kineto", "layer", rank=0, factor=1.45), "default"),
        r(g("tp2dp2", "kineto", "seqlognorm", sigma=1.0), "default"),
        r(g("dp4", "kineto", "hostsleep", rank=0, ms=25), "default"),
    ]


FRESH147_SEED = 977


def fresh147_set(seed: int = FRESH147_SEED) -> list[Case]:
    """``fresh146``'s 8-rank companion (``--set fresh147``, seed 977, for CPUs: 8 gloo processes on
    8 cores, one each), the same CPU model shapes: issue 13's PP4 x DP2 with a heavier last stage
    and lognormal lengths, beside a healthy DP8 and faults in PP4 x DP2, PP2 x DP4, TP2 x PP2 x DP2
    and DP8 under both captures. Ids end in ``-f147``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f147", **k), CPU_SHAPE_146)
    r = _recorded

    return [
        # megatron-core, mapp capture
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp2", "mapp-v1", "layer", rank=6, factor=1.4),
        g("dp8", "mapp-v1", "healthy"),
        g("tp2pp2dp2", "mapp-v1", "hostsleep", rank=5, ms=25),
        # megatron-core, torch.profiler
        r(g("pp4dp2", "kineto", "laststage", last_layers=3), "default"),
        r(g("pp4dp2", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("pp2dp4", "kineto", "layer", rank=3, factor=1.4), "default"),
        r(g("dp8", "kineto", "beforemb", rank=4, ms=25), "default"),
    ]



FRESH148_SEED = 983


def fresh148_set(seed: int = FRESH148_SEED) -> list[Case]:
    """Held out in the sixty-eighth session, after ``fresh146``'s runs and the changes they led to
    (``--set fresh148``, seed 983, for CPUs: 4 gloo processes on 4 cores, one each), the CPU model
    shapes of most sets: PP2 x DP2 with a heavier last stage beside faults on either stage of a
    balanced one, DP4 and TP2 x DP2 faults, a rank sharing its core with a spinning process,
    lognormal lengths and healthy jobs, under both captures. Ids end in ``-f148``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f148", **k)
    r = _recorded

    return [
        # megatron-core, mapp capture
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "layer", rank=0, factor=1.4),
        g("pp2dp2", "mapp-v1", "beforemb", rank=2, ms=25),
        g("dp4", "mapp-v1", "layer", rank=1, factor=1.35),
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.4),
        g("dp4", "mapp-v1", "cpuhog", rank=2, duty=0.5),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        r(g("pp2dp2", "kineto", "laststage", last_layers=2), "default"),
        r(g("pp2dp2", "kineto", "layer", rank=1, factor=1.4), "default"),
        r(g("dp4", "kineto", "layer", rank=2, factor=1.4), "default"),
        r(g("dp4", "kineto", "seqlognorm", sigma=0.9), "default"),
    ]


FRESH149_SEED = 991


def fresh149_set(seed: int = FRESH149_SEED) -> list[Case]:
    """``fresh148``'s 8-rank companion (``--set fresh149``, seed 991, for CPUs: 8 gloo processes on
    8 cores, one each): PP4 x DP2 and PP2 x DP4 with a heavier last stage beside faults on the
    first and middle stages of balanced ones, a host sleep and a DP8 layer fault, under both
    captures. Ids end in ``-f149``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f149", **k)
    r = _recorded

    return [
        # megatron-core, mapp capture
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp2", "mapp-v1", "layer", rank=0, factor=1.4),
        g("pp4dp2", "mapp-v1", "hostsleep", rank=1, ms=25),
        g("pp2dp4", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp4", "mapp-v1", "layer", rank=1, factor=1.4),
        g("dp8", "mapp-v1", "layer", rank=3, factor=1.35),
        # megatron-core, torch.profiler
        r(g("pp4dp2", "kineto", "laststage", last_layers=2), "default"),
        r(g("pp4dp2", "kineto", "layer", rank=2, factor=1.45), "default"),
    ]



FRESH150_SEED = 997


def fresh150_set(seed: int = FRESH150_SEED) -> list[Case]:
    """Held out in the sixty-eighth session after its change (``--set fresh150``, seed 997, for
    CPUs: 4 gloo processes on 4 cores, one each), ``CPU_SHAPE_146``'s model shapes: DP4 layer
    faults and healthy DP4, heavier last stages and lognormal lengths in PP2 x DP2 and TP2 x DP2,
    under both captures. Ids end in ``-f150``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f150", **k), CPU_SHAPE_146)
    r = _recorded

    return [
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "layer", rank=0, factor=1.3),
        g("dp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.35),
        # megatron-core, torch.profiler
        r(g("dp4", "kineto", "layer", rank=3, factor=1.35), "default"),
        r(g("pp2dp2", "kineto", "laststage", last_layers=3), "default"),
        r(g("dp4", "kineto", "healthy"), "default"),
    ]


FRESH151_SEED = 1009


def fresh151_set(seed: int = FRESH151_SEED) -> list[Case]:
    """``fresh150``'s 8-rank companion (``--set fresh151``, seed 1009, for CPUs: 8 gloo processes
    on 8 cores, one each): PP4 x DP2 and PP2 x DP4 with a heavier last stage or lognormal lengths
    beside a layer fault on a replica of the first stage and work before each microbatch. Ids end
    in ``-f151``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f151", **k), CPU_SHAPE_146)
    r = _recorded

    return [
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4dp2", "mapp-v1", "layer", rank=1, factor=1.35),
        g("pp2dp4", "mapp-v1", "laststage", last_layers=3),
        r(g("pp2dp4", "kineto", "laststage", last_layers=3), "default"),
        r(g("pp4dp2", "kineto", "beforemb", rank=4, ms=25), "default"),
    ]


FRESH152_SEED = 1013
# ``fresh152``'s CPU model shapes, no other set's: narrower and longer than ``CPU_SHAPE_146``'s
CPU_SHAPE_152 = {"mapp-v1": {"--hidden": "160", "--heads": "4", "--seq": "224"},
                 "kineto": {"--hidden": "576", "--heads": "8", "--seq": "80"}}


def fresh152_set(seed: int = FRESH152_SEED) -> list[Case]:
    """Held out in the sixty-ninth session, before any change (``--set fresh152``, seed 1013, for
    CPUs as issue 13's held-out jobs ran: 4 gloo processes on 2 cores), a CPU model shape no other
    set used (``CPU_SHAPE_152``): issue 13's plain jobs by its own words (DDP4 with 1.5x the
    forward's work or a 20 ms stall before each step, TP2 x DP2 with a rank 1.6x or 2.5x slower),
    megatron-core DP4, TP2 x DP2, PP2 x DP2, PP4 and TP2 x PP2 under both captures: healthy, a
    heavier last stage, lognormal lengths and faults. Ids end in ``-f152``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f152", **k), CPU_SHAPE_152)
    r = _recorded

    return [
        _plain("ddp4", "dp4", seed, rank=1, factor=1.5, tag="-f152"),
        _plain("ddp4", "dp4", seed, rank=2, step_sleep_ms=20, tag="-f152"),
        _plain("ddp4", "dp4", seed, tag="-f152"),
        _plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.6, tag="-f152"),
        _plain("tp2dp2", "tp2dp2", seed, rank=0, factor=2.5, tag="-f152"),
        _plain("fsdp4", "dp4", seed, rank=0, sleep_ms=25, tag="-f152"),
        # megatron-core, mapp capture
        g("tp2dp2", "mapp-v1", "layer", rank=1, factor=1.5),
        g("pp2dp2", "mapp-v1", "beforemb", rank=3, ms=20),
        g("dp4", "mapp-v1", "hostsleep", rank=2, ms=20),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("dp4", "mapp-v1", "layer", rank=0, factor=1.35),
        # megatron-core, torch.profiler
        r(g("tp2dp2", "kineto", "layer", rank=2, factor=1.5), "default"),
        r(g("pp2dp2", "kineto", "laststage", last_layers=3), "default"),
        r(g("dp4", "kineto", "seqlognorm", sigma=0.9), "default"),
        r(g("pp4", "kineto", "layer", rank=2, factor=1.4), "default"),
        r(g("tp2dp2", "kineto", "beforemb", rank=1, ms=20), "default"),
        r(g("dp4", "kineto", "healthy"), "default"),
    ]


FRESH153_SEED = 1019


def fresh153_set(seed: int = FRESH153_SEED) -> list[Case]:
    """``fresh152``'s 8-rank companion (``--set fresh153``, seed 1019, for CPUs: 8 gloo processes
    on 4 cores), its CPU model shapes: issue 13's PP4 x DP2 with a heavier last stage and PP2 x DP4
    on lognormal lengths beside layer faults and a host sleep. Ids end in ``-f153``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f153", **k), CPU_SHAPE_152)
    r = _recorded

    return [
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp4dp2", "mapp-v1", "layer", rank=5, factor=1.4),
        r(g("pp4dp2", "kineto", "laststage", last_layers=3), "default"),
        r(g("dp8", "kineto", "layer", rank=6, factor=1.4), "default"),
        r(g("pp2dp4", "kineto", "hostsleep", rank=1, ms=25), "default"),
    ]


FRESH154_SEED = 1021


def fresh154_set(seed: int = FRESH154_SEED) -> list[Case]:
    """Held out in the sixty-ninth session after ``fresh152``/``fresh153``'s runs (``--set
    fresh154``, seed 1021, for CPUs as issue 13's held-out jobs ran: 4 gloo processes on 2 cores;
    its 8-rank jobs on 4), ``CPU_SHAPE_152``'s model shapes: layer faults under mapp's capture done
    as issue 13 does them, with real matmuls inside the forward (``gpt_case``'s ``work="matmul"``:
    on shared cores the extra work slows the rank's neighbours too, where a sleep gives its core
    away), in DP4, TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4, beside healthy, heavier-last-stage and
    lognormal jobs of the same layouts. Ids end in ``-f154``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f154", **k), CPU_SHAPE_152)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        mm("dp4", 2, 1.4),
        mm("dp4", 0, 1.3),
        mm("tp2dp2", 3, 1.5),
        mm("tp2dp2", 0, 1.35),
        mm("pp2dp2", 1, 1.45),
        mm("pp2dp2", 2, 1.35),
        mm("tp2pp2", 2, 1.5),
        mm("pp4", 1, 1.5),
        g("dp4", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "beforemb", rank=1, ms=25),
    ]


FRESH155_SEED = 1031


def fresh155_set(seed: int = FRESH155_SEED) -> list[Case]:
    """``fresh154``'s 8-rank companion (``--set fresh155``, seed 1031, for CPUs: 8 gloo processes
    on 4 cores), its model shapes and matmul layer faults: PP4 x DP2 with a 1.45x layer fault on a
    replica of the last stage beside a heavier last stage, no fault. Ids end in ``-f155``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f155", **k), CPU_SHAPE_152)

    return [
        g("pp4dp2", "mapp-v1", "layer", rank=6, factor=1.45, work="matmul"),
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
    ]


FRESH156_SEED = 1039
# ``fresh156``'s CPU model shape under mapp's capture, no other set's
CPU_SHAPE_156 = {"mapp-v1": {"--hidden": "256", "--heads": "8", "--seq": "160"},
                 "kineto": {"--hidden": "512", "--heads": "8", "--seq": "96"}}


def fresh156_set(seed: int = FRESH156_SEED) -> list[Case]:
    """Held out in the seventieth session, after mapp's capture began to record each host span's
    run-queue wait (``rdur``) and before any run (``--set fresh156``, seed 1039, for CPUs as
    issue 13's held-out jobs ran: 4 gloo processes on 2 cores), ``CPU_SHAPE_156``: megatron-core
    under mapp's capture in DP4, TP2 x DP2, PP2 x DP2, TP2 x PP2 and PP4 with layer faults of real
    matmuls and of sleeps, work or a sleep before each microbatch, another process on a rank's
    core, beside healthy, heavier-last-stage and lognormal jobs. Ids end in ``-f156``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f156", **k), CPU_SHAPE_156)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        mm("dp4", 1, 1.3),
        mm("dp4", 3, 1.4),
        mm("tp2dp2", 2, 1.35),
        mm("pp2dp2", 0, 1.4),
        mm("pp2dp2", 3, 1.3),
        mm("tp2pp2", 1, 1.4),
        mm("pp4", 2, 1.35),
        g("dp4", "mapp-v1", "layer", rank=2, factor=1.35),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.4),
        g("dp4", "mapp-v1", "beforemb", rank=0, ms=25),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=2, ms=20),
        g("dp4", "mapp-v1", "cpuhog", rank=1, duty=0.5),
        g("dp4", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
    ]


FRESH157_SEED = 1049


def fresh157_set(seed: int = FRESH157_SEED) -> list[Case]:
    """``fresh156``'s 8-rank companion (``--set fresh157``, seed 1049, for CPUs: 8 gloo processes
    on 4 cores), its model shape: PP4 x DP2 and DP8 with matmul layer faults beside a healthy PP4 x
    DP2, a heavier last stage and PP2 x DP4 on lognormal lengths. Ids end in ``-f157``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f157", **k), CPU_SHAPE_156)

    return [
        g("pp4dp2", "mapp-v1", "layer", rank=5, factor=1.4, work="matmul"),
        g("dp8", "mapp-v1", "layer", rank=6, factor=1.35, work="matmul"),
        g("pp4dp2", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=1.0),
    ]


FRESH158_SEED = 1051


def fresh158_set(seed: int = FRESH158_SEED) -> list[Case]:
    """Held out in the seventieth session after its change (own time on shared cores, waits for a
    core: ``--set fresh158``, seed 1051, 4 gloo processes on 2 cores, another process on a rank's
    core on 4), ``CPU_SHAPE_156``: ``fresh156``'s kinds of job with other ranks and factors. Ids
    end in ``-f158``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f158", **k), CPU_SHAPE_156)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        mm("dp4", 0, 1.35),
        mm("dp4", 2, 1.45),
        mm("tp2dp2", 1, 1.4),
        mm("pp2dp2", 2, 1.35),
        mm("tp2pp2", 3, 1.35),
        mm("pp4", 1, 1.4),
        g("dp4", "mapp-v1", "layer", rank=3, factor=1.3),
        g("tp2dp2", "mapp-v1", "layer", rank=0, factor=1.4),
        g("pp2dp2", "mapp-v1", "beforemb", rank=1, ms=25),
        g("dp4", "mapp-v1", "hostsleep", rank=3, ms=20),
        g("dp4", "mapp-v1", "cpuhog", rank=2, duty=0.5),
        g("dp4", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
    ]


FRESH159_SEED = 1061


def fresh159_set(seed: int = FRESH159_SEED) -> list[Case]:
    """Held out in the seventieth session after its second change (nested waits for a core left
    out once, a slow host that waited for its core: ``--set fresh159``, seed 1061, 4 gloo
    processes on 2 cores, another process on a rank's core on 4), ``CPU_SHAPE_152``'s model
    shapes: the kinds of job of ``fresh156``/``fresh158``. Ids end in ``-f159``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f159", **k), CPU_SHAPE_152)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        mm("dp4", 1, 1.4),
        mm("tp2dp2", 3, 1.4),
        mm("pp2dp2", 1, 1.4),
        mm("tp2pp2", 0, 1.4),
        mm("pp4", 3, 1.35),
        g("pp2dp2", "mapp-v1", "layer", rank=0, factor=1.35),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=2, ms=20),
        g("dp4", "mapp-v1", "beforemb", rank=2, ms=25),
        g("dp4", "mapp-v1", "cpuhog", rank=3, duty=0.5),
        g("dp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.0),
    ]


FRESH160_SEED = 1063


def fresh160_set(seed: int = FRESH160_SEED) -> list[Case]:
    """Held out in the seventieth session after its changes, for the development machine's own 2
    cores (``--set fresh160``, seed 1063, 4 gloo processes on 2 cores as issue 13's held-out jobs
    ran), ``CPU_SHAPE_156``'s model shape: matmul and sleep layer faults, work before each
    microbatch and a data-path sleep beside healthy, heavier-last-stage and lognormal jobs. Ids
    end in ``-f160``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f160", **k), CPU_SHAPE_156)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        mm("dp4", 3, 1.35),
        mm("tp2dp2", 0, 1.4),
        mm("pp2dp2", 2, 1.4),
        mm("pp4", 0, 1.4),
        g("tp2pp2", "mapp-v1", "layer", rank=2, factor=1.4),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=0, ms=20),
        g("dp4", "mapp-v1", "beforemb", rank=1, ms=25),
        g("dp4", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
    ]


FRESH161_SEED = 1069
# ``fresh161``'s CPU model shapes, no other set's
CPU_SHAPE_161 = {"mapp-v1": {"--hidden": "224", "--heads": "8", "--seq": "176"},
                 "kineto": {"--hidden": "448", "--heads": "8", "--seq": "112"}}


def fresh161_set(seed: int = FRESH161_SEED) -> list[Case]:
    """Held out at the start of the seventy-first session, before any change (``--set fresh161``,
    seed 1069, for CPUs as issue 13's held-out jobs ran: 4 gloo processes on 2 cores),
    ``CPU_SHAPE_161``: issue 13's classes across its 4-rank layouts, plain DDP/FSDP and DP x TP
    under the profiler (its defaults, and as the tutorial calls it), megatron-core under both
    captures, healthy and imbalanced jobs beside faults, with values no other set uses. Ids end
    in ``-f161``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f161", **k), CPU_SHAPE_161)

    r = _recorded
    return [
        r(_plain("ddp4", "dp4", seed, rank=1, factor=1.42, tag="-f161"), "default"),
        r(_plain("tp2dp2", "tp2dp2", seed, rank=2, factor=1.52, tag="-f161"), "default"),
        r(_plain("fsdp4", "dp4", seed, rank=0, sleep_ms=29, tag="-f161"), "tutorial"),
        r(_plain("ddp4", "dp4", seed, rank=3, step_sleep_ms=26, tag="-f161"), "default"),
        r(_plain("ddp4", "dp4", seed, tag="-f161"), "default"),
        r(_plain("fsdp4", "dp4", seed, tag="-f161"), "tutorial"),
        r(g("dp4", "kineto", "layer", rank=2, factor=1.43), "default"),
        r(g("tp2dp2", "kineto", "layer", rank=1, factor=1.47), "default"),
        r(g("pp2dp2", "kineto", "beforemb", rank=3, ms=26), "default"),
        r(g("tp2pp2", "kineto", "hostsleep", rank=0, ms=24), "tutorial"),
        r(g("pp4", "kineto", "laststage", last_layers=2), "default"),
        r(g("dp4", "kineto", "seqlognorm", sigma=0.85), "default"),
        r(g("tp2dp2", "kineto", "healthy"), "default"),
        r(g("pp2dp2", "kineto", "healthy"), "tutorial"),
        g("dp4", "mapp-v1", "layer", rank=0, factor=1.42, work="matmul"),
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.47, work="matmul"),
        g("pp2dp2", "mapp-v1", "beforemb", rank=2, ms=24),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.85),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "cpuhog", rank=1, duty=0.45),
    ]


FRESH162_SEED = 1087


def fresh162_set(seed: int = FRESH162_SEED) -> list[Case]:
    """``fresh161``'s 2-rank companion (``--set fresh162``, seed 1087, for CPUs, 2 gloo processes),
    ``CPU_SHAPE_161``: DP2, TP2 and PP2 under both captures and plain DDP/FSDP2 under the profiler,
    healthy and imbalanced jobs beside faults. Ids end in ``-f162``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f162", **k), CPU_SHAPE_161)

    r = _recorded
    return [
        r(_plain("ddp2", "dp2", seed, rank=1, factor=1.44, tag="-f162"), "default"),
        r(_plain("fsdp2", "dp2", seed, rank=0, step_sleep_ms=28, tag="-f162"), "default"),
        r(_plain("ddp2", "dp2", seed, tag="-f162"), "tutorial"),
        r(g("dp2", "kineto", "layer", rank=0, factor=1.41), "default"),
        r(g("tp2", "kineto", "beforemb", rank=1, ms=27), "default"),
        r(g("pp2", "kineto", "layer", rank=1, factor=1.43), "tutorial"),
        r(g("tp2", "kineto", "healthy"), "default"),
        r(g("dp2", "kineto", "seqlognorm", sigma=0.95), "default"),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.42, work="matmul"),
        g("tp2", "mapp-v1", "healthy"),
    ]


FRESH163_SEED = 1091
# ``fresh163``-``fresh166``'s CPU model shapes under mapp's capture, no other set's
CPU_SHAPE_163 = {"mapp-v1": {"--hidden": "288", "--heads": "8", "--seq": "144"},
                 "kineto": {"--hidden": "448", "--heads": "8", "--seq": "112"}}
CPU_SHAPE_165 = {"mapp-v1": {"--hidden": "192", "--heads": "8", "--seq": "208"},
                 "kineto": {"--hidden": "448", "--heads": "8", "--seq": "112"}}


def _one_rank_a_stage(seed: int, tag: str, shape: dict[str, dict[str, str]]):
    """The case makers of ``fresh163``-``fresh166``: ``gpt_case`` under mapp's capture with the
    set's seed, tag and CPU model shape, and its layer faults of matmuls."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag=tag, **k), shape)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return g, mm


def fresh163_set(seed: int = FRESH163_SEED) -> list[Case]:
    """For the seventy-first session's study of one rank a pipeline stage under mapp's capture
    with the waits for a core recorded (``--set fresh163``, seed 1091, 2 gloo processes on 1
    core; seen by its change), ``CPU_SHAPE_163``: PP2 healthy, with a heavier last stage or
    lognormal lengths, beside layer faults of matmuls and sleeps on either stage and work
    before each microbatch. Ids end in ``-f163``."""
    g, mm = _one_rank_a_stage(seed, "-f163", CPU_SHAPE_163)
    return [
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2", "mapp-v1", "seqlognorm", sigma=0.9),
        mm("pp2", 0, 1.4),
        mm("pp2", 1, 1.4),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.4),
        g("pp2", "mapp-v1", "beforemb", rank=0, ms=25),
    ]


FRESH164_SEED = 1093


def fresh164_set(seed: int = FRESH164_SEED) -> list[Case]:
    """``fresh163``'s PP4 companion (``--set fresh164``, seed 1093, 4 gloo processes on 2 cores;
    seen by the change), ``CPU_SHAPE_163``: healthy, a heavier last stage, lognormal lengths and
    a matmul layer fault on the first stage. Ids end in ``-f164``."""
    g, mm = _one_rank_a_stage(seed, "-f164", CPU_SHAPE_163)
    return [
        g("pp4", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "laststage", last_layers=2),
        g("pp4", "mapp-v1", "seqlognorm", sigma=0.9),
        mm("pp4", 0, 1.4),
    ]


FRESH165_SEED = 1097


def fresh165_set(seed: int = FRESH165_SEED) -> list[Case]:
    """Held out from the seventy-first session's change (``--set fresh165``, seed 1097, run as
    ``fresh163``), ``CPU_SHAPE_165``: ``fresh163``'s kinds of PP2 job with other ranks and
    factors. Ids end in ``-f165``."""
    g, mm = _one_rank_a_stage(seed, "-f165", CPU_SHAPE_165)
    return [
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2", "mapp-v1", "seqlognorm", sigma=1.0),
        mm("pp2", 0, 1.35),
        mm("pp2", 1, 1.45),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=22),
    ]


FRESH166_SEED = 1103


def fresh166_set(seed: int = FRESH166_SEED) -> list[Case]:
    """``fresh165``'s PP4 companion, held out from the change (``--set fresh166``, seed 1103, run
    as ``fresh164``), ``CPU_SHAPE_165``. Ids end in ``-f166``."""
    g, mm = _one_rank_a_stage(seed, "-f166", CPU_SHAPE_165)
    return [
        g("pp4", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "laststage", last_layers=2),
        mm("pp4", 0, 1.45),
        mm("pp4", 3, 1.35),
    ]

FRESH167_SEED = 1109


def fresh167_set(seed: int = FRESH167_SEED) -> list[Case]:
    """For the seventy-second session's study of a job's only pipeline link on one shared core
    (``--set fresh167``, seed 1109, run as ``fresh163``: 2 gloo processes on 1 core; seen by its
    change): PP2 under mapp's capture with 4, 2 and 1 MB more on every exchange of the link, in
    both of ``fresh163``'s and ``fresh165``'s CPU model shapes. Ids end in ``-f167``."""
    def link(mb: int, shape: dict[str, dict[str, str]]) -> Case:
        g, _ = _one_rank_a_stage(seed, f"-{mb}mb-f167", shape)    # (one id per size)
        return g("pp2", "mapp-v1", "link", link=(0, 1), link_bytes=mb * 1_000_000)

    return [link(4, CPU_SHAPE_163), link(2, CPU_SHAPE_165), link(1, CPU_SHAPE_163)]


FRESH168_SEED = 1117
CPU_SHAPE_168 = {"mapp-v1": {"--hidden": "224", "--heads": "8", "--seq": "176"},
                 "kineto": {"--hidden": "448", "--heads": "8", "--seq": "112"}}


def fresh168_set(seed: int = FRESH168_SEED) -> list[Case]:
    """Held out from the seventy-second session's changes (``--set fresh168``, seed 1117, run as
    ``fresh163`` on 1 core and on 2), ``CPU_SHAPE_168``: PP2 under mapp's capture, healthy or
    imbalanced, layer faults of matmuls and sleeps on either stage, host faults. Ids end in
    ``-f168``."""
    g, mm = _one_rank_a_stage(seed, "-f168", CPU_SHAPE_168)
    return [
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2", "mapp-v1", "seqlognorm", sigma=0.8),
        mm("pp2", 0, 1.5),
        mm("pp2", 1, 1.35),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.45),
        g("pp2", "mapp-v1", "beforemb", rank=1, ms=30),
        g("pp2", "mapp-v1", "hostsleep", rank=0, ms=20),
    ]


FRESH169_SEED = 1123


def fresh169_set(seed: int = FRESH169_SEED) -> list[Case]:
    """``fresh168``'s PP4 companion, held out from the seventy-second session's changes
    (``--set fresh169``, seed 1123, 4 gloo processes on 2 cores and on 4), ``CPU_SHAPE_168``:
    healthy, a heavier last stage, lognormal lengths, matmul layer faults on the first and a
    middle stage, work before each microbatch on the first. Ids end in ``-f169``."""
    g, mm = _one_rank_a_stage(seed, "-f169", CPU_SHAPE_168)
    return [
        g("pp4", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "laststage", last_layers=2),
        g("pp4", "mapp-v1", "seqlognorm", sigma=0.9),
        mm("pp4", 0, 1.45),
        mm("pp4", 2, 1.4),
        g("pp4", "mapp-v1", "beforemb", rank=0, ms=25),
    ]


FRESH170_SEED = 1129


def fresh170_set(seed: int = FRESH170_SEED) -> list[Case]:
    """Held out, to see how DP2 and TP2 under mapp's capture read with **2 processes on 1 core**
    (``--set fresh170``, seed 1129, run as ``fresh163``), ``CPU_SHAPE_168``: healthy, lognormal
    lengths, matmul layer faults and a host sleep. Ids end in ``-f170``."""
    g, mm = _one_rank_a_stage(seed, "-f170", CPU_SHAPE_168)
    return [
        g("dp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        mm("dp2", 1, 1.4),
        g("dp2", "mapp-v1", "hostsleep", rank=0, ms=25),
        g("tp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "seqlognorm", sigma=0.9),
        mm("tp2", 0, 1.45),
        g("tp2", "mapp-v1", "hostsleep", rank=1, ms=25),
    ]


FRESH171_SEED = 1151
# ``fresh171``'s CPU model shapes, no other set's
CPU_SHAPE_171 = {"mapp-v1": {"--hidden": "240", "--heads": "8", "--seq": "160"},
                 "kineto": {"--hidden": "384", "--heads": "8", "--seq": "128"}}


def fresh171_set(seed: int = FRESH171_SEED) -> list[Case]:
    """Held out from every change up to the seventy-second session (``--set fresh171``, seed
    1151, 4 gloo processes on 2 cores as issue 13 runs them): its 4-process classes (plain DDP
    with more forward work or a sleep before each step, DP2 x TP2 from process groups with one
    rank 1.6x and 2.5x, FSDP2 with a data-path sleep) and every 4-rank megatron-core layout under
    both captures, healthy, imbalanced and faulted, in ``CPU_SHAPE_171``. Ids end in ``-f171``."""
    def g(*a, **k):
        return _cpu_shaped(gpt_case(*a, seed=seed, tag="-f171", **k), CPU_SHAPE_171)

    return [
        _plain("ddp4", "dp4", seed, rank=2, factor=1.55, tag="-f171"),
        _plain("ddp4", "dp4", seed, rank=1, step_sleep_ms=22, tag="-f171"),
        _plain("ddp4", "dp4", seed, tag="-f171"),
        _plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.6, tag="-f171"),
        _plain("tp2dp2", "tp2dp2", seed, rank=0, factor=2.5, tag="-f171"),
        _plain("fsdp4", "dp4", seed, rank=0, sleep_ms=27, tag="-f171"),
        # megatron-core, mapp capture
        g("tp2dp2", "mapp-v1", "layer", rank=1, factor=1.45),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=2, ms=24),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2dp2", "mapp-v1", "layer", rank=3, factor=1.5, work="matmul"),
        # megatron-core, torch.profiler
        g("tp2dp2", "kineto", "layer", rank=3, factor=1.6),
        g("pp2dp2", "kineto", "beforemb", rank=1, ms=24),
        g("dp4", "kineto", "healthy"),
        g("pp4", "kineto", "seqlognorm", sigma=1.0),
        g("tp2pp2", "kineto", "layer", rank=2, factor=1.4),
        g("dp4", "kineto", "hostsleep", rank=0, ms=26),
    ]


FRESH172_SEED = 1153
FRESH173_SEED = 1163
# ``fresh172``'s and ``fresh173``'s CPU model shapes, no other set's
CPU_SHAPE_172 = {"mapp-v1": {"--hidden": "256", "--heads": "8", "--seq": "144"},
                 "kineto": {"--hidden": "320", "--heads": "8", "--seq": "128"}}


def fresh172_set(seed: int = FRESH172_SEED) -> list[Case]:
    """Held out at 16 ranks after mapp's capture began to record each span's wait for a core
    (``--set fresh172``, seed 1153, 16 gloo processes on 8 cores), ``CPU_SHAPE_172``: PP4 x DP4,
    PP2 x DP8, TP2 x PP2 x DP4 and DP16, mostly under mapp's capture: healthy, a heavier last
    stage, lognormal lengths, matmul layer faults on the first and a middle stage, a host
    sleep; two profiler jobs. Ids end in ``-f172``."""
    g, mm = _one_rank_a_stage(seed, "-f172", CPU_SHAPE_172)
    return [
        g("pp4dp4", "mapp-v1", "healthy"),
        g("pp2dp8", "mapp-v1", "laststage", last_layers=3),
        mm("pp4dp4", 5, 1.45),
        g("tp2pp2dp4", "mapp-v1", "seqlognorm", sigma=1.0),
        mm("pp2dp8", 0, 1.4),
        g("dp16", "mapp-v1", "hostsleep", rank=11, ms=25),
        g("pp4dp4", "kineto", "layer", rank=14, factor=1.5),
        g("pp2dp8", "kineto", "healthy"),
    ]


def fresh173_set(seed: int = FRESH173_SEED) -> list[Case]:
    """``fresh172``'s 8-rank companion (``--set fresh173``, seed 1163, 8 gloo processes on 4
    cores), ``CPU_SHAPE_172``: issue 13's PP4 x DP2 with a heavier last stage under both
    captures, PP2 x DP4, TP2 x PP2 x DP2 and plain DDP8, healthy, imbalanced and faulted. Ids end
    in ``-f173``."""
    g, mm = _one_rank_a_stage(seed, "-f173", CPU_SHAPE_172)
    return [
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp2", "kineto", "laststage", last_layers=2),
        mm("pp4dp2", 1, 1.4),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp4", "mapp-v1", "beforemb", rank=4, ms=24),
        _plain("ddp8", "dp8", seed, rank=6, factor=1.5, tag="-f173"),
        g("tp2pp2dp2", "kineto", "hostsleep", rank=3, ms=25),
    ]


FRESH174_SEED = 1171


def fresh174_set(seed: int = FRESH174_SEED) -> list[Case]:
    """Held out for issue 13's "heavier traffic on one link" after mapp's capture began to record
    each span's wait for a core (``--set fresh174``, seed 1171, 4 gloo processes on 2 cores and
    on 4), ``CPU_SHAPE_172``: a heavier link of PP2 x DP2, PP4 and TP2 x PP2 under both captures
    (2.5-5 MB more on every exchange), beside the same layouts healthy. Ids end in ``-f174``."""
    g, _ = _one_rank_a_stage(seed, "-f174", CPU_SHAPE_172)
    return [
        g("pp2dp2", "mapp-v1", "link", link=(1, 3), link_bytes=3_000_000),
        g("pp4", "mapp-v1", "link", link=(2, 1), link_bytes=4_000_000),
        g("tp2pp2", "mapp-v1", "link", link=(0, 2), link_bytes=5_000_000),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "healthy"),
        g("pp2dp2", "kineto", "link", link=(2, 0), link_bytes=2_500_000),
        g("pp4", "kineto", "link", link=(1, 2), link_bytes=4_000_000),
        g("tp2pp2", "kineto", "healthy"),
    ]


FRESH175_SEED = 1181


def fresh175_set(seed: int = FRESH175_SEED) -> list[Case]:
    """Held out for issue 13's two-rank classes under the profiler (``--set fresh175``, seed
    1181, 2 gloo processes on 2 cores and on 1), ``CPU_SHAPE_172``: plain DDP2 with 1.5x the
    forward's matmuls on rank 1 or a sleep before each step, healthy FSDP2, and megatron-core TP2
    with work before each of rank 1's microbatches (class 2's job on CPUs), a TP2 layer fault,
    DP2 healthy and on lognormal lengths, PP2 with a heavier last stage. Ids end in ``-f175``."""
    g, _ = _one_rank_a_stage(seed, "-f175", CPU_SHAPE_172)
    return [
        _plain("ddp2", "dp2", seed, rank=1, factor=1.5, tag="-f175"),
        _plain("ddp2", "dp2", seed, rank=0, step_sleep_ms=22, tag="-f175"),
        _plain("fsdp2", "dp2", seed, tag="-f175"),
        g("tp2", "kineto", "beforemb", rank=1, ms=22),
        g("tp2", "kineto", "layer", rank=0, factor=1.45),
        g("dp2", "kineto", "healthy"),
        g("dp2", "kineto", "seqlognorm", sigma=0.9),
        g("pp2", "kineto", "laststage", last_layers=2),
    ]


FRESH176_SEED = 1187


def fresh176_set(seed: int = FRESH176_SEED) -> list[Case]:
    """``fresh175``'s two-rank classes under mapp's capture (``--set fresh176``, seed 1187, 2
    gloo processes on 2 cores), ``CPU_SHAPE_172``: DP2, TP2 and PP2 healthy or faulted (matmul
    layer faults on either pipeline stage and in DP2, work before each of a TP rank's
    microbatches, a host sleep), PP2 on lognormal lengths and with a heavier last stage. Ids end
    in ``-f176``."""
    g, mm = _one_rank_a_stage(seed, "-f176", CPU_SHAPE_172)
    return [
        mm("dp2", 0, 1.4),
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=22),
        mm("pp2", 1, 1.45),
        g("pp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "hostsleep", rank=1, ms=24),
        g("pp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
    ]



FRESH177_SEED = 1193
FRESH178_SEED = 1201
# ``fresh177``'s and ``fresh178``'s CPU model shapes, no other set's
CPU_SHAPE_177 = {"mapp-v1": {"--hidden": "272", "--heads": "8", "--seq": "136"},
                 "kineto": {"--hidden": "352", "--heads": "8", "--seq": "112"}}


def fresh177_set(seed: int = FRESH177_SEED) -> list[Case]:
    """Held out from every change up to the seventy-fourth session (``--set fresh177``, seed
    1193, 4 gloo processes on 2 cores as issue 13 runs them), ``CPU_SHAPE_177``: issue 13's
    4-process classes with values no other set uses (plain DDP with more forward work or a sleep
    before each step, DP2 x TP2 from process groups with one rank 1.7x, FSDP2 with a data-path
    sleep) and every 4-rank megatron-core layout under both captures, healthy, imbalanced and
    faulted. Ids end in ``-f177``."""
    g, mm = _one_rank_a_stage(seed, "-f177", CPU_SHAPE_177)
    return [
        _plain("ddp4", "dp4", seed, rank=3, factor=1.6, tag="-f177"),
        _plain("ddp4", "dp4", seed, rank=0, step_sleep_ms=24, tag="-f177"),
        _plain("tp2dp2", "tp2dp2", seed, rank=2, factor=1.7, tag="-f177"),
        _plain("fsdp4", "dp4", seed, rank=1, sleep_ms=25, tag="-f177"),
        _plain("tp2dp2", "tp2dp2", seed, tag="-f177"),
        # megatron-core, mapp capture
        mm("dp4", 1, 1.5),
        g("tp2pp2", "mapp-v1", "beforemb", rank=3, ms=23),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2dp2", "mapp-v1", "healthy"),
        mm("pp4", 2, 1.5),
        # megatron-core, torch.profiler
        g("pp4", "kineto", "laststage", last_layers=3),
        g("tp2dp2", "kineto", "hostsleep", rank=1, ms=25),
        g("dp4", "kineto", "layer", rank=2, factor=1.5),
        g("pp2dp2", "kineto", "healthy"),
    ]


def fresh178_set(seed: int = FRESH178_SEED) -> list[Case]:
    """``fresh177``'s 8-rank companion (``--set fresh178``, seed 1201, 8 gloo processes on 4
    cores), ``CPU_SHAPE_177``: issue 13's PP4 x DP2 with a heavier last stage, PP2 x DP4 on
    lognormal lengths, TP2 x PP2 x DP2 and DDP8, healthy and faulted, under both captures. Ids
    end in ``-f178``."""
    g, mm = _one_rank_a_stage(seed, "-f178", CPU_SHAPE_177)
    return [
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp2", "kineto", "healthy"),
        mm("pp2dp4", 5, 1.45),
        g("pp2dp4", "kineto", "seqlognorm", sigma=1.0),
        g("tp2pp2dp2", "mapp-v1", "hostsleep", rank=6, ms=26),
        g("tp2pp2dp2", "kineto", "layer", rank=4, factor=1.5),
        _plain("ddp8", "dp8", seed, rank=2, step_sleep_ms=24, tag="-f178"),
        _plain("ddp8", "dp8", seed, tag="-f178"),
    ]



FRESH179_SEED = 1213
FRESH180_SEED = 1217


def fresh179_set(seed: int = FRESH179_SEED) -> list[Case]:
    """Issue 13's two-rank classes held out once more (``--set fresh179``, seed 1213, 2 gloo
    processes on 2 cores), ``CPU_SHAPE_177``, under both captures with values no other set uses:
    plain DDP2 with more forward work or a sleep before each step, FSDP2 with a data-path sleep,
    megatron-core TP2 with work before each of a rank's microbatches (class 2's job on CPUs),
    layer faults of DP2, TP2 and either PP2 stage, healthy, lognormal and heavier-last-stage jobs.
    Ids end in ``-f179``."""
    g, mm = _one_rank_a_stage(seed, "-f179", CPU_SHAPE_177)
    return [
        _plain("ddp2", "dp2", seed, rank=0, factor=1.55, tag="-f179"),
        _plain("ddp2", "dp2", seed, rank=1, step_sleep_ms=24, tag="-f179"),
        _plain("fsdp2", "dp2", seed, rank=0, sleep_ms=26, tag="-f179"),
        g("tp2", "kineto", "beforemb", rank=0, ms=24),
        g("tp2", "mapp-v1", "beforemb", rank=1, ms=25),
        g("dp2", "kineto", "layer", rank=1, factor=1.5),
        mm("tp2", 0, 1.5),
        mm("pp2", 0, 1.5),
        g("pp2", "kineto", "layer", rank=1, factor=1.5),
        g("dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2", "kineto", "laststage", last_layers=3),
        g("tp2", "kineto", "healthy"),
        g("dp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "hostsleep", rank=0, ms=25),
    ]


def fresh180_set(seed: int = FRESH180_SEED) -> list[Case]:
    """``fresh179``'s 16-rank companion (``--set fresh180``, seed 1217, 16 gloo processes on 8
    cores), ``CPU_SHAPE_177``: PP4 x DP4, PP2 x DP8, TP2 x PP2 x DP4 and DP16 under both
    captures, healthy, imbalanced and faulted. Ids end in ``-f180``."""
    g, mm = _one_rank_a_stage(seed, "-f180", CPU_SHAPE_177)
    return [
        mm("pp4dp4", 9, 1.5),
        g("pp2dp8", "kineto", "laststage", last_layers=3),
        g("tp2pp2dp4", "mapp-v1", "healthy"),
        g("dp16", "kineto", "hostsleep", rank=7, ms=26),
        g("pp2dp8", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2pp2dp4", "kineto", "layer", rank=13, factor=1.5),
    ]



FRESH181_SEED = 1223


def fresh181_set(seed: int = FRESH181_SEED) -> list[Case]:
    """Issue 13's class 3 at its own width held out again (``--set fresh181``, seed 1223, for
    CPUs: 64 gloo processes on 16 cores, four a core, as ``fresh138``): megatron-core PP2 x DP32
    on lognormal lengths under both captures (the profiler with its defaults, no shapes), with a
    heavier last stage, beside a matmul layer fault and a host sleep. Ids end in ``-f181``."""
    g, mm = _one_rank_a_stage(seed, "-f181", CPU_SHAPE_177)
    r = _recorded
    return [
        g("pp2dp32", "mapp-v1", "seqlognorm", sigma=1.1),
        r(g("pp2dp32", "kineto", "seqlognorm", sigma=0.85), "default"),
        g("pp2dp32", "mapp-v1", "laststage", last_layers=3),
        mm("pp2dp32", 17, 1.5),
        r(g("pp2dp32", "kineto", "hostsleep", rank=38, ms=26), "default"),
    ]


FRESH182_SEED = 1229
# ``fresh182``'s CPU model shapes, no other set's
CPU_SHAPE_182 = {"mapp-v1": {"--hidden": "240", "--heads": "8", "--seq": "120"},
                 "kineto": {"--hidden": "320", "--heads": "8", "--seq": "104"}}


def _featured(case: Case, recompute: str | None = None, experts: int | None = None, ep: int = 1,
              skew: float = 0.0, sp: bool = False) -> Case:
    """``case`` with a model feature production jobs run: activation recomputation
    (``--recompute full`` or ``selective``) or a mixture of ``experts`` over ``ep``
    expert-parallel ranks (the layout's DP ranks split into expert groups), its router skewed
    by ``skew`` toward the first expert rank's experts (``--moe-skew``: a healthy case becomes
    imbalance, ``hotexperts``), with ``sp`` sequence parallelism (which megatron-core wants of
    experts beside TP). The id names the feature after the layout (``rcfull``, ``rcsel``, ``sp``,
    ``moe8ep4``, ``skew2``)."""
    layout = next(k for k, v in LAYOUTS.items() if v == case.layout and case.id.startswith(f"gpt-{k}-"))
    names = ([{"full": "rcfull", "selective": "rcsel"}[recompute]] if recompute else []) + (["sp"] if sp else []) + \
        ([f"moe{experts}ep{ep}"] if experts else []) + ([f"skew{skew:g}"] if skew else [])
    for attr in ("id", "baseline"):
        if getattr(case, attr):
            setattr(case, attr, getattr(case, attr).replace(f"gpt-{layout}-", f"gpt-{layout}-{'-'.join(names)}-", 1))
    if skew:
        assert experts, "a router skew needs experts"
        how = {"how": f"every router's logits of the first expert rank's experts +{skew:g}: the ranks "
                      "holding them compute for more of every microbatch's tokens (no rank slowed)"}
        if case.cls == "healthy":
            case.id, case.cls, case.part, case.injected = case.id.replace("-healthy", "-hotexperts"), "imbalance", "experts", [how]
        else:
            case.injected = [*case.injected, how]
    flags = (["--recompute", recompute] if recompute else []) + (["--sequence-parallel"] if sp else []) + \
        (["--moe-experts", str(experts), "--ep", str(ep)] if experts else []) + \
        (["--moe-skew", f"{skew:g}"] if skew else [])
    case.args += flags
    if case.gpu_args is not None:
        case.gpu_args += flags
    return case


def fresh182_set(seed: int = FRESH182_SEED) -> list[Case]:
    """Held out from every change up to the seventy-fifth session (``--set fresh182``, seed 1229,
    4 gloo processes), ``CPU_SHAPE_182``: what production Megatron jobs run and no other set
    did -- full and selective activation recomputation (every layer's forward again inside its
    backward) and mixtures of experts (top-2 routing, tokens sent over all-to-all between expert
    ranks, each rank's experts loaded by what the router picks) -- under both captures, healthy,
    imbalanced (lognormal lengths, a heavier last stage) and faulted. Ids end in ``-f182``."""
    g, mm = _one_rank_a_stage(seed, "-f182", CPU_SHAPE_182)
    rc, sel = (lambda c: _featured(c, recompute="full")), (lambda c: _featured(c, recompute="selective"))

    def moe(c: Case, experts: int = 8, ep: int = 4) -> Case:
        return _featured(c, experts=experts, ep=ep)

    return [
        # mapp's capture
        rc(g("pp2dp2", "mapp-v1", "healthy")),
        rc(mm("pp2dp2", 3, 1.5)),
        rc(g("tp2dp2", "mapp-v1", "beforemb", rank=0, ms=24)),
        sel(g("tp2dp2", "mapp-v1", "healthy")),
        moe(g("dp4", "mapp-v1", "healthy")),
        moe(mm("dp4", 1, 1.5)),
        moe(g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0), experts=4, ep=2),
        moe(g("dp4", "mapp-v1", "hostsleep", rank=2, ms=25)),
        # torch.profiler
        rc(g("pp4", "kineto", "laststage", last_layers=3)),
        rc(g("dp4", "kineto", "layer", rank=2, factor=1.5)),
        moe(g("dp4", "kineto", "healthy")),
        moe(g("dp4", "kineto", "layer", rank=3, factor=1.5)),
        moe(g("pp2dp2", "kineto", "hostsleep", rank=1, ms=25), experts=4, ep=2),
        moe(g("dp4", "kineto", "seqlognorm", sigma=0.9), ep=2),
    ]


FRESH183_SEED = 1231
FRESH184_SEED = 1237


def fresh183_set(seed: int = FRESH183_SEED) -> list[Case]:
    """``fresh182``'s 8-rank companion (``--set fresh183``, seed 1231, 8 gloo processes on 4
    cores), ``CPU_SHAPE_182``: recomputation in PP4 x DP2 (a heavier last stage, a layer fault),
    TP2 x PP2 x DP2 and PP2 x DP4, mixtures of experts over 4 and 8 expert ranks in DP8 and PP2 x
    DP4, healthy, imbalanced and faulted, under both captures. Ids end in ``-f183``."""
    g, mm = _one_rank_a_stage(seed, "-f183", CPU_SHAPE_182)
    rc = lambda c: _featured(c, recompute="full")   # noqa: E731

    def moe(c: Case, experts: int = 8, ep: int = 4) -> Case:
        return _featured(c, experts=experts, ep=ep)

    return [
        rc(g("pp4dp2", "mapp-v1", "laststage", last_layers=3)),
        rc(mm("pp4dp2", 5, 1.5)),
        rc(g("tp2pp2dp2", "kineto", "hostsleep", rank=2, ms=26)),
        rc(g("pp2dp4", "kineto", "healthy")),
        moe(g("dp8", "mapp-v1", "healthy"), ep=8),
        moe(mm("dp8", 6, 1.5), ep=8),
        moe(g("pp2dp4", "mapp-v1", "seqlognorm", sigma=1.0)),
        moe(g("pp2dp4", "kineto", "layer", rank=4, factor=1.5)),
        moe(g("dp8", "kineto", "beforemb", rank=1, ms=25), ep=4),
        moe(g("dp8", "kineto", "healthy"), ep=8),
    ]


def fresh184_set(seed: int = FRESH184_SEED) -> list[Case]:
    """``fresh183`` at 16 ranks (``--set fresh184``, seed 1237, 16 gloo processes on 8 cores),
    ``CPU_SHAPE_182``: recomputation in PP4 x DP4 and TP2 x PP2 x DP4, mixtures of experts over 8
    expert ranks (two expert replicas) in DP16 and PP2 x DP8, healthy, imbalanced and faulted.
    Ids end in ``-f184``."""
    g, mm = _one_rank_a_stage(seed, "-f184", CPU_SHAPE_182)
    rc = lambda c: _featured(c, recompute="full")   # noqa: E731

    def moe(c: Case) -> Case:
        return _featured(c, experts=8, ep=8)

    return [
        rc(mm("pp4dp4", 10, 1.5)),
        rc(g("tp2pp2dp4", "mapp-v1", "healthy")),
        rc(g("pp4dp4", "kineto", "laststage", last_layers=3)),
        moe(g("dp16", "mapp-v1", "hostsleep", rank=11, ms=26)),
        moe(mm("pp2dp8", 3, 1.5)),
        moe(g("pp2dp8", "kineto", "seqlognorm", sigma=1.0)),
        moe(g("dp16", "kineto", "layer", rank=13, factor=1.5)),
    ]


FRESH185_SEED = 1249
# ``fresh185``'s CPU model shapes, no other set's
CPU_SHAPE_185 = {"mapp-v1": {"--hidden": "224", "--heads": "8", "--seq": "128"},
                 "kineto": {"--hidden": "288", "--heads": "8", "--seq": "112"}}


def fresh185_set(seed: int = FRESH185_SEED) -> list[Case]:
    """Mixtures of experts whose routers favour some experts (``--set fresh185``, seed 1249, 4
    gloo processes on 2 cores), ``CPU_SHAPE_185``: the expert ranks holding the favoured experts
    compute for more tokens in every microbatch -- imbalance a router makes, no fault -- alone,
    beside a layer fault on a favoured or another rank and a host sleep, with recomputation too,
    under both captures. Ids end in ``-f185``."""
    g, mm = _one_rank_a_stage(seed, "-f185", CPU_SHAPE_185)

    def moe(c: Case, skew: float, experts: int = 8, ep: int = 4, recompute: str | None = None) -> Case:
        return _featured(c, recompute=recompute, experts=experts, ep=ep, skew=skew)

    return [
        moe(g("dp4", "mapp-v1", "healthy"), 2.0),
        moe(mm("dp4", 2, 1.5), 1.5),
        moe(mm("dp4", 0, 1.5), 1.5),
        moe(g("pp2dp2", "mapp-v1", "healthy"), 2.0, experts=4, ep=2),
        moe(g("dp4", "mapp-v1", "healthy"), 2.5, ep=2),
        moe(g("dp4", "mapp-v1", "healthy"), 2.0, recompute="full"),
        moe(g("dp4", "kineto", "healthy"), 2.0),
        moe(g("dp4", "kineto", "layer", rank=1, factor=1.5), 1.5),
        moe(g("dp4", "kineto", "layer", rank=0, factor=1.5), 1.5),
        moe(g("pp2dp2", "kineto", "healthy"), 2.0, experts=4, ep=2),
        moe(g("dp4", "kineto", "hostsleep", rank=3, ms=25), 2.5, ep=2),
    ]


FRESH186_SEED = 1259


def fresh186_set(seed: int = FRESH186_SEED) -> list[Case]:
    """Mixtures of experts beside tensor parallelism (``--set fresh186``, seed 1259, 4 gloo
    processes on 2 cores), ``CPU_SHAPE_185``: TP2 x DP2 with sequence parallelism, experts whole
    on each of 2 or 4 expert ranks (an expert group across the TP pair), healthy, with a router
    that favours some experts, with recomputation, beside layer faults, work before each
    microbatch and a host sleep, under both captures. Ids end in ``-f186``."""
    g, mm = _one_rank_a_stage(seed, "-f186", CPU_SHAPE_185)

    def moe(c: Case, experts: int = 4, ep: int = 2, skew: float = 0.0, recompute: str | None = None) -> Case:
        return _featured(c, recompute=recompute, experts=experts, ep=ep, skew=skew, sp=True)

    return [
        moe(g("tp2dp2", "mapp-v1", "healthy")),
        moe(mm("tp2dp2", 1, 1.5)),
        moe(g("tp2dp2", "mapp-v1", "beforemb", rank=2, ms=24)),
        moe(g("tp2dp2", "mapp-v1", "healthy"), skew=2.0),
        moe(mm("tp2dp2", 3, 1.5), experts=8, ep=4, recompute="full"),
        moe(g("tp2dp2", "kineto", "healthy")),
        moe(g("tp2dp2", "kineto", "layer", rank=0, factor=1.5)),
        moe(g("tp2dp2", "kineto", "hostsleep", rank=3, ms=25)),
        moe(g("tp2dp2", "kineto", "healthy"), experts=8, ep=4, skew=2.0),
    ]


FRESH187_SEED = 1277


def fresh187_set(seed: int = FRESH187_SEED) -> list[Case]:
    """``fresh185``/``fresh186`` at 8 ranks (``--set fresh187``, seed 1277, 8 gloo processes on 4
    cores), ``CPU_SHAPE_185``: experts beside TP and PP (TP2 x PP2 x DP2 with sequence
    parallelism), over 4 and 8 expert ranks, routers that favour some experts, recomputation,
    lognormal lengths through four pipeline stages, beside layer faults and a host sleep, under
    both captures. Ids end in ``-f187``."""
    g, mm = _one_rank_a_stage(seed, "-f187", CPU_SHAPE_185)

    def moe(c: Case, experts: int = 4, ep: int = 2, skew: float = 0.0, sp: bool = False,
            recompute: str | None = None) -> Case:
        return _featured(c, recompute=recompute, experts=experts, ep=ep, skew=skew, sp=sp)

    return [
        moe(g("tp2pp2dp2", "mapp-v1", "healthy"), sp=True),
        moe(mm("tp2pp2dp2", 5, 1.5), sp=True),
        moe(g("tp2pp2dp2", "mapp-v1", "healthy"), experts=8, ep=4, skew=2.0, sp=True),
        moe(g("pp2dp4", "kineto", "healthy"), experts=8, ep=4, skew=2.0),
        moe(g("tp2pp2dp2", "kineto", "layer", rank=6, factor=1.5), sp=True),
        moe(g("dp8", "mapp-v1", "healthy"), experts=8, ep=8, skew=2.0, recompute="full"),
        moe(g("dp8", "kineto", "hostsleep", rank=4, ms=26), experts=8, ep=8, skew=1.5),
        moe(g("pp4dp2", "mapp-v1", "seqlognorm", sigma=1.0)),
    ]


FRESH188_SEED = 1283


def fresh188_set(seed: int = FRESH188_SEED) -> list[Case]:
    """Issue 13's class 3 width with experts (``--set fresh188``, seed 1283, 64 gloo processes on
    16 cores): megatron-core PP2 x DP32 whose layers hold 8 experts over 8 expert ranks (four
    expert replicas a stage), healthy on lognormal lengths, with favoured experts, beside a 1.5x
    matmul fault and a host sleep, both captures. Ids end in ``-f188``."""
    g, mm = _one_rank_a_stage(seed, "-f188", CPU_SHAPE_185)

    def moe(c: Case, skew: float = 0.0) -> Case:
        return _featured(c, experts=8, ep=8, skew=skew)

    return [
        moe(g("pp2dp32", "mapp-v1", "seqlognorm", sigma=1.0)),
        moe(mm("pp2dp32", 40, 1.5)),
        moe(_recorded(g("pp2dp32", "kineto", "healthy"), "default"), skew=2.0),
        moe(_recorded(g("pp2dp32", "kineto", "hostsleep", rank=21, ms=26), "default")),
    ]


def _slowed_too(case: Case, *others: int) -> Case:
    """``case``'s fault on ``others`` too, alike (``--slow-rank R,S``): several GPUs or hosts of
    one slow node. Its id names every rank (``-r2r3``); any of them is a right top suspect
    (``expect.suspect.ranks``), and the score says whether all were named."""
    first = case.slow_rank
    ranks = [first, *others]
    for args in (case.args, case.gpu_args):
        if args and "--slow-rank" in args:
            args[args.index("--slow-rank") + 1] = ",".join(map(str, ranks))
    case.id = case.id.replace(f"-r{first}-", f"-r{'r'.join(map(str, ranks))}-", 1)
    for inj in [*case.injected, *(case.gpu_injected or [])]:
        inj["ranks"] = ranks
    case.expect = {"suspect": {**case.expect["suspect"], "ranks": ranks}}
    return case


CPU_SHAPE_189 = {"mapp-v1": {"--hidden": "208", "--heads": "8", "--seq": "120"},
                 "kineto": {"--hidden": "304", "--heads": "8", "--seq": "96"}}
FRESH189_SEED = 1289


def fresh189_set(seed: int = FRESH189_SEED) -> list[Case]:
    """Held out at world sizes no other set has (``--set fresh189``, seed 1289, for CPUs: 3 gloo
    processes on 2 cores, 6 on 3), ``CPU_SHAPE_189``: DP3, PP3, TP2 x DP3, PP3 x DP2, PP2 x DP3
    and DP6 under both captures and plain DDP3/DDP6 and DP3 x TP2 under the profiler, healthy,
    imbalanced and faulted. Ids end in ``-f189``."""
    g, mm = _one_rank_a_stage(seed, "-f189", CPU_SHAPE_189)
    tag = "-f189"
    return [
        # 3 ranks
        g("dp3", "mapp-v1", "healthy"),
        mm("dp3", 1, 1.5),
        g("dp3", "kineto", "layer", rank=2, factor=1.5),
        g("dp3", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp3", "mapp-v1", "healthy"),
        g("pp3", "mapp-v1", "laststage", last_layers=3),
        mm("pp3", 1, 1.5),
        g("pp3", "kineto", "healthy"),
        _plain("ddp3", "dp3", seed, rank=2, factor=1.5, tag=tag),
        _plain("ddp3", "dp3", seed, rank=0, step_sleep_ms=24, tag=tag),
        # 6 ranks
        g("tp2dp3", "mapp-v1", "healthy"),
        mm("tp2dp3", 3, 1.5),
        g("tp2dp3", "mapp-v1", "beforemb", rank=4, ms=22),
        g("tp2dp3", "kineto", "layer", rank=5, factor=1.6),
        g("pp3dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        mm("pp3dp2", 2, 1.5),
        g("pp3dp2", "kineto", "hostsleep", rank=3, ms=25),
        g("pp2dp3", "mapp-v1", "laststage", last_layers=3),
        mm("pp2dp3", 4, 1.4),
        g("dp6", "mapp-v1", "hostsleep", rank=5, ms=22),
        _plain("ddp6", "dp6", seed, rank=4, factor=1.4, tag=tag),
        _plain("tp2dp3", "tp2dp3", seed, rank=1, factor=1.7, tag=tag),
    ]


FRESH190_SEED = 1291


def fresh190_set(seed: int = FRESH190_SEED) -> list[Case]:
    """Held out for several ranks slowed alike, as the GPUs or hosts of one slow node (``--set
    fresh190``, seed 1291, for CPUs: 4 gloo processes on 2 cores, 8 on 4), ``CPU_SHAPE_189``: a
    TP group's two ranks, one rank of each pipeline stage, two of eight data-parallel ranks and
    half of a plain DDP job's, beside healthy jobs of the same layouts. Ids end in ``-f190``."""
    g, mm = _one_rank_a_stage(seed, "-f190", CPU_SHAPE_189)
    tag = "-f190"
    return [
        g("tp2dp2", "mapp-v1", "healthy"),
        _slowed_too(mm("tp2dp2", 0, 1.5), 1),
        _slowed_too(g("tp2dp2", "kineto", "layer", rank=2, factor=1.6), 3),
        _slowed_too(mm("pp2dp2", 0, 1.5), 3),
        _slowed_too(g("pp2dp2", "mapp-v1", "hostsleep", rank=1, ms=24), 3),
        _slowed_too(mm("tp2pp2dp2", 2, 1.5), 3),
        g("dp8", "mapp-v1", "healthy"),
        _slowed_too(mm("dp8", 6, 1.4), 7),
        _slowed_too(g("dp8", "kineto", "beforemb", rank=4, ms=24), 5),
        _slowed_too(_plain("ddp4", "dp4", seed, rank=1, factor=1.5, tag=tag), 2),
        _slowed_too(_plain("ddp4", "dp4", seed, rank=3, step_sleep_ms=22, tag=tag), 0),
    ]


def _microbatched(case: Case, n: int) -> Case:
    """``case`` with ``n`` microbatches a step (``--num-microbatches``; the id says ``mbN`` after
    the layout): 1, no gradient accumulation, as most data-parallel jobs run; 12 or 16, a
    pipeline's bubble small."""
    layout = next(k for k, v in LAYOUTS.items() if v == case.layout and case.id.startswith(f"gpt-{k}-"))
    for attr in ("id", "baseline"):
        if getattr(case, attr):
            setattr(case, attr, getattr(case, attr).replace(f"gpt-{layout}-", f"gpt-{layout}-mb{n}-", 1))
    for args in (case.args, case.gpu_args):
        if args and "--num-microbatches" in args:
            args[args.index("--num-microbatches") + 1] = str(n)
    return case


FRESH191_SEED = 1297


def fresh191_set(seed: int = FRESH191_SEED) -> list[Case]:
    """Held out for the microbatches of a step (``--set fresh191``, seed 1297, 4 gloo processes on
    2 cores), ``CPU_SHAPE_189``: one microbatch a step (DP4, TP2 x DP2 under both captures) and
    many (PP2 x DP2 with 16, PP4 with 12), healthy, imbalanced and faulted. Ids end in
    ``-f191``."""
    g, mm = _one_rank_a_stage(seed, "-f191", CPU_SHAPE_189)
    one, many = (lambda c: _microbatched(c, 1)), (lambda c: _microbatched(c, 16))
    return [
        one(g("dp4", "mapp-v1", "healthy")),
        one(mm("dp4", 2, 1.5)),
        one(g("dp4", "mapp-v1", "hostsleep", rank=1, ms=23)),
        one(g("dp4", "mapp-v1", "seqlognorm", sigma=0.9)),
        one(mm("tp2dp2", 3, 1.5)),
        one(g("tp2dp2", "mapp-v1", "beforemb", rank=0, ms=24)),
        one(g("dp4", "kineto", "healthy")),
        one(g("dp4", "kineto", "layer", rank=1, factor=1.5)),
        one(g("tp2dp2", "kineto", "hostsleep", rank=2, ms=25)),
        many(g("pp2dp2", "mapp-v1", "healthy")),
        many(mm("pp2dp2", 1, 1.5)),
        many(g("pp2dp2", "mapp-v1", "laststage", last_layers=3)),
        many(g("pp2dp2", "kineto", "layer", rank=2, factor=1.5)),
        _microbatched(mm("pp4", 2, 1.5), 12),
        _microbatched(g("pp4", "mapp-v1", "seqlognorm", sigma=0.9), 12),
    ]


def _vocabulary(case: Case, n: int) -> Case:
    """``case`` on CPUs with a vocabulary of ``n`` (``--vocab``; the id says ``vocabN`` after the
    layout): the output layer and the loss make the last pipeline stage heavier, the embedding's
    gradient and its all-reduce between the first and the last stage (tied weights) weigh on
    both ends -- imbalance from the model's two ends rather than from more layers."""
    layout = next(k for k, v in LAYOUTS.items() if v == case.layout and case.id.startswith(f"gpt-{k}-"))
    for attr in ("id", "baseline"):
        if getattr(case, attr):
            setattr(case, attr, getattr(case, attr).replace(f"gpt-{layout}-", f"gpt-{layout}-vocab{n}-", 1))
    case.args[case.args.index("--vocab") + 1] = str(n)
    if case.cls == "healthy" and case.layout["pp"] > 1:   # its last stage is the heavier one
        case.cls, case.part = "imbalance", "stages"
        case.id = case.id.replace("-healthy", "-heavyends", 1)
    return case


FRESH192_SEED = 1301


def fresh192_set(seed: int = FRESH192_SEED) -> list[Case]:
    """Held out for a large vocabulary on CPUs (``--set fresh192``, seed 1301, 4 gloo processes on
    2 cores, PP2's 2 on 1), ``CPU_SHAPE_189`` with 8192 tokens (every CPU set before used 256): PP2 x DP2, PP4,
    PP2, TP2 x PP2 and DP4 under both captures, whose last stage the output layer and the loss
    make heavier, healthy, with layer faults on either end or a middle stage and a host sleep.
    Ids end in ``-f192``."""
    g, mm = _one_rank_a_stage(seed, "-f192", CPU_SHAPE_189)

    def v(c: Case) -> Case:
        return _vocabulary(c, 8192)

    return [
        v(g("pp2dp2", "mapp-v1", "healthy")),
        v(mm("pp2dp2", 1, 1.5)),
        v(mm("pp2dp2", 3, 1.5)),
        v(g("pp2dp2", "mapp-v1", "hostsleep", rank=0, ms=24)),
        v(g("pp2dp2", "kineto", "healthy")),
        v(g("pp2dp2", "kineto", "layer", rank=2, factor=1.5)),
        v(g("pp4", "mapp-v1", "healthy")),
        v(mm("pp4", 1, 1.5)),
        v(g("pp2", "mapp-v1", "healthy")),
        v(mm("pp2", 0, 1.5)),
        v(g("tp2pp2", "mapp-v1", "healthy")),
        v(g("tp2pp2", "kineto", "layer", rank=3, factor=1.5)),
        v(g("dp4", "mapp-v1", "healthy")),
        v(mm("dp4", 3, 1.5)),
    ]


MAPP_WINDOW_FIRST = ["--iterations", "5", "--trace", "--trace-interval", "1", "--trace-start", "0",
                     "--continuous-trace-iterations", "5"]
PROF_WINDOW_FIRST = ["--iterations", "5", "--profile-wait", "0", "--profile-warmup", "0", "--profile-active", "5"]
JOB_WINDOW_FIRST = ["--steps", "5", "--profile-wait", "0", "--profile-warmup", "0", "--profile-active", "5"]
"""Windows that trace from the very first iteration, its one-time costs included (the process
groups' first collectives, allocations, lazy setup), as a profiler wrapped around the whole
loop records it."""
FRESH193_SEED = 1303


def fresh193_set(seed: int = FRESH193_SEED) -> list[Case]:
    """Held out for traces that start at the first iteration (``--set fresh193``, seed 1303, 4
    gloo processes on 2 cores), ``CPU_SHAPE_189``: every job traced from its first step to its
    last (``MAPP_WINDOW_FIRST``, ``PROF_WINDOW_FIRST``, ``JOB_WINDOW_FIRST``): DP4, TP2 x DP2 and
    PP2 x DP2 under both captures and plain DDP4/FSDP4 under the profiler, healthy, imbalanced
    and faulted. Ids say ``first`` after the layout and end in ``-f193``."""
    def g(layout: str, fmt: str, variant: str, **k) -> Case:
        c = _cpu_shaped(gpt_case(layout, fmt, variant, seed=seed, tag="-f193",
                                 windows=(MAPP_WINDOW_FIRST, PROF_WINDOW_FIRST), **k), CPU_SHAPE_189)
        c.id = c.id.replace(f"gpt-{layout}-", f"gpt-{layout}-first-", 1)
        return c

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    def plain(*a, **k) -> Case:
        c = _plain(*a, seed=seed, tag="-f193", **k)
        c.id, c.job_window = c.id.replace("-prof-", "-first-prof-", 1), JOB_WINDOW_FIRST
        return c

    return [
        g("dp4", "mapp-v1", "healthy"),
        mm("dp4", 1, 1.5),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=2, ms=24),
        g("pp2dp2", "mapp-v1", "healthy"),
        mm("pp2dp2", 3, 1.5),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("dp4", "kineto", "healthy"),
        g("dp4", "kineto", "layer", rank=2, factor=1.5),
        g("tp2dp2", "kineto", "healthy"),
        g("pp2dp2", "kineto", "seqlognorm", sigma=0.9),
        plain("ddp4", "dp4"),
        plain("ddp4", "dp4", rank=3, factor=1.5),
        plain("fsdp4", "dp4", rank=0, sleep_ms=24),
    ]


def _slowed_from(case: Case, k: int) -> Case:
    """``case``'s fault set in midway, as a fail-slow does: its injector acts from iteration (a
    plain job's step) ``k`` on, 0-based (``--slow-from``). The id says ``-from{k}`` after the
    rank; the manifest's injection says from when (``from_iteration``)."""
    # new lists, not ``+=``; a plain job's GPU arguments are its model size, then ``args``
    case.args = [*case.args, "--slow-from", str(k)]
    if case.job == "gpt" and case.gpu_args is not None:
        case.gpu_args = [*case.gpu_args, "--slow-from", str(k)]
    rank = case.slow_rank
    case.id = case.id.replace(f"-r{rank}-", f"-r{rank}-from{k}-", 1)
    for inj in [*case.injected, *(case.gpu_injected or [])]:
        inj["how"] += f"; from iteration {k} on (0-based), none before: a fault that sets in midway"
        inj["from_iteration"] = k
    return case


FRESH194_SEED = 1307


def fresh194_set(seed: int = FRESH194_SEED) -> list[Case]:
    """Held out for faults that set in midway (``--set fresh194``, seed 1307, 4 gloo processes on
    2 cores), ``CPU_SHAPE_189``: each fault acts from an iteration inside the traced window on
    (``--slow-from``; megatron-core jobs trace iterations 2-5, plain ones steps 2-6), so only the
    window's last two or three iterations are slowed: layer faults, work before each microbatch
    and host sleeps under both captures, plain DDP/FSDP and DP x TP faults under the profiler,
    beside healthy and imbalanced jobs. Ids say ``-from{k}`` and end in ``-f194``."""
    tag = "-f194"

    def g(layout: str, fmt: str, variant: str, **k) -> Case:
        return _cpu_shaped(gpt_case(layout, fmt, variant, seed=seed, tag=tag, **k), CPU_SHAPE_189)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    def plain(*a, **k) -> Case:
        return _plain(*a, seed=seed, tag=tag, **k)

    return [
        g("dp4", "mapp-v1", "healthy"),
        _slowed_from(mm("dp4", 1, 1.5), 3),
        _slowed_from(mm("dp4", 2, 1.5), 4),
        _slowed_from(g("tp2dp2", "mapp-v1", "hostsleep", rank=2, ms=24), 4),
        _slowed_from(mm("pp2dp2", 3, 1.5), 3),
        _slowed_from(g("pp2dp2", "mapp-v1", "beforemb", rank=0, ms=25), 4),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "kineto", "healthy"),
        _slowed_from(g("dp4", "kineto", "layer", rank=2, factor=1.5), 4),
        _slowed_from(g("tp2dp2", "kineto", "layer", rank=1, factor=1.6), 3),
        _slowed_from(g("pp2dp2", "kineto", "hostsleep", rank=1, ms=25), 4),
        g("dp4", "kineto", "seqlognorm", sigma=0.9),
        plain("ddp4", "dp4"),
        _slowed_from(plain("ddp4", "dp4", rank=3, factor=1.5), 4),
        _slowed_from(plain("ddp4", "dp4", rank=0, step_sleep_ms=24), 5),
        _slowed_from(plain("fsdp4", "dp4", rank=2, sleep_ms=25), 4),
        _slowed_from(plain("tp2dp2", "tp2dp2", rank=1, factor=1.6), 5),
    ]


MAPP_WINDOW_10 = ["--iterations", "12", "--trace", "--trace-interval", "1", "--trace-start", "2",
                  "--continuous-trace-iterations", "10"]
PROF_WINDOW_10 = ["--iterations", "12", "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "10"]
JOB_WINDOW_10 = ["--steps", "12", "--profile-wait", "1", "--profile-warmup", "1", "--profile-active", "10"]
"""Ten traced iterations (2-11): a fault that sets in at iteration 7, 8 or 9 acts in the window's
last 5, 4 or 3 (``fresh195``, ``fresh196``)."""
FRESH195_SEED = 1319
FRESH196_SEED = 1321


def _ten(shape: dict[str, dict[str, str]], seed: int, tag: str):
    """The case makers of a ten-iteration set: megatron-core (``g``) and plain (``plain``) jobs."""
    def g(layout: str, fmt: str, variant: str, **k) -> Case:
        return _cpu_shaped(gpt_case(layout, fmt, variant, seed=seed, tag=tag, windows=(MAPP_WINDOW_10, PROF_WINDOW_10),
                                    **k), shape)

    def plain(*a, **k) -> Case:
        case = _plain(*a, seed=seed, tag=tag, **k)
        case.job_window = JOB_WINDOW_10
        return case
    return g, plain


def fresh195_set(seed: int = FRESH195_SEED) -> list[Case]:
    """Study set for faults that set in midway in a longer trace (``--set fresh195``, seed 1319, 4
    gloo processes on 2 cores), ``CPU_SHAPE_189``: ten traced iterations (2-11), each fault acting
    from iteration 7, 8 or 9 on (the window's last 5, 4 or 3: under ``CONSISTENT``), beside healthy
    and imbalanced jobs traced as long. Ids say ``-from{k}`` and end in ``-f195``."""
    g, plain = _ten(CPU_SHAPE_189, seed, "-f195")

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        g("dp4", "mapp-v1", "healthy"),
        _slowed_from(mm("dp4", 1, 1.5), 7),
        _slowed_from(mm("pp2dp2", 3, 1.5), 8),
        _slowed_from(g("tp2dp2", "mapp-v1", "hostsleep", rank=2, ms=24), 7),
        _slowed_from(g("pp2dp2", "mapp-v1", "beforemb", rank=0, ms=25), 8),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("dp4", "kineto", "seqlognorm", sigma=0.9),
        _slowed_from(g("dp4", "kineto", "layer", rank=2, factor=1.5), 7),
        _slowed_from(g("tp2dp2", "kineto", "layer", rank=1, factor=1.6), 8),
        _slowed_from(g("pp2dp2", "kineto", "hostsleep", rank=1, ms=25), 7),
        g("pp2dp2", "kineto", "healthy"),
        plain("ddp4", "dp4"),
        _slowed_from(plain("ddp4", "dp4", rank=3, factor=1.5), 7),
        _slowed_from(plain("ddp4", "dp4", rank=0, step_sleep_ms=24), 8),
        _slowed_from(plain("fsdp4", "dp4", rank=2, sleep_ms=25), 9),
        _slowed_from(plain("tp2dp2", "tp2dp2", rank=1, factor=1.6), 9),
    ]


def fresh196_set(seed: int = FRESH196_SEED) -> list[Case]:
    """Held out from the onset rule (``--set fresh196``, seed 1321, 4 gloo processes on 2 cores),
    committed before its first run: ``fresh195``'s design in ``CPU_SHAPE_142`` with other ranks,
    factors and layouts, and two faults that last the whole ten iterations. Ids end in ``-f196``."""
    g, plain = _ten(CPU_SHAPE_142, seed, "-f196")

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        g("tp2dp2", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        _slowed_from(mm("dp4", 3, 1.45), 8),
        _slowed_from(mm("tp2dp2", 0, 1.5), 7),
        _slowed_from(g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=26), 7),
        _slowed_from(mm("pp2dp2", 0, 1.5), 9),
        mm("dp4", 2, 1.5),
        g("pp2dp2", "kineto", "laststage", last_layers=3),
        g("tp2dp2", "kineto", "healthy"),
        _slowed_from(g("dp4", "kineto", "beforemb", rank=1, ms=24), 8),
        _slowed_from(g("pp2dp2", "kineto", "layer", rank=2, factor=1.5), 7),
        _slowed_from(g("tp2dp2", "kineto", "hostsleep", rank=3, ms=25), 8),
        plain("fsdp4", "dp4"),
        _slowed_from(plain("ddp4", "dp4", rank=1, sleep_ms=24), 7),
        _slowed_from(plain("ddp4", "dp4", rank=0, factor=1.55), 8),
        _slowed_from(plain("fsdp4", "dp4", rank=3, step_sleep_ms=25), 7),
        _slowed_from(plain("tp2dp2", "tp2dp2", rank=2, factor=1.6), 8),
        plain("ddp4", "dp4", rank=1, factor=1.5),
    ]


FRESH197_SEED = 1327


def fresh197_set(seed: int = FRESH197_SEED) -> list[Case]:
    """Held out for the onset rule's false alarms (``--set fresh197``, seed 1327, 4 gloo
    processes on 2 cores, the default CPU model shape): mostly jobs with no fault traced ten
    iterations (2-11) or twenty (2-21, ``MAPP_WINDOW_LONG``): healthy, lognormal lengths and a
    heavier last stage in every layout under both captures and plain DDP/FSDP/DP x TP; and four
    faults that set in late (from iteration 14 of twenty, 8 of ten). Ids end in ``-f197``."""
    tag = "-f197"
    g, plain = _ten({"mapp-v1": {}, "kineto": {}}, seed, tag)

    def g20(layout: str, fmt: str, variant: str, **k) -> Case:
        return gpt_case(layout, fmt, variant, seed=seed, tag=tag, windows=(MAPP_WINDOW_LONG, PROF_WINDOW_LONG), **k)

    def plain20(*a, **k) -> Case:
        case = _plain(*a, seed=seed, tag=tag, **k)
        case.job_window = JOB_WINDOW_LONG
        case.id = case.id.replace(tag, "-its20" + tag)
        return case

    def long(case: Case) -> Case:
        case.id = case.id.replace(tag, "-its20" + tag)
        return case

    return [
        g("dp4", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("dp4", "kineto", "healthy"),
        g("pp2dp2", "kineto", "seqlognorm", sigma=0.9),
        g("tp2dp2", "kineto", "seqlognorm", sigma=0.9),
        g("pp4", "kineto", "laststage", last_layers=3),
        plain("ddp4", "dp4"),
        plain("fsdp4", "dp4"),
        plain("tp2dp2", "tp2dp2"),
        long(g20("dp4", "mapp-v1", "seqlognorm", sigma=0.9)),
        long(g20("pp2dp2", "kineto", "healthy")),
        long(g20("tp2dp2", "mapp-v1", "healthy")),
        plain20("ddp4", "dp4"),
        long(_slowed_from(g20("dp4", "mapp-v1", "layer", rank=0, factor=1.5, work="matmul"), 14)),
        _slowed_from(plain20("ddp4", "dp4", rank=2, sleep_ms=25), 15),
        _slowed_from(g("pp4", "kineto", "layer", rank=1, factor=1.5), 8),
        _slowed_from(g("tp2pp2", "mapp-v1", "hostsleep", rank=3, ms=25), 8),
    ]


FRESH198_SEED = 1331


def fresh198_set(seed: int = FRESH198_SEED) -> list[Case]:
    """Held out from the onset rule's last form (``--set fresh198``, seed 1331, 4 gloo processes
    on 2 cores, ``CPU_SHAPE_142``), committed before its first run: ``fresh197``'s design in
    other layouts and values, jobs with no fault traced 10 or 20 iterations beside five faults
    that set in late and one that lasts. Ids end in ``-f198``."""
    tag = "-f198"
    g, plain = _ten(CPU_SHAPE_142, seed, tag)

    def g20(layout: str, fmt: str, variant: str, **k) -> Case:
        case = _cpu_shaped(gpt_case(layout, fmt, variant, seed=seed, tag=tag, windows=(MAPP_WINDOW_LONG, PROF_WINDOW_LONG),
                                    **k), CPU_SHAPE_142)
        case.id = case.id.replace(tag, "-its20" + tag)
        return case

    def plain20(*a, **k) -> Case:
        case = _plain(*a, seed=seed, tag=tag, **k)
        case.job_window = JOB_WINDOW_LONG
        case.id = case.id.replace(tag, "-its20" + tag)
        return case

    return [
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.1),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("dp4", "kineto", "seqlognorm", sigma=1.0),
        g("tp2pp2", "kineto", "healthy"),
        g("pp2dp2", "kineto", "laststage", last_layers=3),
        plain("ddp4", "dp4"),
        plain("fsdp4", "dp4"),
        g20("tp2dp2", "kineto", "seqlognorm", sigma=0.9),
        g20("pp2dp2", "mapp-v1", "healthy"),
        g20("dp4", "mapp-v1", "healthy"),
        plain20("fsdp4", "dp4"),
        _slowed_from(g("dp4", "kineto", "layer", rank=3, factor=1.5), 8),
        _slowed_from(g("pp2dp2", "mapp-v1", "beforemb", rank=2, ms=25), 8),
        _slowed_from(g20("tp2dp2", "mapp-v1", "layer", rank=1, factor=1.5, work="matmul"), 15),
        _slowed_from(plain20("ddp4", "dp4", rank=1, step_sleep_ms=25), 15),
        _slowed_from(g("pp4", "mapp-v1", "hostsleep", rank=2, ms=25), 9),
        g("tp2dp2", "kineto", "layer", rank=0, factor=1.5),
    ]


FRESH199_SEED = 1337


def fresh199_set(seed: int = FRESH199_SEED) -> list[Case]:
    """Held out for the onset rule at 8 ranks (``--set fresh199``, seed 1337, 8 gloo processes on
    4 cores, ``CPU_SHAPE_172``), committed before its first run: ten traced iterations (2-11) of
    PP4 x DP2, PP2 x DP4, TP2 x PP2 x DP2, DP8 and plain DDP8 with no fault (healthy, heavier last
    stage, lognormal lengths) beside four faults that set in at iteration 7 or 8. Ids end in
    ``-f199``."""
    g, plain = _ten(CPU_SHAPE_172, seed, "-f199")
    return [
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp2", "kineto", "laststage", last_layers=2),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2pp2dp2", "mapp-v1", "healthy"),
        g("dp8", "mapp-v1", "healthy"),
        g("pp2dp4", "kineto", "seqlognorm", sigma=0.9),
        g("tp2pp2dp2", "kineto", "healthy"),
        plain("ddp8", "dp8"),
        _slowed_from(g("pp2dp4", "mapp-v1", "layer", rank=5, factor=1.5, work="matmul"), 8),
        _slowed_from(g("dp8", "kineto", "hostsleep", rank=3, ms=25), 7),
        _slowed_from(plain("ddp8", "dp8", rank=6, factor=1.5), 8),
        _slowed_from(g("pp4dp2", "mapp-v1", "beforemb", rank=1, ms=25), 8),
    ]


FRESH200_SEED = 1339
FRESH201_SEED = 1361
# --set fresh200 on GPUs: a model shape no other set uses (hidden 2560, 20 heads, sequence 1408,
# 2 sequences a microbatch, 6 microbatches)
GPT_GPU_FRESH200 = ["--layers", "8", "--hidden", "2560", "--heads", "20", "--seq", "1408", "--vocab", "50304",
                    "--micro-batch-size", "2", "--num-microbatches", "6", "--bf16"]


def fresh200_set(seed: int = FRESH200_SEED) -> list[Case]:
    """Held out on two GPUs after the onset rule (``--set fresh200``, seed 1339, 2 ranks, for a
    machine of 2 GPUs and for CPUs; on GPUs the model shape is ``GPT_GPU_FRESH200``), committed
    before its first run: ten traced iterations (2-11) of DP2, TP2, PP2 and plain DDP/FSDP2 under
    both captures, jobs with no fault (healthy, heavier last stage, lognormal lengths) beside
    faults that last and faults that set in at iteration 7 or 8. Ids end in ``-f200``."""
    tag = "-f200"
    g10, plain = _ten(CPU_SHAPE_172, seed, tag)

    def g(layout: str, fmt: str, variant: str, **k) -> Case:
        return _reshaped(g10(layout, fmt, variant, **k), layout, GPT_GPU_FRESH200)

    r = _recorded
    return [
        g("dp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "healthy"),
        r(g("tp2", "kineto", "healthy"), "default"),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        r(g("dp2", "kineto", "seqlognorm", sigma=1.0), "default"),
        plain("ddp2", "dp2"),
        plain("fsdp2", "dp2"),
        g("tp2", "kineto", "layer", rank=0, factor=1.4),
        g("dp2", "mapp-v1", "hostsleep", rank=1, ms=26),
        _slowed_from(g("tp2", "mapp-v1", "layer", rank=1, factor=1.45), 7),
        _slowed_from(r(g("dp2", "kineto", "layer", rank=0, factor=1.5), "default"), 8),
        _slowed_from(g("pp2", "mapp-v1", "beforemb", rank=0, ms=24), 7),
        _slowed_from(g("dp2", "mapp-v1", "hostsleep", rank=1, ms=27), 8),
        _slowed_from(plain("ddp2", "dp2", rank=1, factor=1.5), 7),
        _slowed_from(plain("fsdp2", "dp2", rank=0, step_sleep_ms=25), 8),
    ]


def fresh201_set(seed: int = FRESH201_SEED) -> list[Case]:
    """Held out at 4 ranks after the onset rule (``--set fresh201``, seed 1361, 4 gloo processes
    on 2 cores, ``CPU_SHAPE_172``), committed before its first run: ten traced iterations (2-11);
    pipelines under mapp's capture with no fault (heavier last stage, lognormal lengths, healthy:
    where ranks waiting for a core inside p2p spans once read as a slow link) beside real link
    faults, and faults that last or set in at iteration 7 or 8 in every layout. Ids end in
    ``-f201``."""
    g, plain = _ten(CPU_SHAPE_172, seed, "-f201")
    return [
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=2),
        g("pp4", "mapp-v1", "healthy"),
        g("pp2dp2", "kineto", "healthy"),
        g("dp4", "mapp-v1", "healthy"),
        plain("ddp4", "dp4"),
        g("pp2dp2", "mapp-v1", "link", link=(1, 3), link_bytes=6_000_000),
        g("tp2pp2", "mapp-v1", "link", link=(0, 2), link_bytes=6_000_000),
        g("pp4", "mapp-v1", "layer", rank=2, factor=1.5, work="matmul"),
        g("tp2dp2", "kineto", "hostsleep", rank=3, ms=25),
        _slowed_from(g("dp4", "mapp-v1", "layer", rank=0, factor=1.5, work="matmul"), 7),
        _slowed_from(g("pp2dp2", "kineto", "beforemb", rank=1, ms=25), 8),
        _slowed_from(g("tp2pp2", "mapp-v1", "hostsleep", rank=3, ms=25), 7),
        _slowed_from(plain("fsdp4", "dp4", rank=2, sleep_ms=25), 8),
    ]



FRESH202_SEED = 1367


def fresh202_set(seed: int = FRESH202_SEED) -> list[Case]:
    """Held out for the onset rule's tolerance of one iteration that reads as not slower
    (``--set fresh202``, seed 1367, 4 gloo processes on 2 cores, ``CPU_SHAPE_161``), committed
    before its first run: ten traced iterations (2-11), jobs with no fault in every layout under
    both captures (where a rank's noise could gather in four of the last five), beside faults set
    in at iteration 6 or 7 (the last 6 or 5), mostly under mapp's capture. Ids end in ``-f202``."""
    g, plain = _ten(CPU_SHAPE_161, seed, "-f202")

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        g("dp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "laststage", last_layers=2),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("dp4", "kineto", "healthy"),
        g("tp2dp2", "kineto", "seqlognorm", sigma=1.1),
        plain("fsdp4", "dp4"),
        plain("tp2dp2", "tp2dp2"),
        _slowed_from(mm("dp4", 3, 1.45), 6),
        _slowed_from(mm("tp2dp2", 2, 1.5), 7),
        _slowed_from(mm("pp2dp2", 1, 1.5), 6),
        _slowed_from(g("dp4", "mapp-v1", "hostsleep", rank=1, ms=24), 7),
        _slowed_from(g("dp4", "kineto", "layer", rank=2, factor=1.45), 6),
        _slowed_from(plain("ddp4", "dp4", rank=0, factor=1.5), 7),
    ]

def _loaded_link(g):
    """A maker of a case under mapp's capture whose link ``ends`` moves ``mb`` MB more an exchange."""
    def link(layout: str, ends: tuple[int, int], mb: float) -> Case:
        return g(layout, "mapp-v1", "link", link=ends, link_bytes=int(mb * 1_000_000))
    return link


FRESH203_SEED = 1373
CPU_SHAPE_203 = {"mapp-v1": {"--hidden": "232", "--heads": "8", "--seq": "152"},
                 "kineto": {"--hidden": "336", "--heads": "8", "--seq": "120"}}


def fresh203_set(seed: int = FRESH203_SEED) -> list[Case]:
    """Held out for stage 3's discount of the waits for a core (``bandwidth.OWN_FLOOR_RATIO``;
    ``--set fresh203``, seed 1373, ``CPU_SHAPE_203``), committed before its first run: ten traced
    iterations (2-11) of pipelines under mapp's capture, 4 gloo processes on 2 cores (8 on 4 for
    PP2 x DP4 and PP4 x DP2), with no fault (heavier last stage, lognormal lengths, healthy),
    where a link's ends waiting for a core once read as a slow link, beside links loaded with
    2-3 MB more an exchange (less than any earlier set whose capture records the waits: their
    own cost smallest) and faults of another kind. Ids end in ``-f203``."""
    g, _ = _ten(CPU_SHAPE_203, seed, "-f203")
    link = _loaded_link(g)

    return [
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4", "mapp-v1", "laststage", last_layers=2),
        g("pp2dp4", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=1.1),
        g("pp4dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        link("pp2dp2", (0, 2), 2),
        link("pp2dp2", (1, 3), 3),
        link("tp2pp2", (1, 3), 2.5),
        link("pp4", (1, 2), 3),
        link("pp2dp4", (2, 6), 3),
        g("pp2dp2", "mapp-v1", "layer", rank=2, factor=1.5, work="matmul"),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=1, ms=25),
    ]


FRESH204_SEED = 1381
CPU_SHAPE_204 = {"mapp-v1": {"--hidden": "216", "--heads": "8", "--seq": "168"},
                 "kineto": {"--hidden": "312", "--heads": "8", "--seq": "104"}}


def fresh204_set(seed: int = FRESH204_SEED) -> list[Case]:
    """Held out after the typical-step form of stage 3's discount of the waits for a core
    (``--set fresh204``, seed 1381, ``CPU_SHAPE_204``), committed before its first run: ten
    traced iterations (2-11) of pipelines under mapp's capture on 2 cores, 4 gloo processes and,
    busier than any earlier set of them, 8; no fault (heavier last stage, lognormal lengths,
    healthy) beside links loaded with 1.5-3 MB more an exchange. Ids end in ``-f204``."""
    g, _ = _ten(CPU_SHAPE_204, seed, "-f204")
    link = _loaded_link(g)

    return [
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.2),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2dp4", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp2", "mapp-v1", "laststage", last_layers=2),
        g("tp2pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        link("pp2dp2", (0, 2), 1.5),
        link("tp2pp2", (0, 2), 2),
        link("pp4", (2, 3), 2),
        link("pp2dp4", (1, 5), 3),
        link("pp4dp2", (4, 6), 2.5),
    ]


FRESH205_SEED = 1399
CPU_SHAPE_205 = {"mapp-v1": {"--hidden": "200", "--heads": "8", "--seq": "136"},
                 "kineto": {"--hidden": "352", "--heads": "8", "--seq": "88"}}


def fresh205_set(seed: int = FRESH205_SEED) -> list[Case]:
    """Held out on the development machine itself (``--set fresh205``, seed 1399,
    ``CPU_SHAPE_205``), committed before its first run, when no device was lent: every earlier set
    since ``fresh28`` ran on 2-core slices of the GPU host's CPUs, this one on the 2 cores that
    runs the tests, as a user's 4-process (and 2-process) gloo job would. Issue 13's first class
    again (plain DDP, FSDP2 and DP x TP profiler jobs with no layout: 1.5x forward matmuls,
    1.6x and 2.5x on a DP x TP rank, a host stall before each step, a data-path sleep), two-rank
    jobs, and megatron-core under both captures with ten traced iterations: layer faults, host
    sleeps, a loaded link, beside healthy, lognormal and heavier-last-stage jobs. Ids end in
    ``-f205``."""
    g, plain = _ten(CPU_SHAPE_205, seed, "-f205")
    link = _loaded_link(g)
    return [
        plain("ddp4", "dp4", rank=1, factor=1.5),
        plain("ddp4", "dp4", rank=2, step_sleep_ms=20),
        plain("ddp4", "dp4"),
        plain("fsdp4", "dp4", rank=3, sleep_ms=22),
        plain("tp2dp2", "tp2dp2", rank=3, factor=1.6),
        plain("tp2dp2", "tp2dp2", rank=0, factor=2.5),
        plain("tp2dp2", "tp2dp2"),
        plain("ddp2", "dp2", rank=1, factor=1.5),
        plain("ddp2", "dp2"),
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "layer", rank=2, factor=1.3),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.4, work="matmul"),
        g("tp2dp2", "mapp-v1", "hostsleep", rank=3, ms=22),
        g("pp2dp2", "mapp-v1", "beforemb", rank=2, ms=20),
        link("pp2dp2", (1, 3), 3),
        g("pp4", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        # megatron-core, torch.profiler
        g("dp4", "kineto", "layer", rank=1, factor=1.35),
        g("tp2dp2", "kineto", "beforemb", rank=0, ms=20),
        g("pp2dp2", "kineto", "healthy"),
        g("dp2", "kineto", "layer", rank=0, factor=1.4),
        g("tp2", "kineto", "layer", rank=1, factor=1.5),
    ]


FRESH206_SEED = 1409
CPU_SHAPE_206 = {"mapp-v1": {"--hidden": "184", "--heads": "8", "--seq": "144"},
                 "kineto": {"--hidden": "328", "--heads": "8", "--seq": "112"}}


def fresh206_set(seed: int = FRESH206_SEED) -> list[Case]:
    """Held out on the development machine's own 2 cores after ``fresh205`` (``--set fresh206``,
    seed 1409, ``CPU_SHAPE_206``), committed before its first run: the kinds of job earlier sets
    on shared cores missed most (matmul layer faults of 1.35-1.45x in PP2 with one rank a stage,
    DP4, PP2 x DP2 and PP4; a process spinning beside a rank) with ten traced iterations, beside
    host sleeps, loaded links, healthy, lognormal and heavier-last-stage jobs, 2 and 4 processes.
    Ids end in ``-f206``."""
    g, plain = _ten(CPU_SHAPE_206, seed, "-f206")
    link = _loaded_link(g)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        mm("pp2", 0, 1.4),
        mm("pp2", 1, 1.45),
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        mm("dp4", 3, 1.35),
        g("dp4", "mapp-v1", "layer", rank=1, factor=1.3),
        mm("pp2dp2", 2, 1.35),
        mm("pp4", 2, 1.4),
        g("tp2pp2", "mapp-v1", "layer", rank=1, factor=1.4),
        g("dp4", "mapp-v1", "cpuhog", rank=2, duty=0.5),
        g("pp2dp2", "kineto", "cpuhog", rank=1, duty=0.5),
        g("pp4", "kineto", "layer", rank=0, factor=1.4),
        g("tp2pp2", "kineto", "healthy"),
        g("tp2dp2", "kineto", "healthy"),
        g("dp2", "mapp-v1", "hostsleep", rank=1, ms=22),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=24),
        g("pp4", "mapp-v1", "seqlognorm", sigma=0.9),
        link("pp4", (0, 1), 2.5),
        link("tp2pp2", (0, 2), 3),
        plain("fsdp4", "dp4", rank=0, factor=1.5),
        plain("ddp4", "dp4", rank=3, sleep_ms=30),
    ]


FRESH207_SEED = 1423


def fresh207_set(seed: int = FRESH207_SEED) -> list[Case]:
    """Held out on the development machine's own 2 cores after ``fresh206`` (``--set fresh207``,
    seed 1423, ``CPU_SHAPE_205``), committed before its first run: 8 processes on those 2 cores,
    busier than any earlier set (DP8, PP2 x DP4, PP4 x DP2, TP2 x PP2 x DP2: layer faults, a host
    sleep, a loaded link, healthy, lognormal, heavier last stage), and in 4-process jobs faults
    nearer the threshold (layers 1.2-1.25x). Ids end in ``-f207``."""
    g, _ = _ten(CPU_SHAPE_205, seed, "-f207")
    link = _loaded_link(g)
    return [
        g("dp8", "mapp-v1", "layer", rank=5, factor=1.4),
        g("dp8", "mapp-v1", "healthy"),
        g("dp8", "kineto", "layer", rank=2, factor=1.45),
        g("pp2dp4", "mapp-v1", "layer", rank=6, factor=1.4, work="matmul"),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4dp2", "mapp-v1", "hostsleep", rank=3, ms=25),
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2dp2", "mapp-v1", "layer", rank=4, factor=1.4),
        g("tp2pp2dp2", "kineto", "healthy"),
        link("pp2dp4", (1, 5), 3),
        g("dp4", "mapp-v1", "layer", rank=0, factor=1.25),
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.2),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.25),
        g("dp4", "kineto", "layer", rank=2, factor=1.25),
        g("tp2dp2", "kineto", "healthy"),
    ]


FRESH208_SEED = 1427


def fresh208_set(seed: int = FRESH208_SEED) -> list[Case]:
    """Held out after ``core_waits.absorbed`` judged a rank's net wait against the other ranks'
    (``--set fresh208``, seed 1427, ``CPU_SHAPE_206``), committed before its first run: 8 processes
    on the development machine's 2 cores (DP8, PP2 x DP4, PP4 x DP2, TP2 x PP2 x DP2) with layer
    faults, a host sleep and no fault, beside 4-process jobs with layers 1.25x and none. Ids end
    in ``-f208``."""
    g, _ = _ten(CPU_SHAPE_206, seed, "-f208")
    return [
        g("dp8", "mapp-v1", "layer", rank=2, factor=1.35),
        g("dp8", "mapp-v1", "layer", rank=6, factor=1.4, work="matmul"),
        g("dp8", "mapp-v1", "healthy"),
        g("dp8", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp4", "mapp-v1", "layer", rank=1, factor=1.4),
        g("pp2dp4", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "layer", rank=5, factor=1.4, work="matmul"),
        g("pp4dp2", "mapp-v1", "healthy"),
        g("tp2pp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2dp2", "mapp-v1", "hostsleep", rank=6, ms=26),
        g("dp4", "mapp-v1", "layer", rank=3, factor=1.25),
        g("dp4", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=1, factor=1.25),
    ]


FRESH209_SEED = 1433
CPU_SHAPE_209 = {"mapp-v1": {"--hidden": "192", "--heads": "8", "--seq": "160"},
                 "kineto": {"--hidden": "336", "--heads": "8", "--seq": "96"}}


def fresh209_set(seed: int = FRESH209_SEED) -> list[Case]:
    """Held out for stage 2's say over a pipeline rank on shared cores (``--set fresh209``, seed
    1433, ``CPU_SHAPE_209``), committed before its first run: 8 processes on 2 and on 4 cores of
    the GPU host (PP2 x DP4, PP4 x DP2, TP2 x PP2 x DP2, DP8), layer faults of 1.3-1.5x on ranks of
    every stage, where the slowed rank may wait at its transfers more than it makes others wait,
    beside as many jobs without a fault (healthy, lognormal lengths, a heavier last stage), where
    a rank stretched by its core must not be named. Ids end in ``-f209``."""
    g, _ = _ten(CPU_SHAPE_209, seed, "-f209")

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        mm("pp2dp4", 6, 1.4),
        g("pp2dp4", "mapp-v1", "layer", rank=2, factor=1.35),
        mm("pp2dp4", 1, 1.3),
        g("pp2dp4", "mapp-v1", "layer", rank=5, factor=1.5),
        mm("pp4dp2", 2, 1.4),
        g("pp4dp2", "mapp-v1", "layer", rank=7, factor=1.35),
        mm("pp4dp2", 4, 1.3),
        mm("tp2pp2dp2", 5, 1.4),
        g("tp2pp2dp2", "mapp-v1", "layer", rank=2, factor=1.45),
        mm("dp8", 3, 1.3),
        g("pp2dp4", "kineto", "layer", rank=4, factor=1.45),
        g("pp4dp2", "kineto", "layer", rank=1, factor=1.45),
        g("pp2dp4", "mapp-v1", "healthy"),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp4", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp2", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "seqlognorm", sigma=0.8),
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("dp8", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2dp4", "kineto", "healthy"),
        g("pp4dp2", "kineto", "seqlognorm", sigma=0.9),
    ]


FRESH210_SEED = 1439


def fresh210_set(seed: int = FRESH210_SEED) -> list[Case]:
    """Held out beside ``fresh209`` (``--set fresh210``, seed 1439, ``CPU_SHAPE_209``), committed
    before its first run: issue 13's 4- and 2-process jobs on 2 and on 4 cores of the GPU host
    (plain DDP, FSDP and DP x TP profiler jobs with no layout; megatron-core under both captures:
    layer faults of 1.25-1.5x, host sleeps, work before each microbatch, a loaded link, a process
    spinning beside a rank) and as many without a fault. Ids end in ``-f210``."""
    g, plain = _ten(CPU_SHAPE_209, seed, "-f210")
    link = _loaded_link(g)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        plain("ddp4", "dp4", rank=2, factor=1.5),
        plain("ddp4", "dp4", rank=0, sleep_ms=25),
        plain("ddp4", "dp4"),
        plain("fsdp4", "dp4", rank=1, factor=1.5),
        plain("fsdp4", "dp4"),
        plain("tp2dp2", "tp2dp2", rank=2, factor=1.6),
        plain("tp2dp2", "tp2dp2", rank=1, factor=2.5),
        plain("ddp2", "dp2", rank=0, factor=1.5),
        mm("pp2", 1, 1.4),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        mm("dp4", 1, 1.3),
        g("pp2dp2", "mapp-v1", "layer", rank=3, factor=1.35),
        g("tp2dp2", "mapp-v1", "layer", rank=0, factor=1.25),
        mm("pp4", 3, 1.35),
        g("tp2pp2", "mapp-v1", "layer", rank=2, factor=1.4),
        g("dp4", "mapp-v1", "hostsleep", rank=2, ms=24),
        g("pp2dp2", "mapp-v1", "beforemb", rank=1, ms=22),
        g("tp2dp2", "mapp-v1", "cpuhog", rank=3, duty=0.5),
        link("pp2dp2", (0, 2), 3),
        g("dp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("dp4", "kineto", "layer", rank=3, factor=1.4),
        g("tp2dp2", "kineto", "hostsleep", rank=1, ms=24),
        g("pp2dp2", "kineto", "layer", rank=2, factor=1.45),
        g("tp2", "kineto", "layer", rank=0, factor=1.5),
        g("tp2dp2", "kineto", "healthy"),
        g("pp4", "kineto", "seqlognorm", sigma=0.9),
    ]


FRESH211_SEED = 1447
CPU_SHAPE_211 = {"mapp-v1": {"--hidden": "208", "--heads": "8", "--seq": "152"},
                 "kineto": {"--hidden": "320", "--heads": "8", "--seq": "104"}}


def fresh211_set(seed: int = FRESH211_SEED) -> list[Case]:
    """Held out after stage 2 lost its say over the job's steady rank where its net wait does not
    stand out (``lateness.waits_more_than_most``; ``--set fresh211``, seed 1447, ``CPU_SHAPE_211``),
    committed before its first run: 8 processes on the development machine's 2 cores, layer
    faults of 1.3-1.45x on every kind of rank beside faults whose victims a steady route may name
    (host sleeps, work before each microbatch, a process spinning beside a rank) and jobs without
    a fault. Ids end in ``-f211``."""
    g, _ = _ten(CPU_SHAPE_211, seed, "-f211")

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        mm("pp2dp4", 3, 1.35),
        g("pp2dp4", "mapp-v1", "layer", rank=4, factor=1.4),
        mm("pp2dp4", 7, 1.3),
        mm("pp4dp2", 0, 1.4),
        g("pp4dp2", "mapp-v1", "layer", rank=6, factor=1.35),
        g("dp8", "mapp-v1", "layer", rank=7, factor=1.3),
        mm("tp2pp2dp2", 1, 1.45),
        g("pp2dp4", "mapp-v1", "hostsleep", rank=1, ms=26),
        g("dp8", "mapp-v1", "hostsleep", rank=4, ms=24),
        g("pp4dp2", "mapp-v1", "beforemb", rank=5, ms=22),
        g("pp2dp4", "mapp-v1", "cpuhog", rank=2, duty=0.5),
        g("dp8", "kineto", "layer", rank=1, factor=1.4),
        g("pp2dp4", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "healthy"),
        g("dp8", "mapp-v1", "healthy"),
        g("tp2pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("dp8", "mapp-v1", "seqlognorm", sigma=0.8),
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp4", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp4", "kineto", "healthy"),
        g("dp8", "kineto", "seqlognorm", sigma=0.9),
    ]


FRESH212_SEED = 1451


def fresh212_set(seed: int = FRESH212_SEED) -> list[Case]:
    """Held out after ``fresh211`` (``--set fresh212``, seed 1451, ``CPU_SHAPE_209``), committed
    before its first run, for slices of 2 and 4 cores of the GPU host: 8-process jobs (layer
    faults of 1.3-1.45x, host sleeps, no fault) and 4-process ones (issue 13's plain profiler jobs,
    megatron-core layer faults and sleeps, no fault). Ids end in ``-f212``."""
    g, plain = _ten(CPU_SHAPE_209, seed, "-f212")

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        mm("pp2dp4", 5, 1.35),
        g("pp2dp4", "mapp-v1", "layer", rank=0, factor=1.4),
        mm("pp4dp2", 3, 1.35),
        g("dp8", "mapp-v1", "layer", rank=6, factor=1.35),
        g("tp2pp2dp2", "mapp-v1", "layer", rank=7, factor=1.4),
        g("pp4dp2", "mapp-v1", "hostsleep", rank=2, ms=28),
        g("pp2dp4", "mapp-v1", "healthy"),
        g("dp8", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2pp2dp2", "mapp-v1", "laststage", last_layers=3),
        plain("ddp4", "dp4", rank=3, factor=1.5),
        plain("tp2dp2", "tp2dp2", rank=0, factor=1.6),
        plain("ddp4", "dp4", rank=1, step_sleep_ms=22),
        plain("fsdp4", "dp4"),
        mm("dp4", 2, 1.3),
        mm("pp2dp2", 0, 1.35),
        g("tp2dp2", "mapp-v1", "layer", rank=1, factor=1.3),
        g("pp4", "mapp-v1", "layer", rank=1, factor=1.4),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=2, ms=24),
        g("dp4", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("dp4", "kineto", "layer", rank=0, factor=1.4),
        g("tp2dp2", "kineto", "healthy"),
    ]


FRESH213_SEED = 1453


def fresh213_set(seed: int = FRESH213_SEED) -> list[Case]:
    """Held out after ``lateness.stands_out_waiting`` (``--set fresh213``, seed 1453,
    ``CPU_SHAPE_211``), committed before its first run: where that rule could name a victim, jobs
    under mapp's capture whose fault slows other ranks than its own (host sleeps, work before each
    microbatch, a process spinning beside a rank, a loaded link) and jobs with none, 4 and 8
    processes on the development machine's 2 cores; the answer is the culprit or no one, never a
    rank it slowed. Ids end in ``-f213``."""
    g, _ = _ten(CPU_SHAPE_211, seed, "-f213")
    link = _loaded_link(g)
    return [
        g("dp4", "mapp-v1", "hostsleep", rank=1, ms=30),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=0, ms=28),
        g("tp2dp2", "mapp-v1", "beforemb", rank=2, ms=24),
        g("tp2pp2", "mapp-v1", "hostsleep", rank=3, ms=26),
        g("dp4", "mapp-v1", "cpuhog", rank=3, duty=0.6),
        g("pp2dp2", "mapp-v1", "cpuhog", rank=2, duty=0.6),
        link("pp2dp2", (1, 3), 3),
        g("pp4", "mapp-v1", "beforemb", rank=2, ms=24),
        g("dp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp4", "mapp-v1", "hostsleep", rank=6, ms=40),
        g("dp8", "mapp-v1", "beforemb", rank=3, ms=30),
        g("pp4dp2", "mapp-v1", "cpuhog", rank=4, duty=0.6),
        g("tp2pp2dp2", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2dp4", "mapp-v1", "healthy"),
    ]


FRESH214_SEED = 1459
CPU_SHAPE_214 = {"mapp-v1": {"--hidden": "176", "--heads": "8", "--seq": "168"},
                 "kineto": {"--hidden": "304", "--heads": "8", "--seq": "120"}}


def fresh214_set(seed: int = FRESH214_SEED) -> list[Case]:
    """Held out after ``lateness.stands_out_waiting`` (``--set fresh214``, seed 1459,
    ``CPU_SHAPE_214``, a model shape no set used), committed before its first run: 8 processes on
    the development machine's 2 cores under mapp's capture, layer faults nearer the threshold
    (1.25-1.35x) on ranks of every stage, and as many jobs without a fault, where a rank its core
    stretches in every step must not be named. Ids end in ``-f214``."""
    g, _ = _ten(CPU_SHAPE_214, seed, "-f214")

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        mm("pp2dp4", 2, 1.3),
        mm("pp2dp4", 7, 1.25),
        g("pp2dp4", "mapp-v1", "layer", rank=4, factor=1.3),
        mm("pp4dp2", 1, 1.3),
        g("pp4dp2", "mapp-v1", "layer", rank=5, factor=1.25),
        mm("dp8", 0, 1.3),
        g("tp2pp2dp2", "mapp-v1", "layer", rank=6, factor=1.35),
        mm("tp2pp2dp2", 3, 1.3),
        g("pp2dp4", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "healthy"),
        g("dp8", "mapp-v1", "healthy"),
        g("tp2pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("dp8", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2dp2", "mapp-v1", "laststage", last_layers=3),
    ]


FRESH215_SEED = 1471


def fresh215_set(seed: int = FRESH215_SEED) -> list[Case]:
    """Held out after ``lateness.stands_out_waiting`` (``--set fresh215``, seed 1471,
    ``CPU_SHAPE_214``), committed before its first run: issue 13's 4 gloo processes on the
    development machine's 2 cores under mapp's capture, mostly jobs without a fault (healthy,
    lognormal lengths, a heavier last stage: where a process its core stretches in every step
    could be the job's steady rank) beside layer faults of 1.3x. Ids end in ``-f215``."""
    g, _ = _ten(CPU_SHAPE_214, seed, "-f215")
    return [
        g("dp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("dp4", "mapp-v1", "layer", rank=2, factor=1.3, work="matmul"),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.3),
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.3, work="matmul"),
        g("tp2pp2", "mapp-v1", "layer", rank=0, factor=1.3),
    ]


FRESH216_SEED = 1481
CPU_SHAPE_216 = {"mapp-v1": {"--hidden": "248", "--heads": "8", "--seq": "136"},
                 "kineto": {"--hidden": "288", "--heads": "8", "--seq": "112"}}


def fresh216_set(seed: int = FRESH216_SEED) -> list[Case]:
    """Held out in the eighty-third session (``--set fresh216``, seed 1481, ``CPU_SHAPE_216``, a
    model shape no set used), committed before its first run, for the GPU host's cores with a
    core a process (4 processes on 4 cores, 8 on 8): issue 13's classes with no core shared,
    where who waits is the work and not the scheduler: plain profiler jobs (DDP, FSDP, DP x TP by
    hand), megatron-core under both captures with layer faults of 1.25-1.5x, host sleeps, work
    before each microbatch, a loaded link, and as many jobs without a fault. Ids end in ``-f216``."""
    g, plain = _ten(CPU_SHAPE_216, seed, "-f216")
    link = _loaded_link(g)

    def mm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "mapp-v1", "layer", rank=rank, factor=factor, work="matmul")

    return [
        plain("ddp4", "dp4", rank=1, factor=1.5),
        plain("fsdp4", "dp4", rank=3, sleep_ms=30),
        plain("tp2dp2", "tp2dp2", rank=2, factor=1.6),
        plain("ddp4", "dp4"),
        mm("dp4", 0, 1.3),
        mm("pp2dp2", 1, 1.35),
        g("tp2dp2", "mapp-v1", "layer", rank=3, factor=1.25),
        g("pp4", "mapp-v1", "layer", rank=2, factor=1.4),
        g("tp2pp2", "mapp-v1", "beforemb", rank=1, ms=24),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=26),
        link("pp4", (1, 2), 3),
        g("dp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("tp2dp2", "kineto", "layer", rank=0, factor=1.45),
        g("pp2dp2", "kineto", "layer", rank=2, factor=1.4),
        g("dp4", "kineto", "seqlognorm", sigma=0.9),
        g("tp2pp2", "kineto", "healthy"),
        mm("pp2dp4", 5, 1.3),
        mm("pp4dp2", 6, 1.35),
        g("dp8", "mapp-v1", "hostsleep", rank=2, ms=26),
        g("tp2pp2dp2", "mapp-v1", "layer", rank=4, factor=1.4),
        g("pp2dp4", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("tp2pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("dp8", "kineto", "layer", rank=7, factor=1.4),
    ]


def _favoured_experts(seed: int, tag: str, shape: dict[str, dict[str, str]]):
    """The case makers of ``fresh217``/``fresh218``: ``_one_rank_a_stage``'s ``g`` and ``mm``;
    ``moe`` (experts over expert ranks, a router ``skew``), ``nosh`` (the profiler's defaults: no
    shapes) and ``kmm`` (a profiler job's layer fault of matmuls)."""
    g, mm = _one_rank_a_stage(seed, tag, shape)

    def moe(c: Case, skew: float = 0.0, experts: int = 8, ep: int = 4, sp: bool = False) -> Case:
        return _featured(c, experts=experts, ep=ep, skew=skew, sp=sp)

    def nosh(c: Case) -> Case:
        return _recorded(c, "default")

    def kmm(layout: str, rank: int, factor: float) -> Case:
        return g(layout, "kineto", "layer", rank=rank, factor=factor, work="matmul")

    return g, mm, moe, nosh, kmm


FRESH217_SEED = 1487


def fresh217_set(seed: int = FRESH217_SEED) -> list[Case]:
    """Held out after ``routed`` (``--set fresh217``, seed 1487, ``CPU_SHAPE_216``), committed
    before its first run: megatron-core mixtures of experts (tokens over all-to-all between
    expert ranks) whose routers favour the first expert rank's experts, 4 gloo processes on the
    development machine's 2 cores, mostly under the profiler and half of that with its defaults
    (no shapes: where favoured experts' larger calls look like the same work), beside layer
    faults of extra matmuls on a favoured and on another rank, a host sleep, and experts with no
    favourite. Ids end in ``-f217``."""
    g, mm, moe, nosh, kmm = _favoured_experts(seed, "-f217", CPU_SHAPE_216)

    return [
        moe(nosh(g("dp4", "kineto", "healthy")), skew=2.0),
        moe(nosh(g("dp4", "kineto", "healthy")), skew=1.5, ep=2),
        moe(nosh(g("pp2dp2", "kineto", "healthy")), skew=2.0, experts=4, ep=2),
        moe(nosh(g("dp4", "kineto", "healthy"))),
        moe(nosh(kmm("dp4", 0, 1.5)), skew=2.0),
        moe(nosh(kmm("dp4", 3, 1.5)), skew=1.5),
        moe(nosh(g("dp4", "kineto", "hostsleep", rank=2, ms=28)), skew=2.0),
        moe(g("dp4", "kineto", "healthy"), skew=2.5),
        moe(g("tp2dp2", "kineto", "healthy"), skew=2.0, sp=True),
        moe(kmm("dp4", 1, 1.5), skew=2.0),
        moe(g("dp4", "mapp-v1", "healthy"), skew=2.0),
        moe(mm("dp4", 0, 1.5), skew=2.0),
    ]


FRESH218_SEED = 1489


def fresh218_set(seed: int = FRESH218_SEED) -> list[Case]:
    """Held out after ``routed``'s last change (``--set fresh218``, seed 1489, ``CPU_SHAPE_214``),
    committed before its first run: ``fresh217``'s mixtures of experts with favoured routers on
    other layouts and values (TP2 x DP2 with sequence parallelism, PP2 x DP2, 2 and 4 expert
    ranks, top-k skews of 1.5-2.5), mostly under the profiler's defaults, beside matmul layer
    faults on favoured and other ranks, a host sleep and work before each microbatch. Ids end in
    ``-f218``."""
    g, mm, moe, nosh, kmm = _favoured_experts(seed, "-f218", CPU_SHAPE_214)

    return [
        moe(nosh(g("dp4", "kineto", "healthy")), skew=2.5),
        moe(nosh(g("tp2dp2", "kineto", "healthy")), skew=2.0, sp=True),
        moe(nosh(g("pp2dp2", "kineto", "healthy")), skew=1.5, experts=4, ep=2),
        moe(nosh(g("dp4", "kineto", "healthy")), skew=2.0, ep=2),
        moe(nosh(g("dp4", "kineto", "seqlognorm", sigma=0.8)), skew=1.5),
        moe(nosh(kmm("dp4", 2, 1.5)), skew=2.0),
        moe(nosh(kmm("dp4", 0, 1.4)), skew=1.5),
        moe(nosh(kmm("tp2dp2", 1, 1.5)), skew=2.0, sp=True),
        moe(nosh(g("dp4", "kineto", "beforemb", rank=3, ms=26)), skew=2.0),
        moe(g("pp2dp2", "kineto", "healthy"), skew=2.0, experts=4, ep=2),
        moe(kmm("dp4", 0, 1.5), skew=2.5),
        moe(g("dp4", "mapp-v1", "healthy"), skew=1.5, ep=2),
    ]


FRESH28_SEED = 181


def fresh28_set(seed: int = FRESH28_SEED) -> list[Case]:
    """Held out after the thirty-second session's change (``--set fresh28``, 4 ranks, seed 181,
    for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s):
    megatron-core under mapp's capture with data parallel peers (layer faults of 1.3-1.5x in DP4,
    PP2 x DP2, TP2 x DP2 beside healthy, imbalanced and other faults' jobs of the same layouts,
    where a rank slowed in every step is judged), the profiler too, and issue 13's plain jobs,
    with values no other set uses. Ids end in ``-f28``."""
    g = _held_out_gpt(seed, "-f28", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=1, factor=1.35, tag="-f28"),
        _plain("fsdp4", "dp4", seed, rank=0, sleep_ms=24, tag="-f28"),
        _plain("ddp4", "dp4", seed, rank=3, step_sleep_ms=21, tag="-f28"),
        _plain("tp2dp2", "tp2dp2", seed, tag="-f28"),
        # megatron-core, mapp capture
        g("dp4", "mapp-v1", "layer", rank=3, factor=1.3),
        g("dp4", "mapp-v1", "layer", rank=0, factor=1.5),
        g("pp2dp2", "mapp-v1", "layer", rank=2, factor=1.35),
        g("pp2dp2", "mapp-v1", "layer", rank=0, factor=1.45),
        g("tp2dp2", "mapp-v1", "layer", rank=2, factor=1.4),
        g("dp4", "mapp-v1", "beforemb", rank=2, ms=18),
        g("dp4", "mapp-v1", "hostsleep", rank=1, ms=23, gpu_ms=70),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=0, ms=22, gpu_ms=70),
        g("dp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=4),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.1),
        # megatron-core, torch.profiler
        g("dp4", "kineto", "layer", rank=2, factor=1.35),
        g("pp2dp2", "kineto", "healthy"),
        g("dp4", "kineto", "seqlognorm", sigma=1.0),
    ]


FRESH29_SEED = 191


def fresh29_set(seed: int = FRESH29_SEED) -> list[Case]:
    """Held out after the thirty-second session's change (``--set fresh29``, 2 ranks, seed 191,
    for CPUs and for a machine of 2 GPUs, on which the GPU model shape is ``fresh12``'s):
    megatron-core DP2, TP2, PP2 under both captures (layer faults of 1.3-1.5x, host sleeps, work
    before each microbatch, healthy and imbalanced jobs) and issue 13's plain jobs, with values no
    other set uses. 5 iterations, 3 recorded. Ids end in ``-f29``."""
    g = _held_out_gpt(seed, "-f29", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=1, factor=1.45, tag="-f29"),
        _plain("ddp2", "dp2", seed, rank=0, step_sleep_ms=25, tag="-f29"),
        _plain("ddp2", "dp2", seed, tag="-f29"),
        # megatron-core, mapp capture
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.35),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.45),
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.5),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.4),
        g("dp2", "mapp-v1", "beforemb", rank=1, ms=20),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=23, gpu_ms=70),
        g("dp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "seqlognorm", sigma=1.05),
        # megatron-core, torch.profiler
        g("dp2", "kineto", "layer", rank=1, factor=1.4),
        g("tp2", "kineto", "hostsleep", rank=0, ms=22, gpu_ms=70),
        g("dp2", "kineto", "healthy"),
        g("pp2", "kineto", "laststage", last_layers=4),
    ]


FRESH30_SEED = 193


def fresh30_set(seed: int = FRESH30_SEED) -> list[Case]:
    """Held out before the thirty-third session's change (``--set fresh30``, 4 ranks, seed 193,
    for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): pipeline
    layouts under mapp's capture (heavier links of 1.5-3 MB more per exchange, where every earlier
    set's carried 4 MB, or 1 MB in ``full``, beside healthy and imbalanced jobs of the same
    layouts, whose links are judged too), data parallel layer faults, the profiler and issue 13's
    plain jobs, with values no other set uses. Ids end in ``-f30``."""
    g = _held_out_gpt(seed, "-f30", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=2, factor=1.4, tag="-f30"),
        _plain("fsdp4", "dp4", seed, rank=3, step_sleep_ms=22, tag="-f30"),
        _plain("ddp4", "dp4", seed, tag="-f30"),
        # megatron-core, mapp capture: links and the jobs whose links must not be named
        g("pp2dp2", "mapp-v1", "link", link=(0, 2), link_bytes=1_500_000),
        g("tp2pp2", "mapp-v1", "link", link=(1, 3), link_bytes=2_500_000),
        g("pp4", "mapp-v1", "link", link=(2, 3), link_bytes=3_000_000),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=5),
        g("pp4", "mapp-v1", "laststage", last_layers=4),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.85),
        g("pp2dp2", "mapp-v1", "layer", rank=3, factor=1.4),
        g("tp2pp2", "mapp-v1", "layer", rank=0, factor=1.45),
        g("dp4", "mapp-v1", "layer", rank=1, factor=1.35),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=2, ms=21, gpu_ms=70),
        g("pp4", "mapp-v1", "beforemb", rank=1, ms=19),
        # megatron-core, torch.profiler
        g("pp2dp2", "kineto", "link", link=(1, 3), link_bytes=2_000_000),
        g("pp2dp2", "kineto", "healthy"),
        g("tp2pp2", "kineto", "layer", rank=2, factor=1.5),
        g("pp4", "kineto", "laststage", last_layers=3),
    ]


FRESH31_SEED = 197


def fresh31_set(seed: int = FRESH31_SEED) -> list[Case]:
    """Held out before the thirty-third session's change (``--set fresh31``, 2 ranks, seed 197,
    for CPUs and for a machine of 2 GPUs, on which the GPU model shape is ``fresh12``'s):
    megatron-core DP2, TP2, PP2 under both captures (layer faults of 1.3-1.5x, host sleeps, work
    before each microbatch, healthy and imbalanced jobs) and issue 13's plain jobs, with values no
    other set uses. 5 iterations, 3 recorded. Ids end in ``-f31``."""
    g = _held_out_gpt(seed, "-f31", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=0, factor=1.4, tag="-f31"),
        _plain("fsdp2", "dp2", seed, rank=1, sleep_ms=26, tag="-f31"),
        _plain("ddp2", "dp2", seed, tag="-f31"),
        # megatron-core, mapp capture
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.3),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.45),
        g("tp2", "mapp-v1", "layer", rank=0, factor=1.4),
        g("pp2", "mapp-v1", "beforemb", rank=0, ms=21),
        g("dp2", "mapp-v1", "hostsleep", rank=1, ms=24, gpu_ms=70),
        g("dp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage", last_layers=5),
        g("dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        # megatron-core, torch.profiler
        g("pp2", "kineto", "layer", rank=0, factor=1.5),
        g("dp2", "kineto", "beforemb", rank=1, ms=22),
        g("tp2", "kineto", "healthy"),
        g("dp2", "kineto", "seqlognorm", sigma=1.0),
    ]


FRESH32_SEED = 199


def fresh32_set(seed: int = FRESH32_SEED) -> list[Case]:
    """Held out after the thirty-third session's changes (``--set fresh32``, 4 ranks, seed 199,
    for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): pipeline
    jobs under mapp's capture whose links must not be named (healthy, imbalanced, a layer fault)
    beside loaded links, PP4's last stage slowed, data parallel and profiler jobs and issue 13's
    plain jobs, with values no other set uses. Ids end in ``-f32``."""
    g = _held_out_gpt(seed, "-f32", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=1, factor=1.5, tag="-f32"),
        _plain("fsdp4", "dp4", seed, rank=2, sleep_ms=30, tag="-f32"),
        _plain("tp2dp2", "tp2dp2", seed, tag="-f32"),
        # megatron-core, mapp capture
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=4),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.95),
        g("pp2dp2", "mapp-v1", "link", link=(1, 3), link_bytes=2_000_000),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.4),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "link", link=(0, 2), link_bytes=3_500_000),
        g("pp4", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "layer", rank=3, factor=1.45),
        g("pp4", "mapp-v1", "layer", rank=0, factor=1.4),
        g("pp4", "mapp-v1", "laststage", last_layers=5),
        g("pp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("dp4", "mapp-v1", "layer", rank=2, factor=1.4),
        g("dp4", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        g("pp2dp2", "kineto", "healthy"),
        g("pp4", "kineto", "layer", rank=3, factor=1.5),
    ]


FRESH33_SEED = 211


def fresh33_set(seed: int = FRESH33_SEED) -> list[Case]:
    """Held out after the thirty-third session's changes (``--set fresh33``, 2 ranks, seed 211,
    for CPUs and for a machine of 2 GPUs, on which the GPU model shape is ``fresh12``'s): PP2
    under mapp's capture above all (layer faults on either stage, healthy, heavier last stages,
    lognormal lengths, host faults), DP2 and TP2, the profiler and issue 13's plain jobs, with
    values no other set uses. 5 iterations, 3 recorded. Ids end in ``-f33``."""
    g = _held_out_gpt(seed, "-f33", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=1, factor=1.35, tag="-f33"),
        _plain("ddp2", "dp2", seed, tag="-f33"),
        # megatron-core, mapp capture
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.4),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.5),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.45),
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2", "mapp-v1", "laststage", last_layers=4),
        g("pp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2", "mapp-v1", "hostsleep", rank=1, ms=24, gpu_ms=70),
        g("pp2", "mapp-v1", "beforemb", rank=0, ms=22),
        g("dp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.45),
        # megatron-core, torch.profiler
        g("pp2", "kineto", "layer", rank=1, factor=1.45),
        g("pp2", "kineto", "healthy"),
    ]


FRESH34_SEED = 223


def fresh34_set(seed: int = FRESH34_SEED) -> list[Case]:
    """Held out after the thirty-third session's link change (``--set fresh34``, 4 ranks, seed
    223, for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s):
    pipeline links carrying 1.5-3 MB more per exchange (the sizes of ``fresh30`` and ``fresh32``,
    on other links and layouts; one under the profiler) beside healthy, imbalanced and otherwise
    faulty pipeline jobs under mapp's capture, whose links must not be named, and issue 13's
    plain jobs. Ids end in ``-f34``."""
    g = _held_out_gpt(seed, "-f34", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=3, factor=1.45, tag="-f34"),
        _plain("ddp4", "dp4", seed, tag="-f34"),
        # megatron-core, mapp capture: loaded links
        g("pp2dp2", "mapp-v1", "link", link=(0, 2), link_bytes=2_500_000),
        g("tp2pp2", "mapp-v1", "link", link=(1, 3), link_bytes=1_500_000),
        g("pp4", "mapp-v1", "link", link=(0, 1), link_bytes=2_000_000),
        g("pp4", "kineto", "link", link=(1, 2), link_bytes=3_000_000),
        # and the pipelines whose links must not be named
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=1.05),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=3, ms=24, gpu_ms=70),
        g("pp2dp2", "mapp-v1", "layer", rank=2, factor=1.5),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2", "mapp-v1", "beforemb", rank=2, ms=20),
        g("pp4", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "layer", rank=2, factor=1.4),
    ]


FRESH35_SEED = 227


def fresh35_set(seed: int = FRESH35_SEED) -> list[Case]:
    """Held out before the thirty-third session's last change (``--set fresh35``, 4 ranks, seed
    227, for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s):
    PP4 under mapp's capture above all, a layer fault of 1.3-1.35x on each stage in turn beside
    healthy, imbalanced and host-faulty PP4 jobs, and other pipelines beside them. Ids end in
    ``-f35``."""
    g = _held_out_gpt(seed, "-f35", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=0, factor=1.4, tag="-f35"),
        # megatron-core, mapp capture: PP4
        g("pp4", "mapp-v1", "layer", rank=0, factor=1.35),
        g("pp4", "mapp-v1", "layer", rank=1, factor=1.3),
        g("pp4", "mapp-v1", "layer", rank=2, factor=1.35),
        g("pp4", "mapp-v1", "layer", rank=3, factor=1.3),
        g("pp4", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "laststage", last_layers=4),
        g("pp4", "mapp-v1", "seqlognorm", sigma=1.1),
        g("pp4", "mapp-v1", "hostsleep", rank=1, ms=23, gpu_ms=70),
        g("pp4", "mapp-v1", "beforemb", rank=3, ms=21),
        # other pipelines
        g("tp2pp2", "mapp-v1", "layer", rank=1, factor=1.4),
        g("pp2dp2", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        g("pp4", "kineto", "healthy"),
        g("pp4", "kineto", "layer", rank=3, factor=1.4),
    ]


FRESH36_SEED = 229


def fresh36_set(seed: int = FRESH36_SEED) -> list[Case]:
    """Held out after the thirty-third session's last change (``--set fresh36``, 4 ranks, seed
    229, for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s):
    every layout of that session's changes once more (pipeline links, the last stage, one stage
    of four), beside healthy and imbalanced jobs and issue 13's plain jobs. Ids end in ``-f36``."""
    g = _held_out_gpt(seed, "-f36", GPT_GPU_FRESH14)

    return [
        _plain("fsdp4", "dp4", seed, rank=1, factor=1.45, tag="-f36"),
        _plain("ddp4", "dp4", seed, tag="-f36"),
        # megatron-core, mapp capture
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "link", link=(1, 3), link_bytes=3_000_000),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=5),
        g("tp2pp2", "mapp-v1", "healthy"),
        g("tp2pp2", "mapp-v1", "link", link=(0, 2), link_bytes=2_000_000),
        g("pp4", "mapp-v1", "healthy"),
        g("pp4", "mapp-v1", "layer", rank=1, factor=1.35),
        g("pp4", "mapp-v1", "layer", rank=3, factor=1.4),
        g("pp4", "mapp-v1", "laststage", last_layers=3),
        g("pp4", "mapp-v1", "link", link=(2, 3), link_bytes=2_500_000),
        g("dp4", "mapp-v1", "layer", rank=0, factor=1.4),
        # megatron-core, torch.profiler
        g("pp4", "kineto", "healthy"),
    ]


FRESH37_SEED = 233


def fresh37_set(seed: int = FRESH37_SEED) -> list[Case]:
    """Held out after the thirty-third session's last change (``--set fresh37``, 2 ranks, seed
    233, for CPUs and for a machine of 2 GPUs, on which the GPU model shape is ``fresh12``'s):
    PP2 under mapp's capture (a layer fault on each stage, healthy and heavier last stages), DP2
    and TP2, the profiler and issue 13's plain jobs. 5 iterations, 3 recorded. Ids end in
    ``-f37``."""
    g = _held_out_gpt(seed, "-f37", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, rank=0, factor=1.5, tag="-f37"),
        g("pp2", "mapp-v1", "layer", rank=1, factor=1.35),
        g("pp2", "mapp-v1", "layer", rank=0, factor=1.5),
        g("pp2", "mapp-v1", "healthy"),
        g("pp2", "mapp-v1", "laststage", last_layers=4),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.4),
        g("tp2", "mapp-v1", "healthy"),
        g("pp2", "kineto", "layer", rank=1, factor=1.35),
        g("dp2", "kineto", "healthy"),
    ]


FRESH38_SEED = 239


def fresh38_set(seed: int = FRESH38_SEED) -> list[Case]:
    """Held out before the thirty-fourth session's change (``--set fresh38``, 4 ranks, seed 239,
    for CPUs and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): data and
    tensor parallel peers under mapp's capture (healthy, lognormal lengths, layer faults of
    1.35-1.45x), beside pipelines and issue 13's plain jobs. Ids end in ``-f38``."""
    g = _held_out_gpt(seed, "-f38", GPT_GPU_FRESH14)

    return [
        _plain("ddp4", "dp4", seed, rank=2, factor=1.4, tag="-f38"),
        _plain("ddp4", "dp4", seed, tag="-f38"),
        # megatron-core, mapp capture: data and tensor parallel peers
        g("dp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "layer", rank=1, factor=1.35),
        g("dp4", "mapp-v1", "layer", rank=3, factor=1.4),
        g("dp4", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2dp2", "mapp-v1", "healthy"),
        g("tp2dp2", "mapp-v1", "layer", rank=2, factor=1.4),
        g("pp2dp2", "mapp-v1", "healthy"),
        g("pp2dp2", "mapp-v1", "layer", rank=1, factor=1.45),
        g("pp2dp2", "mapp-v1", "seqlognorm", sigma=0.9),
        g("pp2dp2", "mapp-v1", "hostsleep", rank=0, ms=24, gpu_ms=70),
        g("tp2pp2", "mapp-v1", "healthy"),
        # megatron-core, torch.profiler
        g("dp4", "kineto", "healthy"),
    ]


FRESH39_SEED = 241


def fresh39_set(seed: int = FRESH39_SEED) -> list[Case]:
    """Held out before the thirty-fourth session's change (``--set fresh39``, 2 ranks, seed 241,
    for CPUs and for a machine of 2 GPUs, on which the GPU model shape is ``fresh12``'s): two
    data or tensor parallel peers under mapp's capture (healthy, lognormal lengths, layer faults
    of 1.35-1.4x on either rank), PP2, the profiler and issue 13's plain jobs. 5 iterations, 3
    recorded. Ids end in ``-f39``."""
    g = _held_out_gpt(seed, "-f39", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [
        _plain("ddp2", "dp2", seed, tag="-f39"),
        _plain("ddp2", "dp2", seed, rank=1, factor=1.45, tag="-f39"),
        g("dp2", "mapp-v1", "healthy"),
        g("dp2", "mapp-v1", "layer", rank=0, factor=1.4),
        g("dp2", "mapp-v1", "layer", rank=1, factor=1.35),
        g("dp2", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2", "mapp-v1", "healthy"),
        g("tp2", "mapp-v1", "layer", rank=1, factor=1.4),
        g("pp2", "mapp-v1", "healthy"),
        g("dp2", "kineto", "healthy"),
    ]


def _stopping_plainly(case: Case) -> Case:
    """A profiler case whose ranks stop their traces as a plain ``torch.profiler`` does, each as
    it ends its last recorded step (``--profile-stop plain``), not all together."""
    case.args = [*case.args, "--profile-stop", "plain"]
    case.gpu_args = [*case.gpu_args, "--profile-stop", "plain"]
    return case


FRESH40_SEED = 251


def fresh40_set(seed: int = FRESH40_SEED) -> list[Case]:
    """Held out, torch.profiler jobs whose ranks stop their traces as a plain profiler does
    (``--set fresh40``, 4 ranks, seed 251, for CPUs and for a machine of 4 GPUs, on which the GPU
    model shape is ``fresh14``'s): every earlier set's profiler jobs stopped together, after
    every rank ended its last recorded step. Issue 13's plain jobs and megatron-core under the
    profiler, healthy, imbalanced and faulty. Ids end in ``-f40``."""
    g = _held_out_gpt(seed, "-f40", GPT_GPU_FRESH14)

    return [_stopping_plainly(c) for c in [
        _plain("ddp4", "dp4", seed, tag="-f40"),
        _plain("ddp4", "dp4", seed, rank=1, factor=1.4, tag="-f40"),
        _plain("ddp4", "dp4", seed, rank=3, sleep_ms=30, tag="-f40"),
        _plain("fsdp4", "dp4", seed, tag="-f40"),
        _plain("fsdp4", "dp4", seed, rank=2, factor=1.45, tag="-f40"),
        _plain("tp2dp2", "tp2dp2", seed, tag="-f40"),
        _plain("tp2dp2", "tp2dp2", seed, rank=1, factor=1.6, tag="-f40"),
        g("tp2dp2", "kineto", "healthy"),
        g("tp2dp2", "kineto", "layer", rank=1, factor=1.45),
        g("pp2dp2", "kineto", "healthy"),
        g("pp2dp2", "kineto", "layer", rank=2, factor=1.5),
        g("pp2dp2", "kineto", "laststage", last_layers=3),
        g("dp4", "kineto", "seqlognorm", sigma=1.0),
        g("pp4", "kineto", "healthy"),
    ]]


FRESH41_SEED = 257


def fresh41_set(seed: int = FRESH41_SEED) -> list[Case]:
    """Held out, torch.profiler jobs of 2 ranks whose ranks stop their traces as a plain profiler
    does (``--set fresh41``, seed 257, for CPUs and for a machine of 2 GPUs, on which the GPU
    model shape is ``fresh12``'s; see ``fresh40``). 5 iterations, 3 recorded. Ids end in
    ``-f41``."""
    g = _held_out_gpt(seed, "-f41", GPT_GPU_FRESH12, windows=(MAPP_WINDOW_SHORT, PROF_WINDOW_SHORT))

    return [_stopping_plainly(c) for c in [
        _plain("ddp2", "dp2", seed, tag="-f41"),
        _plain("ddp2", "dp2", seed, rank=0, factor=1.5, tag="-f41"),
        _plain("fsdp2", "dp2", seed, rank=1, step_sleep_ms=30, tag="-f41"),
        g("dp2", "kineto", "healthy"),
        g("tp2", "kineto", "layer", rank=1, factor=1.45),
        g("tp2", "kineto", "seqlognorm", sigma=1.0),
        g("pp2", "kineto", "healthy"),
    ]]


FRESH42_SEED = 263


def fresh42_set(seed: int = FRESH42_SEED) -> list[Case]:
    """Held out at the thirty-fifth session's start (``--set fresh42``, 8 ranks, seed 263, for CPUs;
    a machine of 8 GPUs runs it with ``--gpu``, in ``fresh13``'s model shape): the 8-rank jobs
    again, thirteen sessions of changes after ``fresh13`` -- DP8, PP4 x DP2, PP2 x DP4 and
    TP2 x PP2 x DP2 under both captures, healthy, with issue 13's heavier last stage and lognormal
    lengths, and faults with values no other 8-rank set uses. Ids end in ``-f42``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f42", **k)

    return [
        _plain("ddp8", "dp8", seed, tag="-f42"),
        _plain("ddp8", "dp8", seed, rank=5, factor=1.5, tag="-f42"),
        # megatron-core, mapp capture
        g("pp4dp2", "mapp-v1", "healthy"),
        g("pp4dp2", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp2", "mapp-v1", "layer", rank=6, factor=1.4),
        g("pp2dp4", "mapp-v1", "seqlognorm", sigma=1.1),
        g("pp2dp4", "mapp-v1", "layer", rank=3, factor=1.4),
        g("dp8", "mapp-v1", "layer", rank=4, factor=1.45),
        g("tp2pp2dp2", "mapp-v1", "hostsleep", rank=1, ms=22),
        # megatron-core, torch.profiler
        g("pp2dp4", "kineto", "healthy"),
        g("pp4dp2", "kineto", "laststage", last_layers=3),
        g("tp2pp2dp2", "kineto", "beforemb", rank=6, ms=19),
        g("pp2dp4", "kineto", "seqlognorm", sigma=1.1),
        g("dp8", "kineto", "layer", rank=2, factor=1.5),
    ]


FRESH43_SEED = 269


def fresh43_set(seed: int = FRESH43_SEED) -> list[Case]:
    """Held out at the thirty-fifth session's start (``--set fresh43``, 4 ranks, seed 269, for CPUs
    and for a machine of 4 GPUs, on which the GPU model shape is ``fresh14``'s): each kind of
    fault once more under both captures, beside healthy and imbalanced jobs, the profiler's
    ranks stopping as a plain profiler does. Ids end in ``-f43``."""
    g = _held_out_gpt(seed, "-f43", GPT_GPU_FRESH14)

    return [
        _stopping_plainly(_plain("ddp4", "dp4", seed, rank=0, factor=1.5, tag="-f43")),
        _stopping_plainly(_plain("tp2dp2", "tp2dp2", seed, rank=3, factor=1.6, tag="-f43")),
        _stopping_plainly(_plain("fsdp4", "dp4", seed, rank=1, sleep_ms=24, tag="-f43")),
        g("dp4", "mapp-v1", "healthy"),
        g("dp4", "mapp-v1", "layer", rank=2, factor=1.45),
        g("tp2dp2", "mapp-v1", "beforemb", rank=1, ms=21),
        g("pp2dp2", "mapp-v1", "link", link=(1, 3)),
        g("pp2dp2", "mapp-v1", "laststage", last_layers=3),
        g("tp2pp2", "mapp-v1", "layer", rank=3, factor=1.4),
        g("pp4", "mapp-v1", "hostsleep", rank=2, ms=23, gpu_ms=70),
        _stopping_plainly(g("tp2dp2", "kineto", "healthy")),
        _stopping_plainly(g("pp2dp2", "kineto", "beforemb", rank=0, ms=21)),
        _stopping_plainly(g("dp4", "kineto", "layer", rank=3, factor=1.4)),
        _stopping_plainly(g("pp2dp2", "kineto", "seqlognorm", sigma=1.1)),
        _stopping_plainly(g("pp4", "kineto", "layer", rank=1, factor=1.45)),
        _stopping_plainly(g("tp2pp2", "kineto", "link", link=(0, 2))),
    ]


FRESH44_SEED = 271


def fresh44_set(seed: int = FRESH44_SEED) -> list[Case]:
    """Held out in the thirty-fifth session (``--set fresh44``, 16 ranks, seed 271, for CPUs: one
    gloo process per core of the lent machine's 16; a machine of 16 GPUs runs it with ``--gpu``,
    in ``fresh13``'s model shape): a width between the 8-rank sets and ``scale``'s 64, which no
    set had -- PP4 x DP4, PP2 x DP8, TP2 x PP2 x DP4 and DP16 under both captures, healthy, with
    a heavier last stage and lognormal lengths, and faults. Ids end in ``-f44``."""
    def g(*a, **k):
        return gpt_case(*a, seed=seed, tag="-f44", **k)

    return [
        _plain("ddp16", "dp16", seed, tag="-f44"),
        _plain("ddp16", "dp16", seed, rank=7, factor=1.5, tag="-f44"),
        # megatron-core, mapp capture
        g("pp4dp4", "mapp-v1", "healthy"),
        g("pp4dp4", "mapp-v1", "laststage", last_layers=3),
        g("pp4dp4", "mapp-v1", "layer", rank=13, factor=1.4),
        g("pp2dp8", "mapp-v1", "seqlognorm", sigma=1.0),
        g("tp2pp2dp4", "mapp-v1", "hostsleep", rank=6, ms=22),
        # megatron-core, torch.profiler
        g("pp2dp8", "kineto", "healthy"),
        g("pp2dp8", "kineto", "layer", rank=9, factor=1.45),
        g("pp4dp4", "kineto", "laststage", last_layers=3),
        g("dp16", "kineto", "layer", rank=11, factor=1.5),
        g("tp2pp2dp4", "kineto", "beforemb", rank=2, ms=21),
    ]


SETS = {"small": small_set, "full": full_set, "gpu2": gpu2_set, "vary": vary_set, "vary2": vary2_set,
        "pp4": pp4_set, "wide": wide_set, "sched": sched_set,
        "prod": prod_set, "prodv": prodv_set, "prodw": prodw_set, "scale": scale_set, "fresh": fresh_set, "fresh2": fresh2_set,
        "fresh3": fresh3_set, "fresh4": fresh4_set,
        "fresh5": fresh5_set, "fresh6": fresh6_set, "fresh7": fresh7_set,
        "fresh8": fresh8_set, "fresh9": fresh9_set, "fresh10": fresh10_set, "fresh11": fresh11_set, "fresh12": fresh12_set, "fresh13": fresh13_set, "fresh14": fresh14_set, "fresh15": fresh15_set, "fresh16": fresh16_set,
        "fresh17": fresh17_set, "fresh18": fresh18_set, "fresh19": fresh19_set,
        "fresh20": fresh20_set, "fresh21": fresh21_set, "fresh22": fresh22_set,
        "fresh23": fresh23_set, "fresh24": fresh24_set,
        "fresh25": fresh25_set, "fresh26": fresh26_set, "fresh27": fresh27_set, "fresh45": fresh45_set, "fresh46": fresh46_set, "fresh47": fresh47_set, "fresh48": fresh48_set, "fresh49": fresh49_set, "fresh50": fresh50_set, "fresh51": fresh51_set, "fresh52": fresh52_set, "fresh53": fresh53_set,
        "fresh54": fresh54_set, "fresh55": fresh55_set, "fresh56": fresh56_set, "fresh57": fresh57_set,
        "fresh58": fresh58_set, "fresh59": fresh59_set, "fresh60": fresh60_set, "fresh61": fresh61_set,
        "fresh62": fresh62_set, "fresh63": fresh63_set, "fresh64": fresh64_set,
        "fresh65": fresh65_set, "fresh66": fresh66_set,
        "fresh67": fresh67_set, "fresh68": fresh68_set,
        "fresh69": fresh69_set, "fresh70": fresh70_set,
        "fresh71": fresh71_set, "fresh72": fresh72_set,
        "fresh73": fresh73_set, "fresh74": fresh74_set,
        "fresh75": fresh75_set, "fresh76": fresh76_set,
        "fresh77": fresh77_set, "fresh78": fresh78_set,
        "fresh79": fresh79_set, "fresh80": fresh80_set,
        "fresh81": fresh81_set, "fresh82": fresh82_set,
        "fresh83": fresh83_set, "fresh84": fresh84_set,
        "fresh85": fresh85_set, "fresh86": fresh86_set,
        "fresh87": fresh87_set, "fresh88": fresh88_set,
        "fresh89": fresh89_set, "fresh90": fresh90_set, "fresh91": fresh91_set,
        "fresh92": fresh92_set, "fresh93": fresh93_set, "fresh94": fresh94_set, "fresh95": fresh95_set,
        "fresh96": fresh96_set, "fresh97": fresh97_set, "fresh98": fresh98_set,
        "fresh99": fresh99_set, "fresh100": fresh100_set,
        "fresh101": fresh101_set, "fresh102": fresh102_set,
        "fresh103": fresh103_set, "fresh104": fresh104_set,
        "fresh105": fresh105_set, "fresh106": fresh106_set,
        "fresh107": fresh107_set, "fresh108": fresh108_set,
        "fresh109": fresh109_set, "fresh110": fresh110_set,
        "fresh111": fresh111_set, "fresh112": fresh112_set,
        "fresh113": fresh113_set, "fresh114": fresh114_set,
        "fresh115": fresh115_set, "fresh116": fresh116_set,
        "fresh117": fresh117_set,
        "fresh118": fresh118_set,
        "fresh119": fresh119_set,
        "fresh120": fresh120_set,
        "fresh121": fresh121_set,
        "fresh122": fresh122_set,
        "fresh123": fresh123_set,
        "fresh124": fresh124_set,
        "fresh125": fresh125_set,
        "fresh126": fresh126_set,
        "fresh127": fresh127_set,
        "fresh128": fresh128_set,
        "fresh129": fresh129_set,
        "fresh130": fresh130_set,
        "fresh131": fresh131_set,
        "fresh132": fresh132_set,
        "fresh133": fresh133_set,
        "fresh134": fresh134_set,
        "fresh135": fresh135_set,
        "fresh136": fresh136_set,
        "fresh137": fresh137_set,
        "fresh138": fresh138_set,
        "fresh139": fresh139_set,
        "fresh140": fresh140_set,
        "fresh141": fresh141_set,
        "fresh142": fresh142_set,
        "fresh143": fresh143_set,
        "fresh144": fresh144_set,
        "fresh145": fresh145_set,
        "fresh146": fresh146_set,
        "fresh147": fresh147_set,
        "fresh148": fresh148_set,
        "fresh149": fresh149_set,
        "fresh150": fresh150_set,
        "fresh151": fresh151_set,
        "fresh152": fresh152_set,
        "fresh153": fresh153_set,
        "fresh154": fresh154_set,
        "fresh155": fresh155_set,
        "fresh156": fresh156_set,
        "fresh157": fresh157_set,
        "fresh158": fresh158_set,
        "fresh159": fresh159_set,
        "fresh160": fresh160_set,
        "fresh161": fresh161_set,
        "fresh162": fresh162_set,
        "fresh163": fresh163_set,
        "fresh164": fresh164_set,
        "fresh165": fresh165_set,
        "fresh166": fresh166_set,
        "fresh167": fresh167_set,
        "fresh168": fresh168_set,
        "fresh169": fresh169_set,
        "fresh170": fresh170_set,
        "fresh171": fresh171_set,
        "fresh172": fresh172_set,
        "fresh173": fresh173_set,
        "fresh174": fresh174_set,
        "fresh175": fresh175_set,
        "fresh176": fresh176_set, "fresh177": fresh177_set, "fresh178": fresh178_set,
        "fresh179": fresh179_set, "fresh180": fresh180_set, "fresh181": fresh181_set,
        "fresh182": fresh182_set, "fresh183": fresh183_set, "fresh184": fresh184_set,
        "fresh185": fresh185_set, "fresh186": fresh186_set,
        "fresh187": fresh187_set, "fresh188": fresh188_set,
        "fresh189": fresh189_set, "fresh190": fresh190_set, "fresh191": fresh191_set,
        "fresh192": fresh192_set, "fresh193": fresh193_set, "fresh194": fresh194_set,
        "fresh195": fresh195_set, "fresh196": fresh196_set, "fresh197": fresh197_set,
        "fresh198": fresh198_set, "fresh199": fresh199_set,
        "fresh200": fresh200_set, "fresh201": fresh201_set, "fresh202": fresh202_set,
        "fresh203": fresh203_set, "fresh204": fresh204_set, "fresh205": fresh205_set, "fresh206": fresh206_set, "fresh207": fresh207_set, "fresh208": fresh208_set, "fresh209": fresh209_set, "fresh210": fresh210_set, "fresh211": fresh211_set, "fresh212": fresh212_set, "fresh213": fresh213_set, "fresh214": fresh214_set, "fresh215": fresh215_set, "fresh216": fresh216_set, "fresh217": fresh217_set, "fresh218": fresh218_set,
        "fresh28": fresh28_set, "fresh29": fresh29_set,
        "fresh30": fresh30_set, "fresh31": fresh31_set,
        "fresh32": fresh32_set, "fresh33": fresh33_set,
        "fresh34": fresh34_set, "fresh35": fresh35_set,
        "fresh36": fresh36_set, "fresh37": fresh37_set,
        "fresh38": fresh38_set, "fresh39": fresh39_set,
        "fresh40": fresh40_set, "fresh41": fresh41_set,
        "fresh42": fresh42_set, "fresh43": fresh43_set, "fresh44": fresh44_set}


# -----------------------------------------------------------------------------------------
# running one case

def env(gpu: bool) -> dict[str, str]:
    e = dict(os.environ)
    e.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore",
             PYTHONPATH=str(ROOT) + os.pathsep + e.get("PYTHONPATH", ""))
    if not gpu:
        e["CUDA_VISIBLE_DEVICES"] = ""
    return e


def job_script(case: Case) -> str:
    return {"ddp": DDP_JOB, "tp": TP_JOB, "gpt": TRAIN_GPT}[case.job]


def job_args(case: Case, gpu: bool) -> list[str]:
    """The case's arguments; on GPUs the model-size ones are replaced by ``gpu_args``."""
    if not gpu or case.gpu_args is None:
        return list(case.args)
    if case.job == "gpt":
        return list(case.gpu_args)
    drop = {"--layers", "--width", "--batch", "--ffn", "--tp"}
    out, skip = [], False
    for a in case.args:
        if skip:
            skip = False
        elif a in drop:
            skip = True
        else:
            out.append(a)
    return [*case.gpu_args, *out]


def command(case: Case, trace_dir: str, timings: str, gpu: bool, nproc: int) -> list[str]:
    args = job_args(case, gpu)
    if case.job == "gpt":
        trace = ["--trace-dir", trace_dir] if case.fmt == "mapp-v1" else ["--profile-dir", trace_dir]
    else:
        trace = ["--profile-dir", trace_dir, *(case.job_window or JOB_WINDOW)]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            job_script(case), *args, *trace, "--timings-json", timings]


def shown_command(cmd: list[str], trace_dir: str, timings: str, gpu: bool) -> str:
    """The command as the manifest shows it: ``python`` for the interpreter, the temporary
    paths as $TRACE_DIR / $TIMINGS, the environment in front."""
    words = ["python" if i == 0 else w.replace(trace_dir, "$TRACE_DIR").replace(timings, "$TIMINGS")
             for i, w in enumerate(cmd)]
    prefix = "OMP_NUM_THREADS=1 " + ("" if gpu else 'CUDA_VISIBLE_DEVICES="" ')
    return prefix + " ".join(w if w.startswith("$") else shlex.quote(w) for w in words)


# -----------------------------------------------------------------------------------------
# profiler traces: keep what mapp's Kineto reader reads

_DROP_CATS_ALWAYS = {"python_function", "ac2g", "fwdbwd"}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset"}


def trim_kineto(doc: dict) -> tuple[dict, dict]:
    """Drop flows (``s``/``f``/``t``), instants (``i``/``I``), ``python_function`` and, when the
    trace has no GPU events, CUDA runtime/driver calls. Returns (trimmed doc, dropped counts)."""
    events = doc.get("traceEvents") or []
    has_gpu = any(isinstance(e, dict) and e.get("cat") in _GPU_CATS for e in events)
    kept, dropped = [], {}
    for e in events:
        ph, cat = e.get("ph"), e.get("cat")
        drop = (ph in ("s", "f", "t", "i", "I") or cat in _DROP_CATS_ALWAYS
                or (not has_gpu and cat in _RUNTIME_CATS))
        if drop:
            key = f"{ph}:{cat}"
            dropped[key] = dropped.get(key, 0) + 1
        else:
            kept.append(e)
    return {**doc, "traceEvents": kept}, dropped


def write_kineto(doc: dict, path: Path, use_gzip: bool) -> Path:
    data = json.dumps(doc, separators=(",", ":")).encode()
    if use_gzip:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    else:
        path.write_bytes(data)
    return path


# -----------------------------------------------------------------------------------------
# measuring what a case's traces show

def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _r(x, nd=2):
    return None if x is None else round(x, nd)


def _nest(events: list[dict]) -> list[tuple[dict, list[str]]]:
    """(event, names of its ancestors) per complete event, by containment on its thread."""
    out = []
    by_tid: dict = {}
    for e in events:
        by_tid.setdefault(e.get("tid"), []).append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        stack: list[dict] = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0) < e["ts"] + e.get("dur", 0) - 0.01:
                stack.pop()
            out.append((e, [s["name"] for s in stack]))
            stack.append(e)
    return out


_MM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}


_GEMM_WORDS = ("gemm", "cutlass", "xmma", "cublas", "matmul", "nvjet")   # nvjet: cuBLASLt on Hopper


def measure_kineto(docs: dict[int, dict]) -> dict:
    """Per rank and recorded step: step ms (ProfilerStep#N), matmul ms and comm ms.

    CPU traces: matmul = aten mm/addmm/bmm/baddbmm, split forward/backward by whether an
    autograd ``evaluate_function`` encloses them; comm = outermost ``gloo:*`` spans. GPU traces:
    matmul = GEMM kernels (all counted as ``mm_fwd``), comm = ``nccl`` kernels, each dated by
    the runtime call that launched it."""
    per = {}
    for rank, doc in docs.items():
        raw = [e for e in doc["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
        evs = [e for e in raw if e.get("cat") in ("cpu_op", "user_annotation")]
        steps = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1]))
                       for e in evs if e["name"].startswith("ProfilerStep#"))
        rows = {n: {"step": (b - a) / 1e3, "mm_fwd": 0.0, "mm_bwd": 0.0, "comm": 0.0, "gpu": False}
                for a, b, n in steps}

        def step_of(ts):
            for a, b, n in steps:
                if a <= ts < b:
                    return n
            return None

        kernels = [e for e in raw if e.get("cat") == "kernel"]
        if kernels:
            launch = {e["args"]["correlation"]: e["ts"] for e in raw
                      if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
            for k in kernels:
                n = step_of(launch.get(k.get("args", {}).get("correlation"), k["ts"]))
                if n is None:
                    continue
                name = k["name"].lower()
                if "nccl" in name:
                    rows[n]["comm"] += k["dur"] / 1e3
                elif any(w in name for w in _GEMM_WORDS):
                    rows[n]["mm_fwd"] += k["dur"] / 1e3
                rows[n]["gpu"] = True
            per[rank] = rows
            continue
        for e, anc in _nest(evs):
            n = step_of(e["ts"])
            if n is None:
                continue
            if e["name"] in _MM:
                bwd = any(a.startswith("autograd::engine::evaluate_function") for a in anc)
                rows[n]["mm_bwd" if bwd else "mm_fwd"] += e["dur"] / 1e3
            elif e["name"].startswith("gloo:") and not any(a.startswith("gloo:") for a in anc):
                rows[n]["comm"] += e["dur"] / 1e3
        per[rank] = rows
    return per


def _read_v1(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        line = line.strip().rstrip(",")
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def measure_v1(files: dict[int, Path]) -> tuple[dict, dict]:
    """Per rank and traced iteration: step ms, layer self ms (layer spans minus the
    collectives inside them), forward ms per microbatch; per link: the time of each matched
    send/recv pair once both ends had entered the call."""
    per, links, meta, calls, n_layers = {}, {}, {}, {}, {}
    for rank, path in files.items():
        evs = [e for e in _read_v1(path) if e.get("ph") == "X"]
        meta[rank] = next((e["args"] for e in _read_v1(path)[:1] if e.get("name") == "mapp"), {})
        rows = {}
        for e in evs:
            if e.get("cat") == "iteration":
                rows[e["args"]["iteration"]] = {"step": e["dur"] / 1e3, "layers": 0.0, "fwd_mb": []}
        colls = [(e["ts"], e["ts"] + e["dur"]) for e in evs if e.get("cat") in ("collective", "p2p")]
        for e in evs:
            it = e.get("args", {}).get("iteration")
            if it not in rows:
                continue
            if e["name"] in ("layer.forward", "layer.backward"):
                n_layers.setdefault(rank, set()).add((e["args"].get("chunk"), e["args"].get("layer")))
                a, b = e["ts"], e["ts"] + e["dur"]
                wait = sum(min(y, b) - max(x, a) for x, y in colls if x < b and y > a)
                rows[it]["layers"] += (e["dur"] - wait) / 1e3
            elif e["name"] == "forward" and e.get("cat") == "compute":
                rows[it]["fwd_mb"].append(e["dur"] / 1e3)
            elif e.get("cat") == "p2p":
                a = e["args"]
                src, dst = (rank, a["peer"]) if e["name"] == "send" else (a["peer"], rank)
                anchor = meta[rank].get("clock_anchor") or {}
                shift = anchor.get("unix_ns", 0) / 1e3 - anchor.get("trace_us", 0.0)
                calls.setdefault((src, dst, a["seq"]), []).append((e["ts"] + shift, e["ts"] + e["dur"] + shift))
        per[rank] = rows
    # a transfer's time once both ends are in the call: min(ends) - max(starts), host clocks
    # of one machine (each file's clock anchor maps its times to Unix time)
    for (src, dst, _), spans in calls.items():
        if len(spans) == 2:
            both = min(b for _, b in spans) - max(a for a, _ in spans)
            links.setdefault(tuple(sorted((src, dst))), []).append(max(both, 0.0) / 1e3)
    return per, {"links": links, "meta": meta, "n_layers": {r: len(v) for r, v in n_layers.items()}}


def measure(case: Case, trace_dir: Path, timings: dict, docs: dict[int, dict] | None) -> dict:
    """What the case's traces and the job's own accounting show (see the README)."""
    if case.fmt == "kineto":
        per = measure_kineto(docs)
        extra = {}
    else:
        files = {int(p.stem.split("-")[1]): p for p in sorted(trace_dir.glob("rank-*.json"))}
        per, extra = measure_v1(files)
    ranks = sorted(per)
    its = sorted(set.intersection(*(set(per[r]) for r in ranks))) if ranks else []
    out: dict = {"recorded_steps": its}
    # a fault that sets in midway (``_slowed_from``) is measured where it acts: over the
    # recorded iterations from its first on
    start = next((inj["from_iteration"] for inj in case.injected if "from_iteration" in inj), None)
    if start is not None and any(i >= start for i in its):
        its = [i for i in its if i >= start]
        out["measured_steps"] = its
    step_ms = [_median(per[r][i]["step"] for i in its) for r in ranks]
    out["step_ms"] = [_r(x) for x in step_ms]
    inj = timings.get("injected_s") or []
    slow = case.slow_rank
    # a link's injector times its extra transfers at both ends: the first end's time is what the
    # heavier link cost (``injected_share_of_step``: under the threshold, a weak case)
    timed = case.injected[0]["ranks"][0] if slow is None and case.part == "link" else slow
    if timed is not None and inj and inj[timed]:
        injected = _median(inj[timed][i] * 1e3 for i in its if i < len(inj[timed]))
        out["injected_ms_per_step"] = _r(injected)
        out["injected_share_of_step"] = _r(injected / step_ms[ranks.index(timed)], 3) if step_ms[ranks.index(timed)] else None
    layout = case.layout

    def stage_of(r):   # megatron order tp-cp-ep-dp-pp; the plain jobs have pp = 1
        return r // (layout["tp"] * layout["dp"])

    def peers_of(r):
        return [q for q in ranks if q != r and stage_of(q) == stage_of(r)]

    def ratio(xs, r):
        """xs[r] over the median of its peers' (None when it has no peer or they measured 0)."""
        peers = [xs[q] for q in peers_of(r) if xs[q] is not None]
        base = statistics.median(peers) if peers else None
        return _r(xs[r] / base, 3) if base and xs[r] is not None else None

    no_peer = ("no other rank of the slow rank's pipeline stage (a stage of one rank): part_slowdown left out, "
               "see injected_share_of_step")
    if case.fmt == "kineto":
        fwd = [_median(per[r][i]["mm_fwd"] for i in its) for r in ranks]
        bwd = [_median(per[r][i]["mm_bwd"] for i in its) for r in ranks]
        gpu = any(per[r][i].get("gpu") for r in ranks for i in its)
        out["matmul_fwd_ms"] = [_r(x) for x in fwd]
        out["matmul_bwd_ms"] = [_r(x) for x in bwd]
        out["comm_ms"] = [_r(_median(per[r][i]["comm"] for i in its)) for r in ranks]
        # (a GPU shared with another process stretches its GEMMs too: "gpu" is measured alike)
        if slow is not None and case.part in ("matmuls", "gpu"):
            tot = [f + b for f, b in zip(fwd, bwd)]
            out["part"] = ("GEMM kernel time per step (forward + backward)" if gpu
                           else "matmul time per step (aten mm/addmm/bmm, forward + backward)")
            out["part_slowdown"] = ratio(tot, slow)
            if case.job == "ddp" and not gpu:   # the injection is in forward: that is the part
                out["part"] = "forward matmul time per step (aten mm/addmm outside autograd's backward)"
                out["matmul_total_slowdown"] = out["part_slowdown"]
                out["part_slowdown"] = ratio(fwd, slow)
            if not peers_of(slow):
                out.pop("part_slowdown", None)
                out["part_note"] = no_peer
    else:
        layers = [_median(per[r][i]["layers"] for i in its) for r in ranks]
        out["layer_self_ms"] = [_r(x) for x in layers]
        mb = {r: [x for i in its for x in per[r][i]["fwd_mb"]] for r in ranks}
        if slow is not None and case.part in ("layers", "gpu"):
            out["part"] = "transformer layer self time per step (layer spans minus nested collectives)"
            if peers_of(slow):
                out["part_slowdown"] = ratio(layers, slow)
            else:   # a stage of one rank (pp2): per transformer layer, against the other stages' ranks
                n = extra["n_layers"]
                per_layer = {r: layers[r] / n[r] for r in ranks if n.get(r) and layers[r] is not None}
                others = [v for r, v in per_layer.items() if r != slow]
                out["part"] = ("transformer layer self time per step and layer (layer spans minus nested "
                               "collectives, over the rank's layer count), against the other stages' ranks")
                out["layers_per_rank"] = [n.get(r) for r in ranks]
                if slow in per_layer and others and statistics.median(others):
                    out["part_slowdown"] = _r(per_layer[slow] / statistics.median(others), 3)
        if case.part == "link":
            links = {k: _median(v) for k, v in extra["links"].items()}
            inj_link = tuple(sorted(case.injected[0]["ranks"]))
            others = [v for k, v in links.items() if k != inj_link]
            out["p2p_both_ready_median_ms"] = {f"{a}-{b}": _r(v, 3) for (a, b), v in sorted(links.items())}
            out["part"] = ("median p2p transfer on the link once both ends are in the call (send and recv "
                           "matched by seq: min(ends) - max(starts)), over the other links'")
            if others and links.get(inj_link):
                out["part_slowdown"] = _r(links[inj_link] / statistics.median(others), 3)
        if case.part == "stages":
            st = {}
            for r in ranks:
                st.setdefault(stage_of(r), []).append(layers[r])
            st = {s: statistics.median(v) for s, v in sorted(st.items())}
            out["stage_layer_self_ms"] = {str(s): _r(v) for s, v in st.items()}
            out["last_over_first_stage"] = _r(st[max(st)] / st[min(st)], 3) if st[min(st)] else None
        if case.part == "microbatches":
            spread = {}
            for r in ranks:
                xs = sorted(mb[r])
                if xs:
                    spread[str(r)] = {"min": _r(xs[0]), "median": _r(statistics.median(xs)), "max": _r(xs[-1])}
            out["forward_ms_per_microbatch"] = spread
    if case.fmt == "kineto" and case.part == "stages":
        tot = [(_median(per[r][i]["mm_fwd"] + per[r][i]["mm_bwd"] for i in its)) for r in ranks]
        st = {}
        for r in ranks:
            st.setdefault(stage_of(r), []).append(tot[r])
        st = {s: statistics.median(v) for s, v in sorted(st.items())}
        out["stage_matmul_ms"] = {str(s): _r(v) for s, v in st.items()}
        out["last_over_first_stage"] = _r(st[max(st)] / st[min(st)], 3) if st[min(st)] else None
    if case.part == "host" and slow is not None:
        out["part"] = "injected host time per step on the slow rank, over its step time"
    return out


def effect_ok(m: dict) -> bool:
    """A fault case is kept when its injected effect is >= 10% of its rank's step time or of
    the injected part (its slowdown over peers)."""
    share = m.get("injected_share_of_step") or 0.0
    part = (m.get("part_slowdown") or 1.0) - 1.0
    return share >= 0.10 or part >= 0.10


# -----------------------------------------------------------------------------------------

@dataclass
class Launched:
    """A case whose job has run: its traces wait in ``tmp`` to be collected."""
    case: Case
    cid: str
    tmp: tempfile.TemporaryDirectory
    trace_dir: str
    timings_path: str
    cmd: list[str]
    wall: float


def launch(case: Case, cid: str, gpu: bool, nproc: int, timeout: float) -> Launched:
    """Run the case's job; its traces stay in a temporary directory (see :func:`collect`)."""
    tmp = tempfile.TemporaryDirectory(prefix=f"corpus-{cid}-")
    trace_dir = str(Path(tmp.name) / "trace")
    timings_path = str(Path(tmp.name) / "timings.json")
    cmd = command(case, trace_dir, timings_path, gpu, nproc)
    t0 = time.perf_counter()
    # its own session, so that a job that hangs (or an interrupt) ends with all of torchrun's
    # workers, not only torchrun: on GPUs a leftover rank would hold its GPU for the next case
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(gpu), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as error:
        _kill_group(proc)
        tmp.cleanup()
        if isinstance(error, subprocess.TimeoutExpired):
            raise RuntimeError(f"{cid}: no end after {timeout:.0f} s, stopped") from None
        raise
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tmp.cleanup()
        raise RuntimeError(f"{cid}: exit {proc.returncode}\n{(out + err)[-4000:]}")
    return Launched(case, cid, tmp, trace_dir, timings_path, cmd, wall)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a job started with ``start_new_session``: torchrun's process group and every
    process below it. (torchrun starts its workers in sessions of their own: killing its group
    alone left a hung job's ranks running, holding the output pipes, so that waiting for the
    job never ended.)"""
    for pid in [*_descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux: from ``/proc/<pid>/stat``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def collect(run: Launched, out_dir: Path, gpu: bool, nproc: int, use_gzip: bool) -> dict:
    """Trim and copy a launched case's traces into ``out_dir/<cid>`` and measure them."""
    case, trace_dir, timings_path = run.case, run.trace_dir, run.timings_path
    try:
        timings = json.loads(Path(timings_path).read_text()) if Path(timings_path).exists() else {}
        dest = out_dir / run.cid
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        docs, dropped = None, {}
        if case.fmt == "kineto":
            docs = {}
            for path in sorted(Path(trace_dir).glob("rank-*.json")):
                doc = json.loads(path.read_text())
                rank = doc.get("distributedInfo", {}).get("rank", int(path.stem.split("-")[1]))
                # recorded as users record (``--profile-record``): kept whole, as the profiler wrote it
                doc, d = (doc, {}) if "--profile-record" in case.args else trim_kineto(doc)
                for k, v in d.items():
                    dropped[k] = dropped.get(k, 0) + v
                docs[rank] = doc
                write_kineto(doc, dest / path.name, use_gzip)
        else:
            for path in sorted(Path(trace_dir).glob("rank-*.json")):
                shutil.copyfile(path, dest / path.name)
        measured = measure(case, dest, timings, docs)
        measured["generation_wall_s"] = round(run.wall, 1)
        if dropped:
            measured["dropped_events"] = dropped
        files = sorted(dest.iterdir())
        if len(files) != nproc:
            raise RuntimeError(f"{run.cid}: {len(files)} trace files, expected {nproc}")
        shown = shown_command(run.cmd, trace_dir, timings_path, gpu)
    finally:
        run.tmp.cleanup()
    return {"measured": measured, "command": shown, "bytes": sum(f.stat().st_size for f in files)}


def run_case(case: Case, out_dir: Path, gpu: bool, nproc: int, use_gzip: bool, timeout: float,
             cid: str | None = None) -> dict:
    """Run one case and collect it into ``out_dir/<cid>`` (default: its id)."""
    return collect(launch(case, cid or case.id, gpu, nproc, timeout), out_dir, gpu, nproc, use_gzip)


def _cpus_text() -> str:
    """The CPUs the jobs run on: those this process may use (``taskset``), of how many."""
    mine, machine = len(os.sched_getaffinity(0)), os.cpu_count()
    return f"{machine} cores" if mine == machine else f"{mine} CPUs (taskset) of a {machine}-CPU machine"


def source_text(case: Case, gpu: bool, nproc: int) -> str:
    where = (f"GPU NCCL, torchrun {nproc} processes on {nproc} GPUs" if gpu
             else f"CPU gloo, torchrun {nproc} processes on {_cpus_text()}")
    what = {"ddp": "plain DDP MLP", "tp": "plain torch DP x TP MLP (dist.new_group, no descriptions)",
            "gpt": "megatron-core GPT (examples/train_gpt.py)"}[case.job]
    tracer = "torch.profiler" if case.fmt == "kineto" else "mapp capture (layer granularity)"
    if "--profile-stop" in case.args and case.args[case.args.index("--profile-stop") + 1] == "plain":
        tracer += " (each rank stops its trace on its own)"
    if "--profile-record" in case.args:
        tracer += PROFILE_RECORD_TEXT[case.args[case.args.index("--profile-record") + 1]]
    return f"{where}, {what}, {tracer}"


def entry(case: Case, gpu: bool, nproc: int, result: dict, cid: str) -> dict:
    injected = case.gpu_injected if gpu and case.gpu_injected is not None else case.injected
    return {"id": cid, "path": cid, "source": source_text(case, gpu, nproc), "format": case.fmt,
            "layout": case.layout, "class": case.cls, "injected": injected, "expect": case.expect,
            "measured": result["measured"], "command": result["command"]}


def table(manifest: dict, out_dir: Path) -> str:
    """The README's table of cases: id, size, what was injected, expected verdict, measured."""
    lines = ["| case | size | layout | class | injected | expected | measured |", "|---|---|---|---|---|---|---|"]
    for c in manifest["cases"]:
        d = out_dir / c["path"]
        size = sum(f.stat().st_size for f in d.glob("rank-*")) / 1024 if d.exists() else 0
        lay = "x".join(f"{k}{v}" for k, v in c["layout"].items() if v > 1) or "1"
        inj = "; ".join(
            f"{i.get('rank', i.get('ranks'))}: " + ", ".join(f"{k} {v}" for k, v in i.items()
                                                            if k in ("factor", "sleep_ms", "ms", "extra_bytes"))
            for i in c["injected"]) or "-"
        e = c["expect"]["suspect"]
        exp = "none" if e is None else (f"{e['rank']}<->{e['peer']} " if "peer" in e else f"{e['rank']} ") + "/".join(e["kinds"])
        m = c["measured"]
        bits = [f"step {min(m['step_ms']):.0f}-{max(m['step_ms']):.0f} ms"]
        if "injected_ms_per_step" in m:
            bits.append(f"injected {m['injected_ms_per_step']:.1f} ms/step = {100 * m['injected_share_of_step']:.0f}% of its step")
        if "part_slowdown" in m:
            bits.append(f"part x{m['part_slowdown']:.2f}" + (" (per layer, vs the other stage)"
                                                            if "layers_per_rank" in m else ""))
        if "p2p_both_ready_median_ms" in m:
            link = "-".join(map(str, sorted(c["injected"][0]["ranks"])))
            per = m["p2p_both_ready_median_ms"]
            bits[-1] += " (transfer " + ", ".join(f"{k} {v:.2f} ms" for k, v in per.items()) + f"; injected {link})"
        if "last_over_first_stage" in m:
            bits.append(f"last/first stage x{m['last_over_first_stage']:.2f}")
        if "forward_ms_per_microbatch" in m:
            f = m["forward_ms_per_microbatch"]
            bits.append("fwd/microbatch " + ", ".join(f"r{r} {v['min']:.0f}-{v['max']:.0f}" for r, v in f.items()) + " ms")
        lines.append(f"| `{c['id']}` | {size:.0f} KiB | {lay} | {c['class']} | {inj} | {exp} | {'; '.join(bits)} |")
    return "\n".join(lines)


def _reraise(error: BaseException):
    raise error


def gpu_count() -> int:
    """GPUs that ``nvidia-smi -L`` lists, else the driver's ``/proc/driver/nvidia/gpus`` entries.
    Not torch: the parent process should hold no CUDA context while the jobs run."""
    exe = shutil.which("nvidia-smi")
    if exe is not None:
        try:
            out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30).stdout
            return sum(line.startswith("GPU ") for line in out.splitlines())
        except (OSError, subprocess.SubprocessError):
            pass
    gpus = Path("/proc/driver/nvidia/gpus")
    return len(list(gpus.iterdir())) if gpus.is_dir() else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None,
                   help="directory of the set (default: tests/corpus/cases[-full][-gpu], cases-gpu2[-cpu])")
    p.add_argument("--set", default="small", choices=sorted(SETS),
                   help="small (committed), full, gpu2 (2 ranks, for a machine of 2 GPUs), vary / vary2 (held-out "
                        "variations: other factors, ranks, seeds and, on GPUs, model shape), pp4 (held-out: 4 "
                        "pipeline stages), wide (held-out: 8 ranks), or a held-out set of its own seed, freshN "
                        "(each function's docstring says what it holds)")
    p.add_argument("--only", default=None, help="only the cases whose id contains this")
    device = p.add_mutually_exclusive_group()
    device.add_argument("--gpu", dest="device", action="store_const", const="gpu",
                        help="NCCL, one process per GPU, GPU-sized models (ids end in -gpu, or -gpu2 for "
                             "--set gpu2); the default of --set gpu2")
    device.add_argument("--cpu", dest="device", action="store_const", const="cpu",
                        help="gloo on CPU, CPU-sized models; the default of --set small/full (with --set gpu2: "
                             "a smoke test of that set, ids without -gpu2, default out cases-gpu2-cpu)")
    p.add_argument("--nproc", type=int, default=None,
                   help="processes per job: the set's world size (4; 2 for gpu2 and vary2, 8 for wide), which is also "
                        "the default")
    p.add_argument("--no-gzip", action="store_true", help="write profiler traces as plain rank-<r>.json")
    p.add_argument("--keep-weak", action="store_true", help="keep fault cases whose effect measured < 10%%")
    p.add_argument("--timeout", type=float, default=None, help="seconds per case (default: 300 on CPU, 150 on GPUs)")
    p.add_argument("--list", action="store_true", help="list the set's case ids and exit")
    p.add_argument("--table", action="store_true", help="print the README's table of the set's manifest and exit")
    args = p.parse_args(argv)

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console()
    everything = SETS[args.set]()
    worlds = sorted({world_of(c.layout) for c in everything
                     if not args.only or args.only in c.id})
    if not worlds:
        p.error(f"--set {args.set} has no case whose id contains {args.only!r} (--list shows them)")
    nproc = args.nproc or worlds[0]
    # on CPU a set may mix world sizes (``fresh189``): each job runs with its own; on GPUs one
    # world a run, the GPUs it needs
    if args.nproc is not None and worlds != [nproc]:
        p.error(f"--set {args.set} runs jobs of {', '.join(map(str, worlds))} processes, not --nproc {nproc}")
    gpu = (args.device or ("gpu" if args.set in ("gpu2", "vary2", "fresh3", "fresh5", "fresh6", "fresh8", "prod", "prodv", "prodw",
                                              *GPU_ONLY_SETS) else "cpu")) == "gpu"
    if not gpu and args.set in GPU_ONLY_SETS:
        p.error(f"--set {args.set} slows a GPU by sharing it with another process: it runs on GPUs only (drop --cpu)")
    if args.set in ("prod", "prodv", "prodw") and not gpu:
        p.error(f"--set {args.set} runs on GPUs only (megatron-core's distributed optimizer takes CUDA tensors)")
    if gpu and len(worlds) > 1:
        p.error(f"--set {args.set} runs jobs of {', '.join(map(str, worlds))} processes: on GPUs pick one "
                "world with --only")
    suffix = ("-gpu" if nproc == 4 else f"-gpu{nproc}") if gpu else ""
    cases = everything
    if not gpu:   # a neighbour sharing the rank's GPU has no CPU form: a mixed set's gpuhog cases run on GPUs only
        cases = [c for c in cases if "gpu-hog" not in c.args]
    if args.only:
        cases = [c for c in cases if args.only in c.id + suffix]
    if args.list:
        for c in cases:
            console.print(c.id + suffix)
        return 0
    if args.set == "gpu2":
        default = "cases-gpu2" + ("" if gpu else "-cpu")
    else:
        default = {"small": "cases", "full": "cases-full", "vary": "cases-vary",
                   "vary2": "cases-vary2", "pp4": "cases-pp4", "wide": "cases-wide",
                   "sched": "cases-sched", "prod": "cases-prod", "prodv": "cases-prodv", "prodw": "cases-prodw", "scale": "cases-scale", "fresh": "cases-fresh", "fresh2": "cases-fresh2", "fresh3": "cases-fresh3", "fresh4": "cases-fresh4", "fresh5": "cases-fresh5", "fresh6": "cases-fresh6", "fresh7": "cases-fresh7", "fresh8": "cases-fresh8", "fresh9": "cases-fresh9", "fresh10": "cases-fresh10", "fresh11": "cases-fresh11", "fresh12": "cases-fresh12", "fresh13": "cases-fresh13", "fresh14": "cases-fresh14", "fresh15": "cases-fresh15", "fresh16": "cases-fresh16", "fresh17": "cases-fresh17", "fresh18": "cases-fresh18", "fresh19": "cases-fresh19", "fresh20": "cases-fresh20", "fresh21": "cases-fresh21", "fresh22": "cases-fresh22", "fresh23": "cases-fresh23", "fresh24": "cases-fresh24", "fresh25": "cases-fresh25", "fresh26": "cases-fresh26", "fresh27": "cases-fresh27", "fresh28": "cases-fresh28", "fresh29": "cases-fresh29", "fresh30": "cases-fresh30", "fresh31": "cases-fresh31", "fresh32": "cases-fresh32", "fresh33": "cases-fresh33", "fresh34": "cases-fresh34", "fresh35": "cases-fresh35", "fresh36": "cases-fresh36", "fresh37": "cases-fresh37", "fresh38": "cases-fresh38", "fresh39": "cases-fresh39", "fresh40": "cases-fresh40", "fresh41": "cases-fresh41", "fresh42": "cases-fresh42", "fresh43": "cases-fresh43", "fresh44": "cases-fresh44"}.get(args.set, f"cases-{args.set}") + ("-gpu" if gpu else "")
    out_dir = Path(args.out) if args.out else HERE / default
    manifest_path = out_dir / "manifest.json"
    if args.table:
        print(table(json.loads(manifest_path.read_text()), out_dir))
        return 0
    if gpu and (have := gpu_count()) < nproc:
        p.error(f"{nproc} GPUs needed, {have} found" + (" (--cpu runs this set on CPU)" if args.set in ("gpu2", "vary2", "fresh3", "fresh5", "fresh6", "fresh8") else ""))
    timeout = args.timeout or (150.0 if gpu else 300.0)
    # a SIGTERM (``timeout`` around this script) ends the running job's ranks too (see launch)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    out_dir.mkdir(parents=True, exist_ok=True)
    old = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"version": 1, "cases": []}
    entries = {c["id"]: c for c in old.get("cases", [])}
    order = [c.id + suffix for c in everything]
    failed, weak = [], []
    t_all = time.perf_counter()
    # On GPUs a case's traces are collected (parsed, trimmed, gzipped, measured: seconds for a GPU
    # profiler trace) in a thread while the next case's job runs on the GPUs. On CPU one after
    # the other: the collecting would take cores from the next job's ranks.
    pool = ThreadPoolExecutor(max_workers=1) if gpu else None

    def record(progress, task, case: Case, cid: str, get) -> None:
        try:
            result = get()
        except Exception as error:  # keep going: report at the end
            failed.append(cid)
            progress.console.print(f"[red]FAILED[/red] {cid}: {str(error)[-2000:]}")
            progress.advance(task)
            return
        m = result["measured"]
        e = entry(case, gpu, world_of(case.layout), result, cid)
        ok = case.cls != "fault" or effect_ok(m)
        if not ok:
            weak.append(cid)
        if ok or args.keep_weak:
            entries[cid] = e
        else:
            shutil.rmtree(out_dir / cid, ignore_errors=True)
            entries.pop(cid, None)
        note = "" if ok else " [yellow](effect < 10%: left out)[/yellow]"
        progress.console.print(
            f"{cid}: {result['bytes'] / 1024:.0f} KiB, step ms {m.get('step_ms')}, "
            + ", ".join(f"{k} {m[k]}" for k in ("injected_ms_per_step", "injected_share_of_step", "part_slowdown",
                                                "last_over_first_stage") if k in m)
            + f", {m['generation_wall_s']} s{note}")
        progress.advance(task)
        manifest = {"version": 1, "cases": [entries[i] for i in order if i in entries]
                    + [v for k, v in entries.items() if k not in order]}
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task("corpus", total=len(cases))
        pending = None   # (case, cid, future) being collected in the background
        for case in cases:
            cid = case.id + suffix
            progress.update(task, description=f"[bold]{cid}")
            try:
                run = launch(case, cid, gpu, world_of(case.layout), timeout)
            except Exception as error:
                run = error
            if pending is not None:
                record(progress, task, pending[0], pending[1], pending[2].result)
                pending = None
            if isinstance(run, Exception):
                record(progress, task, case, cid, lambda error=run: _reraise(error))
            elif pool is not None:
                pending = (case, cid, pool.submit(collect, run, out_dir, gpu, world_of(case.layout), not args.no_gzip))
            else:
                record(progress, task, case, cid,
                       lambda run=run, n=world_of(case.layout): collect(run, out_dir, gpu, n, not args.no_gzip))
        if pending is not None:
            record(progress, task, pending[0], pending[1], pending[2].result)
    if pool is not None:
        pool.shutdown()
    size = sum(f.stat().st_size for f in out_dir.rglob("*") if f.is_file())
    console.print(f"{len(cases) - len(failed)} of {len(cases)} cases in {time.perf_counter() - t_all:.0f} s; "
                  f"{out_dir} holds {size / 1e6:.2f} MB")
    if weak:
        console.print(f"[yellow]under 10% effect:[/yellow] {', '.join(weak)}")
    if failed:
        console.print(f"[red]failed:[/red] {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
