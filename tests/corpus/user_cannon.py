"""A wide two-layer MLP tagger whose weight products run as Cannon's algorithm on a 2x2 process grid.

(calibration table at the end of this docstring)

What it is
----------
Multi-label tagging (``--tags`` binary labels a row, BCE-with-logits) with a wide bias-free
two-layer MLP, Y = relu(X W1) W2, trained on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``) arranged as a 2x2 process grid,
rank = 2 * row + col. Every matrix is cut into 2x2 blocks and rank (i, j) holds block (i, j)
of each: the batch X (rows of row-block i, features of column-block j), W1 (input features i,
hidden units j), the hidden activations H, W2 (hidden i, tags j), the logits and the labels.
So the model is 2D-sharded and nobody ever holds a whole weight matrix; each rank owns (and
updates, locally) its own blocks of W1 and W2.

Every product C = A @ B of two block-distributed matrices is Cannon's algorithm
(``cannon_matmul``): the initial skew (A of row i shifted i steps left in its row, B of
column j shifted j steps up in its column; on a 2x2 grid: ranks 2 <-> 3 swap their A blocks,
ranks 1 <-> 3 their B blocks), then sqrt(p) = 2 rounds, each a local block product
(``local_gemm``, C += A_blk @ B_blk) followed by a shift (``cannon_shift``) of A one step left
in its row (0 <-> 1, 2 <-> 3) and of B one step up in its column (0 <-> 2, 1 <-> 3). The
textbook loop shifts after the last round too (the blocks come back to the skewed places and
are dropped); ``--skip-last-shift`` leaves that one out. The shifts post both directions
together (``dist.irecv`` + ``dist.isend``, then wait on all four), or under ``--blocking``
use ``dist.send``/``dist.recv`` ordered by grid parity (even column sends first in a row, even
row first in a column) so the pairs never deadlock.

Autograd: ``CannonMatmul`` (an ``autograd.Function``) does the forward product, and in backward
the two gradient products, dA = dC @ B^T (not for the first layer: the data needs no grad)
and dB = A^T @ dC, each again by Cannon's algorithm. The transposed operands come from a
block transpose (``transpose_blocks``): rank (i, j) swaps its block with rank (j, i) (ranks
1 <-> 2; the diagonal ranks 0 and 3 transpose locally).

Besides its share of the 2D-sharded batch, every rank trains its own W1 block on rows of its
own data shard ("local rows", ``--local-rows`` a step): relu(X_local[:, features i] @ W1_ij)
feeds a small per-rank probe head (hidden j -> tags j), whose BCE (weight 0.3) adds to the
rank's W1 block gradient. No communication; the shards are of uneven size in the imbalance
runs (see below).

A step: ``load_batch`` (the rank's X and label blocks from a memory-mapped float16 file that
rank 0 wrote once, rows [s, s + batch) with s drawn from (seed, step), and the local rows of
its shard), ``forward`` (2 Cannon products, relu between, the local loss of the rank's logits
block), ``backward`` (3 Cannon products and 3 block transposes, plus the local rows' branch),
``loss_allreduce`` (2 floats over the world), ``grad_histograms`` (a per-step histogram of each
grad block appended to the rank's TensorBoard-style dump), ``optimizer`` (AdamW on the rank's
own blocks). Every ``--eval-every`` steps ``evaluate``: a no-grad Cannon forward of a held-out
batch and an all_reduce of (correct, count) for the accuracy.

Communication per step (defaults: batch 1024, in 1024, hidden 2048, tags 256; block sizes in
floats): the skews and 2 shifts of each of the 5 Cannon products (forward: X 512x512 and
W1 512x1024 blocks, then H 512x1024 and W2 1024x128; backward: dY 512x128 with W2^T 128x1024,
H^T 1024x512 with dY 512x128, X^T 512x512 with dZ 512x1024), 3 block transposes 1 <-> 2
(W2, H, X), one 2-float all_reduce, and on eval steps one more 2-float all_reduce.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``forward`` [``layer1``, ``layer2``,
each with ``cannon_skew``, ``local_gemm``, ``cannon_shift``; ``local_rows``; ``loss``], ``backward``
(the Cannon backward with ``transpose_blocks``, ``cannon_skew``, ``local_gemm``, ``cannon_shift``
inside), ``loss_allreduce``, ``grad_histograms``, ``optimizer``, ``evaluate``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the
shifts, skews, transposes and all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--batch`` (1024 rows, 512 a grid row), ``--in-dim`` (1024), ``--hidden``
(2048), ``--tags`` (256), ``--local-rows`` (384), ``--lr`` (1e-3), ``--eval-every`` (3),
``--blocking``, ``--skip-last-shift``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every local block product of the rank's Cannon rounds
  (forward and backward) is done F times (F - 1 extra passes discarded; the fractional part
  over that fraction of the block's rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow read: ``load_batch`` sleeps MS each step;
* ``--hist-sleep-ms MS`` (family fault): a slow per-step gradient-histogram dump for
  TensorBoard: the rank's ``grad_histograms`` sleeps MS (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B grid neighbours in a row or a column, or
  the transpose pair 1, 2): every message A sends to B carries X times the bytes (zero-padded
  in the same message; B receives it all and keeps the head). In a row it is an A-operand
  shift (e.g. 1 -> 0: X, H, dY, H^T, X^T blocks, 2 messages a product plus skews), in a column
  a B-operand shift (e.g. 2 -> 0: W1, W2, W2^T, dY, dZ blocks). No ``--slow-rank``.

Imbalance without a fault (the local rows only; the Cannon products stay even):

* ``--seq-sigma S``: each rank's local rows this step are ``--local-rows`` times
  lognormal(0, S), drawn from (seed, rank, step), clamped to [1/4, 4]x, in multiples of 8;
* ``--big-rank K --big X``: rank K's local rows are X times the others', every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 6-19 during the
measurements); 4 ranks, 10 steps (8 timed), one run each, healthy default runs ("base")
interleaved. The shifts tie the ranks every round, so the step medians of all ranks agree
within a few % (one number given); "busy" = median time outside the shifts, skews,
transposes and all_reduces, slow rank vs the mean of the others.

  setting (slow rank)                                  base ms   step ms   busy slow / others ms
  healthy default                                         -      677-1158   235-475 (by load)
  healthy --blocking --shapes                             -        872      350-374
  healthy --skip-last-shift --batch 768 --hidden 3072
          --local-rows 256                                -       1099      529-617
  healthy --batch 1536 --in-dim 768 --tags 512
          --hidden 1536 --eval-every 2                    -        981      411-450
  healthy --blocking --batch 512 --hidden 4096
          --lr 3e-3 --local-rows 256                      -        926      365-417
  --factor 2 (r1)                                       958       1291      735 / 414
  --factor 3 (r2)                                      1002       1220      797 / 369
  --blocking --factor 2.5 (r2)                          920       1389      884 / 410
  --skip-last-shift --factor 3 (r0)                     920       1236     1022 / 419
  --batch 768 --hidden 3072 --local-rows 256
          --factor 2 (r3)                              1008       1345      882 / 486
  --sleep-ms 200 (r1)                                   850       1064      542 / 324
  --sleep-ms 300 (r1)                                   920       1301      738 / 436
  --data-sleep-ms 200 (r3)                              850       1076      570 / 374
  --data-sleep-ms 300 (r3)                              920       1292      725 / 430
  --hist-sleep-ms 200 (r0)                              850       1355      580 / 433
  --hist-sleep-ms 300 (r0)                              677       1075 (r0), 946-971   624 / 325
  --hog (r2)                                            895       1720      715 / 400
  link 1 -> 0 x16 (row shifts, A blocks)                895       1388      r0 558, r1 508 / 455
  link 1 -> 0 x24                                      1158       1051      r0 320 / 265  (load fell)
  link 1 -> 0 x48 (up to 96 MB messages)                848       1740      r0 330 / 302
  link 1 -> 0 x64                                       815       2765      r0 543 / 415
  link 2 -> 0 x16 (column shifts, B blocks)             895       1133      419 / 381
  link 2 -> 0 x48                                       815       1134      293 / 251
  --big-rank 3 --big 3                                    -       1002      570 / 367
  --seq-sigma 0.8                                         -        829      r0 229, r1 251, r2 301, r3 332

Reading: with 4 ranks on 2 busy cores a rank spends half its step waiting in the shifts for
the rank it pairs with, so the step moves 680-1160 ms from run to run with the load; the slowed
rank's busy time shows every fault. The local block products are about two thirds of a rank's
compute (the local rows the rest), so ``--factor 2`` adds 300-400 ms (30-40% of the step) and
everyone's step grows by it (the next shift waits). A sleep of 200-300 ms adds that to the
rank's busy time, 20-30% of a step; the histogram sleep sits after the loss all_reduce, so the
slow rank's own step median is the longer one and the others wait for it in the next skew.
The padded link costs little until its messages are tens of MB (a step sends ~12.5 MB of A
blocks from 1 to 0); at x48 the transfer doubles every rank's step, all of it waiting in the
shifts. The B-operand link 2 -> 0 costs less at the same factor. ``--big 3`` triples rank 3's
local rows (+200 ms busy); the others wait for it in the next step's first skew/shift.
Wall per run: 29-57 s (the load), of which ~15 s start-up and the dataset; traces ~1.4 MB a
rank (2 MB with --shapes).
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


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--in-dim", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--tags", type=int, default=256)
    p.add_argument("--local-rows", type=int, default=384)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=3)
    p.add_argument("--blocking", action="store_true", help="parity-ordered dist.send/recv shifts")
    p.add_argument("--skip-last-shift", action="store_true")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--hist-sleep-ms", type=float, default=0.0)
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
        (r0, c0), (r1, c1) = divmod(a.link_src, 2), divmod(a.link_dst, 2)
        if not ((r0 == r1) != (c0 == c1) or {a.link_src, a.link_dst} == {1, 2}):
            p.error("the link must join grid neighbours (same row or column) or the transpose pair 1, 2")
    for d in (a.batch, a.in_dim, a.hidden, a.tags):
        if d % 2:
            p.error("--batch, --in-dim, --hidden and --tags must split in 2 blocks")
    return a


# --------------------------------------------------------------------------
# the process grid and its point-to-point messages
# --------------------------------------------------------------------------

class Grid:
    """A q x q grid of ranks (rank = q * row + col) with padded-link point-to-point."""

    def __init__(self, rank, world, blocking, link=None, link_factor=1.0):
        q = math.isqrt(world)
        if q * q != world or q % 2:
            raise SystemExit("the grid needs a square, even number of ranks (4)")
        self.q, self.rank = q, rank
        self.row, self.col = divmod(rank, q)
        self.blocking = blocking
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0          # time in communication this step
        self.bufs = {}           # padded message buffers, kept (the padding stays zero)

    def at(self, r, c):
        return (r % self.q) * self.q + (c % self.q)

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def _send_buf(self, t, dst, tag):
        n = t.numel()
        m = self._padded(n, self.rank, dst)
        if m == n:
            return t.contiguous()
        buf = self._buffer(("s", dst, tag, n), m)
        buf[:n].copy_(t.reshape(-1))
        return buf

    def _recv_buf(self, shape, src, tag):
        n = math.prod(shape)
        m = self._padded(n, src, self.rank)
        if m == n:
            return torch.empty(shape)
        return self._buffer(("r", src, tag, n), m)

    def exchange(self, msgs):
        """msgs: (tensor, dst, src, tag, parity) each: send tensor to dst, receive one of its
        shape from src. Non-blocking: all posted together, then waited. Blocking: in order,
        the even-parity side sends first."""
        t0 = time.perf_counter()
        out = []
        if self.blocking:
            for t, dst, src, tag, parity in msgs:
                sb = self._send_buf(t, dst, tag)
                rb = self._recv_buf(t.shape, src, tag)
                if parity % 2 == 0:
                    dist.send(sb, dst, tag=tag)
                    dist.recv(rb, src, tag=tag)
                else:
                    dist.recv(rb, src, tag=tag)
                    dist.send(sb, dst, tag=tag)
                out.append(rb)
        else:
            works, keep = [], []
            for t, dst, src, tag, _ in msgs:
                rb = self._recv_buf(t.shape, src, tag)
                works.append(dist.irecv(rb, src, tag=tag))
                out.append(rb)
            for t, dst, src, tag, _ in msgs:
                sb = self._send_buf(t, dst, tag)
                keep.append(sb)
                works.append(dist.isend(sb, dst, tag=tag))
            for w in works:
                w.wait()
        res = []
        for (t, *_), rb in zip(msgs, out):
            n = t.numel()
            res.append(rb if rb.numel() == n else rb[:n].view(t.shape).clone())
        self.secs += time.perf_counter() - t0
        return res

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t


TAG_A, TAG_B, TAG_T = 11, 12, 13


def transpose_blocks(M, grid):
    """Block (i, j) of M^T = (block (j, i) of M)^T: swap with the rank at (j, i)."""
    with record_function("transpose_blocks"):
        if grid.row == grid.col:
            return M.t().contiguous()
        partner = grid.at(grid.col, grid.row)
        (got,) = grid.exchange([(M, partner, partner, TAG_T, 0 if grid.rank < partner else 1)])
        return got.t().contiguous()


def cannon_matmul(A, B, grid, extra=0.0, skip_last=False):
    """C = A @ B, A, B and C block-distributed on the grid (rank (i, j) holds block (i, j))."""
    q, i, j = grid.q, grid.row, grid.col
    with record_function("cannon_skew"):
        msgs = []
        if i % q:     # A of row i: i steps left
            msgs.append(("A", A, grid.at(i, j - i), grid.at(i, j + i), TAG_A, j))
        if j % q:     # B of column j: j steps up
            msgs.append(("B", B, grid.at(i - j, j), grid.at(i + j, j), TAG_B, i))
        if msgs:
            got = grid.exchange([m[1:] for m in msgs])
            for m, g in zip(msgs, got):
                if m[0] == "A":
                    A = g
                else:
                    B = g
    C = None
    for t in range(q):
        with record_function("local_gemm"):
            C = A @ B if C is None else torch.addmm(C, A, B)
            if extra > 0:          # --factor: the same block product again, discarded
                for _ in range(int(extra)):
                    torch.mm(A, B)
                rows = int(round(A.shape[0] * (extra - int(extra))))
                if rows > 0:
                    torch.mm(A[:rows], B)
        if t < q - 1 or not skip_last:
            with record_function("cannon_shift"):
                A, B = grid.exchange([(A, grid.at(i, j - 1), grid.at(i, j + 1), TAG_A, j),
                                      (B, grid.at(i - 1, j), grid.at(i + 1, j), TAG_B, i)])
    return C


class CannonMatmul(torch.autograd.Function):
    """Forward C = A @ B by Cannon; backward dA = dC @ B^T, dB = A^T @ dC, both by Cannon."""

    @staticmethod
    def forward(ctx, A, B, grid, extra, skip_last):
        ctx.save_for_backward(A, B)
        ctx.grid, ctx.extra, ctx.skip_last = grid, extra, skip_last
        return cannon_matmul(A, B, grid, extra, skip_last)

    @staticmethod
    def backward(ctx, dC):
        A, B = ctx.saved_tensors
        grid, extra, skip = ctx.grid, ctx.extra, ctx.skip_last
        dC = dC.contiguous()
        dA = dB = None
        if ctx.needs_input_grad[0]:
            dA = cannon_matmul(dC, transpose_blocks(B, grid), grid, extra, skip)
        if ctx.needs_input_grad[1]:
            dB = cannon_matmul(transpose_blocks(A, grid), dC, grid, extra, skip)
        return dA, dB, None, None, None


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_dataset(path, n_rows, in_dim, tags, seed):
    """float16 features and uint8 multi-label tags from a fixed random two-layer teacher."""
    g = torch.Generator().manual_seed(seed + 99)
    t1 = torch.randn(in_dim, 256, generator=g) / math.sqrt(in_dim)
    t2 = torch.randn(256, tags, generator=g) / math.sqrt(256)
    X = np.lib.format.open_memmap(os.path.join(path, "x.npy"), mode="w+", dtype=np.float16,
                                  shape=(n_rows, in_dim))
    Y = np.lib.format.open_memmap(os.path.join(path, "y.npy"), mode="w+", dtype=np.uint8,
                                  shape=(n_rows, tags))
    for s in range(0, n_rows, 2048):
        x = torch.randn(min(2048, n_rows - s), in_dim, generator=g)
        logit = torch.relu(x @ t1) @ t2
        logit = logit - logit.median(dim=0).values      # about half the tags on
        X[s: s + len(x)] = x.numpy().astype(np.float16)
        Y[s: s + len(x)] = (logit > 0).numpy().astype(np.uint8)
    X.flush()
    Y.flush()


def local_rows_of(args, rank, step):
    n = float(args.local_rows)
    if rank == args.big_rank:
        n *= args.big
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        f = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        n *= min(4.0, max(0.25, f))
    return max(8, int(round(n / 8)) * 8)


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
    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    grid = Grid(rank, world, args.blocking, link, args.link_factor)
    q, i, j = grid.q, grid.row, grid.col

    nb, din, dh, dt = args.batch // q, args.in_dim // q, args.hidden // q, args.tags // q
    n_eval = args.batch
    shard = int(max(2048, 4 * args.local_rows * max(1.0, args.big)))   # rows of each rank's own shard
    n_train = 8192
    n_rows = n_train + n_eval + world * shard

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="cannon_")
        make_dataset(tmp[0], n_rows, args.in_dim, args.tags, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    data_dir = tmp[0]
    dist.barrier()
    X_all = np.load(os.path.join(data_dir, "x.npy"), mmap_mode="r")
    Y_all = np.load(os.path.join(data_dir, "y.npy"), mmap_mode="r")
    hist_path = os.path.join(data_dir, f"grad_hist_rank{rank}.jsonl")

    # my blocks of the weights, as a global init would give them
    def init_block(shape, fan_in, tag):
        g = torch.Generator().manual_seed(args.seed * 1000 + tag * 16 + rank)
        return (torch.randn(*shape, generator=g) / math.sqrt(fan_in)).requires_grad_()

    W1 = init_block((din, dh), args.in_dim, 1)        # input features i x hidden j
    W2 = init_block((dh, dt), args.hidden, 2)         # hidden i x tags j
    P = init_block((dh, dt), args.hidden, 3)          # my local rows' probe head: hidden j x tags j
    params = [W1, W2, P]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    skip = args.skip_last_shift
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[cannon] grid {q}x{q} batch={args.batch} in={args.in_dim} hidden={args.hidden} "
              f"tags={args.tags} local_rows={args.local_rows} blocks W1 {tuple(W1.shape)} W2 {tuple(W2.shape)} "
              f"{'blocking' if args.blocking else 'isend/irecv'}{' skip-last-shift' if skip else ''}", flush=True)

    def read_block(start, rows, cols_x, cols_y):
        x = torch.from_numpy(np.asarray(X_all[start: start + rows, cols_x], dtype=np.float32))
        y = torch.from_numpy(np.asarray(Y_all[start: start + rows, cols_y], dtype=np.float32))
        return x, y

    def model_forward(x_blk, w_extra):
        with record_function("layer1"):
            z = CannonMatmul.apply(x_blk, W1, grid, w_extra, skip)
            h = torch.relu(z)
        with record_function("layer2"):
            return CannonMatmul.apply(h, W2, grid, w_extra, skip)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    feats_mine = slice(j * din, (j + 1) * din)       # X block columns
    feats_w1 = slice(i * din, (i + 1) * din)         # W1 block rows (for the local rows)
    tags_mine = slice(j * dt, (j + 1) * dt)
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
                    g = torch.Generator().manual_seed(args.seed * 7919 + step)
                    s = int(torch.randint(0, n_train - args.batch, (1,), generator=g))
                    xb, yb = read_block(s + i * nb, nb, feats_mine, tags_mine)
                    n_loc = min(local_rows_of(args, rank, step), shard)
                    g2 = torch.Generator().manual_seed(args.seed * 104729 + rank * 131 + step)
                    s2 = n_train + n_eval + rank * shard + int(torch.randint(0, shard - n_loc + 1, (1,), generator=g2))
                    xl, yl = read_block(s2, n_loc, feats_w1, tags_mine)

                with record_function("forward"):
                    logits = model_forward(xb, extra)
                    with record_function("local_rows"):
                        hl = torch.relu(xl @ W1)
                        aux = F.binary_cross_entropy_with_logits(hl @ P, yl)
                    with record_function("loss"):
                        # my block of the global mean BCE (the 4 blocks sum to it)
                        loss_sum = F.binary_cross_entropy_with_logits(logits, yb, reduction="sum")
                        loss = loss_sum / (args.batch * args.tags) + 0.3 * aux
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()

                with record_function("loss_allreduce"):
                    m = torch.tensor([loss_sum.item(), float(yb.numel())])
                    grid.all_reduce(m)

                with record_function("grad_histograms"):
                    rec = {"step": step, "rank": rank}
                    for name, w in (("W1", W1), ("W2", W2), ("probe", P)):
                        gr = w.grad
                        lo, hi = float(gr.min()), float(gr.max())
                        rec[name] = {"min": lo, "max": hi,
                                     "counts": torch.histc(gr, bins=64, min=lo, max=hi).int().tolist()}
                    if slow and args.hist_sleep_ms > 0:
                        time.sleep(args.hist_sleep_ms / 1000.0)
                    with open(hist_path, "a") as fh:
                        fh.write(json.dumps(rec) + "\n")

                with record_function("optimizer"):
                    opt.step()

                acc = None
                if args.eval_every > 0 and (step + 1) % args.eval_every == 0:
                    with record_function("evaluate"), torch.no_grad():
                        xe, ye = read_block(n_train + i * nb, nb, feats_mine, tags_mine)
                        h = torch.relu(cannon_matmul(xe, W1.detach(), grid, extra, skip))
                        le = cannon_matmul(h, W2.detach(), grid, extra, skip)
                        c = torch.tensor([float(((le > 0).float() == ye).sum()), float(ye.numel())])
                        grid.all_reduce(c)
                        acc = c[0].item() / c[1].item()

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - grid.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {m[0].item() / m[1].item():.4f} aux {aux.item():.4f} "
                          f"local_rows {n_loc}" + (f" eval_acc {acc:.4f}" if acc is not None else "") +
                          f" t {1000 * step_times[-1]:.1f} ms (comm {1000 * grid.secs:.1f})", flush=True)
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
        print("median busy ms (outside shifts, transposes and all_reduces) per rank: " +
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
