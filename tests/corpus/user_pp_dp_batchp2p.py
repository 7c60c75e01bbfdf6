"""A small GPT LM trained PP2 x DP2 with a hand-written 1F1B schedule and Megatron-style batched p2p.

(calibration table at the end of this docstring)

What it is
----------
A small pre-norm causal transformer LM trained on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``) in two pipelines of two stages:

* pipeline 0 = ranks {0, 1} (stage 0 on rank 0, stage 1 on rank 1), pipeline 1 = ranks {2, 3};
* data-parallel groups {0, 2} (the two stage-0 replicas) and {1, 3} (the two stage-1 replicas),
  all four groups made with ``dist.new_group``.

Stage 0 holds the token + position embeddings and the first half of the ``--layers`` blocks,
stage 1 the second half, the final LayerNorm and the LM head (untied) with the cross entropy.
A block: LayerNorm -> causal multi-head attention (``--heads``, hand-written, a fused qkv
Linear + ``scaled_dot_product_attention(is_causal=True)``) -> residual, LayerNorm -> MLP (4x,
GELU) -> residual.

Activations and their gradients move between the stages the way Megatron-core's
``p2p_communication`` does it: each exchange builds a list of ``dist.P2POp`` (isend / irecv,
peer = the global rank of the neighbour stage, group = the pipeline group), hands it to
``dist.batch_isend_irecv`` and waits on all the returned requests. The schedule is Megatron's
1F1B ("forward_backward_pipelining_without_interleaving"): stage 0 runs one warm-up forward
(``send_forward``), then in the steady state each forward is followed by
``send_forward_recv_backward`` (the activation send to the next stage and the gradient receive
from it posted together in one batch), the backward, and for the last stage
``send_backward_recv_forward`` (gradient send to stage 0 + next activation receive together);
the cool-down is ``recv_backward`` + backward on stage 0. Micro-batches: ``--micro-batches``
(8) of ``--mb-size`` (2) sequences of ``--seq-len`` (128) tokens.

After the pipeline flush each stage's gradients are averaged over its DP group (two ranks) in
``--buckets`` (3) hand-made flat buckets (concatenated grads, ``all_reduce``, divided, copied
back), then AdamW steps. The last stage's mean loss is all-reduced in its DP group {1, 3} for
the log line. Every ``--eval-every`` (4) steps an evaluation forward of ``--eval-mbs`` (2)
held-out micro-batches runs through the pipeline (no grad; activations sent by the same
batched p2p). Every step each rank writes a checkpoint shard (its stage's parameters, numpy)
into a temporary directory.

Data: synthetic token streams made of repeated random "phrases" (something to learn); each
replica's micro-batches are drawn from (seed, pipeline, step), so both stages of a pipeline
see the same tokens (stage 0 the inputs, stage 1 the targets).

Communication per step (defaults, dim 128, 8 micro-batches of 2 x 128 tokens): on each
pipeline 8 activation messages (128 KB each) stage 0 -> 1 and 8 gradient messages back, by
``batch_isend_irecv`` (1 + 7 + 0 batches on stage 0: send_forward, 7 send_forward_recv_backward,
1 recv_backward ...), 3 bucket ``all_reduce``s per DP group (~0.4 M floats per stage), one
1-float loss ``all_reduce`` in {1, 3}; every 4th step 2 more activation messages.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``forward_step`` /
``backward_step`` per micro-batch, ``p2p`` (each batched exchange and its wait),
``dp_allreduce``, ``optimizer``, ``loss_allreduce``, ``save_shard``, every few steps
``evaluate`` (with its own ``forward_step`` and ``p2p``).

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the p2p
exchanges and the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (4, split evenly), ``--dim`` (128), ``--heads`` (4),
``--vocab`` (512), ``--seq-len`` (128), ``--mb-size`` (2), ``--micro-batches`` (8),
``--buckets`` (3), ``--lr`` (1e-3), ``--eval-every`` (4), ``--eval-mbs`` (2).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F`` (integer): a slower device: the rank's stage forward of every micro-batch is
  run F - 1 extra times without grad and its backward F - 1 extra times
  (``autograd.grad`` over the retained graph), the extra results discarded;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow batch read: ``load_batch`` sleeps MS each step;
* ``--shard-sleep-ms MS`` (family fault): a slow checkpoint-shard write: the rank's
  ``save_shard`` sleeps MS each step (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B the two stages of one pipeline, e.g.
  0 -> 1 activations or 3 -> 2 gradients): every message A sends to B carries X times the
  bytes (zero-padded in the same message; B receives it all and keeps the head), eval
  activations included. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each replica's sequence length of the step is ``seq_len`` times
  lognormal(0, S), drawn from (seed, pipeline, step), clamped to [1/4x, 4x] and rounded to 8
  (the same for both stages of a replica, so the two pipelines differ step by step);
* ``--big-rank K --big X``: rank K's replica (its whole pipeline) gets X times the tokens
  (X times the sequence length) every step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs; 4 ranks, 10 steps (8 timed) unless
said; 2 layers (1 a stage), dim 128, 8 micro-batches of 2 x 128. The pipelines and the DP
all_reduces tie all ranks, so the step medians agree within a few %: one number. "busy" =
median time outside the p2p exchanges and all_reduces, slowed rank vs the others.

  setting (slow rank)                        base ms  step ms  change   busy slow / others ms
  healthy default                               -     186-277     -      109-175 (by load)
  healthy --shapes --steps 8                   277      270       -      157-195
  --factor 3 (r1)                              190      272     +43%     224 / 94-117
  --factor 3 (r0)                              190      253     +33%     219 / 112-121
  --sleep-ms 150 (r2)                          190      504    (load)    333 / 176-257
  --shard-sleep-ms 150 (r0)                    277      492     +78%     373 / 170-210
  --hog (r3)                                   277      603    +118%     431 / 105-258
  link 0->1 x64 (8 MB messages)                190      198      +4%     r0 109 / 108-118
  link 0->1 x512 (64 MB messages)              190      727    +280%     r0 187, r1 244 / 233-288
  --big-rank 3 --big 3 (pipeline {2,3})        277      890    +220%     r2 570, r3 700 / 227-232
  first draft, 4 layers (2 a stage)             -       745       -      444-525
  re-runs of battery settings (after it, one sitting; base = default seed 11221):
  healthy default                               -       361       -      202-236
  healthy --micro-batches 6 --dim 160 --buckets 2 -     270       -      126-165
  --micro-batches 6 --factor 4 (r2)            361      300    (load)    231 / 115-120
  --dim 160 --factor 3 (r3)                    361      537     +49%     467 / 187-254
  --data-sleep-ms 150 (r3)                     361      325    (load)    271 / 109-119
  --hog (r1)                                   361      370      +2%     204 / 138-165 (weakest)
  --seq-sigma 0.8                              361      723   (longer)   181-218 (T 32-512 by replica/step)

Reading: a healthy step was 186-277 ms depending on the neighbours' load, ~40% of it waiting
in p2p / all_reduce (the 1F1B bubble and the DP sync). ``--factor 3`` adds two tiled extra
forwards and backwards (one pass over 2x the rows each), ~100 ms busy on the slowed rank =
35-45% of its step; its pipeline partner and the other replica wait in ``p2p`` /
``dp_allreduce``. A 150 ms sleep is 30-60% of a step. A padded link costs little at 8 MB
messages; at 64 MB (x512) the 16 transfers a step dominate and every rank waits. The extra
backward passes add autograd ops: the factor runs trace 7 steps (5 traced) to stay < 15 MB
(8 traced steps gave 18-20 MB); default traces ~10 MB (stage 0) / 11 MB (stage 1), 11.4 /
12.9 MB with ``--shapes --steps 8``. Wall per run 12-25 s.
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
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--mb-size", type=int, default=2)
    p.add_argument("--micro-batches", type=int, default=8)
    p.add_argument("--buckets", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=4)
    p.add_argument("--eval-mbs", type=int, default=2)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=int, default=1)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--shard-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and (a.link_src // 2 != a.link_dst // 2 or a.link_src == a.link_dst):
        p.error("a link joins the two stages of one pipeline ({0,1} or {2,3})")
    return a


# --------------------------------------------------------------------------
# pipeline p2p, Megatron style (P2POp lists + batch_isend_irecv)
# --------------------------------------------------------------------------

class P2P:
    def __init__(self, rank, prev_rank, next_rank, group, link, link_factor):
        self.rank, self.prev, self.next, self.group = rank, prev_rank, next_rank, group
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0
        self.bufs = {}

    def _n(self, numel, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(numel, int(round(numel * self.link_factor)))
        return numel

    def _buf(self, key, n):
        b = self.bufs.get(key)
        if b is None or b.numel() != n:
            b = self.bufs[key] = torch.zeros(n)
        return b

    def communicate(self, send_next=None, send_prev=None, recv_prev_shape=None, recv_next_shape=None):
        """One batched exchange; returns (from_prev, from_next)."""
        with record_function("p2p"):
            t0 = time.perf_counter()
            ops, recvs = [], {}
            if send_prev is not None:
                flat = send_prev.detach().reshape(-1)
                b = self._buf(("sp",), self._n(flat.numel(), self.rank, self.prev))
                b[: flat.numel()].copy_(flat)
                ops.append(dist.P2POp(dist.isend, b, self.prev, self.group))
            if recv_prev_shape is not None:
                numel = math.prod(recv_prev_shape)
                b = self._buf(("rp",), self._n(numel, self.prev, self.rank))
                ops.append(dist.P2POp(dist.irecv, b, self.prev, self.group))
                recvs["prev"] = (b, numel, recv_prev_shape)
            if send_next is not None:
                flat = send_next.detach().reshape(-1)
                b = self._buf(("sn",), self._n(flat.numel(), self.rank, self.next))
                b[: flat.numel()].copy_(flat)
                ops.append(dist.P2POp(dist.isend, b, self.next, self.group))
            if recv_next_shape is not None:
                numel = math.prod(recv_next_shape)
                b = self._buf(("rn",), self._n(numel, self.next, self.rank))
                ops.append(dist.P2POp(dist.irecv, b, self.next, self.group))
                recvs["next"] = (b, numel, recv_next_shape)
            if ops:
                for req in dist.batch_isend_irecv(ops):
                    req.wait()
            out = []
            for k in ("prev", "next"):
                if k in recvs:
                    b, numel, shape = recvs[k]
                    out.append(b[:numel].view(shape).clone())
                else:
                    out.append(None)
            self.secs += time.perf_counter() - t0
            return out[0], out[1]


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Stage(nn.Module):
    def __init__(self, stage, args):
        super().__init__()
        self.first, self.last = stage == 0, stage == 1
        n = args.layers // 2 if stage == 0 else args.layers - args.layers // 2
        if self.first:
            self.tok = nn.Embedding(args.vocab, args.dim)
            self.pos = nn.Embedding(4 * args.seq_len * max(1, int(math.ceil(args.big))), args.dim)
        self.blocks = nn.ModuleList(Block(args.dim, args.heads) for _ in range(n))
        if self.last:
            self.ln_f = nn.LayerNorm(args.dim)
            self.head = nn.Linear(args.dim, args.vocab, bias=False)

    def forward(self, x, targets=None):
        if self.first:
            T = x.shape[1]
            x = self.tok(x) + self.pos(torch.arange(T))
        for blk in self.blocks:
            x = blk(x)
        if self.last:
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return x


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_phrases(vocab, seed, n_phrases=2000, phrase_len=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)


def seq_len_of(args, pipe, step):
    n = args.seq_len
    if args.big_rank >= 0 and pipe == args.big_rank // 2:
        n = n * args.big
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + pipe * 10_007 + step)
        z = torch.randn((), generator=g, dtype=torch.float64).item()
        n = n * min(4.0, max(0.25, math.exp(args.seq_sigma * z)))
    return max(8, int(round(n / 8)) * 8)


def make_batch(phrases, args, pipe, step, T, n_mb, salt=0):
    g = torch.Generator().manual_seed(args.seed * 7919 + pipe * 104_729 + step * 31 + salt)
    P, L = phrases.shape
    k = (T + 1 + L - 1) // L
    idx = torch.randint(0, P, (n_mb * args.mb_size, k), generator=g)
    rows = phrases[idx].reshape(n_mb * args.mb_size, -1)[:, : T + 1]
    rows = rows.view(n_mb, args.mb_size, T + 1)
    return [(r[:, :-1].contiguous(), r[:, 1:].contiguous()) for r in rows]


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
        raise SystemExit("this job is PP2 x DP2: 4 ranks")
    pipe, stage = rank // 2, rank % 2
    slow = rank == args.slow_rank

    pp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    pp_group, dp_group = pp_groups[pipe], dp_groups[stage]
    first, last = stage == 0, stage == 1
    prev_rank = rank - 1 if not first else None
    next_rank = rank + 1 if not last else None

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    p2p = P2P(rank, prev_rank, next_rank, pp_group, link, args.link_factor)
    coll_secs = [0.0]

    def all_reduce(t, group):
        t0 = time.perf_counter()
        dist.all_reduce(t, group=group)
        coll_secs[0] += time.perf_counter() - t0
        return t

    torch.manual_seed(args.seed * 10 + stage)      # both replicas of a stage start equal
    model = Stage(stage, args)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    n_params = sum(q.numel() for q in params)

    # flat gradient buckets, in reverse parameter order (as backward produces them)
    per = int(math.ceil(n_params / max(1, args.buckets)))
    buckets, cur, cur_n = [], [], 0
    for q in reversed(params):
        cur.append(q)
        cur_n += q.numel()
        if cur_n >= per:
            buckets.append(cur)
            cur, cur_n = [], 0
    if cur:
        buckets.append(cur)

    phrases = make_phrases(args.vocab, args.seed)
    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="pp_dp_ckpt_")
    dist.broadcast_object_list(tmp, src=0)
    ckpt_dir = tmp[0]

    extra = max(0, args.factor - 1) if slow else 0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[pp-dp] PP2xDP2 layers={args.layers} dim={args.dim} heads={args.heads} vocab={args.vocab} "
              f"seq={args.seq_len} mb={args.mb_size}x{args.micro_batches} stage0_params={n_params} "
              f"buckets={len(buckets)}", flush=True)

    def forward_step(inp, targets):
        """The stage forward; on a slower device (--factor) the same work again, discarded."""
        with record_function("forward_step"):
            if first:
                out = model(inp)
            else:
                out = model(inp, targets)
            shadow = None
            if extra:                          # F - 1 more passes, the rows tiled into one batch
                xi = inp.detach().repeat(extra, *([1] * (inp.dim() - 1)))
                if not first:
                    xi.requires_grad_()
                shadow = (model(xi, targets.repeat(extra, 1)) if last else model(xi), xi)
        return out, shadow

    def backward_step(inp, out, grad_out, shadow=None):
        with record_function("backward_step"):
            if shadow is not None:             # the extra backward passes, results discarded
                ex, xi = shadow
                leaves = params + ([xi] if xi.requires_grad else [])
                g = None if grad_out is None else grad_out.repeat(extra, 1, 1)
                torch.autograd.grad(ex, leaves, grad_outputs=g, allow_unused=True)
            torch.autograd.backward(out, grad_tensors=grad_out)
            return inp.grad if (inp is not None and inp.requires_grad) else None

    def run_1f1b(mbs, T):
        M = len(mbs)
        shape = (args.mb_size, T, args.dim)
        warmup = min(1 - stage, M)            # num_stages - stage - 1
        remaining = M - warmup
        inputs, outputs, shadows, losses = [], [], [], []

        def recv_forward():
            if first:
                return None
            x, _ = p2p.communicate(recv_prev_shape=shape)
            return x.requires_grad_()

        def stage_input(i, x):
            return mbs[i][0] if first else x

        fi = 0
        for _ in range(warmup):
            x = recv_forward()
            inp = stage_input(fi, x)
            out, sh = forward_step(inp, mbs[fi][1])
            if not last:
                p2p.communicate(send_next=out)
            inputs.append(x)
            outputs.append(out)
            shadows.append(sh)
            fi += 1
        x = recv_forward() if remaining > 0 else None
        bi = 0
        for i in range(remaining):
            inp = stage_input(fi, x)
            out, sh = forward_step(inp, mbs[fi][1])
            inputs.append(x)
            outputs.append(out)
            shadows.append(sh)
            fi += 1
            if last:
                losses.append(out.detach())
                grad_out = None
                out_b = outputs[bi] / M
            else:
                _, grad_out = p2p.communicate(send_next=out, recv_next_shape=shape)
                out_b = outputs[bi]
            in_grad = backward_step(inputs[bi], out_b, grad_out, shadows[bi])
            inputs[bi] = outputs[bi] = shadows[bi] = None
            bi += 1
            if i == remaining - 1:
                x = None
                if not first:
                    p2p.communicate(send_prev=in_grad)
            else:
                if first:
                    x = None
                else:
                    x, _ = p2p.communicate(send_prev=in_grad, recv_prev_shape=shape)
                    x.requires_grad_()
        for _ in range(warmup):                # cool-down
            _, grad_out = p2p.communicate(recv_next_shape=shape)
            in_grad = backward_step(inputs[bi], outputs[bi], grad_out, shadows[bi])
            inputs[bi] = outputs[bi] = shadows[bi] = None
            bi += 1
            if not first:
                p2p.communicate(send_prev=in_grad)
        return losses

    def evaluate(step, T):
        mbs = make_batch(phrases, args, pipe, step, T, args.eval_mbs, salt=999_983)
        shape = (args.mb_size, T, args.dim)
        losses = []
        with record_function("evaluate"), torch.no_grad():
            for tok, tgt in mbs:
                if first:
                    with record_function("forward_step"):
                        out = model(tok)
                    p2p.communicate(send_next=out)
                else:
                    x, _ = p2p.communicate(recv_prev_shape=shape)
                    with record_function("forward_step"):
                        losses.append(model(x, tgt).item())
        return statistics.mean(losses) if losses else None

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
                p2p.secs = 0.0
                coll_secs[0] = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    T = seq_len_of(args, pipe, step)
                    mbs = make_batch(phrases, args, pipe, step, T, args.micro_batches)

                opt.zero_grad(set_to_none=False)
                losses = run_1f1b(mbs, T)

                with record_function("dp_allreduce"):
                    for bk in buckets:
                        flat = torch.cat([q.grad.reshape(-1) for q in bk])
                        all_reduce(flat, dp_group)
                        flat /= 2
                        o = 0
                        for q in bk:
                            q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                            o += q.numel()
                with record_function("optimizer"):
                    torch.nn.utils.clip_grad_norm_(params, 1.0)
                    opt.step()

                mean_loss = None
                if last:
                    with record_function("loss_allreduce"):
                        lt = torch.stack(losses).mean().reshape(1)
                        all_reduce(lt, dp_group)
                        mean_loss = lt.item() / 2

                with record_function("save_shard"):
                    if slow and args.shard_sleep_ms > 0:
                        time.sleep(args.shard_sleep_ms / 1000.0)
                    flat = torch.cat([q.detach().reshape(-1) for q in params]).numpy()
                    np.save(os.path.join(ckpt_dir, f"shard_pp{pipe}_stage{stage}.npy"), flat)

                ev = None
                if args.eval_every > 0 and (step + 1) % args.eval_every == 0:
                    ev = evaluate(step, T)

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - p2p.secs - coll_secs[0])
                if rank == 1:
                    print(f"step {step:3d} loss {mean_loss:.4f} T {T} "
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
        print("median busy ms (outside p2p and all_reduces) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
