"""A small GPT trained with 4-way tensor + sequence parallelism and hand-written collective matmuls.

(calibration table at the end of this docstring)

What it is
----------
A decoder-only transformer LM trained on 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``), Megatron-style tensor parallel over all 4 ranks with sequence-parallel
activations between the blocks: outside the attention / MLP matmuls every rank holds one
contiguous quarter of every sequence of the batch (rank 0 the first ``seq_len / 4`` tokens,
rank 3 the last), inside them the rank holds a quarter of the heads / of the MLP width.

Instead of ``all_gather -> matmul`` and ``matmul -> reduce_scatter`` the job decomposes both
into ring steps that overlap the transfers with the dependent compute ("collective matmul",
Wang et al., ASPLOS '23; what async-TP does on GPUs). Two hand-written
``torch.autograd.Function``\\ s, each of whose backward is the other's ring:

* ``AGMatmul`` (column-parallel, Y = all_gather_seq(x) @ W_r): rank r starts with its own
  sequence chunk; at hop k = 0..3 it holds chunk (r - k) mod 4, posts ``dist.isend`` of it to
  r + 1 and ``dist.irecv`` of the next one from r - 1, multiplies the chunk it holds with its
  weight shard into the chunk's rows of Y, then waits for the transfers. Three hops; every
  chunk travels forward round the ring. The gathered input is kept for backward.
  Backward: dx = a reduce-scatter ring of dY @ W_r^T (below), the weight gradient
  dW_r = sum_c x_c^T dY_c computed chunk by chunk inside the same ring hops.
* ``MatmulRS`` (row-parallel, y_r = chunk r of sum_j Z_j @ W_j): partial output chunks are
  accumulated as they travel round the ring. With ``--rs-dir same`` (default) they go the same
  way as the gathers, r -> r + 1: at hop k rank r computes its partial of chunk
  c = (r - 1 - k) mod 4 (an ``irecv`` of the running sum for c from r - 1 posted before the
  matmul), adds the sum received, and ``isend``\\ s it on to r + 1; after 3 hops the sum of
  chunk r ends on rank r with the rank's own partial added last. With ``--rs-dir opposite``
  the sums go r -> r - 1 (chunk c = (r + 1 + k) mod 4 at hop k).
  Backward: the output gradient chunks are all-gathered round the gather ring (forward,
  r -> r + 1) while each hop computes dZ_c = dy_c @ W_r^T and adds z_c^T dy_c to dW_r.

Model: token embedding (``--vocab`` x ``--dim``, replicated, tied with the LM head),
``--layers`` pre-LN blocks, final LayerNorm. A block, on the rank's chunk x (batch, S/4, D):
LN1 (replicated) -> ``AGMatmul`` with the rank's q/k/v columns (its ``--heads / 4`` heads) ->
causal ``scaled_dot_product_attention`` over the whole sequence -> ``MatmulRS`` with the rank's
rows of the output projection -> residual; LN2 -> ``AGMatmul`` with the rank's quarter of fc1
-> GELU -> ``MatmulRS`` with its quarter of fc2 -> residual. No biases. Full weights are drawn
from ``--seed`` on every rank and sliced, so the shards are a split of one model.

Loss: next-token cross entropy on the rank's own chunk (logits = LN(x) @ E^T, local), plus a
per-rank auxiliary head: a small residual MLP block (D -> D -> D, the rank's own, never
synchronised) applied ``--aux-reps`` times to the rank's final hidden states, predicting the
token after next (weight 0.1, multi-token-prediction style). The aux head is where the
imbalance goes: TP shards must keep equal shapes, so only this local work can differ by rank.
After ``loss.backward()`` the replicated parameters' gradients (embedding, all LayerNorms) are
all-reduced (summed, as in Megatron's sequence parallelism: each rank's gradient is its
chunk's share, and the TP shards' gradients are sums over all ranks' losses too) over the world
(one flat buffer, or one all_reduce per parameter with ``--ln-sync per-param``); the TP shards
need nothing. AdamW, clip at 1.0 (the norm
is of the rank's own gradients, no extra collective). Every step a 2-float loss all_reduce
(loss sum, tokens) on the world, then each rank appends its profiler counters (step time,
exposed communication, bytes sent, messages) to its own jsonl file ("dump_counters").

Data: a pre-tokenized corpus (uint16 tokens made of repeated random "phrases") written once by
rank 0 into a temporary ``.bin`` file and memory-mapped by all (nanoGPT style); the step's
sequence starts are drawn from (seed, step), the same on every rank; each rank reads its chunk
plus two tokens (targets and aux targets are local).

Communication per step (defaults: 2 layers, batch 4, seq_len 512 -> 128 a rank, D 256):
per layer 4 rings forward (attn AG, attn RS, mlp AG, mlp RS) and 4 backward, each 3 hops, each
hop one message per rank of (batch, S/4, D) floats = 512 KB on the link r -> r + 1 (with
``--rs-dir opposite`` the RS sums and the backward of the AG rings go r -> r - 1): 24 messages
= 12 MB per link per layer per step; then one all_reduce of the replicated gradients
(~133 K floats) and one of 2 floats.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``forward`` [``embed``,
``layer_k`` (``attn_ag_matmul``, ``attention``, ``attn_matmul_rs``, ``mlp_ag_matmul``,
``mlp_matmul_rs``), ``aux_head``, ``lm_head_loss``], ``backward`` (inside it the rings'
``attn_ag_matmul_bwd`` / ``attn_matmul_rs_bwd`` / ``mlp_ag_matmul_bwd`` /
``mlp_matmul_rs_bwd``), ``grad_allreduce``, ``optimizer``, ``loss_allreduce``,
``dump_counters``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent posting and
waiting for the ring transfers and in the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (2), ``--dim`` (256), ``--heads`` (8, a multiple of 4),
``--ffn-mult`` (4), ``--vocab`` (512), ``--batch`` (4), ``--seq-len`` (512, the whole
sequence), ``--aux-reps`` (3), ``--lr`` (1e-3), ``--rs-dir {same,opposite}``,
``--ln-sync {flat,per-param}``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every matmul of the rank's ring hops (forward chunk products,
  backward input-gradient products and the per-chunk weight-gradient products) is done F times
  (F - 1 extra passes discarded; the fractional part over that fraction of the chunk's rows);
  attention, the LM head and the aux head are not repeated;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow tokenized-batch read: ``load_batch`` sleeps MS each step;
* ``--counter-sleep-ms MS`` (family fault): a slow per-step profiler-counter dump: the rank's
  ``dump_counters`` sleeps MS before appending its line (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X``: every ring message A sends to B carries X times
  the bytes (zero-padded into one persistent buffer, B receives all of it and keeps the head).
  B must be A + 1 mod 4 (the gather rings, and the RS rings with ``--rs-dir same``), or
  A - 1 mod 4 with ``--rs-dir opposite``. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's aux-head repeats this step are ``--aux-reps`` times
  lognormal(0, S) (drawn from (seed, rank, step), clamped to [1/4, 4] x, the fractional repeat
  over that fraction of the batch rows): the ranks' local work differs by rank and step;
* ``--big-rank K --big X``: rank K's aux head does X times the others' repeats, every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs and an analysis process (load average
13-17 during all of these); 4 ranks, 10 steps (8 timed), one run each. The rings tie the
ranks, so all ranks' step medians agree within 1%: one number. "busy" = median time outside
the ring transfers (posting + waiting) and the all_reduces; slow rank vs the mean of the others.
Healthy default runs gave 900-1055 ms steps (busy 260-380 ms: with 4 processes on 2 loaded
cores most of a step is waiting for the neighbours' share of the CPU).

  setting (slow rank)                              step ms   vs healthy   busy slow / others ms
  healthy default (4 runs)                         900-1055       -        255-375
  healthy --rs-dir opposite --shapes                 840          -        275-330
  healthy --layers 3 --dim 192                       894          -        226-241
  healthy --seq-len 768 --heads 4 --ffn-mult 2
          --ln-sync per-param                       1008          -        371-416
  healthy --batch 4 --seq-len 256 --aux-reps 1       702          -        163-191
  --factor 3 (r2)                                   1280        +30%       618 / 308
  --factor 4 (r0)                                   1683        +70%       920 / 332
  --rs-dir opposite --factor 2.5 (r3)               1435        +50%       714 / 367
  --layers 3 --dim 192 --factor 3.5 (r1)            2070       +130%       989 / 497 (load 17)
  --sleep-ms 150 (r1)                               1058         +5%       433 / 265
  --sleep-ms 250 (r2)                               1297        +30%       611 / 322
  --data-sleep-ms 150 (r3)                          1398        (load)     543 / 404
  --data-sleep-ms 250 (r3)                          1176        +20%       596 / 358
  --counter-sleep-ms 150 (r0)                       1141        +15%       517 / 352
  --counter-sleep-ms 250 (r0)                       1396        +40%       653 / 382
  --hog (r1)                                        1816        +80%       660 / 348
  link 1->2 x8 (2 MB messages)                      1041         ~0%       r1 360, r2 324 / 269
  link 1->2 x32 (8 MB messages)                     1828        +75%       r1 552, r2 466 / 371
  link 3->0 x64 (16 MB messages)                    2489       +140%       r3 549, r0 485 / 341
  --seq-sigma 0.8                                   1134          -        393 max / 339 min
  --big-rank 3 --big 3                              1118          -        505 / 314

Reading: the box's load moved a healthy step between 0.9 and 1.05 s from one run to the
next; the slowed rank's busy time shows every fault. ``--factor`` repeats the ring matmuls
only (not attention, the heads or the optimizer), so F = 2.5-4 adds 300-600 ms to the rank's
busy time, 25-50% of a step; the ring makes everybody wait for it (its late sends hold up the
next hop). A sleep of 150 ms is only ~15% of a step, 250 ms 20-40%. A padded link costs
little at 2 MB messages (loopback TCP is fast); from 8 MB (48 of them a step on the link) the
transfer dominates and every rank waits in the ring hops downstream of it. The aux head is
~10-20% of a healthy rank's work, so ``--big 3`` adds ~200 ms to rank 3 and the ranks wait for
it at the next step's first ring. Wall per run: 12-55 s (importing torch alone takes ~10 s
under this load). Traces ~8.3 MB a rank (2 layers), 11.4 MB with 3 layers, 13.3 MB with
--shapes; a --factor rank's trace grows with its extra matmuls (11-13 MB at F = 2.5-4 with 2
layers; 19 MB with 3 layers at F = 3.5, so run that one with --steps 8: 14.2 MB).
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
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn-mult", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=512, help="whole sequence, split over the ranks")
    p.add_argument("--aux-reps", type=float, default=3.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--rs-dir", choices=["same", "opposite"], default="same",
                   help="which way the reduce-scatter partial sums travel, relative to the gathers (r -> r+1)")
    p.add_argument("--ln-sync", choices=["flat", "per-param"], default="flat")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--counter-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0:
        fwd = (a.link_dst - a.link_src) % 4 == 1
        bwd = (a.link_src - a.link_dst) % 4 == 1
        if not (fwd or (bwd and a.rs_dir == "opposite")):
            p.error("no ring message goes from --link-src to --link-dst (B = A+1 mod 4, or A-1 with --rs-dir opposite)")
    if a.heads % 4 or a.dim % a.heads:
        p.error("--heads must be a multiple of 4 and divide --dim")
    return a


# --------------------------------------------------------------------------
# ring communication
# --------------------------------------------------------------------------

class Ring:
    """isend/irecv between ring neighbours; pads one link's messages with --link-*; times the waits."""

    def __init__(self, rank, world, rs_step, link=None, link_factor=1.0):
        self.rank, self.world = rank, world
        self.ag_step = 1              # gathers always travel r -> r + 1
        self.rs_step = rs_step        # partial sums: +1 (same) or -1 (opposite)
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0               # communication time this step (posting + waiting)
        self.bytes_sent = 0
        self.messages = 0
        self.calls = 0                # ring calls this step: the tag of the next one
        self.pad_bufs = {}            # persistent padded buffers of the slow link

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _pad_buf(self, key, n):
        buf = self.pad_bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.pad_bufs[key] = torch.zeros(n)
        return buf

    def isend(self, t, dst, tag, slot):
        flat = t.reshape(-1)
        n = self._padded(flat.numel(), self.rank, dst)
        t0 = time.perf_counter()
        if n != flat.numel():
            buf = self._pad_buf(("send", slot), n)
            buf[: flat.numel()].copy_(flat)
        else:
            buf = flat.contiguous()
        work = dist.isend(buf, dst, tag=tag)
        self.secs += time.perf_counter() - t0
        self.bytes_sent += 4 * n
        self.messages += 1
        return work, buf

    def irecv(self, shape, src, tag, slot):
        numel = math.prod(shape)
        n = self._padded(numel, src, self.rank)
        t0 = time.perf_counter()
        buf = self._pad_buf(("recv", slot), n) if n != numel else torch.empty(n)
        work = dist.irecv(buf, src, tag=tag)
        self.secs += time.perf_counter() - t0
        return work, buf, numel, shape

    def wait_recv(self, pending):
        work, buf, numel, shape = pending
        t0 = time.perf_counter()
        work.wait()
        self.secs += time.perf_counter() - t0
        out = buf[:numel].view(shape)
        return out.clone() if buf.numel() != numel else out

    def wait_send(self, pending):
        if pending is None:
            return
        t0 = time.perf_counter()
        pending[0].wait()
        self.secs += time.perf_counter() - t0

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t

    def next_tag(self):
        self.calls += 1
        return self.calls


class Slowdown:
    """--factor: a slower chip; the rank's ring matmuls repeated (extra passes discarded)."""

    def __init__(self, extra):
        self.extra = extra

    def mm(self, a, b):
        out = torch.matmul(a, b)
        if self.extra > 0:
            for _ in range(int(self.extra)):
                torch.matmul(a, b)
            frac = self.extra - int(self.extra)
            rows = int(round(a.shape[-2] * frac))
            if rows > 0:
                torch.matmul(a[..., :rows, :], b)
        return out


def ring_ag_matmul(x, W, ring, slow, side=None):
    """Y = all_gather_seq(x) @ W, the gather decomposed into 3 hops r -> r + 1 overlapped with the
    chunk products. x: (B, s, K) the rank's chunk; returns Y (B, P*s, N) and the gathered chunks.
    side(c, chunk) runs in hop order on every chunk (backward: the weight-gradient products)."""
    r, P, d = ring.rank, ring.world, ring.ag_step
    B, s, _ = x.shape
    out = x.new_empty(B, P * s, W.shape[1])
    chunks = [None] * P
    cur = x.contiguous()
    tag = ring.next_tag()
    for k in range(P):
        c = (r - d * k) % P
        chunks[c] = cur
        if k < P - 1:
            rreq = ring.irecv(cur.shape, (r - d) % P, tag, slot=k % 2)
            sreq = ring.isend(cur, (r + d) % P, tag, slot=k % 2)
        out[:, c * s:(c + 1) * s] = slow.mm(cur, W)
        if side is not None:
            side(c, cur)
        if k < P - 1:
            nxt = ring.wait_recv(rreq)
            ring.wait_send(sreq)
            cur = nxt
    return out, chunks


def ring_matmul_rs(Z, W, ring, slow, side=None):
    """chunk r of sum_over_ranks(Z @ W): partial sums travel 3 hops round the ring (direction
    ring.rs_step), each hop's local product computed while the running sum is in flight.
    Z: (B, P*s, K); returns (B, s, N). side(c) runs on every chunk in hop order."""
    r, P, d = ring.rank, ring.world, ring.rs_step
    B, S, _ = Z.shape
    s = S // P
    tag = ring.next_tag()
    sreq = None
    result = None
    for k in range(P):
        c = (r - d * (1 + k)) % P
        rreq = ring.irecv((B, s, W.shape[1]), (r - d) % P, tag, slot=k % 2) if k > 0 else None
        part = slow.mm(Z[:, c * s:(c + 1) * s], W)
        if side is not None:
            side(c)
        if rreq is not None:
            part = part + ring.wait_recv(rreq)
        ring.wait_send(sreq)
        if k < P - 1:
            sreq = ring.isend(part, (r + d) % P, tag, slot=k % 2)
        else:
            sreq = None
            result = part
    return result


class AGMatmul(torch.autograd.Function):
    """Column-parallel linear on sequence-parallel input: all_gather(x) @ W_r as a collective matmul."""

    @staticmethod
    def forward(ctx, x, W, ring, slow, name):
        with record_function(name):
            y, chunks = ring_ag_matmul(x, W, ring, slow)
        ctx.save_for_backward(torch.cat(chunks, 1), W)
        ctx.ring, ctx.slow, ctx.name = ring, slow, name
        return y

    @staticmethod
    def backward(ctx, gy):
        xg, W = ctx.saved_tensors
        ring, slow = ctx.ring, ctx.slow
        K = xg.shape[-1]
        s = xg.shape[1] // ring.world
        gW = torch.zeros_like(W)

        def wgrad(c):
            gW.add_(slow.mm(xg[:, c * s:(c + 1) * s].reshape(-1, K).t(),
                            gy[:, c * s:(c + 1) * s].reshape(-1, gy.shape[-1])))

        with record_function(ctx.name + "_bwd"):
            gx = ring_matmul_rs(gy, W.t(), ring, slow, side=wgrad)
        return gx, gW, None, None, None


class MatmulRS(torch.autograd.Function):
    """Row-parallel linear back to sequence-parallel output: reduce_scatter(Z_r @ W_r) as a collective matmul."""

    @staticmethod
    def forward(ctx, z, W, ring, slow, name):
        with record_function(name):
            y = ring_matmul_rs(z, W, ring, slow)
        ctx.save_for_backward(z, W)
        ctx.ring, ctx.slow, ctx.name = ring, slow, name
        return y

    @staticmethod
    def backward(ctx, gy):
        z, W = ctx.saved_tensors
        ring, slow = ctx.ring, ctx.slow
        K = z.shape[-1]
        s = gy.shape[1]
        gW = torch.zeros_like(W)

        def wgrad(c, gchunk):
            gW.add_(slow.mm(z[:, c * s:(c + 1) * s].reshape(-1, K).t(), gchunk.reshape(-1, gchunk.shape[-1])))

        with record_function(ctx.name + "_bwd"):
            gz, _ = ring_ag_matmul(gy, W.t(), ring, slow, side=wgrad)
        return gz, gW, None, None, None


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class TPBlock(nn.Module):
    def __init__(self, dim, heads, ffn, rank, world, idx):
        super().__init__()
        self.idx, self.heads_local, self.hd = idx, heads // world, dim // heads
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        # the full weights, drawn identically on every rank, then this rank's shard
        wq, wk, wv = (torch.randn(dim, dim) / math.sqrt(dim) for _ in range(3))
        wo = torch.randn(dim, dim) / math.sqrt(dim) / math.sqrt(2)
        w1 = torch.randn(dim, ffn) / math.sqrt(dim)
        w2 = torch.randn(ffn, dim) / math.sqrt(ffn) / math.sqrt(2)
        hc = slice(rank * dim // world, (rank + 1) * dim // world)       # this rank's heads' columns
        fc = slice(rank * ffn // world, (rank + 1) * ffn // world)
        self.w_qkv = nn.Parameter(torch.cat([wq[:, hc], wk[:, hc], wv[:, hc]], 1).contiguous())
        self.w_o = nn.Parameter(wo[hc].contiguous())
        self.w_fc1 = nn.Parameter(w1[:, fc].contiguous())
        self.w_fc2 = nn.Parameter(w2[fc].contiguous())

    def forward(self, x, ring, slow):
        B, s, D = x.shape
        with record_function(f"layer_{self.idx}"):
            qkv = AGMatmul.apply(self.ln1(x), self.w_qkv, ring, slow, "attn_ag_matmul")
            S = qkv.shape[1]
            with record_function("attention"):
                q, k, v = qkv.view(B, S, 3, self.heads_local, self.hd).permute(2, 0, 3, 1, 4)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                a = a.transpose(1, 2).reshape(B, S, self.heads_local * self.hd)
            x = x + MatmulRS.apply(a, self.w_o, ring, slow, "attn_matmul_rs")
            h = AGMatmul.apply(self.ln2(x), self.w_fc1, ring, slow, "mlp_ag_matmul")
            h = F.gelu(h)
            x = x + MatmulRS.apply(h, self.w_fc2, ring, slow, "mlp_matmul_rs")
        return x


class AuxHead(nn.Module):
    """The rank's own residual block, applied reps times: predicts the token after next."""

    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim, bias=False)
        self.fc2 = nn.Linear(dim, dim, bias=False)
        nn.init.normal_(self.fc2.weight, std=0.02)

    def forward(self, h, reps):
        z = h
        for _ in range(int(reps)):
            z = z + self.fc2(F.gelu(self.fc1(self.norm(z))))
        rows = int(round(h.shape[0] * (reps - int(reps))))
        if rows > 0:                            # the fractional repeat over that many batch rows
            zr = z[:rows] + self.fc2(F.gelu(self.fc1(self.norm(z[:rows]))))
            z = torch.cat([zr, z[rows:]], 0)
        return z


class TPGPT(nn.Module):
    def __init__(self, vocab, dim, heads, ffn, layers, rank, world):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(TPBlock(dim, heads, ffn, rank, world, i) for i in range(layers))
        self.norm = nn.LayerNorm(dim)

    def replicated(self):
        """Parameters every rank holds whole (their gradients are all-reduced)."""
        out = [self.embed.weight, *self.norm.parameters()]
        for b in self.blocks:
            out += [*b.ln1.parameters(), *b.ln2.parameters()]
        return out

    def sharded(self):
        return [q for b in self.blocks for q in (b.w_qkv, b.w_o, b.w_fc1, b.w_fc2)]

    def forward(self, tokens, ring, slow):
        with record_function("embed"):
            x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, ring, slow)
        return self.norm(x)


# --------------------------------------------------------------------------
# data, imbalance, neighbour
# --------------------------------------------------------------------------

def make_corpus(path, vocab, seed, n_tokens=1 << 20, phrase_len=8, n_phrases=3000):
    g = torch.Generator().manual_seed(seed)
    phrases = torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)
    idx = torch.randint(0, n_phrases, (n_tokens // phrase_len,), generator=g)
    phrases[idx].reshape(-1).numpy().astype(np.uint16).tofile(path)


def aux_repeats(args, rank, step):
    mult = 1.0
    if rank == args.big_rank:
        mult *= args.big
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        w = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        mult *= min(4.0, max(0.25, w))
    return args.aux_reps * mult


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
        raise SystemExit("this job is written for 4 ranks (4-way TP)")
    if args.seq_len % world:
        raise SystemExit("--seq-len must split over the ranks")
    slow = rank == args.slow_rank
    s_local = args.seq_len // world
    ffn = args.ffn_mult * args.dim

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    ring = Ring(rank, world, 1 if args.rs_dir == "same" else -1, link, args.link_factor)
    slowdown = Slowdown(max(0.0, args.factor - 1.0) if slow else 0.0)

    # the corpus: written once by rank 0, memory-mapped by all
    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="cmm_")
        make_corpus(os.path.join(tmp[0], "train.bin"), args.vocab, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    data_dir = tmp[0]
    dist.barrier()
    corpus = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    counter_path = os.path.join(data_dir, f"counters_rank{rank}.jsonl")

    torch.manual_seed(args.seed)          # the same full weights on every rank, each keeps its shard
    model = TPGPT(args.vocab, args.dim, args.heads, ffn, args.layers, rank, world)
    torch.manual_seed(args.seed * 31 + rank)
    aux = AuxHead(args.dim)               # the rank's own
    replicated = model.replicated()
    params = replicated + model.sharded() + list(aux.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        n_tp = sum(q.numel() for q in model.sharded())
        n_rep = sum(q.numel() for q in replicated)
        print(f"[cmm] world={world} layers={args.layers} dim={args.dim} heads={args.heads} ffn={ffn} "
              f"vocab={args.vocab} batch={args.batch} seq_len={args.seq_len} rs_dir={args.rs_dir} "
              f"tp_params/rank={n_tp} replicated={n_rep} msg={args.batch * s_local * args.dim * 4 // 1024} KB",
              flush=True)

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
                ring.secs, ring.calls, ring.bytes_sent, ring.messages = 0.0, 0, 0, 0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    g = torch.Generator().manual_seed(args.seed * 7919 + step)
                    starts = torch.randint(0, len(corpus) - args.seq_len - 3, (args.batch,), generator=g).tolist()
                    off = rank * s_local
                    rows = [np.asarray(corpus[st + off: st + off + s_local + 2], dtype=np.int64) for st in starts]
                    batch = torch.from_numpy(np.stack(rows))
                    tokens, targets, targets2 = batch[:, :-2], batch[:, 1:-1], batch[:, 2:]
                    reps = aux_repeats(args, rank, step)

                with record_function("forward"):
                    h = model(tokens, ring, slowdown)
                    with record_function("aux_head"):
                        za = aux(h, reps)
                        aux_loss = F.cross_entropy((za @ model.embed.weight.t()).reshape(-1, args.vocab),
                                                   targets2.reshape(-1))
                    with record_function("lm_head_loss"):
                        logits = h @ model.embed.weight.t()
                        lm_loss = F.cross_entropy(logits.reshape(-1, args.vocab), targets.reshape(-1))
                        loss = lm_loss + 0.1 * aux_loss
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()

                with record_function("grad_allreduce"):
                    if args.ln_sync == "flat":
                        flat = torch.cat([q.grad.reshape(-1) for q in replicated])
                        ring.all_reduce(flat)           # summed: each rank's grads are its chunk's share
                        o = 0
                        for q in replicated:
                            q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                            o += q.numel()
                    else:
                        for q in replicated:
                            ring.all_reduce(q.grad)
                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()

                with record_function("loss_allreduce"):
                    m = torch.tensor([lm_loss.item() * tokens.numel(), float(tokens.numel())])
                    ring.all_reduce(m)

                with record_function("dump_counters"):
                    if slow and args.counter_sleep_ms > 0:
                        time.sleep(args.counter_sleep_ms / 1000.0)
                    with open(counter_path, "a") as fh:      # the step so far, before this dump
                        fh.write(json.dumps({"step": step, "rank": rank,
                                             "step_ms": 1000 * (time.perf_counter() - t0),
                                             "comm_ms": 1000 * ring.secs, "bytes_sent": ring.bytes_sent,
                                             "messages": ring.messages, "aux_reps": reps,
                                             "grad_norm": float(gnorm)}) + "\n")
                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - ring.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {m[0].item() / m[1].item():.4f} |g| {float(gnorm):.3f} "
                          f"aux_reps {reps:.2f} t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside ring transfers and all_reduces) per rank: " +
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
