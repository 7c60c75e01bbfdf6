"""``examples/train_gpt.py --fbd``: the example's training with forward and backward decoupled.

::

    torchrun --nproc_per_node=4 examples/train_gpt.py --pp 2 --fbd            # 2 + 2 workers
    torchrun --nproc_per_node=6 examples/train_gpt.py --tp 2 --pp 2 --fbd --fbd-forward-tp 1

The world is ``pp x (tp + forward tp)`` processes (:class:`~.layout.FbdLayout`): backward
workers first, with the ranks the coupled run's ranks have, then forward workers. It prints
what the coupled run prints: ``iteration N loss X step T ms`` on the backward worker of the
last stage (the rank that owns the loss) and ``done: ...`` on rank 0. With ``--trace``, every
worker writes its trace file; the forward workers' files name the pipeline stage and TP rank
but no data-parallel coordinate (they are outside the training layout), so that ``mapp trace
merge`` puts each stage's forward workers right below its backward workers.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from .allreduce import TorchMaxAllReduce
from .backward import BackwardWorker
from .coordinator import Coordinator
from .forward import ForwardWorker
from .layout import BACKWARD, FbdLayout, Worker
from .model import build_forward_model, build_optimizer
from .transfers import Transfers
from .world import CrossWorld, devices_for, join_role_world, shared_gpu

__all__ = ["Example", "main", "layout_from_args", "UNSUPPORTED"]

UNSUPPORTED = {
    "vpp": "--vpp", "seq_lognormal": "--seq-lognormal", "slow_rank": "--slow-rank", "link_slow": "--link-slow",
    "profile_dir": "--profile-dir", "scope_port": "--scope-port", "groups_json": "--groups-json",
    "timings_json": "--timings-json", "use_dpp": "--use-dpp", "grads_dir": "--grads-dir",
}
"""Example flags the decoupled run does not take (each makes it stop with one line)."""


@dataclass(kw_only=True, slots=True)
class Example:
    """What ``examples/train_gpt.py`` lends the decoupled run."""

    build_model: Callable
    """``(args, device) -> (config, chunks)``: the backward workers' DDP-wrapped stage."""
    gpt_config: Callable
    """``(args, device, tp) -> TransformerConfig``: the GPT's config at a TP size."""
    gpt_module: Callable
    """``(args, config, device) -> module``: this rank's bare GPT stage (the forward workers')."""
    batches: Callable
    """``(args, device, replica) -> iterator`` of the synthetic batches."""
    forward_step: Callable
    """``(data, model) -> (output, loss_func)``, the schedules' forward step function."""
    install_tracing: Callable
    """``mapp.megatron_hooks.flags.install_from_args``."""
    apply_cpu_patches: Callable
    """``mapp.megatron_hooks.cpu_patches.apply_if_cpu``."""


def layout_from_args(args: Any) -> FbdLayout:
    """The decoupled world of the flags; a bad combination stops with one line."""
    forward_tp = args.fbd_forward_tp if args.fbd_forward_tp is not None else args.tp
    try:
        return FbdLayout(pp=args.pp, backward_tp=args.tp, forward_tp=forward_tp)
    except ValueError as error:
        raise SystemExit(f"--fbd: {error} (--tp {args.tp}, --fbd-forward-tp {forward_tp})") from None


def _check(args: Any) -> None:
    for attr, flag in UNSUPPORTED.items():
        if getattr(args, attr, None) not in (None, False):
            raise SystemExit(f"--fbd does not take {flag}")


def _tracer_config(args: Any, layout: FbdLayout, me: Worker, device: torch.device):
    from mapp.capture.tracer import TracerConfig
    from mapp.capture.window import Window

    if me.role == BACKWARD:
        grid = {"tp": layout.backward_tp, "pp": layout.pp, "dp": 1, "cp": 1, "ep": 1, "vpp": 1}
        coords = {"tp": me.tp, "pp": me.stage, "dp": 0, "cp": 0, "ep": 0}
    else:  # outside the training grid: no tp size (it may differ), no dp coordinate
        grid = {"pp": layout.pp, "dp": 1, "cp": 1, "ep": 1, "vpp": 1}
        coords = {"tp": me.tp, "pp": me.stage}
    partners = ([layout.forward_partner(me)] if me.role == BACKWARD
                else layout.backward_partners(me))
    return TracerConfig(
        enabled=bool(args.trace), trace_dir=args.trace_dir,
        window=Window(interval=args.trace_interval, length=args.continuous_trace_iterations, start=args.trace_start),
        granularity=args.trace_granularity, clock=args.trace_clock, rank=me.rank, world_size=layout.world_size,
        layout=grid, coords=coords,
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        extra_metadata={"fbd": {"role": me.role, "stage": me.stage, "tp": me.tp, "partners": partners,
                                "backward_tp": layout.backward_tp, "forward_tp": layout.forward_tp}},
    )


def _global_group_ranks(tracing: Any, offset: int) -> None:
    """Make a forward worker's traced collectives name the global ranks of their groups.

    The tracer looks a group's ranks up in ``torch.distributed``'s default world, which for a
    forward worker is its role's world (ranks shifted by ``offset``); unshifted, its TP group
    would claim the backward workers' ranks and ``mapp trace merge`` would pair their
    collectives with the wrong processes."""
    names = getattr(getattr(tracing, "ctx", None), "groups", None)
    if names is None:  # tracing off
        return
    register = names.register

    def shifted(name: str, group: Any) -> None:
        known = id(group) in names._by_id
        register(name, group)
        if not known and id(group) in names._by_id:
            group, info = names._by_id[id(group)]
            ranks = [r + offset for r in info.ranks]
            names._by_id[id(group)] = (group, info._replace(ranks=ranks, key=(info.name, tuple(ranks))))

    for key, (group, info) in list(names._by_id.items()):
        ranks = [r + offset for r in info.ranks]
        names._by_id[key] = (group, info._replace(ranks=ranks, key=(info.name, tuple(ranks))))
    names.register = shifted


def main(args: Any, example: Example) -> None:
    _check(args)
    layout = layout_from_args(args)
    timeout = timedelta(seconds=float(os.environ.get("MAPP_FBD_TIMEOUT_S", 600)))
    if args.bf16 and not torch.cuda.is_available():
        raise SystemExit("--bf16 needs a GPU (megatron-core's bf16 optimizer takes CUDA tensors only)")
    launched = int(os.environ.get("WORLD_SIZE", layout.world_size))
    if launched != layout.world_size:  # before the rendezvous: every process stops at once
        raise SystemExit(f"--fbd with {layout.describe()} needs {layout.world_size} processes, got {launched}")
    store, rank, world = next(dist.rendezvous("env://"))
    me = layout.worker(rank)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    devices = devices_for(layout, args.fbd_placement, gpus, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    crowded = shared_gpu(layout, devices)
    if crowded:  # before any group: every process stops at once with the same line
        raise SystemExit(f"--fbd-placement {args.fbd_placement} on {gpus} GPU(s) puts {crowded}; megatron-core's "
                         "collectives need NCCL, one GPU per rank of a role: use more GPUs, --fbd-placement rank, or a smaller --pp/--tp")
    device = devices[rank]
    if device.type == "cuda":
        torch.cuda.set_device(device)
    join_role_world(store, layout, me, devices, timeout)
    example.apply_cpu_patches()
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    ps.initialize_model_parallel(tensor_model_parallel_size=layout.tp_size(me.role),
                                 pipeline_model_parallel_size=args.pp)
    model_parallel_cuda_manual_seed(args.seed)
    # as the example: CPU-built weights come from torch's default generator, so a backward
    # worker starts from the weights its rank has in the coupled run
    torch.manual_seed(args.seed)
    cross = CrossWorld(store, layout, me, devices, timeout)

    if me.role == BACKWARD:
        config, chunks = example.build_model(args, device)
        model, optimizer = chunks[0], build_optimizer(args, chunks)
    else:
        config, model = build_forward_model(args, device, example.gpt_config, example.gpt_module)
        optimizer = None
    tracing = example.install_tracing(args, model=[model], optimizer=optimizer,
                                      config=_tracer_config(args, layout, me, device))
    if me.role != BACKWARD:
        _global_group_ranks(tracing, layout.backward_ranks)
    coordinator = Coordinator(
        [(c.src, c.dst) for c in layout.channels()], [rank], TorchMaxAllReduce(cross.table),
        on_start=(lambda: torch.cuda.set_device(device)) if device.type == "cuda" else None,
    ).start()
    transfers = Transfers(coordinator, cross, rank, device, tracing.tracer)
    common = dict(me=me, layout=layout, model=model, transfers=transfers, data=example.batches(args, device, 0),
                  forward_step=example.forward_step, num_microbatches=args.num_microbatches,
                  activation=((args.seq, args.micro_batch_size, args.hidden), config.params_dtype),
                  tracer=tracing.tracer)
    if me.role == BACKWARD:
        worker = BackwardWorker(config=config, optimizer=optimizer, **common)
        worker.publish(0)
    else:
        worker = ForwardWorker(**common)
    owner = layout.rank(BACKWARD, layout.pp - 1, layout.backward_tp - 1)

    step_s = []
    for it in range(args.iterations):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with tracing.iteration(it):
            losses = worker.step(it)
            if me.role == BACKWARD and it + 1 < args.iterations:
                worker.publish(it + 1)
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_s.append(time.perf_counter() - t0)
        if rank == owner and losses:
            loss = torch.stack([x["loss"] for x in losses]).mean().item()
            print(f"iteration {it} loss {loss:.4f} step {step_s[-1] * 1e3:.1f} ms", flush=True)

    coordinator.finish(rank)
    coordinator.join()
    tracing.close()
    if rank == 0:
        med = statistics.median(step_s[1:] or step_s)
        print(f"done: {args.iterations} iterations, median step {med * 1e3:.1f} ms (fbd: {layout.describe()}; "
              f"{coordinator.rounds} coordinator rounds, {coordinator.collectives} transfers on rank 0)", flush=True)
    # the process groups are the caller's to leave (examples/train_gpt.py: leave_distributed)
