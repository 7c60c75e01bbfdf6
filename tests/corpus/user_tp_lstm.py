"""A 2-layer LSTM language model trained with hand-written tensor parallelism (TP2 x DP2).

(calibration table at the end of this docstring)

What it is
----------
A small character-level (byte) LSTM LM trained on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``) laid out as a 2 x 2 grid: two
tensor-parallel groups {0,1} and {2,3} (each one model replica, rank = 2 * replica + tp_rank)
and two data-parallel groups {0,2} and {1,3}, all made with ``dist.new_group``.

Model: byte embedding (``--vocab`` x ``--embed``, replicated), ``--layers`` LSTM layers of
``--hidden`` units, a row-parallel output projection to the vocabulary. Tensor parallelism,
Megatron style but written by hand:

* every LSTM layer is column-parallel: a TP rank holds the four gates (i, f, g, o) of its half
  of the hidden units, i.e. half of the 4 * H gate columns of ``W_ih`` and ``W_hh`` and of the
  bias. The input projection of the whole sequence is one matmul (cuDNN style), then the time
  loop runs: gates_t = xp_t + h_{t-1} @ W_hh_local, the cell update of the rank's half, and
  the half hidden state is all-gathered over the TP group (``GatherTP``, a custom
  ``autograd.Function``) AT EVERY TIME STEP, because the next step's recurrent matmul (and the
  next layer's input) needs the whole h. Its backward sums the two ranks' gradients of the full
  h and keeps the rank's half: a ``reduce_scatter_tensor`` over the TP group (``--gather-grad
  allreduce``: an all_reduce of the whole gradient, then a slice);
* the embedding output enters the column-parallel layer through ``CopyToTP`` (identity forward,
  all_reduce of the input gradient over the TP group in backward);
* the output projection is row-parallel: each TP rank multiplies its half of the last layer's
  hidden states by its half of the rows of ``W_out`` and the partial logits are summed with
  an all_reduce over the TP group (``ReduceFromTP``, identity backward). Both TP ranks then
  compute the same cross-entropy.

After ``loss.backward()`` the gradients are all-reduced (averaged) over the DP group in
buckets of ``--bucket-kb`` (reverse parameter order), the gradient norm is assembled with one
TP all_reduce (sharded parameters from both ranks, replicated ones once), clipped, AdamW.
Every ``--log-every`` steps a world all_reduce of (loss sum, tokens) for the log line.

Data: a synthetic English-like text (random "words" of a fixed lexicon, deterministic from
the seed) held by every rank; byte tokenizer. Each DP replica reads its own batch (starts
drawn from (seed, replica, step); both TP ranks of a replica read the same). Batches come
from a prefetcher: after the optimizer step the ``prefetch_next`` callback cuts and
tokenizes the next step's batch; ``load_batch`` at the step's start takes it (and converts it
to tensors).

Communication per step (defaults: 2 layers, seq-len 12, batch 64, H = 512): forward 2 x 12
all_gathers of (64, 256) floats over the TP group, one TP all_reduce of the partial logits
(64 x 12 x 256); backward 2 x 12 reduce_scatters of (2 x 64, 256) and one TP all_reduce of
the embedding-output gradient; the DP gradient all_reduces (0.90 M floats a rank, 5 buckets
at 256 KB); one TP all_reduce of the squared norm; every 2nd step a world all_reduce of 2
floats. So ~55-60 collectives a step, ~50 of them tiny per-time-step ones (the sequence is
kept short so that the traces stay under ~10 MB: every time step costs ~190 trace events).

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``forward`` [``embed``,
``lstm_layer_k`` (``input_proj``, ``recurrence``), ``output_proj``, ``loss``],
``backward``, ``grad_allreduce``, ``clip_and_step``, ``log_metrics`` (every
``--log-every``), ``prefetch_next``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent inside the
collectives, waits included).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (8; 6 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (2), ``--hidden`` (512, split 256 + 256), ``--embed`` (64),
``--vocab`` (256, bytes), ``--batch`` (64 a replica), ``--seq-len`` (12), ``--lr`` (3e-3),
``--bucket-kb`` (256; 0 = one flat buffer), ``--gather {tensor,list}`` (all_gather_into_tensor
or the list all_gather + cat), ``--gather-grad {reduce-scatter,allreduce}``, ``--log-every``
(2).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's cell computation of every time step (the
  recurrent matmul and the gate nonlinearities) and its input projection are done F times in
  forward (F - 1 extra passes without grad, discarded; the fractional part over that
  fraction of the batch rows). Its TP peer waits for it in every all_gather;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow batch read: ``load_batch`` sleeps MS each step;
* ``--prefetch-sleep-ms MS`` (family fault): a slow tokenizer / prefetch callback: the rank's
  ``prefetch_next`` sleeps MS each step before tokenizing the next batch;
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A and B in one DP group, i.e. A % 2 == B % 2):
  every DP gradient-bucket all_reduce of that DP group carries X times the floats: A's bucket
  is zero-padded to X times its length and B, its only peer in the 2-rank group, pads its own
  to match (an all_reduce needs equal sizes); both keep the head. The other DP group and all
  TP traffic are untouched. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each DP replica's sequence length is ``seq_len`` times lognormal(0, S)
  (drawn from (seed, replica, step), clamped to [1/4x, 4x]): both TP ranks of a replica share
  it; the replicas meet in the DP gradient all_reduce;
* ``--big-rank K --big X``: rank K's replica (its TP group) has X times the sequence length,
  every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs; 4 ranks, 8 steps (6 traced, timed).
Two calibration rounds, each after a healthy default run ("base"). The step medians of all
ranks agree within a few % (the per-time-step all_gathers tie each TP pair, the DP
all_reduce the replicas), so one number; "busy" = median time outside the collectives, slow
rank(s) vs the mean of the others.

  setting (slow rank)                            base ms  step ms  change   busy slow / others ms
  healthy default (round 1 / round 2)               -     485/764     -      195-200 / 224-305
  healthy --shapes --gather list
          --gather-grad allreduce                  764     1105       -      331-433 (load)
  --factor 4 (r1)                                  485      594     +22%     384 / 207
  --gather list --factor 3 (r2)                    764     1035     +35%     564 / 314
  --sleep-ms 200 (r2)                              485      935     +93%     460 / 278
  --data-sleep-ms 200 (r3)                         764      789      +3%     450 / 215
  --prefetch-sleep-ms 200 (r1)                     764      855     +12%     420 / 294
  --hog (r0)                                       485      986    +103%     428 / 234
  link 0->2 x8 (DP buckets ~29 MB a step)          485      511      +5%     224 / 199
  link 0->2 x32 (~115 MB a step)                   764      915     +20%     ~245 all
  link 0->2 x96 (~350 MB a step)                   764     1180     +54%     ~205 all
  --big-rank 3 --big 2                             485      966     +99%     r2 418, r3 439 / 210
  --seq-sigma 0.8 (seed 15)                         -       518       -      105-314 by replica

Reading: the step is mostly collective latency (~75 collectives a step, ~60% of it inside
them on this box), so the load of the neighbours' jobs moves a healthy step between ~480
and ~770 ms from run to run; the slowed rank's busy time shows every fault: +180-250 ms for
``--factor`` 3-4 (25-35% of the step), the sleep's 200 ms (25-40% of the step), the hog's
share of the cores. A slow compute on one TP rank makes its TP peer wait in every time
step's all_gather; the other replica waits once, in the DP all_reduce. The padded DP link
costs little until the padded buckets are ~100 MB or more (loopback TCP); the DP peer pays the same
(its pad), the other DP group waits for both in the next TP collective. A longer sequence
(``--big``) doubles the replica's busy time and everyone's step. Wall per run: 13-20 s;
traces ~7.2 MB a rank (9.3 MB with --shapes, 9.8 MB on a --factor 4 rank, 13 MB on the
ranks of a --big 2 replica, 5-11 MB with --seq-sigma 0.8). The battery uses x96 for the link
and --big 2 (3 would give ~20 MB traces).
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
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--embed", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=12)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--bucket-kb", type=int, default=256, help="DP gradient buckets (0 = one flat buffer)")
    p.add_argument("--gather", choices=["tensor", "list"], default="tensor")
    p.add_argument("--gather-grad", choices=["reduce-scatter", "allreduce"], default="reduce-scatter")
    p.add_argument("--log-every", type=int, default=2)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--prefetch-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and (a.link_src == a.link_dst or a.link_src % 2 != a.link_dst % 2):
        p.error("the padded link is a DP pair: --link-src and --link-dst in one DP group ({0,2} or {1,3})")
    if a.hidden % 2:
        p.error("--hidden must split over the 2 TP ranks")
    return a


# --------------------------------------------------------------------------
# communication: timed wrappers and the TP autograd functions
# --------------------------------------------------------------------------

class Comm:
    """The process groups, plus the time spent inside collectives (for the busy time)."""

    def __init__(self, rank, args):
        self.rank = rank
        self.replica, self.tp_rank = divmod(rank, 2)
        self.tp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        self.dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
        self.tp = self.tp_groups[self.replica]
        self.dp = self.dp_groups[self.tp_rank]
        self.gather_mode = args.gather
        self.grad_mode = args.gather_grad
        self.secs = 0.0

    def timed(self, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.secs += time.perf_counter() - t0
        return out


COMM = None  # set in main; the autograd functions below use it


class GatherTP(torch.autograd.Function):
    """(B, H/2) on each TP rank -> (B, H) on both; backward: sum over TP, keep own half."""

    @staticmethod
    def forward(ctx, h_local):
        B, Hl = h_local.shape
        h_local = h_local.contiguous()
        if COMM.gather_mode == "tensor":
            buf = torch.empty(2 * B, Hl)
            COMM.timed(dist.all_gather_into_tensor, buf, h_local, group=COMM.tp)
            full = buf.view(2, B, Hl).transpose(0, 1).reshape(B, 2 * Hl)
        else:
            parts = [torch.empty_like(h_local) for _ in range(2)]
            COMM.timed(dist.all_gather, parts, h_local, group=COMM.tp)
            full = torch.cat(parts, dim=1)
        return full

    @staticmethod
    def backward(ctx, grad_full):
        B, H = grad_full.shape
        Hl = H // 2
        if COMM.grad_mode == "reduce-scatter":
            src = grad_full.view(B, 2, Hl).transpose(0, 1).contiguous()
            out = torch.empty(B, Hl)
            COMM.timed(dist.reduce_scatter_tensor, out, src.view(2 * B, Hl), group=COMM.tp)
            return out
        g = grad_full.contiguous().clone()
        COMM.timed(dist.all_reduce, g, group=COMM.tp)
        t = COMM.tp_rank
        return g[:, t * Hl:(t + 1) * Hl].contiguous()


class CopyToTP(torch.autograd.Function):
    """Identity forward; the input gradient is summed over the TP group in backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous().clone()
        COMM.timed(dist.all_reduce, g, group=COMM.tp)
        return g


class ReduceFromTP(torch.autograd.Function):
    """Sum of the partial results over the TP group; identity backward."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous().clone()
        COMM.timed(dist.all_reduce, x, group=COMM.tp)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class ColumnParallelLSTM(nn.Module):
    """One LSTM layer; this TP rank owns the 4 gates of hidden units [t*H/2, (t+1)*H/2)."""

    def __init__(self, in_dim, hidden, idx, tp_rank):
        super().__init__()
        self.idx, self.hidden, self.hl = idx, hidden, hidden // 2
        g = torch.Generator().manual_seed(1000 + idx)      # the full layer, the same on all ranks
        k = 1.0 / math.sqrt(hidden)
        w_ih = (torch.rand(in_dim, 4, hidden, generator=g) * 2 - 1) * k
        w_hh = (torch.rand(hidden, 4, hidden, generator=g) * 2 - 1) * k
        b = torch.zeros(4, hidden)
        b[1] = 1.0                                           # forget-gate bias
        cols = slice(tp_rank * self.hl, (tp_rank + 1) * self.hl)
        self.w_ih = nn.Parameter(w_ih[:, :, cols].reshape(in_dim, 4 * self.hl).contiguous())
        self.w_hh = nn.Parameter(w_hh[:, :, cols].reshape(hidden, 4 * self.hl).contiguous())
        self.bias = nn.Parameter(b[:, cols].reshape(4 * self.hl).contiguous())

    def cell(self, xp_t, h_full, c):
        gates = torch.addmm(xp_t, h_full, self.w_hh)
        i, f, g, o = gates.view(-1, 4, self.hl).unbind(1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c

    def forward(self, x, extra=0.0):
        """x: (B, T, in) replicated over TP -> (full h (B, T, H), local h (B, T, H/2))."""
        B, T, _ = x.shape
        with record_function("input_proj"):
            xp = torch.addmm(self.bias, x.reshape(B * T, -1), self.w_ih).view(B, T, -1)
            if extra > 0:
                with torch.no_grad():
                    for _ in range(int(extra)):
                        torch.addmm(self.bias, x.reshape(B * T, -1), self.w_ih)
        with record_function("recurrence"):
            h_full = x.new_zeros(B, self.hidden)
            c = x.new_zeros(B, self.hl)
            fulls, locs = [], []
            rows = int(round(B * (extra - int(extra)))) if extra > 0 else 0
            for t, xp_t in enumerate(xp.unbind(1)):
                if extra > 0:                        # --factor: the same cell work again, discarded
                    with torch.no_grad():
                        for _ in range(int(extra)):
                            self.cell(xp_t, h_full, c)
                        if rows > 0:
                            self.cell(xp_t[:rows], h_full[:rows], c[:rows])
                h_loc, c = self.cell(xp_t, h_full, c)
                h_full = GatherTP.apply(h_loc)
                fulls.append(h_full)
                locs.append(h_loc)
        return torch.stack(fulls, 1), torch.stack(locs, 1)


class TPLSTMLM(nn.Module):
    def __init__(self, vocab, embed, hidden, layers, tp_rank):
        super().__init__()
        torch.manual_seed(7)
        self.embed = nn.Embedding(vocab, embed)
        nn.init.normal_(self.embed.weight, std=0.1)
        self.layers = nn.ModuleList(
            ColumnParallelLSTM(embed if i == 0 else hidden, hidden, i, tp_rank) for i in range(layers))
        hl = hidden // 2
        w_out = torch.randn(hidden, vocab, generator=torch.Generator().manual_seed(99)) / math.sqrt(hidden)
        self.w_out = nn.Parameter(w_out[tp_rank * hl:(tp_rank + 1) * hl].contiguous())   # row-parallel
        self.b_out = nn.Parameter(torch.zeros(vocab))                                       # replicated

    def sharded(self):
        return [p for n, p in self.named_parameters() if n != "b_out" and not n.startswith("embed")]

    def forward(self, tokens, targets, extra=0.0):
        with record_function("embed"):
            x = CopyToTP.apply(self.embed(tokens))
        h_loc = None
        for k, layer in enumerate(self.layers):
            with record_function(f"lstm_layer_{k}"):
                x, h_loc = layer(x, extra)
        with record_function("output_proj"):
            B, T, Hl = h_loc.shape
            part = (h_loc.reshape(B * T, Hl) @ self.w_out)
            logits = ReduceFromTP.apply(part) + self.b_out
        with record_function("loss"):
            loss = F.cross_entropy(logits, targets.reshape(-1))
        return loss


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_text(seed, n_words=120_000, lexicon=600):
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    p = np.linspace(2.0, 0.2, len(letters))
    p /= p.sum()
    words = ["".join(rng.choice(letters, size=rng.integers(2, 9), p=p)) for _ in range(lexicon)]
    zipf = 1.0 / np.arange(1, lexicon + 1)
    zipf /= zipf.sum()
    idx = rng.choice(lexicon, size=n_words, p=zipf)
    out, line = [], 0
    for i in idx:
        out.append(words[i])
        line += 1
        if line == 12:
            out.append(".\n")
            line = 0
    return " ".join(out)


def tokenize(text):
    return np.frombuffer(text.encode("utf-8", "replace"), dtype=np.uint8).astype(np.int64)


def seq_len_of(args, replica, step):
    n = float(args.seq_len)
    if args.big_rank >= 0 and replica == args.big_rank // 2:
        n *= args.big
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + replica * 10_007 + step)
        f = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        n *= min(4.0, max(0.25, f))
    return max(2, int(round(n)))


class Prefetcher:
    """Cuts and tokenizes the next step's batch once the current step is done."""

    def __init__(self, text, args, replica, slow):
        self.text, self.args, self.replica, self.slow = text, args, replica, slow
        self.ready = {}

    def prefetch(self, step):
        a = self.args
        if self.slow and a.prefetch_sleep_ms > 0:
            time.sleep(a.prefetch_sleep_ms / 1000.0)          # the slow tokenizer callback
        T = seq_len_of(a, self.replica, step)
        g = np.random.default_rng(a.seed * 7919 + self.replica * 104_729 + step)
        starts = g.integers(0, len(self.text) - 8 * (T + 2), size=a.batch)
        rows = []
        for s in starts:
            toks = tokenize(self.text[s: s + 4 * (T + 1)])[: T + 1]
            rows.append(toks)
        self.ready[step] = np.stack(rows)

    def take(self, step):
        if step not in self.ready:
            self.prefetch(step)
        return self.ready.pop(step)


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
    global COMM
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 4:
        raise SystemExit("this job is laid out as TP2 x DP2: run it on 4 processes")
    slow = rank == args.slow_rank
    COMM = comm = Comm(rank, args)
    replica, tp_rank = comm.replica, comm.tp_rank

    text = make_text(args.seed)
    model = TPLSTMLM(args.vocab, args.embed, args.hidden, args.layers, tp_rank)
    params = list(model.parameters())
    sharded = {id(p) for p in model.sharded()}
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    n_params = sum(p.numel() for p in params)

    # DP gradient buckets, reverse order (as backward produces them)
    buckets, cur, cur_n = [], [], 0
    limit = args.bucket_kb * 256 if args.bucket_kb > 0 else float("inf")
    for p in reversed(params):
        cur.append(p)
        cur_n += p.numel()
        if cur_n >= limit:
            buckets.append(cur)
            cur, cur_n = [], 0
    if cur:
        buckets.append(cur)
    pad = 1.0
    if args.link_src >= 0 and rank in (args.link_src, args.link_dst):
        pad = max(1.0, args.link_factor)
    bucket_bufs = [torch.zeros(int(round(sum(p.numel() for p in bk) * pad))) for bk in buckets]

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    feeder = Prefetcher(text, args, replica, slow)
    log_dir = tempfile.mkdtemp(prefix=f"tp_lstm_r{rank}_")
    log_path = os.path.join(log_dir, "train_log.jsonl")

    if rank == 0:
        print(f"[tp-lstm] TP2xDP2 layers={args.layers} hidden={args.hidden} (x2 halves) embed={args.embed} "
              f"vocab={args.vocab} batch={args.batch}/replica seq_len={args.seq_len} params/rank={n_params} "
              f"buckets={len(buckets)} gather={args.gather} gather_grad={args.gather_grad}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times, logs = [], [], []
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
                    batch = torch.from_numpy(feeder.take(step))
                    batch.clamp_(max=args.vocab - 1)
                    tokens, targets = batch[:, :-1], batch[:, 1:]

                with record_function("forward"):
                    loss = model(tokens, targets, extra)
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()

                with record_function("grad_allreduce"):
                    for bk, buf in zip(buckets, bucket_bufs):
                        o = 0
                        for p in bk:
                            buf[o: o + p.numel()].copy_(p.grad.reshape(-1))
                            o += p.numel()
                        comm.timed(dist.all_reduce, buf, group=comm.dp)
                        buf[:o].div_(2)
                        o = 0
                        for p in bk:
                            p.grad.copy_(buf[o: o + p.numel()].view_as(p))
                            o += p.numel()
                with record_function("clip_and_step"):
                    sq = torch.zeros(1)
                    for p in params:
                        if id(p) in sharded or tp_rank == 0:
                            sq += p.grad.pow(2).sum()
                    comm.timed(dist.all_reduce, sq, group=comm.tp)
                    gnorm = float(sq.sqrt())
                    scale = min(1.0, 1.0 / (gnorm + 1e-6))
                    if scale < 1.0:
                        for p in params:
                            p.grad.mul_(scale)
                    opt.step()

                if step % args.log_every == 0:
                    with record_function("log_metrics"):
                        m = torch.tensor([loss.item() * targets.numel(), float(targets.numel())])
                        comm.timed(dist.all_reduce, m)
                        m /= 2          # each replica's loss counted by its 2 TP ranks
                        logs.append({"step": step, "rank": rank, "loss": loss.item(),
                                     "global_loss": m[0].item() / m[1].item(), "seq": tokens.shape[1],
                                     "grad_norm": gnorm})

                if step + 1 < args.steps:
                    with record_function("prefetch_next"):
                        feeder.prefetch(step + 1)

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {loss.item():.4f} |g| {gnorm:.3f} T {tokens.shape[1]} "
                          f"t {1000 * step_times[-1]:.1f} ms (comm {1000 * comm.secs:.1f})", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))
    with open(log_path, "w") as fh:
        for line in logs:
            fh.write(json.dumps(line) + "\n")
    shutil.rmtree(log_dir, ignore_errors=True)

    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    med = (statistics.median(traced), statistics.median(busy))
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside collectives) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
