"""Sampling windows: which iterations are traced."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Window"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """Trace ``length`` consecutive iterations every ``interval`` iterations, from ``start`` on.

    Iteration ``i`` is traced when ``i >= start`` and ``(i - start) % interval < length``;
    ``length >= interval`` traces every iteration from ``start``. ``stop`` (exclusive), when
    set, ends tracing for good. With ``interval=5, length=2`` the traced iterations are
    0, 1, 5, 6, 10, 11, ...
    """

    interval: int = 5
    """Iterations from the start of one window to the start of the next."""
    length: int = 2
    """Consecutive iterations traced in each window."""
    start: int = 0
    """First iteration that can be traced."""
    stop: int | None = None
    """Iteration at which tracing stops for good (exclusive); ``None`` for never."""

    def __post_init__(self) -> None:
        if self.interval < 1:
            raise ValueError(f"trace interval must be at least 1, got {self.interval}")
        if self.length < 0:
            raise ValueError(f"window length must not be negative, got {self.length}")

    def contains(self, iteration: int) -> bool:
        """Whether ``iteration`` is traced."""
        if iteration < self.start or (self.stop is not None and iteration >= self.stop):
            return False
        return (iteration - self.start) % self.interval < self.length

    def traced(self, iterations: range) -> list[int]:
        """The traced iterations among ``iterations`` (for planning and tests)."""
        return [i for i in iterations if self.contains(i)]
