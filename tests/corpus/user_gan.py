"""A DCGAN (or, with ``--gp``, a WGAN-GP) trained data-parallel with two DistributedDataParallel
modules, a generator and a discriminator, as one writes it after the PyTorch DCGAN example and a
DDP tutorial. CPUs, gloo.

The models, at ``--width W`` (32) on 32x32 RGB images, ``z`` of 64 numbers:

- Generator: ``z -> ConvTranspose(64, 4W, 4) -> 4x4 -> ConvTranspose(4W, 2W) -> 8x8 ->
  ConvTranspose(2W, W) -> 16x16 -> ConvTranspose(W, 3) -> 32x32 -> tanh``, BatchNorm and ReLU
  after each but the last (kernels 4, stride 2); 0.30M parameters at the defaults.
- Discriminator: ``Conv(3, W) -> 16x16 -> Conv(W, 2W) -> 8x8 -> Conv(2W, 4W) -> 4x4 ->
  Conv(4W, 1, 4) -> a logit``, LeakyReLU(0.2) after each but the last, BatchNorm after the 2nd
  and 3rd (none with ``--gp``: the gradient penalty is per sample, batch statistics would mix
  the samples); 0.17M parameters.

Both start from the same weights on every rank (``--seed``), each has its own Adam (lr 2e-4,
betas 0.5, 0.999) and its own ``DistributedDataParallel`` wrapper, ``forward_sync_buffers=False``
(2.13's name for ``broadcast_buffers=False``, which now warns): training normalizes with batch
statistics only, so DDP's default broadcast of rank 0's BatchNorm running statistics before every
forward (five a step) would add collectives for buffers that training never reads; the buffers
are still made equal once, when DDP wraps the module.

The "real" images are coloured Gaussian blobs (1-3 a picture, random centre, size and colour on a
black background), drawn per rank, per step and per discriminator update from a generator seeded
with (``--seed``, rank, step, update): no files, no loader.

A step (one ``ProfilerStep#N``):

1. ``--d-steps K`` (1) discriminator updates, each a ``d_step``: ``data`` (the real batch), then
   ``forward``: fakes from the generator under ``no_grad`` (so the generator's DDP does no
   bookkeeping), the discriminator on the real batch and on the fakes, BCE-with-logits against
   1 and 0 (with ``--gp``: the critic's ``mean(fake) - mean(real)``, then ``gradient_penalty``:
   the critic on random interpolations of real and fake, ``torch.autograd.grad`` of its outputs
   with respect to its inputs with ``create_graph=True``, ``10 (|grad| - 1)^2``); ``backward``,
   one for the whole loss, in which the discriminator's DDP all-reduces its gradients (one
   bucket at the defaults, ``gloo:all_reduce``); ``optimizer``.
2. One ``g_step``: the discriminator's parameters set ``requires_grad=False`` (as pix2pix's
   ``set_requires_grad``), so that its DDP neither waits for nor all-reduces gradients it would
   throw away; ``forward``: the generator on new noise, the discriminator on the fakes, BCE against
   1 (with ``--gp``: ``-mean``); ``backward`` through the discriminator into the generator, whose
   DDP all-reduces the generator's gradients (one bucket); ``optimizer``; the discriminator's
   parameters trainable again.

So per step, without ``--syncbn``, the collectives are ``K`` all-reduces of the discriminator's
gradients and one of the generator's, each issued from the backward (DDP's autograd hooks) and
run on gloo's own threads. ``--syncbn`` adds, for each of the discriminator's 2 BatchNorm layers
and each forward through it (2 in a ``d_step``, 1 in a ``g_step``), one all-reduce of the batch
sums in forward and one of their gradients in backward: 8 more per ``d_step``, 4 per ``g_step``,
small (2 x channels + 1 numbers), on the main thread, blocking.

``--syncbn``: ``nn.SyncBatchNorm.convert_sync_batchnorm`` on the discriminator, as the DDP docs
say. In torch 2.13 that layer runs on GPUs only (CPU input: "SyncBatchNorm expected input tensor
to be on GPU") and DDP refuses a CPU module that holds one, so each converted layer is then
swapped for ``CpuSyncBN``, sharing its weight, bias and running statistics, which computes the
same thing with a differentiable all-reduce of its own (``torch.distributed.nn``'s now warns
that it is deprecated): ``dist.all_reduce`` of the sums in forward, of their gradient in backward.
The batch statistics are then over every rank's batch, uneven ones too.

Profiling: ``torch.profiler.profile(activities=[CPU], schedule=schedule(wait=1, warmup=1,
active=steps-2))``, ``record_shapes`` only with ``--shapes``, ``prof.step()`` after each step, and
at the end ``prof.export_chrome_trace`` into ``--out``/``trace-rank<R>.json``, one per rank.
``record_function`` marks ``d_step`` and ``g_step`` and, inside them, ``data``, ``forward``,
``gradient_penalty``, ``backward`` and ``optimizer``. In the trace: ``aten::convolution`` /
``aten::mkldnn_convolution`` and their backward ops; DDP's ``DistributedDataParallel.forward``
spans; each gradient all-reduce as a ``c10d::allreduce_`` issued inside ``backward`` and a
``gloo:all_reduce`` span on a gloo thread; with ``--syncbn`` the synchronous
``c10d::allreduce_`` of the statistics inside ``forward`` (in a ``SumOverRanks`` cpu_op) and
``backward`` (``SumOverRanksBackward``), each with its ``gloo:all_reduce`` span too.

Flags:

- ``--out DIR`` (required), ``--steps N`` (9, 7 traced), ``--seed S`` (0), ``--shapes``.
- ``--width W`` (32, base channels), ``--batch B`` (32 real images a rank a step, as many fakes),
  ``--d-steps K`` (1), ``--gp`` (WGAN-GP), ``--syncbn`` (not with ``--gp``).
- ``--slow-rank R`` (-1: none), and on that rank only: ``--factor F``, a forward hook on every
  convolution of both nets runs the layer again under ``no_grad``, results discarded, ``(F - 1) x
  EXTRA_PER_UNIT`` times a call on average (fractions carried over calls), which makes that
  rank's compute for a whole step (D and G updates) about F x its peers' (see
  ``EXTRA_PER_UNIT``); ``--sleep-ms MS``, a host sleep at the start of each step;
  ``--data-sleep-ms MS``, a sleep inside ``data`` each time it builds a real batch (``K`` times a
  step); ``--hog``, a daemon thread multiplying 128x128 matrices for the whole run.
- Imbalance, no fault: ``--batch-sigma S``, each rank draws each step's batch size as ``B`` x a
  lognormal of sigma S (seeded by rank and step), clipped to [B/4, 4B]; ``--big-rank K --big X``,
  rank K's batch is ``round(X B)`` every step. DDP averages the ranks' gradients with equal weights
  whatever their batch sizes, as plain DDP code does.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_gan.py --out DIR --slow-rank 2 --factor 1.6

Measured on this 2-core machine with other jobs beside (load average 2.5-9.5, so one job's step
swings 2.5x from run to run): a job takes 11-39 s wall (most of it starting 4 Pythons), traces
3.2 MB a rank (5.3 MB with ``--shapes``, 5.5 MB with ``--syncbn``), all valid JSON, both nets'
parameters identical on every rank at the end (rank 0's last line). Mean step over the 7 traced
steps: healthy median 471 ms (219-554, 9 runs); ``--syncbn`` 535-610 (its 12 blocking all-reduces
are about half of it); ``--gp`` 624, with ``--d-steps 2`` 1006, ``--d-steps 3`` 1133; ``--shapes``
398; ``--batch-sigma 0.4`` 418-530.

What a fault added: the slow rank's own time (its step less its waits: the idle stretch at the end
of each ``backward`` where DDP waits for the all-reduce, and with ``--syncbn`` the time inside
``SumOverRanks``) minus its peers' mean, as a share of the step, one number a run, sorted:

    --factor 1.6                            19 21 22 24 26 33 %
    --factor 1.7 --gp --shapes              24
    --factor 1.8 / 2 with --syncbn          17 / 25
    --sleep-ms 80 / 100                     12 16 18 22 26 / 22
    --data-sleep-ms 60                      7 11 11 12 13
    --data-sleep-ms 100 / 120               10 19 / 23
    --data-sleep-ms 80 --d-steps 2          22
    --hog                                   9 15 22 30 31 36 41
    --big-rank 1 --big 1.5 (imbalance)      13 18
    healthy: the largest rank's excess      1 4 6 6 6 6 8 11 21

A sleep costs 0.5-0.9 of its length: while the slow rank sleeps its three peers share the two
cores and go faster. The hog is at its worst when the machine is most loaded.
"""

from __future__ import annotations

import argparse
import inspect
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

NZ = 64            # latent size
IMAGE = 32
GP_WEIGHT = 10.0
# Extra no-grad forwards of each convolution per call, per unit of (factor - 1), on the slow rank.
# Backward costs about two forwards, so 3 would redo forward + backward once if the convolutions
# were all the work; they are not (BatchNorm, activations, the losses, Adam), and a discriminator
# called under requires_grad=False skips its weight gradients. Measured in one process (thread CPU
# time of a whole step, D and G updates, at the defaults): 1.5 -> 1.51x, 2 -> 1.96x, 3 -> 2.91x.
EXTRA_PER_UNIT = 2.8


class SumOverRanks(torch.autograd.Function):
    """All-reduce (sum) whose backward all-reduces the gradient: every rank's loss reads the sum."""

    @staticmethod
    def forward(ctx, t):
        t = t.clone()
        dist.all_reduce(t)
        return t

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class CpuSyncBN(nn.Module):
    """Batch norm whose batch statistics are summed over all ranks, on CPU tensors.

    Takes over the tensors of a converted ``nn.SyncBatchNorm`` (which refuses CPU input)."""

    def __init__(self, bn: nn.SyncBatchNorm):
        super().__init__()
        self.eps, self.momentum = bn.eps, bn.momentum
        self.weight, self.bias = bn.weight, bn.bias
        self.register_buffer("running_mean", bn.running_mean)
        self.register_buffer("running_var", bn.running_var)
        self.register_buffer("num_batches_tracked", bn.num_batches_tracked)

    def forward(self, x):
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                False, 0.0, self.eps)
        c = x.shape[1]
        count = torch.full((1,), x.numel() / c, dtype=x.dtype)
        # one message for the sums, the sums of squares and the count of this rank
        stats = SumOverRanks.apply(torch.cat([x.sum((0, 2, 3)), (x * x).sum((0, 2, 3)), count]))
        n = stats[-1]
        mean = stats[:c] / n
        var = (stats[c:2 * c] / n - mean * mean).clamp(min=0)
        with torch.no_grad():
            self.num_batches_tracked.add_(1)
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * n / (n - 1), self.momentum)
        scale = self.weight * torch.rsqrt(var + self.eps)
        return x * scale.view(1, c, 1, 1) + (self.bias - mean * scale).view(1, c, 1, 1)


def cpu_sync_bn(module: nn.Module) -> nn.Module:
    for name, child in module.named_children():
        if isinstance(child, nn.SyncBatchNorm):
            setattr(module, name, CpuSyncBN(child))
        else:
            cpu_sync_bn(child)
    return module


class Generator(nn.Module):
    def __init__(self, w):
        super().__init__()

        def up(cin, cout, stride=2, pad=1):
            return [nn.ConvTranspose2d(cin, cout, 4, stride, pad, bias=False),
                    nn.BatchNorm2d(cout), nn.ReLU(True)]

        self.net = nn.Sequential(*up(NZ, 4 * w, 1, 0), *up(4 * w, 2 * w), *up(2 * w, w),
                                 nn.ConvTranspose2d(w, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, w, norm=True):
        super().__init__()

        def down(cin, cout, bn):
            layers = [nn.Conv2d(cin, cout, 4, 2, 1, bias=not bn)]
            return layers + ([nn.BatchNorm2d(cout)] if bn else []) + [nn.LeakyReLU(0.2, True)]

        self.net = nn.Sequential(*down(3, w, False), *down(w, 2 * w, norm),
                                 *down(2 * w, 4 * w, norm),
                                 nn.Conv2d(4 * w, 1, 4, 1, 0))

    def forward(self, x):
        return self.net(x).flatten()


def init_weights(m):
    # the DCGAN paper's N(0, 0.02) convolutions and N(1, 0.02) BatchNorm scales
    if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


def blobs(n, gen):
    """``n`` pictures of 1-3 coloured Gaussian blobs in [-1, 1], shape [n, 3, 32, 32]."""
    k = 3
    centre = torch.rand(n, k, 2, generator=gen) * 24 + 4
    size = torch.rand(n, k, 1, 1, generator=gen) * 4 + 2
    colour = torch.rand(n, k, 3, generator=gen) * 2
    present = torch.rand(n, k, generator=gen) < torch.tensor([1.0, 0.6, 0.3])
    yx = torch.arange(IMAGE, dtype=torch.float32)
    dy = (yx.view(1, 1, IMAGE, 1) - centre[..., 0, None, None]) ** 2
    dx = (yx.view(1, 1, 1, IMAGE) - centre[..., 1, None, None]) ** 2
    mask = torch.exp(-(dy + dx) / (2 * size ** 2)) * present[..., None, None]    # [n, k, H, W]
    img = torch.einsum("nkhw,nkc->nchw", mask, colour) - 1
    return img.clamp(-1, 1)


def add_slow_convs(nets, extra):
    """On the slow rank: each convolution of ``nets`` runs again ``extra`` times a call, no grad."""
    credit = [0.0]      # fractional repetitions carried from one call to the next

    def hook(mod, inputs, output):
        credit[0] += extra
        n = int(credit[0])
        credit[0] -= n
        with torch.no_grad():
            for _ in range(n):
                type(mod).forward(mod, *inputs)     # not mod(...): that would run this hook again

    for net in nets:
        for m in net.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                m.register_forward_hook(hook)


def start_hog(stop):
    """A noisy neighbour inside the process: matmuls on a daemon thread until ``stop``."""
    def spin():
        a, b = torch.randn(128, 128), torch.randn(128, 128)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=spin, name="hog", daemon=True)
    t.start()
    return t


def set_requires_grad(net, flag):
    for p in net.parameters():
        p.requires_grad_(flag)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="profiler record_shapes")
    p.add_argument("--width", type=int, default=32, help="base channels of both nets")
    p.add_argument("--batch", type=int, default=32, help="real images per rank per update")
    p.add_argument("--d-steps", type=int, default=1, help="discriminator updates per step")
    p.add_argument("--gp", action="store_true", help="WGAN-GP: critic loss with gradient penalty")
    p.add_argument("--syncbn", action="store_true", help="SyncBatchNorm in the discriminator")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to")
    p.add_argument("--factor", type=float, default=1.0, help="conv compute on the slow rank, x")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0,
                   help="sleep building each real batch")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--batch-sigma", type=float, default=0.0,
                   help="lognormal sigma of each rank's batch size per step")
    p.add_argument("--big-rank", type=int, default=-1, help="rank with a larger batch")
    p.add_argument("--big", type=float, default=1.5, help="--big-rank's batch, x --batch")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.gp and args.syncbn:
        p.error("--gp's critic has no BatchNorm (the penalty is per sample): no --syncbn with it")
    if args.d_steps < 1:
        p.error("--d-steps must be at least 1")
    if args.slow_rank < 0 and (args.factor != 1 or args.hog or args.sleep_ms or args.data_sleep_ms):
        p.error("--factor, --hog, --sleep-ms and --data-sleep-ms need --slow-rank")
    if args.factor < 1:
        p.error("--factor must be at least 1")

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)            # the same initial weights everywhere
    g_net = Generator(args.width)
    d_net = Discriminator(args.width, norm=not args.gp)
    g_net.apply(init_weights)
    d_net.apply(init_weights)
    if slow and args.factor > 1:
        add_slow_convs([g_net, d_net], (args.factor - 1) * EXTRA_PER_UNIT)
    if args.syncbn:
        d_net = cpu_sync_bn(nn.SyncBatchNorm.convert_sync_batchnorm(d_net))
    # torch 2.13 renamed broadcast_buffers (the old name warns there); older releases know only it
    no_sync = ({"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(DDP).parameters
               else {"broadcast_buffers": False})
    G = DDP(g_net, **no_sync)
    D = DDP(d_net, **no_sync)
    opt_g = torch.optim.Adam(G.parameters(), lr=args.lr, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=args.lr, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    if rank == 0:
        ng = sum(q.numel() for q in G.parameters())
        nd = sum(q.numel() for q in D.parameters())
        print(f"{'WGAN-GP' if args.gp else 'DCGAN'}: G {ng / 1e6:.2f}M, D {nd / 1e6:.2f}M params, "
              f"syncbn {args.syncbn}, d-steps {args.d_steps}", flush=True)

    def batch_size(step):
        b = args.batch
        if args.batch_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + 7919 * rank + step)
            b = b * math.exp(args.batch_sigma * torch.randn((), generator=g).item())
            b = min(max(args.batch // 4, b), 4 * args.batch)
        if rank == args.big_rank:
            b *= args.big
        return max(2, int(round(b)))        # BatchNorm needs two samples

    def real_batch(step, k, n):
        if slow and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000)       # a slow loader
        g = torch.Generator().manual_seed(((args.seed * 1009 + rank) * 1009 + step) * 97 + k)
        return blobs(n, g)

    noise = torch.Generator().manual_seed(args.seed * 7 + 1000 + rank)    # each rank its own z

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                record_shapes=args.shapes) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            n = batch_size(step)
            for k in range(args.d_steps):
                with record_function("d_step"):
                    with record_function("data"):
                        real = real_batch(step, k, n)
                    opt_d.zero_grad(set_to_none=True)
                    with record_function("forward"):
                        with torch.no_grad():
                            fake = G(torch.randn(n, NZ, 1, 1, generator=noise))
                        out_real, out_fake = D(real), D(fake)
                        if args.gp:
                            loss_d = out_fake.mean() - out_real.mean()
                        else:
                            loss_d = (bce(out_real, torch.ones_like(out_real))
                                      + bce(out_fake, torch.zeros_like(out_fake)))
                    if args.gp:
                        with record_function("gradient_penalty"):
                            eps = torch.rand(n, 1, 1, 1, generator=noise)
                            mix = (eps * real + (1 - eps) * fake).requires_grad_(True)
                            grad, = torch.autograd.grad(D(mix).sum(), mix, create_graph=True)
                            gp = ((grad.flatten(1).norm(dim=1) - 1) ** 2).mean()
                            loss_d = loss_d + GP_WEIGHT * gp
                    with record_function("backward"):
                        loss_d.backward()
                    with record_function("optimizer"):
                        opt_d.step()

            with record_function("g_step"):
                set_requires_grad(D, False)
                opt_g.zero_grad(set_to_none=True)
                with record_function("forward"):
                    out = D(G(torch.randn(n, NZ, 1, 1, generator=noise)))
                    loss_g = -out.mean() if args.gp else bce(out, torch.ones_like(out))
                with record_function("backward"):
                    loss_g.backward()
                with record_function("optimizer"):
                    opt_g.step()
                set_requires_grad(D, True)
            prof.step()
            if rank == 0:
                print(f"step {step} batch {n} loss_d {loss_d.item():.4f} "
                      f"loss_g {loss_g.item():.4f} "
                      f"{(time.perf_counter() - ts) * 1000:.0f} ms", flush=True)

    prof.export_chrome_trace(os.path.join(args.out, f"trace-rank{rank}.json"))
    if hog is not None:
        stop.set()
        hog.join()
    # DDP keeps the replicas equal; if the two wrappers tripped over each other it would show here
    with torch.no_grad():
        flat = torch.cat([q.detach().reshape(-1) for q in (*G.parameters(), *D.parameters())])
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
