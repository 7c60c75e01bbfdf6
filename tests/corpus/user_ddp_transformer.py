"""A DDP job written as a user writes one, not through the corpus's harness (``_job.py``): a
small ``nn.TransformerEncoder`` (over an embedding of token ids) under DistributedDataParallel,
profiled with ``torch.profiler.schedule`` and ``tensorboard_trace_handler`` (one
``<host>_<pid>.<ns>.pt.trace.json`` a process, no rank in the name), the profiler's defaults
otherwise (no input shapes).

A rank is slowed in software: ``--factor F`` adds (F - 1) x 12 matmuls a layer of the encoder's
output against a ``d x d`` weight to its forward (results discarded; under ``--compile`` added to
the output, times 1e-6), ``--sleep-ms`` sleeps on its host before each step. ``--sync`` reads the
loss each step, as a logging loop does (on GPUs the host then waits for its kernels). The
schedule's cycle (wait 1, warmup 1, active 4) repeats, as its default ``repeat=0`` does:
``--steps 14`` writes three files a process, two cycles of four steps and the two steps the job
ended in.

Ways users' jobs differ, each a flag: ``--seq-sigma S`` pads each step's batch to its own length
(the sequence length x a lognormal draw of sigma S, per rank: dynamic padding, an imbalance, not a
fault); ``--accum N`` accumulates N microbatches a step, the first N - 1 under ``no_sync()``;
``--loader-workers N`` reads batches from a ``DataLoader`` with N worker processes, and
``--data-sleep-ms`` then sleeps in the slow rank's dataset for each batch (a slow input pipeline,
hidden by the workers' prefetch until it outruns them); ``--manual`` all-reduces each gradient
itself, without DDP; ``--compile`` compiles the model (``torch.compile`` of the DDP module);
``--gpu-hog D`` shares the slow rank's GPU with another process busy D of each 20 ms (a GPU that
is slower on the same work: ``examples/train_gpt.py``'s neighbour); ``--fsdp`` shards the model
with FSDP2 (``fully_shard`` per encoder layer and the whole) instead of DDP; ``--amp`` runs the
forward under ``torch.autocast`` (bfloat16); ``--clip`` clips the gradients' norm each step;
``--annotate`` wraps forward, backward and the optimizer step in ``record_function`` ranges;
``--cuda-sync`` synchronises the GPU after each step, as timing loops do; ``--host-only`` profiles
a GPU job's CPU activity alone (no kernels in the trace).

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_ddp_transformer.py --out DIR --slow-rank 0 --factor 1.4
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


VOCAB = 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory the profiler writes its traces to")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0, help="the slow rank's forward matmuls, x its peers'")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="a host sleep on the slow rank before each step")
    p.add_argument("--shapes", action="store_true", help="record_shapes=True")
    p.add_argument("--sync", action="store_true", help="read the loss each step")
    p.add_argument("--cuda", action="store_true", help="NCCL on one GPU a process (else gloo on CPUs)")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=7, help="training steps (a profiling cycle is 6)")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="each step's length: --seq x lognormal(0, S)")
    p.add_argument("--accum", type=int, default=1, help="microbatches a step (gradients synchronised on the last)")
    p.add_argument("--loader-workers", type=int, default=0, help="batches from a DataLoader with N workers")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="the slow rank's dataset sleeps per batch")
    p.add_argument("--manual", action="store_true", help="all-reduce each gradient by hand, without DDP")
    p.add_argument("--compile", action="store_true", help="torch.compile the DDP model")
    p.add_argument("--gpu-hog", type=float, default=0.0,
                   help="the slow rank's GPU shared with another process, busy this share of each 20 ms")
    p.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard per layer) instead of DDP")
    p.add_argument("--amp", action="store_true", help="the forward under torch.autocast(bfloat16)")
    p.add_argument("--clip", action="store_true", help="clip the gradients' norm to 1 each step")
    p.add_argument("--annotate", action="store_true", help="record_function ranges for forward, backward, step")
    p.add_argument("--cuda-sync", action="store_true", help="torch.cuda.synchronize() after each step")
    p.add_argument("--host-only", action="store_true", help="profile CPU activity only, on GPUs too")
    a = p.parse_args()
    if a.gpu_hog and not a.cuda:
        p.error("--gpu-hog shares a GPU: add --cuda")
    if (a.cuda_sync or a.host_only) and not a.cuda:
        p.error("--cuda-sync and --host-only are about a GPU job: add --cuda")
    if a.fsdp and (a.manual or a.compile):
        p.error("--fsdp shards the model itself: drop --manual / --compile")

    dist.init_process_group("nccl" if a.cuda else "gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    dev = torch.device(f"cuda:{rank}") if a.cuda else torch.device("cpu")
    if a.cuda:
        torch.cuda.set_device(dev)
    d, slow = a.width, rank == a.slow_rank
    hog = None
    if slow and a.gpu_hog and a.cuda:
        # examples/train_gpt.py's neighbour process: its own CUDA context on this rank's GPU
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
        from train_gpt import start_gpu_hog
        hog = start_gpu_hog(dev, a.gpu_hog)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, d)
            layer = nn.TransformerEncoderLayer(d, max(4, d // 64), 4 * d, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, a.layers)
            self.head = nn.Linear(d, 10)

        def forward(self, tokens):
            h = self.enc(self.embed(tokens))
            if slow and a.factor > 1:
                w = torch.randn(d, d, device=h.device)
                for _ in range(int((a.factor - 1) * 12 * a.layers)):
                    if a.compile:   # a compiled graph drops work whose result is unused
                        h = h + 1e-6 * (h @ w)
                    else:
                        _ = h @ w
            return self.head(h.mean(1))

    class Batches(torch.utils.data.Dataset):
        """Batch ``i`` of this rank: its own lengths under --seq-sigma, a sleep under --data-sleep-ms."""

        def __len__(self):
            return a.steps * a.accum

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(1000 * rank + i)
            length = a.seq
            if a.seq_sigma:
                draw = torch.empty(1).log_normal_(0.0, a.seq_sigma, generator=g).item()
                length = max(8, min(4 * a.seq, round(a.seq * draw)))
            if slow and a.data_sleep_ms:
                time.sleep(a.data_sleep_ms / 1000)
            return (torch.randint(0, VOCAB, (a.batch, length), generator=g),
                    torch.randint(0, 10, (a.batch,), generator=g))

    net = Model().to(dev)
    if a.fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        # on a machine with GPUs fully_shard's default mesh is CUDA's, which gloo cannot serve
        mesh = init_device_mesh(dev.type, (dist.get_world_size(),))
        for layer in net.enc.layers:
            fully_shard(layer, mesh=mesh)
        model = fully_shard(net, mesh=mesh)
    else:
        model = net if a.manual else DDP(net, device_ids=[rank] if a.cuda else None)
    if a.compile:
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(torch.utils.data.DataLoader(Batches(), batch_size=None, shuffle=False,
                                               num_workers=a.loader_workers))

    def span(name):
        return torch.profiler.record_function(name) if a.annotate else contextlib.nullcontext()

    def no_sync(last):
        if last or a.manual:
            return contextlib.nullcontext()
        if a.fsdp:   # FSDP2's form of no_sync: reduce-scatter only on the last microbatch
            model.set_requires_gradient_sync(False)
            return contextlib.nullcontext()
        return model.no_sync()

    def step():
        if slow and a.sleep_ms:
            time.sleep(a.sleep_ms / 1000)
        opt.zero_grad()
        for k in range(a.accum):
            x, y = next(batches)
            x, y = x.to(dev), y.to(dev)
            last = k == a.accum - 1
            if a.fsdp and last:
                model.set_requires_gradient_sync(True)
            with no_sync(last):
                with span("forward"), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.amp):
                    loss = nn.functional.cross_entropy(model(x), y) / a.accum
                with span("backward"):
                    loss.backward()
        if a.manual:
            for q in model.parameters():
                dist.all_reduce(q.grad)
                q.grad /= dist.get_world_size()
        with span("optimizer"):
            if a.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        if a.sync:
            loss.item()
        if a.cuda_sync:
            torch.cuda.synchronize()

    gpu = a.cuda and not a.host_only
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
    with torch.profiler.profile(activities=activities, record_shapes=a.shapes,
                                schedule=torch.profiler.schedule(wait=1, warmup=1, active=4),
                                on_trace_ready=torch.profiler.tensorboard_trace_handler(a.out, use_gzip=True)) as prof:
        for _ in range(a.steps):
            step()
            prof.step()
    if hog is not None:
        hog.terminate()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
