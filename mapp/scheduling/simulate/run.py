"""One step, or K seeds of it, under one schedule: the replay and its figures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mapp.scheduling.simulate import orders
from mapp.scheduling.simulate.bounds import lower_bound
from mapp.scheduling.simulate.config import DPP_SCHEDULES, ScheduleConfig
from mapp.scheduling.simulate.costs import StepCosts, draw_costs
from mapp.scheduling.simulate.engine import Replay, replay
from mapp.scheduling.simulate.orders import activation_caps, reference_orders
from mapp.scheduling.simulate.planning import plan_dynamic
from mapp.scheduling.simulate.policies import Ordered, ZeroBubbleH1

__all__ = ["StepResult", "Summary", "simulate_step", "simulate"]


@dataclass(frozen=True, slots=True)
class StepResult:
    """One replayed step and the figures that judge it."""

    seed: int
    replay: Replay
    lower_bound: float
    order: list[int]
    """The microbatch order the schedule ran (data order for megatron's schedules)."""

    @property
    def makespan(self) -> float:
        return self.replay.makespan

    @property
    def bubble_ratio(self) -> float:
        """Share of the ranks' time spent idle: 1 - busy / (pp x makespan)."""
        return 1.0 - sum(self.replay.busy) / (len(self.replay.busy) * self.replay.makespan)


@dataclass(frozen=True, slots=True)
class Summary:
    """K seeds of one schedule."""

    config: ScheduleConfig
    steps: list[StepResult]

    @property
    def makespan(self) -> float:
        return float(np.mean([s.makespan for s in self.steps]))

    @property
    def bubble_ratio(self) -> float:
        return float(np.mean([s.bubble_ratio for s in self.steps]))

    @property
    def lower_bound(self) -> float:
        return float(np.mean([s.lower_bound for s in self.steps]))

    @property
    def peak_activations(self) -> list[int]:
        """Per stage, the most activations held in any seed."""
        return [int(max(col)) for col in zip(*(s.replay.peak_activations for s in self.steps))]

    @property
    def gap_to_lower_bound(self) -> float:
        """Mean over seeds of makespan / lower_bound - 1."""
        return float(np.mean([s.makespan / s.lower_bound - 1 for s in self.steps]))

    def to_dict(self) -> dict:
        c = self.config
        return {
            "schedule": c.schedule, "pp": c.pp, "vpp": c.vpp, "microbatches": c.microbatches,
            "jitter": c.jitter, "length_sigma": c.length_sigma,
            "slow_stage": list(c.slow_stage) if c.slow_stage else None,
            "seeds": [s.seed for s in self.steps],
            "makespan": self.makespan,
            "bubble_ratio": self.bubble_ratio,
            "peak_activations": self.peak_activations,
            "lower_bound": self.lower_bound,
            "gap_to_lower_bound": self.gap_to_lower_bound,
            "makespans": [s.makespan for s in self.steps],
            "lower_bounds": [s.lower_bound for s in self.steps],
        }


def _policy(config: ScheduleConfig, known: StepCosts, seed: int):
    """The schedule's policy and the microbatch order it runs."""
    data = list(range(config.microbatches))
    if config.schedule in ("1f1b", "interleaved"):
        return Ordered(reference_orders(config)), data
    if config.schedule == "zb-h1":
        return ZeroBubbleH1(orders.one_f_one_b(config.pp, config.microbatches), activation_caps(config)), data
    plan = plan_dynamic(config, known, seed=seed)
    return plan.policy(), plan.order


def simulate_step(config: ScheduleConfig, seed: int) -> StepResult:
    """Replay one step under ``seed`` (the same task times for every schedule)."""
    costs = draw_costs(config, seed)
    known = draw_costs(config, seed, jitter=False) if config.schedule in DPP_SCHEDULES else costs
    policy, order = _policy(config, known, seed)
    result = replay(config, costs, policy)
    bound = lower_bound(config, costs, split_weight_grad=policy.split_weight_grad)
    return StepResult(seed=seed, replay=result, lower_bound=bound, order=order)


def simulate(config: ScheduleConfig, *, seed: int = 0, seeds: int = 1, progress=None) -> Summary:
    """``seeds`` steps from ``seed`` on; ``progress(done, total)`` after each."""
    steps = []
    for k in range(seeds):
        steps.append(simulate_step(config, seed + k))
        if progress is not None:
            progress(k + 1, seeds)
    return Summary(config=config, steps=steps)
