"""Build small v1 traces from true times, with known clocks, and problems injected on purpose.

Times are given in *true* microseconds; each rank writes them through its own clock,
``local = true * (1 + drift_ppm * 1e-6) + offset_us`` (the simulator's convention), plus an
optional Gaussian reading jitter. A test states the job in a few calls and the expected answer
inline: which calls are one instance, which send is which receive, what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mapp import trace_format


def coords_of(rank: int, tp: int, pp: int, dp: int) -> dict:
    return {"tp": rank % tp, "dp": (rank // tp) % dp, "pp": rank // (tp * dp), "cp": 0, "ep": 0}


@dataclass
class Job:
    """A job of ``tp * pp * dp`` ranks. ``with_seq=False`` writes calls without ``seq`` (order only)."""

    tp: int = 1
    pp: int = 1
    dp: int = 2
    offsets_us: dict[int, float] = field(default_factory=dict)
    drift_ppm: dict[int, float] = field(default_factory=dict)
    jitter_us: float = 0.0
    seed: int = 0
    with_seq: bool = True
    wall_ns: int | None = None    # the wall clock at true time 0: each file's clock_anchor says its own
    events: dict[int, list[dict]] = field(default_factory=dict)
    _seq: dict[tuple, int] = field(default_factory=dict)

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)
        for r in range(self.world):
            self.events.setdefault(r, [])

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def local(self, rank: int, true_us: float) -> float:
        t = true_us * (1 + self.drift_ppm.get(rank, 0.0) * 1e-6) + self.offsets_us.get(rank, 0.0)
        if self.jitter_us:
            t += float(self.rng.normal(0.0, self.jitter_us))
        return t

    def _event(self, rank: int, name: str, cat: str, start: float, end: float, lane: str, args: dict) -> None:
        ts = self.local(rank, start)
        te = max(self.local(rank, end), ts)
        self.events[rank].append({"ph": "X", "name": name, "cat": cat, "pid": rank, "tid": lane,
                                  "ts": round(ts, 3), "dur": round(te - ts, 3), "args": args})

    def next_seq(self, key: tuple) -> int:
        value = self._seq.get(key, 0)
        self._seq[key] = value + 1
        return value

    def compute(self, rank: int, name: str, start: float, end: float, iteration: int = 0) -> "Job":
        self._event(rank, name, "compute", start, end, "compute", {"iteration": iteration})
        return self

    def collective(self, op: str, group: str | None, ranks: list[int], *, arrive, end: float, nbytes: int = 4096,
                   iteration: int = 0, skip: tuple[int, ...] = (), sizes: dict[int, int] | None = None,
                   ops: dict[int, str] | None = None) -> "Job":
        """One collective: member ``r`` starts at ``arrive[r]`` (or ``arrive`` for all) and all end at ``end``.
        ``skip`` ranks never call it (their seq does not advance); ``sizes``/``ops`` override per rank."""
        ranks = sorted(ranks)
        for r in ranks:
            if r in skip:
                continue
            seq = self.next_seq(("c", r, group, tuple(ranks)))
            args = {"iteration": iteration, "group": group, "group_ranks": ranks,
                    "bytes": (sizes or {}).get(r, nbytes)}
            if group is None:
                del args["group"]
            if self.with_seq:
                args["seq"] = seq
            start = arrive[r] if isinstance(arrive, dict) else arrive
            self._event(r, (ops or {}).get(r, op), "collective", start, end, "comm", args)
        return self

    def p2p(self, src: int, dst: int, *, send_at: float, recv_at: float, end: float, nbytes: int = 8192,
            iteration: int = 0, drop_recv: bool = False, drop_send: bool = False,
            recv_bytes: int | None = None) -> "Job":
        """One message: the send posted at ``send_at``, the receive at ``recv_at``, both end at ``end``."""
        if not drop_send:
            seq = self.next_seq(("s", src, dst))
            args = {"iteration": iteration, "peer": dst, "bytes": nbytes}
            if self.with_seq:
                args["seq"] = seq
            self._event(src, "send", "p2p", send_at, end, "comm", args)
        if not drop_recv:
            seq = self.next_seq(("r", dst, src))
            args = {"iteration": iteration, "peer": src, "bytes": nbytes if recv_bytes is None else recv_bytes}
            if self.with_seq:
                args["seq"] = seq
            self._event(dst, "recv", "p2p", recv_at, end, "comm", args)
        return self

    def write(self, directory: Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        layout = {"tp": self.tp, "pp": self.pp, "dp": self.dp, "cp": 1, "ep": 1}
        for rank, events in self.events.items():
            lines = [trace_format.HEADER]
            extra = {}
            if self.wall_ns is not None:   # raw time 0 is true time -offset (ignoring drift)
                extra["clock_anchor"] = {"unix_ns": self.wall_ns - round(self.offsets_us.get(rank, 0.0) * 1000),
                                         "trace_us": 0.0, "source": "perf_counter_ns"}
            meta = trace_format.metadata_events(rank, self.world, layout, coords_of(rank, self.tp, self.pp, self.dp),
                                                **extra)
            lines += [trace_format.encode_event(e) for e in meta]
            lines += [trace_format.encode_event(e) for e in sorted(events, key=lambda e: e["ts"])]
            (directory / trace_format.file_name(rank)).write_text("".join(lines))
        return directory

    def true_of(self, rank: int, local_us: float) -> float:
        """Invert the clock (without jitter): the true time of a local reading."""
        return (local_us - self.offsets_us.get(rank, 0.0)) / (1 + self.drift_ppm.get(rank, 0.0) * 1e-6)


def tp_group(job: Job, rank: int) -> list[int]:
    base = rank - rank % job.tp
    return list(range(base, base + job.tp))


def dp_group(job: Job, rank: int) -> list[int]:
    c = coords_of(rank, job.tp, job.pp, job.dp)
    return [c["tp"] + job.tp * d + job.tp * job.dp * c["pp"] for d in range(job.dp)]


def pipeline_job(*, tp: int, pp: int, dp: int, steps: int, seed: int = 0, max_offset_us: float = 100_000.0,
                 max_drift_ppm: float = 50.0, jitter_us: float = 0.0, with_seq: bool = True,
                 step_us: float = 20_000.0) -> Job:
    """A 1F1B-like job: every step, each stage computes, all-reduces over TP, sends its activation
    to the next stage and its gradient to the previous one; DP all-reduce at the end of each
    iteration of 4 steps. Arrivals are staggered at random so that last arrivers vary."""
    rng = np.random.default_rng(seed + 1)
    world = tp * pp * dp
    job = Job(tp=tp, pp=pp, dp=dp, seed=seed, jitter_us=jitter_us, with_seq=with_seq,
              offsets_us={r: float(rng.uniform(-max_offset_us, max_offset_us)) for r in range(world)},
              drift_ppm={r: float(rng.uniform(-max_drift_ppm, max_drift_ppm)) for r in range(world)})
    t = 1_000_000.0
    for step in range(steps):
        iteration = step // 4
        for stage in range(pp):
            for d in range(dp):
                ranks = [r for r in range(world) if coords_of(r, tp, pp, dp)["pp"] == stage
                         and coords_of(r, tp, pp, dp)["dp"] == d]
                arrive = {r: t + stage * 500 + float(rng.uniform(0, 300)) for r in ranks}
                for r in ranks:
                    job.compute(r, "forward", t + stage * 500 - 400, arrive[r], iteration)
                job.collective("all_reduce", "tp", ranks, arrive=arrive, end=max(arrive.values()) + 50,
                               iteration=iteration)
        for stage in range(pp - 1):
            for r in range(world):
                c = coords_of(r, tp, pp, dp)
                if c["pp"] != stage:
                    continue
                nxt = r + tp * dp
                send_at = t + 2000 + stage * 300 + float(rng.uniform(0, 100))
                recv_at = t + 1900 + stage * 300 + float(rng.uniform(0, 300))
                job.p2p(r, nxt, send_at=send_at, recv_at=recv_at, end=max(send_at, recv_at) + 40,
                        iteration=iteration)
                back_at = t + 5000 - stage * 300 + float(rng.uniform(0, 100))
                wait_at = t + 4900 - stage * 300 + float(rng.uniform(0, 300))
                job.p2p(nxt, r, send_at=back_at, recv_at=wait_at, end=max(back_at, wait_at) + 40,
                        iteration=iteration)
        if step % 4 == 3:
            for r in range(world):
                group = dp_group(job, r)
                if r != group[0] or dp < 2:
                    continue
                arrive = {m: t + 8000 + float(rng.uniform(0, 500)) for m in group}
                job.collective("all_reduce", "dp", group, arrive=arrive, end=max(arrive.values()) + 200,
                               nbytes=1 << 20, iteration=iteration)
        t += step_us
    return job
