"""The optimizer step: one ``optimizer_step`` span (``cat: "optimizer"``, ``iteration``
granularity) per call of the outermost ``step()``.

megatron-core optimizers (``megatron.core.optimizer``) define ``step`` on several classes
(mixed precision, FP32, chained) that call each other; every class that defines it is
wrapped and only the outermost call is recorded. Plain ``torch.optim`` optimizers are
covered by torch's global step hooks when no megatron-core optimizer is in use.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from mapp.capture.tracer import Granularity

from ._patching import Patcher
from .context import HookContext

__all__ = ["install_optimizer"]


def _subclasses(cls: type) -> list[type]:
    seen, todo = [], [cls]
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.append(c)
            todo.extend(c.__subclasses__())
    return seen


def _wrap_step(ctx: HookContext, depth: list[int], fn: Callable) -> Callable:
    tracer = ctx.tracer

    @functools.wraps(fn)
    def step(self, *args, **kwargs):
        if depth[0] or not tracer.wants(Granularity.ITERATION):
            depth[0] += 1
            try:
                return fn(self, *args, **kwargs)
            finally:
                depth[0] -= 1
        t0 = tracer.stamp()
        depth[0] += 1
        try:
            return fn(self, *args, **kwargs)
        finally:
            depth[0] -= 1
            tracer.emit("optimizer_step", "optimizer", t0, args={"optimizer": type(self).__name__})

    return step


def install_optimizer(ctx: HookContext, patcher: Patcher, optimizer: Any = None) -> list[Any]:
    """Wrap megatron-core optimizers' ``step``; with a plain torch optimizer, use torch's hooks.
    Returns hook handles to ``remove()`` at uninstall (the class patches are in ``patcher``)."""
    depth = [0]
    try:
        from megatron.core.optimizer.optimizer import MegatronOptimizer
    except ImportError:
        MegatronOptimizer = None
    if optimizer is not None and MegatronOptimizer is not None and not isinstance(optimizer, MegatronOptimizer):
        return _install_torch_hooks(ctx)
    if MegatronOptimizer is None:
        return _install_torch_hooks(ctx)
    for cls in _subclasses(MegatronOptimizer):
        if "step" in cls.__dict__:
            patcher.wrap(cls, "step", functools.partial(_wrap_step, ctx, depth))
    return []


def _install_torch_hooks(ctx: HookContext) -> list[Any]:
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    tracer = ctx.tracer
    starts: dict[int, Any] = {}

    def pre(optimizer, args, kwargs):
        if tracer.wants(Granularity.ITERATION):
            starts[id(optimizer)] = tracer.stamp()

    def post(optimizer, args, kwargs):
        t0 = starts.pop(id(optimizer), None)
        tracer.emit("optimizer_step", "optimizer", t0, args={"optimizer": type(optimizer).__name__})

    return [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]
