"""A small DDPM-style diffusion model (a UNet) trained data parallel with ``DistributedDataParallel``
on CPUs with gloo, written the way the DDPM paper and the diffusers training example do it.

The UNet: a sinusoidal timestep embedding through an MLP, injected into every residual block
(GroupNorm, SiLU, 3x3 conv, + projected embedding, GroupNorm, SiLU, 3x3 conv); three levels
(C, 2C, 2C channels; stride-2 convs down, nearest upsampling + conv up, skip concatenations) and
one self-attention block at the lowest resolution. Training: a random timestep per image, noise
added under a cosine schedule (Nichol & Dhariwal), MSE on the predicted noise, the forward under
``torch.autocast("cpu", dtype=torch.bfloat16)``, AdamW, ``clip_grad_norm_``, an EMA copy of the
weights. Images (coloured discs, squares and triangles on a tinted background) are drawn by a
map-style Dataset and read through a ``DataLoader`` with a ``DistributedSampler``, one worker
process (``persistent_workers=True``) and a bucketing batch sampler that gives every batch one
image size. The profiler (CPU, with input shapes) waits 1 step, warms up 1 and records the rest;
one chrome trace a rank (``unet-rank<R>.json``), exported after the run.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_diffusion_unet.py --out DIR --slow-rank 2 --factor 2

Flags: ``--out DIR`` (required), ``--steps`` (8: 6 traced), ``--seed``, ``--batch`` (images per
rank and step, 8), ``--image`` (side, 32), ``--channels`` (C, 32), ``--lr``, ``--ema``.
Faults, on ``--slow-rank R`` only (-1, the default: none):

- ``--factor F``: every conv computes its output again, without grad, ``(F - 1) * EXTRA_PER_UNIT``
  times a call (carried over calls where fractional), so that the rank's forward + backward
  computes about F times its peers' (calibrated, below).
- ``--hog``: a daemon thread multiplies 64x64 matrices in a loop for the whole run.
- ``--sleep-ms MS``: a host sleep before each step.
- ``--loader-sleep-ms MS``: a slow loader: the Dataset's ``__getitem__`` sleeps MS on every
  *item*, so a batch costs the loader worker ``batch * MS`` more (480 ms for 60 and 8). A sleep of
  MS per batch would hide behind the worker's prefetch, which runs while the step computes; per
  item it outruns a step on a quiet machine and the loop waits in ``DataLoader.__next__``.

Imbalance without a fault: ``--res-sigma S`` (multi-resolution training) has each rank draw its
image side every step, lognormal around ``--image`` (sigma S, a multiple of 8 in 16-64) from a
per-rank-per-step seed; ``--big-rank R --big X`` gives rank R images of about X times the pixels
every step (sides multiples of 4: 40x44 for 32 and 1.7).

Calibration (``EXTRA_PER_UNIT``): one process, one thread, batch 8 of 32x32, C=32, CPU time of
forward + backward (lower quartile of 30): 75 ms as is; 89, 118, 127 and 140 ms with every conv
computed again 1, 4, 5 and 6 times: 10.7 ms (0.14 of a forward + backward) per recompute, as the
convs are a small part of this UNet's work beside GroupNorm, SiLU and autocast's casts. So 7.0
recomputes per unit of (F - 1).

Measured on this 2-core machine (4 processes, OMP_NUM_THREADS=1, seed 0, default sizes), mean
ProfilerStep of the 6 traced steps from the chrome traces, a quiet pass and a second one:

    flags                                 rank 0         named rank     job wall
    (none)                                254 / 340 ms   -              16 / 15 s
    --slow-rank 2 --factor 2              374 / 421 ms   382 / 421 ms   16 / 17 s
    --slow-rank 1 --loader-sleep-ms 60    480 / 499 ms   472 / 496 ms   18 / 21 s
    --slow-rank 1 --loader-sleep-ms 100   788 / 769 ms   788 / 776 ms   21 / 22 s
    --res-sigma 0.3                       564 / 743 ms   -              20 / 31 s
    --big-rank 1 --big 1.7                511 / 434 ms   504 / 427 ms   20 / 26 s

Every rank's step grows alike: DDP's all-reduce makes the peers wait for the slow rank. With
--factor 2 the slow rank's conv time (aten::convolution + aten::convolution_backward) was 1.97 x
a peer's (1.8-2.2 over five runs), its ``forward`` span 2.7 x and its forward + backward about
1.9 x. With --loader-sleep-ms 60 rank 1 waited 257 ms a step in ``DataLoader.__next__`` (its
peers 6 ms), 594 ms at 100. Beside other jobs (load 8-12) the healthy step took 840-930 ms and
jobs 40-60 s; there the worker kept up with 60 ms an item (no wait at all) and nearly with 100.
Other runs, quiet, against a healthy 320-350 ms: --hog on rank 3 509 ms; --factor 1.5 on rank 0
395 ms; a host sleep on rank 3 of 60 ms 313 ms (its peers use the core it frees, 4 processes
sharing 2 cores), 150 ms 401 ms, 250 ms 457 ms; --loader-sleep-ms 80 636 ms; --res-sigma 0.5
658 ms; rank 1 1.7 x the pixels with --factor 2 on rank 3 500 ms.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, record_function
from torch.utils.data import DataLoader, Dataset, DistributedSampler

GROUPS = 8                 # GroupNorm groups
T = 1000                   # diffusion timesteps
# Extra no-grad recomputes per conv call, per unit of (factor - 1): measured (see the docstring)
# so that --factor F makes the slow rank's forward + backward about F x its peers'.
EXTRA_PER_UNIT = 7.0


# ---------------------------------------------------------------------------------------- model

class SlowConv2d(nn.Conv2d):
    """A Conv2d that, on the slow rank, computes its output again ``extra`` times (no grad)."""

    extra = 0.0      # extra recomputes per call (set on the slow rank only)
    _carry = 0.0     # the fraction carried from one call to the next, shared by all convs

    def forward(self, x):
        y = super().forward(x)
        if SlowConv2d.extra > 0:
            SlowConv2d._carry += SlowConv2d.extra
            n = int(SlowConv2d._carry)
            SlowConv2d._carry -= n
            with torch.no_grad():
                for _ in range(n):
                    self._conv_forward(x, self.weight, self.bias)
        return y


def timestep_embedding(t, dim, max_period=10_000):
    """Sinusoidal embedding of integer timesteps ``t`` (as in the transformer and DDPM)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim, dropout=0.1):
        super().__init__()
        self.norm1 = nn.GroupNorm(GROUPS, cin)
        self.conv1 = SlowConv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(GROUPS, cout)
        self.drop = nn.Dropout(dropout)
        self.conv2 = SlowConv2d(cout, cout, 3, padding=1)
        self.skip = SlowConv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]       # the timestep, per channel
        h = self.conv2(self.drop(F.silu(self.norm2(h))))
        return self.skip(x) + h


class AttnBlock(nn.Module):
    """Multi-head self-attention over the pixels of a feature map, residual."""

    def __init__(self, c, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(GROUPS, c)
        self.qkv = SlowConv2d(c, 3 * c, 1)
        self.proj = SlowConv2d(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        qkv = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w)
        q, k, v = (t.transpose(-1, -2) for t in qkv.unbind(1))  # b, heads, hw, d
        a = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj(a.transpose(-1, -2).reshape(b, c, h, w))


class UNet(nn.Module):
    def __init__(self, c=32, mults=(1, 2, 2)):
        super().__init__()
        self.c = c
        tdim = 4 * c
        self.time_mlp = nn.Sequential(nn.Linear(c, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.stem = SlowConv2d(3, c, 3, padding=1)
        chans = [c * m for m in mults]
        self.down, self.downsample = nn.ModuleList(), nn.ModuleList()
        cin = c
        for i, ch in enumerate(chans):
            self.down.append(ResBlock(cin, ch, tdim))
            if i < len(chans) - 1:
                self.downsample.append(SlowConv2d(ch, ch, 3, stride=2, padding=1))
            cin = ch
        self.mid1 = ResBlock(cin, cin, tdim)
        self.attn = AttnBlock(cin)                               # at the lowest resolution only
        self.mid2 = ResBlock(cin, cin, tdim)
        self.up, self.upsample = nn.ModuleList(), nn.ModuleList()
        for i, ch in reversed(list(enumerate(chans))):
            self.up.append(ResBlock(cin + ch, ch, tdim))         # concatenated with the skip
            if i > 0:
                self.upsample.append(SlowConv2d(ch, ch, 3, padding=1))
            cin = ch
        self.out_norm = nn.GroupNorm(GROUPS, cin)
        self.out = SlowConv2d(cin, 3, 3, padding=1)

    def forward(self, x, t):
        temb = self.time_mlp(timestep_embedding(t, self.c))
        h = self.stem(x)
        skips = []
        for i, block in enumerate(self.down):
            h = block(h, temb)
            skips.append(h)
            if i < len(self.downsample):
                h = self.downsample[i](h)
        h = self.mid2(self.attn(self.mid1(h, temb)), temb)
        for i, block in enumerate(self.up):
            h = block(torch.cat([h, skips.pop()], dim=1), temb)
            if i < len(self.upsample):
                h = self.upsample[i](F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.out(F.silu(self.out_norm(h)))


def cosine_alphas_cumprod(steps, s=0.008):
    """alpha-bar(t) of the cosine schedule (Nichol & Dhariwal 2021), betas clipped at 0.999."""
    x = torch.linspace(0, steps, steps + 1, dtype=torch.float64)
    f = torch.cos((x / steps + s) / (1 + s) * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
    return torch.cumprod(1 - betas, dim=0).float()


# ----------------------------------------------------------------------------------------- data

def draw_shapes(h, w, g):
    """One 3 x h x w image in [-1, 1]: 1-3 coloured discs, squares or triangles, tinted background."""
    ys = torch.linspace(-1, 1, h).view(h, 1)
    xs = torch.linspace(-1, 1, w).view(1, w)
    img = (torch.rand(3, 1, 1, generator=g) * 0.6 - 0.3).expand(3, h, w).clone()
    img += 0.2 * (torch.rand(3, 1, 1, generator=g) - 0.5) * ys     # a vertical gradient
    for _ in range(int(torch.randint(1, 4, (), generator=g))):
        cy, cx = (torch.rand(2, generator=g) * 1.2 - 0.6).tolist()
        r = 0.15 + 0.3 * torch.rand((), generator=g).item()
        kind = int(torch.randint(0, 3, (), generator=g))
        if kind == 0:       # disc
            mask = (ys - cy) ** 2 + (xs - cx) ** 2 < r * r
        elif kind == 1:     # square
            mask = ((ys - cy).abs() < r) & ((xs - cx).abs() < r)
        else:               # triangle, apex up
            mask = (ys - cy < r) & ((xs - cx).abs() < (ys - cy + r) / 2)
        colour = torch.rand(3, 1, 1, generator=g) * 2 - 1
        img = torch.where(mask, colour, img)
    return img.clamp_(-1, 1)


class Shapes(Dataset):
    """A map-style dataset of synthetic images; a key is ``(index, (h, w))`` from the batch sampler."""

    def __init__(self, n, seed, sleep_s=0.0):
        self.n, self.seed, self.sleep_s = n, seed, sleep_s

    def __len__(self):
        return self.n

    def __getitem__(self, key):
        idx, (h, w) = key
        if self.sleep_s > 0:
            time.sleep(self.sleep_s)                      # a slow disk / decoder (slow rank only)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + idx)
        return draw_shapes(h, w, g)


class BucketBatchSampler:
    """Batches of ``(index, (h, w))`` keys over a sampler's indices, one image size per batch
    (aspect / resolution buckets): ``size_for(n)`` gives the size of this rank's n-th batch."""

    def __init__(self, sampler, batch, size_for):
        self.sampler, self.batch, self.size_for = sampler, batch, size_for
        self.epoch = 0

    def __len__(self):
        return len(self.sampler) // self.batch

    def __iter__(self):
        it = iter(self.sampler)
        for b in range(len(self)):
            hw = self.size_for(self.epoch * len(self) + b)
            yield [(next(it), hw) for _ in range(self.batch)]

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.sampler.set_epoch(epoch)


def side_to_8(v):
    return max(8, int(round(v / 8)) * 8)


def start_hog(stop):
    """A noisy neighbour: small matmuls in a loop, on a daemon thread, for the whole run."""
    def spin():
        a, b = torch.randn(64, 64), torch.randn(64, 64)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=spin, name="hog", daemon=True)
    t.start()
    return t


# ----------------------------------------------------------------------------------------- main

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps (the first two are not traced)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=8, help="images per rank and step")
    p.add_argument("--image", type=int, default=32, help="image side (a multiple of 8)")
    p.add_argument("--channels", type=int, default=32, help="base width C (levels C, 2C, 2C)")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--ema", type=float, default=0.999, help="EMA decay (warmed up as in diffusers)")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to (-1: none)")
    p.add_argument("--factor", type=float, default=1.0, help="the slow rank's compute, x its peers'")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="host sleep on the slow rank before each step")
    p.add_argument("--loader-sleep-ms", type=float, default=0.0,
                   help="sleep per item in the slow rank's Dataset.__getitem__ (its loader worker)")
    p.add_argument("--res-sigma", type=float, default=0.0,
                   help="each rank draws a lognormal image side per step (multi-resolution)")
    p.add_argument("--big-rank", type=int, default=-1, help="rank whose images are larger")
    p.add_argument("--big", type=float, default=1.0,
                   help="pixels of the big rank's images, x the others'")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.image % 8:
        p.error("--image must be a multiple of 8")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)                    # the same initial weights everywhere
    net = UNet(args.channels)
    ema = copy.deepcopy(net).eval().requires_grad_(False)
    model = DDP(net)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-2)
    alphas_cumprod = cosine_alphas_cumprod(T)
    if slow and args.factor > 1:
        SlowConv2d.extra = (args.factor - 1.0) * EXTRA_PER_UNIT
    torch.manual_seed(args.seed * 7919 + rank)      # timesteps, noise and dropout differ by rank

    # this rank's image size for its n-th batch
    big_hw = None
    if rank == args.big_rank and args.big != 1.0:
        # sides multiples of 4 (the UNet halves the side twice), area as near X as they allow
        bh = max(8, round(args.image * math.sqrt(args.big) / 4) * 4)
        big_hw = (bh, max(8, round(args.image * args.image * args.big / bh / 4) * 4))

    def size_for(n):
        if big_hw is not None:
            return big_hw
        if args.res_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + 7 * rank + 10_007 * n)
            s = args.image * math.exp(args.res_sigma * torch.randn((), generator=g).item())
            s = min(max(side_to_8(s), 16), 64)
            return s, s
        return args.image, args.image

    sleep_s = args.loader_sleep_ms / 1000 if slow else 0.0
    dataset = Shapes(64 * world * args.batch, args.seed, sleep_s)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    batches = BucketBatchSampler(sampler, args.batch, size_for)
    loader = DataLoader(dataset, batch_sampler=batches, num_workers=1, persistent_workers=True)

    def forever():
        epoch = 0
        while True:
            batches.set_epoch(epoch)
            yield from loader
            epoch += 1

    data = forever()
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        n = sum(q.numel() for q in net.parameters())
        print(f"UNet: {n / 1e6:.2f}M params, world {world}, "
              f"batch {args.batch}x{args.image}x{args.image} per rank", flush=True)
    if big_hw is not None:
        print(f"rank {rank}: images {big_hw[0]}x{big_hw[1]}, "
              f"{big_hw[0] * big_hw[1] / args.image ** 2:.2f} x the pixels", flush=True)

    times = []
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                                schedule=sched) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)        # a slow host before the step
            x0 = next(data)
            b = x0.shape[0]
            # forward diffusion: x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps, t uniform per image
            noise = torch.randn_like(x0)
            t = torch.randint(0, T, (b,))
            abar = alphas_cumprod[t].view(b, 1, 1, 1)
            xt = abar.sqrt() * x0 + (1 - abar).sqrt() * noise
            with record_function("forward"):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    pred = model(xt, t)
                loss = F.mse_loss(pred.float(), noise)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
            with record_function("ema"), torch.no_grad():
                decay = min(args.ema, (1 + step) / (10 + step))     # warm-up, as diffusers' EMAModel
                torch._foreach_lerp_(list(ema.parameters()), list(net.parameters()), 1.0 - decay)
            dt = time.perf_counter() - ts
            times.append(dt)
            prof.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} grad norm {gnorm.item():.2f} "
                      f"{tuple(x0.shape[-2:])} {dt * 1000:.0f} ms", flush=True)

    prof.export_chrome_trace(os.path.join(args.out, f"unet-rank{rank}.json"))
    if rank == 0:
        active = times[2:]
        mean_ms = sum(active) / len(active) * 1000
        print(f"done in {time.perf_counter() - t0:.1f}s, mean step {mean_ms:.0f} ms "
              f"over the {len(active)} traced steps, traces in {args.out}", flush=True)
    if hog is not None:
        stop.set()
        hog.join()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
