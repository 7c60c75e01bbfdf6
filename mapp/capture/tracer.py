"""The tracer: scopes, iterations, sampling windows, granularity and per-group counters.

Framework-neutral: nothing here knows megatron-core (``mapp.megatron_hooks`` drives it).
The hot path is a few attribute reads, two clock stamps and one ``deque.append``; no
synchronization, no file I/O, no JSON (hooks that fire often describe their spans once, as
:class:`~mapp.capture.writer.EventSpec`, and :meth:`Tracer.emit_spec` records a tuple).
``Tracer(enabled=False)`` (or ``TracerConfig(enabled=False)``) makes every call a no-op, so
instrumented code needs no ``if``.

Hooks that time spans themselves (``mapp.megatron_hooks.layers``) use the public parts only:
``want[level]`` (is ``level`` traced now), ``clock.stamp()``, :meth:`Tracer.record_spec` and
:meth:`Tracer.free_stamp`; the records' layout belongs to ``mapp.capture.writer``.

::

    tracer = Tracer(TracerConfig(trace_dir="traces", window=Window(interval=50, length=2)))
    for it in range(iterations):
        with tracer.iteration(it):
            with tracer.scope("data", cat="data"):
                batch = next(loader)
            ...
    tracer.close()
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import functools
import os
import socket
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from mapp.trace_format import file_name, metadata_events

from .clock import CudaClock, HostClock, ThreadTimeClock
from .window import Window
from .writer import (EventSpec, TraceWriter, call_record, counter_record, free_record, release_record, span_record,
                     spec_record)

__all__ = ["Granularity", "TracerConfig", "Tracer", "EventSpec"]


class Granularity(enum.IntEnum):
    """How much is traced; each level includes the ones before it."""

    ITERATION = 0
    """Iterations, optimizer step, data-parallel grad/param sync, device counters."""
    SCHEDULE = 1
    """+ pipeline schedule steps (forward/backward per microbatch and chunk), p2p."""
    LAYER = 2
    """+ transformer layers, embedding, output layer, TP collectives."""
    OP = 3
    """+ attention, MLP and the modules inside them (linear layers, norms, core attention)."""

    @classmethod
    def parse(cls, value: "str | int | Granularity") -> "Granularity":
        """Accept a level, its name (``"layer"``), or MegatronApp's ``base``/``full``."""
        if isinstance(value, Granularity):
            return value
        if isinstance(value, int):
            return cls(value)
        text = str(value).strip().lower()
        aliases = {"base": "schedule", "full": "op", "step": "schedule", "iter": "iteration"}
        text = aliases.get(text, text)
        try:
            return cls[text.upper()]
        except KeyError:
            names = ", ".join(m.name.lower() for m in cls)
            raise ValueError(f"unknown trace granularity {value!r} (use one of {names})") from None


@dataclass(kw_only=True, slots=True)
class TracerConfig:
    """Settings of one rank's tracer."""

    enabled: bool = True
    """Off: every tracer call is a no-op and no file is written."""
    trace_dir: str = "trace_output"
    """Directory of the per-rank v1 files (``rank-00012.json``)."""
    rank: int | None = None
    """Global rank; default ``$RANK`` (0 without it)."""
    world_size: int | None = None
    """World size; default ``$WORLD_SIZE`` (1 without it)."""
    window: Window = field(default_factory=Window)
    """Which iterations are traced."""
    granularity: Granularity | str = Granularity.LAYER
    """How fine the trace is (iteration < schedule < layer < op)."""
    clock: str = "auto"
    """``host``, ``cuda`` (CUDA events), or ``auto``: ``cuda`` when torch sees a GPU."""
    thread_time: bool = True
    """On the host clock, also record each span's thread CPU time (``tts``/``tdur``) and its
    wait for a core (``rdur``): on cores shared with other processes, what tells the time a
    span's own work took from the time it waited for a core (``clock.ThreadTimeClock``)."""
    layout: dict[str, int] = field(default_factory=dict)
    """Parallel sizes (tp, pp, dp, cp, ep, vpp) for the metadata event."""
    coords: dict[str, int] = field(default_factory=dict)
    """This rank's coordinates in the layout."""
    run_id: str | None = None
    """Shared by all ranks of a run; default ``$MAPP_RUN_ID``, else ``$TORCHELASTIC_RUN_ID``."""
    device: str | None = None
    """Device name for the metadata event."""
    flush_ms: float = 100.0
    """The writer writes and flushes at least this often."""
    flush_every: int = 4096
    """... and as soon as this many records are waiting."""
    max_pending: int = 200_000
    """Records waiting in memory before new ones are dropped."""
    event_pool: int = 16384
    """CUDA events in flight at most (``cuda`` clock)."""
    extra_metadata: dict[str, Any] = field(default_factory=dict)
    """More keys for the ``mapp`` metadata event."""


class _NullScope:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL = _NullScope()


def _ignore(record: tuple) -> None:
    """Where a disabled tracer's records go."""


class _Scope:
    __slots__ = ("tracer", "name", "cat", "tid", "args", "t0")

    def __init__(self, tracer, name, cat, tid, args):
        self.tracer, self.name, self.cat, self.tid, self.args = tracer, name, cat, tid, args

    def __enter__(self):
        self.t0 = self.tracer.stamp()
        return self

    def __exit__(self, *exc):
        self.tracer.emit(self.name, self.cat, self.t0, tid=self.tid, args=self.args)
        return False


class Tracer:
    """One rank's tracer. Safe to create twice (each writes its own file path) and to close twice."""

    def __init__(self, config: TracerConfig | None = None, *, clock: Any = None, **overrides: Any):
        config = config or TracerConfig()
        for key, value in overrides.items():
            setattr(config, key, value)
        self.config = config
        self.enabled = bool(config.enabled)
        self.granularity = Granularity.parse(config.granularity)
        self.window = config.window
        self.rank = int(config.rank if config.rank is not None else os.environ.get("RANK", 0))
        self.world_size = int(
            config.world_size if config.world_size is not None else os.environ.get("WORLD_SIZE", 1))
        self.active = False
        self.iteration_number: int | None = None
        self.want: list[bool] = [False] * (len(Granularity))
        """``want[level]``: whether scopes at ``level`` are recorded now (the hot path's form of
        :meth:`wants`; replaced, not changed, at each iteration's start and end)."""
        self._seq: dict[Any, int] = {}
        self._iteration_hooks: list[Callable[[int, bool], None]] = []
        self._end_hooks: list[Callable[[int], Any]] = []
        self._anchor = None
        self._iter_t0 = None
        self._closed = False
        self.writer: TraceWriter | None = None
        self.clock = None
        self.path: str | None = None
        self._put: Callable[[tuple], None] = _ignore
        if not self.enabled:
            return
        self.clock = clock if clock is not None else self._make_clock(config)
        self.path = os.path.join(config.trace_dir, file_name(self.rank))
        self.writer = TraceWriter(
            self.path, pid=self.rank, clock=self.clock, header_events=self._header(),
            flush_ms=config.flush_ms, flush_every=config.flush_every, max_pending=config.max_pending)
        self._put = self.writer.put
        self._stamp = self.clock.stamp
        atexit.register(self.close)

    # -- setup -----------------------------------------------------------------------------
    @staticmethod
    def _make_clock(config: TracerConfig):
        kind = config.clock
        if kind == "auto":
            kind = "host"
            try:
                import sys

                torch = sys.modules.get("torch")
                if torch is not None and torch.cuda.is_available():
                    kind = "cuda"
            except Exception:
                kind = "host"
        if kind == "cuda":
            return CudaClock(pool_size=config.event_pool)
        if kind == "host":
            return ThreadTimeClock() if config.thread_time else HostClock()
        raise ValueError(f"unknown trace clock {config.clock!r} (use host, cuda or auto)")

    def _header(self) -> list[dict[str, Any]]:
        c = self.config
        run_id = c.run_id or os.environ.get("MAPP_RUN_ID") or os.environ.get("TORCHELASTIC_RUN_ID")
        extra = {
            "clock_anchor": self.clock.anchor(),
            "tracer": {"granularity": self.granularity.name.lower(),
                       "window": {"interval": self.window.interval, "length": self.window.length,
                                  "start": self.window.start, "stop": self.window.stop},
                       "pid": os.getpid()},
        }
        extra.update(c.extra_metadata)
        return metadata_events(
            self.rank, self.world_size, dict(c.layout), dict(c.coords), clock=self.clock.kind,
            host=socket.gethostname(), device=c.device, run_id=run_id or uuid.uuid4().hex[:12],
            **extra)

    # -- state -----------------------------------------------------------------------------
    def wants(self, level: Granularity) -> bool:
        """Whether a scope at ``level`` is recorded right now (inside a traced iteration)."""
        return self.want[level]

    def next_seq(self, key: Any) -> int:
        """This rank's count of earlier calls under ``key`` (0 for the first call).

        Counts every call, traced or not, so that ranks agree on the numbers."""
        n = self._seq.get(key, 0)
        self._seq[key] = n + 1
        return n

    def on_iteration(self, fn: Callable[[int, bool], None]) -> None:
        """Call ``fn(iteration, traced)`` at the start of every iteration."""
        self._iteration_hooks.append(fn)

    def on_traced_iteration_end(self, fn: Callable[[int], Any]) -> None:
        """Call ``fn(iteration)`` on the writer thread after each traced iteration; it returns
        records to write (``mapp.capture.nvml`` samples device counters this way)."""
        self._end_hooks.append(fn)

    # -- recording -------------------------------------------------------------------------
    def stamp(self):
        """A start stamp for :meth:`emit`, or ``None`` when nothing is being traced."""
        if not self.active:
            return None
        return self._stamp()

    def emit(self, name: str, cat: str, t0, *, t1=None, tid: str = "compute",
             args: dict[str, Any] | None = None) -> None:
        """Record a complete event from stamp ``t0`` to ``t1`` (default: now)."""
        if t0 is None or not self.active:
            return
        if t1 is None:
            t1 = self._stamp()
        self._put(span_record(name, cat, tid, t0, t1, args, self.iteration_number, self._anchor))

    def emit_spec(self, spec: EventSpec, t0) -> None:
        """Record the span ``spec`` from stamp ``t0`` to now (the hooks' fast form of :meth:`emit`)."""
        if t0 is None or not self.active:
            return
        self._put(spec_record(spec, t0, self._stamp(), self.iteration_number, self._anchor))

    def record_spec(self, spec: EventSpec, t0, t1, *, lent: bool = False) -> None:
        """Record the span ``spec`` between two stamps the caller took (``clock.stamp()``) in this
        traced iteration. ``lent``: ``t1`` also starts a later span, whose record (or
        :meth:`free_stamp`) gives it back; chained layers share one stamp per boundary this way."""
        self._put(spec_record(spec, t0, t1, self.iteration_number, self._anchor, lent=lent))

    def free_stamp(self, stamp) -> None:
        """Give back a stamp lent by ``record_spec(..., lent=True)`` that no later span took."""
        self._put(free_record(stamp))

    def scope(self, name: str, cat: str = "other", level: Granularity = Granularity.ITERATION,
              tid: str = "compute", **args: Any):
        """Context manager recording ``name`` when ``level`` is being traced."""
        if not self.want[level]:
            return _NULL
        return _Scope(self, name, cat, tid, args or None)

    def scoped(self, name: str | None = None, cat: str = "other",
               level: Granularity = Granularity.ITERATION, tid: str = "compute", **args: Any):
        """Decorator form of :meth:`scope`."""

        def wrap(fn):
            label = name or fn.__qualname__

            @functools.wraps(fn)
            def inner(*a, **k):
                if not self.want[level]:
                    return fn(*a, **k)
                t0 = self._stamp()
                try:
                    return fn(*a, **k)
                finally:
                    self.emit(label, cat, t0, tid=tid, args=args or None)

            return inner

        return wrap

    def counter(self, name: str, values: dict[str, float]) -> None:
        """Record a counter sample (``C`` event) now, on the host clock."""
        if self.active:
            self._put(counter_record(name, time.perf_counter_ns(), values, self.iteration_number))

    # -- iterations ------------------------------------------------------------------------
    def begin_iteration(self, iteration: int) -> bool:
        """Start ``iteration``; returns whether it is traced."""
        traced = self.enabled and not self._closed and self.window.contains(iteration)
        self.iteration_number = iteration
        for hook in self._iteration_hooks:
            hook(iteration, traced)
        if traced:
            self._anchor = self.clock.iteration_anchor()
            self.writer.busy = True
            self.active = True
            self.want = [level <= self.granularity for level in Granularity]
            self._iter_t0 = self._stamp()
        return traced

    def end_iteration(self) -> None:
        """End the current iteration (writes its ``iteration`` event when traced)."""
        if not self.active:
            return
        self.emit("iteration", "iteration", self._iter_t0, tid="iteration")
        iteration = self.iteration_number
        self.active = False
        self.want = [False] * len(Granularity)
        for hook in self._end_hooks:
            self._put(call_record(functools.partial(hook, iteration)))
        if self._anchor is not None:
            self._put(release_record(self._anchor))
        self._anchor = None
        self.writer.busy = False
        self.writer.kick()

    @contextlib.contextmanager
    def iteration(self, iteration: int) -> Iterator[bool]:
        """``with tracer.iteration(i):`` around one training iteration; yields whether traced."""
        traced = self.begin_iteration(iteration)
        try:
            yield traced
        finally:
            self.end_iteration()

    # -- shutdown --------------------------------------------------------------------------
    def close(self) -> None:
        """Write everything pending and close the file. Idempotent."""
        if self._closed:
            return
        self.end_iteration()
        self._closed = True
        if self.writer is not None:
            self.writer.close()
            if self.writer.dropped:
                warnings.warn(f"mapp tracer on rank {self.rank} dropped {self.writer.dropped} events "
                              f"(more than {self.config.max_pending} pending)", RuntimeWarning)
        try:
            atexit.unregister(self.close)
        except Exception:
            pass

    @property
    def stats(self) -> dict[str, Any]:
        """Counts for diagnostics: written, dropped, pending, CUDA events that found the pool empty."""
        w = self.writer
        return {
            "written": w.written if w else 0,
            "dropped": w.dropped if w else 0,
            "pending": w.pending if w else 0,
            "pool_exhausted": getattr(self.clock, "exhausted", 0),
            "cuda_events_made": getattr(self.clock, "_made", 0),
            "resolver": getattr(self.clock, "resolver", None),
            "write_failed": w.failed if w else None,
        }

