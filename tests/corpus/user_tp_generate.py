"""Serving a small decoder-only LM with hand-written tensor parallelism (Megatron style) and a KV cache.

What it is
----------
An inference job: a small GPT-style decoder (token + learned position embeddings, ``--layers``
pre-LayerNorm blocks of attention and a GELU MLP with 4x width, final LayerNorm, untied LM head,
no biases) served with tensor parallelism written by hand, Megatron style, and autoregressive
generation with a per-layer KV cache.  Before serving, the model is trained for ``--train-steps``
(default 40, untraced) on a learnable synthetic "bigram" language (``next = perm[cur]`` with
probability 0.8, else a uniform token) with the same TP layout plus data parallelism (a flat
gradient all-reduce over the DP group) and Megatron's vocab-parallel cross entropy; the loss
goes from ~6.3 (ln 512) to ~2.4 in 40 steps.  While serving, rank 0 prints per batch the share of
generated tokens that follow the rule ("rule-acc", ~0.85 after training, ~1/vocab at random init)
and whether the TP ranks of each replica generated the same tokens ("tp-agree").

Parallelism
-----------
4 processes, CPU, gloo.  ``--tp T`` (default 2): TP groups are consecutive ranks ([0,1],[2,3];
``--tp 4``: one group [0..3]); the world/T DP replicas are the TP groups.  Inside a TP group:

* the attention qkv projection is column-parallel (each rank holds whole heads, heads/T of
  them, and their slice of the KV cache), the output projection row-parallel;
* the MLP fc1 is column-parallel, fc2 row-parallel;
* each row-parallel linear ends in an all-reduce over the TP group (``dist.all_reduce``):
  2 all-reduces per layer per forward;
* the LM head is vocab-parallel (column-parallel over the vocabulary) and the logits of the
  last position are all-gathered (``dist.all_gather``) before sampling;
* every TP rank of a replica samples the same token: the requests and the sampler are seeded by
  (seed, replica, batch), so no broadcast is needed (checked by "tp-agree").

Serving loop: one profiler step is one request batch of one replica: ``data`` (draw ``--batch``
prompts of ``--prompt-len`` tokens), ``prefill`` (one forward over all prompts, filling the KV
cache), ``decode`` (``--new-tokens`` tokens: ``sample`` then ``decode_step``, a one-token forward
with the KV cache, for all but the last token), then ``report``: an ``all_gather_object`` over
all ranks of (replica, batch, prompt length, tokens, rule-acc, checksum), which is where the
replicas meet once per batch.

Communication per batch and rank, defaults (2 layers, tp 2, 16 new tokens): 2 x 2 = 4 gloo
all_reduce per forward x 16 forwards (1 prefill + 15 decode steps) = 64 TP all-reduces, 16 TP
all-gathers of the logits (1 x 512/T floats x batch), then the world all_gather_object (two
all-gathers on the default group: sizes, then pickled payloads).  The TP collectives are tiny
(batch x dim floats in decode), so decode is latency bound; the prefill is the compute-heavy part.

Profiling
---------
``torch.profiler`` with CPU activity, ``schedule(wait=1, warmup=1, active=steps-2)``,
``prof.step()`` once per request batch, ``record_shapes`` only with ``--shapes``.  User ranges:
``data``, ``prefill``, ``decode``, ``sample``, ``decode_step``, ``report``, plus ``sleep`` /
``detokenize`` when those faults are on.  Each rank writes one file ``trace_rank{R}.json`` into
``--out`` (about 9 MB a rank with the defaults, about 14 MB with ``--shapes``; a trace grows
with layers x new tokens).  Rank 0 prints the median batch time of every rank at the end
(``time.perf_counter`` around each batch, over the traced batches).

Flags
-----
Common:
  --out DIR              (required) where the chrome traces go
  --steps N              request batches (default 10; 8 are traced)
  --seed S               base seed (weights, language, requests, sampling)
  --shapes               record input shapes in the profiler
Model / serving shape (healthy variants):
  --tp T                 tensor-parallel size (default 2; 4 = one TP group of all ranks)
  --layers L --dim D --heads H --vocab V     (defaults 2, 384, 8, 512)
  --batch B              prompts per request batch per replica (default 8)
  --prompt-len P         prompt tokens (default 96)
  --new-tokens N         tokens generated per request (default 16)
  --temperature T        sampling temperature (default 0.8; 0 = greedy), --top-k K (default 50)
  --train-steps N        warm-up training before serving (default 40; 0 = random init),
                         --train-lr (default 3e-3)
Faults (only on --slow-rank R, default -1 = none):
  --factor F             slower device: every TP linear of the rank's forward (qkv, proj, fc1,
                         fc2, LM head; prefill and decode) runs F-1 extra copies of its matmul
                         (the fraction part on that share of the rows); serving only
  --sleep-ms MS          slow host: time.sleep(MS) inside record_function("sleep") before each
                         request batch
  --hog                  busy neighbour: a thread doing 384x384 matmuls during the whole
                         serving loop; stopped and joined before the trace is written
  --token-sleep-ms MS    (family fault) slow host per token: time.sleep(MS) inside
                         record_function("detokenize") after each sampled token
Imbalance (no fault):
  --seq-sigma S          each replica's prompt length per batch = P * lognormal(0, S), seeded by
                         (seed, replica, batch), clipped to [8, 4P]
  --gen-sigma S          each replica's new tokens per batch = N * lognormal(0, S), clipped to
                         [2, 4N]
  --big-replica K --big X  replica K's batches are X times larger (round(B*X) prompts)
  --big-rank K --big X   the same for the replica that holds rank K (a TP group must share
                         its batch)

    OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES="" python -m torch.distributed.run --standalone \\
        --nproc_per_node=4 tests/corpus/user_tp_generate.py --out DIR --slow-rank 1 --token-sleep-ms 10

Measurements
------------
Median batch time (ms) over the 8 traced batches, 4 ranks on the 2-core box, while another
helper ran its own 4-process jobs (load average 7-26, rising during the session).  Each fault /
imbalance run was paired with the healthy run just before it.  All 4 ranks always show the same
median: TP peers meet in every all-reduce and the replicas meet in the per-batch
``all_gather_object``, so the time lost on one rank is waited out by the others (the TP peer
in the TP all-reduces / all-gathers, the other replica in ``report``).  Values are r0..r3.

  setting (defaults otherwise)            load  healthy before        run                   change
  --slow-rank 1 --factor 2                 10   349/337/339/339       401/399/399/396        +15%
  --slow-rank 1 --factor 3                  7   294/295/293/299       399/421/406/400        +35%
  --slow-rank 2 --factor 2.5               10   389/369/376/393       411/410/418/414        +8%
  --slow-rank 2 --factor 3                 15   613/607/611/615       625/617/617/623        +2%
  --slow-rank 1 --factor 4                 17   723/716/726/714       774/775/786/796        +8%
  --slow-rank 3 --factor 4                 20   729/739/730/732       684/677/686/680        -6%
  --slow-rank 2 --factor 6                 15   437/440/439/441       570/578/585/575        +32%
  --slow-rank 1 --factor 8                 19   436/436/418/441       1044/1046/1050/1051    +140%
  --slow-rank 3 --sleep-ms 50              10   368/371/372/365       431/424/435/437        +17%
  --slow-rank 3 --sleep-ms 100             15   393/400/391/381       513/510/508/513        +30%
  --slow-rank 0 --token-sleep-ms 5         10   474/470/475/470       421/419/423/419        -11% (noise)
  --slow-rank 0 --token-sleep-ms 10        11   596/596/594/600       525/529/529/530        -12% (noise)
  --slow-rank 0 --token-sleep-ms 10 (2)    15   (after) 437/434/436/434  610/609/612/604      +40%
  --slow-rank 2 --hog                       8   336/337/335/332       748/743/742/747        +120%
  --seq-sigma 0.6                          14   433/424/420/425       514/522/536/518        +22%
  --gen-sigma 0.6                          12   384/379/388/376       549/551/548/540        +43%
  --big-replica 1 --big 2                  13   454/442/447/451       909/908/899/904        +100%
  --tp 4 (healthy)                         12   522/525/524/519 and 529/523/523/523, 755/750/748/752 (load 21)
  --tp 4 --slow-rank 3 --factor 3          14   522/525/524/519       558/555/559/549        +7%
  --tp 4 --slow-rank 2 --factor 4          26   755/750/748/752       711/720/713/707        -5%
  --tp 4 --slow-rank 1 --token-sleep-ms 10 14   529/523/523/523       687/685/690/690        +30%
  --temperature 0 --shapes (healthy)       14   598/598/596/599   (14 MB a rank)
  --layers 3 --dim 256 --heads 4 (healthy) 14   547/546/553/548   (12 MB a rank)
  --batch 4 --new-tokens 24 (healthy)      20   582/586/588/583   (13 MB a rank)
  healthy, all 13 runs                   7-20   294 .. 729 (median ~440)

Reading: a batch is ~64 tiny TP all-reduces plus one compute-heavy prefill, so on this
oversubscribed box it is mostly collective latency and scheduling; extra forward compute on one
rank is largely absorbed (its peers block in gloo and give the cores away), and --factor <= 4
stayed within the noise once the load passed ~15.  Reliable (>= 10%) here: --factor >= 6,
--sleep-ms 100, --token-sleep-ms 10 (in the trace ~178 ms/batch of ``detokenize`` on the slow
rank; its TP peer waits in the decode all-reduces, ~290 ms/batch of gloo:all_reduce vs ~200,
and the other replica waits in ``report``, ~230 ms vs ~35), --hog.  The token-sleep pair
measured first (-12%) was swamped by a load swing; the second pair (+40%) and the trace agree.
--sleep-ms 50 (+17%, one pair) and --factor 3 (+35% / +2%) are borderline.
Wall time per run (torchrun start, 40 training steps, 10 batches, export): 16-54 s with the
load above; the training takes ~10 s of it.
"""

import argparse
import math
import os
import statistics
import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="where the per-rank chrome traces go")
    p.add_argument("--steps", type=int, default=10, help="request batches served (the first 2 are not traced)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="record input shapes in the profiler")
    # model / serving shape
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel size (consecutive ranks); world/tp replicas")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=8, help="prompts per request batch per replica")
    p.add_argument("--prompt-len", type=int, default=96, help="prompt tokens (the median with --seq-sigma)")
    p.add_argument("--new-tokens", type=int, default=16, help="tokens generated per prompt (median with --gen-sigma)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature; 0 = greedy")
    p.add_argument("--top-k", type=int, default=50, help="sample among the k most likely tokens (0 = all)")
    p.add_argument("--train-steps", type=int, default=40, help="quick TPxDP training before serving (0 = random init)")
    p.add_argument("--train-lr", type=float, default=3e-3)
    # faults (only on --slow-rank)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0, help="slow device: forward does F times its matmuls")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="slow host: sleep before each request batch")
    p.add_argument("--token-sleep-ms", type=float, default=0.0, help="slow host: sleep on every decode token")
    p.add_argument("--hog", action="store_true", help="busy neighbour: a matmul thread during the whole run")
    # imbalance (no fault)
    p.add_argument("--seq-sigma", type=float, default=0.0, help="replica prompt length ~ lognormal(0, S) per batch")
    p.add_argument("--gen-sigma", type=float, default=0.0, help="replica new tokens ~ lognormal(0, S) per batch")
    p.add_argument("--big-replica", type=int, default=-1, help="replica K gets --big times larger batches")
    p.add_argument("--big-rank", type=int, default=-1, help="the replica holding rank K gets --big times larger batches")
    p.add_argument("--big", type=float, default=1.0)
    return p.parse_args()


# --------------------------------------------------------------------------
# tensor-parallel building blocks
# --------------------------------------------------------------------------

class _CopyToTP(torch.autograd.Function):
    """Identity forward, all-reduce backward (input of a column-parallel linear)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """All-reduce forward, identity backward (output of a row-parallel linear)."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous().clone() if torch.is_grad_enabled() else x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def gather_last_dim(x, tp):
    """All-gather the vocab shards of the logits (inference only)."""
    if tp.size == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(tp.size)]
    dist.all_gather(parts, x.contiguous(), group=tp.group)
    return torch.cat(parts, dim=-1)


class SlowDevice:
    """The --factor fault: (F-1) extra copies of a linear's matmul, the fraction on that share of rows."""

    def __init__(self, factor):
        extra = max(0.0, factor - 1.0)
        self.whole = int(extra)
        self.frac = extra - self.whole

    def __bool__(self):
        return self.whole > 0 or self.frac > 0

    @torch.no_grad()
    def __call__(self, x, weight):
        rows = x.reshape(-1, x.shape[-1])
        for _ in range(self.whole):
            F.linear(rows, weight)
        n = int(round(rows.shape[0] * self.frac))
        if n > 0:
            F.linear(rows[:n], weight)


class ColumnParallelLinear(nn.Module):
    """Output features split over the TP group (no bias, llama style)."""

    def __init__(self, in_f, out_f, tp, slow):
        super().__init__()
        self.tp, self.slow = tp, slow
        full = nn.init.normal_(torch.empty(out_f, in_f), std=0.02)   # same on every rank (shared seed)
        self.weight = nn.Parameter(full.chunk(tp.size, dim=0)[tp.rank].clone())

    def forward(self, x):
        if self.tp.size > 1 and torch.is_grad_enabled():
            x = _CopyToTP.apply(x, self.tp.group)
        if self.slow:
            self.slow(x, self.weight)
        return F.linear(x, self.weight)


class RowParallelLinear(nn.Module):
    """Input features split over the TP group; the partial outputs are all-reduced."""

    def __init__(self, in_f, out_f, tp, slow, std=0.02):
        super().__init__()
        self.tp, self.slow = tp, slow
        full = nn.init.normal_(torch.empty(out_f, in_f), std=std)
        self.weight = nn.Parameter(full.chunk(tp.size, dim=1)[tp.rank].clone())

    def forward(self, x):
        if self.slow:
            self.slow(x, self.weight)
        y = F.linear(x, self.weight)
        if self.tp.size > 1:
            if torch.is_grad_enabled():
                y = _ReduceFromTP.apply(y, self.tp.group)
            else:
                dist.all_reduce(y, group=self.tp.group)   # serving: no autograd, reduce in place
        return y


# --------------------------------------------------------------------------
# model (hidden states are kept flat, (batch * tokens, dim), as serving engines do)
# --------------------------------------------------------------------------

class KVCache:
    """Per-layer preallocated key/value buffers of this rank's heads."""

    def __init__(self, layers, batch, heads, max_len, head_dim):
        self.k = [torch.zeros(batch, heads, max_len, head_dim) for _ in range(layers)]
        self.v = [torch.zeros(batch, heads, max_len, head_dim) for _ in range(layers)]
        self.len = 0


class Attention(nn.Module):
    def __init__(self, dim, heads, tp, slow, layers):
        super().__init__()
        self.local_heads = heads // tp.size
        self.hd = dim // heads
        # output rows ordered (head, q/k/v, hd): a contiguous shard holds whole heads
        self.qkv = ColumnParallelLinear(dim, 3 * dim, tp, slow)
        self.proj = RowParallelLinear(dim, dim, tp, slow, std=0.02 / math.sqrt(2 * layers))

    def forward(self, x, b, t, cache=None, layer=0):
        # (b*t, heads*3*hd) -> (3, b, heads, t, hd)
        q, k, v = self.qkv(x).view(b, t, self.local_heads, 3, self.hd).permute(3, 0, 2, 1, 4)
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            start = cache.len
            cache.k[layer].narrow(2, start, t).copy_(k)
            cache.v[layer].narrow(2, start, t).copy_(v)
            keys = cache.k[layer].narrow(2, 0, start + t)
            vals = cache.v[layer].narrow(2, 0, start + t)
            # prefill (start == 0): causal over the prompt; decode (t == 1): attend to everything so far
            y = F.scaled_dot_product_attention(q, keys, vals, is_causal=(start == 0 and t > 1))
        return self.proj(y.transpose(1, 2).reshape(b * t, -1))


class MLP(nn.Module):
    def __init__(self, dim, tp, slow, layers):
        super().__init__()
        self.fc1 = ColumnParallelLinear(dim, 4 * dim, tp, slow)
        self.fc2 = RowParallelLinear(4 * dim, dim, tp, slow, std=0.02 / math.sqrt(2 * layers))

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, dim, heads, tp, slow, layers):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, tp, slow, layers)
        self.mlp = MLP(dim, tp, slow, layers)

    def forward(self, x, b, t, cache=None, layer=0):
        x = x + self.attn(self.ln1(x), b, t, cache, layer)
        return x + self.mlp(self.ln2(x))


class TPDecoder(nn.Module):
    def __init__(self, a, tp, slow, max_len):
        super().__init__()
        self.tp = tp
        self.tok = nn.Embedding(a.vocab, a.dim)
        self.pos = nn.Embedding(max_len, a.dim)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.01)
        self.blocks = nn.ModuleList(Block(a.dim, a.heads, tp, slow, a.layers) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.dim)
        self.head = ColumnParallelLinear(a.dim, a.vocab, tp, slow)   # vocab-parallel LM head

    def hidden(self, idx, cache=None):
        """idx (b, t) -> final hidden states (b*t, dim); appends to the KV cache when given."""
        b, t = idx.shape
        start = 0 if cache is None else cache.len
        x = (self.tok(idx) + self.pos(torch.arange(start, start + t))).view(b * t, -1)
        for i, blk in enumerate(self.blocks):
            x = blk(x, b, t, cache, i)
        if cache is not None:
            cache.len += t
        return self.ln_f(x)

    def local_logits(self, idx):
        """Training: this rank's vocab shard of the logits (vocab-parallel cross entropy below)."""
        return self.head(self.hidden(idx))


def vocab_parallel_cross_entropy(local_logits, target, tp):
    """Megatron's vocab-parallel cross entropy: max, sum-exp and target logit all-reduced over TP."""
    vocab_per = local_logits.shape[-1]
    lo = tp.rank * vocab_per
    logits = local_logits.float()
    with torch.no_grad():
        gmax = logits.max(dim=-1, keepdim=True).values
        if tp.size > 1:
            dist.all_reduce(gmax, op=dist.ReduceOp.MAX, group=tp.group)
    shifted = logits - gmax
    sum_exp = shifted.exp().sum(-1, keepdim=True)
    in_shard = (target >= lo) & (target < lo + vocab_per)
    local_t = (target - lo).clamp(0, vocab_per - 1)
    tgt_logit = shifted.gather(-1, local_t.unsqueeze(-1)) * in_shard.unsqueeze(-1)
    if tp.size > 1:
        both = _AllReduceSum.apply(torch.cat([sum_exp, tgt_logit], dim=-1), tp.group)
        sum_exp, tgt_logit = both[..., :1], both[..., 1:]
    return (sum_exp.log() - tgt_logit).mean()


class _AllReduceSum(torch.autograd.Function):
    """All-reduce forward, identity backward (each rank keeps the gradient of its own shard's terms)."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


# --------------------------------------------------------------------------
# data: a noisy "bigram" language (learnable, so generation can be scored)
# --------------------------------------------------------------------------

class BigramLanguage:
    """next = perm[cur] with probability keep, else a uniform random token (fixed perm per seed)."""

    def __init__(self, vocab, seed, max_len, keep=0.8):
        g = torch.Generator().manual_seed(seed + 4242)
        self.vocab, self.keep = vocab, keep
        self.perm = torch.randperm(vocab, generator=g)
        # walk[j, v] = perm applied j times to v: lets a whole batch be drawn without a Python loop
        walk = [torch.arange(vocab)]
        for _ in range(max_len):
            walk.append(self.perm[walk[-1]])
        self.walk = torch.stack(walk)

    def sample(self, b, t, gen):
        fresh = torch.randint(0, self.vocab, (b, t), generator=gen)
        restart = torch.rand(b, t, generator=gen) >= self.keep
        restart[:, 0] = True
        pos = torch.arange(t).expand(b, t)
        last = torch.where(restart, pos, 0).cummax(dim=1).values   # position of the latest restart
        return self.walk[pos - last, fresh.gather(1, last)]

    def follows_rule(self, prev, nxt):
        return (self.perm[prev] == nxt).float()


# --------------------------------------------------------------------------
# faults
# --------------------------------------------------------------------------

def sample_next(logits, temperature, top_k, gen):
    """Greedy (temperature 0) or top-k sampling; the exponential-race trick instead of multinomial."""
    if temperature <= 0:
        return logits.argmax(-1, keepdim=True)
    scaled = logits / temperature
    if top_k > 0:
        vals, idx = scaled.topk(min(top_k, scaled.shape[-1]), dim=-1)
        race = torch.empty_like(vals).exponential_(generator=gen)
        return idx.gather(-1, (vals.softmax(-1) / race).argmax(-1, keepdim=True))
    race = torch.empty_like(scaled).exponential_(generator=gen)
    return (scaled.softmax(-1) / race).argmax(-1, keepdim=True)


def start_hog(stop):
    def run():
        a = torch.randn(384, 384)
        b = torch.randn(384, 384)
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=run, name="hog", daemon=False)
    th.start()
    return th


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def build_groups(world, tp_size, timeout):
    """Every rank creates every group in the same order (new_group's rule)."""
    tp_groups = [dist.new_group(list(range(s, s + tp_size)), timeout=timeout)
                 for s in range(0, world, tp_size)]
    dp_groups = [dist.new_group(list(range(o, world, tp_size)), timeout=timeout)
                 for o in range(tp_size)]
    rank = dist.get_rank()
    return tp_groups[rank // tp_size], dp_groups[rank % tp_size]


def train(model, a, tp, dp_group, dp_size, replica, lang, rank):
    """A quick TP x DP warm-up training so that the served model has learned the language."""
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=a.train_lr, weight_decay=0.0)
    t0 = time.perf_counter()
    for step in range(a.train_steps):
        gen = torch.Generator().manual_seed(a.seed * 7919 + replica * 104729 + step + 17)
        seq = lang.sample(8, 33, gen)
        x, y = seq[:, :-1], seq[:, 1:]
        loss = vocab_parallel_cross_entropy(model.local_logits(x), y.reshape(-1), tp)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        if dp_size > 1:
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat, group=dp_group)
            flat /= dp_size
            for p, g in zip(params, flat.split([p.numel() for p in params])):
                p.grad.copy_(g.view_as(p))
        opt.step()
        if rank == 0 and (step % 10 == 0 or step == a.train_steps - 1):
            print(f"train {step:3d} loss {loss.item():.3f} ({time.perf_counter() - t0:.1f} s)", flush=True)


def main():
    a = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    timeout = timedelta(seconds=180)
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % a.tp or a.heads % a.tp or a.vocab % a.tp or a.dim % a.heads:
        raise SystemExit(f"--tp {a.tp} must divide the world ({world}), --heads and --vocab; "
                         "--heads must divide --dim")
    tp_group, dp_group = build_groups(world, a.tp, timeout)
    tp = SimpleNamespace(group=tp_group, size=a.tp, rank=rank % a.tp)
    replica, n_replicas = rank // a.tp, world // a.tp
    slow = rank == a.slow_rank
    big_replica = a.big_replica if a.big_replica >= 0 else (a.big_rank // a.tp if a.big_rank >= 0 else -1)
    batch = max(1, round(a.batch * a.big)) if replica == big_replica else a.batch

    max_prompt = 4 * a.prompt_len
    max_new = 4 * a.new_tokens
    max_len = max_prompt + max_new
    torch.manual_seed(a.seed)
    lang = BigramLanguage(a.vocab, a.seed, max_len)
    model = TPDecoder(a, tp, None, max_len)
    n_params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"[tp-generate] world={world} tp={a.tp} replicas={n_replicas} layers={a.layers} "
              f"dim={a.dim} heads={a.heads} vocab={a.vocab} params/rank={n_params/1e6:.2f}M "
              f"batch={a.batch} prompt={a.prompt_len} new={a.new_tokens} T={a.temperature}", flush=True)
    if a.train_steps > 0:
        train(model, a, tp, dp_group, n_replicas, replica, lang, rank)
    model.eval()

    # the slow device only from here on: the serving loop is what is measured
    if slow and a.factor > 1.0:
        dev = SlowDevice(a.factor)
        for m in model.modules():
            if isinstance(m, (ColumnParallelLinear, RowParallelLinear)):
                m.slow = dev

    stop = threading.Event()
    hog = start_hog(stop) if (slow and a.hog) else None

    cache = KVCache(a.layers, max(batch, 1), a.heads // a.tp, max_len, a.dim // a.heads)
    os.makedirs(a.out, exist_ok=True)
    active = max(1, a.steps - 2)
    step_times, report = [], []
    prof = profile(activities=[ProfilerActivity.CPU],
                   schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
                   record_shapes=a.shapes)
    dist.barrier()
    try:
        with prof, torch.inference_mode():
            for step in range(a.steps):
                t0 = time.perf_counter()
                if slow and a.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(a.sleep_ms / 1000.0)
                with record_function("data"):
                    # seeded by (seed, replica, step): every TP rank of a replica gets the same requests
                    gen = torch.Generator().manual_seed(a.seed * 1_000_003 + replica * 10_007 + step)
                    plen, n_new = a.prompt_len, a.new_tokens
                    z_seq, z_gen = torch.randn(2, generator=gen).tolist()
                    if a.seq_sigma > 0:
                        plen = int(min(max(8, round(plen * math.exp(a.seq_sigma * z_seq))), max_prompt))
                    if a.gen_sigma > 0:
                        n_new = int(min(max(2, round(n_new * math.exp(a.gen_sigma * z_gen))), max_new))
                    prompts = lang.sample(batch, plen, gen)
                    sampler = torch.Generator().manual_seed(a.seed * 31 + replica * 1_000_033 + step)
                cache.len = 0
                out = []
                with record_function("prefill"):
                    h = model.hidden(prompts, cache).view(batch, plen, -1)[:, -1]
                    logits = gather_last_dim(model.head(h), tp)
                with record_function("decode"):
                    for i in range(n_new):
                        with record_function("sample"):
                            nxt = sample_next(logits, a.temperature, a.top_k, sampler)
                        out.append(nxt)
                        if slow and a.token_sleep_ms > 0:
                            with record_function("detokenize"):
                                time.sleep(a.token_sleep_ms / 1000.0)
                        if i == n_new - 1:
                            break
                        with record_function("decode_step"):
                            logits = gather_last_dim(model.head(model.hidden(nxt, cache)), tp)
                with record_function("report"):
                    gen_tok = torch.cat(out, dim=1)
                    prev = torch.cat([prompts[:, -1:], gen_tok[:, :-1]], dim=1)
                    acc = lang.follows_rule(prev, gen_tok).mean().item()
                    info = (replica, tp.rank, batch, plen, n_new, round(acc, 4),
                            int(gen_tok.sum().item()))
                    everyone = [None] * world
                    dist.all_gather_object(everyone, info)
                step_times.append(time.perf_counter() - t0)
                report.append(everyone)
                if rank == 0:
                    toks = sum(e[2] * e[4] for e in everyone if e[1] == 0)
                    accs = " ".join(f"rep{e[0]}:{e[5]:.2f}" for e in everyone if e[1] == 0)
                    agree = all(e[6] == f[6] for e in everyone for f in everyone if e[0] == f[0])
                    print(f"batch {step:3d} tokens {toks:5d} rule-acc {accs} tp-agree {agree} "
                          f"t {1000 * step_times[-1]:.1f} ms ({toks / step_times[-1]:.0f} tok/s)", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(a.out, f"trace_rank{rank}.json"))
    traced = step_times[2:] if len(step_times) > 2 else step_times
    med = statistics.median(traced)
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " + " ".join(f"r{r}={1000 * m:.1f}" for r, m in enumerate(allmed)),
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
