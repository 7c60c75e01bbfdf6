"""Matching received messages to posted receives by ``(src, tag)``, in any order.

A message that arrives before its ``irecv`` is staged; an ``irecv`` posted before its message
waits in a queue. Either side is FIFO per ``(src, tag)``, so equal tags keep send order and
out-of-order tags never block each other. Used by the torch.distributed backend; the
shared-memory backend does the same in C++.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque

from mapp.transport.interface import Promise

__all__ = ["Mailbox"]


class Mailbox:
    """Per-rank mailbox: backend threads ``deliver``; the training thread ``post``s."""

    def __init__(self, rank: int):
        self._rank = rank
        self._lock = threading.Lock()
        self._staged: dict[tuple[int, int], deque[object]] = defaultdict(deque)
        self._posted: dict[tuple[int, int], deque[Promise]] = defaultdict(deque)
        self._gone: dict[int, str] = {}  # src -> why nothing more will come from it
        self._closed: str | None = None

    def post(self, src: int, tag: int) -> Promise:
        work = Promise(f"irecv(src={src}, tag={tag}) on rank {self._rank}")
        with self._lock:
            staged = self._staged.get((src, tag))
            if staged:
                work.resolve(staged.popleft())
            elif src in self._gone or self._closed:
                work.reject(self._gone.get(src) or self._closed)
            else:
                self._posted[(src, tag)].append(work)
        return work

    def deliver(self, src: int, tag: int, value: object) -> None:
        with self._lock:
            posted = self._posted.get((src, tag))
            if posted:
                posted.popleft().resolve(value)
            else:
                self._staged[(src, tag)].append(value)

    def close_peer(self, src: int, reason: str) -> None:
        """Nothing more will come from ``src``: fail its posted receives (staged ones stay
        collectable) and every later receive that finds nothing staged."""
        with self._lock:
            self._gone.setdefault(src, reason)
            for (peer, _tag), posted in self._posted.items():
                if peer == src:
                    while posted:
                        posted.popleft().reject(reason)

    def close(self, reason: str) -> None:
        with self._lock:
            self._closed = self._closed or reason
            for posted in self._posted.values():
                while posted:
                    posted.popleft().reject(reason)
