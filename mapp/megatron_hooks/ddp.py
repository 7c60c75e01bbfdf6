"""Data-parallel gradient reduction and parameter gather of megatron-core's DDP.

``DistributedDataParallel`` hands its communication to bucket groups
(``megatron.core.distributed.param_and_grad_buffer._ParamAndGradBucketGroup``); their
``start_grad_sync`` (all-reduce, or reduce-scatter with the distributed optimizer) and
``start_param_sync`` (all-gather) are wrapped at the class, as are ``finish_grad_sync`` and
``finish_param_sync`` (the wait for overlapped communication).

Events, ``iteration`` granularity, lane ``comm``: ``grad_reduce`` / ``param_gather``
(``cat: "collective"``, with ``group``, ``group_ranks``, ``seq`` counted per group traced or
not, ``bytes`` summed over the group's buckets, ``dtype``, ``buckets``, ``async`` when the
call only launches overlapped communication), and ``grad_sync_wait`` / ``param_sync_wait``
(``cat: "other"``) for the waits.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from mapp.capture.tracer import Granularity

from ._patching import Patcher
from .context import HookContext, dtype_name

__all__ = ["install_ddp"]


def _group_of(bucket_group: Any) -> Any:
    return (getattr(bucket_group, "intra_distributed_optimizer_instance_group", None)
            or getattr(bucket_group, "data_parallel_group", None))


def _wrap_start(ctx: HookContext, name: str, data_attr: str, overlap_attr: str, fn: Callable):
    tracer = ctx.tracer

    @functools.wraps(fn)
    def start(self, *args, **kwargs):
        group = _group_of(self)
        if group is None or group.size() == 1:
            return fn(self, *args, **kwargs)
        if name == "grad_reduce" and self.is_first_batch and self.grad_reduce_handle is not None:
            return fn(self, *args, **kwargs)  # megatron makes this call a no-op
        if name == "param_gather" and kwargs.get("force_sync") and self.param_gather_handle is not None:
            return fn(self, *args, **kwargs)  # only waits for an earlier gather
        info = ctx.groups.lookup(group)
        seq = tracer.next_seq(("coll",) + info.key)
        if not tracer.wants(Granularity.ITERATION):
            ctx.comm_depth += 1
            try:
                return fn(self, *args, **kwargs)
            finally:
                ctx.comm_depth -= 1
        t0 = tracer.stamp()
        ctx.comm_depth += 1
        try:
            result = fn(self, *args, **kwargs)
        finally:
            ctx.comm_depth -= 1
        buffers = [getattr(b, data_attr) for b in self.buckets if getattr(b, data_attr, None) is not None]
        event_args = {"group": info.name, "group_ranks": info.ranks, "seq": seq,
                      "bytes": sum(t.numel() * t.element_size() for t in buffers),
                      "dtype": dtype_name(buffers[0].dtype) if buffers else None,
                      "buckets": len(self.buckets)}
        if getattr(self.ddp_config, overlap_attr, False) and not kwargs.get("force_sync"):
            event_args["async"] = True
        tracer.emit(name, "collective", t0, tid="comm", args=event_args)
        return result

    return start


def _wrap_finish(ctx: HookContext, name: str, fn: Callable):
    tracer = ctx.tracer

    @functools.wraps(fn)
    def finish(self, *args, **kwargs):
        group = _group_of(self)
        if not tracer.wants(Granularity.ITERATION) or group is None or group.size() == 1:
            return fn(self, *args, **kwargs)
        t0 = tracer.stamp()
        result = fn(self, *args, **kwargs)
        tracer.emit(name, "other", t0, tid="comm")
        return result

    return finish


def install_ddp(ctx: HookContext, patcher: Patcher) -> None:
    from megatron.core.distributed import param_and_grad_buffer

    cls = param_and_grad_buffer._ParamAndGradBucketGroup
    patcher.wrap(cls, "start_grad_sync", functools.partial(
        _wrap_start, ctx, "grad_reduce", "grad_data", "overlap_grad_reduce"))
    patcher.wrap(cls, "start_param_sync", functools.partial(
        _wrap_start, ctx, "param_gather", "param_data", "overlap_param_gather"))
    patcher.wrap(cls, "finish_grad_sync", functools.partial(_wrap_finish, ctx, "grad_sync_wait"))
    patcher.wrap(cls, "finish_param_sync", functools.partial(_wrap_finish, ctx, "param_sync_wait"))
