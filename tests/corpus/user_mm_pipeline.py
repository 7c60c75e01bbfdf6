"""A small LLaVA-style vision-language model trained with a hand-written 4-stage pipeline.

(calibration table at the end of this docstring)

What it is
----------
A toy LLaVA: a ViT-style image encoder, an MLP projector into the language model's width,
and a decoder-only causal LM, trained on 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``) as a 4-stage pipeline, one stage a rank, placed the way Megatron places
a multimodal model:

* stage 0: the vision encoder (patch embedding by a ``Conv2d`` with kernel = stride =
  ``--patch``, learned patch positions, ``--vision-layers`` pre-norm bidirectional transformer
  blocks, a final LayerNorm), the projector (Linear -> GELU -> Linear, vision width -> LM
  width), the token embedding + learned positions, and its ``--lm-layers`` LM blocks. The
  image tokens of a sample (``--images`` images x (image/patch)^2 patches each) are put
  *before* its text tokens;
* stages 1 and 2: ``--lm-layers`` LM blocks each;
* stage 3: its LM blocks, the final LayerNorm, the LM head and the loss: next-token cross
  entropy on the text positions only (the image positions carry no loss).

LM blocks: pre-norm, causal multi-head attention through ``F.scaled_dot_product_attention``
over the whole (image + text) sequence, GELU MLP (4x).

Schedule: ``--schedule 1f1b`` (default): the non-interleaved 1F1B schedule as Megatron's
``forward_backward_pipelining_without_interleaving`` runs it over ``--micro-batches`` (6)
micro-batches: stage s does ``min(3 - s, M)`` warm-up forwards, then one forward + one
backward in the steady phase, then the cool-down backwards. ``--schedule gpipe``: all
forwards, then all backwards. A forward step: ``recv_forward`` (stage > 0: the
(mb, S, dim) activation from stage s-1), ``forward_step`` (on stage 0 with
``vision_encoder`` inside), ``send_forward`` (to stage s+1). A backward step:
``recv_backward`` (stage < 3: the gradient of the output from stage s+1), ``backward_step``,
``send_backward`` (the input's gradient to stage s-1). Messages go by ``dist.isend`` /
``dist.irecv`` (receives waited at once, sends waited at the end of the schedule,
``wait_sends``); ``--batched-p2p`` posts each of them as a one-op ``dist.batch_isend_irecv``
of ``P2POp``. Tags: 2 x micro-batch (+1 for gradients).

Then every stage clips its own gradients and steps its own AdamW (``optimizer``); with
``--freeze-vision`` the vision encoder has no gradients, runs under ``torch.no_grad()`` and is
not in the optimizer (the projector still trains). A 2-float all_reduce (loss sum,
micro-batches; only stage 3 contributes) gives the logged loss (``log_metrics``).

Data: synthetic captioned images: each sample has a class (of 16); its images are the class's
colour/stripe template plus noise, randomly flipped (the "decode + augmentation", done by
stage 0 only, ``decode_images``), and its caption is the class's phrase of tokens with a few
random tokens. Everything is drawn from (seed, step, micro-batch), so stage 0 makes the
images and tokens and stage 3 the same targets without any message; stages 1-2 only need
the step's sequence length.

Communication per step (defaults: 2 images of 32x32 with patch 8 = 32 image tokens + 64 text
tokens = 96 positions, mb 2, dim 128, 6 micro-batches): per micro-batch one activation
(2 x 96 x 128 floats, 96 KB) on each link s -> s+1 and one gradient of the same size on each
link s+1 -> s, then the 2-float all_reduce.

User ranges per step: ``sleep`` (fault only), ``load_batch`` (``decode_images`` inside on
stage 0 or with the decode fault), ``pipeline_schedule`` [``recv_forward``, ``forward_step``
(``vision_encoder`` inside on stage 0, ``loss`` on stage 3), ``send_forward``,
``recv_backward``, ``backward_step``, ``send_backward``, ``wait_sends``], ``optimizer``,
``log_metrics``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in receives,
send waits and the all_reduce).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (6; 4 traced, which keeps stage 0's trace under
~15 MB), ``--seed``, ``--shapes``.

Model / job size: ``--image-size`` (32), ``--patch`` (8), ``--images`` (2 a sample),
``--vision-dim`` (64), ``--vision-layers`` (1), ``--dim`` (128), ``--heads`` (4),
``--lm-layers`` (2 a stage), ``--vocab`` (512), ``--text-len`` (64), ``--micro-batch-size``
(2), ``--micro-batches`` (6), ``--schedule {1f1b,gpipe}``, ``--batched-p2p``,
``--freeze-vision``, ``--lr`` (1e-3).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the stage's LM blocks run F times in every forward step
  (F - 1 extra passes on a detached copy of the input, kept) and, in the backward step, the
  extra passes are back-propagated too (``autograd.grad`` to their input and the block
  weights, discarded); the fractional part over that fraction of the micro-batch's rows;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow data loader: ``load_batch`` sleeps MS each step;
* ``--decode-sleep-ms MS`` (family fault): a slow image decode / augmentation: the rank's
  ``decode_images`` sleeps MS each step (stage 0 decodes the images; any other rank sleeps
  in a ``decode_images`` range at the same place of its ``load_batch``);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (adjacent stages): every activation (B = A+1)
  or gradient (B = A-1) message A sends to B carries X times the bytes (zero-padded in the
  same message; B receives it all and keeps the head). No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each step one multiplier lognormal(0, S) (from (seed, step), clamped to
  [1/4, 4], the same on every stage) scales the caption length and the image count of the
  step's samples: the step's sequence length changes from step to step;
* ``--big-rank K --big X``: stage K holds round(X x ``--lm-layers``) LM blocks, the others
  ``--lm-layers``.

Calibration
-----------
2-core box shared with other helpers' jobs (the load moved a healthy step between ~310 and
~500 ms from one run to the next); 4 ranks, defaults unless named, one run each, run one
after the other. Step medians of all ranks agree within ~1% (the pipeline ties them), so one
number; "busy" = median time outside the receives, send waits and the all_reduce, slow rank vs
the others. Healthy, stage 0 (vision + embeddings) and stage 3 (head + loss) are busier than
stages 1-2 by 30-100 ms.

  setting (slow rank)                              step ms   busy slow / others ms
  healthy default (3 runs, by load)                309-498   r0 176-316, r1 117-267, r2 126-230, r3 166-258
  healthy --image-size 48 --shapes --steps 5         ~1000   r0 421, r1 368, r2 391, r3 568 (shapes, load)
  healthy --freeze-vision --image-size 64 --patch 16   778   r0 385, r1 231, r2 294, r3 344
  healthy gpipe --batched-p2p --micro-batches 4        515   r0 256, r1 179, r2 177, r3 185
  healthy --patch 4 --images 1 --vision-layers 2
          --freeze-vision                              766   r0 495, r1 300, r2 453, r3 445
  --factor 3 (r0) --steps 5                            360   338 / 121-160
  --freeze-vision --factor 3 (r1)                      380   273 / 145-183
  gpipe --factor 3 (r2)                                541   370 / 145-187
  --batched-p2p --factor 2.5 (r3)                      428   299 / 121-169
  --sleep-ms 200 (r2)                                  474   323 / 116-166
  --data-sleep-ms 200 (r3)                             524   382 / 144-180
  --decode-sleep-ms 200 (r0)                           564   422 / 149-189
  --hog (r1)                                           496   262 / r0 261, r2 160, r3 195
  link 1->2 x512 (48 MB activation messages)           961   r1 491 (padding copies) / 141-263
  --seq-sigma 0.8                                     1300   r0 619, r1 422, r2 416, r3 847 (seq 48-384)
  --big-rank 3 --big 3 (6 blocks on stage 3)           720   r3 590 / 184-330

Reading: every fault puts 150-250 ms (40-60% of a step) on the slowed stage's busy time; the
others wait for it in their receives, so the step grows for all. ``--factor 3`` adds two
forward+backward passes of the stage's blocks (not of stage 0's vision encoder or stage 3's
head). The hog costs its rank less (~+100 ms against its healthy self; on stage 1 it brings
it up to stage 0's level). A padded link is cheap until the messages are tens of MB: at x512
each 1->2 activation is 48 MB and the step doubles, the sender paying the padding copies
and everyone downstream waiting in ``recv_forward``. Wall per run 12-20 s; traces 4-12 MB
a rank (stage 0 the largest; 14-16 MB with --shapes, with --factor 3 on stage 0 or with
3x the blocks on a stage, which is why those runs use --steps 5).
"""

import argparse
import json
import math
import os
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
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--patch", type=int, default=8)
    p.add_argument("--images", type=int, default=2, help="images a sample")
    p.add_argument("--vision-dim", type=int, default=64)
    p.add_argument("--vision-layers", type=int, default=1)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lm-layers", type=int, default=2, help="LM blocks a stage")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--text-len", type=int, default=64)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--micro-batches", type=int, default=6)
    p.add_argument("--schedule", choices=["1f1b", "gpipe"], default="1f1b")
    p.add_argument("--batched-p2p", action="store_true")
    p.add_argument("--freeze-vision", action="store_true")
    p.add_argument("--lr", type=float, default=1e-3)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--decode-sleep-ms", type=float, default=0.0)
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
        p.error("pipeline stages only talk to their neighbours (|src - dst| == 1)")
    if a.image_size % a.patch:
        p.error("--image-size must be a multiple of --patch")
    return a


# --------------------------------------------------------------------------
# point-to-point between stages
# --------------------------------------------------------------------------

class P2P:
    """isend/irecv (or one-op batch_isend_irecv) to the neighbours; pads one link with --link-*."""

    def __init__(self, rank, batched, link=None, link_factor=1.0):
        self.rank, self.batched = rank, batched
        self.link, self.link_factor = link, link_factor
        self.pending = []
        self.secs = 0.0

    def _size(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def send(self, t, dst, tag):
        flat = t.detach().reshape(-1)
        n = self._size(flat.numel(), self.rank, dst)
        if n == flat.numel():
            buf = flat.clone()
        else:
            buf = torch.zeros(n)
            buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        if self.batched:
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, buf, dst, tag=tag)])
        else:
            works = [dist.isend(buf, dst, tag=tag)]
        self.pending.append((works, buf))
        self.secs += time.perf_counter() - t0

    def recv(self, shape, src, tag):
        numel = math.prod(shape)
        buf = torch.empty(self._size(numel, src, self.rank))
        t0 = time.perf_counter()
        if self.batched:
            works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf, src, tag=tag)])
        else:
            works = [dist.irecv(buf, src, tag=tag)]
        for w in works:
            w.wait()
        self.secs += time.perf_counter() - t0
        return buf[:numel].view(shape).clone()

    def wait_sends(self):
        t0 = time.perf_counter()
        for works, _ in self.pending:
            for w in works:
                w.wait()
        self.pending.clear()
        self.secs += time.perf_counter() - t0


# --------------------------------------------------------------------------
# model pieces
# --------------------------------------------------------------------------

class Block(nn.Module):
    """Pre-norm transformer block; causal for the LM, bidirectional for the vision encoder."""

    def __init__(self, dim, heads, causal):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class VisionEncoder(nn.Module):
    def __init__(self, image_size, patch, vdim, layers, heads):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, vdim, kernel_size=patch, stride=patch)
        self.pos = nn.Parameter(torch.randn((image_size // patch) ** 2, vdim) * 0.02)
        self.blocks = nn.ModuleList(Block(vdim, heads, causal=False) for _ in range(layers))
        self.ln = nn.LayerNorm(vdim)

    def forward(self, images):                      # (N, 3, H, W) -> (N, P, vdim)
        x = self.patch_embed(images).flatten(2).transpose(1, 2) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x)


class Stage(nn.Module):
    def __init__(self, args, stage, n_stages, n_blocks, max_len):
        super().__init__()
        self.stage, self.first, self.last = stage, stage == 0, stage == n_stages - 1
        if self.first:
            self.vision = VisionEncoder(args.image_size, args.patch, args.vision_dim,
                                        args.vision_layers, max(1, args.heads // 2))
            self.projector = nn.Sequential(nn.Linear(args.vision_dim, args.dim), nn.GELU(),
                                           nn.Linear(args.dim, args.dim))
            self.tok = nn.Embedding(args.vocab, args.dim)
            self.pos = nn.Parameter(torch.randn(max_len, args.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(args.dim, args.heads, causal=True) for _ in range(n_blocks))
        if self.last:
            self.ln_f = nn.LayerNorm(args.dim)
            self.head = nn.Linear(args.dim, args.vocab, bias=False)

    def embed(self, images, tokens, frozen_vision):
        """images (mb, n_img, 3, H, W), tokens (mb, T) -> (mb, n_img * P + T, dim)."""
        mb, n_img = images.shape[:2]
        with record_function("vision_encoder"):
            if frozen_vision:
                with torch.no_grad():
                    feats = self.vision(images.flatten(0, 1))
            else:
                feats = self.vision(images.flatten(0, 1))
            img_tok = self.projector(feats).reshape(mb, -1, self.tok.embedding_dim)
        x = torch.cat([img_tok, self.tok(tokens)], 1)
        return x + self.pos[: x.shape[1]]

    def run_blocks(self, x):
        for blk in self.blocks:
            x = blk(x)
        return x

    def loss(self, x, targets, n_img_tok):
        h = self.ln_f(x[:, n_img_tok:-1])          # text positions predicting the next text token
        logits = self.head(h)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets[:, 1:].reshape(-1))


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

N_CLASSES = 16


def step_shape(args, step):
    """(images a sample, caption length) of this step, the same on every stage."""
    n_img, text = args.images, args.text_len
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        m = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        m = min(4.0, max(0.25, m))
        n_img = max(1, int(round(args.images * m)))
        text = max(8, int(round(args.text_len * m)))
    return n_img, text


class SyntheticCaptions:
    def __init__(self, args):
        g = torch.Generator().manual_seed(args.seed + 12345)
        self.args = args
        self.templates = torch.rand(N_CLASSES, 3, args.image_size, args.image_size, generator=g)
        stripes = (torch.arange(args.image_size) // 4 % 2).float()
        self.templates[::2] *= stripes.view(1, 1, 1, -1)
        self.templates[1::2] *= stripes.view(1, 1, -1, 1)
        self.phrases = torch.randint(0, args.vocab, (N_CLASSES, 4 * args.text_len), generator=g)

    def tokens(self, step, mb_idx, text_len):
        g = torch.Generator().manual_seed(self.args.seed * 7919 + step * 101 + mb_idx)
        cls = torch.randint(0, N_CLASSES, (self.args.micro_batch_size,), generator=g)
        toks = self.phrases[cls, :text_len].clone()
        noise = torch.rand(toks.shape, generator=g) < 0.1
        toks[noise] = torch.randint(0, self.args.vocab, (int(noise.sum()),), generator=g)
        return cls, toks

    def images(self, step, mb_idx, cls, n_img):
        """Decode + augment: template + noise, random horizontal flip, normalised."""
        g = torch.Generator().manual_seed(self.args.seed * 3571 + step * 103 + mb_idx)
        imgs = self.templates[cls].unsqueeze(1).repeat(1, n_img, 1, 1, 1)
        imgs = imgs + 0.3 * torch.randn(imgs.shape, generator=g)
        flip = torch.rand(imgs.shape[:2], generator=g) < 0.5
        imgs = torch.where(flip.view(*flip.shape, 1, 1, 1), imgs.flip(-1), imgs)
        return (imgs - 0.5) / 0.3


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
    first, last = rank == 0, rank == world - 1
    slow = rank == args.slow_rank

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    p2p = P2P(rank, args.batched_p2p, link, args.link_factor)

    n_patches = (args.image_size // args.patch) ** 2
    max_len = 4 * (args.images * n_patches + args.text_len) + 8
    n_blocks = args.lm_layers
    if rank == args.big_rank:
        n_blocks = max(1, int(round(args.lm_layers * args.big)))
    torch.manual_seed(args.seed * 31 + rank)
    model = Stage(args, rank, world, n_blocks, max_len)
    if first and args.freeze_vision:
        for q in model.vision.parameters():
            q.requires_grad_(False)
    params = [q for q in model.parameters() if q.requires_grad]
    block_params = [q for q in model.blocks.parameters()]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    data = SyntheticCaptions(args)
    log_path = os.path.join(tempfile.gettempdir(), f"mm_pipeline_{os.getpid()}_rank{rank}.jsonl")

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if first:
        print(f"[mm-pipeline] world={world} schedule={args.schedule} M={args.micro_batches} "
              f"mb={args.micro_batch_size} image={args.image_size}/{args.patch} ({n_patches} patches) "
              f"images={args.images} text={args.text_len} dim={args.dim} blocks/stage={args.lm_layers} "
              f"freeze_vision={args.freeze_vision} batched_p2p={args.batched_p2p} "
              f"params(stage0)={sum(q.numel() for q in model.parameters())}", flush=True)

    def extra_forward(x):
        """--factor: the stage's blocks again on a detached copy (kept for the extra backward)."""
        outs = []
        n_full = int(extra)
        rows = int(round(x.shape[0] * (extra - n_full)))
        for i in range(n_full + (1 if rows > 0 else 0)):
            xe = (x if i < n_full else x[:rows]).detach().requires_grad_(True)
            outs.append((xe, model.run_blocks(xe)))
        return outs

    def extra_backward(outs, grad):
        for xe, ye in outs:
            torch.autograd.grad(ye, [xe] + block_params, grad[: ye.shape[0]], allow_unused=True)

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
                p2p.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    n_img, text_len = step_shape(args, step)
                    n_img_tok = n_img * n_patches
                    S = n_img_tok + text_len
                    act_shape = (args.micro_batch_size, S, args.dim)
                    batches = []
                    if first or last:
                        for i in range(M):
                            cls, toks = data.tokens(step, i, text_len)
                            batches.append([cls, toks, None])
                    if first or (slow and args.decode_sleep_ms > 0):
                        with record_function("decode_images"):
                            if slow and args.decode_sleep_ms > 0:
                                time.sleep(args.decode_sleep_ms / 1000.0)
                            if first:
                                for i in range(M):
                                    batches[i][2] = data.images(step, i, batches[i][0], n_img)

                inputs, outputs, extras = [None] * M, [None] * M, [None] * M
                losses = []

                def forward_one(i):
                    if first:
                        x = None
                    else:
                        with record_function("recv_forward"):
                            x = p2p.recv(act_shape, rank - 1, tag=2 * i).requires_grad_(True)
                    with record_function("forward_step"):
                        if first:
                            _, toks, imgs = batches[i]
                            h = model.embed(imgs, toks, args.freeze_vision)
                            x_in = h
                        else:
                            x_in = x
                        y = model.run_blocks(x_in)
                        if extra > 0:
                            extras[i] = extra_forward(x_in)
                        if last:
                            with record_function("loss"):
                                y = model.loss(y, batches[i][1], n_img_tok) / M
                            losses.append(y.detach())
                    inputs[i], outputs[i] = x, y
                    if not last:
                        with record_function("send_forward"):
                            p2p.send(y, rank + 1, tag=2 * i)

                def backward_one(i):
                    if last:
                        g = None
                    else:
                        with record_function("recv_backward"):
                            g = p2p.recv(act_shape, rank + 1, tag=2 * i + 1)
                    with record_function("backward_step"):
                        if extras[i]:
                            eg = g if g is not None else torch.randn(act_shape) * 1e-3
                            extra_backward(extras[i], eg)
                        torch.autograd.backward(outputs[i], g)
                    if not first:
                        with record_function("send_backward"):
                            p2p.send(inputs[i].grad, rank - 1, tag=2 * i + 1)
                    inputs[i] = outputs[i] = extras[i] = None

                with record_function("pipeline_schedule"):
                    opt.zero_grad(set_to_none=False)
                    if args.schedule == "gpipe":
                        for i in range(M):
                            forward_one(i)
                        for i in range(M):
                            backward_one(i)
                    else:
                        warm = min(world - rank - 1, M)
                        for i in range(warm):
                            forward_one(i)
                        for j in range(M - warm):
                            forward_one(warm + j)
                            backward_one(j)
                        for j in range(M - warm, M):
                            backward_one(j)
                    with record_function("wait_sends"):
                        p2p.wait_sends()

                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()

                with record_function("log_metrics"):
                    m = torch.tensor([float(sum(losses)) if last else 0.0, float(M) if last else 0.0])
                    t1 = time.perf_counter()
                    dist.all_reduce(m)
                    p2p.secs += time.perf_counter() - t1
                    with open(log_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "stage": rank, "seq": S, "images": n_img,
                                             "grad_norm": float(gnorm)}) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - p2p.secs)
                if first:
                    print(f"step {step:3d} loss {m[0].item():.4f} seq {S} ({n_img} images, {text_len} text) "
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
    if first:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside p2p waits and the all_reduce) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    try:
        os.remove(log_path)
    except OSError:
        pass
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
