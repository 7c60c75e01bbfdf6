"""Distributed graph analytics on a synthetic R-MAT graph: Graph500-style BFS and PageRank.

(calibration table at the end of this docstring)

What it is
----------
An HPC user's graph-analytics job, no neural network: 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``) hold one synthetic power-law graph,
its vertices 1D-partitioned over the ranks, and each "step" answers one batch of queries:

* ``--roots`` level-synchronous breadth-first searches (Graph500 kernel 2, top-down) from
  random roots, each BFS tree validated;
* ``--pr-iters`` iterations of PageRank (push style, continued from the previous step's
  vector, as a long-running solver that is polled once a step);
* a batch of local "neighbourhood" queries (the summed degree of the neighbours of sampled
  vertices, a cheap 2-hop reach estimate) answered by the shard that owns each vertex.

Graph: R-MAT (a, b, c, d) = (0.57, 0.19, 0.19, 0.05) with 2^``--scale`` vertices and
``--edge-factor`` x 2^scale edges drawn from ``--seed`` (every rank draws the same graph and
keeps its part), self loops and duplicates removed, made undirected, and the vertex ids
shuffled by a seeded permutation (as Graph500 does, so the high-degree vertices do not all
land on rank 0). Rank r owns the contiguous id block [lo_r, hi_r) and stores the out-edges of
its vertices as CSR (``rowptr``, ``col``: global ids); the vertex degrees are replicated.

BFS, per level (``bfs_level``):

* ``expand``: gather the neighbours of the local frontier (one ``repeat_interleave`` /
  index gather over the CSR), drop the local ones already visited, (``--dedupe``, default on)
  keep one (vertex, parent) pair per discovered vertex (``torch.unique``), bucket the pairs by
  owner rank (the ids are sorted, and the owners own contiguous blocks);
* ``exchange``: the per-destination counts with a small ``dist.all_to_all_single`` (2 int64
  per pair of ranks: the rows on the wire and the real ones), then the (vertex, parent) rows
  with ``dist.all_to_all_single`` and uneven split sizes;
* ``visit``: mark the received vertices not yet visited: level = depth + 1, parent; they are
  the next frontier;
* ``frontier_allreduce``: ``dist.all_reduce`` of (next frontier size, edges scanned); the BFS
  ends when the global frontier is empty.

PageRank, per iteration (``pagerank_iter``): ``pr_push`` (contribution pr/deg of every local
vertex summed per distinct target with ``index_add_``), ``pr_exchange``
(``dist.all_to_all_single`` of the float64 sums, fixed uneven splits: the target ids were
exchanged once at setup), ``pr_apply`` (damping 0.85, dangling mass spread evenly),
``pr_residual`` (``dist.all_reduce`` of the L1 change and the next dangling mass).

``validate`` (once a step, after the traversals): every visited vertex but the root must have
its parent among its neighbours and the root level 0; an ``all_reduce`` of (visited, edges in
the component, bad parents, max depth) per BFS, then ``write_results``: each rank appends the
step's line (TEPS, PageRank residual, query answers) to its own jsonl file.

Communication per step (defaults: scale 16, edge factor 16, 2 roots, 4 PageRank iterations):
per BFS level one 8-element counts all_to_all_single, one (rows x 2 int64) all_to_all_single
(up to ~0.5 MB a rank at the widest levels), one 2-element all_reduce; 5-7 levels a BFS; per
PageRank iteration one all_to_all_single of ~33 K float64 (~270 KB) a rank and one 2-element
all_reduce; the validation's 4 x roots all_reduce.

User ranges per step: ``sleep`` (fault only), ``load_queries``, ``local_queries``, ``bfs``
[``bfs_root``, ``bfs_level`` (``expand``, ``exchange``, ``visit``, ``frontier_allreduce``)],
``pagerank`` [``pagerank_iter`` (``pr_push``, ``pr_exchange``, ``pr_apply``, ``pr_residual``)],
``validate``, ``write_results``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent inside the
all_to_all_single and all_reduce calls).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Job size: ``--scale`` (16), ``--edge-factor`` (16), ``--roots`` (2 BFS a step),
``--pr-iters`` (4), ``--queries`` (40000 neighbourhood queries a step over the whole graph,
each answered by the owner of its vertex), ``--no-dedupe`` (send every discovered edge's
(vertex, parent) pair, duplicates included).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's local work (the BFS ``expand``, the PageRank
  ``pr_push`` and the ``local_queries``) is done F times, the F - 1 extra passes discarded
  (the fractional part over that fraction of the frontier / edges / queries);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow query-batch read: ``load_queries`` sleeps MS each step;
* ``--validate-sleep-ms MS`` (family fault): a slow result write: the rank's
  ``write_results`` sleeps MS each step (after the validation's all_reduces);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X``: every chunk rank A sends rank B in the
  BFS frontier all_to_all_single (and in the PageRank all_to_all_single) carries X times the
  rows, zero rows after the real ones; the counts all_to_all tells B both numbers and B keeps
  the head. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's share of the step's neighbourhood queries is drawn
  lognormal(0, S) around the even share (from (seed, rank, step), clamped to [1/4x, 4x]):
  the local work differs by rank and step;
* ``--big-rank K --big X``: an unbalanced partition: rank K owns X times as many vertices
  (so ~X times the edges, frontier and queries) as each other rank, every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs and analysis processes; 4 ranks, 10 steps
(8 timed). Step medians of all ranks agree within a few % (every BFS level and PageRank
iteration ties the ranks), so one number; "busy" = median time outside the all_to_all_single
and all_reduce calls, slow rank vs the mean of the others; "base" = the healthy default run(s)
next to it.

  setting (slow rank)                                base ms  step ms  busy slow / others ms
  healthy default (5 runs)                              -     399-704  129-258 (by load)
  healthy --shapes --pr-iters 6                         -       448    162-196
  healthy --scale 17 --edge-factor 8 --pr-iters 3       -       707    221-271
  healthy --no-dedupe                                   -       950    378-414
  healthy --roots 3 --queries 20000 --edge-factor 12    -       345    130-158
  healthy --queries 160000 (4x the queries)             -       744    310-344
  --factor 3 (r1)                                      430     1080    678 / 282
  --factor 2 (r0)                                      536      590    340 / 206
  --scale 17 --edge-factor 8 --factor 2.5 (r3)         536      639    335 / 182
  --no-dedupe --factor 2 (r2)                          536      665    317 / 232
  --no-dedupe --factor 3 (r2)                          412      884    550 / 285
  --sleep-ms 100 (r2)                                  558      707    327 / 209
  --sleep-ms 150 (r2)                                  412      610    324 / 163
  --data-sleep-ms 150 (r3)                             704      655    359 / 186
  --validate-sleep-ms 150 (r0)                         704      622    350 / 200
  --hog (r0)                                           558      893    302 / 198
  link 1->2 x64                                        422      450    r1 141, r2 151 / 163
  link 1->2 x128 (run 1)                               430-558  830    r1 238, r2 217 / 204
  link 1->2 x128 (run 2)                               412      605    r1 199, r2 199 / 190
  --big-rank 3 --big 2.5                                -       475    267 / 127
  --seq-sigma 0.8                                       -       648    186-269 by rank and step

Reading: the neighbours' load moved a healthy step between 400 and 700 ms from one run to
the next, so one run's step change says little; the slowed rank's busy time shows every
fault. Most of a step is spent inside the collectives (4 processes on 2 cores: a rank waits
there for the others and for a core), so the busy times are ~35-45% of the step. ``--factor 2``
already adds ~130-150 ms of local work (25% of a step; 85 ms with ``--no-dedupe``, whose
expansion is dominated by the sort and the wider exchange, hence 3 there); ``--factor 3`` more
than doubles the step. A 150 ms sleep is 25-35% of the step wherever it sits. The padded
link's chunks reach ~8 MB in every PageRank exchange and ~20 MB at the widest BFS levels (x128);
x64 cost little (under 10%), x128 added 45-90% to everyone's step (every rank waits in the
all_to_all for the 1 -> 2 chunk), while the busy times barely move. ``--big 2.5`` gives the
big rank ~2x the others' busy time. Wall per run: 13-20 s alone, 23-39 s in the battery; traces ~7-8 MB a
rank (11-12 MB with --shapes or 3 roots, 16 MB with both: avoid; a --factor 3 rank's 13-14 MB,
its repeated passes are traced too).
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

import numpy as np
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--scale", type=int, default=16, help="log2 of the vertex count")
    p.add_argument("--edge-factor", type=int, default=16)
    p.add_argument("--roots", type=int, default=2, help="BFS traversals a step")
    p.add_argument("--pr-iters", type=int, default=4, help="PageRank iterations a step")
    p.add_argument("--queries", type=int, default=40000, help="neighbourhood queries a step (all ranks)")
    p.add_argument("--no-dedupe", action="store_true", help="send duplicate discoveries too")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--validate-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and a.link_src == a.link_dst:
        p.error("a link joins two different ranks")
    return a


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

class Comm:
    """all_to_all_single / all_reduce with the time spent in them; pads one link's chunks."""

    def __init__(self, rank, world, link=None, link_factor=1.0):
        self.rank, self.world = rank, world
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0

    def wire_rows(self, n, dst):
        """Rows on the wire for n real rows from this rank to dst."""
        if self.link is not None and (self.rank, dst) == self.link and self.link_factor > 1 and n > 0:
            return max(n, int(round(n * self.link_factor)))
        return n

    def all_reduce(self, t, op=dist.ReduceOp.SUM):
        t0 = time.perf_counter()
        dist.all_reduce(t, op=op)
        self.secs += time.perf_counter() - t0
        return t

    def counts(self, real):
        """Exchange (wire, real) row counts; returns (send_wire, recv_wire, recv_real) lists."""
        wire = [self.wire_rows(int(n), d) for d, n in enumerate(real)]
        send = torch.tensor([v for d in range(self.world) for v in (wire[d], int(real[d]))], dtype=torch.int64)
        recv = torch.empty_like(send)
        t0 = time.perf_counter()
        dist.all_to_all_single(recv, send)
        self.secs += time.perf_counter() - t0
        recv = recv.view(self.world, 2)
        return wire, recv[:, 0].tolist(), recv[:, 1].tolist()

    def exchange(self, rows, real, wire, recv_wire, recv_real):
        """rows: (sum(real), ...) grouped by destination; pads to wire, keeps the received heads."""
        tail = rows.shape[1:]
        if wire != list(real):
            parts, o = [], 0
            for d in range(self.world):
                parts.append(rows[o: o + real[d]])
                if wire[d] > real[d]:
                    parts.append(rows.new_zeros((wire[d] - real[d],) + tail))
                o += real[d]
            rows = torch.cat(parts)
        out = rows.new_empty((sum(recv_wire),) + tail)
        t0 = time.perf_counter()
        dist.all_to_all_single(out, rows.contiguous(), output_split_sizes=recv_wire,
                               input_split_sizes=wire)
        self.secs += time.perf_counter() - t0
        if recv_wire != recv_real:
            keep, o = [], 0
            for d in range(self.world):
                keep.append(out[o: o + recv_real[d]])
                o += recv_wire[d]
            out = torch.cat(keep)
        return out


# --------------------------------------------------------------------------
# graph
# --------------------------------------------------------------------------

def rmat_edges(scale, edge_factor, seed, a=0.57, b=0.19, c=0.19):
    """Graph500-style R-MAT edge list (undirected, no self loops, no duplicates), shuffled ids."""
    n = 1 << scale
    m = edge_factor * n
    rng = np.random.default_rng(seed)
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    ab, abc = a + b, a + b + c
    for bit in range(scale):
        r = rng.random(m)
        i_bit = r >= ab                        # lower half (c or d quadrant)
        j_bit = ((r >= a) & (r < ab)) | (r >= abc)
        src |= i_bit.astype(np.int64) << bit
        dst |= j_bit.astype(np.int64) << bit
    perm = rng.permutation(n)
    src, dst = perm[src], perm[dst]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    u = np.concatenate([src, dst])
    w = np.concatenate([dst, src])
    key = np.unique(u * n + w)
    return key // n, key % n, n


def partition(n, world, big_rank, big):
    weights = [big if r == big_rank else 1.0 for r in range(world)]
    tot = sum(weights)
    bounds = [0]
    acc = 0.0
    for w in weights:
        acc += w
        bounds.append(int(round(n * acc / tot)))
    bounds[-1] = n
    return bounds


class Shard:
    """This rank's vertices [lo, hi) with their out-edges as CSR."""

    def __init__(self, u, w, n, bounds, rank):
        self.n, self.rank = n, rank
        self.lo, self.hi = bounds[rank], bounds[rank + 1]
        self.nloc = self.hi - self.lo
        self.inner = torch.tensor(bounds[1:-1], dtype=torch.int64)   # owner = bucketize(v, inner, right)
        deg = np.bincount(u, minlength=n)
        self.deg = torch.from_numpy(deg.astype(np.int64))           # replicated
        sel = (u >= self.lo) & (u < self.hi)
        lu, lw = u[sel] - self.lo, w[sel]                             # already sorted by u
        self.col = torch.from_numpy(np.ascontiguousarray(lw))
        self.src = torch.from_numpy(np.ascontiguousarray(lu))
        counts = np.bincount(lu, minlength=self.nloc)
        rowptr = np.zeros(self.nloc + 1, dtype=np.int64)
        np.cumsum(counts, out=rowptr[1:])
        self.rowptr = torch.from_numpy(rowptr)
        self.ldeg = torch.from_numpy(counts.astype(np.int64))

    def owner(self, v):
        return torch.bucketize(v, self.inner, right=True)

    def gather(self, verts_local):
        """Neighbours of the given local vertices: (neighbour ids, index of the source in verts)."""
        starts = self.rowptr[verts_local]
        d = self.ldeg[verts_local]
        total = int(d.sum())
        which = torch.repeat_interleave(torch.arange(len(verts_local)), d, output_size=total)
        first = torch.cumsum(d, 0) - d
        pos = torch.arange(total) - first[which] + starts[which]
        return self.col[pos], which


# --------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------

def expand(shard, frontier, level, dedupe):
    """One level's local work: (rows (k, 2) of (vertex, parent) sorted by owner, count per owner, edges)."""
    nbrs, which = shard.gather(frontier)
    parents = frontier[which] + shard.lo
    loc = (nbrs >= shard.lo) & (nbrs < shard.hi)
    fresh = ~loc
    fresh[loc] = level[nbrs[loc] - shard.lo] < 0
    nbrs, parents = nbrs[fresh], parents[fresh]
    if dedupe:
        uniq, inv = torch.unique(nbrs, return_inverse=True)
        par = torch.empty_like(uniq).scatter_(0, inv, parents)
        nbrs, parents = uniq, par
    else:
        order = torch.argsort(nbrs, stable=True)
        nbrs, parents = nbrs[order], parents[order]
    own = shard.owner(nbrs)
    cnt = torch.bincount(own, minlength=dist.get_world_size())
    return torch.stack([nbrs, parents], 1), cnt, len(which)


def bfs(shard, comm, root, extra, dedupe):
    """Level-synchronous top-down BFS; returns (level, parent) of the local vertices, levels, edges."""
    level = torch.full((shard.nloc,), -1, dtype=torch.int32)
    parent = torch.full((shard.nloc,), -1, dtype=torch.int64)
    if shard.lo <= root < shard.hi:
        level[root - shard.lo] = 0
        parent[root - shard.lo] = root
        frontier = torch.tensor([root - shard.lo], dtype=torch.int64)
    else:
        frontier = torch.empty(0, dtype=torch.int64)
    depth, scanned = 0, 0
    while True:
        with record_function("bfs_level"):
            with record_function("expand"):
                rows, cnt, edges = expand(shard, frontier, level, dedupe)
                if extra > 0 and len(frontier) > 0:          # --factor: the same work again, discarded
                    for _ in range(int(extra)):
                        expand(shard, frontier, level, dedupe)
                    k = int(round(len(frontier) * (extra - int(extra))))
                    if k > 0:
                        expand(shard, frontier[:k], level, dedupe)
            with record_function("exchange"):
                real = cnt.tolist()
                wire, recv_wire, recv_real = comm.counts(real)
                got = comm.exchange(rows, real, wire, recv_wire, recv_real)
            with record_function("visit"):
                idx = got[:, 0] - shard.lo
                new = level[idx] < 0
                idx, par = idx[new], got[new, 1]
                level[idx] = depth + 1
                parent[idx] = par
                frontier = torch.unique(idx)
            with record_function("frontier_allreduce"):
                tot = comm.all_reduce(torch.tensor([len(frontier), edges], dtype=torch.int64))
        depth += 1
        scanned += int(tot[1])
        if int(tot[0]) == 0:
            return level, parent, depth, scanned


class PageRank:
    """Push-style PageRank over the shard; the target ids are exchanged once."""

    def __init__(self, shard, comm, damping=0.85):
        self.shard, self.comm, self.d = shard, comm, damping
        with record_function("pagerank_setup"):
            uniq, self.inv = torch.unique(shard.col, return_inverse=True)
            self.real = torch.bincount(shard.owner(uniq), minlength=comm.world).tolist()
            self.wire, self.recv_wire, self.recv_real = comm.counts(self.real)
            got = comm.exchange(uniq.view(-1, 1), self.real, self.wire, self.recv_wire, self.recv_real)
            self.recv_idx = got[:, 0] - shard.lo
        self.n_uniq = len(uniq)
        n = shard.n
        self.pr = torch.full((shard.nloc,), 1.0 / n, dtype=torch.float64)
        self.inv_deg = torch.where(shard.ldeg > 0, 1.0 / shard.ldeg.clamp(min=1).double(),
                                   torch.zeros((), dtype=torch.float64))
        self.dangling = shard.ldeg == 0
        self.dmass = float(comm.all_reduce(self.pr[self.dangling].sum().view(1))[0])
        self.residual = float("nan")

    def push(self, frac=1.0):
        contrib = self.pr * self.inv_deg
        if frac < 1.0:
            m = int(len(self.inv) * frac)
            return torch.zeros(self.n_uniq, dtype=torch.float64).index_add_(
                0, self.inv[:m], contrib[self.shard.src[:m]])
        return torch.zeros(self.n_uniq, dtype=torch.float64).index_add_(0, self.inv, contrib[self.shard.src])

    def iterate(self, iters, extra):
        n = self.shard.n
        for _ in range(iters):
            with record_function("pagerank_iter"):
                with record_function("pr_push"):
                    sums = self.push()
                    if extra > 0:
                        for _ in range(int(extra)):
                            self.push()
                        if extra - int(extra) > 0:
                            self.push(extra - int(extra))
                with record_function("pr_exchange"):
                    got = self.comm.exchange(sums.view(-1, 1), self.real, self.wire, self.recv_wire,
                                             self.recv_real)
                with record_function("pr_apply"):
                    incoming = torch.zeros(self.shard.nloc, dtype=torch.float64).index_add_(
                        0, self.recv_idx, got[:, 0])
                    new = (1.0 - self.d) / n + self.d * (incoming + self.dmass / n)
                    res = (new - self.pr).abs().sum()
                    self.pr = new
                with record_function("pr_residual"):
                    r = self.comm.all_reduce(torch.stack([res, self.pr[self.dangling].sum()]))
                self.residual, self.dmass = float(r[0]), float(r[1])


def local_queries(shard, verts_local, extra):
    """Sum of the neighbours' degrees of each queried vertex (2-hop reach estimate)."""
    def once(v):
        nbrs, which = shard.gather(v)
        return torch.zeros(len(v), dtype=torch.int64).index_add_(0, which, shard.deg[nbrs])
    ans = once(verts_local)
    if extra > 0:
        for _ in range(int(extra)):
            once(verts_local)
        k = int(round(len(verts_local) * (extra - int(extra))))
        if k > 0:
            once(verts_local[:k])
    return ans


def validate(shard, comm, level, parent):
    """Every visited non-root vertex has its parent among its neighbours; global stats."""
    vis = level >= 0
    is_parent = shard.col == parent[shard.src]
    ok = torch.zeros(shard.nloc, dtype=torch.bool)
    ok[shard.src[is_parent]] = True
    bad = (vis & (level > 0) & ~ok).sum()
    comp_edges = shard.ldeg[vis].sum()
    stats = torch.stack([vis.sum(), comp_edges, bad, level.max().to(torch.int64)])
    s = comm.all_reduce(stats[:3].clone())
    mx = comm.all_reduce(stats[3:].clone(), op=dist.ReduceOp.MAX)
    return int(s[0]), int(s[1]) // 2, int(s[2]), int(mx[0])


def query_share(args, world, step, rank, bounds):
    """This rank's number of neighbourhood queries this step."""
    q = args.queries * (bounds[rank + 1] - bounds[rank]) / bounds[-1]
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        f = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        q *= min(4.0, max(0.25, f))
    return max(1, int(round(q)))


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
    comm = Comm(rank, world, link, args.link_factor)

    # the same graph on every rank, each keeps its block of vertices
    t_gen = time.perf_counter()
    u, w, n = rmat_edges(args.scale, args.edge_factor, args.seed)
    bounds = partition(n, world, args.big_rank, args.big)
    shard = Shard(u, w, n, bounds, rank)
    n_edges = len(u) // 2
    del u, w
    t_gen = time.perf_counter() - t_gen

    # the query batches of every step: written once by rank 0, read by everyone each step
    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="graph_bfs_")
        g = np.random.default_rng(args.seed + 17)
        deg = shard.deg.numpy()
        live = np.flatnonzero(deg > 0)
        roots = g.choice(live, size=(args.steps, args.roots), replace=True)
        np.save(os.path.join(tmp[0], "roots.npy"), roots)
    dist.broadcast_object_list(tmp, src=0)
    work_dir = tmp[0]
    dist.barrier()
    result_path = os.path.join(work_dir, f"results_rank{rank}.jsonl")

    pr = PageRank(shard, comm)
    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[graph-bfs] world={world} scale={args.scale} vertices={n} edges={n_edges} "
              f"bounds={bounds} roots/step={args.roots} pr_iters={args.pr_iters} "
              f"queries={args.queries} dedupe={not args.no_dedupe} gen={t_gen:.1f}s", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_queries"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    roots = np.load(os.path.join(work_dir, "roots.npy"))[step].tolist()
                    q = query_share(args, world, step, rank, bounds)
                    gq = torch.Generator().manual_seed(args.seed * 7919 + 31 * step + rank)
                    qverts = torch.randint(0, shard.nloc, (q,), generator=gq)

                with record_function("local_queries"):
                    ans = local_queries(shard, qverts, extra)

                trees = []
                with record_function("bfs"):
                    for root in roots:
                        with record_function("bfs_root"):
                            lvl, par, depth, scanned = bfs(shard, comm, int(root), extra, not args.no_dedupe)
                        trees.append((int(root), lvl, par, depth))

                with record_function("pagerank"):
                    pr.iterate(args.pr_iters, extra)

                with record_function("validate"):
                    out = []
                    for root, lvl, par, depth in trees:
                        visited, comp_edges, bad, maxd = validate(shard, comm, lvl, par)
                        out.append({"root": root, "visited": visited, "edges": comp_edges,
                                    "bad_parents": bad, "depth": maxd})
                        if bad:
                            raise RuntimeError(f"BFS from {root}: {bad} vertices with a wrong parent")

                with record_function("write_results"):
                    if slow and args.validate_sleep_ms > 0:
                        time.sleep(args.validate_sleep_ms / 1000.0)
                    with open(result_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "rank": rank, "bfs": out,
                                             "pr_residual": pr.residual, "queries": len(qverts),
                                             "query_mean": float(ans.double().mean())}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    teps = sum(o["edges"] for o in out) / max(1e-9, step_times[-1])
                    print(f"step {step:3d} bfs {[(o['visited'], o['depth']) for o in out]} "
                          f"pr_res {pr.residual:.3e} q {len(qverts)} TEPS~{teps:.3g} "
                          f"t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside all_to_all / all_reduce) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(work_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
