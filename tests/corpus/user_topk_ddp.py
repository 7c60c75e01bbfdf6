"""Data-parallel CNN training with hand-written top-k gradient sparsification and error feedback.

(calibration table at the end of this docstring)

What it is
----------
A small image classifier (a VGG-ish CNN on synthetic 32x32 "CIFAR-like" images, 10 classes)
trained data-parallel on 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``) *without* DDP: the gradient exchange is written by hand and
compressed the "Deep Gradient Compression" way (top-k sparsification with error feedback).
Every rank holds the full model and draws its own batch.

Model: ``--stages`` stages (3) of ``--blocks`` (2) conv3x3 -> GroupNorm -> ReLU blocks, the
first stage ``--width`` (32) channels, doubled each stage, a 2x2 max-pool between stages;
global average pool and a linear head. ~290 K parameters by default, all in one flat
gradient vector (``grads_to_flat``).

Step, after ``loss.backward()``:

* ``error_feedback``: the rank adds its residual (what it did not send in earlier steps) to
  its flat gradient: acc = grad + residual;
* sparse steps: ``topk_select`` picks the k = ``--density`` x n entries of largest |acc|
  (``torch.topk`` on ``acc.abs()``), the rest stays in the residual (the picked entries are
  zeroed there); ``sparse_allgather`` all-gathers the k indices (int64) and the k values
  (float32, or float16 with ``--half-values``) of every rank
  (``dist.all_gather_into_tensor``, or ``dist.all_gather`` into a list with
  ``--gather list``); ``scatter_average`` index-adds the 4 x k pairs into a dense buffer and
  divides by 4;
* dense steps (the first ``--dense-warmup`` steps and every ``--dense-every``-th step after):
  ``dense_allreduce``: one ``dist.all_reduce`` of the whole acc (averaged) and the residual
  is cleared (a resync of the error feedback);
* ``lr_broadcast``: rank 0 computes the learning rate of the schedule (linear warm-up then
  cosine) and ``dist.broadcast``s it (a 1-float tensor), every rank sets it in its optimizer;
* ``optimizer``: SGD with momentum 0.9 and weight decay on the averaged gradient;
* ``loss_gather``: ``dist.gather`` of (loss, accuracy, batch size, residual norm) of every
  rank to rank 0, which logs the step;
* ``replica_check``: each rank sends a fingerprint of its parameters (a strided sample of
  ``--check-len`` (4096) floats of the flat parameter vector, 16 KB) to its ring neighbour
  r+1 mod 4 and receives r-1's (``dist.isend``/``dist.irecv``), and compares it with its own
  (the replicas must stay identical since all apply the same averaged gradient);
* ``metrics_upload``: every rank appends its own step metrics (loss, |residual|, lr, batch)
  to a jsonl file (the stand-in for a metrics service upload).

Communication per step (defaults: n ~ 290 K, density 1%, k ~ 2.9 K): sparse steps 2
all_gathers of 4 x k elements (~23 KB int64 + ~12 KB float per rank); dense steps one
all_reduce of n floats (1.2 MB); every step a 1-float broadcast, a 4-float gather to rank 0
and a 16 KB p2p message on every ring link r -> r+1.

User ranges per step: ``sleep`` (fault only), ``load_batch`` (index draw, random crop and
flip), ``forward``, ``backward``, ``error_feedback``, ``topk_select``, ``sparse_allgather``,
``scatter_average`` or ``dense_allreduce``, ``lr_broadcast``, ``optimizer``,
``loss_gather``, ``replica_check``, ``metrics_upload``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent inside the
collectives and the replica check's send/receive waits).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--width`` (32), ``--stages`` (3), ``--blocks`` (2), ``--image`` (32),
``--batch`` (32 a rank), ``--density`` (0.01), ``--dense-every`` (4), ``--dense-warmup`` (2),
``--gather {tensor,list}``, ``--half-values``, ``--lr`` (0.05), ``--check-len`` (4096).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's forward is computed F times (F - 1 extra
  passes under ``no_grad``, discarded, inside ``forward``; a fractional part over that
  fraction of the batch);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow data loader: ``load_batch`` sleeps MS each step;
* ``--upload-sleep-ms MS`` (family fault): a slow metrics upload: the rank's
  ``metrics_upload`` sleeps MS each step (a slow metrics endpoint);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (B = A + 1 mod 4, a link of the replica
  check's ring): A's fingerprint message to B carries X times the bytes (zero-padded in the
  same message; B receives it all and keeps the head). The collectives are untouched. No
  ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's batch of the step is ``--batch`` times lognormal(0, S)
  images (drawn from (seed, rank, step), clamped to [1/4x, 4x], at least 2);
* ``--big-rank K --big X``: rank K's batch is X times the others', every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 4-20 during the runs);
4 ranks, 10 steps (8 timed). Step medians of all ranks agree within ~2% (every step ends
in collectives and the ring), so one number per run; "busy" = median time outside the
collectives and the ring waits, slow rank vs the mean of the others. "base" = the healthy
default run(s) next to it (the load moved it a lot).

  setting (slow rank)                           base ms  step ms  change   busy slow / others ms
  healthy default (batch 24, quiet box)             -       182       -      142-160
  healthy default                                   -    525-1019     -      386-928 (by load)
  healthy --gather list --half-values --shapes      -      1095       -      942-980
  healthy --width 48 --batch 24 --density 0.005     -      1686       -      1510-1623
  healthy --stages 4 --blocks 1 --image 48
          --dense-every 3                           -      1440       -      1131-1264
  healthy --dense-every 2 --density 0.05
          --batch 48                                -      1560       -      1359-1489
  --factor 3 (r1)                                 525       455   (quiet)    400 / 288  (+39%)
  --factor 4 (r0)                                 940      1495     +59%    1445 / 703  (+106%)
  --factor 5 (r2)                                 525       846     +61%     816 / 414  (+97%)
  --sleep-ms 60 (r3)                             1000       645   (quiet)    597 / 592  (lost in noise)
  --sleep-ms 250 (r3)                            1019      1140     +12%    1067 / 817  (+31%)
  --data-sleep-ms 250 (r2)                       1019      1040      +2%     908 / 711  (+28%)
  --upload-sleep-ms 60 (r0)                      1000       916   (quiet)    809 / 793  (lost in noise)
  --upload-sleep-ms 250 (r0)                     1019      1003      -2%     955 / 712  (+34%)
  --hog (r1)                                      940      1140     +21%    1054 / 652  (+62%)
  link 1->2 x4096 (64 MB messages)                940      1143     +21%     r1 929, r2 860 / 854
  link 1->2 x8192 (128 MB)                        940      1173     +25%     r2 887 / 775
  link 1->2 x16384 (256 MB)                       940      1394     +48%     r1 887 / 816
  link 3->0 x16384 (256 MB)                       860      1400     +63%     r1 878 / 814
  --big-rank 3 --big 3                            940      1530     +63%    1480 / 634
  --seq-sigma 0.8                                 940      1475     +57%     604-865 by rank (batches 8-128)

Reading: the box's load (load average up to 20 on 2 cores) moved a healthy step between
180 and 1020 ms from one run to the next, so only the busy time of the slow rank vs the
others tells a fault; the others' busy times spread 10-20% among themselves. ``--factor``
repeats only the forward (no grad), about a third of the compute, yet 4-5 doubles the
rank's busy time. A sleep of 60 ms vanished in the noise, 250 ms was +28-34% of the slow
rank's busy time at ~1 s steps (hence 300 ms in the battery); while one rank sleeps the
others get its CPU share, so the step grows less than the sleep. The padded ring link costs
little below ~100 MB messages (loopback TCP), at 256 MB it adds ~0.4-0.5 s a step, waited
in the receiver's ``replica_check`` irecv and the sender's isend wait (and by everyone in the
next collective). A bigger batch on one rank (``--big``) makes everyone wait for it in the
first collective of the step (``sparse_allgather`` / ``dense_allreduce``). Wall per run
16-40 s (30-70 s in the battery run, under load 15-20); traces 1.7-2.4 MB a rank (3.8 MB with --shapes).
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
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--batch", type=int, default=32, help="images per rank and step")
    p.add_argument("--density", type=float, default=0.01, help="top-k fraction of the gradient sent")
    p.add_argument("--dense-every", type=int, default=4, help="a dense all_reduce resync every N steps")
    p.add_argument("--dense-warmup", type=int, default=2, help="first steps all dense")
    p.add_argument("--gather", choices=["tensor", "list"], default="tensor")
    p.add_argument("--half-values", action="store_true", help="send the top-k values as float16")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--check-len", type=int, default=4096, help="parameter fingerprint length")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--upload-sleep-ms", type=float, default=0.0)
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
# model
# --------------------------------------------------------------------------

class ConvBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.norm = nn.GroupNorm(8, cout)

    def forward(self, x):
        return F.relu(self.norm(self.conv(x)))


class SmallCNN(nn.Module):
    def __init__(self, width, stages, blocks, classes=10):
        super().__init__()
        layers, cin = [], 3
        for s in range(stages):
            cout = width * (2 ** s)
            for _ in range(blocks):
                layers.append(ConvBlock(cin, cout))
                cin = cout
            if s < stages - 1:
                layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.features(x)
        return self.head(x.mean(dim=(2, 3)))


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

class SyntheticImages:
    """A fixed in-memory 'dataset': class templates plus noise, uint8, 40x40 (cropped to 32)."""

    def __init__(self, n, size, seed, classes=10, pad=4):
        g = torch.Generator().manual_seed(seed)
        full = size + 2 * pad
        templates = torch.rand(classes, 3, full // 4, full // 4, generator=g)
        templates = F.interpolate(templates, size=(full, full), mode="bilinear", align_corners=False)
        self.labels = torch.randint(0, classes, (n,), generator=g)
        noise = torch.rand(n, 3, full, full, generator=g)
        imgs = 0.6 * templates[self.labels] + 0.4 * noise
        self.images = (imgs * 255).clamp(0, 255).to(torch.uint8)
        self.size, self.pad = size, pad
        self.mean = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)
        self.std = torch.tensor([0.25, 0.25, 0.25]).view(1, 3, 1, 1)

    def batch(self, idx, g):
        x = self.images[idx].float() / 255.0
        # random crop (one offset per batch) and random horizontal flip per image
        ox, oy = torch.randint(0, 2 * self.pad + 1, (2,), generator=g).tolist()
        x = x[:, :, oy: oy + self.size, ox: ox + self.size]
        flip = torch.rand(len(idx), generator=g) < 0.5
        x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
        x = (x - self.mean) / self.std
        return x.contiguous(), self.labels[idx]


def batch_size(args, rank, step):
    n = float(args.batch)
    if rank == args.big_rank:
        n *= args.big
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        f = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        n *= min(4.0, max(0.25, f))
    return max(2, int(round(n)))


def lr_at(step, total, base, warm=3):
    if step < warm:
        return base * (step + 1) / warm
    t = (step - warm) / max(1, total - warm)
    return base * 0.5 * (1 + math.cos(math.pi * t))


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
# communication (timed, so that the "busy" time excludes it)
# --------------------------------------------------------------------------

class Timer:
    def __init__(self):
        self.secs = 0.0

    def __call__(self, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.secs += time.perf_counter() - t0
        return out


def grads_to_flat(params, out):
    o = 0
    for q in params:
        n = q.numel()
        out[o: o + n].copy_(q.grad.reshape(-1))
        o += n
    return out


def flat_to_grads(flat, params):
    o = 0
    for q in params:
        n = q.numel()
        q.grad.copy_(flat[o: o + n].view_as(q))
        o += n


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    if args.link_src >= 0 and args.link_dst != (args.link_src + 1) % world:
        raise SystemExit("the replica check's ring only has the links r -> r+1 mod world")

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="topk_ddp_")
    dist.broadcast_object_list(tmp, src=0)
    log_dir = tmp[0]
    upload_path = os.path.join(log_dir, f"metrics_rank{rank}.jsonl")

    data = SyntheticImages(4096, args.image, seed=args.seed)    # the same images on every rank
    torch.manual_seed(args.seed)                                  # the same initial weights
    model = SmallCNN(args.width, args.stages, args.blocks)
    params = [q for q in model.parameters()]
    for q in params:
        q.grad = torch.zeros_like(q)
    n = sum(q.numel() for q in params)
    k = max(1, int(args.density * n))
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=5e-4)

    flat = torch.zeros(n)
    residual = torch.zeros(n)
    dense = torch.zeros(n)
    vdtype = torch.float16 if args.half_values else torch.float32
    all_idx = torch.zeros(world * k, dtype=torch.int64)
    all_val = torch.zeros(world * k, dtype=vdtype)
    stride = max(1, n // args.check_len)
    check_len = min(args.check_len, n)
    pad = lambda src, dst, m: (max(m, int(round(m * args.link_factor)))
                               if (src, dst) == (args.link_src, args.link_dst) and args.link_factor > 1 else m)
    send_buf = torch.zeros(pad(rank, nxt, check_len))
    recv_buf = torch.zeros(pad(prv, rank, check_len))

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[topk-ddp] world={world} width={args.width} stages={args.stages} blocks={args.blocks} "
              f"image={args.image} batch={args.batch} params={n} k={k} ({args.density:.3%}) "
              f"dense_every={args.dense_every} warmup={args.dense_warmup} gather={args.gather} "
              f"values={vdtype}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    timer = Timer()
    step_times, busy_times = [], []
    lr_t = torch.zeros(1)
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                timer.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    bs = batch_size(args, rank, step)
                    g = torch.Generator().manual_seed(args.seed * 7919 + rank * 131 + step)
                    idx = torch.randint(0, len(data.labels), (bs,), generator=g)
                    x, y = data.batch(idx, g)

                with record_function("forward"):
                    logits = model(x)
                    loss = F.cross_entropy(logits, y)
                    if extra > 0:       # --factor: the same forward again, discarded
                        with torch.no_grad():
                            for _ in range(int(extra)):
                                model(x)
                            rows = int(round(bs * (extra - int(extra))))
                            if rows > 0:
                                model(x[:rows])
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()

                with record_function("error_feedback"):
                    grads_to_flat(params, flat)
                    flat.add_(residual)

                is_dense = step < args.dense_warmup or (args.dense_every > 0 and step % args.dense_every == 0)
                if is_dense:
                    with record_function("dense_allreduce"):
                        timer(dist.all_reduce, flat)
                        flat.div_(world)
                        residual.zero_()
                        flat_to_grads(flat, params)
                else:
                    with record_function("topk_select"):
                        _, top = torch.topk(flat.abs(), k, sorted=False)
                        vals = flat[top]
                        residual.copy_(flat)
                        residual[top] = 0.0
                    with record_function("sparse_allgather"):
                        if args.gather == "tensor":
                            timer(dist.all_gather_into_tensor, all_idx, top)
                            timer(dist.all_gather_into_tensor, all_val, vals.to(vdtype))
                        else:
                            il = list(all_idx.chunk(world))
                            vl = list(all_val.chunk(world))
                            timer(dist.all_gather, il, top)
                            timer(dist.all_gather, vl, vals.to(vdtype))
                            all_idx.copy_(torch.cat(il))
                            all_val.copy_(torch.cat(vl))
                    with record_function("scatter_average"):
                        dense.zero_()
                        dense.index_add_(0, all_idx, all_val.float())
                        dense.div_(world)
                        flat_to_grads(dense, params)

                with record_function("lr_broadcast"):
                    if rank == 0:
                        lr_t.fill_(lr_at(step, args.steps, args.lr))
                    timer(dist.broadcast, lr_t, 0)
                    for grp in opt.param_groups:
                        grp["lr"] = lr_t.item()
                with record_function("optimizer"):
                    opt.step()

                with record_function("loss_gather"):
                    acc = (logits.argmax(1) == y).float().mean().item()
                    rnorm = residual.norm().item()
                    mine = torch.tensor([loss.item(), acc, float(bs), rnorm])
                    got = [torch.zeros(4) for _ in range(world)] if rank == 0 else None
                    timer(dist.gather, mine, got, 0)

                with record_function("replica_check"):
                    with torch.no_grad():
                        fp = torch.cat([q.reshape(-1) for q in params])[::stride][:check_len]
                    send_buf[:check_len].copy_(fp)
                    t1 = time.perf_counter()
                    sw = dist.isend(send_buf, nxt, tag=step)
                    dist.irecv(recv_buf, prv, tag=step).wait()
                    sw.wait()
                    timer.secs += time.perf_counter() - t1
                    drift = (recv_buf[:check_len] - fp).abs().max().item()

                with record_function("metrics_upload"):
                    if slow and args.upload_sleep_ms > 0:
                        time.sleep(args.upload_sleep_ms / 1000.0)
                    with open(upload_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "rank": rank, "loss": loss.item(), "acc": acc,
                                             "batch": bs, "residual_norm": rnorm, "lr": lr_t.item(),
                                             "dense": is_dense, "replica_drift": drift}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - timer.secs)
                if rank == 0:
                    gl = torch.stack(got)
                    print(f"step {step:3d} {'dense ' if is_dense else 'sparse'} loss {gl[:, 0].mean():.4f} "
                          f"acc {gl[:, 1].mean():.3f} batches {gl[:, 2].int().tolist()} "
                          f"|res| {gl[:, 3].mean():.3f} lr {lr_t.item():.4f} drift {drift:.1e} "
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
        print("median busy ms (outside collectives and the replica check) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(log_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
