"""What the corpus's plain-PyTorch jobs (``ddp_job.py``, ``tp_job.py``) share: process-group
start-up (gloo on CPU, NCCL on a GPU), the torch.profiler setup, the fault injectors' time
accounting and the per-rank timings file. Run under torchrun; not a test module."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def _ranks(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rank or comma-separated ranks (e.g. 3 or 2,3)") from None


def is_slow(args: argparse.Namespace, rank: int) -> bool:
    """Whether ``--slow-rank`` names ``rank``."""
    return args.slow_rank is not None and rank in args.slow_rank


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, default=7, help="training steps in all")
    p.add_argument("--profile-dir", default=None, help="torch.profiler trace per rank: DIR/rank-<r>.json")
    p.add_argument("--profile-wait", type=int, default=1, help="steps before the profiler starts")
    p.add_argument("--profile-warmup", type=int, default=1, help="profiler warm-up steps")
    p.add_argument("--profile-active", type=int, default=None, help="profiled steps (default: the rest)")
    p.add_argument("--timings-json", default=None, help="rank 0 writes every rank's step and injected times")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--slow-rank", type=_ranks, default=None, metavar="R[,R...]",
                   help="rank(s) that the fault injector slows (several comma-separated: a slow node's)")
    p.add_argument("--slow-factor", type=float, default=1.0, help="matmul count factor of --slow-rank")
    p.add_argument("--slow-mode", default="matmul", choices=["matmul", "data-sleep", "step-sleep"],
                   help="matmul: extra matmuls inside forward; data-sleep: sleep in the data path; "
                        "step-sleep: sleep in the training loop before each step")
    p.add_argument("--slow-ms", type=float, default=20.0, help="data-sleep, step-sleep: ms slept per step")
    p.add_argument("--slow-from", type=int, default=0, metavar="K",
                   help="the injector acts from step K (0-based) on: a fault that sets in midway (default 0)")
    p.add_argument("--profile-stop", default="synced", choices=["synced", "plain"],
                   help="synced: every rank ends its last recorded step before any stops its trace; plain: "
                        "each stops and writes its trace when it gets there, as a plain torch.profiler does")
    p.add_argument("--profile-record", default="shapes", choices=sorted(PROFILE_RECORDS),
                   help="what torch.profiler records besides ops: shapes (record_shapes), default (its "
                        "defaults: no shapes), tutorial (record_shapes, profile_memory, with_stack)")


# ``--profile-record``: torch.profiler's recording options, as the corpus asks (shapes) and as users
# call it (its defaults; PyTorch's profiler tutorial, with Python stacks and memory events). The same
# dict is in examples/train_gpt.py, which these plain jobs do not import (it pulls in megatron-core):
# change both, and make_corpus.PROFILE_RECORD_TEXT
PROFILE_RECORDS = {"shapes": dict(record_shapes=True), "default": {},
                   "tutorial": dict(record_shapes=True, profile_memory=True, with_stack=True)}


def init(seed: int) -> tuple[int, int, torch.device]:
    """Start the default process group: NCCL on a GPU (one per local rank), else gloo."""
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        dist.init_process_group("gloo")
        device = torch.device("cpu")
    rank = dist.get_rank()
    torch.manual_seed(seed + rank)
    return rank, dist.get_world_size(), device


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class Injected:
    """Seconds an injector added per step (host time; on a GPU the extra kernels run later), and
    whether the injectors act in this step (``--slow-from``: ``on`` from step ``start`` on, steps
    counted by ``close_step``)."""

    def __init__(self, start: int = 0) -> None:
        self.now = 0.0
        self.per_step: list[float] = []
        self.start = start

    @property
    def on(self) -> bool:
        return len(self.per_step) >= self.start

    def add(self, seconds: float) -> None:
        self.now += seconds

    def close_step(self) -> None:
        self.per_step.append(self.now)
        self.now = 0.0


def extra_counts(factor: float, slots: int, per_slot: int = 1) -> list[int]:
    """Spread ``(factor - 1) * slots * per_slot`` extra matmuls over ``slots`` places (layers),
    as evenly as whole numbers allow: 1.5x over 4 layers of 1 matmul is [0, 1, 0, 1]."""
    extra = max(0.0, factor - 1.0) * per_slot
    return [int((i + 1) * extra + 1e-9) - int(i * extra + 1e-9) for i in range(slots)]


def store_barrier(name: str) -> None:
    """Wait for every rank through the rendezvous store: no collective, nothing profiled."""
    store = dist.distributed_c10d._get_default_store()
    store.add(name, 1)
    while store.add(name, 0) < dist.get_world_size():
        time.sleep(0.002)


def leave() -> None:
    """End the job: every rank through a collective barrier, then through the store (so that no
    rank leaves while a peer still finishes the barrier's messages), then out at once, with no
    teardown of the gloo groups or the interpreter. A finished rank aborted at exit ("terminate
    called without an active exception", SIGABRT, the job's exit status 1) in 2 of 12 runs of a
    2-process job on 2 cores with no barrier, and once in a full test run after
    ``destroy_process_group`` behind a barrier: the abort is gloo's threads torn down at exit,
    not the job's work, and the outputs are written before."""
    dist.barrier()
    store_barrier("corpus-job-leave")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def make_profiler(args, rank: int, device: torch.device):
    """torch.profiler (CPU, + CUDA on a GPU; ``--profile-record``'s options) writing ``rank-<r>.json``, or None.
    With ``--profile-stop synced`` (the default) all ranks finish their last recorded step before
    any stops the trace (stopping takes the CPU a while, which on shared cores would slow the
    ranks still in that step); ``plain`` stops each where it gets there, as users' jobs do."""
    if not args.profile_dir:
        return None
    from torch.profiler import ProfilerActivity, profile, schedule

    class SyncedProfile(profile):
        def stop_trace(self):
            store_barrier("corpus-profiler-stop")
            super().stop_trace()

    maker = SyncedProfile if args.profile_stop == "synced" else profile

    os.makedirs(args.profile_dir, exist_ok=True)
    active = args.profile_active or max(1, args.steps - args.profile_wait - args.profile_warmup)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    path = os.path.join(args.profile_dir, f"rank-{rank}.json")
    return maker(activities=activities, **PROFILE_RECORDS[args.profile_record],
                 schedule=schedule(wait=args.profile_wait, warmup=args.profile_warmup, active=active, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path))


def write_timings(path: str | None, rank: int, step_s: list[float], injected: Injected, extra: dict | None = None):
    """Rank 0 writes ``{"step_s": [[...] per rank], "injected_s": [[...] per rank], ...}``."""
    if not path:
        return
    mine = {"step_s": step_s, "injected_s": injected.per_step, **(extra or {})}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        keys = sorted({k for d in everyone for k in d})
        with open(path, "w") as f:
            json.dump({k: [d.get(k) for d in everyone] for k in keys}, f)
