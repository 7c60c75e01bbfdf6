"""Who is where: one all-gather tells every rank each rank's host and pid and the job's
name, from which the shared-memory segment names follow (``/mapp-<job>-<src>-<dst>``)."""

from __future__ import annotations

import os
import re
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist

from mapp.errors import TransportError

__all__ = ["Roster", "gather_roster", "segment_name"]


@dataclass(frozen=True, slots=True)
class Roster:
    """The group's ranks, their hosts and pids, and the job name all of them agreed on."""

    rank: int
    ranks: tuple[int, ...]
    hosts: dict[int, str]
    pids: dict[int, int]
    job: str

    def local_peers(self) -> list[int]:
        return [r for r in self.ranks if r != self.rank and self.hosts[r] == self.hosts[self.rank]]

    def remote_peers(self) -> list[int]:
        return [r for r in self.ranks if self.hosts[r] != self.hosts[self.rank]]

    def shares_a_host(self) -> bool:
        """Whether any two ranks of the group share a host (then shared memory is set up)."""
        return len(set(self.hosts.values())) < len(self.ranks)

    def spans_hosts(self) -> bool:
        return len(set(self.hosts.values())) > 1


def gather_roster(group: dist.ProcessGroup | None = None, job: str | None = None) -> Roster:
    """Collective over ``group``: every rank's host and pid, and the job name.

    The name is ``job``, else ``$MAPP_TRANSPORT_JOB``, else the launch's id
    (``$TORCHELASTIC_RUN_ID``, or the ``$MASTER_PORT``), followed by a random suffix drawn by
    the group's first rank: two transports of one job never share segment names.
    """
    if not dist.is_initialized():
        raise TransportError("torch.distributed is not initialized", "call torch.distributed.init_process_group first")
    rank = dist.get_rank()
    ranks = tuple(sorted(dist.get_process_group_ranks(group))) if group is not None else tuple(range(dist.get_world_size()))
    mine = (rank, _host(), os.getpid(), f"{_base_job(job)}.{secrets.token_hex(4)}")
    gathered: list = [None] * len(ranks)
    dist.all_gather_object(gathered, mine, group=group)
    by_rank = {entry[0]: entry for entry in gathered}
    return Roster(rank, ranks, {r: e[1] for r, e in by_rank.items()}, {r: e[2] for r, e in by_rank.items()}, by_rank[ranks[0]][3])


def segment_name(job: str, src: int, dst: int) -> str:
    return f"/mapp-{job}-{src}-{dst}"


def _base_job(job: str | None) -> str:
    raw = job or os.environ.get("MAPP_TRANSPORT_JOB") or os.environ.get("TORCHELASTIC_RUN_ID") or f"port{os.environ.get('MASTER_PORT', '0')}"
    return re.sub(r"[^A-Za-z0-9_.]", "_", raw)[:64]


def _host() -> str:
    """This machine as its /dev/shm sees it: the host name plus the kernel's boot id."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"
