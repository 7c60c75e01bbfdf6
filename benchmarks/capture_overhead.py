"""Step-time overhead of mapp tracing on megatron-core, and a slowed-GPU run for detection.

Two parts, usable alone or together (``suite`` runs both and writes everything under --out):

``overhead`` (run it under torchrun) trains one GPT in one process and rotates three modes
in blocks of ``--steps`` steps, ``--rounds`` times (the order rotates every round so that
drift hits every mode alike):

- ``off``:  nothing installed;
- ``idle``: hooks installed, outside any tracing window (what a run pays between windows);
- ``on``:   hooks installed, every step traced at ``--granularity`` (default ``layer``).

Every step ends with ``torch.cuda.synchronize()`` in all three modes (the harness's, not the
tracer's); the first step of each block is left out of the statistics. It prints a table
(median, p10, p90 step time; overhead of the median against ``off``) and writes
``overhead.json`` and the trace of the last traced block (``overhead-trace/``).

``slowed`` runs ``examples/train_gpt.py`` twice on 2 GPUs (NCCL, TP2): once with rank 1
slowed in software (``--slow-rank 1 --slow-factor 1.5``) and once clean, traces in
``slowed/`` and ``clean/``, then runs ``mapp detect`` on both when ``mapp.analysis`` can be
imported there (else detect them offline from the copied traces).

On the device machine (2x H200; the 1-GPU part uses GPU 0 only):

    python3 benchmarks/capture_overhead.py suite --out "$OUT"

CPU smoke test (tiny model, host clock): ``python benchmarks/capture_overhead.py suite
--out /tmp/cap --tiny``.

``micro`` (no torchrun, no GPU, host clock) prints the per-event cost on the training thread:
a scope, an ``emit_spec``, the writer's cost per record, and a toy model whose layers,
attention and MLP are traced like megatron's (forward wrapper + backward hooks), as step
time added per event against the same model untraced (blocks of 10 iterations each).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_gpt.py"

# Micro-batch 4 fills an H200 (steps within ±0.5%); with micro-batch 1 the GPU waits on the
# host (megatron-core's local layers issue small kernels) and steps vary by ±10%, more than
# the overhead to be measured (``--mbs 1`` runs it anyway).
BIG = {"layers": 24, "hidden": 2048, "heads": 16, "seq": 2048, "vocab": 32000, "mbs": 4, "microbatches": 4}
TINY = {"layers": 4, "hidden": 64, "heads": 4, "seq": 32, "vocab": 256, "mbs": 2, "microbatches": 4}
SLOWED_BIG = {"layers": 8, "hidden": 2048, "heads": 16, "seq": 1024, "vocab": 32000, "mbs": 1, "microbatches": 8}


def _example():
    spec = importlib.util.spec_from_file_location("train_gpt", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model_flags(size: dict, bf16: bool) -> list[str]:
    flags = ["--layers", str(size["layers"]), "--hidden", str(size["hidden"]), "--heads", str(size["heads"]),
             "--seq", str(size["seq"]), "--vocab", str(size["vocab"]), "--micro-batch-size", str(size["mbs"]),
             "--num-microbatches", str(size["microbatches"])]
    return flags + (["--bf16"] if bf16 else [])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# -- overhead (inside torchrun) -----------------------------------------------------------
def run_overhead(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    tg = _example()
    size = dict(TINY if a.tiny else BIG)
    if a.mbs:
        size["mbs"] = a.mbs
    targs = tg.parse_args(_model_flags(size, bf16=not a.tiny and torch.cuda.is_available())
                          + ["--tp", str(a.tp), "--pp", str(a.pp)])
    device = tg.init_distributed(targs)
    from mapp.megatron_hooks import install
    from mapp.megatron_hooks.cpu_patches import apply_if_cpu

    apply_if_cpu()
    from megatron.core import parallel_state as ps
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    ps.initialize_model_parallel(tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp)
    model_parallel_cuda_manual_seed(1234)
    cfg, chunks = tg.build_model(targs, device)
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-5, bf16=targs.bf16, use_distributed_optimizer=False), chunks)
    fb = get_forward_backward_func()
    data = tg.batches(targs, device)
    rank = dist.get_rank()
    cuda = device.type == "cuda"

    def step() -> float:
        """One training step; returns when the host had issued forward and backward."""
        for c in chunks:
            c.zero_grad_buffer()
        opt.zero_grad()
        fb(forward_step_func=tg.forward_step, data_iterator=data, model=chunks[0],
           num_microbatches=targs.num_microbatches, seq_length=targs.seq,
           micro_batch_size=targs.micro_batch_size, forward_only=False)
        issued = time.perf_counter()
        opt.step()
        return issued

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    sync()

    out = Path(a.out)
    scratch = Path(tempfile.mkdtemp(prefix="mapp-overhead-"))
    modes = a.modes.split(",")
    unknown = set(modes) - set(MODES)
    if unknown:
        raise SystemExit(f"unknown mode(s) {sorted(unknown)}; choose from {', '.join(MODES)}")
    times: dict[str, list[float]] = {m: [] for m in modes}
    issue: dict[str, list[float]] = {m: [] for m in modes}
    stats: list[dict] = []
    iteration = 0
    last_traced: Path | None = None
    for r in range(a.rounds):
        k = r % len(modes)
        order = modes[k:] + modes[:k]
        for mode in order:
            inst = None
            block_dir = scratch / f"round{r:02d}-{mode}"
            if mode != "off":
                inst = install(model=chunks, optimizer=opt, trace_dir=str(block_dir), interval=1,
                               length=0 if mode == "idle" else 1, granularity=a.granularity,
                               clock="host" if mode == "on_host" else "auto")
                if mode == "on_parked" or os.environ.get("MAPP_BENCH_PARK_WRITER"):
                    # Diagnostic: the writer does nothing until close, so "on" shows the
                    # training thread's own cost only.
                    writer = inst.tracer.writer
                    writer.kick, writer.flush_s, writer.flush_every = (lambda: None), 1e9, 10**9
            dist.barrier()
            sync()
            with _diagnostic(mode):
                for s in range(a.steps):
                    t0 = time.perf_counter()
                    with inst.iteration(iteration) if inst is not None else contextlib.nullcontext():
                        issued = step()
                    sync()
                    if s > 0:
                        times[mode].append(time.perf_counter() - t0)
                        issue[mode].append(issued - t0)
                    iteration += 1
            if inst is not None:
                inst.close()  # first: the writer finishes the block's last step
                st = dict(inst.tracer.stats)
                st.update(mode=mode, round=r, events_per_step=st["written"] / a.steps)
                stats.append(st)
                if mode == "on":
                    last_traced = block_dir
    # every rank's medians, gathered
    summary = {m: {"median_ms": statistics.median(v) * 1e3, "p10_ms": _percentile(v, 0.1) * 1e3,
                   "p90_ms": _percentile(v, 0.9) * 1e3, "steps": len(v),
                   "issued_ms": statistics.median(issue[m]) * 1e3} for m, v in times.items()}
    base = summary["off"]["median_ms"]
    for m in modes:
        summary[m]["overhead_pct"] = (summary[m]["median_ms"] / base - 1.0) * 100.0
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"summary": summary, "tracer": stats})
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        on_stats = [s for s in stats if s["mode"] == "on"]
        result = {
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "model": size | {"tp": a.tp, "pp": a.pp, "bf16": targs.bf16},
            "granularity": a.granularity, "rounds": a.rounds, "steps_per_block": a.steps,
            "ranks": gathered, "step_times_s": times, "issued_s": issue,
        }
        (out / "overhead.json").write_text(json.dumps(result, indent=1))
        print(f"\nmapp capture overhead  device={result['device']}  model={result['model']}  "
              f"granularity={a.granularity}  {a.rounds} rounds x {a.steps} steps/block", flush=True)
        print(f"{'mode':<8} {'steps':>5} {'median ms':>10} {'p10 ms':>9} {'p90 ms':>9} {'overhead':>9} "
              f"{'fwd+bwd issued ms':>18}")
        for m in modes:
            s = summary[m]
            print(f"{m:<8} {s['steps']:>5} {s['median_ms']:>10.2f} {s['p10_ms']:>9.2f} {s['p90_ms']:>9.2f} "
                  f"{s['overhead_pct']:>+8.2f}% {s['issued_ms']:>18.2f}")
        if on_stats:
            print(f"traced: {statistics.median(s['events_per_step'] for s in on_stats):.0f} events/step, "
                  f"dropped {sum(s['dropped'] for s in on_stats)}, "
                  f"event pool empty {sum(s['pool_exhausted'] for s in on_stats)} times, "
                  f"CUDA events made per block {[s.get('cuda_events_made', 0) for s in on_stats]}, "
                  f"stamps resolved by {sorted({str(s.get('resolver')) for s in on_stats})}", flush=True)
    if last_traced is not None:
        dest = out / "overhead-trace"
        dest.mkdir(parents=True, exist_ok=True)
        for f in last_traced.glob("rank-*.json"):
            shutil.copy(f, dest / f.name)
    shutil.rmtree(scratch, ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()


MODES = {
    "off": "nothing installed",
    "idle": "hooks installed, outside a tracing window",
    "on": "every step traced",
    "on_host": "every step traced, host clock instead of CUDA events (diagnostic)",
    "on_nobwd": "every step traced, no backward hooks on layers (diagnostic)",
    "on_parked": "every step traced, the writer idle until the block ends (diagnostic)",
}


@contextlib.contextmanager
def _diagnostic(mode: str):
    """Switch off one part of the hooks for a diagnostic mode."""
    if mode != "on_nobwd":
        yield
        return
    from mapp.megatron_hooks import layers

    saved = layers._on_grad_ready
    layers._on_grad_ready = lambda tensor, fn: None
    try:
        yield
    finally:
        layers._on_grad_ready = saved


# -- micro-benchmark (no torchrun, no GPU) --------------------------------------------------
def _micro_model(layers: int, hidden: int):
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(hidden, hidden)

        def forward(self, hidden_states):
            return torch.nn.functional.gelu(self.lin(hidden_states))

    class Layer(torch.nn.Module):
        def __init__(self, number):
            super().__init__()
            self.layer_number = number
            self.self_attention = Block()
            self.mlp = Block()

        def forward(self, hidden_states):
            x = hidden_states + self.self_attention(hidden_states)
            return x + self.mlp(x)

    return torch.nn.Sequential(*[Layer(i + 1) for i in range(layers)])


def run_micro(a: argparse.Namespace) -> None:
    """Per-event cost on the training thread: scopes, and hooked module forward+backward."""
    import torch

    from mapp.capture import Granularity, Tracer, TracerConfig, Window
    from mapp.megatron_hooks.context import HookContext
    from mapp.megatron_hooks.groups import GroupNames
    from mapp.megatron_hooks.layers import LayerHooks

    torch.set_num_threads(1)
    scratch = Path(tempfile.mkdtemp(prefix="mapp-micro-"))
    parked = {"flush_ms": 1e9, "flush_every": 10**9}  # the writer sleeps until close()
    results: dict[str, float] = {}

    # 1. scope enter/exit (two stamps, one record) and the writer's cost per record
    n = a.micro_events
    tracer = Tracer(TracerConfig(trace_dir=str(scratch / "scope"), rank=0, world_size=1, clock="host",
                                 window=Window(interval=1, length=1), max_pending=(a.micro_reps + 1) * n, **parked))
    tracer.writer.kick = lambda: None  # everything is written by close(), timed below
    per = []
    for it in range(a.micro_reps):
        with tracer.iteration(it):
            t0 = time.perf_counter_ns()
            for i in range(n):
                with tracer.scope("layer.forward", "compute", Granularity.LAYER, microbatch=1, chunk=0):
                    pass
            per.append((time.perf_counter_ns() - t0) / n / 1000)
    t0 = time.perf_counter_ns()
    tracer.close()
    results["scope_us"] = statistics.median(per)
    results["writer_us_per_event"] = (time.perf_counter_ns() - t0) / 1000 / tracer.stats["written"]
    # the same with the hooks' form (an EventSpec per span), where this mapp has it
    from mapp.capture import tracer as tracer_module

    if hasattr(tracer_module, "EventSpec"):
        tracer = Tracer(TracerConfig(trace_dir=str(scratch / "spec"), rank=0, world_size=1, clock="host",
                                     window=Window(interval=1, length=1), max_pending=(a.micro_reps + 1) * n,
                                     **parked))
        tracer.writer.kick = lambda: None
        spec = tracer_module.EventSpec("layer.forward", "compute", "compute", {"microbatch": 1, "chunk": 0, "layer": 3})
        per = []
        for it in range(a.micro_reps):
            with tracer.iteration(it):
                t0 = time.perf_counter_ns()
                for i in range(n):
                    tracer.emit_spec(spec, tracer.stamp())
                per.append((time.perf_counter_ns() - t0) / n / 1000)
        t0 = time.perf_counter_ns()
        tracer.close()
        results["spec_us"] = statistics.median(per)
        results["writer_spec_us_per_event"] = (time.perf_counter_ns() - t0) / 1000 / tracer.stats["written"]

    # 2. a hooked model: layer + attention + mlp per layer, forward and backward spans
    model = _micro_model(a.micro_layers, a.micro_hidden)
    x = torch.randn(a.micro_tokens, a.micro_hidden, requires_grad=True)
    for writer in ("parked", "running"):
        extra = parked if writer == "parked" else {}
        tracer = Tracer(TracerConfig(trace_dir=str(scratch / writer), rank=0, world_size=1, clock="host",
                                     window=Window(interval=20, length=10), max_pending=10**7, **extra))
        ctx = HookContext(tracer, GroupNames())
        hooks = LayerHooks(ctx)
        for layer in model:
            hooks.attach(layer, "layer", Granularity.LAYER, layer.layer_number - 1, 0)
            hooks.attach(layer.self_attention, "attention", Granularity.LAYER, layer.layer_number - 1, 0)
            hooks.attach(layer.mlp, "mlp", Granularity.LAYER, layer.layer_number - 1, 0)
        times: dict[bool, list[float]] = {True: [], False: []}
        for it in range(20 * max(2, a.micro_reps // 10)):  # blocks of 10 traced, 10 untraced
            with tracer.iteration(it) as traced:
                t0 = time.perf_counter_ns()
                for mb in range(4):
                    ctx.microbatch = mb
                    model(x).sum().backward()
                dt = time.perf_counter_ns() - t0
            if it % 10 >= 2:  # the first two of each block warm up
                times[traced].append(dt)
        written_before = tracer.stats["written"]
        hooks.remove()
        tracer.close()
        events = 4 * 6 * a.micro_layers  # layer/attention/mlp x forward/backward x 4 microbatches
        on, off = statistics.median(times[True]), statistics.median(times[False])
        results[f"module_{writer}_us_per_event"] = (on - off) / events / 1000
        results[f"module_{writer}_off_us"] = off / 1000
        results[f"module_{writer}_overhead_pct"] = (on / off - 1) * 100
        del written_before
    shutil.rmtree(scratch, ignore_errors=True)
    if torch.cuda.is_available():
        results.update(_gpu_event_cost(torch))
    print(f"mapp capture micro-benchmark  ({a.micro_events} scopes x {a.micro_reps}; "
          f"{a.micro_layers} layers x 4 microbatches, hidden {a.micro_hidden}, {a.micro_tokens} tokens)")
    print(f"scope enter+exit (training thread)   {results['scope_us']:8.2f} us/event")
    print(f"writer (resolve + encode + write)    {results['writer_us_per_event']:8.2f} us/event")
    if "spec_us" in results:
        print(f"emit_spec (training thread)          {results['spec_us']:8.2f} us/event")
        print(f"writer, EventSpec records            {results['writer_spec_us_per_event']:8.2f} us/event")
    for writer in ("parked", "running"):
        print(f"hooked fwd+bwd, writer {writer:<8}      {results[f'module_{writer}_us_per_event']:8.2f} us/event"
              f"   (step {results[f'module_{writer}_off_us'] / 1000:.2f} ms untraced, "
              f"{results[f'module_{writer}_overhead_pct']:+.1f}% traced)")
    if "gpu_us_per_record" in results:
        print(f"CUDA timing event, GPU time added     {results['gpu_us_per_record']:8.2f} us/record"
              f"   (between {results['gpu_matmul_us']:.0f} us matmuls; host {results['host_us_per_record']:.2f} us/record)")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "micro.json").write_text(json.dumps(results, indent=1))


def _gpu_event_cost(torch, n: int = 2000, reps: int = 5) -> dict[str, float]:
    """GPU time a timing event record adds between back-to-back kernels, and its host cost."""
    from mapp.capture.clock import _cuda_event_factory

    new_event = _cuda_event_factory(torch)
    events = [new_event() for _ in range(n)]
    x = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)

    def run(record: bool) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            torch.mm(x, w)
            if record:
                events[i].record()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    run(True)
    plain = statistics.median(run(False) for _ in range(reps))
    recorded = statistics.median(run(True) for _ in range(reps))
    t0 = time.perf_counter()
    for e in events:
        e.record()
    host = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    return {"gpu_us_per_record": (recorded - plain) / n * 1e6, "gpu_matmul_us": plain / n * 1e6,
            "host_us_per_record": host * 1e6}


# -- orchestration (outside torchrun) -----------------------------------------------------
def _env(visible: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


def _torchrun(nproc: int, script: Path, args: list[str], visible: str | None, timeout: float, log: Path) -> int:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(script), *args]
    print("$", " ".join(cmd), flush=True)
    started = time.perf_counter()
    with open(log, "w") as f:
        try:
            proc = subprocess.run(cmd, env=_env(visible), cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=timeout)
            text, rc = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as exc:
            text, rc = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""), 124
        f.write(text)
    keep = [line for line in text.splitlines()
            if not any(w in line for w in ("Warning", "warnings.warn", "warn("))]
    print("\n".join(keep[-25:]), flush=True)
    print(f"(rc={rc}, {time.perf_counter() - started:.0f} s, log {log})", flush=True)
    return rc


def _gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def _detect(trace_dir: Path) -> None:
    try:
        from mapp.analysis.detect import detect_bundle
        from mapp.analysis.ingest import load_bundle
    except Exception as exc:  # the GPU image may lack polars/duckdb: detect offline
        print(f"detect skipped here ({type(exc).__name__}: {exc}); run `mapp detect {trace_dir}` offline",
              flush=True)
        return
    try:
        verdict = detect_bundle(load_bundle(trace_dir))
        print(f"detect {trace_dir.name}: suspects "
              f"{[(s.rank, s.kind, round(s.slowdown, 2), round(s.confidence, 2)) for s in verdict.suspects]}",
              flush=True)
    except Exception as exc:
        print(f"detect {trace_dir.name} failed: {type(exc).__name__}: {exc}", flush=True)


def run_suite(a: argparse.Namespace) -> None:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    gpus = _gpus()
    print(f"GPUs visible: {gpus}", flush=True)
    if not a.skip_overhead:
        flags = ["overhead", "--out", str(out), "--rounds", str(a.rounds), "--steps", str(a.steps),
                 "--granularity", a.granularity, "--modes", a.modes, "--mbs", str(a.mbs)] + (["--tiny"] if a.tiny else [])
        _torchrun(1, Path(__file__), flags, "0" if gpus else None, a.overhead_timeout, out / "overhead.log")
    if a.skip_slowed:
        return
    if gpus < 2 and not a.tiny:
        print("slowed run skipped: needs 2 GPUs", flush=True)
        return
    size = TINY if a.tiny else SLOWED_BIG
    base = ["--tp", "2", *_model_flags(size, bf16=not a.tiny), "--iterations", str(a.slowed_iterations),
            "--trace", "--trace-start", "4", "--trace-interval", "1000",
            "--continuous-trace-iterations", str(a.slowed_iterations - 4)]
    visible = "0,1" if gpus >= 2 else None
    for name, extra in (("slowed", ["--slow-rank", "1", "--slow-factor", str(a.slow_factor)]), ("clean", [])):
        trace = out / name
        rc = _torchrun(2, EXAMPLE, base + ["--trace-dir", str(trace), "--timings-json", str(out / f"{name}-steps.json"),
                                           "--groups-json", str(out / f"{name}-groups.json"), *extra],
                       visible, a.slowed_timeout, out / f"{name}.log")
        if rc == 0:
            _detect(trace)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", default=os.environ.get("OUT", "capture-overhead-out"))
    common.add_argument("--tiny", action="store_true", help="tiny model (CPU smoke test)")
    common.add_argument("--granularity", default="layer")
    common.add_argument("--rounds", type=int, default=8)
    common.add_argument("--steps", type=int, default=8, help="steps per block (the first is not counted)")
    common.add_argument("--modes", default="off,idle,on", help=f"comma-separated, of: {', '.join(MODES)}")
    common.add_argument("--mbs", type=int, default=0, help="micro-batch size (default: the model's)")
    o = sub.add_parser("overhead", parents=[common], help="run under torchrun")
    o.add_argument("--tp", type=int, default=1)
    o.add_argument("--pp", type=int, default=1)
    o.add_argument("--warmup", type=int, default=3)
    s = sub.add_parser("suite", parents=[common], help="overhead on 1 GPU, then the slowed 2-GPU runs")
    s.add_argument("--skip-overhead", action="store_true")
    s.add_argument("--skip-slowed", action="store_true")
    s.add_argument("--slow-factor", type=float, default=1.5)
    s.add_argument("--slowed-iterations", type=int, default=12)
    s.add_argument("--overhead-timeout", type=float, default=330)
    s.add_argument("--slowed-timeout", type=float, default=110)
    m = sub.add_parser("micro", help="per-event cost on the training thread (CPU, no torchrun)")
    m.add_argument("--out", default=None, help="also write micro.json here")
    m.add_argument("--micro-events", type=int, default=5000)
    m.add_argument("--micro-reps", type=int, default=40)
    m.add_argument("--micro-layers", type=int, default=8)
    m.add_argument("--micro-hidden", type=int, default=8)
    m.add_argument("--micro-tokens", type=int, default=2)
    a = p.parse_args(argv)
    if a.command == "overhead":
        run_overhead(a)
    elif a.command == "micro":
        run_micro(a)
    else:
        run_suite(a)


if __name__ == "__main__":
    main()
