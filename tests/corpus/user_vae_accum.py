"""A convolutional variational autoencoder trained data parallel with ``DistributedDataParallel``
(CPUs, gloo) by a user short of memory: gradient accumulation under ``no_sync``, activation
checkpointing of the decoder, and an EMA copy of the weights, as VAE and diffusion users keep.

Images are soft coloured blobs on a tinted background, drawn per rank, step and microbatch;
the encoder halves the side three times (stride-2 convs, GroupNorm, SiLU) to a latent map of
mean and log-variance, the decoder doubles it back with transposed convs. Each step runs
``--accum`` microbatches, all-reducing gradients only on the last (DDP ``no_sync`` before), then
AdamW and an EMA of the weights (``torch._foreach_lerp_``). The profiler (CPU) records steps 3
on, one chrome trace a rank (``vae-rank<R>.json``), without input shapes.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_vae_accum.py --out DIR --slow-rank 1 --factor 2

Faults, on ``--slow-rank`` only:

- ``--factor F``: each conv (and transposed conv) computes its output again, without grad,
  ``(F - 1) * EXTRA_PER_UNIT`` times a call (carried over calls where fractional): the author's
  calibration for a rank whose step computes about F times its peers', not measured again here.
- ``--hog``: a daemon thread multiplies 64x64 matrices for the whole run (CPU and GIL).
- ``--sleep-ms MS``: a host sleep before each step's first microbatch; ``--data-sleep-ms MS``: a
  sleep inside ``data`` before each microbatch (a slow loader).

Imbalance without a fault: ``--res-sigma S`` has each rank draw a lognormal image side each step
(multi-resolution training, sides 16-64); ``--big-rank R --big X`` gives rank R images of X
times the pixels every step.

Measured: one run of each on this 2-core machine (4 processes, other work beside them), mean
step of rank 0 over the 6 traced steps: no fault 187 ms, 4 microbatches a step 341 ms; sides
lognormal 0.3: 343 ms; rank 1's images 1.7x the pixels: 279 ms.
"""

from __future__ import annotations

import argparse
import contextlib
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
from torch.utils.checkpoint import checkpoint

LATENT = 8          # latent channels (the latent is a map at 1/8 of the image's side)
GROUPS = 8          # GroupNorm groups
# Extra no-grad convolutions per conv call on the slow rank, per unit of (factor - 1): measured
# (see the docstring) so that --factor F makes the rank's step compute about F x its peers'.
EXTRA_PER_UNIT = 3.1


class _Slow:
    """Mix-in: on the slow rank, a conv computes its output again ``extra`` times (no grad)."""

    extra = 0.0      # extra forward-equivalents per call (set on the slow rank only)
    _carry = 0.0     # fraction carried from one call to the next, shared by all convs

    def _waste(self, x, fn):
        if _Slow.extra <= 0:
            return
        _Slow._carry += _Slow.extra
        n = int(_Slow._carry)
        _Slow._carry -= n
        with torch.no_grad():
            for _ in range(n):
                fn(x)


class SlowConv2d(_Slow, nn.Conv2d):
    def forward(self, x):
        y = super().forward(x)
        self._waste(x, lambda t: self._conv_forward(t, self.weight, self.bias))
        return y


class SlowConvT2d(_Slow, nn.ConvTranspose2d):
    def forward(self, x, output_size=None):
        y = super().forward(x)
        self._waste(x, lambda t: F.conv_transpose2d(t, self.weight, self.bias, self.stride,
                                                    self.padding, self.output_padding,
                                                    self.groups, self.dilation))
        return y


def down(cin, cout):
    """Stride-2 3x3 conv, GroupNorm, SiLU: halves the side."""
    return nn.Sequential(SlowConv2d(cin, cout, 3, stride=2, padding=1),
                         nn.GroupNorm(GROUPS, cout), nn.SiLU())


def up(cin, cout):
    """Stride-2 4x4 transposed conv, GroupNorm, SiLU, 3x3 conv, GroupNorm, SiLU: doubles the side."""
    return nn.Sequential(SlowConvT2d(cin, cout, 4, stride=2, padding=1),
                         nn.GroupNorm(GROUPS, cout), nn.SiLU(),
                         SlowConv2d(cout, cout, 3, padding=1),
                         nn.GroupNorm(GROUPS, cout), nn.SiLU())


class ConvVAE(nn.Module):
    def __init__(self, c, ckpt=True):
        super().__init__()
        self.ckpt = ckpt
        self.encoder = nn.Sequential(down(3, c), down(c, 2 * c), down(2 * c, 4 * c))
        self.to_stats = SlowConv2d(4 * c, 2 * LATENT, 1)          # mean and log-variance
        self.from_latent = nn.Sequential(SlowConv2d(LATENT, 4 * c, 3, padding=1),
                                         nn.GroupNorm(GROUPS, 4 * c), nn.SiLU())
        self.decoder = nn.ModuleList([up(4 * c, 2 * c), up(2 * c, c), up(c, c)])
        self.to_image = SlowConv2d(c, 3, 3, padding=1)

    def forward(self, x):
        mu, logvar = self.to_stats(self.encoder(x)).chunk(2, dim=1)
        logvar = logvar.clamp(-10, 10)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)   # reparameterisation
        h = self.from_latent(z)
        for block in self.decoder:
            if self.ckpt and self.training:
                # keep only the block's input; its activations are recomputed in backward
                h = checkpoint(block, h, use_reentrant=False)
            else:
                h = block(h)
        return self.to_image(h), mu, logvar


def vae_loss(recon, x, mu, logvar, beta):
    rec = F.mse_loss(recon, x)
    kl = -0.5 * torch.mean(1 + logvar - mu * mu - logvar.exp())
    return rec + beta * kl, rec, kl


def blobs(n, h, w, g):
    """``n`` images 3 x h x w: a few soft coloured gaussian blobs on a tinted background, plus noise."""
    k = 4
    ys = torch.linspace(-1, 1, h).view(1, 1, h, 1)
    xs = torch.linspace(-1, 1, w).view(1, 1, 1, w)
    cy = torch.rand(n, k, 1, 1, generator=g) * 1.6 - 0.8
    cx = torch.rand(n, k, 1, 1, generator=g) * 1.6 - 0.8
    width = 0.15 + 0.35 * torch.rand(n, k, 1, 1, generator=g)
    bump = torch.exp(-((ys - cy) ** 2 + (xs - cx) ** 2) / (2 * width ** 2))   # n, k, h, w
    colour = torch.rand(n, k, 3, generator=g) * 2 - 1                          # n, k, 3
    img = torch.einsum("nkhw,nkc->nchw", bump, colour)
    img = img + 0.3 * (torch.rand(n, 3, 1, 1, generator=g) - 0.5)
    return (img + 0.05 * torch.randn(n, 3, h, w, generator=g)).clamp_(-1.5, 1.5)


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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps (the first two are not traced)")
    p.add_argument("--accum", type=int, default=2, help="microbatches per optimizer step")
    p.add_argument("--batch", type=int, default=8, help="images per microbatch and rank")
    p.add_argument("--channels", type=int, default=32, help="base width C (encoder C, 2C, 4C)")
    p.add_argument("--image", type=int, default=32, help="image side (a multiple of 8)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--beta", type=float, default=1e-3, help="weight of the KL term")
    p.add_argument("--ema", type=float, default=0.99, help="EMA decay")
    p.add_argument("--no-ckpt", action="store_true", help="no activation checkpointing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to (-1: none)")
    p.add_argument("--factor", type=float, default=1.0, help="the slow rank's compute, x its peers'")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="host sleep on the slow rank before each step's first microbatch")
    p.add_argument("--data-sleep-ms", type=float, default=0.0,
                   help="sleep on the slow rank inside 'data', before each microbatch")
    p.add_argument("--res-sigma", type=float, default=0.0,
                   help="each rank draws a lognormal image side per step (multi-resolution)")
    p.add_argument("--big-rank", type=int, default=-1, help="rank whose shard holds larger images")
    p.add_argument("--big", type=float, default=1.0, help="pixels of the big rank's images, x the others'")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.image % 8:
        p.error("--image must be a multiple of 8")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)                    # same initial weights everywhere
    net = ConvVAE(args.channels, ckpt=not args.no_ckpt)
    ema = [q.detach().clone() for q in net.parameters()]
    model = DDP(net)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    if slow and args.factor > 1:
        _Slow.extra = (args.factor - 1.0) * EXTRA_PER_UNIT
    torch.manual_seed(args.seed * 7919 + rank)      # the reparameterisation noise differs by rank

    # the big rank's images: height and width multiples of 8, about --big x the pixels
    big_hw = None
    if rank == args.big_rank and args.big != 1.0:
        bh = side_to_8(args.image * math.sqrt(args.big))
        bw = side_to_8(args.image * args.image * args.big / bh)
        big_hw = (bh, bw)

    def size_for(step):
        if big_hw is not None:
            return big_hw
        if args.res_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + 7 * rank + 10_007 * step)
            s = args.image * math.exp(args.res_sigma * torch.randn((), generator=g).item())
            s = min(max(side_to_8(s), 16), 64)
            return s, s
        return args.image, args.image

    def batch_for(step, micro, hw):
        if slow and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000)       # a slow loader
        g = torch.Generator().manual_seed(
            ((args.seed * 1009 + rank) * 100_003 + step) * 101 + micro)
        return blobs(args.batch, hw[0], hw[1], g)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        n = sum(q.numel() for q in net.parameters())
        print(f"conv VAE: {n / 1e6:.2f}M params, world {world}, accum {args.accum}, "
              f"batch {args.batch}x{args.image}x{args.image} per microbatch"
              + (f", rank {args.big_rank} images {big_hw}" if big_hw else ""), flush=True)
    if big_hw is not None:
        print(f"rank {rank}: images {big_hw[0]}x{big_hw[1]}, "
              f"{big_hw[0] * big_hw[1] / args.image ** 2:.2f} x the pixels", flush=True)

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"vae-rank{rank}.json"))

    times, sizes = [], []
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)        # a slow host before the step's first microbatch
            hw = size_for(step)
            sizes.append(hw)
            tot = rec_tot = 0.0
            for micro in range(args.accum):
                last = micro == args.accum - 1
                with record_function("data"):
                    x = batch_for(step, micro, hw)
                # all-reduce the gradients only on the last microbatch
                with (contextlib.nullcontext() if last else model.no_sync()):
                    with record_function("forward"):
                        recon, mu, logvar = model(x)
                        loss, rec, _ = vae_loss(recon, x, mu, logvar, args.beta)
                    with record_function("backward"):
                        (loss / args.accum).backward()
                tot += loss.item() / args.accum
                rec_tot += rec.item() / args.accum
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            with record_function("ema"):
                with torch.no_grad():
                    torch._foreach_lerp_(ema, list(net.parameters()), 1.0 - args.ema)
            dt = time.perf_counter() - ts
            times.append(dt)
            prof.step()
            if rank == 0:
                print(f"step {step} loss {tot:.4f} (mse {rec_tot:.4f}) {hw[0]}x{hw[1]} "
                      f"{dt * 1000:.0f} ms", flush=True)

    if rank == 0:
        active = times[2:]
        mean_ms = sum(active) / len(active) * 1000
        print(f"done in {time.perf_counter() - t0:.1f}s, mean step {mean_ms:.0f} ms over the "
              f"{len(active)} traced steps, traces in {args.out}", flush=True)
    if hog is not None:
        stop.set()
        hog.join()
    dist.barrier()
    time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
