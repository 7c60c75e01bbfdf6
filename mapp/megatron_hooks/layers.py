"""Forward and backward spans of transformer layers, attention, MLP (and, at ``op``
granularity, the modules inside them), with layer index, microbatch and model chunk.

Forward: a forward pre-hook takes a stamp, a forward hook emits ``<kind>.forward``.
Backward: autograd hooks on tensors, no synchronization. A hook on the module's *output*
fires when the gradient with respect to it is complete, i.e. when the module's backward
starts; a hook on its *input* fires when the gradient with respect to the input is complete,
i.e. when the module's backward is done. That span is emitted as ``<kind>.backward``, tagged
with the forward's microbatch and chunk. A forward that runs inside backward (activation
recomputation) is emitted as ``<kind>.recompute``.

Event names: ``layer.forward``/``layer.backward`` (``args.layer``: 0-based global layer
index), ``attention.*``, ``mlp.*``, ``embedding.forward``, ``output_layer.*``, and at ``op``
granularity ``<submodule>.*`` (``linear_qkv``, ``core_attention``, ``linear_fc1``, ...).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from mapp.capture.tracer import Granularity

from .context import HookContext, first_tensor

__all__ = ["LayerHooks"]

_graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)


class LayerHooks:
    """Module hooks on model chunks, registered only while an iteration is traced.

    A module with hooks takes PyTorch's slower call path, so the hooks are put on at the start
    of each traced iteration and taken off at the start of the next untraced one (layer spans
    carry no counters that must see every call). :meth:`remove` takes them off for good.
    """

    def __init__(self, ctx: HookContext):
        self.ctx = ctx
        self.tracer = ctx.tracer
        self.handles: list[Any] = []
        self.targets: list[tuple[torch.nn.Module, tuple]] = []
        self.modules = 0
        self._closed = False
        ctx.tracer.on_iteration(self._on_iteration)

    def _on_iteration(self, iteration: int, traced: bool) -> None:
        if traced and not self.handles and not self._closed:
            self._register()
        elif not traced and self.handles:
            self._unregister()

    def _register(self) -> None:
        for module, spec in self.targets:
            stack: list[tuple] = []
            self.handles.append(module.register_forward_pre_hook(
                functools.partial(self._pre, spec, stack), with_kwargs=True))
            self.handles.append(module.register_forward_hook(functools.partial(self._post, spec, stack)))

    def _unregister(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def attach_model(self, chunks: list[torch.nn.Module]) -> None:
        """Hook every transformer layer (and its attention/MLP, embedding, output layer)."""
        from megatron.core.transformer.transformer_layer import TransformerLayer

        for chunk_index, chunk in enumerate(chunks):
            for name, module in chunk.named_modules():
                leaf = name.rsplit(".", 1)[-1]
                if isinstance(module, TransformerLayer):
                    self._attach_layer(module, chunk_index)
                elif leaf == "embedding" and "decoder" not in name:
                    self.attach(module, "embedding", Granularity.LAYER, None, chunk_index)
                elif leaf == "output_layer":
                    self.attach(module, "output_layer", Granularity.LAYER, None, chunk_index)

    def _attach_layer(self, layer: torch.nn.Module, chunk: int) -> None:
        index = getattr(layer, "layer_number", None)
        index = None if index is None else int(index) - 1
        self.attach(layer, "layer", Granularity.LAYER, index, chunk)
        for child_name, child in layer.named_children():
            if _is_identity(child):
                continue
            if child_name in ("self_attention", "cross_attention", "mlp"):
                kind = "mlp" if child_name == "mlp" else "attention"
                self.attach(child, kind, Granularity.LAYER, index, chunk)
                for op_name, op in child.named_children():
                    if not _is_identity(op):
                        self.attach(op, op_name, Granularity.OP, index, chunk)
            else:
                self.attach(child, child_name, Granularity.OP, index, chunk)

    def attach(self, module: torch.nn.Module, kind: str, level: Granularity, layer: int | None,
               chunk: int) -> None:
        """Hook one module: its spans are ``<kind>.forward`` / ``.backward`` / ``.recompute``."""
        if level > self.tracer.granularity:
            return
        spec = (level, layer, chunk, f"{kind}.forward", f"{kind}.backward", f"{kind}.recompute")
        self.targets.append((module, spec))
        self.modules += 1

    def remove(self) -> None:
        self._closed = True
        self._unregister()

    # -- hooks -----------------------------------------------------------------------------
    def _pre(self, spec, stack, module, args, kwargs):
        tracer = self.tracer
        if not tracer.wants(spec[0]):
            return None
        t0 = tracer.stamp()
        recompute = _graph_task_id() != -1
        event_args = {"microbatch": self.ctx.microbatch, "chunk": spec[2]}
        if spec[1] is not None:
            event_args["layer"] = spec[1]
        cell = None
        if not recompute and torch.is_grad_enabled():
            x = args[0] if args else kwargs.get("hidden_states")
            if isinstance(x, torch.Tensor) and x.requires_grad:
                cell = [None]
                x.register_hook(functools.partial(self._backward_end, spec[4], cell, event_args))
        stack.append((t0, recompute, cell, event_args))
        return None

    def _post(self, spec, stack, module, args, output):
        if not stack:
            return None
        t0, recompute, cell, event_args = stack.pop()
        self.tracer.emit(spec[5] if recompute else spec[3], "compute", t0, args=event_args)
        if cell is not None:
            y = first_tensor(output)
            if isinstance(y, torch.Tensor) and y.requires_grad:
                y.register_hook(functools.partial(self._backward_start, cell))
        return None

    def _backward_start(self, cell, grad):
        if cell[0] is None:
            cell[0] = self.tracer.stamp()

    def _backward_end(self, name, cell, event_args, grad):
        t0 = cell[0]
        if t0 is not None:
            cell[0] = None
            self.tracer.emit(name, "compute", t0, args=event_args)


def _is_identity(module: torch.nn.Module) -> bool:
    return type(module).__name__ in ("IdentityOp", "IdentityFuncOp", "Identity")
