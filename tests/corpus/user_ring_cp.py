"""Context parallelism written by hand: ring attention, as a user who read the Ring Attention
(Liu et al.) and Megatron context-parallel papers writes it, on CPUs with gloo.

The model is a small decoder: token embedding plus fixed sinusoidal positions (of the tokens'
global positions), ``--layers`` pre-norm blocks of causal multi-head self-attention and a GELU MLP
(``H -> 4H -> H``), a final norm and an LM head, trained on next-token cross-entropy. Each step
trains on one long synthetic sequence of ``--seq`` tokens (Zipf-distributed tokens, each repeating
the token 64 places back with probability 1/2: something to learn). The sequence is split along
its length across the ``--cp`` ranks of a context-parallel group:

- default: rank ``i`` of the ring holds the ``i``-th of ``cp`` contiguous chunks. Causal attention
  then makes the work uneven, an imbalance of the model and not a fault: the ring's last rank
  attends to every earlier chunk (cp blocks of work per layer), its first rank only to its own
  chunk (1 block), and it waits for the others at the next exchange.
- ``--zigzag``: the load-balanced split of Megatron-CP / ring-flash-attention: the sequence is cut
  into ``2 cp`` chunks and rank ``i`` holds chunks ``i`` and ``2 cp - 1 - i``; every rank then does
  the same work (its own chunks causally, and half a block against each other rank's K/V).

One attention layer, on every rank (``RingAttention``, an autograd Function):

1. forward: attend the local queries to the local K/V (causal), then pass K/V (packed into one
   tensor) around the ring ``cp - 1`` times with ``dist.batch_isend_irecv([P2POp(isend, kv,
   next), P2POp(irecv, buf, prev)])``, the exchange started before the block's compute and waited
   on after it; each received block's partial result is merged into the output with the
   log-sum-exp (online softmax) rule; blocks from later positions are skipped (or, on the
   diagonal, masked);
2. backward: the ring runs again: K/V travel forward as in the forward pass (to recompute the
   probabilities from the saved log-sum-exp), and each block's dK/dV is added to an accumulator
   that travels with them, one ``batch_isend_irecv`` per step, the last one bringing every chunk's
   dK/dV home to its owner: ``cp - 1`` K/V messages and ``cp`` dK/dV messages per layer.

Rank layout: the CP ranks of a ring are neighbours, ``rank = replica * cp + ring position``
(``--cp 2 --dp 2`` on 4 processes: rings {0, 1} and {2, 3}; replicas {0, 2} and {1, 3}); groups by
``dist.new_group``. Every parameter is replicated. After backward the gradients are flattened into
buckets of ``--bucket-mb`` and each bucket is summed over its CP group by one ``all_reduce`` (each
rank's gradient holds only its chunk's share), then, with ``--dp`` above 1, averaged over the
replicas by a second ``all_reduce`` on the DP group; AdamW. Rank 0 prints the mean loss of the
whole sequence (an ``all_reduce`` of the ranks' losses, for the log).

Profiling: ``torch.profiler.profile`` with ``schedule(wait=1, warmup=1, active=steps-2)``, its
``on_trace_ready`` exporting one chrome trace per process, ``ringcp-rank<R>.json`` in ``--out``;
``prof.step()`` after each step. ``record_function`` marks the forward, the ring attention's
forward and backward, the backward, the gradient all-reduce and the optimizer step.

Flags:

- ``--out DIR``: where the traces go (created if missing).
- ``--steps N`` (8), ``--width H`` (128), ``--layers L`` (2), ``--heads`` (4), ``--seq S`` (1024, the
  whole sequence, split over the ring; a multiple of ``cp``, of ``2 cp`` with ``--zigzag``),
  ``--seed`` (0), ``--lr`` (3e-3), ``--bucket-mb`` (1).
- ``--cp C`` (default: the world size), ``--dp D`` (1): ``C x D`` must be the world size.
- ``--zigzag``: the load-balanced split (above); without it, the contiguous split and its causal
  imbalance.
- ``--seq-sigma S``: each step's sequence length is ``--seq`` x a lognormal draw of sigma ``S``
  (median ``--seq``, kept within ``[seq/4, 2 seq]``, rounded to the split's multiple of 16),
  drawn from the same seed on every rank so that the ring stays consistent: the step's work
  varies from step to step, the same on every rank.
- ``--slow-rank R``: the rank ``--factor`` and ``--sleep-ms`` apply to (-1: none).
- ``--factor F``: the slow rank does ``(F - 1)`` x its own attention-block and MLP work again,
  of the same shapes on the same inputs, without gradients, results discarded: each layer's
  norms, projections and MLP and the final norm, LM head and softmax (their backward counted as
  two forwards, all done in the forward), and each ring-attention block (repeated in the ring's
  forward and in its backward). That rank is slower on the same work, as a slow GPU is (its host
  work, the exchanges and the optimizer are not repeated: on 4 processes sharing 2 cores the
  slow rank's process CPU grows about 1.3-1.4x at ``--factor 1.6``, 1.5x at 2; rank 0's last
  line prints each process's CPU seconds over the steps).
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step.
- ``--link-slow SRC,DST`` with ``--link-extra-bytes B``: every ring message that global rank
  ``SRC`` sends to ``DST`` (which must be the next rank of ``SRC``'s ring) is accompanied by an
  extra isend/irecv pair of ``B`` bytes in the same ``batch_isend_irecv`` (K/V in the forward and
  backward, dK/dV in the backward): heavier traffic on one link.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_ring_cp.py --out DIR --zigzag --slow-rank 2 --factor 1.6
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
ECHO = 64          # the data's tokens repeat the token this many places back half of the time


class Ring:
    """Where this rank sits in its CP ring, and the p2p exchange with its neighbours."""

    def __init__(self, group, ranks, rank, zigzag, link_slow=None, link_bytes=0):
        self.group, self.ranks = group, ranks
        self.size = len(ranks)
        self.idx = ranks.index(rank)
        self.next = ranks[(self.idx + 1) % self.size]
        self.prev = ranks[(self.idx - 1) % self.size]
        self.zigzag = zigzag
        # --link-slow: this rank sends / receives extra bytes with each message on that link
        self.pad_send = self.pad_recv = None
        if link_slow and link_bytes > 0:
            src, dst = link_slow
            if rank == src and self.next == dst:
                self.pad_send = torch.zeros(link_bytes, dtype=torch.uint8)
            if rank == dst and self.prev == src:
                self.pad_recv = torch.empty(link_bytes, dtype=torch.uint8)
        self.extra = None          # set on the slow rank: a Burner for the attention blocks

    def start(self, send, recv, tag):
        """Send ``send`` to the next rank and receive into ``recv`` from the previous one."""
        ops = [dist.P2POp(dist.isend, send, self.next, self.group, tag),
               dist.P2POp(dist.irecv, recv, self.prev, self.group, tag)]
        if self.pad_send is not None:
            ops.append(dist.P2POp(dist.isend, self.pad_send, self.next, self.group, tag + 100))
        if self.pad_recv is not None:
            ops.append(dist.P2POp(dist.irecv, self.pad_recv, self.prev, self.group, tag + 100))
        return dist.batch_isend_irecv(ops)

    @staticmethod
    def wait(reqs):
        for r in reqs:
            r.wait()


class Burner:
    """The slow rank's extra work: ``rate`` repetitions per call on average (carrying fractions)."""

    def __init__(self, rate):
        self.rate, self.credit = rate, 0.0

    def take(self):
        self.credit += self.rate
        n = int(self.credit)
        self.credit -= n
        return n


def block_fwd(q, k, v, causal, scale):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        mask = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu_(1)
        s = s.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    return torch.matmul(p, v), lse


def block_bwd(q, k, v, dout, lse, delta, causal, scale):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        mask = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu_(1)
        s = s.masked_fill(mask, float("-inf"))
    p = torch.exp(s - lse.unsqueeze(-1))
    dv = torch.matmul(p.transpose(-1, -2), dout)
    dp = torch.matmul(dout, v.transpose(-1, -2))
    ds = p * (dp - delta.unsqueeze(-1))
    dq = torch.matmul(ds, k) * scale
    dk = torch.matmul(ds.transpose(-1, -2), q) * scale
    return dq, dk, dv


def merge(out, lse, blk_out, blk_lse):
    """Online softmax: fold one block's (output, log-sum-exp) into the running ones, in place."""
    new = torch.logaddexp(lse, blk_lse)
    out.mul_(torch.exp(lse - new).unsqueeze(-1)).add_(blk_out * torch.exp(blk_lse - new).unsqueeze(-1))
    lse.copy_(new)


def plan(ring, src):
    """Which part of the queries attends to which part of the K/V that came from ring position src.

    Returns (q slice, kv slice, causal) or None when the whole block lies in the future."""
    me = ring.idx
    if src == me:
        return slice(None), slice(None), True
    if not ring.zigzag:
        return (slice(None), slice(None), False) if src < me else None
    # zigzag: I hold chunks (me, 2cp-1-me), src holds (src, 2cp-1-src)
    if src < me:                       # both my chunks see src's first chunk only
        return slice(None), "first", False
    return "second", slice(None), False  # only my second chunk sees src, both of its chunks


def _sl(s, n):
    if s == "first":
        return slice(0, n // 2)
    if s == "second":
        return slice(n // 2, n)
    return s


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring):
        with record_function("ring_attention_fwd"):
            scale = 1.0 / math.sqrt(q.shape[-1])
            n = q.shape[-2]
            out = torch.zeros_like(q)
            lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
            kv = torch.stack([k, v]).contiguous()
            for step in range(ring.size):
                if step < ring.size - 1:
                    buf = torch.empty_like(kv)
                    reqs = ring.start(kv, buf, tag=0)
                src = (ring.idx - step) % ring.size
                p = plan(ring, src)
                if p is not None:
                    qs, ks, causal = _sl(p[0], n), _sl(p[1], n), p[2]
                    reps = 1 + (ring.extra.take() if ring.extra else 0)
                    for _ in range(reps):
                        o, l = block_fwd(q[..., qs, :], kv[0][..., ks, :], kv[1][..., ks, :], causal, scale)
                    merge(out[..., qs, :], lse[..., qs], o, l)
                if step < ring.size - 1:
                    Ring.wait(reqs)
                    kv = buf
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring = ring
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        ring = ctx.ring
        with record_function("ring_attention_bwd"):
            dout = dout.contiguous()
            scale = 1.0 / math.sqrt(q.shape[-1])
            n = q.shape[-2]
            delta = (dout * out).sum(-1)
            dq = torch.zeros_like(q)
            kv = torch.stack([k, v]).contiguous()
            dkv = dbuf = None
            dreqs = []
            for step in range(ring.size):
                if step < ring.size - 1:
                    buf = torch.empty_like(kv)
                    reqs = ring.start(kv, buf, tag=1)
                src = (ring.idx - step) % ring.size
                mine = torch.zeros_like(kv)
                p = plan(ring, src)
                if p is not None:
                    qs, ks, causal = _sl(p[0], n), _sl(p[1], n), p[2]
                    reps = 1 + (ring.extra.take() if ring.extra else 0)
                    for _ in range(reps):
                        g = block_bwd(q[..., qs, :], kv[0][..., ks, :], kv[1][..., ks, :],
                                      dout[..., qs, :], lse[..., qs], delta[..., qs], causal, scale)
                    dq[..., qs, :] += g[0]
                    mine[0][..., ks, :] += g[1]
                    mine[1][..., ks, :] += g[2]
                # the dK/dV of src's chunk arrives from the previous rank (step > 0), gets mine
                # added, and goes on to the next rank; the last send brings it home to its owner
                if dreqs:
                    Ring.wait(dreqs)
                    mine += dbuf
                if ring.size == 1:
                    dbuf = mine
                    break
                dkv = mine
                dbuf = torch.empty_like(dkv)
                dreqs = ring.start(dkv, dbuf, tag=2)
                if step < ring.size - 1:
                    Ring.wait(reqs)
                    kv = buf
            Ring.wait(dreqs)         # my own chunk's dK/dV, summed over the ring
        return dq, dbuf[0], dbuf[1], None


class Block(nn.Module):
    def __init__(self, d, heads, ring, slow_factor):
        super().__init__()
        self.heads, self.ring = heads, ring
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        # the slow rank's extra norms + projections + MLP: (F-1) x (forward + backward = 3 forwards)
        self.extra = Burner((slow_factor - 1.0) * 3) if slow_factor > 1 else None

    def forward(self, x):
        b, s, d = x.shape
        h = self.ln1(x)
        qkv = self.qkv(h).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = RingAttention.apply(qkv[0].contiguous(), qkv[1].contiguous(), qkv[2].contiguous(), self.ring)
        a = a.transpose(1, 2).reshape(b, s, d)
        y = x + self.proj(a)
        out = y + self.fc2(F.gelu(self.fc1(self.ln2(y))))
        if self.extra is not None:
            with torch.no_grad():
                for _ in range(self.extra.take()):
                    self.qkv(self.ln1(x)), self.fc2(F.gelu(self.fc1(self.ln2(self.proj(a) + x))))
        return out


def sinusoid(pos, d):
    i = torch.arange(0, d, 2, dtype=torch.float32)
    ang = pos.float().unsqueeze(-1) / (10000.0 ** (i / d))
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


class Decoder(nn.Module):
    def __init__(self, d, layers, heads, ring, slow_factor):
        super().__init__()
        self.d = d
        self.embed = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(Block(d, heads, ring, slow_factor) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB)
        # the slow rank's extra final norm + LM head + softmax, counted as for the blocks
        self.extra = Burner((slow_factor - 1.0) * 3) if slow_factor > 1 else None

    def forward(self, tokens, pos):
        h = self.embed(tokens) + sinusoid(pos, self.d)
        for blk in self.blocks:
            h = blk(h)
        logits = self.head(self.ln(h))
        if self.extra is not None:
            with torch.no_grad():
                for _ in range(self.extra.take()):
                    self.head(self.ln(h)).log_softmax(-1)
        return logits


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--cp", type=int, default=None, help="context-parallel ring size (default: world)")
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas of the ring")
    p.add_argument("--zigzag", action="store_true", help="load-balanced zig-zag split of the sequence")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="lognormal sigma of each step's length")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank that --factor / --sleep-ms apply to")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's attention/MLP matmul work, x")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--link-slow", default=None, help="SRC,DST: ring link that carries extra bytes")
    p.add_argument("--link-extra-bytes", type=int, default=0, help="extra bytes per message on --link-slow")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=1024, help="whole sequence length (median with --seq-sigma)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--bucket-mb", type=float, default=1.0, help="gradient all-reduce bucket size")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cp = args.cp or world // args.dp
    dp = args.dp
    if cp * dp != world:
        raise SystemExit(f"--cp {cp} x --dp {dp} != world size {world}")
    unit = 2 * cp if args.zigzag else cp
    if args.seq % unit:
        raise SystemExit(f"--seq {args.seq} must be a multiple of {unit}")
    if args.width % args.heads:
        raise SystemExit("--width must be a multiple of --heads")
    link = None
    if args.link_slow:
        link = tuple(int(t) for t in args.link_slow.split(","))
        src_ring = link[0] // cp
        if link[1] // cp != src_ring or link[1] % cp != (link[0] % cp + 1) % cp:
            raise SystemExit(f"--link-slow {args.link_slow}: {link[1]} is not the next rank of {link[0]}'s ring")
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    # rank = replica * cp + ring position; every rank creates every group
    replica, pos_in_ring = divmod(rank, cp)
    cp_group = dp_group = None
    for r in range(dp):
        ranks = list(range(r * cp, (r + 1) * cp))
        g = dist.new_group(ranks)
        if r == replica:
            cp_group, cp_ranks = g, ranks
    for c in range(cp if dp > 1 else 0):
        ranks = list(range(c, world, cp))
        g = dist.new_group(ranks)
        if c == pos_in_ring:
            dp_group = g
    ring = Ring(cp_group, cp_ranks, rank, args.zigzag, link, args.link_extra_bytes)
    factor = args.factor if slow else 1.0
    if factor > 1:
        ring.extra = Burner(factor - 1.0)

    torch.manual_seed(args.seed)                 # same weights everywhere
    model = Decoder(args.width, args.layers, args.heads, ring, factor)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr)

    # gradient buckets: consecutive parameters up to --bucket-mb each
    cap = max(1, int(args.bucket_mb * 2**20 / 4))
    buckets, cur, size = [], [], 0
    for q in reversed(params):                   # roughly the order backward produces them
        cur.append(q)
        size += q.numel()
        if size >= cap:
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)

    zipf = 1.0 / torch.arange(1, VOCAB + 1, dtype=torch.float64) ** 1.1

    def seq_len(step):
        if not args.seq_sigma:
            return args.seq
        g = torch.Generator().manual_seed(args.seed * 7919 + step)     # same on every rank
        draw = torch.empty(1, dtype=torch.float64).log_normal_(0.0, args.seq_sigma, generator=g).item()
        s = min(max(args.seq * draw, args.seq / 4), 2 * args.seq)
        m = 16 * unit
        return max(m, int(round(s / m)) * m)

    def batch_for(step):
        """This rank's part of the replica's sequence for this step: tokens, targets, positions."""
        s = seq_len(step)
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 1000 * replica + step)
        full = torch.multinomial(zipf, s + 1, replacement=True, generator=g)
        echo = torch.rand(s + 1, generator=g) < 0.5
        for t in range(ECHO, s + 1, ECHO):       # repeat the token ECHO places back, half the time
            blk = slice(t, min(t + ECHO, s + 1))
            full[blk] = torch.where(echo[blk], full[t - ECHO:blk.stop - ECHO], full[blk])
        if args.zigzag:
            c = s // (2 * cp)
            pos = torch.cat([torch.arange(pos_in_ring * c, (pos_in_ring + 1) * c),
                             torch.arange((2 * cp - 1 - pos_in_ring) * c, (2 * cp - pos_in_ring) * c)])
        else:
            c = s // cp
            pos = torch.arange(pos_in_ring * c, (pos_in_ring + 1) * c)
        return full[pos].unsqueeze(0), full[pos + 1].unsqueeze(0), pos

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"ringcp-rank{rank}.json"))

    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    losses = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            x, y, pos = batch_for(step)
            opt.zero_grad(set_to_none=True)
            with record_function("forward"):
                logits = model(x, pos)
                loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
            with record_function("backward"):
                loss.backward()
            with record_function("grad_allreduce"):
                for bucket in buckets:
                    flat = torch.cat([q.grad.reshape(-1) for q in bucket])
                    dist.all_reduce(flat, group=cp_group)         # sum of the chunks' shares
                    if dp > 1:
                        dist.all_reduce(flat, group=dp_group)     # and over the replicas
                    flat.div_(world)
                    off = 0
                    for q in bucket:
                        q.grad.copy_(flat[off:off + q.numel()].view_as(q.grad))
                        off += q.numel()
            with record_function("optimizer"):
                opt.step()
            logged = loss.detach().clone()
            dist.all_reduce(logged)
            losses.append(logged.item() / world)
            prof.step()
            if rank == 0:
                print(f"step {step} seq {x.shape[1] * cp} loss {losses[-1]:.4f}", flush=True)

    cpu = [torch.zeros(()) for _ in range(world)]      # each process's CPU seconds over the steps
    dist.all_gather(cpu, torch.tensor(time.process_time() - cpu0))
    if rank == 0:
        print(f"done in {time.perf_counter() - t0:.1f}s, cp {cp} dp {dp} zigzag {args.zigzag}, "
              f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, cpu s per rank {[round(c.item(), 2) for c in cpu]}, "
              f"traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
