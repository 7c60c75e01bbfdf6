"""Background writer: turns the tracer's records into v1 lines and appends them to the rank's file.

The training thread only appends tuples to a bounded deque (:meth:`TraceWriter.put`); this
thread resolves their timestamps (CUDA events once ``query()`` says they are complete),
encodes complete events with :func:`mapp.trace_format.encode_event`, writes and flushes every
``flush_ms`` milliseconds, when ``flush_every`` records are waiting, or when told an iteration
ended. A process that dies loses at most
the records not yet flushed; what is on disk is always whole lines after a ``[`` line.

Records (tuples, first item is the kind):

- ``(SPAN, name, cat, tid, t0, t1, args, iteration, anchor)``: a complete ``X`` event;
- ``(COUNTER, name, perf_ns, values, iteration)``: a ``C`` event at a host-clock instant;
- ``(CALL, fn)``: ``fn()`` runs here and returns more records (NVML sampling);
- ``(RELEASE, anchor)``: every stamp measured from ``anchor`` has been resolved.

A write failure is one warning; the writer then keeps draining without writing, so that
training is never blocked or broken by tracing.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import warnings
from typing import Any, Iterable

from mapp.trace_format import HEADER, encode_event

from .clock import NotReady

__all__ = ["TraceWriter", "SPAN", "COUNTER", "CALL", "RELEASE"]

SPAN, COUNTER, CALL, RELEASE = 0, 1, 2, 3


class TraceWriter:
    """Append-only v1 writer for one rank, with its own thread.

    ``max_pending`` bounds the records waiting in memory; past it new records are dropped
    and counted (``dropped``), never blocking the training thread.
    """

    def __init__(
        self,
        path: str,
        *,
        pid: int,
        clock: Any,
        header_events: Iterable[dict[str, Any]],
        flush_ms: float = 100.0,
        flush_every: int = 4096,
        max_pending: int = 200_000,
        batch: int = 256,
    ):
        self.path = path
        self.pid = pid
        self.clock = clock
        self.flush_s = flush_ms / 1000.0
        self.max_pending = max_pending
        self.flush_every = max(1, flush_every)
        self.batch = batch
        self.dropped = 0
        self.written = 0
        self.failed: str | None = None
        self._queue: collections.deque = collections.deque()
        self._held: collections.deque = collections.deque()  # popped, waiting for the GPU
        self._wake = threading.Event()
        self._stop = False
        self._lock = threading.Lock()
        self._file = None
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._file = open(path, "w", encoding="utf-8")
            self._file.write(HEADER + "".join(encode_event(e) for e in header_events))
            self._file.flush()
        except OSError as exc:
            self._fail(exc)
        self._thread = threading.Thread(target=self._run, name=f"mapp-writer-{pid}", daemon=True)
        self._thread.start()

    # -- training thread -------------------------------------------------------------------
    def put(self, record: tuple) -> None:
        """Queue one record; drops it (and counts) when ``max_pending`` are waiting."""
        n = len(self._queue)
        if n >= self.max_pending:
            self.dropped += 1
            return
        self._queue.append(record)
        if n + 1 == self.flush_every:
            self._wake.set()

    def kick(self) -> None:
        """Ask the thread to write what it has now (called once per iteration)."""
        self._wake.set()

    def close(self, timeout_s: float = 10.0) -> None:
        """Write everything still pending (waiting up to ``timeout_s`` for the GPU), then close."""
        if self._stop:
            return
        self._stop = True
        self._wake.set()
        self._thread.join(timeout_s)
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError:
                    pass
                self._file = None

    @property
    def pending(self) -> int:
        return len(self._queue) + len(self._held)

    # -- writer thread ---------------------------------------------------------------------
    def _fail(self, exc: BaseException) -> None:
        if self.failed is None:
            self.failed = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"mapp trace writer for {self.path} stopped writing: {self.failed}",
                          RuntimeWarning, stacklevel=2)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_s)
            self._wake.clear()
            stopping = self._stop
            try:
                self._drain(final=stopping)
            except Exception as exc:  # never let the thread die silently
                self._fail(exc)
            if stopping:
                return

    def _drain(self, final: bool) -> None:
        deadline = time.monotonic() + 10.0
        while True:
            lines, blocked = self._resolve_some()
            if lines:
                self._write(lines)
            if not self._queue and not self._held:
                return
            if blocked:
                if not final or time.monotonic() > deadline:
                    return
                time.sleep(0.001)
            else:
                time.sleep(0)  # let the training thread have the GIL between batches

    def _resolve_some(self) -> tuple[list[str], bool]:
        """Resolve up to ``batch`` records in order; stop at the first one not yet complete."""
        lines: list[str] = []
        held, queue = self._held, self._queue
        while len(lines) < self.batch:
            if held:
                record = held.popleft()
            else:
                try:
                    record = queue.popleft()
                except IndexError:
                    break
            try:
                for event in self._events(record):
                    lines.append(encode_event(event))
            except NotReady:
                held.appendleft(record)
                return lines, True
        return lines, False

    def _events(self, record: tuple) -> list[dict[str, Any]]:
        kind = record[0]
        clock = self.clock
        if kind == SPAN:
            _, name, cat, tid, t0, t1, args, iteration, anchor = record
            if t0 is None or t1 is None:  # a stamp was dropped (pool exhausted)
                clock.release(t0)
                clock.release(t1)
                return []
            end = clock.to_us(t1, anchor)
            start = clock.to_us(t0, anchor)
            clock.release(t0)
            clock.release(t1)
            event_args = {"iteration": iteration}
            if args:
                event_args.update(args)
            return [{"ph": "X", "name": name, "cat": cat, "pid": self.pid, "tid": tid,
                     "ts": round(start, 3), "dur": round(max(end - start, 0.0), 3), "args": event_args}]
        if kind == COUNTER:
            _, name, perf_ns, values, iteration = record
            return [{"ph": "C", "name": name, "cat": "other", "pid": self.pid, "tid": "counters",
                     "ts": round(clock.host_to_us(perf_ns), 3), "args": values}]
        if kind == CALL:
            events: list[dict[str, Any]] = []
            for sub in record[1]() or ():
                events.extend(self._events(sub))
            return events
        if kind == RELEASE:
            release = getattr(clock, "release_anchor", None)
            if release is not None:
                release(record[1])
            return []
        raise ValueError(f"unknown trace record kind {kind!r}")

    def _write(self, lines: list[str]) -> None:
        with self._lock:
            if self._file is None or self.failed is not None:
                return
            try:
                self._file.write("".join(lines))
                self._file.flush()
                self.written += len(lines)
            except (OSError, ValueError) as exc:
                self._fail(exc)
