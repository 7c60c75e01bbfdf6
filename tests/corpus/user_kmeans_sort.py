"""Distributed k-means clustering with a sample-sort style redistribution and per-cluster models.

(calibration table at the end of this docstring)

What it is
----------
A clustering stage of a data pipeline, run on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``). Every step is one "micro-batch" of
the stream:

1. ``read_shard``: each rank reads its shard of points: ``--points`` rows of ``--dim``
   features and one target value, drawn from (seed, rank, step) out of a fixed mixture of
   ``--clusters`` Gaussian blobs with mildly different popularity (the target is a smooth
   per-blob function of the features plus noise).
2. ``kmeans``: ``--iters`` Lloyd iterations (or with ``--algo minibatch`` mini-batch k-means
   on a random ``--batch-frac`` of the shard per iteration, Sculley's per-centre rates),
   starting from the running centroids of the previous step. Per iteration each rank
   computes the squared distances of its points to the K centroids (one matmul), the
   assignments (argmin), the partial sums (``index_add_``) and counts (``bincount``) and the
   inertia, then ``all_reduce`` (SUM) of one flat buffer [sums | counts | inertia] gives
   the new centroids (empty clusters keep their centre). A convergence check follows: one
   ``all_reduce`` MAX of [centroid shift, local mean inertia] and one ``all_reduce`` MIN of
   the local mean inertia (the spread over the ranks is logged); with ``--tol`` > 0 the loop
   stops once the shift is below it (0 = always all iterations, the default). A final
   assignment with the last centroids labels every point.
3. ``redistribute``: a sample-sort style exchange by cluster ownership: cluster c is owned
   by rank ``c % 4`` (``--owner modulo``) or, with ``--owner balanced``, the clusters are
   dealt to the ranks greedily by their global counts (largest first onto the least loaded
   rank, the same on every rank since the counts are all-reduced). Each rank sorts its
   points by owner (stable ``argsort``), exchanges the per-destination counts with an
   ``all_to_all_single`` of 4 int64 (``exchange_counts``), then the points themselves
   (features, target, cluster id as one float row) with ``all_to_all_single`` and UNEVEN
   input/output split sizes (``exchange_points``). ``--exchange list`` uses
   ``dist.all_to_all`` with a list of tensors instead; gloo's all_to_all of a list needs
   every tensor the same size, so (as users end up doing) the chunks are zero-padded to the
   step's largest chunk, found by an extra ``all_reduce`` MAX, and trimmed on arrival.
   (``dist.all_to_all`` with uneven lists is what one writes first; gloo refuses it.)
4. ``fit``: each rank fits a tiny model per owned cluster: a per-cluster ``nn.Linear(dim,
   hidden)`` + ReLU, then a head ``Linear(hidden, hidden) - Tanh - Linear(hidden, 1)``
   shared by all clusters and all ranks. ``--fit-iters`` Adam iterations, each: forward
   (a Python loop over the owned clusters, MSE), ``backward``, ``all_reduce`` of the shared
   head's gradient (one flat buffer, averaged), optimizer step. The per-cluster layers are
   updated only by their owner.
5. ``metrics_allreduce`` (4 floats: fit loss sum, owned points, inertia, points) and
   ``write_results``: each rank saves its owned points' (cluster, prediction) as a ``.npy``
   part file and appends a line to its jsonl log (in a temporary directory, removed at the
   end).

Communication per step (defaults: 16 000 points a rank, K = 32, dim = 32, 5 iterations,
2 fit iterations): 5 x (all_reduce of 1 057 floats + all_reduce MAX of 2 + all_reduce MIN
of 1), the final labels need none; all_to_all_single of 4 counts; all_to_all_single of the
points, 34 floats a row (~2.2 MB a rank, ~540 KB a pair, uneven; ``--exchange list``: an
all_reduce MAX of 1 int, then dist.all_to_all of 4 equal padded tensors); ``--owner
balanced`` adds an all_reduce of the K counts; 2 all_reduces of the head gradient
(1 089 floats); the 4-float metrics all_reduce. Before the traced steps: a broadcast of the
initial centroids (drawn from rank 0's first shard).

User ranges per step: ``sleep`` (fault only), ``read_shard``, ``kmeans`` [``lloyd_i`` with
``assign``, ``partial_sums``, ``allreduce_sums``, ``update_centroids``, ``convergence``;
``final_assign``], ``redistribute`` [``sort_by_owner``, ``exchange_counts``,
``exchange_points``, ``unpack``], ``fit`` [``fit_forward``, ``fit_backward``,
``head_allreduce``, ``fit_optimizer``], ``metrics_allreduce``, ``write_results``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent inside the
collectives: all_reduces, all_to_alls).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Job size / options: ``--points`` (16000 a rank), ``--dim`` (32), ``--clusters`` (32),
``--iters`` (5), ``--tol`` (0), ``--algo {lloyd,minibatch}``, ``--batch-frac`` (0.35),
``--hidden`` (32), ``--fit-iters`` (2), ``--lr`` (1e-2), ``--owner {modulo,balanced}``,
``--exchange {single,list}``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's distance/assignment computation (every k-means
  iteration and the final assignment) and its per-cluster fit forward are done F times
  (F - 1 extra passes without grad, discarded; the fractional part over that fraction of
  the rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow shard read: ``read_shard`` sleeps MS each step;
* ``--write-sleep-ms MS`` (family fault): a slow result writer: ``write_results`` sleeps MS
  before writing the part file (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X``: in the point exchange (``--exchange single``
  only) the chunk rank A sends to rank B carries X times the rows: A's input split for B is
  X x its real count, the real rows followed by zero rows; B's output split for A is the
  same, B receives it all and keeps the head. Every other pair, the counts exchange and all
  collectives are unchanged. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's shard has ``--points`` x lognormal(0, S) rows, drawn from
  (seed, rank, step), clamped to [1/4, 4] x: the shards differ by rank and step (the
  k-means phase of the bigger shards is longer; after the exchange the owned points are
  about even again);
* ``--big-rank K --big X``: rank K's shard is X times the others', every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 15-20 during the whole
calibration); 4 ranks, 10 steps (8 timed). Step medians of all ranks agree within ~2% (every
k-means iteration all-reduces), so one number; "busy" = median time outside the collectives,
slow rank vs the mean of the others; "a2a" = median time inside the all_to_alls. "base" = the
healthy default run just before or after (its step median).

  setting (slow rank)                               base ms  step ms   busy slow / others ms
  healthy default (5 runs, seeds 1, 3, 8, 8, 11)       -     600-1085  153-448 (by load)
  healthy --shapes --exchange list                     -       873     270-332 (11.8 MB/rank)
  healthy --owner balanced --algo minibatch            -       637     212-241
  healthy --points 20000 --dim 24 --clusters 48
          --iters 4 --hidden 48                        -     1047-1185 404-687
  healthy --points 12000 --iters 8 --tol 0.05
          --fit-iters 3                                -       770     226-298
  same, --tol 0.08 (the last shift 0.12-0.15: no
          early stop)                                  -       756     253-281
  same, --tol 0.14 (steps from 3 on stop early;
          the box had gone quiet)                      -       301      61-72
  --factor 2 (r1)                                     849      824     507 / 230   (+120%)
  --factor 3 (r2)                                     849      945     526 / 226   (+133%)
  --exchange list --factor 2.5 (r3)                    -       864     496 / 259   (+92%)
  --algo minibatch --owner balanced --factor 3 (r0)    -       947     495 / 240   (+106%)
  --sleep-ms 160 (r3)                                 690      783     315 / 214
  --sleep-ms 200 (r3)                                  -      1318     575 / 366   (load rose)
  --data-sleep-ms 160 (r2)                            690      897     463 / 255
  --write-sleep-ms 160 (r1)                           690      755     367 / 186
  --write-sleep-ms 250 (r1)                            -       790     424 / 179
  --hog (r0)                                          870      975     353 / 191   (+85%)
  link 1->2 x256 (~140 MB chunk)                      600      552     a2a r1 154, r2 171 / 37-51
  link 1->2 x512 (~280 MB chunk)                      690     1281     a2a r1 619, r2 620 / 33-36
  link 3->1 x512                                       -       768     a2a r3 318, r1 318 / 31-37
  --seq-sigma 0.8                                      -       675     shards 5.9k-64k by rank and step
  --big-rank 3 --big 3                                 -      1015     692 / 318; a2a others 95-122

Reading: the neighbours' load moved a healthy step between 600 and 1085 ms from one run to
the next (300 ms once the box went quiet), so a run's step change says little; the slowed
rank's busy time shows every fault. ``--factor`` repeats the distance/argmin passes (most
of a rank's compute) and the fit forward, so F = 2 already doubles the rank's busy time;
the others wait in the next ``allreduce_sums``. A sleep of 160-200 ms is 20-30% of a step (the others wait for the
sleeper in the next all_reduce; while it sleeps they get more of the cores, so the step grows
by less than the sleep). The padded link costs nothing until the chunk is ~100 MB (loopback
TCP is fast), then the two ends of the link wait in ``exchange_points`` (the other ranks
finish their own pairs and wait in the next collective). The sender's padding is a
persistent zeroed buffer (only the real rows are written and cleared again), so the link
fault adds no compute on A. A bigger shard (``--big``) lengthens the k-means phase of that
rank only; after the exchange the owned points are about even again. Wall per run: 33-55 s
at that load, 14 s on a quiet box (startup and the trace export are most of it); traces
7-12 MB a rank. The battery (run_users.py USERS99B) uses 250 ms for the three sleeps,
F = 2-3 and link 3->1 x512.
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
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--points", type=int, default=16000, help="points a rank reads per step")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--clusters", type=int, default=32)
    p.add_argument("--iters", type=int, default=5, help="k-means iterations per step")
    p.add_argument("--tol", type=float, default=0.0, help="stop when the centroid shift is below (0 = never)")
    p.add_argument("--algo", choices=["lloyd", "minibatch"], default="lloyd")
    p.add_argument("--batch-frac", type=float, default=0.35, help="minibatch: fraction of the shard per iteration")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--fit-iters", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--owner", choices=["modulo", "balanced"], default="modulo")
    p.add_argument("--exchange", choices=["single", "list"], default="single")
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
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    a = p.parse_args()
    if (a.link_src >= 0) != (a.link_dst >= 0):
        p.error("--link-src and --link-dst go together")
    if a.link_src >= 0 and (a.link_src == a.link_dst or a.exchange != "single"):
        p.error("a padded link needs two different ranks and --exchange single")
    return a


# --------------------------------------------------------------------------
# communication (timed, so that the end can tell busy time from waiting)
# --------------------------------------------------------------------------

class Comm:
    def __init__(self):
        self.secs = 0.0        # time inside collectives this step
        self.a2a_secs = 0.0    # of which in the all_to_alls

    def all_reduce(self, t, op=dist.ReduceOp.SUM):
        t0 = time.perf_counter()
        dist.all_reduce(t, op=op)
        self.secs += time.perf_counter() - t0
        return t

    def all_to_all_single(self, out, inp, out_splits=None, in_splits=None):
        t0 = time.perf_counter()
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        dt = time.perf_counter() - t0
        self.secs += dt
        self.a2a_secs += dt
        return out

    def all_to_all(self, outs, ins):
        t0 = time.perf_counter()
        dist.all_to_all(outs, ins)
        dt = time.perf_counter() - t0
        self.secs += dt
        self.a2a_secs += dt
        return outs


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

class BlobSource:
    """A fixed mixture of Gaussian blobs; shards are drawn from (seed, rank, step)."""

    def __init__(self, seed, clusters, dim):
        g = torch.Generator().manual_seed(seed)
        self.centers = torch.randn(clusters, dim, generator=g) * 3.0
        self.spread = 0.6 + 0.6 * torch.rand(clusters, generator=g)
        self.weights = 1.0 + 0.5 * torch.rand(clusters, generator=g)     # mildly different popularity
        self.coef = torch.randn(clusters, dim, generator=g) / math.sqrt(dim)
        self.bias = torch.randn(clusters, generator=g)
        self.seed = seed

    def shard(self, rank, step, n):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + rank * 10_007 + step)
        c = torch.multinomial(self.weights, n, replacement=True, generator=g)
        x = self.centers[c] + torch.randn(n, self.centers.shape[1], generator=g) * self.spread[c, None]
        y = torch.sin((x * self.coef[c]).sum(1)) + self.bias[c] + 0.05 * torch.randn(n, generator=g)
        return x, y


def shard_sizes(args, world, step):
    """Every rank's shard size this step (every rank can compute all of them)."""
    out = []
    for r in range(world):
        n = float(args.points)
        if r == args.big_rank:
            n *= args.big
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_033 + r * 7_919 + step)
            f = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
            n *= min(4.0, max(0.25, f))
        out.append(max(args.clusters, int(round(n))))
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
# k-means
# --------------------------------------------------------------------------

def assign(x, xx, C, extra=0.0):
    """Squared distances to the centroids, nearest centroid, its distance."""
    cc = (C * C).sum(1)
    d = xx[:, None] - 2.0 * (x @ C.t()) + cc[None, :]
    dmin, lab = d.min(1)
    if extra > 0:                        # --factor: the same work again on a slower device, discarded
        for _ in range(int(extra)):
            d2 = xx[:, None] - 2.0 * (x @ C.t()) + cc[None, :]
            d2.min(1)
        rows = int(round(x.shape[0] * (extra - int(extra))))
        if rows > 0:
            d2 = xx[:rows, None] - 2.0 * (x[:rows] @ C.t()) + cc[None, :]
            d2.min(1)
    return lab, dmin.clamp_min(0.0)


def kmeans(x, C, seen, args, comm, step, extra):
    """Runs the step's iterations from the running centroids C; returns C, seen, labels, inertia."""
    K, D = C.shape
    xx_all = (x * x).sum(1)
    g = torch.Generator().manual_seed(args.seed * 31 + step * 1_009 + dist.get_rank())
    last_it = 0
    for it in range(args.iters):
        last_it = it
        with record_function(f"lloyd_{it}"):
            if args.algo == "minibatch":
                m = max(K, int(x.shape[0] * args.batch_frac))
                idx = torch.randperm(x.shape[0], generator=g)[:m]
                xb, xxb = x[idx], xx_all[idx]
            else:
                xb, xxb = x, xx_all
            with record_function("assign"):
                lab, dmin = assign(xb, xxb, C, extra)
            with record_function("partial_sums"):
                sums = torch.zeros(K, D).index_add_(0, lab, xb)
                counts = torch.bincount(lab, minlength=K).to(torch.float32)
                inertia = dmin.sum()
                buf = torch.cat([sums.reshape(-1), counts, inertia.view(1)])
            with record_function("allreduce_sums"):
                comm.all_reduce(buf)
            with record_function("update_centroids"):
                gs = buf[: K * D].view(K, D)
                gc = buf[K * D: K * D + K]
                if args.algo == "minibatch":
                    newC = (C * seen[:, None] + gs) / (seen + gc).clamp_min(1.0)[:, None]
                    newC = torch.where((seen + gc)[:, None] > 0, newC, C)
                    seen = seen + gc
                else:
                    newC = torch.where(gc[:, None] > 0, gs / gc.clamp_min(1.0)[:, None], C)
                shift = (newC - C).norm(dim=1).max()
                C = newC
            with record_function("convergence"):
                mean_inertia = inertia / max(1, xb.shape[0])
                hi = torch.stack([shift, mean_inertia])
                comm.all_reduce(hi, op=dist.ReduceOp.MAX)
                lo = mean_inertia.clone().view(1)
                comm.all_reduce(lo, op=dist.ReduceOp.MIN)
            if args.tol > 0 and hi[0].item() < args.tol:
                break
    with record_function("final_assign"):
        lab, dmin = assign(x, xx_all, C, extra)
    return C, seen, lab, dmin.sum(), (last_it + 1, hi[0].item(), lo[0].item(), hi[1].item())


def owners_of(counts, world, mode):
    """Cluster -> owning rank (the same on every rank: the counts are all-reduced)."""
    K = counts.numel()
    if mode == "modulo":
        return torch.arange(K) % world
    owner = torch.empty(K, dtype=torch.long)
    load = [0.0] * world
    for c in torch.argsort(counts, descending=True, stable=True).tolist():
        r = min(range(world), key=lambda i: (load[i], i))
        owner[c] = r
        load[r] += float(counts[c])
    return owner


class Buffers:
    """Message buffers kept across steps (grown when a step needs more rows)."""

    def __init__(self):
        self.bufs = {}

    def get(self, key, rows, cols):
        buf = self.bufs.get(key)
        if buf is None or buf.shape[0] < rows or buf.shape[1] != cols:
            buf = self.bufs[key] = torch.zeros(int(rows * 1.25) + 1, cols)
        return buf


def redistribute(x, y, lab, owner, args, comm, rank, world, bufs):
    """Sample-sort style: counts by all_to_all, then the (uneven) points by all_to_all."""
    with record_function("sort_by_owner"):
        dest = owner[lab]
        order = torch.argsort(dest, stable=True)
        payload = torch.cat([x, y[:, None], lab[:, None].to(torch.float32)], 1)[order]
        send_counts = torch.bincount(dest, minlength=world)
    with record_function("exchange_counts"):
        recv_counts = torch.empty_like(send_counts)
        comm.all_to_all_single(recv_counts, send_counts)
    sc, rc = send_counts.tolist(), recv_counts.tolist()
    cols = payload.shape[1]
    with record_function("exchange_points"):
        if args.exchange == "single":
            in_splits, out_splits = list(sc), list(rc)
            if rank == args.link_src and args.link_factor > 1:
                # the chunk for link_dst: its rows, then zero rows up to link_factor x
                b = args.link_dst
                in_splits[b] = int(round(sc[b] * args.link_factor))
                send = bufs.get("send", sum(in_splits), cols)    # all zeros between steps
                o = i = 0
                written = []
                for d in range(world):
                    send[o: o + sc[d]].copy_(payload[i: i + sc[d]])
                    written.append((o, sc[d]))
                    o += in_splits[d]
                    i += sc[d]
                payload = send[:o]
            if rank == args.link_dst and args.link_factor > 1:
                out_splits[args.link_src] = int(round(rc[args.link_src] * args.link_factor))
                recv = bufs.get("recv", sum(out_splits), cols)[: sum(out_splits)]
            else:
                recv = payload.new_empty(sum(out_splits), cols)
            comm.all_to_all_single(recv, payload, out_splits, in_splits)
            if rank == args.link_src and args.link_factor > 1:
                for o, n in written:                    # back to zeros for the next step
                    send[o: o + n].zero_()
            if out_splits != rc:                        # keep the head of the padded chunk
                recv = torch.cat([part[:n] for part, n in zip(torch.split(recv, out_splits), rc)])
        else:
            m = torch.tensor([max(sc)])
            comm.all_reduce(m, op=dist.ReduceOp.MAX)
            m = int(m.item())
            ins = []
            for piece in torch.split(payload, sc):
                t = payload.new_zeros(m, cols)
                t[: piece.shape[0]] = piece
                ins.append(t)
            outs = [payload.new_empty(m, cols) for _ in range(world)]
            comm.all_to_all(outs, ins)
            recv = torch.cat([o[:n] for o, n in zip(outs, rc)])
    with record_function("unpack"):
        rx = recv[:, :-2].contiguous()
        ry = recv[:, -2].contiguous()
        rl = recv[:, -1].round().to(torch.long)
        order = torch.argsort(rl, stable=True)
        rx, ry, rl = rx[order], ry[order], rl[order]
        per = torch.bincount(rl, minlength=owner.numel()).tolist()
    return rx, ry, per, sum(rc)


# --------------------------------------------------------------------------
# per-cluster models with a shared head
# --------------------------------------------------------------------------

class ClusterModels(nn.Module):
    def __init__(self, clusters, dim, hidden):
        super().__init__()
        self.local = nn.ModuleList(nn.Linear(dim, hidden) for _ in range(clusters))
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, groups, owned, rows=None):
        """Per-cluster layers over the owned clusters' points, then the shared head once."""
        hs = []
        for c in owned:
            xc = groups[c] if rows is None else groups[c][: int(round(groups[c].shape[0] * rows))]
            if xc.shape[0]:
                hs.append(torch.relu(self.local[c](xc)))
        if not hs:
            return None
        return self.head(torch.cat(hs)).squeeze(-1)


def fit(models, opt, head_params, rx, ry, per, owned, args, comm, world, extra):
    groups = torch.split(rx, per)
    # the owned clusters' targets in the order the forward concatenates them
    y_owned = torch.cat([torch.split(ry, per)[c] for c in owned]) if owned else ry[:0]
    n_owned = max(1, y_owned.shape[0])
    pred = None
    last = torch.zeros(())
    for it in range(args.fit_iters):
        with record_function("fit_forward"):
            pred = models(groups, owned)
            if pred is None:                  # nothing owned this step: keep the head in step
                loss = sum(q.sum() for q in head_params) * 0.0
            else:
                loss = ((pred - y_owned) ** 2).mean()
            if extra > 0:                     # --factor: the forward again, discarded
                with torch.no_grad():
                    for _ in range(int(extra)):
                        models(groups, owned)
                    if extra - int(extra) > 0:
                        models(groups, owned, rows=extra - int(extra))
        with record_function("fit_backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with record_function("head_allreduce"):
            flat = torch.cat([q.grad.reshape(-1) for q in head_params])
            comm.all_reduce(flat)
            flat /= world
            o = 0
            for q in head_params:
                q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                o += q.numel()
        with record_function("fit_optimizer"):
            opt.step()
        last = loss.detach()
    labels = torch.cat([torch.full((per[c],), float(c)) for c in owned]) if owned else ry[:0]
    res = (torch.stack([labels, pred.detach()], 1) if pred is not None else torch.zeros(0, 2))
    return last, n_owned, res


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    comm = Comm()
    bufs = Buffers()
    K, D = args.clusters, args.dim

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="kmeans_sort_")
    dist.broadcast_object_list(tmp, src=0)
    out_dir = tmp[0]
    log_path = os.path.join(out_dir, f"log_rank{rank}.jsonl")

    source = BlobSource(args.seed, K, D)
    # initial centroids: K random points of rank 0's first shard, broadcast
    C = torch.empty(K, D)
    if rank == 0:
        x0, _ = source.shard(0, -1, max(4 * K, 1000))
        g = torch.Generator().manual_seed(args.seed + 17)
        C.copy_(x0[torch.randperm(x0.shape[0], generator=g)[:K]])
    dist.broadcast(C, src=0)
    seen = torch.zeros(K)

    torch.manual_seed(args.seed)            # the same initial weights on every rank
    models = ClusterModels(K, D, args.hidden)
    head_params = list(models.head.parameters())
    opt = torch.optim.Adam(models.parameters(), lr=args.lr, foreach=True)

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[kmeans-sort] world={world} points={args.points} dim={D} clusters={K} iters={args.iters} "
              f"algo={args.algo} owner={args.owner} exchange={args.exchange} hidden={args.hidden} "
              f"fit_iters={args.fit_iters}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times, a2a_times = [], [], []
    global_counts = torch.zeros(K)
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = comm.a2a_secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("read_shard"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    sizes = shard_sizes(args, world, step)
                    x, y = source.shard(rank, step, sizes[rank])

                with record_function("kmeans"):
                    C, seen, lab, inertia, conv = kmeans(x, C, seen, args, comm, step, extra)

                with record_function("redistribute"):
                    counts = torch.bincount(lab, minlength=K).to(torch.float32)
                    if args.owner == "balanced":
                        comm.all_reduce(counts)
                        global_counts = counts
                    owner = owners_of(global_counts if args.owner == "balanced" else counts, world, args.owner)
                    rx, ry, per, n_recv = redistribute(x, y, lab, owner, args, comm, rank, world, bufs)
                owned = [c for c in range(K) if int(owner[c]) == rank]

                with record_function("fit"):
                    fit_loss, n_owned, res = fit(models, opt, head_params, rx, ry, per, owned,
                                                   args, comm, world, extra)

                with record_function("metrics_allreduce"):
                    m = torch.tensor([fit_loss.item() * n_owned, float(n_owned), inertia.item(), float(x.shape[0])])
                    comm.all_reduce(m)
                with record_function("write_results"):
                    if slow and args.write_sleep_ms > 0:
                        time.sleep(args.write_sleep_ms / 1000.0)
                    res = res.numpy()
                    np.save(os.path.join(out_dir, f"part-{step:05d}-{rank}.npy"), res)
                    with open(log_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "rank": rank, "points": int(x.shape[0]),
                                             "received": int(n_recv), "owned_clusters": len(owned),
                                             "iters": conv[0], "shift": conv[1],
                                             "inertia_min": conv[2], "inertia_max": conv[3],
                                             "fit_loss": float(fit_loss)}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                a2a_times.append(comm.a2a_secs)
                if rank == 0:
                    print(f"step {step:3d} inertia/pt {m[2].item() / m[3].item():.3f} fit {m[0].item() / m[1].item():.4f} "
                          f"shift {conv[1]:.4f} shards {sizes} t {1000 * step_times[-1]:.1f} ms", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    a2a = a2a_times[2:] if len(a2a_times) > 2 else a2a_times
    med = (statistics.median(traced), statistics.median(busy), statistics.median(a2a))
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside all_reduces and all_to_alls) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b, _) in enumerate(allmed)), flush=True)
        print("median ms in the all_to_alls per rank: " +
              " ".join(f"r{r}={1000 * e:.1f}" for r, (_, _, e) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(out_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
