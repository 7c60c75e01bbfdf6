"""A pipeline-parallel job written as a user writes one with PyTorch's own pipelining
(``torch.distributed.pipelining``), not megatron-core and not the corpus's harness: a stack of
MLP blocks split by hand into one ``PipelineStage`` a process, run by ``ScheduleGPipe`` or
``Schedule1F1B`` over gloo, profiled with ``torch.profiler`` (the profiler's defaults: no input
shapes, unless ``--shapes``) and written with ``export_chrome_trace`` (``trace-rank<r>.json``).
Its process groups are the world group alone (without ``--dp``): no trace says which stage a
rank is.

A rank is slowed in software: ``--extra N`` runs the slow rank's blocks N more times in each
microbatch's forward (results discarded: more of the same work), ``--sleep-ms`` sleeps on its
host before each step. ``--last-blocks K`` gives the last stage K blocks where the others have
``--blocks`` (a heavier last stage: an imbalance, not a fault). ``--dp N`` runs N replicas of the
pipeline on a 2-D ``DeviceMesh`` (``("pp", "dp")``: its groups are ``pg_config``'s ``mesh_pp``
and ``mesh_dp``), each stage under ``DistributedDataParallel`` over its ``dp`` group. ``--vpp V``
gives each process V stages, looped (stage ``i`` on process ``i mod world``: the last process
hands each microbatch back to the first), run by ``ScheduleInterleaved1F1B`` (world only).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_pipe.py --out DIR --slow-rank 2 --extra 1
"""

from __future__ import annotations

import argparse
import pathlib
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory the traces are written to")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--extra", type=int, default=0, help="the slow rank's extra passes of its blocks a microbatch")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="a host sleep on the slow rank before each step")
    p.add_argument("--blocks", type=int, default=2, help="MLP blocks a stage")
    p.add_argument("--last-blocks", type=int, default=None, help="the last stage's blocks (default --blocks)")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe"])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--shapes", action="store_true", help="record_shapes=True")
    p.add_argument("--dp", type=int, default=1, help="replicas of the pipeline (a 2-D mesh, DDP over dp)")
    p.add_argument("--vpp", type=int, default=1, help="stages a process, looped (ScheduleInterleaved1F1B)")
    a = p.parse_args()

    if a.batch % a.microbatches:
        p.error(f"--batch {a.batch} does not split into --microbatches {a.microbatches}: give a multiple of it")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % a.dp:
        p.error(f"--dp {a.dp} does not divide the world of {world} processes: give a divisor of it")
    slow = rank == a.slow_rank
    pp = world // a.dp
    mesh = init_device_mesh("cpu", (pp, a.dp), mesh_dim_names=("pp", "dp")) if a.dp > 1 else None
    stage_index = mesh["pp"].get_local_rank() if mesh is not None else rank
    torch.manual_seed(stage_index)
    w = a.width
    n_blocks = a.last_blocks if stage_index == pp - 1 and a.last_blocks else a.blocks

    class Part(nn.Module):
        def __init__(self, n_blocks: int):
            super().__init__()
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(w, 2 * w), nn.GELU(), nn.Linear(2 * w, w))
                                        for _ in range(n_blocks))

        def forward(self, x):
            for b in self.blocks:
                x = x + b(x)
            if slow and a.extra:
                with torch.no_grad():
                    for _ in range(a.extra):
                        h = x
                        for b in self.blocks:
                            h = h + b(h)
            return x

    def loss_fn(out, target):
        return nn.functional.mse_loss(out, target)

    if a.vpp > 1:
        # stage i on process i mod world, the last stage's blocks --last-blocks
        n_stages = world * a.vpp
        ids = [rank + k * world for k in range(a.vpp)]
        parts = [Part(a.last_blocks if i == n_stages - 1 and a.last_blocks else a.blocks) for i in ids]
        stages = [PipelineStage(m, i, n_stages, torch.device("cpu")) for m, i in zip(parts, ids)]
        schedule = ScheduleInterleaved1F1B(stages, n_microbatches=a.microbatches, loss_fn=loss_fn)
        params = [q for m in parts for q in m.parameters()]
        first, last = rank == 0, rank == world - 1
    else:
        part = Part(n_blocks)
        model = part if mesh is None else DDP(part, process_group=mesh["dp"].get_group())
        stage = PipelineStage(model, stage_index, pp, torch.device("cpu"),
                              group=None if mesh is None else mesh["pp"].get_group())
        kind = Schedule1F1B if a.schedule == "1f1b" else ScheduleGPipe
        schedule = kind(stage, n_microbatches=a.microbatches, loss_fn=loss_fn)
        params = list(part.parameters())
        first, last = stage_index == 0, stage_index == pp - 1
    opt = torch.optim.SGD(params, lr=1e-3)
    g = torch.Generator().manual_seed(7 + (0 if mesh is None else mesh["dp"].get_local_rank()))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=a.shapes,
                                schedule=torch.profiler.schedule(wait=1, warmup=1, active=a.steps - 2)) as prof:
        for _ in range(a.steps):
            x, y = torch.randn(a.batch, w, generator=g), torch.randn(a.batch, w, generator=g)
            if slow and a.sleep_ms:
                time.sleep(a.sleep_ms / 1000)
            opt.zero_grad()
            if first:
                schedule.step(x)
            elif last:
                schedule.step(target=y)
            else:
                schedule.step()
            opt.step()
            prof.step()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / f"trace-rank{rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
