"""A 4-stage pipeline-parallel transformer LM trained with variable sequence lengths.

(calibration table at the end of this docstring)

What it is
----------
A small pre-norm transformer language model split into 4 pipeline stages, one stage a rank,
trained on 4 CPU processes (gloo, ``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``) with
a hand-written 1F1B schedule, as Megatron-LM runs a pipeline with ``variable_seq_lengths``:
the micro-batches of a step do not share one shape. Every micro-batch has its own sequence
length, drawn per (step, micro-batch) from ``--min-len`` .. ``--max-len`` (32..128) by a
generator seeded from ``--seed``, the same on every rank; so the receivers cannot pre-allocate
their buffers and every activation or gradient message is preceded by a small int64 shape
tensor (the "header": batch, length, width, padded element count).

Stages (``--layers`` encoder layers a stage, 2 by default): stage 0 the token and position
embeddings and its layers; stages 1 and 2 their layers; stage 3 its layers, the final
LayerNorm, the LM head (``--vocab``) and the next-token cross entropy. The layers are
pre-norm causal transformer encoder layers written out by hand, GPT-2 style, on [B * T, D]
rows (``--dim`` 128, ``--heads`` 4, fused QKV, ``scaled_dot_product_attention(is_causal=True)``,
FFN 4 x dim with GELU, residuals folded into ``addmm``, no dropout; the hand-written layer
traces ~40% fewer ops than ``nn.TransformerEncoderLayer``). Every rank builds only its own
stage (seeded by ``--seed`` and the stage) and steps its own fused Adam over it (gradients
clipped to norm 1 per stage); there is no data parallelism, so no gradient all-reduce.

Data: a synthetic raw-text corpus (bytes: words of a small random lexicon with spaces) made
once per rank from ``--seed`` (the same bytes on every rank). Each step every rank reads the
step's documents (``load_batch``), tokenizes them (a byte-bigram hash tokenizer into
``--vocab`` ids) and packs them, EOS-separated, into the step's micro-batches of the drawn
lengths (``pack_sequences``). Stage 0 uses the inputs, stage 3 the shifted targets, the
middle stages only the lengths (as in Megatron, where every pipeline rank runs the loader).

Schedule (``--micro-batches`` M, 8 by default, of ``--mb-size`` sequences, 2):

* 1F1B (default), Megatron's ``forward_backward_pipelining_without_interleaving``: stage s
  runs ``min(3 - s, M)`` warm-up forwards (receive, forward, send), then the steady state
  forward -> ``send_forward_recv_backward`` -> backward -> ``send_backward_recv_forward``,
  then the cool-down backwards (receive grad, backward, send grad).
* ``--gpipe``: all M forwards, then all M backwards.

Point-to-point: every message is a header (4 int64) and then the payload (float32, the
activation [mb, T, dim] forward s -> s+1, or its gradient backward s+1 -> s). By default
blocking ``dist.send`` / ``dist.recv`` (gloo's send waits for the matching receive), so the
paired exchanges of the steady state are ordered by stage parity (even stages send first, odd
stages receive first). ``--async-p2p``: ``dist.isend`` for the header and the payload, the
receive by ``dist.irecv(header).wait()`` then ``dist.irecv(payload).wait()``; the pending
sends are waited at the end of every exchange and at the end of the schedule.

Per step besides the pipeline: the last stage's mean loss is broadcast from rank 3 to all
(``dist.broadcast``, for logging), each stage clips and steps its Adam, and every
``--eval-every`` steps (4) an evaluation forward pass over the pipeline (``--eval-batches``
micro-batches of ``--max-len`` tokens, no grad, the same header + payload messages) whose loss
is broadcast from rank 3 as well.

Communication per step (defaults: M = 8, mb 2, T ~ 80, dim 128): 8 activation messages on
each link s -> s+1 (~80 KB each, 32-128 tokens), 8 gradient messages on each link s+1 -> s
(same size), each after its 32-byte header; one 1-float broadcast.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``pack_sequences``, the schedule
with ``forward_step`` / ``backward_step`` per micro-batch (``recompute`` inside
``backward_step`` under ``--seq-sigma``), ``recv_activation``, ``send_shape`` +
``send_activation``, ``recv_grad``, ``send_shape`` + ``send_grad`` (the header receive is
inside ``recv_activation`` / ``recv_grad``), ``wait_sends`` (async), ``loss_broadcast``,
``optimizer``, and every few steps ``evaluate``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the
point-to-point sends / receives / waits and the broadcasts).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (8; 6 traced), ``--seed``, ``--shapes``.

Model / job: ``--layers`` (2 a stage), ``--dim`` (128), ``--heads`` (4), ``--vocab`` (512),
``--mb-size`` (2), ``--micro-batches`` (8), ``--min-len`` (32), ``--max-len`` (128),
``--gpipe``, ``--async-p2p``, ``--lr`` (1e-3), ``--eval-every`` (4, 0 = never),
``--eval-batches`` (2).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the stage's forward of every micro-batch is done F times
  (F - 1 extra passes under no_grad, discarded) and its backward F times (F - 1 extra
  ``torch.autograd.grad`` passes over the retained graph, discarded), inside
  ``forward_step`` / ``backward_step``; a fractional part is carried from one micro-batch to
  the next;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow read of the step's documents: ``load_batch`` sleeps MS;
* ``--pack-sleep-ms MS`` (family fault): a slow tokenizer / sequence packer on the host:
  ``pack_sequences`` sleeps MS each step;
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (|A - B| = 1; B = A + 1 pads the
  activations, B = A - 1 the gradients): every payload message A sends to B is X times the
  bytes, zero-padded; the header carries the true shape and the padded element count, B
  receives all of it into a buffer of that size and keeps the head. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: activation recomputation of varying depth: per rank and step a factor
  m = lognormal(0, S) clamped to [1/4, 4] (drawn from (seed, rank, step)); in every
  micro-batch's backward the stage recomputes its layers' forward m times (``recompute``, no
  grad, fractions carried: 1 pass in 4 micro-batches at m = 1/4, 4 passes each at m = 4), so
  the stages' work differs by rank and step;
* ``--big-rank K --big X``: stage K holds round(X x ``--layers``) layers (an unbalanced
  partition), every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 11-18, 6 in the
runs marked quieter); 4
ranks, defaults unless said (8 steps, 6 traced; M = 8 micro-batches of 2 sequences). The
blocking point-to-point ties the stages, so the ranks' step medians agree within ~3%: one
number. "busy" = median time outside the sends / receives / waits and the broadcasts, slow
rank vs the others; "base" = the step median of a healthy default run just before (or after).
Healthy default runs between the others gave 419-1232 ms steps (the neighbours' load).

  setting (slow rank)                               base ms  step ms   busy slow / others ms
  healthy default (10 runs)                            -     419-1232  r0 134-440, r1 119-397,
                                                                        r2 109-364, r3 163-543
  healthy --shapes --steps 6                           -       892     r0 386, r1 299, r2 248, r3 392
  healthy --gpipe                                      -      1130     r0 374, r1 294, r2 326, r3 399
  healthy --async-p2p --mb-size 4                      -      1460     r0 697, r1 637, r2 615, r3 793
  healthy --dim 192 --heads 6 --layers 3
          --micro-batches 6 --steps 6                  -      1700     r0 777, r1 765, r2 655, r3 809
  healthy --min-len 16 --max-len 256 --eval-every 2
          --micro-batches 12 --steps 6                 -      2055     r0 839, r1 770, r2 656, r3 972
  --factor 2 (r1)                                     537      827     435 / 166-210
  --factor 2 --steps 7 (r1)                          1232     1456     787 / 329-435
  --factor 2 --steps 6 (r3)                           735     1162     759 / 277-330
  --factor 2.5 --steps 6 (r0)                         604      644     446 / 151-228
  --async-p2p --factor 3 --steps 6
          --micro-batches 6 (r2)                      604     1212     765 / 150-273
  --gpipe --factor 2 --steps 6 (r3)                     -     1470     874 / 301-388
  --sleep-ms 150 (r2)                                 735     1240     468 / 283-524  (too close)
  --sleep-ms 300 (r2)                                1025     1325     617 / 302-467
  --data-sleep-ms 250 (r0)                            885     1162     613 / 276-436
  --data-sleep-ms 300 (r3)                           1025     1145     673 / 225-274
  --pack-sleep-ms 250 (r1)                            885     1160     569 / 314-416
  --pack-sleep-ms 300 (r0)                           1025     1022     590 / 202-295
  --hog (r3)                                          885     1400     819 / 271-330
  --hog (r1), two runs                               1025     1221     414 / 210-375
                                                        -     1520     591 / 241-352
  --hog (r2)                                          441      760     270 / 144-179
  --hog (r1), quieter box (load 6)                    419      703     194 / 115-164  (r1 base 119)
  link 1->2 x512 (~40 MB messages)                    885     1433     r1 342, r2 338 / 343-427
  link 2->1 x512 (gradients)                          940     1065     r1 293, r2 228 / 241-317
  link 1->2 x1024 (~80 MB messages, ~650 MB a step)   900     2070     r1 413, r2 397 / 352-441
  link 2->1 x1024                                    1232     2160     r1 437, r2 353 / 291-491
  link 3->2 x1024 (the last stage's gradients)     900-1232   1890     r3 457, r2 360 / 287-324
  link 3->2 x1024, quieter box (load 6)               419      656     r3 161, r2 105 / 116-120
  --seq-sigma 0.8                                      -      1590     r0 491, r1 461, r2 522, r3 748
  --big-rank 3 --big 3 --micro-batches 4 --steps 6     -       905     656 / 110-161
  --big-rank 2 --big 3 --micro-batches 6 --steps 6     -       845     472 / 127-204

Reading: a slower stage holds up the whole pipeline (the others wait in ``recv_activation`` /
``recv_grad`` and, gloo's send completing only when the receiver takes it, in
``send_activation`` / ``send_grad``), so every rank's step grows by about the same and only
the slowed rank's busy time tells which one; the load moves the base by 2-3x from one run to
the next, so one run's step change says little. ``--factor 2`` already doubles the stage's
layer compute and costs it 30-55% of its step (the 4 processes share 2 cores, so part of the
added time hides in the others' waits). A 250-300 ms sleep is 20-30% of a step at this load;
150 ms was too close to the noise, hence 300 in the battery. The hog's cost depends on what
else runs: 10-40% of the step on the same rank from one run to the next. A padded link costs
little at 40 MB a message (x512, +15-55%); at x1024 the transfers (~80 MB each, 8 a step)
dominate: +55-130% on every rank, the link's two ranks waiting in the sends and receives of
that link. Trace sizes: 8.3-9.2 MB a rank at the defaults, ~13 MB with --shapes at 8 steps (so it traces 6);
every extra forward + backward pass adds ~90% of a stage's events, so the --factor runs trace
5-6 steps (10-12 MB on the slowed rank); a --big stage holds 3x the layers, so it runs with
fewer micro-batches and steps (8.5-11.7 MB). Wall per run: 21-47 s under that load (most of it
start-up and export), 11-17 s when the box was quieter (the battery run).
"""

import argparse
import math
import os
import statistics
import sys
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
    p.add_argument("--layers", type=int, default=2, help="encoder layers a stage")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--mb-size", type=int, default=2)
    p.add_argument("--micro-batches", type=int, default=8)
    p.add_argument("--min-len", type=int, default=32)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--gpipe", action="store_true", help="all forwards, then all backwards")
    p.add_argument("--async-p2p", action="store_true", help="isend/irecv + wait")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--eval-batches", type=int, default=2)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--pack-sleep-ms", type=float, default=0.0)
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
        p.error("a pipeline only links neighbouring stages (|src - dst| == 1)")
    if not 1 <= a.min_len <= a.max_len:
        p.error("need 1 <= --min-len <= --max-len")
    return a


# --------------------------------------------------------------------------
# point-to-point with shape headers
# --------------------------------------------------------------------------

class P2P:
    """Header + payload messages between neighbouring stages; pads one link with --link-*."""

    def __init__(self, rank, world, use_async, link=None, link_factor=1.0):
        self.rank, self.world, self.use_async = rank, world, use_async
        self.link, self.link_factor = link, link_factor
        self.pending = []      # (work, tensor) of isends not waited yet
        self.secs = 0.0        # time spent in communication this step
        self.send_bufs = {}    # dst -> [buffer, length of the head last written]
        self.recv_bufs = {}    # src -> buffer (grown when needed)

    def _padded(self, n, dst):
        if self.link is not None and (self.rank, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _send_buffer(self, flat, dst):
        n = flat.numel()
        n_pad = self._padded(n, dst)
        if n_pad == n:
            return flat.contiguous(), n_pad
        ent = self.send_bufs.get(dst)
        if ent is None or ent[0].numel() < n_pad:
            ent = self.send_bufs[dst] = [torch.zeros(n_pad), 0]
        buf, last = ent
        buf[:n].copy_(flat)
        if last > n:                       # keep the padding zero
            buf[n:last].zero_()
        ent[1] = n
        return buf[:n_pad], n_pad

    def _isend(self, t, dst):
        if self.use_async:
            self.pending.append((dist.isend(t, dst), t))
        else:
            dist.send(t, dst)

    def send(self, t, dst, kind):
        """kind: "activation" or "grad"."""
        t0 = time.perf_counter()
        flat = t.detach().reshape(-1)
        payload, n_pad = self._send_buffer(flat, dst)
        header = torch.tensor(list(t.shape) + [n_pad], dtype=torch.int64)
        with record_function("send_shape"):
            self._isend(header, dst)
        with record_function(f"send_{kind}"):
            self._isend(payload, dst)
        self.secs += time.perf_counter() - t0

    def recv(self, src, kind):
        t0 = time.perf_counter()
        with record_function(f"recv_{kind}"):
            header = torch.empty(4, dtype=torch.int64)
            if self.use_async:
                dist.irecv(header, src).wait()
            else:
                dist.recv(header, src)
            b, s, d, n_pad = header.tolist()
            n = b * s * d
            if n_pad == n:
                buf = torch.empty(n)
            else:
                buf = self.recv_bufs.get(src)
                if buf is None or buf.numel() < n_pad:
                    buf = self.recv_bufs[src] = torch.empty(n_pad)
                buf = buf[:n_pad]
            if self.use_async:
                dist.irecv(buf, src).wait()
            else:
                dist.recv(buf, src)
            out = buf[:n].view(b, s, d).clone() if n_pad != n else buf.view(b, s, d)
        self.secs += time.perf_counter() - t0
        return out

    def wait_sends(self):
        if not self.pending:
            return
        t0 = time.perf_counter()
        with record_function("wait_sends"):
            for work, _ in self.pending:
                work.wait()
            self.pending.clear()
        self.secs += time.perf_counter() - t0

    def exchange(self, t, peer, send_kind, recv_kind):
        """Send t to peer and receive from peer (a paired exchange of the 1F1B steady state).

        Blocking mode: even stages send first, odd stages receive first."""
        if self.use_async:
            self.send(t, peer, send_kind)
            out = self.recv(peer, recv_kind)
        elif self.rank % 2 == 0:
            self.send(t, peer, send_kind)
            out = self.recv(peer, recv_kind)
        else:
            out = self.recv(peer, recv_kind)
            self.send(t, peer, send_kind)
        self.wait_sends()
        return out

    def broadcast(self, t, src):
        t0 = time.perf_counter()
        dist.broadcast(t, src)
        self.secs += time.perf_counter() - t0
        return t


# --------------------------------------------------------------------------
# model: one stage a rank
# --------------------------------------------------------------------------

class Block(nn.Module):
    """A pre-norm causal transformer layer written out by hand (GPT-2 style), on [B * T, D] rows."""

    def __init__(self, d, heads):
        super().__init__()
        self.d, self.heads = d, heads
        self.ln1_w, self.ln1_b = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))
        self.w_qkv = nn.Parameter(torch.randn(d, 3 * d) * 0.02)
        self.b_qkv = nn.Parameter(torch.zeros(3 * d))
        self.w_o = nn.Parameter(torch.randn(d, d) * 0.02 / math.sqrt(2))
        self.ln2_w, self.ln2_b = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))
        self.w_fc = nn.Parameter(torch.randn(d, 4 * d) * 0.02)
        self.b_fc = nn.Parameter(torch.zeros(4 * d))
        self.w_out = nn.Parameter(torch.randn(4 * d, d) * 0.02 / math.sqrt(2))

    def forward(self, x, B, T):
        D, H = self.d, self.heads
        h = F.layer_norm(x, (D,), self.ln1_w, self.ln1_b)
        q, k, v = torch.addmm(self.b_qkv, h, self.w_qkv).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = torch.addmm(x, a.transpose(1, 2).reshape(B * T, D), self.w_o)       # residual
        h = F.layer_norm(x, (D,), self.ln2_w, self.ln2_b)
        return torch.addmm(x, F.gelu(torch.addmm(self.b_fc, h, self.w_fc)), self.w_out)


class Stage(nn.Module):
    def __init__(self, stage, n_stages, n_layers, args):
        super().__init__()
        self.first, self.last = stage == 0, stage == n_stages - 1
        d = args.dim
        if self.first:
            self.tok = nn.Embedding(args.vocab, d)
            self.pos = nn.Embedding(args.max_len, d)
            nn.init.normal_(self.tok.weight, std=0.02)
            nn.init.normal_(self.pos.weight, std=0.02)
        self.layers = nn.ModuleList(Block(d, args.heads) for _ in range(n_layers))
        if self.last:
            self.norm = nn.LayerNorm(d)
            self.head = nn.Parameter(torch.randn(d, args.vocab) * 0.02)

    def embed(self, tokens):
        B, T = tokens.shape
        return (self.tok(tokens) + self.pos.weight[:T]).view(B * T, -1)

    def body(self, x, B, T):
        for layer in self.layers:
            x = layer(x, B, T)
        return x

    def forward(self, x, targets=None):
        """x: tokens [B, T] on the first stage, else activations [B, T, D].
        Returns the activation [B, T, D], or on the last stage the mean loss."""
        B, T = x.shape[0], x.shape[1]
        x = self.embed(x) if self.first else x.reshape(B * T, -1)
        x = self.body(x, B, T)
        if self.last:
            logits = self.norm(x) @ self.head
            return F.cross_entropy(logits, targets.reshape(-1))
        return x.view(B, T, -1)


# --------------------------------------------------------------------------
# data: raw text, a toy tokenizer, packing into variable-length micro-batches
# --------------------------------------------------------------------------

def make_corpus(seed, n_docs=4000):
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    lexicon = [bytes(rng.choice(letters, size=rng.integers(2, 9))) for _ in range(600)]
    docs = []
    for _ in range(n_docs):
        n_words = int(rng.integers(10, 120))
        # documents prefer a topic: a window of the lexicon
        lo = int(rng.integers(0, len(lexicon) - 80))
        words = [lexicon[lo + int(i)] for i in rng.integers(0, 80, size=n_words)]
        docs.append(b" ".join(words))
    return docs


def micro_batch_lengths(args, step, tag=0):
    """The step's micro-batch sequence lengths: the same on every rank (shared seed)."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + 7919 * step + tag)
    return torch.randint(args.min_len, args.max_len + 1, (args.micro_batches,), generator=g).tolist()


def tokenize(doc, vocab):
    """Byte-bigram hash tokenizer (a stand-in for a BPE): one id per pair of bytes."""
    b = np.frombuffer(doc, dtype=np.uint8).astype(np.int64)
    if len(b) % 2:
        b = np.append(b, 32)
    pairs = b[0::2] * 257 + b[1::2]
    return (pairs * 2654435761 % (vocab - 1)) + 1          # 0 is EOS


def pack(token_docs, lengths, mb_size):
    """Concatenate EOS-separated documents and cut the micro-batches [mb, T + 1]."""
    stream = np.concatenate([np.append(t, 0) for t in token_docs])
    need = sum(mb_size * (T + 1) for T in lengths)
    while len(stream) < need:
        stream = np.concatenate([stream, stream])
    out, o = [], 0
    for T in lengths:
        n = mb_size * (T + 1)
        out.append(torch.from_numpy(stream[o: o + n].reshape(mb_size, T + 1).copy()))
        o += n
    return out


def recompute_factor(args, rank, step):
    if args.seq_sigma <= 0:
        return 0.0
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
    m = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
    return min(4.0, max(0.25, m))


def start_hog(stop):
    def spin():
        a = torch.randn(192, 192)
        b = torch.randn(192, 192) / 14.0
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=spin, name="busy-neighbour", daemon=True)
    th.start()
    return th


class Credit:
    """Whole extra passes out of a fractional rate, the remainder carried over."""

    def __init__(self):
        self.acc = 0.0

    def take(self, rate):
        self.acc += rate
        n = int(self.acc)
        self.acc -= n
        return n


# --------------------------------------------------------------------------
# one pipeline step
# --------------------------------------------------------------------------

class PipelineRunner:
    def __init__(self, model, comm, rank, world, args, extra):
        self.model, self.comm = model, comm
        self.rank, self.world, self.args = rank, world, args
        self.first, self.last = rank == 0, rank == world - 1
        self.extra = extra               # --factor - 1 on the slowed rank
        self.fwd_credit, self.bwd_credit, self.rc_credit = Credit(), Credit(), Credit()
        self.recompute = 0.0

    # -- compute ---------------------------------------------------------
    def forward_step(self, x_in, targets, M):
        with record_function("forward_step"):
            out = self.model(x_in, targets)
            if self.last:
                out = out / M
            for _ in range(self.fwd_credit.take(self.extra)):     # --factor: discarded
                with torch.no_grad():
                    self.model(x_in, targets)
        return out

    def backward_step(self, x_in, out, grad_out):
        with record_function("backward_step"):
            if self.recompute > 0:
                with record_function("recompute"), torch.no_grad():
                    for _ in range(self.rc_credit.take(self.recompute)):
                        B, T = x_in.shape[0], x_in.shape[1]
                        h = self.model.embed(x_in) if self.first else x_in.reshape(B * T, -1)
                        self.model.body(h.detach(), B, T)
            n_extra = self.bwd_credit.take(self.extra)
            if n_extra:                                           # --factor: discarded
                inputs = [q for q in self.model.parameters()]
                if x_in.requires_grad:
                    inputs.append(x_in)
                for _ in range(n_extra):
                    torch.autograd.grad(out, inputs, grad_out, retain_graph=True, allow_unused=True)
            torch.autograd.backward(out, grad_out)
        return x_in.grad if (not self.first) else None

    # -- communication wrappers ------------------------------------------
    def recv_forward(self):
        return None if self.first else self.comm.recv(self.rank - 1, "activation")

    def send_forward(self, y):
        if not self.last:
            self.comm.send(y, self.rank + 1, "activation")
            self.comm.wait_sends()

    def recv_backward(self):
        return None if self.last else self.comm.recv(self.rank + 1, "grad")

    def send_backward(self, g):
        if not self.first:
            self.comm.send(g, self.rank - 1, "grad")
            self.comm.wait_sends()

    def send_forward_recv_backward(self, y):
        if self.last:
            return None
        return self.comm.exchange(y, self.rank + 1, "activation", "grad")

    def send_backward_recv_forward(self, g):
        if self.first:
            return None
        return self.comm.exchange(g, self.rank - 1, "grad", "activation")

    # -- schedules ---------------------------------------------------------
    def _input(self, received, batch):
        if self.first:
            return batch[:, :-1]
        received.requires_grad_(True)
        return received

    def _fwd(self, received, batch, M):
        x = self._input(received, batch)
        tgt = batch[:, 1:] if self.last else None
        y = self.forward_step(x, tgt, M)
        return x, y

    def _bwd(self, x, y, g):
        if self.last:
            return self.backward_step(x, y, None)
        return self.backward_step(x, y, g)

    def run(self, batches):
        """batches: this step's micro-batches [mb, T + 1] (tokens on stage 0, targets on 3)."""
        M = len(batches)
        losses = []
        if self.args.gpipe:
            saved = []
            for i in range(M):
                x, y = self._fwd(self.recv_forward(), batches[i], M)
                self.send_forward(y)
                saved.append((x, y))
                if self.last:
                    losses.append(y.item())
            for i in range(M):
                x, y = saved[i]
                dx = self._bwd(x, y, self.recv_backward())
                self.send_backward(dx)
                saved[i] = None
            return losses

        warmup = min(self.world - self.rank - 1, M)
        remaining = M - warmup
        saved = []
        for i in range(warmup):
            x, y = self._fwd(self.recv_forward(), batches[i], M)
            self.send_forward(y)
            saved.append((x, y))
            if self.last:
                losses.append(y.item())
        received = self.recv_forward() if remaining > 0 else None
        for i in range(remaining):
            last_iter = i == remaining - 1
            x, y = self._fwd(received, batches[warmup + i], M)
            if self.last:
                losses.append(y.item())
            g = self.send_forward_recv_backward(y)
            saved.append((x, y))
            x0, y0 = saved.pop(0)
            dx = self._bwd(x0, y0, g)
            if last_iter:
                self.send_backward(dx)
            else:
                received = self.send_backward_recv_forward(dx)
        for _ in range(warmup):
            x0, y0 = saved.pop(0)
            dx = self._bwd(x0, y0, self.recv_backward())
            self.send_backward(dx)
        self.comm.wait_sends()
        return losses

    @torch.no_grad()
    def evaluate(self, batches):
        self.model.eval()
        total = 0.0
        for b in batches:
            x = b[:, :-1] if self.first else self.recv_forward()
            y = self.model(x, b[:, 1:] if self.last else None)
            if self.last:
                total += y.item()
            else:
                self.send_forward(y)
        self.model.train()
        return total / max(1, len(batches))


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=240))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = P2P(rank, world, args.async_p2p, link, args.link_factor)

    n_layers = args.layers
    if rank == args.big_rank:
        n_layers = max(1, int(round(args.big * args.layers)))
    torch.manual_seed(args.seed * 100 + rank)
    model = Stage(rank, world, n_layers, args)
    model.train()
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=args.lr, fused=True)
    n_params = sum(q.numel() for q in params)

    docs = make_corpus(args.seed)
    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    runner = PipelineRunner(model, comm, rank, world, args, extra)
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    counts = [None] * world
    dist.all_gather_object(counts, (n_layers, n_params))
    if rank == 0:
        print(f"[varlen-pipe] stages={world} layers/stage={[c[0] for c in counts]} "
              f"params/stage={[c[1] for c in counts]} dim={args.dim} heads={args.heads} "
              f"vocab={args.vocab} M={args.micro_batches} mb={args.mb_size} "
              f"len={args.min_len}..{args.max_len} schedule={'gpipe' if args.gpipe else '1f1b'} "
              f"p2p={'isend/irecv' if args.async_p2p else 'send/recv'}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    docs_per_step = 48
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
                    g = torch.Generator().manual_seed(args.seed * 31 + step)
                    pick = torch.randint(0, len(docs), (docs_per_step,), generator=g).tolist()
                    raw = [docs[i] for i in pick]
                    lengths = micro_batch_lengths(args, step)

                with record_function("pack_sequences"):
                    if slow and args.pack_sleep_ms > 0:
                        time.sleep(args.pack_sleep_ms / 1000.0)
                    batches = pack([tokenize(d, args.vocab) for d in raw], lengths, args.mb_size)

                runner.recompute = recompute_factor(args, rank, step)
                opt.zero_grad(set_to_none=True)
                losses = runner.run(batches)

                with record_function("loss_broadcast"):
                    lt = torch.tensor([float(sum(losses))], dtype=torch.float32)
                    comm.broadcast(lt, src=world - 1)

                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
                    opt.step()

                ev = None
                if args.eval_every > 0 and (step + 1) % args.eval_every == 0:
                    with record_function("evaluate"):
                        ge = torch.Generator().manual_seed(args.seed * 17 + 999)
                        pick = torch.randint(0, len(docs), (16,), generator=ge).tolist()
                        eb = pack([tokenize(docs[i], args.vocab) for i in pick],
                                  [args.max_len] * args.eval_batches, args.mb_size)
                        e = runner.evaluate(eb)
                        et = torch.tensor([e])
                        comm.broadcast(et, src=world - 1)
                        ev = et.item()

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {lt.item():.4f} |g| {float(gnorm):.3f} "
                          f"lens {lengths} t {1000 * step_times[-1]:.1f} ms"
                          + (f" eval {ev:.4f}" if ev is not None else ""), flush=True)
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
        print("median busy ms (outside p2p and broadcasts) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
