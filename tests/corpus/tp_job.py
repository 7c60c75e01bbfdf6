"""Plain PyTorch DP x TP job for the trace corpus (no Megatron): process groups built with
``torch.distributed.new_group`` and left without descriptions (the profiler's pg_config lists
them under their default ones), traced with torch.profiler.

    torchrun --standalone --nproc_per_node=4 tests/corpus/tp_job.py --tp 2 --profile-dir DIR \\
        [--slow-rank 1 --slow-factor 1.6]

Ranks are laid out TP-first: with 4 ranks and ``--tp 2``, TP pairs [0, 1] and [2, 3], DP pairs
[0, 2] and [1, 3]. The model is ``--layers`` Megatron-style tensor-parallel MLP blocks: a
column-parallel Linear (``width`` -> ``ffn/tp``, its input gradient all-reduced over the TP
group in backward), GELU, a row-parallel Linear (``ffn/tp`` -> ``width``, its output
all-reduced over the TP group in forward), plus a residual. After backward the gradients are
flattened into one buffer and all-reduced (averaged) over the DP group; then SGD.

``--slow-rank R --slow-factor F``: rank R's forward runs (F-1) x 6 extra matmuls per block
(a block's forward + backward is 6 matmuls of these shapes), spread over the blocks as evenly
as whole numbers allow, each a real aten matmul of the block's own input and weight shard with
the result discarded (no autograd): its compute takes about F times as long.
``--slow-mode data-sleep --slow-ms MS``: rank R sleeps MS ms on its host before it draws each
batch (its data path; the job has no DataLoader, its batches are drawn in the loop).
``--slow-mode step-sleep --slow-ms MS``: rank R sleeps MS ms at the start of each step, before
anything else of it. (The job once took both modes and ignored them: a rank "slowed" so ran as
its peers did, which a held-out set found by its manifest's ``injected_ms_per_step`` of 0.)
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import _job


class _CopyToTP(torch.autograd.Function):
    """Identity forward; all-reduce of the input gradient over the TP group in backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """All-reduce over the TP group in forward; identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class TPBlock(nn.Module):
    def __init__(self, width: int, ffn_shard: int, group, extra: int, injected: _job.Injected):
        super().__init__()
        self.fc1 = nn.Linear(width, ffn_shard)
        self.fc2 = nn.Linear(ffn_shard, width, bias=False)
        self.group, self.extra, self.injected = group, extra, injected

    def forward(self, x):
        h_in = _CopyToTP.apply(x, self.group)
        h = F.gelu(self.fc1(h_in))
        if self.extra and self.injected.on:
            t0 = time.perf_counter()
            with torch.no_grad():
                for i in range(self.extra):   # alternate the block's two matmul shapes
                    if i % 2 == 0:
                        torch.matmul(x, self.fc1.weight.t())
                    else:
                        torch.matmul(h, self.fc2.weight.t())
            self.injected.add(time.perf_counter() - t0)
        out = _ReduceFromTP.apply(self.fc2(h), self.group)
        return x + out


def build_groups(world: int, tp: int):
    """All ranks create every group in the same order (``new_group`` is collective)."""
    rank = dist.get_rank()
    tp_group = dp_group = None
    for start in range(0, world, tp):
        ranks = list(range(start, start + tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            tp_group, tp_ranks = g, ranks
    for first in range(tp):
        ranks = list(range(first, world, tp))
        g = dist.new_group(ranks)
        if rank in ranks:
            dp_group, dp_ranks = g, ranks
    return tp_group, tp_ranks, dp_group, dp_ranks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--batch", type=int, default=64)
    _job.add_common_args(p)
    args = p.parse_args()

    rank, world, device = _job.init(args.seed)
    tp_group, tp_ranks, dp_group, dp_ranks = build_groups(world, args.tp)
    dp_rank = dp_ranks.index(rank)
    torch.manual_seed(args.seed + tp_ranks.index(rank))   # same weights across DP replicas
    injected = _job.Injected(args.slow_from)
    slow = _job.is_slow(args, rank)
    extra = (_job.extra_counts(args.slow_factor, args.layers, per_slot=6) if slow and args.slow_mode == "matmul"
             else [0] * args.layers)
    data_delay = args.slow_ms / 1e3 if slow and args.slow_mode == "data-sleep" else 0.0
    step_delay = args.slow_ms / 1e3 if slow and args.slow_mode == "step-sleep" else 0.0
    blocks = nn.Sequential(*[TPBlock(args.width, args.ffn // args.tp, tp_group, e, injected) for e in extra]).to(device)
    params = [q for q in blocks.parameters()]
    opt = torch.optim.SGD(params, lr=1e-3)
    gen = torch.Generator().manual_seed(args.seed + 1000 * dp_rank)   # TP peers see the same batch

    profiler = _job.make_profiler(args, rank, device)
    if profiler is not None:
        profiler.start()
    step_s = []
    for _ in range(args.steps):
        _job.sync(device)
        t0 = time.perf_counter()
        for delay in (step_delay, data_delay):   # the step's start, then its data path
            if delay and injected.on:
                t1 = time.perf_counter()
                time.sleep(delay)
                injected.add(time.perf_counter() - t1)
        x = torch.randn(args.batch, args.width, generator=gen).to(device)
        y = x.roll(1, dims=1).tanh()
        loss = F.mse_loss(blocks(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        flat = torch._utils._flatten_dense_tensors([q.grad for q in params])
        dist.all_reduce(flat, group=dp_group)
        flat /= len(dp_ranks)
        for q, g in zip(params, torch._utils._unflatten_dense_tensors(flat, [q.grad for q in params])):
            q.grad.copy_(g)
        opt.step()
        _job.sync(device)
        step_s.append(time.perf_counter() - t0)
        injected.close_step()
        if profiler is not None:
            profiler.step()
    if profiler is not None:
        profiler.stop()
    _job.write_timings(args.timings_json, rank, step_s, injected,
                       {"extra_matmuls": extra, "tp_group": tp_ranks, "dp_group": dp_ranks})
    if rank == 0:
        print(f"done: {args.steps} steps, tp{args.tp} dp{world // args.tp}, step ms "
              + " ".join(f"{s * 1e3:.1f}" for s in step_s), flush=True)
    _job.leave()   # (no teardown at exit: ``_job.leave`` says why)


if __name__ == "__main__":
    main()
