"""A replayed step as a Chrome trace: one process per stage, one X event per task."""

from __future__ import annotations

import json
from pathlib import Path

from mapp.scheduling.simulate.run import StepResult

__all__ = ["write_chrome_trace", "chrome_events"]

_NAMES = {"F": "forward", "B": "backward", "W": "weight_grad"}


def chrome_events(step: StepResult, *, schedule: str, time_unit_us: float = 1000.0) -> list[dict]:
    """The trace's events; one time unit of the simulator is ``time_unit_us`` microseconds."""
    pp = len(step.replay.peak_activations)
    events: list[dict] = []
    for stage in range(pp):
        events.append({"ph": "M", "name": "process_name", "pid": stage, "tid": 0,
                       "args": {"name": f"stage {stage}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": stage, "tid": 0, "args": {"sort_index": stage}})
    for e in sorted(step.replay.events, key=lambda e: (e.rank, e.start)):
        events.append({
            "ph": "X", "name": _NAMES[e.kind], "cat": "compute", "pid": e.rank, "tid": "compute",
            "ts": round(e.start * time_unit_us, 3), "dur": round((e.end - e.start) * time_unit_us, 3),
            "args": {"chunk": e.chunk, "microbatch": e.microbatch, "schedule": schedule, "seed": step.seed},
        })
    return events


def write_chrome_trace(step: StepResult, path: Path | str, *, schedule: str) -> None:
    """Write ``step`` as a Chrome Trace Event JSON array, one event per line (Perfetto opens it)."""
    lines = [json.dumps(e, separators=(",", ":")) for e in chrome_events(step, schedule=schedule)]
    Path(path).write_text("[\n" + ",\n".join(lines) + "\n]\n")
