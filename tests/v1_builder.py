"""Write small v1 traces in a few lines, with every value stated by the test that asks for it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mapp import trace_format


@dataclass
class RankTrace:
    rank: int
    world_size: int
    layout: dict
    coords: dict
    events: list[dict] = field(default_factory=list)

    def x(self, name: str, cat: str, ts: float, dur: float, lane: str = "compute", **args) -> "RankTrace":
        self.events.append({"ph": "X", "name": name, "cat": cat, "pid": self.rank, "tid": lane,
                            "ts": ts, "dur": dur, "args": args})
        return self

    def write(self, directory: Path) -> Path:
        path = Path(directory) / trace_format.file_name(self.rank)
        lines = [trace_format.HEADER]
        meta = trace_format.metadata_events(self.rank, self.world_size, self.layout, self.coords)
        lines += [trace_format.encode_event(e) for e in meta]
        lines += [trace_format.encode_event(e) for e in self.events]
        path.write_text("".join(lines))
        return path


def coords_of(rank: int, tp: int, pp: int, dp: int) -> dict:
    """Megatron's default order: tp fastest, then dp, then pp."""
    return {"tp": rank % tp, "dp": (rank // tp) % dp, "pp": rank // (tp * dp), "cp": 0, "ep": 0}


def job(directory: Path, *, tp: int = 1, pp: int = 1, dp: int = 2, events_per_rank: int = 3) -> list[RankTrace]:
    """A small job: per rank, forward/backward compute and one TP or DP all-reduce per step."""
    world = tp * pp * dp
    layout = {"tp": tp, "pp": pp, "dp": dp, "cp": 1, "ep": 1}
    traces = []
    for rank in range(world):
        trace = RankTrace(rank, world, layout, coords_of(rank, tp, pp, dp))
        for step in range(events_per_rank):
            t = 1000.0 * step
            trace.x("forward", "compute", t, 300.0, iteration=0, microbatch=step, chunk=0)
            trace.x("all_reduce", "collective", t + 300.0, 50.0, lane="comm", iteration=0, group="dp",
                    group_ranks=[r for r in range(world) if r % tp == rank % tp], seq=step, bytes=4096)
        traces.append(trace)
    for trace in traces:
        trace.write(directory)
    return traces


def dumps(event: dict) -> str:
    return json.dumps(event, separators=(",", ":"))
