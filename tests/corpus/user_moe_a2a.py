"""A Mixture-of-Experts job written by hand as a user who read the Switch Transformer and GShard
papers writes one: expert parallelism over the whole world group, on CPUs with gloo.

The model embeds token ids and runs 2 blocks, each a dense self-attention sub-block followed by an
MoE sub-block (pre-norm, residuals around both), then a small classifier head. Every rank holds
``--experts-per-rank`` experts (default 2: 8 experts over 4 processes; global expert ``g`` lives on
rank ``g // experts_per_rank``), each a 2-layer GELU FFN (``H -> 4H -> H``). The softmax router is
replicated on every rank and trained as a dense parameter.

One MoE layer, per step, on every rank:

1. route: top-1 (Switch) or, with ``--top2``, top-2 (GShard, the two gates renormalised) over
   the softmax of the router's logits; with ``--capacity C`` each expert takes at most
   ``ceil(C * tokens * k / experts)`` of this rank's assignments, the rest are dropped (they
   ride the residual);
2. sort the assignments by expert, exchange the counts with an ``all_to_all_single`` of one
   count per expert (so each rank knows how many rows it will receive from whom);
3. dispatch the token rows with ``all_to_all_single`` and variable splits;
4. run the local experts on what arrived;
5. send the results back with a second ``all_to_all_single`` (the splits swapped);
6. combine: scale by the gate and add each row back to its token.

The two exchanges go through ``AllToAll``, an autograd Function whose backward is the exchange
the other way, so the loss's gradient flows back to the ranks the tokens came from. A Switch
load-balancing loss (``--aux``, times experts x sum of fraction x mean probability) is added.

Gradients: the dense parameters (embedding, attention, norms, router, head) are the same on every
rank and are averaged across ranks, by DDP (the experts' parameters passed to DDP as ignored) or,
with ``--manual-dp``, by one ``all_reduce`` per gradient after backward. The experts' gradients
already hold every rank's tokens' contribution (summed by the backward exchange) and are only
divided by the world size, so that both kinds of parameter follow the mean of the ranks' losses.

Profiling: ``torch.profiler.profile`` with ``schedule(wait=1, warmup=1, active=steps-2)``, its
``on_trace_ready`` exporting one chrome trace per process, ``moe-rank<R>.json`` in ``--out``;
``prof.step()`` after each step. The MoE layer's parts are marked with ``record_function``.

Flags:

- ``--out DIR``: where the traces go (created if missing).
- ``--steps N`` (8), ``--hidden H`` (128), ``--tokens T`` (256 a rank, as sequences of
  ``--seq`` 64), ``--seed S`` (0), ``--experts-per-rank E`` (2), ``--blocks`` (2), ``--lr``, ``--aux``.
- ``--slow-rank R``: the rank the two faults below apply to (-1: none).
- ``--factor F``: on the slow rank the local experts do (F - 1) x their own FFN matmul work again,
  of the same shapes on the same rows, without gradients, results discarded (the extra is
  counted over forward and backward, backward as two forwards, and run in the forward): that
  rank is slower on the same work, as a slow GPU is.
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step.
- ``--skew K``: K is added, on every rank, to the router's logits of the experts that live on
  rank 0, so rank 0's experts receive far more tokens than the others: a load imbalance of the
  model, not a fault (no rank is slower on the same work).
- ``--top2``: top-2 routing instead of top-1.
- ``--capacity C``: a capacity factor; assignments over an expert's capacity are dropped
  (default: no capacity, nothing dropped).
- ``--manual-dp``: average the dense gradients by hand instead of with DDP.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_moe_a2a.py --out DIR --slow-rank 2 --factor 1.5
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
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function

VOCAB = 1000
CLASSES = 16


class AllToAll(torch.autograd.Function):
    """``all_to_all_single`` with variable splits; backward sends the gradient back the way it came."""

    @staticmethod
    def forward(ctx, x, send_splits, recv_splits):
        ctx.send_splits, ctx.recv_splits = send_splits, recv_splits
        out = x.new_empty((sum(recv_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), output_split_sizes=recv_splits,
                               input_split_sizes=send_splits)
        return out

    @staticmethod
    def backward(ctx, grad):
        return AllToAll.apply(grad.contiguous(), ctx.recv_splits, ctx.send_splits), None, None


class Expert(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class MoE(nn.Module):
    def __init__(self, d, n_local, world, rank, args, slow_factor):
        super().__init__()
        self.n_local, self.world, self.rank = n_local, world, rank
        self.n_experts = n_local * world
        self.k = 2 if args.top2 else 1
        self.capacity = args.capacity
        self.skew = args.skew
        self.router = nn.Linear(d, self.n_experts)
        self.experts = nn.ModuleList(Expert(d) for _ in range(n_local))
        # the slow rank's extra matmuls per expert call: (F-1) x 2 matmuls x 3 (forward + backward)
        self.extra_matmuls = max(0, round((slow_factor - 1.0) * 6)) if slow_factor > 1 else 0
        self.aux_loss = torch.zeros(())
        self.last_load = 0

    def route(self, x):
        logits = self.router(x)
        if self.skew:
            bias = torch.zeros(self.n_experts)
            bias[: self.n_local] = self.skew        # rank 0 holds experts 0 .. n_local-1
            logits = logits + bias
        probs = logits.softmax(-1)
        gate, expert = probs.topk(self.k, dim=-1)   # [T, k]
        if self.k > 1:
            gate = gate / gate.sum(-1, keepdim=True)
        # Switch's auxiliary loss: fraction of tokens routed to each expert x its mean probability
        frac = F.one_hot(expert[:, 0], self.n_experts).float().mean(0)
        self.aux_loss = self.n_experts * (frac * probs.mean(0)).sum()
        tok = torch.arange(x.shape[0]).repeat_interleave(self.k)
        return tok, expert.reshape(-1), gate.reshape(-1)

    def drop_over_capacity(self, tok, expert, gate):
        cap = math.ceil(self.capacity * len(tok) / self.n_experts)
        onehot = F.one_hot(expert, self.n_experts)
        pos = (onehot.cumsum(0) * onehot).sum(-1) - 1          # position of each assignment in its expert
        keep = pos < cap
        return tok[keep], expert[keep], gate[keep]

    def run_experts(self, rows, local_ids):
        out = torch.zeros_like(rows)
        for e, ffn in enumerate(self.experts):
            idx = (local_ids == e).nonzero(as_tuple=True)[0]
            xe = rows[idx]
            out = out.index_copy(0, idx, ffn(xe))
            if self.extra_matmuls:
                with torch.no_grad():
                    h = F.gelu(ffn.fc1(xe))
                    for j in range(self.extra_matmuls):
                        _ = ffn.fc1(xe) if j % 2 == 0 else ffn.fc2(h)
        return out

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        with record_function("moe_router"):
            tok, expert, gate = self.route(x)
            if self.capacity:
                tok, expert, gate = self.drop_over_capacity(tok, expert, gate)
            order = expert.argsort(stable=True)
            tok, expert, gate = tok[order], expert[order], gate[order]
            counts = torch.bincount(expert, minlength=self.n_experts)
        with record_function("moe_exchange_counts"):
            recv_counts = torch.empty_like(counts)
            dist.all_to_all_single(recv_counts, counts)       # [world * n_local]: from src r, for my expert e
            recv_counts = recv_counts.view(self.world, self.n_local)
            send_splits = counts.view(self.world, self.n_local).sum(1).tolist()
            recv_splits = recv_counts.sum(1).tolist()
            self.last_load = sum(recv_splits)
        with record_function("moe_dispatch"):
            rows = AllToAll.apply(x[tok], send_splits, recv_splits)
        with record_function("moe_experts"):
            local_ids = torch.arange(self.n_local).repeat(self.world).repeat_interleave(recv_counts.reshape(-1))
            y = self.run_experts(rows, local_ids)
        with record_function("moe_return"):
            back = AllToAll.apply(y, recv_splits, send_splits)
        with record_function("moe_combine"):
            out = torch.zeros_like(x).index_add(0, tok, back * gate.unsqueeze(-1))
        return out.reshape(shape)


class Block(nn.Module):
    def __init__(self, d, moe):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, max(1, d // 32), batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.moe = moe

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.moe(self.ln2(x))


class Model(nn.Module):
    def __init__(self, d, blocks):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(blocks)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, CLASSES)

    def forward(self, tokens):
        h = self.embed(tokens)
        for b in self.blocks:
            h = b(h)
        return self.head(self.ln(h))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank that --factor / --sleep-ms apply to")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's expert matmul work, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--skew", type=float, default=0.0, help="added to the router logits of rank 0's experts")
    p.add_argument("--top2", action="store_true", help="top-2 routing (default top-1)")
    p.add_argument("--capacity", type=float, default=None, help="capacity factor (default: no dropping)")
    p.add_argument("--manual-dp", action="store_true", help="all-reduce dense grads by hand instead of DDP")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--tokens", type=int, default=256, help="tokens per rank per step")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--experts-per-rank", type=int, default=2)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--aux", type=float, default=0.01, help="weight of the load-balancing loss")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    d = args.hidden
    seq = min(args.seq, args.tokens)
    batch = max(1, args.tokens // seq)

    # dense weights identical everywhere (same seed); each rank's experts its own
    torch.manual_seed(args.seed)
    moes = [MoE(d, args.experts_per_rank, world, rank, args, args.factor if slow else 1.0)
            for _ in range(args.blocks)]
    model = Model(d, [Block(d, m) for m in moes])
    for i, m in enumerate(moes):
        g = torch.Generator().manual_seed(args.seed * 7919 + 101 * rank + i)
        with torch.no_grad():
            for ex in m.experts:
                for lin in (ex.fc1, ex.fc2):
                    bound = 1 / math.sqrt(lin.in_features)
                    lin.weight.uniform_(-bound, bound, generator=g)
                    lin.bias.uniform_(-bound, bound, generator=g)

    expert_names = [n for n, _ in model.named_parameters() if ".experts." in n]
    expert_params = [q for n, q in model.named_parameters() if ".experts." in n]
    dense_params = [q for n, q in model.named_parameters() if ".experts." not in n]

    if args.manual_dp:
        net = model
        for q in dense_params:          # seed is shared, but be safe
            dist.broadcast(q.data, 0)
    else:
        DDP._set_params_and_buffers_to_ignore_for_model(model, expert_names)
        net = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)

    def batch_for(step):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 1000 * rank + step)
        x = torch.randint(0, VOCAB, (batch, seq), generator=g)
        y = (x * 7 + 3) % CLASSES       # something learnable
        return x, y

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"moe-rank{rank}.json"))

    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            x, y = batch_for(step)
            opt.zero_grad(set_to_none=True)
            logits = net(x)
            ce = F.cross_entropy(logits.reshape(-1, CLASSES), y.reshape(-1))
            aux = sum(m.aux_loss for m in moes) / len(moes)
            loss = ce + args.aux * aux
            loss.backward()
            with torch.no_grad():
                if args.manual_dp:
                    for q in dense_params:
                        dist.all_reduce(q.grad)
                        q.grad.div_(world)
                for q in expert_params:
                    if q.grad is not None:
                        q.grad.div_(world)
            opt.step()
            prof.step()
            if rank == 0:
                print(f"step {step} loss {ce.item():.4f} aux {aux.item():.3f}", flush=True)

    # rows each rank's experts got in the last step's first layer (to see --skew at work)
    load = [torch.zeros((), dtype=torch.long) for _ in range(world)]
    dist.all_gather(load, torch.tensor(moes[0].last_load))
    if rank == 0:
        print(f"done in {time.perf_counter() - t0:.1f}s, expert rows per rank {[int(v) for v in load]}, "
              f"traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
