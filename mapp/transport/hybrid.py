"""``HybridTransport``: shared memory to the peers on this host, torch.distributed to the rest."""

from __future__ import annotations

import torch

from mapp.transport.dist import DistTransport
from mapp.transport.interface import Transport, Work
from mapp.transport.shm import ShmTransport

__all__ = ["HybridTransport"]


class HybridTransport(Transport):
    """Routes each message by its peer; either part may be absent (no local or no remote peer)."""

    def __init__(self, near: ShmTransport | None, far: DistTransport | None):
        self._near = near
        self._local = set(near.peers) if near is not None else set()
        self._far = far

    def isend(self, tensor: torch.Tensor, dst: int, tag: int) -> Work:
        return self._route(dst).isend(tensor, dst, tag)

    def irecv(self, src: int, tag: int) -> Work:
        return self._route(src).irecv(src, tag)

    def close(self) -> None:
        for part in (self._near, self._far):
            if part is not None:
                part.close()

    def _route(self, peer: int) -> Transport:
        if peer in self._local or self._far is None:
            return self._near  # type: ignore[return-value]  # it reports a peer it does not know
        return self._far
