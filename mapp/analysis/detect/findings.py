"""What ``mapp detect`` reports: suspects, imbalance, the stages' status and the verdict that
holds them (``verdict.combine`` makes them; ``mapp.report`` renders them; ``windows`` merges
several verdicts into one). Plain data with its JSON form, nothing that judges evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import polars as pl

from mapp.analysis.detect.thresholds import Thresholds

__all__ = ["Suspect", "Overruled", "Imbalance", "StageStatus", "Verdict", "KINDS", "LinkFinding", "in_place_of_lower"]

KINDS = ("slow_compute", "slow_link", "slow_nic", "slow_host")


@dataclass(slots=True)
class LinkFinding:
    """One slow NIC, link or group."""

    kind: str
    """"slow_nic", "slow_link" or "slow_group"."""
    ranks: tuple[int, ...]
    """The NIC's rank; the link's two ranks; the group's members."""
    slowdown: float
    """Effective time over its class's median (the median over the slow observations)."""
    z: float
    observations: list[dict]
    """The slow links/groups that make the case: ``ranks``, ``what``, ``ratio``, ``iterations``."""
    excess_ns: float
    """Transfer time beyond the class medians, per iteration (summed over the observations)."""
    healthy_links: int = 0
    """For a NIC: its inter-node links/groups that were not slow (0 for a clear case)."""


@dataclass(kw_only=True, slots=True)
class Suspect:
    """One likely cause of lost time."""

    rank: int
    kind: str
    """One of ``KINDS``."""
    confidence: float
    """0..1: how sure the evidence makes us (see the module doc)."""
    slowdown: float
    """Estimated factor: the rank's compute (or the link's transfer time) over its peers'."""
    peer: int | None = None
    """The other end of a slow link (None when only the group is known)."""
    group: list[int] | None = None
    """For a slow link inside a collective group whose timing cannot tell which pair."""
    coords: dict[str, int] | None = None
    iterations: list[int] = field(default_factory=list)
    """Iterations where it was slow (all of the traced ones for a lasting fault)."""
    excess_ns: float = 0.0
    """Estimated time it adds to each affected iteration of the job."""
    iteration_ns: float | None = None
    """Iteration time now (median over traced iterations)."""
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def without_ns(self) -> float | None:
        """Estimated iteration time without this fault."""
        if self.iteration_ns is None:
            return None
        return max(self.iteration_ns - self.excess_ns, 0.0)

    def label(self) -> str:
        if self.kind == "slow_link":
            other = self.peer if self.peer is not None else "group " + ",".join(map(str, self.group or []))
            return f"{self.rank}<->{other}"
        return str(self.rank)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rank": self.rank, "kind": self.kind, "confidence": round(self.confidence, 3),
                               "slowdown": round(self.slowdown, 3)}
        if self.kind == "slow_link":
            out["peer"] = self.peer
            if self.group is not None:
                out["group"] = self.group
        if self.coords:
            out["coords"] = self.coords
        out["iterations"] = self.iterations
        out["cost"] = {
            "iteration_ms": None if self.iteration_ns is None else round(self.iteration_ns / 1e6, 4),
            "without_ms": None if self.without_ns is None else round(self.without_ns / 1e6, 4),
            "excess_ms": round(self.excess_ns / 1e6, 4),
        }
        out["evidence"] = self.evidence
        return out


def in_place_of_lower(suspects: list[Suspect], readings: list[Suspect]) -> list[Suspect]:
    """``suspects`` with each of ``readings`` (a rank named by another reading of its compute:
    ``tp_waits``' pace, ``time_slices``) in place of the verdicts on its rank of a lower
    slowdown; a reading whose rank already has a verdict at least as slow is dropped. Links stay."""
    kept = [r for r in readings
            if not any(s.rank == r.rank and s.kind != "slow_link" and not s.slowdown < r.slowdown for s in suspects)]
    named = {r.rank for r in kept}
    return [s for s in suspects if s.kind == "slow_link" or s.rank not in named] + kept


class Overruled(NamedTuple):
    """A candidate that a gate set aside: the rank it was (None for a link) and the note that
    says what it had going for it and why it is no suspect."""

    rank: int | None
    line: str


@dataclass(kw_only=True, slots=True)
class Imbalance:
    """Lost time that the workload, not the hardware, causes."""

    kind: str
    """"stage" (a pipeline stage computes more than the others), "sequence_length" or
    "graded_work" (every rank calls some op a different number of times: the program's split)."""
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, **self.evidence}


@dataclass(kw_only=True, slots=True)
class StageStatus:
    name: str
    ran: bool
    reason: str | None = None
    """Why it did not run."""
    detail: str | None = None


@dataclass(kw_only=True, slots=True)
class Verdict:
    """Everything ``mapp detect`` reports."""

    suspects: list[Suspect]
    imbalance: list[Imbalance]
    stages: list[StageStatus]
    layout: str
    layout_sizes: dict[str, int] | None
    traced: int
    unrecorded: list[int]
    victims: list[int]
    grid: pl.DataFrame
    """Per traced rank: ``rank``, ``tp``, ``pp``, ``dp``, ``slowdown``, ``share_last``, ``role``."""
    iteration_ns: float | None
    threshold: float
    """The slowdown cut (``--threshold``): every suspect is slower than (1 + this) x its peers."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    """Every cut the detector used (``threshold`` is its ``slowdown``)."""
    timings_s: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    below: list[Suspect] = field(default_factory=list)
    """Ranks the evidence names, slower than their peers by less than ``threshold`` (not suspects:
    ``--threshold`` as documented; the notes say so too)."""

    @property
    def healthy(self) -> bool:
        """No suspect (imbalance alone does not make a job unhealthy hardware-wise)."""
        return not self.suspects

    @property
    def compared(self) -> bool:
        """Whether any rank had a peer to be compared with: a verdict is a comparison, and one
        traced rank alone is neither healthy nor slow."""
        return self.traced > 1

    def to_json(self) -> dict[str, Any]:
        return {
            # null, not true, where nothing was compared: scripts reading "healthy" must not take
            # one rank's trace for a clean bill
            "healthy": self.healthy if self.compared else None,
            "compared": self.compared,
            "suspects": [s.to_json() for s in self.suspects],
            "imbalance": [i.to_json() for i in self.imbalance],
            "victims": self.victims,
            "unrecorded": self.unrecorded,
            "layout": self.layout_sizes, "layout_source": self.layout,
            "traced_ranks": self.traced,
            "iteration_ms": None if self.iteration_ns is None else round(self.iteration_ns / 1e6, 4),
            "threshold": self.threshold,
            "thresholds": self.thresholds.to_json(),
            "stages": [{"name": s.name, "ran": s.ran, "reason": s.reason, "detail": s.detail} for s in self.stages],
            "notes": self.notes,
            "below_threshold": [s.to_json() for s in self.below],
            "timings_s": {k: round(v, 4) for k, v in self.timings_s.items()},
        }
