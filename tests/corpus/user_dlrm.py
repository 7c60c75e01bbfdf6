"""A DLRM-style recommendation model trained with hybrid parallelism, written by hand with plain
``torch.distributed`` as a user who read the DLRM paper and torchrec's docs writes one, on CPUs
with gloo.

The model (DLRM, Naumov et al.): ``--tables`` embedding tables of ``--dim`` columns (table ``t``
has ``--rows`` x (0.5 + 0.75 t / (tables - 1)) rows: 20k to 50k by default), looked up with
``nn.EmbeddingBag`` (multi-hot bags, pooled by ``--pooling`` sum or mean); a bottom MLP
(``13 -> --bot-mlp -> dim``, ReLU) on 13 dense features; the "dot" feature interaction (the
pairwise dot products of the bottom MLP's output and the ``tables`` pooled embeddings, strictly
lower triangle, concatenated with the bottom MLP's output); a top MLP (``--top-mlp -> 1``, ReLU)
and a binary cross-entropy on synthetic clicks.

Hybrid parallelism, as torchrec does it:

- sparse part, model parallel: the tables are sharded table-wise, each rank owns whole tables
  (contiguous blocks of tables: 2 each for 8 tables on 4 ranks). Every step each rank draws its
  own batch of ``--batch`` samples with ids for every table, then the "input dist": an
  ``all_to_all_single`` of the split sizes (how many lengths and ids go to each owner), one of
  the bag lengths and one of the ids (variable splits). Each owner looks up and pools the bags
  of every rank's samples for its tables, and the "output dist", a fourth ``all_to_all_single``
  (``EmbeddingAllToAll``, an autograd Function), brings the pooled embeddings back to the ranks
  the samples came from; its backward sends the embeddings' gradients back to the owners the
  reverse way. The tables take sparse gradients (``sparse=True``) and are updated on their owner
  only, by a sparse ``torch.optim.Adagrad`` (``--emb-lr``): never all-reduced.
- dense part, data parallel: the bottom MLP, the interaction and the top MLP are one module,
  replicated (same seed everywhere) and wrapped in ``DistributedDataParallel`` (gradient
  all-reduce during backward); Adam (``--lr``).

Synthetic data: the ids of table ``t`` follow a Zipf law of exponent ``--zipf`` (1.05) over its
rows, scattered by a fixed permutation (hot rows, hashed as real ids are); each sample's bag
length is uniform in ``[1, 2 L - 1]`` (mean ``L`` = ``--bag``, 20); dense features are gaussian.
A fixed random teacher (a linear function of the dense features plus, per table, the mean of a
random score per row over the bag) gives the clicks, so that the loss goes down. Each rank's
batch depends on the seed, its rank and the step.

Profiling: ``torch.profiler.profile`` with the profiler's defaults and
``schedule(wait=1, warmup=1, active=steps-2)``, its ``on_trace_ready`` exporting one chrome
trace per process, ``dlrm-rank<R>.json`` in ``--out``; ``prof.step()`` after each step.
``record_function`` marks ``input_dist``, ``embedding_lookup``, ``output_dist``, ``dense_forward``,
``backward`` and ``optimizer``. Rank 0 prints its loss every step.

Flags:

- ``--out DIR``: where the traces go (created if missing).
- ``--steps N`` (8), ``--batch B`` (256 samples a rank), ``--tables T`` (8; 10 with
  ``--uneven-tables``), ``--rows R`` (40000), ``--dim D`` (64), ``--bag L`` (20), ``--zipf A``
  (1.05), ``--pooling {sum,mean}`` (sum), ``--bot-mlp`` (512-256), ``--top-mlp``
  (1024-1024-512-256), ``--lr`` (1e-3), ``--emb-lr`` (0.005), ``--seed S`` (0).
- ``--slow-rank R``: the rank the two faults below apply to (-1: none).
- ``--factor F``: on the slow rank every linear layer of the bottom and top MLPs computes its
  matmul again, of the same shapes on the same rows, without gradients, results discarded,
  ``(F - 1) x 3`` times per call (the fraction carried from one call to the next), all of it in
  the forward: 3 for forward and backward (backward as two forwards). That rank's MLP compute is
  about F x its peers', as on a slow GPU; its lookups and exchanges are not. The MLPs' matmuls
  are about a third of a rank's step, and the slow rank gets more of the 2 cores while its peers
  wait, so the job's step grows less than F (measured, 4 processes on 2 cores, default shapes:
  F = 2 adds about 6-17 %, 2.5 about 11-23 %, 3 about 23-27 %).
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step (measured as above:
  45 ms adds about 11-17 % to the job's step, 60 ms 17-29 %, 80 ms 27-38 %).
- ``--hot-table-skew S``: the bags of the tables that rank 0 owns are S x longer on average
  (mean ``S L`` ids instead of ``L``), on every rank's samples: rank 0 receives, looks up, pools
  and updates S x as many ids as each other owner (on CPU the forward pooling is cheap; the
  owner's extra time is mostly the sparse gradient and Adagrad's update of those rows). An
  imbalance of the data and the sharding plan, not a fault (no rank is slower on the same work).
- ``--uneven-tables``: the tables are split 2 : 1 : 1 : ... between rank 0 and the others
  (largest remainder; exact when ``--tables`` is a multiple of world + 1, as the default 10 is
  on 4 ranks: 4, 2, 2, 2), a sharding plan that gives rank 0 twice the tables: imbalance, no fault.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_dlrm.py --out DIR --slow-rank 2 --factor 2
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

DENSE_IN = 13          # Criteo's dense features


class EmbeddingAllToAll(torch.autograd.Function):
    """``all_to_all_single`` of pooled rows; backward sends the gradient back the way it came."""

    @staticmethod
    def forward(ctx, x, send_splits, recv_splits):
        ctx.send_splits, ctx.recv_splits = send_splits, recv_splits
        out = x.new_empty((sum(recv_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), output_split_sizes=recv_splits,
                               input_split_sizes=send_splits)
        return out

    @staticmethod
    def backward(ctx, grad):
        with record_function("output_dist_backward"):
            back = grad.new_empty((sum(ctx.send_splits),) + tuple(grad.shape[1:]))
            dist.all_to_all_single(back, grad.contiguous(), output_split_sizes=ctx.send_splits,
                                   input_split_sizes=ctx.recv_splits)
        return back, None, None


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


def mlp(sizes, last_act=True):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(SlowLinear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DenseArch(nn.Module):
    """Bottom MLP, dot interaction, top MLP: the replicated (DDP) part of DLRM."""

    def __init__(self, n_tables, dim, bot, top):
        super().__init__()
        self.bottom = mlp([DENSE_IN, *bot, dim])
        n = n_tables + 1
        self.li = torch.tril_indices(n, n, offset=-1)    # not a buffer: nothing for DDP to broadcast
        self.top = mlp([dim + n * (n - 1) // 2, *top, 1], last_act=False)

    def forward(self, dense_x, pooled):              # pooled: [B, T, D]
        x = self.bottom(dense_x)                     # [B, D]
        feats = torch.cat([x.unsqueeze(1), pooled], dim=1)   # [B, T + 1, D]
        z = torch.bmm(feats, feats.transpose(1, 2))  # [B, T + 1, T + 1]
        inter = z[:, self.li[0], self.li[1]]
        return self.top(torch.cat([x, inter], dim=1)).squeeze(1)


def plan_tables(n_tables, world, uneven):
    """Table-wise sharding: the owner of each table (contiguous blocks of tables per rank)."""
    shares = [2.0 if (uneven and r == 0) else 1.0 for r in range(world)]
    exact = [n_tables * s / sum(shares) for s in shares]
    counts = [int(e) for e in exact]
    for r in sorted(range(world), key=lambda r: counts[r] - exact[r])[: n_tables - sum(counts)]:
        counts[r] += 1
    owner = []
    for r, c in enumerate(counts):
        owner += [r] * c
    return owner


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank that --factor / --sleep-ms apply to")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's MLP matmul work, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--hot-table-skew", type=float, default=1.0,
                   help="bags of rank 0's tables are this many times longer")
    p.add_argument("--uneven-tables", action="store_true", help="rank 0 owns twice the tables of the others")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=256, help="samples per rank per step")
    p.add_argument("--tables", type=int, default=None, help="8 (10 with --uneven-tables)")
    p.add_argument("--rows", type=int, default=40000, help="rows of a mid-sized table (0.5x to 1.25x)")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--bag", type=float, default=20.0, help="mean ids per bag")
    p.add_argument("--zipf", type=float, default=1.05, help="exponent of the ids' power law")
    p.add_argument("--pooling", choices=["sum", "mean"], default="sum")
    p.add_argument("--bot-mlp", default="512-256")
    p.add_argument("--top-mlp", default="1024-1024-512-256")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--emb-lr", type=float, default=0.005)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.tables is None:
        args.tables = 10 if args.uneven_tables else 8

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    T, D, B = args.tables, args.dim, args.batch
    if T < world:
        raise SystemExit(f"--tables {T} is fewer than the {world} ranks")
    rows = [int(args.rows * (0.5 + 0.75 * t / max(1, T - 1))) for t in range(T)]
    owner = plan_tables(T, world, args.uneven_tables)
    if len(set(owner)) < world:
        raise SystemExit(f"--tables {T} leaves a rank without a table")
    tables_of = [[t for t in range(T) if owner[t] == r] for r in range(world)]
    mine = tables_of[rank]
    bag_mean = [args.bag * (args.hot_table_skew if owner[t] == 0 else 1.0) for t in range(T)]

    # ---- the fixed parts of the synthetic data, the same on every rank ----
    g = torch.Generator().manual_seed(args.seed + 12345)
    cdfs, perms, scores = [], [], []
    for t in range(T):
        w = torch.arange(1, rows[t] + 1, dtype=torch.float64).pow(-args.zipf)
        cdfs.append((w.cumsum(0) / w.sum()).float())
        perms.append(torch.randperm(rows[t], generator=g))
        scores.append(torch.randn(rows[t], 1, generator=g) * 1.5)
    teacher_w = torch.randn(DENSE_IN, generator=g)

    # ---- the model: my tables, the replicated dense part ----
    tables = nn.ModuleDict()
    for t in mine:
        emb = nn.EmbeddingBag(rows[t], D, mode=args.pooling, sparse=True)
        bound = rows[t] ** -0.5
        with torch.no_grad():
            emb.weight.uniform_(-bound, bound, generator=torch.Generator().manual_seed(args.seed * 1000 + t))
        tables[str(t)] = emb
    torch.manual_seed(args.seed)                 # same dense weights everywhere
    bot = [int(s) for s in args.bot_mlp.split("-") if s]
    top = [int(s) for s in args.top_mlp.split("-") if s]
    dense = DDP(DenseArch(T, D, bot, top))
    emb_opt = torch.optim.Adagrad(tables.parameters(), lr=args.emb_lr)
    dense_opt = torch.optim.Adam(dense.parameters(), lr=args.lr)
    if slow and args.factor > 1:
        SlowLinear.extra = (args.factor - 1.0) * 3     # forward + backward (backward as two forwards)
    if rank == 0:
        n_dense = sum(q.numel() for q in dense.parameters())
        print(f"dlrm: {T} tables of {min(rows)}-{max(rows)} rows x {D}, owners "
              f"{[len(x) for x in tables_of]} tables by rank, {n_dense / 1e6:.2f}M dense params, "
              f"batch {B} a rank", flush=True)

    def batch_for(step):
        gs = torch.Generator().manual_seed(args.seed * 1_000_003 + 1000 * rank + step)
        dense_x = torch.randn(B, DENSE_IN, generator=gs)
        lengths, ids = [], []
        logit = dense_x @ teacher_w / DENSE_IN ** 0.5
        for t in range(T):
            n = torch.randint(1, max(2, round(2 * bag_mean[t])), (B,), generator=gs)
            u = torch.rand(int(n.sum()), generator=gs)
            idx = perms[t][torch.searchsorted(cdfs[t], u).clamp_(max=rows[t] - 1)]
            offsets = torch.cat([n.new_zeros(1), n.cumsum(0)[:-1]])
            logit = logit + F.embedding_bag(idx, scores[t], offsets, mode="mean").squeeze(1) / T ** 0.5
            lengths.append(n)
            ids.append(idx)
        clicks = (logit + 0.3 * torch.randn(B, generator=gs) > 0).float()
        return dense_x, lengths, ids, clicks

    def input_dist(lengths, ids):
        """Send each owner the bag lengths and ids of its tables; return what I got, by source."""
        send_len = [torch.cat([lengths[t] for t in tables_of[d]]) for d in range(world)]
        send_ids = [torch.cat([ids[t] for t in tables_of[d]]) for d in range(world)]
        sizes = torch.tensor([[len(a), len(b)] for a, b in zip(send_len, send_ids)], dtype=torch.long)
        recv_sizes = torch.empty_like(sizes)
        dist.all_to_all_single(recv_sizes, sizes)
        recv_sizes = recv_sizes.tolist()
        len_splits = [s[0] for s in recv_sizes]
        id_splits = [s[1] for s in recv_sizes]
        recv_len = torch.empty(sum(len_splits), dtype=torch.long)
        dist.all_to_all_single(recv_len, torch.cat(send_len), output_split_sizes=len_splits,
                               input_split_sizes=[len(a) for a in send_len])
        recv_ids = torch.empty(sum(id_splits), dtype=torch.long)
        dist.all_to_all_single(recv_ids, torch.cat(send_ids), output_split_sizes=id_splits,
                               input_split_sizes=[len(b) for b in send_ids])
        return recv_len.split(len_splits), recv_ids.split(id_splits)

    def lookup(recv_len, recv_ids):
        """Pool the bags of every source's samples for my tables: rows [source, sample, table]."""
        per_table_ids = [[] for _ in mine]
        per_table_len = [[] for _ in mine]
        batches = []
        for r in range(world):
            n_r = recv_len[r].view(len(mine), -1)            # [my tables, B_r]
            batches.append(n_r.shape[1])
            for j, part in enumerate(recv_ids[r].split(n_r.sum(1).tolist())):
                per_table_ids[j].append(part)
                per_table_len[j].append(n_r[j])
        pooled = []
        for j, t in enumerate(mine):
            n = torch.cat(per_table_len[j])
            offsets = torch.cat([n.new_zeros(1), n.cumsum(0)[:-1]])
            pooled.append(tables[str(t)](torch.cat(per_table_ids[j]), offsets))   # [sum B_r, D]
        out = torch.stack(pooled, dim=1)                      # [sum B_r, my tables, D]
        return out.reshape(-1, D), [b * len(mine) for b in batches]

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"dlrm-rank{rank}.json"))

    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    t0 = time.perf_counter()
    with torch.profiler.profile(schedule=sched, on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            ts = time.perf_counter()
            dense_x, lengths, ids, clicks = batch_for(step)
            emb_opt.zero_grad(set_to_none=True)
            dense_opt.zero_grad(set_to_none=True)
            with record_function("input_dist"):
                recv_len, recv_ids = input_dist(lengths, ids)
            with record_function("embedding_lookup"):
                rows_out, send_splits = lookup(recv_len, recv_ids)
            with record_function("output_dist"):
                recv_splits = [B * len(tables_of[d]) for d in range(world)]
                got = EmbeddingAllToAll.apply(rows_out, send_splits, recv_splits)
                pooled = torch.cat([c.view(B, len(tables_of[d]), D)
                                    for d, c in enumerate(got.split(recv_splits))], dim=1)   # [B, T, D]
            with record_function("dense_forward"):
                logits = dense(dense_x, pooled)
                loss = F.binary_cross_entropy_with_logits(logits, clicks)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                emb_opt.step()
                dense_opt.step()
            prof.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} ({(time.perf_counter() - ts) * 1000:.0f} ms)",
                      flush=True)

    ids_owned = torch.tensor(sum(len(x) for x in recv_ids))
    load = [torch.zeros((), dtype=torch.long) for _ in range(world)]
    dist.all_gather(load, ids_owned)
    if rank == 0:
        print(f"done in {time.perf_counter() - t0:.1f}s, ids looked up per owner in the last step "
              f"{[int(v) for v in load]}, traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
