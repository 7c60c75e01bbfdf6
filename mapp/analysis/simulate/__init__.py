"""Discrete-event simulator of one Megatron-core training job, with fault injection.

``simulate(SimConfig(tp=4, pp=4, dp=8, faults=[parse_fault("slow_gpu:5:1.4")]), out_dir)``
writes per-rank traces (format v1 or MegatronApp's) and ``ground_truth.json``: the layout,
the injected faults, every rank's clock offset and drift, and the healthy iteration time.
"""

from .config import SimConfig
from .faults import Fault, parse_fault
from .presets import demo_config
from .runner import SimResult, simulate

__all__ = ["SimConfig", "Fault", "parse_fault", "simulate", "SimResult", "demo_config"]
