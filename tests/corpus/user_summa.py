"""A residual FFN stack (MLP regression) trained with 2D tensor parallelism: SUMMA on a 2x2 grid.

(calibration table at the end of this docstring)

What it is
----------
An MLP regression model trained on 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``) arranged as a 2 x 2 process grid, rank r at grid position
(i, j) = (r // 2, r % 2), with *every* matrix split in 2 x 2 blocks (Optimus / Colossal-AI
"2D" tensor parallelism): rank (i, j) holds block (i, j) of the activations (rows = samples of
the batch, split by grid row; columns = features, split by grid column) and block (i, j) of
every weight matrix. There is no replicated parameter and no data-parallel all_reduce: the
SUMMA reductions already give every rank the full gradient of its own weight blocks.

Model: ``--blocks`` pre-norm residual FFN blocks on a ``--dim``-wide state,

    x <- x + gelu(rmsnorm(x) @ W1) @ W2,       W1: dim x hidden, W2: hidden x dim,

(``rmsnorm`` without a scale; its row statistics are summed over the process row by an
all_reduce, forward and backward), trained with a mean-squared error against the targets of
a fixed random "teacher" (y = x + tanh(x T1) T2 / 4).

Every product C = A @ B (A: rows x K, B: K x M, both 2 x 2 blocked) is SUMMA, done by the
``Summa`` autograd.Function:

* forward, C = A B: for k = 0, 1 the owner (i, k) of A's column panel broadcasts its block
  along process row i (``dist.broadcast`` on the row subgroup, root (i, k)), the owner (k, j)
  of B's row panel broadcasts along process column j (column subgroup, root (k, j)), and every
  rank accumulates C_ij += A_ik B_kj;
* backward, dA = dC B^T: for k = 0, 1: B_kj is broadcast along column j (root (k, j)), each
  rank forms dC_ij B_kj^T and the partial products are ``dist.reduce``-d along row i onto
  (i, k);
* backward, dB = A^T dC: for k = 0, 1: A_ik is broadcast along row i (root (i, k)), each rank
  forms A_ik^T dC_ij and the partials are reduced along column j onto (k, j).

(``--cache-panels`` keeps the panels received in forward and skips the backward broadcasts;
``--prefetch`` issues the broadcasts of panel k + 1 asynchronously before multiplying panel
k.) dA of the first layer of the first block is skipped (the input needs no gradient).

Data: a regression set (``--samples`` x ``--dim`` inputs and targets, float32) written once by
rank 0 as two ``.npy`` files in a temporary directory and memory-mapped by every rank; each step
the batch's sample ids are drawn from (seed, step), the same on every rank, grid row i takes its
slice of them, and rank (i, j) reads only its feature columns j of those rows.

Communication per step (defaults: 2 blocks, dim 512, hidden 2048, batch 1024): per block and
layer 4 forward broadcasts (2 on the row subgroup, 2 on the column subgroup), 4 backward
broadcasts and 4 reduces (2 + 2 for the first layer of block 0); activation panels are
(rows / 2) x (K / 2) floats (0.5 MB, 2 MB for the hidden activations), weight panels 1 MB;
per block 2 row all_reduces of the norm statistics (one forward, one backward, rows / 2 floats); then a world all_reduce of the
loss (2 floats) for logging every step and, every ``--clip-every`` (3) steps, a world
all_reduce of the squared gradient norm (1 float) for clipping.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``forward`` [``block_k``
(``norm_k``, ``ffn_k_up``, ``ffn_k_down``, each with ``summa_bcast_row`` /
``summa_bcast_col`` / ``summa_local_mm`` inside), ``loss``], ``backward`` (``summa_dA`` /
``summa_dB`` with ``summa_bcast_*``, ``summa_reduce_row`` / ``summa_reduce_col``,
``summa_local_mm``), ``grad_norm_allreduce`` (every 3 steps), ``optimizer``,
``log_loss``, ``checkpoint``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent inside the
broadcasts, reduces and all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--blocks`` (2), ``--dim`` (512), ``--hidden`` (2048), ``--batch``
(1024 rows, 512 a grid row), ``--samples`` (8192), ``--lr`` (1e-3), ``--clip-every`` (3),
``--max-norm`` (1.0), ``--ckpt-every`` (1), ``--no-norm`` (plain residual FFN, no norm
all_reduces), ``--cache-panels``, ``--prefetch``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every local SUMMA product of the rank (forward and both
  backward products) is computed F times (F - 1 extra passes discarded; the fractional part
  over that fraction of the rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow batch read: ``load_batch`` sleeps MS each step;
* ``--ckpt-sleep-ms MS`` (family fault): a slow checkpoint writer: the rank's ``checkpoint``
  (``torch.save`` of its weight blocks, every step) sleeps MS before writing (a slow shared
  filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B in one process row or one process
  column, i.e. not diagonal: 0-1, 2-3 share a row, 0-2, 1-3 a column): in the 2-rank subgroup
  {A, B} every message that goes from A to B carries X times the bytes: each SUMMA broadcast
  rooted at A (A's activation / weight panels, forward and backward) and each SUMMA reduce
  rooted at B (A's partial product sent to B) is done on a buffer X times as long,
  zero-padded (the padding buffers are allocated once and stay zero; B keeps the head).
  Traffic from B to A, the norm all_reduces and the world all_reduces are not padded.
  No ``--slow-rank``.

Imbalance without a fault (in SUMMA a rank's block is set by its grid row and column, so the
batch rows of a grid row are the work that can differ; the two ranks of a process row move
together):

* ``--seq-sigma S``: each grid row's share of the step's batch is ``batch / 2`` times
  lognormal(0, S) rows (drawn from (seed, row, step), rounded to 8 rows, clamped to
  [1/4, 4] x): the blocks differ by process row and step;
* ``--big-rank K --big X``: the grid row of rank K takes X times the rows of the other, every
  step (K and its row partner do X times the work of the other row).

Calibration
-----------
2-core box shared with three other helpers' 4-process jobs (load average 15-20 during all of
these); 4 ranks, 10 steps (8 timed); "base" = the step median of the healthy run of the same
configuration nearest in time. Step medians of all ranks agree within ~2% (every SUMMA panel
ties a rank to its row and column partners), so one number; "busy" = median time outside the
broadcasts / reduces / all_reduces, slow rank vs the mean of the others.

  setting (slow rank)                          base ms  step ms  change  busy slow / others ms
  healthy default (4 runs)                         -   1021-1516     -     200-378 (by load, rank)
  healthy --prefetch --shapes                      -     1382-1431   -     461-593
  healthy --cache-panels --no-norm                 -     1262-1272   -     391-561
  healthy --blocks 3 --dim 384 --hidden 1536       -      555-569    -     126-164
  healthy --blocks 4 --batch 768 --hidden 1024
          --clip-every 1                           -     1055-1118   -     101-130
  --factor 4 (r2)                               1021     2398    +135%    1750 / 147
  --factor 3 (r0)                               1522     2649     +74%    1956 / 267
  --prefetch --factor 3 (r3)                    1407     1327   (quiet)    910 / 211
  --blocks 3 --dim 384 --hidden 1536
          --factor 4 (r1)                        561     1849    +230%    1053 / 157
  --sleep-ms 300 (r1)                           1021     1511     +48%     599 / 284
  --data-sleep-ms 300 (r3)                      1021     1325     +30%     512 / 256
  --data-sleep-ms 350 (r3)                      1522     1607      +6%     735 / 248
  --ckpt-sleep-ms 300 (r0)                      1021     1566     +53%     622 / 392
  --ckpt-sleep-ms 350 (r0)                      1110     1341     +21%     649 / 277
  --hog (r1)                                    1021     2391    +134%    1020 / 263
  --hog (r2)                                    1522     2355     +55%     978 / 160
  link 1->3 x32 (16-32 MB messages)             1021     2451    +140%    r1 422, r3 438 / 295
  link 1->3 x32 (seed 414)                      1110     2902    +161%    r1 461, r3 721 / 269
  link 1->3 x64                                 1021     2951    +189%    r1 403, r3 339 / 207
  --big-rank 3 --big 3 (rows 512 / 1536)        1021     2392    +134%    r2 1205, r3 1168 / 150
  --seq-sigma 0.8                               1021     1539-1578   -     278-642; rows 152-1728
                                                                          by grid row and step

Reading: the box's load moved a healthy step between 1.0 and 1.5 s from one run to the next
(and ~70% of a healthy step is spent inside the collectives, mostly waiting for a partner
that the scheduler has not run yet), so one run's step-time change says little; the slowed
rank's busy time shows every fault. ``--factor`` repeats every local product (forward and
backward), which is nearly all of a rank's own compute, so F = 3-4 multiplies the rank's busy
time by 3-7 and every rank waits for it in the next panel broadcast. A sleep of 300-350 ms is
20-45% of the step. The hog's thread takes about half of the slowed rank's CPU share. The
padded link (1 -> 3 is the column subgroup of grid column 1: rank 1 roots the weight panel
broadcasts for k = 0 and sends its dB partials to rank 3 for k = 1; 11 messages a step, each
1 MB x 32) about doubles everyone's step; both ends of the link copy the padded buffers, so
their busy time rises somewhat too. ``--big`` gives both ranks of the big grid row the extra
rows: their busy time triples, the other row waits. Wall per run: 44-64 s at that load
(~25 s of it torch start-up); traces 1.5 MB a rank (2.3 MB with --shapes).
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
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

Q = 2   # the process grid is Q x Q


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--batch", type=int, default=1024, help="rows of a step's batch, split over the grid rows")
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip-every", type=int, default=3)
    p.add_argument("--max-norm", type=float, default=1.0)
    p.add_argument("--ckpt-every", type=int, default=1)
    p.add_argument("--no-norm", action="store_true", help="plain residual FFN blocks (no rmsnorm)")
    p.add_argument("--cache-panels", action="store_true", help="reuse the forward's panels in backward")
    p.add_argument("--prefetch", action="store_true", help="async broadcast of panel k+1 during panel k")
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
    if a.link_src >= 0:
        (ra, ca), (rb, cb) = divmod(a.link_src, Q), divmod(a.link_dst, Q)
        if a.link_src == a.link_dst or (ra != rb and ca != cb):
            p.error("the link's ranks must share a process row or a process column")
    if a.dim % (Q * 8) or a.hidden % (Q * 8):
        p.error("--dim and --hidden must split into the grid")
    return a


# --------------------------------------------------------------------------
# the process grid and its communication
# --------------------------------------------------------------------------

class Grid:
    """2x2 grid: row / column subgroups, SUMMA, the time spent communicating, the link padding."""

    def __init__(self, rank, world, extra=0.0, link=None, link_factor=1.0, prefetch=False):
        self.rank, self.world = rank, world
        self.i, self.j = divmod(rank, Q)
        # every rank creates every subgroup, in the same order
        self.rows = [dist.new_group([r * Q + c for c in range(Q)]) for r in range(Q)]
        self.cols = [dist.new_group([r * Q + c for r in range(Q)]) for c in range(Q)]
        self.row_group, self.col_group = self.rows[self.i], self.cols[self.j]
        self.row_ranks = [self.i * Q + c for c in range(Q)]
        self.col_ranks = [r * Q + self.j for r in range(Q)]
        self.extra = extra
        self.link, self.link_factor = link, link_factor
        self.prefetch = prefetch
        self.secs = 0.0
        self.bufs = {}

    # ---- padding of one link ----
    def _pad(self, members, src, dst):
        """How many times longer a message from src to dst in this 2-rank group is."""
        if (self.link is not None and self.link_factor > 1 and src == self.link[0]
                and dst == self.link[1] and set(members) == set(self.link)):
            return self.link_factor
        return 1.0

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    # ---- collectives on the subgroups ----
    def bcast(self, t, root, axis, key):
        """Broadcast block t (on root) / a block of t's shape (elsewhere) along 'row' or 'col'.

        Returns (tensor, work or None)."""
        group = self.row_group if axis == "row" else self.col_group
        members = self.row_ranks if axis == "row" else self.col_ranks
        other = [m for m in members if m != root][0]
        f = self._pad(members, root, other)
        t0 = time.perf_counter()
        with record_function(f"summa_bcast_{axis}"):
            if f > 1:
                n = t.numel()
                buf = self._buffer(("b", axis, key), int(round(n * f)))
                if self.rank == root:
                    buf[:n].copy_(t.reshape(-1))
                work = dist.broadcast(buf, src=root, group=group, async_op=self.prefetch)
                out = buf[:n].view(t.shape)
            else:
                out = t.contiguous() if self.rank == root else torch.empty_like(t)
                work = dist.broadcast(out, src=root, group=group, async_op=self.prefetch)
        self.secs += time.perf_counter() - t0
        return out, work

    def wait(self, work):
        if work is not None:
            t0 = time.perf_counter()
            work.wait()
            self.secs += time.perf_counter() - t0

    def reduce(self, t, root, axis, key):
        """Sum t over 'row' / 'col' onto root; the root gets the sum (others: None)."""
        group = self.row_group if axis == "row" else self.col_group
        members = self.row_ranks if axis == "row" else self.col_ranks
        sender = [m for m in members if m != root][0]
        f = self._pad(members, sender, root)
        t0 = time.perf_counter()
        with record_function(f"summa_reduce_{axis}"):
            if f > 1:
                n = t.numel()
                buf = self._buffer(("r", axis, key), int(round(n * f)))
                buf[:n].copy_(t.reshape(-1))
                dist.reduce(buf, dst=root, group=group)
                out = buf[:n].view(t.shape).clone()
            else:
                out = t.contiguous()
                dist.reduce(out, dst=root, group=group)
        self.secs += time.perf_counter() - t0
        return out if self.rank == root else None

    def all_reduce(self, t, group=None):
        t0 = time.perf_counter()
        dist.all_reduce(t, group=group)
        self.secs += time.perf_counter() - t0
        return t

    # ---- the local product (the slow device repeats it) ----
    def mm(self, a, b):
        with record_function("summa_local_mm"):
            c = a @ b
            if self.extra > 0:
                for _ in range(int(self.extra)):
                    a @ b
                rows = int(round(a.shape[0] * (self.extra - int(self.extra))))
                if rows > 0:
                    a[:rows] @ b
            return c

    # ---- SUMMA ----
    def _panels(self, a, b, key, need_a=True, need_b=True):
        """Yield (k, A_ik, B_kj) for k = 0..Q-1, broadcasting the panels (k+1 prefetched)."""
        def issue(k):
            ak = bk = wa = wb = None
            if need_a:
                ak, wa = self.bcast(a, self.i * Q + k, "row", (key, "a", k))
            if need_b:
                bk, wb = self.bcast(b, k * Q + self.j, "col", (key, "b", k))
            return ak, bk, wa, wb

        nxt = issue(0)
        for k in range(Q):
            ak, bk, wa, wb = nxt
            self.wait(wa)
            self.wait(wb)
            if self.prefetch and k + 1 < Q:
                nxt = issue(k + 1)
            yield k, ak, bk
            if not self.prefetch and k + 1 < Q:
                nxt = issue(k + 1)

    def summa_ab(self, a, b, key, keep=None):
        c = None
        for k, ak, bk in self._panels(a, b, key):
            p = self.mm(ak, bk)
            c = p if c is None else c + p
            if keep is not None:
                keep.append((ak.clone() if self.link else ak, bk.clone() if self.link else bk))
        return c

    def summa_abt(self, g, b, key, cached=None):
        """dA = dC B^T: B_kj along the column, partials reduced along the row onto (i, k)."""
        out = None
        if cached is None:
            it = ((k, bk) for k, _, bk in self._panels(None, b, key, need_a=False))
        else:
            it = ((k, cached[k][1]) for k in range(Q))
        for k, bk in it:
            r = self.reduce(self.mm(g, bk.t()), self.i * Q + k, "row", (key, "da", k))
            if r is not None:
                out = r
        return out

    def summa_atb(self, a, g, key, cached=None):
        """dB = A^T dC: A_ik along the row, partials reduced along the column onto (k, j)."""
        out = None
        if cached is None:
            it = ((k, ak) for k, ak, _ in self._panels(a, None, key, need_b=False))
        else:
            it = ((k, cached[k][0]) for k in range(Q))
        for k, ak in it:
            r = self.reduce(self.mm(ak.t(), g), k * Q + self.j, "col", (key, "db", k))
            if r is not None:
                out = r
        return out


class Summa(torch.autograd.Function):
    """C_ij = sum_k A_ik B_kj over the grid; backward dA = dC B^T, dB = A^T dC (also SUMMA)."""

    @staticmethod
    def forward(ctx, a, b, grid, name, cache):
        keep = [] if cache else None
        c = grid.summa_ab(a, b, name, keep)
        ctx.save_for_backward(a, b)
        ctx.grid, ctx.name, ctx.keep = grid, name, keep
        return c

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        grid, name = ctx.grid, ctx.name
        g = g.contiguous()
        da = db = None
        if ctx.needs_input_grad[0]:
            with record_function("summa_dA"):
                da = grid.summa_abt(g, b, name, ctx.keep)
        if ctx.needs_input_grad[1]:
            with record_function("summa_dB"):
                db = grid.summa_atb(a, g, name, ctx.keep)
        ctx.keep = None
        return da, db, None, None, None


class RowSum(torch.autograd.Function):
    """Sum over the process row (the feature blocks of the same samples), forward and backward."""

    @staticmethod
    def forward(ctx, x, grid):
        ctx.grid = grid
        return grid.all_reduce(x.clone(), grid.row_group)

    @staticmethod
    def backward(ctx, g):
        with record_function("norm_grad_allreduce"):
            return ctx.grid.all_reduce(g.clone(), ctx.grid.row_group), None


# --------------------------------------------------------------------------
# model: weight blocks of a residual FFN stack
# --------------------------------------------------------------------------

def block_of(full, i, j):
    r, c = full.shape[0] // Q, full.shape[1] // Q
    return full[i * r:(i + 1) * r, j * c:(j + 1) * c].clone()


class SummaFFN:
    def __init__(self, args, grid):
        self.grid, self.args = grid, args
        self.params = []
        self.names = []
        for b in range(args.blocks):
            w1 = torch.randn(args.dim, args.hidden) / math.sqrt(args.dim)
            w2 = torch.randn(args.hidden, args.dim) / math.sqrt(args.hidden) / math.sqrt(2 * args.blocks)
            for name, full in ((f"block{b}.w1", w1), (f"block{b}.w2", w2)):
                self.params.append(block_of(full, grid.i, grid.j).requires_grad_(True))
                self.names.append(name)

    def forward(self, x):
        a, grid = self.args, self.grid
        for b in range(a.blocks):
            w1, w2 = self.params[2 * b], self.params[2 * b + 1]
            with record_function(f"block_{b}"):
                if a.no_norm:
                    z = x
                else:
                    with record_function(f"norm_{b}"):
                        ss = RowSum.apply(x.pow(2).sum(-1, keepdim=True), grid)
                        z = x * torch.rsqrt(ss / a.dim + 1e-6)
                with record_function(f"ffn_{b}_up"):
                    h = F.gelu(Summa.apply(z, w1, grid, f"b{b}up", a.cache_panels))
                with record_function(f"ffn_{b}_down"):
                    x = x + Summa.apply(h, w2, grid, f"b{b}down", a.cache_panels)
        return x


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_dataset(dirname, samples, dim, seed):
    g = torch.Generator().manual_seed(seed + 12345)
    x = torch.randn(samples, dim, generator=g)
    t1 = torch.randn(dim, dim, generator=g) / math.sqrt(dim)
    t2 = torch.randn(dim, dim, generator=g) / math.sqrt(dim)
    y = x + torch.tanh(x @ t1) @ t2 / 4
    np.save(os.path.join(dirname, "x.npy"), x.numpy())
    np.save(os.path.join(dirname, "y.npy"), y.numpy())


def row_split(args, step):
    """Rows of the step's batch for each grid row (the same on every rank)."""
    base = args.batch // Q
    out = []
    for r in range(Q):
        n = float(base)
        if args.big_rank >= 0 and r == args.big_rank // Q:
            n *= args.big
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + r * 10_007 + step)
            n *= math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        n = min(max(base / 4, n), 4 * base * max(1.0, args.big))
        out.append(max(8, int(round(n / 8)) * 8))
    return out


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
    dist.init_process_group("gloo", timeout=timedelta(seconds=240))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != Q * Q:
        raise SystemExit(f"this job runs on a {Q}x{Q} grid: {Q * Q} processes")
    slow = rank == args.slow_rank
    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    grid = Grid(rank, world, extra, link, args.link_factor, args.prefetch)

    # the data set: written once by rank 0, memory-mapped by all
    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="summa_")
        make_dataset(tmp[0], args.samples, args.dim, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    data_dir = tmp[0]
    dist.barrier()
    xs = np.load(os.path.join(data_dir, "x.npy"), mmap_mode="r")
    ys = np.load(os.path.join(data_dir, "y.npy"), mmap_mode="r")
    ckpt_path = os.path.join(data_dir, f"ckpt_rank{rank}.pt")
    c0, c1 = grid.j * args.dim // Q, (grid.j + 1) * args.dim // Q

    torch.manual_seed(args.seed)           # the same full weights on every rank; each keeps its block
    model = SummaFFN(args, grid)
    opt = torch.optim.AdamW(model.params, lr=args.lr, weight_decay=0.01)
    n_params = sum(q.numel() for q in model.params)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[summa] grid={Q}x{Q} blocks={args.blocks} dim={args.dim} hidden={args.hidden} "
              f"batch={args.batch} params/rank={n_params} norm={not args.no_norm} "
              f"cache={args.cache_panels} prefetch={args.prefetch}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    gnorm = float("nan")
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                grid.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    split = row_split(args, step)
                    g = torch.Generator().manual_seed(args.seed * 7919 + step)
                    ids = torch.randint(0, args.samples, (sum(split),), generator=g)
                    off = sum(split[:grid.i])
                    mine = np.sort(ids[off: off + split[grid.i]].numpy())
                    xb = torch.from_numpy(np.ascontiguousarray(xs[mine, c0:c1]))
                    yb = torch.from_numpy(np.ascontiguousarray(ys[mine, c0:c1]))
                    total = float(sum(split) * args.dim)

                with record_function("forward"):
                    out = model.forward(xb)
                    with record_function("loss"):
                        sse = (out - yb).pow(2).sum()
                        loss = sse / total        # this rank's share of the global mean
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()

                if args.clip_every > 0 and step % args.clip_every == 0:
                    with record_function("grad_norm_allreduce"):
                        sq = torch.stack([q.grad.pow(2).sum() for q in model.params]).sum().reshape(1)
                        grid.all_reduce(sq)
                        gnorm = math.sqrt(sq.item())
                        coef = min(1.0, args.max_norm / (gnorm + 1e-6))
                        if coef < 1.0:
                            for q in model.params:
                                q.grad.mul_(coef)
                with record_function("optimizer"):
                    opt.step()

                with record_function("log_loss"):
                    m = torch.tensor([sse.item(), float(out.numel())])
                    grid.all_reduce(m)
                    mse = m[0].item() / m[1].item()

                if args.ckpt_every > 0 and step % args.ckpt_every == 0:
                    with record_function("checkpoint"):
                        if slow and args.ckpt_sleep_ms > 0:
                            time.sleep(args.ckpt_sleep_ms / 1000.0)
                        torch.save({"step": step, "grid": (grid.i, grid.j),
                                    "weights": {n: q.detach() for n, q in zip(model.names, model.params)}},
                                   ckpt_path)

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - grid.secs)
                if rank == 0:
                    print(f"step {step:3d} mse {mse:.5f} |g| {gnorm:.3f} rows {split} "
                          f"t {1000 * step_times[-1]:.1f} ms comm {1000 * grid.secs:.1f} ms", flush=True)
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
        print("median busy ms (outside broadcasts, reduces, all_reduces) per rank: " +
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
