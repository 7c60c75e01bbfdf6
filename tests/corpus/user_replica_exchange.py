"""Parallel tempering (replica exchange) training of an MLP energy-based model, one temperature a rank.

(calibration table at the end of this docstring)

What it is
----------
An energy-based model E_theta(x) (an MLP: ``--depth`` hidden layers of ``--hidden`` SiLU units,
a scalar out) fitted to a toy density by contrastive divergence with persistent Langevin
chains, the negative samples improved by parallel tempering. 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``), each rank one replica of the ladder
T_r = ``--t-max`` ** (r / 3) (rank 0 at T = 1, the target; rank 3 the hottest, T = 4 by
default). Every rank keeps its own persistent buffer of chains and the full model.

Data: 8 Gaussian blobs on a ring of radius 2 (std 0.15) in 2D; for ``--data-dim`` D > 2 the
ring is put into D dimensions by a fixed random orthonormal map plus 0.05 isotropic noise.
The data set (64 k points) is drawn once from ``--seed`` by every rank; each step a rank reads
``--batch`` points of it at indices drawn from (seed, rank, step).

One training step on a rank:

1. ``langevin``: K = ``--langevin-steps`` steps of Langevin dynamics at the rank's temperature
   on its n active chains (``--chains`` by default):
   x <- x - (eta / 2T) dE/dx + sqrt(eta) xi, eta = ``--step-size``, x clamped to [-6, 6];
   dE/dx by ``torch.autograd.grad`` of E(x).sum() w.r.t. the samples (each iteration a
   ``langevin_iter`` range: the energy forward and its gradient);
2. ``replica_exchange``: neighbouring temperatures try to swap configurations: pairs (0,1)
   and (2,3) on even steps, (1,2) on odd steps (ranks 0 and 3 sit the odd steps out). The
   pair first exchanges the energies of its first m = min(n_lo, n_hi) chains
   (``swap_energies``), both draw the same uniforms from (seed, step, pair) and accept chain j
   with probability min(1, exp((1/T_lo - 1/T_hi) (E_lo_j - E_hi_j))) (``--swap chain``; with
   ``--swap replica`` one decision for the whole configuration from the summed energies),
   then exchange the m samples (``swap_samples``) and keep the partner's where accepted.
   All of it by BLOCKING ``dist.send`` / ``dist.recv``: the lower rank sends then receives,
   the upper receives then sends;
3. ``forward`` / ``backward``: the contrastive-divergence loss of the tempered model,
   (mean E(data) - mean E(negatives)) / T_r + ``--reg`` (mean E(data)^2 + mean E(neg)^2),
   the negatives the rank's n chains after the swap (detached);
4. ``allreduce_grads``: the parameter gradients all-reduced and averaged over the 4 ranks
   (one flat buffer, or buckets of ``--bucket-kb``), then ``optimizer`` (Adam, clip 1.0);
5. ``dump_samples``: the replica writes a snapshot of its first 256 chains to disk
   (``np.save`` into a temporary folder, one file a step, for the animation);
6. ``log_acceptance``: a world ``dist.all_gather`` of each replica's 6 statistics (swaps
   accepted, attempted, mean energy of data and samples, temperature, chains); rank 0 prints.

Communication per step (defaults: 512 chains in 16 D, hidden 256): on a pair's step 2 blocking
messages of 2 KB (energies) and 2 of 32 KB (samples) between the two partners; one all_reduce
of ~0.14 M floats; one all_gather of 6 floats a rank.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``langevin`` [``langevin_iter``],
``replica_exchange`` [``swap_energies``, ``swap_samples``] (only on a pair's step),
``forward``, ``backward``, ``allreduce_grads``, ``optimizer``, ``dump_samples``,
``log_acceptance``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the swap
sends/receives, the all_reduce(s) and the all_gather).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--data-dim`` (16), ``--hidden`` (256), ``--depth`` (3), ``--chains`` (512),
``--langevin-steps`` (20), ``--step-size`` (0.01), ``--batch`` (512), ``--t-max`` (4.0),
``--reg`` (0.1), ``--lr`` (1e-3), ``--swap {chain,replica}`` (chain),
``--bucket-kb`` (0 = one flat all_reduce).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every Langevin iteration's energy gradient is computed F
  times (F - 1 extra forward + autograd.grad passes, discarded; the fractional part over that
  fraction of the chains), inside ``langevin_iter``;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow data read: ``load_batch`` sleeps MS each step;
* ``--dump-sleep-ms MS`` (family fault): a slow sample dump (a slow shared filesystem):
  ``dump_samples`` sleeps MS before writing the snapshot;
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B neighbours, |A - B| = 1): the samples
  message A sends to B in the swap (``swap_samples``) carries X times the bytes (zero-padded
  in the same message; B receives it all and keeps the head). Only on the steps where A and B
  are paired: (0,1)/(2,3) on even steps, (1,2) on odd steps, so half the steps. The energies
  message is not padded. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's number of active chains this step is ``--chains`` times
  lognormal(0, S) (drawn from (seed, rank, step), clamped to [1/4x, 4x], at least 16):
  the Langevin work, the swap's m and the negatives differ by rank and step;
* ``--big-rank K --big X``: rank K runs X times the chains of the others, every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 11-20 during the
calibration); 4 ranks, 10 steps (8 timed); fault runs next to a healthy default run ("base",
its step median). Step medians of all ranks agree within 1-2 % (the all_reduce ties the
replicas every step), so one number; "busy" = median time outside communication, slow rank
vs the mean of the others.

  setting (slow rank)                            base ms  step ms  change   busy slow / others ms
  healthy default (1024 chains, K 10, 16 D)         -    555-1710    -      400-1450 (by load)
  healthy --data-dim 2 --hidden 192 --shapes        -       990      -      640-876
  healthy --swap replica --bucket-kb 128            -      1165      -      866-962
  healthy --langevin-steps 16 --chains 640          -      1040      -      750-957
  healthy --t-max 8 --depth 4 --hidden 224          -      1335      -      1031-1210
  --factor 2 (r1)                                  555     1497   +170%    1250 / 628
  --factor 2 (r1)                                  858     1646    +92%    1531 / 773
  --factor 1.6 (r3)                               1015     1705    +68%    1628 / 1167
  --data-dim 2 --factor 2.5 (r0)                   858     2224   +159%    2117 / 1019
  --swap replica --factor 1.8 (r2)                 858     2310   (load)   2213 / 1376
  --sleep-ms 150 (r2)                              632      776    +23%     655 / 557
  --sleep-ms 200 (r2)                             1707     1432  (quiet)   1251 / 1115
  --sleep-ms 300 (r2)                             1172     1354    +16%    1257 / 940
  --data-sleep-ms 150 (r3)                         632      899    +42%     828 / 724
  --data-sleep-ms 200 (r3)                        1707     1430  (quiet)   1289 / 1152
  --data-sleep-ms 300 (r3)                        1172     1320    +13%    1239 / 1009
  --dump-sleep-ms 150 (r0)                         632     1006  (load)     923 / 738
  --dump-sleep-ms 200 (r0)                        1707     1165  (quiet)   1050 / 860
  --dump-sleep-ms 300 (r0)                        1172     1559    +33%    1332 / 1039
  --hog (r1)                                       745     1584   +113%    1440 / 782
  link 1->2 x1024 (64 MB samples, odd steps)       857     1190    +39%    odd steps 1390-1870,
                                                                           even 907-1225
  link 1->2 x2048 (128 MB, odd steps)              745     1464    +97%    r1 1114, r2 1214 / 924;
                                                                           odd 1474-2043, even 944-1267
  --big-rank 3 --big 3                            1015     2250   +122%    2192 / 903
  --seq-sigma 0.8                                   -      1601      -     712-1103; chains 256-4096
                                                                           by rank and step

Reading: the box's load moved a healthy step between 555 and 1710 ms from one run to the
next, so one run's step change says little; the slowed rank's busy time shows each fault.
The Langevin loop is ~80 % of a step, so ``--factor`` 1.6-2.5 costs the rank 40-110 % of its
busy time, and everyone waits for it in the gradient all_reduce (or in its swap on a pair's
step). A host sleep costs less than its length under this load (the other ranks get the
core while it sleeps): 300 ms adds 230-300 ms to the rank's busy time, 23-34 %; 150-200 ms
only 10-25 %. The hog's matmuls take the rank ~half its CPU (+84 % busy). A padded link
costs only on the steps where A and B are paired (odd steps for 1->2) and only once the
samples message is tens of MB: x2048 (128 MB over loopback TCP) adds 500-800 ms to those
steps for every rank (the pair waits in ``swap_samples``, the others in the all_reduce).
More chains (``--big``) lengthen everyone's step: the all_reduce waits for the big
replica's Langevin loop. Wall per run: 20-35 s (27-62 s in the users100 battery, load 15-20); traces 5-7 MB a rank, 7.7 MB with
--shapes, 11 MB on a rank with --factor 2.5.
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
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--data-dim", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--chains", type=int, default=1024)
    p.add_argument("--langevin-steps", type=int, default=10)
    p.add_argument("--step-size", type=float, default=0.01)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--t-max", type=float, default=4.0)
    p.add_argument("--reg", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--swap", choices=["chain", "replica"], default="chain")
    p.add_argument("--bucket-kb", type=int, default=0, help="gradient buckets (0 = one flat buffer)")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--dump-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and abs(a.link_src - a.link_dst) != 1:
        p.error("replicas only swap with their neighbours (|src - dst| == 1)")
    return a


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

class Comm:
    """Blocking point-to-point between swap partners, the collectives; times them all."""

    def __init__(self, rank, world, link=None, link_factor=1.0):
        self.rank, self.world = rank, world
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0
        self.bufs = {}     # persistent buffers (padded ones stay zero past the head)

    def _padded(self, n, src, dst, padme):
        if padme and self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() < n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf[:n]

    def send(self, t, dst, tag, padme=False):
        flat = t.detach().reshape(-1)
        n = self._padded(flat.numel(), self.rank, dst, padme)
        if n == flat.numel():
            buf = flat.contiguous()
        else:
            buf = self._buffer(("send", dst, tag), n)
            buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        dist.send(buf, dst, tag=tag)
        self.secs += time.perf_counter() - t0

    def recv(self, shape, src, tag, padme=False):
        numel = math.prod(shape)
        n = self._padded(numel, src, self.rank, padme)
        buf = torch.empty(n) if n == numel else self._buffer(("recv", src, tag), n)
        t0 = time.perf_counter()
        dist.recv(buf, src, tag=tag)
        self.secs += time.perf_counter() - t0
        return buf[:numel].view(shape).clone()

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t

    def all_gather(self, t):
        out = [torch.empty_like(t) for _ in range(self.world)]
        t0 = time.perf_counter()
        dist.all_gather(out, t)
        self.secs += time.perf_counter() - t0
        return torch.stack(out)


# --------------------------------------------------------------------------
# model and data
# --------------------------------------------------------------------------

class EnergyMLP(nn.Module):
    def __init__(self, dim, hidden, depth):
        super().__init__()
        layers, d = [], dim
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.SiLU()]
            d = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        return self.head(self.body(x)).squeeze(-1)


def make_dataset(dim, seed, n=65536):
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(0, 8, (n,), generator=g)
    ang = k.float() * (2 * math.pi / 8)
    pts = torch.stack([2 * torch.cos(ang), 2 * torch.sin(ang)], 1) + 0.15 * torch.randn(n, 2, generator=g)
    if dim == 2:
        return pts
    q, _ = torch.linalg.qr(torch.randn(dim, 2, generator=g))
    return pts @ q.t() + 0.05 * torch.randn(n, dim, generator=g)


def chains_of(args, world, step):
    """Every replica's active chains this step (all ranks can compute all of them)."""
    out = []
    for r in range(world):
        n = float(args.chains)
        if r == args.big_rank:
            n *= args.big
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + r * 10_007 + step)
            z = torch.randn((), generator=g, dtype=torch.float64).item()
            n *= min(4.0, max(0.25, math.exp(args.seq_sigma * z)))
        out.append(max(16, int(round(n))))
    return out


def energy_grad(model, x):
    """dE/dx for the samples x, and E(x) (detached)."""
    x = x.detach().requires_grad_(True)
    e = model(x)
    (g,) = torch.autograd.grad(e.sum(), x)
    return g, e.detach()


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

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, world, link, args.link_factor)

    temps = [args.t_max ** (r / max(1, world - 1)) for r in range(world)]
    T = temps[rank]
    beta = [1.0 / t for t in temps]

    data = make_dataset(args.data_dim, args.seed)

    torch.manual_seed(args.seed)            # the same initial weights on every rank
    model = EnergyMLP(args.data_dim, args.hidden, args.depth)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=args.lr, betas=(0.0, 0.999))
    n_params = sum(q.numel() for q in params)

    # persistent chains: room for the most this replica may ever run
    max_chains = int(math.ceil(args.chains * 4 * max(1.0, args.big))) + 16
    gen = torch.Generator().manual_seed(args.seed * 101 + rank)
    chains = 6.0 * torch.rand(max_chains, args.data_dim, generator=gen) - 3.0

    buckets, cur, cur_n = [], [], 0
    limit = args.bucket_kb * 256 if args.bucket_kb > 0 else float("inf")
    for q in reversed(params):
        cur.append(q)
        cur_n += q.numel()
        if cur_n >= limit:
            buckets.append(cur)
            cur, cur_n = [], 0
    if cur:
        buckets.append(cur)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="replica_exchange_")
    dist.broadcast_object_list(tmp, src=0)
    dump_dir = tmp[0]

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    eta = args.step_size

    if rank == 0:
        print(f"[replica-exchange] world={world} temps={[round(t, 3) for t in temps]} dim={args.data_dim} "
              f"hidden={args.hidden}x{args.depth} chains={args.chains} K={args.langevin_steps} "
              f"batch={args.batch} params={n_params} buckets={len(buckets)} swap={args.swap}", flush=True)

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
                    ns = chains_of(args, world, step)
                    n = ns[rank]
                    g = torch.Generator().manual_seed(args.seed * 7919 + rank * 131 + step)
                    idx = torch.randint(0, data.shape[0], (args.batch,), generator=g)
                    x_data = data[idx]

                # 1. Langevin dynamics at this replica's temperature
                with record_function("langevin"):
                    x = chains[:n].clone()
                    for _ in range(args.langevin_steps):
                        with record_function("langevin_iter"):
                            grad, _ = energy_grad(model, x)
                            if extra > 0:        # --factor: the same gradient again, discarded
                                for _ in range(int(extra)):
                                    energy_grad(model, x)
                                rows = int(round(n * (extra - int(extra))))
                                if rows > 0:
                                    energy_grad(model, x[:rows])
                            noise = torch.randn(x.shape, generator=gen)
                            x = (x - (eta / (2 * T)) * grad + math.sqrt(eta) * noise).clamp_(-6.0, 6.0)
                    chains[:n] = x

                # 2. replica exchange with the neighbour of this step's pairing
                acc, att = 0.0, 0.0
                partner = rank + 1 if (rank % 2) == (step % 2) else rank - 1
                if 0 <= partner < world:
                    lo, hi = min(rank, partner), max(rank, partner)
                    m = min(ns[lo], ns[hi])
                    with record_function("replica_exchange"):
                        with torch.no_grad():
                            e_mine = model(chains[:m])
                        with record_function("swap_energies"):
                            if rank == lo:
                                comm.send(e_mine, partner, tag=2 * step)
                                e_other = comm.recv((m,), partner, tag=2 * step)
                            else:
                                e_other = comm.recv((m,), partner, tag=2 * step)
                                comm.send(e_mine, partner, tag=2 * step)
                        e_lo, e_hi = (e_mine, e_other) if rank == lo else (e_other, e_mine)
                        u = torch.rand(m, generator=torch.Generator().manual_seed(
                            args.seed * 65_537 + step * 16 + lo), dtype=torch.float64)
                        d = (beta[lo] - beta[hi]) * (e_lo.double() - e_hi.double())
                        if args.swap == "chain":
                            accept = torch.log(u) < d
                        else:
                            accept = (torch.log(u[:1]) < d.sum()).expand(m)
                        with record_function("swap_samples"):
                            mine = chains[:m]
                            if rank == lo:
                                comm.send(mine, partner, tag=2 * step + 1, padme=True)
                                other = comm.recv(mine.shape, partner, tag=2 * step + 1, padme=True)
                            else:
                                other = comm.recv(mine.shape, partner, tag=2 * step + 1, padme=True)
                                comm.send(mine, partner, tag=2 * step + 1, padme=True)
                        chains[:m][accept] = other[accept]
                        acc, att = float(accept.sum().item()), float(m)

                # 3. contrastive divergence of the tempered model
                with record_function("forward"):
                    x_neg = chains[:n].detach()
                    e_pos = model(x_data)
                    e_neg = model(x_neg)
                    loss = (e_pos.mean() - e_neg.mean()) / T + args.reg * (e_pos.pow(2).mean() + e_neg.pow(2).mean())
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()

                # 4. data-parallel gradient average over the replicas
                with record_function("allreduce_grads"):
                    for bk in buckets:
                        flat = torch.cat([q.grad.reshape(-1) for q in bk])
                        comm.all_reduce(flat)
                        flat /= world
                        o = 0
                        for q in bk:
                            q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                            o += q.numel()
                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()

                # 5. the replica's samples to disk
                with record_function("dump_samples"):
                    if slow and args.dump_sleep_ms > 0:
                        time.sleep(args.dump_sleep_ms / 1000.0)
                    np.save(os.path.join(dump_dir, f"samples_r{rank}_s{step:04d}.npy"),
                            chains[:256].numpy().copy())

                # 6. acceptance statistics of every replica
                with record_function("log_acceptance"):
                    stats = torch.tensor([acc, att, e_pos.mean().item(), e_neg.mean().item(), T, float(n)])
                    allstats = comm.all_gather(stats)

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    rates = " ".join(f"{int(s[0])}/{int(s[1])}" for s in allstats)
                    print(f"step {step:3d} loss {loss.item():+.4f} |g| {float(gnorm):.3f} "
                          f"E+ {allstats[:, 2].mean().item():+.3f} E- {[round(v, 2) for v in allstats[:, 3].tolist()]} "
                          f"swaps {rates} chains {ns} t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside swaps, all_reduce, all_gather) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(dump_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
