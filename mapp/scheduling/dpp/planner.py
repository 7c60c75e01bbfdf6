"""The plan of one DPP training step, from each microbatch's known cost.

The runtime plans with the simulator's own planner (``plan_dynamic``): the same
``ScheduleConfig`` shape (pp, chunks, microbatches, megatron's microbatch group), task times
known before the step (forward 1, backward 2, each scaled by the microbatch's relative cost),
and the same policy that picks among ready tasks. Torch-free: the plan is plain lists.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from mapp.errors import InputError
from mapp.scheduling.simulate import DynamicPlan, ScheduleConfig, plan_dynamic
from mapp.scheduling.simulate.costs import StepCosts

__all__ = ["POLICIES", "StepShape", "plan_step", "known_costs"]

POLICIES = ("depth", "breadth", "adaptive")


class StepShape:
    """What every rank of a pipeline knows about a step before it runs."""

    def __init__(self, *, pp: int, chunks: int, microbatches: int, group: int | None, policy: str,
                 memory_budget: int | None = None, window: int = 2, plan_search: int = 60):
        if policy not in POLICIES:
            raise InputError(f"unknown DPP policy {policy!r}", "choose one of " + ", ".join(POLICIES))
        self.config = ScheduleConfig(
            schedule=f"dpp-{policy}", pp=pp, vpp=chunks, microbatches=microbatches,
            group_size=group, memory_budget=memory_budget, window=window, plan_search=plan_search,
        )


def known_costs(config: ScheduleConfig, costs: Sequence[float] | None) -> StepCosts:
    """Task times known before the step: nominal times scaled by each microbatch's cost.

    ``costs`` are relative (a sequence length, a token count); they are scaled to mean 1.
    ``None``: all microbatches alike.
    """
    mbs = config.microbatches
    lengths = np.ones(mbs) if costs is None else np.asarray(costs, dtype=float)
    if lengths.shape != (mbs,) or not np.all(np.isfinite(lengths)) or np.any(lengths <= 0):
        raise InputError(f"DPP needs one positive cost per microbatch ({mbs}), got {list(lengths)}")
    lengths = lengths / lengths.mean()
    shape = (config.stages, mbs)
    factor = np.broadcast_to(lengths[None, :], shape)
    w = config.weight_grad_fraction
    return StepCosts(forward=config.forward * factor, input_grad=config.backward * (1 - w) * factor,
                     weight_grad=config.backward * w * factor, lengths=lengths)


def plan_step(shape: StepShape, costs: Sequence[float] | None, *, seed: int = 0,
              budget_s: float | None = None) -> DynamicPlan:
    """The step's plan; ``budget_s`` bounds the planner's search (then only one rank may plan)."""
    deadline = None if budget_s is None else time.perf_counter() + budget_s
    return plan_dynamic(shape.config, known_costs(shape.config, costs), seed=seed, deadline=deadline)
