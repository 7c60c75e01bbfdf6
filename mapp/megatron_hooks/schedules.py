"""Pipeline schedule steps: one ``forward`` and one ``backward`` span per microbatch and model
chunk, for the no-pipelining, 1F1B and interleaved 1F1B schedules.

All three schedules of ``megatron.core.pipeline_parallel.schedules`` call the module-level
``forward_step`` and ``backward_step``; those module attributes are wrapped. ``forward_step``
is told the microbatch (``current_microbatch``) and the model chunk (``vp_stage``, ``None``
without interleaving). ``backward_step`` is not; it receives the very output tensor the
forward step returned, whose identity maps back to (microbatch, chunk). Events: ``cat:
"compute"``, lane ``compute``, ``schedule`` granularity, ``args.microbatch``/``args.chunk``.
"""

from __future__ import annotations

import functools
from typing import Callable

from mapp.capture.tracer import Granularity

from ._patching import Patcher
from .context import HookContext, first_tensor

__all__ = ["install_schedules"]

# forward_step(forward_step_func, data_iterator, model, num_microbatches, input_tensor,
#              forward_data_store, config, cp_group_size, collect_non_loss_data,
#              checkpoint_activations_microbatch, is_first_microbatch, current_microbatch, vp_stage, ...)
_MICROBATCH_POS, _VP_STAGE_POS = 11, 12


def _wrap_forward(ctx: HookContext, fn: Callable) -> Callable:
    tracer = ctx.tracer

    @functools.wraps(fn)
    def forward_step(*args, **kwargs):
        microbatch = kwargs.get("current_microbatch")
        if microbatch is None and len(args) > _MICROBATCH_POS:
            microbatch = args[_MICROBATCH_POS]
        chunk = kwargs.get("vp_stage")
        if chunk is None and len(args) > _VP_STAGE_POS:
            chunk = args[_VP_STAGE_POS]
        chunk = chunk or 0
        if microbatch is None:  # a caller that does not say: count per chunk
            microbatch = ctx.forward_count.get(chunk, 0)
        ctx.forward_count[chunk] = ctx.forward_count.get(chunk, 0) + 1
        ctx.microbatch, ctx.chunk = microbatch, chunk
        t0 = tracer.stamp() if tracer.wants(Granularity.SCHEDULE) else None
        result = fn(*args, **kwargs)
        tracer.emit("forward", "compute", t0, args={"microbatch": microbatch, "chunk": chunk})
        output = first_tensor(result[0] if isinstance(result, tuple) else result)
        if output is not None:
            ctx.fwd_outputs[id(output)] = (microbatch, chunk)
        return result

    return forward_step


def _wrap_backward(ctx: HookContext, fn: Callable) -> Callable:
    tracer = ctx.tracer

    @functools.wraps(fn)
    def backward_step(input_tensor, output_tensor, output_tensor_grad, *args, **kwargs):
        origin = ctx.fwd_outputs.pop(id(first_tensor(output_tensor)), None)
        if origin is None:
            chunk = ctx.chunk
            origin = (ctx.backward_count.get(chunk, 0), chunk)
        microbatch, chunk = origin
        ctx.backward_count[chunk] = ctx.backward_count.get(chunk, 0) + 1
        ctx.microbatch, ctx.chunk = microbatch, chunk
        t0 = tracer.stamp() if tracer.wants(Granularity.SCHEDULE) else None
        result = fn(input_tensor, output_tensor, output_tensor_grad, *args, **kwargs)
        tracer.emit("backward", "compute", t0, args={"microbatch": microbatch, "chunk": chunk})
        grad = first_tensor(result)
        if grad is not None:
            ctx.bwd_outputs[id(grad)] = origin
        return result

    return backward_step


def install_schedules(ctx: HookContext, patcher: Patcher) -> None:
    from megatron.core.pipeline_parallel import schedules

    patcher.wrap(schedules, "forward_step", functools.partial(_wrap_forward, ctx))
    patcher.wrap(schedules, "backward_step", functools.partial(_wrap_backward, ctx))
