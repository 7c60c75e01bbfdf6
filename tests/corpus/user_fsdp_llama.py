"""A job written as a user writes one: a small LLaMA-style decoder (RMSNorm, rotary embeddings,
SwiGLU MLP, causal ``scaled_dot_product_attention``) trained on random tokens with the classic
FSDP API (``FullyShardedDataParallel``, one FSDP unit per decoder block through
``ModuleWrapPolicy``), AdamW and ``clip_grad_norm_``; optionally activation checkpointing per
block (``--ckpt``) and gradient accumulation under ``no_sync`` (``--accum``). gloo on CPUs
(``--ddp`` wraps the model in DDP instead). Profiled with ``torch.profiler.schedule`` and
exported per rank with ``export_chrome_trace`` (``trace_rank<R>.json``).

A rank (``--slow-rank``) is slowed in software: ``--factor F`` makes its blocks do F times their
MLP matmuls in forward (a slower device), ``--hog`` runs a busy thread of small matmuls beside
its training loop (a noisy neighbour), ``--opt-sleep-ms`` sleeps on its host before each
``optimizer.step()``. ``--seq-sigma`` gives every rank its own lognormal sequence lengths
(imbalance, no fault).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_fsdp_llama.py --out DIR --slow-rank 2 --factor 1.5
"""

from __future__ import annotations

import argparse
import contextlib
import math
import pathlib
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory the traces are written to")
    p.add_argument("--steps", type=int, default=9, help="training steps (the first two are not recorded)")
    p.add_argument("--dim", type=int, default=192, help="model width")
    p.add_argument("--layers", type=int, default=4, help="decoder blocks")
    p.add_argument("--heads", type=int, default=6, help="attention heads")
    p.add_argument("--hidden", type=int, default=1024, help="SwiGLU hidden width")
    p.add_argument("--seq", type=int, default=64, help="sequence length (the median one with --seq-sigma)")
    p.add_argument("--batch", type=int, default=2, help="sequences per microbatch and rank")
    p.add_argument("--vocab", type=int, default=512, help="vocabulary size")
    p.add_argument("--tie", action="store_true", help="tie the LM head to the token embedding")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the data")
    p.add_argument("--ddp", action="store_true", help="wrap with DistributedDataParallel instead of FSDP")
    p.add_argument("--ckpt", action="store_true", help="activation checkpointing per decoder block")
    p.add_argument("--accum", type=int, default=1, help="microbatches a step (gradient accumulation)")
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clipped to")
    p.add_argument("--seq-sigma", type=float, default=0.0,
                   help="sigma of each rank's lognormal sequence length per step (0: every batch is --seq long)")
    p.add_argument("--slow-rank", type=int, default=-1, help="the rank the faults below apply to (-1: none)")
    p.add_argument("--factor", type=float, default=1.0, help="the slow rank's MLP matmul work in forward, times")
    p.add_argument("--hog", action="store_true", help="a busy thread of small matmuls on the slow rank")
    p.add_argument("--opt-sleep-ms", type=float, default=0.0, help="a host sleep on the slow rank before optimizer.step()")
    return p.parse_args()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(seq: int, head_dim: int, base: float = 10000.0):
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq).float(), inv)
    return angles.cos(), angles.sin()


def apply_rotary(x, cos, sin):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, extra_mlp: float = 0.0):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.extra_mlp = extra_mlp

    def attention(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def mlp(self, x):
        if self.extra_mlp:
            self.wasted_mlp(x)
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    @torch.no_grad()
    def wasted_mlp(self, x):
        # the same matmuls again on (extra_mlp x) the rows; fractions take a slice of the rows
        rows = x.detach().reshape(-1, x.shape[-1])
        left = round(self.extra_mlp * rows.shape[0])
        while left > 0:
            r = rows[:left]
            _ = F.linear(F.silu(F.linear(r, self.w1.weight)) * F.linear(r, self.w3.weight), self.w2.weight)
            left -= r.shape[0]

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, a: argparse.Namespace, extra_mlp: float):
        super().__init__()
        self.head_dim = a.dim // a.heads
        self.embed = nn.Embedding(a.vocab, a.dim)
        self.blocks = nn.ModuleList(Block(a.dim, a.heads, a.hidden, extra_mlp) for _ in range(a.layers))
        self.norm = RMSNorm(a.dim)
        self.lm_head = nn.Linear(a.dim, a.vocab, bias=False)
        if a.tie:
            self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        cos, sin = rotary(tokens.shape[1], self.head_dim)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.lm_head(self.norm(x))


def wrap(model: nn.Module, a: argparse.Namespace) -> nn.Module:
    if a.ddp:
        model = DDP(model)
    else:
        model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=torch.device("cpu"))
    if a.ckpt:
        apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, Block))
    return model


def start_hog(stop: threading.Event) -> threading.Thread:
    def spin():
        x, w = torch.randn(64, 64), torch.randn(64, 64)
        while not stop.is_set():
            torch.mm(x, w)

    thread = threading.Thread(target=spin, name="hog", daemon=True)
    thread.start()
    return thread


def seq_len(a: argparse.Namespace, rank: int, step: int) -> int:
    if a.seq_sigma <= 0:
        return a.seq
    g = torch.Generator().manual_seed(a.seed * 1_000_003 + rank * 10_007 + step)
    drawn = a.seq * math.exp(a.seq_sigma * torch.randn((), generator=g).item())
    return int(min(max(drawn, 8), 4 * a.seq))


def main() -> None:
    a = parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = rank == a.slow_rank
    torch.manual_seed(a.seed)   # the same initial weights on every rank
    model = wrap(Llama(a, a.factor - 1.0 if slow else 0.0), a)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = torch.Generator().manual_seed(a.seed * 7919 + rank)

    stop = threading.Event()
    hog = start_hog(stop) if slow and a.hog else None

    def step(i: int) -> None:
        t = seq_len(a, rank, i)
        for micro in range(a.accum):
            tokens = torch.randint(0, a.vocab, (a.batch, t + 1), generator=data)
            sync = model.no_sync if micro < a.accum - 1 else contextlib.nullcontext
            with sync():
                with torch.profiler.record_function("forward"):
                    logits = model(tokens[:, :-1])
                    loss = F.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1)) / a.accum
                with torch.profiler.record_function("backward"):
                    loss.backward()
        with torch.profiler.record_function("optimizer"):
            if a.ddp:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            else:
                model.clip_grad_norm_(a.clip)
            if slow and a.opt_sleep_ms:
                time.sleep(a.opt_sleep_ms / 1000)
            opt.step()
            opt.zero_grad(set_to_none=True)

    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                profile_memory=True, with_stack=False,
                                schedule=torch.profiler.schedule(wait=1, warmup=1, active=a.steps - 2)) as prof:
        for i in range(a.steps):
            step(i)
            prof.step()
    prof.export_chrome_trace(str(out / f"trace_rank{rank}.json"))
    if hog is not None:
        stop.set()
        hog.join()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
