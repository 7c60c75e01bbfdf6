"""An MLP-Mixer image classifier trained data-parallel with a hand-written butterfly all-reduce.

(calibration table at the end of this docstring)

What it is
----------
Plain data parallelism on 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``) without DDP: every rank holds the whole model, trains on its own
batch, and the gradients are averaged by the user's own all-reduce, the recursive-halving /
recursive-doubling algorithm of Rabenseifner (Thakur, Rabenseifner & Gropp 2005, "Optimization
of collective communication operations in MPICH"), written with point-to-point messages only.
No ``dist.all_reduce`` touches the gradients.

Model: an MLP-Mixer (Tolstikhin et al. 2021) for ``--image`` x ``--image`` RGB images: a
patch embedding (``Conv2d`` with kernel = stride = ``--patch``) to ``--width`` channels, ``--depth``
Mixer blocks (LayerNorm -> token-mixing MLP over the patches (``--token-hidden``) -> residual,
LayerNorm -> channel-mixing MLP (``--channel-hidden``) -> residual), a final LayerNorm, mean
over the patches and a linear head to ``--classes``. Cross entropy, AdamW, optional clipping
(``--clip``, local: the averaged gradients are the same on every rank).

Data: synthetic, class-conditional: ``--classes`` smooth random "prototype" images (fixed by
the seed, the same on every rank), a sample is its class's prototype, randomly shifted by up
to 4 pixels, plus noise. Each rank draws its own batch each step from (seed, rank, step).

The all-reduce (``butterfly_allreduce``, world a power of two): after ``loss.backward()`` the
gradients are flattened (in reverse parameter order, as backward produces them) into buckets
of about ``--bucket-mb`` MB; each bucket, padded to a multiple of 4 floats and seen as four
quarters Q0..Q3, is reduced in turn:

* reduce-scatter by recursive halving: round 1, each rank exchanges half its buffer with the
  partner ``rank ^ 2`` (distance 2: pairs 0-2 and 1-3): the ranks 0, 1 keep the lower half
  (Q0 Q1) and send the upper, 2 and 3 the opposite; each adds what it receives into the half it
  keeps. Round 2, a quarter with ``rank ^ 1`` (pairs 0-1, 2-3), after which rank r holds the
  sum over all ranks of Q_r, which it divides by 4;
* all-gather by recursive doubling, in reverse order: round 1 with ``rank ^ 1`` (each sends
  its quarter, receives the partner's), round 2 with ``rank ^ 2`` (each sends its half,
  receives the other half). The bucket then holds the average everywhere and is copied back
  into the ``.grad`` tensors.

Every exchange is a ``dist.isend`` of the outgoing piece and a ``dist.irecv`` into a scratch
buffer, both waited (with ``--batched``: ``dist.batch_isend_irecv`` of two ``P2POp``).
Each rank thus sends 2 x (1/2 + 1/4) = 1.5 bucket sizes per bucket, 4 messages, in the order
d2 (1/2), d1 (1/4), d1 (1/4), d2 (1/2).

Communication per step (defaults: depth 6, width 128 -> 0.90 M parameters, 3.6 MB of
gradients, 4 buckets: 3 of 1.1-1.2 MB and a 93 KB remainder): one ``dist.broadcast`` of the step's lr scale
(one float, rank 0's warmup-cosine schedule) before the forward, the butterfly exchanges of
every bucket, and every ``--log-every`` (2) steps a ``dist.all_reduce`` of (loss sum, samples)
for the log line.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``lr_sync``, ``forward``,
``backward``, ``grad_sync`` [``bucket_k`` [``flatten``, ``reduce_scatter_d2``,
``reduce_scatter_d1``, ``average``, ``all_gather_d1``, ``all_gather_d2``, ``unflatten``]],
``optimizer``, ``loss_allreduce`` (every --log-every steps), ``tb_write``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the
isend/irecv posts and waits, the broadcast and the loss all_reduce).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--image`` (32), ``--patch`` (4), ``--width`` (128), ``--depth`` (6),
``--token-hidden`` (128), ``--channel-hidden`` (512), ``--classes`` (10), ``--batch`` (32 a
rank), ``--lr`` (2e-3), ``--warmup`` (3 steps), ``--clip``, ``--bucket-mb`` (1.0),
``--batched`` (``batch_isend_irecv``), ``--log-every`` (2).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: in ``forward`` the rank runs the model's forward F - 1
  more times without grad (discarded; the fractional part over that fraction of the batch);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow batch read: ``load_batch`` sleeps MS each step;
* ``--tb-sleep-ms MS`` (family fault): a slow metrics / tensorboard writer: the rank's
  ``tb_write`` (each rank appends its scalars to its own events file every step) sleeps MS
  before writing (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A and B butterfly partners: A ^ B = 1 or 2,
  e.g. 0-2, 1-3, 0-1, 2-3): every butterfly message A sends to B carries X times the bytes
  (the piece, zero-padded in one message from a persistent buffer; B receives it all into a
  buffer of that size and keeps the head). With A ^ B = 2 that is the half-buffer messages of
  reduce-scatter round 1 and all-gather round 2, with A ^ B = 1 the quarter messages. The
  broadcast and the loss all_reduce are not padded. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's batch this step is ``--batch`` times lognormal(0, S)
  (drawn from (seed, rank, step), clamped to [1/4, 4] x, at least 1 sample): batch sizes
  differ by rank and step;
* ``--big-rank K --big X``: rank K's batch is X times the others', every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 4-7 during these runs);
4 ranks, 10 steps (8 timed), each a separate run. Step medians of all ranks agree within
~1% (the butterfly ties every rank to its partners every bucket), so one number; "busy" =
median time outside communication, slow rank vs the mean of the others. Healthy runs
("base") right before moved between 680 and 1320 ms by load alone.

  setting (slow rank)                              step ms    busy slow / others ms
  healthy default (5 runs)                        680-1320    580-1100 (by load)
  healthy --shapes --batched                        1138      973-1027 (traces 12.4 MB a rank)
  healthy --width 160 --depth 4 --bucket-mb 0.5      868      720-747
  healthy --clip --log-every 1 --bucket-mb 4         985      892-915
  healthy --image 48 --patch 6 --batch 24
          --token-hidden 96                          750      637-668
  --factor 2 (r1)                                   1365      1253 / 917   (+37%)
  --factor 3 (r3)                                    798       734 / 574   (+28%)
  --batched --factor 3 (r0)                          909       858 / 650   (+32%)
  --width 160 --depth 4 --factor 3.5 (r2)            558       521 / 359   (+45%)
  --factor 4 (r3)                                   1147      1084 / 682   (+59%)
  --sleep-ms 200 (r2)                                676       615 / 426
  --sleep-ms 250 (r2)                                810       772 / 359
  --data-sleep-ms 250 (r3)                           932       837 / 600
  --tb-sleep-ms 250 (r1)                             634       595 / 306
  --hog (r0)                                        1483      1379 / 882
  link 0->2 x32 (19 MB half-bucket messages)         554      ~455 all (no visible cost)
  link 0->2 x128                                    1259      792-885 all (comm ~400 ms)
  link 0->2 x256 (150 MB messages, 1.2 GB a step)    886      428-488 all (comm ~420 ms)
  link 0->2 x256 (again)                            1630      867-922 all (comm ~710 ms)
  link 1->0 x256 (quarter messages)                 1016      635-662 all (comm ~370 ms)
  --big-rank 3 --big 3                              1531      1459 / 763
  --seq-sigma 0.8                                   1110      419-752 by rank (batches 8-128)

Reading: a healthy step is ~85-90% compute (the Mixer's forward and backward; AdamW is
``fused=True``) and 10-15% butterfly exchanges. ``--factor F`` repeats only the forward
(about a third of the rank's compute), so F = 3-4 costs the slow rank 25-60% more busy
time; the others wait for it in their first exchange with it (reduce_scatter_d2 of the
first bucket, then the d1 partner in turn). A sleep of 200-250 ms is 20-40% of a step
depending on load; the tb sleep sits at the step's end, so the others wait for the slow
rank in the next step's lr broadcast / first exchange. A padded link costs nothing visible
until the messages are ~100 MB (loopback TCP is fast): x256 on the half-bucket messages
of 0 -> 2 adds 0.3-0.7 s a step, mostly in rank 2's reduce_scatter_d2 / all_gather_d2
receives and rank 0's sends (everyone else waits on their partners behind them). A bigger
batch (``--big``) lengthens everyone's step: the butterfly waits for the big rank's
backward. Wall per run: 14-34 s; traces ~8 MB a rank (12.4 MB with --shapes).
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
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
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--token-hidden", type=int, default=128)
    p.add_argument("--channel-hidden", type=int, default=512)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--bucket-mb", type=float, default=1.0)
    p.add_argument("--batched", action="store_true", help="batch_isend_irecv instead of isend + irecv")
    p.add_argument("--log-every", type=int, default=2)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--tb-sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--link-src", type=int, default=-1)
    p.add_argument("--link-dst", type=int, default=-1)
    p.add_argument("--link-factor", type=float, default=1.0)
    # imbalance
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    a = p.parse_args()
    if (a.link_src >= 0) != (a.link_dst >= 0):
        p.error("--link-src and --link-dst go together")
    if a.link_src >= 0 and (a.link_src ^ a.link_dst) not in (1, 2):
        p.error("the butterfly only links partners (src ^ dst == 1 or 2)")
    if a.image % a.patch:
        p.error("--image must be a multiple of --patch")
    return a


# --------------------------------------------------------------------------
# the butterfly all-reduce
# --------------------------------------------------------------------------

class Butterfly:
    """Recursive-halving reduce-scatter + recursive-doubling all-gather over isend/irecv."""

    def __init__(self, rank, world, batched=False, link=None, link_factor=1.0):
        if world & (world - 1):
            raise SystemExit("the butterfly needs a power-of-two world size")
        self.rank, self.world, self.batched = rank, world, batched
        self.link, self.link_factor = link, link_factor
        self.bufs = {}
        self.secs = 0.0          # time in communication this step

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def exchange(self, out, n_in, peer, tag):
        """Send ``out`` to peer, receive n_in floats from it; returns the received floats."""
        n_out = self._padded(out.numel(), self.rank, peer)
        if n_out != out.numel():
            send = self._buffer(("send", peer, tag), n_out)   # zeros past the head
            send[: out.numel()].copy_(out)
        else:
            send = out
        recv = self._buffer(("recv", peer, tag), self._padded(n_in, peer, self.rank))
        t0 = time.perf_counter()
        if self.batched:
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer, tag=tag),
                                           dist.P2POp(dist.irecv, recv, peer, tag=tag)])
            for r in reqs:
                r.wait()
        else:
            s = dist.isend(send, peer, tag=tag)
            r = dist.irecv(recv, peer, tag=tag)
            r.wait()
            s.wait()
        self.secs += time.perf_counter() - t0
        return recv[:n_in]

    def allreduce_mean(self, buf, bucket_id):
        """Average ``buf`` (1-D, numel a multiple of world) over all ranks in place."""
        world, rank = self.world, self.rank
        lo, hi = 0, buf.numel()
        steps = []
        mask = world // 2
        rnd = 0
        while mask >= 1:                      # reduce-scatter: distances world/2, ..., 1
            peer = rank ^ mask
            mid = (lo + hi) // 2
            if rank & mask:
                keep, give = (mid, hi), (lo, mid)
            else:
                keep, give = (lo, mid), (mid, hi)
            with record_function(f"reduce_scatter_d{mask}"):
                got = self.exchange(buf[give[0]: give[1]], keep[1] - keep[0], peer,
                                    tag=bucket_id * 16 + rnd)
                buf[keep[0]: keep[1]].add_(got)
            steps.append((mask, keep, give))
            lo, hi = keep
            mask //= 2
            rnd += 1
        with record_function("average"):
            buf[lo:hi].div_(world)
        for mask, keep, give in reversed(steps):   # all-gather: distances 1, ..., world/2
            peer = rank ^ mask
            with record_function(f"all_gather_d{mask}"):
                got = self.exchange(buf[keep[0]: keep[1]], give[1] - give[0], peer,
                                    tag=bucket_id * 16 + rnd)
                buf[give[0]: give[1]].copy_(got)
            rnd += 1
        return buf

    def broadcast(self, t, src=0):
        t0 = time.perf_counter()
        dist.broadcast(t, src)
        self.secs += time.perf_counter() - t0
        return t

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t


def make_buckets(params, bucket_mb):
    """Parameters in reverse order (as backward produces their gradients), ~bucket_mb each."""
    limit = max(1, int(bucket_mb * (1 << 20) / 4))
    buckets, cur, n = [], [], 0
    for q in reversed(params):
        cur.append(q)
        n += q.numel()
        if n >= limit:
            buckets.append(cur)
            cur, n = [], 0
    if cur:
        buckets.append(cur)
    return buckets


def sync_gradients(buckets, comm):
    world = comm.world
    for k, bk in enumerate(buckets):
        with record_function(f"bucket_{k}"):
            with record_function("flatten"):
                n = sum(q.numel() for q in bk)
                padded = -(-n // world) * world
                flat = torch.zeros(padded)
                torch.cat([q.grad.reshape(-1) for q in bk], out=flat[:n])
            comm.allreduce_mean(flat, k)
            with record_function("unflatten"):
                o = 0
                for q in bk:
                    q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                    o += q.numel()


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class MixerBlock(nn.Module):
    def __init__(self, tokens, width, token_hidden, channel_hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(),
                                       nn.Linear(token_hidden, tokens))
        self.norm2 = nn.LayerNorm(width)
        self.channel_mlp = nn.Sequential(nn.Linear(width, channel_hidden), nn.GELU(),
                                         nn.Linear(channel_hidden, width))

    def forward(self, x):                       # (B, T, D)
        y = self.norm1(x).transpose(1, 2)       # (B, D, T)
        x = x + self.token_mlp(y).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, image, patch, width, depth, token_hidden, channel_hidden, classes):
        super().__init__()
        tokens = (image // patch) ** 2
        self.stem = nn.Conv2d(3, width, kernel_size=patch, stride=patch)
        self.blocks = nn.ModuleList(MixerBlock(tokens, width, token_hidden, channel_hidden)
                                    for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)    # (B, T, D)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x).mean(1))


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_prototypes(classes, image, seed):
    g = torch.Generator().manual_seed(seed)
    low = torch.randn(classes, 3, 4, 4, generator=g)
    return F.interpolate(low, size=(image, image), mode="bicubic", align_corners=False)


def batch_size(args, rank, step):
    n = args.batch * (args.big if rank == args.big_rank else 1.0)
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        z = torch.randn((), generator=g, dtype=torch.float64).item()
        n = n * min(4.0, max(0.25, math.exp(args.seq_sigma * z)))
    return max(1, int(round(n)))


def load_batch(protos, n, args, rank, step):
    g = torch.Generator().manual_seed(args.seed * 7919 + rank * 104_729 + step)
    y = torch.randint(0, protos.shape[0], (n,), generator=g)
    x = protos[y]
    sx, sy = torch.randint(-4, 5, (2,), generator=g).tolist()
    x = torch.roll(x, shifts=(sx, sy), dims=(2, 3))
    x = x + 0.8 * torch.randn(x.shape, generator=g)
    return x, y


def lr_scale(step, warmup, total):
    if step < warmup:
        return (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))


def start_hog(stop):
    def spin():
        a = torch.randn(192, 192)
        b = torch.randn(192, 192) / 14.0
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=spin, name="busy-neighbour", daemon=True)
    th.start()
    return th


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Butterfly(rank, world, args.batched, link, args.link_factor)

    torch.manual_seed(args.seed)           # the same initial weights on every rank
    model = Mixer(args.image, args.patch, args.width, args.depth, args.token_hidden,
                  args.channel_hidden, args.classes)
    params = [q for q in model.parameters() if q.requires_grad]
    for q in params:
        q.grad = torch.zeros_like(q)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.05, fused=True)
    base_lrs = [grp["lr"] for grp in opt.param_groups]
    buckets = make_buckets(params, args.bucket_mb)
    n_params = sum(q.numel() for q in params)
    protos = make_prototypes(args.classes, args.image, args.seed)

    tb_dir = [None]
    if rank == 0:
        tb_dir[0] = tempfile.mkdtemp(prefix="bfly_tb_")
    dist.broadcast_object_list(tb_dir, src=0)
    events = os.path.join(tb_dir[0], f"events.rank{rank}.jsonl")

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[butterfly] world={world} mixer depth={args.depth} width={args.width} "
              f"tokens={(args.image // args.patch) ** 2} params={n_params} "
              f"buckets={len(buckets)} ({[sum(q.numel() for q in b) for b in buckets]}) "
              f"batch={args.batch} batched={args.batched}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    lr_t = torch.zeros(1)
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    n = batch_size(args, rank, step)
                    x, y = load_batch(protos, n, args, rank, step)

                with record_function("lr_sync"):
                    if rank == 0:
                        lr_t.fill_(lr_scale(step, args.warmup, args.steps))
                    comm.broadcast(lr_t, 0)
                    for grp, lr0 in zip(opt.param_groups, base_lrs):
                        grp["lr"] = lr0 * lr_t.item()

                with record_function("forward"):
                    logits = model(x)
                    loss = F.cross_entropy(logits, y)
                    if extra > 0:                 # --factor: the same forward again, discarded
                        with torch.no_grad():
                            for _ in range(int(extra)):
                                model(x)
                            rows = int(round(n * (extra - int(extra))))
                            if rows > 0:
                                model(x[:rows])
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()

                with record_function("grad_sync"):
                    sync_gradients(buckets, comm)

                with record_function("optimizer"):
                    gnorm = (torch.nn.utils.clip_grad_norm_(params, 1.0) if args.clip else None)
                    opt.step()

                m = None
                if (step + 1) % args.log_every == 0:
                    with record_function("loss_allreduce"):
                        m = torch.tensor([loss.item() * n, float(n)])
                        comm.all_reduce(m)

                with record_function("tb_write"):
                    if slow and args.tb_sleep_ms > 0:
                        time.sleep(args.tb_sleep_ms / 1000.0)
                    acc = (logits.argmax(1) == y).float().mean().item()
                    with open(events, "a") as fh:
                        fh.write(json.dumps({"step": step, "rank": rank, "train/loss": loss.item(),
                                             "train/acc": acc, "train/lr": opt.param_groups[0]["lr"],
                                             "train/batch": n,
                                             "train/grad_norm": None if gnorm is None else float(gnorm),
                                             "time": time.time()}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    msg = f"step {step:3d} loss {loss.item():.4f}"
                    if m is not None:
                        msg += f" (global {m[0].item() / m[1].item():.4f})"
                    print(f"{msg} lr {opt.param_groups[0]['lr']:.2e} batch {n} "
                          f"t {1000 * step_times[-1]:.1f} ms comm {1000 * comm.secs:.1f} ms", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    med = (statistics.median(traced), statistics.median(busy))
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside the butterfly exchanges, broadcast, loss all_reduce) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(tb_dir[0], ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
