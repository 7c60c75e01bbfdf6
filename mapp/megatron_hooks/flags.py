"""Megatron-style command-line flags for tracing, and the install call that reads them.

::

    parser = argparse.ArgumentParser()
    add_trace_args(parser)          # --trace --trace-dir --trace-interval ...
    args = parser.parse_args()
    tracing = install_from_args(args, model=model_chunks, optimizer=optimizer)

Without ``--trace`` nothing is installed and ``tracing.iteration(i)`` does nothing.
"""

from __future__ import annotations

import argparse
from typing import Any

from mapp.capture.tracer import Granularity

from .install import Installation, install

__all__ = ["add_trace_args", "install_from_args"]


def add_trace_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the trace flags (the names MegatronApp uses, plus a few) in a ``tracing`` group."""
    g = parser.add_argument_group("tracing (mapp)")
    g.add_argument("--trace", action="store_true", help="Trace this run (off: nothing is installed).")
    g.add_argument("--trace-dir", default="trace_output",
                   help="Directory of the per-rank trace files rank-NNNNN.json.")
    g.add_argument("--trace-interval", type=int, default=5,
                   help="Start a tracing window every this many iterations.")
    g.add_argument("--continuous-trace-iterations", type=int, default=2,
                   help="Consecutive iterations traced in each window.")
    g.add_argument("--trace-start", type=int, default=0, help="First iteration that may be traced.")
    g.add_argument("--trace-granularity", default="layer",
                   choices=[m.name.lower() for m in Granularity] + ["base", "full"],
                   help="iteration (optimizer, DP sync) < schedule (+ forward/backward per microbatch, p2p) "
                        "< layer (+ transformer layers, TP collectives) < op (+ attention, MLP and their "
                        "parts; ~1.5%% of step time on a GPU: use short windows). MegatronApp's base = schedule, full = op.")
    g.add_argument("--trace-clock", default="auto", choices=["auto", "host", "cuda"],
                   help="Timestamps from CUDA events (GPU) or the host clock; auto picks.")
    g.add_argument("--trace-no-nvml", action="store_true",
                   help="Do not sample GPU clocks/power/temperature (NVML) per traced iteration.")
    return parser


def install_from_args(args: argparse.Namespace, model: Any = None, optimizer: Any = None,
                      **overrides: Any) -> Installation:
    """:func:`~mapp.megatron_hooks.install.install` with the settings from the parsed flags."""
    settings = dict(
        enabled=bool(getattr(args, "trace", False)),
        trace_dir=getattr(args, "trace_dir", "trace_output"),
        interval=getattr(args, "trace_interval", 5),
        length=getattr(args, "continuous_trace_iterations", 2),
        start=getattr(args, "trace_start", 0),
        granularity=getattr(args, "trace_granularity", "layer"),
        clock=getattr(args, "trace_clock", "auto"),
        nvml=not getattr(args, "trace_no_nvml", False),
    )
    settings.update(overrides)
    return install(model=model, optimizer=optimizer, **settings)
