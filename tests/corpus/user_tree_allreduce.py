"""A 1-D CNN sequence classifier trained data-parallel with a hand-written binomial-tree all-reduce.

(calibration table at the end of this docstring)

What it is
----------
Plain data parallelism without DDP: 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``), every rank holds the whole model and trains on its own synthetic
batches; after ``loss.backward()`` the gradients are averaged by the user's own
*binomial-tree* all-reduce, written with point-to-point messages only (no DDP, no
``dist.all_reduce`` for the gradients): the flat gradients are cut into buckets of
``--bucket-mb`` MB (in reverse parameter order, as backward produces them) and each bucket
goes through the tree in turn:

* reduce up the tree to rank 0 (``tree_reduce``): round 1: 1 -> 0 and 3 -> 2 (the receivers
  add what they get to their own bucket); round 2: 2 -> 0. Rank 0 divides by the world size;
* broadcast down the same tree (``tree_bcast``): 0 -> 2; then 0 -> 1 and 2 -> 3.

(The general rule, for a power-of-two world: in reduce round k = 1, 2, 4, ... a rank with
``rank % 2k == k`` sends to ``rank - k`` and is done, one with ``rank % 2k == 0`` receives from
``rank + k``; the broadcast runs the rounds backwards.)

Every message is a blocking ``dist.send`` / ``dist.recv`` by default; with ``--async-p2p`` the
receives are ``dist.irecv(...).wait()`` and the sends ``dist.isend`` whose works are waited at
the end of the bucket (``tree_send_wait``). Send and receive buffers are persistent, one per
(bucket, peer, phase).

Model: ``--layers`` residual 1-D conv blocks (Conv1d ``--channels`` x ``--channels``, kernel
``--kernel``, dilation 1, 2, 4, ... , BatchNorm-free: GroupNorm(8) + GELU) after a stem conv
from ``--in-ch`` input channels, global average pooling over time and a linear head to
``--classes`` classes. AdamW, gradient clipping at 1.0.

Data: synthetic multichannel signals: every class has a fixed template (a few sinusoids per
channel, made from the seed), a sample is its class template, randomly shifted in time and
scaled, plus Gaussian noise. Each rank draws its own batch from (seed, rank, step); a fixed
evaluation batch per rank is drawn once.

Communication per step (defaults: 4 layers, 96 channels, ~0.19 M parameters = 0.74 MB,
``--bucket-mb 0.25`` -> 3 buckets): per bucket 3 messages up the tree (1->0, 3->2, 2->0) and 3
down (0->2, 0->1, 2->3), each of the bucket's size; every ``--log-every`` steps (2) one
2-float ``dist.all_reduce`` of the loss (sum, count); every ``--eval-every`` steps (4) a
``dist.barrier`` followed by a local evaluation on the rank's held-out batch.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``forward``, ``backward``,
``grad_sync`` [per bucket ``bucket_i`` [``tree_reduce``, ``tree_bcast``, ``tree_send_wait``
(async only)]], ``optimizer``, ``metrics_push``, ``log_loss`` (every ``--log-every`` steps),
``evaluate`` [``eval_barrier``] (every ``--eval-every`` steps).

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the tree
sends/receives/waits, the loss all_reduce and the evaluation barrier).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (4), ``--channels`` (96), ``--kernel`` (5), ``--in-ch`` (8),
``--classes`` (10), ``--batch`` (16, per rank), ``--seq-len`` (256), ``--lr`` (2e-3),
``--bucket-mb`` (0.25), ``--async-p2p``, ``--log-every`` (2), ``--eval-every`` (4).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's forward and backward are done F times (F - 1
  extra passes on the same batch, their gradients taken with ``torch.autograd.grad`` and
  discarded; the fractional part over that fraction of the batch rows); the extra forwards
  run inside ``forward``, their backwards inside ``backward``;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow data source: ``load_batch`` sleeps MS each step;
* ``--metrics-sleep-ms MS`` (family fault): a slow push of the step's metrics to a
  monitoring service: the rank's ``metrics_push`` sleeps MS before writing its record;
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B neighbours in the tree: 1-0, 3-2, 2-0,
  either direction): every message A sends to B (up the tree in reduce or down it in the
  broadcast, every bucket) carries X times the bytes, zero-padded in the same message; B
  receives it all and keeps the head. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's sequence length this step is ``seq_len`` times
  lognormal(0, S) (drawn from (seed, rank, step), rounded to 8 samples, clamped to
  [seq_len / 4, 4 seq_len]): the ranks' work differs by rank and step;
* ``--big-rank K --big X``: rank K's batch is X times the others', every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs; 4 ranks, 10 steps (8 timed); healthy
default runs ("base") interleaved with the fault runs. Step medians of all ranks agree
within a few % (the tree ties every rank to rank 0 each bucket), so one range; "busy" =
median time outside communication, the slow rank vs the others.

  setting (slow rank)                               base ms   step ms   busy slow / others ms
  healthy default                                      -      250-433    173-333 (by load)
  healthy --async-p2p --shapes                         -      300-319    246-275
  healthy --channels 128 --layers 6 --kernel 3
          --bucket-mb 1                                -      542-592    480-508
  healthy --seq-len 512 --batch 8 --bucket-mb 0.1
          --log-every 1 --eval-every 3                 -      475-566    318-388
  healthy --channels 64 --layers 8 --batch 32
          --seq-len 128 --async-p2p --bucket-mb 0.05   -      418-425    287-340  (9 buckets)
  --factor 2 (r1)                                     432      567-630    567 / 312-340
  --factor 3 (r2)                                     250      810-835    795 / 320-325
  --async-p2p --factor 2.5 (r0)                       375      655-672    628 / 328-344
  --channels 128 --layers 6 --kernel 3 --factor 3
          (r3)                                        567     1231-1246  1210 / 511-538
  --sleep-ms 120 (r1)                                 432      504-532    422 / 332-405
  --sleep-ms 160 (r1)                                 375      373-390    356 / 230-266
  --data-sleep-ms 120 (r3)                            250      270-295    231 / 172-195
  --data-sleep-ms 150 (r3)                            375      444-478    398 / 277-303
  --metrics-sleep-ms 120 (r0)                         250      304-357    303 / 172-206
  --metrics-sleep-ms 140 (r0)                         268      342-385    318 / 203-228
  --hog (r2)                                          385      538-580    468 / 302-343
  link 2->0 x64 (16 MB messages)                      371      421-435    (no rank stands out)
  link 2->0 x256 (64 MB messages)                     371      481-498    r0 349, r2 305 / 266-270
  link 2->0 x512 (128 MB messages)                    375      534-566    256-280 (all wait)
  link 0->1 x256 --async-p2p (broadcast)              371      491-501    r0 311 / 272-293
  --big-rank 3 --big 3                                371      742-747    698 / 298-355
  --seq-sigma 0.8                                      -       642-681    317-476 by rank and step

Reading: the neighbours' load moved a healthy step between 250 and 430 ms from one run to
the next, so one run's step change says little; the slowed rank's busy time shows the
faults. ``--factor`` repeats the whole forward and backward (most of a step), so 2 already
costs the rank ~70-80% more busy time and everyone's step follows (they wait for it in
``tree_reduce`` / ``tree_bcast``). A sleep is partly hidden on this oversubscribed box:
while the slow rank sleeps the other three get the cores, so the step grows by less than
the sleep; still 120-160 ms is 30-45% of the slow rank's step. The hog takes ~40% more
busy time on its rank. A padded tree link costs little until the messages are tens of MB
per bucket; at x512 (3 buckets of ~0.25 MB -> ~380 MB a step over 2->0) the transfer adds
~40% to every step, all ranks waiting (the whole tree hangs below rank 0). A bigger batch
(``--big``) makes the big rank compute ~X times longer and every other rank wait for it.
Wall per run: 12-30 s; traces 3-5 MB a rank (~5 MB with --shapes or 9 buckets).
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
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--channels", type=int, default=96)
    p.add_argument("--kernel", type=int, default=5)
    p.add_argument("--in-ch", type=int, default=8)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=16, help="samples per rank and step")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--bucket-mb", type=float, default=0.25)
    p.add_argument("--async-p2p", action="store_true", help="isend/irecv + wait instead of send/recv")
    p.add_argument("--log-every", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=4)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--metrics-sleep-ms", type=float, default=0.0)
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
# the binomial tree
# --------------------------------------------------------------------------

def tree_edges(world):
    """(child, parent) pairs of the binomial tree rooted at 0."""
    edges = []
    k = 1
    while k < world:
        for r in range(world):
            if r % (2 * k) == k:
                edges.append((r, r - k))
        k *= 2
    return edges


class TreeComm:
    """Binomial-tree reduce + broadcast of flat buckets with point-to-point messages."""

    def __init__(self, rank, world, use_async, link=None, link_factor=1.0):
        self.rank, self.world, self.use_async = rank, world, use_async
        self.link, self.link_factor = link, link_factor
        self.bufs = {}         # persistent buffers (the padded ones stay zero past the head)
        self.pending = []      # isend works, waited at the end of the bucket
        self.secs = 0.0        # time in communication this step

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def send(self, t, dst, tag):
        n = t.numel()
        buf = self._buffer(("send", dst, tag), self._padded(n, self.rank, dst))
        buf[:n].copy_(t)
        t0 = time.perf_counter()
        if self.use_async:
            self.pending.append(dist.isend(buf, dst, tag=tag))
        else:
            dist.send(buf, dst, tag=tag)
        self.secs += time.perf_counter() - t0

    def recv(self, n, src, tag):
        buf = self._buffer(("recv", src, tag), self._padded(n, src, self.rank))
        t0 = time.perf_counter()
        if self.use_async:
            dist.irecv(buf, src, tag=tag).wait()
        else:
            dist.recv(buf, src, tag=tag)
        self.secs += time.perf_counter() - t0
        return buf[:n]

    def wait_sends(self):
        t0 = time.perf_counter()
        for w in self.pending:
            w.wait()
        self.pending.clear()
        self.secs += time.perf_counter() - t0

    def reduce(self, acc, b):
        """Sum ``acc`` up the tree into rank 0 (in place on the receivers)."""
        rank, world, n = self.rank, self.world, acc.numel()
        k = 1
        while k < world:
            if rank % (2 * k) == k:
                self.send(acc, rank - k, tag=2 * b)
                return
            if rank % (2 * k) == 0 and rank + k < world:
                acc += self.recv(n, rank + k, tag=2 * b)
            k *= 2

    def bcast(self, acc, b):
        """Rank 0's ``acc`` down the same tree to everyone."""
        rank, world, n = self.rank, self.world, acc.numel()
        k = 1
        while 2 * k < world:
            k *= 2
        while k >= 1:
            if rank % (2 * k) == 0 and rank + k < world:
                self.send(acc, rank + k, tag=2 * b + 1)
            elif rank % (2 * k) == k:
                acc.copy_(self.recv(n, rank - k, tag=2 * b + 1))
            k //= 2

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t

    def barrier(self):
        t0 = time.perf_counter()
        dist.barrier()
        self.secs += time.perf_counter() - t0


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class ConvBlock(nn.Module):
    def __init__(self, ch, kernel, dilation):
        super().__init__()
        self.conv = nn.Conv1d(ch, ch, kernel, padding=dilation * (kernel // 2), dilation=dilation)
        self.norm = nn.GroupNorm(8, ch)

    def forward(self, x):
        return x + F.gelu(self.norm(self.conv(x)))


class SeqCNN(nn.Module):
    def __init__(self, in_ch, ch, kernel, layers, classes):
        super().__init__()
        self.stem = nn.Conv1d(in_ch, ch, kernel, padding=kernel // 2)
        self.blocks = nn.ModuleList(ConvBlock(ch, kernel, 2 ** (i % 4)) for i in range(layers))
        self.head = nn.Linear(ch, classes)

    def forward(self, x):
        h = F.gelu(self.stem(x))
        for blk in self.blocks:
            h = blk(h)
        return self.head(h.mean(-1))


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

class SyntheticSignals:
    """Class templates (sinusoids per channel) + shift, scale and noise."""

    def __init__(self, in_ch, classes, seed):
        g = torch.Generator().manual_seed(seed + 17)
        self.freqs = torch.rand(classes, in_ch, 3, generator=g) * 0.2 + 0.01
        self.phases = torch.rand(classes, in_ch, 3, generator=g) * 2 * math.pi
        self.amps = torch.rand(classes, in_ch, 3, generator=g)
        self.classes = classes

    def batch(self, n, length, g):
        y = torch.randint(0, self.classes, (n,), generator=g)
        t = torch.arange(length, dtype=torch.float32)
        shift = torch.randint(0, 64, (n, 1, 1, 1), generator=g).float()
        tt = (t.view(1, 1, 1, -1) + shift)
        x = (self.amps[y].unsqueeze(-1) *
             torch.sin(2 * math.pi * self.freqs[y].unsqueeze(-1) * tt + self.phases[y].unsqueeze(-1))).sum(2)
        x = x * (0.8 + 0.4 * torch.rand(n, 1, 1, generator=g))
        x = x + 0.5 * torch.randn(x.shape, generator=g)
        return x, y


def work_shape(args, rank, step):
    """This rank's (batch, length) this step."""
    n, length = args.batch, args.seq_len
    if rank == args.big_rank:
        n = max(1, int(round(n * args.big)))
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        f = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        f = min(4.0, max(0.25, f))
        length = max(8, int(round(args.seq_len * f / 8)) * 8)
    return n, length


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
    edges = tree_edges(world)

    link = None
    if args.link_src >= 0:
        link = (args.link_src, args.link_dst)
        if link not in edges and link[::-1] not in edges:
            raise SystemExit(f"--link-src/--link-dst must be tree neighbours, one of {edges} (either way)")
    comm = TreeComm(rank, world, args.async_p2p, link, args.link_factor)

    # the "monitoring service": a spool directory every rank pushes its records to
    spool = [None]
    if rank == 0:
        spool[0] = tempfile.mkdtemp(prefix="tree_metrics_")
    dist.broadcast_object_list(spool, src=0)
    metrics_path = os.path.join(spool[0], f"push_rank{rank}.jsonl")

    torch.manual_seed(args.seed)          # the same initial weights on every rank
    model = SeqCNN(args.in_ch, args.channels, args.kernel, args.layers, args.classes)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    n_params = sum(q.numel() for q in params)

    # gradient buckets, reverse parameter order
    buckets, cur, cur_n = [], [], 0
    limit = max(1, int(args.bucket_mb * (1 << 20) / 4))
    for q in reversed(params):
        cur.append(q)
        cur_n += q.numel()
        if cur_n >= limit:
            buckets.append(cur)
            cur, cur_n = [], 0
    if cur:
        buckets.append(cur)

    data = SyntheticSignals(args.in_ch, args.classes, args.seed)
    eval_x, eval_y = data.batch(32, args.seq_len, torch.Generator().manual_seed(args.seed * 31 + rank + 5))

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[tree-allreduce] world={world} tree={edges} layers={args.layers} ch={args.channels} "
              f"k={args.kernel} batch={args.batch} seq_len={args.seq_len} params={n_params} "
              f"buckets={[sum(q.numel() for q in bk) for bk in buckets]} async={args.async_p2p}", flush=True)

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
                model.train()
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    n, length = work_shape(args, rank, step)
                    g = torch.Generator().manual_seed(args.seed * 7919 + rank * 104_729 + step)
                    x, y = data.batch(n, length, g)

                with record_function("forward"):
                    loss = F.cross_entropy(model(x), y)
                    extra_losses = []
                    if extra > 0:               # --factor: the same work again, results discarded
                        for _ in range(int(extra)):
                            extra_losses.append(F.cross_entropy(model(x), y))
                        rows = int(round(n * (extra - int(extra))))
                        if rows > 0:
                            extra_losses.append(F.cross_entropy(model(x[:rows]), y[:rows]))
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    for el in extra_losses:
                        torch.autograd.grad(el, params)
                    del extra_losses
                    loss.backward()

                with record_function("grad_sync"):
                    for b, bk in enumerate(buckets):
                        with record_function(f"bucket_{b}"):
                            flat = torch.cat([q.grad.reshape(-1) for q in bk])
                            with record_function("tree_reduce"):
                                comm.reduce(flat, b)
                                if rank == 0:
                                    flat /= world
                            with record_function("tree_bcast"):
                                comm.bcast(flat, b)
                            if args.async_p2p:
                                with record_function("tree_send_wait"):
                                    comm.wait_sends()
                            o = 0
                            for q in bk:
                                q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                                o += q.numel()

                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()

                with record_function("metrics_push"):
                    rec = {"step": step, "rank": rank, "loss": loss.item(), "grad_norm": float(gnorm),
                           "batch": n, "length": length, "time": time.time()}
                    if slow and args.metrics_sleep_ms > 0:
                        time.sleep(args.metrics_sleep_ms / 1000.0)   # the monitoring endpoint is slow
                    with open(metrics_path, "a") as fh:
                        fh.write(json.dumps(rec) + "\n")

                mean_loss = None
                if (step + 1) % args.log_every == 0:
                    with record_function("log_loss"):
                        m = torch.tensor([loss.item() * n, float(n)])
                        comm.all_reduce(m)
                        mean_loss = m[0].item() / m[1].item()

                acc = None
                if (step + 1) % args.eval_every == 0:
                    with record_function("evaluate"):
                        with record_function("eval_barrier"):
                            comm.barrier()
                        model.eval()
                        with torch.no_grad():
                            acc = (model(eval_x).argmax(-1) == eval_y).float().mean().item()

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    msg = f"step {step:3d} loss {loss.item():.4f} |g| {float(gnorm):.3f} t {1000 * step_times[-1]:.1f} ms"
                    if mean_loss is not None:
                        msg += f" mean_loss {mean_loss:.4f}"
                    if acc is not None:
                        msg += f" eval_acc {acc:.3f}"
                    print(msg, flush=True)
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
        print("median busy ms (outside the tree messages, loss all_reduce and barrier) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(spool[0], ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
