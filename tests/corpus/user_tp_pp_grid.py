"""A small GPT LM trained TP2 x PP2 the Megatron way, written by hand on torch.distributed.

(calibration table at the end of this docstring)

What it is
----------
A small pre-norm causal transformer LM trained on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``) laid out as Megatron lays out
tensor-parallel 2 x pipeline-parallel 2 (no megatron import, everything by hand):

* ranks {0, 1} are pipeline stage 0 and form tensor-parallel group A, ranks {2, 3} are
  stage 1 and form TP group B;
* the pipeline groups are {0, 2} (TP rank 0 of both stages) and {1, 3} (TP rank 1);
  all four groups come from ``dist.new_group``.

Stage 0 holds the token + position embeddings (replicated on its two TP ranks) and the first
``--layers`` blocks, stage 1 the next ``--layers`` blocks, the final LayerNorm and the LM head
(replicated) with the cross entropy. A block: LayerNorm -> attention -> residual, LayerNorm ->
MLP (``--ffn``, GELU) -> residual. Inside a stage each TP rank holds half of the attention
heads (a column-parallel qkv Linear, ``scaled_dot_product_attention(is_causal=True)`` on the
local heads, a row-parallel output projection) and half of the MLP (column-parallel fc1,
row-parallel fc2), with Megatron's mappings as ``autograd.Function``s:
``copy_to_tp_region`` (identity forward, all_reduce of the input gradient in backward, in
front of every column-parallel layer) and ``reduce_from_tp_region`` (all_reduce of the
row-parallel partial output in forward, identity backward). LayerNorms, the row-parallel
biases, the embeddings and the head are replicated: their gradients are all-reduced (averaged)
in the TP group before the optimizer, as one flat buffer.

Between the stages Megatron's "scatter-gather" optimisation: the activation leaving stage 0 is
the same on both TP ranks, so TP rank t sends only the t-th half of it (flattened) to its peer
of the next stage (rank 0 -> 2, rank 1 -> 3, ``dist.isend`` on the pipeline group, tag per
micro-batch), and the receiving stage ``irecv``s its half and ``all_gather``s the two halves in
its TP group before use. Gradients go back the same way: stage 1's input gradient (the same on
both of its TP ranks) is sliced, half t sent 2 -> 0 / 3 -> 1, and stage 0 all_gathers the halves
in its TP group before ``backward`` on its output. The sends are waited at the end of backward.

Schedule: GPipe, all ``--micro-batches`` (6) forwards of ``--mb-size`` (4) sequences of
``--seq-len`` (64) tokens, then all backwards (in the same order). Then each rank all-reduces
its replicated parameters' gradients in its TP group, the global gradient norm is all-reduced
over the world (sharded parameters counted on every rank, replicated ones on TP rank 0 only),
clipped to 1, and AdamW steps each rank's own shard. The last stage's mean loss is all-reduced
in its TP group {2, 3} for the log line. Every ``--eval-every`` (4) steps an evaluation forward
of ``--eval-mbs`` (2) held-out micro-batches goes through the pipeline (no grad, same
scatter-gather sends). Every step each rank appends a metrics record to its own tensorboard-
style jsonl event file (``write_metrics``).

Data: synthetic token streams made of repeated random "phrases" (something to learn), drawn
from (seed, step, micro-batch): all four ranks derive the same batch (stage 0 uses the inputs,
stage 1 the targets).

Communication per step (defaults: dim 128, 6 micro-batches of 4 x 64 tokens, 2 layers a
stage): per micro-batch and direction one 16 K-float (64 KB) half-activation message on each
pipeline link (0 -> 2, 1 -> 3 forward, 2 -> 0, 3 -> 1 backward) and one all_gather of two such
halves in the receiving TP group; per layer 2 all_reduces of the (4, 64, 128) activation in
the TP group in forward and 2 in backward; one flat all_reduce of the replicated gradients
(~0.1-0.2 M floats) per TP group, one 1-float world all_reduce (grad norm), one 1-float loss
all_reduce in {2, 3}; every 4th step 2 more activation messages and all_gathers.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``forward_step`` per micro-batch
(with ``pp_recv`` and ``tp_allgather`` on stage 1, ``pp_send`` on stage 0), ``backward_step``
per micro-batch (``pp_recv`` + ``tp_allgather`` on stage 0, ``pp_send`` on stage 1,
``recompute`` with ``--seq-sigma``), ``pp_send_wait``, ``optimizer`` (``tp_grad_allreduce``,
``grad_norm``, the step), ``loss_allreduce`` (stage 1), every few steps ``evaluate``,
``write_metrics``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the p2p
sends/receives and their waits, the all_gathers and all the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (2 a stage), ``--dim`` (128), ``--heads`` (4, split over TP),
``--ffn`` (512), ``--vocab`` (512), ``--seq-len`` (64), ``--mb-size`` (4), ``--micro-batches``
(6), ``--lr`` (1e-3), ``--eval-every`` (4, 0 = never), ``--eval-mbs`` (2).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's stage layers of every micro-batch are run F - 1
  extra times in ``forward_step`` (a local copy without the TP all_reduces, on a detached
  input, graph kept) and those extra graphs are back-propagated in ``backward_step``
  (``autograd.grad``, results discarded): forward and backward compute F times; a fractional
  part runs over that fraction of the micro-batch's rows;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow batch read: ``load_batch`` sleeps MS each step;
* ``--writer-sleep-ms MS`` (family fault): a slow metrics / tensorboard writer: the rank's
  ``write_metrics`` sleeps MS each step before appending its record (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B pipeline peers: 0 <-> 2 or 1 <-> 3):
  every half-activation (A on stage 0) or half-gradient (A on stage 1) message A sends to B
  carries X times the bytes, zero-padded in the same message (persistent buffers, one per
  micro-batch); B receives it all and keeps the head. No ``--slow-rank``.

Imbalance without a fault (per stage: the two TP ranks of a stage must agree on shapes):

* ``--seq-sigma S``: activation recomputation: in ``backward_step`` each stage recomputes its
  layers' forward (with its TP all_reduces, no grad) w times per micro-batch, w drawn per step
  and stage from lognormal(0, S) (seeded by (seed, step, stage), so both TP ranks of a stage
  agree), clamped to [1/4, 4], the fractional part over that fraction of the rows;
* ``--big-rank K --big X``: the stage of rank K has X times the layers of the other stage
  (both TP ranks of that stage; the heavier stage is the answer).

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 2-6); 4 ranks, 10 steps
(8 timed) unless said. Step medians of all ranks agree within a few % (the TP all_reduces and
the pipeline p2p tie all four), so one number; "busy" = median time outside communication,
slow rank (or stage) vs the others. Only ~25% of a healthy step is busy: GPipe's bubble (each
stage waits for the other's forwards or backwards) and 48+ small TP all_reduces a step on
shared cores. The "base" column is a healthy run of the same shape shortly before.

  setting (slow rank)                              base ms  step ms  change   busy slow / others ms
  healthy default                                     -     294-372     -      69-108 (stage 1 ~+15%)
  healthy --micro-batches 4 --mb-size 6 --steps 8     -       240       -      64-83
  --factor 3 (r1)                                    368      377      +2%     168 / 83-99
  --factor 3 (r2)                                    368      432     +17%     188 / 72-84
  --factor 4 (r0), mb 4 x 6, 8 steps                 240      369     +54%     178 / 63-74
  --factor 5 (r3), mb 4 x 6, 8 steps                 240      463     +93%     265 / 64-83
  --dim 192 --ffn 768 --factor 3 (r1), mb 4, 8 st.   348      489     +40%     201 / 91-108
  --layers 3, mb 3 x 8, --factor 4 (r2), 8 steps     348      640     +84%     452 / 78-91
  --sleep-ms 150 (r1)                                348      591     +70%     225 / 86-108
  --data-sleep-ms 150 (r2)                           341      631     +85%     247 / 70-82
  --writer-sleep-ms 150 (r2)                         301      494     +64%     244 / 68-82
  --hog (r1)                                         301      600   (load)     111 / 76-84
  --hog (r3)                                         348      494   (load)     142 / 65-86
  link 0->2 x512 (32 MB messages)                    301      575     +91%     r0 71, r2 101 / 71-103
  link 1->3 x1024 (64 MB activation halves)          348      589     +69%     r1 89, r3 103 / 78-101
  link 3->1 x1024 (64 MB gradient halves)            348      650     +87%     r3 94, r1 83 / 74-86
  --layers 1 --big-rank 3 --big 3 (stage 1 x3)        -       442       -      stage 1 135-143 / 45-50
  --seq-sigma 0.8 (recompute w per stage and step)    -       566       -      stage 1 133 / stage 0 83

Reading: ``--factor`` lands in the slowed rank's busy time (its extra layer passes), and its
TP partner then waits in the stage's all_reduces, the other stage in ``pp_recv``; with the
default 6 small micro-batches the extra work can hide in the pipeline bubble (r1 x3: +2% step),
so the battery uses 3-5 with bigger micro-batches (+40-93%). A 150 ms sleep is 30-50% of a
step. The hog costs the rank's busy time +35-50% but that is only 6-12% of a step on this
loaded box (the neighbour thread takes one fifth of two shared cores). A padded link costs
little in busy time (the transfer sits in ``pp_recv`` / ``pp_send_wait``) but lengthens every
rank's step by ~70-90% at 32-64 MB messages (6 a step). ``--big``'s heavier stage and
``--seq-sigma``'s recompute show as one stage's busy time (both TP ranks alike). Wall per
run: 9-23 s. Traces: ~14.5 MB (stage 0) / 15.6 MB (stage 1) per rank at the defaults; the
slowed rank's trace grows ~60% with ``--factor`` (the extra graphs), 3 layers a stage or
``--seq-sigma`` by ~20-40%, so the battery runs those with fewer micro-batches or 8 steps.
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
    p.add_argument("--layers", type=int, default=2, help="blocks per pipeline stage")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--mb-size", type=int, default=4)
    p.add_argument("--micro-batches", type=int, default=6)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--eval-mbs", type=int, default=2)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--writer-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and abs(a.link_src - a.link_dst) != 2:
        p.error("links join pipeline peers only (0 <-> 2, 1 <-> 3)")
    if a.heads % 2 or a.ffn % 2 or a.dim % a.heads:
        p.error("--heads and --ffn must split over 2 TP ranks, --dim over the heads")
    return a


# --------------------------------------------------------------------------
# parallel state and communication
# --------------------------------------------------------------------------

class Par:
    """Who is who, the groups, and a timer of everything spent in communication."""

    def __init__(self, rank):
        self.rank = rank
        self.stage = rank // 2
        self.tp_rank = rank % 2
        self.peer = rank ^ 2                       # the same TP rank of the other stage
        # every rank creates every group, in the same order
        groups = {}
        for members in ([0, 1], [2, 3], [0, 2], [1, 3]):
            groups[tuple(members)] = dist.new_group(members)
        self.tp_group = groups[(0, 1)] if self.stage == 0 else groups[(2, 3)]
        self.pp_group = groups[(0, 2)] if self.tp_rank == 0 else groups[(1, 3)]
        self.comm_secs = 0.0
        self.local = False                         # True: the --factor copies, no TP collectives

    def timed(self, fn, *a, **k):
        t0 = time.perf_counter()
        out = fn(*a, **k)
        self.comm_secs += time.perf_counter() - t0
        return out

    def tp_all_reduce(self, t):
        if not self.local:
            self.timed(dist.all_reduce, t, group=self.tp_group)
        return t


PAR = None


class CopyToTP(torch.autograd.Function):
    """Megatron's copy_to_tensor_model_parallel_region: identity, all_reduce of the grad."""

    @staticmethod
    def forward(ctx, x):
        ctx.local = PAR.local                      # the --factor copies stay local in backward too
        return x

    @staticmethod
    def backward(ctx, g):
        if ctx.local:
            return g
        g = g.contiguous().clone()
        return PAR.tp_all_reduce(g)


class ReduceFromTP(torch.autograd.Function):
    """Megatron's reduce_from_tensor_model_parallel_region: all_reduce forward, identity grad."""

    @staticmethod
    def forward(ctx, x):
        return PAR.tp_all_reduce(x.clone())

    @staticmethod
    def backward(ctx, g):
        return g


class PipeLink:
    """Scatter-gather p2p between pipeline peers, with the --link-* padding."""

    def __init__(self, par, link, link_factor):
        self.par = par
        self.link, self.link_factor = link, link_factor
        self.pending = []
        self.bufs = {}

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def send_half(self, full, tag):
        """Send this TP rank's half of a tensor that is the same on both TP ranks."""
        par = self.par
        flat = full.detach().reshape(-1)
        h = flat.numel() // 2
        part = flat[par.tp_rank * h: (par.tp_rank + 1) * h]
        with record_function("pp_send"):
            buf = self._buffer(("send", tag), self._padded(h, par.rank, par.peer))
            buf[:h].copy_(part)
            work = par.timed(dist.isend, buf, par.peer, group=par.pp_group, tag=tag)
            self.pending.append(work)

    def recv_gather(self, shape, tag):
        """Receive our half from the peer and all_gather the halves in the TP group."""
        par = self.par
        n = math.prod(shape)
        h = n // 2
        with record_function("pp_recv"):
            buf = self._buffer(("recv", tag), self._padded(h, par.peer, par.rank))
            work = par.timed(dist.irecv, buf, par.peer, group=par.pp_group, tag=tag)
            par.timed(work.wait)
            mine = buf[:h].clone()
        with record_function("tp_allgather"):
            halves = [torch.empty(h) for _ in range(2)]
            par.timed(dist.all_gather, halves, mine, group=par.tp_group)
            return torch.cat(halves).view(shape)

    def wait_sends(self):
        with record_function("pp_send_wait"):
            for w in self.pending:
                self.par.timed(w.wait)
            self.pending.clear()


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class ParallelBlock(nn.Module):
    """Pre-norm block with half the heads and half the MLP of this TP rank."""

    def __init__(self, dim, heads, ffn, idx):
        super().__init__()
        self.idx = idx
        self.heads_local = heads // 2
        self.head_dim = dim // heads
        hl = self.heads_local * self.head_dim
        self.ln1 = nn.LayerNorm(dim)                          # replicated
        self.qkv = nn.Linear(dim, 3 * hl, bias=False)         # column-parallel (no biases, llama-style)
        self.proj = nn.Linear(hl, dim, bias=False)            # row-parallel
        self.ln2 = nn.LayerNorm(dim)                          # replicated
        self.fc1 = nn.Linear(dim, ffn // 2, bias=False)       # column-parallel
        self.fc2 = nn.Linear(ffn // 2, dim, bias=False)       # row-parallel
        nn.init.normal_(self.proj.weight, std=0.02 / math.sqrt(2))
        nn.init.normal_(self.fc2.weight, std=0.02 / math.sqrt(2))

    def replicated(self):
        return [*self.ln1.parameters(), *self.ln2.parameters()]

    def forward(self, x):
        B, T, D = x.shape
        h = CopyToTP.apply(self.ln1(x))
        q, k, v = self.qkv(h).view(B, T, 3, self.heads_local, self.head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = a.transpose(1, 2).reshape(B, T, -1)
        x = x + ReduceFromTP.apply(self.proj(a))
        h = CopyToTP.apply(self.ln2(x))
        m = self.fc2(F.gelu(self.fc1(h)))
        return x + ReduceFromTP.apply(m)


class Stage(nn.Module):
    def __init__(self, args, stage, n_layers):
        super().__init__()
        self.stage = stage
        if stage == 0:
            self.tok = nn.Embedding(args.vocab, args.dim)
            self.pos = nn.Embedding(args.seq_len, args.dim)
            nn.init.normal_(self.tok.weight, std=0.02)
            nn.init.normal_(self.pos.weight, std=0.01)
        self.blocks = nn.ModuleList(ParallelBlock(args.dim, args.heads, args.ffn, i) for i in range(n_layers))
        if stage == 1:
            self.ln_f = nn.LayerNorm(args.dim)
            self.head = nn.Linear(args.dim, args.vocab, bias=False)
            nn.init.normal_(self.head.weight, std=0.02)

    def sharded_and_replicated(self):
        rep = []
        for b in self.blocks:
            rep += b.replicated()
        if self.stage == 0:
            rep += [self.tok.weight, self.pos.weight]
        else:
            rep += [*self.ln_f.parameters(), self.head.weight]
        ids = {id(q) for q in rep}
        shard = [q for q in self.parameters() if id(q) not in ids]
        return shard, rep

    def embed(self, tokens):
        T = tokens.shape[1]
        return self.tok(tokens) + self.pos(torch.arange(T))

    def layers(self, x):
        for b in self.blocks:
            x = b(x)
        return x

    def loss(self, x, targets):
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def local_layers(stage, x):
    """The stage's layers without TP collectives: the --factor copies (a slower device)."""
    PAR.local = True
    try:
        return stage.layers(x)
    finally:
        PAR.local = False


def repeat_rows(x, times):
    """The micro-batch's rows stacked ``times`` over (fractional: that share of the rows), as
    one batch: ``times`` passes' worth of work in one pass's ops (keeps the trace small)."""
    n = max(1, int(round(x.shape[0] * times)))
    reps = (n + x.shape[0] - 1) // x.shape[0]
    return x.repeat(reps, 1, 1)[:n].contiguous()


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

class PhraseData:
    def __init__(self, vocab, seed, n_phrases=2000, phrase_len=8):
        g = torch.Generator().manual_seed(seed)
        self.phrases = torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)
        self.phrase_len = phrase_len

    def batch(self, seed, n_seq, seq_len):
        g = torch.Generator().manual_seed(seed)
        n = (seq_len + 1 + self.phrase_len - 1) // self.phrase_len + 1
        idx = torch.randint(0, len(self.phrases), (n_seq, n), generator=g)
        off = torch.randint(0, self.phrase_len, (n_seq,), generator=g)
        rows = self.phrases[idx].reshape(n_seq, -1)
        toks = torch.stack([rows[i, off[i]: off[i] + seq_len + 1] for i in range(n_seq)])
        return toks[:, :-1].contiguous(), toks[:, 1:].contiguous()


def recompute_amount(args, step, stage):
    if args.seq_sigma <= 0:
        return 0.0
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 101 + stage * 7)
    w = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
    return min(4.0, max(0.25, w))


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
    global PAR
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 4:
        raise SystemExit("this job is laid out for 4 ranks (TP2 x PP2)")
    PAR = par = Par(rank)
    slow = rank == args.slow_rank
    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    pipe = PipeLink(par, link, args.link_factor)

    n_layers = args.layers
    if args.big_rank >= 0 and args.big_rank // 2 == par.stage:
        n_layers = max(1, int(round(args.layers * args.big)))

    # both TP ranks of a stage: the same replicated weights, their own shards
    torch.manual_seed(args.seed * 10 + par.stage)
    model = Stage(args, par.stage, n_layers)
    with torch.no_grad():
        g = torch.Generator().manual_seed(args.seed * 100 + rank)
        for b in model.blocks:
            for lin in (b.qkv, b.fc1):
                lin.weight.normal_(0.0, 0.02, generator=g)
    shard, rep = model.sharded_and_replicated()
    params = shard + rep
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    data = PhraseData(args.vocab, args.seed)

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    log_dir = tempfile.mkdtemp(prefix=f"tppp_events_r{rank}_")
    event_path = os.path.join(log_dir, "events.jsonl")

    if rank == 0:
        print(f"[tp-pp-grid] TP2 x PP2 layers/stage={args.layers} (stage of rank {args.big_rank} x{args.big}) "
              f"dim={args.dim} heads={args.heads} ffn={args.ffn} vocab={args.vocab} seq={args.seq_len} "
              f"mb={args.mb_size}x{args.micro_batches} shard={sum(q.numel() for q in shard)} "
              f"replicated={sum(q.numel() for q in rep)}", flush=True)

    act_shape = (args.mb_size, args.seq_len, args.dim)
    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    M = args.micro_batches
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                par.comm_secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    mbs = [data.batch(args.seed * 7919 + step * 97 + m, args.mb_size, args.seq_len)
                           for m in range(M)]
                recompute = recompute_amount(args, step, par.stage)

                opt.zero_grad(set_to_none=False)
                inputs, outputs, extras = [], [], []
                losses = []
                # ---- all forwards
                for m in range(M):
                    with record_function("forward_step"):
                        tokens, targets = mbs[m]
                        if par.stage == 0:
                            x = model.embed(tokens)
                        else:
                            x = pipe.recv_gather(act_shape, tag=100 + m).requires_grad_(True)
                        inputs.append(x)
                        y = model.layers(x)
                        ex = []                      # the --factor copies' graphs
                        if extra > 0:                # a slower device: the same work F - 1 more times
                            ex.append(local_layers(model, repeat_rows(x.detach(), extra)))
                        extras.append(ex)
                        if par.stage == 0:
                            pipe.send_half(y, tag=100 + m)
                            outputs.append(y)
                        else:
                            loss = model.loss(y, targets) / M
                            outputs.append(loss)
                            losses.append(loss.detach())

                # ---- all backwards (same order)
                for m in range(M):
                    with record_function("backward_step"):
                        if recompute > 0:            # activation recomputation, per stage
                            with record_function("recompute"), torch.no_grad():
                                model.layers(repeat_rows(inputs[m].detach(), recompute))
                        if par.stage == 1:
                            outputs[m].backward()
                            pipe.send_half(inputs[m].grad, tag=200 + m)
                        else:
                            gy = pipe.recv_gather(act_shape, tag=200 + m)
                            outputs[m].backward(gy)
                        for ye in extras[m]:         # the slower device's backward copies
                            torch.autograd.grad(ye, [q for q in shard if q.requires_grad],
                                                grad_outputs=torch.ones_like(ye), allow_unused=True)
                        extras[m] = None
                pipe.wait_sends()

                with record_function("optimizer"):
                    with record_function("tp_grad_allreduce"):
                        flat = torch.cat([q.grad.reshape(-1) for q in rep])
                        par.timed(dist.all_reduce, flat, group=par.tp_group)
                        flat /= 2
                        o = 0
                        for q in rep:
                            q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                            o += q.numel()
                    with record_function("grad_norm"):
                        nt = torch.stack([q.grad.pow(2).sum() for q in shard]).sum().reshape(1)
                        if par.tp_rank == 0:
                            nt += flat.pow(2).sum()
                        par.timed(dist.all_reduce, nt)
                        gnorm = math.sqrt(nt.item())
                        scale = min(1.0, 1.0 / (gnorm + 1e-6))
                        if scale < 1.0:
                            for q in params:
                                q.grad.mul_(scale)
                    opt.step()

                loss_val = float("nan")
                if par.stage == 1:
                    with record_function("loss_allreduce"):
                        lt = torch.stack(losses).sum().reshape(1)
                        par.timed(dist.all_reduce, lt, group=par.tp_group)
                        loss_val = lt.item() / 2

                eval_val = None
                if args.eval_every > 0 and (step + 1) % args.eval_every == 0:
                    with record_function("evaluate"), torch.no_grad():
                        tot = torch.zeros(1)
                        for e in range(args.eval_mbs):
                            with record_function("forward_step"):
                                tokens, targets = data.batch(10_000_019 + args.seed * 31 + e,
                                                             args.mb_size, args.seq_len)
                                if par.stage == 0:
                                    pipe.send_half(model.layers(model.embed(tokens)), tag=300 + e)
                                else:
                                    x = pipe.recv_gather(act_shape, tag=300 + e)
                                    tot += model.loss(model.layers(x), targets)
                        pipe.wait_sends()
                        if par.stage == 1:
                            par.timed(dist.all_reduce, tot, group=par.tp_group)
                            eval_val = tot.item() / (2 * args.eval_mbs)

                with record_function("write_metrics"):
                    if slow and args.writer_sleep_ms > 0:
                        time.sleep(args.writer_sleep_ms / 1000.0)
                    with open(event_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "rank": rank, "stage": par.stage,
                                             "loss": loss_val, "eval_loss": eval_val, "grad_norm": gnorm,
                                             "recompute": recompute, "wall": time.time()}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - par.comm_secs)
                if rank == 2:
                    ev = f" eval {eval_val:.4f}" if eval_val is not None else ""
                    print(f"step {step:3d} loss {loss_val:.4f}{ev} |g| {gnorm:.3f} "
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
        print("median busy ms (outside p2p, all_gathers, all_reduces) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    shutil.rmtree(log_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
