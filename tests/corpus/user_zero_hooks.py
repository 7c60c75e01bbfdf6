"""Data-parallel training of a tiny GPT (token + position embeddings, ``--layers`` decoder blocks
of causal self-attention and an MLP built from ``nn.Linear`` / ``nn.LayerNorm``, a tied LM head)
with the parts of PyTorch's data parallelism the other user jobs leave alone: a DDP
communication hook, ``ZeroRedundancyOptimizer``, DDP's bucket size and its static graph. Gloo on
CPUs, launched by torchrun (4 processes by default; 2 work as well).

Profiled the way the profiler's docs show it: ``schedule(skip_first=1, wait=0, warmup=1,
active=steps - 2)`` with ``record_shapes=True``, steps marked with ``prof.step()``, forward,
backward and optimizer step in ``record_function("fwd" / "bwd" / "opt")`` ranges, and
``on_trace_ready`` writing one gzip-compressed chrome trace a process,
``<out>/rank<R>.pt.trace.json.gz``.

What the flags do:

- ``--hook {none,fp16,powersgd}``: the DDP comm hook. ``fp16`` is ``fp16_compress_hook`` (halves
  the gradients before the all-reduce), ``powersgd`` (default) is ``powerSGD_hook`` with a
  ``PowerSGDState`` of rank ``--psgd-rank`` that all-reduces plainly for the first two
  iterations (``start_powerSGD_iter=2``) and then all-reduces low-rank P and Q factors (one
  bucket at a time: on gloo its chained all-reduces of several buckets otherwise interleave in
  different orders on different ranks).
- ``--zero``: the optimizer is ``ZeroRedundancyOptimizer`` wrapping AdamW; each rank steps its
  shard of the parameters, then every shard is broadcast from its owner. Plain AdamW otherwise.
- ``--bucket-mb M``: DDP's ``bucket_cap_mb`` (its default, 25, holds this model in one bucket).
- ``--static-graph``: ``DDP(static_graph=True)``.
- ``--seq-sigma S``: each rank pads each step's batch to its own length, ``--seq`` x a
  lognormal(0, S) draw per rank per step, clipped to [16, 4 x seq] (dynamic padding: an
  imbalance between ranks, not a fault).

A rank (``--slow-rank R``) is slowed in software, one way a flag:

- ``--factor F``: each block's MLP does (F - 1) x its matmul work again in the forward, on its
  own weights and the same inputs, under ``no_grad`` with the results discarded (whole passes
  over all the rows, the fractional rest over that share of the rows): slower on the same work,
  like a slower GPU.
- ``--sleep-ms MS``: sleeps on the host before each step.
- ``--data-sleep-ms MS``: the function that makes its batches sleeps per batch (a slow input
  pipeline, in the training process, nothing to hide it).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_zero_hooks.py --out DIR --zero --hook fp16 --slow-rank 1 --factor 1.5
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def get_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the traces (rank<R>.pt.trace.json.gz)")
    p.add_argument("--steps", type=int, default=8, help="training steps: 1 skipped, 1 warmup, the rest recorded")
    p.add_argument("--width", type=int, default=128, help="hidden size")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8, help="sequences a rank a step")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--hook", choices=["none", "fp16", "powersgd"], default="powersgd")
    p.add_argument("--psgd-rank", type=int, default=2, help="PowerSGD matrix_approximation_rank")
    p.add_argument("--zero", action="store_true", help="ZeroRedundancyOptimizer(AdamW)")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    p.add_argument("--static-graph", action="store_true", help="DDP(static_graph=True)")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="per-rank per-step length: seq x lognormal(0, S)")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's MLP matmul work, x the others'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="slow rank sleeps this long before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="slow rank's batch function sleeps per batch")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (one skipped, one warmup, one recorded)")
    if args.factor < 1:
        p.error("--factor is at least 1")
    return args


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_heads, max_len):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        mask = torch.tril(torch.ones(max_len, max_len, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, max_len, max_len), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_heads, -1).transpose(1, 2)
        k = k.view(B, T, self.n_heads, -1).transpose(1, 2)
        v = v.view(B, T, self.n_heads, -1).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.out(y)


class MLP(nn.Module):
    def __init__(self, d, extra=0.0):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)
        self.extra = extra  # only > 0 on the slow rank

    def forward(self, x):
        y = self.proj(F.gelu(self.fc(x)))
        if self.extra > 0:
            # burn (extra) x this MLP's matmuls again on the same inputs, throw the result away
            with torch.no_grad():
                rows = x.reshape(-1, x.size(-1))
                whole, frac = divmod(self.extra, 1.0)
                for _ in range(int(whole)):
                    self.proj(self.fc(rows))
                n = round(frac * rows.size(0))
                if n:
                    self.proj(self.fc(rows[:n]))
        return y


class Block(nn.Module):
    def __init__(self, d, n_heads, max_len, extra):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_heads, max_len)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d, extra)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class TinyGPT(nn.Module):
    def __init__(self, vocab, d, n_layers, n_heads, max_len, extra=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, n_heads, max_len, extra) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as in GPT-2
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        T = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


PAD = -100  # targets we don't score


def make_batch(args, rank, step, slow):
    """This rank's batch for `step`: (inputs, targets), padded to this step's length."""
    g = torch.Generator().manual_seed(args.seed * 7919 + 1000 * rank + step)
    length = args.seq
    if args.seq_sigma > 0:
        draw = torch.empty(1).log_normal_(0.0, args.seq_sigma, generator=g).item()
        length = int(min(4 * args.seq, max(16, round(args.seq * draw))))
    # sequences of varying length; the longest sets the padded length
    lens = torch.randint(length // 2, length + 1, (args.batch,), generator=g)
    lens[0] = length
    tokens = torch.randint(0, args.vocab, (args.batch, length + 1), generator=g)
    x = tokens[:, :-1].clone()
    y = tokens[:, 1:].clone()
    pad = torch.arange(length).unsqueeze(0) >= lens.unsqueeze(1)
    x[pad] = 0
    y[pad] = PAD
    if slow and args.data_sleep_ms > 0:
        time.sleep(args.data_sleep_ms / 1000)
    return x, y


def main():
    args = get_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)  # same init everywhere (DDP broadcasts rank 0's anyway)
    max_len = 4 * args.seq
    extra = (args.factor - 1.0) if slow else 0.0
    model = TinyGPT(args.vocab, args.width, args.layers, args.heads, max_len, extra)

    ddp = DDP(model, bucket_cap_mb=args.bucket_mb, static_graph=args.static_graph)
    if args.hook == "fp16":
        ddp.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
    elif args.hook == "powersgd":
        psgd_state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=args.psgd_rank,
            start_powerSGD_iter=2,
        )
        # On gloo, PowerSGD all-reduces P and Q from the completion callbacks of its earlier
        # all-reduces. With more than one bucket (a small --bucket-mb) the next bucket's first
        # all-reduce races those callbacks, ranks enqueue in different orders and gloo fails
        # with a size mismatch (or hangs). So let each bucket finish before the next one starts.
        pending = []

        def powersgd_one_bucket_at_a_time(state, bucket):
            while pending:
                pending.pop().wait()
            fut = powerSGD_hook.powerSGD_hook(state, bucket)
            if not bucket.is_last():
                pending.append(fut)
            return fut

        ddp.register_comm_hook(psgd_state, powersgd_one_bucket_at_a_time)

    if args.zero:
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW,
                                      lr=args.lr, weight_decay=0.1)
    else:
        opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=0.1)

    def save_trace(prof):
        prof.export_chrome_trace(f"{args.out}/rank{rank}.pt.trace.json.gz")

    if rank == 0:
        print(f"world={world} hook={args.hook} zero={args.zero} bucket_mb={args.bucket_mb} "
              f"static_graph={args.static_graph} params={sum(p.numel() for p in model.parameters())}",
              flush=True)

    t0 = time.perf_counter()
    losses = []
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        with_stack=False,
        schedule=schedule(skip_first=1, wait=0, warmup=1, active=args.steps - 2, repeat=1),
        on_trace_ready=save_trace,
    ) as prof:
        for step in range(args.steps):
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            x, y = make_batch(args, rank, step, slow)
            with record_function("fwd"):
                logits = ddp(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), ignore_index=PAD)
            with record_function("bwd"):
                loss.backward()
            with record_function("opt"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            prof.step()
    elapsed = time.perf_counter() - t0

    if args.zero:
        opt.consolidate_state_dict(to=0)  # as one would before saving a checkpoint
    dist.barrier()
    if rank == 0:
        print(f"done: {args.steps} steps in {elapsed:.2f}s, loss {losses[0]:.3f} -> {losses[-1]:.3f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
