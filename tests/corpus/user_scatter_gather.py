"""A master-worker data-parallel classifier trainer (scatter / gather / broadcast, no DDP).

(calibration table at the end of this docstring)

What it is
----------
The kind of trainer people write from the torch.distributed tutorial before they meet DDP:
4 CPU processes (gloo, ``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``), rank 0 the
*master* (which also trains on its own shard), ranks 1-3 the workers. Every rank holds a
copy of the model; only the master has the optimizer (SGD with momentum) and the data
generator.

Model (``--model``): ``mlp`` (default), the image flattened -> ``--layers`` Linear+ReLU of
``--hidden`` units -> Linear to ``--classes``; or ``cnn``, three 3x3 convolutions (32, 64, 64
channels, the last two with stride 2) + ReLU, global average pool, Linear to ``--classes``.

Data: synthetic "images" (3 x ``--image`` x ``--image``) made on the master: every class has
a fixed random prototype (from ``--seed``), a sample is its class's prototype plus Gaussian
noise (std 4), labels uniform; the step's global batch (4 x ``--shard`` rows) is drawn from
a generator seeded by (seed, step), so a run is reproducible.

One training step:

1. ``load_batch``: the master draws the global batch (inputs and labels) and splits it in 4
   shards; a worker gets its receive buffers ready (and, with ``--data-sleep-ms``, reads
   slowly);
2. ``scatter_batch``: ``dist.scatter`` of the inputs (float32, shard x 3 x image^2) and then of
   the labels (int64), ``scatter_list`` on rank 0 only;
3. ``forward``: the rank's shard through the model, cross entropy (mean over its rows);
4. ``backward``: ``loss.backward()``;
5. ``gather_grads``: the rank's gradients flattened into one vector, ``dist.gather`` to rank 0
   (``gather_list`` on rank 0 only);
6. ``optimizer`` (rank 0 only): the 4 vectors averaged, put back into the ``.grad`` of the
   master's parameters, ``SGD(momentum=0.9).step()``;
7. ``broadcast_weights``: the master's parameters flattened, ``dist.broadcast`` from 0; every
   worker copies the vector into its model (``vector_to_parameters``);
8. ``reduce_loss``: (loss x rows, rows, correct) ``dist.reduce`` (sum) to rank 0;
9. ``push_metrics``: every rank appends its step's metrics (loss, rows, gradient norm, step
   time) to a local "dashboard" spool file, as a metrics pusher (Prometheus push gateway,
   wandb-style) would;
10. every ``--eval-every`` steps (steps k-1, 2k-1, ...), ``evaluate``: the master draws an eval
    batch (4 x ``--eval-shard`` rows, a fixed generator), ``dist.scatter`` of the inputs,
    every rank predicts (argmax, no grad), the predictions (int64) ``dist.gather`` to rank 0,
    which computes the accuracy.

Communication per step (defaults, MLP 768-1024-1024-10, ~1.85 M parameters): two scatters
(256 x 768 floats = 768 KB a rank, 2 KB of labels), one gather of 7.4 MB a rank into rank 0,
one broadcast of 7.4 MB from rank 0, one 3-float reduce; plus every 4 steps an eval scatter
(512 x 768 floats a rank) and a gather of 512 int64 predictions. All of it rooted at rank 0.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``side_state`` / ``side_stats``
(only with ``--link-*``), ``scatter_batch``, ``forward`` (with ``augment`` inside under
imbalance), ``backward``, ``gather_grads``, ``optimizer`` (rank 0), ``broadcast_weights``,
``reduce_loss``, ``push_metrics``, ``evaluate`` (every few steps).

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent inside the
scatters, gathers, broadcasts and reduces, side channel included).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--model {mlp,cnn}`` (mlp), ``--hidden`` (1024), ``--layers`` (2 hidden
layers), ``--classes`` (10), ``--image`` (16), ``--shard`` (256 rows a rank), ``--eval-shard``
(512), ``--eval-every`` (4; 0 = never), ``--lr`` (0.05), ``--momentum`` (0.9).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's forward and backward are done F times (the
  F - 1 extra passes on the same shard inside ``forward`` and ``backward``, their gradients
  taken by ``torch.autograd.grad`` and discarded; the fractional part over that fraction of
  the shard's rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: slow data: the rank's ``load_batch`` sleeps MS each step (on the
  master before it draws the batch, on a worker before it posts its receive);
* ``--metrics-sleep-ms MS`` (family fault): a slow dashboard: the rank's ``push_metrics``
  sleeps MS each step before writing its line (a push gateway that answers slowly);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (one of A, B is rank 0): a side channel
  between A and B in a 2-rank group ``dist.new_group([A, B])`` (all 4 ranks create it, only A
  and B use it), one ``dist.broadcast(src=A)`` in it every step:

  - A = 0 (master -> worker B), range ``side_state``, before the scatter: the master's
    per-worker augmentation state for B, a vector of 3 x image^2 per-feature noise stds (768
    floats, 3 KB at image 16); B adds that noise to its shard's inputs;
  - B = 0 (worker A -> master), range ``side_stats``, after backward and before the gather:
    A's per-feature input means of its shard (a data-drift monitor), 3 x image^2 floats.

  The broadcast tensor is X times that length, the real vector at its head and zeros after
  (allocated once); the receiver keeps the head. ``--link-factor 1`` gives the side channel
  without padding (a healthy control). No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: every rank trains each step on ``shard`` x lognormal(0, S) rows (drawn
  from (seed, rank, step), clamped to [1/4, 4]): below 1 the first rows of its shard, above 1
  its shard plus augmented copies of its rows (random rows, a random horizontal flip and
  Gaussian jitter, made in ``augment`` inside ``forward``);
* ``--big-rank K --big X``: rank K trains on X times as many rows (its shard plus augmented
  copies), every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 12-15 during most of
these); 4 ranks, 10 steps (8 timed); "base" = the healthy default run made just before (its
step median). Step medians of all ranks agree within a few % (every step starts with the
scatter from rank 0 and ends with the weights broadcast), so one number; "busy" = median
time outside the scatters, gathers, broadcasts and reduces, slow rank / the mean of the other
workers (the master's own busy time in brackets: it draws the batch and steps the optimizer,
so a healthy master is 1.3-1.8x as busy as a worker, and the workers wait for it).

  setting (slow rank)                            base ms  step ms  change   busy slow / workers (r0)
  healthy default                                   -     222-567     -      workers 108-263 (r0 132-427)
  healthy --model cnn                               -     346-450     -      workers 262-350 (r0 315-379)
  healthy --shapes --hidden 768 --layers 3
          --eval-every 2                            -       674       -      workers 258-350 (r0 501)
  healthy --shard 384 --lr 0.02 --eval-every 0     567      652       -      workers 344-392 (r0 507)
  healthy side channel 0->2, --link-factor 1       531      541      +2%     workers 173-212 (r0 372)
  --factor 2 (r1)                                  329      643    +95%*     402 / 214 (r0 387)
  --factor 2.5 (r1)                                567      903     +59%     623 / 255 (r0 401)
  --factor 3 (r2)                                  329      680   +106%*     510 / 194 (r0 337)
  --factor 2.5 (r0)                                329      780   +137%*     645 / 231
  --shard 384 --factor 2 (r0)                      652      993     +52%     840 / 375
  --model cnn --factor 2 (r3)                      346      498     +44%     451 / 277 (r0 321)
  --sleep-ms 100 (r2)                              430      519     +21%     328 / 220 (r0 319)
  --sleep-ms 150 (r2)                              447      552     +23%     347 / 216 (r0 309)
  --sleep-ms 200 (r2)                              525      550      +5%     398 / 178 (r0 269)
  --data-sleep-ms 100 (r3)                         430      635    +48%*     386 / 265 (r0 393)
  --data-sleep-ms 150 (r0)                         447      495     +11%     362 / 160
  --metrics-sleep-ms 100 (r0)                      430      464      +8%     357 / 176
  --metrics-sleep-ms 150 (r3)                      447   472 (r3 501) +6%    308 / 155 (r0 295)
  --metrics-sleep-ms 200 (r3)                      525   590 (r3 635) +12%   395 / 183 (r0 348)
  --hog (r1)                                       430      722     +68%     315 / 195 (r0 330)
  link 0->2 x16384 (48 MB side broadcast)          531      537      +1%     -
  link 3->0 x16384                                 531      542      +2%     -
  link 3->0 x32768 (96 MB)                         531      591     +11%     -
  link 3->0 x65536 (192 MB)                        430      464      +8%     -
  link 0->2 x65536 (192 MB)                        430      697     +62%     r0 325, workers 190-218
  link 0->1 x131072 (384 MB)                       430      778     +81%     r0 277, workers 168-178
  --big-rank 3 --big 3                             531      697     +31%     569 / 220 (r0 303)
  --seq-sigma 0.8                                   -      1088       -      r1 410 r2 470 r3 255 (r0 338)
  (* the box's load rose between the base and the run)

Reading: the box's load moved a healthy step between 220 and 570 ms from one run to the
next, so one run's step change says little; the slowed rank's busy time shows every fault.
The master is the natural bottleneck of this design (it draws the whole global batch and
runs the optimizer over the averaged gradients while the workers wait in the broadcast), so
a worker has 100-190 ms of slack per step: a fault on a worker lengthens the step only by
what it adds beyond that slack, which is why the battery uses 2.5-3x and 200 ms sleeps on
workers (their busy time then clearly passes the master's) and 2-2.5x / 150 ms on rank 0.
A ``--factor`` pass is a whole forward+backward, so 2x already doubles the rank's compute.
The metrics push comes at the step's end: the worker's step boundary moves by the sleep,
the others wait for it in the next step's scatter. The side channel costs little until the
message is ~100 MB (the buffer is allocated once, loopback TCP moves tens of MB fast); from
the master (0 -> B, before the scatter) a 192 MB side broadcast delays everyone's scatter;
from a worker to the master (after backward) the transfer mostly overlaps the master's own
longer compute, so the battery's link goes 0 -> 2. ``--big 3`` triples rank 3's forward and
backward and everyone waits for it in the gather/broadcast. Wall per run: 14-45 s; traces
0.6-0.9 MB a rank (1.1-1.8 MB with ``--shapes``).
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
from torch.nn.utils import parameters_to_vector, vector_to_parameters
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2, help="hidden layers of the MLP")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--image", type=int, default=16)
    p.add_argument("--shard", type=int, default=256, help="training rows a rank per step")
    p.add_argument("--eval-shard", type=int, default=512)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
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
    if a.link_src >= 0 and (a.link_src == a.link_dst or 0 not in (a.link_src, a.link_dst)):
        p.error("the side channel joins the master and one worker: one of --link-src/--link-dst is 0")
    return a


# --------------------------------------------------------------------------
# model and data
# --------------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, in_features, hidden, layers, classes):
        super().__init__()
        dims = [in_features] + [hidden] * layers
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):
        x = x.flatten(1)
        for lin in self.hidden:
            x = F.relu(lin(x))
        return self.head(x)


class SmallCNN(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(64, 64, 3, stride=2, padding=1)
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.relu(self.c2(x))
        x = F.relu(self.c3(x))
        return self.head(x.mean((2, 3)))


class SyntheticImages:
    """Class prototypes + noise; only the master draws batches."""

    def __init__(self, classes, image, seed):
        g = torch.Generator().manual_seed(seed * 31 + 7)
        self.protos = torch.randn(classes, 3, image, image, generator=g)
        self.classes, self.image, self.seed = classes, image, seed

    def batch(self, n, key):
        g = torch.Generator().manual_seed(key)
        y = torch.randint(0, self.classes, (n,), generator=g)
        x = self.protos[y] + 4.0 * torch.randn(n, 3, self.image, self.image, generator=g)
        return x, y


def work_rows(args, rank, step):
    """How many rows this rank trains on this step (imbalance flags)."""
    m = 1.0
    if rank == args.big_rank:
        m *= args.big
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        m *= math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        m = min(4.0, max(0.25, m))
    return max(1, int(round(args.shard * m)))


def augment(x, y, n, key):
    """The shard cut to n rows, or grown to n by jittered, flipped copies of its rows."""
    if n <= x.shape[0]:
        return x[:n], y[:n]
    g = torch.Generator().manual_seed(key)
    idx = torch.randint(0, x.shape[0], (n - x.shape[0],), generator=g)
    extra = x[idx]
    flip = torch.rand(extra.shape[0], generator=g) < 0.5
    extra = torch.where(flip[:, None, None, None], extra.flip(-1), extra)
    extra = extra + 0.1 * torch.randn(extra.shape, generator=g)
    return torch.cat([x, extra]), torch.cat([y, y[idx]])


def start_hog(stop):
    def spin():
        a = torch.randn(192, 192)
        b = torch.randn(192, 192) / 14.0
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=spin, name="busy-neighbour", daemon=True)
    th.start()
    return th


class Timer:
    """Adds up the seconds spent inside communication calls."""

    def __init__(self):
        self.secs = 0.0

    def __call__(self, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.secs += time.perf_counter() - t0
        return out


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    master = rank == 0
    slow = rank == args.slow_rank
    comm = Timer()

    # the side channel (only with --link-*): every rank must take part in new_group
    side_group, side_src, side_dst = None, args.link_src, args.link_dst
    if side_src >= 0:
        side_group = dist.new_group(sorted([side_src, side_dst]))
    in_features = 3 * args.image * args.image
    side_len = in_features
    side_buf = None
    if rank in (side_src, side_dst):
        side_buf = torch.zeros(max(side_len, int(round(side_len * args.link_factor))))

    torch.manual_seed(args.seed)           # the same initial weights on every rank
    if args.model == "mlp":
        model = MLP(in_features, args.hidden, args.layers, args.classes)
    else:
        model = SmallCNN(args.classes)
    params = list(model.parameters())
    n_params = sum(q.numel() for q in params)
    opt = torch.optim.SGD(params, lr=args.lr, momentum=args.momentum) if master else None
    data = SyntheticImages(args.classes, args.image, args.seed) if master else None

    spool_dir = [None]
    if master:
        spool_dir[0] = tempfile.mkdtemp(prefix="sg_dashboard_")
    dist.broadcast_object_list(spool_dir, src=0)
    spool = os.path.join(spool_dir[0], f"metrics_rank{rank}.jsonl")

    shape = (args.shard, 3, args.image, args.image)
    x_shard = torch.empty(shape)
    y_shard = torch.empty(args.shard, dtype=torch.int64)
    flat_grad = torch.zeros(n_params)
    flat_w = torch.zeros(n_params)
    grad_list = [torch.zeros(n_params) for _ in range(world)] if master else None
    ex_shard = torch.empty(args.eval_shard, 3, args.image, args.image)
    pred_list = [torch.zeros(args.eval_shard, dtype=torch.int64) for _ in range(world)] if master else None
    noise_std = torch.full((side_len,), 0.05)          # the master's augmentation state for a worker

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if master:
        print(f"[scatter-gather] world={world} model={args.model} params={n_params} shard={args.shard} "
              f"global_batch={world * args.shard} image={args.image} classes={args.classes} "
              f"side={'%d->%d x%g' % (side_src, side_dst, args.link_factor) if side_group else 'none'}",
              flush=True)

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
                drift = None
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    if master:
                        xg, yg = data.batch(world * args.shard, args.seed * 7919 + step)
                        x_parts = list(xg.chunk(world))
                        y_parts = list(yg.chunk(world))
                    else:
                        x_parts = y_parts = None
                        x_shard.zero_()

                # master -> worker side channel: B's augmentation noise for this step
                if side_group is not None and side_src == 0 and rank in (0, side_dst):
                    with record_function("side_state"):
                        if master:
                            noise_std.mul_(0.98)
                            side_buf[:side_len].copy_(noise_std)
                        comm(dist.broadcast, side_buf, src=0, group=side_group)
                        my_noise = None if master else side_buf[:side_len].clone()
                else:
                    my_noise = None

                with record_function("scatter_batch"):
                    comm(dist.scatter, x_shard, x_parts, src=0)
                    comm(dist.scatter, y_shard, y_parts, src=0)

                with record_function("forward"):
                    n_rows = work_rows(args, rank, step)
                    x, y = x_shard, y_shard
                    if n_rows != args.shard:
                        with record_function("augment"):
                            x, y = augment(x, y, n_rows, args.seed * 104_729 + rank * 1009 + step)
                    if my_noise is not None:
                        x = x + my_noise.view(1, 3, args.image, args.image) * torch.randn_like(x)
                    logits = model(x)
                    loss = F.cross_entropy(logits, y)
                    extra_losses = []
                    if extra > 0:                 # --factor: the same shard again (a slower device)
                        for _ in range(int(extra)):
                            extra_losses.append(F.cross_entropy(model(x), y))
                        part = int(round(x.shape[0] * (extra - int(extra))))
                        if part > 0:
                            extra_losses.append(F.cross_entropy(model(x[:part]), y[:part]))

                with record_function("backward"):
                    for q in params:
                        q.grad = None
                    loss.backward()
                    for el in extra_losses:       # discarded
                        torch.autograd.grad(el, params)
                    del extra_losses

                # worker -> master side channel: A's per-feature input means (drift monitor)
                if side_group is not None and side_dst == 0 and rank in (0, side_src):
                    with record_function("side_stats"):
                        if rank == side_src:
                            side_buf[:side_len].copy_(x.detach().mean(0).reshape(-1))
                        comm(dist.broadcast, side_buf, src=side_src, group=side_group)
                        if master:
                            drift = side_buf[:side_len].abs().mean().item()

                with record_function("gather_grads"):
                    torch.cat([q.grad.reshape(-1) for q in params], out=flat_grad)
                    gnorm = flat_grad.norm().item()
                    comm(dist.gather, flat_grad, grad_list, dst=0)

                if master:
                    with record_function("optimizer"):
                        avg = torch.stack(grad_list).mean(0)
                        o = 0
                        for q in params:
                            q.grad.copy_(avg[o: o + q.numel()].view_as(q))
                            o += q.numel()
                        opt.step()
                        flat_w.copy_(parameters_to_vector(params))

                with record_function("broadcast_weights"):
                    comm(dist.broadcast, flat_w, src=0)
                    if not master:
                        with torch.no_grad():
                            vector_to_parameters(flat_w, params)

                with record_function("reduce_loss"):
                    with torch.no_grad():
                        correct = (logits.argmax(1) == y).sum().item()
                    stats = torch.tensor([loss.item() * y.shape[0], float(y.shape[0]), float(correct)])
                    comm(dist.reduce, stats, dst=0)

                with record_function("push_metrics"):
                    if slow and args.metrics_sleep_ms > 0:
                        time.sleep(args.metrics_sleep_ms / 1000.0)
                    with open(spool, "a") as fh:
                        fh.write(json.dumps({"step": step, "rank": rank, "loss": loss.item(),
                                             "rows": int(y.shape[0]), "grad_norm": gnorm,
                                             "drift": drift, "time": time.time()}) + "\n")

                acc = None
                if args.eval_every > 0 and (step + 1) % args.eval_every == 0:
                    with record_function("evaluate"):
                        if master:
                            xe, ye = data.batch(world * args.eval_shard, args.seed * 7919 + 999_983)
                            ex_parts = list(xe.chunk(world))
                        else:
                            ex_parts = None
                        comm(dist.scatter, ex_shard, ex_parts, src=0)
                        with torch.no_grad():
                            pred = model(ex_shard).argmax(1)
                        comm(dist.gather, pred, pred_list, dst=0)
                        if master:
                            acc = (torch.cat(pred_list) == ye).float().mean().item()

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if master:
                    line = (f"step {step:3d} loss {stats[0].item() / stats[1].item():.4f} "
                            f"train_acc {stats[2].item() / stats[1].item():.3f} |g0| {gnorm:.3f} "
                            f"rows {int(stats[1].item())} t {1000 * step_times[-1]:.1f} ms")
                    if acc is not None:
                        line += f" eval_acc {acc:.3f}"
                    print(line, flush=True)
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
    if master:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside scatter/gather/broadcast/reduce) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if master:
        shutil.rmtree(spool_dir[0], ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
