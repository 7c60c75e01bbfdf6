"""A data-parallel job whose gradient synchronisation is written by hand, as people on multi-node
clusters without a good interconnect write it: a hierarchical all-reduce (reduce inside the
node, all-reduce among the node leaders, broadcast inside the node), a flat all-reduce to
compare with, or local SGD that averages the parameters only every few steps. CPUs and gloo.

The model is a small MLP-Mixer classifier on synthetic data: each sample is ``--patches`` patches
of 48 values, embedded to ``--width`` channels, then ``--depth`` Mixer blocks (pre-norm; a
token-mixing MLP ``P -> 2P -> P`` across the patches, a channel-mixing MLP ``W -> 4W -> W``,
residuals around both), mean pooling and a linear head over 16 classes. The labels come from a
fixed random teacher (a linear map of the patches' mean), the same on every rank, so there is
something to learn. Every rank draws its own
batch of ``--batch`` samples a step and steps an AdamW optimizer.

The gradients are flattened into buckets of at most ``--bucket-mb`` MB, filled from the last
parameter to the first (the order in which backward produces them), and each bucket is averaged
over the world with:

- ``--sync hier`` (default): the world is split into ``--nodes`` pretend nodes of consecutive
  ranks (one ``dist.new_group`` each) and the node leaders (local rank 0) into a group of their
  own. Per bucket: ``dist.reduce`` to the leader inside the node, ``all_reduce`` among the
  leaders, ``dist.broadcast`` from the leader inside the node. The leaders take part in all three
  and the others in two, so the leaders do more communication: an imbalance of the method, not
  a fault.
- ``--sync flat``: one ``all_reduce`` per bucket over the world.
- ``--sync localsgd``: no gradient synchronisation at all; every rank steps its own optimizer
  every step and, every ``--period`` steps, the parameters are averaged with one ``all_reduce``
  per bucket over the world (local SGD, as DiLoCo's inner loop without its outer optimizer), so
  most steps hold no collective. The averaging is marked ``record_function("sync")``.

Without ``--overlap`` the buckets are synchronised one after the other after backward, under
``record_function("grad_sync")``. With ``--overlap`` (``hier`` and ``flat``), a
``register_post_accumulate_grad_hook`` on every parameter notices when a bucket's last gradient
has arrived, copies the bucket into its flat buffer and launches its collective with
``async_op=True`` while backward goes on; before the optimizer step all of them are waited on
(``grad_sync``). For ``hier`` the three stages of a bucket depend on each other, so when bucket
``b`` is launched the leader first waits for bucket ``b - 1``'s reduce and launches its
all-reduce among the leaders; the broadcasts are launched, in bucket order, in ``grad_sync``
once each bucket's all-reduce has finished on the leader. Every rank issues the operations of
a group in the same order.

Profiling: ``torch.profiler.profile`` with ``schedule(wait=1, warmup=1, active=steps-2)``, its
``on_trace_ready`` exporting one chrome trace per process, ``<sync>-rank<R>.json`` in ``--out``;
``prof.step()`` after each step; ``record_function`` marks ``forward``, ``backward``,
``grad_sync`` (``hier``/``flat``), ``optimizer``, ``sync`` (``localsgd``) and, with ``--overlap``,
``launch_bucket<i>`` inside backward. At the end rank 0 prints the largest difference of a
parameter across ranks (0 when the synchronisation is right).

Flags:

- ``--out DIR``: where the traces go (created if missing).
- ``--sync {hier,flat,localsgd}`` (hier), ``--nodes N`` (2; must divide the world size),
  ``--bucket-mb MB`` (1.0), ``--overlap``, ``--period H`` (3, for ``localsgd``).
- ``--steps N`` (8; 12 with ``localsgd``, so that the traced steps hold at least 2 averagings),
  ``--width W`` (128), ``--depth D`` (4), ``--batch B`` (32 samples a rank),
  ``--patches P`` (32), ``--lr`` (1e-3), ``--seed S`` (0).
- ``--slow-rank R``: the rank the two faults below apply to (-1: none).
- ``--factor F``: on the slow rank every linear layer of the model computes its matmul again,
  of the same shapes on the same rows, without gradients, results discarded, (F - 1) x 3.6 times
  per call (the fraction carried from one call to the next), all of it in the forward: 3 for
  forward and backward (backward as two forwards), times 1.2 because the matmuls are about 5/6
  of the model's forward + backward CPU time (measured: 1.6 gives 1.57-1.6 x, 1.8 gives 1.76 x).
  That rank is slower on the same work, as a slow GPU is, its whole step's compute about F x
  its peers'.
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step.
- ``--uneven``: each rank's batch is a fixed share of ``--batch`` that differs by rank (0.6, 0.8,
  1.0, 1.4 x with 4 ranks; from 0.6 to 1.4 x otherwise) and the loss is weighted by the rank's
  share of the samples, so that the average of the gradients is the gradient of the mean loss
  over all samples: a data split people make when nodes differ. No rank is slower on the same
  work; the rank with more samples simply has more to do.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_hier_sync.py --out DIR --sync hier --slow-rank 2 --factor 1.6 --overlap
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import record_function

PATCH_DIM = 48
CLASSES = 16


class SlowLinear(nn.Linear):
    """``nn.Linear`` that, on the slow rank, computes its matmul again ``extra`` times (no grad)."""

    extra = 0.0          # extra forward-equivalents per call, set on the slow rank only
    _carry = 0.0         # fraction carried from one call to the next (shared by all layers)

    def forward(self, x):
        y = super().forward(x)
        if SlowLinear.extra > 0:
            SlowLinear._carry += SlowLinear.extra
            n = int(SlowLinear._carry)
            SlowLinear._carry -= n
            with torch.no_grad():
                for _ in range(n):
                    _ = F.linear(x, self.weight, self.bias)
        return y


class MixerBlock(nn.Module):
    def __init__(self, patches, width):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.tok1 = SlowLinear(patches, 2 * patches)
        self.tok2 = SlowLinear(2 * patches, patches)
        self.ln2 = nn.LayerNorm(width)
        self.ch1 = SlowLinear(width, 4 * width)
        self.ch2 = SlowLinear(4 * width, width)

    def forward(self, x):                        # x: [B, P, W]
        h = self.ln1(x).transpose(1, 2)         # [B, W, P]
        x = x + self.tok2(F.gelu(self.tok1(h))).transpose(1, 2)
        return x + self.ch2(F.gelu(self.ch1(self.ln2(x))))


class Mixer(nn.Module):
    def __init__(self, patches, width, depth):
        super().__init__()
        self.embed = SlowLinear(PATCH_DIM, width)
        self.blocks = nn.ModuleList(MixerBlock(patches, width) for _ in range(depth))
        self.ln = nn.LayerNorm(width)
        self.head = SlowLinear(width, CLASSES)

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks:
            h = b(h)
        return self.head(self.ln(h).mean(1))


def make_buckets(params, bucket_mb):
    """Buckets of parameters, last parameter first, each at most ``bucket_mb`` MB (at least one)."""
    limit = int(bucket_mb * 1024 * 1024)
    buckets, cur, size = [], [], 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if cur and size + nbytes > limit:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += nbytes
    if cur:
        buckets.append(cur)
    return buckets


class Bucket:
    def __init__(self, params):
        self.params = params
        self.buf = torch.zeros(sum(p.numel() for p in params))
        self.out = torch.zeros_like(self.buf)   # a non-leader's broadcast lands here
        self.ready = 0
        self.works = {}

    def pack(self, attr="grad"):
        off = 0
        for p in self.params:
            t = getattr(p, attr)
            self.buf[off:off + t.numel()].copy_(t.reshape(-1))
            off += t.numel()

    def unpack(self, src, world, attr="grad"):
        off = 0
        for p in self.params:
            t = getattr(p, attr)
            t.copy_(src[off:off + t.numel()].view_as(t)).div_(world)
            off += t.numel()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--sync", choices=["hier", "flat", "localsgd"], default="hier")
    p.add_argument("--nodes", type=int, default=2, help="pretend nodes (hier); must divide the world")
    p.add_argument("--bucket-mb", type=float, default=1.0, help="gradient bucket size in MB")
    p.add_argument("--overlap", action="store_true", help="launch bucket collectives during backward")
    p.add_argument("--period", type=int, default=3, help="localsgd: average the parameters every H steps")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank that --factor / --sleep-ms apply to")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's matmul work, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--uneven", action="store_true", help="batch size differs by rank (loss weighted)")
    p.add_argument("--steps", type=int, default=None, help="8 (12 with --sync localsgd)")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--patches", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.steps is None:
        args.steps = 12 if args.sync == "localsgd" else 8
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.overlap and args.sync == "localsgd":
        p.error("--overlap applies to --sync hier and flat")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)
    if args.sync == "hier" and world % args.nodes:
        raise SystemExit(f"--nodes {args.nodes} does not divide the world size {world}")

    # the groups: every rank creates every group, in the same order
    per_node = world // args.nodes
    node_groups = [dist.new_group(list(range(n * per_node, (n + 1) * per_node)))
                   for n in range(args.nodes)]
    leaders = [n * per_node for n in range(args.nodes)]
    leader_group = dist.new_group(leaders)
    node = rank // per_node
    node_group, leader = node_groups[node], node * per_node
    is_leader = rank == leader

    # data split
    if args.uneven:
        shares = [0.6, 0.8, 1.0, 1.4] if world == 4 else \
            [0.6 + 0.8 * r / max(1, world - 1) for r in range(world)]
        sizes = [max(1, round(s * args.batch)) for s in shares]
    else:
        sizes = [args.batch] * world
    my_batch = sizes[rank]
    loss_weight = my_batch * world / sum(sizes)   # mean over ranks of the weighted losses = global mean

    torch.manual_seed(args.seed)                 # same weights everywhere
    model = Mixer(args.patches, args.width, args.depth)
    teacher = torch.randn(PATCH_DIM, CLASSES, generator=torch.Generator().manual_seed(args.seed + 12345))
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr)
    if slow and args.factor > 1:
        SlowLinear.extra = (args.factor - 1.0) * 3 * 1.2   # fwd + bwd; matmuls ~5/6 of compute

    buckets = [Bucket(b) for b in make_buckets(params, args.bucket_mb)]
    if rank == 0:
        n = sum(q.numel() for q in params)
        print(f"{args.sync}: {n / 1e6:.2f}M params, {len(buckets)} buckets, batch sizes {sizes}", flush=True)

    # ---- the hand-written synchronisations ----
    def hier_blocking(b):
        b.pack()
        dist.reduce(b.buf, dst=leader, group=node_group)
        if is_leader and len(leaders) > 1:
            dist.all_reduce(b.buf, group=leader_group)
        dist.broadcast(b.buf, src=leader, group=node_group)
        b.unpack(b.buf, world)

    def flat_blocking(b):
        b.pack()
        dist.all_reduce(b.buf)
        b.unpack(b.buf, world)

    # overlapped: launched from the gradient hooks
    def launch(i):
        b = buckets[i]
        b.pack()
        if args.sync == "flat":
            b.works["ar"] = dist.all_reduce(b.buf, async_op=True)
            return
        if is_leader and i > 0 and len(leaders) > 1:    # push the previous bucket on to its next stage
            prev = buckets[i - 1]
            prev.works["red"].wait()
            prev.works["ar"] = dist.all_reduce(prev.buf, group=leader_group, async_op=True)
        b.works["red"] = dist.reduce(b.buf, dst=leader, group=node_group, async_op=True)

    def finish_overlapped():
        if args.sync == "flat":
            for b in buckets:
                b.works["ar"].wait()
                b.unpack(b.buf, world)
            return
        if is_leader and len(leaders) > 1:
            last = buckets[-1]
            last.works["red"].wait()
            last.works["ar"] = dist.all_reduce(last.buf, group=leader_group, async_op=True)
        for b in buckets:
            if is_leader:
                b.works["red"].wait()
                if "ar" in b.works:
                    b.works["ar"].wait()
                b.works["bc"] = dist.broadcast(b.buf, src=leader, group=node_group, async_op=True)
            else:
                b.works["bc"] = dist.broadcast(b.out, src=leader, group=node_group, async_op=True)
        for b in buckets:
            if not is_leader:
                b.works["red"].wait()
            b.works["bc"].wait()
            b.unpack(b.buf if is_leader else b.out, world)

    if args.overlap:
        owner = {}
        for i, b in enumerate(buckets):
            for q in b.params:
                owner[q] = i

        def hook(q):
            i = owner[q]
            buckets[i].ready += 1
            if buckets[i].ready == len(buckets[i].params):
                with record_function(f"launch_bucket{i}"):
                    launch(i)

        for q in params:
            q.register_post_accumulate_grad_hook(hook)

    def average_params():
        with torch.no_grad():
            for b in buckets:
                b.pack("data")
                dist.all_reduce(b.buf)
                b.unpack(b.buf, world, "data")

    def batch_for(step):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 1000 * rank + step)
        x = torch.randn(my_batch, args.patches, PATCH_DIM, generator=g)
        y = (x.mean(1) @ teacher).argmax(-1)
        return x, y

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"{args.sync}-rank{rank}.json"))

    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            x, y = batch_for(step)
            opt.zero_grad(set_to_none=True)
            for b in buckets:
                b.ready, b.works = 0, {}
            with record_function("forward"):
                loss = F.cross_entropy(model(x), y)
            with record_function("backward"):
                (loss * loss_weight).backward()
            if args.sync != "localsgd":
                with record_function("grad_sync"), torch.no_grad():
                    if args.overlap:
                        finish_overlapped()
                    else:
                        for b in buckets:
                            hier_blocking(b) if args.sync == "hier" else flat_blocking(b)
            with record_function("optimizer"):
                opt.step()
            if args.sync == "localsgd" and (step + 1) % args.period == 0:
                with record_function("sync"):
                    average_params()
            prof.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)

    # are the replicas still the same? (for localsgd: right after the last averaging)
    with torch.no_grad():
        flat = torch.cat([q.detach().reshape(-1) for q in params])
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        spread = (hi - lo).abs().max().item()
    if rank == 0:
        print(f"done in {time.perf_counter() - t0:.1f}s, max parameter spread across ranks {spread:.2e}, "
              f"traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
