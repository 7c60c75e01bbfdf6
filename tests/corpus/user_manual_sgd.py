"""Data-parallel WaveNet training with the gradient sync and the optimizer written by hand.

A small WaveNet-style model (a stack of gated, dilated, causal 1-D convolutions with residual and
skip connections) learns next-sample prediction on synthetic mu-law-quantised waveforms. Every
rank trains the same model on its own batches; there is no DDP and no ``torch.optim``: the
gradients are averaged by ``all_reduce`` calls that the backward pass itself launches, and the
update (Adam or SGD with momentum, both written out, with global-norm clipping) is a loop over
the parameters under ``torch.no_grad()``. CPU, gloo.

Model (defaults in brackets):

- input: the previous sample's class (``--classes Q`` [128] mu-law levels) through an
  ``nn.Embedding(Q, C)``, ``C = --channels`` [64];
- ``--layers L`` [10] residual layers, dilations ``1, 2, 4, 8, 16`` repeated (receptive field
  63 samples at L = 10). Each: left-pad by the dilation, ``Conv1d(C, 2C, kernel 2, dilation d)``,
  ``tanh(a) * sigmoid(b)`` gate, a 1x1 ``Conv1d(C, C)`` back onto the residual stream and a 1x1
  ``Conv1d(C, S)`` into the skip sum, ``S = --skip-channels`` [128];
- head: ``relu -> Conv1d(S, S, 1) -> relu -> Conv1d(S, Q, 1)``, cross-entropy against the next
  sample's class at every position. The last layer has no residual 1x1 conv (its output would
  feed nothing, and a parameter without a gradient would never fire its hook). 0.33M parameters
  in 63 tensors at the defaults (1.25 MB).

Data: each sequence is 2-4 sinusoids with random periods (8-100 samples), amplitudes and phases,
a slow amplitude envelope and a little noise, squashed into [-1, 1] and mu-law quantised. Each
rank draws ``--batch`` [8] sequences of ``--seq`` [256] samples per microbatch from a generator
seeded with (seed, rank, step, microbatch), in torch on the host: no files, no loader. The loss
starts at ln(Q) = 4.85; in one process at the defaults it reached 2.4-2.9 after 80 steps with
Adam and 3.8 with ``--opt sgd`` (the default lr of 0.05 first tried barely moved it: 4.84 after 10
steps, hence 0.5).

Gradient sync (the reason this script exists): at start-up every parameter gets a
``register_post_accumulate_grad_hook``. On the microbatch that syncs, the hook fires as soon as
that parameter's ``.grad`` is final during ``backward()`` and launches
``dist.all_reduce(p.grad, async_op=True)`` right there, keeping the Work handle, so the
all-reduces of the last layers overlap the backward of the first ones. After ``backward()`` the
loop waits on every handle (``grad_sync``), divides the gradients by the world size, and runs the
update (``optimizer``). 63 all-reduces a step at the defaults, in the order the gradients become
ready (the head's first), the same order on every rank.

- ``--bucket``: hand-made bucketing instead. The parameters, taken in reverse registration order,
  are grouped into buckets of about ``--bucket-mb`` [1.0] MB; the hook only counts. When the last
  gradient of a bucket arrives, the bucket's gradients are ``torch.cat``-ed into one flat buffer
  and that buffer is all-reduced asynchronously; after the wait the averaged buffer is copied
  back into the ``.grad`` views. 2 all-reduces a step at the defaults: 52 tensors (the head and
  layers 9 down to 2, 1.03 MB), then 11 (the rest and the embedding, 0.22 MB).
- ``--sync-every K`` [1]: gradient accumulation. A training step is K microbatches of forward and
  backward, each loss scaled by 1/K; the hooks do nothing on the first K-1 (gradients just
  accumulate in ``.grad``) and launch the all-reduces only during the K-th backward.

Update, per parameter, under ``torch.no_grad()``:

- clipping: ``total = torch.stack([g.norm() for g in grads]).norm()``, every gradient scaled by
  ``min(1, --clip / total)`` (``--clip`` [1.0]; 0 turns it off);
- ``--opt adam`` [default]: m, v buffers, bias correction, decoupled weight decay ``--wd`` [0.01],
  betas (0.9, 0.99), eps 1e-8, ``--lr`` [2e-3];
- ``--opt sgd``: weight decay added to the gradient (``--wd``), momentum 0.9 buffer, ``--lr``
  [0.5]. Gradients are then dropped (``p.grad = None``).

Profiling: ``torch.profiler.profile(activities=[CPU], schedule=schedule(wait=1, warmup=1,
active=steps-2))``, ``record_shapes`` only with ``--shapes``, ``prof.step()`` once per training
step (after the update), ``record_function`` ranges ``data``, ``forward``, ``backward`` (each
once per microbatch), ``grad_sync`` (the waits and the division) and ``optimizer`` (clipping and
update). At the end each rank writes ``--out``/``trace-rank<R>.json`` with
``prof.export_chrome_trace``. Rank 0 prints the loss every step and, after the profiler has
stopped, a per-rank table of median step time and median "own" time (the step less its time in
``grad_sync``, nearly all of which is waiting), and checks that the weights agree on every rank.

Flags:

- ``--out DIR`` (required), ``--steps N`` [10: 8 traced], ``--seed S`` [0], ``--shapes``.
- Shape of the job (healthy variants): ``--channels C`` [64], ``--skip-channels S`` [128],
  ``--layers L`` [10], ``--classes Q`` [128], ``--batch B`` [8], ``--seq T`` [256],
  ``--opt adam|sgd``, ``--lr`` [2e-3 adam / 0.5 sgd], ``--wd`` [0.01], ``--clip`` [1.0],
  ``--bucket``, ``--bucket-mb`` [1.0], ``--sync-every K`` [1].
- Faults, on ``--slow-rank R`` only [-1: none]:
  - ``--factor F`` [1]: a slower device. Each layer's dilated convolution (the job's main op) is
    run again under ``no_grad`` on the same padded input, ``(F - 1) x EXTRA_PER_UNIT`` extra times
    (whole copies, then the same conv on a leading slice of the time axis for the fraction),
    results thrown away, so the forward takes about F times as long;
  - ``--sleep-ms MS``: a host ``time.sleep`` before each step;
  - ``--hog``: a daemon thread multiplying 512x512 matrices for the whole run;
  - ``--clip-sleep-ms MS``: a host sleep after the waits, at the start of the ``optimizer`` range
    and before the clipping (a slow host in the optimizer);
  - ``--grad-noise F``: inside each parameter's hook, before the all-reduce is launched, F times
    the gradient's size of elementwise work: F noisy copies of the gradient (one Gaussian draw of
    shape [F, numel], scaled, the gradient added by broadcasting; a fraction of a copy works on a
    leading slice), thrown away. Three ops a parameter whatever F is: a slower tail of the
    backward that also delays every launch.
- Imbalance, no fault: ``--seq-sigma S``, every rank draws each step's sequence length as
  ``T x lognormal(0, S)`` seeded by (seed, rank, step), clipped to [64, 4T];
  ``--big-rank K --big X``, rank K's batch is ``round(X B)``. The gradients are still averaged
  with equal weights, as a hand-written loop does.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_manual_sgd.py --out DIR --slow-rank 2 --factor 1.6

Measured on the development machine (2 cores), 4 processes, ``OMP_NUM_THREADS=1``, while other
sessions' jobs shared the same 2 cores (load average 10.7-13.6 during every run below, so a step
swings up to 1.8x from run to run at the same settings). Each row is one run at the defaults plus
the flags shown. "job" is the median over ranks of each rank's median step (8 traced steps, the
script's own ``perf_counter`` timing). "own" is a rank's median step less its ``grad_sync``
(nearly all waiting); the percentage is the slow rank's own over the mean of its peers' own, or
the busiest rank's for runs without a fault:

    run                                      job ms        slow rank own / peers' own
    healthy (8 runs)                         571-1024      busiest rank +5 .. +18 %
    --bucket, healthy                        811           +6 %
    --sync-every 2, healthy                  1545          +10 %
    --opt sgd --channels 96 --layers 8       815           +10 %
    --factor 1.5 (r2; r3)                    770; 938      +35 %; +23 %
    --factor 2 (r2; --bucket r0)             881; 805      +31 %; +35 %
    --factor 3 (r1)                          1285          +51 %
    --sleep-ms 60 / 150 / 300 (r1)           975 / 796 / 959        +3 / +34 / +31 %
    --clip-sleep-ms 60 / 150 / 300 (r0)      667 / 680 / 668        +19 / +26 / +104 %
    --clip-sleep-ms 300 --bucket (r2)        707           +60 %
    --clip-sleep-ms 150 --sync-every 2 (r3)  1487          -9 %
    --grad-noise 10 / 30 (r3), 60 (r1)       1206 / 1183 / 1092     +21 / +76 / +85 %
      (healthy runs of the same batch: 909 and 1024 ms, +5 and +6 %)
    --grad-noise 30 --bucket (r2)            877           +35 %
    --grad-noise 2.5 --shapes (r0)           715           +8 %
    --hog (r3; --bucket r0)                  1151; 599     +48 %; +64 %
    --seq-sigma 0.5; 0.8 --seed 3            790; 957      largest +12 %; +42 % (imbalance)
    --big-rank 1 --big 1.5 / 2               935 / 1380    +41 / +87 % (imbalance)

Which settings slow the job's step by 10 % or more: the same healthy settings ran 571-1024 ms a
step over 8 runs, so one run's job step says little below about +30 %. Clearly above that:
``--factor 3`` (1285 ms), ``--hog`` without buckets (1151), ``--big 2`` (1380); ``--grad-noise``
10-60 ran 1092-1206 ms beside healthy runs of 909-1024 ms in the same batch (+7-30 %). Host
sleeps hardly reach the job's step at all: while the slow rank sleeps, its three peers get its
share of the two cores and finish their own work sooner, then wait for it in ``grad_sync``. With
a 300 ms optimizer sleep the job step stayed at 668 ms while the peers' own time halved (256 ms):
in the slow rank's trace its ``optimizer`` range is 305-341 ms every step, in its peers' traces
``grad_sync`` is 244-777 ms. Within one run the slow rank's own time stands out more clearly:
+23-51 % for ``--factor`` 1.5-3, +35-85 % for ``--grad-noise`` 30-60 (+21 % at 10), +26-104 %
for optimizer sleeps of 150-300 ms, +31-34 % for step sleeps of 150-300 ms, against +5-18 % for
the busiest rank of a healthy run. Under ``--sync-every 2`` a 150 ms optimizer sleep was absorbed
completely (-9 %): the peers run a whole extra microbatch before their first wait.

Wall time per run, ``torchrun`` start to exit: 22-49 s (median 40 s) at that load, 27-29 s on a
quieter machine (load 0.5-3.5; 12 s of it the training loop, at a 512-sample sequence then);
``--sync-every 2`` runs 50-56 s. About 20 s of each run is starting 4 Python processes and
``import torch`` on the shared cores, and step 0 takes 1-8 s: the profiler's first
``prof.step()`` (from waiting to warming up) alone took 4.9 s in a one-process run. Traces:
10-12 MB a rank (plain JSON), 15 MB with ``--sync-every 2``, 17-22 MB with ``--shapes``, 6 MB
at ``--channels 96 --layers 8``; every trace kept (168 files) loaded as JSON.

What the traces show: every ``c10d::allreduce_`` is on the main thread inside ``backward``
(under ``torch::autograd::AccumulateGrad``, where the hook runs); gloo runs the collective as a
``gloo:all_reduce`` span on one of two gloo threads (about 5.6 ms each, 63 a step; 2 with
``--bucket``). ``Work.wait()`` records no op: the wait is the ``grad_sync`` range alone
(145-360 ms a step healthy without buckets, most of the step's communication left over after
the backward; 7-180 ms with ``--bucket``). With ``--sync-every 2`` the first backward of each
step launches nothing and the second launches all 63.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, record_function

DILATION_CYCLE = 5          # dilations 1, 2, 4, 8, 16, 1, 2, ...
# --factor F: (F - 1) x EXTRA_PER_UNIT extra runs of every dilated conv. The dilated convs are
# about half of the forward's multiply-adds, but padding, the gate, the 1x1 convs (a slower conv
# path on CPU), the head and the loss make one extra copy cost only about 0.3 of a forward.
# Measured in one process (median thread CPU time over 6 rounds, a loaded machine): forward
# 1.50-1.83x / 1.85-2.38x / 2.80-3.47x at F = 1.5 / 2 / 3 over three shapes (C 64 L 10 T 512,
# C 96 L 8 T 384, C 48 L 12 T 512); forward + backward 1.2-1.3x / 1.3-1.5x / 1.7-1.9x.
EXTRA_PER_UNIT = 3.3


class ResidualLayer(nn.Module):
    def __init__(self, channels, skip_channels, dilation, extra=0.0, last=False):
        super().__init__()
        self.dilation = dilation
        self.dilated = nn.Conv1d(channels, 2 * channels, kernel_size=2, dilation=dilation)
        # the last layer's residual output would feed nothing: no 1x1 conv there
        self.res = None if last else nn.Conv1d(channels, channels, kernel_size=1)
        self.skip = nn.Conv1d(channels, skip_channels, kernel_size=1)
        self.extra = extra          # > 0 on the slow rank only (--factor)

    def forward(self, x):
        xp = F.pad(x, (self.dilation, 0))           # causal: only the past
        a = self.dilated(xp)
        if self.extra > 0:
            # the slow device: the same conv again, results thrown away
            with torch.no_grad():
                whole, frac = divmod(self.extra, 1.0)
                for _ in range(int(whole)):
                    self.dilated(xp)
                n = int(round(frac * x.shape[-1]))
                if n > 0:
                    self.dilated(xp[..., : n + self.dilation])
        filt, gate = a.chunk(2, dim=1)
        z = torch.tanh(filt) * torch.sigmoid(gate)
        if self.res is None:
            return x, self.skip(z)
        return x + self.res(z), self.skip(z)


class WaveNet(nn.Module):
    def __init__(self, classes, channels, skip_channels, layers, extra=0.0):
        super().__init__()
        self.embed = nn.Embedding(classes, channels)
        self.layers = nn.ModuleList(
            ResidualLayer(channels, skip_channels, 2 ** (i % DILATION_CYCLE), extra,
                          last=i == layers - 1)
            for i in range(layers))
        self.head1 = nn.Conv1d(skip_channels, skip_channels, kernel_size=1)
        self.head2 = nn.Conv1d(skip_channels, classes, kernel_size=1)

    def forward(self, x):                           # x: [B, T] classes -> logits [B, Q, T]
        h = self.embed(x).transpose(1, 2)
        skips = 0
        for layer in self.layers:
            h, s = layer(h)
            skips = skips + s
        return self.head2(F.relu(self.head1(F.relu(skips))))


def make_waves(b, t, classes, gen):
    """``b`` mu-law quantised sequences of ``t`` samples (int64 classes)."""
    n_comp = 4
    pos = torch.arange(t, dtype=torch.float32)
    period = 8 + 92 * torch.rand(b, n_comp, 1, generator=gen)
    amp = torch.rand(b, n_comp, 1, generator=gen)
    amp = amp * (torch.rand(b, n_comp, 1, generator=gen) < 0.75)      # 2-4 components mostly
    amp[:, 0] += 0.3
    phase = 2 * math.pi * torch.rand(b, n_comp, 1, generator=gen)
    wave = (amp * torch.sin(2 * math.pi * pos / period + phase)).sum(1)
    env_period = 300 + 700 * torch.rand(b, 1, generator=gen)
    env = 0.6 + 0.4 * torch.sin(2 * math.pi * pos / env_period
                                + 2 * math.pi * torch.rand(b, 1, generator=gen))
    wave = wave * env / amp.sum(1)
    wave = wave + 0.01 * torch.randn(b, t, generator=gen)
    wave = wave.clamp(-1, 1)
    mu = classes - 1
    y = torch.sign(wave) * torch.log1p(mu * wave.abs()) / math.log1p(mu)
    return ((y + 1) / 2 * mu + 0.5).long().clamp(0, mu)


def start_hog(stop):
    def spin():
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        while not stop.is_set():
            a @ b
    th = threading.Thread(target=spin, name="hog", daemon=True)
    th.start()
    return th


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--channels", type=int, default=64)
    p.add_argument("--skip-channels", type=int, default=128)
    p.add_argument("--layers", type=int, default=10)
    p.add_argument("--classes", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--opt", choices=("adam", "sgd"), default="adam")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--wd", type=float, default=0.01)
    p.add_argument("--clip", type=float, default=1.0, help="global grad-norm clip, 0 = off")
    p.add_argument("--bucket", action="store_true", help="all-reduce flat buckets of gradients")
    p.add_argument("--bucket-mb", type=float, default=1.0)
    p.add_argument("--sync-every", type=int, default=1, help="microbatches per step")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--clip-sleep-ms", type=float, default=0.0)
    p.add_argument("--grad-noise", type=float, default=0.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.5)
    args = p.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 step and warms up 1)")
    if args.sync_every < 1 or args.batch < 1 or args.layers < 1 or args.seq < 16:
        p.error("--sync-every, --batch and --layers must be >= 1, --seq >= 16")
    if args.classes < 2 or args.channels < 1 or args.skip_channels < 1 or args.bucket_mb <= 0:
        p.error("bad model shape or --bucket-mb")
    faults = (args.factor != 1 or args.sleep_ms or args.hog or args.clip_sleep_ms
              or args.grad_noise)
    if faults and args.slow_rank < 0:
        p.error("--factor, --sleep-ms, --hog, --clip-sleep-ms and --grad-noise need --slow-rank")
    if args.slow_rank >= world or args.big_rank >= world:
        p.error(f"--slow-rank and --big-rank must be below the world size ({world})")
    if args.factor < 1 or min(args.sleep_ms, args.clip_sleep_ms, args.grad_noise,
                               args.seq_sigma) < 0 or args.big <= 0:
        p.error("--factor >= 1; sleeps, --grad-noise, --seq-sigma >= 0; --big > 0")
    lr = args.lr if args.lr is not None else (2e-3 if args.opt == "adam" else 0.5)

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)
    extra = (args.factor - 1) * EXTRA_PER_UNIT if slow else 0.0
    model = WaveNet(args.classes, args.channels, args.skip_channels, args.layers, extra)
    params = [q for q in model.parameters()]
    with torch.no_grad():
        for q in params:
            dist.broadcast(q, 0)

    # ---- gradient sync: hooks that launch async all-reduces during backward ----
    works = []                      # (Work, bucket index or None) of this step
    state = {"sync": False}
    noise_gen = torch.Generator().manual_seed(1000 + rank)

    def grad_noise_work(g):
        # the slow rank's extra elementwise work on a gradient: F noisy copies of it, drawn in
        # one go (F whole rows, then a part-row for the fraction); the result is not used
        whole, frac = divmod(args.grad_noise, 1.0)
        flat = g.reshape(-1)
        if whole:
            torch.randn(int(whole), flat.numel(), generator=noise_gen).mul_(1e-3).add_(flat)
        n = int(round(frac * flat.numel()))
        if n > 0:
            torch.randn(n, generator=noise_gen).mul_(1e-3).add_(flat[:n])

    buckets, bucket_of, ready = [], {}, []
    if args.bucket:
        limit = args.bucket_mb * 2 ** 20
        cur, size = [], 0
        for q in reversed(params):              # roughly the order backward produces them
            cur.append(q)
            size += q.numel() * q.element_size()
            if size >= limit:
                buckets.append(cur)
                cur, size = [], 0
        if cur:
            buckets.append(cur)
        for i, bk in enumerate(buckets):
            for q in bk:
                bucket_of[q] = i
        ready = [0] * len(buckets)
        flats = [None] * len(buckets)

    def hook(q):
        if not state["sync"]:
            return                              # accumulating: no communication yet
        if slow and args.grad_noise > 0:
            grad_noise_work(q.grad)
        if not args.bucket:
            works.append((dist.all_reduce(q.grad, async_op=True), None))
            return
        i = bucket_of[q]
        ready[i] += 1
        if ready[i] == len(buckets[i]):
            flats[i] = torch.cat([r.grad.reshape(-1) for r in buckets[i]])
            works.append((dist.all_reduce(flats[i], async_op=True), i))

    for q in params:
        q.register_post_accumulate_grad_hook(hook)

    def finish_sync():
        for w, _ in works:
            w.wait()
        if args.bucket:
            for i, bk in enumerate(buckets):
                flat = flats[i].div_(world)
                off = 0
                for q in bk:
                    n = q.numel()
                    q.grad.copy_(flat[off:off + n].view_as(q.grad))
                    off += n
                ready[i] = 0
                flats[i] = None
        else:
            for q in params:
                q.grad.div_(world)
        works.clear()

    # ---- the optimizer, by hand ----
    bufs = [torch.zeros_like(q) for q in params]            # momentum, or Adam's m
    sq = [torch.zeros_like(q) for q in params] if args.opt == "adam" else None
    beta1, beta2, eps = 0.9, 0.99, 1e-8
    opt_state = {"t": 0}

    @torch.no_grad()
    def update():
        grads = [q.grad for q in params]
        total = torch.stack([g.norm() for g in grads]).norm()
        if args.clip > 0:
            coef = (args.clip / (total + 1e-6)).clamp(max=1.0)
            for g in grads:
                g.mul_(coef)
        opt_state["t"] += 1
        t = opt_state["t"]
        if args.opt == "sgd":
            for q, g, buf in zip(params, grads, bufs):
                if args.wd:
                    g = g.add(q, alpha=args.wd)
                buf.mul_(0.9).add_(g)
                q.add_(buf, alpha=-lr)
        else:
            bc1, bc2 = 1 - beta1 ** t, 1 - beta2 ** t
            for q, g, m, v in zip(params, grads, bufs, sq):
                if args.wd:
                    q.mul_(1 - lr * args.wd)
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = (v / bc2).sqrt_().add_(eps)
                q.addcdiv_(m, denom, value=-lr / bc1)
        for q in params:
            q.grad = None
        return total

    def step_shape(step):
        b, t = args.batch, args.seq
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed((args.seed * 7919 + rank) * 100_003 + step)
            t = int(round(t * math.exp(args.seq_sigma * torch.randn((), generator=g).item())))
            t = min(max(64, t), 4 * args.seq)
        if rank == args.big_rank:
            b = max(1, int(round(args.big * b)))
        return b, t

    def get_batch(step, micro, b, t):
        g = torch.Generator().manual_seed(((args.seed * 1009 + rank) * 100_003 + step) * 97 + micro)
        wav = make_waves(b, t + 1, args.classes, g)
        return wav[:, :-1], wav[:, 1:]

    if rank == 0:
        n = sum(q.numel() for q in params)
        nb = f", {len(buckets)} buckets" if args.bucket else ""
        print(f"WaveNet {n / 1e6:.2f}M params in {len(params)} tensors ({4 * n / 2**20:.2f} MB), "
              f"{args.layers} layers, C {args.channels}, S {args.skip_channels}, Q {args.classes}, "
              f"opt {args.opt} lr {lr}, world {world}{nb}, sync every {args.sync_every}", flush=True)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    step_ms, wait_ms = [], []
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2)
    t_start = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                record_shapes=args.shapes) as prof:
        for step in range(args.steps):
            t0 = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            b, t = step_shape(step)
            loss_sum = 0.0
            for micro in range(args.sync_every):
                state["sync"] = micro == args.sync_every - 1
                with record_function("data"):
                    x, y = get_batch(step, micro, b, t)
                with record_function("forward"):
                    logits = model(x)
                    loss = F.cross_entropy(logits, y) / args.sync_every
                with record_function("backward"):
                    loss.backward()
                loss_sum += loss.detach()
            t1 = time.perf_counter()
            with record_function("grad_sync"):
                finish_sync()
            t2 = time.perf_counter()
            with record_function("optimizer"):
                if slow and args.clip_sleep_ms > 0:
                    time.sleep(args.clip_sleep_ms / 1000)
                gnorm = update()
            prof.step()
            t3 = time.perf_counter()
            step_ms.append((t3 - t0) * 1000)
            wait_ms.append((t2 - t1) * 1000)
            if rank == 0:
                print(f"step {step} batch {b}x{t} loss {float(loss_sum):.4f} "
                      f"gnorm {float(gnorm):.3f} {step_ms[-1]:.0f} ms", flush=True)
    prof.export_chrome_trace(os.path.join(args.out, f"trace-rank{rank}.json"))
    if hog is not None:
        stop.set()
        hog.join()
    elapsed = time.perf_counter() - t_start

    # per-rank timing of the traced steps, and a check that the weights agree everywhere
    traced = slice(2, None)
    mine = torch.tensor([statistics.median(step_ms[traced]),
                         statistics.median([s - w for s, w in zip(step_ms[traced], wait_ms[traced])])])
    table = [torch.zeros(2) for _ in range(world)]
    dist.all_gather(table, mine)
    with torch.no_grad():
        flat = torch.cat([q.reshape(-1) for q in params])
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        spread = (hi - lo).max().item()
    if rank == 0:
        for r, row in enumerate(table):
            print(f"rank {r}: median step {row[0]:.1f} ms, own (step - grad_sync) {row[1]:.1f} ms",
                  flush=True)
        print(f"done: {args.steps} steps in {elapsed:.1f} s, weight spread across ranks "
              f"{spread:.2e}, traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
