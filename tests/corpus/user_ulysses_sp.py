"""Sequence-parallel training of a small transformer language model in the style of
DeepSpeed-Ulysses: every rank holds a contiguous slice of each sequence, and each attention layer
swaps the sequence split for a head split with ``dist.all_to_all_single`` and back. CPUs, gloo.

The model: token and learned position embeddings (vocabulary 512, positions counted over the whole
sequence, so rank ``r`` of a group of ``P`` embeds positions ``r S/P .. (r + 1) S/P - 1``),
``--layers`` pre-norm blocks, a final LayerNorm and an untied linear head; next-token prediction
with cross-entropy. A block is LayerNorm -> q, k, v projections (three ``W x W`` linears) ->
sequence-parallel attention -> output projection, residual; LayerNorm -> MLP ``W -> 4W -> W``
with GELU, residual. At the defaults (width 384, 4 layers, 12 heads of 32, sequences of 512)
that is 7.7M parameters, 31 MB of fp32 gradients. The data are synthetic "melodies": each
sequence starts at a random token and walks by steps drawn from {+1, +2, +3, -5} modulo the
vocabulary, so the next token is learnable; every rank of a sequence-parallel group builds the
same global batch (seeded by seed, step and replica) and keeps its own slice of it, the labels
being the same slice shifted by one token.

Ulysses attention, inside every block (``S`` = sequence length): q, k and v are computed for the
``S/P`` local tokens and all ``H`` heads; each goes through its own ``dist.all_to_all_single`` on
the sequence-parallel group (three a layer, as DeepSpeed's ``DistributedAttention`` does), after
which every rank has all ``S`` tokens of ``H/P`` heads; ``F.scaled_dot_product_attention(
is_causal=True)`` runs over the whole sequence; a fourth ``all_to_all_single`` brings the context
back to ``S/P`` tokens and all ``H`` heads. The exchanges are an ``autograd.Function``
(``SeqAllToAll``) whose backward is the inverse exchange, so backward runs four more all-to-alls
a layer, in reverse order: 32 a step at the defaults, each a 768 KiB buffer per rank (192 KiB to
each peer). ``--heads`` and the sequence length must be divisible by ``P``.

Gradients: the weights are replicated on every rank, and each rank's gradients are those of its
own tokens' loss only, so after backward they are averaged over the whole world by hand: flattened
into buckets of at most ``--bucket-mb`` MB (filled from the last parameter to the first: 5 at the
defaults, four of 7-8 MB and one of 0.8 MB), one ``dist.all_reduce`` per bucket, divided by the
world size, copied back. With ``--dp 2`` (world 4) there are two sequence-parallel groups {0, 1}
and {2, 3} (replica ``rank // 2``) and two data-parallel groups {0, 2} and {1, 3}, all made with
``dist.new_group``; each bucket is then summed over the sequence-parallel group first and averaged
over the data-parallel group second (two ``all_reduce`` calls a bucket). With ``--ddp`` the model
is wrapped in ``DistributedDataParallel`` (gloo, whole world) instead: DDP's bucketed all-reduces
run during backward and there is no ``grad_sync`` span. The sequence-parallel group is a
``new_group`` of its own even when it is the whole world, so that its all-to-alls never queue
behind gradient all-reduces. The loss is averaged over the world with one more ``all_reduce``
for the log line. A fused AdamW steps the weights; every rank starts from the same weights
(``--seed``) and the last log line checks that they are still identical everywhere.

Flags:

- ``--out DIR`` (required), ``--steps N`` (8, of which 6 traced), ``--seed S`` (0), ``--shapes``.
- ``--width W`` (384), ``--layers L`` (4), ``--heads H`` (12), ``--seq S`` (512 tokens: the
  whole sequence, split over the group), ``--batch B`` (2 sequences a step, the same on every
  rank of a group), ``--bucket-mb MB`` (8), ``--lr`` (3e-4), ``--dp D`` (1 or 2 replicas; any
  divisor of the world works), ``--ddp``.
- ``--slow-rank R`` (-1: none), and on that rank only: ``--factor F``, inside forward each block
  runs its MLP again without grad, results discarded, ``(F - 1) x 6`` times a call (fractions
  carried over calls), about ``F`` x the forward + backward compute (CPU time, one process:
  1.5 -> 1.51x, 2 -> 1.98x); ``--sleep-ms MS``, ``time.sleep`` before building each step's batch
  (a slow loader: host time, unannotated); ``--hog``, a daemon thread multiplying 256x256
  matrices for the whole run.
- Imbalance, no fault: ``--seq-sigma S``, each step's sequence length is ``--seq`` x a lognormal
  of sigma S, drawn from a generator seeded by seed, step and replica (so the same on all ranks of
  a group, and different between replicas), rounded to a multiple of ``P`` and clipped to
  [4P, 4 x ``--seq``]; ``--skew-replica K`` (with ``--dp 2``): replica K's sequences are 1.6x as
  long every step. (Uneven batches per rank cannot exist within a sequence-parallel group: all its
  ranks hold slices of the same sequences.)

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_ulysses_sp.py --out DIR --slow-rank 2 --factor 1.6

The trace: ``torch.profiler.profile(activities=[CPU], schedule=schedule(wait=1, warmup=1,
active=steps-2))``, ``record_shapes`` only with ``--shapes``, ``prof.step()`` after each step, and
``prof.export_chrome_trace(f"{out}/trace-rank{rank}.json")`` at the end: one chrome JSON per rank
(6.4 MB at the defaults, 10 MB with ``--shapes``). On the main thread each step is a
``ProfilerStep#N`` holding ``record_function`` spans ``forward``, ``backward``, ``grad_sync`` (not
with ``--ddp``) and ``optimizer``; the batch building (and the ``--sleep-ms`` sleep) is the
unannotated gap at the start of a step, the loss ``all_reduce`` the unannotated tail. Each
all-to-all is, on the main thread, a ``SeqAllToAll`` cpu_op (in backward
``SeqAllToAllBackward``, under ``autograd::engine::evaluate_function: SeqAllToAllBackward``) that
holds the permute copies, a short ``c10d::alltoall_base_`` (the posting) and the blocking wait,
which has no event of its own; the exchange itself is a ``gloo:all_to_all`` user_annotation on
one of the sequence-parallel group's two gloo threads (``pt_gloo_runloop``). Each ``all_reduce``
is likewise a ``c10d::allreduce_`` on the main thread and a ``gloo:all_reduce`` on a gloo thread
of its group (the world's, or with ``--dp 2`` the sequence-parallel and data-parallel groups'); the
gradient ones sit inside ``grad_sync`` (with ``--ddp`` DDP's are inside ``backward``). With
``--shapes`` the ``c10d::`` and ``gloo:`` events carry the buffers' sizes in ``Input Dims``
(``[4, 128, 2, 3, 32]`` for an all-to-all at the defaults). The hog thread is not in the trace.

Measured on this 2-core machine, with other jobs beside it (load average 2-11, which moves a
healthy step between 0.6 and 1.8 s from run to run): a job takes 15-50 s wall, all traces valid
JSON, the weights identical on all ranks at the end. Every rank's step is the same length (each
all-to-all waits for the whole group), so a fault shows as the slow rank's own time (the step
less its waits inside ``SeqAllToAll``, ``SeqAllToAllBackward``, ``grad_sync`` and the loss
all-reduce) being longer than its peers'. Median step of the 6 traced steps, and that excess as a
share of the step, runs of the same quiet quarter hour (healthy: 613-651 ms, peers within 30 ms):

    job                                      step, ms      slow rank's excess own time
    --slow-rank 1 --sleep-ms 80              687           13%  (the sleep is the step's gap)
    --slow-rank 0 --sleep-ms 150             772           20%
    --slow-rank 2 --factor 1.6               660           12%
    --slow-rank 1 --factor 2                 750           20%
    --slow-rank 3 --factor 2.5               775           25%
    --slow-rank 1 --hog                      795           2%   (every rank slows alike)
    --seq-sigma 0.5                          649           -    (steps 529-953 ms)
    --dp 2 (healthy)                         831           -
    --dp 2 --skew-replica 0                  1055          26%  (replica 0 vs replica 1)
    --dp 2 --slow-rank 2 --factor 2          1044          24%
"""

import argparse
import math
import os
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, record_function

VOCAB = 512
WALK = torch.tensor([1, 2, 3, -5])
# Extra no-grad MLP forwards per block call per unit of (factor - 1). By flops one MLP forward
# (16 W^2 a token) is about 1/4.5 of a block's forward + backward (72 W^2), but backward's many
# small kernels cost more than their flops on a CPU: in one process at the defaults (one rank's
# 128 tokens, CPU time of forward + backward, best of 15) 5 gave 1.87x at factor 2, 7 gave 2.22x.
MLP_PER_UNIT = 6.0


class SeqAllToAll(torch.autograd.Function):
    """Sequence-sharded, all heads <-> whole sequence, ``H/P`` heads: one ``all_to_all_single``.

    ``to_heads=True``: ``[B, S/P, H, D] -> [B, S, H/P, D]``; ``False`` the inverse. The gradient
    of either is the other, so backward issues the mirror exchange.
    """

    @staticmethod
    def forward(ctx, x, group, to_heads):
        ctx.group, ctx.to_heads = group, to_heads
        return exchange(x, group, to_heads)

    @staticmethod
    def backward(ctx, grad):
        return exchange(grad.contiguous(), ctx.group, not ctx.to_heads), None, None


def exchange(x, group, to_heads):
    p = dist.get_world_size(group)
    if to_heads:
        b, s_loc, h, d = x.shape
        # chunk j of dim 0 goes to rank j: its heads, our tokens
        send = x.reshape(b, s_loc, p, h // p, d).permute(2, 1, 0, 3, 4).contiguous()
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=group)
        # chunk j of the answer is sequence slice j, so slices concatenate in rank order
        return recv.permute(2, 0, 1, 3, 4).reshape(b, p * s_loc, h // p, d)
    b, s, h_loc, d = x.shape
    send = x.reshape(b, p, s // p, h_loc, d).permute(1, 2, 0, 3, 4).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    # chunk j of the answer is head group j of our own tokens
    return recv.permute(2, 1, 0, 3, 4).reshape(b, s // p, p * h_loc, d)


class Block(nn.Module):
    extra = 0.0          # extra MLP forwards per call, set on the slow rank only
    _credit = 0.0

    def __init__(self, width, heads, sp_group):
        super().__init__()
        self.heads, self.sp_group = heads, sp_group
        self.ln1 = nn.LayerNorm(width)
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def attention(self, x):
        b, s_loc, w = x.shape
        shape = (b, s_loc, self.heads, w // self.heads)
        q, k, v = (SeqAllToAll.apply(lin(x).view(shape), self.sp_group, True)
                   for lin in (self.q, self.k, self.v))
        # sdpa wants [B, heads, S, D]; the exchange left [B, S, heads, D]
        ctx = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        ctx = SeqAllToAll.apply(ctx.transpose(1, 2).contiguous(), self.sp_group, False)
        return self.proj(ctx.reshape(b, s_loc, w))

    def mlp(self, x):
        return self.fc2(F.gelu(self.fc1(x)))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        h = self.ln2(x)
        if Block.extra > 0:
            # the injected slowness: same work as the real MLP, thrown away, no autograd graph
            Block._credit += Block.extra
            n = int(Block._credit)
            Block._credit -= n
            with torch.no_grad():
                for _ in range(n):
                    self.mlp(h)
        return x + self.mlp(h)


class LM(nn.Module):
    def __init__(self, width, layers, heads, max_seq, sp_group):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, width)
        self.pos = nn.Embedding(max_seq, width)
        self.blocks = nn.ModuleList(Block(width, heads, sp_group) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, ids, first_pos):
        pos = torch.arange(first_pos, first_pos + ids.shape[1])
        x = self.tok(ids) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def make_buckets(params, bucket_mb):
    """Groups of parameters of at most ``bucket_mb`` MB, last layers first (as backward ends)."""
    limit = int(bucket_mb * 2**20 / 4)
    buckets, cur, size = [], [], 0
    for p in reversed(params):
        if cur and size + p.numel() > limit:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += p.numel()
    if cur:
        buckets.append(cur)
    return buckets


def start_hog(stop):
    def burn():
        a = torch.randn(256, 256)
        b = torch.randn(256, 256)
        while not stop.is_set():
            a = torch.tanh(a @ b)
    t = threading.Thread(target=burn, daemon=True, name="hog")
    t.start()
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="profiler record_shapes")
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=512, help="tokens per sequence (whole, not a slice)")
    p.add_argument("--batch", type=int, default=2, help="sequences per step per replica")
    p.add_argument("--bucket-mb", type=float, default=8.0, help="gradient bucket size in MB")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--dp", type=int, default=1,
                   help="data-parallel replicas (SP size = world / dp)")
    p.add_argument("--ddp", action="store_true", help="DistributedDataParallel for the gradients")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to")
    p.add_argument("--factor", type=float, default=1.0, help="fwd+bwd compute, x peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep before each step")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="lognormal sequence length sigma")
    p.add_argument("--skew-replica", type=int, default=-1,
                   help="with --dp 2: this replica's sequences are 1.6x longer")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.slow_rank < 0 and (args.factor != 1 or args.hog or args.sleep_ms):
        p.error("--factor, --sleep-ms and --hog need --slow-rank")
    if args.skew_replica >= 0 and args.dp < 2:
        p.error("--skew-replica needs --dp 2")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % args.dp:
        raise SystemExit(f"--dp {args.dp} does not divide the world size {world}")
    sp = world // args.dp
    replica, sp_rank = divmod(rank, sp)
    if args.heads % sp or args.width % args.heads:
        raise SystemExit(f"--heads {args.heads} must divide --width and be divisible by SP {sp}")
    if args.seq % sp:
        raise SystemExit(f"--seq {args.seq} must be divisible by the SP size {sp}")
    if not -1 <= args.skew_replica < args.dp:
        raise SystemExit(f"--skew-replica {args.skew_replica}: there are {args.dp} replicas")
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    # every rank must create every group, in the same order, even those it is not in
    sp_groups = [dist.new_group(list(range(g * sp, (g + 1) * sp))) for g in range(args.dp)]
    dp_groups = [dist.new_group(list(range(i, world, sp))) for i in range(sp)] \
        if args.dp > 1 else None
    sp_group = sp_groups[replica]
    dp_group = dp_groups[sp_rank] if dp_groups else None

    max_seq = args.seq
    if args.seq_sigma > 0:
        max_seq = 4 * args.seq
    if args.skew_replica >= 0:
        max_seq = max(max_seq, sp * math.ceil(1.6 * max_seq / sp))

    torch.manual_seed(args.seed)                    # the same initial weights on every rank
    model = LM(args.width, args.layers, args.heads, max_seq, sp_group)
    params = list(model.parameters())
    if args.ddp:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(params, lr=args.lr, fused=True)
    buckets = make_buckets(params, args.bucket_mb)
    if slow and args.factor > 1:
        Block.extra = (args.factor - 1.0) * MLP_PER_UNIT

    def seq_len(step):
        s = args.seq
        if args.seq_sigma > 0:
            # same generator on all ranks of the group: they must agree on the length
            g = torch.Generator().manual_seed(args.seed * 7919 + replica * 104_729 + step)
            z = torch.randn((), generator=g).item()
            s = min(max(round(args.seq * math.exp(args.seq_sigma * z) / sp) * sp, 4 * sp),
                    4 * args.seq)
        if replica == args.skew_replica:
            s = sp * round(1.6 * s / sp)
        return s

    def get_batch(step):
        if slow and args.sleep_ms > 0:
            time.sleep(args.sleep_ms / 1000)        # a slow loader on this host
        s = seq_len(step)
        g = torch.Generator().manual_seed((args.seed * 1_000_003 + replica) * 10_007 + step)
        start = torch.randint(0, VOCAB, (args.batch, 1), generator=g)
        moves = WALK[torch.randint(0, len(WALK), (args.batch, s), generator=g)]
        seq = torch.cat([start, start + moves.cumsum(1)], dim=1) % VOCAB   # s + 1 tokens
        lo = sp_rank * (s // sp)
        hi = lo + s // sp
        return seq[:, lo:hi], seq[:, lo + 1:hi + 1], lo

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2)
    step_ms = []
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                record_shapes=args.shapes) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            ids, labels, first = get_batch(step)
            opt.zero_grad(set_to_none=True)
            with record_function("forward"):
                logits = model(ids, first)
                loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
            with record_function("backward"):
                loss.backward()
            if not args.ddp:
                with record_function("grad_sync"), torch.no_grad():
                    for bucket in buckets:
                        flat = torch.cat([q.grad.reshape(-1) for q in bucket])
                        if args.dp > 1:
                            dist.all_reduce(flat, group=sp_group)
                            dist.all_reduce(flat, group=dp_group)
                        else:
                            dist.all_reduce(flat, group=None)
                        flat /= world
                        off = 0
                        for q in bucket:
                            q.grad.copy_(flat[off:off + q.numel()].view_as(q))
                            off += q.numel()
            with record_function("optimizer"):
                opt.step()
            logged = loss.detach().clone()
            dist.all_reduce(logged)                 # for the log line only
            prof.step()
            step_ms.append((time.perf_counter() - ts) * 1000)
            if rank == 0:
                print(f"step {step} seq {ids.shape[1] * sp} loss {logged.item() / world:.4f} "
                      f"{step_ms[-1]:.0f} ms", flush=True)
    prof.export_chrome_trace(os.path.join(args.out, f"trace-rank{rank}.json"))

    if hog is not None:
        stop.set()
        hog.join()
    traced = step_ms[2:]
    print(f"rank {rank} (replica {replica}, sp rank {sp_rank}) mean traced step "
          f"{sum(traced) / len(traced):.0f} ms", flush=True)
    # the replicas must still hold the same weights if the averaging is right
    with torch.no_grad():
        flat = torch.cat([q.detach().reshape(-1) for q in params])
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        spread = (hi - lo).abs().max().item()
    if rank == 0:
        print(f"done in {time.perf_counter() - t0:.1f}s, max parameter spread across ranks "
              f"{spread:.2e}, traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
