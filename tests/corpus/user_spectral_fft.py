"""2D incompressible Navier-Stokes (vorticity form), pseudo-spectral, slab-decomposed over 4 ranks.

(calibration table at the end of this docstring)

What it is
----------
The distributed-FFT solver an HPC person writes in torch (the classic "slab" code of the
pseudo-spectral DNS papers, P3DFFT / mpi4py-fft style): forced 2D turbulence in vorticity form

    w_t + u . grad w = nu lap w - mu w + f(x, y, t),    u = (psi_y, -psi_x),  lap psi = -w

on the periodic box [0, 2 pi)^2 with an N x N grid (``--grid``, 512). Time stepping is RK2
(Heun) or RK3 (Shu-Osher), ``--rk`` (2); the nonlinear term is computed in physical space
(u w_x + v w_y) and dealiased by the 2/3 rule; viscosity, drag and forcing are advanced in
spectral space. The forcing field is read from disk every step (one frame per step of a
pre-generated slowly varying forcing, written by each rank at start-up into a temporary
directory, as a user reads an external forcing / boundary data product). Beside the solver:

* tracers: ``--tracers`` (40000) Lagrangian particles per rank, advected inside the rank's
  slab with the rank's velocity (bilinear interpolation) in ``--subcycles`` (4) RK1 sub-steps
  per time step (a local physics routine, no communication: particles that leave the slab in
  y are wrapped back into it);
* a learned closure (``--closure``, on by default; ``--no-closure``): a tiny pointwise MLP
  (4 -> ``--closure-hidden`` (32) -> 32 -> 1, tanh) fitted online to the resolved advective
  term from (u, v, w_x, w_y) at ``--closure-samples`` (4096) random points of the rank's slab
  each step; data-parallel: one flat all_reduce of its gradients (averaged), then Adam.

Decomposition (gloo, CPU, ``init_process_group("gloo")``, 4 processes): physical space is cut
into slabs of rows (y) -- rank r holds rows [y0, y1), all x; spectral space into slabs of kx
columns -- rank r holds kx in [k0, k1), all ky. The x transform is a real FFT (rfft, the
Nyquist mode dropped so N/2 kx modes split evenly), the y transform a complex FFT. A 2D
transform is: local 1D FFTs along the local axis, a global transpose, local 1D FFTs along
the other axis. The global transpose is

* ``--transpose a2a`` (default): one ``dist.all_to_all_single`` of the packed chunks
  (complex values viewed as real pairs, split sizes given, so uneven slabs work);
* ``--transpose pairwise``: the same exchange written as W - 1 ``dist.isend`` /
  ``dist.irecv`` pairs (at shift s: send to r + s, receive from r - s), all posted, then
  waited: the point-to-point form users write when they want to overlap or when their
  backend lacks all-to-all (gloo on this build has both).

Several fields are transformed together (batched along a leading dimension, one transpose).

Per step (one ``ProfilerStep#N``), user ranges:

* ``sleep`` (fault only, ``--sleep-ms``);
* ``io`` > ``load_forcing`` (``torch.load`` of this step's forcing frame; the slow data path
  sleeps here), then ``fft_fwd`` of the forcing (``transpose`` inside);
* per RK stage, ``stage``: ``spectral_ops`` (stream function, velocity and vorticity gradient in
  spectral space), ``fft_inv`` of 4 fields (u, v, w_x, w_y: ``ifft_y``, ``transpose``,
  ``irfft_x``), ``nonlinear`` (u w_x + v w_y in physical space), ``fft_fwd`` of 1 field
  (``rfft_x``, ``transpose``, ``fft_y``), ``dealias`` (2/3 mask), ``advance`` (the stage update);
* ``tracers`` (sub-cycles of the particle update, with the last stage's physical velocity);
* ``closure`` (with ``--closure``): ``forward``, ``backward``, ``allreduce_grad``, ``optimizer``;
* ``diagnostics`` every ``--diag-every`` (2) steps: one all_reduce (SUM) of energy, enstrophy,
  and tracer count, one all_reduce (MAX) of the CFL number; rank 0 prints them;
* ``io`` > ``write_checkpoint`` every ``--ckpt-every`` (1) steps: ``torch.save`` of the rank's
  spectral slab of w (temporary directory, removed at exit).

Communication per step and rank (defaults: N = 512, RK2, a2a): 1 + 2 x 2 = 5 all-to-alls
(forcing: 1 field; per stage: 4 fields back to physical space, 1 field forward), each rank
sending 3/4 of its slab per field (a 4-field transpose: 4 x 128 x 256 complex128 = 2 MB out of
which 1.5 MB leave the rank); 1 all_reduce of the closure's gradients (1249 floats); on
diagnostic steps 2 small all_reduces. Every transpose is a synchronisation point of all ranks.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` per time step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. Each step is timed with ``time.perf_counter``; at the end
rank 0 prints every rank's median step time over the traced steps and its median time outside
communication ("busy": the step minus the time in all-to-alls / isend-irecv waits / all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed`` (initial field, forcing,
tracers), ``--shapes``.

Healthy knobs: ``--grid`` (512; a multiple of 8), ``--rk {2,3}``, ``--dt`` (2e-3), ``--nu`` (5e-4),
``--drag`` (0.05), ``--transpose {a2a,pairwise}``, ``--dtype {float64,float32}``, ``--tracers``,
``--subcycles``, ``--closure/--no-closure``, ``--closure-hidden``, ``--closure-samples``,
``--diag-every``, ``--ckpt-every`` (0 = never).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's local FFTs (every rfft/irfft/fft/ifft call) and
  its nonlinear products are computed F times (F - 1 extra evaluations of the same call on
  the same input, results discarded; a fractional part is spread over the calls);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` at the start of each step in ``sleep``;
* ``--data-sleep-ms MS``: a slow read of the forcing field: sleep inside ``load_forcing``;
* ``--write-sleep-ms MS`` (family fault): a slow checkpoint write: sleep inside
  ``write_checkpoint`` before ``torch.save``;
* ``--hog``: a busy neighbour thread multiplying 192x192 matrices for the whole run (stopped
  and joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (needs ``--transpose pairwise``): every transpose
  message rank A sends to rank B carries X times the bytes (the chunk plus zero padding in the
  same isend; B receives it all and keeps the chunk). No ``--slow-rank`` needed.

Imbalance without a fault:

* ``--big-rank K --big X``: an uneven decomposition: rank K's slab is X times thicker, both its
  rows in physical space and its kx columns in spectral space (and it seeds X times the tracers);
* ``--seq-sigma S``: each rank's number of tracer sub-cycles per step is
  ``max(1, round(subcycles * lognormal(0, S)))``, drawn from (seed, rank, step).

Calibration
-----------
2-core box shared with another helper's 4-process jobs and an analysis process; 4 ranks,
10 steps (8 timed). Each fault run was made right after a healthy default run ("base", ms a
step). Step medians are within a few % across ranks (every transpose synchronises everyone),
so one number is given; "busy" is the per-rank median outside communication, the slowed /
big rank vs the others' range.

  setting (rank)                               base ms   step ms   change   busy slow / others ms
  healthy default (5 runs, load varying)          -       228-462      -       87-265
  healthy --transpose pairwise (2 runs)           -       237-516      -       133-341
  healthy --rk 3 --grid 512 --shapes              -       395-408      -       204-247
  healthy --dtype float32 --no-closure            -       294-303      -       100-131
  healthy --grid 640 --tracers 32000 --diag-every 1  -    291-296      -       129-151
  --factor 3 (r1)                               230       280      +22%     162 / 130-141
  --factor 4 (r0)                               230       274      +19%     164 / 109-138
  --factor 5 (r1)                               412       554      +34%     407 / 251-257
  --factor 6 (r0)                               455       540      +19%     426 / 215-248
  --transpose pairwise --factor 5 (r3)          512       450  (load fell)  350 / 212-239
  --rk 3 --grid 512 --factor 5 (r2)             403*      418      +4%*     215 / 131-148
  --sleep-ms 100 (r3)                           246       432      +76%     265 / 174-187  (load rose)
  --sleep-ms 120 (r3)                           378       500      +32%     361 / 225-235
  --data-sleep-ms 100 (r2)                      246       297      +21%     213 / 103-119
  --data-sleep-ms 120 (r2)                      378       530      +40%     364 / 241-265
  --write-sleep-ms 100 (r1)                     246       510  (load rose)  350 / 242-266
  --write-sleep-ms 120 (r1)                     430       545      +27%     364 / 264-290
  --hog (r0)                                    400       663      +66%     412 / 212-236
  pairwise --link 1->2 x16                      470       300  (load fell)  r1 209 / 164-173
  pairwise --link 1->2 x32 (38 MB a message)    242       543     +124%     r1 310 / 282-295
  --seq-sigma 0.8                               425       410      -3%      222-240 (varies by step)
  --big-rank 3 --big 2                          425       436      +3%      272 / 163-175
  (* the base had --shapes, which costs this job ~10%; the busy time is the clear signal)

Reading: the box was loaded the whole time (load average 5-8 from the neighbour's 4-process
jobs), so a healthy default step ranged 228-462 ms from one run to the next and the fault
runs drift with it; the busy column is the steadier signal. A first version at --grid 512 with
40000 tracers stepped in ~130 ms but its FFTs were only ~10 ms of a step (the tracers' gathers
and the transposes' packing dominated), so --factor 3 barely showed; the defaults were moved to
--grid 768 and 16000 tracers, where the local FFTs and products are ~25-30 ms a step and
--factor 5-6 costs the slowed rank 60-80% more busy time and the step 20-35%. The transposes
synchronise everyone, so every slowdown is paid by all ranks' steps; a sleep of 120 ms costs
the step 27-40% (the other ranks use the freed CPU meanwhile). The heavy link shows as
transpose wait, not as busy time (the padded buffers are allocated once). The uneven slab and
the varying tracer sub-cycles move busy time between ranks, not the step. Wall per run 11-21 s;
traces ~4-8 MB per rank (more with --shapes).
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
    # solver
    p.add_argument("--grid", type=int, default=768, help="N: grid points per side")
    p.add_argument("--rk", type=int, choices=[2, 3], default=2)
    p.add_argument("--dt", type=float, default=2e-3)
    p.add_argument("--nu", type=float, default=5e-4)
    p.add_argument("--drag", type=float, default=0.05)
    p.add_argument("--transpose", choices=["a2a", "pairwise"], default="a2a")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    # tracers, closure, output
    p.add_argument("--tracers", type=int, default=16000, help="particles per rank")
    p.add_argument("--subcycles", type=int, default=4)
    p.add_argument("--closure", dest="closure", action="store_true", default=True)
    p.add_argument("--no-closure", dest="closure", action="store_false")
    p.add_argument("--closure-hidden", type=int, default=32)
    p.add_argument("--closure-samples", type=int, default=4096)
    p.add_argument("--closure-lr", type=float, default=1e-3)
    p.add_argument("--diag-every", type=int, default=2)
    p.add_argument("--ckpt-every", type=int, default=1)
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
    if a.grid % 8:
        p.error("--grid must be a multiple of 8")
    if (a.link_src >= 0) != (a.link_dst >= 0):
        p.error("--link-src and --link-dst go together")
    if a.link_src >= 0 and a.transpose != "pairwise":
        p.error("a heavier link needs --transpose pairwise (all_to_all has no per-link messages)")
    return a


# --------------------------------------------------------------------------
# decomposition and the distributed transpose
# --------------------------------------------------------------------------

def split(total, weights):
    edges = [round(total * sum(weights[:r]) / sum(weights)) for r in range(len(weights) + 1)]
    return [(edges[r], edges[r + 1]) for r in range(len(weights))]


class Comm:
    """Transposes and all_reduces; accumulates the seconds spent in them (for 'busy')."""

    def __init__(self, rank, world, mode, link=None, link_factor=1.0):
        self.rank, self.world, self.mode = rank, world, mode
        self.link, self.link_factor = link, link_factor
        self.seconds = 0.0
        self.pads = {}

    def all_reduce(self, t, op=dist.ReduceOp.SUM):
        tc = time.perf_counter()
        dist.all_reduce(t, op=op)
        self.seconds += time.perf_counter() - tc
        return t

    def _padded(self, kind, numel, dtype):
        """A zero-padded message buffer of link_factor x numel, kept between transposes."""
        key = (kind, numel, dtype)
        if key not in self.pads:
            self.pads[key] = torch.zeros(int(numel * self.link_factor), dtype=dtype)
        return self.pads[key]

    def exchange(self, chunks, recv_shapes, cdtype):
        """chunks[s]: complex tensor for rank s; returns the list of tensors received from each s."""
        rdtype = torch.view_as_real(torch.zeros(1, dtype=cdtype)).dtype
        send = [torch.view_as_real(c.contiguous()).reshape(-1) for c in chunks]
        rsizes = [2 * math.prod(s) for s in recv_shapes]
        if self.mode == "a2a":
            sbuf = torch.cat(send)
            rbuf = torch.empty(sum(rsizes), dtype=rdtype)
            tc = time.perf_counter()
            dist.all_to_all_single(rbuf, sbuf, output_split_sizes=rsizes,
                                   input_split_sizes=[x.numel() for x in send])
            self.seconds += time.perf_counter() - tc
            parts = rbuf.split(rsizes)
        else:
            r, w = self.rank, self.world
            parts = [None] * w
            parts[r] = send[r]
            bufs, reqs = {}, []
            for s in range(1, w):
                dst, src = (r + s) % w, (r - s) % w
                msg = send[dst]
                if self.link == (r, dst):              # the heavier link: padded message
                    msg = self._padded("send", msg.numel(), rdtype)
                    msg[: send[dst].numel()].copy_(send[dst])
                if self.link == (src, r):
                    bufs[src] = self._padded("recv", rsizes[src], rdtype)
                else:
                    bufs[src] = torch.empty(rsizes[src], dtype=rdtype)
                reqs.append(dist.isend(msg, dst))
                reqs.append(dist.irecv(bufs[src], src))
            tc = time.perf_counter()
            for q in reqs:
                q.wait()
            self.seconds += time.perf_counter() - tc
            for src, b in bufs.items():
                parts[src] = b[: rsizes[src]]
        return [torch.view_as_complex(p.view(*shape, 2)) for p, shape in zip(parts, recv_shapes)]


class SlabFFT:
    """Forward / inverse 2D FFT of a batch of fields on the slab decomposition.

    physical: (F, ny_loc, N) real;  spectral: (F, N [ky], nk_loc [kx]) complex.
    """

    def __init__(self, n, rank, world, comm, rdtype, weights, factor=1.0):
        self.n, self.nk, self.rank, self.world, self.comm = n, n // 2, rank, world, comm
        self.rows = split(n, weights)           # physical rows per rank
        self.cols = split(n // 2, weights)      # spectral kx columns per rank
        self.y0, self.y1 = self.rows[rank]
        self.k0, self.k1 = self.cols[rank]
        self.ny, self.nkl = self.y1 - self.y0, self.k1 - self.k0
        self.rdtype = rdtype
        self.cdtype = torch.complex128 if rdtype == torch.float64 else torch.complex64
        self.extra = max(0.0, factor - 1.0)
        self.credit = 0.0

    def local(self, fn, *xs, **kw):
        """One local computation; on a slow device repeated (extra results discarded)."""
        out = fn(*xs, **kw)
        if self.extra:
            self.credit += self.extra
            while self.credit >= 1.0:
                fn(*xs, **kw)
                self.credit -= 1.0
        return out

    def forward(self, phys):
        with record_function("fft_fwd"):
            with record_function("rfft_x"):
                a = self.local(torch.fft.rfft, phys, dim=2)[..., : self.nk]
            f = a.shape[0]
            with record_function("transpose"):
                chunks = [a[:, :, k0:k1] for k0, k1 in self.cols]
                got = self.comm.exchange(chunks, [(f, y1 - y0, self.nkl) for y0, y1 in self.rows],
                                         self.cdtype)
                b = torch.cat(got, dim=1)
            with record_function("fft_y"):
                return self.local(torch.fft.fft, b, dim=1)

    def inverse(self, spec):
        with record_function("fft_inv"):
            with record_function("ifft_y"):
                a = self.local(torch.fft.ifft, spec, dim=1)
            f = a.shape[0]
            with record_function("transpose"):
                chunks = [a[:, y0:y1, :] for y0, y1 in self.rows]
                got = self.comm.exchange(chunks, [(f, self.ny, k1 - k0) for k0, k1 in self.cols],
                                         self.cdtype)
                b = torch.cat(got, dim=2)
            with record_function("irfft_x"):
                b = F.pad(b, (0, 1))            # the dropped Nyquist mode
                return self.local(torch.fft.irfft, b, n=self.n, dim=2)


# --------------------------------------------------------------------------
# physics pieces
# --------------------------------------------------------------------------

class Forcing:
    """A slowly varying large-scale forcing; frames written to disk once, read back each step."""

    def __init__(self, fft, seed, steps, directory, rdtype):
        self.dir, self.rdtype = directory, rdtype
        n = fft.n
        g = torch.Generator().manual_seed(seed)
        modes = torch.randint(2, 6, (6, 2), generator=g).double()
        phase = torch.rand(6, generator=g, dtype=torch.float64) * 2 * math.pi
        speed = 0.5 + torch.rand(6, generator=g, dtype=torch.float64)
        y = (torch.arange(fft.y0, fft.y1, dtype=torch.float64) * 2 * math.pi / n)[:, None]
        x = (torch.arange(n, dtype=torch.float64) * 2 * math.pi / n)[None, :]
        self.paths = []
        for k in range(steps):
            fr = torch.zeros(fft.ny, n, dtype=torch.float64)
            for (mx, my), ph, sp in zip(modes.tolist(), phase.tolist(), speed.tolist()):
                fr += 0.5 * torch.sin(mx * x + my * y + ph + sp * 0.1 * k)
            path = os.path.join(directory, f"forcing_{k:04d}.pt")
            torch.save(fr.to(rdtype), path)
            self.paths.append(path)

    def read(self, step):
        return torch.load(self.paths[step % len(self.paths)])


class Tracers:
    def __init__(self, count, fft, seed, rank, rdtype):
        g = torch.Generator().manual_seed(seed * 7919 + rank)
        n, h = fft.n, 2 * math.pi / fft.n
        self.h, self.n = h, n
        self.ylo, self.yhi = fft.y0 * h, fft.y1 * h
        self.x = torch.rand(count, generator=g, dtype=rdtype) * 2 * math.pi
        self.y = self.ylo + torch.rand(count, generator=g, dtype=rdtype) * (self.yhi - self.ylo)

    def _interp(self, fld, y0):
        """Bilinear interpolation of a (ny, N) slab field at the particles (periodic in x)."""
        fx = self.x / self.h
        fy = (self.y / self.h - y0).clamp(0, fld.shape[0] - 1.000001)
        ix, iy = fx.floor().long(), fy.floor().long()
        tx, ty = fx - ix, fy - iy
        ix0, ix1 = ix % self.n, (ix + 1) % self.n
        iy1 = (iy + 1).clamp(max=fld.shape[0] - 1)
        flat = fld.reshape(-1)
        w = fld.shape[1]
        a = flat[iy * w + ix0] * (1 - tx) + flat[iy * w + ix1] * tx
        b = flat[iy1 * w + ix0] * (1 - tx) + flat[iy1 * w + ix1] * tx
        return a * (1 - ty) + b * ty

    def advect(self, u, v, y0, dt, sub):
        ds = dt / sub
        for _ in range(sub):
            up = self._interp(u, y0)
            vp = self._interp(v, y0)
            self.x = torch.remainder(self.x + ds * up, 2 * math.pi)
            span = self.yhi - self.ylo
            self.y = self.ylo + torch.remainder(self.y + ds * vp - self.ylo, span)


class Closure(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 32), nn.Tanh(),
                                 nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x)


def start_hog(stop):
    def spin():
        a = torch.randn(192, 192)
        b = torch.randn(192, 192) / 14.0
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
    rdtype = torch.float64 if args.dtype == "float64" else torch.float32
    n = args.grid

    weights = [args.big if r == args.big_rank else 1.0 for r in range(world)]
    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, world, args.transpose, link, args.link_factor)
    fft = SlabFFT(n, rank, world, comm, rdtype, weights, args.factor if slow else 1.0)
    if min(min(b - a for a, b in fft.rows), min(b - a for a, b in fft.cols)) < 1:
        raise SystemExit("a rank got an empty slab: make --grid larger or --big smaller")

    # wavenumbers of this rank's spectral slab: (N ky, nk_loc kx)
    ky = torch.fft.fftfreq(n, 1.0 / n).to(rdtype)[:, None]
    kx = torch.arange(fft.k0, fft.k1, dtype=rdtype)[None, :]
    k2 = kx ** 2 + ky ** 2
    inv_k2 = torch.where(k2 > 0, 1.0 / k2.clamp(min=1e-30), torch.zeros_like(k2))
    cut = n / 3.0
    mask = ((kx.abs() < cut) & (ky.abs() < cut)).to(rdtype)
    ikx, iky = 1j * kx, 1j * ky

    work = tempfile.mkdtemp(prefix=f"spectral_fft_r{rank}_")
    forcing = Forcing(fft, args.seed, 8, work, rdtype)

    # initial vorticity: random large-scale field, built in physical space, same on every layout
    g = torch.Generator().manual_seed(args.seed)
    amps = torch.randn(12, generator=g, dtype=torch.float64)
    kk = torch.randint(1, 9, (12, 2), generator=g).tolist()
    ph = (torch.rand(12, generator=g, dtype=torch.float64) * 2 * math.pi).tolist()
    yy = (torch.arange(fft.y0, fft.y1, dtype=torch.float64) * 2 * math.pi / n)[:, None]
    xx = (torch.arange(n, dtype=torch.float64) * 2 * math.pi / n)[None, :]
    w0 = sum(a * torch.cos(p * xx + q * yy + f) for a, (p, q), f in zip(amps.tolist(), kk, ph))
    w_hat = fft.forward(w0.to(rdtype).unsqueeze(0))[0]

    ntr = int(round(args.tracers * weights[rank]))
    tracers = Tracers(ntr, fft, args.seed, rank, rdtype)

    torch.manual_seed(args.seed)             # same closure weights on every rank
    closure = Closure(args.closure_hidden) if args.closure else None
    opt = torch.optim.Adam(closure.parameters(), lr=args.closure_lr) if closure is not None else None
    cgen = torch.Generator().manual_seed(args.seed * 31 + rank)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    def rhs(wh, f_hat):
        """-dealias(N) + f - nu k^2 w - mu w; also returns the physical fields of the stage."""
        with record_function("spectral_ops"):
            psi = wh * inv_k2
            fields = torch.stack((iky * psi, -ikx * psi, ikx * wh, iky * wh))   # u, v, w_x, w_y
        phys = fft.inverse(fields)
        with record_function("nonlinear"):
            nl = fft.local(lambda p: p[0] * p[2] + p[1] * p[3], phys)
        nl_hat = fft.forward(nl.unsqueeze(0))[0]
        with record_function("dealias"):
            nl_hat = nl_hat * mask
        return -nl_hat + f_hat - (args.nu * k2 + args.drag) * wh, phys, nl

    if rank == 0:
        print(f"[spectral] world={world} N={n} rk={args.rk} transpose={args.transpose} "
              f"dtype={args.dtype} tracers={args.tracers}x{args.subcycles} closure={args.closure}",
              flush=True)
    print(f"  rank {rank}: rows {fft.y0}:{fft.y1} kx {fft.k0}:{fft.k1} tracers {ntr}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    active = max(1, args.steps - 2)
    prof = profile(activities=[ProfilerActivity.CPU],
                   schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
                   record_shapes=args.shapes)
    step_times, busy_times = [], []
    dt = args.dt
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.seconds = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("io"):
                    with record_function("load_forcing"):
                        if slow and args.data_sleep_ms > 0:
                            time.sleep(args.data_sleep_ms / 1000.0)
                        f_phys = forcing.read(step)
                f_hat = fft.forward(f_phys.unsqueeze(0))[0] * mask

                # RK2 (Heun) / RK3 (Shu-Osher) in spectral space
                w_old = w_hat
                with record_function("stage"):
                    r1, phys, nl = rhs(w_hat, f_hat)
                    with record_function("advance"):
                        w1 = w_old + dt * r1
                with record_function("stage"):
                    r2, phys, nl = rhs(w1, f_hat)
                    with record_function("advance"):
                        if args.rk == 2:
                            w_hat = 0.5 * (w_old + w1 + dt * r2)
                        else:
                            w2 = 0.75 * w_old + 0.25 * (w1 + dt * r2)
                if args.rk == 3:
                    with record_function("stage"):
                        r3, phys, nl = rhs(w2, f_hat)
                        with record_function("advance"):
                            w_hat = (w_old + 2.0 * (w2 + dt * r3)) / 3.0

                sub = args.subcycles
                if args.seq_sigma > 0:
                    gs = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
                    z = torch.randn((), generator=gs, dtype=torch.float64).item()
                    sub = max(1, round(args.subcycles * math.exp(args.seq_sigma * z)))
                with record_function("tracers"):
                    tracers.advect(phys[0], phys[1], fft.y0, dt, sub)

                if closure is not None:
                    with record_function("closure"):
                        idx = torch.randint(0, phys[0].numel(), (args.closure_samples,), generator=cgen)
                        feats = phys.reshape(4, -1)[:, idx].t().float()
                        target = nl.reshape(-1)[idx].float().unsqueeze(1)
                        with record_function("forward"):
                            loss = F.mse_loss(closure(feats), target)
                        with record_function("backward"):
                            opt.zero_grad(set_to_none=False)
                            loss.backward()
                        with record_function("allreduce_grad"):
                            flat = torch.cat([q.grad.reshape(-1) for q in closure.parameters()])
                            comm.all_reduce(flat)
                            flat /= world
                            off = 0
                            for q in closure.parameters():
                                k = q.numel()
                                q.grad.copy_(flat[off: off + k].view_as(q))
                                off += k
                        with record_function("optimizer"):
                            opt.step()

                diag = None
                if args.diag_every > 0 and step % args.diag_every == 0:
                    with record_function("diagnostics"):
                        u, v = phys[0], phys[1]
                        diag = torch.stack((0.5 * (u * u + v * v).sum().double(),
                                            0.5 * (w_hat.abs() ** 2).sum().double(),
                                            torch.tensor(float(ntr), dtype=torch.float64)))
                        comm.all_reduce(diag)
                        h = 2 * math.pi / n
                        cfl = ((u.abs() + v.abs()).max().double() * dt / h).reshape(1)
                        comm.all_reduce(cfl, op=dist.ReduceOp.MAX)

                if args.ckpt_every > 0 and (step + 1) % args.ckpt_every == 0:
                    with record_function("io"):
                        with record_function("write_checkpoint"):
                            if slow and args.write_sleep_ms > 0:
                                time.sleep(args.write_sleep_ms / 1000.0)
                            torch.save({"step": step, "t": (step + 1) * dt, "kx": (fft.k0, fft.k1),
                                        "w_hat": w_hat.clone()},
                                       os.path.join(work, f"ckpt_{step % 2}.pt"))

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.seconds)
                if rank == 0:
                    msg = f"step {step:3d} t={(step + 1) * dt:.3f} sub {sub} "
                    if diag is not None:
                        msg += (f"E={diag[0].item() / n ** 2:.4e} Z={diag[1].item() / n ** 4:.4e} "
                                f"CFL={cfl.item():.3f} ")
                    if closure is not None:
                        msg += f"closure loss {loss.item():.4f} "
                    print(msg + f"{1000 * step_times[-1]:.1f} ms", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))
    shutil.rmtree(work, ignore_errors=True)

    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    med = (statistics.median(traced), statistics.median(busy))
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * m[0]:.1f}" for r, m in enumerate(allmed)), flush=True)
        print("median busy ms (outside transposes and all_reduces) per rank: " +
              " ".join(f"r{r}={1000 * m[1]:.1f}" for r, m in enumerate(allmed)), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
