"""A graph neural network for graph-level classification, trained data parallel with
``DistributedDataParallel`` on CPUs with gloo, written by hand with plain torch as a user who
read the GraphSAGE and GCN papers writes one (no torch_geometric).

The data: synthetic random graphs. A graph of ``n`` nodes gets, for every node, ``--degree``
edges to nodes of the same graph drawn uniformly at random (no self loops), each taken in both
directions; node features are ``IN_DIM`` gaussian values around a mean drawn per graph. A
mini-batch is ``--graphs`` such graphs put side by side as one big graph (a block-diagonal
union: node ids offset per graph, one edge list), as graph libraries batch graphs. The labels
(``CLASSES`` classes) come from a fixed random teacher, the same on every rank: one round of
mean aggregation, a random projection, ``tanh``, mean pooling per graph, another random
projection and an ``argmax``, so that there is something to learn and the loss goes down.
Every rank draws its own batch each step (from the seed, its rank and the step).

The model: a linear embedding ``IN_DIM -> --hidden``, ``--layers`` GraphSAGE layers with mean
aggregation and batch norm over the nodes (``h <- h + relu(BN(W_self h + W_neigh
mean_{j in N(i)} h_j))``, the neighbour mean gathered over the edge list with ``index_select``
and summed with ``index_add_``), a readout by mean pooling per graph (``index_add_`` over the
nodes' graph ids, divided by the node counts) and a 2-layer MLP head; cross entropy, Adam. The
model is replicated (same seed everywhere) and wrapped in ``DistributedDataParallel`` with its
defaults: the gradients are all-reduced during backward (one bucket: one gloo ``all_reduce`` a
step) and, because the batch norms have running statistics, DDP broadcasts those buffers from
rank 0 at the start of every forward (two gloo ``broadcast`` a step), so every rank waits there
for rank 0. Every rank's batch holds a different number of nodes, which DDP does not mind.

Profiling: ``torch.profiler.profile`` (CPU activity, the profiler's defaults otherwise) with
``schedule(wait=1, warmup=1, active=steps-2)``, its ``on_trace_ready`` exporting one chrome
trace per process, ``gnn-rank<R>.json`` in ``--out``; ``prof.step()`` after each step.
``record_function`` marks ``data`` (building the batch and its labels), ``forward``,
``backward`` and ``optimizer``. Rank 0 prints its loss and step time every step, and at the end
its mean step over the traced steps (from the start of a step, before the slow rank's sleep,
to the end of its optimizer step).

Flags:

- ``--out DIR``: where the traces go (created if missing).
- ``--steps N`` (8, at least 3), ``--graphs G`` (32 graphs a rank a step), ``--nodes M`` (96:
  mean nodes per graph), ``--degree K`` (4 edges drawn per node, so about 2K neighbours),
  ``--hidden H`` (192), ``--layers L`` (3), ``--lr`` (3e-3), ``--seed S`` (0).
- ``--slow-rank R``: the rank the three faults below apply to (-1: none).
- ``--factor F``: on the slow rank every linear layer computes its matmul again, of the same
  shapes on the same rows, without gradients, results discarded, (F - 1) x 3 x 1.9 times per
  call (the fraction carried from one call to the next), all of it in the forward: 3 for
  forward and backward (backward as two forwards), times 1.9 because the matmuls are only about
  half of the compute (the neighbour gathers and sums, the batch norms, the pooling and the
  element-wise ops are the rest; measured in CPU time on one process: F = 2 gives 1.9-2.1 x
  the forward + backward). That rank is slower on the same work, as a slow GPU is.
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step.
- ``--data-sleep-ms MS``: the slow rank sleeps while building each batch (inside ``data``), as
  a slow data loader would make it wait.

A sleep shows in the job's step when it is on rank 0, whose buffer broadcast the others wait
for at the start of the forward; on another rank the others run on into their forward and
backward with the cores the sleeper leaves free and wait only in the all-reduce, so most of it
is hidden on 2 shared cores (measured below).

Two imbalances that are not faults (no rank is slower on the same work; a rank with more nodes
simply has more to do):

- by default every graph's node count is drawn uniformly from ``[M/2, 3M/2]``, the same law on
  every rank: the ranks' batches differ a little, step to step (healthy: the largest rank's
  batch 1.02-1.09 x the mean of the four, seed 0).
- ``--heavy-tail S``: node counts are lognormal with sigma ``S`` (same mean ``M``, at least 4,
  at most 12 M), so a rank's batch can hold far more nodes than another's in one step and fewer
  in the next: an imbalance that moves between ranks from step to step (S = 0.8, seed 0: the
  largest batch 1.06-1.31 x the mean, on a different rank from step to step).
- ``--skew-rank R --skew X``: rank R's data source makes graphs X times larger on average
  (mean ``X M`` nodes) in every step, as a sharded dataset whose shard on that rank holds the
  bigger graphs: that rank does X times the work of its peers every step (data imbalance; a slow
  GPU would instead be slower at the same sizes).

Measured (4 processes sharing 2 cores and nothing else running, default shapes, seed 0;
rank 0's mean step over the 6 traced steps, 3-5 runs each, percentages against the healthy
mean): healthy 230-252 ms, mean 242 (a whole healthy run, start to end, 9-10.5 s, most of it
starting the processes); ``--slow-rank 2 --factor 2``: 291-299 ms (+20-24 %);
``--slow-rank 0 --sleep-ms 40``: 272-284 ms (+12-17 %); ``--heavy-tail 0.8``: 230-268 ms
(-5 to +11 %, about +2 % on average); ``--skew-rank 1 --skew 1.8``: 307-339 ms (+27-40 %).
Once or twice each: ``--slow-rank 0 --data-sleep-ms 40`` 266-273 ms (+10-13 %);
``--slow-rank 2 --sleep-ms 40`` 228-245 ms and ``--slow-rank 3 --data-sleep-ms 40`` 239-244 ms
(hidden: -6 to +1 %). The slow (or larger) rank gets more of the 2 cores while its peers wait in
the all-reduce, so the job's step grows less than F (or X); a batch that is larger on one rank
but not larger in all (heavy tail) barely lengthens the step here, since the total work, which
the 2 cores are busy with, is the same. With other jobs on the machine every number is larger
and noisier (healthy steps of 300-700 ms were seen).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_gnn.py --out DIR --slow-rank 2 --factor 2
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function

IN_DIM = 32        # node features
CLASSES = 8
TEACHER_DIM = 32   # the teacher's hidden width


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


def neighbour_mean(h, src, dst, inv_deg):
    """Mean of ``h`` over each node's in-neighbours: gather along the edges, sum at the targets."""
    out = h.new_zeros(h.shape)
    out.index_add_(0, dst, h.index_select(0, src))
    return out * inv_deg


class SAGELayer(nn.Module):
    """GraphSAGE, mean aggregation, batch norm over the nodes, residual:
    h + relu(BN(W_self h + W_neigh mean(h_N)))."""

    def __init__(self, dim):
        super().__init__()
        self.self_lin = SlowLinear(dim, dim)
        self.neigh_lin = SlowLinear(dim, dim, bias=False)
        self.norm = nn.BatchNorm1d(dim)

    def forward(self, h, src, dst, inv_deg):
        agg = neighbour_mean(h, src, dst, inv_deg)
        return h + F.relu(self.norm(self.self_lin(h) + self.neigh_lin(agg)))


class GNN(nn.Module):
    def __init__(self, hidden, layers):
        super().__init__()
        self.embed = SlowLinear(IN_DIM, hidden)
        self.layers = nn.ModuleList(SAGELayer(hidden) for _ in range(layers))
        self.head1 = SlowLinear(hidden, hidden)
        self.head2 = SlowLinear(hidden, CLASSES)

    def forward(self, x, src, dst, inv_deg, graph_of, inv_nodes):
        h = F.relu(self.embed(x))
        for layer in self.layers:
            h = layer(h, src, dst, inv_deg)
        # readout: mean over the nodes of each graph
        pooled = h.new_zeros(inv_nodes.shape[0], h.shape[1]).index_add_(0, graph_of, h) * inv_nodes
        return self.head2(F.relu(self.head1(pooled)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--slow-rank", type=int, default=-1,
                   help="rank that --factor / --sleep-ms / --data-sleep-ms apply to")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's matmul work, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0,
                   help="sleep on the slow rank while it builds each batch")
    p.add_argument("--heavy-tail", type=float, default=0.0,
                   help="lognormal sigma of the node counts (0: uniform in [M/2, 3M/2])")
    p.add_argument("--skew-rank", type=int, default=-1, help="rank whose graphs are --skew times larger")
    p.add_argument("--skew", type=float, default=1.0, help="mean graph size on --skew-rank, x the others'")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--graphs", type=int, default=32, help="graphs per rank per step")
    p.add_argument("--nodes", type=float, default=96, help="mean nodes per graph")
    p.add_argument("--degree", type=int, default=4, help="edges drawn per node (each in both directions)")
    p.add_argument("--hidden", type=int, default=192)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    G, K = args.graphs, args.degree
    mean_nodes = args.nodes * (args.skew if rank == args.skew_rank else 1.0)

    # ---- the teacher: fixed random weights, the same on every rank ----
    gt = torch.Generator().manual_seed(args.seed + 12345)
    t_self = torch.randn(IN_DIM, TEACHER_DIM, generator=gt) / IN_DIM ** 0.5
    t_neigh = torch.randn(IN_DIM, TEACHER_DIM, generator=gt) / IN_DIM ** 0.5
    t_out = torch.randn(TEACHER_DIM, CLASSES, generator=gt)

    # ---- the model, replicated ----
    torch.manual_seed(args.seed)                 # same weights everywhere
    model = DDP(GNN(args.hidden, args.layers))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    if slow and args.factor > 1:
        SlowLinear.extra = (args.factor - 1.0) * 3 * 1.9   # fwd + bwd; matmuls ~half the compute
    if rank == 0:
        n_params = sum(q.numel() for q in model.parameters())
        tail = f"lognormal sigma {args.heavy_tail}" if args.heavy_tail > 0 else "uniform"
        print(f"gnn: {args.layers} SAGE layers of {args.hidden}, {n_params / 1e6:.2f}M params, "
              f"{G} graphs a rank of {args.nodes:g} nodes on average ({tail}), degree ~{2 * K}",
              flush=True)

    def node_counts(gs):
        """How many nodes each graph of this rank's batch has."""
        if args.heavy_tail > 0:
            s = args.heavy_tail
            z = torch.randn(G, generator=gs)
            n = torch.exp(math.log(mean_nodes) - s * s / 2 + s * z)      # mean: mean_nodes
            n = n.clamp(4, 12 * mean_nodes)
        else:
            n = mean_nodes * (0.5 + torch.rand(G, generator=gs))        # uniform in [M/2, 3M/2]
        return n.round().long().clamp(min=4)

    def batch_for(step):
        """One mini-batch: G random graphs as one block-diagonal graph, with the teacher's labels."""
        gs = torch.Generator().manual_seed(args.seed * 1_000_003 + 1000 * rank + step)
        n = node_counts(gs)
        N = int(n.sum())
        first = n.cumsum(0) - n                                  # first node id of each graph
        graph_of = torch.repeat_interleave(torch.arange(G), n)   # graph id of each node
        # K random edges from every node to a node of its own graph, no self loops
        a = torch.arange(N).repeat_interleave(K)
        g_a = graph_of[a]
        local = (torch.rand(N * K, generator=gs) * (n[g_a] - 1)).long()   # 0 .. n-2
        local += (local >= a - first[g_a]).long()                # skip the node itself
        b = first[g_a] + local
        src, dst = torch.cat([a, b]), torch.cat([b, a])          # both directions
        deg = torch.bincount(dst, minlength=N).clamp(min=1)
        inv_deg = (1.0 / deg.float()).unsqueeze(1)
        inv_nodes = (1.0 / n.float()).unsqueeze(1)
        # node features: around a mean drawn per graph
        x = torch.randn(G, IN_DIM, generator=gs)[graph_of] + torch.randn(N, IN_DIM, generator=gs)
        # the teacher's labels
        th = torch.tanh(x @ t_self + neighbour_mean(x, src, dst, inv_deg) @ t_neigh)
        pooled = torch.zeros(G, TEACHER_DIM).index_add_(0, graph_of, th) * inv_nodes
        y = (pooled @ t_out).argmax(1)
        if slow and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000)                # a slow loader
        return (x, src, dst, inv_deg, graph_of, inv_nodes), y, N

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"gnn-rank{rank}.json"))

    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    step_ms = []
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            with record_function("data"):
                inputs, y, n_nodes = batch_for(step)
            opt.zero_grad(set_to_none=True)
            with record_function("forward"):
                loss = F.cross_entropy(model(*inputs), y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
            step_ms.append((time.perf_counter() - ts) * 1000)
            prof.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} nodes {n_nodes} ({step_ms[-1]:.0f} ms)",
                      flush=True)

    # nodes each rank had in the last step (to see --skew / --heavy-tail at work)
    load = [torch.zeros((), dtype=torch.long) for _ in range(world)]
    dist.all_gather(load, torch.tensor(n_nodes))
    if rank == 0:
        traced = step_ms[2:]
        print(f"done in {time.perf_counter() - t0:.1f}s, mean step over the {len(traced)} traced steps "
              f"{sum(traced) / len(traced):.0f} ms, nodes per rank in the last step "
              f"{[int(v) for v in load]}, traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
