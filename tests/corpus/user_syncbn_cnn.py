"""A small ResNet-style image classifier trained data parallel with ``DistributedDataParallel``
and synchronised batch norm, as a user who follows the PyTorch docs writes one: build the model
with ``nn.BatchNorm2d``, ``nn.SyncBatchNorm.convert_sync_batchnorm(model)``, then ``DDP(model)``.
CPUs and gloo.

The model: a stem (3x3 conv ``3 -> C``, batch norm, ReLU) on 3x32x32 images, three residual
blocks (two 3x3 convs with batch norm each, a 1x1 conv + batch norm on the shortcut where the
shape changes): ``C -> C`` at 32x32, ``C -> 2C`` stride 2 (16x16), ``2C -> 4C`` stride 2
(8x8); global average pooling and a linear head over 10 classes. ``C`` is ``--channels``. Nine
batch-norm layers in all, 0.31M parameters at ``C = 32``. The images are gaussian noise plus a
random tint per image, drawn from the seed, the rank and the step; the labels come from a fixed
random teacher, the same on every rank (a linear map of the image's mean colour, argmax over the
10 classes), so that the loss goes down (rank 0's from 2.2 to about 1 in 7 steps; noisy, being
that of rank 0's own 12 images). SGD with momentum 0.9 and weight decay. The batch is small (12
images a rank by default), as it is where people reach for synchronised batch norm (detection,
segmentation).

Synchronised batch norm: every batch-norm layer computes its batch statistics over the samples
of all ranks, so a forward holds one collective per layer and a backward another, nine of
each a step, each of a few hundred bytes, besides DDP's gradient all-reduce (two buckets) and
DDP's broadcast of the buffers (the running statistics) at the start of each forward. In torch
2.13 neither half of the recipe runs on CPU as written: ``DDP`` refuses a CPU module holding
``nn.SyncBatchNorm`` layers ("SyncBatchNorm layers only work with GPU modules") and
``nn.SyncBatchNorm`` itself refuses CPU tensors (its ``batch_norm_stats`` kernels are
CUDA-only). So after the conversion each converted layer is swapped for a ``CPUSyncBatchNorm``
(below; same parameters, buffers and process group) that exchanges what PyTorch's own does on
gloo: in forward a ``dist.all_gather`` of the rank's per-channel mean, variance and sample count
(2C + 1 values), combined into the global mean and variance (the running statistics are updated
from them); in backward a ``dist.all_reduce`` of the per-channel sums of the output gradient and
of the gradient times ``x - mean`` (2C values), from which the input gradient is computed. The
weight and bias gradients stay local: DDP averages them. Per step and rank: 9 ``all_gather``,
11 ``all_reduce`` and 2 ``broadcast``.

Profiling: ``torch.profiler.profile`` on the CPU with the profiler's defaults otherwise and
``schedule(wait=1, warmup=1, active=steps-2)``, its ``on_trace_ready`` exporting one chrome
trace per process, ``syncbn-rank<R>.json`` in ``--out``; ``prof.step()`` after each step;
``record_function`` marks ``data``, ``forward``, ``backward`` and ``optimizer``. Rank 0 prints
its loss and the step's time every step, and at the end its mean step time over the traced
steps (each from the top of the step, before any sleep, to the end of its optimizer step).

Flags:

- ``--out DIR``: where the traces go (created if missing).
- ``--steps N`` (8, at least 3), ``--batch B`` (12 images a rank), ``--channels C`` (32),
  ``--lr`` (0.02), ``--seed S`` (0).
- ``--slow-rank R``: the rank the three faults below apply to (-1: none).
- ``--factor F``: on the slow rank every conv layer computes its convolution again, on the same
  input, without gradients, results discarded, ``(F - 1) x 3 x 1.6`` times per call (the
  fraction carried from one call to the next), all of it in the forward: 3 for forward and
  backward (backward as two forwards), 1.6 because at this small batch the convolutions are
  only about 60 % of a rank's compute (the hand-written batch norm, ReLU, autograd and the
  optimizer make up the rest; measured on one process with one thread, default shapes: F = 2
  gives 1.9-2.0 x its step's compute, F = 3 gives 2.8-3.0 x). That rank is slower on
  the same work, as a slow GPU is, its compute about F x its peers'.
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step.
- ``--data-sleep-ms MS``: the slow rank sleeps while it produces each batch (inside ``data``):
  a slow input pipeline with nothing to hide it.
- ``--uneven``: each rank's batch is a fixed share of ``--batch`` that differs by rank (0.6,
  0.8, 1.0, 1.4 x with 4 ranks, 7, 10, 12 and 17 images by default; from 0.6 to 1.4 x
  otherwise); synchronised batch norm weighs each rank's statistics by its count and the loss is
  weighted by the rank's share of the samples, so that DDP's average of the gradients is the
  gradient of the mean loss over all samples. An imbalance of the data split, not a fault: no
  rank is slower on the same work, the rank with more images simply has more to do.

Measured on the 2-core machine the corpus is made on (4 processes sharing the 2 cores,
``OMP_NUM_THREADS=1``, defaults, other jobs light: 1-minute load 2-3.5 besides; 5 interleaved
runs of each, rank 0's mean step over the 6 traced steps, median [range]):

- healthy: 279 ms [268-308]; a whole run (start-up, 8 steps, traces) takes 9.6-11 s of wall
  time (up to about 25 s while other jobs load the machine). About 100 ms of a rank's step is
  its own work; the rest is waiting in the 22 small collectives, each of which needs all four
  processes to have had a core.
- ``--slow-rank 2 --factor 2``: 340 ms [317-342], +22 %. The slow rank waits about 50 ms a step
  less than its peers in the forward's ``all_gather``; they wait on its extra convolutions.
- ``--slow-rank 1 --sleep-ms 40``: 315 ms [309-323], +13 % (30-40 ms of the 40 show). The peers
  wait for the sleeper in DDP's buffer ``broadcast`` at the start of the forward (ranks 0 and 3)
  or in the first ``all_gather`` (rank 2).
- ``--slow-rank 3 --data-sleep-ms 40``: 326 ms [321-349], +17 % (``data`` lasts 41 ms on rank
  3; the peers wait in the first collectives of the forward).
- ``--uneven``: 277 ms [264-290], no longer than healthy: the job has about as much work in all
  (46 images against 48) and the step is bound by the collectives; the imbalance shows in the
  waiting, rank 3 (17 images) waiting about 150 ms a step in the collectives, rank 0 (7 images)
  about 200 ms.

While other jobs loaded the machine (1-minute load 5-8) the same runs gave steps of 350-800 ms
and differences lost in the noise.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_syncbn_cnn.py --out DIR --slow-rank 2 --factor 2
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function

CLASSES = 10
IMAGE = 32


class SlowConv2d(nn.Conv2d):
    """``nn.Conv2d`` that, on the slow rank, computes its convolution ``extra`` more times (no grad)."""

    extra = 0.0          # extra forward-equivalents per call, set on the slow rank only
    _carry = 0.0         # fraction carried from one call to the next (shared by all layers)

    def forward(self, x):
        y = super().forward(x)
        if SlowConv2d.extra > 0:
            SlowConv2d._carry += SlowConv2d.extra
            n = int(SlowConv2d._carry)
            SlowConv2d._carry -= n
            with torch.no_grad():
                for _ in range(n):
                    _ = self._conv_forward(x, self.weight, self.bias)
        return y


class SyncBNFunction(torch.autograd.Function):
    """Batch norm over the samples of every rank of ``group`` (NCHW input, training mode)."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, group):
        x = x.contiguous()
        c = x.shape[1]
        dims = [0, 2, 3]
        count = x.numel() // c
        if count > 0:
            mean = x.mean(dims)
            var = ((x * x).mean(dims) - mean * mean).clamp_(min=0)   # x.var() is much slower on CPU
        else:
            mean, var = x.new_zeros(c), x.new_zeros(c)
        local = torch.cat([mean, var, x.new_tensor([float(count)])])
        # gather rather than reduce: the ranks' counts may differ (as in torch's own, on gloo)
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, local, group=group)
        stats = torch.stack(parts)                              # [world, 2C + 1]
        means, vars_, counts = stats[:, :c], stats[:, c:2 * c], stats[:, 2 * c:]
        n = counts.sum()
        g_mean = (means * counts).sum(0) / n
        g_var = ((vars_ + (means - g_mean) ** 2) * counts).sum(0) / n
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(g_mean, alpha=momentum)
            running_var.mul_(1 - momentum).add_(g_var * (n / (n - 1).clamp(min=1)), alpha=momentum)
        invstd = torch.rsqrt(g_var + eps)
        xmu = x - g_mean.view(1, c, 1, 1)
        y = xmu * invstd.view(1, c, 1, 1)
        if weight is not None:
            y = y * weight.view(1, c, 1, 1) + bias.view(1, c, 1, 1)
        ctx.save_for_backward(xmu, weight, invstd, n)
        ctx.group = group
        return y

    @staticmethod
    def backward(ctx, dy):
        xmu, weight, invstd, n = ctx.saved_tensors
        c = dy.shape[1]
        dims = [0, 2, 3]
        dy = dy.contiguous()
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)
        grad_w = grad_b = None
        if weight is not None:
            grad_w = sum_dy_xmu * invstd              # local: DDP averages the parameters' gradients
            grad_b = sum_dy
        both = torch.cat([sum_dy, sum_dy_xmu])       # the input gradient needs the global sums
        dist.all_reduce(both, group=ctx.group)
        g_dy, g_dy_xmu = both[:c] / n, both[c:] / n
        scale = invstd if weight is None else invstd * weight
        dx = (dy - g_dy.view(1, c, 1, 1)
              - xmu * (invstd ** 2 * g_dy_xmu).view(1, c, 1, 1)) * scale.view(1, c, 1, 1)
        return dx, grad_w, grad_b, None, None, None, None, None


class CPUSyncBatchNorm(nn.BatchNorm2d):
    """What ``nn.SyncBatchNorm`` does, on CPU tensors: batch statistics over every rank of a group.

    Not a subclass of ``nn.SyncBatchNorm``: DDP refuses to wrap a CPU module that holds one.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_group=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_group = process_group

    @classmethod
    def from_sync(cls, m):
        """The same layer, sharing the parameters and buffers of a converted ``nn.SyncBatchNorm``."""
        new = cls(m.num_features, m.eps, m.momentum, m.affine, m.track_running_stats, m.process_group)
        if m.affine:
            new.weight, new.bias = m.weight, m.bias
        if m.track_running_stats:
            new.running_mean, new.running_var = m.running_mean, m.running_var
            new.num_batches_tracked = m.num_batches_tracked
        new.train(m.training)
        return new

    def forward(self, x):
        if not (self.training and dist.is_initialized()):
            return super().forward(x)                 # eval, or no process group: plain batch norm
        group = self.process_group or dist.group.WORLD
        if dist.get_world_size(group) == 1:
            return super().forward(x)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:                 # cumulative moving average, as in torch
                momentum = 1.0 / float(self.num_batches_tracked)
        return SyncBNFunction.apply(x, self.weight, self.bias,
                                    self.running_mean if self.track_running_stats else None,
                                    self.running_var if self.track_running_stats else None,
                                    self.eps, momentum, group)


def sync_bn_on_cpu(module):
    """Replace every ``nn.SyncBatchNorm`` below ``module`` by a ``CPUSyncBatchNorm`` (same tensors)."""
    for name, child in module.named_children():
        if isinstance(child, nn.SyncBatchNorm):
            setattr(module, name, CPUSyncBatchNorm.from_sync(child))
        else:
            sync_bn_on_cpu(child)
    return module


def conv_bn(cin, cout, k, stride):
    return nn.Sequential(SlowConv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False),
                         nn.BatchNorm2d(cout))


class Block(nn.Module):
    """Basic residual block: conv-bn-relu-conv-bn, plus the (projected) shortcut, then relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = conv_bn(cin, cout, 3, stride)
        self.b = conv_bn(cout, cout, 3, 1)
        self.short = conv_bn(cin, cout, 1, stride) if (stride != 1 or cin != cout) else nn.Identity()

    def forward(self, x):
        return F.relu(self.b(F.relu(self.a(x))) + self.short(x))


class ResNetSmall(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.stem = nn.Sequential(*conv_bn(3, c, 3, 1), nn.ReLU())
        self.blocks = nn.Sequential(Block(c, c, 1), Block(c, 2 * c, 2), Block(2 * c, 4 * c, 2))
        self.head = nn.Linear(4 * c, CLASSES)

    def forward(self, x):
        h = self.blocks(self.stem(x))
        return self.head(h.mean((2, 3)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults apply to")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's conv work, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0,
                   help="sleep on the slow rank while it produces each batch")
    p.add_argument("--uneven", action="store_true", help="batch size differs by rank (loss weighted)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=12, help="images per rank per step")
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    # data split
    if args.uneven:
        shares = [0.6, 0.8, 1.0, 1.4] if world == 4 else \
            [0.6 + 0.8 * r / max(1, world - 1) for r in range(world)]
        sizes = [max(1, round(s * args.batch)) for s in shares]
    else:
        sizes = [args.batch] * world
    my_batch = sizes[rank]
    loss_weight = my_batch * world / sum(sizes)   # DDP's mean of the weighted losses' grads = global mean

    torch.manual_seed(args.seed)                 # same weights everywhere (DDP broadcasts rank 0's anyway)
    model = ResNetSmall(args.channels)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)   # as the docs say, before DDP
    model = DDP(sync_bn_on_cpu(model))           # both refuse CPU: run the converted layers on CPU
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    if slow and args.factor > 1:
        SlowConv2d.extra = (args.factor - 1.0) * 3 * 1.6   # fwd + bwd; convs ~60% of compute
    teacher = torch.randn(3, CLASSES, generator=torch.Generator().manual_seed(args.seed + 12345))
    if rank == 0:
        n = sum(q.numel() for q in model.parameters())
        n_bn = sum(isinstance(m, CPUSyncBatchNorm) for m in model.modules())
        print(f"syncbn resnet: {n / 1e6:.2f}M params, {n_bn} SyncBatchNorm layers, "
              f"batch sizes {sizes}", flush=True)

    def batch_for(step):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 1000 * rank + step)
        if slow and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000)          # a slow input pipeline
        # noise plus a random tint per image; the label is the teacher's class of the mean colour
        x = torch.randn(my_batch, 3, IMAGE, IMAGE, generator=g)
        x = x + torch.randn(my_batch, 3, 1, 1, generator=g)
        y = (x.mean((2, 3)) @ teacher).argmax(-1)
        return x, y

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"syncbn-rank{rank}.json"))

    times = []
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            with record_function("data"):
                x, y = batch_for(step)
            opt.zero_grad(set_to_none=True)
            with record_function("forward"):
                loss = F.cross_entropy(model(x), y)
            with record_function("backward"):
                (loss * loss_weight).backward()
            with record_function("optimizer"):
                opt.step()
            dt = time.perf_counter() - ts
            times.append(dt)
            prof.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} ({dt * 1000:.0f} ms)", flush=True)

    if rank == 0:
        active = times[2:]                       # the steps the profiler records
        mean_ms = sum(active) / len(active) * 1000
        print(f"done in {time.perf_counter() - t0:.1f}s, mean step {mean_ms:.0f} ms "
              f"over the {len(active)} traced steps, traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
