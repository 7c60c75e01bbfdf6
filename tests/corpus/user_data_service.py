"""Data-service rank feeding DDP trainers (CPU / gloo).

What this is
------------
A small image-classification job where the input pipeline lives on its own
process.  Rank 0 is a *data service*: it synthesises raw images (a per-class
smooth "prototype" pattern + noise, so there is something to learn), runs the
usual augmentation pipeline on them with torch ops (random-resized crop via
``F.interpolate``, random horizontal flip, a little brightness/contrast
jitter, a 3x3 Gaussian blur, per-channel normalisation) and ships every
trainer its batch with point-to-point ``dist.isend``.  Ranks 1..N-1 are
trainers: a ResNet-ish convnet (stem conv + ``--blocks`` basic residual
blocks per stage, 3 stages of width w/2w/4w, global pool, linear head)
wrapped in ``DistributedDataParallel`` over the sub-group
``dist.new_group([1, 2, 3])`` and trained with AdamW + cross-entropy.

Communication pattern
---------------------
* rank 0 -> each trainer, per step, three messages with ``dist.isend``:
  a 4-element int64 header ``[B, C, H, W]``, then the float32 images
  ``[B, C, H, W]``, then the int64 labels ``[B]``.  The trainer does a
  blocking ``dist.recv`` of the header, allocates buffers of that shape and
  ``dist.recv``s images and labels.
* rank 0 keeps ``--prefetch P`` batches in flight per trainer: it pre-sends
  steps 0..P-1, and at step s waits for the sends of step s, then builds and
  sends step s+P.  Every rank runs exactly ``--steps`` steps so every send has
  a matching recv.
* trainers all-reduce gradients through DDP on the trainer sub-group only
  (rank 0 is not in it), so the data service never blocks on a collective.

Profiling
---------
Every rank runs ``torch.profiler.profile`` (CPU activity, schedule
wait=0, warmup=2, active=steps-2, so steps 2..N-1 are traced), calls
``prof.step()`` once per training step (rank 0 after it has posted that
step's sends), records input shapes
only with ``--shapes`` and writes one chrome trace
``<out>/trace_rank<R>.json``.  ``record_function`` ranges: rank 0 has
``build_batch`` (with ``synthesize`` / ``augment`` inside), ``send_batch`` and
``wait_sends``; trainers have ``data``, ``forward``, ``backward`` and
``optimizer``.  Rank 1 prints the loss every step; every rank prints its
median wall step time at the end (steps after the first two).

Run::

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone \
        --nproc_per_node=4 user_data_service.py --out /tmp/ds [flags]

Flags
-----
--out DIR          where the chrome traces go (required)
--steps N          training steps (default 10 -> 8 traced)
--seed S           random seed (default 0)
--shapes           record input shapes in the profiler
--prefetch P       batches in flight per trainer (default 2)
--batch B          per-trainer batch size (default 24)
--width W          convnet base width (default 16)       [healthy variant]
--blocks K         residual blocks per stage (default 1)  [healthy variant]
--img S            training image side after crop (default 32) [healthy variant]
--lr LR            AdamW learning rate (default 2e-3)
Faults (one rank, ``--slow-rank R``, default -1 = none):
--factor F         trainer: every conv in forward is run F times (extra
                   copies on the same inputs, no grad, results dropped;
                   the fractional part runs on that fraction of the batch).
                   rank 0: the augmentation pipeline is run F times per batch.
--sleep-ms MS      trainer: time.sleep(MS) before each step.
                   rank 0 (slow data service): time.sleep(MS) per batch built,
                   i.e. (N-1)*MS per step.
--hog              a daemon thread on that rank doing 512x512 matmuls for
                   the whole run (noisy neighbour).
Imbalance (no rank is "slow"):
--big-rank K --big X   trainer K gets a batch X times larger; K=0 makes the
                   data service's raw images X times larger in area
                   (more preprocessing, same trained shape).
--seq-sigma S      every trainer's batch size per step is
                   batch * lognormal(0, S), drawn from (seed, rank, step),
                   clipped to [batch/4, batch*4].

Measured
--------
2-core VM, 4 processes, other jobs running beside (load average 5-15).
Every row was run right after and right before a healthy run; the change
is against the mean of those two healthy runs, median of 2 such pairs,
``--steps 40`` (median step time per rank over steps 2..39; the flags'
effect does not depend on the step count, 10-step runs were too noisy).
Noise floor: two healthy runs in a row differ by -16%..+19% (IQR), healthy
step ~190 ms (seen 130..260 ms).  "target" = the rank the flag names (or
the slowest trainer), "others" = mean of the other trainers, "ds" = rank 0.

    flags                          target ms (change)   others / ds change
    (healthy)                      ~190                 -
    --slow-rank 2 --factor 1.3     192  (+5%, noise)    +6% / +1%
    --slow-rank 2 --factor 1.6     218  (+3%, n=1)      +4% / +1%
    --slow-rank 2 --factor 2       216  (+11%)          +10% / +20%
    --slow-rank 2 --sleep-ms 25    179  (-6%, none)     -7% / -4%
    --slow-rank 2 --sleep-ms 100   227  (+33%)          +32% / +32%
    --slow-rank 2 --hog            181  (+12%, +4..+21) +11% / +7%
    --slow-rank 0 --sleep-ms 25    160  (-10%, none)    -8%
    --slow-rank 0 --sleep-ms 50    204  (+38%, n=1)     +30%
    --slow-rank 0 --sleep-ms 75    262  (+68%)          +65%
    --slow-rank 0 --factor 2       140  (-15%, none)    -19%
    --slow-rank 0 --factor 6       219  (+21%)          +17%
    --slow-rank 0 --hog            189  (-4%, none)     -3%
    --big-rank 2 --big 1.5         252  (+21%, +8..+34) +21% / +14%
    --big-rank 2 --big 2           253  (+42%)          +44% / +40%
    --big-rank 0 --big 4           182  (+5%, none)     -2%
    --seq-sigma 0.3                252  (+28%)          ds +31%
    --seq-sigma 0.6                293  (+48%)          ds +65%
    --width 24 / --blocks 2 / --img 24   +75% / +35..60% / -46% (healthy)

All ranks show the same step time: the trainers are synchronous (DDP) and
rank 0 is paced by its sends, so a slow rank slows everyone.  Where the
time goes tells the cause: a slow trainer's forward/backward are longer
and the others wait in ``gloo:all_reduce`` (backward) or in the DDP
buffer ``gloo:broadcast`` at the start of forward (trainer rank 1, the
group's root); a slow data service shows up as waits in ``data``
(``gloo:recv``) on the trainers and as long ``build_batch`` on rank 0.
A sleep on rank 0 costs (trainers)x(sleep) per step, so >= 50 ms slows
the job; 25 ms and a 2x preprocessing factor are hidden by the
prefetch.  Sleeps shorter than ~50 ms on a trainer are absorbed because
the others use the freed CPU.  Wall time per run: 10-36 s with the
default 10 steps, 20-39 s with --steps 40.
"""
import argparse
import math
import os
import statistics
import threading
import time
from collections import deque

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule

NUM_CLASSES = 10
CHANNELS = 3
MEAN = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)
STD = torch.tensor([0.25, 0.25, 0.25]).view(1, 3, 1, 1)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--batch", type=int, default=24)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--blocks", type=int, default=1)
    p.add_argument("--img", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    return p.parse_args()


# ----------------------------------------------------------------------------
# data service side
# ----------------------------------------------------------------------------
class DataService:
    """Builds augmented image batches for every trainer (runs on rank 0)."""

    def __init__(self, args, world_size):
        self.args = args
        self.trainers = list(range(1, world_size))
        self.img = args.img
        raw = int(round(args.img * 1.5))
        if args.big_rank == 0 and args.big != 1.0:
            raw = int(round(raw * math.sqrt(args.big)))
        self.raw = raw
        g = torch.Generator().manual_seed(1234)  # same "dataset" every run
        # smooth per-class patterns: low-res noise upsampled to raw size
        low = torch.rand(NUM_CLASSES, CHANNELS, 6, 6, generator=g)
        self.protos = F.interpolate(low, size=(raw, raw), mode="bilinear",
                                    align_corners=False)
        self.gen = torch.Generator().manual_seed(args.seed * 7919 + 17)
        blur = torch.tensor([1.0, 2.0, 1.0])
        blur = torch.outer(blur, blur) / 16.0
        self.blur = blur.expand(CHANNELS, 1, 3, 3).contiguous()
        slow = args.slow_rank == 0
        self.factor = args.factor if slow else 1.0
        self.scratch_gen = torch.Generator().manual_seed(99)
        self.sleep_s = args.sleep_ms / 1000.0 if slow else 0.0

    def batch_size_for(self, rank, step):
        a = self.args
        b = a.batch
        if a.big_rank == rank and rank != 0:
            b = int(round(b * a.big))
        if a.seq_sigma > 0:
            rng = np.random.default_rng([a.seed, rank, step])
            b = int(round(b * rng.lognormal(0.0, a.seq_sigma)))
            b = int(np.clip(b, max(1, a.batch // 4), a.batch * 4))
        return max(1, b)

    def synthesize(self, n):
        labels = torch.randint(0, NUM_CLASSES, (n,), generator=self.gen)
        noise = torch.randn(n, CHANNELS, self.raw, self.raw, generator=self.gen)
        raw = (self.protos[labels] + 0.35 * noise).clamp_(0.0, 1.0)
        return raw, labels

    def augment(self, raw, gen=None):
        gen = self.gen if gen is None else gen
        n = raw.shape[0]
        out = torch.empty(n, CHANNELS, self.img, self.img)
        scales = torch.empty(n).uniform_(0.45, 1.0, generator=gen)
        for i in range(n):  # per-sample random resized crop, like torchvision
            side = max(4, int(self.raw * math.sqrt(float(scales[i]))))
            y = int(torch.randint(0, self.raw - side + 1, (1,), generator=gen))
            x = int(torch.randint(0, self.raw - side + 1, (1,), generator=gen))
            crop = raw[i:i + 1, :, y:y + side, x:x + side]
            out[i:i + 1] = F.interpolate(crop, size=(self.img, self.img),
                                         mode="bilinear", align_corners=False)
        flip = torch.rand(n, generator=gen) < 0.5
        out[flip] = out[flip].flip(-1)
        bright = torch.empty(n, 1, 1, 1).uniform_(-0.1, 0.1, generator=gen)
        contrast = torch.empty(n, 1, 1, 1).uniform_(0.8, 1.2, generator=gen)
        m = out.mean(dim=(1, 2, 3), keepdim=True)
        out = ((out - m) * contrast + m + bright).clamp_(0.0, 1.0)
        out = F.conv2d(F.pad(out, (1, 1, 1, 1), mode="reflect"), self.blur,
                       groups=CHANNELS)
        return ((out - MEAN) / STD).contiguous()

    def build(self, rank, step):
        n = self.batch_size_for(rank, step)
        with record_function("build_batch"):
            if self.sleep_s > 0:
                time.sleep(self.sleep_s)
            with record_function("synthesize"):
                raw, labels = self.synthesize(n)
            with record_function("augment"):
                imgs = self.augment(raw)
                # slow data service: redo the pipeline, throw the copies away
                extra = self.factor - 1.0
                while extra > 1e-6:
                    k = n if extra >= 1.0 else max(1, int(round(n * extra)))
                    self.augment(raw[:k], self.scratch_gen)
                    extra -= 1.0
        header = torch.tensor(list(imgs.shape), dtype=torch.int64)
        return header, imgs, labels


def run_data_service(args, world_size, prof, step_times):
    svc = DataService(args, world_size)
    inflight = deque()  # (step, [work handles], [tensors kept alive])

    def send_step(step):
        handles, keep = [], []
        for r in svc.trainers:
            header, imgs, labels = svc.build(r, step)
            with record_function("send_batch"):
                for t in (header, imgs, labels):
                    handles.append(dist.isend(t, dst=r))
                    keep.append(t)
        inflight.append((step, handles, keep))

    for s in range(min(args.prefetch, args.steps)):
        send_step(s)
    t0 = time.perf_counter()
    for step in range(args.steps):
        # retire this step's batches (trainers have them), refill the queue
        with record_function("wait_sends"):
            s, handles, _ = inflight.popleft()
            assert s == step
            for h in handles:
                h.wait()
        nxt = step + args.prefetch
        if nxt < args.steps:
            send_step(nxt)
        step_times.append(time.perf_counter() - t0)
        prof.step()
        t0 = time.perf_counter()
    assert not inflight


# ----------------------------------------------------------------------------
# trainer side
# ----------------------------------------------------------------------------
class SlowConv(nn.Conv2d):
    """Conv2d that can be told to do `factor` times the work (slow device)."""

    factor = 1.0

    def forward(self, x):
        y = super().forward(x)
        extra = self.factor - 1.0
        if extra > 1e-6:
            with torch.no_grad():
                while extra > 1e-6:
                    xx = x if extra >= 1.0 else x[:max(1, int(round(x.shape[0] * extra)))]
                    self._conv_forward(xx, self.weight, self.bias)
                    extra -= 1.0
        return y


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = SlowConv(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = SlowConv(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(SlowConv(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x if self.short is None else self.short(x)
        return F.relu(out + sc)


class SmallResNet(nn.Module):
    def __init__(self, width=16, blocks=1, num_classes=NUM_CLASSES):
        super().__init__()
        self.stem = nn.Sequential(SlowConv(CHANNELS, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        layers, cin = [], width
        for i, mult in enumerate((1, 2, 4)):
            cout = width * mult
            for j in range(blocks):
                stride = 2 if (j == 0 and i > 0) else 1
                layers.append(BasicBlock(cin, cout, stride))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def recv_batch():
    header = torch.empty(4, dtype=torch.int64)
    dist.recv(header, src=0)
    shape = [int(v) for v in header]
    imgs = torch.empty(shape, dtype=torch.float32)
    dist.recv(imgs, src=0)
    labels = torch.empty(shape[0], dtype=torch.int64)
    dist.recv(labels, src=0)
    return imgs, labels


def run_trainer(args, rank, group, prof, step_times):
    torch.manual_seed(args.seed)  # same init everywhere (DDP broadcasts anyway)
    model = SmallResNet(args.width, args.blocks)
    if args.slow_rank == rank and args.factor != 1.0:
        for m in model.modules():
            if isinstance(m, SlowConv):
                m.factor = args.factor
    ddp = DDP(model, process_group=group)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=0.01)
    sleep_s = args.sleep_ms / 1000.0 if args.slow_rank == rank else 0.0

    t0 = time.perf_counter()
    for step in range(args.steps):
        if sleep_s > 0:
            time.sleep(sleep_s)
        with record_function("data"):
            imgs, labels = recv_batch()
        with record_function("forward"):
            logits = ddp(imgs)
            loss = F.cross_entropy(logits, labels)
        with record_function("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with record_function("optimizer"):
            opt.step()
        if rank == 1:
            acc = (logits.argmax(1) == labels).float().mean().item()
            print(f"step {step:4d} loss {loss.item():.4f} acc {acc:.3f} "
                  f"batch {imgs.shape[0]}", flush=True)
        step_times.append(time.perf_counter() - t0)
        prof.step()
        t0 = time.perf_counter()


def hog_loop(stop):
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    while not stop.is_set():
        torch.mm(a, b)


def main():
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world >= 2, "need a data-service rank and at least one trainer"
    assert args.steps >= 3
    torch.set_num_threads(1)
    # every rank must take part in creating the trainer group
    train_group = dist.new_group(list(range(1, world)))
    os.makedirs(args.out, exist_ok=True)

    stop_hog = threading.Event()
    hog = None
    if args.hog and args.slow_rank == rank:
        hog = threading.Thread(target=hog_loop, args=(stop_hog,), daemon=True)
        hog.start()

    trace_path = os.path.join(args.out, f"trace_rank{rank}.json")
    step_times = []
    # no wait phase: the profiler's one-time warm-up (it lazily imports
    # torch._dynamo, seconds of CPU) then happens before the first batch is
    # sent instead of in the middle of the run, where it starved the trainers
    sched = schedule(wait=0, warmup=2, active=args.steps - 2, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                 record_shapes=args.shapes,
                 on_trace_ready=lambda p: p.export_chrome_trace(trace_path)) as prof:
        if rank == 0:
            run_data_service(args, world, prof, step_times)
        else:
            run_trainer(args, rank, train_group, prof, step_times)

    med = statistics.median(step_times[2:]) * 1000.0
    role = "data-service" if rank == 0 else "trainer"
    print(f"[rank {rank} {role}] median step {med:.1f} ms "
          f"steps_ms={[round(t * 1000, 1) for t in step_times]}", flush=True)
    if hog is not None:  # stop the neighbour before torch tears down
        stop_hog.set()
        hog.join()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
