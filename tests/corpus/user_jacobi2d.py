"""A learned 2D stencil (a small conv net stepping an advection-diffusion field) trained on a 2x2 domain decomposition.

(calibration table at the end of this docstring)

What it is
----------
A neural surrogate of a 2D advection-diffusion ("heat with a wind") solver: a small fully
convolutional net (``--layers`` 3x3 ``Conv2d`` layers, ``--channels`` wide, GELU between)
reads the field u and the two velocity components (vx, vy) of a cell's neighbourhood and
predicts the increment, u_next = u + net(u, vx, vy). Trained on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``) with 2D domain decomposition: the
global ``--grid`` x ``--grid`` field (256 x 256) is cut into a 2x2 process grid of tiles
(128 x 128 each), rank = 2 * row + col; rank 0 holds the north-west tile, 1 the north-east,
2 the south-west, 3 the south-east. The domain is not periodic (zero Dirichlet walls), so
every rank has exactly one row neighbour (east/west edge: 0 <-> 1, 2 <-> 3) and one column
neighbour (north/south edge: 0 <-> 2, 1 <-> 3).

The convolutions have no padding of their own: before each conv layer the rank pads its
activation tile by one cell with ``HaloPad`` (a hand-written ``autograd.Function``):

* forward ("halo_exchange"): phase 1 with the row neighbour: each sends the one column
  facing the other ((B, C, T, 1) floats) and receives the other's, the wall side gets a zero
  column; phase 2 with the column neighbour: each sends the row of its *widened* tile facing
  the other ((B, C, 1, T + 2) floats, so the corner cell of the diagonal rank travels
  through the column neighbour) and receives the other's, the wall side gets a zero row;
* backward ("halo_grad_exchange"), the adjoint in reverse order: the gradient of the
  received halo row goes back to the column neighbour, which adds it onto the row it had
  sent; then the gradient of the received halo column (including the corner that came via
  phase 2) goes back to the row neighbour, which adds it onto its edge column.

Messages are posted together (``dist.irecv`` + ``dist.isend``, then wait on both), or under
``--blocking`` ``dist.send``/``dist.recv`` ordered by grid parity (in a row the west rank
sends first, in a column the north rank sends first) so the pairs never deadlock. The first
layer's input is data (no grad), so backward exchanges ``--layers`` - 1 halo gradients.

The weights are replicated (the same seed everywhere). A training step's loss on a rank is
the one-step error of its tile (coupled forward above) plus a local rollout on its tile:
``--substeps`` further steps of the net from its own prediction, the tile padded by
replicating its edge ("replicate" padding, no communication) and each sub-step's error taken
on the interior only (a margin of ``layers`` cells per sub-step lost to the fake edge). The
sub-step count is the rank's "rollout length" (see imbalance below). One ``loss.backward()``
(autograd runs the rollout's backward, then the coupled layers' with their halo gradients),
an all_reduce (average) of the gradients as one flat buffer, Adam on every rank.

Data: rank 0 simulates ``--trajectories`` trajectories of the true equation once (numpy,
explicit upwind advection + 5-point diffusion between frames, random vortex winds and
Gaussian blobs) into a float32 ``.npy`` file in a temporary directory; every rank
memory-maps it and reads only its own tile. Each step draws ``--batch`` windows (trajectory,
start frame) from (seed, step), the same on every rank.

A step: ``sleep`` (fault only), ``load_batch`` (the rank's tile of the windows' frames),
``forward`` [``layer_k`` with ``halo_exchange`` inside, then ``local_rollout``, ``loss``],
``backward`` (``halo_grad_exchange`` inside), ``allreduce_grads``, ``optimizer`` (Adam),
``log_loss`` (a 2-float all_reduce of the loss), ``write_snapshot`` (the rank's predicted
tile appended to its own ``.npy`` snapshot file, as a user would dump fields for a movie),
and every ``--eval-every`` steps ``evaluate``: a no-grad coupled rollout of
``--eval-rollout`` steps of a held-out window (halo exchanges every layer of every step) and
an all_reduce of the squared error.

Communication per step (defaults: batch 2, channels 16, 3 layers, 128 x 128 tiles):
forward per layer one column message (2 x C x 128 floats: 3 KB for C = 3 at layer 1, 16 KB
for C = 16) each way with the row neighbour, then one row message (2 x C x 130) each way
with the column neighbour; backward the same for layers 2 and 3 (halo gradients); one
all_reduce of the gradients (2913 floats), one of the loss (2 floats); on eval steps
3 x 3 more halo exchanges (batch 1) and a 2-float all_reduce.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the halo
sends/receives and their waits and in the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--grid`` (256, global; 128 a tile), ``--channels`` (16), ``--layers`` (3),
``--batch`` (2), ``--substeps`` (2, the local rollout), ``--lr`` (1e-3), ``--eval-every`` (3),
``--eval-rollout`` (3), ``--trajectories`` (3), ``--frames`` (40 a trajectory), ``--blocking``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every conv layer of the rank (coupled forward and local
  rollout) runs its forward F times (F - 1 extra passes without grad, discarded) and in
  backward its input- and weight-gradient convolutions F times (F - 1 discarded); the
  fractional part over that fraction of the batch;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow read: ``load_batch`` sleeps MS each step;
* ``--snapshot-sleep-ms MS`` (family fault): a slow per-step write of the rank's tile
  snapshot: ``write_snapshot`` sleeps MS before writing (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B grid neighbours: 0-1, 2-3, 0-2, 1-3):
  every halo message A sends to B (forward halos and backward halo gradients, eval halos
  too) carries X times the floats, zero-padded in the same message; B receives it all and
  keeps the head. No ``--slow-rank``.

Imbalance without a fault (the local rollout only; the coupled layers stay even):

* ``--seq-sigma S``: each rank's rollout length this step (1 coupled step + its local
  sub-steps) is (1 + ``--substeps``) times lognormal(0, S), drawn from (seed, rank, step),
  clamped to [1/4, 4]x, rounded (0 local sub-steps possible);
* ``--big-rank K --big X``: rank K's rollout length is X times the others' (a finer
  refinement of its tile's dynamics), every step: with 2 sub-steps and X = 3, a rollout of 9
  (8 local sub-steps) against 3 (2).

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 12-15 during all the
measurements); 4 ranks, 10 steps (8 timed), one run each, healthy default runs ("base")
interleaved. The halo exchanges tie every rank to its two neighbours once a layer, so the
step medians of all ranks agree within 1% (one number given; the snapshot sleep, which comes
after the step's last collective, shows on its own rank's step only); "busy" = median time
outside the halo exchanges and all_reduces, slow rank vs the others.

  setting (slow rank)                                 base ms   step ms   busy slow / others ms
  healthy default                                        -      658-977   382-621 (by load)
  healthy --blocking --shapes                            -        578     396-433
  healthy --layers 4 --channels 12 --substeps 1
          --eval-every 2                                 -        867     450-481
  healthy --grid 192 --batch 4 --substeps 3              -       1171     832-890
  healthy --grid 320 --channels 12 --eval-rollout 5
          --lr 3e-4                                      -       1010     739-796
  --factor 2 (r1)                                       858        913     709 / 411-491
  --factor 2 (r1), again                                851       1100     961 / 452-547
  --blocking --factor 3 (r0)                            803       1855    1568 / 579-661
  --layers 4 --channels 12 --substeps 1
          --factor 2.5 (r3)                             867*      1208     975 / 428-444
  --grid 192 --batch 4 --substeps 3 --factor 2 (r2)    1171*      1189    1003 / 663-696
  --sleep-ms 150 (r3)                                   803        943     646 / 420-508
  --sleep-ms 250 (r2)                                   658       1070     758 / 526-544
  --data-sleep-ms 150 (r2)                              803        913     690 / 498-531
  --data-sleep-ms 300 (r3)                              851       1150     904 / 557-584
  --snapshot-sleep-ms 150 (r0)                          803        913 (r0), 957   710 / 494-517
  --snapshot-sleep-ms 300 (r1)                          851       1030 (r1), 915   712 / 441-510
  --hog (r1)                                            977       1353     909 / 492-590
  --hog (r0)                                            851       1254     831 / 439-503
  link 1 -> 0 x1024 (16 MB messages)                    977       1277     r1 843 / 739-771
  link 1 -> 0 x2048                                     977       1214     590 / 544-625
  link 1 -> 0 x4096 (64 MB messages)                    658       1260     514-574
  link 2 -> 0 x4096 (column halos)                      851       1265     531-589
  --big-rank 3 --big 3                                   -       1485    1164 / 478-493
  --seq-sigma 0.8                                        -        709     r0 188, r1 489, r2 82, r3 176

  (* the healthy run of the same size)

Reading: under this load a healthy step moved between 580 and 980 ms from run to run, so
one run's step time says little; the slowed rank's busy time shows every fault. The convs
are ~85% of a rank's compute (GELU and the replicate pads the rest), so ``--factor 2``
adds 250-450 ms to the slowed rank (30-45% of the step), ``--factor 3`` nearly doubles
the step. Its neighbours then wait in ``halo_exchange`` every layer, and in the gradient
all_reduce. A host sleep of 250-300 ms is 25-35% of a step; 150 ms was only ~15%, so the
battery uses 250-300. The hog's thread takes its share of the cores from its rank (+300-400
ms busy). A padded link costs little per message until the messages are tens of MB (5 halo
messages a step from A to B, 9 more on eval steps); at x4096 (64 MB for a 16-channel halo)
everyone's step grows by 300-600 ms, all of it waiting in the halo exchanges (busy stays
flat). ``--big 3`` gives rank 3 a rollout of 9 instead of 3 and the others wait for it in
the gradient all_reduce; ``--seq-sigma 0.8`` draws rollouts 1-12 by rank and step. Wall
per run: 20-45 s (a ~10 s start-up: 4 torch imports and rank 0 simulating the data set);
traces ~3 MB a rank (5 MB with --shapes).
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
    p.add_argument("--grid", type=int, default=256, help="global field size (split 2x2)")
    p.add_argument("--channels", type=int, default=16)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--substeps", type=int, default=2, help="local rollout sub-steps")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=3)
    p.add_argument("--eval-rollout", type=int, default=3)
    p.add_argument("--trajectories", type=int, default=3)
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--blocking", action="store_true", help="parity-ordered dist.send/recv halos")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--snapshot-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and (a.link_src ^ a.link_dst) not in (1, 2):
        p.error("a link joins grid neighbours (0-1, 2-3 in a row; 0-2, 1-3 in a column)")
    if a.grid % 2:
        p.error("--grid must be even")
    return a


# --------------------------------------------------------------------------
# the process grid and its halo messages
# --------------------------------------------------------------------------

class Grid:
    """2x2 process grid, rank = 2 * row + col; halo messages with the row/column neighbour."""

    def __init__(self, rank, blocking, link=None, link_factor=1.0):
        self.rank = rank
        self.row, self.col = divmod(rank, 2)
        self.row_nb = rank ^ 1            # east (col 0) or west (col 1)
        self.col_nb = rank ^ 2            # south (row 0) or north (row 1)
        self.blocking = blocking
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0                   # communication time this step
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

    def exchange(self, t, peer, tag, first):
        """Send t to peer, receive a tensor of t's shape from it. ``first``: this side sends
        first under --blocking (the west / north rank)."""
        flat = t.detach().reshape(-1)
        n = flat.numel()
        sbuf = self._buffer(("s", peer, n), self._padded(n, self.rank, peer))   # reused by size
        sbuf[:n].copy_(flat)
        rbuf = self._buffer(("r", peer, n), self._padded(n, peer, self.rank))
        t0 = time.perf_counter()
        if self.blocking:
            if first:
                dist.send(sbuf, peer, tag=tag)
                dist.recv(rbuf, peer, tag=tag)
            else:
                dist.recv(rbuf, peer, tag=tag)
                dist.send(sbuf, peer, tag=tag)
        else:
            reqs = [dist.irecv(rbuf, peer, tag=tag), dist.isend(sbuf, peer, tag=tag)]
            for r in reqs:
                r.wait()
        self.secs += time.perf_counter() - t0
        return rbuf[:n].view(t.shape).clone()

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t


class HaloPad(torch.autograd.Function):
    """(B, C, T, T) -> (B, C, T + 2, T + 2): one halo cell from the neighbours, zeros at walls."""

    @staticmethod
    def forward(ctx, x, grid, tag):
        ctx.grid, ctx.tag = grid, tag
        with record_function("halo_exchange"):
            return halo_forward(x, grid, tag)

    @staticmethod
    def backward(ctx, g):
        with record_function("halo_grad_exchange"):
            return halo_backward(g.contiguous(), ctx.grid, ctx.tag), None, None


def halo_forward(x, grid, tag):
    B, C, H, W = x.shape
    zc = x.new_zeros(B, C, H, 1)
    # phase 1: east/west with the row neighbour
    if grid.col == 0:      # neighbour to the east
        got = grid.exchange(x[..., :, -1:], grid.row_nb, tag, first=True)
        xw = torch.cat([zc, x, got], dim=3)
    else:                  # neighbour to the west
        got = grid.exchange(x[..., :, :1], grid.row_nb, tag, first=False)
        xw = torch.cat([got, x, zc], dim=3)
    # phase 2: north/south with the column neighbour, rows of the widened tile (corners ride along)
    zr = x.new_zeros(B, C, 1, W + 2)
    if grid.row == 0:      # neighbour to the south
        got = grid.exchange(xw[..., -1:, :], grid.col_nb, tag + 1, first=True)
        return torch.cat([zr, xw, got], dim=2)
    got = grid.exchange(xw[..., :1, :], grid.col_nb, tag + 1, first=False)
    return torch.cat([got, xw, zr], dim=2)


def halo_backward(g, grid, tag):
    """Adjoint of halo_forward: halo gradients go back to their owners and are added there."""
    # phase 2 adjoint: the received halo row's gradient back to the column neighbour
    if grid.row == 0:
        back = grid.exchange(g[..., -1:, :], grid.col_nb, 1000 + tag + 1, first=True)
        gw = g[..., 1:-1, :].clone()
        gw[..., -1:, :] += back
    else:
        back = grid.exchange(g[..., :1, :], grid.col_nb, 1000 + tag + 1, first=False)
        gw = g[..., 1:-1, :].clone()
        gw[..., :1, :] += back
    # phase 1 adjoint: the received halo column's gradient back to the row neighbour
    if grid.col == 0:
        back = grid.exchange(gw[..., :, -1:], grid.row_nb, 1000 + tag, first=True)
        gx = gw[..., :, 1:-1].clone()
        gx[..., :, -1:] += back
    else:
        back = grid.exchange(gw[..., :, :1], grid.row_nb, 1000 + tag, first=False)
        gx = gw[..., :, 1:-1].clone()
        gx[..., :, :1] += back
    return gx


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class _ExtraBackward(torch.autograd.Function):
    """Identity; in backward redoes the conv's input/weight gradients ``extra`` times (discarded)."""

    @staticmethod
    def forward(ctx, y, x, w, extra):
        ctx.save_for_backward(x, w)
        ctx.extra = extra
        return y.view_as(y)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        for rows in _passes(ctx.extra, x.shape[0]):
            torch.nn.grad.conv2d_input(x[:rows].shape, w, g[:rows])
            torch.nn.grad.conv2d_weight(x[:rows], w.shape, g[:rows])
        return g, None, None, None


def _passes(extra, batch):
    out = [batch] * int(extra)
    rows = int(round(batch * (extra - int(extra))))
    if rows > 0:
        out.append(rows)
    return out


class TileConv(nn.Conv2d):
    """A 3x3 conv without padding (the caller pads: halos or replicate); ``extra`` = --factor - 1."""

    extra = 0.0

    def forward(self, x):
        y = F.conv2d(x, self.weight, self.bias)
        if self.extra > 0:
            with torch.no_grad():
                for rows in _passes(self.extra, x.shape[0]):
                    F.conv2d(x[:rows], self.weight, self.bias)
            if torch.is_grad_enabled():
                y = _ExtraBackward.apply(y, x.detach(), self.weight.detach(), self.extra)
        return y


class StencilNet(nn.Module):
    def __init__(self, in_ch, channels, layers):
        super().__init__()
        dims = [in_ch] + [channels] * (layers - 1) + [1]
        self.convs = nn.ModuleList(TileConv(dims[i], dims[i + 1], 3) for i in range(layers))
        nn.init.zeros_(self.convs[-1].weight)
        nn.init.zeros_(self.convs[-1].bias)

    def forward(self, x, pad):
        """pad(h, k) pads the activation of layer k by one cell on every side."""
        h = x
        for k, conv in enumerate(self.convs):
            with record_function(f"layer_{k}"):
                h = conv(pad(h, k))
                if k < len(self.convs) - 1:
                    h = F.gelu(h)
        return h


def set_factor(model, extra):
    for m in model.modules():
        if isinstance(m, TileConv):
            m.extra = extra


# --------------------------------------------------------------------------
# data: the true solver, run once by rank 0
# --------------------------------------------------------------------------

def simulate(path, n_traj, n_frames, G, seed):
    """float32 array (n_traj, n_frames + 2, G, G): frames of u, then vx and vy."""
    rng = np.random.default_rng(seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n_traj, n_frames + 2, G, G))
    yy, xx = np.meshgrid(np.linspace(0, 1, G), np.linspace(0, 1, G), indexing="ij")
    dx = 1.0 / G
    for tr in range(n_traj):
        psi = np.zeros((G, G))
        for _ in range(4):                       # a few random vortices
            cx, cy, s = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.08, 0.2)
            psi += rng.choice([-1, 1]) * s * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * s * s))
        vy, vx = np.gradient(psi, dx)
        vx, vy = vy.copy(), -vx.copy()           # v = (dpsi/dy, -dpsi/dx)
        vmax = max(np.abs(vx).max(), np.abs(vy).max(), 1e-6)
        vx, vy = vx / vmax, vy / vmax
        u = np.zeros((G, G))
        for _ in range(12):                      # Gaussian blobs of dye
            cx, cy, s = rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.9), rng.uniform(0.02, 0.08)
            u += rng.uniform(0.3, 1.0) * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * s * s))
        dt, kappa = 0.4 * dx, 2e-4
        out[tr, n_frames] = vx
        out[tr, n_frames + 1] = vy
        for f in range(n_frames):
            out[tr, f] = u
            for _ in range(2):                   # explicit upwind advection + 5-point diffusion
                up = np.pad(u, 1)
                ddx_m = (up[1:-1, 1:-1] - up[1:-1, :-2]) / dx
                ddx_p = (up[1:-1, 2:] - up[1:-1, 1:-1]) / dx
                ddy_m = (up[1:-1, 1:-1] - up[:-2, 1:-1]) / dx
                ddy_p = (up[2:, 1:-1] - up[1:-1, 1:-1]) / dx
                adv = (np.where(vx > 0, vx * ddx_m, vx * ddx_p) + np.where(vy > 0, vy * ddy_m, vy * ddy_p))
                lap = (up[1:-1, 2:] + up[1:-1, :-2] + up[2:, 1:-1] + up[:-2, 1:-1] - 4 * up[1:-1, 1:-1]) / dx ** 2
                u = u + dt * (kappa * lap - adv)
    out.flush()
    del out


def rollout_lengths(args, world, step):
    """Every rank's rollout length (1 coupled step + local sub-steps) this step."""
    base = 1 + args.substeps
    out = []
    for r in range(world):
        n = float(base)
        if r == args.big_rank:
            n *= args.big
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + r * 10_007 + step)
            n *= math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        lo, hi = base / 4.0, base * 4.0 * max(1.0, args.big)
        out.append(max(1, int(round(min(max(n, lo), hi)))))
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
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 4:
        raise SystemExit("the 2x2 process grid needs exactly 4 ranks")
    slow = rank == args.slow_rank
    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    grid = Grid(rank, args.blocking, link, args.link_factor)
    T = args.grid // 2
    r0, c0 = grid.row * T, grid.col * T

    max_len = max(rollout_lengths(args, world, s)[r] for s in range(args.steps) for r in range(world))
    n_frames = max(args.frames, max_len + args.eval_rollout + 2)

    # the data set: simulated once by rank 0, memory-mapped by all
    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="jacobi2d_")
        simulate(os.path.join(tmp[0], "traj.npy"), args.trajectories, n_frames, args.grid, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    data_dir = tmp[0]
    dist.barrier()
    data = np.load(os.path.join(data_dir, "traj.npy"), mmap_mode="r")
    snap_path = os.path.join(data_dir, f"snapshots_rank{rank}.bin")

    def tile(tr, f):
        return np.array(data[tr, f, r0:r0 + T, c0:c0 + T], dtype=np.float32)

    def window(tr, start, length):
        """(u_start, [targets start+1 .. start+length], wind (2, T, T)) of the rank's tile."""
        frames = [tile(tr, start + i) for i in range(length + 1)]
        wind = np.stack([tile(tr, n_frames), tile(tr, n_frames + 1)])
        return frames, wind

    torch.manual_seed(args.seed)             # the same initial weights on every rank
    model = StencilNet(3, args.channels, args.layers)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=args.lr)
    n_params = sum(q.numel() for q in params)
    set_factor(model, max(0.0, args.factor - 1.0) if slow else 0.0)
    L = args.layers

    def halo_pad(h, k, tag_base=0):
        return HaloPad.apply(h, grid, tag_base + 2 * k)

    def local_pad(h, k):
        return F.pad(h, (1, 1, 1, 1), mode="replicate")

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[jacobi2d] world={world} grid={args.grid} tile={T} channels={args.channels} layers={L} "
              f"batch={args.batch} substeps={args.substeps} params={n_params} frames={n_frames} "
              f"halos={'send/recv' if args.blocking else 'isend/irecv'}", flush=True)

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
                grid.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    lens = rollout_lengths(args, world, step)
                    n_roll = lens[rank]              # 1 coupled step + n_roll - 1 local sub-steps
                    g = torch.Generator().manual_seed(args.seed * 7919 + step)
                    trs = torch.randint(0, args.trajectories, (args.batch,), generator=g).tolist()
                    starts = torch.randint(0, n_frames - max_len - args.eval_rollout - 1, (args.batch,),
                                           generator=g).tolist()
                    wins = [window(tr, s, n_roll) for tr, s in zip(trs, starts)]
                    u0 = torch.from_numpy(np.stack([w[0][0] for w in wins]))[:, None]           # (B,1,T,T)
                    targets = torch.from_numpy(np.stack([np.stack(w[0][1:]) for w in wins]))   # (B,n,T,T)
                    wind = torch.from_numpy(np.stack([w[1] for w in wins]))                    # (B,2,T,T)

                with record_function("forward"):
                    pred = u0 + model(torch.cat([u0, wind], 1), halo_pad)
                    loss_main = F.mse_loss(pred[:, 0], targets[:, 0])
                    loss = loss_main
                    if n_roll > 1:
                        with record_function("local_rollout"):
                            u = pred
                            roll = []
                            for j in range(1, n_roll):
                                u = u + model(torch.cat([u, wind], 1), local_pad)
                                m = min(L * j, T // 2 - 4)
                                roll.append(F.mse_loss(u[:, 0, m:T - m, m:T - m], targets[:, j, m:T - m, m:T - m]))
                            loss = loss + 0.5 * torch.stack(roll).mean()
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()

                with record_function("allreduce_grads"):
                    flat = torch.cat([q.grad.reshape(-1) for q in params])
                    grid.all_reduce(flat)
                    flat /= world
                    o = 0
                    for q in params:
                        q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                        o += q.numel()
                with record_function("optimizer"):
                    opt.step()

                with record_function("log_loss"):
                    m = torch.tensor([loss_main.item(), 1.0])
                    grid.all_reduce(m)

                with record_function("write_snapshot"):
                    if slow and args.snapshot_sleep_ms > 0:
                        time.sleep(args.snapshot_sleep_ms / 1000.0)
                    with open(snap_path, "ab") as fh:
                        fh.write(pred[0, 0].detach().numpy().astype(np.float16).tobytes())

                if args.eval_every > 0 and step % args.eval_every == args.eval_every - 1:
                    with record_function("evaluate"), torch.no_grad():
                        frames, ewind = window((step + 1) % args.trajectories, n_frames - args.eval_rollout - 1,
                                               args.eval_rollout)
                        u = torch.from_numpy(frames[0])[None, None]
                        ew = torch.from_numpy(ewind)[None]
                        err = torch.zeros(2)
                        for j in range(args.eval_rollout):
                            u = u + model(torch.cat([u, ew], 1), lambda h, k: halo_pad(h, k, 100 + 10 * j))
                            err[0] += ((u[0, 0] - torch.from_numpy(frames[j + 1])) ** 2).sum()
                        err[1] = float(args.eval_rollout * T * T)
                        grid.all_reduce(err)
                    if rank == 0:
                        print(f"  eval step {step}: rollout rmse {math.sqrt(err[0].item() / err[1].item()):.5f}",
                              flush=True)

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - grid.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {m[0].item() / m[1].item():.3e} rollouts {lens} "
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
        print("median busy ms (outside halos and all_reduces) per rank: " +
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
