"""State shared by the installed hooks: the tracer, group names, and where the schedule is."""

from __future__ import annotations

from typing import Any

from mapp.capture.tracer import Tracer
from mapp.trace_format import dtype_name

from .groups import GroupNames

__all__ = ["HookContext", "dtype_name", "nbytes", "first_tensor"]


def nbytes(tensor: Any) -> int:
    return tensor.numel() * tensor.element_size()


def first_tensor(value: Any) -> Any:
    """The first tensor in a tensor / list / tuple (``None`` when there is none)."""
    while isinstance(value, (list, tuple)):
        if not value:
            return None
        value = value[0]
    return value


class HookContext:
    """What every hook needs: the tracer, the group registry, and the schedule position.

    ``microbatch``/``chunk`` are set by the schedule hooks around each forward step so that
    layer events carry them. ``fwd_outputs`` / ``bwd_outputs`` map the identity of a tensor a
    forward (backward) step returned to its (microbatch, chunk), so that the backward step and
    the p2p send of that tensor can say which microbatch they belong to. Both maps are
    cleared at every iteration.
    """

    def __init__(self, tracer: Tracer, groups: GroupNames):
        self.tracer = tracer
        self.groups = groups
        self.microbatch: int | None = None
        self.chunk: int = 0
        self.comm_depth = 0
        self.fwd_outputs: dict[int, tuple[int | None, int]] = {}
        self.bwd_outputs: dict[int, tuple[int | None, int]] = {}
        self.forward_count: dict[int, int] = {}
        self.backward_count: dict[int, int] = {}
        tracer.on_iteration(self._new_iteration)

    def _new_iteration(self, iteration: int, traced: bool) -> None:
        self.microbatch = None
        self.chunk = 0
        self.fwd_outputs.clear()
        self.bwd_outputs.clear()
        self.forward_count.clear()
        self.backward_count.clear()
