"""A small GPT trained with 4-stage pipeline parallelism under a zero-bubble (ZB-H1) schedule.

(calibration table at the end of this docstring)

What it is
----------
A GPT-like decoder (GPT-J / PaLM style parallel blocks: one LayerNorm feeding causal
self-attention by ``scaled_dot_product_attention`` and a GELU MLP side by side) cut into 4 pipeline stages, one a rank, trained on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``). Stage 0 holds the token and position
embeddings and its ``--layers`` blocks, stages 1-2 their blocks, stage 3 its blocks, the final
LayerNorm, the LM head and the loss.

The schedule is the "ZB-H1" of Qi et al. 2023 (Zero Bubble Pipeline Parallelism), written by
hand: each stage's backward of a microbatch is split in two,

* B (``backward_input``): the gradient w.r.t. the stage's input activation only, which the
  previous stage is waiting for: ``torch.autograd.grad(out, x_in, g, retain_graph=True)``;
* W (``backward_weight``): the gradients of the stage's weights, from the graph kept by B:
  ``torch.autograd.backward(out, g, inputs=params)`` (``--split autograd``, the default, which
  walks the stage's graph a second time), or with ``--split store`` the Megatron way: the
  block's Linears are a hand-written ``autograd.Function`` whose backward returns only the
  input gradient and stashes (input, grad_output) in a weight-gradient store; W pops the
  microbatch's entries and does the weight GEMMs.

Stage i warms up with ``3 - i`` forwards (as 1F1B), then alternates F and B; the W passes are
deferred: stage i keeps up to ``3 - i`` of them pending in the steady phase (stage 0 the most,
the last stage none), in the cool-down each B is followed by one pending W (they fill the
bubbles while the stage waits for the next gradient from downstream), and the rest are done
after the last B. So every stage does ``--microbatches`` F, B and W passes a step.

Communication per step (defaults: 8 microbatches of 4 x 64 tokens, dim 128): for each
microbatch one activation message (4 x 64 x 128 floats, 128 KB) on each link i -> i+1 and one
input-gradient message (128 KB) on each link i+1 -> i. ``--p2p isend`` (default): sends by
``dist.isend`` as soon as computed, waited at the end of the step's schedule; receives by
``dist.irecv(...).wait()`` when the op needs them. ``--p2p sync``: before computing an op the
stage posts the op's receive and then waits for it together with all its own earlier sends
(no op starts before the neighbours took the previous messages). After the schedule: the sum
of the microbatch losses is broadcast from the last stage (``dist.broadcast``, 1 float), the
squared gradient norms are all_reduced (1 float) for clipping across stages, AdamW steps, each
stage writes its checkpoint shard (``torch.save`` of its state_dict, every ``--ckpt-every``
steps) and appends a line to its jsonl log.

Data: a pre-tokenized corpus (uint16, repeated random "phrases") written once by rank 0 into a
temporary ``.bin`` file and read by every rank through ``np.memmap``; each step's batch (the
sequence starts) is drawn from (seed, step), the same on every rank: stage 0 takes the tokens,
the last stage the targets, the middle stages count the tokens for the log.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``forward_mb`` (``recv_activation``,
``stage_forward``, ``send_activation``), ``backward_input`` (``recv_grad``, ``send_grad``),
``backward_weight``, ``wait_sends``, ``loss_broadcast``, ``grad_norm``, ``optimizer``,
``checkpoint_shard``, ``log_metrics``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent waiting on
receives, sends and the two collectives).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (7; 5 traced: the W passes walk the stage's
graph again, so a step is ~2,300 profiler events a block; 7 steps keep a rank's trace under
~15 MB), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (2 blocks a stage), ``--dim`` (128), ``--heads`` (4),
``--vocab`` (512), ``--seq-len`` (64), ``--mb-size`` (4 sequences a microbatch),
``--microbatches`` (8), ``--lr`` (1e-3), ``--split {autograd,store}``, ``--p2p {isend,sync}``,
``--ckpt-every`` (1).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every forward of the rank's blocks is done F times (F - 1
  extra passes without grad, discarded; the fractional part over that fraction of the
  microbatch's rows), inside ``stage_forward``;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow batch read: ``load_batch`` sleeps MS each step;
* ``--ckpt-sleep-ms MS`` (family fault): a slow checkpoint-shard write: the rank's
  ``checkpoint_shard`` sleeps MS before its ``torch.save`` (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B adjacent stages): every message A sends
  to B carries X times the bytes: for B = A + 1 the activations, for B = A - 1 the input
  gradients, zero-padded in the same message (persistent buffers, the padding stays zero); B
  receives it all and keeps the head. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each stage applies its blocks ``layers x m`` times a step (cycling through
  them: the weights are shared between the repeats, as in a depth-recurrent model), m drawn
  lognormal(0, S) from (seed, rank, step), clamped to [1/4, 4], at least one application;
* ``--big-rank K --big X``: stage K holds round(X x layers) blocks, the others ``layers``.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (its load moved a healthy default step
between 370 and 1140 ms from one run to the next); 4 ranks, default 7 steps (5 timed). The
pipeline ties the ranks: every rank's step median agrees within ~3%, so one number. "busy" =
median time outside the p2p waits and the two collectives, slow rank vs the mean of the
others; "base" = a healthy default run just before (step median).

  setting (slow rank)                                   base ms  step ms   busy slow / others ms
  healthy default (12 runs)                                -     372-1145   240-790 (by load)
  healthy --split store --shapes --microbatches 6          -       380      204-250
  healthy --p2p sync --dim 192 --heads 6 --microbatches 6  -     746-770    439-566
  healthy --layers 1 --dim 192 --heads 6
          --microbatches 12 --mb-size 2                    -     816-844    393-447
  healthy --split store --seq-len 128 --mb-size 2
          --ckpt-every 2 --vocab 1024                      -     556-585    276-392
  --factor 3 (r1)                                         890     1005      717 / 531  (+35%)
  --factor 4 (r0)                                         725      973      862 / 595  (+45%)
  --factor 4 --microbatches 6 (r0)                        975     1006      764 / 581  (+31%)
  --factor 5 --microbatches 5 (r0)                       1130      620      557 / 337  (+65%)
  --dim 192 --heads 6 --microbatches 6 --factor 3 (r1)      -     1106      867 / 699  (+24%)
  --dim 192 --heads 6 --microbatches 6 --factor 4 (r1)   1130      893      749 / 564  (+33%)
  --p2p sync --factor 3 (r2)                              725      877      590 / 462  (+28%)
  --p2p sync --microbatches 6 --factor 4 (r2)             880      848      585 / 406  (+44%)
  --split store --factor 3 (r3)                           725      968      706 / 382  (+85%)
  --sleep-ms 150 (r2)                                     725      550      431 / 278
  --sleep-ms 200 (r2)                                       -     1137      835 / 634
  --data-sleep-ms 200 (r3)                               1090     1078      785 / 526
  --ckpt-sleep-ms 200 (r0)                               1090      816      566 / 397
  --hog (r1)                                              975      668      496 / 361  (+37%)
  link 1->2 x128 (16 MB messages, 128 MB a step)          975      953      no visible cost
  link 2->1 x256 (32 MB messages)                         975      625      no visible cost
  link 1->2 x1024 (128 MB messages, 1 GB a step)          900     1284      r1 516, r2 403 / 494
  link 2->1 x1024 (input gradients)                     460/560  1370/1750  r2 509-643 / 416-491
  --seq-sigma 0.8 --microbatches 6                          -     372-394   105 (r0) .. 232 (r3)
  --big-rank 1 --big 2.5 --microbatches 4                   -       268     225 / 122
  --big-rank 2 --big 2.5 --microbatches 4 --steps 6         -       395     362 / 189

Reading: a step is ~1.6x a stage's busy time (the warm-up / cool-down bubbles the W passes do
not fill, plus the waits behind the slowest stage), and the load swings the base by 2-3x, so
one run's step change says little; the slowed rank's busy time shows every fault. ``--factor``
repeats only the forward (F is ~1/5 of a stage's work with ``--split autograd``, whose W walks
the graph again; ~1/3 with ``--split store``), so it takes 3-5 to cost the rank 20-35% of its
step. A 200 ms sleep is 18-35% of the step depending on load. A padded link costs nothing
visible until its messages are ~100 MB (the isends overlap the compute; loopback TCP moves
tens of MB quickly): at x1024 the receiver waits in ``recv_activation`` / ``recv_grad`` and
the step grows by 50-200%. The extra forwards add events: the slowed rank's trace is 13-16 MB
where the others' are 10-13 MB; a bigger stage (``--big``) is run with fewer microbatches for
the same reason. Wall per run: 9-28 s.
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
from collections import deque
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
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=2, help="blocks a stage")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--mb-size", type=int, default=4, help="sequences a microbatch")
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--split", choices=["autograd", "store"], default="autograd",
                   help="how W is separated from B")
    p.add_argument("--p2p", choices=["isend", "sync"], default="isend")
    p.add_argument("--ckpt-every", type=int, default=1)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--ckpt-sleep-ms", type=float, default=0.0)
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
        p.error("the pipeline only links adjacent stages (|src - dst| == 1)")
    if a.dim % a.heads:
        p.error("--dim must be a multiple of --heads")
    return a


# --------------------------------------------------------------------------
# point-to-point between stages
# --------------------------------------------------------------------------

class P2P:
    """Activations forward, input gradients backward; pads the messages of one link."""

    def __init__(self, rank, mode, link=None, link_factor=1.0):
        self.rank, self.mode = rank, mode
        self.link, self.link_factor = link, link_factor
        self.pending = []       # (work, buffer) of the isends not yet waited
        self.secs = 0.0         # time waiting on communication this step
        self.bufs = {}

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def send(self, t, dst, tag):
        flat = t.detach().reshape(-1)
        n = self._padded(flat.numel(), self.rank, dst)
        buf = self._buffer(("send", dst, tag), n)    # one per microbatch and direction, reused
        buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        self.pending.append((dist.isend(buf, dst, tag=tag), buf))
        self.secs += time.perf_counter() - t0

    def recv(self, shape, src, tag):
        numel = math.prod(shape)
        buf = self._buffer(("recv", src), self._padded(numel, src, self.rank))
        t0 = time.perf_counter()
        work = dist.irecv(buf, src, tag=tag)
        if self.mode == "sync":          # the op's receive is posted, then everything is waited
            for w, _ in self.pending:
                w.wait()
            self.pending.clear()
        work.wait()
        self.secs += time.perf_counter() - t0
        return buf[:numel].view(shape).clone()

    def settle(self):
        """--p2p sync: an op with nothing to receive still waits for the earlier sends."""
        if self.mode == "sync" and self.pending:
            self.wait_sends()

    def wait_sends(self):
        t0 = time.perf_counter()
        for w, _ in self.pending:
            w.wait()
        self.pending.clear()
        self.secs += time.perf_counter() - t0

    def collective(self, fn, *a, **kw):
        t0 = time.perf_counter()
        fn(*a, **kw)
        self.secs += time.perf_counter() - t0


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class WeightGradStore:
    """--split store: (input, grad_output, weight) stashed by B, turned into weight grads by W."""

    def __init__(self):
        self.cur = None
        self.queues = {}

    def put(self, item):
        self.queues.setdefault(self.cur, []).append(item)

    def flush(self, key):
        for x, g, w in self.queues.pop(key, []):
            gw = g.reshape(-1, g.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
            if w.grad is None:
                w.grad = gw
            else:
                w.grad.add_(gw)


class DeferredLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, store):
        ctx.save_for_backward(x, weight)
        ctx.store = store
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        ctx.store.put((x, g, weight))                     # the weight GEMM waits for W
        gb = None if not ctx.needs_input_grad[2] else g.reshape(-1, g.shape[-1]).sum(0)
        return g @ weight, None, gb, None


class Linear(nn.Linear):
    store = None    # set on the stage's Linears with --split store

    def forward(self, x):
        if self.store is None or not torch.is_grad_enabled():
            return super().forward(x)
        return DeferredLinearFn.apply(x, self.weight, self.bias, self.store)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(dim)
        self.qkv = Linear(dim, 3 * dim, bias=False)
        self.proj = Linear(dim, dim, bias=False)
        self.fc1 = Linear(dim, 4 * dim, bias=False)
        self.fc2 = Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        # parallel attention + MLP (GPT-J / PaLM style), one LayerNorm
        B, T, C = x.shape
        h = self.ln(x)
        qkv = self.qkv(h).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return x + self.proj(y.transpose(1, 2).reshape(B, T, C)) + self.fc2(F.gelu(self.fc1(h)))


class Stage(nn.Module):
    def __init__(self, args, stage, n_stages, n_blocks):
        super().__init__()
        self.first, self.last = stage == 0, stage == n_stages - 1
        if self.first:
            self.tok = nn.Embedding(args.vocab, args.dim)
            self.pos = nn.Embedding(args.seq_len, args.dim)
        self.blocks = nn.ModuleList(Block(args.dim, args.heads) for _ in range(n_blocks))
        if self.last:
            self.ln_f = nn.LayerNorm(args.dim)
            self.head = Linear(args.dim, args.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def embed(self, tokens):
        pos = torch.arange(tokens.shape[1])
        return self.tok(tokens) + self.pos(pos)

    def body(self, x, n_apply):
        for j in range(n_apply):
            x = self.blocks[j % len(self.blocks)](x)
        return x

    def loss(self, x, targets):
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# --------------------------------------------------------------------------
# schedule
# --------------------------------------------------------------------------

def zb_h1(stage, n_stages, m):
    """The op list ("F"|"B"|"W", microbatch) of one stage for m microbatches."""
    warm = min(n_stages - 1 - stage, m)
    delay = n_stages - 1 - stage
    ops, pending = [], deque()
    for k in range(warm):
        ops.append(("F", k))
    for j in range(m - warm):                  # steady: F B, W once enough are pending
        ops.append(("F", warm + j))
        ops.append(("B", j))
        pending.append(j)
        if len(pending) > delay:
            ops.append(("W", pending.popleft()))
    for j in range(m - warm, m):               # cool-down: each B followed by a deferred W
        ops.append(("B", j))
        pending.append(j)
        if pending:
            ops.append(("W", pending.popleft()))
    while pending:
        ops.append(("W", pending.popleft()))
    return ops


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_corpus(path, vocab, seed, n_tokens=1 << 20, phrase_len=8, n_phrases=3000):
    g = torch.Generator().manual_seed(seed)
    phrases = torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)
    idx = torch.randint(0, n_phrases, (n_tokens // phrase_len,), generator=g)
    phrases[idx].reshape(-1).numpy().astype(np.uint16).tofile(path)


def depth_multiplier(args, rank, step):
    if args.seq_sigma <= 0:
        return 1.0
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
    m = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
    return min(4.0, max(0.25, m))


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
    slow = rank == args.slow_rank
    first, last = rank == 0, rank == world - 1
    M = args.microbatches

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    p2p = P2P(rank, args.p2p, link, args.link_factor)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="zero_bubble_")
        make_corpus(os.path.join(tmp[0], "train.bin"), args.vocab, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    data_dir = tmp[0]
    dist.barrier()
    corpus = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    log_path = os.path.join(data_dir, f"metrics_stage{rank}.jsonl")
    ckpt_path = os.path.join(data_dir, f"ckpt_stage{rank}.pt")

    n_blocks = args.layers
    if rank == args.big_rank:
        n_blocks = max(1, int(round(args.layers * args.big)))
    torch.manual_seed(args.seed * 100 + rank)
    model = Stage(args, rank, world, n_blocks)
    store = WeightGradStore() if args.split == "store" else None
    if store is not None:
        for m in model.modules():
            if isinstance(m, Linear):
                m.store = store
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01, foreach=True)
    n_params = sum(q.numel() for q in params)
    ops = zb_h1(rank, world, M)
    vec_params = [q for q in params if q.dim() == 1]       # norms and biases: their grads come with B
    wparams = [q for n, q in model.named_parameters() if not n.startswith(("tok.", "pos."))]

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    act_shape = (args.mb_size, args.seq_len, args.dim)

    allp = [None] * world
    dist.all_gather_object(allp, (n_blocks, n_params))
    if rank == 0:
        print(f"[zero-bubble] stages={world} blocks={[b for b, _ in allp]} params={[q for _, q in allp]} "
              f"dim={args.dim} seq={args.seq_len} mb={args.mb_size}x{M} split={args.split} p2p={args.p2p}",
              flush=True)
        print("schedule stage 0: " + " ".join(f"{o}{k}" for o, k in zb_h1(0, world, M)), flush=True)

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
                    g = torch.Generator().manual_seed(args.seed * 7919 + step)
                    n_seq = M * args.mb_size
                    starts = torch.randint(0, len(corpus) - args.seq_len - 2, (n_seq,), generator=g).tolist()
                    rows = np.stack([np.asarray(corpus[s: s + args.seq_len + 1], dtype=np.int64) for s in starts])
                    batch = torch.from_numpy(rows).view(M, args.mb_size, args.seq_len + 1)
                    tokens, targets = batch[:, :, :-1], batch[:, :, 1:]
                    n_tokens = int(targets.numel())
                n_apply = max(1, int(round(n_blocks * depth_multiplier(args, rank, step))))

                opt.zero_grad(set_to_none=False)
                saved = {}            # microbatch -> (x_in, out, emb, grad_out)
                loss_sum = torch.zeros(1)
                for op, k in ops:
                    if op == "F":
                        with record_function("forward_mb"):
                            if first:
                                p2p.settle()
                                emb = model.embed(tokens[k])
                                x_in = emb.detach().requires_grad_()
                            else:
                                with record_function("recv_activation"):
                                    x_in = p2p.recv(act_shape, rank - 1, tag=2 * k).requires_grad_()
                                emb = None
                            with record_function("stage_forward"):
                                out = model.body(x_in, n_apply)
                                if extra > 0:          # --factor: the same blocks again, discarded
                                    with torch.no_grad():
                                        for _ in range(int(extra)):
                                            model.body(x_in, n_apply)
                                        rows_x = int(round(x_in.shape[0] * (extra - int(extra))))
                                        if rows_x > 0:
                                            model.body(x_in[:rows_x], n_apply)
                                if last:
                                    out = model.loss(out, targets[k]) / M
                                    loss_sum += out.detach()
                            if not last:
                                with record_function("send_activation"):
                                    p2p.send(out, rank + 1, tag=2 * k)
                            saved[k] = [x_in, out, emb, None]
                    elif op == "B":
                        with record_function("backward_input"):
                            x_in, out, emb, _ = saved[k]
                            if last:
                                p2p.settle()
                                g_out = None
                            else:
                                with record_function("recv_grad"):
                                    g_out = p2p.recv(act_shape, rank + 1, tag=2 * k + 1)
                            if store is not None:
                                store.cur = k
                                torch.autograd.backward(out, g_out, inputs=[x_in] + vec_params)
                                gx = x_in.grad
                            else:
                                (gx,) = torch.autograd.grad(out, x_in, g_out, retain_graph=True)
                            if not first:
                                with record_function("send_grad"):
                                    p2p.send(gx, rank - 1, tag=2 * k + 1)
                            saved[k][3] = (g_out, gx)
                    else:
                        with record_function("backward_weight"):
                            x_in, out, emb, (g_out, gx) = saved.pop(k)
                            if store is not None:
                                store.flush(k)
                            else:
                                torch.autograd.backward(out, g_out, inputs=wparams)
                            if emb is not None:
                                emb.backward(gx)
                with record_function("wait_sends"):
                    p2p.wait_sends()

                with record_function("loss_broadcast"):
                    p2p.collective(dist.broadcast, loss_sum, src=world - 1)
                with record_function("grad_norm"):
                    sq = torch.zeros(1)
                    for q in params:
                        if q.grad is not None:
                            sq += q.grad.pow(2).sum()
                    p2p.collective(dist.all_reduce, sq)
                    gnorm = float(sq.sqrt())
                    coef = min(1.0, 1.0 / (gnorm + 1e-6))
                    if coef < 1.0:
                        for q in params:
                            if q.grad is not None:
                                q.grad.mul_(coef)
                with record_function("optimizer"):
                    opt.step()
                if args.ckpt_every > 0 and (step + 1) % args.ckpt_every == 0:
                    with record_function("checkpoint_shard"):
                        if slow and args.ckpt_sleep_ms > 0:
                            time.sleep(args.ckpt_sleep_ms / 1000.0)
                        torch.save(model.state_dict(), ckpt_path + ".tmp")
                        os.replace(ckpt_path + ".tmp", ckpt_path)
                with record_function("log_metrics"):
                    with open(log_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "stage": rank, "loss": float(loss_sum),
                                             "tokens": n_tokens, "blocks_applied": n_apply,
                                             "grad_norm": gnorm}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - p2p.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {float(loss_sum):.4f} |g| {gnorm:.3f} "
                          f"t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside p2p waits and collectives) per rank: " +
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
