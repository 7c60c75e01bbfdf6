"""Distributed stratified SGD (DSGD) matrix factorisation for a recommender, no neural network.

(calibration table at the end of this docstring)

What it is
----------
Collaborative filtering by matrix factorisation (Gemulla et al., KDD 2011, "Large-scale
matrix factorization with distributed stochastic gradient descent") on 4 CPU processes
(gloo, ``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``). The model is the usual
biased MF:

    r_hat(u, i) = mu + b_u + b_i + p_u . q_i

with user factors p_u and item factors q_i of ``--latent-dim`` k, user/item biases and the
global mean mu; squared error with L2 regularisation (``--reg``), plain SGD with a step size
``--lr`` decayed by ``--lr-decay`` every epoch.

Data: a synthetic explicit-feedback rating matrix (``--users`` x ``--items``) made from
``--seed``: a rank-8 "true" taste model (true factors and biases, Gaussian), item popularity
lognormal (a few items get most of the ratings), ratings = 3.6 + biases + dot + noise
(``--noise``), clipped to [0.5, 5]. The item ids are randomly permuted before blocking (as in
the paper) so that the popular items spread evenly over the item blocks. About ``--ratings``
ratings in all (a few hundred thousand), ``--holdout`` of them kept out for the test RMSE.
Every rank generates only the ratings of its own user block (users are split in 4 contiguous
blocks; rank r owns user block r: its ratings and its user factors, which never move).

The matrix is a 4 x 4 grid of blocks (user block x item block). An epoch (= one training
step of this job) is 4 sub-epochs; in sub-epoch s rank r works on block (r, (r + s) mod 4),
so the 4 ranks touch 4 disjoint blocks (a "stratum") and their updates never collide:

1. ``sgd_block``: minibatch SGD (``--batch-size`` ratings a minibatch, vectorised: gather
   the factor rows and biases with ``index_select``, compute the errors, ``index_add_`` the
   updates into the user-factor table and into the item-factor block currently held; an
   item's updates are averaged over its occurrences in the minibatch (``bincount``), or the
   popular items blow up) over the rank's ratings of that block in this epoch's random
   order (``--passes`` times over them);
2. ``rotate_items``: the item-factor block it holds (factors and biases, items_per_block x
   (k + 1) floats) goes to rank r - 1 mod 4 and the next one comes from rank r + 1 mod 4
   (``dist.isend`` + ``dist.irecv``, both waited; ``--blocking``: ``dist.send`` /
   ``dist.recv``, even ranks sending first, odd ranks receiving first). After the 4th
   rotation each rank holds its own item block again.

At the end of the epoch: ``rmse_reduce`` (an ``all_reduce`` of the training squared-error
sum, the count and the regularisation term), ``snapshot_factors`` (each rank
``torch.save``-s its user factors to a temporary directory, as a user keeps a resumable
snapshot), and every ``--eval-every`` epochs ``evaluate``: an ``all_gather`` of the item
blocks (every rank gets the whole item table), predictions for the rank's held-out ratings,
an ``all_reduce`` of the error sums (test RMSE).

Communication per step (defaults: 8000 items, k = 48): 4 ring rotations of a 2000 x 49
float block (392 KB) on every link r -> r - 1, one 3-float ``all_reduce``; on evaluation
epochs an ``all_gather`` of the 4 item blocks and a 2-float ``all_reduce``. The global mean
is ``all_reduce``-d once before training.

User ranges per step: ``sleep`` (fault only), ``load_ratings`` (the epoch's random order of
each of the rank's 4 blocks, the ratings gathered into it), ``sub_epoch_s`` [``sgd_block``, ``rotate_items``] x 4,
``rmse_reduce``, ``snapshot_factors``, and on evaluation epochs ``evaluate``
[``gather_items``, ``predict``, ``test_reduce``].

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the
rotations' send/recv/wait, the all_reduces and the all_gather).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10 epochs; 8 traced), ``--seed``, ``--shapes``.

Problem / job size: ``--users`` (20000), ``--items`` (8000), ``--ratings`` (600000),
``--latent-dim`` (48), ``--batch-size`` (8192), ``--passes`` (1), ``--lr`` (0.1),
``--lr-decay`` (0.95), ``--reg`` (0.08), ``--noise`` (0.3), ``--holdout`` (0.05),
``--eval-every`` (3), ``--blocking`` (blocking send/recv rotations).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: each ``sgd_block`` is done F times (F - 1 extra passes
  first, on copies of the factor tables, discarded; the fractional part over that fraction
  of the block's minibatches);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: slow rating reads: ``load_ratings`` sleeps MS each epoch;
* ``--snapshot-sleep-ms MS`` (family fault): a slow snapshot write: the rank's
  ``snapshot_factors`` sleeps MS before ``torch.save`` (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (B = A - 1 mod 4, the ring's direction):
  every item-block message A sends to B (4 an epoch) carries X times the bytes, zero-padded
  in the same message; B receives it all and keeps the head. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each epoch, each rank samples lognormal(0, S) times its ratings of every
  block (drawn from (seed, rank, epoch), clamped to [1/4, 4]; more than 1x by further
  permutations), so the ranks' SGD work differs by rank and epoch;
* ``--big-rank K --big X``: user block K has X times the ratings of the others (denser
  users), every epoch.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs and analysis processes (load average
11-16 throughout, so a healthy default step went from 230 ms on a quiet box to 470-700 ms
here); 4 ranks, 10 epochs (8 timed), seed 7. The ring rotations tie the ranks 4 times an
epoch, so the step medians of all ranks agree within ~2%: one number. "busy" = median time
outside the rotations, all_reduces and all_gather; slow rank vs the mean of the others.

  setting (slow rank)                          base ms  step ms  change   busy slow / others ms
  healthy default                                 -     470-700     -      320-480 (by load)
  healthy --shapes --blocking                     -       1090      -      530-970 (load 14)
  healthy --latent-dim 32 --batch-size 4096
          --ratings 400000                        -        296      -      143-172
  healthy --users 30000 --items 12000
          --ratings 800000 --eval-every 2         -        494      -      345-372
  healthy --passes 2 --latent-dim 64              -       1215      -      914-1073
  --factor 3 (r2)                                500      1128   +125%     987 / 335
  --blocking --factor 2.5 (r1)                   580       665    +15%     608 / 331
  --latent-dim 32 --ratings 400000 --factor 3 (r0)  -      880      -      742 / 185
  --users 30000 --items 12000 --factor 2.5 (r3)   494*    1010   +104%     935 / 410
  --sleep-ms 150 (r1)                            580       748    +29%     590 / 463
  --sleep-ms 200 (r1)                            470       687    +46%     590 / 367
  --data-sleep-ms 150 (r2)                       580       755    +30%     590 / 418
  --data-sleep-ms 200 (r2)                       470       793    +69%     578 / 378
  --snapshot-sleep-ms 150 (r0)                   580       662    +14%     522 / 383
  --snapshot-sleep-ms 200 (r0)                   470       753    +60%     585 / 338
  --hog (r3)                                     580       784    +35%     598 / 364
  link 1->0 x64 (25 MB messages)                 697       585   (none)    -
  link 1->0 x128 (50 MB messages)                697       818    +17%     r1 345 / 347
  link 2->1 x256 (100 MB messages)               697      1150    +65%     r2 456 / 353
  --seq-sigma 0.8                                 -        935      -      371-591 by rank (scales by epoch)
  --big-rank 3 --big 3                            -        845      -      752 / 274
  (* the healthy run of the same size, ratings 800000)

Reading: the box's load moved a healthy step by 1.5x from one run to the next, so one run's
step change says little; the slowed rank's busy time shows every fault. ``--factor`` repeats
the whole block SGD (nearly all of a rank's compute), so 2.5-3 already costs the rank
+80-300% busy time and every other rank waits for it in ``rotate_items`` (4 times an epoch).
A 150-200 ms sleep is 25-45% of a step at this load. A padded link costs nothing at 25 MB a
message (loopback TCP), a little at 50 MB and clearly at 100 MB (x256): rank 1 then waits in
``rotate_items`` for each of rank 2's 4 blocks, and the ring passes the wait on. A bigger
user block (``--big``) or a larger sample (``--seq-sigma``) makes everyone wait for that rank
in every rotation. Wall per run: 27-44 s at this load (~10 s on a quiet box); traces 4-5 MB a
rank (7 MB with --shapes, 8 MB with --passes 2 or on a --factor 3 rank).
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
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10, help="epochs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--users", type=int, default=20000)
    p.add_argument("--items", type=int, default=8000)
    p.add_argument("--ratings", type=int, default=600000)
    p.add_argument("--latent-dim", type=int, default=48)
    p.add_argument("--batch-size", type=int, default=8192)
    p.add_argument("--passes", type=int, default=1, help="SGD passes over a block per sub-epoch")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--lr-decay", type=float, default=0.95)
    p.add_argument("--reg", type=float, default=0.08)
    p.add_argument("--noise", type=float, default=0.3)
    p.add_argument("--holdout", type=float, default=0.05)
    p.add_argument("--eval-every", type=int, default=3)
    p.add_argument("--blocking", action="store_true", help="blocking send/recv rotations")
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
    return a


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

class Comm:
    """The item-block ring and the collectives; times what it spends in them."""

    def __init__(self, rank, world, blocking, link=None, link_factor=1.0):
        self.rank, self.world, self.blocking = rank, world, blocking
        self.link, self.link_factor = link, link_factor
        self.left, self.right = (rank - 1) % world, (rank + 1) % world
        self.secs = 0.0
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

    def rotate(self, block, recv_rows, tag):
        """Send ``block`` to the left neighbour, return the block coming from the right."""
        cols = block.shape[1]
        n_send = block.numel()
        n_recv = recv_rows * cols
        sbuf = self._buffer(("send", n_send), self._padded(n_send, self.rank, self.left))
        rbuf = self._buffer(("recv", n_recv), self._padded(n_recv, self.right, self.rank))
        sbuf[:n_send].copy_(block.reshape(-1))
        t0 = time.perf_counter()
        if self.blocking:
            if self.rank % 2 == 0:
                dist.send(sbuf, self.left, tag=tag)
                dist.recv(rbuf, self.right, tag=tag)
            else:
                dist.recv(rbuf, self.right, tag=tag)
                dist.send(sbuf, self.left, tag=tag)
        else:
            reqs = [dist.irecv(rbuf, self.right, tag=tag), dist.isend(sbuf, self.left, tag=tag)]
            for q in reqs:
                q.wait()
        self.secs += time.perf_counter() - t0
        return rbuf[:n_recv].view(recv_rows, cols).clone()

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t

    def all_gather(self, t, sizes):
        outs = [t.new_empty(s, t.shape[1]) for s in sizes]
        # all_gather wants equal shapes: pad every block to the largest
        m = max(sizes)
        pad = t.new_zeros(m, t.shape[1])
        pad[: t.shape[0]].copy_(t)
        bufs = [t.new_empty(m, t.shape[1]) for _ in sizes]
        t0 = time.perf_counter()
        dist.all_gather(bufs, pad)
        self.secs += time.perf_counter() - t0
        for o, b, s in zip(outs, bufs, sizes):
            o.copy_(b[:s])
        return outs


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def split_sizes(n, parts):
    base, extra = divmod(n, parts)
    return [base + (1 if j < extra else 0) for j in range(parts)]


def make_truth(args, true_rank=8):
    """The hidden taste model, the same on every rank (from the seed)."""
    g = torch.Generator().manual_seed(args.seed)
    tu = torch.randn(args.users, true_rank, generator=g) / math.sqrt(true_rank)
    ti = torch.randn(args.items, true_rank, generator=g) / math.sqrt(true_rank)
    bu = 0.4 * torch.randn(args.users, generator=g)
    bi = 0.5 * torch.randn(args.items, generator=g)
    popularity = torch.exp(1.2 * torch.randn(args.items, generator=g))
    item_perm = torch.randperm(args.items, generator=g)  # item id -> position (balances blocks)
    return tu, ti, bu, bi, popularity, item_perm


def make_user_block(args, rank, world, truth, user_lo, user_n, item_sizes):
    """This rank's ratings: (user local, item block, item local, rating), split train / test."""
    tu, ti, bu, bi, popularity, item_perm = truth
    n = args.ratings / world
    if rank == args.big_rank:
        n *= args.big
    n = int(n)
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + 17 * rank + 1)
    users = torch.randint(0, user_n, (n,), generator=g)
    items = torch.multinomial(popularity, n, replacement=True, generator=g)
    gu = users + user_lo
    r = (3.6 + bu[gu] + bi[items] + (tu[gu] * ti[items]).sum(1) * 2.0
         + args.noise * torch.randn(n, generator=g)).clamp_(0.5, 5.0)
    pos = item_perm[items]                       # blocked position of the item
    bounds = torch.tensor(np.cumsum([0] + item_sizes), dtype=torch.long)
    iblock = torch.bucketize(pos, bounds[1:], right=True)
    ilocal = pos - bounds[iblock]
    is_test = torch.rand(n, generator=g) < args.holdout
    train, test = {}, None
    for j in range(world):
        m = (iblock == j) & ~is_test
        train[j] = (users[m].clone(), ilocal[m].clone(), r[m].clone())
    test = (users[is_test].clone(), iblock[is_test].clone(), ilocal[is_test].clone(), r[is_test].clone())
    return train, test


def sample_scale(args, rank, step):
    if args.seq_sigma <= 0:
        return 1.0
    g = torch.Generator().manual_seed(args.seed * 7_919 + rank * 10_007 + step)
    z = torch.randn((), generator=g, dtype=torch.float64).item()
    return min(4.0, max(0.25, math.exp(args.seq_sigma * z)))


def epoch_order(n, scale, passes, g):
    """The sample order of one block this epoch: ``scale`` x ``passes`` times its ratings."""
    want = max(1, int(round(n * scale * passes)))
    parts, have = [], 0
    while have < want:
        parts.append(torch.randperm(n, generator=g))
        have += n
    order = torch.cat(parts) if len(parts) > 1 else parts[0]
    return order[:want]


# --------------------------------------------------------------------------
# SGD
# --------------------------------------------------------------------------

def sgd_minibatch(P, bu, Q, bi, u, i, r, mu, lr, reg):
    """One vectorised SGD step on the ratings (u, i, r) of the current block."""
    p = P.index_select(0, u)
    q = Q.index_select(0, i)
    b = bu.index_select(0, u)
    c = bi.index_select(0, i)
    err = r - (b + c + (p * q).sum(1) + mu)
    # a popular item shows up many times in a minibatch: average its updates, or it blows up
    w = lr / torch.bincount(i, minlength=Q.shape[0]).clamp_(min=1).index_select(0, i)
    e = err.unsqueeze(1)
    gp = torch.sub(e * q, p, alpha=reg)
    gq = torch.sub(e * p, q, alpha=reg).mul_(w.unsqueeze(1))
    P.index_add_(0, u, gp, alpha=lr)
    Q.index_add_(0, i, gq)
    bu.index_add_(0, u, torch.sub(err, b, alpha=reg), alpha=lr)
    bi.index_add_(0, i, torch.sub(err, c, alpha=reg).mul_(w))
    return torch.dot(err, err)


def sgd_block(P, Qb, batch, args, mu, lr, fraction=1.0):
    """Minibatch SGD over the block's ratings (already in this epoch's order); P, Qb: factors
    with the bias as the last column. Returns the squared-error sum (before each update)."""
    users, ilocal, ratings = batch
    k = args.latent_dim
    Pf, bu = P[:, :k], P[:, k]          # views: the updates land in P and Qb
    Qf, bi = Qb[:, :k], Qb[:, k]
    bs = args.batch_size
    nb = math.ceil(ratings.numel() / bs)
    if fraction < 1.0:
        nb = max(1, int(round(nb * fraction)))
    sse = torch.zeros(())
    for b in range(nb):
        lo, hi = b * bs, min((b + 1) * bs, ratings.numel())
        sse += sgd_minibatch(Pf, bu, Qf, bi, users[lo:hi], ilocal[lo:hi], ratings[lo:hi], mu, lr, args.reg)
    return sse


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
    link = None
    if args.link_src >= 0:
        if args.link_dst != (args.link_src - 1) % world:
            raise SystemExit("the item blocks travel r -> r-1: --link-dst must be --link-src - 1 mod world")
        link = (args.link_src, args.link_dst)
    comm = Comm(rank, world, args.blocking, link, args.link_factor)
    k = args.latent_dim

    # ---- data: each rank makes its own user block's ratings
    user_sizes = split_sizes(args.users, world)
    item_sizes = split_sizes(args.items, world)
    user_lo = sum(user_sizes[:rank])
    truth = make_truth(args)
    train, test = make_user_block(args, rank, world, truth, user_lo, user_sizes[rank], item_sizes)
    del truth
    n_train = sum(v[2].numel() for v in train.values())
    stats = torch.tensor([sum(float(v[2].sum()) for v in train.values()), float(n_train)], dtype=torch.float64)
    dist.all_reduce(stats)
    mu = float(stats[0] / stats[1])

    # ---- factors: user factors stay here; item block r starts here and travels the ring
    g = torch.Generator().manual_seed(args.seed * 31 + rank)
    P = torch.cat([0.1 * torch.randn(user_sizes[rank], k, generator=g), torch.zeros(user_sizes[rank], 1)], 1)
    Q = torch.cat([0.1 * torch.randn(item_sizes[rank], k, generator=g), torch.zeros(item_sizes[rank], 1)], 1)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="dsgd_mf_")
    dist.broadcast_object_list(tmp, src=0)
    snap_dir = tmp[0]

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[dsgd-mf] world={world} users={args.users} items={args.items} ratings~{args.ratings} "
              f"k={k} batch={args.batch_size} passes={args.passes} mu={mu:.3f} "
              f"rotation={'send/recv' if args.blocking else 'isend/irecv'} "
              f"item block msg={item_sizes[0] * (k + 1)} floats", flush=True)
    print(f"[rank {rank}] train ratings {n_train} "
          f"(blocks {[v[2].numel() for v in train.values()]}) test {test[3].numel()}", flush=True)

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

                lr = args.lr * args.lr_decay ** step
                with record_function("load_ratings"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    scale = sample_scale(args, rank, step)
                    go = torch.Generator().manual_seed(args.seed * 104_729 + rank * 1_009 + step)
                    epoch_data = {}
                    for j in range(world):
                        order = epoch_order(train[j][2].numel(), scale, args.passes, go)
                        epoch_data[j] = tuple(t.index_select(0, order) for t in train[j])

                sse = torch.zeros(())
                count = 0
                for s in range(world):
                    j = (rank + s) % world            # the item block held in this sub-epoch
                    with record_function(f"sub_epoch_{s}"):
                        with record_function("sgd_block"):
                            if extra > 0:             # --factor: the same block again on copies, discarded
                                with torch.no_grad():
                                    for e in range(math.ceil(extra)):
                                        frac = min(1.0, extra - e)
                                        sgd_block(P.clone(), Q.clone(), epoch_data[j], args, mu, lr, frac)
                            sse += sgd_block(P, Q, epoch_data[j], args, mu, lr)
                            count += epoch_data[j][2].numel()
                        with record_function("rotate_items"):
                            nxt = (j + 1) % world
                            Q = comm.rotate(Q, item_sizes[nxt], tag=s)

                with record_function("rmse_reduce"):
                    reg_term = args.reg * (P[:, :k].pow(2).sum() + Q[:, :k].pow(2).sum())
                    red = torch.stack([sse, torch.tensor(float(count)), reg_term]).to(torch.float64)
                    comm.all_reduce(red)
                    train_rmse = math.sqrt(red[0].item() / red[1].item())

                with record_function("snapshot_factors"):
                    if slow and args.snapshot_sleep_ms > 0:
                        time.sleep(args.snapshot_sleep_ms / 1000.0)
                    torch.save({"epoch": step, "user_lo": user_lo, "P": P},
                               os.path.join(snap_dir, f"user_factors_rank{rank}.pt"))

                test_rmse = None
                if (step + 1) % args.eval_every == 0:
                    with record_function("evaluate"):
                        with record_function("gather_items"):
                            blocks = comm.all_gather(Q, item_sizes)
                        with record_function("predict"):
                            tu, tb, til, tr = test
                            Qall = torch.cat(blocks, 0)
                            offs = torch.tensor(np.cumsum([0] + item_sizes[:-1]), dtype=torch.long)
                            gi = offs[tb] + til
                            p, q = P[tu], Qall[gi]
                            pred = (mu + p[:, k] + q[:, k] + (p[:, :k] * q[:, :k]).sum(1)).clamp(0.5, 5.0)
                            te = torch.stack([((tr - pred) ** 2).sum(), torch.tensor(float(tr.numel()))])
                        with record_function("test_reduce"):
                            te = comm.all_reduce(te.to(torch.float64))
                        test_rmse = math.sqrt(te[0].item() / te[1].item())

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    msg = f"epoch {step:3d} train rmse {train_rmse:.4f} objective {red[0].item() + red[2].item():.1f}"
                    if test_rmse is not None:
                        msg += f" test rmse {test_rmse:.4f}"
                    print(f"{msg} lr {lr:.4f} t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside rotations and collectives) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(snap_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
