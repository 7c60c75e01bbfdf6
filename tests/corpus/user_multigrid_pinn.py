"""A conv-net source correction trained through a distributed geometric multigrid Poisson solve.

(calibration table at the end of this docstring)

What it is
----------
A small "neural operator meets classical solver" job of the physics-informed kind, trained on
4 CPU processes (gloo, ``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``), no DDP wrapper.
The unknown is the 2D Poisson problem -lap(u) = f with u = 0 on the boundary, discretised by
the 5-point stencil on an N x N cell-centred grid (``--grid``, default 256, h = 1/N, u = 0 on the
walls half a cell out: ghost = -u), split into
4 horizontal strips of N/4 rows, one per rank (rank 0 the top strip, rank 3 the bottom one).

Every step draws one problem (the same on every rank, from (seed, step)): u* a random sum of
sine modes, its exact discrete source f_true, and the "measured" source f0 = f_true * (1 + m)
with a smooth multiplicative distortion m(x, y) the job does not know. A conv net (3 x 3 convs,
``--width`` channels, ``--depth`` layers, tanh) reads (x, y, f0) on the rank's strip (the
inputs are analytic, so the two context rows above and below the strip are computed locally,
no exchange) and predicts the source correction c; the job then solves -lap(u) = f0 + c by
``--vcycles`` multigrid V-cycles from u = 0 and the loss is the mean squared error of u
against u*. The solve is a fixed linear operator A^-1, so the backward is the adjoint: one
more V-cycle on A lam = dL/du (A is symmetric), then ``(c * lam).sum().backward()`` through
the conv net only. The gradients are averaged by one flat all_reduce and Adam steps.

The V-cycle (hand-written in torch): on each level weighted-Jacobi (omega 0.8) or red-black
Gauss-Seidel (``--smoother rbgs``) sweeps, ``--pre`` before and ``--post`` after the coarse
correction; before every sweep (every colour for red-black) and before the residual the
strip's top and bottom rows are exchanged with the neighbouring strips (``dist.isend`` /
``dist.irecv``, then waited); the residual is restricted by 2 x 2 averaging (strip-local) and
the coarse correction prolonged bilinearly (cell-centred 9/3/3/1 weights), which takes one more
halo exchange of the coarse correction. Levels are halved until the strips
are ``--coarse-rows`` thick; there every rank's coarse right-hand side is gathered to rank 0
(``dist.gather``, strips padded to the tallest), rank 0 alone solves the whole coarse
problem -- ``--coarse-solve dense`` builds the coarse matrix once and calls
``torch.linalg.solve`` every cycle (no cached factorisation), ``--coarse-solve sweeps`` does
``--coarse-sweeps`` Jacobi sweeps on it -- and the coarse correction is scattered back
(``dist.scatter``). So rank 0 does extra work in every cycle by design while the others wait
in the scatter: that is the healthy behaviour of this job.

After the optimizer the job logs: one more residual evaluation (an exchange), a 3-float
all_reduce (residual^2, error^2, f^2) and every rank appends a line to its own residual log
and writes a small PGM picture of its strip of u (``log_residual``).

Communication per step (defaults: N 256, 2 V-cycles + 1 adjoint, 4 levels below the finest,
2 + 1 sweeps): per V-cycle and level 5 halo exchanges (2 pre, residual, post, the
prolongation's) of one row each way per neighbour pair (1 KB on the finest level, halving
per level), one more for the logged residual; one gather + one scatter of the coarse grid
(4 strips of 4 x 16 floats, a 16 x 16 coarse problem) per V-cycle; one all_reduce of the gradients (~15 K
floats at width 24) and one of 3 floats.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``model_forward``,
``vcycle`` [``smooth`` (``halo_exchange`` inside), ``residual`` (``halo_exchange``),
``restrict``, ``prolong`` (``halo_exchange``), ``coarse_solve``], ``loss``, ``backward`` [``adjoint_vcycle``, the
same ranges inside], ``grad_allreduce``, ``optimizer``, ``log_residual``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the halo
exchanges, the coarse gather/scatter and the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Problem / job size: ``--grid`` (256), ``--vcycles`` (2), ``--pre`` (2), ``--post`` (1),
``--smoother {jacobi,rbgs}``, ``--coarse-rows`` (4, rows a strip has on the coarsest level),
``--coarse-solve {dense,sweeps}``, ``--coarse-sweeps`` (200), ``--width`` (24), ``--depth``
(3), ``--modes`` (4), ``--lr`` (3e-3), ``--optim {adam,sgd}``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every smoothing sweep of the rank and its conv-net forward
  are computed F times (the F - 1 extra passes without grad as one batched computation,
  discarded; the fractional part over that fraction of the strip's rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow problem loader: ``load_batch`` sleeps MS each step;
* ``--plot-sleep-ms MS`` (family fault): a slow residual logger / plot writer: the rank's
  ``log_residual`` sleeps MS before writing its line and picture (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (|A - B| = 1, neighbouring strips): every
  halo row A sends to B, on every level, carries X times the bytes (zero-padded in the same
  message; B receives it all and keeps the head). No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: an adaptive smoother: in every V-cycle each rank does extra local
  Jacobi sweeps on the finest level (one exchange, then its ghost rows held), ``--adapt-sweeps``
  (16) times lognormal(0, S) drawn from (seed, rank, step), clamped to [1/4x, 4x];
* ``--big-rank K --big X``: rank K's strip is X times as tall as the others' (rounded to whole
  coarse rows; the domain grows), every step, so it smooths X times the points and its
  coarse strip is X times as tall.

Calibration
-----------
2-core box shared with other helpers' jobs; 4 ranks; the numbers are those of the users117
battery run itself (medians over the traced steps, so one run each; the box's load fell during
the run: a healthy default step was 670 ms at the start, ~300-400 ms for the reruns at the end).
Step medians agree across ranks within a few % (the halos tie the strips); "busy" = the median
step minus halo exchanges, coarse gather/scatter and all_reduces, per rank r0 r1 r2 r3.

  run                                             steps  step ms   busy ms r0/r1/r2/r3
  healthy default                                   10     671     225 204 201 260
  healthy g192 cr6 v1 --shapes                      10     530     122  87  94 113
  healthy g384 cr6 v1 coarse sweeps 60               6     385     218 181 194 242  (rank 0 sweeps)
  healthy g128 cr8 v3 sgd (dense 1024 coarse)       10     975     465  54  53  57  (rank 0 solve)
  healthy rbgs pre1 post1 w16                        8     305      57  46  51  57
  --factor 5 (r1)                                    8     405     114 165 112  90   +~60 ms
  --vcycles 3 --factor 8 (r2)                        7     555     133 109 200 127   +~75 ms
  g384 cr6 --factor 5 (r3)                           8     586     249 185 218 373   +~150 ms
  rbgs --factor 4 (r0)                               7     400     185 107 115 130   +~70 ms
  --sleep-ms 200 (r2)                               10     753     177 157 350 178
  --data-sleep-ms 200 (r3)                          10     797     204 191 196 388
  --plot-sleep-ms 200 (r1)                          10     610     130 325 152 159
  --hog (r3)                                        10     860     208 160 167 297
  link 2->1 x8192 (first try, 8 MB rows)            10     625     171 156 152 146   (no cost)
  link 2->1 x32768 (32 MB finest rows)              10    1019     163 129 134 134   (+~50% step)
  --seq-sigma 0.8 (adapt sweeps 4-64 a V-cycle)      7     395      98  97  85 109
  --big-rank 3 --big 3 (192-row strip)              10     700     204 166 175 442

Reading: most of a step is waiting in the halo exchanges (dozens of small messages a step on
a loaded box); the compute a rank owns is 50-250 ms. ``--factor`` repeats the smoothing and
the net's forward only (the net's backward and the exchanges are not repeated), so F 4-8 adds
60-150 ms, 15-27 % of the step. A 200 ms sleep is 25-33 % of the step. A padded link costs
nothing at 8 MB rows and ~+50 % of the step at 32 MB finest rows (every rank waits on 2->1).
Rank 0's coarse solve is healthy extra work: with 8-row coarse strips on a 128 grid (a dense
1024 x 1024 solve every cycle) rank 0 is busy ~8x the others. Wall per run 12-44 s; traces
10-15 MB a rank (the fault / rbgs / seq-sigma / many-sweep runs use 6-8 steps to stay there).
"""

import argparse
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
    p.add_argument("--grid", type=int, default=256)
    p.add_argument("--vcycles", type=int, default=2)
    p.add_argument("--pre", type=int, default=2)
    p.add_argument("--post", type=int, default=1)
    p.add_argument("--smoother", choices=["jacobi", "rbgs"], default="jacobi")
    p.add_argument("--coarse-rows", type=int, default=4)
    p.add_argument("--coarse-solve", choices=["dense", "sweeps"], default="dense")
    p.add_argument("--coarse-sweeps", type=int, default=200)
    p.add_argument("--width", type=int, default=24)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--modes", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--optim", choices=["adam", "sgd"], default="adam")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--plot-sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--link-src", type=int, default=-1)
    p.add_argument("--link-dst", type=int, default=-1)
    p.add_argument("--link-factor", type=float, default=1.0)
    # imbalance
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--adapt-sweeps", type=int, default=16)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    a = p.parse_args()
    if (a.link_src >= 0) != (a.link_dst >= 0):
        p.error("--link-src and --link-dst go together")
    if a.link_src >= 0 and abs(a.link_src - a.link_dst) != 1:
        p.error("halo messages only go between neighbouring strips (|src - dst| == 1)")
    return a


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

def pad_dirichlet(u, top, bot):
    """Ghost cells: given rows above/below, and u = 0 on the left/right walls (cell-centred: -u)."""
    rows = torch.cat([top[None], u, bot[None]])
    return torch.cat([-rows[:, :1], rows, -rows[:, -1:]], 1)


class Comm:
    """Halo rows between neighbouring strips, the coarse gather/scatter, the all_reduces."""

    def __init__(self, rank, world, link=None, link_factor=1.0):
        self.rank, self.world = rank, world
        self.link, self.link_factor = link, link_factor
        self.bufs = {}
        self.secs = 0.0

    def _len(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buf(self, key, n):
        b = self.bufs.get(key)
        if b is None or b.numel() != n:
            b = self.bufs[key] = torch.zeros(n)
        return b

    def halo(self, u):
        """u (H, W) -> (H + 2, W + 2) with the neighbours' edge rows and zero (Dirichlet) ghosts."""
        H, W = u.shape
        rank, world = self.rank, self.world
        with record_function("halo_exchange"):
            t0 = time.perf_counter()
            top = bot = None
            works = []
            if rank > 0:
                sb = self._buf(("s", rank - 1, W), self._len(W, rank, rank - 1))
                sb[:W].copy_(u[0])
                works.append(dist.isend(sb, rank - 1, tag=0))
                rb = self._buf(("r", rank - 1, W), self._len(W, rank - 1, rank))
                works.append(dist.irecv(rb, rank - 1, tag=1))
                top = rb[:W]
            if rank < world - 1:
                sb = self._buf(("s", rank + 1, W), self._len(W, rank, rank + 1))
                sb[:W].copy_(u[-1])
                works.append(dist.isend(sb, rank + 1, tag=1))
                rb = self._buf(("r", rank + 1, W), self._len(W, rank + 1, rank))
                works.append(dist.irecv(rb, rank + 1, tag=0))
                bot = rb[:W]
            for w in works:
                w.wait()
            self.secs += time.perf_counter() - t0
        if rank == 0:
            top = -u[0]
        if rank == world - 1:
            bot = -u[-1]
        return pad_dirichlet(u, top, bot)

    def timed(self, fn, *a, **k):
        t0 = time.perf_counter()
        out = fn(*a, **k)
        self.secs += time.perf_counter() - t0
        return out


# --------------------------------------------------------------------------
# multigrid
# --------------------------------------------------------------------------

class Multigrid:
    def __init__(self, args, comm, heights, width, h, levels, extra_passes):
        self.a, self.comm = args, comm
        self.rank, self.world = comm.rank, comm.world
        self.heights = heights          # per level: every rank's strip height
        self.width = width              # per level
        self.h = h                      # per level spacing
        self.levels = levels
        self.extra = extra_passes       # --factor on the slow rank
        self.adapt = 0                  # extra finest-level local sweeps this step (--seq-sigma)
        self.A_dense = None
        self.coarse_n = sum(heights[-1])
        self.coarse_maxh = max(heights[-1])

    def row0(self, lev):
        return sum(self.heights[lev][: self.rank])

    # one weighted-Jacobi update from a padded array
    @staticmethod
    def _jacobi(u, P, f, h2, omega=0.8):
        nb = P[..., :-2, 1:-1] + P[..., 2:, 1:-1] + P[..., 1:-1, :-2] + P[..., 1:-1, 2:]
        return u + omega * ((nb + h2 * f) * 0.25 - u)

    def _repeat(self, fn, *xs):
        """--factor: the same sweep computed again on the slow rank, discarded."""
        if self.extra <= 0:
            return
        with torch.no_grad():
            k = int(self.extra)
            if k > 0:                      # the k extra passes as one batched computation
                fn(xs[0].expand(k, *xs[0].shape), xs[1].expand(k, *xs[1].shape), *xs[2:])
            frac = self.extra - int(self.extra)
            rows = int(round(xs[0].shape[0] * frac))
            if rows > 0:                   # (u, P, f, ...) over the first rows
                fn(xs[0][:rows], xs[1][: rows + 2], xs[2][:rows], *xs[3:])

    def smooth(self, u, f, lev, sweeps):
        h2 = self.h[lev] ** 2
        with record_function("smooth"):
            for _ in range(sweeps):
                if self.a.smoother == "jacobi":
                    P = self.comm.halo(u)
                    new = self._jacobi(u, P, f, h2)
                    self._repeat(self._jacobi, u, P, f, h2)
                    u = new
                else:
                    H, W = u.shape
                    ii = torch.arange(H).view(-1, 1) + self.row0(lev)
                    jj = torch.arange(W).view(1, -1)
                    red = ((ii + jj) % 2) == 0
                    for mask in (red, ~red):
                        P = self.comm.halo(u)
                        gs = self._jacobi(u, P, f, h2, omega=1.0)
                        self._repeat(self._jacobi, u, P, f, h2, 1.0)
                        u = torch.where(mask, gs, u)
        return u

    def local_sweeps(self, u, f, lev, n):
        """Adaptive smoother: n extra sweeps without exchange (ghost rows held from one halo)."""
        if n <= 0:
            return u
        h2 = self.h[lev] ** 2
        with record_function("smooth"):
            P = self.comm.halo(u)
            top, bot = P[0, 1:-1], P[-1, 1:-1]
            for _ in range(n):
                u = self._jacobi(u, P, f, h2)
                P = pad_dirichlet(u, -u[0] if self.rank == 0 else top,
                                  -u[-1] if self.rank == self.world - 1 else bot)
        return u

    def residual(self, u, f, lev):
        with record_function("residual"):
            P = self.comm.halo(u)
            nb = P[:-2, 1:-1] + P[2:, 1:-1] + P[1:-1, :-2] + P[1:-1, 2:]
            return f - (4 * u - nb) / self.h[lev] ** 2

    def coarse_solve(self, f):
        a, rank, world = self.a, self.rank, self.world
        hs = self.heights[-1]
        W = self.width[-1]
        with record_function("coarse_solve"):
            mine = f.new_zeros(self.coarse_maxh, W)
            mine[: f.shape[0]] = f
            glist = [torch.zeros_like(mine) for _ in range(world)] if rank == 0 else None
            self.comm.timed(dist.gather, mine, gather_list=glist, dst=0)
            slist = None
            if rank == 0:
                full = torch.cat([g[:hh] for g, hh in zip(glist, hs)], 0)
                h2 = self.h[-1] ** 2
                if a.coarse_solve == "dense":
                    if self.A_dense is None:
                        self.A_dense = poisson_matrix(full.shape[0], W, self.h[-1])
                    e = torch.linalg.solve(self.A_dense, full.reshape(-1, 1)).view_as(full)
                else:
                    e = torch.zeros_like(full)
                    for _ in range(a.coarse_sweeps):
                        e = self._jacobi(e, pad_dirichlet(e, -e[0], -e[-1]), full, h2)
                slist, o = [], 0
                for hh in hs:
                    piece = e.new_zeros(self.coarse_maxh, W)
                    piece[:hh] = e[o: o + hh]
                    slist.append(piece)
                    o += hh
            out = torch.zeros_like(mine)
            self.comm.timed(dist.scatter, out, scatter_list=slist, src=0)
        return out[: f.shape[0]]

    def prolong(self, e):
        """Bilinear (cell-centred 9/3/3/1) interpolation; needs the neighbours' coarse edge rows."""
        P = self.comm.halo(e)
        C, Up, Dn = P[1:-1, 1:-1], P[:-2, 1:-1], P[2:, 1:-1]
        Lf, Rt = P[1:-1, :-2], P[1:-1, 2:]
        f00 = (9 * C + 3 * Up + 3 * Lf + P[:-2, :-2]) / 16
        f01 = (9 * C + 3 * Up + 3 * Rt + P[:-2, 2:]) / 16
        f10 = (9 * C + 3 * Dn + 3 * Lf + P[2:, :-2]) / 16
        f11 = (9 * C + 3 * Dn + 3 * Rt + P[2:, 2:]) / 16
        fine = torch.stack([torch.stack([f00, f01], -1), torch.stack([f10, f11], -1)], 1)
        return fine.reshape(2 * e.shape[0], 2 * e.shape[1])

    def vcycle(self, u, f, lev=0):
        if lev == self.levels:
            return self.coarse_solve(f)
        u = self.smooth(u, f, lev, self.a.pre)
        if lev == 0 and self.adapt > 0:
            u = self.local_sweeps(u, f, lev, self.adapt)
        r = self.residual(u, f, lev)
        with record_function("restrict"):
            rc = F.avg_pool2d(r[None, None], 2)[0, 0]
        ec = self.vcycle(torch.zeros_like(rc), rc, lev + 1)
        with record_function("prolong"):
            u = u + self.prolong(ec)
        return self.smooth(u, f, lev, self.a.post)


def poisson_matrix(H, W, h):
    n = H * W
    A = torch.zeros(n, n)
    idx = torch.arange(n).view(H, W)
    A[idx.reshape(-1), idx.reshape(-1)] = 4.0
    for a_, b_ in ((idx[:-1], idx[1:]), (idx[:, :-1], idx[:, 1:])):
        A[a_.reshape(-1), b_.reshape(-1)] = -1.0
        A[b_.reshape(-1), a_.reshape(-1)] = -1.0
    for edge in (idx[0], idx[-1], idx[:, 0], idx[:, -1]):   # walls: ghost = -u
        A[edge, edge] += 1.0
    return A / h ** 2


# --------------------------------------------------------------------------
# model and data
# --------------------------------------------------------------------------

class SourceNet(nn.Module):
    """(x, y, f0/s) with 1 context row above/below per conv -> source correction (strip rows)."""

    def __init__(self, width, depth):
        super().__init__()
        chans = [3] + [width] * (depth - 1)
        self.convs = nn.ModuleList(nn.Conv2d(c, width, 3, padding=(0, 1)) for c in chans)
        self.head = nn.Conv2d(width, 1, 1)
        self.depth = depth

    def forward(self, feats):          # (1, 3, H + 2 * depth, W)
        z = feats
        for conv in self.convs:
            z = torch.tanh(conv(z))
        return self.head(z)[0, 0]


def make_problem(args, step, rows, row0, total_rows, N, h, ctx):
    """The step's problem on global rows [row0 - ctx, row0 + rows + ctx) (analytic)."""
    g = torch.Generator().manual_seed(args.seed * 100_003 + step)
    K = args.modes
    amp = torch.randn(K, K, generator=g, dtype=torch.float64)
    kk = torch.arange(1, K + 1, dtype=torch.float64)
    amp = amp / (kk.view(-1, 1) ** 2 + kk.view(1, -1) ** 2)
    Ly = total_rows * h
    x = (torch.arange(N, dtype=torch.float64) + 0.5) * h
    y = (torch.arange(row0 - ctx, row0 + rows + ctx, dtype=torch.float64) + 0.5) * h
    sx = torch.sin(math.pi * kk.view(-1, 1) * x.view(1, -1))           # (K, W)
    sy = torch.sin(math.pi * kk.view(-1, 1) * y.view(1, -1) / Ly)      # (K, rows)
    lam = (4 / h ** 2) * (torch.sin(math.pi * kk * h / 2).view(1, -1) ** 2
                          + torch.sin(math.pi * kk * h / (2 * Ly)).view(-1, 1) ** 2)  # (ky, kx)
    ustar = torch.einsum("ab,ai,bj->ij", amp.t(), sy, sx)              # amp[kx, ky]
    ftrue = torch.einsum("ab,ai,bj->ij", amp.t() * lam, sy, sx)
    X, Y = torch.meshgrid(y / Ly, x, indexing="ij")
    m = 0.4 * torch.sin(2 * math.pi * Y) * torch.cos(math.pi * X) + 0.2 * X
    f0 = ftrue * (1 + m)
    feats = torch.stack([Y, X, f0 / 100.0]).float()[None]
    sl = slice(ctx, ctx + rows)
    return feats, f0[sl].float(), ustar[sl].float()


def start_hog(stop):
    def spin():
        a = torch.randn(192, 192)
        b = torch.randn(192, 192) / 14.0
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=spin, name="busy-neighbour", daemon=True)
    th.start()
    return th


def write_pgm(path, u, every=4):
    img = u[::every, ::every]
    lo, hi = float(img.min()), float(img.max())
    q = ((img - lo) / max(hi - lo, 1e-12) * 255).clamp(0, 255).to(torch.uint8)
    with open(path, "wb") as fh:
        fh.write(f"P5 {q.shape[1]} {q.shape[0]} 255\n".encode())
        fh.write(q.numpy().tobytes())


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank

    N = args.grid
    base = N // world
    if base % args.coarse_rows or (base // args.coarse_rows) & (base // args.coarse_rows - 1):
        raise SystemExit("--grid / 4 must be --coarse-rows times a power of two")
    levels = int(round(math.log2(base // args.coarse_rows)))
    unit = 2 ** levels
    if N % unit:
        raise SystemExit("--grid must be divisible by 2**levels")
    heights0 = [base] * world
    if 0 <= args.big_rank < world:
        heights0[args.big_rank] = max(unit, int(round(base * args.big / unit)) * unit)
    heights = [[hh // 2 ** l for hh in heights0] for l in range(levels + 1)]
    widths = [N // 2 ** l for l in range(levels + 1)]
    h = 1.0 / N                            # cell-centred: u = 0 on the walls, half a cell out
    hs = [h * 2 ** l for l in range(levels + 1)]
    total_rows = sum(heights0)
    row0 = sum(heights0[:rank])
    rows = heights0[rank]

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, world, link, args.link_factor)
    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    mg = Multigrid(args, comm, heights, widths, hs, levels, extra)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="mg_pinn_")
    dist.broadcast_object_list(tmp, src=0)
    log_dir = tmp[0]
    log_path = os.path.join(log_dir, f"residual_rank{rank}.log")

    torch.manual_seed(args.seed)           # the same initial weights on every rank
    net = SourceNet(args.width, args.depth)
    params = list(net.parameters())
    opt = (torch.optim.Adam(params, lr=args.lr) if args.optim == "adam"
           else torch.optim.SGD(params, lr=args.lr * 30, momentum=0.9))
    n_params = sum(q.numel() for q in params)
    n_total = float(total_rows * N)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[mg-pinn] world={world} grid={N}x{N} strips={heights0} levels={levels} "
              f"coarse={sum(heights[-1])}x{widths[-1]} ({args.coarse_solve}) vcycles={args.vcycles} "
              f"smoother={args.smoother} pre/post={args.pre}/{args.post} params={n_params}", flush=True)

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

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    feats, f0, ustar = make_problem(args, step, rows, row0, total_rows, N, h, args.depth)
                    if args.seq_sigma > 0:
                        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
                        z = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
                        mg.adapt = int(round(args.adapt_sweeps * min(4.0, max(0.25, z))))

                with record_function("model_forward"):
                    c = net(feats) * 100.0
                    if extra > 0:
                        with torch.no_grad():
                            if int(extra) > 0:     # the extra passes batched
                                net(feats.expand(int(extra), *feats.shape[1:]))
                            part = int(round(rows * (extra - int(extra))))
                            if part > 0:
                                net(feats[:, :, : part + 2 * args.depth])

                f = f0 + c.detach()
                u = torch.zeros_like(f)
                for _ in range(args.vcycles):
                    with record_function("vcycle"):
                        u = mg.vcycle(u, f)

                with record_function("loss"):
                    err = u - ustar
                    gu = 2.0 * err / n_total

                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    with record_function("adjoint_vcycle"):
                        lam = mg.vcycle(torch.zeros_like(gu), gu)
                    (c * lam).sum().backward()

                with record_function("grad_allreduce"):
                    flat = torch.cat([q.grad.reshape(-1) for q in params])
                    comm.timed(dist.all_reduce, flat)
                    flat /= world
                    o = 0
                    for q in params:
                        q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                        o += q.numel()
                with record_function("optimizer"):
                    opt.step()

                with record_function("log_residual"):
                    r = mg.residual(u, f, 0)
                    stats = torch.stack([(r.double() ** 2).sum(), (err.double() ** 2).sum(),
                                         (f.double() ** 2).sum()])
                    comm.timed(dist.all_reduce, stats)
                    if slow and args.plot_sleep_ms > 0:
                        time.sleep(args.plot_sleep_ms / 1000.0)
                    rel = math.sqrt(stats[0].item() / max(stats[2].item(), 1e-30))
                    mse = stats[1].item() / n_total
                    with open(log_path, "a") as fh:
                        fh.write(f"step {step} rank {rank} rel_res {rel:.3e} mse {mse:.4e} "
                                 f"adapt {mg.adapt}\n")
                    write_pgm(os.path.join(log_dir, f"u_rank{rank}.pgm"), u)

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"step {step:3d} mse {mse:.4e} rel_res {rel:.2e} "
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
        print("median busy ms (outside halos, gather/scatter, all_reduces) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
        summary = os.environ.get("MGP_SUMMARY")     # optional: one line per run for the sweep notes
        if summary:
            with open(summary, "a") as fh:
                fh.write(f"{os.path.abspath(args.out)} {' '.join(sys.argv[1:])} | step " +
                         " ".join(f"{1000 * s:.0f}" for s, _ in allmed) + " | busy " +
                         " ".join(f"{1000 * b:.0f}" for _, b in allmed) + "\n")
    dist.barrier()
    if rank == 0:
        shutil.rmtree(log_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
