"""A CLIP-style contrastive image-text model trained data-parallel, written by hand as users of
open_clip-style training loops write one: every rank embeds its own images and captions, gathers
every rank's embeddings with an autograd-aware all-gather and computes the contrastive loss over
the global batch; DistributedDataParallel averages the gradients. CPUs and gloo.

The model: two towers that project to a shared ``--embed-dim`` space, both made of the same
hand-written pre-norm transformer block (``qkv`` and output projections, a ``W -> 4W -> W`` GELU
MLP, ``F.scaled_dot_product_attention``, residuals around both halves).

- image tower, a tiny ViT over synthetic patch features: ``--patches`` patches of 48 values,
  embedded to ``--width`` channels, a class token and learned positions, ``--depth`` blocks,
  a final LayerNorm, the class token projected to the shared space;
- text tower: token embeddings (vocabulary 1000) plus learned positions, ``--depth`` causal
  blocks, a final LayerNorm, the features at the end-of-text token projected to the shared space
  (as CLIP does; with the causal mask, the padding after it changes nothing but costs work);
- a learnable logit scale (initialised to ln(1/0.07), clamped to ln 100 as CLIP does).

Synthetic pairs with something to learn: a pair is about one of 8 values of each of 4
attributes; its image's patches are the sum of fixed random patch prototypes of its 4 values
plus noise, its caption a begin token, words naming its values (4 synonyms per value, each word
of a random attribute; a quarter of the words replaced by random filler), an end token and
padding. Each rank's batch depends on the seed, its rank and the step. By default every
caption's length is uniform in [4, ``--ctx``] and every batch is padded to ``--ctx`` tokens
(CLIP's fixed context), so every rank does the same work every step.

One step, on every rank: the two towers on the local ``--batch`` pairs (under DDP, one forward),
L2-normalised embeddings, then ``GatherWithGrad`` (below) on the image and on the text
embeddings: forward, a ``dist.all_gather`` of every rank's embeddings; backward, a
``dist.all_reduce`` (sum) of the gradient of the gathered embeddings, of which this rank keeps
its own rows (every rank's loss depends on every rank's embeddings). The loss:
``logits = scale * all_img @ all_txt.T`` over the global batch, cross-entropy over the rows and
over the columns, labels the global indices, averaged; every rank computes the same loss. DDP
(default buckets) all-reduces the parameters' gradients during backward and averages them, which
makes the update that of the global loss. AdamW. With ``--local-loss`` (open_clip's option) each
rank computes only its own rows of the logits (its images against all texts, its texts against
all images, labels ``rank * batch + i``); with ``--gather torch`` the gather is
``torch.distributed.nn.functional.all_gather`` instead, whose backward on gloo is an
``all_to_all`` (which gloo runs as one ``scatter`` per rank) and a sum (checked: it runs on CPUs
with gloo and gives the same gradients as the hand-written one, and as one process over the
global batch, to 1e-15 in float64; torch 2.13 warns that it is deprecated).

Profiling: ``torch.profiler.profile(activities=[CPU])`` with
``schedule(wait=1, warmup=1, active=steps-2)``, the profiler's defaults otherwise (no input
shapes), its ``on_trace_ready`` exporting one chrome trace per process, ``clip-rank<R>.json`` in
``--out``; ``prof.step()`` after each step. ``record_function`` marks ``data``, ``image_tower``,
``text_tower``, ``gather``, ``loss``, ``backward`` (with ``gather_backward`` inside it, the
hand-written gather's all-reduces) and ``optimizer``. Rank 0 prints its loss and its step time
(from the top of the loop to just before ``prof.step()``, which exports the trace after the last
step) every step, and at the end its mean (and median) step over the profiled (active) steps and
the largest difference of a parameter across ranks (0 when the synchronisation is right).

Flags:

- ``--out DIR``: where the traces go (created if missing).
- ``--steps N`` (8, at least 3), ``--batch B`` (24 pairs a rank), ``--width W`` (96),
  ``--depth D`` (2 blocks a tower), ``--embed-dim E`` (64), ``--patches P`` (16),
  ``--ctx C`` (32 tokens), ``--lr`` (5e-4), ``--seed S`` (0), ``--local-loss``,
  ``--gather {fn,torch}`` (fn: the hand-written Function).
- ``--slow-rank R``: the rank the three faults below apply to (-1: none).
- ``--factor F``: on the slow rank every linear layer of both towers computes its matmul again,
  of the same shapes on the same rows, without gradients, results discarded,
  ``(F - 1) x 3 x 1.3`` times per call (the fraction carried from one call to the next), all of
  it in the forward: 3 for forward and backward (backward as two forwards), 1.3 because the
  linear layers are about 3/4, not all, of the towers' compute (measured in one process, default
  shapes: F = 2 makes the towers' forward + backward 1.94 x as long). That rank is slower on the
  same work, as a slow GPU is: its towers' compute about F x its peers'.
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step.
- ``--data-sleep-ms MS``: the slow rank sleeps in its data path (inside ``data``) each step, as
  a slow input pipeline does.
- ``--varlen``: dynamic padding. Each caption's length is drawn from a heavy-tailed lognormal
  (median ``ctx / 4``, sigma ``--len-sigma``, 0.7; clipped to [3, 4 ctx]) and each rank pads its
  batch to its own longest caption, per step (with the defaults a padded length of 18 to 59
  tokens in 90 % of the rank-steps, median 31, against the fixed 32): the ranks' text towers do
  different amounts of work, and each rank's varies from step to step. An imbalance of the data,
  not a fault (no rank is slower on the same work).

Measured (torch 2.13, 4 processes sharing 2 cores, ``OMP_NUM_THREADS=1``, default shapes, the
machine otherwise nearly idle; rank 0's mean step over the 6 active steps, 6 runs of each, their
mean and range; the faults' runs interleaved with the healthy ones):

- healthy: 115 ms (110-119); a whole run takes about 9 s wall (8.7-9.4), most of it starting the
  4 processes;
- ``--slow-rank 1 --factor 2``: 136 ms (132-145), +19 %;
- ``--slow-rank 3 --sleep-ms 40``: 144 ms (141-147), +25 %;
- ``--slow-rank 2 --data-sleep-ms 40``: 145 ms (141-150), +26 %;
- ``--varlen``: 121 ms (113-127), +5 %, the step set by whichever rank drew the longest captions.

A sleep adds less than its length: while the slow rank sleeps, its peers get its share of the 2
cores. That is why the defaults are small: with ``--batch 32 --width 128`` (a 180-210 ms step)
40 ms of sleep added only about 7 %, factor 2 about 20 %. On a machine busy with other jobs the
steps take 1.5-3 x as long and vary by as much from run to run, which hides these differences.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_clip.py --out DIR --slow-rank 1 --factor 2
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function

PATCH_DIM = 48         # values per synthetic image patch
VOCAB = 1000
PAD, BOS, EOT = 0, 1, 2
ATTRS, VALUES = 4, 8   # a pair is about one value of each of 4 attributes (4096 combinations)
SYNONYMS = 4           # words per attribute value


class SlowLinear(nn.Linear):
    """``nn.Linear`` that, on the slow rank, computes its matmul again ``extra`` times (no grad)."""

    extra = 0.0          # extra forward-equivalents per call, set on the slow rank only
    _carry = 0.0         # fraction carried from one call to the next (shared by all layers)

    def forward(self, x):
        y = super().forward(x)
        if SlowLinear.extra > 0:
            SlowLinear._carry += SlowLinear.extra
            n = int(SlowLinear._carry)
            SlowLinear._carry -= n
            with torch.no_grad():
                for _ in range(n):
                    _ = F.linear(x, self.weight, self.bias)
        return y


class Block(nn.Module):
    """Pre-norm transformer block: multi-head self-attention and a GELU MLP, residuals around both."""

    def __init__(self, width, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1 = nn.LayerNorm(width)
        self.qkv = SlowLinear(width, 3 * width)
        self.proj = SlowLinear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = SlowLinear(width, 4 * width)
        self.fc2 = SlowLinear(4 * width, width)

    def forward(self, x):                                     # x: [B, T, W]
        b, t, w = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)   # [B, H, T, W / H]
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, w))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ImageTower(nn.Module):
    """A tiny ViT over patch features: patch embedding, class token, blocks, class token out."""

    def __init__(self, patches, width, depth, embed_dim):
        super().__init__()
        self.patch_embed = SlowLinear(PATCH_DIM, width)
        self.cls = nn.Parameter(torch.randn(width) * 0.02)
        self.pos = nn.Parameter(torch.randn(patches + 1, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width, max(1, width // 32), causal=False) for _ in range(depth))
        self.ln = nn.LayerNorm(width)
        self.head = SlowLinear(width, embed_dim, bias=False)

    def forward(self, patches):                               # [B, P, PATCH_DIM]
        h = self.patch_embed(patches)
        h = torch.cat([self.cls.expand(h.shape[0], 1, -1), h], dim=1) + self.pos
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.ln(h[:, 0]))


class TextTower(nn.Module):
    """Token and position embeddings, causal blocks, the end-of-text token's features out."""

    def __init__(self, max_len, width, depth, embed_dim):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(torch.randn(max_len, width) * 0.01)
        self.blocks = nn.ModuleList(Block(width, max(1, width // 32), causal=True) for _ in range(depth))
        self.ln = nn.LayerNorm(width)
        self.head = SlowLinear(width, embed_dim, bias=False)

    def forward(self, tokens, lengths):                       # [B, T] ids, [B] lengths with BOS and EOT
        h = self.tok(tokens) + self.pos[: tokens.shape[1]]
        for blk in self.blocks:
            h = blk(h)
        h = self.ln(h[torch.arange(tokens.shape[0]), lengths - 1])      # at the EOT token
        return self.head(h)


class CLIP(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.visual = ImageTower(args.patches, args.width, args.depth, args.embed_dim)
        self.text = TextTower(4 * args.ctx, args.width, args.depth, args.embed_dim)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, images, tokens, lengths):
        with record_function("image_tower"):
            img = F.normalize(self.visual(images), dim=-1)
        with record_function("text_tower"):
            txt = F.normalize(self.text(tokens, lengths), dim=-1)
        return img, txt, self.logit_scale.clamp(max=math.log(100)).exp()


class GatherWithGrad(torch.autograd.Function):
    """All-gather of every rank's rows, concatenated in rank order; backward sums the gradient
    over the ranks (every rank's loss used our rows) and keeps this rank's rows."""

    @staticmethod
    def forward(ctx, x):
        world, rank = dist.get_world_size(), dist.get_rank()
        ctx.rows, ctx.rank = x.shape[0], rank
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):
        with record_function("gather_backward"):
            grad = grad.contiguous().clone()
            dist.all_reduce(grad)
        return grad[ctx.rank * ctx.rows:(ctx.rank + 1) * ctx.rows]


def gather(x, how):
    if how == "torch":
        return torch.cat(dist_fn.all_gather(x))
    return GatherWithGrad.apply(x)


def contrastive_loss(img, txt, all_img, all_txt, scale, rank, local):
    """Symmetric InfoNCE over the global batch (or this rank's rows of it with ``local``)."""
    if local:
        n = img.shape[0]
        labels = torch.arange(rank * n, (rank + 1) * n)
        logits_img = scale * img @ all_txt.T
        logits_txt = scale * txt @ all_img.T
    else:
        labels = torch.arange(all_img.shape[0])
        logits_img = scale * all_img @ all_txt.T
        logits_txt = logits_img.T
    return (F.cross_entropy(logits_img, labels) + F.cross_entropy(logits_txt, labels)) / 2


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--slow-rank", type=int, default=-1,
                   help="rank that --factor / --sleep-ms / --data-sleep-ms apply to")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's towers' matmul work, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0,
                   help="sleep in the slow rank's data path each step")
    p.add_argument("--varlen", action="store_true", help="lognormal caption lengths, padded per rank per step")
    p.add_argument("--len-sigma", type=float, default=0.7, help="--varlen: sigma of the lognormal lengths")
    p.add_argument("--local-loss", action="store_true", help="each rank computes only its rows of the logits")
    p.add_argument("--gather", choices=["fn", "torch"], default="fn",
                   help="fn: the hand-written autograd Function; torch: torch.distributed.nn.functional")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=24, help="image-text pairs per rank per step")
    p.add_argument("--width", type=int, default=96)
    p.add_argument("--depth", type=int, default=2, help="transformer blocks per tower")
    p.add_argument("--embed-dim", type=int, default=64)
    p.add_argument("--patches", type=int, default=16)
    p.add_argument("--ctx", type=int, default=32, help="caption context length (tokens)")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.ctx < 4:
        p.error("--ctx must be at least 4")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    # ---- the fixed parts of the synthetic data, the same on every rank ----
    g = torch.Generator().manual_seed(args.seed + 12345)
    img_proto = torch.randn(ATTRS, VALUES, args.patches, PATCH_DIM, generator=g) / ATTRS ** 0.5
    words = torch.randperm(VOCAB - 3, generator=g)[: ATTRS * VALUES * SYNONYMS].add_(3)
    words = words.view(ATTRS, VALUES, SYNONYMS)

    # ---- the model, the same weights everywhere ----
    torch.manual_seed(args.seed)
    model = DDP(CLIP(args))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    if slow and args.factor > 1:
        SlowLinear.extra = (args.factor - 1.0) * 3 * 1.3    # fwd + bwd; linears ~3/4 of the towers
    if rank == 0:
        n = sum(q.numel() for q in model.parameters())
        print(f"clip: {n / 1e6:.2f}M params, {world} ranks x {args.batch} pairs, "
              f"gather {args.gather}, {'local' if args.local_loss else 'global'} loss", flush=True)

    def batch_for(step):
        """This rank's pairs for a step: patch features, padded caption ids, caption lengths."""
        gs = torch.Generator().manual_seed(args.seed * 1_000_003 + 1000 * rank + step)
        B = args.batch
        value = torch.randint(0, VALUES, (B, ATTRS), generator=gs)           # what each pair shows
        images = img_proto[torch.arange(ATTRS), value].sum(1)                 # [B, P, PATCH_DIM]
        images = images + 0.5 * torch.randn(B, args.patches, PATCH_DIM, generator=gs)
        if args.varlen:
            draw = torch.empty(B).log_normal_(math.log(args.ctx / 4), args.len_sigma, generator=gs)
            lengths = draw.round().long().clamp_(3, 4 * args.ctx)
            T = int(lengths.max())               # dynamic padding: this rank's longest caption
        else:
            lengths = torch.randint(4, args.ctx + 1, (B,), generator=gs)
            T = args.ctx                         # fixed context
        tokens = torch.full((B, T), PAD, dtype=torch.long)
        attr = torch.randint(0, ATTRS, (B, T), generator=gs)                  # each word names an attribute
        body = words[attr, value.gather(1, attr), torch.randint(0, SYNONYMS, (B, T), generator=gs)]
        filler = torch.randint(3, VOCAB, (B, T), generator=gs)
        body = torch.where(torch.rand(B, T, generator=gs) < 0.25, filler, body)
        pos = torch.arange(T)
        inside = (pos > 0) & (pos < lengths[:, None] - 1)
        tokens[inside] = body[inside]
        tokens[:, 0] = BOS
        tokens[torch.arange(B), lengths - 1] = EOT
        if slow and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000)   # a slow input pipeline
        return images, tokens, lengths

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"clip-rank{rank}.json"))

    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    step_ms = []
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            with record_function("data"):
                images, tokens, lengths = batch_for(step)
            opt.zero_grad(set_to_none=True)
            img, txt, scale = model(images, tokens, lengths)      # image_tower, text_tower
            with record_function("gather"):
                all_img = gather(img, args.gather)
                all_txt = gather(txt, args.gather)
            with record_function("loss"):
                loss = contrastive_loss(img, txt, all_img, all_txt, scale, rank, args.local_loss)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
            step_ms.append((time.perf_counter() - ts) * 1000)   # before prof.step(): it exports at the end
            prof.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} scale {scale.item():.2f} "
                      f"text {tokens.shape[1]} tokens ({step_ms[-1]:.0f} ms)", flush=True)

    # a check that the replicas are still the same (DDP and the gather's backward are right)
    with torch.no_grad():
        flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        spread = (hi - lo).abs().max().item()
    if rank == 0:
        active = step_ms[2:]
        print(f"done in {time.perf_counter() - t0:.1f}s, mean step over the {len(active)} active steps "
              f"{sum(active) / len(active):.1f} ms (median {sorted(active)[len(active) // 2]:.1f} ms), "
              f"max parameter spread across ranks {spread:.2e}, "
              f"traces in {args.out}", flush=True)
    dist.barrier()
    # Give gloo's worker thread a moment to release the last collectives before the process group
    # is torn down: it needs the GIL to drop their tensors, and the group's destructor (run with
    # the GIL held, here or when DDP's reducer goes) waits for that thread, so without this pause
    # the end deadlocks now and then (seen in about 1 run in 10 on a busy machine, torch 2.13).
    time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
