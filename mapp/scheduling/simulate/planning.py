"""DPP's microbatch order, planned from what is known before the step.

Known: each microbatch's length factor and each stage's speed (a slow stage is slow step
after step); unknown: the per-task jitter. The planner replays orders on the known task times
and keeps the one that ends soonest: first data order and longest first, then ``search``
swaps of two microbatches, each kept when it shortens the known replay. Data order is
where it starts, so on the known times the plan is never worse than data order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mapp.scheduling.simulate.config import ScheduleConfig
from mapp.scheduling.simulate.costs import StepCosts
from mapp.scheduling.simulate.engine import Policy, replay

__all__ = ["plan_order"]


def plan_order(config: ScheduleConfig, known: StepCosts, make_policy: Callable[[list[int]], Policy],
               *, seed: int = 0) -> list[int]:
    """The best order found for the known times; data order when all microbatches are alike."""
    mbs = config.microbatches
    data = list(range(mbs))
    if config.length_sigma == 0 or mbs < 2:
        return data

    def known_makespan(order: list[int]) -> float:
        return replay(config, known, make_policy(order)).makespan

    longest = sorted(data, key=lambda i: (-known.lengths[i], i))
    best, best_time = data, known_makespan(data)
    time = known_makespan(longest)
    if time < best_time - 1e-9:
        best, best_time = longest, time
    rng = np.random.default_rng(seed)
    for _ in range(config.plan_search):
        a, b = rng.choice(mbs, size=2, replace=False)
        order = best.copy()
        order[a], order[b] = order[b], order[a]
        time = known_makespan(order)
        if time < best_time - 1e-9:
            best, best_time = order, time
    return best
