"""Pipeline-parallel (PP4) GPT training under 1F1B with Megatron-style activation recomputation.

(calibration table at the end of this docstring)

What it is
----------
A small GPT-style language model (learned positions, pre-norm blocks, causal multi-head
attention through ``F.scaled_dot_product_attention``, GELU MLP, optional dropout) trained on 4 CPU
processes (gloo, ``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``) with a hand-written
4-stage pipeline, one stage a rank: stage 0 holds the token + position embeddings and its
blocks, stages 1-2 their blocks, stage 3 its blocks, the final LayerNorm, the (untied) LM
head and the loss. ``--layers-per-stage`` blocks a stage (2, so 8 blocks in all).

Schedule: the non-interleaved 1F1B ("PipeDream-flush") schedule as Megatron's
``forward_backward_pipelining_without_interleaving`` runs it, over ``--micro-batches`` (8)
micro-batches a step: stage s first does ``min(stages - s - 1, M)`` warm-up forwards, then
the steady phase of one forward followed by one backward, then the cool-down backwards. A
forward step: ``recv_forward`` (stage > 0: ``dist.irecv`` + wait of the (mb, T, dim)
activation), the stage's blocks (``forward_step``), ``send_forward`` (``dist.isend`` of the
output to stage s+1; the sends are waited at the end of the schedule, ``wait_sends``). A
backward step: ``recv_backward`` (stage < 3: the gradient of the output from stage s+1),
``backward_step`` (``torch.autograd.backward`` of the output with that gradient, or of the
loss / micro-batches on the last stage), ``send_backward`` (the input's gradient to stage
s-1). Then every stage clips its own gradients and steps its own AdamW (no data parallelism,
``optimizer``), and a 2-float all_reduce of (loss sum, micro-batches) over the world gives
the logged loss (``log_metrics``, which also appends the rank's line to its jsonl log and
writes its checkpoint-metadata record).

Activation recomputation, the way Megatron users set it with ``--recompute-granularity full
--recompute-method {block,uniform} --recompute-num-layers N``: ``CheckpointFunction`` is a
hand-written reentrant checkpoint (as Megatron's ``tensor_parallel.random.CheckpointFunction``):
a ``torch.autograd.Function`` whose forward saves the CPU RNG state, runs the wrapped blocks
under ``torch.no_grad()`` and saves only their input; its backward restores the RNG state
(dropout masks repeat), re-runs the blocks' forward with grad enabled on a detached copy of
the input (``recompute`` range) and back-propagates the incoming gradient through them. N is
chosen per stage (``--recompute-layers``, a comma list, one number a stage, 0 = none): by
default ``2,2,1,0``, earlier stages recompute more since 1F1B keeps more micro-batches in
flight there (stage s stores up to stages - s). ``--recompute-method block`` checkpoints
each of the first N blocks of the stage on its own and runs the rest normally;
``uniform`` cuts all the stage's blocks into groups of N and checkpoints every group.

Data: a pre-tokenized corpus (uint16, repeated random "phrases") written once by rank 0 into
a temporary ``.bin`` file and memory-mapped by all (nanoGPT style); each step's sequence
starts come from (seed, step), so stage 0 reads the tokens and stage 3 the targets of the
same rows without any message; the middle stages only need the step's sequence length.

Communication per step (defaults: mb 4, seq 128, dim 128, 8 micro-batches): per micro-batch
one activation (4 x 128 x 128 floats, 256 KB) on each link s -> s+1 and one gradient of the
same size on each link s+1 -> s (isend / irecv, tags 0 forward, 1 backward), then the
2-float loss all_reduce.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``pipeline_schedule``
[``recv_forward``, ``forward_step`` (with ``loss`` on the last stage), ``send_forward``,
``recv_backward``, ``backward_step`` (with ``recompute`` inside for checkpointed blocks),
``send_backward``, ``wait_sends``], ``optimizer``, ``log_metrics``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent waiting in
receives, send waits and the all_reduce).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (8; 6 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers-per-stage`` (2), ``--dim`` (128), ``--heads`` (4), ``--ffn-mult``
(4), ``--vocab`` (1024), ``--seq-len`` (128), ``--micro-batch-size`` (4), ``--micro-batches``
(8), ``--dropout`` (0: off, which keeps the traces small; 0.1 adds it after attention and
MLP as Megatron's GPT does), ``--lr`` (1e-3), ``--recompute-layers`` ("2,2,1,0"),
``--recompute-method {block,uniform}`` (block).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: each of the stage's blocks does its forward F times
  (F - 1 extra passes without grad, discarded) and, in backward, F - 1 extra
  forward+backward passes (``autograd.grad`` of the block on its saved input, discarded) in
  the place of the block's backward; inside recomputed blocks too (their no-grad forward,
  their recompute and their backward), as a slower chip would pay everywhere;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow batch read: the rank's ``load_batch`` sleeps MS;
* ``--log-sleep-ms MS`` (family fault): a slow per-step checkpoint-metadata / logging call:
  the rank's ``log_metrics`` sleeps MS before writing its records (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (adjacent stages): every message A sends to B
  (activations for B = A + 1, gradients for B = A - 1) carries X times the bytes, zero-padded
  in the same message; B receives it all and keeps the head. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each step's sequence length is ``--seq-len`` times one lognormal(0, S)
  multiplier drawn from (seed, step), shared by all stages (rounded to 8, clamped to
  [1/4x, 4x]): the whole pipeline's work varies from step to step;
* ``--big-rank K --big X``: stage K holds round(X x layers-per-stage) blocks, the others
  layers-per-stage, every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 1 to 12 during these
runs); 4 ranks, 8 steps (6 timed) unless told; the fault runs' arguments are the battery's.
Step medians of all ranks agree within 1% (the pipeline ties them), so one number; "busy" =
median time outside p2p waits and the all_reduce, slow rank vs the mean of the others.
"base" = the healthy default run nearest in time.

  setting (slow rank)                           base ms  step ms    busy slow / others ms
  healthy default (2,2,1,0 block)                  -     654-3246   450-475 (quiet) .. 2030-2260 (load 12)
  --factor 3 (r2), 6 steps                        1840     4646      4153 / 1516
  --factor 2 (r0), 6 steps                        1840     2927      2616 / 1304
  --factor 1.5 (r1), 6 steps                       990     3152      2555 / 1412
  --factor 2 (r3) 2,0,0,0 M6, 6 steps             1840     1476      1222 /  565   (load fell)
  --sleep-ms 150 (r1)                             1840     1465      1042 /  831
  --sleep-ms 350 (r2)                             3246     2370      1541 / 1397
  --data-sleep-ms 350 (r1) 1,0,1,0                3246     1943      1128 / 1055
  --log-sleep-ms 350 (r3)                         1840     2004      1421 /  943
  --hog (r3)                                       990     3590      2712 / 1525
  --hog (r0) 2,0,0,0                               990     2233      1905 /  972
  link 1->2 x64 (16 MB messages)                   990     1428      r1 886, r2 817 / 882
  link 1->2 x256 (64 MB messages)                 3246     3410      r1 1913 / 1372
  --big-rank 3 --big 3 (6 blocks) M6, 5 steps     1840     2319      1971 /  826
  --seq-sigma 0.8                                   -      2230      1298-1589 (seq 32-512 by step)

Reading: the neighbours' load moved a healthy step between 0.65 and 3.2 s from one run to
the next, so a step-time change says little; the slowed rank's busy time shows the compute
faults clearly: ``--factor`` repeats forward and (as forward+backward) backward of every
block, recomputed ones included, so F = 1.5-3 doubles to triples the rank's busy time, and
the other stages wait in ``recv_forward`` / ``recv_backward``. The hog roughly doubles its
rank's busy time. A 350 ms sleep is 11-18% of a loaded 2-3 s step (about half of a quiet
0.65-1 s one); under load the sleeping rank gives its core share to the others, so its busy
time is only 5-50% above theirs. A padded link costs little at 16 MB messages; at 64 MB
(8 a step, 512 MB over loopback) the sender's busy time rises (gloo's send thread) and stage
2 waits in ``recv_forward``. A big stage (3x the blocks) has 2.4x the others' busy time and
sets the pipeline's pace. Wall per run: 16-42 s; traces 13-15 MB a rank at the defaults
(about 2.2 MB a traced step on stage 0), so the runs with extra work (factor, big stage)
use 5-6 steps to stay under ~15 MB; --shapes with 6 steps gives 15-17 MB.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers-per-stage", type=int, default=2)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn-mult", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--micro-batch-size", type=int, default=4)
    p.add_argument("--micro-batches", type=int, default=8)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--recompute-layers", default="2,2,1,0",
                   help="per stage: blocks to recompute (block) or the group size (uniform); 0 = none")
    p.add_argument("--recompute-method", choices=["block", "uniform"], default="block")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--log-sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--link-src", type=int, default=-1)
    p.add_argument("--link-dst", type=int, default=-1)
    p.add_argument("--link-factor", type=float, default=1.0)
    # imbalance
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    a = p.parse_args()
    if (a.link_src >= 0) != (a.link_dst >= 0):
        p.error("--link-src and --link-dst go together")
    if a.link_src >= 0 and abs(a.link_src - a.link_dst) != 1:
        p.error("pipeline stages only talk to their neighbours (|src - dst| == 1)")
    return a


# --------------------------------------------------------------------------
# point-to-point between stages
# --------------------------------------------------------------------------

class P2P:
    """isend / irecv to the neighbour stages; pads the messages of one link (--link-*)."""

    FWD, BWD = 0, 1

    def __init__(self, rank, link=None, link_factor=1.0):
        self.rank = rank
        self.link, self.link_factor = link, link_factor
        self.pending = []
        self.secs = 0.0
        self.free = {}          # reusable zero-padded buffers, by (dir, peer, numel)

    def _numel(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _take(self, key, n):
        pool = self.free.setdefault(key + (n,), [])
        return pool.pop() if pool else torch.zeros(n)

    def send(self, t, dst, tag):
        flat = t.detach().reshape(-1)
        n = self._numel(flat.numel(), self.rank, dst)
        key = ("send", dst)
        buf = self._take(key, n)
        buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        work = dist.isend(buf, dst, tag=tag)
        self.secs += time.perf_counter() - t0
        self.pending.append((work, key, buf))

    def recv(self, shape, src, tag):
        numel = math.prod(shape)
        n = self._numel(numel, src, self.rank)
        key = ("recv", src)
        buf = self._take(key, n)
        t0 = time.perf_counter()
        dist.irecv(buf, src, tag=tag).wait()
        self.secs += time.perf_counter() - t0
        out = buf[:numel].view(shape).clone()
        self.free[key + (n,)].append(buf)
        return out

    def wait_sends(self):
        t0 = time.perf_counter()
        for work, key, buf in self.pending:
            work.wait()
            self.free[key + (buf.numel(),)].append(buf)
        self.pending.clear()
        self.secs += time.perf_counter() - t0

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t


# --------------------------------------------------------------------------
# activation recomputation (Megatron's CheckpointFunction, by hand)
# --------------------------------------------------------------------------

class CheckpointFunction(torch.autograd.Function):
    """Reentrant checkpoint: forward without grad keeping only the input; backward re-runs it."""

    @staticmethod
    def forward(ctx, run_function, x):
        ctx.run_function = run_function
        ctx.rng_state = torch.get_rng_state()
        with torch.no_grad():
            out = run_function(x)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        x = x.detach().requires_grad_(True)
        here = torch.get_rng_state()
        torch.set_rng_state(ctx.rng_state)      # the same dropout masks as the first forward
        with record_function("recompute"):
            with torch.enable_grad():
                out = ctx.run_function(x)
        torch.set_rng_state(here)
        torch.autograd.backward(out, grad_out)
        return None, x.grad


def checkpoint(fn, x):
    return CheckpointFunction.apply(fn, x)


class SlowChipBackward(torch.autograd.Function):
    """Identity on a block's input; in backward the block's forward+backward F-1 more times (--factor)."""

    @staticmethod
    def forward(ctx, x, block, extra):
        ctx.block, ctx.extra = block, extra
        ctx.save_for_backward(x)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        blk = ctx.block
        params = [q for q in blk.parameters()]
        rows = int(round(x.shape[0] * (ctx.extra - int(ctx.extra))))
        passes = [x.shape[0]] * int(ctx.extra) + ([rows] if rows > 0 else [])
        for n in passes:
            with torch.enable_grad():
                xx = x[:n].detach().requires_grad_(True)
                y = blk.compute(xx)
                torch.autograd.grad(y, [xx] + params, grad[:n])   # discarded
        return grad, None, None


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, dim, heads, ffn_mult, dropout, idx):
        super().__init__()
        self.idx, self.heads, self.dropout = idx, heads, dropout
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ffn_mult * dim)
        self.fc2 = nn.Linear(ffn_mult * dim, dim)
        self.extra = 0.0             # --factor - 1 on the slowed stage

    def compute(self, x):
        B, T, C = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(B, T, C)
        a = self.proj(a)
        if self.dropout > 0 and self.training:
            a = F.dropout(a, self.dropout)
        x = x + a
        h = self.fc2(F.gelu(self.fc1(self.ln2(x))))
        if self.dropout > 0 and self.training:
            h = F.dropout(h, self.dropout)
        return x + h

    def forward(self, x):
        if self.extra > 0:
            if torch.is_grad_enabled():
                x = SlowChipBackward.apply(x, self, self.extra)
            with torch.no_grad():                 # a slower chip: the same work again, discarded
                rng = torch.get_rng_state()
                for _ in range(int(self.extra)):
                    self.compute(x)
                rows = int(round(x.shape[0] * (self.extra - int(self.extra))))
                if rows > 0:
                    self.compute(x[:rows])
                torch.set_rng_state(rng)
        return self.compute(x)


class Stage(nn.Module):
    """One pipeline stage: [embeddings] + blocks + [final norm, LM head]."""

    def __init__(self, args, stage, stages, n_blocks, first_idx, n_recompute):
        super().__init__()
        self.first, self.last = stage == 0, stage == stages - 1
        d = args.dim
        if self.first:
            self.wte = nn.Embedding(args.vocab, d)
            self.wpe = nn.Embedding(4 * args.seq_len, d)
        self.blocks = nn.ModuleList(Block(d, args.heads, args.ffn_mult, args.dropout, first_idx + i)
                                    for i in range(n_blocks))
        if self.last:
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, args.vocab, bias=False)
        self.method, self.n_recompute = args.recompute_method, n_recompute
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def run_blocks(self, x):
        n, blocks = self.n_recompute, list(self.blocks)
        if n <= 0 or not torch.is_grad_enabled():
            for b in blocks:
                x = b(x)
            return x
        if self.method == "uniform":         # every group of n blocks checkpointed
            for i in range(0, len(blocks), n):
                group = blocks[i: i + n]
                x = checkpoint(lambda z, g=group: _run(g, z), x)
            return x
        for i, b in enumerate(blocks):        # block: the first n blocks, one checkpoint each
            x = checkpoint(b, x) if i < n else b(x)
        return x

    def forward(self, x):
        if self.first:
            T = x.shape[1]
            x = self.wte(x) + self.wpe(torch.arange(T))
        return self.run_blocks(x)

    def loss(self, h, targets):
        logits = self.head(self.ln_f(h))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _run(blocks, x):
    for b in blocks:
        x = b(x)
    return x


# --------------------------------------------------------------------------
# data, helpers
# --------------------------------------------------------------------------

def make_corpus(path, vocab, seed, n_tokens=1 << 20, phrase_len=8, n_phrases=3000):
    g = torch.Generator().manual_seed(seed)
    phrases = torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)
    idx = torch.randint(0, n_phrases, (n_tokens // phrase_len,), generator=g)
    phrases[idx].reshape(-1).numpy().astype(np.uint16).tofile(path)


def step_seq_len(args, step):
    """This step's sequence length: the same on every stage (no header message)."""
    T = args.seq_len
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        m = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        m = min(4.0, max(0.25, m))
        T = max(8, int(round(args.seq_len * m / 8)) * 8)
    return T


def start_hog(stop):
    def spin():
        a = torch.randn(192, 192)
        b = torch.randn(192, 192) / 14.0
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=spin, name="busy-neighbour", daemon=True)
    th.start()
    return th


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    stage, stages = rank, world
    slow = rank == args.slow_rank
    recompute = [int(v) for v in args.recompute_layers.split(",")]
    if len(recompute) != stages:
        raise SystemExit(f"--recompute-layers needs {stages} numbers, one a stage")

    n_blocks = [args.layers_per_stage] * stages
    if 0 <= args.big_rank < stages:
        n_blocks[args.big_rank] = max(1, int(round(args.big * args.layers_per_stage)))
    first_idx = sum(n_blocks[:stage])

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    p2p = P2P(rank, link, args.link_factor)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="pp_recompute_")
        make_corpus(os.path.join(tmp[0], "train.bin"), args.vocab, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    data_dir = tmp[0]
    dist.barrier()
    corpus = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    log_path = os.path.join(data_dir, f"metrics_rank{rank}.jsonl")
    ckpt_meta = os.path.join(data_dir, f"ckpt_meta_stage{stage}.json")

    torch.manual_seed(args.seed * 100 + stage)
    model = Stage(args, stage, stages, n_blocks[stage], first_idx, recompute[stage])
    model.train()
    if slow and args.factor > 1:
        for b in model.blocks:
            b.extra = args.factor - 1.0
    params = [q for q in model.parameters()]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    n_params = sum(q.numel() for q in params)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    info = [(n_blocks[stage], recompute[stage], n_params)]
    allinfo = [None] * world
    dist.all_gather_object(allinfo, info[0])
    if rank == 0:
        print(f"[pp-recompute] stages={stages} blocks={[i[0] for i in allinfo]} "
              f"recompute={args.recompute_method}:{[i[1] for i in allinfo]} params={[i[2] for i in allinfo]} "
              f"dim={args.dim} seq={args.seq_len} mbs={args.micro_batch_size} M={args.micro_batches}", flush=True)

    M = args.micro_batches
    mbs = args.micro_batch_size
    prev, nxt = stage - 1, stage + 1

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                p2p.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    T = step_seq_len(args, step)
                    g = torch.Generator().manual_seed(args.seed * 7919 + step)
                    starts = torch.randint(0, len(corpus) - T - 2, (M * mbs,), generator=g).tolist()
                    tokens, targets = [], []
                    if model.first or model.last:
                        rows = np.stack([np.asarray(corpus[s: s + T + 1], dtype=np.int64) for s in starts])
                        batch = torch.from_numpy(rows).view(M, mbs, T + 1)
                        tokens = list(batch[:, :, :-1]) if model.first else []
                        targets = list(batch[:, :, 1:]) if model.last else []
                act_shape = (mbs, T, args.dim)

                opt.zero_grad(set_to_none=False)
                inputs, outputs, losses = [], [], []

                def forward_step(i):
                    if model.first:
                        x = tokens[i]
                    else:
                        with record_function("recv_forward"):
                            x = p2p.recv(act_shape, prev, P2P.FWD).requires_grad_(True)
                    with record_function("forward_step"):
                        h = model(x)
                        if model.last:
                            with record_function("loss"):
                                out = model.loss(h, targets[i])
                            losses.append(out.detach())
                        else:
                            out = h
                    if not model.last:
                        with record_function("send_forward"):
                            p2p.send(out, nxt, P2P.FWD)
                    inputs.append(x)
                    outputs.append(out)

                def backward_step():
                    x, out = inputs.pop(0), outputs.pop(0)
                    if model.last:
                        grad = None
                    else:
                        with record_function("recv_backward"):
                            grad = p2p.recv(act_shape, nxt, P2P.BWD)
                    with record_function("backward_step"):
                        if model.last:
                            torch.autograd.backward(out / M)
                        else:
                            torch.autograd.backward(out, grad)
                    if not model.first:
                        with record_function("send_backward"):
                            p2p.send(x.grad, prev, P2P.BWD)

                with record_function("pipeline_schedule"):
                    warmup = min(stages - stage - 1, M)
                    for i in range(warmup):
                        forward_step(i)
                    for i in range(warmup, M):          # steady 1F1B
                        forward_step(i)
                        backward_step()
                    for _ in range(warmup):             # cool-down
                        backward_step()
                    with record_function("wait_sends"):
                        p2p.wait_sends()

                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()

                with record_function("log_metrics"):
                    m = torch.tensor([float(sum(l.item() for l in losses)), float(len(losses))])
                    p2p.all_reduce(m)
                    if slow and args.log_sleep_ms > 0:
                        time.sleep(args.log_sleep_ms / 1000.0)
                    with open(log_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "stage": stage, "loss": m[0].item() / m[1].item(),
                                             "seq": T, "grad_norm": float(gnorm)}) + "\n")
                    with open(ckpt_meta, "w") as fh:
                        json.dump({"iteration": step, "stage": stage, "blocks": n_blocks[stage],
                                   "recompute": recompute[stage], "params": n_params}, fh)

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - p2p.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {m[0].item() / m[1].item():.4f} |g| {float(gnorm):.3f} "
                          f"seq {T} t {1000 * step_times[-1]:.1f} ms", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    med = (statistics.median(traced), statistics.median(busy))
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside p2p waits and the all_reduce) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(data_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
