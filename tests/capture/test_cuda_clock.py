"""The CUDA-event clock's bookkeeping with fake events: pooled stamps, times relative to the
iteration anchor, events resolved only once complete, a bounded pool that drops instead of
blocking. (The real GPU run is benchmarks/capture_overhead.py on the device machine.)"""

from __future__ import annotations

import time

from mapp.capture import CudaClock, Granularity, Tracer, TracerConfig, Window

from ._read import read_v1


class FakeGpu:
    """A GPU timeline in ms; ``hold`` keeps newly recorded events incomplete until ``release``."""

    def __init__(self) -> None:
        self.now_ms = 1000.0
        self.hold = False
        self.pending: list["FakeEvent"] = []
        self.syncs = 0

    def synchronize(self) -> None:
        self.syncs += 1
        self.release()

    def release(self) -> None:
        for e in self.pending:
            e.done = True
        self.pending.clear()

    def event(self) -> "FakeEvent":
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu: FakeGpu):
        self.gpu, self.t_ms, self.done = gpu, None, False

    def record(self) -> None:
        self.gpu.now_ms += 0.5
        self.t_ms, self.done = self.gpu.now_ms, not self.gpu.hold
        if self.gpu.hold:
            self.gpu.pending.append(self)

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.done and end.done, "elapsed_time on an incomplete event"
        return end.t_ms - self.t_ms


def make(tmp_path, gpu: FakeGpu, pool: int = 64) -> Tracer:
    clock = CudaClock(pool_size=pool, event_factory=gpu.event, synchronize=gpu.synchronize)
    return Tracer(TracerConfig(trace_dir=str(tmp_path), rank=1, world_size=2, flush_ms=5.0,
                               window=Window(interval=1, length=1)), clock=clock)


def test_stamps_resolve_after_completion_without_synchronizing(tmp_path):
    gpu = FakeGpu()
    t = make(tmp_path, gpu)
    assert gpu.syncs == 1  # once, when the clock is made
    gpu.hold = True
    with t.iteration(0):
        with t.scope("forward", cat="compute", level=Granularity.SCHEDULE, microbatch=0):
            pass
    time.sleep(0.1)  # the writer finds the events incomplete and waits
    assert [e for e in read_v1(tmp_path / "rank-00001.json")[0] if e["ph"] == "X"] == []
    assert gpu.syncs == 1
    gpu.release()
    t.close()
    events = read_v1(tmp_path / "rank-00001.json")[0]
    assert events[0]["args"]["clock"] == "cuda"
    assert events[0]["args"]["clock_anchor"]["source"] == "cuda_event"
    xs = {e["name"]: e for e in events if e["ph"] == "X"}
    # base at 1000.5 ms; iteration anchor 1001.0, iteration start 1001.5, forward 1002.0-1002.5,
    # iteration end 1003.0 (each record advances the fake GPU by 0.5 ms)
    assert xs["forward"]["ts"] == 1500.0 and xs["forward"]["dur"] == 500.0
    assert xs["iteration"]["ts"] == 1000.0 and xs["iteration"]["dur"] == 1500.0


def test_events_return_to_the_pool(tmp_path):
    gpu = FakeGpu()
    t = make(tmp_path, gpu, pool=8)
    for i in range(50):
        with t.iteration(i):
            with t.scope("forward", level=Granularity.SCHEDULE):
                pass
        time.sleep(0.002)
    t.close()
    names = [e["name"] for e in read_v1(tmp_path / "rank-00001.json")[0] if e["ph"] == "X"]
    assert t.clock._made <= 8
    assert names.count("iteration") + t.clock.exhausted >= 40  # most made it through a pool of 8


def test_exhausted_pool_drops_instead_of_blocking(tmp_path):
    gpu = FakeGpu()
    gpu.hold = True  # nothing completes: the pool runs dry
    t = make(tmp_path, gpu, pool=6)
    with t.iteration(0):
        for _ in range(10):
            with t.scope("op", level=Granularity.ITERATION):
                pass
    assert t.clock.exhausted > 0
    gpu.release()
    t.close()
    ops = [e for e in read_v1(tmp_path / "rank-00001.json")[0] if e.get("name") == "op"]
    assert 0 < len(ops) < 10


def test_bulk_resolution_holds_an_event_still_running_on_another_stream(tmp_path):
    gpu = FakeGpu()
    t = make(tmp_path, gpu)
    with t.iteration(0):
        with t.scope("forward", cat="compute", level=Granularity.SCHEDULE, microbatch=0):
            pass
        straggler = t.writer._queue[0][4]  # the forward's start stamp: still running elsewhere
        straggler.done = False
    time.sleep(0.1)  # the newest stamp is complete, but the writer must not read the straggler
    assert [e for e in read_v1(tmp_path / "rank-00001.json")[0] if e["ph"] == "X"] == []
    straggler.done = True
    t.close()
    xs = {e["name"]: e for e in read_v1(tmp_path / "rank-00001.json")[0] if e["ph"] == "X"}
    assert xs["forward"]["ts"] == 1500.0 and xs["forward"]["dur"] == 500.0
    assert xs["iteration"]["dur"] == 1500.0


def test_bulk_resolution_handles_scopes_with_args(tmp_path):
    # The newest record is a plain scope (args dict and all): the writer must find its end
    # stamp, not mistake another field for one (a bug seen only on a real GPU).
    gpu = FakeGpu()
    clock = CudaClock(pool_size=4096, event_factory=gpu.event, synchronize=gpu.synchronize)
    t = Tracer(TracerConfig(trace_dir=str(tmp_path), rank=1, world_size=2, flush_ms=5.0, flush_every=8,
                            window=Window(interval=1, length=1)), clock=clock)
    for it in range(3):
        with t.iteration(it):
            for mb in range(50):
                with t.scope("forward", cat="compute", level=Granularity.SCHEDULE, microbatch=mb):
                    pass
                time.sleep(0.0005)  # let the writer drain mid-iteration (flush_every records wait)
    t.close()
    assert t.writer.failed is None
    spans = [e for e in read_v1(tmp_path / "rank-00001.json")[0] if e["ph"] == "X" and e["name"] == "forward"]
    assert sorted((e["args"]["iteration"], e["args"]["microbatch"]) for e in spans) == [
        (it, mb) for it in range(3) for mb in range(50)]


def test_runtime_resolver_reads_cuda_answers_and_errors():
    # The writer's ctypes path (used on a GPU): the CUDA runtime's return codes, read right.
    import ctypes

    import pytest

    from mapp.capture.clock import NotReady, _event_handle, _loaded_library, _Runtime

    class FakeLib:
        def __init__(self):
            self.codes, self.devices = {}, []

        def cudaSetDevice(self, device):
            self.devices.append(device)
            return 0

        def cudaEventQuery(self, handle):
            return self.codes.get(handle, 0)

        def cudaEventElapsedTime(self, out, start, end):
            if self.codes.get(end, 0):
                return self.codes[end]
            ctypes.cast(out, ctypes.POINTER(ctypes.c_float)).contents.value = float(end - start)
            return 0

    class Event:
        def __init__(self, handle):
            self.event_id = handle

    lib = FakeLib()
    runtime = _Runtime(lib, 3, _event_handle)
    a, b, running, broken = Event(100), Event(102), Event(7), Event(9)
    lib.codes = {7: 600, 9: 700}
    assert runtime.query(a) is True and runtime.query(running) is False
    assert runtime.elapsed_ms(a, b) == 2.0
    with pytest.raises(NotReady):
        runtime.elapsed_ms(a, running)
    with pytest.raises(RuntimeError, match="700"):
        runtime.query(broken)
    assert lib.devices == [3]  # bound to the training device once per thread, not device 0
    assert _event_handle(object()) is None
    assert _loaded_library("libc.so") is not None and _loaded_library("no-such-library.so") is None
