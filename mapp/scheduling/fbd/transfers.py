"""Tensors between workers, each transfer one request to the coordinator.

A worker posts a send or a receive on a :class:`~.layout.Channel` and goes on; the
coordinator's control thread runs the transfer (a broadcast on the pair's group) once both
ends posted theirs, in the global order. Receives allocate their buffer only then. A traced
transfer is a ``send``/``recv`` span (``cat: "p2p"``, lane ``comm``) with ``peer``, ``seq``
(the count of earlier transfers to/from that peer in that direction, traced or not),
``bytes``, ``dtype``, the channel ``kind`` and, where it has one, the ``microbatch``.
"""

from __future__ import annotations

from typing import Any

import torch

from mapp.capture.tracer import Granularity

from .coordinator import Coordinator, Request
from .layout import Channel
from .world import CrossWorld

__all__ = ["Transfers", "drop_finished"]

_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int64: "int64"}


class Transfers:
    """Sends and receives of the worker ``rank`` through ``coordinator`` over ``world``."""

    def __init__(self, coordinator: Coordinator, world: CrossWorld, rank: int, device: torch.device,
                 tracer: Any = None):
        self.coordinator, self.world, self.rank, self.device = coordinator, world, rank, device
        self.tracer = tracer if tracer is not None and getattr(tracer, "enabled", False) else None

    def send(self, channel: Channel, tensors: list[torch.Tensor], **meta: Any) -> Request:
        """Post the tensors' transfer to ``channel.dst`` (the request keeps them until it ran)."""
        assert channel.src == self.rank, (channel, self.rank)

        def op() -> None:
            self._move(channel, tensors, "send", channel.dst, meta)

        return self.coordinator.post(self.rank, channel.index, op)

    def recv(self, channel: Channel, specs: list[tuple[tuple[int, ...], torch.dtype]], **meta: Any) -> Request:
        """Post a receive of tensors of the given (shape, dtype) from ``channel.src``; the
        request's result is the list of tensors."""
        assert channel.dst == self.rank, (channel, self.rank)

        def op() -> list[torch.Tensor]:
            tensors = [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in specs]
            self._move(channel, tensors, "recv", channel.src, meta)
            return tensors

        return self.coordinator.post(self.rank, channel.index, op)

    def _move(self, channel: Channel, tensors: list[torch.Tensor], name: str, peer: int, meta: dict) -> None:
        tracer = self.tracer
        seq = tracer.next_seq((name, peer)) if tracer is not None else None
        t0 = tracer.stamp() if tracer is not None and tracer.wants(Granularity.SCHEDULE) else None
        for tensor in tensors:
            self.world.broadcast(tensor, channel.src, channel.dst)
        if t0 is not None:
            args = {"peer": peer, "seq": seq, "kind": channel.kind, "stage": channel.stage,
                    "bytes": sum(t.numel() * t.element_size() for t in tensors),
                    "dtype": _DTYPES.get(tensors[0].dtype, str(tensors[0].dtype).replace("torch.", "")),
                    **meta}
            tracer.emit(name, "p2p", t0, tid="comm", args=args)


def drop_finished(requests: list[Request]) -> list[Request]:
    """The requests that did not run yet (one that ran re-raises its error here)."""
    still = []
    for request in requests:
        if request.done():
            request.wait()
        else:
            still.append(request)
    return still
