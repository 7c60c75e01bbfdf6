"""Data-parallel training whose gradients are averaged by the user's own ring all-reduce, written
with point-to-point messages as one writes it after reading Baidu's ring-allreduce or Horovod:
no DDP, no ``dist.all_reduce`` for the gradients, just ``dist.isend``/``dist.irecv``. CPUs, gloo.

The model is a small transformer encoder: token and position embeddings (vocabulary 512),
``--layers`` pre-norm blocks (self-attention with ``scaled_dot_product_attention``, heads of 64,
a GELU MLP ``W -> 4W -> W``, residuals around both), a final LayerNorm and a linear head over the
vocabulary, 7.5M parameters at the defaults (30 MB of fp32 gradients). The data are random token
ids, drawn per rank and step, and the label of each position is the previous token (something
attention can learn). Every rank starts from the same weights (``--seed``) and steps a fused AdamW.

The ring: after backward the gradients are flattened into buckets of at most ``--bucket-mb`` MB,
filled from the last parameter to the first (2 buckets of 14.3 MB at the defaults), each padded
to a multiple of the world size ``n`` and viewed as ``n`` chunks. Reduce-scatter: ``n - 1`` steps;
in step ``s`` rank ``r`` ``isend``s chunk ``(r - s) % n`` to its right neighbour ``(r + 1) % n``,
``irecv``s chunk ``(r - s - 1) % n`` from its left neighbour into a scratch buffer, waits for
both and adds; rank ``r`` then holds the full sum of chunk ``(r + 1) % n``. All-gather: ``n - 1``
steps sending chunk ``(r + 1 - s) % n`` and receiving chunk ``(r - s) % n`` in place. Then the
bucket is unflattened into the gradients, divided by ``n``. Each message has its own tag (bucket,
phase, step). A rank sends ``2 (n - 1) / n`` x 30 MB = 45 MB a step at the defaults. After the
optimizer the loss is averaged with one ``dist.all_reduce`` for the log line, as users do.

``--overlap``: a ``register_post_accumulate_grad_hook`` on every parameter counts the gradients of
its bucket and, when the bucket is complete, hands its index to a communication thread (as
Horovod's background thread), which runs that bucket's ring while backward goes on; before the
optimizer the main thread waits for all of them. The profiler then needs
``_ExperimentalConfig(profile_all_threads=True)``, else it records the main thread only.

Profiling: ``torch.profiler.profile(activities=[CPU], schedule=schedule(wait=1, warmup=1,
active=steps-2))``, ``record_shapes`` only with ``--shapes``, ``prof.step()`` after each step,
one chrome trace per rank, ``ring-rank<R>.json`` in ``--out``. ``record_function`` marks
``data``, ``forward``, ``backward``, ``grad_sync``, ``ring_allreduce`` (one per bucket, inside
``grad_sync``, or on the ring thread with ``--overlap``) and ``optimizer``. In the trace each
``isend`` is a ``c10d::send`` cpu_op (its posting, 0.01-0.2 ms) followed by a ``gloo:send``
user_annotation on the same thread that lasts from the posting to the end of the transfer; each
``irecv`` likewise ``c10d::recv_`` and ``gloo:recv``. ``wait()`` leaves no event of its own: the
waits are inside the ``gloo:send``/``gloo:recv`` spans (6 of each per bucket, 12 per step). With
``--shapes`` the ``c10d::send``/``c10d::recv_`` events carry the peer and the tag in ``Concrete
Inputs`` and the message's length in ``Input Dims``. The loss is ``c10d::allreduce_`` and a
``gloo:all_reduce`` on a gloo thread; each step a ``ProfilerStep#N``.

Flags:

- ``--out DIR`` (required), ``--steps N`` (8, 6 traced), ``--seed S`` (0), ``--shapes``.
- ``--width W`` (384), ``--layers L`` (4), ``--seq S`` (32 tokens), ``--batch B`` (4 sequences
  a rank), ``--bucket-mb MB`` (16), ``--lr`` (3e-4), ``--overlap``.
- ``--slow-link A B --extra F``: every ring message that rank A sends to B (B must be A's right
  neighbour, ``(A + 1) % n``) carries F x the bytes: the chunk followed by ``(F - 1)`` x its size
  of zeros, in the same ``isend``; B receives the whole message and keeps the chunk. A link F x
  slower; the two ranks' compute is untouched.
- ``--slow-rank R`` (-1: none), and on that rank only: ``--factor F``, every linear layer computes
  its output again without grad, results discarded, ``(F - 1) x 4.0`` times a call (fractions
  carried over calls): 3 for forward + backward over the linear layers' 3/4 or so of the compute
  (one process, CPU time: 1.95 -> 1.5x, 3.9 -> 1.95x, 7.8 -> 2.9x the forward + backward);
  ``--hog``, a daemon thread multiplying 64x64 matrices for the whole run; ``--sleep-ms MS``, a
  host sleep before each step; ``--data-sleep-ms MS``, a sleep while building each batch.
- Imbalance, no fault: ``--seq-sigma S``, each rank draws each step's sequence length as
  ``--seq`` x a lognormal of sigma S (seeded by rank and step), clipped to [8, 4 x ``--seq``];
  ``--uneven``, rank r gets ``round(B x (1 + 0.25 r))`` sequences (4, 5, 6, 7), the loss weighted
  by its share so the average gradient is the global mean's.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_ring_allreduce.py --out DIR --slow-link 1 2 --extra 4

Measured on this 2-core machine, with other jobs beside (load average 5-13, so one job's step
swings 1.7x from run to run): a job takes 13-46 s wall (median 32 s; ~20-25 s of it starting 4
Pythons), traces 4.7 MB a rank (7.4 MB with ``--shapes``), all valid JSON, the replicas'
parameters identical at the end (checked by rank 0's last line).
Mean step of rank 0 over the 6 traced steps, and ``grad_sync``'s share of the step (all ranks):

    job                                      rank-0 step, ms             grad_sync share
    healthy (5 runs)                         median 810 (666-1111)       0.38 (0.37-0.40)
    --slow-link 1 2 --extra 4 (5 runs)       median 810 (382-951)        0.47 (0.44-0.49)
    --slow-link 3 0 --extra 3 (5 runs)       median 1035 (759-1126)      0.46 (0.43-0.49)
    --slow-rank 2 --factor 2 (2 runs)        903, 1127                   0.44
    --slow-rank 1 --data-sleep-ms 40         783 (rank 1's data: 41)     0.40
    --slow-rank 3 --hog                      329                         0.44
    --slow-rank 0 --sleep-ms 30              401                         0.39
    --seq-sigma 0.5 / --uneven               1152 / 372                  0.46 / 0.36
    --overlap / with --slow-link 0 1 --extra 3   644 / 682               0.31 / 0.41

The load hides the link in single runs; the share shows it (at the same compute, +16% for x4 and
+14% for x3), and so do pairs started together (same load, 3 pairs each): x4 1.27-1.36x the
healthy step (845-894 vs 657-676 ms), x3 1.24-1.26x. Wait events by rank (ms, means of 5 runs;
in brackets, relative to the run's mean over ranks): ``gloo:send`` shows nothing (healthy
17.5/18.3/17.9/15.8; link 1->2 x4 21.6/22.3/19.9/20.5 [1.03 1.04 0.95 0.98]; link 3->0 x3
24.2/30.3/27.8/25.5); ``gloo:recv`` does: healthy 13.9/14.4/12.4/10.9 [1.07 1.14 0.95 0.85], link
1->2 x4 9.8/6.8/17.7/19.4 [0.74 0.51 1.31 1.45], link 3->0 x3 21.0/28.1/11.4/8.5 [1.21 1.64
0.66 0.49]: the sender A waits least, B and the rank after it most (link 2->3 x5: 21.2/13.6/5.8/
20.2; link 0->1 x3 with --overlap 9.8/18.6/24.3/11.3). ``--factor 2`` on rank 2: its aten::addmm +
aten::mm 1.86x and 1.90x the peers' mean (504 vs 271, 660 vs 347 ms a step), its forward +
backward 1.6x and 1.73x in wall time (peers waiting in the ring leave it more CPU). ``--hog``
on rank 3: its forward + backward 1.28x the peers'. ``--uneven``: forward + backward 169/193/
212/232 ms on ranks 0-3.
"""

from __future__ import annotations

import argparse
import math
import os
import queue
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, record_function

VOCAB = 512
HEAD_DIM = 64
# Extra no-grad recomputations of each linear layer per call, per unit of (factor - 1), on the
# slow rank: 3 for forward + backward (backward as two forwards), divided by the linear layers'
# share of forward + backward (about 3/4: attention, norms, GELU and the loss are the rest).
# Measured at the defaults in one process (CPU time of forward + backward): 1.95 extra -> 1.5x,
# 3.9 -> 1.95x, 4.4 -> 2.09x, 7.8 -> 2.9x.
EXTRA_PER_UNIT = 4.0


class Linear(nn.Linear):
    """``nn.Linear`` that, on the slow rank, computes its output again ``extra`` times (no grad)."""

    extra = 0.0          # extra forward-equivalents per call (set on the slow rank only)
    _credit = 0.0        # fractional repetitions carried from one call to the next

    def forward(self, x):
        y = super().forward(x)
        if Linear.extra > 0:
            Linear._credit += Linear.extra
            n = int(Linear._credit)
            Linear._credit -= n
            with torch.no_grad():
                for _ in range(n):
                    F.linear(x, self.weight, self.bias)
        return y


class Block(nn.Module):
    """Pre-norm transformer encoder block: self-attention and a GELU MLP, residuals around both."""

    def __init__(self, width):
        super().__init__()
        self.heads = width // HEAD_DIM
        self.ln1 = nn.LayerNorm(width)
        self.qkv = Linear(width, 3 * width)
        self.proj = Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = Linear(width, 4 * width)
        self.fc2 = Linear(4 * width, width)

    def forward(self, x):                                   # x: [B, S, W]
        b, s, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, HEAD_DIM).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, w)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Encoder(nn.Module):
    def __init__(self, width, layers, max_seq):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, width)
        self.pos = nn.Embedding(max_seq, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = Linear(width, VOCAB)

    def forward(self, ids):                                 # ids: [B, S]
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.ln(h))


class Bucket:
    """A flat gradient buffer for some parameters, padded to a multiple of the world size."""

    def __init__(self, params, world):
        self.params = params
        n = sum(p.numel() for p in params)
        self.flat = torch.zeros(math.ceil(n / world) * world)
        self.chunks = self.flat.view(world, -1)             # chunk i: row i (contiguous)
        self.tmp = torch.empty(self.chunks.shape[1])        # reduce-scatter receives here
        self.ready = 0                                      # --overlap: gradients arrived so far

    def pack(self):
        off = 0
        for p in self.params:
            self.flat[off:off + p.numel()].copy_(p.grad.reshape(-1))
            off += p.numel()

    def unpack(self, world):
        off = 0
        for p in self.params:
            p.grad.copy_(self.flat[off:off + p.numel()].view_as(p.grad)).div_(world)
            off += p.numel()


def make_buckets(params, bucket_mb, world):
    """Buckets of at most ``bucket_mb`` MB, last parameter first (the order backward fills them)."""
    limit = int(bucket_mb * 1024 * 1024)
    groups, cur, size = [], [], 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if cur and size + nbytes > limit:
            groups.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += nbytes
    if cur:
        groups.append(cur)
    return [Bucket(g, world) for g in groups]


class Ring:
    """Ring all-reduce over point-to-point messages: send right, receive from the left."""

    def __init__(self, rank, world, slow_link=None, extra=1.0, max_chunk=0):
        self.rank, self.world = rank, world
        self.right, self.left = (rank + 1) % world, (rank - 1) % world
        # --slow-link A B --extra F: A's messages to B carry F x the bytes (zero padding after
        # the chunk, in the same isend); B receives the whole message and drops the padding.
        self.extra = extra
        self.pad_send = slow_link is not None and rank == slow_link[0]
        self.pad_recv = slow_link is not None and rank == slow_link[1]
        size = max_chunk + self.padding(max_chunk)
        self.sbuf = torch.zeros(size) if self.pad_send else None
        self.rbuf = torch.zeros(size) if self.pad_recv else None

    def padding(self, n):
        return int(round((self.extra - 1.0) * n))

    def exchange(self, send, recv, tag):
        """Send ``send`` to the right neighbour while receiving ``recv`` from the left one."""
        n = send.numel()
        if self.pad_send:
            msg = self.sbuf[:n + self.padding(n)]
            msg[:n].copy_(send)
            s = dist.isend(msg, self.right, tag=tag)
        else:
            s = dist.isend(send, self.right, tag=tag)
        into = self.rbuf[:n + self.padding(n)] if self.pad_recv else recv
        r = dist.irecv(into, self.left, tag=tag)
        r.wait()
        s.wait()
        if self.pad_recv:
            recv.copy_(into[:n])

    def all_reduce(self, bucket, tag0):
        """Sum ``bucket.chunks`` over the ring in place: reduce-scatter, then all-gather."""
        r, n, c = self.rank, self.world, bucket.chunks
        for s in range(n - 1):           # after this, chunk (r + 1) % n holds the full sum here
            self.exchange(c[(r - s) % n], bucket.tmp, tag0 + s)
            c[(r - s - 1) % n].add_(bucket.tmp)
        for s in range(n - 1):           # pass the reduced chunks round the ring
            self.exchange(c[(r + 1 - s) % n], c[(r - s) % n], tag0 + n + s)


def start_hog(stop):
    """A noisy neighbour: small matmuls in a loop on a daemon thread, for the whole run."""
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
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="profiler record_shapes")
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=32, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    p.add_argument("--bucket-mb", type=float, default=16.0, help="gradient bucket size in MB")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--overlap", action="store_true",
                   help="run each bucket's ring on a communication thread as soon as it is ready")
    p.add_argument("--slow-link", type=int, nargs=2, metavar=("A", "B"), default=None,
                   help="ring link A -> B (B = A + 1 mod world) carrying --extra x the bytes")
    p.add_argument("--extra", type=float, default=1.0, help="byte multiplier on --slow-link")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to")
    p.add_argument("--factor", type=float, default=1.0, help="fwd+bwd compute, x peers'")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="sleep building each batch")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="lognormal sequence length sigma")
    p.add_argument("--uneven", action="store_true", help="rank r gets batch * (1 + 0.25 r)")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.extra < 1.0:
        p.error("--extra must be at least 1")
    if args.slow_rank < 0 and (args.factor > 1 or args.hog or args.sleep_ms or args.data_sleep_ms):
        p.error("--factor, --hog, --sleep-ms and --data-sleep-ms need --slow-rank")
    if args.extra > 1 and args.slow_link is None:
        p.error("--extra needs --slow-link")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.slow_link is not None:
        a, b = args.slow_link
        if not (0 <= a < world and b == (a + 1) % world):
            raise SystemExit(f"--slow-link {a} {b}: {b} is not the right neighbour of {a} "
                             f"(the ring sends r -> (r + 1) % {world})")
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    sizes = [round(args.batch * (1 + 0.25 * r)) if args.uneven else args.batch
             for r in range(world)]
    my_batch = sizes[rank]
    loss_weight = my_batch * world / sum(sizes)     # mean of the weighted losses = the global mean
    max_seq = 4 * args.seq if args.seq_sigma > 0 else args.seq

    torch.manual_seed(args.seed)                    # the same initial weights on every rank
    model = Encoder(args.width, args.layers, max_seq)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, fused=True)   # fused: one kernel on CPU too
    if slow and args.factor > 1:
        Linear.extra = (args.factor - 1.0) * EXTRA_PER_UNIT

    buckets = make_buckets(params, args.bucket_mb, world)
    ring = Ring(rank, world, args.slow_link, args.extra, max(b.chunks.shape[1] for b in buckets))
    if rank == 0:
        n = sum(q.numel() for q in params)
        mbs = [round(b.flat.numel() * 4 / 2**20, 1) for b in buckets]
        print(f"{n / 1e6:.2f}M params, {len(buckets)} buckets of {mbs} MB, batch sizes {sizes}",
              flush=True)

    def sync_bucket(i):
        b = buckets[i]
        with record_function("ring_allreduce"):
            b.pack()
            ring.all_reduce(b, tag0=i * 2 * world)
            b.unpack(world)

    # --overlap: a communication thread (as Horovod's background thread) runs the rings of the
    # buckets in the order their gradients complete; the hooks only hand it the bucket index.
    work, done = queue.Queue(), queue.Queue()
    if args.overlap:
        def comm_loop():
            while (i := work.get()) is not None:
                with torch.no_grad():
                    sync_bucket(i)
                done.put(i)

        comm = threading.Thread(target=comm_loop, name="ring", daemon=True)
        comm.start()
        owner = {q: i for i, b in enumerate(buckets) for q in b.params}

        def hook(q):
            b = buckets[owner[q]]
            b.ready += 1
            if b.ready == len(b.params):
                work.put(owner[q])

        for q in params:
            q.register_post_accumulate_grad_hook(hook)

    def seq_for(step):
        if args.seq_sigma <= 0:
            return args.seq
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 7919 * rank + step)
        s = args.seq * math.exp(args.seq_sigma * torch.randn((), generator=g).item())
        return min(max(8, int(round(s))), max_seq)

    def batch_for(step):
        if slow and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000)          # a slow loader
        g = torch.Generator().manual_seed((args.seed * 1009 + rank) * 100_003 + step)
        ids = torch.randint(0, VOCAB, (my_batch, seq_for(step)), generator=g)
        return ids, ids.roll(1, dims=1)                     # learn to copy the previous token

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"ring-rank{rank}.json"))

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    t0 = time.perf_counter()
    # the profiler follows only the thread that starts it unless told to follow them all
    extra_cfg = None
    if args.overlap:
        extra_cfg = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                record_shapes=args.shapes, on_trace_ready=trace_handler,
                                experimental_config=extra_cfg) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            with record_function("data"):
                ids, labels = batch_for(step)
            opt.zero_grad(set_to_none=True)
            for b in buckets:
                b.ready = 0
            with record_function("forward"):
                loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten())
            with record_function("backward"):
                (loss * loss_weight).backward()
            with record_function("grad_sync"), torch.no_grad():
                if args.overlap:
                    for _ in buckets:                       # every bucket's ring has finished
                        done.get()
                else:
                    for i in range(len(buckets)):
                        sync_bucket(i)
            with record_function("optimizer"):
                opt.step()
            logged = loss.detach().clone()
            dist.all_reduce(logged)                         # for the log line only
            prof.step()
            if rank == 0:
                print(f"step {step} loss {logged.item() / world:.4f} "
                      f"{(time.perf_counter() - ts) * 1000:.0f} ms", flush=True)

    if args.overlap:
        work.put(None)
        comm.join()
    if hog is not None:
        stop.set()
        hog.join()
    # the replicas must still be the same if the ring is right
    with torch.no_grad():
        flat = torch.cat([q.detach().reshape(-1) for q in params])
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
