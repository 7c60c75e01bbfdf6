"""DistributedDataParallel training of a small wide ResNet whose gradients DDP averages through a
communication hook from ``torch.distributed.algorithms.ddp_comm_hooks``, PowerSGD by default, as
one turns it on after reading the PowerSGD paper or PyTorch's "DDP Communication Hooks" page.
CPUs, gloo.

The model is a WideResNet-lite for 10 classes: a 3x3 stem convolution to ``--width`` channels,
three stages of ``--blocks`` pre-activation residual blocks (BatchNorm, ReLU, 3x3 conv, twice; a
1x1 projection where the shape changes) at ``W``, ``2W`` and ``4W`` channels, the last two stages
starting with stride 2, then BatchNorm, ReLU, a global average pool and an MLP head
(``4W -> 8W -> 10``): 0.77M parameters at the defaults (3.1 MB of fp32 gradients). The images are
synthetic, 3 x ``--res`` x ``--res``: noise around a colour that depends on the label, drawn per
rank and step by a ``Dataset`` whose item is a whole batch (so size and resolution can change from
step to step), read through a ``DataLoader(batch_size=None, num_workers=--workers)``. Every rank
starts from the same weights (``--seed``) and steps SGD with Nesterov momentum and weight decay.
DDP keeps ``broadcast_buffers=True``, so every forward starts with a broadcast of the BatchNorm
buffers from rank 0, a synchronisation point: a rank that starts its step late keeps its peers
waiting there. DDP gets ``bucket_cap_mb=64``, i.e. one bucket for all the gradients: with gloo a
hook's later allreduces are issued from the completion callbacks of its earlier ones, so the
chains of two buckets interleave in a different order on each rank and gloo aborts with "Received
data size doesn't match expected size".

The hook (``--hook``):

- ``powersgd`` (default): ``PowerSGDState(process_group=None, matrix_approximation_rank=R,
  start_powerSGD_iter=2)`` with ``powerSGD_hook``; R is ``--rank-r`` (4). Steps 0 and 1 are plain
  allreduces of the bucket. From step 2 on, at the end of backward, the hook adds the error
  feedback, orthogonalises the Qs (``aten::linalg_qr``, one per group of same-shaped matrices, 11
  at the defaults), computes the Ps (``aten::bmm``) and starts an allreduce of the tensors it does
  not compress (biases and BatchNorm, 1834 floats); from that allreduce's callback it allreduces
  the Ps (every conv and linear weight, viewed as ``out x in*k*k``, is compressed at rank 4),
  orthogonalises them, computes and allreduces the Qs, and decompresses ``P Q^T`` into the bucket:
  three allreduces a step, chained.
- ``batched``: ``batched_powerSGD_hook`` with the same state: the whole bucket padded to a square
  matrix, two chained allreduces (P, then Q). It raises an AssertionError at its first compressed
  step in current PyTorch (it hands ``_orthogonalize`` a 2-D matrix, which takes only batches of
  them since ``powerSGD_hook`` was batched), so this job wraps ``_orthogonalize`` to add a batch
  dimension of one.
- ``fp16``: ``default_hooks.fp16_compress_hook``: the bucket cast to fp16 and divided by the world
  size, one allreduce, cast back in its callback.
- ``none``: no hook, DDP's own allreduce of the bucket.

Profiling: ``torch.profiler.profile(activities=[CPU], schedule=schedule(wait=2, warmup=1,
active=steps-3))``, so with 9 steps the 6 traced ones (3-8) all come after PowerSGD's warm start
and DDP's bucket rebuild; ``record_shapes`` only with ``--shapes``; ``prof.step()`` after each
step, one chrome trace per rank, ``trace-rank<R>.json`` in ``--out`` (2.5 MB a rank, 4.1 MB with
``--shapes``). ``record_function`` marks ``data``, ``forward``, ``backward`` and ``optimizer`` on
the main thread, inside ``ProfilerStep#N``; on CPU the autograd engine runs backward, DDP's reducer
and the hook on the main thread too. In ``forward``: ``DistributedDataParallel.forward``, two
``c10d::broadcast_`` (the buffers: 1440 floats and 7 int64) whose ``gloo:broadcast`` spans on a
gloo thread include the wait for late ranks, then ``aten::conv2d`` ... ``aten::mkldnn_convolution``
and the BatchNorm ops. In ``backward``: ``ConvolutionBackward0`` and the rest, DDP's
``torch.distributed.ddp.reducer::copy_bucket_to_grad``, then the hook's ops and one
``c10d::allreduce_`` a step, whose ``gloo:all_reduce`` span on a gloo thread lasts until the end of
the chain: the Ps' and Qs' allreduces, issued from gloo's own thread, leave no event of their own
(no ``c10d::allreduce_``, no ``gloo:all_reduce``), nor do the orthogonalisation and matmuls done in
the callbacks; the main thread's wait for the chain is the tail of ``backward`` after
``c10d::allreduce_``, with no event. With ``--shapes`` the recorded allreduce shows only the
uncompressed 1834 floats (``Input Dims``). With ``--hook fp16`` the cast (``aten::to``,
``aten::_to_copy``) and ``aten::div_`` come just before the allreduce, the cast back (in the
callback) leaves no event; with ``none`` the reducer's own ``torch::distributed::reducer::mul_out``.

Flags:

- ``--out DIR`` (required), ``--steps N`` (9, 6 traced), ``--seed S`` (0), ``--shapes``.
- ``--hook {powersgd,batched,fp16,none}`` (powersgd), ``--rank-r R`` (4, PowerSGD's matrix rank).
- ``--width W`` (48), ``--blocks N`` (1 a stage), ``--batch B`` (24 images a rank), ``--res``
  (32), ``--workers N`` (0), ``--lr`` (0.05).
- ``--slow-rank R`` (-1: none), and on that rank only: ``--factor F``, every convolution is
  computed again ``F - 1`` times a call (fractions carried over calls) and added in times zero,
  so forward and backward both grow F-fold (one process alone: 1.6 -> 1.55x, 2 -> 1.95x) while
  the gradients stay the same; ``--sleep-ms MS``, a host sleep before each step, inside
  ``ProfilerStep`` but in no ``record_function``; ``--data-sleep-ms MS``, a sleep in the
  Dataset's ``__getitem__``, inside ``data`` with 0 workers (with workers it happens in the worker
  and prefetching hides it); ``--hog``, a daemon thread multiplying 256x256 matrices for the
  whole run.
- Imbalance, no fault: ``--res-sigma S``, each rank draws each step's image side as ``--res`` x a
  lognormal of sigma S (seeded by seed, rank and step), rounded to a multiple of 8 and clipped to
  [16, 4 x ``--res``] (0.4: sides 16-72), so ranks differ step by step; ``--big-rank K --big X``,
  rank K's batch is ``round(B x X)`` images every step (more data on one rank, not a slower one).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_powersgd.py --out DIR --slow-rank 2 --factor 1.6

Rank 0 ends with the mean loss, its median step and whether the replicas' weights agree (they
must: every hook hands all ranks the same averaged gradient).

Measured on this 2-core machine with other jobs beside it (load average 3-10; a job's step swings
2x with the load): a job takes 14-48 s wall, all traces valid JSON, the replicas' weights equal.
Median ``ProfilerStep`` of the healthy job 680-1570 ms (about 740 ms at load 3, 1500 at load 10);
``--hook fp16`` 870-1190 ms, ``none`` 1040, ``batched`` 1200 (load 8-10). A fault's cost is the
slow rank's own time over its peers' median in the same job, as a share of the step: ``--factor
1.6`` 21-26% (once 6%), 1.8 21-33%, 2 28-33%; ``--hog`` 30-34%; ``--big 1.5`` 20-28%. The sleeps
cost what they sleep, their peers waiting for them in ``gloo:broadcast``: ``--sleep-ms 80`` is
6-11% of the step, 180-200 9-34%; ``--data-sleep-ms 60`` 4-10%, 160-180 14-30%. The slow rank's
extra compute grows its wall time less than F-fold: while its peers wait, it has a core to itself.
"""

import argparse
import os
import threading
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader, Dataset

NUM_CLASSES = 10


class Conv(nn.Conv2d):
    """A Conv2d that, on the slow rank, does its work ``1 + extra`` times a call.

    The repeats are added in times zero rather than thrown away, so autograd runs their backward
    too (the device looks uniformly slower, not just its forward) and the gradients are unchanged.
    """

    extra = 0.0

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self._owed = 0.0

    def forward(self, x):
        y = super().forward(x)
        if Conv.extra > 0:
            self._owed += Conv.extra
            while self._owed >= 1.0:
                self._owed -= 1.0
                y = y + 0.0 * super().forward(x)
        return y


class Block(nn.Module):
    """Pre-activation residual block as in Wide ResNets (no dropout)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin)
        self.conv1 = Conv(cin, cout, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.conv2 = Conv(cout, cout, 3, 1, 1, bias=False)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = Conv(cin, cout, 1, stride, 0, bias=False)

    def forward(self, x):
        o = F.relu(self.bn1(x))
        # the projection reads the activated input, as in the reference WRN code
        skip = x if self.short is None else self.short(o)
        o = self.conv1(o)
        o = self.conv2(F.relu(self.bn2(o)))
        return o + skip


class WideResNet(nn.Module):
    def __init__(self, width, blocks):
        super().__init__()
        chans = [width, 2 * width, 4 * width]
        self.stem = Conv(3, width, 3, 1, 1, bias=False)
        layers, cin = [], width
        for i, c in enumerate(chans):
            for j in range(blocks):
                layers.append(Block(cin, c, 2 if (i > 0 and j == 0) else 1))
                cin = c
        self.body = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(cin)
        self.head = nn.Sequential(nn.Linear(cin, 2 * cin), nn.ReLU(inplace=True),
                                  nn.Linear(2 * cin, NUM_CLASSES))

    def forward(self, x):
        x = self.body(self.stem(x))
        x = F.relu(self.bn(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


class SyntheticBatches(Dataset):
    """Item ``i`` is this rank's whole batch for step ``i``: its size and resolution may vary."""

    def __init__(self, steps, rank, seed, batch, res, res_sigma, data_sleep_s):
        self.steps, self.rank, self.seed = steps, rank, seed
        self.batch, self.res, self.res_sigma = batch, res, res_sigma
        self.data_sleep_s = data_sleep_s
        # one colour per class, shared by all ranks, so there is something to learn
        g = torch.Generator().manual_seed(seed + 12345)
        self.colours = torch.randn(NUM_CLASSES, 3, generator=g)

    def __len__(self):
        return self.steps

    def side(self, i):
        if self.res_sigma <= 0:
            return self.res
        rng = np.random.default_rng([self.seed, self.rank, i])
        s = self.res * rng.lognormal(0.0, self.res_sigma)
        return int(min(max(8 * round(s / 8), 16), 4 * self.res))

    def __getitem__(self, i):
        if self.data_sleep_s:
            time.sleep(self.data_sleep_s)       # a slow disk or decoder on this rank
        g = torch.Generator().manual_seed((self.seed * 1000003 + self.rank) * 100003 + i)
        side = self.side(i)
        y = torch.randint(0, NUM_CLASSES, (self.batch,), generator=g)
        x = torch.randn(self.batch, 3, side, side, generator=g)
        x += self.colours[y][:, :, None, None]
        return x, y


def start_hog(stop):
    """A noisy neighbour on the slow rank: matmuls in a loop on a daemon thread, the whole run."""
    def spin():
        a, b = torch.randn(256, 256), torch.randn(256, 256)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=spin, name="hog", daemon=True)
    t.start()
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="profiler record_shapes")
    p.add_argument("--hook", choices=["powersgd", "batched", "fp16", "none"], default="powersgd")
    p.add_argument("--rank-r", type=int, default=4, help="PowerSGD matrix approximation rank")
    p.add_argument("--width", type=int, default=48, help="channels of the first stage")
    p.add_argument("--blocks", type=int, default=1, help="residual blocks per stage")
    p.add_argument("--batch", type=int, default=24, help="images per rank per step")
    p.add_argument("--res", type=int, default=32, help="image side")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to")
    p.add_argument("--factor", type=float, default=1.0, help="fwd+bwd compute, x peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="sleep in __getitem__")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--res-sigma", type=float, default=0.0, help="lognormal image side sigma")
    p.add_argument("--big-rank", type=int, default=-1, help="rank whose batch is --big x")
    p.add_argument("--big", type=float, default=1.5, help="batch multiplier on --big-rank")
    args = p.parse_args()
    wait, warmup = 2, 1
    if args.steps < wait + warmup + 1:
        p.error(f"--steps must be at least {wait + warmup + 1} (the profiler waits 2, warms up 1)")
    if args.slow_rank < 0 and (args.factor > 1 or args.hog or args.sleep_ms or args.data_sleep_ms):
        p.error("--factor, --hog, --sleep-ms and --data-sleep-ms need --slow-rank")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    batch = round(args.batch * args.big) if rank == args.big_rank else args.batch

    torch.manual_seed(args.seed)                    # the same initial weights on every rank
    model = WideResNet(args.width, args.blocks)
    # One bucket: with gloo a hook's later allreduces are issued from the callbacks of its earlier
    # ones, on gloo's threads, so two buckets' chains interleave in a different order on each
    # rank and gloo fails with a size mismatch; an explicit cap also sizes DDP's first bucket.
    ddp = DDP(model, bucket_cap_mb=64)
    if args.hook in ("powersgd", "batched"):
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=args.rank_r,
                                            start_powerSGD_iter=2)
        hook = powerSGD_hook.powerSGD_hook
        if args.hook == "batched":
            hook = powerSGD_hook.batched_powerSGD_hook
            # batched_powerSGD_hook hands _orthogonalize one 2-D matrix, but _orthogonalize
            # takes only batches of matrices since powerSGD_hook was batched, and raises an
            # AssertionError at the first compressed step: give it a batch of one (a view, so
            # the in-place QR still lands in the hook's Q).
            orthogonalize = powerSGD_hook._orthogonalize
            powerSGD_hook._orthogonalize = lambda m, epsilon=0: orthogonalize(
                m.unsqueeze(0) if m.dim() == 2 else m, epsilon)
        ddp.register_comm_hook(state, hook)
    elif args.hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)

    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    if slow and args.factor > 1:
        Conv.extra = args.factor - 1.0
    stop = threading.Event()
    if slow and args.hog:
        start_hog(stop)

    data = SyntheticBatches(args.steps, rank, args.seed, batch, args.res, args.res_sigma,
                            args.data_sleep_ms / 1e3 if slow else 0.0)
    loader = DataLoader(data, batch_size=None, shuffle=False, num_workers=args.workers)
    if rank == 0:
        n = sum(q.numel() for q in model.parameters())
        print(f"{n / 1e6:.2f}M params, hook {args.hook}, batch {args.batch}"
              f"{f' (rank {args.big_rank}: {batch})' if args.big_rank >= 0 else ''}", flush=True)

    sched = schedule(wait=wait, warmup=warmup, active=args.steps - wait - warmup, repeat=1)
    losses, times = [], []
    ddp.train()
    with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                 record_shapes=args.shapes) as prof:
        it = iter(loader)
        for step in range(args.steps):
            t0 = time.perf_counter()
            if slow and args.sleep_ms:
                time.sleep(args.sleep_ms / 1e3)
            with record_function("data"):
                x, y = next(it)
            with record_function("forward"):
                loss = F.cross_entropy(ddp(x), y)
            with record_function("backward"):
                opt.zero_grad(set_to_none=True)
                loss.backward()
            with record_function("optimizer"):
                opt.step()
            losses.append(loss.item())
            times.append(time.perf_counter() - t0)
            prof.step()
    stop.set()
    prof.export_chrome_trace(os.path.join(args.out, f"trace-rank{rank}.json"))

    # outside the profiled window: the replicas must hold the same weights
    flat = torch.cat([q.detach().flatten() for q in model.parameters()])
    lo, hi = flat.clone(), flat.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    drift = (hi - lo).abs().max().item()
    mean_loss = torch.tensor(sum(losses[-3:]) / 3)
    dist.all_reduce(mean_loss)
    step_ms = sorted(times[wait + warmup:])[len(times[wait + warmup:]) // 2] * 1e3
    if rank == 0:
        print(f"loss (last 3 steps, mean over ranks) {mean_loss.item() / world:.3f}, "
              f"median step {step_ms:.0f} ms on rank 0, max weight drift {drift:.2e}"
              f"{' (replicas agree)' if drift < 1e-5 else ' (REPLICAS DIFFER)'}", flush=True)
    dist.barrier()          # no rank tears gloo down while a peer is still in the last allreduce
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
