"""A pipeline-parallel GPT trained with a 1F1B schedule written by hand, as someone who read the
PipeDream-Flush and Megatron-LM papers writes one: no ``torch.distributed.pipelining``, no
megatron-core, just ``dist.new_group``, ``dist.isend``/``dist.irecv`` and autograd. CPUs and gloo.

The model is a small GPT: token and position embeddings, ``--layers`` pre-norm decoder blocks
(causal self-attention with ``scaled_dot_product_attention``, a GELU MLP ``W -> 4W -> W``,
residuals around both), a final LayerNorm, an LM head over 512 tokens and a cross-entropy loss.
Every rank builds the whole model from ``--seed`` and keeps its stage's part: the first stage
holds the embeddings and its blocks, the middle stages blocks only, the last stage its blocks,
the final norm, the head and the loss. The blocks are split evenly (``--layers`` over ``--pp``
stages, the first stages taking the remainder). The data are synthetic sequences that can be
learnt (arithmetic progressions of token ids modulo the vocabulary, some tokens replaced by
noise); the first stage reads the inputs and the last stage the labels of the same microbatch,
both drawn from the same seeded stream (as Megatron's data loader does on both ends).

Layout: ``world = --pp x --dp`` ranks, stage-major as Megatron lays them out: rank
``stage * dp + replica``. So with ``--pp 2 --dp 2`` ranks 0 and 1 are stage 0 (of pipelines 0
and 1), ranks 2 and 3 stage 1; pipeline ``r`` is ranks ``r, dp + r, ...`` and the data-parallel
group of stage ``s`` is ranks ``s * dp .. s * dp + dp - 1``. Every rank creates every pipeline
group and every data-parallel group with ``dist.new_group``, in the same order.

One step (``--microbatches`` M microbatches of ``--batch`` sequences a pipeline):

- 1F1B (default): stage ``s`` of ``P`` runs ``min(P - s - 1, M)`` warmup forwards, then the
  steady state of one forward and one backward, then the cooldown backwards. The transfers
  between neighbours go on the pipeline's group with ``dist.isend``/``dist.irecv``; as Megatron's
  ``send_forward_recv_backward``/``send_backward_recv_forward`` do, a send and the receive that
  follows it are posted together and then both waited on. The activations' shape is fixed
  (``[batch, seq, width]``) so the receivers preallocate their buffers; with ``--seq-sigma`` the
  shape changes every step and each activation is preceded by its shape (3 int64s), received
  first (a gradient's shape is that of the activation the stage sent, which it knows).
- ``--gpipe``: all M forwards, then all M backwards (GPipe; the same transfers, one at a time).
- After the flush, with ``--dp`` > 1, the gradients are flattened into buckets of at most
  ``--bucket-mb`` MB (last parameter first) and each bucket is averaged with a plain
  ``dist.all_reduce`` over the stage's data-parallel group; then every stage steps its own
  AdamW. The loss of a microbatch is its mean cross-entropy divided by M, so the gradients are
  those of the step's mean loss, and the pipeline's loss equals the unsplit model's.

Profiling: ``torch.profiler.profile`` with the profiler's defaults (CPU activities, no shapes)
and ``schedule(wait=1, warmup=1, active=steps-2)``; ``prof.step()`` after each step; its
``on_trace_ready`` writes one chrome trace per process with ``export_chrome_trace``,
``pp-rank<R>.json`` in ``--out``. ``record_function`` marks ``forward``, ``backward``,
``grad_sync`` (dp > 1) and ``optimizer``. The last stage of pipeline 0 prints each step's
loss and time.

Flags:

- ``--out DIR``: where the traces go (created if missing).
- ``--pp P`` (4), ``--dp D`` (1): ``P x D`` must be the world size.
- ``--microbatches M`` (8), ``--gpipe``, ``--bucket-mb MB`` (4.0).
- ``--steps N`` (8), ``--width W`` (128), ``--layers L`` (8 blocks in all), ``--seq S`` (32
  tokens), ``--batch B`` (4 sequences a microbatch), ``--lr`` (1e-3), ``--seed`` (0).
- ``--seq-sigma S``: each step's sequence length is ``--seq`` x a lognormal draw of sigma ``S``,
  clipped to [8, 4 x ``--seq``], drawn per pipeline (each replica its own); the shapes are sent
  ahead of the activations. An imbalance of the data, not a fault.
- ``--last-heavy``: the last stage holds twice the blocks of each other stage (``L // P`` each,
  ``2 x (L // P)`` on the last: the model has ``(P + 1) x (L // P)`` blocks). An imbalance of the
  partition, not a fault.
- ``--slow-rank R``: the rank the three faults below apply to (-1: none).
- ``--factor F``: every block of the slow rank's stage runs its forward again under
  ``no_grad``, results discarded, (F - 1) x 3.45 times per call (the fraction carried from one
  call to the next): 3 for forward and backward (backward as two forwards), times 1.15 because a
  forward without grad is cheaper than one that records for backward (measured on one core: 1.5
  gives 1.5-1.6 x, 2 gives 1.9-2.1 x, 3 gives 2.7-3.1 x a middle stage's forward + backward).
  The stage's block compute is about F x its peers' (the head and embeddings of the end stages
  are not repeated): a slow device on the same work.
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step.
- ``--mb-sleep-ms MS``: the slow rank sleeps on its host before each microbatch's forward
  (after its input has arrived): M sleeps a step.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_pp_1f1b.py --out DIR --slow-rank 2 --factor 2
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import record_function

VOCAB = 512


class Block(nn.Module):
    """Pre-norm decoder block; on the slow rank its forward is run again ``extra`` times (no grad)."""

    extra = 0.0          # extra forward-equivalents per call, set on the slow rank only
    _carry = 0.0         # fraction carried from one call to the next (shared by all blocks)

    def __init__(self, d):
        super().__init__()
        self.heads = max(1, d // 32)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def body(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def forward(self, x):
        y = self.body(x)
        if Block.extra > 0:
            Block._carry += Block.extra
            n = int(Block._carry)
            Block._carry -= n
            with torch.no_grad():
                for _ in range(n):
                    _ = self.body(x)
        return y


class GPT(nn.Module):
    def __init__(self, d, layers, max_len):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)

    def forward(self, tokens):              # the unsplit model (for checking the pipeline)
        h = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for b in self.blocks:
            h = b(h)
        return self.head(self.ln(h))


class Stage(nn.Module):
    """One stage's part of the GPT: embeddings on the first, head on the last, blocks between."""

    def __init__(self, gpt, lo, hi, first, last):
        super().__init__()
        self.first, self.last = first, last
        self.tok = gpt.tok if first else None
        self.pos = gpt.pos if first else None
        self.blocks = nn.ModuleList(gpt.blocks[lo:hi])
        self.ln = gpt.ln if last else None
        self.head = gpt.head if last else None

    def forward(self, x):
        if self.first:                      # x: token ids [B, T]
            x = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for b in self.blocks:
            x = b(x)
        if self.last:
            x = self.head(self.ln(x))
        return x


def partition(layers, pp, last_heavy):
    """Blocks per stage."""
    if last_heavy:
        per = max(1, layers // pp)
        return [per] * (pp - 1) + [2 * per]
    return [layers // pp + (1 if s < layers % pp else 0) for s in range(pp)]


def seq_len(args, replica, step):
    """This step's sequence length for one pipeline (the same on its first and last stage)."""
    if not args.seq_sigma:
        return args.seq
    g = torch.Generator().manual_seed((args.seed * 7919 + replica) * 10_007 + step)
    draw = torch.empty(1, dtype=torch.float64).log_normal_(0.0, args.seq_sigma, generator=g).item()
    return max(8, min(4 * args.seq, round(args.seq * draw)))


def microbatch(args, replica, step, mb, length):
    """Token ids and labels of one microbatch: progressions modulo VOCAB, 10% of tokens noise."""
    g = torch.Generator().manual_seed(((args.seed * 1_000_003 + replica) * 10_007 + step) * 1009 + mb)
    start = torch.randint(0, VOCAB, (args.batch, 1), generator=g)
    stride = torch.randint(1, 8, (args.batch, 1), generator=g)
    seq = (start + stride * torch.arange(length + 1)) % VOCAB
    noise = torch.rand(args.batch, length + 1, generator=g) < 0.1
    seq = torch.where(noise, torch.randint(0, VOCAB, seq.shape, generator=g), seq)
    return seq[:, :-1], seq[:, 1:]


def make_buckets(params, bucket_mb):
    """Buckets of parameters, last parameter first, each at most ``bucket_mb`` MB (at least one)."""
    limit = int(bucket_mb * 1024 * 1024)
    buckets, cur, size = [], [], 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if cur and size + nbytes > limit:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += nbytes
    if cur:
        buckets.append(cur)
    return buckets


class P2P:
    """The transfers of one stage with its neighbours, on its pipeline's group."""

    def __init__(self, group, prev_rank, next_rank, dynamic):
        self.group, self.prev, self.next, self.dynamic = group, prev_rank, next_rank, dynamic

    def _recv_forward(self, shape):
        """Post the receive of an activation (its shape first if it changes); (buffer, works)."""
        if self.prev is None:
            return None, []
        if self.dynamic:
            dims = torch.empty(3, dtype=torch.int64)
            dist.recv(dims, src=self.prev, group=self.group)
            shape = tuple(dims.tolist())
        buf = torch.empty(shape)
        return buf, [dist.irecv(buf, src=self.prev, group=self.group)]

    def _send_forward(self, y):
        if self.next is None:
            return []
        works = []
        if self.dynamic:
            self._dims = torch.tensor(y.shape, dtype=torch.int64)
            works.append(dist.isend(self._dims, dst=self.next, group=self.group))
        works.append(dist.isend(y.detach(), dst=self.next, group=self.group))
        return works

    def _recv_backward(self, shape):
        if self.next is None:
            return None, []
        buf = torch.empty(shape)
        return buf, [dist.irecv(buf, src=self.next, group=self.group)]

    def _send_backward(self, g):
        if self.prev is None:
            return []
        return [dist.isend(g, dst=self.prev, group=self.group)]

    @staticmethod
    def _wait(works):
        for w in works:
            w.wait()

    def recv_forward(self, shape):
        buf, works = self._recv_forward(shape)
        self._wait(works)
        return buf

    def send_forward(self, y):
        self._wait(self._send_forward(y))

    def recv_backward(self, shape):
        buf, works = self._recv_backward(shape)
        self._wait(works)
        return buf

    def send_backward(self, g):
        self._wait(self._send_backward(g))

    def send_forward_recv_backward(self, y):
        works = self._send_forward(y)
        buf, more = self._recv_backward(y.shape)
        self._wait(works + more)
        return buf

    def send_backward_recv_forward(self, g, shape):
        works = self._send_backward(g)
        buf, more = self._recv_forward(shape)
        self._wait(works + more)
        return buf


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--pp", type=int, default=4, help="pipeline stages")
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas of the pipeline")
    p.add_argument("--microbatches", type=int, default=8, help="microbatches per step")
    p.add_argument("--gpipe", action="store_true", help="all forwards, then all backwards (default 1F1B)")
    p.add_argument("--bucket-mb", type=float, default=4.0, help="gradient bucket size for the dp all-reduce")
    p.add_argument("--last-heavy", action="store_true", help="the last stage holds twice the blocks")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="lognormal sigma of each step's length")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's block compute, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--mb-sleep-ms", type=float, default=0.0,
                   help="host sleep on the slow rank before each microbatch's forward")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=8, help="decoder blocks in all")
    p.add_argument("--seq", type=int, default=32, help="tokens a sequence (median with --seq-sigma)")
    p.add_argument("--batch", type=int, default=4, help="sequences a microbatch")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.layers < args.pp:
        p.error(f"--layers {args.layers} gives a stage no block: give at least --pp {args.pp}")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pp, dp, M = args.pp, args.dp, args.microbatches
    if pp * dp != world:
        raise SystemExit(f"--pp {pp} x --dp {dp} != world size {world}")
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    # stage-major layout: rank = stage * dp + replica; every rank creates every group, same order
    stage, replica = divmod(rank, dp)
    pipe_groups = [dist.new_group([s * dp + r for s in range(pp)]) for r in range(dp)]
    dp_groups = [dist.new_group([s * dp + r for r in range(dp)]) for s in range(pp)]
    pipe_group, dp_group = pipe_groups[replica], dp_groups[stage]
    first, last = stage == 0, stage == pp - 1
    prev_rank = None if first else rank - dp
    next_rank = None if last else rank + dp

    counts = partition(args.layers, pp, args.last_heavy)
    bounds = [sum(counts[:s]) for s in range(pp + 1)]
    max_len = 4 * args.seq if args.seq_sigma else args.seq
    torch.manual_seed(args.seed)                 # the same full model everywhere; keep our part
    gpt = GPT(args.width, bounds[-1], max_len)
    model = Stage(gpt, bounds[stage], bounds[stage + 1], first, last)
    del gpt
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr)
    if slow and args.factor > 1:
        Block.extra = (args.factor - 1.0) * 3 * 1.15   # fwd + bwd ~ 3 no-grad forwards, x 1.15 (measured)
    buckets = make_buckets(params, args.bucket_mb) if dp > 1 else []
    comm = P2P(pipe_group, prev_rank, next_rank, dynamic=bool(args.seq_sigma))
    reporter = last and replica == 0
    if rank == 0:
        print(f"pp={pp} dp={dp} blocks per stage {counts}, {'gpipe' if args.gpipe else '1f1b'}, "
              f"{M} microbatches of {args.batch}x{args.seq}", flush=True)

    def run_step(step):
        length = seq_len(args, replica, step)
        act_shape = (args.batch, length, args.width)
        saved = {}                                   # mb -> (input, output)
        losses = []

        def forward(mb, x):
            if slow and args.mb_sleep_ms > 0:
                time.sleep(args.mb_sleep_ms / 1000)
            with record_function("forward"):
                if first or last:
                    tokens, labels = microbatch(args, replica, step, mb, length)
                if first:
                    x = tokens
                else:
                    x.requires_grad_()
                y = model(x)
                if last:
                    y = F.cross_entropy(y.reshape(-1, VOCAB), labels.reshape(-1)) / M
                    losses.append(y.detach())
            saved[mb] = (x, y)
            return y

        def backward(mb, g):
            x, y = saved.pop(mb)
            with record_function("backward"):
                torch.autograd.backward(y, grad_tensors=None if last else g)
            return None if first else x.grad

        if args.gpipe:
            for mb in range(M):
                y = forward(mb, comm.recv_forward(act_shape))
                comm.send_forward(y)
            for mb in range(M):
                comm.send_backward(backward(mb, comm.recv_backward(act_shape)))
        else:
            warmup = min(pp - stage - 1, M)
            for mb in range(warmup):
                y = forward(mb, comm.recv_forward(act_shape))
                comm.send_forward(y)
            steady = M - warmup
            x = comm.recv_forward(act_shape) if steady > 0 else None
            for i in range(steady):
                y = forward(warmup + i, x)
                g = comm.send_forward_recv_backward(y) if not last else None
                dx = backward(i, g)
                if i == steady - 1:
                    comm.send_backward(dx)
                else:
                    x = comm.send_backward_recv_forward(dx, act_shape)
            for mb in range(steady, M):
                comm.send_backward(backward(mb, comm.recv_backward(act_shape)))

        if dp > 1:
            with record_function("grad_sync"), torch.no_grad():
                for bucket in buckets:
                    flat = torch.cat([q.grad.reshape(-1) for q in bucket])
                    dist.all_reduce(flat, group=dp_group)
                    flat.div_(dp)
                    off = 0
                    for q in bucket:
                        q.grad.copy_(flat[off:off + q.numel()].view_as(q))
                        off += q.numel()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return sum(losses).item() if last else None, length

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"pp-rank{rank}.json"))

    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            loss, length = run_step(step)
            prof.step()
            if reporter:
                print(f"step {step} loss {loss:.6f} seq {length} time {1000 * (time.perf_counter() - ts):.0f} ms",
                      flush=True)
    if reporter:
        print(f"done in {time.perf_counter() - t0:.1f}s, ppl {math.exp(loss):.1f}, traces in {args.out}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
