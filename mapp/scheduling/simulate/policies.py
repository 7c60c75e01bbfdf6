"""How a free rank picks its next task: a fixed order, ZB-H1, or a DPP rule.

- ``Ordered``: megatron's schedules; a rank runs its order's next task and waits for it.
- ``ZeroBubbleH1``: 1F1B's order of forwards and input gradients (B); the weight gradients (W)
  wait in a queue and run when the next planned task is not ready, when a forward would take
  the rank past 1F1B's activation peak (W frees the activation), or at the end.
- ``Dynamic``: DPP. A rank follows a plan (the interleaved order over the planned microbatch
  order) and runs the plan's next task when it is ready; when it is not, it runs another
  ready task from the next ``window`` of its plan, chosen by the policy's rule: depth-first
  (backwards first, then the deepest chunk's forward: microbatches finish, memory stays
  low), breadth-first (the shallowest chunk's forward first: more microbatches in flight),
  or adaptive (breadth-first while the rank holds fewer activations than its budget,
  depth-first from there). A forward never takes a rank past its activation cap.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from mapp.scheduling.simulate.engine import RankView, Task

__all__ = ["Ordered", "ZeroBubbleH1", "Dynamic", "RULES"]

RULES = ("depth", "breadth", "adaptive")


class Ordered:
    """Each rank runs its fixed order, waiting for the next task to be ready."""

    split_weight_grad = False

    def __init__(self, orders: Sequence[Sequence[Task]]):
        self.orders = [list(o) for o in orders]
        self.next = [0] * len(self.orders)

    def pick(self, rank: int, now: float, ready: set[Task], view: RankView) -> Task | None:
        i = self.next[rank]
        if i < len(self.orders[rank]) and self.orders[rank][i] in ready:
            self.next[rank] = i + 1
            return self.orders[rank][i]
        return None


class ZeroBubbleH1:
    """ZB-H1: 1F1B with the weight gradients deferred into the bubbles, within 1F1B's memory."""

    split_weight_grad = True

    def __init__(self, orders: Sequence[Sequence[Task]], caps: Sequence[int]):
        self.orders = [list(o) for o in orders]
        self.caps = list(caps)
        self.next = [0] * len(self.orders)
        self.deferred: list[deque[Task]] = [deque() for _ in self.orders]

    def pick(self, rank: int, now: float, ready: set[Task], view: RankView) -> Task | None:
        deferred = self.deferred[rank]
        deferred.extend(sorted(t for t in ready if t[0] == "W" and t not in deferred))
        order, i = self.orders[rank], self.next[rank]
        if i < len(order):
            task = order[i]
            over = task[0] == "F" and view.memory[rank] >= self.caps[rank]
            if task in ready and not over:
                self.next[rank] = i + 1
                return task
        return deferred.popleft() if deferred else None


class Dynamic:
    """DPP: follow the plan; when its next task is not ready, run a ready one by the rule."""

    split_weight_grad = False

    def __init__(self, plans: Sequence[Sequence[Task]], caps: Sequence[int], rule: str,
                 *, window: int, budgets: Sequence[int]):
        if rule not in RULES:
            raise ValueError(f"unknown DPP rule {rule!r}")
        self.plans = [list(p) for p in plans]
        self.caps = list(caps)
        self.budgets = list(budgets)
        self.rule = rule
        self.window = window
        self.started: list[set[Task]] = [set() for _ in self.plans]
        self.head = [0] * len(self.plans)

    def pick(self, rank: int, now: float, ready: set[Task], view: RankView) -> Task | None:
        plan, started = self.plans[rank], self.started[rank]
        i = self.head[rank]
        while i < len(plan) and plan[i] in started:
            i += 1
        self.head[rank] = i
        # A forward run ahead of the plan holds its activation through every planned task
        # before it: it may only go where the plan's own memory curve leaves room all along,
        # so the plan stays runnable (no deadlock) and the cap is never passed.
        held, climb, rise, cap = view.memory[rank], 0, 0, self.caps[rank]
        candidates = []
        for k in range(i, min(len(plan), i + self.window + 1)):
            task = plan[k]
            if task in started:
                continue
            fits = task[0] != "F" or held + 1 + rise <= cap
            if task in ready and fits:
                if k == i:
                    started.add(task)
                    return task
                candidates.append((k, task))
            climb += 1 if task[0] == "F" else -1
            rise = max(rise, climb)
        if not candidates:
            return None
        breadth = self.rule == "breadth" or (self.rule == "adaptive" and view.memory[rank] < self.budgets[rank])
        key = _breadth_first if breadth else _depth_first
        task = min(candidates, key=key)[1]
        started.add(task)
        return task


def _depth_first(item: tuple[int, Task]) -> tuple:
    k, (kind, j, _) = item
    return (0, k) if kind == "B" else (1, -j, k)


def _breadth_first(item: tuple[int, Task]) -> tuple:
    k, (kind, j, _) = item
    return (0, j, k) if kind == "F" else (1, k)
