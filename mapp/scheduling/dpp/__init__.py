"""MegaDPP: megatron-core's pipeline step in a dynamic, cost-planned order (issue 17).

``DynamicPipeline(policy="adaptive", cost_of=...)`` is a drop-in ``forward_backward_func``;
``plan_step`` is its planner, shared with the schedule simulator. Imports torch and
megatron-core only when a step runs.
"""

from mapp.scheduling.dpp.planner import POLICIES, StepShape, known_costs, plan_step

__all__ = ["POLICIES", "StepShape", "known_costs", "plan_step", "DynamicPipeline"]


def __getattr__(name: str):
    if name == "DynamicPipeline":
        from mapp.scheduling.dpp.runtime import DynamicPipeline

        return DynamicPipeline
    raise AttributeError(name)
