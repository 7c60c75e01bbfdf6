"""An N-body / molecular-dynamics simulation with a learned force correction, systolic ring over 4 ranks.

(calibration table at the end of this docstring)

What it is
----------
A small direct-summation particle simulation of the kind people write to try an
"ML-corrected force field": 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``), no DDP or any other wrapper. The particles are split into 4 blocks,
block r owned by rank r (positions, velocities, masses; ``--block`` particles a block).

Forces: every pair interacts through a base law (``--potential gravity``: softened gravity,
a = sum_j m_j d_ij / (r_ij^2 + eps^2)^1.5; ``--potential lj``: a softened Lennard-Jones,
r^2 -> r^2 + eps^2 so close pairs stay finite) plus a learned radial correction
f_c(r) = MLP([r, 1/(r^2 + eps^2)]) (2 -> ``--hidden`` -> ``--hidden`` -> 1, tanh) along d_ij,
weighted by m_j. The pair sums are done in row tiles of ``--tile`` rows (vectorised torch).

All pairs by the SYSTOLIC RING: each rank keeps its own block and a travelling copy of one
block's (positions, mass) rows, (n, 4) floats. It first interacts its block with itself
(the travelling copy starts as its own block), then 3 times: passes the travelling copy one
hop round the ring r -> r+1 (and receives the next from r-1), and interacts its block with
the block it just received. After 3 hops it has seen all 4 blocks; the travelling copies keep
their owners' sizes (rank r holds block (r - h) mod 4 after hop h). The hop is
``dist.isend`` + ``dist.irecv`` + wait (default), or with ``--blocking`` blocking
``dist.send``/``dist.recv`` ordered by rank parity (even ranks send first, odd ranks receive
first); with ``--overlap`` the next hop is posted before the interaction with the current copy
and waited after it (the usual overlapped systolic loop; not with ``--blocking``).

Besides its particles each rank has "probe" particles: per-step local field-sampling points
(neighbour-list style points drawn around its own particles, ``--probes`` of them) that feel
the force of every block and go into the diagnostics, but do not move or act on anything.
They are rows of the rank's interaction like its own particles (``--seq-sigma`` varies them).

Integration: leapfrog / velocity Verlet with the forces of the ring: v += dt a (half a kick on
the first step), x += dt v (``--dt``).

Training: every step the force-correction MLP takes ``--train-iters`` Adam steps against a
reference table of (r, residual force) samples (what an expensive reference model would say
minus the base law; a screened short-range repulsion plus noise), written once by rank 0 to
a ``.npy`` file and memory-mapped by every rank; each rank reads its own ``--train-batch``
rows a step. The MLP's gradients are all-reduced (averaged) over the 4 ranks as one flat
buffer, so the weights stay identical everywhere.

Diagnostics: every step an all_reduce of 7 floats (kinetic energy, potential energy, the
3 momentum components, the probes' summed |a| and their count); rank 0 prints the total energy
and its drift. Then every ``--traj-every`` steps each rank appends its block's positions to its
own trajectory file (a frame writer, ``write_frame``).

Communication per step (defaults: 512 particles a block, 2048 floats = 8 KB a message):
3 ring messages on every link r -> r+1 (each rank 3 isends to r+1 and 3 irecvs from r-1),
one all_reduce of the MLP gradients (337 floats with ``--hidden 16``) per train iteration,
one all_reduce of the 7 diagnostics.

User ranges per step: ``sleep`` (fault only),
``ring_forces`` [``interact`` (self block), then per hop ``ring_hop`` (the isend/irecv/wait,
or ``ring_hop`` post + ``ring_wait`` with ``--overlap``) and ``interact``; inside
``interact`` one ``tile`` range per row tile], ``integrate``, ``train_correction``
[``load_reference``, ``correction_forward``, ``correction_backward``, ``grad_allreduce``,
``correction_step``], ``energy_reduce``, ``write_frame``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the ring
sends/receives/waits and in the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Simulation / job size: ``--block`` (512 particles a rank), ``--probes`` (128 a rank),
``--tile`` (256 rows), ``--potential {gravity,lj}``, ``--softening`` (0.05), ``--dt`` (1e-3),
``--hidden`` (16), ``--train-batch`` (8192), ``--train-iters`` (1), ``--lr`` (2e-3),
``--traj-every`` (1), ``--blocking``, ``--overlap``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every block-block interaction of the rank (all 4 of a
  step) is computed F times (F - 1 extra passes discarded; the fractional part over that
  fraction of the rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow reference-data read: ``load_reference`` sleeps MS each step;
* ``--traj-sleep-ms MS`` (family fault): a slow trajectory writer: the rank's ``write_frame``
  sleeps MS before appending its frame (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (B = A + 1 mod 4, a ring link): every ring
  message A sends to B (3 a step) carries X times the floats (zero-padded in the same message;
  B receives it all and keeps the head). No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's probe count of the step is ``--probes`` times
  lognormal(0, S) (drawn from (seed, rank, step), clamped to [1/4x, 4x]): the rows of its
  interactions differ by rank and step;
* ``--big-rank K --big X``: block K has X times the particles of the others (its owner's
  interactions are X times larger at every hop, and every rank's interaction with the
  travelling block K is X times larger once a step).

Calibration
-----------
2-core box shared with other helpers' 4-process jobs and analysis processes; 4 ranks,
10 steps (8 timed). Two rounds: (A) the battery's settings at load ~5 (healthy default step
640-710 ms), each fault near a default "base" run; (B) an earlier round at load ~10 (healthy
default step 990-1180 ms). The ring and the all_reduces tie the ranks, so the step medians of
all ranks agree within ~2%: one number. "busy" = median time outside the ring hops and the
all_reduces, slow rank vs the mean of the others.

  setting (slow rank)                          base ms  step ms  change   busy slow / others ms
  (A) healthy default                              -     645-710     -      430-605 (by load)
  (A) healthy --blocking --shapes                  -       841       -      646-702
  (A) healthy --overlap --block 640 --probes 192   -      1045       -      976-988
  (A) healthy --potential lj --hidden 24
          --train-iters 2                          -      1034       -      799-860
  (A) healthy --block 384 --probes 64 --tile 128
          --train-batch 16384                      -       390       -      224-301
  (A) --factor 2 (r2)                             645      775     +20%     713 / 503
  (A) --blocking --factor 2.5 (r1)                645      890     +38%     848 / 494
  (A) --overlap --factor 2 (r0)                   645      805     +25%     772 / 516
  (A) --potential lj --factor 3 (r3)               -      1235       -     1188 / 532
  (A) --sleep-ms 350 (r1)                         658      905     +38%     713 / 449
  (A) --data-sleep-ms 350 (r3)                    658     1020     +55%     855 / 500
  (A) --traj-sleep-ms 350 (r0)                    658      897     +36%     798 / 435
  (A) --hog (r2)                                  687      722      +5%     624 / 472
  (A) link 2->3 x32768 (256 MB messages)          687     1045     +52%     r2 451, r3 480 / 588
  (A) --seq-sigma 0.8                              -       700       -      517-598 (probes 32-512)
  (A) --big-rank 3 --big 3                        687     1466    +113%    1269 / 601
  (B) --factor 2 (r2)                            1000      917   (quiet)    811 / 435
  (B) --factor 3 (r3)                             990     2305    +133%    2236 / 803
  (B) --factor 1.5 (r0)                          1180     1170     -1%     1041 / 895 (weak)
  (B) --sleep-ms 350 (r1)                        1180     1355     +15%    1167 / 818
  (B) --data-sleep-ms 350 (r3)                   1180     1205      +2%    1032 / 725
  (B) --traj-sleep-ms 350 (r0)                   1180     1233      +4%    1134 / 662
  (B) --hog (r1)                                 1180     1820     +54%    1661 / 859
  (B) link 1->2 x4096 / x8192 (32 / 64 MB)       1180   845 / 1070  none   no clear cost
  (B) link 1->2 x16384 (128 MB)                   990     1387     +40%    r1 790, r2 785 / 1007
  (B) link 1->2 x32768 (256 MB)                   990     1437     +45%    r1 635, r2 712 / 953
  (B) --big-rank 3 --big 3                          -     2670       -     2389 / 1024
  (B) --seq-sigma 0.8                               -     1265       -      908-1058

Reading: the box's load moved a healthy step between 640 and 1180 ms from one run to the
next, so one run's step change says little; the slowed rank's busy time shows every fault.
The interactions are ~85% of a rank's busy time, so ``--factor 2`` adds 40-90% to it (1.5 is
too weak to rely on). A 350 ms sleep (step, reference read or frame writer) is 35-60% of a
step. The hog took 30% (quiet box) to 90% (loaded box) of the rank's core. A padded link
costs nothing visible until the messages are ~100 MB (loopback TCP is fast, the buffers are
allocated once); at 256 MB x 3 hops a step everyone waits in ``ring_hop`` behind the link
(the busy time of the two link ranks does not rise: the cost is all in the hop). A 3x block
makes its owner's interactions 3x and slows every rank's step by ~2x (they wait at the next
hop). Wall per run: 15-28 s; traces 3.4 MB a rank (5.4 MB with --shapes, 9 MB for the
rank with --factor 3 under lj).
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
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--block", type=int, default=512, help="particles per rank")
    p.add_argument("--probes", type=int, default=128, help="field probes per rank and step")
    p.add_argument("--tile", type=int, default=256, help="rows per interaction tile")
    p.add_argument("--potential", choices=["gravity", "lj"], default="gravity")
    p.add_argument("--softening", type=float, default=0.05)
    p.add_argument("--dt", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--train-batch", type=int, default=8192)
    p.add_argument("--train-iters", type=int, default=1)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--traj-every", type=int, default=1)
    p.add_argument("--blocking", action="store_true", help="blocking send/recv ordered by rank parity")
    p.add_argument("--overlap", action="store_true", help="post the next hop before the interaction")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--traj-sleep-ms", type=float, default=0.0)
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
    if a.blocking and a.overlap:
        p.error("--overlap needs the non-blocking ring")
    return a


# --------------------------------------------------------------------------
# the ring
# --------------------------------------------------------------------------

class Ring:
    """One hop r -> r+1 of the travelling block; pads the messages of one link with --link-*."""

    def __init__(self, rank, world, blocking, link=None, link_factor=1.0):
        self.rank, self.world, self.blocking = rank, world, blocking
        self.nxt, self.prv = (rank + 1) % world, (rank - 1) % world
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0       # time in communication this step
        self.bufs = {}        # persistent message buffers (padding stays zero past the head)

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        # one send and one receive buffer per message size (a hop is waited before the next is
        # posted, so they are free again); with --big two sizes travel
        buf = self.bufs.get((key, n))
        if buf is None:
            buf = self.bufs[(key, n)] = torch.zeros(n)
        return buf

    def post(self, trav, recv_rows, hop):
        """Start hop ``hop``: send ``trav`` (rows, 4) on, receive ``recv_rows`` rows from behind."""
        flat = trav.reshape(-1)
        sbuf = self._buffer("send", self._padded(flat.numel(), self.rank, self.nxt))
        sbuf[: flat.numel()].copy_(flat)
        rbuf = self._buffer("recv", self._padded(recv_rows * 4, self.prv, self.rank))
        t0 = time.perf_counter()
        if self.blocking:
            if self.rank % 2 == 0:
                dist.send(sbuf, self.nxt, tag=hop)
                dist.recv(rbuf, self.prv, tag=hop)
            else:
                dist.recv(rbuf, self.prv, tag=hop)
                dist.send(sbuf, self.nxt, tag=hop)
            works = []
        else:
            works = [dist.isend(sbuf, self.nxt, tag=hop), dist.irecv(rbuf, self.prv, tag=hop)]
        self.secs += time.perf_counter() - t0
        return works, rbuf, recv_rows

    def finish(self, handle):
        works, rbuf, rows = handle
        t0 = time.perf_counter()
        for w in works:
            w.wait()
        self.secs += time.perf_counter() - t0
        return rbuf[: rows * 4].view(rows, 4).clone()

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t


# --------------------------------------------------------------------------
# physics
# --------------------------------------------------------------------------

class ForceCorrection(nn.Module):
    """Radial force correction f_c(r) from features [r, 1/(r^2+eps^2)]."""

    def __init__(self, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 1))
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, r, inv_r2):
        return self.net(torch.stack([r, inv_r2], -1)).squeeze(-1)


def pair_tile(xi, xj, mj, model, potential, eps2):
    """Acceleration on the rows xi (t, 3) from the block (xj (m, 3), mj (m,)) and the pair energy."""
    d = xj.unsqueeze(0) - xi.unsqueeze(1)                 # (t, m, 3)
    r2 = (d * d).sum(-1) + eps2
    inv_r2 = 1.0 / r2
    r = torch.sqrt(r2)
    if potential == "gravity":
        inv_r = torch.sqrt(inv_r2)
        mag = mj * inv_r2 * inv_r                          # attractive, along +d
        energy = -(mj * inv_r).sum(1)
    else:
        s6 = (0.01 * inv_r2) ** 3                         # sigma = 0.1
        mag = -24.0 * mj * (2.0 * s6 * s6 - s6) * inv_r2   # repulsive core, attractive tail
        energy = 4.0 * (mj * (s6 * s6 - s6)).sum(1)
    corr = model(r.reshape(-1), inv_r2.reshape(-1)).view_as(r)
    mag = mag - mj * corr / r                             # learned correction (positive = repulsive)
    acc = (d * mag.unsqueeze(-1)).sum(1)
    return acc, energy


def interact(rows, block, model, args, extra):
    """Accelerations and energies on ``rows`` (t, 3) from ``block`` (m, 4: x, y, z, mass)."""
    xj, mj = block[:, :3], block[:, 3]
    eps2 = args.softening ** 2
    accs, ens = [], []
    for i, s in enumerate(range(0, rows.shape[0], args.tile)):
        with record_function("tile"):
            a, e = pair_tile(rows[s: s + args.tile], xj, mj, model, args.potential, eps2)
        accs.append(a)
        ens.append(e)
    if extra > 0:             # --factor: the same interaction again, discarded
        for _ in range(int(extra)):
            for s in range(0, rows.shape[0], args.tile):
                pair_tile(rows[s: s + args.tile], xj, mj, model, args.potential, eps2)
        n_frac = int(round(rows.shape[0] * (extra - int(extra))))
        for s in range(0, n_frac, args.tile):
            pair_tile(rows[s: min(s + args.tile, n_frac)], xj, mj, model, args.potential, eps2)
    return torch.cat(accs), torch.cat(ens)


def reference_residual(r, rng=None, noise=0.0):
    """What the reference model adds to the base law: a screened short-range repulsion."""
    out = 0.05 * np.exp(-r / 0.15) / (r * r + 0.01)
    if rng is not None and noise > 0:
        out = out + noise * rng.standard_normal(r.shape)
    return out


def make_reference(path, seed, rows=400_000):
    rng = np.random.default_rng(seed + 12345)
    r = np.exp(rng.uniform(np.log(0.02), np.log(4.0), rows))
    f = reference_residual(r, rng, noise=0.02)
    np.save(path, np.stack([r, f], 1).astype(np.float32))


def block_sizes(args, world):
    return [int(round(args.block * (args.big if r == args.big_rank else 1.0))) for r in range(world)]


def probe_count(args, rank, step):
    n = float(args.probes)
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        z = torch.randn((), generator=g, dtype=torch.float64).item()
        n = n * min(4.0, max(0.25, math.exp(args.seq_sigma * z)))
    return max(1, int(round(n)))


def init_block(n, rank, seed, n_total):
    """A Plummer-like ball of particles; every block a different sample of the same cluster."""
    g = torch.Generator().manual_seed(seed * 7919 + 31 * rank + 1)
    u = torch.rand(n, generator=g).clamp(1e-3, 0.99)
    radius = 1.0 / torch.sqrt(u ** (-2.0 / 3.0) - 1.0)
    radius = radius.clamp(max=5.0)
    direc = torch.randn(n, 3, generator=g)
    direc = direc / direc.norm(dim=1, keepdim=True)
    x = direc * radius.unsqueeze(1)
    v = 0.3 * torch.randn(n, 3, generator=g) / math.sqrt(3.0)
    m = torch.full((n,), 1.0 / n_total) * (0.5 + torch.rand(n, generator=g))
    return x, v, m


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
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    if args.link_src >= 0 and args.link_dst != (args.link_src + 1) % world:
        raise SystemExit("the ring only links r -> r+1 (mod world)")

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    ring = Ring(rank, world, args.blocking, link, args.link_factor)

    # the reference table: written once by rank 0, memory-mapped by all
    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="nbody_ring_")
        make_reference(os.path.join(tmp[0], "reference.npy"), args.seed)
    dist.broadcast_object_list(tmp, src=0)
    work_dir = tmp[0]
    dist.barrier()
    reference = np.load(os.path.join(work_dir, "reference.npy"), mmap_mode="r")
    traj_path = os.path.join(work_dir, f"traj_rank{rank}.f32")

    sizes = block_sizes(args, world)
    n_total = sum(sizes)
    x, v, m = init_block(sizes[rank], rank, args.seed, n_total)

    torch.manual_seed(args.seed)           # the same initial weights on every rank
    model = ForceCorrection(args.hidden)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=args.lr)
    n_params = sum(q.numel() for q in params)

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[nbody-ring] world={world} blocks={sizes} probes={args.probes} tile={args.tile} "
              f"potential={args.potential} hidden={args.hidden} params={n_params} "
              f"ring={'send/recv' if args.blocking else 'isend/irecv'}{' overlap' if args.overlap else ''}",
              flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    e0 = None
    acc_prev = None
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                ring.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                # ---- forces by the systolic ring ----
                with record_function("ring_forces"), torch.no_grad():
                    n_probe = probe_count(args, rank, step)
                    g = torch.Generator().manual_seed(args.seed * 104_729 + 7 * rank + step)
                    pick = torch.randint(0, sizes[rank], (n_probe,), generator=g)
                    probes = x[pick] + 0.05 * torch.randn(n_probe, 3, generator=g)
                    rows = torch.cat([x, probes])
                    trav = torch.cat([x, m.unsqueeze(1)], 1)
                    handle = None
                    if args.overlap:        # the first hop travels while the block interacts with itself
                        with record_function("ring_hop"):
                            handle = ring.post(trav, sizes[(rank - 1) % world], 1)
                    with record_function("interact"):
                        acc, en = interact(rows, trav, model, args, extra)
                    for hop in range(1, world):
                        owner = (rank - hop) % world
                        if args.overlap:
                            with record_function("ring_wait"):
                                trav = ring.finish(handle)
                            if hop < world - 1:
                                with record_function("ring_hop"):
                                    handle = ring.post(trav, sizes[(rank - hop - 1) % world], hop + 1)
                        else:
                            with record_function("ring_hop"):
                                trav = ring.finish(ring.post(trav, sizes[owner], hop))
                        with record_function("interact"):
                            a2, e2 = interact(rows, trav, model, args, extra)
                            acc += a2
                            en += e2

                # ---- leapfrog / velocity Verlet ----
                with record_function("integrate"), torch.no_grad():
                    n_own = sizes[rank]
                    a_own = acc[:n_own]
                    v_sync = v + 0.5 * args.dt * a_own if acc_prev is not None else v
                    kinetic = 0.5 * (m * (v_sync * v_sync).sum(1)).sum()
                    potential = 0.5 * (m * en[:n_own]).sum()
                    momentum = (m.unsqueeze(1) * v_sync).sum(0)
                    v = v + (args.dt if acc_prev is not None else 0.5 * args.dt) * a_own
                    x = x + args.dt * v
                    acc_prev = a_own
                    probe_field = acc[n_own:].norm(dim=1).sum()

                # ---- train the force correction ----
                with record_function("train_correction"):
                    for it in range(args.train_iters):
                        with record_function("load_reference"):
                            if slow and args.data_sleep_ms > 0:
                                time.sleep(args.data_sleep_ms / 1000.0)
                            rng = np.random.default_rng((args.seed, rank, step, it))
                            idx = np.sort(rng.choice(len(reference), args.train_batch, replace=False))
                            batch = torch.from_numpy(np.asarray(reference[idx]))
                            r_b, f_b = batch[:, 0], batch[:, 1]
                        with record_function("correction_forward"):
                            pred = model(r_b, 1.0 / (r_b * r_b + args.softening ** 2))
                            loss = ((pred - f_b) ** 2).mean()
                        with record_function("correction_backward"):
                            opt.zero_grad(set_to_none=False)
                            loss.backward()
                        with record_function("grad_allreduce"):
                            flat = torch.cat([q.grad.reshape(-1) for q in params])
                            ring.all_reduce(flat)
                            flat /= world
                            o = 0
                            for q in params:
                                q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                                o += q.numel()
                        with record_function("correction_step"):
                            opt.step()

                # ---- diagnostics ----
                with record_function("energy_reduce"):
                    diag = torch.cat([kinetic.reshape(1), potential.reshape(1), momentum,
                                      probe_field.reshape(1), torch.tensor([float(n_probe)])])
                    ring.all_reduce(diag)
                    e_tot = (diag[0] + diag[1]).item()
                    if e0 is None:
                        e0 = e_tot

                if args.traj_every > 0 and step % args.traj_every == 0:
                    with record_function("write_frame"):
                        if slow and args.traj_sleep_ms > 0:
                            time.sleep(args.traj_sleep_ms / 1000.0)
                        with open(traj_path, "ab") as fh:
                            fh.write(np.asarray(x, dtype=np.float32).tobytes())

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - ring.secs)
                if rank == 0:
                    print(f"step {step:3d} E {e_tot:.5f} dE/E0 {(e_tot - e0) / abs(e0):+.2e} "
                          f"|p| {diag[2:5].norm().item():.2e} corr_loss {loss.item():.4e} "
                          f"probes {int(diag[6].item())} t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside ring hops and all_reduces) per rank: " +
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
