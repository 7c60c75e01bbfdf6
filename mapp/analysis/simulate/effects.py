"""What the active faults do to one iteration, as per-stage arrays of shape (dp, tp)."""

from __future__ import annotations

import numpy as np

from .faults import HARDWARE_KINDS, Fault
from .layout import Layout

__all__ = ["Effects"]


class Effects:
    """Multipliers and delays for one iteration.

    ``gpu[s]``: compute multiplier; ``host[s]``: launch delay before each op (us);
    ``nic[s]``: inter-node transfer multiplier; ``links``: active slow links as (a, b, factor);
    ``stalls``: data-loader stalls as (stage, dp, tp, microbatch, us), the microbatch drawn
    from ``stall_rng`` (only when a ``data_stall`` fault is active).
    """

    def __init__(self, layout: Layout, faults: list[Fault], iteration: int, iterations: int,
                 host_overhead_us: float, hardware: bool = True, *, microbatches: int = 1,
                 stall_rng: np.random.Generator | None = None):
        shape = (layout.pp, layout.dp, layout.tp)
        self.layout = layout
        self.gpu = np.ones(shape)
        self.host = np.zeros(shape)
        self.nic = np.ones(shape)
        self.links: list[tuple[int, int, float]] = []
        self.stalls: list[tuple[int, int, int, int, float]] = []
        self.stalled: list[tuple[int, int]] = []  # (fault index, microbatch), for the ground truth
        self.seqlen_spread = 0.0
        for i, f in enumerate(faults):
            if not f.active(iteration, iterations):
                continue
            if not hardware and f.kind in HARDWARE_KINDS:
                continue
            k = f.strength
            if f.kind == "data_stall":
                c = layout.coords(f.rank)
                mb = int(stall_rng.integers(microbatches)) if stall_rng is not None else 0
                self.stalls.append((c["pp"], c["dp"], c["tp"], mb, k * 1e3))
                self.stalled.append((i, mb))
                continue
            if f.kind in ("slow_gpu", "slow_nic", "slow_host"):
                c = layout.coords(f.rank)
                idx = (c["pp"], c["dp"], c["tp"])
                if f.kind == "slow_gpu":
                    self.gpu[idx] *= k
                elif f.kind == "slow_nic":
                    self.nic[idx] *= k
                else:
                    self.host[idx] += (k - 1.0) * host_overhead_us
            elif f.kind == "slow_link":
                self.links.append((f.ranks[0], f.ranks[1], k))
            elif f.kind == "stage_imbalance":
                self.gpu[f.stage] *= k
            elif f.kind == "seqlen_imbalance":
                self.seqlen_spread = max(self.seqlen_spread, k)
        self.any_host = bool(self.host.any())

    def tp_factor(self, s: int, inter: np.ndarray) -> np.ndarray:
        """Transfer multiplier of each TP group of stage ``s``, shape (dp, 1)."""
        f = np.where(inter[:, None], self.nic[s].max(axis=1, keepdims=True), 1.0)
        for a, b, k in self.links:
            ca, cb = self.layout.coords(a), self.layout.coords(b)
            if ca["pp"] == cb["pp"] == s and ca["dp"] == cb["dp"]:
                f[ca["dp"], 0] *= k
        return f

    def dp_factor(self, s: int, inter: np.ndarray) -> np.ndarray:
        """Transfer multiplier of each DP group of stage ``s``, shape (1, tp)."""
        f = np.where(inter[None, :], self.nic[s].max(axis=0, keepdims=True), 1.0)
        for a, b, k in self.links:
            ca, cb = self.layout.coords(a), self.layout.coords(b)
            if ca["pp"] == cb["pp"] == s and ca["tp"] == cb["tp"]:
                f[0, ca["tp"]] *= k
        return f

    def p2p_factor(self, s: int, peer: int, inter: np.ndarray) -> np.ndarray:
        """Transfer multiplier of messages between stage ``s`` and ``peer``, shape (dp, tp)."""
        f = np.where(inter, np.maximum(self.nic[s], self.nic[peer]), 1.0)
        for a, b, k in self.links:
            ca, cb = self.layout.coords(a), self.layout.coords(b)
            if ({ca["pp"], cb["pp"]} == {s, peer} and ca["pp"] != cb["pp"]
                    and ca["dp"] == cb["dp"] and ca["tp"] == cb["tp"]):
                f[ca["dp"], ca["tp"]] *= k
        return f
