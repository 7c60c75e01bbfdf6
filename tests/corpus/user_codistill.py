"""Online co-distillation of two language-model replicas ("codistillation", Anil et al. 2018).

(calibration table at the end of this docstring)

What it is
----------
Two copies of a small causal transformer LM are trained at the same time on 4 CPU processes
(gloo, ``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``), and each one learns from the
other's predictions as well as from the data. The ranks form two *teams* made with
``dist.new_subgroups(group_size=2)``: team 0 = ranks {0, 1}, team 1 = ranks {2, 3}. Each team
trains its own model (different initial weights, different training data order) by plain
data parallelism inside the team: both ranks of a team hold the whole model, each reads its
own shard (shard = rank % 2) of the team's batch, and the gradients are averaged over the
team by hand (``all_reduce`` on the team group, in ``--buckets`` flat buckets, no DDP).

Model: token + learned position embedding (``--vocab`` x ``--dim``), ``--layers``
``nn.TransformerEncoderLayer`` blocks (pre-norm, GELU, ``--heads`` heads, ``--ff`` hidden,
causal mask), final LayerNorm, an untied LM head.

Co-distillation: every step each rank also runs its model on a shared *distillation batch*
(``--distill-batch`` rows of ``--seq-len`` tokens drawn from (seed, step, shard), so rank 0
and rank 2 see the same rows, and so do ranks 1 and 3). The two ranks holding the same shard
in the two teams (0 <-> 2, 1 <-> 3) swap their distillation logits (detached): by
``dist.isend`` + ``dist.irecv`` posted together and then waited, or with ``--blocking`` by
``dist.send`` / ``dist.recv`` ordered by team (team 0 sends first, team 1 receives first).
The loss is

    CE(train batch) + alpha * T^2 * KL(softmax(peer / T) || softmax(own / T))

(``--alpha`` 0.5, ``--temp`` 2.0; the peer's logits are constants). After the exchange each
rank writes the top-8 of the peer's distribution for its distillation rows into a per-rank
logits cache (``np.save`` into a temporary directory, the way one keeps teacher targets for
a later offline pass).

Every ``--sync-every`` steps (default 3) the team leaders (ranks 0 and 2) evaluate their
models on a fixed validation batch and compare the losses with an ``all_reduce`` (SUM of a
2-vector, each leader fills its slot) in a leaders group made with ``dist.new_group([0, 2])``
(every rank calls ``new_group``). The losing team's leader then receives the winner's
weights (one flat vector) by ``dist.broadcast`` in the leaders group (src = the winning
leader); each leader broadcasts the decision (winner, both losses) inside its team, and the
losing leader broadcasts the new weights inside its team so that its partner has them too.
Ties go to team 0.

Data: a synthetic tokenized corpus (repeated random "phrases", so there is something to
learn) built in memory on every rank from ``--seed``; train rows are drawn from
(seed, team, step, shard), the distillation rows from (seed, step, shard), the validation
rows once from the seed.

Communication per step (defaults: batch 8 a rank, seq 128, distill batch 4, vocab 512,
~0.59 M parameters): one logits message each way between 0 and 2 and between 1 and 3
(4 x 128 x 512 floats = 1 MB), ``--buckets`` (3) gradient all_reduces on each team group
(~0.59 M floats in all), a 2-float metrics all_reduce on the team group; every 3rd step
additionally the leaders' 2-float all_reduce, a 3-float decision broadcast in each team,
and one 2.4 MB weight broadcast in the leaders group plus one in the losing team.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``forward`` (``train_forward``,
``distill_forward``), ``distill_exchange``, ``distill_loss``, ``backward``,
``team_allreduce``, ``optimizer``, ``logits_cache``, ``log_metrics``, and on sync steps
``leader_sync`` (``validate`` on the leaders, ``weights_broadcast`` on the losing team).

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the
logits send/recv and their waits, the all_reduces and the broadcasts).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (2), ``--dim`` (128), ``--heads`` (4), ``--ff`` (512),
``--vocab`` (512), ``--batch`` (8 rows a rank), ``--seq-len`` (128), ``--distill-batch`` (4),
``--alpha`` (0.5), ``--temp`` (2.0), ``--lr`` (1e-3), ``--buckets`` (3), ``--sync-every``
(3, 0 = never), ``--blocking``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's forward (train and distillation batch) and its
  backward are done F times: F - 1 extra passes in ``forward`` whose gradients are taken
  with ``torch.autograd.grad`` in ``backward`` and thrown away (the fractional part over
  that fraction of the rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow batch read: ``load_batch`` sleeps MS each step;
* ``--cache-sleep-ms MS`` (family fault): a slow logits-cache write: the rank's
  ``logits_cache`` sleeps MS before saving (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B a cross-team pair: 0<->2 or 1<->3):
  every logits message A sends to B carries X times the bytes (zero-padded in the same
  message; B receives it all and keeps the head). No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's training rows are ``seq_len`` times lognormal(0, S) tokens
  long (drawn from (seed, rank, step), rounded to 8, clamped to [1/4, 4] x seq_len): the
  ranks' work differs by rank and step (the distillation batch keeps its shape);
* ``--big-rank K --big X``: rank K's training batch has X times the rows, every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs; 4 ranks, 10 steps (8 timed); each
setting run once (a healthy default run before the faults as "base"). Step medians of the
ranks agree within a few % (the logits swaps and the team all_reduces tie all four ranks),
so one number; "busy" = median time outside communication, slow rank vs the mean of the
others.

  setting (slow rank)                              base ms  step ms    busy slow / others ms
  healthy default (6 runs)                            -     298-714    210-530 (by load)
  healthy --blocking --shapes                        545      795      608 (all)
  healthy --layers 3 --dim 160 --ff 640 --buckets 2   -      1018      760-940
  healthy --layers 3 --dim 192 --ff 768 --buckets 2   -      1490      1210-1310
  healthy --seq-len 192 --distill-batch 8 --sync 2    -      1424      1220-1320
  healthy --vocab 1024 --batch 12 --sync-every 0      -       980      785-880
  --factor 2 (r1)                                    360      560      499 / 308
  --factor 2 (r1)                                    683   1296-1502  1151 / 663
  --factor 3 (r0)                                    360      765      724 / 281
  --sync-every 2 --factor 3 (r0)                     683   1606-1857  1817 / 634
  --blocking --factor 2.5 (r2)                       545   1472-1672  1640 / 660
  --layers 3 --dim 160 --factor 2 (r3)              1018   2065-2796  2639 / 1370
  --sleep-ms 150 (r2)                                360      525      505 / 323
  --sleep-ms 250 (r1)                                545      920      855 / 517
  --data-sleep-ms 150 (r3)                           360      830      666 / 539  (load rose)
  --data-sleep-ms 250 (r3)                           545      882      752 / 460
  --cache-sleep-ms 150 (r0)                          360      742      665 / 494  (load rose)
  --cache-sleep-ms 250 (r2)                          545   924-1070    855 / 595
  --hog (r1)                                         360     1335     1097 / 655
  --hog (r0)                                         545     1348     1169 / 619
  link 2->0 x128 (128 MB messages)                   453      725      swap r0 204, r2 152 / ~18
  link 2->0 x256 (256 MB)                            453     1065      swap r0 365, r2 381 / ~30
  link 2->0 x256 (256 MB)                            683   1261-1292   swap r0 419, r2 452 / ~38
  link 2->0 x512 (512 MB)                            453     1650      swap r0 736, r2 715 / ~50
  --big-rank 3 --big 3                               360   1128-1243  1166 / 538
  --big-rank 3 --big 3                               683    957-978    910 / 377
  --seq-sigma 0.8                                     -     890-985    600-740 (by rank and step)

Reading: the box's load (other helpers' jobs, load average 12-14 on 2 cores) moved a healthy
default step between 300 and 715 ms from one run to the next, so compare the slowed rank's
busy time with the others' in the same run. ``--factor`` repeats the whole forward and
backward of both batches, so F = 2 already about doubles the rank's busy time; its team
partner waits in ``team_allreduce``, its twin in the other team waits in
``distill_exchange`` (the "swap" column: time in the logits send/recv and its wait), and the
two teams' step medians can differ by 10-30% under a fault (they meet once a step, in the
swap). Host sleeps of 250 ms are 30-65% of the slowed rank's busy time at any load seen;
150 ms was 20-50%. A padded link costs little below ~100 MB a message (loopback TCP), then
the swap of the pair dominates: at x256 both 2 and 0 spend ~400 ms a step in
``distill_exchange``; ranks 1 and 3 are delayed only through the team all_reduces. With
``--big`` the big rank's partner and twin wait for it. Wall per run: 15-50 s; traces ~9 MB
a rank (12-14 MB with --shapes or 3 layers of 160; ~20 MB on the slowed rank under
--factor 2.5-3 or --factor 2 on the 3-layer model: the extra passes' ops).
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

import numpy as np
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
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ff", type=int, default=512)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=8, help="training rows per rank")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--distill-batch", type=int, default=4, help="distillation rows per rank")
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--temp", type=float, default=2.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--buckets", type=int, default=3, help="flat gradient buckets per step")
    p.add_argument("--sync-every", type=int, default=3, help="leader weight sync period (0 = never)")
    p.add_argument("--blocking", action="store_true", help="send/recv ordered by team instead of isend/irecv")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--cache-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and a.link_dst != (a.link_src + 2) % 4:
        p.error("logits only travel between the two teams' twins (0<->2, 1<->3)")
    return a


# --------------------------------------------------------------------------
# communication: the logits swap and the collectives, timed
# --------------------------------------------------------------------------

class Comm:
    def __init__(self, rank, link=None, link_factor=1.0):
        self.rank = rank
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0          # time in communication this step
        self.swap_secs = 0.0     # of which in the logits swap
        self.bufs = {}

    def _size(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def swap(self, mine, peer, blocking, team):
        """Send my logits to the peer, get theirs (same shape)."""
        flat = mine.detach().reshape(-1)
        numel = flat.numel()
        sbuf = self._buffer("send", self._size(numel, self.rank, peer))
        sbuf[:numel].copy_(flat)
        rbuf = self._buffer("recv", self._size(numel, peer, self.rank))
        t0 = time.perf_counter()
        if blocking:
            if team == 0:
                dist.send(sbuf, peer, tag=7)
                dist.recv(rbuf, peer, tag=7)
            else:
                dist.recv(rbuf, peer, tag=7)
                dist.send(sbuf, peer, tag=7)
        else:
            rw = dist.irecv(rbuf, peer, tag=7)
            sw = dist.isend(sbuf, peer, tag=7)
            rw.wait()
            sw.wait()
        self.swap_secs = time.perf_counter() - t0
        self.secs += self.swap_secs
        return rbuf[:numel].view_as(mine).clone()

    def all_reduce(self, t, group):
        t0 = time.perf_counter()
        dist.all_reduce(t, group=group)
        self.secs += time.perf_counter() - t0
        return t

    def broadcast(self, t, src, group):
        t0 = time.perf_counter()
        dist.broadcast(t, src=src, group=group)
        self.secs += time.perf_counter() - t0
        return t


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class TinyLM(nn.Module):
    def __init__(self, vocab, dim, heads, ff, layers, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, ff, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)
        self._masks = {}

    def forward(self, tokens):
        T = tokens.shape[1]
        mask = self._masks.get(T)
        if mask is None:
            mask = self._masks[T] = nn.Transformer.generate_square_subsequent_mask(T)
        x = self.tok(tokens) + self.pos(torch.arange(T))
        x = self.encoder(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def distill_kl(own, peer, temp):
    lp = F.log_softmax(own.reshape(-1, own.shape[-1]) / temp, -1)
    lq = F.log_softmax(peer.reshape(-1, peer.shape[-1]) / temp, -1)
    return F.kl_div(lp, lq, log_target=True, reduction="batchmean") * temp * temp


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_corpus(vocab, seed, n_tokens=1 << 19, phrase_len=8, n_phrases=2000):
    g = torch.Generator().manual_seed(seed)
    phrases = torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)
    idx = torch.randint(0, n_phrases, (n_tokens // phrase_len,), generator=g)
    return phrases[idx].reshape(-1)


def rows_from(corpus, n_rows, length, g):
    starts = torch.randint(0, corpus.numel() - length - 2, (n_rows,), generator=g)
    batch = torch.stack([corpus[s: s + length + 1] for s in starts.tolist()])
    return batch[:, :-1], batch[:, 1:]


def train_shape(args, rank, step):
    """(rows, length) of this rank's training batch this step."""
    rows, length = args.batch, args.seq_len
    if rank == args.big_rank:
        rows = max(1, int(round(rows * args.big)))
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        f = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        f = min(4.0, max(0.25, f))
        length = max(8, int(round(args.seq_len * f / 8)) * 8)
    return rows, length


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
    if world != 4:
        raise SystemExit("co-distillation here wants 4 ranks (2 teams of 2)")
    slow = rank == args.slow_rank

    # teams {0,1} and {2,3}; the leaders' group {0,2} (every rank must call new_group)
    team_group, _ = dist.new_subgroups(group_size=2)
    leaders = dist.new_group([0, 2])
    team, shard = rank // 2, rank % 2
    leader = 2 * team
    peer = (rank + 2) % 4                   # the same shard in the other team
    is_leader = rank == leader

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, link, args.link_factor)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="codistill_cache_")
    dist.broadcast_object_list(tmp, src=0)
    cache_dir = tmp[0]

    corpus = make_corpus(args.vocab, args.seed)
    val_x, val_y = rows_from(corpus, 8, args.seq_len, torch.Generator().manual_seed(args.seed + 99))

    torch.manual_seed(args.seed * 31 + 1000 * team)      # each team its own initial weights
    max_len = 4 * args.seq_len
    model = TinyLM(args.vocab, args.dim, args.heads, args.ff, args.layers, max_len)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    n_params = sum(q.numel() for q in params)

    # gradient buckets: about equal shares of the parameters, in reverse (backward) order
    per = math.ceil(n_params / max(1, args.buckets))
    buckets, cur, cur_n = [], [], 0
    for q in reversed(params):
        cur.append(q)
        cur_n += q.numel()
        if cur_n >= per:
            buckets.append(cur)
            cur, cur_n = [], 0
    if cur:
        buckets.append(cur)

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[codistill] world={world} teams=2x2 layers={args.layers} dim={args.dim} ff={args.ff} "
              f"vocab={args.vocab} batch={args.batch} seq={args.seq_len} distill_batch={args.distill_batch} "
              f"params={n_params} buckets={len(buckets)} sync_every={args.sync_every} "
              f"p2p={'send/recv' if args.blocking else 'isend/irecv'}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times, swap_times = [], [], []
    wins = [0, 0]
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                model.train()
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    rows, length = train_shape(args, rank, step)
                    g = torch.Generator().manual_seed(args.seed * 7919 + team * 104_729 + step * 17 + shard)
                    x, y = rows_from(corpus, rows, length, g)
                    gd = torch.Generator().manual_seed(args.seed * 6151 + step * 17 + shard + 5)
                    dx, _ = rows_from(corpus, args.distill_batch, args.seq_len, gd)

                with record_function("forward"):
                    with record_function("train_forward"):
                        ce = lm_loss(model(x), y)
                    with record_function("distill_forward"):
                        own = model(dx)
                    extra_losses = []
                    if extra > 0:              # --factor: the same passes again, discarded
                        reps = [1.0] * int(extra) + ([extra - int(extra)] if extra > int(extra) else [])
                        for frac in reps:
                            r1 = max(1, int(round(x.shape[0] * frac)))
                            r2 = max(1, int(round(dx.shape[0] * frac)))
                            lx = lm_loss(model(x[:r1]), y[:r1]) + 1e-3 * model(dx[:r2]).square().mean()
                            extra_losses.append(lx)

                with record_function("distill_exchange"):
                    theirs = comm.swap(own, peer, args.blocking, team)

                with record_function("distill_loss"):
                    kl = distill_kl(own, theirs, args.temp)
                    loss = ce + args.alpha * kl

                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()
                    for lx in extra_losses:
                        torch.autograd.grad(lx, params, allow_unused=True)
                    extra_losses = None

                with record_function("team_allreduce"):
                    for bk in buckets:
                        flat = torch.cat([q.grad.reshape(-1) for q in bk])
                        comm.all_reduce(flat, team_group)
                        flat /= 2
                        o = 0
                        for q in bk:
                            q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                            o += q.numel()

                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()

                with record_function("logits_cache"):
                    if slow and args.cache_sleep_ms > 0:
                        time.sleep(args.cache_sleep_ms / 1000.0)
                    probs = F.softmax(theirs / args.temp, -1)
                    top_p, top_i = probs.topk(8, dim=-1)
                    np.save(os.path.join(cache_dir, f"peer_logits_rank{rank}.npy"),
                            np.concatenate([top_p.numpy(), top_i.to(torch.float32).numpy()], -1))

                with record_function("log_metrics"):
                    m = torch.tensor([ce.item(), kl.item()])
                    comm.all_reduce(m, team_group)
                    m /= 2

                synced = ""
                if args.sync_every > 0 and (step + 1) % args.sync_every == 0:
                    with record_function("leader_sync"):
                        decision = torch.zeros(3)
                        if is_leader:
                            with record_function("validate"):
                                model.eval()
                                with torch.no_grad():
                                    vl = lm_loss(model(val_x), val_y).item()
                                model.train()
                            both = torch.zeros(2)
                            both[team] = vl
                            comm.all_reduce(both, leaders)
                            winner = 0 if both[0] <= both[1] else 1
                            decision = torch.tensor([float(winner), both[0].item(), both[1].item()])
                        comm.broadcast(decision, leader, team_group)
                        winner = int(decision[0].item())
                        wins[winner] += 1
                        synced = f" sync: val {decision[1]:.4f} / {decision[2]:.4f}, team {winner} wins"
                        with record_function("weights_broadcast"):
                            flatw = torch.nn.utils.parameters_to_vector(params).detach()
                            if is_leader:
                                comm.broadcast(flatw, 2 * winner, leaders)
                            if team != winner:
                                comm.broadcast(flatw, leader, team_group)
                                with torch.no_grad():
                                    torch.nn.utils.vector_to_parameters(flatw, params)

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                swap_times.append(comm.swap_secs)
                if rank == 0:
                    print(f"step {step:3d} ce {m[0].item():.4f} kl {m[1].item():.4f} |g| {float(gnorm):.3f} "
                          f"rows {rows}x{length} t {1000 * step_times[-1]:.1f} ms{synced}", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    swaps = swap_times[2:] if len(swap_times) > 2 else swap_times
    med = (statistics.median(traced), statistics.median(busy), statistics.median(swaps))
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside logits swaps, all_reduces, broadcasts) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b, _) in enumerate(allmed)), flush=True)
        print("median logits swap ms per rank: " +
              " ".join(f"r{r}={1000 * w:.1f}" for r, (_, _, w) in enumerate(allmed)), flush=True)
        print(f"leader syncs won: team0={wins[0]} team1={wins[1]}", flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(cache_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
