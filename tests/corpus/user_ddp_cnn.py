"""A second job written as a user writes one, unlike ``user_ddp_transformer.py`` in every way the
detector could lean on: a small convolutional network on random images under DDP (gloo on CPUs),
its batches from a map-style ``Dataset`` read in the training process, the whole run profiled in
one ``torch.profiler.profile`` block with no schedule and exported with ``export_chrome_trace``
(one ``trace-rank<R>.json`` a process, uncompressed). Steps are marked with ``prof.step()``
unless ``--no-step-marks`` (many users never call it: the trace then has no ``ProfilerStep#``).

A rank is slowed in software: ``--extra N`` runs the network's middle block (most of its
work) N more times in its forward, without gradients (results discarded), ``--sleep-ms`` sleeps on its host before each step,
``--data-sleep-ms`` sleeps in its dataset for each batch (read in the training process: a slow
input pipeline with nothing to hide it).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_ddp_cnn.py --out DIR --slow-rank 2 --extra 1
"""

from __future__ import annotations

import argparse
import pathlib
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory the traces are written to")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--extra", type=int, default=0, help="the slow rank's extra passes of the middle block")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="a host sleep on the slow rank before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="the slow rank's dataset sleeps per batch")
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--no-step-marks", action="store_true", help="never call prof.step()")
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = rank == a.slow_rank
    torch.manual_seed(0)
    c = a.channels

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())
            self.mid = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
                                     nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))

        def forward(self, x):
            h = self.stem(x)
            out = self.mid(h)
            if slow and a.extra:
                with torch.no_grad():
                    for _ in range(a.extra):
                        self.mid(h)
            return self.head(out)

    class Images(torch.utils.data.Dataset):
        def __len__(self):
            return a.steps

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(1000 * rank + i)
            if slow and a.data_sleep_ms:
                time.sleep(a.data_sleep_ms / 1000)
            return (torch.randn(a.batch, 3, a.image, a.image, generator=g),
                    torch.randint(0, 10, (a.batch,), generator=g))

    model = DDP(Net())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = Images()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for i in range(a.steps):
            if slow and a.sleep_ms:
                time.sleep(a.sleep_ms / 1000)
            x, y = data[i]
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if not a.no_step_marks:
                prof.step()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / f"trace-rank{rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
