"""Background writer: turns the tracer's records into v1 lines and appends them to the rank's file.

The training thread only appends tuples to a bounded deque (:meth:`TraceWriter.put`). This
thread keeps out of the training thread's way: it needs the GIL for everything it does, and on
a host-bound step every microsecond it holds the GIL is a microsecond of step time. So it

- works when an iteration ends (:meth:`kick`), when ``flush_every`` records are waiting, and
  on its ``flush_ms`` timer only when no iteration is running or when the running one has
  stopped producing records (a stall or a hang: what is complete gets to disk);
- on the CUDA clock, waits until the newest stamp is complete (polling one event, asleep in
  between) and then resolves everything before it in one pass, without a ``query()`` per
  stamp; a stamp on another stream that is still running sends it back to in-order resolution;
- encodes with cached pieces: the head of each (name, cat, tid) and, for the hooks'
  :class:`EventSpec` records, the ``args`` JSON of each (spec, iteration);
- holds the GIL for at most ``batch`` records at a time and sleeps between batches while an
  iteration runs.

What is on disk is always whole lines after a ``[`` line; a process that dies loses at most
the records not yet flushed, so at most the running iteration (and only while it does not stall).

Records are tuples whose first item is the kind; each kind is made by one function below
(``span_record``, ``spec_record``, ``free_record``, ``counter_record``, ``call_record``,
``release_record``), the one statement of its layout, which this module's reader unpacks.
Code outside ``mapp.capture`` records through the :class:`~mapp.capture.tracer.Tracer`'s
public methods, which make the records with these functions.

A write failure is one warning; the writer then keeps draining without writing, so that
training is never blocked or broken by tracing.
"""

from __future__ import annotations

import collections
import json
import math
import os
import threading
import time
import warnings
from typing import Any, Iterable

from mapp.trace_format import HEADER, encode_event

from .clock import NotReady

__all__ = ["TraceWriter", "EventSpec", "SPAN", "COUNTER", "CALL", "RELEASE", "SPEC", "SPEC_LENT", "FREE",
           "span_record", "spec_record", "free_record", "counter_record", "call_record", "release_record"]

SPAN, COUNTER, CALL, RELEASE, SPEC, SPEC_LENT, FREE = 0, 1, 2, 3, 4, 5, 6
_SPANS = (SPAN, SPEC, SPEC_LENT)


# -- the records, one function per kind (the layout ``_encode`` and ``_events`` unpack) --------
def span_record(name: str, cat: str, tid: str, t0: Any, t1: Any, args: dict[str, Any] | None, iteration: Any,
                anchor: Any) -> tuple:
    """A complete ``X`` event from stamp ``t0`` to stamp ``t1`` (measured from ``anchor``)."""
    return (SPAN, name, cat, tid, t0, t1, args, iteration, anchor)


def spec_record(spec: EventSpec, t0: Any, t1: Any, iteration: Any, anchor: Any, *, lent: bool = False) -> tuple:
    """The same, described by an :class:`EventSpec`. ``lent``: ``t1`` is also the start of a
    later span (adjacent layers share their boundary, one CUDA event instead of two); the later
    record gives it back to the pool, or a ``free_record(t1)`` does when no span took it."""
    return (SPEC_LENT if lent else SPEC, spec, t0, t1, iteration, anchor)


def free_record(stamp: Any) -> tuple:
    """Give a lent stamp back (no span took it)."""
    return (FREE, stamp)


def counter_record(name: str, perf_ns: int, values: dict[str, Any], iteration: Any) -> tuple:
    """A ``C`` event at a host-clock instant (``time.perf_counter_ns()``)."""
    return (COUNTER, name, perf_ns, values, iteration)


def call_record(fn: Any) -> tuple:
    """``fn()`` runs on the writer thread and returns more records (NVML sampling)."""
    return (CALL, fn)


def release_record(anchor: Any) -> tuple:
    """Every stamp measured from ``anchor`` has been resolved."""
    return (RELEASE, anchor)

_float_repr = float.__repr__


class EventSpec:
    """What a hook's spans share: name, cat, tid and args (never changed once made).

    Made once per (hook, microbatch, ...) on the training thread, so that a span costs one
    tuple; the writer caches its encoded ``args`` per iteration."""

    __slots__ = ("name", "cat", "tid", "args", "_iteration", "_tail")

    def __init__(self, name: str, cat: str = "compute", tid: str = "compute",
                 args: dict[str, Any] | None = None):
        self.name, self.cat, self.tid, self.args = name, cat, tid, args
        self._iteration: Any = self  # nothing cached yet
        self._tail = ""

    def __repr__(self) -> str:
        return f"EventSpec({self.name!r}, {self.cat!r}, {self.tid!r}, {self.args!r})"


def _args_json(iteration: Any, args: dict[str, Any] | None) -> str:
    event_args = {"iteration": iteration}
    if args:
        event_args.update(args)
    return json.dumps(event_args, separators=(",", ":"))


class TraceWriter:
    """Append-only v1 writer for one rank, with its own thread.

    ``max_pending`` bounds the records waiting in memory; past it new records are dropped
    and counted (``dropped``), never blocking the training thread. ``busy`` is set by the
    tracer while a traced iteration runs (the thread then stays asleep unless told).
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
        batch: int = 64,
        pause_s: float = 0.0002,
    ):
        self.path = path
        self.pid = pid
        self.clock = clock
        self.flush_s = flush_ms / 1000.0
        self.max_pending = max_pending
        self.flush_every = max(1, flush_every)
        self.batch = batch
        self.pause_s = pause_s
        self.busy = False
        self.dropped = 0
        self.written = 0
        self.failed: str | None = None
        self._queue: collections.deque = collections.deque()
        self._held: collections.deque = collections.deque()  # popped, waiting for the GPU
        self._heads: dict[tuple, str] = {}
        self._tails: dict[tuple, str] = {}
        self._pid_text = json.dumps(pid)
        self._bulk = getattr(clock, "kind", "host") == "cuda" and hasattr(clock, "newest_ready")
        self._thread_us = getattr(clock, "thread_us", None)   # ``ThreadTimeClock``: tts/tdur/rdur too
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
        self.busy = False
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
        seen = -1
        while True:
            told = self._wake.wait(self.flush_s)
            self._wake.clear()
            stopping = self._stop
            n = len(self._queue)
            if not told and not stopping:
                # The timer: stay asleep while a running iteration keeps producing records
                # (its end kicks us); write when it has stalled, or when none runs.
                stalled = n == seen
                seen = n
                if (self.busy and not stalled) or not (n or self._held):
                    continue
            seen = -1
            try:
                self._drain(final=stopping)
            except Exception as exc:  # never let the thread die silently
                self._fail(exc)
            if stopping:
                return

    def _drain(self, final: bool) -> None:
        deadline = time.monotonic() + 10.0
        last_target = None
        while True:
            target = None
            if self._bulk and not self._held and self._queue:
                target = self._newest_span()
                if target is None or target is last_target:
                    target = None  # bulk failed on it once: in order this time
                elif not self.clock.newest_ready(_end_stamp(target)):
                    # Wait (asleep, a query per poll) for the GPU to reach the newest stamp.
                    if not self.clock.wait_ready(_end_stamp(target), self.flush_s if not final else
                                                 max(0.0, deadline - time.monotonic())):
                        target = None
                last_target = target
            lines, blocked = self._resolve_some(target)
            if lines:
                self._write(lines)
            if not self._queue and not self._held:
                return
            if blocked:
                if not final or time.monotonic() > deadline:
                    return
                time.sleep(0.001)
            else:
                time.sleep(0 if final else self.pause_s)  # give the training thread the GIL back

    def _newest_span(self) -> tuple | None:
        """The newest span record (its end stamp is the newest stamp), looking back a little."""
        for i, record in enumerate(reversed(self._queue)):
            if record[0] in _SPANS:
                return record
            if i >= 16:
                break
        return None

    def _resolve_some(self, target: Any = None) -> tuple[list[str], bool]:
        """Resolve up to ``batch`` records in order; stop at the first one not yet complete.

        With ``target`` (a record whose stamps are known complete), records are resolved
        without asking the clock whether each stamp is complete."""
        lines: list[str] = []
        held, queue = self._held, self._queue
        checked = target is None
        encode = self._encode
        while len(lines) < self.batch:
            if held:
                record = held.popleft()
            else:
                try:
                    record = queue.popleft()
                except IndexError:
                    break
            try:
                line = encode(record, checked)
            except NotReady:
                held.appendleft(record)
                return lines, True
            if line:
                lines.append(line)
            if record is target:
                checked = True
        return lines, False

    def _encode(self, record: tuple, checked: bool) -> str:
        kind = record[0]
        clock = self.clock
        if kind == SPEC or kind == SPEC_LENT:
            _, spec, t0, t1, iteration, anchor = record
            name, cat, tid, args = spec.name, spec.cat, spec.tid, spec.args
            if spec._iteration != iteration:
                spec._tail = _args_json(iteration, args) + "},\n"
                spec._iteration = iteration
            tail = spec._tail
        elif kind == SPAN:
            _, name, cat, tid, t0, t1, args, iteration, anchor = record
            tail = None
        else:
            return "".join(encode_event(e) for e in self._events(record))
        if t0 is None or t1 is None:  # a stamp was dropped (pool exhausted)
            clock.release(t0)
            if kind != SPEC_LENT:
                clock.release(t1)
            return ""
        end = clock.to_us(t1, anchor, checked)
        start = clock.to_us(t0, anchor, checked)
        clock.release(t0)
        if kind != SPEC_LENT:
            clock.release(t1)
        ts, dur = round(start, 3), round(max(end - start, 0.0), 3)
        thread = self._thread_us(t0, t1) if self._thread_us is not None else None
        if not (math.isfinite(ts) and math.isfinite(dur)):
            event = {"ph": "X", "name": name, "cat": cat, "pid": self.pid, "tid": tid, "ts": ts, "dur": dur}
            if thread is not None:
                event.update(tts=round(thread[0], 3), tdur=round(thread[1], 3))
                if thread[2] is not None:
                    event["rdur"] = round(thread[2], 3)
            return encode_event({**event, "args": {"iteration": iteration, **(args or {})}})
        key = (name, cat, tid)
        head = self._heads.get(key)
        if head is None:
            head = (f'{{"ph":"X","name":{json.dumps(name)},"cat":{json.dumps(cat)},'
                    f'"pid":{self._pid_text},"tid":{json.dumps(tid)},"ts":')
            self._heads[key] = head
        if tail is None:
            tail = self._tail(iteration, args)
        if thread is not None:
            tts, tdur, rdur = thread
            runnable = f',"rdur":{_float_repr(round(rdur, 3))}' if rdur is not None else ""
            return (f'{head}{_float_repr(ts)},"dur":{_float_repr(dur)},"tts":{_float_repr(round(tts, 3))},'
                    f'"tdur":{_float_repr(round(tdur, 3))}{runnable},"args":{tail}')
        return f'{head}{_float_repr(ts)},"dur":{_float_repr(dur)},"args":{tail}'

    def _tail(self, iteration: Any, args: dict[str, Any] | None) -> str:
        """``args`` JSON and the line's end, cached by value (scopes repeat the same args)."""
        try:
            key = (iteration, tuple(args.items())) if args else (iteration,)
            tail = self._tails.get(key)
        except TypeError:  # an unhashable value (a list of ranks): not cached
            return _args_json(iteration, args) + "},\n"
        if tail is None:
            if len(self._tails) >= 4096:
                self._tails.clear()
            tail = self._tails[key] = _args_json(iteration, args) + "},\n"
        return tail

    def _events(self, record: tuple) -> list[dict[str, Any]]:
        kind = record[0]
        clock = self.clock
        if kind in _SPANS:
            line = self._encode(record, False)
            return [json.loads(line.rstrip().rstrip(","))] if line else []
        if kind == COUNTER:
            _, name, perf_ns, values, iteration = record
            return [{"ph": "C", "name": name, "cat": "other", "pid": self.pid, "tid": "counters",
                     "ts": round(clock.host_to_us(perf_ns), 3), "args": values}]
        if kind == CALL:
            events: list[dict[str, Any]] = []
            for sub in record[1]() or ():
                events.extend(self._events(sub))
            return events
        if kind == FREE:
            clock.release(record[1])
            return []
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
                text = "".join(lines)
                self._file.write(text)
                self._file.flush()
                self.written += text.count("\n")
            except (OSError, ValueError) as exc:
                self._fail(exc)


def _end_stamp(record: tuple) -> Any:
    """The end stamp of a span record (the newest stamp in it), whatever the record's layout."""
    return record[5] if record[0] == SPAN else record[3]
