"""Clocks for the tracer: the host clock, and CUDA events resolved off the critical path.

A clock hands out *stamps* on the training thread (cheap, never blocking) and turns them into
trace microseconds later, on the writer thread. Trace time is microseconds since the clock's
anchor; :meth:`anchor` says which wall-clock instant that is, and goes into the file's ``mapp``
metadata event as ``clock_anchor: {"unix_ns": ..., "trace_us": 0.0}``.

- :class:`HostClock` (``clock: "host"``): stamps are ``time.perf_counter_ns()`` integers.
- :class:`ThreadTimeClock` (``clock: "host"``, the tracer's default there): the host clock whose
  stamps also read the training thread's CPU time and run-queue wait, which the writer records
  as each span's ``tts``/``tdur`` (the Chrome trace format's thread clock: CPU time) and
  ``rdur`` (time runnable, waiting for a core). On cores shared with other processes a span's wall time
  includes the time its thread waited for a core; ``dur - rdur`` does not, so the time a span's
  own work took (its computing, and any sleep or lock inside it) can be told from the time the
  machine's other processes took from it.
- :class:`CudaClock` (``clock: "cuda"``): stamps are CUDA events taken from a bounded pool and
  recorded on the current stream; nothing synchronizes. Each traced iteration records one
  *iteration anchor* event; an event's time is
  ``elapsed(base, iteration anchor) + elapsed(iteration anchor, event)``, where ``base`` was
  recorded once, with a device synchronize, when the clock was made (not in the hot path).
  Keeping the second term short keeps ``cudaEventElapsedTime``'s float precision for the
  times inside an iteration. Events are resolved once complete: the writer asks about the
  newest one only (:meth:`CudaClock.newest_ready`, :meth:`CudaClock.wait_ready`) and then
  reads the elapsed times of everything before it without a ``query()`` each.

The training thread makes one CUDA call per stamp (recording the event, on the current stream,
from C++ where torch has the device-generic ``torch.Event``); everything else, the pool's
events included, is made or asked on the writer thread or outside the training loop.
"""

from __future__ import annotations

import collections
import ctypes
import os
import threading
import time
from typing import Any

__all__ = ["HostClock", "ThreadTimeClock", "CudaClock", "NotReady"]


class NotReady(Exception):
    """A stamp's GPU work has not completed yet; try again later."""


class HostClock:
    """Host monotonic clock (``perf_counter_ns``), with a wall-clock anchor."""

    kind = "host"

    def __init__(self, get_ns=time.perf_counter_ns, get_unix_ns=time.time_ns):
        self._get_ns = get_ns
        self.base_ns = get_ns()
        self.base_unix_ns = get_unix_ns()
        self.last: Any = None

    def stamp(self, anchor: Any = None) -> int:
        """A point in time, for :meth:`to_us` later (also kept as :attr:`last`)."""
        self.last = t = self._get_ns()
        return t

    def iteration_anchor(self) -> None:
        """Host stamps need no per-iteration anchor."""
        return None

    def ready(self, stamp: Any) -> bool:
        return True

    def to_us(self, stamp: int, anchor: Any = None, checked: bool = True) -> float:
        """Trace microseconds of a stamp."""
        return (stamp - self.base_ns) / 1000.0

    def host_to_us(self, perf_ns: int) -> float:
        """Trace microseconds of a ``perf_counter_ns`` reading."""
        return (perf_ns - self.base_ns) / 1000.0

    def release(self, stamp: Any) -> None:
        pass

    def anchor(self) -> dict[str, Any]:
        """The metadata that maps trace time to wall-clock time."""
        return {"unix_ns": self.base_unix_ns, "trace_us": 0.0, "source": "perf_counter_ns"}


class ThreadTimeClock(HostClock):
    """The host clock with the training thread's CPU time and run-queue wait in each stamp.

    A stamp is ``(perf_counter_ns, thread_time_ns, schedstat, thread id)``: the thread's CPU
    time (``CLOCK_THREAD_CPUTIME_ID``, exact) and the raw text of its
    ``/proc/thread-self/schedstat`` (one ``pread`` of a file kept open, parsed later on the
    writer thread), whose second field is the time the thread has spent runnable, waiting for
    a core. (Its first field, CPU time, lags by up to a scheduler tick for a running thread;
    the wait is exact when the thread reads it itself, running.) ~2 us a stamp: nothing at
    layer granularity, where a span lasts milliseconds. Where Linux offers no such file, the
    stamp holds the CPU time alone (``schedstat`` None).

    The times are those of the thread that made the clock (the training thread): a stamp taken
    on another thread (a backward hook on autograd's device thread) has none. With
    ``OMP_NUM_THREADS=1`` (gloo jobs on CPUs) that thread does all of an op's work; with more
    intra-op threads, its share and its wait for the others (spinning threads count as running)."""

    def __init__(self, get_ns=time.perf_counter_ns, get_unix_ns=time.time_ns, schedstat: str | None = None,
                 get_thread_ns=time.thread_time_ns, get_thread=threading.get_ident):
        super().__init__(get_ns, get_unix_ns)
        self._get_thread_ns = get_thread_ns
        self._get_thread = get_thread
        self.owner = get_thread()
        fd: int | None = None
        try:
            fd = os.open(schedstat or "/proc/thread-self/schedstat", os.O_RDONLY)
            _run_delay(os.pread(fd, 96, 0))
        except (OSError, ValueError, IndexError):
            if fd is not None:
                os.close(fd)
            fd = None
        # kept open for the process's life: a hook may stamp after the tracer closed
        self._read = (lambda: os.pread(fd, 96, 0)) if fd is not None else (lambda: None)
        self.runnable = fd is not None
        """Whether stamps hold the time runnable (``schedstat``), not the CPU time alone."""

    def stamp(self, anchor: Any = None) -> tuple[int, int, Any, int]:
        self.last = t = (self._get_ns(), self._get_thread_ns(), self._read(), self._get_thread())
        return t

    def to_us(self, stamp: tuple[int, int, Any, int], anchor: Any = None, checked: bool = True) -> float:
        return (stamp[0] - self.base_ns) / 1000.0

    def thread_us(self, t0: tuple, t1: tuple) -> tuple[float, float, float | None] | None:
        """``(tts, tdur, rdur)`` in microseconds: the thread's CPU clock at ``t0``, its advance
        to ``t1``, and the time between them that the thread was runnable but waited for a core
        (None without ``schedstat``); None where another thread took either stamp."""
        if t0[3] != self.owner or t1[3] != self.owner:
            return None
        tdur = max(t1[1] - t0[1], 0) / 1000.0
        rdur = None if t0[2] is None or t1[2] is None else max(_run_delay(t1[2]) - _run_delay(t0[2]), 0) / 1000.0
        return t0[1] / 1000.0, tdur, rdur


def _run_delay(schedstat: bytes) -> int:
    """A ``schedstat`` line's time waiting on a run queue (ns): its second field."""
    return int(schedstat.split()[1])


class CudaClock:
    """CUDA-event clock on the current device; imports torch when made.

    ``pool_size`` bounds the events in flight: when all are in use (the GPU is far behind,
    or the writer is), :meth:`stamp` returns ``None`` and the scope is dropped, never blocking.
    ``event_factory``/``synchronize`` replace ``torch.cuda.Event(enable_timing=True)`` and
    ``torch.cuda.synchronize`` (tests use fakes).
    """

    kind = "cuda"

    def __init__(self, pool_size: int = 16384, get_ns=time.perf_counter_ns, get_unix_ns=time.time_ns,
                 event_factory=None, synchronize=None):
        real = event_factory is None and synchronize is None
        if event_factory is None or synchronize is None:
            import torch

            event_factory = event_factory or _cuda_event_factory(torch)
            synchronize = synchronize or torch.cuda.synchronize
        self._new_event = event_factory
        self._free: collections.deque = collections.deque()
        self._made = 0
        self.pool_size = pool_size
        self.exhausted = 0
        self._get_ns = get_ns
        # One synchronize, outside the training loop, so that the base event's GPU time
        # and the host reading describe the same instant.
        synchronize()
        self._base = event_factory()
        self._base.record()
        self._base.synchronize()
        self.base_ns = get_ns()
        self.base_unix_ns = get_unix_ns()
        self._anchor_ms: dict[int, float] = {}
        # The writer asks the GPU through the CUDA runtime directly where it can (see _Runtime).
        self._runtime = _Runtime.load(event_factory) if real else None
        self.resolver = "cuda runtime (ctypes)" if self._runtime is not None else "torch"
        self.last: Any = None
        """The newest stamp handed out (hooks share a boundary only if nothing stamped since)."""

    def _take(self):
        try:
            return self._free.pop()
        except IndexError:
            if self._made >= self.pool_size:
                self.exhausted += 1
                return None
            self._made += 1
            return self._new_event()

    def stamp(self, anchor: Any = None):
        """Record a pooled event on the current stream (``None`` when the pool is empty)."""
        self.last = event = self._take()
        if event is not None:
            event.record()
        return event

    def iteration_anchor(self):
        """Record the event that this iteration's stamps are measured from."""
        return self.stamp()

    def _query(self, event) -> bool:
        runtime = self._runtime
        return event.query() if runtime is None else runtime.query(event)

    def _elapsed_ms(self, start, end) -> float:
        runtime = self._runtime
        return start.elapsed_time(end) if runtime is None else runtime.elapsed_ms(start, end)

    def ready(self, stamp: Any) -> bool:
        return stamp is None or self._query(stamp)

    def newest_ready(self, stamp: Any) -> bool:
        """Whether ``stamp`` (the end stamp of the newest span) is complete."""
        return stamp is None or self._query(stamp)

    def wait_ready(self, stamp: Any, timeout_s: float) -> bool:
        """Sleep until :meth:`newest_ready` (polling, 0.5 ms doubling to 8 ms), at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        pause = 0.0005
        while not self.newest_ready(stamp):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.008)
        return True

    def _anchor_offset_ms(self, anchor) -> float:
        key = id(anchor)
        offset = self._anchor_ms.get(key)
        if offset is None:
            if not self._query(anchor):
                raise NotReady()
            offset = self._elapsed_ms(self._base, anchor)
            self._anchor_ms[key] = offset
        return offset

    def to_us(self, stamp, anchor=None, checked: bool = True) -> float:
        """Trace microseconds of a completed event (raises :class:`NotReady` otherwise).

        ``checked=False``: the caller knows a later event is complete, so no ``query()``;
        an event still running (recorded on another stream) raises :class:`NotReady` too."""
        if checked and not self._query(stamp):
            raise NotReady()
        try:
            if anchor is None:
                return self._elapsed_ms(self._base, stamp) * 1000.0
            return (self._anchor_offset_ms(anchor) + self._elapsed_ms(anchor, stamp)) * 1000.0
        except NotReady:
            raise
        except Exception:
            if checked or self._query(stamp):
                raise
            raise NotReady() from None

    def host_to_us(self, perf_ns: int) -> float:
        return (perf_ns - self.base_ns) / 1000.0

    def release(self, stamp) -> None:
        """Give a resolved event back to the pool."""
        if stamp is not None:
            self._free.append(stamp)

    def release_anchor(self, anchor) -> None:
        """Forget an iteration anchor once every stamp measured from it is resolved."""
        if anchor is not None:
            self._anchor_ms.pop(id(anchor), None)
            self._free.append(anchor)

    def anchor(self) -> dict[str, Any]:
        return {"unix_ns": self.base_unix_ns, "trace_us": 0.0, "source": "cuda_event"}


def _cuda_event_factory(torch: Any):
    """Timing events on the current CUDA device: ``torch.Event`` where torch has it (its
    ``record()`` finds the current stream in C++; ``torch.cuda.Event.record`` builds a Python
    ``Stream`` per call), else ``torch.cuda.Event``. The first choice is tried once here."""
    generic = getattr(torch, "Event", None)
    if generic is not None:
        try:
            device = torch.device("cuda", torch.cuda.current_device())
            a, b = generic(device, enable_timing=True), generic(device, enable_timing=True)
            a.record()
            b.record()
            b.synchronize()
            a.elapsed_time(b)
            return lambda: generic(device, enable_timing=True)
        except Exception:
            pass
    return lambda: torch.cuda.Event(enable_timing=True)


class _Runtime:
    """``cudaEventQuery`` and ``cudaEventElapsedTime`` called through ctypes, for the writer.

    Why: torch's ``Event.query``/``elapsed_time`` hold the GIL during the CUDA call, and a CUDA
    call can wait while the training thread's launch waits for room in a full launch queue;
    the training thread then waits for the GIL, and the GPU runs dry (measured on an H200:
    +5.9% step time at op granularity with the writer resolving, +0.7% with it parked).
    ctypes releases the GIL for the call. Used only when the CUDA runtime torch loaded can be
    found and gives the same answers as torch on two test events; else torch's methods are.
    """

    _NOT_READY = 600  # cudaErrorNotReady

    def __init__(self, lib, device: int, handle):
        self._lib, self._device, self._handle = lib, device, handle
        self._bound = threading.local()

    @classmethod
    def load(cls, new_event) -> "_Runtime | None":
        try:
            import torch

            path = _loaded_library("libcudart.so")
            if path is None:
                return None
            lib = ctypes.CDLL(path)
            lib.cudaEventQuery.argtypes = [ctypes.c_void_p]
            lib.cudaEventQuery.restype = ctypes.c_int
            lib.cudaEventElapsedTime.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_void_p]
            lib.cudaEventElapsedTime.restype = ctypes.c_int
            lib.cudaSetDevice.argtypes = [ctypes.c_int]
            lib.cudaSetDevice.restype = ctypes.c_int
            a, b = new_event(), new_event()
            handle = _event_handle(a)
            if handle is None:
                return None
            runtime = cls(lib, torch.cuda.current_device(), _event_handle)
            a.record()
            torch.cuda._sleep(1000)  # a gap, so that the check compares a real duration
            b.record()
            b.synchronize()
            if not (runtime.query(b) and abs(runtime.elapsed_ms(a, b) - a.elapsed_time(b)) < 1e-3):
                return None
            return runtime
        except Exception:
            return None

    def _bind(self) -> None:
        # A thread's first runtime call would otherwise make device 0's context current.
        if not getattr(self._bound, "done", False):
            self._lib.cudaSetDevice(self._device)
            self._bound.done = True

    def query(self, event) -> bool:
        self._bind()
        rc = self._lib.cudaEventQuery(self._handle(event))
        if rc == 0:
            return True
        if rc == self._NOT_READY:
            return False
        raise RuntimeError(f"cudaEventQuery failed with CUDA error {rc}")

    def elapsed_ms(self, start, end) -> float:
        self._bind()
        out = ctypes.c_float()
        rc = self._lib.cudaEventElapsedTime(ctypes.byref(out), self._handle(start), self._handle(end))
        if rc == self._NOT_READY:
            raise NotReady()
        if rc != 0:
            raise RuntimeError(f"cudaEventElapsedTime failed with CUDA error {rc}")
        return out.value


def _event_handle(event) -> int | None:
    """The ``cudaEvent_t`` behind a torch event (``torch.Event.event_id``, ``torch.cuda.Event``'s
    ctypes parameter); ``None`` when there is none."""
    handle = getattr(event, "event_id", None)
    if handle is None:
        parameter = getattr(event, "_as_parameter_", None)
        handle = getattr(parameter, "value", None)
    return handle if isinstance(handle, int) else None


def _loaded_library(stem: str) -> str | None:
    """Path of a shared library already loaded in this process (the CUDA runtime torch uses)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip().rsplit(" ", 1)[-1]
                if stem in path.rsplit("/", 1)[-1]:
                    return path
    except OSError:
        return None
    return None
