"""A linear-recurrence (LRU / Mamba-style) language model trained with sequence parallelism.

(calibration table at the end of this docstring)

What it is
----------
A small state-space LM of the "RG-LRU / Mamba without the conv" kind, trained on 4 CPU
processes (gloo, ``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``) with the *sequence*
split over the ranks: every rank holds the full model and one contiguous chunk of every
sequence of the batch (rank 0 the first ``seq_len / 4`` tokens, rank 3 the last).

Model: token embedding (``--vocab`` x ``--dim``, tied with the LM head), ``--layers`` residual
blocks, final RMSNorm. A block: RMSNorm -> ``in_proj`` (dim -> 3 x E, E = ``--expand`` x dim)
giving the input u, a gate g and a decay gate r; the diagonal recurrence

    h_t = a_t * h_{t-1} + sqrt(1 - a_t^2) * u_t,     log a_t = 8 * sigmoid(r_t) * logsigmoid(lam)

(``lam`` a learned per-channel vector); y = h * silu(g); ``out_proj`` (E -> dim); residual.

The scan (``chunked_scan``) is the usual chunked one: inside chunks of ``--scan-chunk``
positions it is parallel (a cumulative sum in log space: h = e^L cumsum(e^-L b u)), across
the chunks of the rank's piece a short sequential loop passes the chunk states along. That
gives the rank's local states for a zero initial state, its final state hT and the log of
its total decay. The sequence-parallel part (``ChainCarry``, a hand-written
``autograd.Function``):

* forward, per layer: rank r receives the carry c_in (the true state entering its piece,
  (batch, E) floats) from rank r-1, sends c_out = exp(logP) * c_in + hT on to rank r+1
  right away, then adds exp(cumsum log a) * c_in to its local states. So the carries go
  0 -> 1 -> 2 -> 3 once per layer;
* backward, per layer: rank r receives dL/dc_out from rank r+1, sends
  dL/dc_in + exp(logP) * dL/dc_out on to rank r-1, and hands dL/dhT and dL/dlogP to the
  local scan's autograd. So the state gradients go 3 -> 2 -> 1 -> 0 once per layer.

The loss is the next-token cross entropy of the rank's own tokens (each rank reads its piece
plus one token, so the targets are local). After ``loss.backward()`` the parameter gradients
are all-reduced (averaged) over the 4 ranks, as one flat buffer or in buckets of
``--bucket-kb``, then clipped and stepped with AdamW. A 2-float metrics all_reduce
(loss sum, tokens) follows, and each rank appends its line to its own jsonl log.

Data: a pre-tokenized corpus (uint16 tokens, made of repeated random "phrases" so there is
something to learn) written once by rank 0 into a temporary ``.bin`` file and read by every
rank through ``np.memmap`` (nanoGPT style); each step the batch's sequence starts are drawn
from (seed, step), the same on every rank, and each rank reads its own piece of every row.

Communication per step (defaults: 4 layers, batch 4, E = 256): per layer one carry message
(4 KB) on each link r -> r+1 in forward and one gradient message (4 KB) on each link
r+1 -> r in backward (``dist.isend``/``dist.irecv`` with per-layer tags, the sends waited at
the end of backward; ``--p2p send`` uses blocking ``dist.send``/``dist.recv``), one
all_reduce of the gradients (~0.59 M floats) and one of the 2 metrics.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``forward`` [``embed``,
``layer_k_proj``, ``layer_k_scan``, ``layer_k_carry`` (``carry_recv``, ``carry_send``),
``layer_k_apply``, ``lm_head_loss``], ``backward`` (with ``carry_grad_recv`` /
``carry_grad_send`` inside), ``carry_send_wait``, ``allreduce``, ``optimizer``,
``log_metrics``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the carry
receives/sends and their waits and in the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (4), ``--dim`` (128), ``--expand`` (2), ``--vocab`` (512),
``--batch`` (4), ``--seq-len`` (512, the whole sequence; 128 a rank), ``--scan-chunk`` (16),
``--lr`` (3e-3), ``--bucket-kb`` (0 = one flat all_reduce), ``--p2p {isend,send}``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's input projection and local scan of every layer
  are done F times in forward (F - 1 extra passes without grad, discarded; the fractional
  part over that fraction of the batch rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow tokenized-batch read: ``load_batch`` sleeps MS each step;
* ``--log-sleep-ms MS`` (family fault): a slow metrics logger: the rank's ``log_metrics``
  sleeps MS before appending its line (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B neighbours in the chain): every message
  A sends to B carries X times the bytes (the carry, or for B = A - 1 the state gradient,
  zero-padded in the same message; B receives it all and keeps the head). No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's piece of the step's sequences is ``seq_len / 4`` times
  lognormal(0, S) long (drawn from (seed, rank, step), rounded to whole scan chunks, at least
  one chunk, at most 4x): the pieces differ by rank and step;
* ``--big-rank K --big X``: rank K's piece is X times as long as the others', every step.

Calibration
-----------
2-core box shared with another helper's 4-process jobs and an analysis process; 4 ranks,
10 steps (8 timed); every fault run right after a healthy default run ("base", its step
median). Step medians of all ranks agree within a few % (the carries and the all_reduce
tie the ranks), so one number; "busy" = median time outside communication, slow rank vs
the mean of the others.

  setting (slow rank)                           base ms  step ms  change   busy slow / others ms
  healthy default                                  -     271-540     -      155-330 (by load)
  healthy --shapes --p2p send                     540      682       -      399-459
  healthy --dim 96 --layers 6 --bucket-kb 256      -     344-413     -      173-208
  healthy --scan-chunk 32 --seq-len 768
          --expand 1 --vocab 1024                  -       513       -      277-312
  --factor 3 (r2)                                 432      501     +16%     345 / 253
  --factor 4 (r3)                                 445      517     +16%     409 / 261
  --factor 5 (r0)                                 445      213   (quiet)    156 / 117
  --factor 6 (r1)                                 294      410     +39%     298 / 181
  --factor 6 (r0)                                 391      702     +80%     547 / 292  (load rose)
  --dim 96 --layers 6 --factor 6 (r3)             413      425      +3%     311 / 196
  --p2p send --factor 5 (r2)                      516      691     +34%     524 / 303
  --sleep-ms 150 (r1)                             452      334   (quiet)    271 / 122
  --sleep-ms 120 (r2)                             540      635     +18%     455 / 284
  --data-sleep-ms 150 (r3)                        452      503     +11%     399 / 260
  --log-sleep-ms 150 (r0)                         452      503     +11%     346 / 207
  --hog (r1)                                      445      610     +37%     397 / 257
  link 1->2 x8192 (32 MB messages)                394      420      +7%     r1 216 / 191
  link 1->2 x16384 (64 MB messages)               487      900     +85%     r1 351, r2 341 / 283
  link 1->2 x32768                                487      915     +88%     r1 307 / 256
  link 3->2 x16384 (backward gradients)           271      511     +89%     r3 219 / 207
  --big-rank 3 --big 3                            430      865    +101%     765 / 311
  --big-rank 2 --big 2.5                           -       886       -      727 / 320
  --seq-sigma 0.7                                  -     275-540     -      pieces 48-192 by rank and step

Reading: the box's load (the neighbour's jobs) moved a healthy step between 270 and 540 ms
from one run to the next, so the step-time change of one run says little; the slowed rank's
busy time shows every fault: the added compute, the sleep or the hog's share of the cores
lands on it. ``--factor`` repeats only the forward's projection and scan (backward and the
LM head are most of a step), so it takes 5-7 to cost the rank 25-35% of its step. A sleep
of 120-150 ms is 20-45% of the step depending on load. A padded link costs little until the
messages are tens of MB (the buffers are allocated once; loopback TCP moves 32 MB quickly),
then the transfer dominates: everyone downstream of the link waits in ``carry_recv`` (or
upstream, in ``carry_grad_recv``). A longer piece (``--big``) lengthens everyone's step: the
chain passes the carries only after each rank's local scan, and the all_reduce waits for the
big rank's backward. Wall per run: 13-22 s; traces ~10 MB a rank (14 MB with --shapes or
6 layers).
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
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--expand", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=512, help="whole sequence, split over the ranks")
    p.add_argument("--scan-chunk", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--bucket-kb", type=int, default=0, help="gradient buckets (0 = one flat buffer)")
    p.add_argument("--p2p", choices=["isend", "send"], default="isend")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--log-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and abs(a.link_src - a.link_dst) != 1:
        p.error("the carry chain only links neighbours (|src - dst| == 1)")
    return a


# --------------------------------------------------------------------------
# communication helpers
# --------------------------------------------------------------------------

class Comm:
    """Point-to-point along the chain; pads the messages of one link with --link-*."""

    def __init__(self, rank, world, mode, link=None, link_factor=1.0):
        self.rank, self.world, self.mode = rank, world, mode
        self.link, self.link_factor = link, link_factor
        self.pending = []      # (work, buffer) of isends, waited at the end of backward
        self.secs = 0.0        # time spent in communication this step
        self.bufs = {}         # persistent message buffers (the padded ones stay zero past the head)

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def send(self, t, dst, tag):
        flat = t.detach().reshape(-1)
        n = self._padded(flat.numel(), self.rank, dst)
        buf = self._buffer(("send", dst, tag), n)     # one per layer and direction, reused
        buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        if self.mode == "send":
            dist.send(buf, dst, tag=tag)
        else:
            self.pending.append((dist.isend(buf, dst, tag=tag), buf))
        self.secs += time.perf_counter() - t0

    def recv(self, shape, src, tag):
        numel = math.prod(shape)
        buf = self._buffer(("recv", src, tag), self._padded(numel, src, self.rank))
        t0 = time.perf_counter()
        if self.mode == "send":
            dist.recv(buf, src, tag=tag)
        else:
            dist.irecv(buf, src, tag=tag).wait()
        self.secs += time.perf_counter() - t0
        return buf[:numel].view(shape).clone()

    def wait_sends(self):
        t0 = time.perf_counter()
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()
        self.secs += time.perf_counter() - t0

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t


class ChainCarry(torch.autograd.Function):
    """Returns the state entering this rank's piece; passes the carries along the chain.

    forward: c_in <- rank-1; c_out = exp(logP) * c_in + hT -> rank+1.
    backward: g_out <- rank+1; dL/dc_in + exp(logP) * g_out -> rank-1;
              dL/dhT = g_out, dL/dlogP = g_out * exp(logP) * c_in.
    """

    @staticmethod
    def forward(ctx, logP, hT, layer, comm):
        rank, world = comm.rank, comm.world
        if rank > 0:
            with record_function("carry_recv"):
                c_in = comm.recv(hT.shape, rank - 1, tag=2 * layer)
        else:
            c_in = torch.zeros_like(hT)
        if rank < world - 1:
            with record_function("carry_send"):
                comm.send(torch.exp(logP) * c_in + hT, rank + 1, tag=2 * layer)
        ctx.save_for_backward(logP, c_in)
        ctx.layer, ctx.comm = layer, comm
        return c_in

    @staticmethod
    def backward(ctx, grad_c_in):
        logP, c_in = ctx.saved_tensors
        comm, layer = ctx.comm, ctx.layer
        rank, world = comm.rank, comm.world
        if rank < world - 1:
            with record_function("carry_grad_recv"):
                g_out = comm.recv(grad_c_in.shape, rank + 1, tag=2 * layer + 1)
        else:
            g_out = torch.zeros_like(grad_c_in)
        decay = torch.exp(logP)
        if rank > 0:
            with record_function("carry_grad_send"):
                comm.send(grad_c_in + decay * g_out, rank - 1, tag=2 * layer + 1)
        return g_out * decay * c_in, g_out, None, None


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

def chunked_scan(log_a, bu, chunk):
    """h_t = a_t h_{t-1} + bu_t from h = 0, on (B, T, E); T a multiple of chunk.

    Returns the states (B, T, E), the final state (B, E), the total log decay (B, E) and
    the cumulative log decay from the piece's start (B, T, E)."""
    B, T, E = bu.shape
    nc = T // chunk
    la = log_a.view(B, nc, chunk, E)
    L = la.cumsum(2)
    intra = torch.exp(L) * torch.cumsum(torch.exp(-L) * bu.view(B, nc, chunk, E), 2)
    chunk_decay = torch.exp(L[:, :, -1])
    chunk_final = intra[:, :, -1]
    carry = bu.new_zeros(B, E)
    enters = []
    for k in range(nc):                  # across the chunks: sequential
        enters.append(carry)
        carry = chunk_decay[:, k] * carry + chunk_final[:, k]
    enter = torch.stack(enters, 1)
    h = (intra + torch.exp(L) * enter.unsqueeze(2)).view(B, T, E)
    cum = log_a.cumsum(1)
    return h, carry, cum[:, -1], cum


class ScanBlock(nn.Module):
    def __init__(self, dim, inner, idx):
        super().__init__()
        self.idx = idx
        self.norm = nn.RMSNorm(dim)
        self.in_proj = nn.Linear(dim, 3 * inner, bias=False)
        self.out_proj = nn.Linear(inner, dim, bias=False)
        # sigmoid(lam) in [0.9, 0.999]: slow and fast channels
        a0 = torch.linspace(0.9, 0.999, inner)
        self.lam = nn.Parameter(torch.log(a0 / (1 - a0)))
        nn.init.normal_(self.out_proj.weight, std=0.02 / math.sqrt(2))

    def local(self, z, chunk):
        u, g, r = self.in_proj(z).chunk(3, dim=-1)
        log_a = 8.0 * torch.sigmoid(r) * F.logsigmoid(self.lam)
        bu = torch.sqrt(torch.clamp(1.0 - torch.exp(2.0 * log_a), min=1e-6)) * u
        return g, log_a, bu

    def forward(self, x, chunk, comm, extra=0.0):
        k = self.idx
        with record_function(f"layer_{k}_proj"):
            z = self.norm(x)
            g, log_a, bu = self.local(z, chunk)
        with record_function(f"layer_{k}_scan"):
            h, hT, logP, cum = chunked_scan(log_a, bu, chunk)
            if extra > 0:                     # --factor: the same local work again, discarded
                with torch.no_grad():
                    for _ in range(int(extra)):
                        _, la2, bu2 = self.local(z, chunk)
                        chunked_scan(la2, bu2, chunk)
                    rows = int(round(z.shape[0] * (extra - int(extra))))
                    if rows > 0:
                        _, la2, bu2 = self.local(z[:rows], chunk)
                        chunked_scan(la2, bu2, chunk)
        with record_function(f"layer_{k}_carry"):
            c_in = ChainCarry.apply(logP, hT, k, comm)
        with record_function(f"layer_{k}_apply"):
            h = h + torch.exp(cum) * c_in.unsqueeze(1)
            y = h * F.silu(g)
            return x + self.out_proj(y)


class ScanLM(nn.Module):
    def __init__(self, vocab, dim, expand, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(ScanBlock(dim, expand * dim, i) for i in range(layers))
        self.norm = nn.RMSNorm(dim)

    def forward(self, tokens, targets, chunk, comm, extra=0.0):
        with record_function("embed"):
            x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, chunk, comm, extra)
        with record_function("lm_head_loss"):
            logits = self.norm(x) @ self.embed.weight.t()
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return loss


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_corpus(path, vocab, seed, n_tokens=1 << 20, phrase_len=8, n_phrases=3000):
    g = torch.Generator().manual_seed(seed)
    phrases = torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)
    idx = torch.randint(0, n_phrases, (n_tokens // phrase_len,), generator=g)
    toks = phrases[idx].reshape(-1).numpy().astype(np.uint16)
    toks.tofile(path)


def piece_lengths(args, world, step):
    """Every rank's piece of this step's sequences (all ranks compute all of them)."""
    base = args.seq_len // world
    c = args.scan_chunk
    out = []
    for r in range(world):
        n = base
        if r == args.big_rank:
            n = base * args.big
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + r * 10_007 + step)
            n = n * math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        n = min(max(c, int(round(n / c)) * c), 4 * base * max(1.0, args.big))
        out.append(int(n))
    return out


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
    if args.seq_len % (world * args.scan_chunk):
        raise SystemExit("--seq-len must split into whole scan chunks on every rank")

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, world, args.p2p, link, args.link_factor)

    # the corpus: written once by rank 0, memory-mapped by all
    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="seq_scan_")
        make_corpus(os.path.join(tmp[0], "train.bin"), args.vocab, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    data_dir = tmp[0]
    dist.barrier()
    corpus = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    log_path = os.path.join(data_dir, f"metrics_rank{rank}.jsonl")

    torch.manual_seed(args.seed)           # the same initial weights on every rank
    model = ScanLM(args.vocab, args.dim, args.expand, args.layers)
    params = [q for q in model.parameters()]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    n_params = sum(q.numel() for q in params)

    # gradient buckets (reverse order, as backward produces them)
    buckets, cur, cur_n = [], [], 0
    limit = args.bucket_kb * 256 if args.bucket_kb > 0 else float("inf")
    for q in reversed(params):
        cur.append(q)
        cur_n += q.numel()
        if cur_n >= limit:
            buckets.append(cur)
            cur, cur_n = [], 0
    if cur:
        buckets.append(cur)

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[seq-scan] world={world} layers={args.layers} dim={args.dim} E={args.expand * args.dim} "
              f"vocab={args.vocab} batch={args.batch} seq_len={args.seq_len} chunk={args.scan_chunk} "
              f"params={n_params} buckets={len(buckets)} p2p={args.p2p}", flush=True)

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

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    lens = piece_lengths(args, world, step)
                    total = sum(lens)
                    g = torch.Generator().manual_seed(args.seed * 7919 + step)
                    starts = torch.randint(0, len(corpus) - total - 2, (args.batch,), generator=g).tolist()
                    off = sum(lens[:rank])
                    rows = [np.asarray(corpus[s + off: s + off + lens[rank] + 1], dtype=np.int64)
                            for s in starts]
                    batch = torch.from_numpy(np.stack(rows))
                    tokens, targets = batch[:, :-1], batch[:, 1:]

                with record_function("forward"):
                    loss = model(tokens, targets, args.scan_chunk, comm, extra)
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()
                with record_function("carry_send_wait"):
                    comm.wait_sends()

                with record_function("allreduce"):
                    for bk in buckets:
                        flat = torch.cat([q.grad.reshape(-1) for q in bk])
                        comm.all_reduce(flat)
                        flat /= world
                        o = 0
                        for q in bk:
                            q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                            o += q.numel()
                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()

                with record_function("log_metrics"):
                    m = torch.tensor([loss.item() * tokens.numel(), float(tokens.numel())])
                    comm.all_reduce(m)
                    if slow and args.log_sleep_ms > 0:
                        time.sleep(args.log_sleep_ms / 1000.0)
                    with open(log_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "rank": rank, "loss": loss.item(),
                                             "tokens": tokens.numel(), "piece": lens[rank],
                                             "grad_norm": float(gnorm)}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {m[0].item() / m[1].item():.4f} |g| {float(gnorm):.3f} "
                          f"pieces {lens} t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside carries and all_reduces) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(data_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
