"""Federated averaging (FedAvg) of a small CNN over 4 non-IID clients with torch.distributed.

(calibration table at the end of this docstring)

What it is
----------
A research-style FedAvg simulation (McMahan et al. 2017) on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``). Rank 0 is the server *and* a client;
ranks 0-3 are the clients. Every client holds its own shard of a synthetic 10-class image
task (16x16 single-channel "images": a smooth class prototype, a random brightness, a random
shift of up to 2 pixels and pixel noise). The shards are non-IID: each client's label mix is
drawn from a Dirichlet(``--alpha``) over the classes (the same (seed, rank) gives the same
shard), and each client keeps a small local test set with the same label mix.

Model: ``--model cnn`` (default): conv 1->16 3x3, ReLU, maxpool, conv 16->32 3x3, ReLU,
maxpool, linear 512 -> ``--hidden`` -> 10 (~72 k parameters at hidden 128); ``--model mlp``:
256 -> ``--hidden`` -> ``--hidden`` -> 10. No normalisation layers, so the flat parameter
vector is the whole model state.

One round (= one profiler step):

1. ``broadcast_global``: the server broadcasts the flat global weights
   (``dist.broadcast(src=0)``); every client loads them into its model;
2. ``evaluate`` every ``--eval-every`` rounds: each client evaluates the global model on its
   local test set, then a 2-float ``all_reduce`` (correct, seen) gives the global accuracy;
3. ``local_train``: ``--local-steps`` SGD steps (momentum ``--momentum``) on the client's
   shard, each ``load_batch`` -> ``forward`` -> ``backward`` -> ``optimizer``;
4. ``dp_clip``: the client's update delta = local - global is clipped to L2 norm ``--clip``
   (0 = no clipping) and, with ``--noise`` > 0, gets Gaussian noise of std
   noise x clip / sqrt(4); then ``audit_log``: the client appends the round's norm / clip /
   noise record to its own DP audit log (jsonl in a temp dir);
5. ``secure_mask`` (``--secure-agg`` only): every client draws one 31-bit seed share per
   peer, a 4 x 4 int64 ``all_gather`` exchanges them, the pair seed of (i, j) is
   s_ij + s_ji, and client i adds +mask_ij for j > i and -mask_ij for j < i (Gaussian masks
   of the update's length) to its count-weighted update; the masks cancel in the sum;
6. ``upload``: ranks 1-3 send their update (n_i x delta_i, the update's length in floats)
   then their sample count n_i (1 float) to the server, ``dist.send(dst=0)`` twice; rank 0
   receives client 1's update and count, then 2's, then 3's (``dist.recv(src=k)``). With
   ``--async-upload`` rank 0 posts all six ``irecv`` right after the broadcast (before its
   own local training) and waits on them in ``upload``; the clients ``isend`` and wait on
   their sends at the end of ``upload``;
7. ``aggregate`` (rank 0): sum of the weighted updates / sum of the counts, optional server
   momentum (``--server-momentum``, FedAvgM), global += ``--server-lr`` x average;
8. ``round_barrier``: with ``--round-sync barrier`` (default) every rank meets at a
   ``dist.barrier`` (the clients wait there while the server aggregates); with
   ``--round-sync broadcast`` there is no barrier and the clients wait in the next round's
   broadcast.

Communication per round (defaults, cnn, hidden 128: P = 72,042 floats = 288 KB):
one broadcast of P floats from 0; three point-to-point uploads k -> 0 of P floats and three
of 1 float; one barrier; every 2nd round a 2-float all_reduce; with ``--secure-agg`` a
16-int64 all_gather. At the end one all_gather_object of the timing medians.

User ranges per round: ``sleep`` (fault only), ``broadcast_global``, ``evaluate``
(``eval_allreduce``), ``local_train`` [``load_batch``, ``forward``, ``backward``,
``optimizer``] x local steps, ``dp_clip``, ``audit_log``, ``secure_mask`` (``seed_allgather``),
``upload`` (``send_update`` / ``send_count`` on clients, ``recv_update`` / ``recv_count`` on
the server), ``aggregate`` (server), ``round_barrier``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=rounds-2, repeat=1)``,
``prof.step()`` once per round, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median round
time over the traced rounds and its median "busy" time (the round minus the time spent in
broadcast, all_reduce, all_gather, the uploads' send/recv/waits and the barrier).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10 rounds; 8 traced), ``--seed``, ``--shapes``.

Job: ``--model {cnn,mlp}`` (cnn), ``--hidden`` (128), ``--local-steps`` (10), ``--batch``
(64, a client's examples per local step), ``--shard-size`` (2048 training examples a
client), ``--test-size`` (256), ``--alpha`` (0.5, Dirichlet label skew), ``--lr`` (0.05),
``--momentum`` (0.9), ``--clip`` (5.0), ``--noise`` (0.0), ``--server-lr`` (1.0),
``--server-momentum`` (0.0), ``--eval-every`` (2), ``--async-upload``, ``--secure-agg``,
``--round-sync {barrier,broadcast}``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: in every local step the client's forward and backward
  are done F times (F - 1 extra passes: an extra forward inside ``forward`` and its
  ``autograd.grad`` inside ``backward``, discarded; the fractional part over that fraction
  of the batch rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per round at the round's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow data loader: the client's ``load_batch`` sleeps
  MS / local-steps in each local step (MS per round in all);
* ``--audit-sleep-ms MS`` (family fault): a slow DP audit log: the client's ``audit_log``
  sleeps MS each round before appending its record (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst 0 --link-factor X`` (A in 1..3; no ``--slow-rank``): every message
  client A uploads to the server (the update and the count) carries X times the floats,
  zero-padded in the same message; the server receives it all and keeps the head. Only the
  upload direction A -> 0 can be slowed (the download is a broadcast, a collective), so the
  destination must be 0.

Imbalance without a fault:

* ``--seq-sigma S``: each client's examples per local step are ``--batch`` x lognormal(0, S)
  (drawn from (seed, rank, round), clamped to [1/4, 4] x batch): the work differs by client
  and round, and so do the counts that weight the average;
* ``--big-rank K --big X``: client K processes X times the examples per local step, every
  round (its count weighs X times too).

Calibration
-----------
2-core box heavily shared with other helpers' 4-process jobs (load average 13-20 during
these runs); 4 ranks, 10 rounds (8 timed); default settings unless listed. Round medians of
all ranks agree within ~1-2 % (the broadcast and the barrier tie the ranks each round), so
one number; "busy" = median time outside communication (broadcast, uploads, all_reduce,
all_gather, barrier), the slow rank vs the mean of the others. Healthy default rounds moved
between 410 and 565 ms from run to run with the load ("base" = the nearest healthy run).

  setting (slow rank)                           base ms  round ms  change  busy slow / others ms
  healthy default                                  -     411-567      -     300-500 (by load)
  healthy --async-upload --secure-agg              -       468        -     368-414
  healthy --model mlp --hidden 256 --round-sync
          broadcast --shapes                       -        80        -     30-39
  healthy --model mlp --hidden 512                 -       451        -     302-340
  healthy --clip 2 --noise 0.02 --server-momentum
          0.7 --server-lr 0.7 --eval-every 1       -       680        -     562-591
  healthy --local-steps 16 --batch 32 --alpha 0.1
          --hidden 256                             -       756        -     633-685
  --factor 2 (r1)                                 522      661     +27%     617 / 394
  --factor 2 (r0)                                 462     1032    +123%     947 / 565
  --factor 3 (r0)                                 522     1317    +152%    1262 / 515
  --async-upload --factor 2.5 (r3)                462     1430    +209%    1369 / 607
  --secure-agg --local-steps 6 --factor 3 (r2)     -      1019        -     937 / 385
  --sleep-ms 250 (r3)                             522      704     +35%     663 / 408
  --data-sleep-ms 250 (r1)                        522      672     +29%     611 / 428
  --data-sleep-ms 300 (r1)                        462      693     +50%     636 / 391
  --audit-sleep-ms 250 (r2)                       522      734     +41%     707 / 430
  --hog (r2)                                      522      943     +81%     846 / 498
  --hog (r0)                                      462      891     +93%     795 / 404
  link 3->0 x256 (74 MB uploads)                  522      592     +13%     r3 396 / 416
  link 3->0 x1024 (295 MB uploads)                522      916     +75%     r3 497 / 469
  --async-upload link 2->0 x1024                  462      907     +96%     r2 395 / 420
  --seq-sigma 0.8                                  -       909        -     436-636 by client
  --big-rank 3 --big 3                            563     1009     +79%     944 / 453
  --big-rank 2 --big 3                            462     1157    +150%    1108 / 538

Reading: the load moved a healthy round by ~40 % between runs, so one run's round time
says little; the slowed client's busy time shows every fault: the repeated forward/backward
(the bulk of a round, so --factor 2 already costs the rank ~50-100 % of its busy time),
the sleep, or the hog's share of the cores. Every other client then idles in the barrier
(or rank 0 in ``recv_update`` from the slow client). A sleep of 250-300 ms is 30-60 % of the
round. A padded upload costs little until the messages are hundreds of MB (loopback TCP):
at x1024 the server sits in ``recv_update`` from the slowed client (with --async-upload in
the wait) while the sender's busy time does not change. A client with more data (--big)
lengthens everyone's round: the server waits for its upload. Wall per run 16-47 s (the
longer ones at load ~18); traces ~6 MB a rank (10 MB with --local-steps 16, 7 MB with
--shapes on the MLP; the slowed rank's 10 MB with --factor 2, 14 MB with --factor 2.5, its
extra forward and backward ops traced too).
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
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector
from torch.profiler import ProfilerActivity, profile, record_function, schedule

N_CLASSES = 10
IMG = 16


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10, help="federated rounds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--local-steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--shard-size", type=int, default=2048)
    p.add_argument("--test-size", type=int, default=256)
    p.add_argument("--alpha", type=float, default=0.5, help="Dirichlet label skew")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--clip", type=float, default=5.0, help="DP clip of the update's L2 norm (0 = off)")
    p.add_argument("--noise", type=float, default=0.0, help="DP noise multiplier")
    p.add_argument("--server-lr", type=float, default=1.0)
    p.add_argument("--server-momentum", type=float, default=0.0)
    p.add_argument("--eval-every", type=int, default=2)
    p.add_argument("--async-upload", action="store_true")
    p.add_argument("--secure-agg", action="store_true")
    p.add_argument("--round-sync", choices=["barrier", "broadcast"], default="barrier")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--audit-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and (a.link_dst != 0 or a.link_src == 0):
        p.error("only an upload link A -> 0 (A = 1..3) can be slowed")
    return a


# --------------------------------------------------------------------------
# communication, timed (the "busy" time is the round minus this)
# --------------------------------------------------------------------------

class Comm:
    def __init__(self, rank, link=None, link_factor=1.0):
        self.rank = rank
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0
        self.bufs = {}

    def _timed(self, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.secs += time.perf_counter() - t0
        return out

    def padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def out_msg(self, t, dst, key):
        """The tensor to send to dst (padded with zeros on the slowed link)."""
        n = self.padded(t.numel(), self.rank, dst)
        if n == t.numel():
            return t.contiguous()
        buf = self.buffer(("send", key), n)
        buf[: t.numel()].copy_(t)
        return buf

    def in_buf(self, numel, src, key):
        return self.buffer(("recv", key, src), self.padded(numel, src, self.rank))

    def broadcast(self, t, src):
        return self._timed(dist.broadcast, t, src)

    def all_reduce(self, t):
        return self._timed(dist.all_reduce, t)

    def all_gather(self, outs, t):
        return self._timed(dist.all_gather, outs, t)

    def send(self, t, dst):
        return self._timed(dist.send, t, dst)

    def recv(self, t, src):
        return self._timed(dist.recv, t, src)

    def isend(self, t, dst):
        return self._timed(dist.isend, t, dst)

    def irecv(self, t, src):
        return self._timed(dist.irecv, t, src)

    def wait(self, work):
        return self._timed(work.wait)

    def barrier(self):
        return self._timed(dist.barrier)


# --------------------------------------------------------------------------
# model and data
# --------------------------------------------------------------------------

class SmallCNN(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * (IMG // 4) ** 2, hidden)
        self.fc2 = nn.Linear(hidden, N_CLASSES)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(IMG * IMG, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, N_CLASSES))

    def forward(self, x):
        return self.net(x)


def prototypes(seed):
    """Smooth class patterns: 4x4 noise upsampled to 16x16, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(N_CLASSES, 1, 4, 4, generator=g)
    return F.interpolate(coarse, size=(IMG, IMG), mode="bilinear", align_corners=False)


def make_shard(protos, n, label_probs, g):
    y = torch.multinomial(label_probs, n, replacement=True, generator=g)
    x = protos[y] * (0.6 + 0.8 * torch.rand(n, 1, 1, 1, generator=g))
    shifts = torch.randint(-2, 3, (n, 2), generator=g)
    x = torch.stack([torch.roll(x[i], shifts=(int(shifts[i, 0]), int(shifts[i, 1])), dims=(1, 2))
                     for i in range(n)])
    x = x + 1.0 * torch.randn(x.shape, generator=g)
    return x, y


def client_shard(args, rank):
    protos = prototypes(args.seed)
    g = torch.Generator().manual_seed(args.seed * 1009 + 17 * rank + 1)
    rng = np.random.default_rng(args.seed * 1009 + 17 * rank + 1)
    probs = torch.from_numpy(rng.dirichlet([args.alpha] * N_CLASSES)).float() + 1e-3
    xtr, ytr = make_shard(protos, args.shard_size, probs, g)
    xte, yte = make_shard(protos, args.test_size, probs, g)
    return xtr, ytr, xte, yte, probs


def local_batch_size(args, rank, rnd):
    n = float(args.batch)
    if rank == args.big_rank:
        n *= args.big
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + rnd)
        z = torch.randn((), generator=g, dtype=torch.float64).item()
        n *= min(4.0, max(0.25, math.exp(args.seq_sigma * z)))
    return max(4, int(round(n)))


@torch.no_grad()
def load_flat(flat, params):
    """Copy the flat global weights into the model (in place: the local model stays its own)."""
    o = 0
    for q in params:
        q.copy_(flat[o: o + q.numel()].view_as(q))
        o += q.numel()


def start_hog(stop):
    def spin():
        a = torch.randn(192, 192)
        b = torch.randn(192, 192) / 14.0
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=spin, name="busy-neighbour", daemon=True)
    th.start()
    return th


def pair_masks(seed_table, rank, world, numel, scale):
    """Sum over peers of +mask(i, j) for j > i and -mask(i, j) for j < i."""
    total = torch.zeros(numel)
    for j in range(world):
        if j == rank:
            continue
        s = int(seed_table[rank, j].item() + seed_table[j, rank].item())
        g = torch.Generator().manual_seed(s)
        m = torch.randn(numel, generator=g) * scale
        total += m if j > rank else -m
    return total


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
    comm = Comm(rank, link, args.link_factor)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="fedavg_audit_")
    dist.broadcast_object_list(tmp, src=0)
    audit_path = os.path.join(tmp[0], f"dp_audit_client{rank}.jsonl")

    xtr, ytr, xte, yte, probs = client_shard(args, rank)

    torch.manual_seed(args.seed)            # the same initial model everywhere (the server's is broadcast anyway)
    model = SmallCNN(args.hidden) if args.model == "cnn" else MLP(args.hidden)
    params = list(model.parameters())
    n_params = sum(q.numel() for q in params)
    opt = torch.optim.SGD(params, lr=args.lr, momentum=args.momentum)
    global_w = parameters_to_vector(params).detach().clone()
    server_mom = torch.zeros(n_params) if rank == 0 else None

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    data_g = torch.Generator().manual_seed(args.seed * 31 + rank)
    mask_g = torch.Generator().manual_seed(args.seed * 131 + 7 * rank + 3)

    if rank == 0:
        print(f"[fedavg] world={world} model={args.model} hidden={args.hidden} params={n_params} "
              f"local_steps={args.local_steps} batch={args.batch} alpha={args.alpha} "
              f"async={args.async_upload} secure={args.secure_agg} sync={args.round_sync}", flush=True)
    print(f"[fedavg] client {rank} label mix " + " ".join(f"{p:.2f}" for p in probs.tolist()), flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    acc = float("nan")
    dist.barrier()
    try:
        with prof:
            for rnd in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("broadcast_global"):
                    comm.broadcast(global_w, src=0)
                    load_flat(global_w, params)

                # the server posts its receives early with --async-upload
                pending = []
                if rank == 0 and args.async_upload:
                    for k in range(1, world):
                        ub = comm.in_buf(n_params, k, "update")
                        cb = comm.in_buf(1, k, "count")
                        pending.append((k, comm.irecv(ub, k), ub, comm.irecv(cb, k), cb))

                if args.eval_every > 0 and rnd % args.eval_every == 0:
                    with record_function("evaluate"):
                        model.eval()
                        with torch.no_grad():
                            pred = model(xte).argmax(1)
                        m = torch.tensor([float((pred == yte).sum()), float(yte.numel())])
                        model.train()
                        with record_function("eval_allreduce"):
                            comm.all_reduce(m)
                        acc = (m[0] / m[1]).item()

                bs = local_batch_size(args, rank, rnd)
                seen = 0
                losses = []
                with record_function("local_train"):
                    for ls in range(args.local_steps):
                        with record_function("load_batch"):
                            if slow and args.data_sleep_ms > 0:
                                time.sleep(args.data_sleep_ms / 1000.0 / args.local_steps)
                            idx = torch.randint(0, xtr.shape[0], (bs,), generator=data_g)
                            xb, yb = xtr[idx], ytr[idx]
                        with record_function("forward"):
                            loss = F.cross_entropy(model(xb), yb)
                            extra_losses = []
                            for _ in range(int(extra)):          # --factor: the same work again, discarded
                                extra_losses.append(F.cross_entropy(model(xb), yb))
                            rows = int(round(bs * (extra - int(extra))))
                            if rows > 0:
                                extra_losses.append(F.cross_entropy(model(xb[:rows]), yb[:rows]))
                        with record_function("backward"):
                            opt.zero_grad(set_to_none=False)
                            loss.backward()
                            for el in extra_losses:
                                torch.autograd.grad(el, params)
                        with record_function("optimizer"):
                            opt.step()
                        seen += bs
                        losses.append(loss.item())

                with record_function("dp_clip"):
                    with torch.no_grad():
                        delta = parameters_to_vector(params) - global_w
                        norm = delta.norm().item()
                        scale = min(1.0, args.clip / (norm + 1e-12)) if args.clip > 0 else 1.0
                        delta *= scale
                        if args.noise > 0 and args.clip > 0:
                            delta += torch.randn(n_params, generator=mask_g) * (args.noise * args.clip / math.sqrt(world))
                with record_function("audit_log"):
                    if slow and args.audit_sleep_ms > 0:
                        time.sleep(args.audit_sleep_ms / 1000.0)
                    with open(audit_path, "a") as fh:
                        fh.write(json.dumps({"round": rnd, "client": rank, "update_norm": norm,
                                             "clip": args.clip, "clipped": scale < 1.0, "noise": args.noise,
                                             "examples": seen, "loss": sum(losses) / len(losses)}) + "\n")

                weighted = delta * float(seen)
                if args.secure_agg:
                    with record_function("secure_mask"):
                        shares = torch.randint(0, 2 ** 31 - 1, (world,), generator=mask_g, dtype=torch.int64)
                        table = [torch.zeros(world, dtype=torch.int64) for _ in range(world)]
                        with record_function("seed_allgather"):
                            comm.all_gather(table, shares)
                        weighted += pair_masks(torch.stack(table), rank, world, n_params, 1.0)
                count = torch.tensor([float(seen)])

                with record_function("upload"):
                    if rank == 0:
                        updates, counts = [weighted], [count]
                        if args.async_upload:
                            for k, wu, ub, wc, cb in pending:
                                with record_function("recv_update"):
                                    comm.wait(wu)
                                with record_function("recv_count"):
                                    comm.wait(wc)
                                updates.append(ub[:n_params].clone())
                                counts.append(cb[:1].clone())
                        else:
                            for k in range(1, world):
                                ub = comm.in_buf(n_params, k, "update")
                                cb = comm.in_buf(1, k, "count")
                                with record_function("recv_update"):
                                    comm.recv(ub, k)
                                with record_function("recv_count"):
                                    comm.recv(cb, k)
                                updates.append(ub[:n_params].clone())
                                counts.append(cb[:1].clone())
                    else:
                        um = comm.out_msg(weighted, 0, "update")
                        cm = comm.out_msg(count, 0, "count")
                        if args.async_upload:
                            with record_function("send_update"):
                                wu = comm.isend(um, 0)
                            with record_function("send_count"):
                                wc = comm.isend(cm, 0)
                            comm.wait(wu)
                            comm.wait(wc)
                        else:
                            with record_function("send_update"):
                                comm.send(um, 0)
                            with record_function("send_count"):
                                comm.send(cm, 0)

                if rank == 0:
                    with record_function("aggregate"):
                        with torch.no_grad():
                            total = torch.stack(updates).sum(0)
                            n_total = float(torch.cat(counts).sum())
                            avg = total / n_total
                            if args.server_momentum > 0:
                                server_mom.mul_(args.server_momentum).add_(avg)
                                avg = server_mom
                            global_w.add_(avg, alpha=args.server_lr)
                            gnorm = avg.norm().item()

                if args.round_sync == "barrier":
                    with record_function("round_barrier"):
                        comm.barrier()

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"round {rnd:3d} loss {sum(losses) / len(losses):.4f} acc {acc:.3f} "
                          f"n {int(n_total)} |avg| {gnorm:.4f} t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median round ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside broadcast/uploads/collectives/barrier) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(tmp[0], ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
