"""A small GPT trained with a hand-written Chimera bidirectional pipeline (Li & Hoefler, SC'21).

(calibration table at the end of this docstring)

What it is
----------
A decoder-only transformer LM (pre-norm blocks: LayerNorm -> causal multi-head attention ->
residual, LayerNorm -> GELU MLP (4x) -> residual) cut into 4 pipeline stages and trained on 4
CPU processes (gloo, ``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``). Stage 0 = token
+ position embedding and ``--layers`` blocks; stages 1 and 2 = ``--layers`` blocks each;
stage 3 = ``--layers`` blocks, the final LayerNorm, the LM head and the loss.

Chimera runs two pipelines at once, in opposite directions, over the same 4 ranks:

* the "down" pipeline places stage s on rank s: activations 0 -> 1 -> 2 -> 3, their
  gradients 3 -> 2 -> 1 -> 0;
* the "up" pipeline places stage s on rank 3 - s: activations 3 -> 2 -> 1 -> 0, gradients
  0 -> 1 -> 2 -> 3.

So every rank holds two model replicas' stages: stage r of "down" and stage 3 - r of "up"
(rank 0: down stage 0 + up stage 3, rank 1: down 1 + up 2, rank 2: down 2 + up 1, rank 3:
down 3 + up 0). Ranks r and 3 - r hold the same two stages (the other replica of each); the
two copies of a stage start from the same weights (seeded by the stage) and stay equal
because their gradients are averaged every step. Ranks 0 and 3 carry the embedding and the
LM head (of different replicas), ranks 1 and 2 only blocks.

Schedule. Each step ``--microbatches`` (8) microbatches of ``--mb-size`` (2) sequences of
``--seq-len`` (128) tokens: half go down, half go up. The per-rank order of the forward (F)
and backward (B) passes of its two stages is computed once, identically on every rank, by a
small list-scheduling simulation (unit costs F = 1, B = 2):

* ``--schedule chimera`` (default): 1F1B-like. Whenever a rank is free it runs a ready pass,
  backwards first, then the lower microbatch, then the direction it has forwarded less; a
  stage s of a pipeline keeps at most 4 - s forwards in flight (the 1F1B warm-up cap). With
  2 microbatches a direction this gives Chimera's basic unit (forwards of both directions
  interleaved in the middle ranks, backwards of the two directions alternating); with 4 a
  direction it is two such units overlapped;
* ``--schedule fthenb``: all forwards of both directions first (interleaved as they become
  ready), then all backwards.

Messages. ``dist.isend``/``dist.irecv`` (default): at the step's start a rank posts the
irecv of every activation and gradient it will receive this step (persistent buffers), waits
each right before the pass that needs it (``recv_act`` / ``recv_grad``), isends a pass's
output right after it (``send_act`` / ``send_grad``) and waits all its sends at the end of
the pipeline (``wait_sends``). ``--blocking``: blocking ``dist.send``/``dist.recv``. Both
directions use every link, so blocking sends could deadlock (rank 1 sending down to 2 while
2 sends up to 1); the job therefore performs its transfers in one global order taken from
the simulated timeline: before each pass a rank does every transfer of its own whose
simulated time has come, sorted by (time, src, dst, tag); every rank sees the same order.

After the pipeline (``grad_sync``) each rank averages its two stages' gradients with the
other replica's copies: one ``dist.all_reduce`` of a flat buffer (both stages, in stage
order) on the 2-rank subgroup {0, 3} or {1, 2} (``--grad-sync per-stage``: two all_reduces,
one a stage). ``--clip``: the squared gradient norm is all_reduced on the world (each stage
counted once) and the gradients clipped to 1.0 (``grad_norm``). Then AdamW (``optimizer``).
Every step a world ``all_reduce`` of (loss sum, microbatches) (``loss_allreduce``; ranks 0
and 3 hold the losses: up stage 3 and down stage 3), then each rank's activation-memory
logger (``memlog``) appends the step's peak stashed-activation bytes to its jsonl file.

Data: a pre-tokenized corpus (uint16, repeated random "phrases") written once by rank 0 to a
temporary ``.bin`` and read through ``np.memmap``. A microbatch's rows are drawn from (seed,
step, direction, microbatch); its first stage (rank 0 for down, rank 3 for up) reads the
inputs and its last stage (rank 3 / rank 0) the targets, both in ``load_batch``; ranks 1
and 2 only work out the step's block loops there.

Communication per step (defaults: dim 128, 1 block a stage, 8 microbatches of 2 x 128):
each activation / gradient message is 2 x 128 x 128 floats (128 KB). On every link r -> r+1:
4 down activations and 4 up gradients; on r+1 -> r: 4 down gradients and 4 up activations
(16 messages a link pair a step). Then one gradient all_reduce on {0, 3} (ranks 0 / 3: the
embedding, 2 blocks and the head, ~0.53 M floats) and on {1, 2} (~0.40 M floats), and one
2-float world all_reduce (plus a 1-float world all_reduce with ``--clip``).

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``pipeline`` [``forward_down``
/ ``forward_up`` (``recv_act`` inside, the loss on the last stage), ``send_act``,
``backward_down`` / ``backward_up`` (``recv_grad`` inside), ``send_grad``], ``wait_sends``,
``grad_sync``, ``grad_norm`` (``--clip``), ``optimizer``, ``loss_allreduce``, ``memlog``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in p2p
sends / receives / waits and in the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (1 block a stage), ``--loops`` (1: each stage runs its block
stack this many times, weights shared, a "looped" transformer), ``--dim`` (128), ``--heads``
(4), ``--vocab`` (512), ``--seq-len`` (128), ``--mb-size`` (2), ``--microbatches`` (8, even),
``--lr`` (1e-3), ``--schedule {chimera,fthenb}``, ``--blocking``, ``--grad-sync
{flat,per-stage}``, ``--clip``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every forward pass through either of the rank's stages is
  done F times (the F - 1 extra passes without grad, discarded, run as one pass over F - 1
  stacked copies of the microbatch, so the trace gains one forward's ops, not F - 1; a
  fractional F adds that fraction of the rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow batch read: ``load_batch`` sleeps MS each step;
* ``--memlog-sleep-ms MS`` (family fault): a slow per-step activation-memory logger: the
  rank's ``memlog`` sleeps MS before appending its line (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (|A - B| = 1): every pipeline message A
  sends to B carries X times the bytes, zero-padded in the same message (B receives all of
  it and keeps the head). Both pipelines use the link: for B = A + 1 that is the down
  pipeline's activations and the up pipeline's gradients, for B = A - 1 the up activations
  and the down gradients. No ``--slow-rank``.

Imbalance without a fault (the loops are per rank: both of a rank's stages run their block
stack that many times; parameters stay the same, so the replicas stay in sync):

* ``--seq-sigma S``: each rank's loops of the step are ``--loops`` times lognormal(0, S)
  (drawn from (seed, rank, step), rounded, clamped to [max(1, loops / 4), 4 loops]), so the
  ranks' work differs by rank and step;
* ``--big-rank K --big X``: rank K runs round(X * loops) loops every step, the others
  ``--loops``: X times the layer applications of the others.

Calibration
-----------
2-core box shared with other helpers' jobs (load average 13-16 during these runs); 4 ranks,
10 steps (8 timed). The pipelines tie the ranks, so the four step medians agree within ~2%:
one number. "busy" = median time outside the p2p and the all_reduces; a fault's slow rank is
compared with its twin (rank 3 - r, the same two stages, the other replicas) and, in
brackets, the two other ranks. "base" = the healthy default run just before (its step).
Ranks 0 and 3 are busier than 1 and 2 when healthy (the embedding and the 512-way LM head).

  setting (slow rank)                            base ms  step ms   busy slow / twin [others] ms
  healthy default (6 runs)                          -     411-784   r0 243-503, r1 172-436,
                                                                    r2 235-423, r3 270-519
  healthy --blocking --shapes (10 steps)            -       298     148 116 128 171
  healthy --blocking --shapes --steps 8             -       556     278 208 212 303
  healthy --schedule fthenb --grad-sync per-stage
          --clip                                    -     497-848   375 192 191 288
  healthy --microbatches 4 --layers 2 --dim 96      -       484     270 175 225 335
  healthy --loops 2 --microbatches 4
          --seq-len 192 --heads 8                   -       987     679 592 535 742
  --factor 5 (r1)                                  624      976     795 / 288 [277 334]
  --factor 5 (r0)                                  549      965     864 / 432 [291 216]
  --factor 4 (r1)                                   -       761     574 / 236 [346 365]
  --schedule fthenb --factor 4 (r3)                 -       981     844 / 360 [243 332]
  --blocking --factor 3 (r2)                       411      572     296 / 171 [220 231]
  --sleep-ms 150 (r1)                               -       627     425 / 284 [240 249]
  --data-sleep-ms 150 (r3)                          -       611     473 / 290 [216 267]
  --memlog-sleep-ms 150 (r2)                        -       709     448 / 293 [413 414]
  --hog (r0)                                        -       876     721 / 336 [260 230]
  link 1->2 x256 (32 MB messages, 8 a step)        411      942     r1 427, r2 470 [394 409]
  link 1->2 x512 (64 MB messages, 8 a step)        411      998     r1 339, r2 268 [259 331]
  --loops 2 --microbatches 4 --seq-sigma 0.8        -       910     201 319 277 351 (loops 1-8)
  --microbatches 4 --big-rank 3 --big 3             -       624     r3 554 / 96-136

Reading: the box's load moved a healthy step between 300 and 850 ms from one run to the
next, so one run's step median says little; the slow rank's busy time against its twin's
shows every fault. ``--factor`` repeats the forward of both of the rank's stages (the extra
passes stacked into one larger pass), so already 3 adds ~70% to the rank's busy time and 4-5
doubles or triples it (on ranks 0 / 3 the repeats include the LM head). A 150 ms sleep is
25-60% of a rank's busy time. A slowed rank stalls both pipelines (it is a stage of each),
so all four step medians grow together. A padded link costs little until the messages are
tens of MB; at x512 (64 MB a message, 4 down activations and 4 up gradients a step on
1 -> 2) it adds ~500 ms to everyone's step, the busy times staying low: the time goes to
waiting in ``recv_act`` / ``recv_grad`` and ``wait_sends``. ``--big`` (more loops on one
rank) makes the others wait for it in their receives. Wall per run: 27-39 s; traces
~10-12 MB a rank (14 MB on a --factor 5 rank 0, 13-14 with --shapes and 8 steps; 18 MB with
--loops 2 at 8 microbatches, hence 4 microbatches wherever loops grow).
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

DOWN, UP = 0, 1
DIR_NAME = ("down", "up")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=1, help="transformer blocks per stage")
    p.add_argument("--loops", type=int, default=1, help="times a stage runs its block stack (shared weights)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--mb-size", type=int, default=2, help="sequences per microbatch")
    p.add_argument("--microbatches", type=int, default=8, help="per step, half down and half up")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--schedule", choices=["chimera", "fthenb"], default="chimera")
    p.add_argument("--blocking", action="store_true", help="blocking send/recv instead of isend/irecv")
    p.add_argument("--grad-sync", choices=["flat", "per-stage"], default="flat")
    p.add_argument("--clip", action="store_true", help="clip by the global grad norm")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--memlog-sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--link-src", type=int, default=-1)
    p.add_argument("--link-dst", type=int, default=-1)
    p.add_argument("--link-factor", type=float, default=1.0)
    # imbalance
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    a = p.parse_args()
    if a.microbatches < 2 or a.microbatches % 2:
        p.error("--microbatches must be even (half go down, half up)")
    if (a.link_src >= 0) != (a.link_dst >= 0):
        p.error("--link-src and --link-dst go together")
    if a.link_src >= 0 and abs(a.link_src - a.link_dst) != 1:
        p.error("pipeline links join neighbouring ranks (|src - dst| == 1)")
    if a.dim % a.heads:
        p.error("--dim must be a multiple of --heads")
    return a


# --------------------------------------------------------------------------
# the Chimera layout and schedule
# --------------------------------------------------------------------------

def stage_of(direction, rank, world):
    return rank if direction == DOWN else world - 1 - rank


def rank_of(direction, stage, world):
    return stage if direction == DOWN else world - 1 - stage


def build_schedule(world, mh, policy, t_fwd=1, t_bwd=2):
    """Per rank: the ordered passes [(kind, direction, mb, start, end)] of a simulated step.

    kind "F" / "B"; mh microbatches a direction. Deterministic: every rank computes the same."""
    end = {}
    free = [0] * world
    order = [[] for _ in range(world)]
    todo = [{(k, d, m) for k in "FB" for d in (DOWN, UP) for m in range(mh)} for _ in range(world)]
    n_f = [[0, 0] for _ in range(world)]
    n_b = [[0, 0] for _ in range(world)]

    def dep_end(r, op):
        k, d, m = op
        s = stage_of(d, r, world)
        if k == "F":
            return 0 if s == 0 else end.get(("F", d, m, s - 1))
        fe = end.get(("F", d, m, s))
        if fe is None or s == world - 1:
            return fe
        be = end.get(("B", d, m, s + 1))
        return None if be is None else max(fe, be)

    def allowed(r, op):
        k, d, _ = op
        if policy == "fthenb":
            return k == "F" or all(n_f[r][x] == mh for x in (DOWN, UP))
        if k == "F":
            return n_f[r][d] - n_b[r][d] < world - stage_of(d, r, world)
        return True

    def priority(r, op):
        k, d, m = op
        if policy == "fthenb":
            return (0 if k == "F" else 1, m, n_f[r][d] if k == "F" else 0, d)
        return (0 if k == "B" else 1, m, n_f[r][d], d)

    while any(todo):
        best = None
        for r in range(world):
            cands = []
            for op in todo[r]:
                e = dep_end(r, op)
                if e is not None and allowed(r, op):
                    cands.append((max(free[r], e), op))
            if not cands:
                continue
            t = min(c[0] for c in cands)
            op = min((o for st, o in cands if st <= t), key=lambda o: priority(r, o))
            if best is None or (t, r) < (best[0], best[1]):
                best = (t, r, op)
        if best is None:
            raise RuntimeError("schedule simulation stuck")
        t, r, (k, d, m) = best
        dur = t_fwd if k == "F" else t_bwd
        end[(k, d, m, stage_of(d, r, world))] = t + dur
        free[r] = t + dur
        order[r].append((k, d, m, t, t + dur))
        todo[r].discard((k, d, m))
        (n_f if k == "F" else n_b)[r][d] += 1
    return order


def transfers_of(order, world):
    """Every p2p message of a step: key (time, src, dst, tag) -> (kind, direction, mb)."""
    out = {}
    for r, passes in enumerate(order):
        for k, d, m, _, e in passes:
            s = stage_of(d, r, world)
            if k == "F" and s < world - 1:
                out[(e, r, rank_of(d, s + 1, world), tag_of("act", d, m))] = ("act", d, m)
            if k == "B" and s > 0:
                out[(e, r, rank_of(d, s - 1, world), tag_of("grad", d, m))] = ("grad", d, m)
    return out


def tag_of(kind, direction, mb):
    return (0 if kind == "act" else 1000) + 100 * direction + mb


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

class P2P:
    """Pipeline messages of both directions; pads one link with --link-*; times the comm."""

    def __init__(self, rank, blocking, link=None, link_factor=1.0):
        self.rank, self.blocking = rank, blocking
        self.link, self.link_factor = link, link_factor
        self.pending = []          # isends, waited at the end of the pipeline
        self.recvs = {}            # tag -> (work, buffer, numel)
        self.secs = 0.0            # time in communication this step
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
        buf = self._buffer(("send", dst, tag), self._padded(flat.numel(), self.rank, dst))
        buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        if self.blocking:
            dist.send(buf, dst, tag=tag)
        else:
            self.pending.append(dist.isend(buf, dst, tag=tag))
        self.secs += time.perf_counter() - t0

    def post_recv(self, numel, src, tag):
        buf = self._buffer(("recv", src, tag), self._padded(numel, src, self.rank))
        t0 = time.perf_counter()
        if self.blocking:
            dist.recv(buf, src, tag=tag)
            work = None
        else:
            work = dist.irecv(buf, src, tag=tag)
        self.secs += time.perf_counter() - t0
        self.recvs[tag] = (work, buf, numel)

    def take(self, tag, shape):
        work, buf, numel = self.recvs.pop(tag)
        if work is not None:
            t0 = time.perf_counter()
            work.wait()
            self.secs += time.perf_counter() - t0
        return buf[:numel].view(shape).clone()

    def wait_sends(self):
        t0 = time.perf_counter()
        for w in self.pending:
            w.wait()
        self.pending.clear()
        self.secs += time.perf_counter() - t0

    def all_reduce(self, t, group=None):
        t0 = time.perf_counter()
        dist.all_reduce(t, group=group)
        self.secs += time.perf_counter() - t0
        return t


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Stage(nn.Module):
    """One pipeline stage: embeddings on the first, head on the last, blocks on all."""

    def __init__(self, idx, n_stages, vocab, dim, heads, layers, max_len):
        super().__init__()
        self.first, self.last = idx == 0, idx == n_stages - 1
        if self.first:
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        if self.last:
            self.ln = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, x, loops=1):
        if self.first:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for _ in range(loops):
            for b in self.blocks:
                x = b(x)
        if self.last:
            x = self.head(self.ln(x))
        return x


def run_extra(model, inp, extra, loops):
    """--factor: F - 1 more forwards of this microbatch through the stage, discarded.

    One pass over F - 1 stacked copies of the microbatch (plus the fractional part's rows):
    the same arithmetic as F - 1 passes, one set of ops in the trace."""
    rows = int(round(inp.shape[0] * extra))
    if rows <= 0:
        return
    reps = -(-rows // inp.shape[0])
    big = inp.repeat(reps, *([1] * (inp.dim() - 1)))[:rows]
    with torch.no_grad():
        model(big, loops)


# --------------------------------------------------------------------------
# data and helpers
# --------------------------------------------------------------------------

def make_corpus(path, vocab, seed, n_tokens=1 << 20, phrase_len=8, n_phrases=3000):
    g = torch.Generator().manual_seed(seed)
    phrases = torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)
    idx = torch.randint(0, n_phrases, (n_tokens // phrase_len,), generator=g)
    phrases[idx].reshape(-1).numpy().astype(np.uint16).tofile(path)


def loops_of(args, rank, step):
    """How many times this rank's stages run their blocks this step."""
    n = float(args.loops)
    if rank == args.big_rank:
        n *= args.big
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        n *= math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        n = min(max(n, args.loops / 4), 4 * args.loops)
    return max(1, int(round(n)))


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
    if world != 4:
        raise SystemExit("this job is laid out for 4 ranks (4 stages, two directions)")
    # the two replicas of stage s live on ranks s and 3 - s: sync groups {0,3} and {1,2}
    sync_groups = [dist.new_group([0, 3]), dist.new_group([1, 2])]
    sync_group = sync_groups[min(rank, world - 1 - rank)]
    slow = rank == args.slow_rank

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = P2P(rank, args.blocking, link, args.link_factor)

    # the corpus: written once by rank 0, memory-mapped by all
    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="chimera_")
        make_corpus(os.path.join(tmp[0], "train.bin"), args.vocab, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    work_dir = tmp[0]
    dist.barrier()
    corpus = np.memmap(os.path.join(work_dir, "train.bin"), dtype=np.uint16, mode="r")
    memlog_path = os.path.join(work_dir, f"memlog_rank{rank}.jsonl")

    # my two stages: down stage r and up stage 3 - r; a stage's replicas share their init seed
    my_stage = {DOWN: stage_of(DOWN, rank, world), UP: stage_of(UP, rank, world)}
    models = {}
    for d in (DOWN, UP):
        torch.manual_seed(args.seed * 31 + my_stage[d])
        models[d] = Stage(my_stage[d], world, args.vocab, args.dim, args.heads, args.layers, args.seq_len + 8)
    by_stage = sorted((my_stage[d], d) for d in (DOWN, UP))           # flat buffer in stage order
    sync_params = [[q for q in models[d].parameters()] for _, d in by_stage]
    params = [q for ps in sync_params for q in ps]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    n_params = sum(q.numel() for q in params)

    Mh = args.microbatches // 2
    order = build_schedule(world, Mh, args.schedule)
    my_passes = order[rank]
    transfers = transfers_of(order, world)
    my_transfers = sorted(k for k in transfers if rank in (k[1], k[2]))

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    counts = [None] * world
    dist.all_gather_object(counts, n_params)
    if rank == 0:
        print(f"[chimera] 4 stages, down 0->1->2->3 + up 3->2->1->0; layers/stage={args.layers} "
              f"loops={args.loops} dim={args.dim} heads={args.heads} vocab={args.vocab} seq={args.seq_len} "
              f"mb={args.mb_size}x{args.microbatches} schedule={args.schedule} "
              f"p2p={'send/recv' if args.blocking else 'isend/irecv'} sync={args.grad_sync} "
              f"params/rank={counts}", flush=True)
        for r in range(world):
            print(f"  rank {r}: " + " ".join(f"{k}{DIR_NAME[d][0]}{m}" for k, d, m, _, _ in order[r]), flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    T, mbs = args.seq_len, args.mb_size
    act_shape = (mbs, T, args.dim)
    act_numel = math.prod(act_shape)
    step_times, busy_times = [], []
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    loops = loops_of(args, rank, step)
                    inputs, targets = {}, {}
                    for d in (DOWN, UP):
                        s = my_stage[d]
                        if s not in (0, world - 1):
                            continue
                        for m in range(Mh):
                            g = torch.Generator().manual_seed(args.seed * 7919 + step * 104_729 + d * 613 + m)
                            starts = torch.randint(0, len(corpus) - T - 2, (mbs,), generator=g).tolist()
                            rows = torch.from_numpy(
                                np.stack([np.asarray(corpus[q: q + T + 1], dtype=np.int64) for q in starts]))
                            if s == 0:
                                inputs[(d, m)] = rows[:, :-1]
                            else:
                                targets[(d, m)] = rows[:, 1:]

                opt.zero_grad(set_to_none=False)
                stash_in, stash_out = {}, {}       # (d, m) -> stage input (needs grad) / output or loss
                losses = []
                peak_bytes = cur_bytes = 0
                done = set()

                def do_transfers(upto):
                    """--blocking: every transfer of mine due by simulated time `upto`, in global order."""
                    for key in my_transfers:
                        if key[0] > upto or key in done:
                            continue
                        done.add(key)
                        _, src, dst, tag = key
                        kind, d, m = transfers[key]
                        if src == rank:
                            t = stash_out[(d, m)] if kind == "act" else stash_in[(d, m)].grad
                            with record_function("send_act" if kind == "act" else "send_grad"):
                                comm.send(t, dst, tag)
                            if kind == "grad":
                                stash_in.pop((d, m))
                        else:
                            with record_function("recv_act" if kind == "act" else "recv_grad"):
                                comm.post_recv(act_numel, src, tag)

                with record_function("pipeline"):
                    if not args.blocking:
                        for key in my_transfers:           # post every receive of the step up front
                            _, src, dst, tag = key
                            if dst == rank:
                                comm.post_recv(act_numel, src, tag)
                    for k, d, m, start, _ in my_passes:
                        s = my_stage[d]
                        model = models[d]
                        if args.blocking:
                            do_transfers(start)
                        if k == "F":
                            with record_function(f"forward_{DIR_NAME[d]}"):
                                if s == 0:
                                    x = inputs[(d, m)]
                                else:
                                    with record_function("recv_act"):
                                        x = comm.take(tag_of("act", d, m), act_shape)
                                    x.requires_grad_(True)
                                    stash_in[(d, m)] = x
                                y = model(x, loops)
                                if extra > 0:
                                    run_extra(model, x.detach(), extra, loops)
                                if s == world - 1:
                                    y = F.cross_entropy(y.reshape(-1, y.shape[-1]),
                                                        targets[(d, m)].reshape(-1)) / Mh
                                    losses.append(y.detach())
                                stash_out[(d, m)] = y
                                cur_bytes += act_numel * 4 * (2 + 6 * args.layers * loops)
                                peak_bytes = max(peak_bytes, cur_bytes)
                            if s < world - 1 and not args.blocking:
                                with record_function("send_act"):
                                    comm.send(y, rank_of(d, s + 1, world), tag_of("act", d, m))
                        else:
                            with record_function(f"backward_{DIR_NAME[d]}"):
                                out = stash_out.pop((d, m))
                                if s == world - 1:
                                    out.backward()
                                else:
                                    with record_function("recv_grad"):
                                        dy = comm.take(tag_of("grad", d, m), act_shape)
                                    out.backward(dy)
                                cur_bytes -= act_numel * 4 * (2 + 6 * args.layers * loops)
                            if s > 0 and not args.blocking:
                                with record_function("send_grad"):
                                    comm.send(stash_in.pop((d, m)).grad, rank_of(d, s - 1, world),
                                              tag_of("grad", d, m))
                    if args.blocking:
                        do_transfers(float("inf"))
                with record_function("wait_sends"):
                    comm.wait_sends()

                with record_function("grad_sync"):
                    groups = sync_params if args.grad_sync == "per-stage" else [params]
                    for ps in groups:
                        flat = torch.cat([q.grad.reshape(-1) for q in ps])
                        comm.all_reduce(flat, group=sync_group)
                        flat /= 2
                        o = 0
                        for q in ps:
                            q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                            o += q.numel()
                gnorm = float("nan")
                if args.clip:
                    with record_function("grad_norm"):
                        # every stage is on two ranks: the world sum counts each twice
                        sq = torch.stack([q.grad.pow(2).sum() for q in params]).sum().reshape(1)
                        comm.all_reduce(sq)
                        gnorm = math.sqrt(sq.item() / 2)
                        if gnorm > 1.0:
                            for q in params:
                                q.grad.mul_(1.0 / (gnorm + 1e-6))
                with record_function("optimizer"):
                    opt.step()

                with record_function("loss_allreduce"):
                    m_t = torch.tensor([float(sum(l.item() for l in losses)), 1.0 if losses else 0.0])
                    comm.all_reduce(m_t)
                    step_loss = m_t[0].item() / max(1.0, m_t[1].item())

                with record_function("memlog"):
                    if slow and args.memlog_sleep_ms > 0:
                        time.sleep(args.memlog_sleep_ms / 1000.0)
                    with open(memlog_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "rank": rank, "loops": loops,
                                             "peak_act_bytes": peak_bytes,
                                             "stages": [my_stage[DOWN], my_stage[UP]]}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {step_loss:.4f} loops {loops} gnorm {gnorm:.3f} "
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
        print("median busy ms (outside p2p and all_reduces) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(work_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
