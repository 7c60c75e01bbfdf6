"""Local SGD in the DiLoCo style: a small decoder-only transformer language model trained on every
rank with its own AdamW for ``--inner-steps H`` steps without any communication, after which the
ranks average their pseudo-gradients with ``torch.distributed.all_reduce`` and an outer SGD with
Nesterov momentum moves the shared weights, as one writes it after reading the DiLoCo paper
(Douillard et al., 2023) rather than using a library. CPUs, gloo, no DDP.

The model, at ``--width D`` (128), ``--layers L`` (2), ``--vocab V`` (2048), context up to
``4 x --seq``:

- token embedding ``V x D`` plus a learned position embedding ``4 seq x D``;
- ``L`` pre-LN blocks: ``x + proj(attn(LN(x)))`` with one ``qkv`` linear, ``D / 32`` heads and
  ``F.scaled_dot_product_attention(is_causal=True)``, then ``x + fc2(gelu(fc1(LN(x))))`` with a
  ``4 D`` hidden layer;
- a final LayerNorm and an LM head tied to the token embedding (``F.linear(x, wte.weight)``);
  0.71M parameters at the defaults. Loss: next-token cross-entropy.

The tokens come from a random sparse Markov chain over the vocabulary (each token has 4 possible
successors with probabilities 0.55, 0.25, 0.12, 0.08, drawn once from ``--seed``, the same chain on
every rank); each rank samples its own ``--batch`` (16) sequences of ``--seq`` (96) tokens per
step from a generator seeded with (``--seed``, rank, step): no files, no loader. The best possible
loss is the chain's entropy, about 1.1 nats.

Every rank builds the same initial weights (``--seed``; rank 0's are broadcast anyway, before
profiling) and keeps two copies: the local model, trained by AdamW (lr 1e-3, weight decay 0.1,
state never shared), and the "global" weights of the last synchronisation, which an outer
``torch.optim.SGD`` (lr ``--outer-lr`` 0.7, momentum 0.9, Nesterov) owns.

An inner step (one ``ProfilerStep#N``): ``data`` (the batch, walked along the chain in numpy, one
fancy-indexing a position, then ``torch.from_numpy``: a millisecond or two and almost no ops),
``forward`` (model and loss), ``backward``, ``optimizer`` (AdamW ``step`` and ``zero_grad``).
After every ``H``-th inner step, still inside that profiler step, ``outer_sync``: the
pseudo-gradient ``global - local`` of every parameter is summed over ranks with
``dist.all_reduce`` (``--flat``: all of them packed into one flat buffer, one all-reduce; default:
one blocking all-reduce per parameter, ``12 L + 4``: 28 at the defaults) and divided by the world
size; it is set as the global weights' ``.grad``, the outer SGD steps, and the global weights are
copied into the local model. The inner AdamW keeps its moments across the sync. So only every
``H``-th profiler step communicates, and the all-reduces there are synchronous: the main thread
waits in each ``c10d::allreduce_`` while gloo runs it as a ``gloo:all_reduce`` span on one of its
own threads. A rank that is slow makes the others wait there, once every ``H`` steps. With
``--inner-steps 1 --outer-lr 1 --no-nesterov`` (``--no-nesterov`` drops the momentum too: plain
SGD) the outer step sets the global weights to the mean of the ranks' local ones: parameter
averaging after every step.

Profiling: ``torch.profiler.profile(activities=[CPU], schedule=schedule(wait=1, warmup=1,
active=steps-2))``, ``record_shapes`` only with ``--shapes``, ``prof.step()`` after each inner
step, and at the end ``prof.export_chrome_trace`` into ``--out``/``trace-rank<R>.json``, one per
rank. ``record_function`` marks ``data``, ``forward``, ``backward``, ``optimizer`` and
``outer_sync``.

Flags:

- ``--out DIR`` (required), ``--steps N`` (10 inner steps, 8 traced, holding 4 outer syncs at
  ``H = 2``), ``--seed S`` (0), ``--shapes``.
- ``--width D`` (128, a multiple of 32), ``--layers L`` (2), ``--seq T`` (96), ``--batch B``
  (16), ``--vocab V`` (2048), ``--lr`` (inner AdamW, 1e-3).
- ``--inner-steps H`` (2), ``--outer-lr`` (0.7), ``--no-nesterov``, ``--flat``.
- ``--slow-rank R`` (-1: none), and on that rank only: ``--factor F``, each MLP's forward runs its
  up-projection ``fc1`` again under ``no_grad`` on ``(F - 1) x extra_per_unit`` times its input
  rows (whole copies, then a leading slice for the fraction; results thrown away), extra
  ``aten::linear``/``aten::addmm`` in ``forward`` as a slow kernel would show, ``extra_per_unit``
  (8 at the defaults) being sized so that the forward takes about ``F`` x as long (see
  ``FWD_OVERHEAD``): the whole inner step about ``1 + (F - 1) / 3`` x;
  ``--sleep-ms MS``, a host ``time.sleep`` at the start of each inner step; ``--data-sleep-ms MS``,
  a sleep inside ``data``; ``--hog``, a daemon thread multiplying 512x512 matrices for the whole
  run.
- Imbalance, no fault: ``--seq-sigma S``, each rank draws each step's sequence length as ``T`` x a
  lognormal of sigma S (seeded by rank and step), clipped to [16, 4T]; ``--big-rank K --big X``,
  rank K's batch is ``round(X B)`` every step. The outer average weighs the ranks equally whatever
  they trained on, as plain DiLoCo code does.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_localsgd.py --out DIR --slow-rank 2 --factor 2

Measured on this 2-core machine with other jobs beside (load average 6.6-9.3 for most runs, so a
step swings 2x from run to run): a job takes 12-41 s wall, traces 4.3 MB a rank at the defaults
(6.9 MB with ``--shapes``, 8.3 MB with ``--shapes --inner-steps 1``, 7.3 MB at width 160, 3
layers, H 4, 12 steps), all valid JSON; the synced weights identical on every rank at the end
(rank 0's last line). With ``--inner-steps 1 --outer-lr 1 --no-nesterov`` the new global weights
equal the mean of the ranks' local ones to 1.2e-7 (float rounding), with ``--flat`` or without.
Mean ``ProfilerStep`` over the 8 traced steps, healthy: 388 ms on a quiet machine (compute about
270, the rest waiting in ``outer_sync``), 462-570 ms loaded; width 192 at seq 64, H 3: 453-505;
H 1 (averaging every step): 700. Every rank's mean step is the same to 1% whenever the traced
window starts and ends at a sync (H 1 or 2 at 10 steps): the waits in ``outer_sync`` even it out.

What a fault added: the slow rank's own time (its mean step less its mean time in
``outer_sync``, nearly all of which is waiting) over its peers' mean, one number a run:

    --factor 1.6 / 2 / 2 (width 192, H 3) / 2.2 (H 1) / 2.5    +9 / +22 / +28 / +28 / +37 %
    --sleep-ms 80 / 110 / 130 (width 160)                      +11 / +13 / +24
    --sleep-ms 120, the machine nearly idle (step 279 ms)      +67
    --data-sleep-ms 80 / 100 (H 3) / 110 (H 3) / 120 (H 1)     +7 / +28 / +17 / +16
    --hog                                                      +42 +51 +53 +73
    --big-rank K --big 1.5 / 2 (H 3)          (imbalance)      +15 +29 / +63
    --seq-sigma 0.4 / 0.5 / 0.6, the largest  (imbalance)      +12 +12 / +23 / +38
    healthy: the largest rank's excess                         +8 +8

A sleep costs about half its length when the machine is busy: while the slow rank sleeps its
three peers share the two cores and go faster.
"""

from __future__ import annotations

import argparse
import math
import os
import threading
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, record_function

HEAD_DIM = 32
SUCCESSORS = 4
SUCCESSOR_P = (0.55, 0.25, 0.12, 0.08)
# --factor F on the slow rank: each MLP call redoes its up-projection on (F - 1) x extra_per_unit
# copies of its input rows, extra_per_unit = FWD_OVERHEAD x (the forward's multiply-adds per
# token) / (those of the up-projections), so that the forward takes about F x as long. The
# forward's other ops (layer norms, softmax, GELU, the cross-entropy) make it slower than its
# matmuls alone would: FWD_OVERHEAD. Measured in one process (median thread CPU time of an inner
# step, 4 rounds, on a loaded machine): width 128, 2 layers (5.4 x 1.5 = 8 extra copies per unit):
# forward 1.48-1.49x / 2.01-2.02x / 2.76x at F = 1.5 / 2 / 3, the whole inner step 1.18-1.21x /
# 1.31-1.48x / 1.52x; width 192, 3 layers (6.2): forward 1.57x / 1.87x, step 1.22x / 1.24x.
# Backward and AdamW are untouched, so the step grows by about (F - 1) / 3.
FWD_OVERHEAD = 1.5


def extra_per_unit(vocab, d, layers, seq):
    fwd = layers * (12 * d * d + 2 * seq * d) + d * vocab       # MACs per token, forward
    return FWD_OVERHEAD * fwd / (layers * 4 * d * d)


class Block(nn.Module):
    def __init__(self, d, slow_extra=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.heads = d // HEAD_DIM
        self.slow_extra = slow_extra        # > 0 on the slow rank only

    def attn(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, HEAD_DIM).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def mlp(self, x):
        h = self.fc1(x)
        if self.slow_extra > 0:
            # the slow rank's "kernel": the up-projection redone on extra rows, results unused
            with torch.no_grad():
                rows = x.reshape(-1, x.shape[-1])
                whole, frac = divmod(self.slow_extra, 1.0)
                for _ in range(int(whole)):
                    F.linear(rows, self.fc1.weight, self.fc1.bias)
                n = int(round(frac * rows.shape[0]))
                if n > 0:
                    F.linear(rows[:n], self.fc1.weight, self.fc1.bias)
        return self.fc2(F.gelu(h))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab, d, layers, max_len, slow_extra=0.0):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, slow_extra) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.apply(self._init)
        for b in self.blocks:       # GPT-2's scaled init of the residual projections
            nn.init.normal_(b.proj.weight, 0.0, 0.02 / math.sqrt(2 * layers))
            nn.init.normal_(b.fc2.weight, 0.0, 0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for blk in self.blocks:
            x = blk(x)
        return F.linear(self.ln_f(x), self.wte.weight)      # tied LM head


def markov_chain(vocab, seed):
    rng = np.random.default_rng([seed, 12345])
    succ = rng.integers(vocab, size=(vocab, SUCCESSORS))
    return succ, np.array(SUCCESSOR_P)


def sample_tokens(succ, probs, b, t, rng):
    """``b`` sequences of ``t + 1`` tokens walked along the chain, shape [b, t + 1] (numpy)."""
    choice = rng.choice(SUCCESSORS, size=(b, t), p=probs)
    tok = np.empty((b, t + 1), dtype=np.int64)
    tok[:, 0] = rng.integers(succ.shape[0], size=b)
    for i in range(t):
        tok[:, i + 1] = succ[tok[:, i], choice[:, i]]
    return tok


def start_hog(stop):
    """A noisy neighbour inside the process: matmuls on a daemon thread until ``stop``."""
    def spin():
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=spin, name="hog", daemon=True)
    t.start()
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=10, help="inner steps (profiler steps)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="profiler record_shapes")
    p.add_argument("--width", type=int, default=128, help="model width, a multiple of 32")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=96, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=16, help="sequences per rank per inner step")
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--lr", type=float, default=1e-3, help="inner AdamW learning rate")
    p.add_argument("--inner-steps", type=int, default=2, help="local steps between outer syncs")
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--no-nesterov", action="store_true",
                   help="outer optimizer: plain SGD, no momentum")
    p.add_argument("--flat", action="store_true",
                   help="all-reduce the pseudo-gradient as one flat buffer")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to")
    p.add_argument("--factor", type=float, default=1.0, help="compute on the slow rank, x")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep before each inner step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="sleep inside each data fetch")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--seq-sigma", type=float, default=0.0,
                   help="lognormal sigma of each rank's sequence length per step")
    p.add_argument("--big-rank", type=int, default=-1, help="rank with a larger batch")
    p.add_argument("--big", type=float, default=1.5, help="--big-rank's batch, x --batch")
    args = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.inner_steps < 1:
        p.error("--inner-steps must be at least 1")
    first_traced_sync = args.inner_steps * math.ceil(3 / args.inner_steps)    # steps counted from 1
    if args.steps < first_traced_sync:
        p.error(f"--steps must be at least {first_traced_sync} at --inner-steps "
                f"{args.inner_steps}, else no outer sync falls in the traced steps")
    if args.width % HEAD_DIM or args.width <= 0:
        p.error(f"--width must be a positive multiple of {HEAD_DIM}")
    if args.layers < 1 or args.batch < 1 or args.vocab < SUCCESSORS:
        p.error("--layers and --batch must be at least 1, --vocab at least 4")
    if args.seq < 16:
        p.error("--seq must be at least 16")
    if args.outer_lr <= 0 or args.lr <= 0:
        p.error("--outer-lr and --lr must be positive")
    if args.slow_rank < 0 and (args.factor != 1 or args.hog or args.sleep_ms or args.data_sleep_ms):
        p.error("--factor, --hog, --sleep-ms and --data-sleep-ms need --slow-rank")
    if args.slow_rank >= world or args.big_rank >= world:
        p.error(f"--slow-rank and --big-rank must be below the world size ({world})")
    if args.factor < 1:
        p.error("--factor must be at least 1")
    if args.sleep_ms < 0 or args.data_sleep_ms < 0:
        p.error("--sleep-ms and --data-sleep-ms must not be negative")
    if args.seq_sigma < 0:
        p.error("--seq-sigma must not be negative")
    if args.big <= 0:
        p.error("--big must be positive")

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    world = dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)            # the same initial weights everywhere
    extra = 0.0
    if slow and args.factor > 1:
        extra = (args.factor - 1) * extra_per_unit(args.vocab, args.width, args.layers, args.seq)
    model = TinyGPT(args.vocab, args.width, args.layers, 4 * args.seq, extra)
    params = list(model.parameters())       # the tied LM head is wte: counted once
    with torch.no_grad():
        for q in params:                    # belt and braces: start from rank 0's weights
            dist.broadcast(q, 0)
    inner_opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    # the weights of the last sync, owned by the outer optimizer
    global_params = [q.detach().clone() for q in params]
    if args.no_nesterov:
        outer_opt = torch.optim.SGD(global_params, lr=args.outer_lr)
    else:
        outer_opt = torch.optim.SGD(global_params, lr=args.outer_lr, momentum=0.9, nesterov=True)
    succ, probs = markov_chain(args.vocab, args.seed)
    if rank == 0:
        n = sum(q.numel() for q in params)
        print(f"TinyGPT: {n / 1e6:.2f}M params in {len(params)} tensors, width {args.width}, "
              f"layers {args.layers}, H {args.inner_steps}, outer lr {args.outer_lr}, "
              f"{'SGD' if args.no_nesterov else 'Nesterov'}, flat {args.flat}", flush=True)

    def step_shape(step):
        b, t = args.batch, args.seq
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + 7919 * rank + step)
            t = t * math.exp(args.seq_sigma * torch.randn((), generator=g).item())
            t = min(max(16, int(round(t))), 4 * args.seq)
        if rank == args.big_rank:
            b = max(1, int(round(args.big * b)))
        return b, t

    def get_batch(step, b, t):
        if slow and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000)       # a slow loader
        rng = np.random.default_rng([args.seed, rank, step])
        tok = torch.from_numpy(sample_tokens(succ, probs, b, t, rng))
        return tok[:, :-1], tok[:, 1:]

    def outer_sync():
        with torch.no_grad():
            deltas = [g - q for g, q in zip(global_params, params)]     # pseudo-gradients
            if args.flat:
                flat = torch.cat([d.reshape(-1) for d in deltas])
                dist.all_reduce(flat)
                flat.div_(world)
                off = 0
                for g, d in zip(global_params, deltas):
                    g.grad = flat[off:off + d.numel()].view_as(d)
                    off += d.numel()
            else:
                for g, d in zip(global_params, deltas):
                    dist.all_reduce(d)
                    g.grad = d.div_(world)
            outer_opt.step()
            outer_opt.zero_grad(set_to_none=True)
            for g, q in zip(global_params, params):
                q.copy_(g)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                record_shapes=args.shapes) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            b, t = step_shape(step)
            with record_function("data"):
                x, y = get_batch(step, b, t)
            with record_function("forward"):
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                inner_opt.step()
                inner_opt.zero_grad(set_to_none=True)
            synced = (step + 1) % args.inner_steps == 0
            if synced:
                with record_function("outer_sync"):
                    outer_sync()
            prof.step()
            if rank == 0:
                print(f"step {step} batch {b}x{t} loss {loss.item():.4f}"
                      f"{' sync' if synced else ''} {(time.perf_counter() - ts) * 1000:.0f} ms",
                      flush=True)

    prof.export_chrome_trace(os.path.join(args.out, f"trace-rank{rank}.json"))
    if hog is not None:
        stop.set()
        hog.join()
    # the synced weights must be equal on every rank; the local ones too if the last step synced
    with torch.no_grad():
        flat = torch.cat([g.reshape(-1) for g in global_params])
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        spread = (hi - lo).abs().max().item()
        drift = max((g - q).abs().max().item() for g, q in zip(global_params, params))
    if rank == 0:
        print(f"done in {time.perf_counter() - t0:.1f}s, max synced-parameter spread across ranks "
              f"{spread:.2e}, local drift since last sync {drift:.2e}, traces in {args.out}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
