"""Soft-DTW alignment of DNA read pairs, the DP matrix split by columns over 4 ranks (a wavefront).

(calibration table at the end of this docstring)

What it is
----------
A small "learned alignment" job of the kind bioinformatics groups write: a batch of
``--pairs`` sequence pairs (a query read x of ``--query-len`` bases, a target y of
``--target-len`` bases, y a time-warped copy of x with substitutions at a per-pair rate p) is
scored by soft-DTW (Cuturi & Blondel 2017; the differentiable Needleman-Wunsch/DTW with a
soft minimum of temperature ``--gamma``) over a cost matrix C[i, j] = 1 - cos(f(x_i), f(y_j)),
where f is a small learned embedding network (nucleotide embedding, a width-5 Conv1d, GELU, a
1x1 Conv1d, L2 normalisation). The normalised score of each pair is regressed onto its
substitution rate (MSE), the network trained with AdamW. 4 CPU processes,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``.

Parallelism: the DP matrix R (query rows x target columns) is split by COLUMNS: rank r owns a
contiguous block of ``target-len / 4`` columns (rank 0 the first) for all rows, and keeps its
strip of R with one boundary column on each side and a boundary row above and below. The rows
are processed in row blocks of ``--row-block`` rows:

* forward (``dp_forward``), per row block, top to bottom: rank r > 0 receives from rank r-1 the
  R values of r-1's last column for the block's rows (``boundary_recv``, blocking
  ``dist.recv``), sweeps the block's anti-diagonals (``wavefront``: per diagonal one gather of
  the three neighbours, a logsumexp soft minimum, one scatter), and sends its own last column to
  rank r+1 (``boundary_send``, blocking ``dist.send``). So the boundaries go 0 -> 1 -> 2 -> 3 only,
  and the ranks run as a pipeline of row blocks (rank 3 starts once 0, 1 and 2 have done their
  first block);
* rank 3 holds the score R[L-1, M-1] of every pair, computes the loss and dLoss/dscore
  (``score_loss``);
* backward (``dp_backward``, the soft-DTW gradient recursion E = dR_end/dR written by hand),
  per row block, bottom to top: rank r < 3 receives from rank r+1 the E values and R - C of
  r+1's first column for the block's rows (``grad_recv``), sweeps the block's anti-diagonals in
  reverse (``wavefront_bwd``), sends E and R - C of its own first column to rank r-1
  (``grad_send``). So the gradients go 3 -> 2 -> 1 -> 0 only. E of the rank's strip is
  dLoss/dC, pushed through the embedding network by autograd (``net_backward``).

Communication per step (defaults: 256 pairs, 96 rows, 6 row blocks of 16): per row block one
16 KB message on each link r -> r+1 (forward) and one 32 KB message on each link r+1 -> r
(backward), all blocking ``dist.send``/``dist.recv`` with the block's tag; then one all_reduce
of the network's gradients (~3.3 K floats, one flat buffer, or ``--grad-sync params``: one
all_reduce per parameter) and one of 4 loss/score statistics (``allreduce_stats``).

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``embed_cost``, ``dp_forward``
[``block_k`` (``boundary_recv``, ``wavefront``, ``boundary_send``)], ``score_loss`` (rank 3),
``dp_backward`` [``block_k_bwd`` (``grad_recv``, ``wavefront_bwd``, ``grad_send``)],
``net_backward``, ``allreduce_grads``, ``optimizer``, ``allreduce_stats``, ``write_results``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time in the boundary /
gradient sends and receives and in the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Job size: ``--pairs`` (256), ``--query-len`` (96), ``--target-len`` (64, all columns, split
over the ranks), ``--row-block`` (16), ``--gamma`` (0.1), ``--embed-dim`` (16), ``--hidden``
(32), ``--lr`` (3e-3), ``--grad-sync {flat,params}``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every row block's forward anti-diagonal sweep is done F
  times (F - 1 extra sweeps on a scratch copy of the strip, discarded; the fractional part on
  that fraction of the pairs), inside ``wavefront``, before the boundary is sent on;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow read of the pairs: ``load_batch`` sleeps MS each step;
* ``--write-sleep-ms MS`` (family fault): a slow result writer: the rank's ``write_results``
  (its per-pair column-block scores appended to a tsv) sleeps MS each step (slow shared disk);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (B = A + 1): every forward boundary message A
  sends to B (the R values of A's last column for one row block, pairs x rows floats) carries X
  times the floats, zero-padded in the same message; B receives all of it and keeps the head.
  The backward messages B -> A are not padded. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's column block is ``target-len / 4`` times lognormal(0, S) wide
  (drawn from (seed, rank, step), clamped to [1/4x, 4x], at least 2 columns): the targets'
  length and the blocks differ by rank and step;
* ``--big-rank K --big X``: rank K owns X times as many columns as the others, every step.

Calibration
-----------
2-core box shared with other helpers' jobs; 4 ranks, 10 steps (8 timed), defaults unless
named (512 pairs, 64 x 48, row blocks of 16). Step medians of all ranks agree within ~2% (the
chain and the all_reduces tie them), so one number; "busy" = median time outside the
sends/recvs and all_reduces, slow rank vs the mean of the others. Healthy runs right before.

  setting (slow rank)                           step ms   busy slow / others ms
  healthy default (4 runs)                      720-810   500-590 every rank
  healthy --shapes --grad-sync params             955     600-690 every rank (16 MB traces)
  --factor 3 (r2)                                 829     685 / 492
  --factor 5 (r3)                                 781     705 / 439
  --sleep-ms 200 (r1)                            1096     759 / 591
  --data-sleep-ms 300 (r0)                        833     660 / 434
  --write-sleep-ms 300 (r3)                       826     699 / 435
  --hog (r0)                                     1087     872 / 537
  link 1->2 x2048 (32 MB messages)                575     (no cost seen)
  link 0->1 x8192 (128 MB messages)              1396     all 500-530 (+70% step, in recv)
  --big-rank 3 --big 3                            926     797 / 606
  --seq-sigma 0.8 --seed 5                        880     widths 3-21 by rank and step

Reading: on 2 cores a sleeping or waiting rank hands its core to the others, so a fault moves
the step little from run to run but the slowed rank's busy time by 35-60% (the step's noise
is +-15% from the load). ``--factor`` repeats the embedding network and cost matrix (~90 ms a
pass), so 4-5 cost the rank 50-60% of its busy time. A padded link is free until its
messages are ~100 MB (4 a step). Traces ~10 MB a rank (12 MB with --query-len 48 --shapes,
17 MB for a rank with --big 3 at the default size, hence --query-len 48 there); 14-32 s a run.
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

BIG = 1e10   # "infinity" of the DP (finite: no inf - inf)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--pairs", type=int, default=512)
    p.add_argument("--query-len", type=int, default=64)
    p.add_argument("--target-len", type=int, default=48, help="all columns, split over the ranks")
    p.add_argument("--row-block", type=int, default=16)
    p.add_argument("--gamma", type=float, default=0.1)
    p.add_argument("--embed-dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--kernel", type=int, default=9, help="conv width of the embedding network")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--grad-sync", choices=["flat", "params"], default="flat")
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
    if a.link_src >= 0 and a.link_dst != a.link_src + 1:
        p.error("boundaries only go from rank A to rank A + 1")
    if a.query_len % a.row_block:
        p.error("--query-len must be a multiple of --row-block")
    return a


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

class Comm:
    """Blocking send/recv along the column chain; pads the boundaries of one link (--link-*)."""

    def __init__(self, rank, link=None, link_factor=1.0):
        self.rank = rank
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0
        self.bufs = {}

    def _padded(self, n, src, dst, kind):
        if kind == "fwd" and self.link == (src, dst) and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def send(self, t, dst, tag, kind):
        flat = t.reshape(-1)
        buf = self._buffer(("send", dst, kind), self._padded(flat.numel(), self.rank, dst, kind))
        buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        dist.send(buf, dst, tag=tag)
        self.secs += time.perf_counter() - t0

    def recv(self, shape, src, tag, kind):
        numel = math.prod(shape)
        buf = self._buffer(("recv", src, kind), self._padded(numel, src, self.rank, kind))
        t0 = time.perf_counter()
        dist.recv(buf, src, tag=tag)
        self.secs += time.perf_counter() - t0
        return buf[:numel].view(shape)

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t


# --------------------------------------------------------------------------
# the anti-diagonal index plans of a strip
# --------------------------------------------------------------------------

_PLANS = {}


def block_plan(L, w, h):
    """Per row block, per anti-diagonal: flat indices into the (L+2) x (w+2) strip.

    Strip row 0 / L+1 and column 0 / w+1 are the boundaries; real cell (i, j) is (i+1, j+1).
    cell: the diagonal's cells; left, up, diag: their neighbours; succ: their down, right,
    down-right successors (3n, in that order)."""
    key = (L, w, h)
    if key in _PLANS:
        return _PLANS[key]
    W2 = w + 2
    blocks = []
    for a in range(1, L + 1, h):           # strip rows a .. a+h-1
        diags = []
        for t in range(h + w - 1):
            ks = np.arange(max(0, t - w + 1), min(h - 1, t) + 1)
            ri = a + ks
            cj = 1 + t - ks
            cell = ri * W2 + cj
            succ = np.concatenate([(ri + 1) * W2 + cj, ri * W2 + cj + 1, (ri + 1) * W2 + cj + 1])
            diags.append(tuple(torch.from_numpy(v) for v in
                               (cell, cell - 1, cell - W2, cell - W2 - 1, succ)))
        blocks.append((a, diags))
    _PLANS[key] = blocks
    return blocks


def sweep_forward(LP, LC, diags):
    """Soft-DTW in the log domain (LP = -R / gamma, LC = -C / gamma), one block, in place:
    LP(i, j) = LC(i, j) + logaddexp(LP(i, j-1), LP(i-1, j), LP(i-1, j-1)), by anti-diagonals."""
    for cell, left, up, diag, _ in diags:
        v = torch.logaddexp(torch.logaddexp(LP.index_select(1, left), LP.index_select(1, up)),
                            LP.index_select(1, diag))
        LP.index_copy_(1, cell, v.add_(LC.index_select(1, cell)))


def sweep_backward(E, LPC, LP, diags):
    """E(p) = sum over successors s of E(s) exp((R(s) - C(s) - R(p)) / gamma), in reverse
    (LPC = -(R - C) / gamma, so the weight is exp(LP(p) - LPC(s)))."""
    B = LP.shape[0]
    for cell, _, _, _, succ in reversed(diags):
        n = cell.numel()
        wgt = torch.exp(LP.index_select(1, cell).unsqueeze(1) - LPC.index_select(1, succ).view(B, 3, n))
        E.index_copy_(1, cell, torch.sum(wgt.mul_(E.index_select(1, succ).view(B, 3, n)), 1))


# --------------------------------------------------------------------------
# model and data
# --------------------------------------------------------------------------

class BaseEmbed(nn.Module):
    def __init__(self, embed_dim, hidden, kernel):
        super().__init__()
        self.tok = nn.Embedding(4, 16)
        self.conv = nn.Conv1d(16, hidden, kernel, padding=kernel // 2)
        self.proj = nn.Conv1d(hidden, embed_dim, 1)

    def forward(self, s):                       # (B, T) int64 -> (B, T, D), unit norm
        z = self.tok(s).transpose(1, 2)
        z = self.proj(F.gelu(self.conv(z))).transpose(1, 2)
        return F.normalize(z, dim=-1)


def cost_matrix(net, x, y, c0, w):
    """C[b, i, j] = 1 - cos(f(x_i), f(y_j)) for this rank's columns c0 .. c0+w-1."""
    fx = net(x)                                   # (B, L, D)
    fy = net(y)[:, c0: c0 + w]                    # the conv sees y's neighbours across blocks
    return 1.0 - torch.bmm(fx, fy.transpose(1, 2))


def column_widths(args, world, step):
    base = args.target_len // world
    out = []
    for r in range(world):
        n = float(base)
        if r == args.big_rank:
            n *= args.big
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + r * 10_007 + step)
            z = torch.randn((), generator=g, dtype=torch.float64).item()
            n *= min(4.0, max(0.25, math.exp(args.seq_sigma * z)))
        out.append(max(2, int(round(n))))
    return out


def make_pairs(args, M, step):
    """x: random reads; y: x warped to M bases, substituted at a per-pair rate p."""
    g = torch.Generator().manual_seed(args.seed * 7919 + step)
    B, L = args.pairs, args.query_len
    x = torch.randint(0, 4, (B, L), generator=g)
    rate = torch.rand(B, generator=g) * 0.6
    # a random monotone warp per pair: cumulative positive steps, rescaled onto [0, L)
    steps = torch.rand(B, M, generator=g) + 0.5
    pos = torch.cumsum(steps, 1)
    pos = ((pos - pos[:, :1]) / (pos[:, -1:] - pos[:, :1] + 1e-6) * (L - 1)).round().long()
    y = torch.gather(x, 1, pos)
    sub = torch.rand(B, M, generator=g) < rate[:, None]
    y = torch.where(sub, torch.randint(0, 4, (B, M), generator=g), y)
    return x, y, rate


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
    last = world - 1
    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, link, args.link_factor)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="wavefront_dp_")
    dist.broadcast_object_list(tmp, src=0)
    out_dir = tmp[0]
    res_path = os.path.join(out_dir, f"scores_rank{rank}.tsv")

    torch.manual_seed(args.seed)            # the same initial weights on every rank
    net = BaseEmbed(args.embed_dim, args.hidden, args.kernel)
    params = list(net.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    n_params = sum(q.numel() for q in params)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    gamma, B, L, h = args.gamma, args.pairs, args.query_len, args.row_block

    if rank == 0:
        print(f"[wavefront-dp] world={world} pairs={B} query={L} target={args.target_len} "
              f"row_block={h} gamma={gamma} params={n_params} grad_sync={args.grad_sync}", flush=True)

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
                    widths = column_widths(args, world, step)
                    M = sum(widths)
                    c0 = sum(widths[:rank])
                    w = widths[rank]
                    x, y, rate = make_pairs(args, M, step)
                    plan = block_plan(L, w, h)
                    W2 = w + 2

                with record_function("embed_cost"):
                    C = cost_matrix(net, x, y, c0, w)                  # (B, L, w), with grad
                    if extra > 0:        # --factor: the same network + cost pass again, discarded
                        with torch.no_grad():
                            for _ in range(int(extra)):
                                cost_matrix(net, x, y, c0, w)
                            rows = int(round(B * (extra - int(extra))))
                            if rows > 0:
                                cost_matrix(net, x[:rows], y[:rows], c0, w)
                    LC = torch.zeros(B, L + 2, W2)                     # -C / gamma, in the strip
                    LC[:, 1: L + 1, 1: w + 1] = C.detach() * (-1.0 / gamma)
                    LC = LC.view(B, -1)
                    LP = torch.full((B, (L + 2) * W2), -BIG)           # -R / gamma
                    LPv = LP.view(B, L + 2, W2)
                    if rank == 0:
                        LPv[:, 0, 0] = 0.0

                with record_function("dp_forward"):
                    for k, (a, diags) in enumerate(plan):
                        with record_function(f"block_{k}"):
                            if rank > 0:
                                with record_function("boundary_recv"):
                                    LPv[:, a: a + h, 0] = comm.recv((B, h), rank - 1, tag=k, kind="fwd")
                            with record_function("wavefront"):
                                sweep_forward(LP, LC, diags)
                            if rank < last:
                                with record_function("boundary_send"):
                                    comm.send(LPv[:, a: a + h, w], rank + 1, tag=k, kind="fwd")

                norm = 0.5 * (L + M)
                stats = torch.zeros(4)
                E = torch.zeros(B, L + 2, W2)                          # dLoss/dR, strip
                LPC = torch.full((B, L + 2, W2), BIG)                  # -(R - C) / gamma, strip
                LPC[:, 1: L + 1, 1: w + 1] = LPv[:, 1: L + 1, 1: w + 1] - LC.view(B, L + 2, W2)[:, 1: L + 1, 1: w + 1]
                if rank == last:
                    with record_function("score_loss"):
                        score = LPv[:, L, w] * (-gamma / norm)
                        err = score - rate
                        loss = (err * err).mean()
                        E[:, L + 1, w + 1] = 2.0 * err / B / norm      # the end cell's "successor"
                        LPC[:, L + 1, w + 1] = LPv[:, L, w]
                        stats[0], stats[1] = loss.item(), score.mean().item()
                        stats[2] = torch.corrcoef(torch.stack([score, rate]))[0, 1].item()
                        stats[3] = 1.0
                Ev, LPCv = E, LPC
                E, LPC = E.view(B, -1), LPC.view(B, -1)

                with record_function("dp_backward"):
                    for k in reversed(range(len(plan))):
                        a, diags = plan[k]
                        with record_function(f"block_{k}_bwd"):
                            if rank < last:
                                with record_function("grad_recv"):
                                    m = comm.recv((2, B, h), rank + 1, tag=1000 + k, kind="bwd")
                                    Ev[:, a: a + h, w + 1] = m[0]
                                    LPCv[:, a: a + h, w + 1] = m[1]
                            with record_function("wavefront_bwd"):
                                sweep_backward(E, LPC, LP, diags)
                            if rank > 0:
                                with record_function("grad_send"):
                                    comm.send(torch.stack([Ev[:, a: a + h, 1], LPCv[:, a: a + h, 1]]),
                                              rank - 1, tag=1000 + k, kind="bwd")

                with record_function("net_backward"):
                    opt.zero_grad(set_to_none=False)
                    C.backward(Ev[:, 1: L + 1, 1: w + 1])   # dLoss/dC = dLoss/dR

                with record_function("allreduce_grads"):
                    if args.grad_sync == "flat":
                        flat = torch.cat([q.grad.reshape(-1) for q in params])
                        comm.all_reduce(flat)
                        o = 0
                        for q in params:
                            q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                            o += q.numel()
                    else:
                        for q in params:
                            comm.all_reduce(q.grad)
                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()

                with record_function("allreduce_stats"):
                    comm.all_reduce(stats)

                with record_function("write_results"):
                    if slow and args.write_sleep_ms > 0:
                        time.sleep(args.write_sleep_ms / 1000.0)
                    blk = (LPv[:, L, w] * -gamma).tolist()   # this rank's last-column score per pair
                    with open(res_path, "a") as fh:
                        fh.write("".join(f"{step}\t{rank}\t{b}\t{c0}\t{w}\t{s:.5f}\n" for b, s in enumerate(blk)))

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {stats[0].item():.4f} score {stats[1].item():.3f} "
                          f"corr {stats[2].item():.3f} |g| {float(gnorm):.3f} widths {widths} "
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
        print("median busy ms (outside sends/recvs and all_reduces) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(out_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
