"""The schedule simulator (issue 17): replay one training step's pipeline schedule, offline.

Pure Python and numpy (no torch). ``simulate(ScheduleConfig(...), seed=0, seeds=30)`` replays
megatron-core's 1F1B and interleaved orders, ZB-H1 and the DPP policies over the same task
times and returns the makespan, bubble ratio, peak activations per stage and the lower bound;
``write_chrome_trace`` draws one replayed step for Perfetto.
"""

from mapp.scheduling.simulate.bounds import interleaved_bubble, lower_bound, one_f_one_b_bubble
from mapp.scheduling.simulate.config import DPP_SCHEDULES, SCHEDULES, ScheduleConfig, parse_slow_stage
from mapp.scheduling.simulate.orders import activation_caps, reference_orders
from mapp.scheduling.simulate.planning import DynamicPlan, plan_dynamic
from mapp.scheduling.simulate.run import StepResult, Summary, simulate, simulate_step
from mapp.scheduling.simulate.trace import write_chrome_trace

__all__ = [
    "SCHEDULES", "DPP_SCHEDULES", "ScheduleConfig", "parse_slow_stage", "simulate", "simulate_step",
    "Summary", "StepResult", "activation_caps", "lower_bound", "one_f_one_b_bubble", "interleaved_bubble",
    "write_chrome_trace", "reference_orders", "DynamicPlan", "plan_dynamic",
]
