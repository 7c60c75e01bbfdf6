"""What no schedule can beat, and the textbook bubble of the fixed schedules.

``lower_bound`` is the larger of the busiest rank's total work and the longest dependency
chain (one microbatch's forwards through every virtual stage, then its backwards back, with
every rank crossing's link latency and transfer time, no queueing).

Bubble formulas, for equal task times (forward f, backward b per chunk), no jitter and free
links, bubble ratio = idle / (pp x makespan):

- 1F1B: each rank works m (f + b) and the step lasts (m + p - 1)(f + b), so (p-1)/(m+p-1).
- Interleaved with v chunks, m a multiple of p: each rank works v m (f + b); the first
  forward reaches the last rank after (p - 1) f and the last backward leaves rank 0 after
  (p - 1) b once the last rank is done, so the step lasts (v m + p - 1)(f + b) and the
  ratio is (p-1)/(v m + p - 1): the 1F1B bubble shrunk by v in time units of a whole stage.
"""

from __future__ import annotations

from mapp.scheduling.simulate.config import ScheduleConfig
from mapp.scheduling.simulate.costs import StepCosts

__all__ = ["lower_bound", "busiest_rank_work", "longest_chain", "one_f_one_b_bubble", "interleaved_bubble"]


def busiest_rank_work(config: ScheduleConfig, costs: StepCosts) -> float:
    """The most task time any one rank has to run."""
    work = costs.forward + costs.backward
    per_rank = [work[rank::config.pp].sum() for rank in range(config.pp)]
    return float(max(per_rank))


def longest_chain(config: ScheduleConfig, costs: StepCosts, *, split_weight_grad: bool = False) -> float:
    """The longest dependency chain: the microbatch whose forwards then backwards take longest.

    With ``split_weight_grad`` (ZB-H1) the chain ends at the latest weight gradient, which
    runs after its own input gradient, not after the whole backward.
    """
    stages = config.stages
    crossings = sum(1 for j in range(1, stages) if j % config.pp != (j - 1) % config.pp)
    comm = crossings * (config.latency + costs.lengths / config.bandwidth)  # per microbatch, each way
    forward = costs.forward.sum(axis=0) + comm
    if not split_weight_grad:
        return float((forward + costs.backward.sum(axis=0) + comm).max())
    best = 0.0
    for m in range(config.microbatches):
        t = forward[m]
        for j in range(stages - 1, -1, -1):
            if j < stages - 1 and j % config.pp != (j + 1) % config.pp:
                t += config.latency + costs.lengths[m] / config.bandwidth
            t += costs.input_grad[j, m]
            best = max(best, t + costs.weight_grad[j, m])
    return float(best)


def lower_bound(config: ScheduleConfig, costs: StepCosts, *, split_weight_grad: bool = False) -> float:
    """No schedule of these tasks ends sooner than this."""
    return max(busiest_rank_work(config, costs), longest_chain(config, costs, split_weight_grad=split_weight_grad))


def one_f_one_b_bubble(pp: int, microbatches: int) -> float:
    """1F1B's bubble ratio with equal task times: (p-1)/(m+p-1)."""
    return (pp - 1) / (microbatches + pp - 1)


def interleaved_bubble(pp: int, chunks: int, microbatches: int) -> float:
    """Interleaved 1F1B's bubble ratio with equal task times: (p-1)/(v m + p - 1)."""
    return (pp - 1) / (chunks * microbatches + pp - 1)
