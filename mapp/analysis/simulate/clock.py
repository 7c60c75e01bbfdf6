"""Unsynchronised rank clocks: ``local_us = true_us * (1 + drift_ppm * 1e-6) + offset_us``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Clocks", "TRUE_ORIGIN_US"]

TRUE_ORIGIN_US = 1_000_000.0
"""True time at which the job starts (keeps every local timestamp positive)."""


@dataclass(frozen=True, slots=True)
class Clocks:
    """Per-rank offset (us) and drift (ppm), indexed by global rank."""

    offset_us: np.ndarray
    drift_ppm: np.ndarray

    @classmethod
    def draw(cls, world: int, rng: np.random.Generator, *, skew: bool,
             max_offset_us: float, max_drift_ppm: float) -> "Clocks":
        offset = rng.uniform(-max_offset_us, max_offset_us, world)
        drift = rng.uniform(-max_drift_ppm, max_drift_ppm, world)
        if not skew:
            offset, drift = np.zeros(world), np.zeros(world)
        # round so that ground_truth.json states the exact values used
        return cls(np.round(offset, 3), np.round(drift, 4))

    def to_local(self, true_us: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """Local readings of true times; ``ranks`` broadcasts against ``true_us``'s last axes."""
        return true_us * (1.0 + self.drift_ppm[ranks] * 1e-6) + self.offset_us[ranks]

    def ground_truth(self) -> dict[str, dict[str, float]]:
        return {
            str(r): {"offset_us": float(o), "drift_ppm": float(d)}
            for r, (o, d) in enumerate(zip(self.offset_us.tolist(), self.drift_ppm.tolist()))
        }
