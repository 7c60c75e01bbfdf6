"""A small GPT trained under ``torch.compile`` as users write such a job in 2025-2026: data
parallel with DDP (or, with ``--fsdp``, FSDP2 and a compiled block at a time, as torchtitan does),
on CPUs with gloo.

The model is a decoder: token and position embeddings, ``--layers`` pre-norm blocks (causal
self-attention through ``F.scaled_dot_product_attention(is_causal=True)``, then a GELU MLP
``H -> 4H -> H``, residuals around both), a final LayerNorm and an LM head; the loss, computed in
the model's forward as nanoGPT does, is the cross-entropy of the next token. AdamW. The data are
random token ids from a ``Dataset`` read through a ``DataLoader`` (``num_workers=0``, one item a
batch), each rank its own batches.

Compilation:

- default: ``DDP(model)``, then ``torch.compile(ddp_model)``, the order DDP's documentation asks
  for (Dynamo's DDPOptimizer then splits the graph at DDP's bucket boundaries so that the
  all-reduces of the buckets still overlap the backward). Default mode, inductor.
- ``--fsdp``: each block compiled on its own (``torch.compile(block)``, put back in its place),
  then ``fully_shard`` on every block and on the root, as torchtitan's ``apply_compile`` and
  ``apply_fsdp`` do; FSDP2's hooks stay outside the compiled blocks, the embeddings, final norm,
  head and loss run eagerly.
- ``--no-compile``: eager, for comparison.

Shapes: without ``--seq-sigma`` every batch has the same shape and the model is compiled once,
static. With ``--seq-sigma`` the sequence length changes at every step, so the batch's sequence
dimension is marked dynamic (``torch._dynamo.mark_dynamic(x, 1)``, bounds 8 and 4 x ``--seq``,
the ids and the targets both) before each call: one compilation with a symbolic length, no
recompiling at each step. Under ``--fsdp`` the compiled blocks take a tensor made in the eager
part, which ``mark_dynamic`` cannot reach, so there the blocks are compiled with
``dynamic=True`` instead. Everything is compiled during the first step (the backward graphs at
its backward); the profiler's schedule waits one step and warms up one, so no compilation falls
in the traced steps.

Profiling: ``torch.profiler.profile`` (CPU) with ``schedule(wait=1, warmup=1, active=steps-2,
repeat=1)``, its ``on_trace_ready`` exporting one chrome trace per process,
``gpt-compiled-rank<R>.json`` in ``--out``; ``prof.step()`` after each step. The loop is marked
with ``record_function``: "data" (the next batch from the loader), "forward", "backward",
"optimizer".

Flags:

- ``--out DIR``: where the traces go (created if missing).
- ``--steps N`` (8), ``--width H`` (128), ``--layers L`` (2), ``--seq T`` (64), ``--batch B`` (8
  sequences a rank a microbatch), ``--vocab V`` (512), ``--heads`` (4), ``--seed S`` (0).
- ``--fsdp``: FSDP2 instead of DDP, blocks compiled one by one (above).
- ``--no-compile``: no ``torch.compile`` (eager DDP or FSDP2).
- ``--lr`` (3e-4): AdamW's (weight decay 0.1); the gradients are clipped to norm 1 before each
  step, as nanoGPT does. Rank 0 prints each step's loss (``loss.item()``) and time.
- ``--ckpt``: activation checkpointing of every block
  (``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)``, called in the model's
  forward, so inside the compiled graph under DDP and around the compiled block under FSDP2).
- ``--accum K`` (1): K microbatches a step, gradients synchronised on the last only (DDP's
  ``no_sync()`` on the others; FSDP2's ``set_requires_gradient_sync(False)``).
- ``--slow-rank R``: the rank the three faults below apply to (-1: none).
- ``--factor F``: on the slow rank every block's MLP does (F - 1) x its own matmul work again, of
  the same shapes on the same rows, without gradients, in the block's forward, results
  discarded. Counted over forward and backward (an MLP's backward is two forwards' matmuls, so
  the extra is ``round(6 (F - 1))`` matmuls of ``fc1`` and ``fc2`` in turn, each a sixth of the
  MLP's work a step): that rank is slower on the same work, as a slow GPU is. The extra matmuls
  are inside the compiled region, in the same graph as the block's own (a slow device is slow on
  every kernel, compiled or not). So that inductor keeps them, each one's input is scaled by a
  constant of its own (else they are the block's own matmuls again, which CSE merges) and their
  sums, times 0, are added to the block's output (else, unused, they are dropped); the output's
  values stay as they were. Under ``--ckpt`` the backward's recomputation runs (some of) them
  again, as it does the block's own forward.
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step.
- ``--data-sleep-ms MS``: the slow rank's dataset sleeps MS in ``__getitem__`` for every batch
  (a slow input pipeline; with ``num_workers=0`` nothing hides it).
- ``--seq-sigma S``: each rank draws each batch's sequence length from ``--seq`` x a lognormal
  of sigma S, clipped to [8, 4 x ``--seq``], its own draws (every data-parallel replica's batches
  differ in length): a load imbalance, not a fault, no rank is slower on the same work.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_compiled.py --out DIR --slow-rank 2 --factor 1.5
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint


class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, d, extra_matmuls=0):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.extra_matmuls = extra_matmuls

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        out = self.fc2(h)
        if self.extra_matmuls:
            # the slow rank: the same matmuls again, same rows, no gradients, results discarded.
            # For the compiler: each input is scaled by its own constant (else they are the very
            # matmuls above and CSE merges them) and the sums, x 0, are added to the output (else
            # dead-code elimination drops them); the output's values do not change.
            with torch.no_grad():
                sink = out.new_zeros(())
                for j in range(self.extra_matmuls):
                    s = 1.0 + (j + 1) / 64
                    r = self.fc1(x.detach() * s) if j % 2 == 0 else self.fc2(h.detach() * s)
                    sink = sink + r.sum()
            out = out + 0.0 * sink
        return out


class Block(nn.Module):
    def __init__(self, d, n_head, extra_matmuls=0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_head)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d, extra_matmuls)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, max_len, d, n_layer, n_head, extra_matmuls=0, ckpt=False):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, n_head, extra_matmuls) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.ckpt = ckpt

    def forward(self, idx, targets):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            if self.ckpt:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


class RandomTokens(torch.utils.data.Dataset):
    """Batch ``i`` of one rank: random ids, the targets the ids shifted by one."""

    def __init__(self, n, batch, seq, vocab, rank, seed, sigma=0.0, sleep_ms=0.0):
        self.n, self.batch, self.seq, self.vocab = n, batch, seq, vocab
        self.rank, self.seed, self.sigma, self.sleep_ms = rank, seed, sigma, sleep_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.sleep_ms:
            time.sleep(self.sleep_ms / 1000)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + 10_007 * self.rank + i)
        T = self.seq
        if self.sigma:
            draw = math.exp(self.sigma * torch.randn((), generator=g).item())
            T = max(8, min(4 * self.seq, round(self.seq * draw)))
        data = torch.randint(0, self.vocab, (self.batch, T + 1), generator=g)
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8, help="sequences a rank a microbatch")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) with per-block compile")
    p.add_argument("--no-compile", action="store_true", help="eager, no torch.compile")
    p.add_argument("--ckpt", action="store_true", help="activation checkpointing of every block")
    p.add_argument("--accum", type=int, default=1, help="microbatches a step")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults apply to (-1: none)")
    p.add_argument("--factor", type=float, default=1.0, help="the slow rank's MLP matmul work, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="slow rank: dataset sleep a batch")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="each batch: seq x lognormal(0, S)")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.width % args.heads:
        p.error("--width must be a multiple of --heads")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)
    compile_ = not args.no_compile

    extra = max(0, round(6 * (args.factor - 1.0))) if slow and args.factor > 1 else 0
    max_len = 4 * args.seq if args.seq_sigma else args.seq
    torch.manual_seed(args.seed)        # same initial weights on every rank
    model = GPT(args.vocab, max_len, args.width, args.layers, args.heads, extra, args.ckpt)

    if args.fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for i, block in enumerate(model.blocks):
            if compile_:
                # the blocks' input is made in the eager part: mark_dynamic would not reach it
                block = torch.compile(block, dynamic=True if args.seq_sigma else None)
                model.blocks[i] = block
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        net = model
    else:
        net = DDP(model)
        if compile_:
            net = torch.compile(net)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)

    data = RandomTokens(args.steps * args.accum, args.batch, args.seq, args.vocab, rank, args.seed,
                        sigma=args.seq_sigma, sleep_ms=args.data_sleep_ms if slow else 0.0)
    loader = iter(torch.utils.data.DataLoader(data, batch_size=None, shuffle=False, num_workers=0))

    def no_sync(last):
        if args.fsdp:
            model.set_requires_gradient_sync(last)
            return contextlib.nullcontext()
        return contextlib.nullcontext() if last else net.no_sync()

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"gpt-compiled-rank{rank}.json"))

    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            ts = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            total = 0.0
            for k in range(args.accum):
                last = k == args.accum - 1
                with record_function("data"):
                    x, y = next(loader)
                if args.seq_sigma and compile_ and not args.fsdp:
                    for t in (x, y):
                        torch._dynamo.mark_dynamic(t, 1, min=8, max=4 * args.seq)
                with no_sync(last):
                    with record_function("forward"):
                        loss = net(x, y) / args.accum
                    with record_function("backward"):
                        loss.backward()
                total += loss.item()
            with record_function("optimizer"):
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            prof.step()
            if rank == 0:
                print(f"step {step} loss {total:.4f} len {x.shape[1]} "
                      f"{(time.perf_counter() - ts) * 1000:.0f} ms", flush=True)

    if rank == 0:
        print(f"done in {time.perf_counter() - t0:.1f}s, traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
