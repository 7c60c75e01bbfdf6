"""A GPT-like decoder with tensor parallelism written by hand, as Megatron-LM does it, and data
parallelism across the TP groups; gloo on CPUs, one trace a rank (``tensorboard_trace_handler``).

TP groups are consecutive ranks ([0,1],[2,3] for ``--tp 2``), DP groups stride across them
([0,2],[1,3]). Column/row-parallel linears are autograd Functions (identity forward / all-reduce
backward, all-reduce forward / identity backward), attention heads are split across the TP ranks,
the LM head is column-parallel with its logits gathered, and gradients are all-reduced in the DP
group as one flat buffer after backward. On ``--slow-rank`` only: ``--factor`` (its MLP forward
does F times the work), ``--attn-extra`` (extra matmuls in its attention), ``--sleep-ms`` (a host
sleep before each batch). ``--seq-sigma`` draws each replica's length per step (imbalance).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_manual_tp.py --out DIR --tp 2 --slow-rank 1 --factor 1.5
"""

import argparse
import math
import time
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def _tp_alone(group):
    return dist.get_world_size(group) == 1   # as in Megatron: a TP group of one rank communicates nothing


class _CopyToTP(torch.autograd.Function):
    """Identity forward, all-reduce backward: the input of a column-parallel linear."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        if not _tp_alone(ctx.group):
            grad = grad.contiguous().clone()
            dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """All-reduce forward, identity backward: the output of a row-parallel linear."""

    @staticmethod
    def forward(ctx, x, group):
        if not _tp_alone(group):
            x = x.contiguous().clone()
            dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherFromTP(torch.autograd.Function):
    """All-gather on the last dim forward, keep this rank's slice backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.rank, ctx.size = dist.get_rank(group), dist.get_world_size(group)
        if ctx.size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(ctx.size)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.chunk(ctx.size, dim=-1)[ctx.rank].contiguous(), None


class ParallelLinear(nn.Module):
    """Column-parallel (output features split, ``dim=0``) or row-parallel (input features, ``dim=1``)."""

    def __init__(self, in_f, out_f, tp, dim):
        super().__init__()
        self.tp, self.dim = tp, dim
        # every rank draws the full weight, so replicated parameters stay equal everywhere (Megatron's CPU init)
        full = nn.init.normal_(torch.empty(out_f, in_f), std=0.02)
        self.weight = nn.Parameter(full.chunk(tp.size, dim=dim)[tp.rank].clone())
        self.bias = nn.Parameter(torch.zeros(out_f // tp.size if dim == 0 else out_f))

    def forward(self, x):
        if self.dim == 0:
            return F.linear(_CopyToTP.apply(x, self.tp.group), self.weight, self.bias)
        return _ReduceFromTP.apply(F.linear(x, self.weight), self.tp.group) + self.bias


class Attention(nn.Module):
    def __init__(self, width, heads, tp, extra):
        super().__init__()
        self.heads, self.head_dim, self.extra = heads // tp.size, width // heads, extra
        # rows ordered (head, q/k/v, head_dim) so that a contiguous shard holds whole heads
        self.qkv = ParallelLinear(width, 3 * width, tp, 0)
        self.proj = ParallelLinear(width, width, tp, 1)

    def forward(self, x):
        b, t, _ = x.shape
        qkv = self.qkv(x).view(b, t, self.heads, 3, self.head_dim)
        if self.extra:
            with torch.no_grad():
                for _ in range(self.extra):
                    F.linear(x, self.qkv.weight)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, width, tp, factor):
        super().__init__()
        self.fc1 = ParallelLinear(width, 4 * width, tp, 0)
        self.fc2 = ParallelLinear(4 * width, width, tp, 1)
        self.factor = factor

    def forward(self, x):
        if self.factor > 1:
            self._replay(x)
        return self.fc2(F.gelu(self.fc1(x)))

    @torch.no_grad()
    def _replay(self, x):
        """(factor - 1) more of this shard's MLP forward: whole replays, then one on that share of the tokens."""
        x = x.reshape(-1, x.shape[-1])
        whole, share = divmod(self.factor - 1, 1.0)
        for rows in [x.shape[0]] * int(whole) + [round(share * x.shape[0])]:
            F.linear(F.gelu(F.linear(x[:rows], self.fc1.weight, self.fc1.bias)), self.fc2.weight)


class Block(nn.Module):
    def __init__(self, width, heads, tp, factor, attn_extra):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = Attention(width, heads, tp, attn_extra)
        self.mlp = MLP(width, tp, factor)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, a, tp, slow):
        super().__init__()
        self.tok = nn.Embedding(a.vocab, a.width)
        self.pos = nn.Embedding(4 * a.seq, a.width)
        self.blocks = nn.ModuleList(Block(a.width, a.heads, tp, a.factor if slow else 1.0,
                                          a.attn_extra if slow else 0) for _ in range(a.layers))
        self.ln = nn.LayerNorm(a.width)
        self.head = ParallelLinear(a.width, a.vocab, tp, 0)
        self.tp = tp

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return _GatherFromTP.apply(self.head(self.ln(x)), self.tp.group)


def build_groups(world, tp_size):
    """(TP group, DP group) of this rank; every rank creates every group, in one order, as new_group requires."""
    tp_groups = [dist.new_group(list(range(s, s + tp_size))) for s in range(0, world, tp_size)]
    dp_groups = [dist.new_group(list(range(o, world, tp_size))) for o in range(tp_size)]
    rank = dist.get_rank()
    return tp_groups[rank // tp_size], dp_groups[rank % tp_size]


def get_batch(a, dp_rank, step):
    # seeded by replica and step: both TP ranks of a replica draw the same tokens and length
    g = torch.Generator().manual_seed(a.seed * 100003 + dp_rank * 1009 + step)
    seq = a.seq * math.exp(a.seq_sigma * torch.randn((), generator=g).item())   # median --seq
    seq = int(min(max(seq, 8), 4 * a.seq))
    data = torch.randint(0, a.vocab, (a.batch, seq + 1), generator=g)
    return data[:, :-1], data[:, 1:]


def allreduce_grads(params, dp_group, dp_size):
    grads = [p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=dp_group)
    flat /= dp_size
    for g, chunk in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(chunk.view_as(g))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory the traces are written to (one file per rank)")
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel size; the rest of the world is data-parallel")
    p.add_argument("--steps", type=int, default=8, help="training steps; all but the first two are profiled")
    p.add_argument("--width", type=int, default=192, help="model width")
    p.add_argument("--layers", type=int, default=3, help="decoder blocks")
    p.add_argument("--heads", type=int, default=4, help="attention heads (split across TP ranks)")
    p.add_argument("--seq", type=int, default=64, help="sequence length (the median with --seq-sigma)")
    p.add_argument("--batch", type=int, default=8, help="sequences a DP replica takes each step")
    p.add_argument("--vocab", type=int, default=512, help="vocabulary size")
    p.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and data")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="lognormal sigma of each replica's per-step length")
    p.add_argument("--slow-rank", type=int, default=-1, help="the rank the faults below apply to (-1: none)")
    p.add_argument("--factor", type=float, default=1.0, help="the slow rank's MLP forward work (matmuls, GELU), times")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="a host sleep on the slow rank before each batch")
    p.add_argument("--attn-extra", type=int, default=0, help="extra matmuls in the slow rank's attention forward")
    return p.parse_args()


def main():
    a = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % a.tp or a.heads % a.tp or a.vocab % a.tp or a.width % a.heads:
        raise SystemExit(f"--tp {a.tp} must divide the world ({world}), --heads and --vocab, "
                         "and --heads must divide --width")
    tp_group, dp_group = build_groups(world, a.tp)
    tp = SimpleNamespace(group=tp_group, size=a.tp, rank=rank % a.tp)
    dp_rank, dp_size = rank // a.tp, world // a.tp
    slow = rank == a.slow_rank

    torch.manual_seed(a.seed)
    model = GPT(a, tp, slow)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=a.lr)

    def step(i):
        if slow and a.sleep_ms:
            time.sleep(a.sleep_ms / 1000)
        x, y = get_batch(a, dp_rank, i)
        opt.zero_grad(set_to_none=False)
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, a.vocab), y.reshape(-1)).backward()
        if dp_size > 1:
            allreduce_grads(params, dp_group, dp_size)
        opt.step()

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=1, warmup=1, active=a.steps - 2, repeat=1),
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(a.out)) as prof:
        for i in range(a.steps):
            step(i)
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
