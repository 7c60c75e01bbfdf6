"""A small transformer LM with 4-way tensor parallelism and hand-written Megatron-style sequence parallelism.

(calibration table at the end of this docstring)

What it is
----------
A pre-norm causal GPT trained on 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``), written by hand the way Megatron-LM does tensor + sequence
parallelism, without DTensor or Megatron: activations are kept sequence-first, (seq, batch,
dim), and the residual stream between the blocks is *sharded along the sequence*: rank r holds
positions [r * S/4, (r+1) * S/4) of every sequence of the batch.

Every block (``--layers`` of them):

* attention: LayerNorm (replicated) on the rank's shard -> ``SeqGather`` (forward
  ``dist.all_gather_into_tensor`` of the 4 shards along the sequence; backward
  ``dist.reduce_scatter_tensor`` of the gradient) -> column-parallel QKV (the rank's
  ``--heads`` / 4 heads) -> causal attention of those heads over the whole sequence ->
  row-parallel output projection (partial sums) -> ``SeqReduceScatter`` (forward
  ``dist.reduce_scatter_tensor``, summing the partial outputs and handing each rank its
  sequence shard; backward ``dist.all_gather_into_tensor`` of the gradient) -> residual;
* MLP: the same with LayerNorm -> gather -> column-parallel fc1 (the rank's quarter of
  ``--ffn``) -> GELU -> row-parallel fc2 -> reduce-scatter -> residual.

Embedding (tied with the LM head), the LayerNorms and the final norm are replicated (the
same initial weights on every rank from one seed); the rank embeds its own sequence shard
and computes the LM-head loss of its own tokens. After ``loss.backward()`` the gradients
of the replicated parameters (LayerNorms, final norm, embedding, augmentation MLP) are
all-reduced (summed) as one flat buffer; the tensor-parallel shards' gradients are already
complete (the reduce-scatter / all-gather in backward sum them over the sequence). Then
grad-norm clipping (the TP shards' squared norm all-reduced, 1 float) and AdamW. The loss is
all-reduced (2 floats) for logging. Every ``--eval-every`` steps an evaluation forward
(no grad) on a held-out batch and its loss all-reduced, in ``evaluate``.

Local "augmentation" rows: every rank also trains a small replicated MLP head on
``--aug-rows`` extra token rows of its own (an auxiliary denoising objective on randomly
corrupted tokens), outside the tensor-parallel region: embed -> MLP (dim -> 4 dim -> dim)
-> tied LM head -> cross entropy, added to the loss.

Neighbour consistency (``--aux-pair A,B``, or implied by the link flags): once per step,
after the forward, rank A sends its sequence shard of the final hidden states
((S/4, batch, dim) floats) to rank B by blocking ``dist.send`` / ``dist.recv``; B adds
0.01 x MSE(its own final shard, A's shard detached) to its loss. Only A -> B, one message
a step; without ``--aux-pair`` and without the link flags there is no point-to-point traffic.

Data: a synthetic byte corpus (repeated random "phrases") made once from the seed on every
rank; each step ``load_batch`` reads the step's raw byte windows (starts from (seed, step),
the same on every rank) and ``tokenize`` maps each rank's bytes to token ids (a byte-pair
lookup), rank r keeping its sequence shard's tokens and targets.

Communication per step (defaults: 4 layers, seq 256, batch 4, dim 128): per layer 2
all_gather_into_tensor + 2 reduce_scatter_tensor in forward (each 256 x 4 x 128 floats
gathered, 128 KB a shard) and the same 4 mirrored in backward; 1 flat all_reduce of the
replicated gradients (~0.2 M floats), 1 float grad-norm all_reduce, 2 float loss all_reduce;
the optional A -> B send; an eval step adds 8 gathers / reduce-scatters and 1 all_reduce.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``tokenize``, ``forward``
[``embed``, ``layer_k_attn`` / ``layer_k_mlp`` with ``sp_all_gather`` and
``sp_reduce_scatter`` inside, ``lm_head_loss``, ``augmentation``, ``aux_exchange``],
``backward`` (``sp_all_gather`` / ``sp_reduce_scatter`` inside, from the autograd
Functions), ``grad_allreduce``, ``optimizer``, ``log_loss``, ``evaluate`` (some steps).

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time inside collectives
and the aux send/recv).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job: ``--layers`` (4), ``--dim`` (128), ``--heads`` (8), ``--ffn`` (512), ``--vocab``
(1024), ``--batch`` (4), ``--seq-len`` (256, split over the 4 ranks), ``--aug-rows`` (256),
``--lr`` (1e-3), ``--eval-every`` (4, 0 = never), ``--aux-pair A,B``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every local matmul/attention of the rank's TP shards
  (QKV, attention, output projection, fc1, fc2) is done F times: in forward, F - 1 extra
  passes of the block's local forward and its backward (``torch.autograd.grad`` on a
  detached copy of the gathered input, results discarded), done as one pass over the
  gathered input repeated F - 1 times along the batch (the fractional part: that fraction
  of the batch), which keeps the trace small; and the augmentation MLP's forward F times;
* ``--sleep-ms MS``: a slow host, ``time.sleep`` once per step at its start in ``sleep``;
* ``--data-sleep-ms MS``: ``load_batch`` sleeps MS each step (slow storage);
* ``--tok-sleep-ms MS`` (family fault): a slow per-step tokenizer, ``tokenize`` sleeps MS;
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (no ``--slow-rank``): turns on the
  neighbour-consistency exchange for the pair (A, B) and pads A's message X times
  (zero-padded, one message of X x (S/4) x batch x dim floats; B receives it all and keeps
  the head). This is the only point-to-point message of the job.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's number of augmentation rows this step is ``--aug-rows``
  times lognormal(0, S) (drawn from (seed, rank, step), clamped to [1/4x, 4x]);
* ``--big-rank K --big X``: rank K's augmentation rows are X times the others', every step.

Calibration
-----------
2-core box shared with other helpers' jobs; 4 ranks, 10 steps (8 timed), defaults unless
said. Step medians of all ranks agree within ~1% (every block's collectives tie the ranks),
so one number; "busy" = median time outside the collectives and the aux send/recv, slow
rank vs the others. "base" = a healthy default run just before (its step median); the
healthy step moved between 330 and 500 ms from run to run with the box's load, and most of
a step is waiting inside the 32 small collectives (4 processes on 2 cores).

  setting (slow rank)                             base ms  step ms  change   busy slow / others ms
  healthy default                                    -     330-500     -       70-110
  healthy --dim 192 --heads 12 --ffn 768 --seq 192   -       527       -      137-165
  --factor 4 (r2), first version (fwd only, no grad) 497     544      +9%     117 / 98
  --factor 4 (r2)                                   497      573     +15%     175 / 92
  --factor 6 (r0)                                   446      598     +34%     228 / 81
  --aux-pair 1,3 --factor 8 (r3)                    446      772     +73%     404 / 96
  --dim 192 ... --factor 6 (r1)                     527      960     +82%     512 / 152
  --eval-every 2 --factor 7 (r2)                    446      885     +98%     373 / 108
  --sleep-ms 150 (r1)                               462      568     +23%     232 / 85
  --data-sleep-ms 150 (r3)                          462      483-519  +5-12%  228 / 78
  --tok-sleep-ms 150 (r2)                           462      466      +1%     219 / 78
  --hog (r0)                                        497      474    (none)     82 / 81
  --hog (r0)                                        462      423    (none)     76 / 70
  link 1->2 x512 (64 MB messages)                   497      436    (none)     r1 81 / 85
  link 1->2 x2048 (256 MB)                          497      737     +48%     r1 116 / 115
  link 1->2 x2048 (256 MB)                          462      390    (quiet)    r1 71 / 72
  link 1->2 x2048 (256 MB)                          330      442     +34%     r1 77 / 75
  link 1->2 x4096 (512 MB)                          330      485     +47%     r1 73 / 75
  --big-rank 3 --big 4 --aug-rows 512                -       602       -      249 / 127
  --big-rank 3 --big 4 --aug-rows 512                -       386       -      123 / 86
  --seq-sigma 0.8 --aug-rows 512                     -       342       -       73-98 by rank

Reading: the busy time of the slowed rank shows every compute or host fault clearly (a
150 ms sleep doubles or triples its busy time; ``--factor`` 6-8 adds 150-330 ms); the step
time of everyone moves less predictably, because much of a healthy step is the other ranks'
scheduling delay inside the collectives, which a slow rank partly hides (the others wait
for it instead of for the CPU). The ``--hog`` thread did not show on this box in two runs:
with 4 processes on 2 cores the neighbour thread's share of the cores is taken from all
ranks alike, so it is the weakest fault of the battery. A padded link costs nothing until
the message is hundreds of MB (loopback moves 64 MB quickly), then rank B and everyone in
the next collective wait for it. The augmentation rows are a small part of a step, so
``--big 4`` shows in the big rank's busy time (about 2x) more than in the step. Wall per
run: 11-21 s; traces ~10-11 MB a rank, ~13-14 MB with --shapes (3 layers) or on a
``--factor`` rank.
"""

import argparse
import math
import os
import statistics
import sys
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
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--aug-rows", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--aux-pair", default="")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--tok-sleep-ms", type=float, default=0.0)
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
    return a


# --------------------------------------------------------------------------
# communication: timed collectives and the SP autograd Functions
# --------------------------------------------------------------------------

class CommClock:
    secs = 0.0


def _timed(fn, *a):
    t0 = time.perf_counter()
    fn(*a)
    CommClock.secs += time.perf_counter() - t0


def gather_seq(x):
    world = dist.get_world_size()
    with record_function("sp_all_gather"):
        out = x.new_empty((x.shape[0] * world,) + tuple(x.shape[1:]))
        _timed(dist.all_gather_into_tensor, out, x.contiguous())
    return out


def reduce_scatter_seq(x):
    world = dist.get_world_size()
    with record_function("sp_reduce_scatter"):
        out = x.new_empty((x.shape[0] // world,) + tuple(x.shape[1:]))
        _timed(dist.reduce_scatter_tensor, out, x.contiguous())
    return out


class SeqGather(torch.autograd.Function):
    """sequence shard -> full sequence; backward: reduce-scatter of the gradient."""

    @staticmethod
    def forward(ctx, x):
        return gather_seq(x)

    @staticmethod
    def backward(ctx, g):
        return reduce_scatter_seq(g)


class SeqReduceScatter(torch.autograd.Function):
    """partial sums over the full sequence -> summed sequence shard; backward: all-gather."""

    @staticmethod
    def forward(ctx, x):
        return reduce_scatter_seq(x)

    @staticmethod
    def backward(ctx, g):
        return gather_seq(g)


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class TPBlock(nn.Module):
    def __init__(self, dim, heads, ffn, world, rank, idx):
        super().__init__()
        self.idx = idx
        self.h_loc = heads // world
        self.hd = dim // heads
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        # full weights made from the shared seed, each rank keeps its shard
        qkv = torch.randn(3, heads, self.hd, dim) * 0.02
        self.qkv = nn.Parameter(qkv[:, rank * self.h_loc:(rank + 1) * self.h_loc].reshape(-1, dim).clone())
        proj = torch.randn(dim, dim) * 0.02 / math.sqrt(2)
        self.proj = nn.Parameter(proj[:, rank * self.h_loc * self.hd:(rank + 1) * self.h_loc * self.hd].clone())
        f_loc = ffn // world
        fc1 = torch.randn(ffn, dim) * 0.02
        self.fc1 = nn.Parameter(fc1[rank * f_loc:(rank + 1) * f_loc].clone())
        self.b1 = nn.Parameter(torch.zeros(f_loc))
        fc2 = torch.randn(dim, ffn) * 0.02 / math.sqrt(2)
        self.fc2 = nn.Parameter(fc2[:, rank * f_loc:(rank + 1) * f_loc].clone())

    def attn_local(self, z):
        S, B, _ = z.shape
        qkv = (z @ self.qkv.t()).view(S, B, 3, self.h_loc, self.hd)
        q, k, v = (qkv[:, :, i].permute(1, 2, 0, 3) for i in range(3))       # (B, h, S, hd)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o = o.permute(2, 0, 1, 3).reshape(S, B, self.h_loc * self.hd)
        return o @ self.proj.t()

    def mlp_local(self, z):
        return F.gelu(z @ self.fc1.t() + self.b1) @ self.fc2.t()

    @staticmethod
    def _again(fn, z, extra):
        if extra <= 0:
            return
        # --factor: the same local forward + its backward again on a detached copy, discarded
        def once(zz):
            with torch.enable_grad():
                zz = zz.detach().requires_grad_()
                torch.autograd.grad(fn(zz).sum(), zz)
        cols = int(round(z.shape[1] * (extra - int(extra))))
        once(torch.cat([z] * int(extra) + ([z[:, :cols]] if cols > 0 else []), 1))   # one wide pass

    def forward(self, x, extra=0.0):
        k = self.idx
        with record_function(f"layer_{k}_attn"):
            z = SeqGather.apply(self.ln1(x))
            y = self.attn_local(z)
            self._again(self.attn_local, z, extra)
            x = x + SeqReduceScatter.apply(y)
        with record_function(f"layer_{k}_mlp"):
            z = SeqGather.apply(self.ln2(x))
            y = self.mlp_local(z)
            self._again(self.mlp_local, z, extra)
            x = x + SeqReduceScatter.apply(y)
        return x


class SPGPT(nn.Module):
    def __init__(self, a, world, rank):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.pos = nn.Parameter(torch.randn(a.seq_len, 1, a.dim) * 0.01)
        self.blocks = nn.ModuleList(TPBlock(a.dim, a.heads, a.ffn, world, rank, i) for i in range(a.layers))
        self.norm = nn.LayerNorm(a.dim)
        self.aug = nn.Sequential(nn.Linear(a.dim, 4 * a.dim), nn.GELU(), nn.Linear(4 * a.dim, a.dim))
        self.s_loc = a.seq_len // world
        self.rank = rank

    def tp_params(self):
        return [q for b in self.blocks for q in (b.qkv, b.proj, b.fc1, b.b1, b.fc2)]

    def replicated_params(self):
        tp = {id(q) for q in self.tp_params()}
        return [q for q in self.parameters() if id(q) not in tp]

    def hidden(self, tokens, extra=0.0):
        """tokens: (s_loc, B) of this rank's shard -> final normed hidden shard (s_loc, B, dim)."""
        with record_function("embed"):
            r0 = self.rank * self.s_loc
            x = self.embed(tokens) + self.pos[r0:r0 + tokens.shape[0]]
        for blk in self.blocks:
            x = blk(x, extra)
        return self.norm(x)

    def lm_loss(self, h, targets):
        with record_function("lm_head_loss"):
            logits = h @ self.embed.weight.t()
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def aug_loss(self, noisy, clean, extra=0.0):
        with record_function("augmentation"):
            z = self.embed(noisy)
            for _ in range(int(extra)):
                with torch.no_grad():
                    self.aug(z)
            h = z + self.aug(z)
            logits = h @ self.embed.weight.t()
            return F.cross_entropy(logits, clean)


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_corpus(seed, n_bytes=1 << 20, phrase_len=12, n_phrases=2000):
    g = torch.Generator().manual_seed(seed)
    phrases = torch.randint(0, 256, (n_phrases, phrase_len), generator=g, dtype=torch.int64)
    idx = torch.randint(0, n_phrases, (n_bytes // phrase_len,), generator=g)
    return phrases[idx].reshape(-1)


def make_vocab_table(vocab, seed):
    """A fixed 'byte-pair' table: (prev byte, byte) -> token id."""
    g = torch.Generator().manual_seed(seed + 17)
    return torch.randint(0, vocab, (256, 256), generator=g)


def tokenize(raw, table):
    prev = torch.cat([raw[:, :1], raw[:, :-1]], 1)
    return table[prev, raw]


def aug_row_count(a, rank, step):
    n = float(a.aug_rows)
    if rank == a.big_rank:
        n *= a.big
    if a.seq_sigma > 0:
        g = torch.Generator().manual_seed(a.seed * 1_000_003 + rank * 10_007 + step)
        m = math.exp(a.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        n *= min(4.0, max(0.25, m))
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
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    if args.seq_len % world or args.heads % world or args.ffn % world or args.dim % args.heads:
        raise SystemExit("--seq-len, --heads, --ffn must split over the ranks, --dim over the heads")

    pair, pad = None, 1.0
    if args.link_src >= 0:
        pair, pad = (args.link_src, args.link_dst), max(1.0, args.link_factor)
    elif args.aux_pair:
        pair = tuple(int(v) for v in args.aux_pair.split(","))

    torch.manual_seed(args.seed)                 # the same full weights on every rank
    model = SPGPT(args, world, rank)
    tp_params, rep_params = model.tp_params(), model.replicated_params()
    params = tp_params + rep_params
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)

    corpus = make_corpus(args.seed)
    table = make_vocab_table(args.vocab, args.seed)
    S, B, s_loc = args.seq_len, args.batch, args.seq_len // world
    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    aux_buf = None
    if pair is not None and rank in pair:
        n = s_loc * B * args.dim
        aux_buf = torch.zeros(max(n, int(round(n * pad))))

    if rank == 0:
        n_tp = sum(q.numel() for q in tp_params)
        n_rep = sum(q.numel() for q in rep_params)
        print(f"[tp-seqpar] world={world} layers={args.layers} dim={args.dim} heads={args.heads} ffn={args.ffn} "
              f"vocab={args.vocab} batch={B} seq={S} (shard {s_loc}) tp_params/rank={n_tp} replicated={n_rep} "
              f"aux_pair={pair} pad={pad}", flush=True)

    def get_batch(step, held_out=False):
        with record_function("load_batch"):
            if slow and args.data_sleep_ms > 0 and not held_out:
                time.sleep(args.data_sleep_ms / 1000.0)
            g = torch.Generator().manual_seed(args.seed * 7919 + step + (1 << 20 if held_out else 0))
            starts = torch.randint(0, corpus.numel() - S - 2, (B,), generator=g)
            raw = torch.stack([corpus[s:s + S + 1] for s in starts.tolist()])      # (B, S+1) bytes
        with record_function("tokenize"):
            if slow and args.tok_sleep_ms > 0 and not held_out:
                time.sleep(args.tok_sleep_ms / 1000.0)
            ids = tokenize(raw, table)
            sl = slice(rank * s_loc, (rank + 1) * s_loc)
            tokens = ids[:, :-1][:, sl].t().contiguous()            # (s_loc, B), sequence-first
            targets = ids[:, 1:][:, sl].t().contiguous()
        return tokens, targets

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
                CommClock.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)
                tokens, targets = get_batch(step)
                n_aug = aug_row_count(args, rank, step)
                ga = torch.Generator().manual_seed(args.seed * 31 + rank * 7 + step)
                clean = torch.randint(0, args.vocab, (n_aug,), generator=ga)
                noisy = torch.where(torch.rand(n_aug, generator=ga) < 0.15,
                                    torch.randint(0, args.vocab, (n_aug,), generator=ga), clean)

                with record_function("forward"):
                    h = model.hidden(tokens, extra)
                    lm = model.lm_loss(h, targets)
                    loss = (lm + 0.1 * model.aug_loss(noisy, clean, extra)) / world
                    if aux_buf is not None:
                        with record_function("aux_exchange"):
                            n = h.numel()
                            t1 = time.perf_counter()
                            if rank == pair[0]:
                                aux_buf[:n].copy_(h.detach().reshape(-1))
                                dist.send(aux_buf, pair[1])
                            else:
                                dist.recv(aux_buf, pair[0])
                                peer = aux_buf[:n].view_as(h).clone()
                                loss = loss + 0.01 * F.mse_loss(h, peer) / world
                            CommClock.secs += time.perf_counter() - t1
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()
                with record_function("grad_allreduce"):
                    flat = torch.cat([q.grad.reshape(-1) for q in rep_params])
                    _timed(dist.all_reduce, flat)
                    o = 0
                    for q in rep_params:
                        q.grad.copy_(flat[o:o + q.numel()].view_as(q))
                        o += q.numel()
                with record_function("optimizer"):
                    sq = torch.stack([q.grad.pow(2).sum() for q in tp_params]).sum().reshape(1)
                    _timed(dist.all_reduce, sq)
                    sq += sum(q.grad.pow(2).sum() for q in rep_params)
                    gnorm = sq.sqrt().item()
                    if gnorm > 1.0:
                        for q in params:
                            q.grad.mul_(1.0 / gnorm)
                    opt.step()
                with record_function("log_loss"):
                    m = torch.tensor([lm.item() * tokens.numel(), float(tokens.numel())])
                    _timed(dist.all_reduce, m)
                ev = None
                if args.eval_every > 0 and (step + 1) % args.eval_every == 0:
                    with record_function("evaluate"), torch.no_grad():
                        et, eg = get_batch(step, held_out=True)
                        el = model.lm_loss(model.hidden(et), eg)
                        e = torch.tensor([el.item()])
                        _timed(dist.all_reduce, e)
                        ev = e.item() / world

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - CommClock.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {m[0].item() / m[1].item():.4f} |g| {gnorm:.3f} aug {n_aug} "
                          + (f"eval {ev:.4f} " if ev is not None else "")
                          + f"t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside collectives and the aux send/recv) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
