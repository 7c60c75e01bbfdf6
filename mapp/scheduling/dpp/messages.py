"""The pipeline messages of one DPP step: their tags, and their spans in mapp's trace.

Every message is named by the task that receives it: (kind, virtual stage, microbatch) of the
step, ``kind`` 0 for a forward's input activation, 1 for a backward's output gradient. The tag
holds that name and the step modulo 4, so that a stage already in the next step cannot have its
message taken for this one.

In the trace a message is a ``send`` on its sender and a ``recv`` on its receiver. The send is
asynchronous: its span is its post, marked ``async: true`` as the capture marks megatron's
overlapped p2p (its end is not the delivery, so it says nothing of when the receiver got it);
the receive spans from when the rank was free for the task that needs it until the tensor was
in hand, its wait. They are paired by
the analysis on (src, dst, ``seq``). A fixed schedule numbers a pair's messages in the order
both ends exchange them; a dynamic one runs them in whatever order readiness gave, so here the
seq is the message's place among the pair's messages of the step sorted by tag (an order both
ends know without asking), after the pair's messages of earlier steps. Those counts advance
every step, traced or not, so that every rank numbers alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mapp.capture.tracer import Granularity
from mapp.trace_format import dtype_name

__all__ = ["FORWARD", "BACKWARD", "StepMessages"]

FORWARD, BACKWARD = 0, 1
_STEPS_APART = 4


class StepMessages:
    """Tags, seq numbers and trace spans of one step's messages, for global rank ``me``.

    ``rank_of(stage)``: the global rank that runs virtual stage ``stage``. ``counts``: per
    (src, dst), messages of earlier steps (updated by :meth:`advance`). ``tracer``: mapp's
    capture tracer or ``None``.
    """

    def __init__(self, *, step: int, stages: int, microbatches: int, rank_of: Callable[[int], int], me: int,
                 counts: dict[tuple[int, int], int], tracer: Any = None):
        self.step, self.stages, self.microbatches = step, stages, microbatches
        self.rank_of, self.me, self.counts = rank_of, me, counts
        traced = tracer is not None and getattr(tracer, "enabled", False) and tracer.wants(Granularity.SCHEDULE)
        self.tracer = tracer if traced else None
        self._seq = self._number() if self.tracer is not None else {}

    def tag(self, kind: int, stage: int, microbatch: int) -> int:
        """The tag of the message that task (``kind``, ``stage``, ``microbatch``) receives."""
        step = self.step % _STEPS_APART
        return ((step * 2 + kind) * self.stages + stage) * self.microbatches + microbatch

    def _pairs(self) -> dict[tuple[int, int], list[int]]:
        """Every message of the step, as tags per (src, dst) global ranks, sorted."""
        pairs: dict[tuple[int, int], list[int]] = {}
        for stage in range(self.stages):
            for m in range(self.microbatches):
                if stage > 0:
                    key = (self.rank_of(stage - 1), self.rank_of(stage))
                    pairs.setdefault(key, []).append(self.tag(FORWARD, stage, m))
                if stage < self.stages - 1:
                    key = (self.rank_of(stage + 1), self.rank_of(stage))
                    pairs.setdefault(key, []).append(self.tag(BACKWARD, stage, m))
        return {key: sorted(tags) for key, tags in pairs.items()}

    def _number(self) -> dict[tuple[int, int, int], int]:
        """seq of each message this rank sends or receives, by (src, dst, tag)."""
        out = {}
        for (src, dst), tags in self._pairs().items():
            if self.me in (src, dst):
                base = self.counts.get((src, dst), 0)
                out.update({(src, dst, tag): base + i for i, tag in enumerate(tags)})
        return out

    def advance(self) -> None:
        """Count this step's messages (call once per step, traced or not)."""
        for key, tags in self._pairs().items():
            self.counts[key] = self.counts.get(key, 0) + len(tags)

    # -- trace spans ----------------------------------------------------------------------------

    def stamp(self):
        return self.tracer.stamp() if self.tracer is not None else None

    def _emit(self, name: str, t0, tensor, *, src: int, dst: int, tag: int, direction: str,
              microbatch: int, chunk: int, **extra: Any) -> None:
        if t0 is None:
            return
        peer = dst if name == "send" else src
        args = {"peer": peer, "seq": self._seq[src, dst, tag], "direction": direction,
                "bytes": tensor.numel() * tensor.element_size(), "dtype": dtype_name(tensor.dtype),
                "microbatch": microbatch, "chunk": chunk, **extra}
        self.tracer.emit(name, "p2p", t0, tid="comm", args=args)

    def received(self, t0, tensor, *, src: int, tag: int, direction: str, microbatch: int, chunk: int) -> None:
        """A ``recv`` span from ``t0`` (when the rank was free for the task) to now."""
        self._emit("recv", t0, tensor, src=src, dst=self.me, tag=tag, direction=direction,
                   microbatch=microbatch, chunk=chunk)

    def sent(self, t0, tensor, *, dst: int, tag: int, direction: str, microbatch: int, chunk: int) -> None:
        """A ``send`` span from ``t0`` to now: call it right after the send was posted."""
        self._emit("send", t0, tensor, src=self.me, dst=dst, tag=tag, direction=direction,
                   microbatch=microbatch, chunk=chunk, **{"async": True})
