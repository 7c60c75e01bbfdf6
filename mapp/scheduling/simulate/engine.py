"""The discrete-event replay of one step: ranks run one task at a time, links carry activations.

A task is ``(kind, virtual_stage, microbatch)`` with kind ``F`` (forward), ``B`` (backward, or
only its input gradient when the policy splits the weight gradient off) or ``W`` (weight
gradient). Virtual stage ``j`` runs on rank ``j % pp`` as its chunk ``j // pp``. Dependencies:
``F(j, m)`` needs ``F(j-1, m)``; ``B(j, m)`` needs ``F(j, m)`` and ``B(j+1, m)``; ``W(j, m)`` needs
``B(j, m)``. Crossing ranks costs the link's latency plus the microbatch's activation size
over its bandwidth; transfers on one directed link go one after the other.

Activation memory is counted in units of one microbatch's activations of one chunk: a forward
takes one unit when it starts; the backward (the weight gradient when split) gives it back
when it ends. Which ready task a free rank starts is the policy's choice.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Protocol

from mapp.scheduling.simulate.config import ScheduleConfig
from mapp.scheduling.simulate.costs import StepCosts

__all__ = ["Task", "TaskEvent", "Replay", "Policy", "RankView", "replay"]

Task = tuple[str, int, int]
"""``(kind, virtual_stage, microbatch)``, kind one of ``F``, ``B``, ``W``."""


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One task as it ran."""

    rank: int
    kind: str
    chunk: int
    microbatch: int
    start: float
    end: float


@dataclass(slots=True)
class RankView:
    """What a policy may look at when it picks a rank's next task."""

    memory: list[int]
    """Activation units each rank holds now."""


class Policy(Protocol):
    """Chooses what a free rank runs next; ``None`` leaves it idle until something changes."""

    split_weight_grad: bool

    def pick(self, rank: int, now: float, ready: set[Task], view: RankView) -> Task | None: ...


@dataclass(slots=True)
class Replay:
    """One replayed step."""

    events: list[TaskEvent]
    makespan: float
    peak_activations: list[int]
    busy: list[float] = field(default_factory=list)
    """Time each rank spent running tasks."""


def replay(config: ScheduleConfig, costs: StepCosts, policy: Policy) -> Replay:
    """Run the step to its end; ``RuntimeError`` if the policy leaves it stuck (a bug)."""
    pp, stages, mbs = config.pp, config.stages, config.microbatches
    split = policy.split_weight_grad
    duration = {"F": costs.forward, "B": costs.input_grad if split else costs.backward, "W": costs.weight_grad}
    releases = "W" if split else "B"

    waiting: dict[Task, int] = {}
    arrival: dict[Task, float] = {}
    for j in range(stages):
        for m in range(mbs):
            waiting["F", j, m] = 1 if j > 0 else 0
            waiting["B", j, m] = 2 if j < stages - 1 else 1
            if split:
                waiting["W", j, m] = 1
    heap: list[tuple[float, int, str, Task]] = []
    counter = 0
    ready: list[set[Task]] = [set() for _ in range(pp)]
    running: list[Task | None] = [None] * pp
    view = RankView(memory=[0] * pp)
    peak = [0] * pp
    busy = [0.0] * pp
    link_free: dict[tuple[int, int], float] = {}
    events: list[TaskEvent] = []
    remaining = len(waiting)

    def push(time: float, what: str, task: Task) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(heap, (time, counter, what, task))

    def deliver(task: Task, src: int, time: float) -> None:
        dst = task[1] % pp
        if dst != src:
            start = max(time, link_free.get((src, dst), 0.0))
            carry = costs.lengths[task[2]] / config.bandwidth
            link_free[src, dst] = start + carry
            time = start + carry + config.latency
        arrival[task] = max(arrival.get(task, 0.0), time)
        waiting[task] -= 1
        if waiting[task] == 0:
            push(arrival[task], "ready", task)

    for m in range(mbs):
        push(0.0, "ready", ("F", 0, m))

    while heap:
        now = heap[0][0]
        while heap and heap[0][0] <= now:
            _, _, what, task = heapq.heappop(heap)
            rank = task[1] % pp
            if what == "ready":
                ready[rank].add(task)
                continue
            running[rank] = None
            remaining -= 1
            kind, j, m = task
            if kind == releases:
                view.memory[rank] -= 1
            if kind == "F":
                if j + 1 < stages:
                    deliver(("F", j + 1, m), rank, now)
                deliver(("B", j, m), rank, now)
            elif kind == "B":
                if j > 0:
                    deliver(("B", j - 1, m), rank, now)
                if split:
                    deliver(("W", j, m), rank, now)
        for rank in range(pp):
            if running[rank] is not None or not ready[rank]:
                continue
            task = policy.pick(rank, now, ready[rank], view)
            if task is None:
                continue
            ready[rank].remove(task)
            kind, j, m = task
            if kind == "F":
                view.memory[rank] += 1
                peak[rank] = max(peak[rank], view.memory[rank])
            end = now + float(duration[kind][j, m])
            running[rank] = task
            busy[rank] += end - now
            events.append(TaskEvent(rank, kind, j // pp, m, now, end))
            push(end, "done", task)

    if remaining:
        stuck = {rank: sorted(r)[:4] for rank, r in enumerate(ready) if r}
        raise RuntimeError(f"{config.schedule}: {remaining} tasks never ran; ready but refused: {stuck}")
    makespan = max(e.end for e in events)
    return Replay(events=events, makespan=makespan, peak_activations=peak, busy=busy)
