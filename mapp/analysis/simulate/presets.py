"""Ready-made jobs: the one ``mapp demo`` shows."""

from __future__ import annotations

from .config import SimConfig
from .faults import Fault

__all__ = ["demo_config", "DEMO_SLOW_RANK", "DEMO_SLOW_FACTOR"]

DEMO_SLOW_RANK = 21
"""The GPU the demo slows down (tp1 dp1 pp1 of TP4 x PP4 x DP4)."""
DEMO_SLOW_FACTOR = round(1980 / 1400, 3)
"""Its compute slowdown: a GPU stuck at 1400 MHz where its peers run at 1980 MHz."""


def demo_config(*, seed: int = 7, iterations: int = 3) -> SimConfig:
    """64 ranks (TP4 x PP4 x DP4, 8 GPUs a node) where one GPU runs at 1400 of 1980 MHz (~1.41x)."""
    return SimConfig(
        tp=4, pp=4, dp=4, microbatches=8, iterations=iterations, layers=32, hidden=4096,
        faults=[Fault(kind="slow_gpu", rank=DEMO_SLOW_RANK, factor=DEMO_SLOW_FACTOR)],
        seed=seed,
    )
