"""Context-parallel (CP4) training of a small causal transformer LM with all-gathered K/V.

(calibration table at the end of this docstring)

What it is
----------
Long-sequence pretraining the way Llama-3's paper describes its context parallelism, written by
hand with ``torch.distributed`` on 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``). Every step trains on one long document of ``--seq-len`` tokens (per
batch row, ``--batch`` rows) cut into 8 equal chunks; rank ``i`` holds chunks ``i`` and
``7 - i`` (the load-balanced split for causal attention: an early chunk with little context and a
late one with a lot, so every rank has the same attention work).

Model: token embedding (``--vocab`` x ``--dim``, tied with the LM head), ``--layers`` pre-norm
blocks (RMSNorm -> fused QKV projection -> rotary embedding at the tokens' *global* positions ->
causal attention -> output projection; RMSNorm -> SwiGLU MLP of width ``--ffn``), final RMSNorm.

The context-parallel attention, per layer:

* every rank computes Q, K, V of its own 2 chunks; K and V are packed into one tensor
  (tokens, batch, 2 x dim) and all-gathered from all ranks with ONE
  ``dist.all_gather_into_tensor`` (``AllGatherKV``, a hand-written ``torch.autograd.Function``,
  in ``record_function("cp_allgather_kv")``);
* the rank's queries attend to the gathered keys of the whole sequence
  (``F.scaled_dot_product_attention`` with an additive mask built once from the global positions:
  0 where query position >= key position, -inf elsewhere), in ``record_function("attention")``;
* backward of ``AllGatherKV``: the gradient w.r.t. the gathered K/V is summed back to the owners
  of the tokens with ONE ``dist.reduce_scatter_tensor`` per layer (in
  ``record_function("cp_reduce_scatter_dkv")``).

Weights are replicated: each rank's gradient holds only its tokens' share, so after backward the
gradients are summed over the 4 ranks (the CP ranks act as data parallel for the weights) in two
hand-made flat buckets (the parameters in reverse order, cut at half the parameter count), one
``all_reduce`` each; gradient clipping (1.0) and AdamW. The loss is token-weighted: each rank
back-propagates (sum of its tokens' cross entropy) / (tokens of the whole step), and a 2-float
``all_reduce`` (loss sum, tokens) gives the logged loss. Every ``--eval-every`` steps an evaluation
forward (no grad, the same all-gathers) on a held-out document, its loss all-reduced the same way.

Data: a pre-tokenized corpus (uint16, random repeated "phrases", something to learn) written once
by rank 0 into a temporary ``.bin`` and read by every rank with ``np.memmap``; each step's document
start is drawn from (seed, step), the same on every rank; every rank reads its two chunks (plus one
token each for the targets). At the end of each step the rank "tokenizes and packs" the next
step's document window (``pack_document``: reads it and computes its packing statistics).

Communication per step (defaults: 4 layers, dim 128, batch 1, seq 1024, 256 tokens a rank): per
layer one all_gather of 256 x 256 floats a rank (256 KB in, 1 MB out) in forward and one
reduce_scatter of 1 MB in backward; 2 bucket all_reduces of the ~0.73 M gradient floats; one
2-float all_reduce of the loss; on eval steps the eval forward's all_gathers and its loss
all_reduce.

User ranges per step: ``sleep`` (fault only), ``get_batch``, ``forward`` [``embed``,
``layer_k`` (``qkv_proj``, ``cp_allgather_kv``, ``attention``, ``mlp``), ``lm_head_loss``],
``backward`` (``cp_reduce_scatter_dkv`` inside), ``grad_allreduce``, ``optimizer``,
``log_loss``, ``evaluate`` (eval steps), ``pack_document``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time over
the traced steps and its median "busy" time (the step minus the time spent in the all_gathers,
reduce_scatters, all_reduces and the link messages).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job: ``--layers`` (4), ``--dim`` (128), ``--heads`` (4), ``--ffn`` (384), ``--vocab``
(512), ``--batch`` (1), ``--seq-len`` (1024, the whole document; a multiple of 8 x 4),
``--rope-base`` (10000), ``--lr`` (3e-3), ``--eval-every`` (4; 0 = never).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: in every layer the rank's attention (the SDPA of its queries
  against the gathered K/V, and of its local tail if any) and its MLP run ``round(F)`` times in
  forward (the extra passes without grad, discarded) and their backward runs ``round(F)`` times
  too (the extra passes by ``torch.autograd.grad`` on the retained graph, discarded);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow read: the rank's ``get_batch`` sleeps MS each step;
* ``--pack-sleep-ms MS`` (family fault): a slow tokenizer / packer: the rank's
  ``pack_document`` at the end of each step sleeps MS;
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and joined
  before exit);
* ``--link-src A --link-dst B --link-factor X`` (no ``--slow-rank``): the family has only
  collectives, so the link is an added point-to-point exchange: a 2-rank group {A, B}
  (``dist.new_group([A, B])``, created on every rank) in which, in every layer's forward (training
  and eval), right after the all_gather and inside ``cp_allgather_kv``, rank A sends a mirror of its
  own packed K/V shard to B (``dist.send`` in that group, record_function ``kv_mirror_send``), the
  message X times the shard's bytes (the shard at the head, zeros after it, a buffer allocated
  once); B receives it all (``dist.recv``, ``kv_mirror_recv``) and discards it. Only A -> B carries
  data; no message goes B -> A.

Imbalance without a fault (a local "packed tail": a short document from the rank's own data
stream, trained on locally; its tokens go through every layer with the rank's main tokens
(projections, MLP, LM head) and attend only to each other, causally: a document mask; no
collective carries them, so the collectives' shapes agree on all ranks):

* ``--seq-sigma S``: each rank and step, a tail of (256 tokens a rank by default) x
  lognormal(0, S) tokens (drawn from (seed, rank, step), clamped to [1/4x, 4x], rounded to 16):
  extra document-mask tokens the rank's attention and MLP must process, different by rank and step;
* ``--big-rank K --big X``: rank K trains on a tail of (X - 1) x its 256 tokens every step, so its
  local MLP / attention tokens are X times the others'.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 4.5-6.5); 4 ranks, 10 steps
(8 timed) unless noted. Step medians of all ranks agree within ~1-3% (the per-layer all_gathers
tie the ranks), so one number; "busy" = median time outside communication, slow rank vs the
mean of the others. "base" = the healthy default run just before (its step median); the box's
load moved a healthy default step between 256 and 587 ms from one run to the next.

  setting (slow rank)                              base ms  step ms   busy slow / others ms
  healthy default                                     -     256-587    110-294 (by load)
  healthy --shapes --eval-every 2 --steps 8           -       460      173-192
  healthy --dim 192 --heads 6 --ffn 512 --seq-len 1536 -      960      549-595
  healthy --layers 3 --batch 2 --ffn 512              -       670      303-336
  healthy --layers 3 --seq-len 2048 --vocab 1024
          --eval-every 0                              -       954      506-542
  --factor 3 (r2)                                   587       757      571 / 227   (+344 ms, 45% of the step)
  --factor 4 --steps 8 (r3)                         465       698      453 / 204   (+249 ms, 36%)
  --factor 4 (r1)                                   256       476      301 / 165   (+136 ms, 29%)
  --layers 3 --batch 2 --ffn 512 --factor 3 (r0)    670       695      545 / 296   (+249 ms, 36%)
  --dim 192 --heads 6 --ffn 512 --factor 4
          --steps 8 (r1)                            960      1011      753 / 355   (+398 ms, 39%)
  --sleep-ms 150 (r1)                               496       455      296 / 151   (+145 ms, 32%)
  --data-sleep-ms 150 (r3)                          496       594      328 / 200   (+128 ms, 22%)
  --pack-sleep-ms 150 (r0)                          496       565      307 / 163   (+144 ms, 26%)
  --pack-sleep-ms 180 (r0)                          670       588      330 / 186   (+144 ms, 25%)
  --hog (r2)                                        496       471      192 / 157   (+35 ms, 7%)
  --hog (r0)                                          -       542      221 / 152   (+69 ms, 13%)
  link 1->3 x128 (32 MB messages)                   587       732      (not split out)
  link 1->3 x512 (128 MB messages)                  496       670      link: r1 350, r3 322 ms a step
                                                                        in the messages; busy 124-144
  --seq-sigma 0.8                                     -       471      172-223 (tails differ by rank/step)
  --big-rank 3 --big 3                                -       447      278 / 171

Reading: the slowed rank's busy time shows every fault; the step time of one run says little
(load). ``--factor F`` repeats the attention and the MLP (most of the compute), forward and
backward, so F = 3-4 adds 30-45% of a step to the rank; the others wait for it in the next
all_gather (or reduce_scatter / bucket all_reduce). A 150-180 ms sleep is 22-32% of the step. The
hog is the weakest fault: on this over-subscribed box the neighbour thread takes one share of
the 2 cores among ~6 runnable threads, so it costs the rank only 7-13% of a step (its busy time
+20-45%). The link costs little until the messages are ~100 MB (A's blocking ``dist.send`` and
B's ``dist.recv`` then take ~80 ms a layer, half the step). ``--big 3`` gives the big rank 2 x 256
extra tail tokens a layer: busy +60%. Wall per run: 16-25 s; traces ~10.4 MB a rank (12.5 MB with
``--shapes --steps 8``, 12.5-14.5 MB on a ``--factor`` 3-4 rank; keep ``--steps 8`` for F >= 4).
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
import warnings
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

warnings.filterwarnings("ignore", category=FutureWarning)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=384)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=1024, help="whole document, 8 chunks over 4 ranks")
    p.add_argument("--rope-base", type=float, default=10000.0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--eval-every", type=int, default=4)
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
    if a.link_src >= 0 and a.link_src == a.link_dst:
        p.error("--link-src and --link-dst must differ")
    if a.dim % a.heads:
        p.error("--dim must be a multiple of --heads")
    return a


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

class Comm:
    """The collectives of the CP group (all ranks), timed; plus the optional K/V mirror link."""

    def __init__(self, rank, world, link=None, link_factor=1.0):
        self.rank, self.world = rank, world
        self.secs = 0.0
        self.link_secs = 0.0   # of which in the link's messages
        self.link = link
        self.link_factor = link_factor
        self.link_group = dist.new_group(list(link)) if link is not None else None  # on every rank
        self.link_buf = None

    def all_gather(self, out, inp):
        t0 = time.perf_counter()
        dist.all_gather_into_tensor(out, inp)
        self.secs += time.perf_counter() - t0

    def reduce_scatter(self, out, inp):
        t0 = time.perf_counter()
        dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.SUM)
        self.secs += time.perf_counter() - t0

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t

    def mirror_kv(self, kv):
        """--link-*: A sends X times its K/V shard's bytes to B (shard at the head); B discards."""
        if self.link is None:
            return
        src, dst = self.link
        if self.rank not in (src, dst):
            return
        n = kv.numel()
        total = max(n, int(round(n * self.link_factor)))
        if self.link_buf is None or self.link_buf.numel() != total:
            self.link_buf = torch.zeros(total)
        t0 = time.perf_counter()
        if self.rank == src:
            with record_function("kv_mirror_send"):
                self.link_buf[:n].copy_(kv.reshape(-1))
                dist.send(self.link_buf, dst=dst, group=self.link_group)
        else:
            with record_function("kv_mirror_recv"):
                dist.recv(self.link_buf, src=src, group=self.link_group)
        self.secs += time.perf_counter() - t0
        self.link_secs += time.perf_counter() - t0


class AllGatherKV(torch.autograd.Function):
    """forward: all_gather_into_tensor of the local (T, B, 2D) K/V -> (world T, B, 2D), rank-major.
    backward: reduce_scatter_tensor (sum) of the gathered gradient back to each shard's owner."""

    @staticmethod
    def forward(ctx, kv, comm):
        kv = kv.contiguous()
        out = kv.new_empty((comm.world * kv.shape[0],) + tuple(kv.shape[1:]))
        comm.all_gather(out, kv)
        comm.mirror_kv(kv)
        ctx.comm = comm
        return out

    @staticmethod
    def backward(ctx, grad_out):
        comm = ctx.comm
        with record_function("cp_reduce_scatter_dkv"):
            grad_out = grad_out.contiguous()
            g = grad_out.new_empty((grad_out.shape[0] // comm.world,) + tuple(grad_out.shape[1:]))
            comm.reduce_scatter(g, grad_out)
        return g, None


class SlowDevice(torch.autograd.Function):
    """--factor: run fn (a block's attention or MLP) 1 + extra times in forward (extra passes
    without grad, discarded) and its backward 1 + extra times (extra passes discarded)."""

    @staticmethod
    def forward(ctx, fn, extra, params, *inputs):
        with torch.no_grad():
            for _ in range(extra):
                fn(*inputs)
        leaves = [t.detach().requires_grad_(t.requires_grad) for t in inputs]
        with torch.enable_grad():
            out = fn(*leaves)
        ctx.fn, ctx.extra, ctx.params, ctx.leaves, ctx.out = fn, extra, params, leaves, out
        return out.detach()

    @staticmethod
    def backward(ctx, grad):
        wrt = [t for t in ctx.leaves if t.requires_grad] + [q for q in ctx.params if q.requires_grad]
        for _ in range(ctx.extra):
            torch.autograd.grad(ctx.out, wrt, grad, retain_graph=True, allow_unused=True)
        torch.autograd.backward(ctx.out, grad)
        grads = tuple(t.grad if t.requires_grad else None for t in ctx.leaves)
        ctx.out = ctx.leaves = None
        return (None, None, None) + grads


def slow_call(fn, extra, params, *inputs):
    if extra <= 0:
        return fn(*inputs)
    if not torch.is_grad_enabled():          # eval: just the repeated forward
        for _ in range(extra):
            fn(*inputs)
        return fn(*inputs)
    return SlowDevice.apply(fn, extra, params, *inputs)


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

def rope_tables(pos, head_dim, base):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = pos.float()[:, None] * inv[None, :]
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):
    """x (B, T, H, hd); cos/sin (T, hd/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, dim, heads, ffn, idx):
        super().__init__()
        self.idx, self.heads, self.hd = idx, heads, dim // heads
        self.norm1 = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.RMSNorm(dim)
        self.w1 = nn.Linear(dim, ffn, bias=False)
        self.w3 = nn.Linear(dim, ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)
        nn.init.normal_(self.proj.weight, std=0.02 / math.sqrt(2))
        nn.init.normal_(self.w2.weight, std=0.02 / math.sqrt(2))

    def mlp_fn(self, h):
        return self.w2(F.silu(self.w1(h)) * self.w3(h))

    @staticmethod
    def attn_fn(mask, n_main, q, k_all, v_all, *tail):
        """Main queries vs the gathered keys (global causal mask); the tail causally on itself."""
        o = F.scaled_dot_product_attention(q[:, :, :n_main], k_all, v_all, attn_mask=mask)
        if tail:
            kt, vt = tail
            ot = F.scaled_dot_product_attention(q[:, :, n_main:], kt, vt, is_causal=True)
            o = torch.cat([o, ot], dim=2)
        return o

    def forward(self, x, ctx):
        """x (B, T + Lt, D): the rank's 2 chunks then its local tail (Lt may be 0)."""
        B, T_all, D = x.shape
        T, H, hd = ctx["n_main"], self.heads, self.hd
        with record_function("qkv_proj"):
            q, k, v = self.qkv(self.norm1(x)).view(B, T_all, 3, H, hd).unbind(2)
            q = apply_rope(q, ctx["cos"], ctx["sin"])
            k = apply_rope(k, ctx["cos"], ctx["sin"])
            kv = torch.cat([k[:, :T], v[:, :T]], dim=-1)           # (B, T, H, 2hd)
            kv = kv.reshape(B, T, 2 * D).transpose(0, 1)            # (T, B, 2D)
        with record_function("cp_allgather_kv"):
            kv_all = AllGatherKV.apply(kv, ctx["comm"])              # (world T, B, 2D), rank-major
        with record_function("attention"):
            kv_all = kv_all.transpose(0, 1).reshape(B, -1, H, 2 * hd)
            k_all, v_all = kv_all[..., :hd].transpose(1, 2), kv_all[..., hd:].transpose(1, 2)
            qh = q.transpose(1, 2)
            tail = ()
            if T_all > T:
                tail = (k[:, T:].transpose(1, 2), v[:, T:].transpose(1, 2))
            attn_params = []
            o = slow_call(lambda *a: Block.attn_fn(ctx["mask"], T, *a), ctx["extra"], attn_params,
                          qh, k_all, v_all, *tail)
            x = x + self.proj(o.transpose(1, 2).reshape(B, T_all, D))
        with record_function("mlp"):
            h = self.norm2(x)
            x = x + slow_call(self.mlp_fn, ctx["extra"],
                              [self.w1.weight, self.w3.weight, self.w2.weight], h)
        return x


class CPTransformer(nn.Module):
    def __init__(self, vocab, dim, heads, ffn, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn, i) for i in range(layers))
        self.norm = nn.RMSNorm(dim)

    def forward(self, tokens, targets, ctx):
        """Returns (sum of the tokens' cross entropy, number of tokens)."""
        with record_function("embed"):
            x = self.embed(tokens)
        for i, blk in enumerate(self.blocks):
            with record_function(f"layer_{i}"):
                x = blk(x, ctx)
        with record_function("lm_head_loss"):
            logits = self.norm(x) @ self.embed.weight.t()
            loss_sum = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                       reduction="sum")
        return loss_sum, targets.numel()


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_corpus(path, vocab, seed, n_tokens=1 << 21, phrase_len=8, n_phrases=4000):
    g = torch.Generator().manual_seed(seed)
    phrases = torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)
    idx = torch.randint(0, n_phrases, (n_tokens // phrase_len,), generator=g)
    phrases[idx].reshape(-1).numpy().astype(np.uint16).tofile(path)


def tail_lengths(args, world, step, per_rank):
    """Every rank's local tail this step (all ranks compute all of them, for the token count)."""
    out = []
    for r in range(world):
        n = 0.0
        if r == args.big_rank and args.big > 1:
            n = per_rank * (args.big - 1.0)
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + r * 10_007 + step)
            m = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
            n += per_rank * min(4.0, max(0.25, m))
        out.append(int(round(n / 16)) * 16)
    return out


def local_positions(rank, world, chunk):
    n_chunks = 2 * world
    a = torch.arange(rank * chunk, (rank + 1) * chunk)
    b = torch.arange((n_chunks - 1 - rank) * chunk, (n_chunks - rank) * chunk)
    return torch.cat([a, b])


def read_rows(corpus, starts, pos, tail_start, n_tail):
    """tokens/targets (B, T + n_tail) of the rank's positions of each row's document, then its tail."""
    toks, tgts = [], []
    p = pos.numpy()
    for s in starts:
        doc = np.asarray(corpus[s: s + int(p.max()) + 2], dtype=np.int64)
        t, y = doc[p], doc[p + 1]
        if n_tail > 0:
            tl = np.asarray(corpus[tail_start: tail_start + n_tail + 1], dtype=np.int64)
            t, y = np.concatenate([t, tl[:-1]]), np.concatenate([y, tl[1:]])
        toks.append(t)
        tgts.append(y)
    return torch.from_numpy(np.stack(toks)), torch.from_numpy(np.stack(tgts))


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
    if args.seq_len % (2 * world * 16):
        raise SystemExit("--seq-len must split into 2 x world chunks of a multiple of 16 tokens")
    chunk = args.seq_len // (2 * world)
    per_rank = 2 * chunk

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, world, link, args.link_factor)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="cp_allgather_")
        make_corpus(os.path.join(tmp[0], "train.bin"), args.vocab, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    data_dir = tmp[0]
    dist.barrier()
    corpus = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    n_train = len(corpus) - len(corpus) // 8        # the last eighth is held out for evaluation
    log_path = os.path.join(data_dir, f"loss_rank{rank}.jsonl")

    torch.manual_seed(args.seed)                    # the same initial weights on every rank
    model = CPTransformer(args.vocab, args.dim, args.heads, args.ffn, args.layers)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01, fused=True)
    n_params = sum(q.numel() for q in params)

    # two hand-made gradient buckets (reverse order, as backward produces them)
    buckets, cur, cur_n = [], [], 0
    for q in reversed(params):
        cur.append(q)
        cur_n += q.numel()
        if not buckets and cur_n >= n_params / 2:
            buckets.append(cur)
            cur, cur_n = [], 0
    if cur:
        buckets.append(cur)

    # positions: mine, and the gathered keys' (rank-major); the additive causal mask of my queries
    # vs them (0 where query position >= key position, -inf elsewhere), built once
    pos = local_positions(rank, world, chunk)
    key_pos = torch.cat([local_positions(r, world, chunk) for r in range(world)])
    mask = torch.zeros(per_rank, world * per_rank).masked_fill(pos[:, None] < key_pos[None, :], float("-inf"))
    head_dim = args.dim // args.heads

    extra = max(0, int(round(args.factor)) - 1) if slow else 0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[cp-allgather] world={world} layers={args.layers} dim={args.dim} heads={args.heads} "
              f"ffn={args.ffn} vocab={args.vocab} batch={args.batch} seq_len={args.seq_len} "
              f"chunk={chunk} params={n_params} buckets={[sum(q.numel() for q in b) for b in buckets]}"
              f" link={link}", flush=True)

    def make_ctx(n_tail):
        p = torch.cat([pos, torch.arange(n_tail)]) if n_tail else pos
        cos, sin = rope_tables(p, head_dim, args.rope_base)
        return {"n_main": per_rank, "cos": cos, "sin": sin, "mask": mask, "comm": comm, "extra": extra}

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times, link_times = [], [], []
    eval_loss = float("nan")
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = comm.link_secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("get_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    tails = tail_lengths(args, world, step, per_rank)
                    g = torch.Generator().manual_seed(args.seed * 7919 + step)
                    starts = torch.randint(0, n_train - args.seq_len - 2, (args.batch,), generator=g).tolist()
                    gt = torch.Generator().manual_seed(args.seed * 7919 + 104729 * (rank + 1) + step)
                    tail_start = int(torch.randint(0, n_train - int(8 * per_rank * max(1.0, args.big)) - 2, (1,),
                                                   generator=gt))
                    tokens, targets = read_rows(corpus, starts, pos, tail_start, tails[rank])
                    step_tokens = args.batch * (world * per_rank + sum(tails))
                    ctx = make_ctx(tails[rank])

                with record_function("forward"):
                    loss_sum, n_tok = model(tokens, targets, ctx)
                    loss = loss_sum / step_tokens
                with record_function("backward"):
                    opt.zero_grad(set_to_none=False)
                    loss.backward()

                with record_function("grad_allreduce"):
                    for bk in buckets:
                        flat = torch.cat([q.grad.reshape(-1) for q in bk])
                        comm.all_reduce(flat)
                        o = 0
                        for q in bk:
                            q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                            o += q.numel()
                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()

                with record_function("log_loss"):
                    m = comm.all_reduce(torch.tensor([loss_sum.item(), float(n_tok)]))

                if args.eval_every > 0 and (step + 1) % args.eval_every == 0:
                    with record_function("evaluate"), torch.no_grad():
                        s = n_train + 1000 + step
                        etok, etgt = read_rows(corpus, [s], pos, 0, 0)
                        e_sum, e_n = model(etok, etgt, make_ctx(0))
                        em = comm.all_reduce(torch.tensor([e_sum.item(), float(e_n)]))
                        eval_loss = em[0].item() / em[1].item()

                with record_function("pack_document"):
                    # tokenize/pack the next step's document window: read it, count phrase breaks
                    gn = torch.Generator().manual_seed(args.seed * 7919 + step + 1)
                    ns = int(torch.randint(0, n_train - args.seq_len - 2, (1,), generator=gn))
                    window = np.asarray(corpus[ns: ns + args.seq_len], dtype=np.int64)
                    stats = {"unique": int(np.unique(window).size), "bos": int((window == 0).sum())}
                    if slow and args.pack_sleep_ms > 0:
                        time.sleep(args.pack_sleep_ms / 1000.0)
                    with open(log_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "loss": m[0].item() / m[1].item(),
                                             "tail": tails[rank], "grad_norm": float(gnorm),
                                             "eval": eval_loss, **stats}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                link_times.append(comm.link_secs)
                if rank == 0:
                    print(f"step {step:3d} loss {m[0].item() / m[1].item():.4f} |g| {float(gnorm):.3f} "
                          f"eval {eval_loss:.4f} tails {tails} t {1000 * step_times[-1]:.1f} ms", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    links = link_times[2:] if len(link_times) > 2 else link_times
    med = (statistics.median(traced), statistics.median(busy), statistics.median(links))
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside all_gathers, reduce_scatters, all_reduces, link) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b, _) in enumerate(allmed)), flush=True)
        if link is not None:
            print("median ms in the link's messages per rank: " +
                  " ".join(f"r{r}={1000 * k:.1f}" for r, (_, _, k) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(data_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
