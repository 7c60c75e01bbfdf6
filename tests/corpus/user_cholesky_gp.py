"""Gaussian-process regression with a hand-written distributed Cholesky (1-D block-cyclic columns).

(calibration table at the end of this docstring)

What it is
----------
Exact GP regression (RBF kernel, Gaussian likelihood) whose hyperparameters (lengthscale,
signal variance, noise) are fitted by maximising the marginal likelihood, on 4 CPU processes
(gloo, ``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``). The data set is a synthetic
pool of ``2 * --n-points`` inputs in ``[-2, 2]^--dims`` with ``--outputs`` noisy target columns
(a shared kernel for all outputs), made from ``--seed`` identically on every rank. Each step
the GP is fitted to a fresh random subset of about ``--n-points`` points (a stochastic-subset
marginal likelihood), drawn from (seed, step) the same on every rank.

The kernel matrix K (N x N, N ~ ``--n-points``) is split 1-D block-cyclic by column blocks:
global column block k (``--block`` columns by default) belongs to rank ``k mod 4``; a rank keeps
the full height (all N rows) of its own column blocks in one local (N x n_local) tensor.

Per step:

* ``kernel_build``: every rank evaluates its own columns, K[:, own] = s^2 exp(-|x - x'|^2 / 2 l^2)
  (+ noise on the diagonal entries);
* ``cholesky``: a right-looking blocked Cholesky, for k = 0 .. nb-1:
  ``panel``: the owner of block k (rank k mod 4) factors the diagonal block
  (``torch.linalg.cholesky_ex``, jitter retry) and solves the panel below it
  (``solve_triangular``), then ``dist.broadcast(src=owner)`` of the whole panel
  (rows k0..N of block k, (N - k0) x w_k floats) to every rank;
  ``trailing_update``: every rank updates its own column blocks j > k with the panel,
  A[j0:, j] -= P[j0:] P[j0:j0+w_j]^T (one small GEMM per block, only rows below the diagonal);
* ``trsv``: a pipelined distributed forward substitution z = L^-1 Y (Y: N x outputs). The
  partially reduced right-hand side travels along the owners of consecutive blocks,
  rank r -> r+1 (3 -> 0 wrapping for the next block), block by block: the owner of block k
  receives the head (its w_k rows of the rhs, already reduced by blocks < k) and then the
  tail (all rows below), solves z_k = L_kk^-1 head, subtracts L[rows below, k] z_k from the
  tail, and sends the next block's head to rank (r+1) mod 4 first and the rest of the tail
  right after (so the next owner can solve while the tail is in flight). ``dist.send`` /
  ``dist.recv``, or with ``--async-p2p`` ``dist.isend``/``dist.irecv`` + ``wait`` (the
  isends are waited at the end of the solve, "trsv_wait"). Each owner keeps its z_k;
* ``mll_reduce``: one ``dist.all_reduce`` of the 3 pieces (log-determinant part
  2 sum log diag L_kk of the rank's blocks, quadratic-form part |z_k|^2, point count) giving
  the exact negative log marginal likelihood of the step's subset;
* ``hyper_grad``: a small stochastic gradient of the hyperparameters: each rank takes
  ``--grad-points`` random points among its own columns' points, builds that small kernel
  with autograd, takes its exact NLL per point and backpropagates; the 3 gradients (and the
  local NLL) are ``dist.all_reduce``-d (averaged);
* ``optimizer``: Adam on the 3 raw hyperparameters (log l, log s^2, log(noise - 1e-3)),
  identical on every rank;
* ``tracker``: each rank appends the hyperparameters and the NLL to its own experiment-tracker
  run file (jsonl).

Communication per step (defaults: N = 2048, block 64 -> 32 blocks, 1 output): 32 panel
broadcasts (from 1 MB down to 32 KB, float64), 61 point-to-point messages along the chain
(31 heads of 512 B: 8 on each of 0 -> 1, 1 -> 2, 2 -> 3 and 7 on 3 -> 0; 30 tails of up to
16 KB: 8 on 0 -> 1 and 1 -> 2, 7 on 2 -> 3 and 3 -> 0), 2 small all_reduces (3 and 4 floats).

User ranges per step: ``sleep`` (fault only), ``load_data``, ``kernel_build``, ``cholesky``
[``panel`` (``panel_factor`` on the owner, ``panel_bcast``), ``trailing_update``] x nb,
``trsv`` [``trsv_recv``, ``trsv_send``, ``trsv_wait``], ``mll_reduce``, ``hyper_grad``,
``optimizer``, ``tracker``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the
broadcasts, the sends/receives and their waits, and the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Problem size: ``--n-points`` (2048), ``--block`` (64), ``--dims`` (3), ``--outputs`` (1),
``--grad-points`` (256), ``--lr`` (0.05), ``--dtype {float64,float32}``, ``--async-p2p``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's kernel build and every one of its trailing
  updates are computed F times (F - 1 extra passes discarded; for a trailing update the
  extra passes are one GEMM against F - 1 copies of the block, which keeps the trace small;
  the fractional part over that fraction of the rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow data read: ``load_data`` sleeps MS each step;
* ``--tracker-sleep-ms MS`` (family fault): a slow experiment tracker: the rank's
  ``tracker`` write of the hyperparameters sleeps MS first (a slow remote/filesystem call);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (B = A + 1 mod 4, a link of the solve's
  chain): every triangular-solve message A sends to B (heads and tails) carries X times the
  bytes, zero-padded in the same message; B receives it all and keeps the head. No
  ``--slow-rank``.

Imbalance without a fault (the column blocks get uneven widths by rank):

* ``--seq-sigma S``: each step, each rank's column blocks are ``--block`` x lognormal(0, S)
  wide (drawn from (seed, rank, step), rounded to 8, clamped to [1/4, 4] x block): that rank
  builds, factors, broadcasts and updates that many more (or fewer) local data points; the
  number of block cycles is chosen so N stays about ``--n-points``;
* ``--big-rank K --big X``: rank K's column blocks are X times as wide as the others', every
  step (it holds X / (X + 3) of the columns).

Calibration
-----------
2-core box shared with other helpers' 4-process jobs and two analysis processes (load average
2 to 16 during the runs); 4 ranks, 10 steps (8 timed). Step medians of all ranks agree within
a few % (the panel broadcasts and the chain tie the ranks), so one number; "busy" = median
time outside communication (broadcasts, send/recv and waits, all_reduces), slow rank vs the
mean of the others. "base" = the healthy default run just before (its step median).

  setting (slow rank)                           base ms  step ms  change   busy slow / others ms
  healthy default                                  -     586-979     -      140-350 (by load)
  healthy --async-p2p                              -      1044       -      312-377
  healthy --async-p2p --n-points 1536 --shapes     -     527-546     -      112-149
  healthy --block 128 --n-points 2560              -     843-851     -      295-418
  healthy --dtype float32 --outputs 4 --dims 5     -     370-384     -       55-76
  healthy --block 32 --n-points 1024
          --grad-points 512                        -     439-445     -       55-90
  --factor 3 (r2)                                 823      955     +16%     519 / 224
  --factor 4 (r2)                                 979     1130     +15%     742 / 174
  --factor 5 (r0)                                 781     1316     +68%     868 / 203
  --async-p2p --factor 5 (r0)                    1044     1705     +63%    1196 / 248
  --block 128 --n-points 2560 --factor 3 (r1)     847     1128     +33%     798 / 297
  --dtype float32 --outputs 4 --dims 5
          --factor 6 (r3)                         378      660     +75%     334 / 83
  after the one-GEMM extra passes (the rows above used one GEMM per extra pass; same work):
  --factor 4 (r2)                                   -      605       -      375 / 131
  --dtype float32 --outputs 4 --dims 5
          --factor 6 (r3)                         356      670     +88%     355 / 88
  --sleep-ms 150 (r1)                             781      978     +25%     375 / 228
  --sleep-ms 250 (r1)                             979     1012   (load)     458 / 207
  --data-sleep-ms 250 (r3)                        729     1042     +43%     445 / 199
  --tracker-sleep-ms 250 (r0)                     729      983     +35%     482 / 215
  --hog (r2)                                      729     1663    +128%     516 / 243
  link 1->2 x1024 (tails up to 16 MB)             781      985     +26%     r1 304 / 244
  link 1->2 x4096 (tails up to 64 MB)             729     1596    +119%     r1 299 / 252
  link 2->3 x4096                                 729     1484    +104%     r2 299 / 306
  --big-rank 3 --big 3                              -      743       -      358 / 120
  --seq-sigma 0.8                                   -     894-919     -      142-201 (N 1960-2176 by step)

Reading: most of a step is waiting: every panel broadcast waits for its owner's factor and
for the owner's own trailing update of that block, and the solve is a strictly sequential
chain of 61 small messages, so on the loaded box a step is 3-4x the ranks' busy time and a
healthy step moved between 590 and 980 ms from one run to the next. The slowed rank's busy
time shows every host or compute fault: the repeated kernel build and trailing updates
(--factor), the sleeps, or the hog's share of the cores land on it (+250 to +950 ms of
busy time, 25-70% of the step); the others wait for its panels in ``panel_bcast`` and for
its pieces of the chain in ``trsv_recv``. A padded link costs little busy time (the padding
is one copy into a reused buffer) but the transfer of 64 MB tails through loopback TCP
doubles the step; everyone downstream waits in ``trsv_recv``. With ``--big 3`` rank 3 holds
half the columns and triples its busy time; the step barely grows because the others' idle
time absorbs it. Wall per run: 15-46 s; traces ~9-10 MB a rank by default (the --factor rank's 12.7-13.6 MB), 4.7-5.2 MB with
--block 128, 14.5-16 MB with --shapes at N = 2048 (hence --shapes with --n-points 1536:
9.6-10.7 MB).
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
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--n-points", type=int, default=2048, help="points in each step's subset (about)")
    p.add_argument("--block", type=int, default=64, help="columns per block (block-cyclic)")
    p.add_argument("--dims", type=int, default=3)
    p.add_argument("--outputs", type=int, default=1, help="target columns sharing the kernel")
    p.add_argument("--grad-points", type=int, default=256, help="points per rank for the hyper gradient")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--async-p2p", action="store_true", help="isend/irecv + wait in the solve")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--tracker-sleep-ms", type=float, default=0.0)
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
    if a.block % 8:
        p.error("--block must be a multiple of 8")
    return a


# --------------------------------------------------------------------------
# communication (timed, so that "busy" = step - communication)
# --------------------------------------------------------------------------

class Comm:
    def __init__(self, rank, world, async_p2p, link=None, link_factor=1.0):
        self.rank, self.world, self.async_p2p = rank, world, async_p2p
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0
        self.pending = []
        self.bufs = {}

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n, dtype):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() < n or buf.dtype != dtype:
            buf = self.bufs[key] = torch.zeros(n, dtype=dtype)
        return buf[:n]

    def broadcast(self, t, src):
        t0 = time.perf_counter()
        dist.broadcast(t, src=src)
        self.secs += time.perf_counter() - t0
        return t

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t

    def send(self, t, dst, tag, slot):
        flat = t.reshape(-1)
        n = self._padded(flat.numel(), self.rank, dst)
        # one buffer per slot (head / tail): a rank sends again only after the chain came round,
        # so its previous message was received long ago
        buf = self._buffer(("send", slot), n, flat.dtype)
        buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        if self.async_p2p:
            self.pending.append((dist.isend(buf, dst, tag=tag), buf))
            if len(self.pending) > 2:         # the one before last is surely done by now; bound the buffers
                w, _ = self.pending.pop(0)
                w.wait()
        else:
            dist.send(buf, dst, tag=tag)
        self.secs += time.perf_counter() - t0

    def recv(self, shape, src, tag, slot, dtype):
        numel = math.prod(shape)
        buf = self._buffer(("recv", slot), self._padded(numel, src, self.rank), dtype)
        t0 = time.perf_counter()
        if self.async_p2p:
            dist.irecv(buf, src, tag=tag).wait()
        else:
            dist.recv(buf, src, tag=tag)
        self.secs += time.perf_counter() - t0
        return buf[:numel].view(shape).clone()

    def wait_sends(self):
        t0 = time.perf_counter()
        for w, _ in self.pending:
            w.wait()
        self.pending.clear()
        self.secs += time.perf_counter() - t0


# --------------------------------------------------------------------------
# data and layout
# --------------------------------------------------------------------------

def make_pool(n, dims, outputs, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, dims, generator=g, dtype=torch.float64) * 4 - 2
    w = torch.randn(outputs, dims, generator=g, dtype=torch.float64)
    ys = []
    for o in range(outputs):
        f = torch.sin(1.5 * x @ w[o]) + 0.5 * torch.cos(2.0 * x[:, 0]) * x[:, -1]
        ys.append(f + 0.1 * torch.randn(n, generator=g, dtype=torch.float64))
    y = torch.stack(ys, 1)
    y = (y - y.mean(0)) / y.std(0)
    return x.to(dtype), y.to(dtype)


def block_widths(args, world, step):
    """This step's column-block width of every rank (block-cyclic: block k is rank k mod world's)."""
    out = []
    for r in range(world):
        w = float(args.block)
        if r == args.big_rank:
            w *= args.big
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + r * 10_007 + step)
            w *= math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
            w = min(max(w, args.block / 4), 4 * args.block * max(1.0, args.big))
        out.append(max(8, int(round(w / 8)) * 8))
    return out


def layout(widths, n_points):
    """Global blocks: (owner, offset, width); whole cycles, N about n_points."""
    cycles = max(1, int(round(n_points / sum(widths))))
    blocks, off = [], 0
    for c in range(cycles):
        for r, w in enumerate(widths):
            blocks.append((r, off, w))
            off += w
    return blocks, off


def rbf(xa, xb, log_l, log_s2):
    d2 = torch.cdist(xa, xb).pow_(2)
    return torch.exp(log_s2 - 0.5 * d2 / torch.exp(2 * log_l))


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
# the distributed pieces
# --------------------------------------------------------------------------

def build_local(x_all, my_blocks, hyp, noise, extra):
    """K[:, own columns] (N x n_local); the diagonal entries get the noise."""
    log_l, log_s2 = hyp[0].item(), hyp[1].item()
    cols = torch.cat([x_all[o:o + w] for (_, o, w) in my_blocks])
    A = rbf(x_all, cols, torch.tensor(log_l), torch.tensor(log_s2))
    c = 0
    for (_, o, w) in my_blocks:
        idx = torch.arange(w)
        A[o + idx, c + idx] += noise
        c += w
    if extra > 0:                                  # --factor: the same evaluation again, discarded
        for _ in range(int(extra)):
            rbf(x_all, cols, torch.tensor(log_l), torch.tensor(log_s2))
        rows = int(round(x_all.shape[0] * (extra - int(extra))))
        if rows > 0:
            rbf(x_all[:rows], cols, torch.tensor(log_l), torch.tensor(log_s2))
    return A


def cholesky(A, blocks, rank, comm, extra, jitter):
    """Right-looking blocked Cholesky in place on the local columns; returns the diag factors."""
    N = A.shape[0]
    loc = {}                                       # global block -> local column offset
    c = 0
    for k, (r, o, w) in enumerate(blocks):
        if r == rank:
            loc[k] = c
            c += w
    diag = {}
    for k, (owner, k0, wk) in enumerate(blocks):
        with record_function("panel"):
            if owner == rank:
                with record_function("panel_factor"):
                    lc = loc[k]
                    Akk = A[k0:k0 + wk, lc:lc + wk]
                    Lkk, info = torch.linalg.cholesky_ex(Akk)
                    if info.item() != 0:           # lost definiteness in finite precision: jitter and retry
                        Lkk = torch.linalg.cholesky(Akk + jitter * torch.eye(wk, dtype=A.dtype))
                    A[k0:k0 + wk, lc:lc + wk] = Lkk
                    if k0 + wk < N:
                        below = A[k0 + wk:, lc:lc + wk]
                        A[k0 + wk:, lc:lc + wk] = torch.linalg.solve_triangular(
                            Lkk.T, below, upper=True, left=False)
                    panel = A[k0:, lc:lc + wk].contiguous()
                    diag[k] = Lkk
            else:
                panel = torch.empty(N - k0, wk, dtype=A.dtype)
            with record_function("panel_bcast"):
                comm.broadcast(panel, owner)
        with record_function("trailing_update"):
            for j in range(k + 1, len(blocks)):
                if blocks[j][0] != rank:
                    continue
                _, j0, wj = blocks[j]
                lc = loc[j]
                P = panel[j0 - k0:]
                Pj = panel[j0 - k0:j0 - k0 + wj]
                A[j0:, lc:lc + wj] -= P @ Pj.T
                if extra > 0:                      # --factor: the same update again, discarded
                    if int(extra) > 0:                 # (one GEMM against the repeated block)
                        PjT = Pj.T
                        _ = torch.mm(P, torch.cat([PjT] * int(extra), 1))
                    rows = int(round(P.shape[0] * (extra - int(extra))))
                    if rows > 0:
                        _ = P[:rows] @ Pj.T
    return diag, loc


def trsv(A, Y, blocks, loc, diag, rank, world, comm):
    """Pipelined forward substitution z = L^-1 Y along the block owners (r -> r+1 mod world).

    Returns this rank's pieces (sum |z_k|^2, sum 2 log diag L_kk)."""
    N, m = Y.shape
    quad = torch.zeros((), dtype=Y.dtype)
    logdet = torch.zeros((), dtype=Y.dtype)
    nb = len(blocks)
    for k, (owner, k0, wk) in enumerate(blocks):
        if owner != rank:
            continue
        prev = (rank - 1) % world
        if k == 0:
            head, tail = Y[:wk].clone(), Y[wk:].clone()
        else:
            with record_function("trsv_recv"):
                head = comm.recv((wk, m), prev, tag=2 * k, slot="head", dtype=Y.dtype)
        Lkk = diag[k]
        z = torch.linalg.solve_triangular(Lkk, head, upper=False)
        quad += (z * z).sum()
        logdet += 2 * torch.log(torch.diagonal(Lkk)).sum()
        if k0 + wk >= N:
            break
        lc = loc[k]
        contrib = A[k0 + wk:, lc:lc + wk] @ z      # while the tail may still be in flight
        if k > 0:
            with record_function("trsv_recv"):
                tail = comm.recv((N - k0 - wk, m), prev, tag=2 * k + 1, slot="tail", dtype=Y.dtype)
        tail = tail - contrib
        nxt = (rank + 1) % world
        w_next = blocks[k + 1][2]
        with record_function("trsv_send"):
            comm.send(tail[:w_next], nxt, tag=2 * (k + 1), slot="head")
            if k + 1 < nb - 1:
                comm.send(tail[w_next:], nxt, tag=2 * (k + 1) + 1, slot="tail")
    return quad, logdet


def local_nll(x, y, raw):
    """Exact GP NLL per point of a small local subset (autograd through the Cholesky)."""
    log_l, log_s2, raw_noise = raw[0], raw[1], raw[2]
    noise = 1e-3 + torch.exp(raw_noise)
    K = rbf(x, x, log_l, log_s2) + noise * torch.eye(x.shape[0], dtype=x.dtype)
    L = torch.linalg.cholesky(K)
    z = torch.linalg.solve_triangular(L, y, upper=False)
    n, m = y.shape
    nll = 0.5 * (z * z).sum() + m * torch.log(torch.diagonal(L)).sum() + 0.5 * n * m * math.log(2 * math.pi)
    return nll / (n * m)


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    if args.link_src >= 0 and args.link_dst != (args.link_src + 1) % world:
        raise SystemExit("the solve's chain only links r -> (r + 1) mod world")
    dtype = torch.float64 if args.dtype == "float64" else torch.float32

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, world, args.async_p2p, link, args.link_factor)

    pool = 2 * args.n_points + 16 * args.block * max(1, int(math.ceil(args.big)))
    x_pool, y_pool = make_pool(pool, args.dims, args.outputs, args.seed, dtype)
    raw = torch.nn.Parameter(torch.tensor([0.0, 0.0, math.log(0.1)], dtype=dtype))   # log l, log s2, noise
    opt = torch.optim.Adam([raw], lr=args.lr)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="gp_chol_")
    dist.broadcast_object_list(tmp, src=0)
    run_dir = tmp[0]
    tracker_path = os.path.join(run_dir, f"tracker_rank{rank}.jsonl")

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        w0 = block_widths(args, world, 0)
        b0, n0 = layout(w0, args.n_points)
        print(f"[gp-chol] world={world} N={n0} blocks={len(b0)} widths={w0} dims={args.dims} "
              f"outputs={args.outputs} dtype={args.dtype} p2p={'isend' if args.async_p2p else 'send'}",
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
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_data"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    widths = block_widths(args, world, step)
                    blocks, N = layout(widths, args.n_points)
                    g = torch.Generator().manual_seed(args.seed * 7919 + step)
                    idx = torch.randperm(pool, generator=g)[:N]
                    x_all, y_all = x_pool[idx], y_pool[idx]
                    my_blocks = [b for b in blocks if b[0] == rank]

                with torch.no_grad():
                    hyp = raw.detach().clone()
                    noise = 1e-3 + math.exp(hyp[2].item())
                    with record_function("kernel_build"):
                        A = build_local(x_all, my_blocks, hyp, noise, extra)
                    with record_function("cholesky"):
                        diag, loc = cholesky(A, blocks, rank, comm, extra, jitter=1e-4)
                    with record_function("trsv"):
                        quad, logdet = trsv(A, y_all, blocks, loc, diag, rank, world, comm)
                        with record_function("trsv_wait"):
                            comm.wait_sends()
                    with record_function("mll_reduce"):
                        pieces = torch.stack([logdet, quad, torch.tensor(float(sum(w for (_, _, w) in my_blocks)), dtype=dtype)])
                        comm.all_reduce(pieces)
                        m = args.outputs
                        nll = (0.5 * pieces[1] + 0.5 * m * pieces[0]).item() / (N * m) + 0.5 * math.log(2 * math.pi)

                with record_function("hyper_grad"):
                    own = torch.cat([torch.arange(o, o + w) for (_, o, w) in my_blocks])
                    gg = torch.Generator().manual_seed(args.seed * 104_729 + rank * 7_919 + step)
                    pick = own[torch.randperm(own.numel(), generator=gg)[:args.grad_points]]
                    opt.zero_grad(set_to_none=False)
                    loss = local_nll(x_all[pick], y_all[pick], raw)
                    loss.backward()
                    flat = torch.cat([raw.grad.detach(), loss.detach().reshape(1)])
                    comm.all_reduce(flat)
                    flat /= world
                    raw.grad.copy_(flat[:3])

                with record_function("optimizer"):
                    opt.step()

                with record_function("tracker"):
                    if slow and args.tracker_sleep_ms > 0:
                        time.sleep(args.tracker_sleep_ms / 1000.0)
                    h = raw.detach()
                    rec = {"step": step, "rank": rank, "nll": nll, "sgd_nll": flat[3].item(), "N": N,
                           "lengthscale": math.exp(h[0].item()), "variance": math.exp(h[1].item()),
                           "noise": 1e-3 + math.exp(h[2].item()), "widths": widths}
                    with open(tracker_path, "a") as fh:
                        fh.write(json.dumps(rec) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"step {step:3d} N {N} nll {nll:.4f} sgd {flat[3].item():.4f} "
                          f"l {rec['lengthscale']:.3f} s2 {rec['variance']:.3f} noise {rec['noise']:.4f} "
                          f"widths {widths} t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside broadcasts, p2p and all_reduces) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(run_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
