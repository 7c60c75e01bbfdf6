"""Skip-gram word2vec (negative sampling) with SPARSE embedding gradients, trained with DDP on CPUs.

What it is
----------
A plain-PyTorch word2vec job, the kind you write for item2vec / a recommender's id
embeddings: two big tables, ``in_embed`` and ``out_embed`` (``nn.Embedding(rows, dim,
sparse=True)``, default 100k x 64 each), plus a small dense "tower" (residual MLP,
``dim -> hidden -> ... -> dim``) that refines the center-word embedding.  For each center
word we score 1 true context word and K negatives with a batched dot product (``bmm``) and
use the usual SGNS loss ``-log s(u.v) - sum log s(-u.n)``.

Data: a synthetic corpus, generated on the fly.  Word ids follow a truncated Zipf law
(``--zipf``, a few ids are very hot); a word's context is one of its ``--window`` neighbours
in a fixed hidden "semantic" order, so the model has something real to learn (loss goes
~4.15 -> ~1.2 in 120 steps).  Negatives come from the same Zipf law.  Every rank draws its
own batch with ``np.random.default_rng([seed, rank, step])``.

Parallelism / communication: 4 processes (torchrun), gloo, CPU only, DDP over the whole
model.  Because the embedding grads are sparse, DDP gives each table its own bucket and
all-reduces it as a sparse COO tensor (gloo's sparse all-reduce: coalesce, all-gather of
metadata / indices / values, local sum), the dense tower goes in one normal bucket
(several with a small ``--bucket-mb``).  So per step: 2 sparse + 1 dense all-reduce.  Two
optimizers, as usual for sparse embeddings: ``SparseAdam`` for the tables, ``Adam`` for the
tower.  The bytes of a sparse all-reduce depend on how many DISTINCT ids the ranks touched.

What the trace shows (torch 2.13 CPU): ``c10d::allreduce_`` is launched from the main
thread inside ``backward`` (3 per step); the collectives themselves run on gloo's two
worker threads as ``gloo:sparse_all_reduce`` (the two tables, with ``aten::coalesce``,
``aten::sort``, ``aten::add_``, ``copy_sparse_to_sparse_`` under them) and
``gloo:all_reduce`` (dense bucket).  The wait for them is not an op of its own: it is the
tail of the ``backward`` range on the main thread.  ``SparseAdam.step`` (``sparse_mask``,
``coalesce``) is a visible part of ``optimizer``.

Profiling: ``torch.profiler`` (CPU), ``schedule(wait=1, warmup=1, active=steps-2)``,
``prof.step()`` once per step, ranges ``data`` / ``forward`` / ``backward`` / ``optimizer``,
input shapes only with ``--shapes``.  Each rank writes ``trace_rank{R}.json`` into
``--out`` (nothing else).  Rank 0 prints the loss per step; every rank prints its median
step time and median forward time (steps 2..end) at the end.

Run:
  OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
      user_sparse_embed.py --out DIR [flags]

Flags
-----
  --out DIR            (required) where the per-rank chrome traces go
  --steps N            10 (8 traced steps)
  --seed S             0
  --shapes             record input shapes
 model / data (healthy variants):
  --rows N             100000   vocabulary (embedding rows, per table)
  --dim D              64       embedding dim
  --hidden H           256      tower width
  --layers L           2        tower hidden layers
  --batch B            1024     center words per rank per step
  --negatives K        5        negatives per center word
  --window W           4        context window of the synthetic corpus
  --zipf A             1.3      Zipf exponent of the ids
  --bucket-mb MB       25       DDP bucket_cap_mb (0.05 -> 3 dense buckets per step)
  --comm-hook                   register our own python all-reduce comm hook (same maths)
  --lr / --dense-lr    0.01 / 1e-3  SparseAdam / Adam learning rates
 faults (one rank; -1 = none):
  --slow-rank R        -1       rank that gets --factor / --sleep-ms / --hog
  --factor F           1.0      slow device: the rank redoes its forward's embedding
                                lookups, tower linears and the score bmm F-1 more times
                                (fractional part on that fraction of the batch), discarded
  --sleep-ms MS        0        time.sleep(MS) at the start of every step on that rank
  --hog                         daemon thread on that rank doing 512x512 matmuls all run
  --slow-allreduce-rank R  -1   registers a comm hook on every rank (plain averaging
  --comm-sleep-ms MS       0    all-reduce); on rank R it sleeps MS before launching EACH
                                bucket's all-reduce (3 buckets/step -> 3*MS per step): a
                                slow NIC / driver on that host.  The sleep runs on the main
                                thread inside backward (the autograd engine calls the hook).
 imbalance (no fault, the work just differs):
  --big-rank K --big X  -1/1.0  rank K's batch is X times larger
  --seq-sigma S        0        each rank's batch per step = batch * lognormal(0, S), seeded
                                by (seed, rank, step), clipped to [0.25x, 4x]
  --hot-rank R --hot-ids N  -1/1  rank R's ids come from a flatter distribution (Zipf mixed
                                with uniform ids) so its batch touches ~N x more distinct
                                ids (capped by the lookups: center 283 -> ~500/920/1020 for
                                N=2/4/8, context+negatives 1003 -> ~2000/4000/6000 of 6144):
                                its sparse gradients have ~N x more rows, and since every
                                rank all-gathers them and SparseAdam updates the union, the
                                extra cost lands on ALL ranks, not just R.

Measured
--------
Median step time (ms, steps 2..19 of ``--steps 20``, per rank from the job's own
perf_counter timing), fault/imbalance on rank 1, two runs per setting where time allowed,
each compared to the mean of the healthy runs just before/after it.  ``fwd`` = median
``forward`` time of rank 1 vs the mean of the other ranks.  CAVEAT: 4 processes on 2 cores
that were ALSO shared with other jobs (load average ~10): ten healthy runs gave medians of
92 to 183 ms (typical ~125 ms), so a single run's +-30 % is noise; only a change seen in
both runs, or the per-rank ``fwd`` numbers, should be trusted.  A sleep may cost less than
its length (the other ranks use the freed core).  DDP is synchronous, so the slowed rank
and the others always end up with the SAME step time; which rank is at fault shows only
in its own compute (fwd) or in where the others wait (the tail of their ``backward``).

  setting (rank 1)            run1: r1 / others  (x base)   run2: r1 / others  (x base)  fwd r1 vs others
  healthy                     115/119 126/127 133/127 143/146 102/102 97/92 142/143 175/183 126/123 124/129
  --factor 1.6                192 / 191  (x1.57)            202 / 202  (x1.61)           38 vs 22 ; 39 vs 28
  --factor 2                  131 / 134  (x1.07)            140 / 137  (x0.92)           21 vs 13 ; 28 vs 18
  --factor 3                  186 / 182  (x1.52)            147 / 136  (x1.24)           56 vs 22 ; 39 vs 14
  --sleep-ms 25               107 / 110  (x0.84)            127 / 123  (x0.83)           -
  --sleep-ms 50               172 / 174  (x1.35)            146 / 146  (x1.23)           -
  --hog                       160 / 153  (x1.25)            196 / 189  (x1.66)           13 vs 12 ; 25 vs 17
  --comm-sleep-ms 10 (x3/step) 93 /  92  (x0.68)            160 / 166  (x1.05)           -
  --comm-sleep-ms 30 (x3/step) 155 / 155 (x1.13)            201 / 202  (x1.70)           -
  --big 2                     111 / 108  (x0.81)            235 / 246  (x1.87)           14 vs 11 ; 50 vs 25
  --big 4                     181 / 179  (x1.46)            147 / 147  (x1.25)           41 vs 14 ; 39 vs 11
  --seq-sigma 0.6 (all ranks) 126 / 150  (x1.02 / x1.21)    -                            -
  --hot-ids 4                 166 / 162  (x1.34)            176 / 169  (x1.40)           17 vs 16 ; 17 vs 16
  --hot-ids 8                 104 / 112  (x0.84)            214 / 230  (x1.81)           11 vs 9 ; 22 vs 20

Reading it: the forward of the slowed rank scales as expected with --factor (1.6 -> ~1.6x,
3 -> ~2.7x) and --big (2 -> ~2x, 4 -> ~3.5x), but forward is only ~15 % of the step
(backward with the all-reduce waits and SparseAdam dominate), so the whole-step change is
smaller and, at factor <= 2 / big 2, lost in the host noise; settings that made a >= 10 %
step slowdown in both runs: --factor 1.6 and 3, --sleep-ms 50, --hog, --comm-sleep-ms 30,
--big 4, --hot-ids 4.  --sleep-ms 25 and --comm-sleep-ms 10 did not show up.  --hot-ids is
not rank-local: it makes everybody's step (all-gather + SparseAdam over the union) slower,
and rank R's forward is unchanged.

Healthy variants (one run each, --steps 16, healthy runs of that batch 106-182 ms):
--dim 128 ~213 ms, --rows 200000 ~170, --negatives 10 ~186, --layers 4 --hidden 512 ~330,
--bucket-mb 0.05 ~125 (3 dense buckets), --comm-hook ~194.
Wall time per run: 15-25 s with the default 10 steps, 17-34 s with --steps 20.
"""

import argparse
import math
import os
import statistics
import threading
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description="DDP skip-gram with sparse embeddings")
    p.add_argument("--out", required=True, help="directory for the per-rank chrome traces")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="record input shapes in the profiler")
    # model / data shape
    p.add_argument("--rows", type=int, default=100_000, help="vocabulary size (embedding rows)")
    p.add_argument("--dim", type=int, default=64, help="embedding dim")
    p.add_argument("--hidden", type=int, default=256, help="width of the dense tower")
    p.add_argument("--layers", type=int, default=2, help="hidden layers in the dense tower")
    p.add_argument("--batch", type=int, default=1024, help="center words per rank per step")
    p.add_argument("--negatives", type=int, default=5, help="negative samples per center word")
    p.add_argument("--window", type=int, default=4, help="context window (synthetic corpus)")
    p.add_argument("--zipf", type=float, default=1.3, help="Zipf exponent of the id distribution")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    p.add_argument("--comm-hook", action="store_true",
                   help="use our own python all-reduce comm hook (same maths as DDP's default)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dense-lr", type=float, default=1e-3)
    # faults (one rank)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--slow-allreduce-rank", type=int, default=-1)
    p.add_argument("--comm-sleep-ms", type=float, default=0.0)
    # imbalance (no fault)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--hot-rank", type=int, default=-1)
    p.add_argument("--hot-ids", type=int, default=1)
    return p.parse_args()


# ----------------------------------------------------------------------------- data
class ZipfCorpus:
    """Synthetic corpus: ids follow a truncated Zipf law (a few very hot ids).

    A word's context words are its neighbours (id + 1..window) in a fixed random
    "semantic" order, so there is something real to learn.  Negatives are drawn
    from the same Zipf law (the usual unigram^a noise distribution).
    """

    def __init__(self, rows, a, window, seed):
        ranks = np.arange(1, rows + 1, dtype=np.float64)
        w = ranks ** (-a)
        self.cdf = np.cumsum(w / w.sum())
        perm_rng = np.random.default_rng(seed + 12345)
        self.perm = perm_rng.permutation(rows)  # popularity rank -> word id
        self.pos = np.empty(rows, dtype=np.int64)
        self.pos[self.perm] = np.arange(rows)   # word id -> position in semantic order
        self.rows = rows
        self.window = window

    def _draw(self, rng, n, spread):
        r = np.searchsorted(self.cdf, rng.random(n))
        ids = self.perm[np.minimum(r, self.rows - 1)]
        if spread > 1:
            # flatter distribution: mix in uniformly drawn (mostly cold) ids so the
            # batch touches ~spread x more distinct ids (capped by the lookup count)
            distinct = len(np.unique(ids))
            p = min(1.0, (spread - 1) * distinct / n)
            swap = rng.random(n) < p
            ids[swap] = rng.integers(0, self.rows, size=int(swap.sum()))
        return ids

    def batch(self, rng, n, negatives, spread=1):
        center = self._draw(rng, n, spread)
        off = rng.integers(1, self.window + 1, size=n) * rng.choice([-1, 1], size=n)
        context = self.perm[(self.pos[center] + off) % self.rows]
        neg = self._draw(rng, n * negatives, spread).reshape(n, negatives)
        return (torch.from_numpy(center), torch.from_numpy(context), torch.from_numpy(neg))


# ----------------------------------------------------------------------------- model
class SkipGram(nn.Module):
    def __init__(self, rows, dim, hidden, layers):
        super().__init__()
        self.in_embed = nn.Embedding(rows, dim, sparse=True)
        self.out_embed = nn.Embedding(rows, dim, sparse=True)
        nn.init.uniform_(self.in_embed.weight, -0.5 / dim, 0.5 / dim)
        nn.init.normal_(self.out_embed.weight, std=0.1 / math.sqrt(dim))
        # small dense "tower" on top of the center embedding (residual MLP)
        dims = [dim] + [hidden] * layers + [dim]
        self.tower = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1))
        self.extra = 0.0  # >0 only on a "slow device" rank (fault injection)

    def _waste(self, fn, *xs):
        # slow-device emulation: redo the same op on the same kind of input, discard
        whole, frac = int(self.extra), self.extra - int(self.extra)
        for _ in range(whole):
            fn(*xs)
        if frac > 0:
            n = max(1, int(round(frac * xs[0].shape[0])))
            fn(*(x[:n] for x in xs))

    def forward(self, center, context, neg):
        with torch.no_grad():
            if self.extra:
                self._waste(lambda c: F.embedding(c, self.in_embed.weight), center)
                self._waste(lambda c: F.embedding(c, self.out_embed.weight), context)
                self._waste(lambda c: F.embedding(c, self.out_embed.weight), neg)
        h0 = self.in_embed(center)                       # (B, D)
        h = h0
        for i, lin in enumerate(self.tower):
            if self.extra:
                with torch.no_grad():
                    self._waste(lambda x, l=lin: l(x), h.detach())
            h = lin(h)
            if i < len(self.tower) - 1:
                h = F.relu(h)
        h = h + h0                                       # residual: tower refines the embedding
        tgt = torch.cat([context.unsqueeze(1), neg], 1)  # (B, 1+K)
        t = self.out_embed(tgt)                          # (B, 1+K, D)
        if self.extra:
            with torch.no_grad():
                self._waste(lambda a, b: torch.bmm(a, b), t.detach(), h.detach().unsqueeze(2))
        logits = torch.bmm(t, h.unsqueeze(2)).squeeze(2)  # (B, 1+K)
        sign = torch.ones_like(logits)
        sign[:, 1:] = -1.0
        return -F.logsigmoid(sign * logits).sum(1).mean()


# ----------------------------------------------------------------------------- comm hook
def make_allreduce_hook(sleep_s):
    """all-reduce (average) every bucket, dense or sparse; optionally sleep first."""

    def hook(state, bucket):
        if sleep_s > 0:
            time.sleep(sleep_s)  # flaky NIC / driver on this host
        ws = dist.get_world_size()
        buf = bucket.buffer()
        buf.div_(ws)
        fut = dist.all_reduce(buf, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    return hook


def hog(stop):
    # noisy neighbour: another process/thread on the same host burning the CPU
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    while not stop.is_set():
        torch.mm(a, b)


# ----------------------------------------------------------------------------- main
def main():
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(args.seed)  # same init everywhere (DDP broadcasts anyway)

    model = SkipGram(args.rows, args.dim, args.hidden, args.layers)
    if rank == args.slow_rank and args.factor > 1.0:
        model.extra = args.factor - 1.0
    ddp = DDP(model, bucket_cap_mb=args.bucket_mb)
    if args.comm_hook or args.slow_allreduce_rank >= 0:
        s = args.comm_sleep_ms / 1000.0 if rank == args.slow_allreduce_rank else 0.0
        ddp.register_comm_hook(None, make_allreduce_hook(s))

    sparse_params = [model.in_embed.weight, model.out_embed.weight]
    dense_params = [p for n, p in model.named_parameters() if "embed" not in n]
    opt_sparse = torch.optim.SparseAdam(sparse_params, lr=args.lr)
    opt_dense = torch.optim.Adam(dense_params, lr=args.dense_lr)

    corpus = ZipfCorpus(args.rows, args.zipf, args.window, args.seed)
    spread = args.hot_ids if rank == args.hot_rank else 1

    stop = threading.Event()
    hog_thread = None
    if rank == args.slow_rank and args.hog:
        hog_thread = threading.Thread(target=hog, args=(stop,), daemon=True)
        hog_thread.start()

    os.makedirs(args.out, exist_ok=True)
    sched = schedule(wait=1, warmup=1, active=max(1, args.steps - 2))
    times, fwd_times = [], []
    with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                 record_shapes=args.shapes) as prof:
        for step in range(args.steps):
            t0 = time.perf_counter()
            if rank == args.slow_rank and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000.0)
            with record_function("data"):
                rng = np.random.default_rng([args.seed, rank, step])
                n = args.batch
                if rank == args.big_rank:
                    n = int(n * args.big)
                if args.seq_sigma > 0:
                    n = int(n * float(np.clip(rng.lognormal(0.0, args.seq_sigma), 0.25, 4.0)))
                center, context, neg = corpus.batch(rng, max(n, 8), args.negatives, spread)
            t1 = time.perf_counter()
            with record_function("forward"):
                loss = ddp(center, context, neg)
            fwd_times.append(time.perf_counter() - t1)
            with record_function("backward"):
                opt_sparse.zero_grad(set_to_none=True)
                opt_dense.zero_grad(set_to_none=True)
                loss.backward()
            with record_function("optimizer"):
                opt_sparse.step()
                opt_dense.step()
            prof.step()
            times.append(time.perf_counter() - t0)
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} n={len(center)} "
                      f"{times[-1] * 1e3:.1f} ms", flush=True)

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))
    k = 2 if len(times) > 2 else 0
    med = statistics.median(times[k:]) * 1e3
    fmed = statistics.median(fwd_times[k:]) * 1e3
    print(f"rank {rank} median step {med:.1f} ms forward {fmed:.1f} ms", flush=True)
    stop.set()
    if hog_thread is not None:
        hog_thread.join()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
