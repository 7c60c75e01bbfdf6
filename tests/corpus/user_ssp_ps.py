"""Stale-synchronous-parallel (SSP) training with a hand-written sharded parameter server.

(calibration table at the end of this docstring)

What it is
----------
A small CTR-style regression model (categorical fields through an embedding table, a few
dense features, an MLP on top, MSE loss against a hidden "teacher" function) trained
data-parallel on 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``) under the stale-synchronous-parallel protocol of the old parameter
server papers (Ho et al. 2013, "More effective distributed ML via a stale synchronous
parallel parameter server"), written by hand with torch.distributed point-to-point only.

Every rank is a worker AND a server: the model's parameters, flattened into one vector,
are cut into 4 contiguous shards and rank r owns shard r (the authoritative copy). Each
step c (the worker's "clock") a worker

1. ``wait_clock``: may start step c only when every peer has reported clock >= c - S
   (S = ``--staleness``, default 2; a peer's clock is the number of steps whose gradients
   it has pushed). So S = 0 is bulk-synchronous, and a fast worker runs at most S steps
   ahead of the slowest before it blocks here;
2. ``pull``: sends a request (its clock) to the 3 other owners and receives their current
   shards (its own shard it reads locally), then loads the whole vector into its model;
3. ``forward`` / ``backward`` on its own batch;
4. ``push``: sends each gradient slice to the slice's owner (its own slice it applies at
   once), then its new clock to every peer. The owners apply pushed gradients with plain
   SGD (lr / world) as they arrive, whichever worker and clock they come from;
5. ``log_grad_norm``: appends the step's gradient norm to a per-rank log file;
6. ``evaluate`` every ``--eval-every`` steps: the MSE of a fixed held-out batch.

Serving without threads: every message has its own tag (a base per kind + the sender's
clock) and its own receive buffer, and at the start every rank posts an ``irecv`` for every
request, push and clock it will get from each peer during the run. gloo does not report
the completion of a posted ``irecv`` (``is_completed()`` stays False until ``wait()``), but
it fills the buffer in the background; so every message starts with a non-zero flag and
the rank polls the first element of the next expected buffers (numpy views, no torch op)
at fixed points: before forward, after backward, and in every loop where it waits (clocks,
pull replies, the end). An arrived message is ``wait()``-ed (returns at once) and handled,
requests and pushes in ``record_function("serve")`` (a reply isend of the shard, or the SGD
update of the shard), clocks by noting the peer's clock. Since every receive is posted in
advance, a send never needs the receiver's attention: all of a step's isends (requests,
replies, pushes, clocks) are waited at the end of its push phase (an isend left pending
across ``prof.step()`` crashed the trace export of this torch build). At the end every
worker sends a "bye" request and keeps serving until every peer
has sent its last push, its last clock and its bye; then a ``dist.barrier`` and a final
``all_reduce`` of the loss for the log. The serving is polling, so nothing runs beside the
training thread.

Communication per step (defaults: 24 fields, 4096 x 32 embedding, MLP 792 -> 512 -> 512
-> 512 -> 1, 1.06 M parameters, shards of ~266 K floats = 1.06 MB): per ordered pair of
ranks one request (2 floats, tag 1000 + clock; a last one with clock -1 = "bye"), one
reply (the owner's shard + 2 header floats, tag 2000 + clock), one push (the gradient
slice + 3 header floats, tag 3000 + clock) and one clock (2 floats, tag 4000 + clock),
all isend/irecv.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``wait_clock``, ``pull``,
``forward``, ``backward``, ``push``, ``log_grad_norm``, ``evaluate`` (every few steps),
``serve`` (inside any of them, whenever a peer's message is handled).

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the
clock wait, in the pull and in posting and waiting the step's sends).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job: ``--fields`` (24), ``--emb-rows`` (4096), ``--emb-dim`` (32), ``--dense-feats``
(24), ``--hidden`` (512), ``--mlp-layers`` (3), ``--batch`` (512 rows a worker),
``--lr`` (0.1), ``--staleness`` (2), ``--eval-every`` (3), ``--poll-ms`` (0.5, the sleep
between two polls while waiting).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the worker's forward and backward are done F times
  (F - 1 extra passes on the same batch, their gradients discarded; a fractional part over
  that fraction of the rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: slow batch loading: ``load_batch`` sleeps MS each step;
* ``--logger-sleep-ms MS`` (family fault): a slow gradient-norm logger: ``log_grad_norm``
  sleeps MS before appending its line (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X``: every pull reply and every push A sends to
  B carries X times the bytes (zero-padded; B receives it all and keeps the head). No
  ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each worker's batch is ``--batch`` x lognormal(0, S) rows, drawn from
  (seed, rank, step), clamped to [1/4x, 4x];
* ``--big-rank K --big X``: rank K's batch is X times the others', every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs; 4 ranks, 10 steps (8 timed), default
sizes unless told. "step" = median step time of the ranks (the slowed rank's own in
brackets), "busy" = median time outside ``wait_clock``, ``pull`` and the push posts/waits,
slowed rank vs the mean of the others. The healthy default moved between 145 and 360 ms a
step from one run to the next with the box's load.

  setting (slow rank)                           step ms               busy slow / others ms
  healthy default (st2), 3 runs                 144-357                    84-205 (by load)
  healthy --staleness 0                         232-272                   141-173
  healthy --shapes                              155-190                   100-129
  healthy --hidden 768                          419-517                   291-323
  --factor 3 (r1)                               388-495 (r1 526)          415 / 190
  --factor 3 (r1) --staleness 3                 234-243 (r1 282)          225 / 122
  --factor 3 (r2) --staleness 0                 234-274 (r2 248)          235 / 137
  --factor 4 (r0) --staleness 3                 170-243 (r0 229)          178 /  73
  --hidden 768 --factor 3 (r3)                  392-415 (r3 493)          353 / 242
  --sleep-ms 120 (r3)                           203-263 (r3 277)          258 / 141
  --sleep-ms 150 (r2)                           387-391 (r2 365)          324 / 186
  --data-sleep-ms 120 (r1) --staleness 3        281-353 (r1 330)          299 / 173
  --data-sleep-ms 150 (r3) --staleness 0        378-395 (r3 431)          336 / 184
  --logger-sleep-ms 120 (r0) --staleness 0      270-288 (r0 255)          208 / 115
  --logger-sleep-ms 150 (r1)                    274-291 (r1 290)          269 / 130
  --hog (r2)                                    215-252 (r2 254)          146 / 122
  --hog (r0)                                    214-274 (r0 252)          204 / 142
  link 0->1 x32 (32 MB messages)                172-212                   r0 107, r1 113 / 136 (no cost)
  link 0->1 x64 (68 MB)                         r0 160, r1 163 / 127      76-87 everywhere
  link 2->0 x128 (136 MB)                       r0 169, r2 174 / 147      r0 105 / 82
  link 1->2 x96 (102 MB)                        r1 206, r2 206 / 153-158  r2 105 / 82
  --big-rank 3 --big 3                          217-276 (r3 276)          190 /  99
  --big-rank 3 --big 3 --staleness 0            463-536                   440 / 203
  --seq-sigma 0.8                               124-371                    78-185 by draw

Reading: a slowed worker's busy time shows every fault (the extra forward/backward passes,
the sleep, the hog's share of the cores). With staleness 0 the others wait for it every step
in ``wait_clock``; with staleness 2-3 they first run ahead (their first steps are short), then
wait too, so over the traced steps their step medians come close to the slowed rank's.
Serving only at poll points means a pull waits for the owners' next poll (up to a forward or
a backward), so even a healthy step spends 30-40 % in ``pull`` / ``wait_clock``. A padded link
costs little until the messages are ~100 MB (loopback TCP is fast), then both ends of the
link (the sender waits its sends at the end of the push phase, the receiver its pull reply)
take ~30 % longer steps. The hog costs its rank the least (+15-45 % busy), as its thread
takes the shared cores from every rank. Wall per run: 8-20 s; traces 1.2-1.9 MB a rank.
"""

import argparse
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
from torch.nn.utils import parameters_to_vector, vector_to_parameters
from torch.profiler import ProfilerActivity, profile, record_function, schedule



def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--fields", type=int, default=24)
    p.add_argument("--emb-rows", type=int, default=4096)
    p.add_argument("--emb-dim", type=int, default=32)
    p.add_argument("--dense-feats", type=int, default=24)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--mlp-layers", type=int, default=3)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--staleness", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=3)
    p.add_argument("--poll-ms", type=float, default=0.5)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--logger-sleep-ms", type=float, default=0.0)
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
        p.error("--link-src and --link-dst must differ")
    if a.staleness < 0:
        p.error("--staleness must be >= 0")
    return a


# --------------------------------------------------------------------------
# model and data
# --------------------------------------------------------------------------

class CTRRegressor(nn.Module):
    def __init__(self, fields, rows, edim, dense, hidden, layers):
        super().__init__()
        self.emb = nn.Embedding(rows, edim)
        nn.init.normal_(self.emb.weight, std=0.05)
        dims = [fields * edim + dense] + [hidden] * layers
        self.mlp = nn.ModuleList(nn.Linear(i, o) for i, o in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(hidden, 1)

    def forward(self, ids, xd):
        h = torch.cat([self.emb(ids).flatten(1), xd], dim=1)
        for lin in self.mlp:
            h = F.relu(lin(h))
        return self.head(h).squeeze(1)


class Teacher:
    """The hidden function the regression learns (the same on every rank)."""

    def __init__(self, args):
        g = torch.Generator().manual_seed(args.seed + 99991)
        self.tab = torch.randn(args.emb_rows, generator=g) * 0.5
        self.w = torch.randn(args.fields, generator=g) / math.sqrt(args.fields)
        self.v = torch.randn(args.dense_feats, 4, generator=g) / math.sqrt(args.dense_feats)
        ranks = torch.arange(1, args.emb_rows + 1, dtype=torch.float64)
        self.pop = (1.0 / ranks ** 1.05).float()           # Zipf-like popularity of the ids

    def batch(self, n, gen, fields, dense):
        ids = torch.multinomial(self.pop, n * fields, replacement=True, generator=gen).view(n, fields)
        xd = torch.randn(n, dense, generator=gen)
        y = (self.tab[ids] * self.w).sum(1) + torch.sin(xd @ self.v).sum(1)
        y = y + 0.05 * torch.randn(n, generator=gen)
        return ids, xd, y


def batch_rows(args, rank, step):
    n = float(args.batch)
    if rank == args.big_rank:
        n *= args.big
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        z = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        n *= min(4.0, max(0.25, z))
    return max(8, int(round(n)))


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
# the parameter server (one shard a rank), served by polling
# --------------------------------------------------------------------------

class ShardServer:
    """My shard of the parameters, served by polling; the worker's pull / push / clock side.

    Every message has its own tag (kind base + the sender's clock) and its own receive buffer,
    all posted at the start, so a send never needs the receiver to be doing anything: the
    sends of a step are all waited at the end of its push phase."""

    HDR_REQ, HDR_REP, HDR_PUSH = 2, 2, 3

    def __init__(self, args, rank, world, bounds, my_shard):
        self.args, self.rank, self.world = args, rank, world
        self.bounds = bounds
        self.shard = my_shard                       # the authoritative copy of my slice
        self.lr = args.lr / world
        self.steps = args.steps
        self.peers = [p for p in range(world) if p != rank]
        self.link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
        n_me = self.size(rank)
        # receive side: one buffer (and one posted irecv) per peer, kind and clock;
        # the numpy views of the flags let a poll read memory without running a torch op
        self.rq_buf = {p: [torch.zeros(self.HDR_REQ) for _ in range(self.steps + 1)] for p in self.peers}
        self.pu_buf = {p: [torch.zeros(self.padded(self.HDR_PUSH + n_me, p, rank)) for _ in range(self.steps)]
                       for p in self.peers}
        self.ck_buf = {p: [torch.zeros(2) for _ in range(self.steps)] for p in self.peers}
        self.rp_buf = {p: torch.zeros(self.padded(self.HDR_REP + self.size(p), p, rank)) for p in self.peers}
        self.rq_flag = {p: [b.numpy() for b in bs] for p, bs in self.rq_buf.items()}
        self.pu_flag = {p: [b.numpy() for b in bs] for p, bs in self.pu_buf.items()}
        self.ck_flag = {p: [b.numpy() for b in bs] for p, bs in self.ck_buf.items()}
        self.rp_flag = {p: b.numpy() for p, b in self.rp_buf.items()}
        self.rq_work, self.pu_work, self.ck_work = {}, {}, {}
        # send side: reply and push buffers reused step after step (all sends are waited
        # at the end of the step's push phase)
        self.rep_pool = {p: [] for p in self.peers}
        self.rep_used = {p: 0 for p in self.peers}
        self.push_out = {p: torch.zeros(self.padded(self.HDR_PUSH + self.size(p), rank, p)) for p in self.peers}
        self.sends = []                              # (work, buffer) of this step
        self.done = []                               # finished works, kept until the trace is out
        # state
        self.next_req = {p: 0 for p in self.peers}
        self.next_push = {p: 0 for p in self.peers}
        self.next_clock = {p: 0 for p in self.peers}
        self.peer_clock = {p: 0 for p in self.peers}
        self.bye = {p: False for p in self.peers}
        self.served = 0

    def size(self, r):
        return self.bounds[r + 1] - self.bounds[r]

    def padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.args.link_factor > 1:
            return max(n, int(round(n * self.args.link_factor)))
        return n

    def post_all(self):
        for p in self.peers:
            self.rq_work[p] = [dist.irecv(b, p, tag=1000 + c) for c, b in enumerate(self.rq_buf[p])]
            self.pu_work[p] = [dist.irecv(b, p, tag=3000 + c) for c, b in enumerate(self.pu_buf[p])]
            self.ck_work[p] = [dist.irecv(b, p, tag=4000 + c) for c, b in enumerate(self.ck_buf[p])]

    # ---- serving -------------------------------------------------------
    def poll(self):
        """Handle every peer message that has arrived; returns how many."""
        handled = 0
        for p in self.peers:
            while self.next_req[p] <= self.steps and self.rq_flag[p][self.next_req[p]][0] != 0:
                handled += 1
                with record_function("serve"):
                    self._on_request(p)
            while self.next_push[p] < self.steps and self.pu_flag[p][self.next_push[p]][0] != 0:
                handled += 1
                with record_function("serve"):
                    self._on_push(p)
            while self.next_clock[p] < self.steps and self.ck_flag[p][self.next_clock[p]][0] != 0:
                handled += 1
                self._on_clock(p)
        self.served += handled
        return handled

    def _on_request(self, p):
        k = self.next_req[p]
        self.next_req[p] += 1
        w = self.rq_work[p][k]
        w.wait()
        self.done.append(w)
        clock = int(self.rq_flag[p][k][1])
        if clock < 0:                                   # "bye": no more requests from p
            self.bye[p] = True
            return
        pool = self.rep_pool[p]
        if self.rep_used[p] == len(pool):
            pool.append(torch.zeros(self.padded(self.HDR_REP + self.shard.numel(), self.rank, p)))
        buf = pool[self.rep_used[p]]
        self.rep_used[p] += 1
        buf[0] = 1.0
        buf[1] = float(clock)
        buf[self.HDR_REP: self.HDR_REP + self.shard.numel()].copy_(self.shard)
        self.sends.append((dist.isend(buf, p, tag=2000 + clock), buf))

    def _on_push(self, p):
        k = self.next_push[p]
        self.next_push[p] += 1
        w = self.pu_work[p][k]
        w.wait()
        self.done.append(w)
        n = self.shard.numel()
        self.shard.add_(self.pu_buf[p][k][self.HDR_PUSH: self.HDR_PUSH + n], alpha=-self.lr)   # SGD as it arrives

    def _on_clock(self, p):
        k = self.next_clock[p]
        self.next_clock[p] += 1
        w = self.ck_work[p][k]
        w.wait()
        self.done.append(w)
        self.peer_clock[p] = max(self.peer_clock[p], int(self.ck_flag[p][k][1]))

    # ---- worker side ---------------------------------------------------
    def _small_send(self, values, p, tag):
        t = torch.tensor([1.0] + [float(v) for v in values])
        self.sends.append((dist.isend(t, p, tag=tag), t))

    def _idle(self):
        if not self.poll():
            time.sleep(self.args.poll_ms / 1000.0)

    def wait_clock(self, c):
        need = c - self.args.staleness
        while min(self.peer_clock.values()) < need:
            self._idle()

    def pull(self, c, full):
        works = {}
        for p in self.peers:
            self.rp_flag[p][0] = 0.0
            works[p] = dist.irecv(self.rp_buf[p], p, tag=2000 + c)
            self._small_send([c], p, 1000 + c)
        pending = set(self.peers)
        while pending:
            for p in sorted(pending):
                if self.rp_flag[p][0] != 0:
                    works[p].wait()
                    self.done.append(works[p])
                    lo, hi = self.bounds[p], self.bounds[p + 1]
                    full[lo:hi].copy_(self.rp_buf[p][self.HDR_REP: self.HDR_REP + hi - lo])
                    pending.discard(p)
            if pending:
                self._idle()
        lo, hi = self.bounds[self.rank], self.bounds[self.rank + 1]
        full[lo:hi].copy_(self.shard)

    def push(self, c, grad):
        for p in self.peers:
            lo, hi = self.bounds[p], self.bounds[p + 1]
            buf = self.push_out[p]
            buf[0] = 1.0
            buf[1] = float(c)
            buf[self.HDR_PUSH: self.HDR_PUSH + hi - lo].copy_(grad[lo:hi])
            self.sends.append((dist.isend(buf, p, tag=3000 + c), buf))
        lo, hi = self.bounds[self.rank], self.bounds[self.rank + 1]
        self.shard.add_(grad[lo:hi], alpha=-self.lr)
        for p in self.peers:
            self._small_send([c + 1], p, 4000 + c)

    def wait_sends(self):
        """Every receive is posted in advance, so this only waits for the bytes to go out."""
        for w, _ in self.sends:
            w.wait()
            self.done.append(w)
        self.sends.clear()
        for p in self.peers:
            self.rep_used[p] = 0

    def finish(self):
        """Say bye, then serve until every peer has said its last word; wait the sends."""
        for p in self.peers:
            self._small_send([-1], p, 1000 + self.steps)
        while not all(self.bye[p] and self.next_push[p] >= self.steps and self.next_clock[p] >= self.steps
                      for p in self.peers):
            self._idle()
        self.wait_sends()


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank

    torch.manual_seed(args.seed)           # the same initial weights on every rank
    model = CTRRegressor(args.fields, args.emb_rows, args.emb_dim, args.dense_feats,
                         args.hidden, args.mlp_layers)
    params = list(model.parameters())
    full = parameters_to_vector(params).detach().clone()
    n_params = full.numel()
    bounds = [n_params * r // world for r in range(world + 1)]
    server = ShardServer(args, rank, world, bounds, full[bounds[rank]: bounds[rank + 1]].clone())

    teacher = Teacher(args)
    g_eval = torch.Generator().manual_seed(args.seed + 7)
    eval_batch = teacher.batch(1024, g_eval, args.fields, args.dense_feats)

    log_dir = tempfile.mkdtemp(prefix=f"ssp_ps_r{rank}_")
    log_path = os.path.join(log_dir, "grad_norms.log")

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[ssp-ps] world={world} params={n_params} shard~{n_params // world} staleness={args.staleness} "
              f"batch={args.batch} fields={args.fields} emb={args.emb_rows}x{args.emb_dim} "
              f"mlp={args.mlp_layers}x{args.hidden}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    last_loss = float("nan")
    server.post_all()
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    rows = batch_rows(args, rank, step)
                    gen = torch.Generator().manual_seed(args.seed * 7919 + rank * 104_729 + step)
                    ids, xd, y = teacher.batch(rows, gen, args.fields, args.dense_feats)

                t1 = time.perf_counter()
                with record_function("wait_clock"):
                    server.wait_clock(step)
                with record_function("pull"):
                    server.pull(step, full)
                    vector_to_parameters(full, params)
                comm += time.perf_counter() - t1
                server.poll()                                  # before forward

                with record_function("forward"):
                    loss = F.mse_loss(model(ids, xd), y)
                    extra_losses = []
                    for k in range(int(math.ceil(extra))):     # --factor: the same work again
                        m = rows if k < int(extra) else max(1, int(round(rows * (extra - int(extra)))))
                        extra_losses.append(F.mse_loss(model(ids[:m], xd[:m]), y[:m]))
                with record_function("backward"):
                    for q in params:
                        q.grad = None
                    loss.backward()
                    for el in extra_losses:
                        torch.autograd.grad(el, params)         # discarded
                server.poll()                                  # after backward

                with record_function("push"):
                    grad = torch.cat([q.grad.reshape(-1) for q in params])
                    t2 = time.perf_counter()
                    server.push(step, grad)
                    server.wait_sends()
                    comm += time.perf_counter() - t2

                with record_function("log_grad_norm"):
                    gnorm = grad.norm().item()
                    if slow and args.logger_sleep_ms > 0:
                        time.sleep(args.logger_sleep_ms / 1000.0)
                    with open(log_path, "a") as fh:
                        fh.write(f"step {step} rank {rank} rows {rows} loss {loss.item():.5f} "
                                 f"grad_norm {gnorm:.5f} peer_clocks {sorted(server.peer_clock.items())}\n")
                last_loss = loss.item()

                ev = None
                if args.eval_every > 0 and (step + 1) % args.eval_every == 0:
                    with record_function("evaluate"):
                        with torch.no_grad():
                            ev = F.mse_loss(model(eval_batch[0], eval_batch[1]), eval_batch[2]).item()

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm)
                if rank == 0:
                    print(f"step {step:3d} loss {last_loss:.4f} |g| {gnorm:.3f} rows {rows} "
                          f"clocks {[server.peer_clock[p] for p in server.peers]} "
                          f"{'eval ' + format(ev, '.4f') + ' ' if ev is not None else ''}"
                          f"t {1000 * step_times[-1]:.1f} ms", flush=True)
                prof.step()
        server.finish()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    dist.barrier()
    final = torch.tensor([last_loss])
    dist.all_reduce(final)
    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    med = (statistics.median(traced), statistics.median(busy), server.served)
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print(f"final mean loss {final.item() / world:.4f}", flush=True)
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside wait_clock, pull and push posts) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b, _) in enumerate(allmed)), flush=True)
    dist.barrier()
    shutil.rmtree(log_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
