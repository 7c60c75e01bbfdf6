"""The tracer on the host clock: scopes, windows, exactly-once, counters, bounded memory, failures."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
import warnings

import pytest

from mapp.capture import Granularity, HostClock, Tracer, TracerConfig, Window

from ._read import read_v1


class FakeNs:
    """A perf_counter_ns that advances 1000 ns (1 us) per reading."""

    def __init__(self) -> None:
        self._it = itertools.count(0, 1000)

    def __call__(self) -> int:
        return next(self._it)


def make(tmp_path, **kw) -> Tracer:
    kw.setdefault("window", Window(interval=1, length=1))
    return Tracer(TracerConfig(trace_dir=str(tmp_path), rank=5, world_size=8, **kw),
                  clock=HostClock(get_ns=FakeNs(), get_unix_ns=lambda: 1_700_000_000_000_000_000))


def xs(events):
    return [e for e in events if e["ph"] == "X"]


def test_file_starts_with_metadata_and_clock_anchor(tmp_path):
    t = make(tmp_path, layout={"tp": 2, "pp": 2, "dp": 2, "cp": 1, "ep": 1}, coords={"tp": 1, "pp": 0, "dp": 1, "cp": 0, "ep": 0})
    t.close()
    events, cut = read_v1(tmp_path / "rank-00005.json")
    assert not cut
    meta = events[0]
    assert meta["name"] == "mapp" and meta["ph"] == "M"
    args = meta["args"]
    assert (args["format"], args["version"], args["rank"], args["world_size"]) == ("mapp-trace", 1, 5, 8)
    assert args["clock"] == "host"
    assert args["clock_anchor"] == {"unix_ns": 1_700_000_000_000_000_000, "trace_us": 0.0, "source": "perf_counter_ns"}
    assert args["coords"]["dp"] == 1
    assert events[1]["name"] == "process_name"


def test_scopes_nest_and_carry_args(tmp_path):
    t = make(tmp_path)
    with t.iteration(0):
        with t.scope("forward", cat="compute", level=Granularity.SCHEDULE, microbatch=3, chunk=1):
            with t.scope("layer.forward", cat="compute", level=Granularity.LAYER, layer=7):
                pass
    t.close()
    events = xs(read_v1(tmp_path / "rank-00005.json")[0])
    by_name = {e["name"]: e for e in events}
    assert set(by_name) == {"forward", "layer.forward", "iteration"}
    fwd, layer, it = by_name["forward"], by_name["layer.forward"], by_name["iteration"]
    assert fwd["args"] == {"iteration": 0, "microbatch": 3, "chunk": 1}
    assert layer["args"] == {"iteration": 0, "layer": 7}
    assert it["cat"] == "iteration" and it["args"] == {"iteration": 0}
    # nesting: layer inside forward inside iteration (fake clock: 1 us per reading)
    assert it["ts"] < fwd["ts"] < layer["ts"]
    assert layer["ts"] + layer["dur"] <= fwd["ts"] + fwd["dur"] <= it["ts"] + it["dur"]
    assert all(e["pid"] == 5 for e in events)


def test_granularity_filters_levels(tmp_path):
    t = make(tmp_path, granularity="schedule")
    with t.iteration(0):
        with t.scope("forward", level=Granularity.SCHEDULE):
            with t.scope("layer.forward", level=Granularity.LAYER):
                pass
    t.close()
    assert {e["name"] for e in xs(read_v1(tmp_path / "rank-00005.json")[0])} == {"forward", "iteration"}


def test_each_event_written_once_and_only_inside_windows(tmp_path):
    t = make(tmp_path, window=Window(interval=4, length=2, start=1))
    for i in range(10):
        with t.iteration(i):
            with t.scope("forward", level=Granularity.SCHEDULE):
                pass
        with t.scope("outside", level=Granularity.ITERATION):  # between iterations: never traced
            pass
    t.close()
    events = xs(read_v1(tmp_path / "rank-00005.json")[0])
    forwards = [e["args"]["iteration"] for e in events if e["name"] == "forward"]
    assert forwards == [1, 2, 5, 6, 9]
    assert sorted(e["args"]["iteration"] for e in events if e["name"] == "iteration") == [1, 2, 5, 6, 9]
    assert not [e for e in events if e["name"] == "outside"]


def test_decorator_and_counter(tmp_path):
    t = make(tmp_path)

    @t.scoped("load", cat="data")
    def load(x):
        return x * 2

    with t.iteration(0):
        assert load(21) == 42
        t.counter("gpu", {"power_w": 500.0})
    assert load(1) == 2  # untraced call still works
    t.close()
    events = read_v1(tmp_path / "rank-00005.json")[0]
    assert [e["name"] for e in events if e["ph"] == "X" and e["cat"] == "data"] == ["load"]
    counters = [e for e in events if e["ph"] == "C"]
    assert counters == [{"ph": "C", "name": "gpu", "cat": "other", "pid": 5, "tid": "counters",
                         "ts": counters[0]["ts"], "args": {"power_w": 500.0}}]


def test_seq_counts_every_call(tmp_path):
    t = make(tmp_path, window=Window(interval=10, length=1, start=1))
    seen = []
    for i in range(3):
        with t.iteration(i):
            seen.append((t.next_seq(("tp", (0, 1))), t.next_seq(("tp", (0, 1))), t.next_seq(("send", 3))))
    t.close()
    assert seen == [(0, 1, 0), (2, 3, 1), (4, 5, 2)]


def test_disabled_tracer_is_a_noop(tmp_path):
    t = Tracer(TracerConfig(enabled=False, trace_dir=str(tmp_path / "never")))
    with t.iteration(0) as traced:
        assert traced is False
        with t.scope("x"):
            pass
        assert t.stamp() is None
        t.emit("x", "other", None)
    t.close()
    t.close()
    assert not (tmp_path / "never").exists()


def test_events_reach_the_file_before_close(tmp_path):
    t = make(tmp_path, flush_ms=20.0)
    with t.iteration(0):
        with t.scope("forward", level=Granularity.SCHEDULE):
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        names = {e["name"] for e in xs(read_v1(tmp_path / "rank-00005.json")[0])}
        if {"forward", "iteration"} <= names:
            break
        time.sleep(0.02)
    assert {"forward", "iteration"} <= names
    t.close()


def test_bounded_memory_drops_and_counts(tmp_path):
    t = make(tmp_path, max_pending=10, flush_ms=60_000)
    with t.iteration(0):
        for _ in range(50):
            with t.scope("op", level=Granularity.ITERATION):
                pass
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.close()
    assert t.stats["dropped"] > 0
    assert any("dropped" in str(w.message) for w in caught)
    assert len(xs(read_v1(tmp_path / "rank-00005.json")[0])) <= 11


def test_unwritable_directory_is_one_warning_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = Tracer(TracerConfig(trace_dir=str(blocker / "sub"), rank=0, world_size=1,
                                window=Window(interval=1, length=1)))
        for i in range(3):
            with t.iteration(i):
                with t.scope("x"):
                    pass
        t.close()
    assert len([w for w in caught if "stopped writing" in str(w.message)]) == 1
    assert t.stats["write_failed"]


def test_granularity_names():
    assert Granularity.parse("layer") is Granularity.LAYER
    assert Granularity.parse("full") is Granularity.OP
    assert Granularity.parse("base") is Granularity.SCHEDULE
    with pytest.raises(ValueError, match="iteration, schedule, layer, op"):
        Granularity.parse("everything")


def test_import_capture_does_not_import_torch():
    code = "import sys, mapp.capture; print(any(n.split('.')[0] == 'torch' for n in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_flush_every_wakes_the_writer_early(tmp_path):
    t = make(tmp_path, flush_ms=60_000, flush_every=8)
    t.begin_iteration(0)
    for _ in range(10):
        with t.scope("op"):
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(xs(read_v1(tmp_path / "rank-00005.json")[0])) < 8:
        time.sleep(0.01)
    assert len(xs(read_v1(tmp_path / "rank-00005.json")[0])) >= 8  # before the iteration ended
    t.end_iteration()
    t.close()


def test_lines_are_what_encode_event_writes(tmp_path):
    from mapp.capture.tracer import EventSpec
    from mapp.trace_format import encode_event

    t = make(tmp_path)
    spec = EventSpec("layer.forward", "compute", "compute", {"microbatch": 2, "chunk": 0, "layer": 3})
    for i in range(2):
        with t.iteration(i):
            with t.scope("send", cat="p2p", tid="comm", peer=1, ratio=0.1, name_é="x"):
                t.emit_spec(spec, t.stamp())
    t.close()
    lines = [line for line in (tmp_path / "rank-00005.json").read_text().splitlines()[1:] if line]
    import json

    for line in lines:
        assert encode_event(json.loads(line.rstrip(","))) == line + "\n"
    layer = [json.loads(line.rstrip(",")) for line in lines if "layer.forward" in line]
    assert [e["args"] for e in layer] == [{"iteration": i, "microbatch": 2, "chunk": 0, "layer": 3} for i in range(2)]


def test_hooks_record_spans_through_public_methods(tmp_path):
    # what mapp.megatron_hooks.layers does: its own stamps, a span whose end starts the next
    # one (lent), a lent stamp nobody took given back
    from mapp.capture.writer import EventSpec

    tracer = make(tmp_path)
    first, second = EventSpec("layer.forward", args={"layer": 0}), EventSpec("layer.forward", args={"layer": 1})
    with tracer.iteration(0):
        assert tracer.want[Granularity.LAYER] and tracer.wants(Granularity.LAYER)
        t0, t1 = tracer.clock.stamp(), tracer.clock.stamp()
        tracer.record_spec(first, t0, t1, lent=True)
        t2 = tracer.clock.stamp()
        tracer.record_spec(second, t1, t2)
        tracer.free_stamp(tracer.clock.stamp())
    assert not tracer.want[Granularity.LAYER]
    tracer.close()
    events, _ = read_v1(tracer.path)
    spans = [(e["name"], e["args"]["layer"], e["ts"], e["dur"]) for e in xs(events) if e["name"] == "layer.forward"]
    # the fake clock advances 1 us a reading; the second span starts at the stamp that ends the first
    (_, l0, ts0, dur0), (_, l1, ts1, dur1) = spans
    assert (l0, l1, dur0, dur1) == (0, 1, 1.0, 1.0) and ts1 == ts0 + dur0
    assert tracer.stats["written"] == len(events) - len([e for e in events if e["ph"] == "M"])


def test_a_disabled_tracer_takes_hook_records_too(tmp_path):
    from mapp.capture.writer import EventSpec

    tracer = Tracer(TracerConfig(enabled=False, trace_dir=str(tmp_path)))
    tracer.record_spec(EventSpec("x"), None, None)
    tracer.free_stamp(None)
    assert not any(tmp_path.iterdir())


def test_every_record_kind_is_made_by_its_function(tmp_path):
    # the writer reads what the record functions make: each kind through a real writer
    from mapp.capture import writer as w

    clock = HostClock(get_ns=FakeNs(), get_unix_ns=lambda: 1_700_000_000_000_000_000)
    out = tmp_path / "r.json"
    sampled = []
    tw = w.TraceWriter(str(out), pid=3, clock=clock, header_events=[])
    spec = w.EventSpec("op", "compute", "compute", {"layer": 2})
    a, b, c = clock.stamp(), clock.stamp(), clock.stamp()
    for record in (w.span_record("scope", "data", "compute", a, b, {"k": 1}, 4, None),
                   w.spec_record(spec, b, c, 4, None, lent=True), w.free_record(c),
                   w.counter_record("gpu", 5_000, {"sm_mhz": 1400}, 4),
                   w.call_record(lambda: sampled.append(1) or [w.counter_record("late", 6_000, {"v": 2}, 4)]),
                   w.release_record(None)):
        tw.put(record)
    tw.close()
    events, _ = read_v1(out)
    assert [(e["ph"], e["name"]) for e in events] == [("X", "scope"), ("X", "op"), ("C", "gpu"), ("C", "late")]
    assert events[0]["args"] == {"iteration": 4, "k": 1} and events[1]["args"] == {"iteration": 4, "layer": 2}
    assert sampled == [1] and tw.failed is None
