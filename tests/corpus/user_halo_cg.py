"""Implicit heat equation on a domain-decomposed 2D grid: distributed CG with halo exchange.

(measurement table at the end of this docstring)

What it is
----------
The kind of solver an HPC person writes in torch when the rest of the pipeline is torch: the
heat equation u_t = lap(u) + f(x, y, t) on the unit square with Dirichlet boundary data
g(x, y, t), backward Euler in time, the 5-point Laplacian on an n x n interior grid (``--grid``,
h = 1/(n+1)). Every time step solves

    (I - dt lap_h) u^{k+1} = u^k + dt f^{k+1} (+ the boundary data folded in)

i.e. A = (1 + 4a) I - a (up + down + left + right), a = dt / h^2, with a fixed number of
(preconditioned) conjugate-gradient iterations (``--iters``, 20). Beside it a small ML
surrogate (a 3-layer conv net: 3x3, 3x3, 1x1, ``--hidden`` channels, ``--surrogate``) learns
the per-step increment u^{k+1} - u^k from (u^k, f^{k+1}); its prediction warm-starts CG. It is
trained data-parallel with a hand-rolled gradient all-reduce, so the job looks like the "learned
initial guess" PINN/surrogate papers.

The grid is split over the 4 ranks (gloo, CPU, ``init_process_group("gloo")``):

* ``--decomp strips`` (default): 4 horizontal strips of rows, rank r above rank r+1; each rank
  has up to 2 neighbours (up/down), halos are whole grid rows (n doubles);
* ``--decomp blocks``: a 2 x 2 process grid (rank = 2 * row + col), each rank has 2
  neighbours (one vertical, one horizontal); halos are half-rows and half-columns.

Each rank keeps its search direction p in a padded (h+2, w+2) array; the halo rows/columns come
from the neighbours, the physical boundary halos stay 0 (the boundary data is in the rhs).

Per step (one ``ProfilerStep#N``), user ranges:

* ``sleep`` (fault only, ``--sleep-ms``);
* ``assemble``: ``load_forcing`` (evaluates this step's source term and boundary data on the
  rank's subdomain: a moving Gaussian heat source and a time-varying hot edge; the slow data
  path fault sleeps here), ``rhs`` (u^k + dt f + a g on the cells next to the boundary),
  ``predict`` (surrogate forward, no grad -> x0);
* ``solve``: r0 = b - A x0 (one ``halo`` + ``matvec``), z0 = M r0 (``precond``), one ``dot``;
  then ``--iters`` x [``halo`` -> ``matvec`` (Ap) -> ``dot`` (p.Ap) -> ``update`` (x, r) ->
  ``precond`` (z = M r) -> ``dot`` (r.z) -> ``update`` (p)]. The preconditioner (``--precond``):
  ``bjacobi`` (default) is block Jacobi with the local block solved approximately by
  ``--inner`` (3) Jacobi sweeps on the rank's own subdomain (no communication; inner - 1 local
  stencil applications per iteration), ``jacobi`` the diagonal, ``none`` plain CG;
* ``train`` (with ``--surrogate``): ``forward``, ``backward``, ``allreduce_grad`` (one
  all_reduce of the flattened grads, averaged), ``optimizer`` (Adam);
* ``output``: ``diagnostics`` (one all_reduce of 5 doubles: |r|^2, |u^{k+1}-u^k|^2, sum u, n,
  |b|^2; rank 0 prints the relative residual) and ``write_snapshot`` every ``--snap-every`` steps
  (``torch.save`` of the rank's float32 subdomain into a temporary directory, removed at exit).

Communication per step and rank (defaults: strips, n=640, 20 iterations): 21 halo exchanges
(``dist.isend``/``dist.irecv`` of one row per neighbour and direction, 5 KB each; with
``--p2p batch`` the same as ``dist.batch_isend_irecv``), 41 scalar ``all_reduce`` s (2 per
iteration + the initial r.z), 1 all_reduce of the surrogate grads (745 floats) and 1 of the
diagnostics. Every iteration is a synchronisation point: a rank late to its halo or its dot
makes its neighbours (halo) and then everyone (dot) wait.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` per time step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. Each step is timed with ``time.perf_counter``; at the end
rank 0 prints every rank's median step time over the traced steps, and its median time outside
communication ("busy": the step minus the time in all_reduce calls and halo waits).

Flags
-----
Common: ``--out DIR`` (required), ``--steps N`` time steps (10; 8 traced), ``--seed S`` (initial
field and source path), ``--shapes``.

Healthy knobs: ``--grid`` (n, 640), ``--decomp {strips,blocks}``, ``--iters`` (20), ``--dt`` (2e-5),
``--precond {bjacobi,jacobi,none}``, ``--inner`` (3), ``--stencil {slice,conv}`` (the matvec as
4 shifted-slice adds, or one ``F.conv2d`` with the 3x3 stencil kernel), ``--p2p {isend,batch}``,
``--dtype {float64,float32}``, ``--surrogate/--no-surrogate``, ``--hidden`` (8 channels),
``--lr``, ``--snap-every`` (1; 0 = never).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every local stencil application of that rank (the CG matvec
  and the preconditioner's sweeps) is done F times (F - 1 extra full applications into a
  scratch array, discarded; the fractional part over that fraction of the rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` at the start of each step, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow data path: the rank's read of the step's forcing/boundary data
  (``load_forcing``) takes MS longer (sleep inside it);
* ``--write-sleep-ms MS`` (family fault): a slow storage writer: the snapshot write
  (``write_snapshot``) sleeps MS before ``torch.save``;
* ``--hog``: a busy neighbour thread multiplying 256x256 matrices for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X``: every halo message that rank A sends to rank B
  (they must be neighbours) carries X times the bytes (the row plus zero padding, in the same
  isend; B receives the whole message and keeps the row). No ``--slow-rank`` needed.

Imbalance without a fault:

* ``--big-rank K --big X`` (strips only): rank K's strip has X times as many rows as the others
  (the n rows are split in proportion 1 : .. : X : .. : 1);
* ``--seq-sigma S`` (bjacobi only): each rank's number of inner Jacobi sweeps per step is
  ``max(1, round(inner * lognormal(0, S)))``, drawn from (seed, rank, step), so the local
  preconditioner work differs by rank and step (the global iteration count stays fixed).

Measurements
------------
2-core box, 4 ranks, 10 steps (8 timed), shared the whole time with another helper's 4-process
jobs and an analysis process, so a healthy default run ranged 316-750 ms a step from one run to
the next (335-365 ms when the box was quiet). Each fault run was run right after a healthy
default run ("base"). Steps: the per-rank medians are within ~2% of each other in every run (every
CG iteration synchronises everyone), so one number is given; "busy" is the per-rank median time
outside all_reduce calls and halo waits, slowed/big rank vs the others.

  setting (rank)                          base ms  step ms  change   busy slow / others ms
  healthy default                            -     335-367     -      165-200
  healthy --decomp blocks                    -     331-542     -      145-215
  healthy --stencil conv --dtype float32 --p2p batch   370-615  -     140-210
  healthy --grid 512 --iters 12 --shapes     -     300-350     -      114-143
  healthy --grid 768 --precond none --no-surrogate  211-353     -      77-93
  healthy --grid 512 --iters 30              -     317-498     -      134-173
  --factor 6 (r1)                          349      420     +20%     265 / 171
  --factor 6 (r1)                          345      430     +24%     262 / 178
  --factor 8 (r0)                          345      440     +27%     329 / 175
  --factor 8 (r1)                          340      610     +79%     373 / 197   (load rose)
  --factor 10 (r0)                         340      700    +106%     443 / 205   (load rose)
  --factor 10 (r1)                         540      703     +30%     404 / 200
  --decomp blocks --factor 6 (r3)          331      412     +24%     274 / 164
  --decomp blocks --factor 8 (r3)          347      750    +116%     391 / 214   (load rose)
  --grid 512 --iters 30 --factor 8 (r2)    338      420     +24%     256 / 150
  --grid 512 --iters 30 --factor 8 (r2)    498      658     +32%     287 / 162
  --sleep-ms 250 (r3)                      355      577     +63%     419 / 153
  --sleep-ms 250 (r3)                      317      586     +85%     423 / 156
  --sleep-ms 200 (r3)                      579      730     +26%     411 / 186
  --data-sleep-ms 250 (r2)                 355      589     +66%     415 / 172
  --data-sleep-ms 250 (r2)                 317      586     +85%     411 / 171
  --data-sleep-ms 250 (r2)                 579      703     +21%     455 / 204
  --write-sleep-ms 250 (r1)                345      595     +72%     415 / 172
  --write-sleep-ms 200 (r1)                485      627     +29%     390 / 196
  --hog (r0)                               345      655     +90%     285 / 181
  --hog (r0)                               485      943     +94%     436 / 216
  --link 1->2 x4096 (21 MB a message)      360      780    +117%     r1 260 / 218
  --link 1->2 x4096                        485      525      +8%     r1 225 / 182
  --link 1->2 x4096                        567      920     +62%     r1 313 / 224
  --big-rank 3 --big 3                     345      330      -4%     227 / 125
  --big-rank 3 --big 3                     401      410      +2%     272 / 119
  --seq-sigma 0.8                          345      400-655    -      varies by rank and step

Reading: the stencil is a small share of a rank's step here (the 5-point stencil on a 160 x 640
strip is ~0.2 ms; most of the busy time is the per-op and profiler overhead of ~40 small ops an
iteration and the surrogate's training), so --factor needs 6-10 to cost 20-30% of the step;
the slowed rank's busy time shows it in every run. A sleep costs the step less than its length
on a quiet box and much less under load (the other ranks and the neighbour's jobs use the CPU
while it sleeps); 250 ms cost 63-85% quiet, 21% loaded. The heavy link costs the sender's and
receiver's halo waits and, through the next dot all_reduce, everyone. An uneven partition
(--big 3) shows in the busy time, not in the step time: on 2 shared cores the total work is
what counts, and the other ranks' strips shrank. --shapes is costly in this job (thousands of
small ops a step): one run with the default grid took 1207 ms a step against 336 ms without;
with --grid 512 --iters 12 it is ~300-350 ms. Wall per run: 8-18 s; traces ~8 MB per rank at the
defaults (~12 MB with --factor 8, 20 MB with --grid 512 --iters 30 --factor 8). The physics: the
relative residual after 20 block-Jacobi CG iterations is 1.6e-4 (step 0) to 6e-5 (step 9) at the
defaults (a = dt/h^2 = 8.2); the surrogate's loss falls ~10x over 10 steps (55 -> 5.7; its
prediction starts CG from u^k + du).
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
    p.add_argument("--steps", type=int, default=10, help="time steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    # problem / solver
    p.add_argument("--grid", type=int, default=640, help="interior grid points per side (n)")
    p.add_argument("--decomp", choices=["strips", "blocks"], default="strips")
    p.add_argument("--iters", type=int, default=20, help="CG iterations per time step")
    p.add_argument("--dt", type=float, default=2e-5)
    p.add_argument("--precond", choices=["bjacobi", "jacobi", "none"], default="bjacobi")
    p.add_argument("--inner", type=int, default=3, help="Jacobi sweeps of the block preconditioner")
    p.add_argument("--stencil", choices=["slice", "conv"], default="slice")
    p.add_argument("--p2p", choices=["isend", "batch"], default="isend")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--surrogate", dest="surrogate", action="store_true", default=True)
    p.add_argument("--no-surrogate", dest="surrogate", action="store_false")
    p.add_argument("--hidden", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--snap-every", type=int, default=1)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--write-sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--link-src", type=int, default=-1)
    p.add_argument("--link-dst", type=int, default=-1)
    p.add_argument("--link-factor", type=float, default=1.0)
    # imbalance
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    a = p.parse_args()
    if a.big_rank >= 0 and a.decomp != "strips":
        p.error("--big-rank needs --decomp strips")
    if a.seq_sigma > 0 and a.precond != "bjacobi":
        p.error("--seq-sigma varies the block preconditioner's sweeps: needs --precond bjacobi")
    if (a.link_src >= 0) != (a.link_dst >= 0):
        p.error("--link-src and --link-dst go together")
    return a


# --------------------------------------------------------------------------
# decomposition
# --------------------------------------------------------------------------

class Subdomain:
    """This rank's block of the n x n interior grid and its neighbours."""

    def __init__(self, n, rank, world, decomp, big_rank=-1, big=1.0):
        if decomp == "strips":
            w = [big if r == big_rank else 1.0 for r in range(world)]
            edges = [round(n * sum(w[:r]) / sum(w)) for r in range(world + 1)]
            self.r0, self.r1 = edges[rank], edges[rank + 1]
            self.c0, self.c1 = 0, n
            self.nbr = {}
            if rank > 0:
                self.nbr["up"] = rank - 1
            if rank < world - 1:
                self.nbr["down"] = rank + 1
        else:
            if world != 4:
                raise SystemExit("--decomp blocks is a 2 x 2 process grid: run 4 ranks")
            pr, pc = divmod(rank, 2)
            half = n // 2
            self.r0, self.r1 = (0, half) if pr == 0 else (half, n)
            self.c0, self.c1 = (0, half) if pc == 0 else (half, n)
            self.nbr = {("down" if pr == 0 else "up"): (1 - pr) * 2 + pc,
                        ("right" if pc == 0 else "left"): pr * 2 + (1 - pc)}
        self.h, self.w = self.r1 - self.r0, self.c1 - self.c0
        self.n = n


OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
TAG = {"up": 1, "down": 2, "left": 3, "right": 4}   # tag = the direction the message travels


class Halo:
    """Boundary exchange of a padded (h+2, w+2) array with the neighbours."""

    def __init__(self, sub, rank, dtype, p2p, link=None, link_factor=1.0):
        self.sub, self.rank, self.p2p = sub, rank, p2p
        self.send, self.recv, self.keep = {}, {}, {}
        for side, peer in sub.nbr.items():
            length = sub.w if side in ("up", "down") else sub.h
            out_len = in_len = length
            if link is not None and link_factor > 1:
                if (rank, peer) == link:
                    out_len = max(length, round(length * link_factor))
                if (peer, rank) == link:
                    in_len = max(length, round(length * link_factor))
            self.send[side] = torch.zeros(out_len, dtype=dtype)
            self.recv[side] = torch.zeros(in_len, dtype=dtype)
            self.keep[side] = length
        self.wait_s = 0.0

    def exchange(self, P):
        interior = P[1:-1, 1:-1]
        edge = {"up": interior[0], "down": interior[-1],
                "left": interior[:, 0], "right": interior[:, -1]}
        ops = []
        for side, peer in self.sub.nbr.items():
            self.send[side][: self.keep[side]].copy_(edge[side])
            # a message to my "up" neighbour travels up; what I get from it travels down
            if self.p2p == "batch":
                ops.append(dist.P2POp(dist.irecv, self.recv[side], peer, tag=TAG[OPPOSITE[side]]))
                ops.append(dist.P2POp(dist.isend, self.send[side], peer, tag=TAG[side]))
            else:
                ops.append(dist.irecv(self.recv[side], peer, tag=TAG[OPPOSITE[side]]))
                ops.append(dist.isend(self.send[side], peer, tag=TAG[side]))
        t = time.perf_counter()
        reqs = dist.batch_isend_irecv(ops) if self.p2p == "batch" else ops
        for q in reqs:
            q.wait()
        self.wait_s += time.perf_counter() - t
        for side in self.sub.nbr:
            buf = self.recv[side][: self.keep[side]]
            if side == "up":
                P[0, 1:-1].copy_(buf)
            elif side == "down":
                P[-1, 1:-1].copy_(buf)
            elif side == "left":
                P[1:-1, 0].copy_(buf)
            else:
                P[1:-1, -1].copy_(buf)


# --------------------------------------------------------------------------
# operator, preconditioner
# --------------------------------------------------------------------------

class Stencil:
    """A = (1 + 4a) I - a * (4 neighbours) on a padded array; --factor repeats it."""

    def __init__(self, a, dtype, kind, factor=1.0):
        self.a, self.c, self.kind = a, 1.0 + 4.0 * a, kind
        k = torch.tensor([[0.0, -a, 0.0], [-a, 1.0 + 4.0 * a, -a], [0.0, -a, 0.0]], dtype=dtype)
        self.kernel = k.view(1, 1, 3, 3)
        extra = max(0.0, factor - 1.0)
        self.extra_full, self.extra_frac = int(extra), extra - int(extra)

    def _apply(self, P):
        if self.kind == "conv":
            return F.conv2d(P.unsqueeze(0).unsqueeze(0), self.kernel).squeeze(0).squeeze(0)
        s = P[:-2, 1:-1] + P[2:, 1:-1]
        s += P[1:-1, :-2]
        s += P[1:-1, 2:]
        return torch.add(P[1:-1, 1:-1] * self.c, s, alpha=-self.a)

    def __call__(self, P):
        out = self._apply(P)
        if self.extra_full or self.extra_frac:     # --factor: the same stencil again, discarded
            for _ in range(self.extra_full):
                self._apply(P)
            rows = int(round((P.shape[0] - 2) * self.extra_frac))
            if rows > 0:
                self._apply(P[: rows + 2])
        return out


class BlockJacobi:
    """z ~ A_loc^{-1} r by `sweeps` Jacobi sweeps on the rank's own block (zero halos)."""

    def __init__(self, stencil, h, w, dtype):
        self.A, self.d = stencil, stencil.c
        self.Z = torch.zeros(h + 2, w + 2, dtype=dtype)

    def __call__(self, r, sweeps):
        z = self.Z[1:-1, 1:-1]
        torch.div(r, self.d, out=z)
        for _ in range(sweeps - 1):
            res = r - self.A(self.Z)
            z.add_(res, alpha=1.0 / self.d)
        return z.clone()


# --------------------------------------------------------------------------
# the physics: initial field, source, boundary data
# --------------------------------------------------------------------------

class Problem:
    def __init__(self, sub, seed, dtype):
        n = sub.n
        hgrid = 1.0 / (n + 1)
        self.h = hgrid
        g = torch.Generator().manual_seed(seed)
        self.bumps = torch.rand(6, 4, generator=g, dtype=torch.float64)  # cx, cy, width, amp
        self.phase = float(torch.rand((), generator=g)) * 2 * math.pi
        self.omega = 40.0 + 40.0 * float(torch.rand((), generator=g))
        ys = (torch.arange(sub.r0, sub.r1, dtype=torch.float64) + 1) * hgrid
        xs = (torch.arange(sub.c0, sub.c1, dtype=torch.float64) + 1) * hgrid
        self.Y, self.X = torch.meshgrid(ys, xs, indexing="ij")
        self.xs, self.ys = xs, ys
        self.sub, self.dtype = sub, dtype

    def initial(self):
        u = torch.zeros_like(self.X)
        for cx, cy, wd, amp in self.bumps.tolist():
            u += amp * torch.exp(-((self.X - cx) ** 2 + (self.Y - cy) ** 2) / (0.005 + 0.02 * wd))
        return u.to(self.dtype)

    def forcing(self, t):
        cx = 0.5 + 0.3 * math.cos(self.omega * t + self.phase)
        cy = 0.5 + 0.3 * math.sin(self.omega * t + self.phase)
        f = 200.0 * torch.exp(-((self.X - cx) ** 2 + (self.Y - cy) ** 2) / 0.004)
        return f.to(self.dtype)

    def boundary(self, t):
        """Dirichlet data on the physical edges this block touches (None where interior)."""
        n, s = self.sub.n, self.sub
        hot = 1.0 + 0.5 * math.sin(30.0 * t)
        g = {}
        if s.r0 == 0:                        # y = 0: a hot edge
            g["up"] = (hot * torch.sin(math.pi * self.xs)).to(self.dtype)
        if s.r1 == n:                        # y = 1: cold
            g["down"] = torch.zeros(s.w, dtype=self.dtype)
        if s.c0 == 0:                        # x = 0: warm at the bottom
            g["left"] = (0.5 * self.ys).to(self.dtype)
        if s.c1 == n:
            g["right"] = torch.zeros(s.h, dtype=self.dtype)
        return g


class Surrogate(nn.Module):
    """(u^k, f^{k+1}) -> predicted increment; a tiny conv net."""

    def __init__(self, hidden):
        super().__init__()
        self.c1 = nn.Conv2d(2, hidden, 3, padding=1)
        self.c2 = nn.Conv2d(hidden, hidden, 3, padding=1)
        self.c3 = nn.Conv2d(hidden, 1, 1)

    def forward(self, x):
        return self.c3(torch.tanh(self.c2(torch.tanh(self.c1(x)))))


def start_hog(stop):
    def spin():
        a = torch.randn(256, 256)
        b = torch.randn(256, 256) / 16.0
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=spin, name="hog", daemon=True)
    th.start()
    return th


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    dtype = torch.float64 if args.dtype == "float64" else torch.float32

    sub = Subdomain(args.grid, rank, world, args.decomp, args.big_rank, args.big)
    link = None
    if args.link_src >= 0:
        link = (args.link_src, args.link_dst)
        ref = Subdomain(args.grid, args.link_src, world, args.decomp, args.big_rank, args.big)
        if args.link_dst not in ref.nbr.values():
            raise SystemExit(f"--link-src {args.link_src} --link-dst {args.link_dst}: "
                             f"not neighbours in the {args.decomp} decomposition")
    halo = Halo(sub, rank, dtype, args.p2p, link, args.link_factor)

    prob = Problem(sub, args.seed, dtype)
    a = args.dt / prob.h ** 2
    A = Stencil(a, dtype, args.stencil, args.factor if slow else 1.0)
    M = BlockJacobi(A, sub.h, sub.w, dtype)

    torch.manual_seed(args.seed)             # same surrogate weights on every rank
    net = Surrogate(args.hidden) if args.surrogate else None
    opt = torch.optim.Adam(net.parameters(), lr=args.lr) if net is not None else None

    u = prob.initial()
    P = torch.zeros(sub.h + 2, sub.w + 2, dtype=dtype)   # the search direction, with halos
    p = P[1:-1, 1:-1]
    n_global = args.grid * args.grid
    snap_dir = tempfile.mkdtemp(prefix=f"halo_cg_snap_r{rank}_")

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    comm = [0.0]

    def allreduce(t):
        tc = time.perf_counter()
        dist.all_reduce(t)
        comm[0] += time.perf_counter() - tc
        return t

    def dot(x, y):
        with record_function("dot"):
            return allreduce(torch.sum(x * y).reshape(1)).item()

    def precond(r, sweeps):
        with record_function("precond"):
            if args.precond == "none":
                return r.clone()
            if args.precond == "jacobi":
                return r / A.c
            return M(r, sweeps)

    if rank == 0:
        print(f"[halo-cg] world={world} n={args.grid} decomp={args.decomp} iters={args.iters} "
              f"a=dt/h^2={a:.2f} precond={args.precond}(inner {args.inner}) stencil={args.stencil} "
              f"p2p={args.p2p} dtype={args.dtype} surrogate={args.surrogate}", flush=True)
    print(f"  rank {rank}: rows {sub.r0}:{sub.r1} cols {sub.c0}:{sub.c1} "
          f"neighbours {sub.nbr}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    active = max(1, args.steps - 2)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm[0] = 0.0
                halo.wait_s = 0.0
                t_new = (step + 1) * args.dt
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                sweeps = args.inner
                if args.seq_sigma > 0:
                    gs = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
                    z = torch.randn((), generator=gs, dtype=torch.float64).item()
                    sweeps = max(1, round(args.inner * math.exp(args.seq_sigma * z)))

                with record_function("assemble"):
                    with record_function("load_forcing"):
                        if slow and args.data_sleep_ms > 0:
                            time.sleep(args.data_sleep_ms / 1000.0)
                        f = prob.forcing(t_new)
                        gb = prob.boundary(t_new)
                    with record_function("rhs"):
                        b = u + args.dt * f
                        for side, gv in gb.items():
                            if side == "up":
                                b[0].add_(gv, alpha=a)
                            elif side == "down":
                                b[-1].add_(gv, alpha=a)
                            elif side == "left":
                                b[:, 0].add_(gv, alpha=a)
                            else:
                                b[:, -1].add_(gv, alpha=a)
                    with record_function("predict"):
                        if net is not None:
                            feats = torch.stack((u, args.dt * f)).float().unsqueeze(0)
                            with torch.no_grad():
                                du = net(feats)[0, 0].to(dtype)
                            x = u + du
                        else:
                            x = u.clone()

                with record_function("solve"):
                    p.copy_(x)
                    with record_function("halo"):
                        halo.exchange(P)
                    with record_function("matvec"):
                        r = b - A(P)
                    z = precond(r, sweeps)
                    rz = dot(r, z)
                    p.copy_(z)
                    for it in range(args.iters):
                        with record_function("halo"):
                            halo.exchange(P)
                        with record_function("matvec"):
                            Ap = A(P)
                        pAp = dot(p, Ap)
                        with record_function("update"):
                            alpha = rz / pAp
                            x.add_(p, alpha=alpha)
                            r.sub_(Ap, alpha=alpha)
                        z = precond(r, sweeps)
                        rz_new = dot(r, z)
                        with record_function("update"):
                            beta = rz_new / rz
                            rz = rz_new
                            p.mul_(beta).add_(z)

                if net is not None:
                    with record_function("train"):
                        target = (x - u).float().unsqueeze(0).unsqueeze(0)
                        with record_function("forward"):
                            pred = net(feats)
                            loss = F.mse_loss(pred, target) * 1e3
                        with record_function("backward"):
                            opt.zero_grad(set_to_none=False)
                            loss.backward()
                        with record_function("allreduce_grad"):
                            flat = torch.cat([q.grad.reshape(-1) for q in net.parameters()])
                            allreduce(flat)
                            flat /= world
                            off = 0
                            for q in net.parameters():
                                k = q.numel()
                                q.grad.copy_(flat[off: off + k].view_as(q))
                                off += k
                        with record_function("optimizer"):
                            opt.step()

                with record_function("output"):
                    with record_function("diagnostics"):
                        diag = torch.stack((torch.sum(r * r).double(),
                                            torch.sum((x - u) ** 2).double(),
                                            x.sum().double(),
                                            torch.tensor(float(sub.h * sub.w), dtype=torch.float64),
                                            torch.sum(b * b).double()))
                        allreduce(diag)
                    u = x
                    if args.snap_every > 0 and (step + 1) % args.snap_every == 0:
                        with record_function("write_snapshot"):
                            if slow and args.write_sleep_ms > 0:
                                time.sleep(args.write_sleep_ms / 1000.0)
                            torch.save({"step": step, "t": t_new, "rows": (sub.r0, sub.r1),
                                        "cols": (sub.c0, sub.c1), "u": u.float()},
                                       os.path.join(snap_dir, f"u_{step:04d}.pt"))
                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm[0] - halo.wait_s)
                if rank == 0:
                    print(f"step {step:3d} t={t_new:.2e} "
                          f"|r|/|b|={math.sqrt(diag[0].item() / diag[4].item()):.2e} "
                          f"|du|={math.sqrt(diag[1].item() / n_global):.3e} "
                          f"mean u={diag[2].item() / diag[3].item():.4f} "
                          f"{'loss %.4f ' % loss.item() if net is not None else ''}"
                          f"sweeps {sweeps} t {1000 * step_times[-1]:.1f} ms", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()
        shutil.rmtree(snap_dir, ignore_errors=True)

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    med = (statistics.median(traced), statistics.median(busy))
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * m[0]:.1f}" for r, m in enumerate(allmed)), flush=True)
        print("median busy ms (outside all_reduce and halo waits) per rank: " +
              " ".join(f"r{r}={1000 * m[1]:.1f}" for r, m in enumerate(allmed)), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    # leave right away: now and then a rank that had finished everything aborted in the
    # interpreter's teardown ("terminate called without an active exception")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
