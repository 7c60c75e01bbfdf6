"""Plain PyTorch DDP job for the trace corpus: an MLP trained with
``torch.nn.parallel.DistributedDataParallel`` over the world group (gloo on CPU, NCCL on a GPU),
or with FSDP2 (``--fsdp``: ``fully_shard`` per block), optionally traced with torch.profiler.

    torchrun --standalone --nproc_per_node=4 tests/corpus/ddp_job.py --profile-dir DIR \\
        [--slow-rank 2 --slow-factor 1.5] [--slow-rank 1 --slow-mode data-sleep --slow-ms 20]

Every step: the next batch from a ``torch.utils.data.DataLoader`` (synthetic regression data,
its own per rank, drawn on the rank's device), forward through ``--layers`` Linear+ReLU blocks, MSE loss, backward (DDP
all-reduces the gradient buckets), SGD step.

Fault injectors on ``--slow-rank``:

- ``--slow-mode matmul --slow-factor F``: forward runs about F times the matmuls: (F-1) x
  ``--layers`` extra ``F.linear`` calls of the blocks' own weights on their own inputs
  (the same shapes, real aten matmuls, results discarded, no autograd), spread evenly
  over the blocks (1.5x over 4 blocks: one extra in blocks 1 and 3).
- ``--slow-mode data-sleep --slow-ms MS``: the dataset sleeps MS ms on the host before it
  hands out each batch (inside the DataLoader's ``__next__``: a slow data path).
- ``--slow-mode step-sleep --slow-ms MS``: the training loop sleeps MS ms on the host at the
  start of each step, before it asks for the batch: a stall of the host's own, outside the data
  loader (inside the profiler's step span, which ``profiler.step()`` opens at the end of the
  step before).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

import _job


class Batches(torch.utils.data.IterableDataset):
    """Endless synthetic (x, y) batches; ``delay_s`` sleeps before each (the data-sleep fault).
    Made on ``device``: on a GPU, drawing a 4096 x 4096 batch on the host (~0.1-0.4 s on one
    thread) would take longer than the step it feeds and hide the GPU's part of it."""

    def __init__(self, batch: int, width: int, seed: int, delay_s: float, injected: _job.Injected,
                 device: torch.device = torch.device("cpu")):
        self.batch, self.width, self.seed, self.delay_s, self.injected = batch, width, seed, delay_s, injected
        self.device = device

    def __iter__(self):
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        while True:
            if self.delay_s and self.injected.on:
                t0 = time.perf_counter()
                time.sleep(self.delay_s)
                self.injected.add(time.perf_counter() - t0)
            x = torch.randn(self.batch, self.width, generator=gen, device=self.device)
            yield x, x.roll(1, dims=1).tanh()


class Block(nn.Linear):
    """A Linear block that runs ``extra`` more matmuls of its own weights on its input first
    (the matmul fault: no autograd, results discarded). Inside its own forward, where FSDP2 has
    gathered its weights."""

    def __init__(self, width: int, extra: int = 0, injected=None):
        super().__init__(width, width)
        self.extra, self.injected = extra, injected

    def forward(self, x):
        if self.extra and self.injected.on:
            t0 = time.perf_counter()
            with torch.no_grad():
                for _ in range(self.extra):
                    F.linear(x, self.weight, self.bias)
            self.injected.add(time.perf_counter() - t0)
        return super().forward(x)


class MLP(nn.Module):
    def __init__(self, width: int, layers: int, extra: list[int] | None = None, injected=None):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, e, injected) for e in (extra or [0] * layers))

    def forward(self, x):
        for block in self.blocks:
            x = F.relu(block(x))
        return x


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--fsdp", action="store_true", help="shard with FSDP2 (fully_shard per block) instead of DDP")
    _job.add_common_args(p)
    args = p.parse_args()

    rank, world, device = _job.init(args.seed)
    injected = _job.Injected(args.slow_from)
    slow = _job.is_slow(args, rank)
    extra = _job.extra_counts(args.slow_factor, args.layers) if slow and args.slow_mode == "matmul" else None
    model = MLP(args.width, args.layers, extra, injected).to(device)
    if args.fsdp:
        # FSDP2: every block's parameters sharded over the world group, all-gathered before its
        # forward and backward, its gradients reduce-scattered after its backward
        from torch.distributed.fsdp import fully_shard

        for block in model.blocks:
            fully_shard(block)
        ddp = fully_shard(model)
    else:
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    delay = args.slow_ms / 1e3 if slow and args.slow_mode == "data-sleep" else 0.0
    step_delay = args.slow_ms / 1e3 if slow and args.slow_mode == "step-sleep" else 0.0
    loader = torch.utils.data.DataLoader(Batches(args.batch, args.width, args.seed + rank, delay, injected, device),
                                         batch_size=None, num_workers=0)
    batches = iter(loader)

    profiler = _job.make_profiler(args, rank, device)
    if profiler is not None:
        profiler.start()
    step_s = []
    for _ in range(args.steps):
        _job.sync(device)
        t0 = time.perf_counter()
        if step_delay and injected.on:
            time.sleep(step_delay)
            injected.add(time.perf_counter() - t0)
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.mse_loss(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _job.sync(device)
        step_s.append(time.perf_counter() - t0)
        injected.close_step()
        if profiler is not None:
            profiler.step()
    if profiler is not None:
        profiler.stop()
    _job.write_timings(args.timings_json, rank, step_s, injected, {"extra_matmuls": extra})
    if rank == 0:
        print(f"done: {args.steps} steps, world {world}, step ms " + " ".join(f"{s * 1e3:.1f}" for s in step_s),
              flush=True)
    _job.leave()   # (no teardown at exit: ``_job.leave`` says why)


if __name__ == "__main__":
    main()
