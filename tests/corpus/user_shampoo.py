"""MLP-Mixer image classifier trained data-parallel with a distributed Shampoo optimizer.

(calibration table at the end of this docstring)

What it is
----------
A user who read Meta's ``distributed_shampoo`` paper (Shi et al. 2023, "A Distributed
Data-Parallel PyTorch Implementation of the Distributed Shampoo Optimizer") and wrote the
idea by hand for a small MLP-Mixer: no DDP, no torch.optim. CPU, gloo, 4 processes
(``init_process_group("gloo")``), ``OMP_NUM_THREADS=1``.

Data: synthetic 10-class 32x32 RGB images (a smooth per-class prototype, a random shift,
a random horizontal flip and pixel noise), cut into 4x4 patches (64 tokens of 48 values).
Every rank draws its own batch each step from a generator seeded by (seed, rank, step).

Model: MLP-Mixer (Tolstikhin et al. 2021): a linear patch stem (48 -> ``--width``),
``--depth`` mixer blocks (LayerNorm, token-mixing MLP 64 -> ``--token-hidden`` -> 64,
LayerNorm, channel-mixing MLP ``--width`` -> ``--channel-hidden`` -> ``--width``, GELU,
residuals), LayerNorm, mean pool, a linear head to 10 classes.

Optimizer (``ShampooDP`` below), per step:

* ``allreduce_grads``: the gradients (pre-scaled by the rank's share of the global batch)
  are flattened into ``--buckets`` (1) flat buffers plus one count, each bucket one
  blocking ``dist.all_reduce`` (SUM), then unflattened;
* ``shampoo_stats``: every 2-D parameter is cut into blocks of at most
  ``--block-size`` x ``--block-size`` (128); for EVERY block on EVERY rank the Kronecker
  factors are accumulated: ``L = b2 L + G G^T``, ``R = b2 R + G^T G`` (``--beta2`` 1.0 as
  in AdaGrad). 1-D parameters (biases, LayerNorm) are "diagonal" blocks: Adam only;
* blocks (2-D and 1-D) are assigned round-robin to the ranks in parameter order, once; the
  block shapes differ (128x128, 128x64, 128x48, 10x128, 1-D), so each rank's share is
  naturally uneven -- normal workload, not a fault;
* ``shampoo_roots`` (only on precondition steps, every ``--precond-every`` K = 3 steps:
  steps 2, 5, 8 of the default 10, all inside the traced window): each rank computes,
  for its own blocks only, the inverse 4th roots ``(L + eps I)^{-1/4}`` and
  ``(R + eps I)^{-1/4}`` by ``torch.linalg.eigh`` in float64 (``eigh`` ranges), then
  ``share_roots`` shares them: one ``dist.all_gather`` of each rank's roots packed into a
  flat buffer padded to the largest share (``--share allgather``, default) or one
  ``dist.broadcast`` per block from its owner (``--share broadcast``);
* ``precondition``: each rank, for its own blocks only, computes the Shampoo direction
  ``P = L^{-1/4} G R^{-1/4}`` (identity roots before the first precondition step), the
  Adam grafting direction ``A = G / (sqrt(v_hat) + eps)`` (per-block second moment owned by
  that rank) and grafts ``P`` onto ``A``'s norm (``--grafting adam``) or ``G``'s
  (``--grafting sgd``); then momentum (``--beta1`` 0.9) on the grafted direction and
  decoupled weight decay;
* ``allgather_updates``: the ranks' updates packed into flat buffers padded to the largest
  share, one ``dist.all_gather`` (ZeRO-1-like: the optimizer work and its state are
  split, the updates replicated), then ``apply``: every rank subtracts lr x update from
  every parameter.
* ``metrics``: one small ``all_reduce`` of (loss sum, correct, n) for the log.

So per step: ``--buckets`` all-reduces of all gradients (~0.6 MB at the defaults) + one
all_gather of updates (~4 x 0.15 MB) + one all-reduce of 3 floats; on precondition steps
also one all_gather of roots (~4 x 1 MB) or one broadcast per 2-D block (26). All blocking.

``record_function`` ranges per step: ``sleep`` (fault only), ``data``, ``forward``,
``backward``, ``optimizer`` (with ``allreduce_grads``, ``shampoo_stats``,
``shampoo_roots`` > ``eigh``, ``share_roots``, ``precondition``, ``allgather_updates``,
``apply`` inside), ``metrics``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2,
repeat=1)``, ``prof.step()`` per step, ``record_shapes`` with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. Every step is timed with ``time.perf_counter``; at
the end rank 0 prints every rank's median step over the traced steps (all, plain steps,
precondition steps) and its median "busy" time (the step minus the time inside the
collectives).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Job size / variety: ``--width`` (128), ``--depth`` (4), ``--token-hidden`` (128),
``--channel-hidden`` (256), ``--batch`` (16 images per rank), ``--block-size`` (128),
``--precond-every`` (3), ``--share {allgather,broadcast}``, ``--buckets`` (1),
``--grafting {adam,sgd}``, ``--lr``, ``--beta1``, ``--beta2``, ``--eps``,
``--weight-decay``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's forward and backward run F times: F-1 extra
  forward passes of the model on the same batch inside ``forward`` (the fractional part
  on that fraction of the batch), and their backward (``torch.autograd.grad``, results
  discarded) inside ``backward`` -- the same matmuls, discarded;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step in ``sleep`` at the start of
  the step (before the data);
* ``--data-sleep-ms MS``: a slow data path: the rank sleeps MS inside ``data`` each step;
* ``--hog``: a busy neighbour thread doing 64x64 matmuls for the whole run (stopped and
  joined before exit);
* ``--slow-eigh-ms MS`` (family fault, a host-side delay): on precondition steps only, the
  rank sleeps MS (``record_function("sleep")``) inside ``shampoo_roots`` before its root
  computations; the peers wait in ``share_roots``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's batch each step is ``round(batch * lognormal(0, S))``
  images (drawn from (seed, rank, step)); the gradient is weighted by the rank's share;
* ``--big-rank K --big X``: rank K's batch is X times larger, permanently.

Calibration
-----------
2-core box shared with another helper's 4-process jobs (load 3-9), 4 ranks, 10 steps (8
traced), defaults unless said. Runs were made in rounds, each fault next to a healthy
default run ("base") of the same round; "step" is the range of the 4 ranks' median step
(all equal within a few ms: every rank meets every other 3-4 times a step), "busy" the
slowed (or big) rank's median time outside the collectives / the other ranks'.

  round (load)   setting                             step ms    busy slow / others ms
  1 (8-9)        base (4 runs)                       179-358    113-253 (all ranks)
                 --factor 2 (r1)                     292-310    210 / 137-181
                 --factor 3 (r2)                     354-361    291 / 167-193
                 --sleep-ms 60 (r3)                  347-352    245 / 184-214
                 --data-sleep-ms 80 (r0)             329-343    263 / 186-206
                 --slow-eigh-ms 300 (r1, K=3)        307-327    238 / 160-175  (precond steps 492-548)
                 --hog (r2)                          280-288    187 / 125-149
                 --seq-sigma 0.7                     405-414    151-227, varies per step
                 --big-rank 3 --big 2                385-397    318 / 209-227
  2 (6)          base (4 runs)                       184-281    107-192 (all ranks)
                 --factor 4 (r0)                     318-328    260 / 132-136
                 --factor 5 (r3)                     605-611    556 / 167-190
                 --sleep-ms 120 (r3)                 312-324    265 / 151-168
                 --data-sleep-ms 150 (r0)            360-370    310 / 143-178
                 --slow-eigh-ms 400 (r1, K=2)        423-430    373 / 175-197  (precond steps 707-718, plain 245-252)
                 --hog (r2)                          400-406    330 / 180-205
                 --big-rank 1 --big 3                211-231    177 / 90-116
                 healthy --share broadcast --block-size 64         120-135
                 healthy --width 160 --buckets 4 --shapes          212-247
                 healthy --grafting sgd --depth 6 --precond-every 2  254-261
  3 (3)          base (3 runs)                       118-167    85-100 (all ranks)
                 --slow-eigh-ms 200 (r0, K=1)        347-351    315 / 97-108
                 --factor 4 --share broadcast (r2)   231-259    194 / 80-89
                 --factor 5 --width 160 (r1)         314-323    281 / 93-122
                 --sleep-ms 150 (r1)                 231-245    202 / 54-73
                 --data-sleep-ms 150 (r2)            232-245    209 / 70-73
                 healthy --batch 24 --precond-every 1 --token-hidden 192   224-230
                 --seq-sigma 0.5 --share broadcast   144-153    61-89, varies per step

Reading: the box's noise (a base ranged 179-358 ms in one round) swamps --factor <= 3
and sleeps <= 80 ms; --factor 4-5, --sleep-ms / --data-sleep-ms 120-150, --hog and the
eigh sleep with K <= 2 cost the step >= +20% against their round's base, and the busy
column names the slowed rank in every fault run (also the small ones). With the default
K=3 only 3 of the 8 traced steps precondition, so --slow-eigh-ms barely moves the median:
use it with --precond-every 1 or 2. A slowed rank's extra work costs the step less than
its length: while it computes, its peers block in gloo and give it their CPU share.
Healthy runs: the natural round-robin imbalance shows in the shares printed at start
(numel of updates per rank 106752/66826/99456/66816, roots 248164/131072/212992/131072 at
the defaults), and precondition steps are 30-100 ms longer than plain ones (eigh, roots
exchange; more with --share broadcast). Wall per job 8-25 s (the users97 battery: 8-17 s a
job, 3 min 49 s for its 16); traces 9 MB per rank at the defaults, 15 MB with --block-size 64
(more blocks), 18 MB with --width 160 --shapes.
Loss falls from 2.3 to ~0.8 (accuracy ~0.75) in 10 steps at the defaults.
"""

import argparse
import math
import os
import statistics
import sys
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
    # model / data
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--token-hidden", type=int, default=128)
    p.add_argument("--channel-hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--classes", type=int, default=10)
    # optimizer
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=1.0, help="factor decay (1.0: AdaGrad sum)")
    p.add_argument("--graft-beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--root-eps", type=float, default=1e-6)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--precond-every", type=int, default=3)
    p.add_argument("--share", choices=["allgather", "broadcast"], default="allgather")
    p.add_argument("--buckets", type=int, default=1)
    p.add_argument("--grafting", choices=["adam", "sgd"], default="adam")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--slow-eigh-ms", type=float, default=0.0)
    # imbalance
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    return p.parse_args()


# ---------------------------------------------------------------- model ----

class MixerBlock(nn.Module):
    def __init__(self, tokens, width, token_hidden, channel_hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.tok_fc1 = nn.Linear(tokens, token_hidden)
        self.tok_fc2 = nn.Linear(token_hidden, tokens)
        self.ln2 = nn.LayerNorm(width)
        self.ch_fc1 = nn.Linear(width, channel_hidden)
        self.ch_fc2 = nn.Linear(channel_hidden, width)

    def forward(self, x):                     # x: (B, T, C)
        y = self.ln1(x).transpose(1, 2)       # (B, C, T)
        y = self.tok_fc2(F.gelu(self.tok_fc1(y))).transpose(1, 2)
        x = x + y
        return x + self.ch_fc2(F.gelu(self.ch_fc1(self.ln2(x))))


class Mixer(nn.Module):
    def __init__(self, a):
        super().__init__()
        tokens = (a.image // a.patch) ** 2
        self.stem = nn.Linear(3 * a.patch * a.patch, a.width)
        self.blocks = nn.ModuleList(
            MixerBlock(tokens, a.width, a.token_hidden, a.channel_hidden) for _ in range(a.depth))
        self.ln = nn.LayerNorm(a.width)
        self.head = nn.Linear(a.width, a.classes)

    def forward(self, patches):
        x = self.stem(patches)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x).mean(dim=1))


# ----------------------------------------------------------------- data ----

class ShapesData:
    """Ten smooth class prototypes; a sample is a shifted, maybe flipped, noisy prototype."""

    def __init__(self, a):
        g = torch.Generator().manual_seed(4242 + a.seed)
        low = torch.randn(a.classes, 3, 8, 8, generator=g)
        self.protos = F.interpolate(low, size=(a.image, a.image), mode="bilinear",
                                    align_corners=False)
        self.a = a

    def batch(self, n, gen, delay_s=0.0):
        if delay_s > 0:
            time.sleep(delay_s)   # slow decode / network file system
        a = self.a
        y = torch.randint(0, a.classes, (n,), generator=gen)
        img = self.protos[y].clone()
        shifts = torch.randint(-3, 4, (n, 2), generator=gen).tolist()
        flips = torch.rand(n, generator=gen) < 0.5
        for i, (dy, dx) in enumerate(shifts):
            img[i] = torch.roll(img[i], shifts=(dy, dx), dims=(1, 2))
        img[flips] = img[flips].flip(-1)
        img = img + 0.8 * torch.randn(img.shape, generator=gen)
        img = (img - img.mean(dim=(1, 2, 3), keepdim=True)) / img.std(dim=(1, 2, 3), keepdim=True)
        p = a.patch
        patches = img.unfold(2, p, p).unfold(3, p, p)          # (n, 3, H/p, W/p, p, p)
        patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(n, -1, 3 * p * p)
        return patches.contiguous(), y


# ------------------------------------------------------------ optimizer ----

class Block:
    """A slice of one parameter: rows r0:r1, cols c0:c1 (2-D) or elements r0:r1 (1-D)."""

    def __init__(self, pi, sl, shape, owner):
        self.pi, self.sl, self.shape, self.owner = pi, sl, shape, owner
        self.numel = math.prod(shape)
        self.kron = len(shape) == 2


class ShampooDP:
    def __init__(self, params, a, rank, world, comm_time):
        self.params = list(params)
        self.a, self.rank, self.world = a, rank, world
        self.comm_time = comm_time
        bs = a.block_size
        self.blocks = []
        for pi, p in enumerate(self.params):
            if p.dim() == 2:
                m, n = p.shape
                for r0 in range(0, m, bs):
                    for c0 in range(0, n, bs):
                        r1, c1 = min(m, r0 + bs), min(n, c0 + bs)
                        self.blocks.append(((pi, (slice(r0, r1), slice(c0, c1)), (r1 - r0, c1 - c0))))
            else:
                self.blocks.append((pi, (slice(0, p.numel()),), (p.numel(),)))
        # round-robin assignment in parameter order (uneven: the shapes differ)
        self.blocks = [Block(pi, sl, shape, i % world) for i, (pi, sl, shape) in enumerate(self.blocks)]
        self.mine = [b for b in self.blocks if b.owner == rank]
        self.kron = [b for b in self.blocks if b.kron]
        # Kronecker factors for every 2-D block, on every rank
        for b in self.kron:
            m, n = b.shape
            b.L = torch.zeros(m, m)
            b.R = torch.zeros(n, n)
            b.Lroot = None
            b.Rroot = None
        # grafting / momentum state only for the rank's own blocks
        for b in self.mine:
            b.v = torch.zeros(b.shape)
            b.mom = torch.zeros(b.shape)
        self.share_numel = [sum(b.numel for b in self.blocks if b.owner == r) for r in range(world)]
        self.root_numel = [sum(b.shape[0] ** 2 + b.shape[1] ** 2 for b in self.kron if b.owner == r)
                           for r in range(world)]
        self.t = 0
        # gradient buckets: contiguous runs of parameters of about equal size
        total = sum(p.numel() for p in self.params)
        nb = max(1, a.buckets)
        self.buckets, cur, acc = [], [], 0
        for p in self.params:
            cur.append(p)
            acc += p.numel()
            if acc >= total * (len(self.buckets) + 1) / nb and len(self.buckets) < nb - 1:
                self.buckets.append(cur)
                cur = []
        if cur:
            self.buckets.append(cur)

    def _comm(self, fn, *args, **kw):
        t0 = time.perf_counter()
        out = fn(*args, **kw)
        self.comm_time[0] += time.perf_counter() - t0
        return out

    def grad_of(self, b):
        return self.params[b.pi].grad[b.sl]

    @torch.no_grad()
    def allreduce_grads(self, local_n):
        """Weighted average: each rank pre-scales by its batch, divides by the global batch."""
        n_total = None
        for i, bucket in enumerate(self.buckets):
            flat = torch.cat([p.grad.reshape(-1) for p in bucket] + ([torch.tensor([float(local_n)])] if i == 0 else []))
            if i == 0:
                flat[:-1].mul_(local_n)
            else:
                flat.mul_(local_n)
            self._comm(dist.all_reduce, flat)
            if i == 0:
                n_total = flat[-1].item()
                flat = flat[:-1]
            flat.div_(n_total)
            off = 0
            for p in bucket:
                k = p.numel()
                p.grad.copy_(flat[off:off + k].view_as(p.grad))
                off += k
        return n_total

    @torch.no_grad()
    def accumulate_stats(self):
        b2 = self.a.beta2
        for b in self.kron:
            g = self.grad_of(b)
            if b2 < 1.0:
                b.L.mul_(b2).addmm_(g, g.t(), alpha=1 - b2)
                b.R.mul_(b2).addmm_(g.t(), g, alpha=1 - b2)
            else:
                b.L.addmm_(g, g.t())
                b.R.addmm_(g.t(), g)

    def _inv_root(self, mat):
        eps = self.a.root_eps
        m = mat.double()
        m = m + eps * m.diagonal().max().clamp(min=1.0) * torch.eye(m.shape[0], dtype=m.dtype)
        lam, q = torch.linalg.eigh(m)
        lam = lam.clamp(min=eps)
        return ((q * lam.pow(-0.25)) @ q.t()).float()

    @torch.no_grad()
    def compute_roots(self, slow_eigh_s):
        if slow_eigh_s > 0:
            with record_function("sleep"):
                time.sleep(slow_eigh_s)
        for b in self.mine:
            if b.kron:
                with record_function("eigh"):
                    b.Lroot = self._inv_root(b.L)
                    b.Rroot = self._inv_root(b.R)

    @torch.no_grad()
    def share_roots(self):
        if self.a.share == "broadcast":
            for b in self.kron:
                m, n = b.shape
                if b.owner == self.rank:
                    buf = torch.cat([b.Lroot.reshape(-1), b.Rroot.reshape(-1)])
                else:
                    buf = torch.empty(m * m + n * n)
                self._comm(dist.broadcast, buf, src=b.owner)
                b.Lroot = buf[:m * m].view(m, m)
                b.Rroot = buf[m * m:].view(n, n)
            return
        size = max(self.root_numel)
        mine = torch.zeros(size)
        off = 0
        for b in self.mine:
            if b.kron:
                for r in (b.Lroot, b.Rroot):
                    mine[off:off + r.numel()] = r.reshape(-1)
                    off += r.numel()
        bufs = [torch.empty(size) for _ in range(self.world)]
        self._comm(dist.all_gather, bufs, mine)
        offs = [0] * self.world
        for b in self.kron:
            m, n = b.shape
            buf, o = bufs[b.owner], offs[b.owner]
            b.Lroot = buf[o:o + m * m].view(m, m)
            b.Rroot = buf[o + m * m:o + m * m + n * n].view(n, n)
            offs[b.owner] = o + m * m + n * n

    @torch.no_grad()
    def precondition(self):
        """The rank's own blocks -> their updates, packed flat (padded to the largest share)."""
        a = self.a
        self.t += 1
        bc2 = 1 - a.graft_beta2 ** self.t
        out = torch.zeros(max(self.share_numel))
        off = 0
        for b in self.mine:
            g = self.grad_of(b)
            b.v.mul_(a.graft_beta2).addcmul_(g, g, value=1 - a.graft_beta2)
            adam = g / ((b.v / bc2).sqrt() + a.eps)
            graft = adam if a.grafting == "adam" else g
            if b.kron and b.Lroot is not None:
                d = b.Lroot @ g @ b.Rroot
                d = d * (graft.norm() / d.norm().clamp(min=1e-16))
            else:
                d = graft
            b.mom.mul_(a.beta1).add_(d)
            p = self.params[b.pi][b.sl]
            upd = b.mom + a.weight_decay * p if b.kron else b.mom
            out[off:off + b.numel] = upd.reshape(-1)
            off += b.numel
        return out

    @torch.no_grad()
    def gather_and_apply(self, mine, lr):
        with record_function("allgather_updates"):
            bufs = [torch.empty_like(mine) for _ in range(self.world)]
            self._comm(dist.all_gather, bufs, mine)
        with record_function("apply"):
            offs = [0] * self.world
            for b in self.blocks:
                o = offs[b.owner]
                upd = bufs[b.owner][o:o + b.numel].view(b.shape)
                self.params[b.pi][b.sl].sub_(upd, alpha=lr)
                offs[b.owner] = o + b.numel
            for p in self.params:
                p.grad = None


# ------------------------------------------------------------------ hog ----

def start_hog(stop):
    def work():
        a = torch.randn(64, 64)
        b = torch.randn(64, 64) / 8
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=work, name="neighbour-hog", daemon=True)
    th.start()
    return th


# ----------------------------------------------------------------- main ----

def main():
    a = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == a.slow_rank
    os.makedirs(a.out, exist_ok=True)

    torch.manual_seed(a.seed)        # same init everywhere
    model = Mixer(a)
    params = [p for p in model.parameters()]
    comm_time = [0.0]
    opt = ShampooDP(params, a, rank, world, comm_time)
    data = ShapesData(a)
    base_batch = max(1, round(a.batch * a.big)) if rank == a.big_rank else a.batch

    extra = max(0.0, a.factor - 1.0) if slow else 0.0
    reps, part = int(extra), extra - int(extra)
    stop = threading.Event()
    hog = start_hog(stop) if (slow and a.hog) else None

    if rank == 0:
        nparam = sum(p.numel() for p in params)
        print(f"[shampoo] world={world} params={nparam / 1e6:.2f}M blocks={len(opt.blocks)} "
              f"(2-D {len(opt.kron)}) share numel per rank={opt.share_numel} "
              f"roots numel per rank={opt.root_numel}", flush=True)

    prof = profile(activities=[ProfilerActivity.CPU],
                   schedule=schedule(wait=1, warmup=1, active=max(1, a.steps - 2), repeat=1),
                   record_shapes=a.shapes)
    times, busy, kinds = [], [], []
    dist.barrier()
    try:
        with prof:
            for step in range(a.steps):
                t0 = time.perf_counter()
                comm_time[0] = 0.0
                precond = (step + 1) % a.precond_every == 0
                if slow and a.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(a.sleep_ms / 1000.0)
                with record_function("data"):
                    gen = torch.Generator().manual_seed(a.seed * 1_000_003 + rank * 7_919 + step)
                    n = base_batch
                    if a.seq_sigma > 0:
                        n = max(2, round(base_batch * math.exp(a.seq_sigma * torch.randn((), generator=gen).item())))
                    x, y = data.batch(n, gen, a.data_sleep_ms / 1000.0 if slow else 0.0)
                with record_function("forward"):
                    logits = model(x)
                    loss = F.cross_entropy(logits, y)
                    burn = []
                    for _ in range(reps):          # a slower device: the same passes again
                        burn.append(F.cross_entropy(model(x), y))
                    if part > 0 and int(n * part) > 0:
                        k = int(n * part)
                        burn.append(F.cross_entropy(model(x[:k]), y[:k]))
                with record_function("backward"):
                    loss.backward()
                    for l2 in burn:
                        torch.autograd.grad(l2, params)
                    del burn
                with record_function("optimizer"):
                    with record_function("allreduce_grads"):
                        opt.allreduce_grads(n)
                    with record_function("shampoo_stats"):
                        opt.accumulate_stats()
                    if precond:
                        with record_function("shampoo_roots"):
                            opt.compute_roots(a.slow_eigh_ms / 1000.0 if slow else 0.0)
                        with record_function("share_roots"):
                            opt.share_roots()
                    with record_function("precondition"):
                        mine = opt.precondition()
                    lr = a.lr * min(1.0, (step + 1) / 3)
                    opt.gather_and_apply(mine, lr)
                with record_function("metrics"):
                    m = torch.tensor([loss.item() * n, (logits.argmax(1) == y).sum().item(), float(n)])
                    opt._comm(dist.all_reduce, m)
                dt = time.perf_counter() - t0
                times.append(dt)
                busy.append(dt - comm_time[0])
                kinds.append(precond)
                if rank == 0:
                    print(f"step {step:2d} loss {m[0] / m[2]:.4f} acc {m[1] / m[2]:.3f} "
                          f"{'P' if precond else ' '} {1000 * dt:.0f} ms", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(a.out, f"trace_rank{rank}.json"))

    tr = list(zip(times, busy, kinds))[2:] or list(zip(times, busy, kinds))

    def med(v):
        return statistics.median(v) if v else float("nan")

    stats = (med([t for t, _, _ in tr]), med([t for t, _, k in tr if not k]),
             med([t for t, _, k in tr if k]), med([b for _, b, _ in tr]))
    every = [None] * world
    dist.all_gather_object(every, stats)
    if rank == 0:
        for i, name in enumerate(("median step", "median plain step", "median precond step", "median busy")):
            print(f"{name} ms per rank: " + " ".join(f"r{r}={1000 * s[i]:.1f}" for r, s in enumerate(every)),
                  flush=True)
    dist.barrier()
    dist.destroy_process_group()
    # leave at once: on this box a finished rank now and then aborted in the interpreter's
    # teardown ("terminate called without an active exception", gloo's threads) after all of
    # its output was written
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
