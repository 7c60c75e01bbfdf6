"""Tensor-parallel collectives: spans tagged with the group they really run on.

megatron-core's TP communication goes through the private functions of
``megatron.core.tensor_parallel.mappings`` (``_reduce``, ``_gather_along_last_dim``,
``_gather_along_first_dim``, ``_reduce_scatter_along_first_dim``), which its autograd functions
look up as module globals at call time; those module attributes are replaced. Two modules
also call ``torch.distributed`` directly on the TP group: ``tensor_parallel.layers`` (the
input-gradient all-reduce in the backward of column-parallel linears) and
``tensor_parallel.cross_entropy`` (the vocab-parallel loss); each gets its own view of
``torch.distributed`` (:class:`~mapp.megatron_hooks._patching.DistView`) whose collectives are
recorded, and so does ``mappings`` for the all-to-all of a mixture of experts' token dispatcher
(group ``ep``; its token counts are gathered over ``tp_ep``). Calls already inside a recorded
mapping are not counted twice. The all-reduces of ``distributed.finalize_model_grads`` on the embedding groups (tied embedding/output weights of
the first and last stage) are recorded the same way (group ``embd``/``pos_embd``), at
``iteration`` granularity.

Every call on a group of more than one rank advances that group's ``seq`` counter, traced or
not. Events (``cat: "collective"``, lane ``comm``, ``layer`` granularity) carry ``group``,
``group_ranks`` (sorted global ranks), ``seq``, ``bytes`` (this rank's input), ``out_bytes``
where it differs, ``dtype`` and ``op`` (the torch.distributed operation).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from mapp.capture.tracer import Granularity

from ._patching import DistView, Patcher
from .context import HookContext, dtype_name, nbytes

__all__ = ["install_collectives", "MAPPING_FUNCTIONS"]

# mapping function -> the torch.distributed operation it issues
MAPPING_FUNCTIONS = {
    "_reduce": "all_reduce",
    "_gather_along_last_dim": "all_gather",
    "_gather_along_first_dim": "all_gather",
    "_reduce_scatter_along_first_dim": "reduce_scatter",
}

_DIRECT = {
    "all_reduce": "all_reduce",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "_all_gather_base": "all_gather",
    "_reduce_scatter_base": "reduce_scatter",
    "all_to_all_single": "all_to_all",
}

# tp_ep / expt_tp: a mixture of experts' groups (expert TP x EP, expert TP); its token
# dispatcher gathers token counts over tp_ep and sends the tokens over ep
_RECORDED = ("tp", "cp", "ep", "tp_cp", "tp_ep", "expt_tp", "embd", "pos_embd")


def _record(ctx: HookContext, name: str, op: str, group: Any, tensor: Any, call: Callable,
            out_tensor: Any = None, force: bool = False, asynchronous: bool = False,
            level: Granularity = Granularity.LAYER):
    info = ctx.groups.lookup(group)
    if not force and info.name not in _RECORDED:
        return call()
    tracer = ctx.tracer
    seq = tracer.next_seq(("coll",) + info.key)
    if not tracer.wants(level):
        ctx.comm_depth += 1
        try:
            return call()
        finally:
            ctx.comm_depth -= 1
    t0 = tracer.stamp()
    ctx.comm_depth += 1
    try:
        result = call()
    finally:
        ctx.comm_depth -= 1
    if asynchronous and result is not None:
        event_args = _args(ctx, info, seq, op, tensor, out_tensor)
        event_args["async"] = True
        return _TracedWork(result, lambda: tracer.emit(name, "collective", t0, tid="comm", args=event_args))
    tracer.emit(name, "collective", t0, tid="comm", args=_args(ctx, info, seq, op, tensor, out_tensor, result))
    return result


def _args(ctx: HookContext, info: Any, seq: int, op: str, tensor: Any, out_tensor: Any,
          result: Any = None) -> dict[str, Any]:
    args = {"group": info.name, "group_ranks": info.ranks, "seq": seq, "op": op,
            "microbatch": ctx.microbatch}
    if hasattr(tensor, "numel"):
        args["bytes"] = nbytes(tensor)
        args["dtype"] = dtype_name(tensor.dtype)
        out = out_tensor if out_tensor is not None else result
        if hasattr(out, "numel") and out is not tensor and nbytes(out) != args["bytes"]:
            args["out_bytes"] = nbytes(out)
    return args


class _TracedWork:
    """An asynchronous collective's handle: its span ends when ``wait()`` returns."""

    __slots__ = ("_work", "_done")

    def __init__(self, work: Any, done: Callable[[], None]):
        self._work, self._done = work, done

    def wait(self, *args, **kwargs):
        result = self._work.wait(*args, **kwargs)
        done, self._done = self._done, None
        if done is not None:
            done()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _wrap_mapping(ctx: HookContext, name: str, op: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def mapping(input_, group=None, *args, **kwargs):
        if group is None or ctx.comm_depth or group.size() == 1:
            return fn(input_, group, *args, **kwargs)
        return _record(ctx, name, op, group, input_, lambda: fn(input_, group, *args, **kwargs),
                       force=True)

    return mapping


def _wrap_direct(ctx: HookContext, op_name: str, fn: Callable,
                 level: Granularity = Granularity.LAYER) -> Callable:
    op = _DIRECT[op_name]

    @functools.wraps(fn)
    def direct(*args, **kwargs):
        group = kwargs.get("group")
        if group is None or ctx.comm_depth or group.size() == 1:
            return fn(*args, **kwargs)
        # all_reduce(tensor, ...); all_gather_into_tensor / reduce_scatter_tensor /
        # all_to_all_single(output, input, ...)
        if op == "all_reduce":
            tensor, out = (args[0] if args else kwargs.get("tensor")), None
        else:
            out = args[0] if args else kwargs.get("output_tensor")
            tensor = args[1] if len(args) > 1 else kwargs.get("input_tensor", kwargs.get("input"))
        # An asynchronous call is recorded from its launch until its handle's wait() returns.
        return _record(ctx, op, op, group, tensor, lambda: fn(*args, **kwargs), out_tensor=out,
                       asynchronous=bool(kwargs.get("async_op")), level=level)

    return direct


def _expert_ranks() -> int:
    """The expert-parallel size megatron-core's ``parallel_state`` was given (1 before it is)."""
    from megatron.core import parallel_state as ps

    try:
        return int(ps.get_expert_model_parallel_world_size() or 1)
    except Exception:   # not initialized
        return 1


def install_collectives(ctx: HookContext, patcher: Patcher) -> None:
    """Wrap the TP mapping functions and the direct TP collectives of layers/cross_entropy,
    and the embedding-group all-reduces of ``finalize_model_grads``."""
    import importlib

    import torch.distributed as dist
    from megatron.core.tensor_parallel import cross_entropy, layers, mappings

    # the package re-exports a function of the same name; the module is what we need
    finalize_model_grads = importlib.import_module("megatron.core.distributed.finalize_model_grads")

    for name, op in MAPPING_FUNCTIONS.items():
        if hasattr(mappings, name):
            patcher.wrap(mappings, name, functools.partial(_wrap_mapping, ctx, name, op))
    overrides = {name: _wrap_direct(ctx, name, getattr(dist, name))
                 for name in _DIRECT if hasattr(dist, name)}
    for module in (layers, cross_entropy):
        patcher.set(module, "torch", DistView(module.torch, overrides))
    # the MoE token dispatcher's all-to-all (``mappings._AllToAll``) calls torch.distributed
    # itself; the mapping functions' own calls pass through (``comm_depth``). Only where there are
    # expert ranks to send to: the view costs every ``torch`` lookup of ``mappings`` a call.
    if "all_to_all_single" in overrides and _expert_ranks() > 1:
        patcher.set(mappings, "torch", DistView(mappings.torch, {"all_to_all_single": overrides["all_to_all_single"]}))
    once_per_iteration = {name: _wrap_direct(ctx, name, getattr(dist, name), Granularity.ITERATION)
                          for name in _DIRECT if hasattr(dist, name)}
    patcher.set(finalize_model_grads, "torch", DistView(finalize_model_grads.torch, once_per_iteration))
    # Module-level aliases bound at import (sequence-parallel paths in layers.py).
    for alias, name in (("dist_all_gather_func", "all_gather_into_tensor"),
                        ("dist_reduce_scatter_func", "reduce_scatter_tensor")):
        if hasattr(layers, alias) and name in overrides:
            patcher.set(layers, alias, _wrap_direct(ctx, name, getattr(layers, alias)))
