"""The interface every backend implements: ``Transport`` posts transfers, ``Work`` tracks one.

A ``Work`` is completed by a background thread of its backend (never by polling in the
training thread): ``wait`` sleeps on an event until then.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

from mapp.errors import TransportError

if TYPE_CHECKING:
    import torch

__all__ = ["Transport", "Work", "Promise"]


class Work(ABC):
    """Handle of one ``isend`` or ``irecv``."""

    @abstractmethod
    def test(self) -> bool:
        """True once the transfer completed; never blocks. Raises ``TransportError`` if it failed."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> torch.Tensor | None:
        """Block until the transfer completes and return the received tensor (``None`` for a
        send). Raises ``TransportError`` when the peer died or closed, or ``timeout`` seconds
        passed; a timed-out transfer stays posted and may be waited for again."""


class Promise(Work):
    """A ``Work`` that a backend thread completes with ``resolve`` or ``reject``.

    ``finish`` runs once, in the thread that first collects the result: GPU results use it
    to make the caller's current CUDA stream wait for the copy that produced them.
    """

    __slots__ = ("_what", "_done", "_value", "_error", "_finish", "_lock")

    def __init__(self, what: str):
        self._what = what
        self._done = threading.Event()
        self._value: object = None
        self._error: str | None = None
        self._finish: Callable[[object], object] | None = None
        self._lock = threading.Lock()

    def resolve(self, value: object = None, finish: Callable[[object], object] | None = None) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._value, self._finish = value, finish
            self._done.set()

    def reject(self, reason: str) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._error = reason
            self._done.set()

    def test(self) -> bool:
        if not self._done.is_set():
            return False
        if self._error is not None:
            raise TransportError(f"{self._what} failed: {self._error}")
        return True

    def wait(self, timeout: float | None = None) -> torch.Tensor | None:
        if not self._done.wait(timeout):
            raise TransportError(f"{self._what} did not complete within {timeout:g} s")
        if self._error is not None:
            raise TransportError(f"{self._what} failed: {self._error}")
        with self._lock:
            if self._finish is not None:
                self._value, self._finish = self._finish(self._value), None
        return self._value  # type: ignore[return-value]

    def __repr__(self) -> str:
        state = "pending" if not self._done.is_set() else ("failed" if self._error else "done")
        return f"<Work {self._what}: {state}>"


class Transport(ABC):
    """Asynchronous tagged point-to-point messages between global ranks.

    Messages describe themselves (dtype, shape, device travel with the data) and are matched
    by ``(src, tag)`` in any order; messages with the same ``(src, tag)`` match in send order.
    """

    @abstractmethod
    def isend(self, tensor: torch.Tensor, dst: int, tag: int) -> Work:
        """Send ``tensor`` to global rank ``dst`` under ``tag``. The tensor must not be
        modified until the returned ``Work`` completes; this call never blocks."""

    @abstractmethod
    def irecv(self, src: int, tag: int) -> Work:
        """Receive the next message from global rank ``src`` with ``tag``; ``wait()`` returns
        it as sent (a GPU tensor lands on this rank's current CUDA device)."""

    @abstractmethod
    def close(self) -> None:
        """Stop the background threads and release what the transport holds; idempotent."""

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
