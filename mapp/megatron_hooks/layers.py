"""Forward and backward spans of transformer layers (and, at ``op`` granularity, attention,
MLP and the modules inside them), with layer index, microbatch and model chunk.

Why attention and MLP are ``op`` and not ``layer``: a layer's own span is what the detector
needs (a slowed GPU slows its layers); the parts triple the spans per step (~600 instead of
~210 on a 24-layer GPT), and every span is work for the writer while the next step runs.

Forward: the module's ``forward`` is wrapped on the instance (``module.forward``), not hooked:
a module with forward hooks, with kwargs above all, takes PyTorch's slow call path, and the
wrapper costs one Python call. The wrapper takes a stamp, calls the original and emits
``<kind>.forward``; the spans' names and args are made once per (module, microbatch, tokens)
(:class:`~mapp.capture.writer.EventSpec`), so a span costs a tuple.
Backward: autograd hooks, no synchronization. A pre-hook on the ``grad_fn`` of the output
fires when the gradient with respect to the output is complete, i.e. when the module's
backward starts; one on the ``grad_fn`` of the input (a tensor hook if the input is a leaf)
fires when the gradient with respect to the input is complete, i.e. when the module's
backward is done. That span is emitted as
``<kind>.backward``, tagged with the forward's microbatch and chunk. A forward that runs
inside backward (activation recomputation) is emitted as ``<kind>.recompute``, and the backward
that follows it gets its hooks there (the first forward ran without autograd).

Event names: ``layer.forward``/``layer.backward`` (``args.layer``: 0-based global layer
index), ``embedding.forward``, ``output_layer.*``, and at ``op`` granularity ``attention.*``,
``mlp.*`` and ``<submodule>.*`` (``linear_qkv``, ``core_attention``, ``linear_fc1``, ...).
``args.tokens``: the tokens the call worked on (the product of its input's first two
dimensions, sequence x micro-batch; the rows of a 2-D activation, as a mixture of experts'
``experts`` get the tokens routed to the rank: its experts' load), so that a reader can tell a
rank that got longer sequences, or more of the router's tokens, from a slower one (read from the
shape: no synchronization).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from mapp.capture.tracer import Granularity
from mapp.capture.writer import EventSpec

from .context import HookContext, first_tensor

__all__ = ["LayerHooks"]

_graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)
_MISSING = object()
_MAX_SPECS = 4096  # event specs kept per module: (microbatch, tokens) pairs seen lately


class LayerHooks:
    """Forward wrappers and backward hooks on model chunks, put on only while an iteration is
    traced: at the start of each traced iteration, and taken off at the start of the next
    untraced one (layer spans carry no counters that must see every call), so untraced
    iterations run the model untouched. :meth:`remove` takes them off for good.
    """

    def __init__(self, ctx: HookContext):
        self.ctx = ctx
        self.tracer = ctx.tracer
        self.handles: list[tuple[torch.nn.Module, Any]] = []
        self.targets: list[tuple[torch.nn.Module, tuple]] = []
        self.modules = 0
        self._closed = False
        self._specs: dict[tuple, dict[Any, tuple]] = {}
        self._fwd_link: tuple | None = None  # ((chunk, microbatch, next layer, iteration), stamp)
        self._bwd_link: tuple | None = None  # (grad_fn of the last layer's output, its _Backward)
        ctx.tracer.on_iteration(self._on_iteration)

    def _forget_links(self) -> None:
        if self._fwd_link is not None:
            self.tracer.free_stamp(self._fwd_link[1])
        self._fwd_link = self._bwd_link = None

    def _on_iteration(self, iteration: int, traced: bool) -> None:
        self._forget_links()
        if traced and not self.handles and not self._closed:
            self._register()
        elif not traced and self.handles:
            self._unregister()

    def _register(self) -> None:
        for module, spec in self.targets:
            previous = module.__dict__.get("forward", _MISSING)
            self.handles.append((module, previous))
            module.forward = self._wrap(spec, module.forward)

    def _unregister(self) -> None:
        for module, previous in reversed(self.handles):
            if previous is _MISSING:
                module.__dict__.pop("forward", None)
            else:
                module.forward = previous
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
                self.attach(child, kind, Granularity.OP, index, chunk)
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
        self._forget_links()

    # -- the wrapper -----------------------------------------------------------------------
    def _specs_for(self, spec: tuple, key: tuple[Any, int | None]) -> tuple[EventSpec, EventSpec, EventSpec]:
        """(forward, backward, recompute) event specs of one module, microbatch and token count."""
        by_key = self._specs.setdefault(spec, {})
        specs = by_key.get(key)
        if specs is None:
            microbatch, tokens = key
            args = {"microbatch": microbatch, "chunk": spec[2]}
            if spec[1] is not None:
                args["layer"] = spec[1]
            if tokens is not None:
                args["tokens"] = tokens
            specs = tuple(EventSpec(name, "compute", "compute", args) for name in spec[3:6])
            if len(by_key) >= _MAX_SPECS:  # lengths that vary every step: keep the cache bounded
                by_key.clear()
            by_key[key] = specs
        return specs

    def _wrap(self, spec: tuple, forward: Callable) -> Callable:
        tracer, ctx, hooks = self.tracer, self.ctx, self
        clock = tracer.clock
        level, layer, chunk = spec[0], spec[1], spec[2]
        # Transformer layers run back to back: one layer's end is the next one's start
        # (forward), and the gradient that ends one layer's backward starts the previous
        # layer's (backward). They share that stamp: one CUDA event per boundary, not two.
        chained = spec[3] == "layer.forward" and layer is not None
        specs_for = functools.partial(self._specs_for, spec)
        cache: dict[Any, tuple] = {}
        grad_enabled = torch.is_grad_enabled
        Tensor = torch.Tensor
        record = tracer.record_spec

        def traced_forward(*args, **kwargs):
            if not tracer.want[level]:
                return forward(*args, **kwargs)
            x = args[0] if args else kwargs.get("hidden_states", kwargs.get("input_ids"))
            is_tensor = isinstance(x, Tensor)
            shape = x.shape if is_tensor and x.dim() >= 2 else None
            # tokens: [s, b, h] activations and [b, s] ids s x b; [t, h] activations (a mixture
            # of experts' ``experts``) their rows, the tokens routed to this rank
            key = (ctx.microbatch, None if shape is None else
                   shape[0] if len(shape) == 2 and x.is_floating_point() else shape[0] * shape[1])
            specs = cache.get(key)
            if specs is None:
                if len(cache) >= _MAX_SPECS:
                    cache.clear()
                specs = cache[key] = specs_for(key)
            backward = None
            recompute = _graph_task_id() != -1  # a forward run again inside backward
            link = chained and not recompute
            if recompute:
                span = specs[2]
                # under full recomputation the first forward ran without autograd: the backward
                # that follows this second forward is the module's, timed from its hooks
                if is_tensor and x.requires_grad and grad_enabled():
                    backward = _Backward(tracer, specs[1])
                    _on_grad_ready(x, backward.end)
            else:
                span = specs[0]
                if grad_enabled():
                    if is_tensor and x.requires_grad:
                        backward = _Backward(tracer, specs[1])
                        previous = hooks._bwd_link
                        if link and previous is not None and previous[0] is x.grad_fn:
                            previous[1].then = backward  # its start is this one's end
                        else:
                            _on_grad_ready(x, backward.end)
            stamp = clock.stamp
            t0 = None
            if link:
                microbatch = key[0]
                lent = hooks._fwd_link
                if lent is not None:
                    hooks._fwd_link = None
                    if lent[0] == (chunk, microbatch, layer, tracer.iteration_number) and clock.last is lent[1]:
                        t0 = lent[1]
                    else:
                        tracer.free_stamp(lent[1])
            if t0 is None:
                t0 = stamp()
            output = forward(*args, **kwargs)
            t1 = stamp()
            if link and t1 is not None:
                record(span, t0, t1, lent=True)
                hooks._fwd_link = ((chunk, microbatch, layer + 1, tracer.iteration_number), t1)
            else:
                record(span, t0, t1)
            if backward is not None:
                y = first_tensor(output)
                if isinstance(y, Tensor) and y.requires_grad:
                    _on_grad_ready(y, backward.start)
                    if link:
                        node = y.grad_fn
                        hooks._bwd_link = None if node is None else (node, backward)
            return output

        return functools.wraps(forward)(traced_forward)


def _on_grad_ready(tensor: torch.Tensor, fn: Callable) -> None:
    """Call ``fn`` when the gradient with respect to ``tensor`` is complete: a pre-hook on the
    node that produced it (which runs once all of its gradients are summed; cheaper than a
    tensor hook), a tensor hook for a leaf (a pipeline stage's received input)."""
    node = tensor.grad_fn
    if node is not None:
        node.register_prehook(fn)
    else:
        tensor.register_hook(fn)


class _Backward:
    """One module call's backward span: started by the output's gradient, ended by the input's,
    or (``then``) by the next span's start: the previous layer's backward starts when this
    layer's input gradient is complete, and the two spans share that stamp."""

    __slots__ = ("tracer", "spec", "t0", "then")

    def __init__(self, tracer, spec: EventSpec):
        self.tracer, self.spec, self.t0, self.then = tracer, spec, None, None

    def start(self, grad) -> None:
        if self.t0 is None:
            self.t0 = t = self.tracer.stamp()
            then = self.then
            if then is not None:
                self.then = None
                then.end_at(t)

    def end(self, grad) -> None:
        t0 = self.t0
        if t0 is not None:
            self.t0 = None
            self.tracer.emit_spec(self.spec, t0)

    def end_at(self, t1) -> None:
        """End at ``t1``, a stamp that starts another span (which gives it back)."""
        t0 = self.t0
        if t0 is not None:
            self.t0 = None
            self.tracer.record_spec(self.spec, t0, t1, lent=t1 is not None)


def _is_identity(module: torch.nn.Module) -> bool:
    return type(module).__name__ in ("IdentityOp", "IdentityFuncOp", "Identity")
