"""The small CPU process groups DPP agrees through, built once for the whole job.

Two agreements need a group of their own (gloo, so that a few integers never queue behind
NCCL kernels or force a device sync):

- ``tp``: the tensor-parallel peers of a stage run every task together (its forward and
  backward hold TP collectives), so they choose each next task from the tasks ready on all
  of them: one MIN all-reduce of a few readiness flags;
- ``model``: every rank of one model replica (TP x PP) runs the same plan; one rank plans
  (its planning time is bounded, so the result depends on the machine) and broadcasts it.

``torch.distributed.new_subgroups_by_enumeration`` must see every group of the job on every
rank, so each rank's own rank lists are gathered first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

__all__ = ["ControlGroups", "control_groups"]


@dataclass(frozen=True)
class ControlGroups:
    tp: dist.ProcessGroup | None
    """This rank's TP peers (``None`` without tensor parallelism)."""
    tp_size: int
    model: dist.ProcessGroup
    """Every rank of this model replica."""
    model_ranks: list[int]
    planner: int
    """Global rank that plans each step: the first pipeline stage's first TP rank."""


def _subgroup(every: list[list[int]]) -> dist.ProcessGroup:
    unique = sorted({tuple(sorted(r)) for r in every})
    group, _ = dist.new_subgroups_by_enumeration([list(r) for r in unique], backend="gloo")
    return group


def control_groups() -> ControlGroups:
    """Build the groups (collective over the whole job: every rank must call it once)."""
    from megatron.core import parallel_state as ps

    tp_ranks = sorted(dist.get_process_group_ranks(ps.get_tensor_model_parallel_group()))
    model_ranks = sorted(dist.get_process_group_ranks(ps.get_model_parallel_group()))
    first_tp = ps.get_tensor_model_parallel_rank() == 0 and ps.is_pipeline_first_stage(ignore_virtual=True)
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, (tp_ranks, model_ranks, dist.get_rank(), first_tp))
    tp_group = _subgroup([e[0] for e in every]) if len(tp_ranks) > 1 else None
    model_group = _subgroup([e[1] for e in every])
    # The planner measures the microbatches' costs, so it is a rank that reads the data: the
    # first pipeline stage's first TP rank.
    planner = min(rank for _, ranks, rank, first in every if first and ranks == model_ranks)
    return ControlGroups(tp=tp_group, tp_size=len(tp_ranks), model=model_group, model_ranks=model_ranks,
                         planner=planner)
