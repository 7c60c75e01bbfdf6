"""A third job written as a user writes one: tensor parallelism the way PyTorch documents it, not
by hand (``tp_job.py``) nor through megatron-core. A 2-D device mesh (``dp`` x ``tp``), an MLP
stack whose linears are split with ``parallelize_module`` (``ColwiseParallel`` then
``RowwiseParallel``: DTensor and functional collectives), and FSDP2 (``fully_shard``) over the
``dp`` dimension; gloo on CPUs. Profiled with ``torch.profiler.schedule`` (no input shapes unless
``--shapes``) and exported per rank with ``export_chrome_trace`` (``rank<R>.json.gz``).

A rank is slowed in software: ``--extra N`` adds N matmuls of its hidden activations against a
square weight to each block's forward (results discarded), ``--sleep-ms`` sleeps on its host
before each step.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_dtensor_tp.py --out DIR --slow-rank 1 --extra 4
"""

from __future__ import annotations

import argparse
import pathlib
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory the traces are written to")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--extra", type=int, default=0, help="the slow rank's extra matmuls a block")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="a host sleep on the slow rank before each step")
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--shapes", action="store_true", help="record_shapes=True")
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world // a.tp, a.tp), mesh_dim_names=("dp", "tp"))
    slow = rank == a.slow_rank
    torch.manual_seed(0)
    d = a.width

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(d, 4 * d)
            self.down = nn.Linear(4 * d, d)

        def forward(self, x):
            h = torch.relu(self.up(x))
            if slow and a.extra:
                w = torch.ones(h.shape[-1], h.shape[-1]) / h.shape[-1]
                local = h.to_local() if hasattr(h, "to_local") else h
                with torch.no_grad():
                    for _ in range(a.extra):
                        _ = local @ w
            return x + self.down(h)

    model = nn.Sequential(*[Block() for _ in range(a.blocks)], nn.Linear(d, 10))
    for block in model[:-1]:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
    for block in model[:-1]:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(mesh["dp"].get_local_rank())   # TP peers see the same batch

    def step():
        if slow and a.sleep_ms:
            time.sleep(a.sleep_ms / 1000)
        x = torch.randn(a.batch, d, generator=g)
        y = torch.randint(0, 10, (a.batch,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    def save(prof):
        prof.export_chrome_trace(str(out / f"rank{rank}.json.gz"))

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=a.shapes,
                                schedule=torch.profiler.schedule(wait=1, warmup=1, active=a.steps - 2),
                                on_trace_ready=save) as prof:
        for _ in range(a.steps):
            step()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
