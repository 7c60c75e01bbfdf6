"""Names and global ranks of megatron-core's process groups, looked up by the group object.

A collective is tagged with the group it really runs on: the ``ProcessGroup`` object passed to
it is looked up here, so a TP all-reduce says ``group: "tp"`` with the TP group's ranks even
where megatron-core has other groups of the same size.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["GroupInfo", "GroupNames", "layout_and_coords"]


class GroupInfo(NamedTuple):
    name: str
    ranks: list[int]
    key: tuple
    """Counter key for ``seq``: (name, ranks)."""


def _ranks(group: Any) -> list[int]:
    import torch.distributed as dist

    return sorted(dist.get_process_group_ranks(group))


class GroupNames:
    """Registry of process groups by identity; unknown groups are named ``group``."""

    # (name, getter name in parallel_state, kwargs); the first name given to a group object wins.
    KNOWN = (
        ("tp", "get_tensor_model_parallel_group", {}),
        ("pp", "get_pipeline_model_parallel_group", {}),
        ("dp", "get_data_parallel_group", {}),
        ("dp_cp", "get_data_parallel_group", {"with_context_parallel": True}),
        ("cp", "get_context_parallel_group", {}),
        ("ep", "get_expert_model_parallel_group", {}),
        ("tp_ep", "get_expert_tensor_and_model_parallel_group", {}),
        ("expt_tp", "get_expert_tensor_parallel_group", {}),
        ("expt_dp", "get_expert_data_parallel_group", {}),
        ("embd", "get_embedding_group", {}),
        ("pos_embd", "get_position_embedding_group", {}),
        ("mp", "get_model_parallel_group", {}),
        ("tp_cp", "get_tensor_and_context_parallel_group", {}),
        ("tp_dp", "get_tensor_and_data_parallel_group", {}),
        ("dist_opt", "get_intra_distributed_optimizer_instance_group", {}),
    )

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, GroupInfo]] = {}

    def register(self, name: str, group: Any) -> None:
        if group is None or id(group) in self._by_id:
            return
        ranks = _ranks(group)
        if name == "dp_cp":  # with cp == 1 this is the data-parallel group by another object
            dp = next((info for _, info in self._by_id.values() if info.name == "dp"), None)
            if dp is not None and dp.ranks == ranks:
                name = "dp"
        self._by_id[id(group)] = (group, GroupInfo(name, ranks, (name, tuple(ranks))))

    def register_parallel_state(self) -> None:
        """Register every group megatron-core's ``parallel_state`` has built."""
        from megatron.core import parallel_state as ps

        for name, getter, kwargs in self.KNOWN:
            fn = getattr(ps, getter, None)
            if fn is None:
                continue
            try:
                group = fn(**kwargs)
            except Exception:  # not initialized in this run
                continue
            if isinstance(group, list):
                continue
            try:
                self.register(name, group)
            except Exception:
                continue

    def lookup(self, group: Any) -> GroupInfo:
        entry = self._by_id.get(id(group))
        if entry is not None and entry[0] is group:
            return entry[1]
        self.register("group", group)
        return self._by_id[id(group)][1]


def layout_and_coords() -> tuple[dict[str, int], dict[str, int]]:
    """Parallel sizes and this rank's coordinates from ``parallel_state``."""
    from megatron.core import parallel_state as ps

    def get(fn: str, default: int) -> int:
        try:
            value = getattr(ps, fn)()
            return default if value is None else int(value)
        except Exception:
            return default

    layout = {
        "tp": get("get_tensor_model_parallel_world_size", 1),
        "pp": get("get_pipeline_model_parallel_world_size", 1),
        "dp": get("get_data_parallel_world_size", 1),
        "cp": get("get_context_parallel_world_size", 1),
        "ep": get("get_expert_model_parallel_world_size", 1),
        "vpp": get("get_virtual_pipeline_model_parallel_world_size", 1),
    }
    coords = {
        "tp": get("get_tensor_model_parallel_rank", 0),
        "pp": get("get_pipeline_model_parallel_rank", 0),
        "dp": get("get_data_parallel_rank", 0),
        "cp": get("get_context_parallel_rank", 0),
        "ep": get("get_expert_model_parallel_rank", 0),
    }
    return layout, coords
