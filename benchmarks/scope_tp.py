"""MegaScope on tensor parallelism: what a TP job shows equals the TP1 run; tokens/s with capture off and on.

    python benchmarks/scope_tp.py --tp 2 [--size cpu|gpu] [--new N] [--rounds 5] [--json OUT]

On 2 GPUs (NCCL, one GPU per rank) or, with fewer GPUs than ``--tp``, on the CPU (gloo):
``python benchmarks/scope_tp.py --tp 2 --size cpu`` is the smoke test.

The parent process never touches a GPU: a child builds a megatron-core GPT
(``mapp.scope.model``; GQA so that TP splits the query groups too; output layer untied) with
random weights on the CPU and saves it as a scope checkpoint in a temporary directory; then
this file runs twice under torchrun in ``--worker`` mode, one process (TP1) and ``--tp``
processes. Each worker loads the checkpoint at its TP (megatron-core reshards) and, all ranks
in lockstep as under ``mapp scope serve``:

- **equality**: one greedy generation of fixed prompts through ``Engine.generate`` (the path
  of ``mapp scope serve``) with reducer "mean" and as many bins as the widest feature, so that
  every row of every frame is the raw activation; rank 0 keeps the frames, every attention
  matrix as the page's attention view answers it, and the statistics of the last pass.
  The parent compares them with TP1's: max abs difference per kind (Q, K, V, fc1, fc2,
  residual rows of every step and of ``done``, top-k probabilities, attention, statistics)
  and whether the generated token ids (and the top-k ids) are identical;
- **speed**: generation tokens/s of 2 prompts, ``--new`` tokens each, recomputing the
  sequence every step (no KV cache, as the engine does): capture off (the model alone,
  greedy) against capture on (``Engine.generate`` with the page's default reducer and bins:
  hooks, TP gathers, reduction, host copies, frames built and dropped). Medians over
  ``--rounds`` after one warm-up round; each timed region starts at a barrier and ends with
  ``torch.cuda.synchronize()`` on a GPU; rank 0's clock.

fp32 on CPU and GPU with TF32 off, so that TP1 and TP2 differ only by summation order.
Prints a table; exits 1 if the tokens differ or a difference exceeds the tolerance. A worker
hands its results to the parent as a pickle, not JSON: the raw-value frames of the gpu size
are ~100 MB of floats (JSON: ~0.5 GB, and slow both ways).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]

SIZES = {
    # layers, hidden, heads, query groups, ffn, new tokens
    "cpu": (2, 64, 4, 2, 128, 16),
    "gpu": (12, 1024, 16, 4, 4096, 32),
}
PROMPTS = ["The quick brown fox jumps over the lazy dog.", "Once upon a time there was a"]
SEED = 0
# TP splits every matmul's reduction: a row-parallel layer sums partial products over ranks
# (all-reduce) and a column-parallel one runs on half the columns, so the kernels block and
# order their sums differently; in fp32 that is ~1e-7 relative per sum, growing through the
# layers. On a GPU cuBLAS also picks other kernels (split-K, tiles) for the halved shapes and
# the model is wider and deeper (larger activations), hence the looser bound.
TOLERANCE = {"cpu": 1e-4, "cuda": 2e-3}
CHILD_TIMEOUT_S = 600


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _spec(size: str):
    from mapp.scope.model import ModelSpec

    layers, hidden, heads, groups, ffn, new = SIZES[size]
    # untied output layer: with random weights a tied one predicts the token it was given
    # (its embedding dominates the residual stream), so every model, sharded right or wrong,
    # would generate "aaaa..." and identical tokens would prove nothing
    return ModelSpec(num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_query_groups=groups,
                     ffn_hidden_size=ffn, vocab_size=256, max_sequence_length=128 if size == "cpu" else 256,
                     share_embeddings_and_output_weights=False)


# -- children ------------------------------------------------------------------------------

def build(size: str, directory: str) -> None:
    """One process, on the CPU (random init there gives the same full weights at any TP)."""
    from mapp.scope.model import build_model, ensure_model_parallel, save_checkpoint

    spec = _spec(size)
    ensure_model_parallel()
    torch.manual_seed(SEED)
    save_checkpoint(build_model(spec, device="cpu"), spec, directory)


def worker(checkpoint: str, tp: int, new: int, rounds: int, out: str) -> None:
    """One rank of the TP job: the equality generation, then the timings; rank 0 writes ``out``."""
    import torch.distributed as dist

    from mapp.scope.engine import Engine
    from mapp.scope.model import load_checkpoint
    from mapp.scope.protocol import DEFAULTS
    from mapp.scope.serve import init_parallel
    from mapp.scope.tokenizer import load_tokenizer
    from mapp.scope.views import attention_view

    # TF32 would round matmul inputs to 10 bits: TP1 and TP2 would then differ by far more
    # than summation order
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    init_parallel(tp, 1)             # NCCL and cuda:LOCAL_RANK on a GPU, gloo on the CPU
    model, spec = load_checkpoint(checkpoint)
    engine = Engine(model, load_tokenizer(checkpoint, spec))
    rank = dist.get_rank()

    frames: list[dict] = []
    bins = max(spec.hidden_size, spec.ffn_hidden_size)   # >= every kind's width: "mean" of one value
    engine.generate({"prompts": PROMPTS, "max_new_tokens": new, "reducer": "mean", "bins": bins, "top_k": 5},
                    frames.append)
    result = None
    if rank == 0:
        last = engine.last
        attention = {(layer, head, prompt): attention_view(last, layer, head, prompt)["matrix"]
                     for layer in sorted(last.attention)
                     for head in range(spec.num_attention_heads) for prompt in range(len(PROMPTS))}
        result = {"frames": frames, "attention": attention, "stats": last.stats, "bins": bins,
                  "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"}

    # the page's defaults: what a person watching pays, not the raw-value setting above
    message = {"prompts": PROMPTS, "max_new_tokens": new, "reducer": DEFAULTS["reducer"], "bins": DEFAULTS["bins"],
               "top_k": DEFAULTS["top_k"]}
    off, on = [], []
    for r in range(rounds + 1):      # round 0 warms up (kernels, NCCL channels, allocator)
        seqs = [engine.tokenizer.encode(p) for p in PROMPTS]
        dist.barrier()
        _sync()
        t0 = time.perf_counter()
        engine.decode(seqs, new)
        _sync()
        took_off = time.perf_counter() - t0
        dist.barrier()
        _sync()
        t0 = time.perf_counter()
        engine.generate(message, lambda frame: None)
        _sync()
        took_on = time.perf_counter() - t0
        if r:
            off.append(took_off)
            on.append(took_on)
    if rank == 0:
        tokens = new * len(PROMPTS)
        result["speed"] = {"off_tokens_s": tokens / statistics.median(off),
                           "on_tokens_s": tokens / statistics.median(on),
                           "capture": f"{DEFAULTS['reducer']}, {DEFAULTS['bins']} bins"}
        with open(out, "wb") as f:
            pickle.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


# -- comparison ----------------------------------------------------------------------------

class Diffs:
    """Per kind: max abs difference, largest magnitude seen, values compared."""

    def __init__(self) -> None:
        self.kinds: dict[str, dict[str, float]] = {}

    def add(self, kind: str, a, b) -> None:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        k = self.kinds.setdefault(kind, {"max_abs_diff": 0.0, "max_abs_value": 0.0, "values": 0})
        if a.shape != b.shape:
            k["max_abs_diff"] = float("inf")     # a different layout is a failure, not a small number
            return
        if a.size:
            k["max_abs_diff"] = max(k["max_abs_diff"], float(np.abs(a - b).max()))
            k["max_abs_value"] = max(k["max_abs_value"], float(np.abs(a).max()))
        k["values"] += int(a.size)

    def mismatch(self, kind: str) -> None:
        self.add(kind, [0.0], [])

    def pairs(self, kind: str, xs, ys):
        """zip, but a length mismatch counts as an infinite difference of ``kind``."""
        if len(xs) != len(ys):
            self.mismatch(kind)
        return zip(xs, ys)


def compare(base: dict, other: dict) -> dict:
    """``other`` (TP) against ``base`` (TP1): differences per kind, tokens and top-k ids identical."""
    from mapp.scope.protocol import KINDS

    diffs = Diffs()
    fa, fb = base["frames"], other["frames"]
    same_tokens = [f["type"] for f in fa] == [f["type"] for f in fb]
    same_topk = True
    for x, y in diffs.pairs("frames", fa, fb):
        if x["type"] == "step":
            same_tokens &= x["token_ids"] == y["token_ids"]
            for px, py in diffs.pairs("top-k p", x["topk"], y["topk"]):
                same_topk &= [t["id"] for t in px] == [t["id"] for t in py]
                diffs.add("top-k p", [t["p"] for t in px], [t["p"] for t in py])
        if x["type"] == "done":
            same_tokens &= x["tokens"] == y["tokens"] and x["text"] == y["text"]
        for lx, ly in diffs.pairs("layers", x.get("layers", []), y.get("layers", [])):
            if lx["layer"] != ly["layer"]:
                diffs.mismatch("layers")
            for kind in KINDS:
                for rx, ry in diffs.pairs(kind, lx[kind], ly[kind]):
                    diffs.add(kind, rx, ry)
    if base["attention"].keys() != other["attention"].keys():
        diffs.mismatch("attention")
    for key in base["attention"].keys() & other["attention"].keys():
        diffs.add("attention", base["attention"][key], other["attention"][key])
    for layer, kinds in base["stats"].items():
        for kind, values in kinds.items():
            diffs.add("statistics", values, other["stats"].get(layer, {}).get(kind, []))
    return {"diff": diffs.kinds, "tokens_identical": bool(same_tokens), "topk_ids_identical": bool(same_topk)}


# -- orchestration (outside torchrun) ------------------------------------------------------

def _env(gpus: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
               PYTHONWARNINGS="ignore")
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _child(cmd: list[str], gpus: bool, what: str) -> None:
    try:
        proc = subprocess.run(cmd, env=_env(gpus), cwd=ROOT, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        sys.exit(f"scope_tp: {what} did not finish within {CHILD_TIMEOUT_S} s: {' '.join(cmd)}")
    if proc.returncode:
        tail = (proc.stdout + proc.stderr)[-4000:]
        sys.exit(f"scope_tp: {what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def _run_tp(tp: int, checkpoint: Path, out: Path, args, gpus: bool) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={tp}", __file__,
           "--worker", "--checkpoint", str(checkpoint), "--out", str(out), "--tp", str(tp),
           "--new", str(args.new), "--rounds", str(args.rounds)]
    _child(cmd, gpus, f"the TP{tp} run")
    with open(out, "rb") as f:
        return pickle.load(f)


def _report(spec, args, device: str, ref: dict, tp_run: dict, verdict: dict, tolerance: float) -> None:
    tp = args.tp
    where = f"{device}, TP1 on 1 GPU and TP{tp} on {tp}" if device != "cpu" else "cpu (gloo)"
    print(f"MegaScope on TP{tp} against TP1 on {where} ({args.size} size): {spec.num_layers} layers, hidden "
          f"{spec.hidden_size}, {spec.num_attention_heads} heads / {spec.num_query_groups} query groups, ffn "
          f"{spec.ffn_hidden_size}, {len(PROMPTS)} prompts x {args.new} new tokens, fp32")
    print(f"frames with reducer mean, {ref['bins']} bins (raw values); tolerance {tolerance:g}")
    print(f"{'kind':<14}{'values':>12}{'max |TP1|':>14}{'max |diff|':>14}{'ok':>6}")
    for kind, d in verdict["diff"].items():
        ok = d["max_abs_diff"] <= tolerance
        print(f"{kind:<14}{d['values']:>12}{d['max_abs_value']:>14.4g}{d['max_abs_diff']:>14.3g}"
              f"{'yes' if ok else 'NO':>6}")
    print(f"generated token ids identical: {'yes' if verdict['tokens_identical'] else 'NO'}")
    print(f"top-k ids identical:           {'yes' if verdict['topk_ids_identical'] else 'NO'}")
    print()
    print(f"generation tokens/s (capture on: {ref['speed']['capture']})")
    print(f"{'run':<8}{'capture off':>14}{'capture on':>14}{'cost':>10}")
    for name, run in (("TP1", ref), (f"TP{tp}", tp_run)):
        s = run["speed"]
        cost = s["off_tokens_s"] / s["on_tokens_s"] - 1    # extra time per token with capture on
        print(f"{name:<8}{s['off_tokens_s']:>14.1f}{s['on_tokens_s']:>14.1f}{cost:>+10.1%}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel size compared with TP1")
    p.add_argument("--size", choices=sorted(SIZES), default=None,
                   help="model size (default: gpu if there are --tp GPUs, else cpu)")
    p.add_argument("--new", type=int, default=None, help="generated tokens per prompt (default: the size's)")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (after one warm-up)")
    p.add_argument("--json", default=None, help="write every figure here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--build", default=None, help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.build:
        build(args.size, args.build)
        return
    if args.worker:
        worker(args.checkpoint, args.tp, args.new, args.rounds, args.out)
        return

    gpus = torch.cuda.device_count()
    args.size = args.size or ("gpu" if gpus >= args.tp else "cpu")
    if args.size == "gpu" and gpus < args.tp:
        sys.exit(f"scope_tp: --size gpu --tp {args.tp} needs {args.tp} GPUs, found {gpus}; use --size cpu")
    spec = _spec(args.size)
    if args.tp < 2 or spec.num_query_groups % args.tp:
        sys.exit(f"scope_tp: --tp {args.tp} must be at least 2 and divide the {spec.num_query_groups} query groups "
                 f"of the {args.size} size")
    args.new = args.new or SIZES[args.size][-1]
    on_gpu = gpus >= args.tp
    tolerance = TOLERANCE["cuda" if on_gpu else "cpu"]
    with tempfile.TemporaryDirectory(prefix="mapp-scope-tp-") as tmp:
        checkpoint = Path(tmp) / "ckpt"
        # built on the CPU, GPUs hidden: the weights do not depend on the device that runs them
        _child([sys.executable, __file__, "--build", str(checkpoint), "--size", args.size], False, "building the model")
        ref = _run_tp(1, checkpoint, Path(tmp) / "tp1.pkl", args, on_gpu)
        tp_run = _run_tp(args.tp, checkpoint, Path(tmp) / f"tp{args.tp}.pkl", args, on_gpu)
    verdict = compare(ref, tp_run)
    _report(spec, args, ref["device"], ref, tp_run, verdict, tolerance)
    failed = [k for k, d in verdict["diff"].items() if not d["max_abs_diff"] <= tolerance]
    ok = verdict["tokens_identical"] and verdict["topk_ids_identical"] and not failed
    if args.json:
        for d in verdict["diff"].values():   # JSON has no infinity: a layout mismatch is null
            d["max_abs_diff"] = None if d["max_abs_diff"] == float("inf") else d["max_abs_diff"]
        with open(args.json, "w") as f:
            json.dump({"device": ref["device"], "size": args.size, "tp": args.tp, "gpus": args.tp if on_gpu else 0,
                       "spec": {k: getattr(spec, k) for k in ("num_layers", "hidden_size", "num_attention_heads",
                                                             "num_query_groups", "ffn_hidden_size", "vocab_size")},
                       "prompts": PROMPTS, "new_tokens": args.new, "rounds": args.rounds, "bins": ref["bins"],
                       "tolerance": tolerance, **verdict,
                       "speed": {"tp1": ref["speed"], f"tp{args.tp}": tp_run["speed"]}, "ok": ok},
                      f, indent=1)
    if not ok:
        what = ", ".join(failed + [n for n, v in (("tokens", verdict["tokens_identical"]),
                                                  ("top-k ids", verdict["topk_ids_identical"])) if not v])
        sys.exit(f"scope_tp: TP{args.tp} differs from TP1: {what}")


if __name__ == "__main__":
    main()
