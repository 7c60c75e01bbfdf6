"""Discrete-event simulator of one Megatron-core training job, with fault injection.

``simulate(SimConfig(tp=4, pp=4, dp=8, faults=[parse_fault("slow_gpu:5:1.4")]), out_dir)``
writes per-rank traces (format v1 or MegatronApp's) and ``ground_truth.json``: the layout,
the injected faults, every rank's clock offset and drift, and the healthy iteration time.

The names below are imported on first use (PEP 562): the CLI's option texts need the fault
kinds without loading numpy.
"""

from mapp._lazy import lazy_exports

__all__ = ["SimConfig", "Fault", "parse_fault", "simulate", "SimResult", "demo_config"]

_HOMES = {"SimConfig": "config", "Fault": "faults", "parse_fault": "faults", "demo_config": "presets",
          "SimResult": "runner", "simulate": "runner"}


__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
