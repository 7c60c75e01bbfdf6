"""How long every task of one step takes: nominal times x slow stage x microbatch length x jitter."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mapp.scheduling.simulate.config import ScheduleConfig

__all__ = ["StepCosts", "draw_costs", "lognormal"]


@dataclass(frozen=True, slots=True)
class StepCosts:
    """Task times of one step, each indexed ``[virtual_stage, microbatch]``.

    ``input_grad + weight_grad`` is the whole backward; ZB-H1 runs them as two tasks (B, W).
    """

    forward: np.ndarray
    input_grad: np.ndarray
    weight_grad: np.ndarray
    lengths: np.ndarray
    """Each microbatch's length factor (mean 1): what is known about the step before it runs."""

    @property
    def backward(self) -> np.ndarray:
        return self.input_grad + self.weight_grad


def lognormal(rng: np.random.Generator, sigma: float, size) -> np.ndarray:
    """Lognormal factors of mean 1 (median exp(-sigma^2/2)); all ones when sigma is 0."""
    if sigma == 0:
        return np.ones(size)
    return rng.lognormal(mean=-sigma * sigma / 2, sigma=sigma, size=size)


def draw_costs(config: ScheduleConfig, seed: int, *, jitter: bool = True) -> StepCosts:
    """The task times of one step under ``seed``; every schedule sees the same draws.

    ``jitter=False`` gives the times known before the step (nominal x slow stage x length),
    with the same lengths as ``jitter=True`` under the same seed: what a planner may use.
    """
    rng = np.random.default_rng(seed)
    shape = (config.stages, config.microbatches)
    lengths = lognormal(rng, config.length_sigma, config.microbatches)
    noise = [lognormal(rng, config.jitter, shape) for _ in range(3)]
    if not jitter:
        noise = [np.ones(shape)] * 3
    factor = np.array([config.stage_factor(j % config.pp) for j in range(config.stages)])[:, None] * lengths[None, :]
    w = config.weight_grad_fraction
    return StepCosts(
        forward=config.forward * factor * noise[0],
        input_grad=config.backward * (1 - w) * factor * noise[1],
        weight_grad=config.backward * w * factor * noise[2],
        lengths=lengths,
    )
