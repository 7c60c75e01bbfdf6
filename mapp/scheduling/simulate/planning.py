"""DPP's microbatch order, planned from what is known before the step.

Known: each microbatch's length factor and each stage's speed (a slow stage is slow step
after step); unknown: the per-task jitter. The planner replays orders on the known task times
and keeps the one that ends soonest: first data order and longest first, then ``search``
swaps of two microbatches, each kept when it shortens the known replay. Data order is
where it starts, so on the known times the plan is never worse than data order.

The simulator and the training runtime (``mapp.scheduling.dpp``) plan with the same function,
so what the simulator reports is what the runtime would run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mapp.scheduling.simulate.config import ScheduleConfig
from mapp.scheduling.simulate.costs import StepCosts
from mapp.scheduling.simulate.engine import Policy, replay
from mapp.scheduling.simulate.orders import activation_caps, reference_orders
from mapp.scheduling.simulate.policies import Dynamic

__all__ = ["plan_order", "DynamicPlan", "plan_dynamic", "dpp_budgets"]


def plan_order(config: ScheduleConfig, known: StepCosts, make_policy: Callable[[list[int]], Policy],
               *, seed: int = 0, deadline: float | None = None) -> list[int]:
    """The best order found for the known times; data order when all microbatches are alike.

    ``deadline`` (a ``time.perf_counter()`` value) ends the swap search early: a runtime that
    plans before every step bounds its planning time this way (the result then depends on
    the machine's speed, so one rank plans and the others receive the order).
    """
    mbs = config.microbatches
    data = list(range(mbs))
    if mbs < 2 or np.ptp(known.lengths) == 0:
        return data

    def known_makespan(order: list[int]) -> float:
        return replay(config, known, make_policy(order)).makespan

    longest = sorted(data, key=lambda i: (-known.lengths[i], i))
    best, best_time = data, known_makespan(data)
    time_ = known_makespan(longest)
    if time_ < best_time - 1e-9:
        best, best_time = longest, time_
    rng = np.random.default_rng(seed)
    for _ in range(config.plan_search):
        if deadline is not None and time.perf_counter() > deadline:
            break
        a, b = rng.choice(mbs, size=2, replace=False)
        order = best.copy()
        order[a], order[b] = order[b], order[a]
        time_ = known_makespan(order)
        if time_ < best_time - 1e-9:
            best, best_time = order, time_
    return best


def dpp_budgets(config: ScheduleConfig, caps: list[int]) -> list[int]:
    """Per stage, the activations under which adaptive DPP goes breadth-first (default: cap - 1)."""
    if config.memory_budget:
        return [min(config.memory_budget, cap) for cap in caps]
    return [max(cap - 1, 1) for cap in caps]


@dataclass(frozen=True, slots=True)
class DynamicPlan:
    """What DPP settles before a step: the microbatch order and how far ranks may run ahead."""

    config: ScheduleConfig
    order: list[int]
    window: int

    def policy(self) -> Dynamic:
        """A fresh policy that runs this plan (one per step: it keeps what has started)."""
        caps = activation_caps(self.config)
        rule = self.config.schedule.removeprefix("dpp-")
        return Dynamic(reference_orders(self.config, self.order), caps, rule, window=self.window,
                       budgets=dpp_budgets(self.config, caps))


def plan_dynamic(config: ScheduleConfig, known: StepCosts, *, seed: int = 0,
                 deadline: float | None = None) -> DynamicPlan:
    """Plan one DPP step on the known task times."""

    def plan(order: list[int], window: int = config.window) -> DynamicPlan:
        return DynamicPlan(config, order, window)

    order = plan_order(config, known, lambda o: plan(o).policy(), seed=seed, deadline=deadline)
    # The plan also settles whether running ahead pays: where it delays the plan on the known
    # times, the ranks follow the plan strictly.
    window = config.window
    if window and (replay(config, known, plan(order, 0).policy()).makespan
                   < replay(config, known, plan(order).policy()).makespan - 1e-9):
        window = 0
    return plan(order, window)
