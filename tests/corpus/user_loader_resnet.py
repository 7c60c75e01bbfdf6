"""A small CIFAR-style ResNet trained data-parallel with ``DistributedDataParallel`` on CPUs (gloo),
fed by a real input pipeline: a map-style Dataset of compressed pictures, decoded and augmented per
sample in ``DataLoader`` worker processes, sharded with ``DistributedSampler``. Written the way the
PyTorch ImageNet example and a CIFAR-10 DDP tutorial do it.

The model, at ``--width W`` (16): a 3x3 stem conv (W channels), three stages of two BasicBlocks
(3x3 conv, BatchNorm, ReLU, 3x3 conv, BatchNorm, + identity or a 1x1 strided projection, ReLU)
with W, 2W and 4W channels at strides 1, 2, 2, global average pooling and a 10-way linear layer
(ResNet-14, 0.18M parameters at W=16; the last BatchNorm of each block starts at zero).
``DDP(model)`` with its defaults, so rank 0's BatchNorm running statistics are broadcast at the
start of every forward (a ``c10d::broadcast_`` in ``forward``); ``--channels-last`` converts the
model and each batch to ``torch.channels_last``; ``--amp`` runs forward and loss under
``torch.autocast("cpu", dtype=torch.bfloat16)``.

The data: ``EncodedImages``, 50,000 items (CIFAR-10's size) over a bank of 1024 distinct RGB
pictures of ``1.25 x --image`` a side (40x40 for 32), each a class-dependent grating (angle and
frequency by class, random phase and tint, pixel noise) stored zlib-compressed as uint8, built
from ``--seed`` so every rank holds the same set. ``__getitem__`` inflates one
(``zlib.decompress``, ``torch.frombuffer``), then augments it with torch ops: a random resized
crop (scale 0.35-1, ratio 3/4-4/3) resized to ``--image`` with ``F.interpolate`` (bilinear), a
horizontal flip with probability 1/2, colour jitter (brightness, contrast and saturation 0.4) and
the CIFAR-10 normalisation; about 58 aten ops a sample. ``DistributedSampler(shuffle=True,
drop_last=True)`` gives each rank its shard; ``DataLoader(batch_size=--batch, sampler=...,
num_workers=--workers, persistent_workers=workers > 0, worker_init_fn=...)`` with the default
prefetch (2 batches a worker); ``worker_init_fn`` sets one thread per worker. Workers are
forked at the first batch (step 0, before the profiler records). With ``--workers 0`` the
samples are decoded in the training process, inside ``data``, and its ops are in the trace.

A step (one ``ProfilerStep#N``): ``--accum K`` (1) micro-batches, each ``data`` (``next()`` on
the loader, then for ``--res-sigma`` a bilinear resize of the batch, for ``--channels-last`` the
memory format), ``forward`` (cross-entropy, ``--label-smoothing``, divided by K) and
``backward``; the first K-1 inside ``model.no_sync()``, so only the last backward all-reduces
the gradients (one gloo all-reduce bucket at these sizes, issued from backward and run on gloo's
threads); then ``optimizer``: SGD (momentum 0.9, Nesterov, weight decay 5e-4 on conv and linear
weights only, lr ``--lr`` x global batch / 256) and a cosine schedule over ``--steps``.

Profiling: ``torch.profiler.profile(activities=[CPU], schedule=schedule(wait=1, warmup=1,
active=steps-2))``, ``record_shapes`` only with ``--shapes``, ``prof.step()`` after each optimizer
step, and at the end ``prof.export_chrome_trace`` into ``--out``/``trace-rank<R>.json``. Only the
training process is traced, not its loader workers: with workers a ``data`` span is the wait in
``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__``.

Flags:

- ``--out DIR`` (required), ``--steps N`` (9, 7 traced), ``--seed S`` (0), ``--shapes``.
- ``--width W`` (16), ``--image N`` (32, a multiple of 8), ``--batch B`` (32 a rank a micro-batch),
  ``--workers N`` (1), ``--accum K`` (1), ``--amp``, ``--channels-last``, ``--label-smoothing``
  (0), ``--lr`` (0.1 per 256 images).
- ``--slow-rank R`` (-1: none), and on that rank only:

  - ``--factor F``: a slow kernel in the widest stage (``layer3``, 4W channels): a forward hook
    on each of its 5 convolutions computes the conv again under ``no_grad``, results discarded,
    ``(F - 1) x EXTRA_PER_UNIT`` times a call on average (fractions carried over calls), so that
    the rank's forward costs about F times its peers' (calibration at ``EXTRA_PER_UNIT``); extra
    ``aten::conv2d`` / ``aten::mkldnn_convolution`` ops inside ``forward``, nothing else.
  - ``--sleep-ms MS``: ``time.sleep`` in the training process before each step (inside the
    ``ProfilerStep``, outside any other span).
  - ``--decode-sleep-ms MS``: a slow disk or decoder on that node: ``Dataset.__getitem__`` sleeps
    MS per *sample*, so a batch costs ``B x MS`` more. With ``--workers 0`` all of it is in the
    step's ``data``; with N workers the sleep runs in the workers and the step waits in ``data``
    only once they fall behind, when ``B x MS / N`` exceeds the step (the prefetch hides the rest;
    with 2 workers the wait comes every other step). See the table below for sizes that stall.
  - ``--hog``: a daemon thread in the training process multiplying 256x256 matrices in a loop
    for the whole run (its ops are not in the trace).
- Imbalance, no fault: ``--big-rank K --big X`` (1.5): rank K's dataset crops to ``X x --image``
  (rounded to a multiple of 8: 48 for 32 and 1.5), same batch size: multi-resolution training
  where one replica gets the large crops (about X^2 its peers' compute, and bigger decode work).
  ``--res-sigma S``: every rank draws its image side each step, lognormal around ``--image``
  (sigma S, seeded by seed, rank and step), a multiple of 8 clipped to [image/2, 2 image], and
  resizes the loader's batch to it in ``data`` (YOLO-style multi-scale training). DDP averages
  the gradients with equal weights either way.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_loader_resnet.py --out DIR --slow-rank 2 --factor 2

Measured on this 2-core machine with other jobs beside (load average 3-10; a healthy step
swings 2-3x with it, so each fault is set against healthy runs next to it), 4 processes, mean
``ProfilerStep`` of the 7 traced steps, the same on every rank (DDP's collectives line them up):
a job takes 10-40 s wall (most of it starting 4 Pythons and building the datasets), all traces
valid JSON, parameters identical on every rank at the end (rank 0's last line). Healthy step:
210-280 ms at load 3-4, 380-470 at 5-8, 600-700 at 9-10; ``--workers 0`` 250-445, ``--workers 2``
370-620, ``--amp`` 175-315, ``--accum 2`` 1155 (load 7). Trace a rank: 3.9 MB (4.6 with
``--amp``, 5.8 with ``--accum 2``, 6.4 with ``--shapes``, 7.6-8.3 with ``--workers 0``, whose
decode ops are traced; 9.7 with ``--accum 2 --shapes``, 12.6 with ``--workers 0 --shapes``).

What a fault did (the named rank against its peers' mean, and the step against healthy runs):

    --factor 2                       forward 1.6-1.8 x (128 vs 81, 202 vs 118, 340 vs 173 ms);
                                     step +0-25 % (the three others wait in backward)
    --factor 1.7 --amp               forward 1.33-1.45 x
    --factor 1.6 -w 0 --channels-last forward 1.6 x (199 vs 130 ms)
    --sleep-ms 80 / 90               step +0-10 % at load 3-8: while it sleeps its three peers
                                     share the two cores and catch up; but they then wait
                                     for it at the end of backward (169 vs its 78 ms)
    --accum 2 --sleep-ms 150         step +5 % at load 8
    --hog                            forward 1.5-1.9 x; step +18 % at load 3, +40-65 % at load 8
    --decode-sleep-ms 3, -w 0        data 112-121 ms a step vs 7-12; step +30-50 %
    --decode-sleep-ms 2, -w 0        data 112 vs 45 ms (load 7)
    --decode-sleep-ms 15 / 18, -w 1  load 7: hidden (480 ms a batch < the step, data 3 ms);
                                     load 3: data 446 ms, step 590 vs ~230 (2.5 x)
    --decode-sleep-ms 20 / 22, -w 1  load 8: data 433, step 704 vs 410-470; load 9.5: 171, +25 %
    --decode-sleep-ms 30, -w 2       load 7.6: hidden (data 7 ms)
    --decode-sleep-ms 40 / 45, -w 2  load 7.6: data 303, step 680 vs 370-390; load 3: data 528,
                                     step 714 (3 x); the wait comes every other step
    --big-rank 1 --big 1.5           its forward 1.8-2 x; step 1.6-1.9 x
    --big 1.25 --width 24 -w 2       its forward 1.65 x (575 vs 350 ms)
    --res-sigma 0.3 / 0.4            sides 24-64 for 32; which rank is slowest changes each step

So with loader workers a slow decoder shows only where ``batch x MS / workers`` exceeds the
healthy step: on a quiet machine 15 ms (one worker) already more than doubles the step, under
load 20 ms is needed to show at all.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import threading
import time
import zlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, record_function
from torch.utils.data import DataLoader, Dataset, DistributedSampler

CLASSES = 10
BANK = 1024                 # distinct encoded pictures; the dataset cycles over them
SAMPLES = 50_000            # CIFAR-10's train split
MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)
LUMA = torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)
# Extra no-grad passes of each of the widest stage's convolutions, per call and per unit of
# (factor - 1), on the slow rank. Measured in one process, one thread, batch 32 (thread CPU time,
# lower quintile of 60): the forward over the CPU time of one pass of layer3's 5 convs is 8.3 at
# the defaults, 6.6 with --channels-last, 6.2 with --amp, 10.1 with both, 7.4 / 6.0 at width
# 24 / 32, 8.1 / 8.7 on 40 / 48 pixel images. So about 7 passes double the forward.
EXTRA_PER_UNIT = 7.0


# ---------------------------------------------------------------------------------------- data

def synth_bank(n, side, gen):
    """``n`` uint8 HWC pictures of a class-dependent grating under noise, and their labels."""
    labels = torch.randint(0, CLASSES, (n,), generator=gen)
    angle = labels.float() * (math.pi / CLASSES) + 0.15 * torch.randn(n, generator=gen)
    freq = 0.25 + 0.05 * (labels % 3).float() + 0.03 * torch.rand(n, generator=gen)
    phase = 2 * math.pi * torch.rand(n, generator=gen)
    yx = torch.arange(side, dtype=torch.float32)
    proj = (torch.cos(angle).view(n, 1, 1) * yx.view(1, side, 1)
            + torch.sin(angle).view(n, 1, 1) * yx.view(1, 1, side))
    wave = torch.sin(freq.view(n, 1, 1) * proj + phase.view(n, 1, 1))           # [n, H, W]
    tint = 0.3 + 0.7 * torch.rand(n, 1, 1, 3, generator=gen)
    noise = 0.08 * torch.randn(n, side, side, 3, generator=gen)
    img = 0.5 + 0.35 * wave.unsqueeze(-1) * tint + noise
    return (img.clamp(0, 1) * 255).round().to(torch.uint8), labels


class EncodedImages(Dataset):
    """A CIFAR-sized map-style dataset of zlib-compressed pictures, decoded and augmented per item.

    Holds ``BANK`` encoded ``src x src`` RGB pictures (index ``i`` is picture ``i % BANK``);
    ``__getitem__`` inflates one, then random-resized-crops it to ``out x out``, flips it, jitters
    its colours and normalises it."""

    def __init__(self, src, out, seed, decode_sleep_ms=0.0):
        gen = torch.Generator().manual_seed(seed)
        pics, labels = synth_bank(BANK, src, gen)
        self.blobs = [zlib.compress(p.numpy().tobytes(), 6) for p in pics]
        self.labels = labels.tolist()
        self.src, self.out = src, out
        self.decode_sleep_ms = decode_sleep_ms      # a slow disk / decoder (the slow rank only)

    def __len__(self):
        return SAMPLES

    def decode(self, i):
        """Inflate picture ``i``: a ``src x src x 3`` uint8 tensor."""
        if self.decode_sleep_ms > 0:
            time.sleep(self.decode_sleep_ms / 1000)
        raw = bytearray(zlib.decompress(self.blobs[i % BANK]))
        return torch.frombuffer(raw, dtype=torch.uint8).view(self.src, self.src, 3)

    def augment(self, hwc):
        s = self.src
        r = [random.random() for _ in range(8)]
        # RandomResizedCrop(out, scale=(0.35, 1), ratio=(3/4, 4/3)), on the uint8 picture
        area = s * s * (0.35 + 0.65 * r[0])
        ratio = math.exp(math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * r[1])
        w = min(s, max(8, round(math.sqrt(area * ratio))))
        h = min(s, max(8, round(math.sqrt(area / ratio))))
        top, left = int(r[2] * (s - h + 1)), int(r[3] * (s - w + 1))
        x = hwc[top:top + h, left:left + w].permute(2, 0, 1).float()
        x = F.interpolate(x[None], size=(self.out, self.out), mode="bilinear",
                          align_corners=False)[0]
        if r[4] < 0.5:                                  # RandomHorizontalFlip
            x = x.flip(-1)
        # ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4), then Normalize
        x = x * ((0.6 + 0.8 * r[5]) / 255)              # brightness, and to [0, 1]
        m = x.mean()
        x = x.sub_(m).mul_(0.6 + 0.8 * r[6]).add_(m)    # contrast
        gray = (x * LUMA).sum(0)
        x = x.sub_(gray).mul_(0.6 + 0.8 * r[7]).add_(gray)     # saturation
        return x.clamp_(0, 1).sub_(MEAN).div_(STD)

    def __getitem__(self, i):
        return self.augment(self.decode(i)), self.labels[i % BANK]


def worker_init(worker_id):
    torch.set_num_threads(1)        # 2 cores, 4 trainers: the loader workers get one thread each


# --------------------------------------------------------------------------------------- model

class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR-style ResNet: a 3x3 stem, 3 stages of BasicBlocks (W, 2W, 4W channels, strides
    1, 2, 2), global average pooling, a linear classifier."""

    def __init__(self, width, blocks=(2, 2, 2), classes=CLASSES):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        stages, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2 ** i
            layers = []
            for j in range(n):
                layers.append(BasicBlock(cin, cout, 2 if (i > 0 and j == 0) else 1))
                cin = cout
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        for m in self.modules():            # zero-init the last BN of each block (Goyal et al.)
            if isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def add_slow_convs(stage, extra):
    """On the slow rank: every conv of ``stage`` runs again ``extra`` times a call, no grad."""
    credit = [0.0]      # fractional repetitions carried from one call to the next

    def hook(mod, inputs, output):
        credit[0] += extra
        n = int(credit[0])
        credit[0] -= n
        with torch.no_grad():
            for _ in range(n):
                type(mod).forward(mod, *inputs)     # not mod(...): that would run this hook again

    for m in stage.modules():
        if isinstance(m, nn.Conv2d):
            m.register_forward_hook(hook)


def start_hog(stop):
    """A noisy neighbour inside the process: matmuls on a daemon thread until ``stop``."""
    def spin():
        a, b = torch.randn(256, 256), torch.randn(256, 256)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=spin, name="hog", daemon=True)
    t.start()
    return t


def round8(x):
    return max(16, int(round(x / 8)) * 8)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="profiler record_shapes")
    p.add_argument("--width", type=int, default=16, help="channels of the first stage")
    p.add_argument("--image", type=int, default=32, help="training image side (multiple of 8)")
    p.add_argument("--batch", type=int, default=32, help="images per rank per micro-batch")
    p.add_argument("--workers", type=int, default=1, help="DataLoader worker processes per rank")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--amp", action="store_true", help="bfloat16 autocast in forward")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=0.1, help="SGD lr per 256 images (scaled)")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to")
    p.add_argument("--factor", type=float, default=1.0,
                   help="conv work of the widest stage on the slow rank, x")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep before each step")
    p.add_argument("--decode-sleep-ms", type=float, default=0.0,
                   help="sleep per sample in the slow rank's Dataset.__getitem__")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--big-rank", type=int, default=-1, help="rank trained on larger crops")
    p.add_argument("--big", type=float, default=1.5, help="--big-rank's image side, x --image")
    p.add_argument("--res-sigma", type=float, default=0.0,
                   help="lognormal sigma of each rank's image side per step")
    args = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.image < 16 or args.image % 8:
        p.error("--image must be a multiple of 8, at least 16")
    if args.width < 4:
        p.error("--width must be at least 4")
    if args.batch < 2:
        p.error("--batch must be at least 2 (BatchNorm)")
    if args.workers < 0:
        p.error("--workers must be 0 or more")
    if args.accum < 1:
        p.error("--accum must be at least 1")
    if not 0 <= args.label_smoothing < 1:
        p.error("--label-smoothing must be in [0, 1)")
    if not -1 <= args.slow_rank < world:
        p.error(f"--slow-rank must be -1 or a rank below the world size {world}")
    if args.slow_rank < 0 and (args.factor != 1 or args.hog or args.sleep_ms
                               or args.decode_sleep_ms):
        p.error("--factor, --hog, --sleep-ms and --decode-sleep-ms need --slow-rank")
    if args.factor < 1:
        p.error("--factor must be at least 1")
    if args.sleep_ms < 0 or args.decode_sleep_ms < 0:
        p.error("--sleep-ms and --decode-sleep-ms must not be negative")
    if not -1 <= args.big_rank < world:
        p.error(f"--big-rank must be -1 or a rank below the world size {world}")
    if args.big <= 0:
        p.error("--big must be positive")
    if args.res_sigma < 0:
        p.error("--res-sigma must not be negative")
    if args.res_sigma > 0 and args.big_rank >= 0:
        p.error("use one of --res-sigma and --big-rank")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    # ---- data: every rank holds the same dataset, DistributedSampler gives each its own shard
    side = round8(args.image * args.big) if rank == args.big_rank else args.image
    src = args.image + args.image // 4
    dataset = EncodedImages(src, side, args.seed,
                            decode_sleep_ms=args.decode_sleep_ms if slow else 0.0)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler,
                        num_workers=args.workers, persistent_workers=args.workers > 0,
                        worker_init_fn=worker_init, drop_last=True)

    def batches():
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            yield from loader
            epoch += 1

    # ---- model
    torch.manual_seed(args.seed)            # the same initial weights everywhere
    model = ResNet(args.width)
    if slow and args.factor > 1:
        add_slow_convs(model.layer3, (args.factor - 1) * EXTRA_PER_UNIT)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model = DDP(model)
    torch.manual_seed(args.seed * 1000 + rank)     # augmentations differ between ranks
    random.seed(args.seed * 1000 + rank)

    decay = [q for n, q in model.named_parameters() if q.ndim > 1]
    no_decay = [q for n, q in model.named_parameters() if q.ndim <= 1]    # BN and biases
    lr = args.lr * args.batch * args.accum * world / 256
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=lr, momentum=0.9, nesterov=True)
    sched_lr = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    if rank == 0:
        n = sum(q.numel() for q in model.parameters())
        print(f"ResNet width {args.width}: {n / 1e6:.2f}M params, image {args.image}, "
              f"batch {args.batch} x accum {args.accum} x {world} ranks, workers {args.workers}, "
              f"amp {args.amp}, channels_last {args.channels_last}", flush=True)

    def step_side(step):
        """Multi-resolution training: this rank's image side at ``step``."""
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 7919 * rank + step)
        s = args.image * math.exp(args.res_sigma * torch.randn((), generator=g).item())
        return min(2 * args.image, max(args.image // 2, round8(s)))

    amp = (torch.autocast("cpu", dtype=torch.bfloat16) if args.amp
           else contextlib.nullcontext())
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    loader_iter = batches()
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                record_shapes=args.shapes) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            s = step_side(step) if args.res_sigma > 0 else side
            opt.zero_grad(set_to_none=True)
            correct = seen = 0
            for micro in range(args.accum):
                with record_function("data"):
                    images, labels = next(loader_iter)
                    if images.shape[-1] != s:
                        images = F.interpolate(images, size=(s, s), mode="bilinear",
                                               align_corners=False)
                    if args.channels_last:
                        images = images.contiguous(memory_format=torch.channels_last)
                # all-reduce the gradients only with the last micro-batch
                sync = model.no_sync() if micro < args.accum - 1 else contextlib.nullcontext()
                with sync:
                    with record_function("forward"):
                        with amp:
                            logits = model(images)
                            loss = criterion(logits, labels) / args.accum
                    with record_function("backward"):
                        loss.backward()
                correct += (logits.argmax(1) == labels).sum().item()
                seen += labels.numel()
            with record_function("optimizer"):
                opt.step()
                sched_lr.step()
            prof.step()
            if rank == 0:
                print(f"step {step} side {s} loss {loss.item() * args.accum:.4f} "
                      f"acc {correct / seen:.3f} lr {sched_lr.get_last_lr()[0]:.4f} "
                      f"{(time.perf_counter() - ts) * 1000:.0f} ms", flush=True)

    prof.export_chrome_trace(os.path.join(args.out, f"trace-rank{rank}.json"))
    if hog is not None:
        stop.set()
        hog.join()
    with torch.no_grad():
        flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        spread = (hi - lo).abs().max().item()
    if rank == 0:
        print(f"done in {time.perf_counter() - t0:.1f}s, max parameter spread across ranks "
              f"{spread:.2e}, traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
