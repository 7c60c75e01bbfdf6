"""Each microbatch's data, whatever order the schedule runs microbatches in.

megatron-core's ``forward_step_func(data_iterator, model)`` calls ``next(data_iterator)`` once
per microbatch, so a fixed schedule gets microbatch m's data from the m-th ``next``. DPP runs
microbatches out of data order; it hands the step function a one-microbatch view whose
``next`` returns item m of the underlying iterator, reading that iterator strictly in order
and keeping what was read ahead until its microbatch asks for it. A stage whose step
function never calls ``next`` (no data there) reads nothing, as under megatron's schedules.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["MicrobatchData"]


class MicrobatchData:
    """One chunk's data iterator, readable by microbatch index within one step."""

    def __init__(self, iterator: Iterator[Any] | None):
        self.iterator = iterator
        self.read: dict[int, Any] = {}
        self.next_index = 0

    def get(self, microbatch: int) -> Any:
        """Microbatch ``microbatch``'s item (each item is handed out once)."""
        while self.next_index <= microbatch:
            if self.iterator is None:
                raise RuntimeError("this model chunk has no data iterator, but its step function asked for data")
            self.read[self.next_index] = next(self.iterator)
            self.next_index += 1
        return self.read.pop(microbatch)

    def peek(self, microbatch: int) -> Any:
        """Microbatch ``microbatch``'s item without handing it out (to measure its cost)."""
        item = self.get(microbatch)
        self.read[microbatch] = item
        return item

    def view(self, microbatch: int) -> "_OneMicrobatch":
        """An iterator whose ``next`` is microbatch ``microbatch``'s item."""
        return _OneMicrobatch(self, microbatch)


class _OneMicrobatch:
    def __init__(self, source: MicrobatchData, microbatch: int):
        self.source = source
        self.microbatch = microbatch

    def __iter__(self) -> "_OneMicrobatch":
        return self

    def __next__(self) -> Any:
        return self.source.get(self.microbatch)
