"""A job written the way a torchtitan user writes one: a small LLaMA (token embedding, RMSNorm,
rotary attention with ``wq``/``wk``/``wv``/``wo``, SwiGLU feed-forward with ``w1``/``w2``/``w3``,
an output projection) trained on random tokens with 2-D parallelism on a named device mesh,
``init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))``, gloo on CPUs.

The model is built whole on every rank from the same seed, then parallelised as torchtitan's
``parallelize_llama`` does it: tensor parallelism first, each block through ``parallelize_module``
on the ``tp`` submesh (``ColwiseParallel`` for ``attention.wq/wk/wv`` and
``feed_forward.w1/w3``, ``RowwiseParallel`` for ``attention.wo`` and ``feed_forward.w2``; the
attention works on its local heads, the embedding, norms and output stay replicated over ``tp``),
then data parallelism with FSDP2, ``fully_shard`` on each block and on the whole model over the
``dp`` submesh (the blocks' weights become 2-D DTensors, sharded over ``dp`` and ``tp``; the last
block is not resharded after forward). As in torchtitan, a dimension of size 1 is skipped: with
``--tp 1`` there is no TP, with ``--dp 1`` no FSDP. AdamW. Each ``dp`` replica draws its own
batches, both ``tp`` ranks of a replica the same one (a generator seeded by seed, dp rank, step).

Profiled with ``torch.profiler.schedule(wait=1, warmup=1, active=steps-2, repeat=1)`` and
``tensorboard_trace_handler(out, worker_name="rank<R>")``: one
``rank<R>.<ns>.pt.trace.json`` a process, ``prof.step()`` after each training step.

Flags: ``--out DIR`` where the traces go; ``--dp``, ``--tp`` the mesh (dp x tp must be the world
size, tp must divide the 4 heads); ``--steps N`` training steps; ``--width H`` the model's
hidden size (``--layers``, ``--seq``, ``--batch``, ``--vocab`` the rest of its shape); ``--seed S``
the weights' and the data's seed. A rank (``--slow-rank R``, a global rank) is slowed in software:
``--factor F`` makes each block's feed-forward do (F - 1) x its matmul work again in forward, on
the same local shards of ``w1``/``w3``/``w2`` and the same activations (results discarded, under
``no_grad``: a device slower on the same work); ``--sleep-ms MS`` sleeps on its host before each
step. ``--seq-sigma S`` gives each ``dp`` replica its own length each step, ``--seq`` x
lognormal(0, S), as dynamic padding does (an imbalance, not a fault).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_titan_2d.py --out DIR --slow-rank 2 --factor 1.5
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


@dataclass
class ModelArgs:
    dim: int = 128
    n_layers: int = 2
    n_heads: int = 4
    vocab_size: int = 1000
    multiple_of: int = 32
    norm_eps: float = 1e-5
    max_seq_len: int = 256
    rope_theta: float = 10000.0


def precompute_rope(head_dim: int, end: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(end).float(), freqs)          # (end, head_dim / 2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (bs, seq, heads, head_dim); rotate consecutive pairs
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.dim, bias=False)
        self.wk = nn.Linear(args.dim, args.dim, bias=False)
        self.wv = nn.Linear(args.dim, args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)

    def forward(self, x, cos, sin):
        bs, seqlen, _ = x.shape
        # -1 heads: under TP the colwise projections hold n_heads / tp heads on each rank
        xq = self.wq(x).view(bs, seqlen, -1, self.head_dim)
        xk = self.wk(x).view(bs, seqlen, -1, self.head_dim)
        xv = self.wv(x).view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rope(xq, cos, sin), apply_rope(xk, cos, sin)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2),
                                             is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(bs, seqlen, -1))


def _local(w: torch.Tensor) -> torch.Tensor:
    return w.to_local() if isinstance(w, DTensor) else w


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)
        self.extra_work = 0.0   # set on the slow rank: (factor - 1)

    def forward(self, x):
        h = F.silu(self.w1(x)) * self.w3(x)
        if self.extra_work > 0:
            self._burn(x, h)
        return self.w2(h)

    @torch.no_grad()
    def _burn(self, x, h):
        """Redo this rank's share of the MLP matmuls, (factor - 1) times over; results dropped."""
        w1, w3, w2 = (_local(m.weight).detach() for m in (self.w1, self.w3, self.w2))
        x2, h2 = x.detach().flatten(0, -2), h.detach().flatten(0, -2)
        left = self.extra_work
        while left > 1e-6:
            n = max(1, round(min(1.0, left) * x2.shape[0]))
            _ = x2[:n] @ w1.t()
            _ = x2[:n] @ w3.t()
            _ = h2[:n] @ w2.t()
            left -= 1.0


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        hidden = int(2 * 4 * args.dim / 3)
        hidden = args.multiple_of * ((hidden + args.multiple_of - 1) // args.multiple_of)
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, hidden)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        cos, sin = precompute_rope(args.dim // args.n_heads, args.max_seq_len, args.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(args) for i in range(args.n_layers)})
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.init_weights()

    def init_weights(self):
        nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            for lin in (layer.attention.wq, layer.attention.wk, layer.attention.wv, layer.feed_forward.w1):
                nn.init.trunc_normal_(lin.weight, std=0.02)
            std = 0.02 / math.sqrt(2 * self.args.n_layers)
            for lin in (layer.attention.wo, layer.feed_forward.w2, layer.feed_forward.w3):
                nn.init.trunc_normal_(lin.weight, std=std)
        nn.init.trunc_normal_(self.output.weight, std=self.args.dim ** -0.5, a=-3, b=3)

    def forward(self, tokens):
        seqlen = tokens.shape[1]
        cos, sin = self.rope_cos[:seqlen], self.rope_sin[:seqlen]
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def apply_tp(model: Transformer, tp_mesh: DeviceMesh) -> None:
    for block in model.layers.values():
        plan = {
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
        }
        parallelize_module(block, tp_mesh, plan)


def apply_fsdp(model: Transformer, dp_mesh: DeviceMesh) -> None:
    n = len(model.layers)
    for i, block in model.layers.items():
        # the last block's params are needed again right away by backward: keep them gathered
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=int(i) < n - 1)
    fully_shard(model, mesh=dp_mesh)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory the traces are written to")
    p.add_argument("--slow-rank", type=int, default=-1, help="global rank slowed by --factor / --sleep-ms")
    p.add_argument("--factor", type=float, default=1.0,
                   help="the slow rank's feed-forward does this many times its matmul work")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="a host sleep on the slow rank before each step")
    p.add_argument("--seq-sigma", type=float, default=0.0,
                   help="each dp replica's length each step: --seq x lognormal(0, S)")
    p.add_argument("--dp", type=int, default=2, help="data-parallel (FSDP2) degree")
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel degree")
    p.add_argument("--steps", type=int, default=8, help="training steps (2 unprofiled, the rest active)")
    p.add_argument("--width", type=int, default=128, help="model dim")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=4, help="sequences a step for each dp replica")
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.steps < 3:
        p.error("--steps must be at least 3 (1 wait + 1 warmup + active steps)")
    if a.heads % a.tp or a.width % a.heads:
        p.error("--tp must divide --heads, and --heads must divide --width")
    return a


def main() -> None:
    a = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.dp * a.tp != world:
        raise SystemExit(f"--dp {a.dp} x --tp {a.tp} != world size {world}")
    mesh = init_device_mesh("cpu", (a.dp, a.tp), mesh_dim_names=("dp", "tp"))
    dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
    dp_rank = dp_mesh.get_local_rank()
    slow = rank == a.slow_rank

    max_len = 4 * a.seq if a.seq_sigma else a.seq
    args = ModelArgs(dim=a.width, n_layers=a.layers, n_heads=a.heads, vocab_size=a.vocab, max_seq_len=max_len)
    torch.manual_seed(a.seed)   # every rank builds the same full model, then keeps its shards
    model = Transformer(args)
    if slow and a.factor > 1:
        for block in model.layers.values():
            block.feed_forward.extra_work = a.factor - 1
    if a.tp > 1:
        apply_tp(model, tp_mesh)
    if a.dp > 1:
        apply_fsdp(model, dp_mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.1)

    def batch(step: int):
        # same stream on both tp ranks of a replica: seeded by (seed, dp rank, step) only
        g = torch.Generator().manual_seed((a.seed * 1_000_003 + dp_rank) * 10_007 + step)
        length = a.seq
        if a.seq_sigma:
            draw = torch.empty(1).log_normal_(0.0, a.seq_sigma, generator=g).item()
            length = max(8, min(max_len, round(a.seq * draw)))
        tokens = torch.randint(0, a.vocab, (a.batch, length + 1), generator=g)
        return tokens[:, :-1], tokens[:, 1:]

    def train_step(step: int) -> torch.Tensor:
        if slow and a.sleep_ms:
            time.sleep(a.sleep_ms / 1000)
        inputs, labels = batch(step)
        opt.zero_grad()
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
        loss.backward()
        opt.step()
        return loss.detach()

    os.makedirs(a.out, exist_ok=True)
    t0 = time.perf_counter()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=a.steps - 2, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(a.out, worker_name=f"rank{rank}"),
    ) as prof:
        for step in range(a.steps):
            loss = train_step(step)
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
            prof.step()
    if rank == 0:
        print(f"{a.steps} steps in {time.perf_counter() - t0:.1f}s (dp={a.dp}, tp={a.tp})", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
