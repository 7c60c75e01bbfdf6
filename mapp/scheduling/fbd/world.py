"""Two megatron-core jobs in one launch: each role its own default world, and a cross world.

Every worker belongs to an ordinary megatron-core job of its role: ``torch.distributed``'s
default world is the role's ranks only (the backward workers' ranks equal their global ranks,
the forward workers' are shifted by the number of backward workers), so ``parallel_state``,
the optimizer and the example's model builder work unchanged with the role's TP and PP.
What crosses roles goes through process groups built here on the launcher's store, outside
that world: a gloo group of all ranks for the coordinator's table, and one two-rank group per
pair of workers that exchange tensors (NCCL between two GPUs; gloo, which takes CUDA tensors
for broadcast, between two processes on one GPU or on CPUs).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Sequence

import torch
import torch.distributed as dist

from .layout import FbdLayout, Worker

__all__ = ["CrossWorld", "join_role_world", "devices_for", "shared_gpu"]

_PREFIX = "mapp-fbd"


def devices_for(layout: FbdLayout, placement: str, gpus: int, local_world: int) -> list[torch.device]:
    """The device of every rank. Without GPUs, the CPU. ``rank``: the GPU of the process's
    local rank. ``split``: backward workers share the first half of the GPUs, forward workers
    the second half (one GPU: all on it)."""
    if gpus == 0:
        return [torch.device("cpu")] * layout.world_size
    out = []
    for w in layout.workers():
        if placement == "rank":
            out.append(torch.device("cuda", (w.rank % local_world) % gpus))
            continue
        half = max(1, gpus // 2)
        pool = list(range(half)) if w.role == "backward" else (list(range(half, gpus)) or [0])
        index = w.rank if w.role == "backward" else w.rank - layout.backward_ranks
        out.append(torch.device("cuda", pool[index % len(pool)]))
    return out


def shared_gpu(layout: FbdLayout, devices: Sequence[torch.device]) -> str | None:
    """What would put two workers of one role on one GPU (None if nothing does). Their role
    world would then fall back to gloo, which megatron-core's gradient all-reduces of CUDA
    tensors (``allreduce_coalesced``) do not support: better to refuse at the start."""
    for role in ("backward", "forward"):
        placed: dict[torch.device, list[int]] = {}
        for r in layout.role_ranks(role):
            if devices[r].type == "cuda":
                placed.setdefault(devices[r], []).append(r)
        for device, ranks in placed.items():
            if len(ranks) > 1:
                return f"the {role} workers of ranks {', '.join(map(str, ranks))} on {device}"
    return None


def _backend(ranks: Sequence[int], devices: Sequence[torch.device]) -> str:
    placed = [devices[r] for r in ranks]
    if any(d.type != "cuda" for d in placed) or len(set(placed)) < len(placed):
        return "gloo"
    return "nccl"


def join_role_world(store: Any, layout: FbdLayout, me: Worker, devices: Sequence[torch.device],
                    timeout: timedelta) -> None:
    """``init_process_group`` over the ranks of ``me``'s role only."""
    ranks = layout.role_ranks(me.role)
    dist.init_process_group(_backend(ranks, devices), store=dist.PrefixStore(f"{_PREFIX}/{me.role}", store),
                            rank=ranks.index(me.rank), world_size=len(ranks), timeout=timeout)


def _group(store: Any, name: str, ranks: list[int], rank: int, devices: Sequence[torch.device],
           timeout: timedelta) -> Any:
    prefixed = dist.PrefixStore(f"{_PREFIX}/{name}", store)
    if _backend(ranks, devices) == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(prefixed, ranks.index(rank), len(ranks), options)
    return dist.ProcessGroupGloo(prefixed, ranks.index(rank), len(ranks), timeout)


class CrossWorld:
    """The process groups between roles, for the rank ``me``."""

    def __init__(self, store: Any, layout: FbdLayout, me: Worker, devices: Sequence[torch.device],
                 timeout: timedelta):
        self.me = me
        everyone = list(range(layout.world_size))
        self.table = dist.ProcessGroupGloo(dist.PrefixStore(f"{_PREFIX}/table", store), me.rank,
                                           layout.world_size, timeout)
        self.pairs: dict[tuple[int, int], Any] = {}
        pairs = sorted({tuple(sorted((c.src, c.dst))) for c in layout.channels()})
        # every rank builds its own pairs in one global order: building a group waits for
        # its other member, so two ranks building theirs in opposite orders would wait forever
        for a, b in pairs:
            if me.rank in (a, b):
                self.pairs[a, b] = _group(store, f"pair/{a}-{b}", [a, b], me.rank, devices, timeout)
        self.size = len(everyone)

    def broadcast(self, tensor: torch.Tensor, src: int, dst: int) -> None:
        """``tensor`` from ``src`` to ``dst`` (in place on ``dst``); both call it."""
        a, b = sorted((src, dst))
        options = dist.BroadcastOptions()
        options.rootRank = 0 if src == a else 1
        self.pairs[a, b].broadcast([tensor], options).wait()
