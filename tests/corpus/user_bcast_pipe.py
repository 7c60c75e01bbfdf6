"""A 4-stage GPipe pipeline whose stages talk by dist.broadcast in two-rank process groups.

(calibration table at the end of this docstring)

What it is
----------
A small transformer-like LM without attention (token embedding, pre-norm residual MLP blocks,
final LayerNorm, LM head) cut into 4 pipeline stages, one per CPU process (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``), written the way older research
pipeline code did it before ``isend``/``irecv`` were trusted: every pair of neighbouring
stages gets its own process group, ``dist.new_group([r, r + 1])`` for r = 0, 1, 2, and a
"send" is a ``dist.broadcast`` in that group with the sender as ``src``, the receiver passing
a pre-allocated buffer of the right shape.

Stages (``--layers`` blocks each, default 2; a block is LayerNorm -> Linear(dim, ffn) ->
GELU -> Linear(ffn, dim) -> residual, ffn = ``--ffn-mult`` x dim):

* stage 0 (rank 0): token + position embedding, its blocks;
* stages 1, 2 (ranks 1, 2): their blocks;
* stage 3 (rank 3): its blocks, final LayerNorm, LM head, next-token cross entropy.

Schedule: plain GPipe. Each step the batch is ``--microbatches`` (4) microbatches of
``--mb-size`` (4) sequences of ``--seq-len`` (64) tokens. Forward phase, microbatch 0, 1, ...:
stage r > 0 receives the microbatch's activation (broadcast from r - 1 in group {r-1, r}),
runs its blocks and, r < 3, broadcasts the output to r + 1 in group {r, r+1}; stage 3 computes
the microbatch's loss (divided by the microbatch count). ``--interleave-sync``: after every
microbatch's forward all four ranks meet in a world ``dist.barrier()`` (the author's debugging
habit that stayed in). Then every rank spills the stashed stage input of microbatch 0 to disk
(``torch.save`` into a temporary directory; "activation checkpoint spill"). Backward phase,
microbatches in reverse order: stage 3 back-propagates the loss, stage r < 3 first receives the
gradient w.r.t. its output (broadcast from r + 1 in group {r, r+1}), back-propagates it, and
r > 0 broadcasts the gradient w.r.t. its received input back to r - 1 in group {r-1, r}.

After the pipeline: every stage's squared gradient norm is summed over the world with one
1-float ``dist.all_reduce`` and the gradients are clipped to a global norm of ``--clip``
(1.0); then AdamW (or ``--optim sgd``: SGD with momentum). Every ``--log-every`` (2) steps the
last stage's step loss is ``dist.broadcast`` from rank 3 to all ranks (world group) and every
rank appends it to its own jsonl log.

Data: every rank runs the same synthetic "dataloader" (old code kept all ranks iterating the
loader in lockstep): each step a batch of token rows is drawn from a phrase table built from
the seed (repeated random phrases, so there is something to learn) with the rows chosen from
(seed, step); stage 0 uses the inputs, stage 3 the targets, the middle stages discard it.

Communication per step (defaults: 4 microbatches of 4 x 64 tokens, dim 128): per microbatch
one activation broadcast of 4 x 64 x 128 floats (128 KB) in each of the groups {0,1}, {1,2},
{2,3} (src the lower rank) in the forward phase and one gradient broadcast of the same size in
each group (src the higher rank) in the backward phase; one 1-float world all_reduce (the grad
norm); every 2nd step one 1-float world broadcast from rank 3 (the loss); with
``--interleave-sync`` one world barrier per microbatch.

User ranges per step: ``sleep`` (fault only), ``load_batch``, per microbatch ``recv_act``
(stages 1-3), ``forward`` (the loss inside on stage 3), ``send_act`` (stages 0-2),
``sync_barrier`` (``--interleave-sync``); ``spill_activations``; per microbatch (reverse)
``recv_grad`` (stages 0-2), ``backward``, ``send_grad`` (stages 1-3); ``optimizer``
[``grad_norm_allreduce``, ``clip``, ``step``]; ``log_loss`` (every ``--log-every`` steps).

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent inside the
broadcasts, barriers and the all_reduce).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (2 blocks a stage), ``--dim`` (128), ``--ffn-mult`` (4),
``--vocab`` (512), ``--seq-len`` (64), ``--mb-size`` (4), ``--microbatches`` (4), ``--lr``
(1e-3), ``--optim {adamw,sgd}``, ``--clip`` (1.0), ``--log-every`` (2), ``--interleave-sync``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every microbatch's forward through the rank's stage is run
  F times (F - 1 extra passes under ``no_grad``, discarded) and every microbatch's backward F
  times (F - 1 extra ``torch.autograd.grad`` passes through the same graph with
  ``retain_graph``, results discarded); a fractional F adds that fraction of the rows to the
  extra forward and, for a fraction of 0.5 or more, one more backward pass;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: the rank's ``load_batch`` sleeps MS each step (a slow loader);
* ``--spill-sleep-ms MS`` (family fault): a slow activation-checkpoint spill: the rank's
  ``spill_activations`` sleeps MS after writing (a slow local disk), between its forward and
  backward phases;
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B neighbouring stages, either direction;
  no ``--slow-rank``): every broadcast A sends to B in their pair group carries X times the
  bytes: for B = A + 1 the activations, for B = A - 1 the input gradients. The sender copies
  the message into the head of a zero-padded buffer of X times the size, the receiver
  broadcasts into a buffer of the same size and keeps the head.

Imbalance without a fault:

* ``--seq-sigma S``: each stage's MLP hidden width this step is ffn x lognormal(0, S), drawn
  from (seed, rank, step), rounded to a multiple of 16 and clamped to [ffn/4, 4 ffn] (the
  blocks are allocated 4 ffn wide and use the first columns, a "slimmable" width): the stages'
  work differs by rank and step;
* ``--big-rank K --big X``: stage K has round(X x layers) blocks, every step.

Calibration
-----------
2-core box shared with several other helpers' 4-process jobs and an analysis process (load
average 10-19 throughout); 4 ranks, 10 steps (8 timed), defaults unless said. The broadcasts
tie the stages, so the step medians of the ranks agree within a few %: one number. "busy" =
median time outside the broadcasts / barriers / all_reduce, slow rank vs the others. Healthy
runs of the default setting ("base") measured between the fault runs gave 291, 383, 469, 432
and 398 ms steps (the neighbours' load), busy r0 85-179, r1 67-131, r2 54-128, r3 107-246:
stage 3 (LM head + loss) and stage 0 (embedding) always carry more than the middle stages.

  setting (slow rank)                         step ms   busy slow ms / others ms
  healthy default                             291-469   r0 85-179, r1 67-131, r2 54-128, r3 107-246
  healthy --interleave-sync --shapes            574     r0 154, r1 101, r2 91, r3 219
  healthy --microbatches 8 --dim 96 --mb-size 2 511     r0 121, r1 78, r2 58, r3 168
  healthy --layers 3 --seq-len 128 --mb-size 2
          --log-every 1                         534     r0 239, r1 136, r2 78, r3 236
  healthy --microbatches 2 --ffn-mult 2
          --optim sgd --mb-size 8               266     r0 60, r1 40, r2 33, r3 99
  --factor 4 (r1)                               668     451 / 72-126
  --factor 4 (r3)                               912     739 / 47-115
  --factor 3 (r3)                               767     581 / 39-73
  --interleave-sync --factor 3 (r0)             650     430 / 38-166
  --microbatches 8 --dim 96 --mb-size 2
          --factor 3 --steps 8 (r2)             465     211 / 39-53
  --sleep-ms 150 (r2)                           531     272 / 60-198
  --data-sleep-ms 150 (r0)                      517     257 / 89-173
  --spill-sleep-ms 150 (r1)                     430     212 / 86-172
  --hog (r3)                                    636     359 / 46-100
  link 1->2 x256 (32 MB activation messages)    585     within the healthy spread (not timed apart)
  link 1->2 x512 (64 MB messages)               610-760 r1 send_act ~400 ms a step, r2 recv_act ~425
  link 1->2 x1024                               990     r1 send_act ~770 ms a step
  link 2->1 x512 (gradient messages)            620     r2 send_grad ~400 ms a step
  --seq-sigma 0.8                               700     r0 198, r1 135, r2 88, r3 174 (widths by step)
  --big-rank 3 --big 3 (6 blocks on stage 3)    840     622 / 41-105

Reading: a pipeline stage that is slower holds up everyone: the others wait in ``recv_act``
/ ``recv_grad`` (and the upstream stage in ``send_act``, gloo's broadcast of a 128 KB message
completing only when the receiver takes it), so all step times rise and only the slowed
rank's busy time tells which one. ``--factor 3`` already triples the stage's forward and
backward and costs it 40-75% of its step; the 150 ms sleeps are 30-50% of a step depending on
the load. A padded link costs little at 32 MB a message; at 64 MB the transfer is ~100 ms a
microbatch and the broadcast on the link (the sender's ``send_act`` and the receiver's
``recv_act``) dominates the step, upstream stages back up behind it. Wall per run 29-39 s;
traces 2-9 MB a rank, 9-12 MB on a rank with ``--factor`` or ``--big`` (the run with
``--factor 3`` and 8 microbatches traces 8 steps to stay there).
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

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=2, help="blocks per stage")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--ffn-mult", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--mb-size", type=int, default=4)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optim", choices=["adamw", "sgd"], default="adamw")
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=2)
    p.add_argument("--interleave-sync", action="store_true",
                   help="world barrier after every microbatch's forward")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--spill-sleep-ms", type=float, default=0.0)
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
        p.error("stages only talk to their neighbours (|src - dst| == 1)")
    return a


# --------------------------------------------------------------------------
# pair-group "p2p" by broadcast
# --------------------------------------------------------------------------

class PairLink:
    """Neighbour messages as broadcasts in the two-rank groups {r, r+1}."""

    def __init__(self, rank, world, link=None, link_factor=1.0):
        self.rank, self.world = rank, world
        self.link, self.link_factor = link, link_factor
        # every rank must create every group, in the same order
        self.groups = [dist.new_group([r, r + 1]) for r in range(world - 1)]
        self.bufs = {}
        self.secs = 0.0

    def _group(self, a, b):
        return self.groups[min(a, b)]

    def _numel(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def send(self, t, dst):
        flat = t.detach().reshape(-1).contiguous()
        n = self._numel(flat.numel(), self.rank, dst)
        if n != flat.numel():
            buf = self._buffer(("send", dst), n)     # zero past the head, reused
            buf[: flat.numel()].copy_(flat)
            flat = buf
        t0 = time.perf_counter()
        dist.broadcast(flat, src=self.rank, group=self._group(self.rank, dst))
        self.secs += time.perf_counter() - t0

    def recv(self, shape, src):
        numel = math.prod(shape)
        buf = self._buffer(("recv", src, tuple(shape)), self._numel(numel, src, self.rank))
        t0 = time.perf_counter()
        dist.broadcast(buf, src=src, group=self._group(src, self.rank))
        self.secs += time.perf_counter() - t0
        return buf[:numel].view(shape).clone()

    def timed(self, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.secs += time.perf_counter() - t0
        return out


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class MLPBlock(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        nn.init.normal_(self.fc2.weight, std=0.02)

    def forward(self, x, width=None):
        h = self.norm(x)
        if width is None or width >= self.fc1.out_features:
            h = self.fc2(F.gelu(self.fc1(h)))
        else:                                   # slimmable: the first `width` hidden units
            h = F.linear(h, self.fc1.weight[:width], self.fc1.bias[:width])
            h = F.linear(F.gelu(h), self.fc2.weight[:, :width], self.fc2.bias)
        return x + h


class Stage(nn.Module):
    def __init__(self, idx, nstages, n_blocks, dim, hidden, vocab, seq_len):
        super().__init__()
        self.first, self.last = idx == 0, idx == nstages - 1
        if self.first:
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Parameter(torch.randn(seq_len, dim) * 0.02)
        self.blocks = nn.ModuleList(MLPBlock(dim, hidden) for _ in range(n_blocks))
        if self.last:
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, x, width=None):
        if self.first:
            x = self.tok(x) + self.pos[: x.shape[1]]
        for blk in self.blocks:
            x = blk(x, width)
        return x

    def loss(self, y, targets):
        logits = self.head(self.norm(y))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# --------------------------------------------------------------------------
# data, imbalance, neighbour
# --------------------------------------------------------------------------

class SyntheticLoader:
    """Rows of repeated random phrases; every rank builds the same batch for a step."""

    def __init__(self, vocab, seq_len, seed, n_phrases=2000, phrase_len=8):
        g = torch.Generator().manual_seed(seed)
        self.phrases = torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)
        self.seq_len, self.seed = seq_len, seed
        self.per_row = (seq_len + 1 + phrase_len - 1) // phrase_len

    def batch(self, step, rows):
        g = torch.Generator().manual_seed(self.seed * 7919 + step)
        idx = torch.randint(0, self.phrases.shape[0], (rows, self.per_row), generator=g)
        toks = self.phrases[idx].reshape(rows, -1)[:, : self.seq_len + 1]
        return toks[:, :-1].contiguous(), toks[:, 1:].contiguous()


def step_width(args, hidden, rank, step):
    if args.seq_sigma <= 0:
        return None
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
    m = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
    m = min(4.0, max(0.25, m))
    return max(16, int(round(hidden * m / 16)) * 16)


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
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world - 1
    slow = rank == args.slow_rank

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    pl = PairLink(rank, world, link, args.link_factor)

    hidden = args.ffn_mult * args.dim
    alloc_hidden = 4 * hidden if args.seq_sigma > 0 else hidden
    n_blocks = max(1, int(round(args.layers * args.big))) if rank == args.big_rank else args.layers

    torch.manual_seed(args.seed * 100 + rank)
    stage = Stage(rank, world, n_blocks, args.dim, alloc_hidden, args.vocab, args.seq_len)
    params = [q for q in stage.parameters()]
    if args.optim == "adamw":
        opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(params, lr=10 * args.lr, momentum=0.9)
    loader = SyntheticLoader(args.vocab, args.seq_len, args.seed)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="bcast_pipe_")
    dist.broadcast_object_list(tmp, src=0)
    spill_dir = tmp[0]
    log_path = os.path.join(spill_dir, f"loss_rank{rank}.jsonl")

    M, B, T, D = args.microbatches, args.mb_size, args.seq_len, args.dim
    act_shape = (B, T, D)
    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    extra_full, extra_frac = int(extra), extra - int(extra)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    info = torch.tensor([float(sum(q.numel() for q in params)), float(n_blocks)])
    allinfo = [torch.zeros(2) for _ in range(world)]
    dist.all_gather(allinfo, info)
    if rank == 0:
        print(f"[bcast-pipe] stages={world} blocks={[int(t[1]) for t in allinfo]} "
              f"params={[int(t[0]) for t in allinfo]} dim={D} ffn={hidden} M={M} mb={B}x{T} "
              f"interleave_sync={args.interleave_sync} optim={args.optim}", flush=True)

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
                pl.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    tokens, targets = loader.batch(step, M * B)
                    tok_mbs, tgt_mbs = tokens.chunk(M), targets.chunk(M)
                width = step_width(args, hidden, rank, step) if args.seq_sigma > 0 else None

                opt.zero_grad(set_to_none=False)
                inputs, outputs, losses = [], [], []
                # ---------------- forward phase ----------------
                for i in range(M):
                    if first:
                        x = tok_mbs[i]
                    else:
                        with record_function("recv_act"):
                            x = pl.recv(act_shape, rank - 1).requires_grad_()
                    with record_function("forward"):
                        y = stage(x, width)
                        if extra_full or extra_frac:       # --factor: the same work again
                            with torch.no_grad():
                                for _ in range(extra_full):
                                    stage(x, width)
                                rows = int(round(B * extra_frac))
                                if rows > 0:
                                    stage(x[:rows], width)
                        if last:
                            loss = stage.loss(y, tgt_mbs[i]) / M
                            losses.append(loss)
                    inputs.append(x)
                    outputs.append(y)
                    if not last:
                        with record_function("send_act"):
                            pl.send(y, rank + 1)
                    if args.interleave_sync:
                        with record_function("sync_barrier"):
                            pl.timed(dist.barrier)

                with record_function("spill_activations"):
                    path = os.path.join(spill_dir, f"act_stash_rank{rank}.pt")
                    x0 = inputs[0]
                    torch.save({"step": step, "mb": 0,
                                "input": x0.detach() if x0.is_floating_point() else x0}, path)
                    if slow and args.spill_sleep_ms > 0:
                        time.sleep(args.spill_sleep_ms / 1000.0)

                # ---------------- backward phase (reverse microbatches) ----------------
                n_extra_bwd = extra_full + (1 if extra_frac >= 0.5 else 0)
                for i in reversed(range(M)):
                    if last:
                        root, grad = losses[i], None
                    else:
                        with record_function("recv_grad"):
                            grad = pl.recv(act_shape, rank + 1)
                        root = outputs[i]
                    with record_function("backward"):
                        for _ in range(n_extra_bwd):        # --factor: discarded passes
                            torch.autograd.grad(root, params, grad_outputs=grad,
                                                retain_graph=True, allow_unused=True)
                        root.backward(grad)
                    if not first:
                        with record_function("send_grad"):
                            pl.send(inputs[i].grad, rank - 1)
                    inputs[i] = outputs[i] = None

                # ---------------- clip by the global norm, step ----------------
                with record_function("optimizer"):
                    with record_function("grad_norm_allreduce"):
                        sq = torch.zeros(1)
                        for q in params:
                            if q.grad is not None:
                                sq += q.grad.pow(2).sum()
                        pl.timed(dist.all_reduce, sq)
                        gnorm = sq.sqrt().item()
                    with record_function("clip"):
                        coef = args.clip / (gnorm + 1e-6)
                        if coef < 1.0:
                            for q in params:
                                if q.grad is not None:
                                    q.grad.mul_(coef)
                    with record_function("step"):
                        opt.step()

                step_loss = None
                if step % args.log_every == 0:
                    with record_function("log_loss"):
                        lt = torch.tensor([sum(l.item() for l in losses) if last else 0.0])
                        pl.timed(dist.broadcast, lt, src=world - 1)
                        step_loss = lt.item()
                        with open(log_path, "a") as fh:
                            fh.write(json.dumps({"step": step, "rank": rank, "loss": step_loss,
                                                 "grad_norm": gnorm, "width": width}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - pl.secs)
                if rank == 0:
                    ls = f"loss {step_loss:.4f} " if step_loss is not None else ""
                    print(f"step {step:3d} {ls}|g| {gnorm:.3f} t {1000 * step_times[-1]:.1f} ms",
                          flush=True)
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
        print("median busy ms (outside broadcasts, barriers, all_reduce) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(spill_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
