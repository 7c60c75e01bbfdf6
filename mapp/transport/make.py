"""``make_transport``: the one entry point, choosing a backend per peer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mapp.errors import TransportError
from mapp.transport.interface import Transport

if TYPE_CHECKING:
    import torch.distributed as dist

__all__ = ["make_transport", "BACKENDS"]

BACKENDS = ("auto", "shm", "dist")


def make_transport(group: dist.ProcessGroup | None = None, *, job: str | None = None, backend: str = "auto") -> Transport:
    """A transport between the ranks of ``group`` (the world by default); collective over them.

    ``backend``: ``"auto"`` (shared memory to peers on this host, torch.distributed to the
    others), ``"shm"`` (every peer must be on this host) or ``"dist"``. ``job`` names the
    shared-memory segments (default: ``$MAPP_TRANSPORT_JOB``, else derived from the launch).
    """
    if backend not in BACKENDS:
        raise TransportError(f"unknown transport backend {backend!r}", f"choose one of {', '.join(BACKENDS)}")
    from mapp.transport.dist import DistTransport

    if backend == "dist":
        return DistTransport(group)
    from mapp.transport.rendezvous import gather_roster
    from mapp.transport.shm import ShmTransport

    roster = gather_roster(group, job)
    if backend == "shm":
        return ShmTransport(group, roster=roster)
    from mapp.transport.hybrid import HybridTransport

    # every rank takes the same branches (the roster is the same everywhere): both
    # constructions are collective over the group
    far = DistTransport(group, peers=roster.remote_peers()) if roster.spans_hosts() else None
    if far is None:
        return ShmTransport(group, roster=roster)
    near = ShmTransport(group, roster=roster, peers=roster.local_peers()) if roster.shares_a_host() else None
    return HybridTransport(near, far)
