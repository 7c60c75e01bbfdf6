"""What one simulated training step is made of: stages, chunks, microbatches, times, links."""

from __future__ import annotations

from dataclasses import dataclass

from mapp.errors import InputError

__all__ = ["SCHEDULES", "DPP_SCHEDULES", "ScheduleConfig", "parse_slow_stage"]

SCHEDULES = ("1f1b", "interleaved", "zb-h1", "dpp-depth", "dpp-breadth", "dpp-adaptive")
DPP_SCHEDULES = ("dpp-depth", "dpp-breadth", "dpp-adaptive")


@dataclass(kw_only=True, slots=True, frozen=True)
class ScheduleConfig:
    """One step's pipeline: P stages of V chunks each, M microbatches, and how long things take.

    Times are in arbitrary units (forward 1, backward 2 by default); they are the times of one
    task: one chunk's forward or backward of one microbatch of average length.
    """

    schedule: str = "interleaved"
    """Which schedule orders the tasks: one of ``SCHEDULES``."""
    pp: int = 4
    """Pipeline stages (ranks)."""
    vpp: int = 1
    """Model chunks per stage (virtual pipeline stages); chunk c of stage s is virtual stage c*pp+s."""
    microbatches: int = 8
    """Microbatches per step."""
    forward: float = 1.0
    """Forward time of one chunk for one microbatch."""
    backward: float = 2.0
    """Backward time of one chunk for one microbatch (input and weight gradients together)."""
    weight_grad_fraction: float = 0.5
    """Share of ``backward`` that is the weight gradient (W), which ZB-H1 runs apart from B."""
    jitter: float = 0.0
    """Lognormal sigma of every task's own noise (mean 1)."""
    length_sigma: float = 0.0
    """Lognormal sigma of each microbatch's length factor (mean 1), shared by all its tasks."""
    slow_stage: tuple[int, float] | None = None
    """(stage, factor): every task of that stage takes ``factor`` times as long."""
    latency: float = 0.0
    """Time from the end of a send on a link to the data being there (per transfer)."""
    bandwidth: float = float("inf")
    """Activation units per time unit a link carries; transfers on one directed link queue."""
    group_size: int | None = None
    """Megatron's microbatch group size of the interleaved order (default: pp)."""
    memory_budget: int | None = None
    """dpp-adaptive: breadth-first while a stage holds fewer activations than this (default: cap - 1)."""
    window: int = 2
    """DPP: how far ahead of its plan a rank may look for a ready task (0: follow the plan strictly).

    Small by default: in this model a task run ahead of the plan often delays the planned one
    more than it saves (see BENCHMARKS.md, schedule simulator).
    """
    plan_search: int = 60
    """DPP: swaps of two microbatches the planner tries on the known task times."""

    def __post_init__(self) -> None:
        for flag, value in (("--pp", self.pp), ("--vpp", self.vpp), ("--microbatches", self.microbatches)):
            if value < 1:
                raise InputError(f"{flag} {value} must be at least 1")
        if self.schedule not in SCHEDULES:
            raise InputError(f"unknown schedule {self.schedule!r}", "choose one of " + ", ".join(SCHEDULES))
        if self.forward <= 0 or self.backward <= 0:
            raise InputError(f"task times must be positive (forward {self.forward}, backward {self.backward})")
        if not 0 < self.weight_grad_fraction < 1:
            raise InputError(f"weight-grad fraction {self.weight_grad_fraction} is not in (0, 1)")
        if self.jitter < 0 or self.length_sigma < 0:
            raise InputError(f"sigmas must be >= 0 (jitter {self.jitter}, length sigma {self.length_sigma})")
        if self.latency < 0 or self.bandwidth <= 0:
            raise InputError(f"link latency must be >= 0 and bandwidth > 0 (got {self.latency}, {self.bandwidth})")
        if self.window < 0 or self.plan_search < 0:
            raise InputError(f"--window {self.window} and --plan-search {self.plan_search} must be >= 0")
        if self.slow_stage is not None:
            stage, factor = self.slow_stage
            if not 0 <= stage < self.pp:
                raise InputError(f"--slow-stage {stage}:{factor}: stage {stage} does not exist with --pp {self.pp}",
                                 f"stages are 0..{self.pp - 1}")
            if factor <= 0:
                raise InputError(f"--slow-stage {stage}:{factor}: the factor must be positive")
        if self.schedule in ("1f1b", "zb-h1") and self.vpp != 1:
            raise InputError(f"{self.schedule} runs one chunk per stage, not --vpp {self.vpp}",
                             "use --schedule interleaved or a dpp policy for virtual stages")
        if self.schedule == "interleaved":
            if self.vpp < 2:
                raise InputError("interleaved needs --vpp 2 or more", "use --schedule 1f1b for one chunk per stage")
            group = self.group
            if not self.pp <= group <= self.microbatches:
                raise InputError(f"interleaved: the microbatch group size {group} must lie in [pp={self.pp}, "
                                 f"microbatches={self.microbatches}]", "use more microbatches or a smaller group")
            rest = self.microbatches % group
            if 0 < rest < self.pp:
                raise InputError(f"interleaved: {self.microbatches} microbatches leave a last group of {rest}, "
                                 f"fewer than pp={self.pp} (megatron-core refuses this)",
                                 f"use a multiple of {group} microbatches")
        if self.memory_budget is not None and self.memory_budget < 1:
            raise InputError(f"--memory-budget {self.memory_budget} must be at least 1")

    @property
    def group(self) -> int:
        """The interleaved order's microbatch group size."""
        return self.group_size if self.group_size is not None else self.pp

    @property
    def stages(self) -> int:
        """Virtual stages in the whole pipeline: pp x vpp."""
        return self.pp * self.vpp

    def stage_factor(self, stage: int) -> float:
        """How much slower than nominal the tasks of ``stage`` run."""
        return self.slow_stage[1] if self.slow_stage is not None and self.slow_stage[0] == stage else 1.0


def parse_slow_stage(text: str) -> tuple[int, float]:
    """``"2:1.3"`` -> ``(2, 1.3)``: stage 2 runs 1.3 times slower."""
    stage, sep, factor = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(stage), float(factor)
    except ValueError:
        raise InputError(f"--slow-stage {text!r} is not STAGE:FACTOR", "e.g. --slow-stage 2:1.3") from None
