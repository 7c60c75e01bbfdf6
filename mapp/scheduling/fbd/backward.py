"""The backward worker of a pipeline stage: recompute, backward, optimizer step.

Per microbatch it takes the stage input its forward partner sent (the tokens at stage 0),
recomputes the stage's forward with autograd, runs the backward with the gradient the next
stage's backward worker sent (the loss at the last stage) and sends the input's gradient to
the previous stage's. It holds one microbatch's activations at a time. After the last
microbatch, megatron-core's gradient finalisation and the optimizer step, then the new weights
go to the forward partner. The arithmetic is that of megatron-core's schedules
(``forward_step``'s loss / num_microbatches, ``backward_step``, grad sync on the last
microbatch, ``finalize_model_grads``), in the same microbatch order as 1F1B's backward passes,
so the losses equal the coupled run's.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

from mapp.capture.tracer import Granularity

from .layout import FbdLayout, Worker
from .model import set_input
from .params import ShardPacker
from .transfers import Transfers, drop_finished

__all__ = ["BackwardWorker"]


class BackwardWorker:
    """``step(iteration)`` trains one iteration of stage ``me.stage``; ``publish(version)``
    sends the weights to the forward partner."""

    def __init__(self, *, me: Worker, layout: FbdLayout, model: Any, config: Any, optimizer: Any,
                 transfers: Transfers, data: Iterator, forward_step: Callable, num_microbatches: int,
                 activation: tuple[tuple[int, ...], torch.dtype], tracer: Any = None):
        self.me, self.layout, self.model, self.config, self.optimizer = me, layout, model, config, optimizer
        self.transfers, self.data, self.forward_step = transfers, data, forward_step
        self.microbatches, self.activation, self.tracer = num_microbatches, activation, tracer
        self.packer = ShardPacker(model.module, layout.shard_index(me), layout.ratio)
        s, t = me.stage, me.tp
        self.first, self.last = s == 0, s == layout.pp - 1
        partner = layout.forward_partner(me)
        self.params_out = layout.channel("params", me.rank, partner)
        self.inputs_in = None if self.first else layout.channel("inputs", partner, me.rank)
        self.grads_in = None if self.last else layout.channel("grads", layout.rank("backward", s + 1, t), me.rank)
        self.grads_out = None if self.first else layout.channel("grads", me.rank, layout.rank("backward", s - 1, t))
        self._published = None

    def _scope(self, name: str, **args: Any):
        if self.tracer is None or not self.tracer.enabled:
            return contextlib.nullcontext()
        return self.tracer.scope(name, cat="compute", level=Granularity.SCHEDULE, **args)

    def publish(self, version: int) -> None:
        """Post the weights after ``version`` optimizer steps (a copy: training goes on)."""
        if self._published is not None:
            self._published.wait()
        with self._scope("weights", iteration=version):
            flat = self.packer.pack()
        tag = torch.tensor([version], dtype=torch.int64, device=flat.device)
        self._published = self.transfers.send(self.params_out, [flat, tag], iteration=version)

    def step(self, iteration: int) -> list[dict]:
        """One iteration; the loss dicts of the microbatches at the last stage."""
        shape, dtype = self.activation
        m_all = range(self.microbatches)
        inputs = [self.transfers.recv(self.inputs_in, [(shape, dtype)], microbatch=m) for m in m_all] \
            if self.inputs_in is not None else []
        grads = [self.transfers.recv(self.grads_in, [(shape, dtype)], microbatch=m) for m in m_all] \
            if self.grads_in is not None else []
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        losses = self.passes(inputs, grads)
        if self.config.finalize_model_grads_func is not None:
            self.config.finalize_model_grads_func([self.model], None)
        self.optimizer.step()
        return losses

    def passes(self, inputs: list, grads: list) -> list[dict]:
        """Every microbatch's recomputation and backward pass (``inputs``, ``grads``: the
        posted receives), in order; the loss dicts at the last stage."""
        losses, pending = [], []
        m_all = range(self.microbatches)
        no_sync = self.config.no_sync_func or contextlib.nullcontext
        for m in m_all:
            x = None
            if inputs:
                x = inputs[m].wait()[0].requires_grad_(True)
                inputs[m] = None
            set_input(self.model, x)
            sync = contextlib.nullcontext() if m == self.microbatches - 1 else no_sync()
            with sync:
                with self._scope("recompute", microbatch=m, chunk=0):
                    output, loss_func = self.forward_step(self.data, self.model)
                    if self.last:
                        # in place, as megatron-core's forward_step: a loss dict holding a
                        # detached view of the loss reports it divided too
                        output, info = loss_func(output)
                        output /= self.microbatches
                        losses.append(info)
                        if self.config.grad_scale_func is not None:
                            output = self.config.grad_scale_func(output)
                grad = None
                if grads:
                    grad = grads[m].wait()[0]
                    grads[m] = None
                with self._scope("backward", microbatch=m, chunk=0):
                    torch.autograd.backward(output, grad_tensors=grad)
            if self.grads_out is not None:
                pending.append(self.transfers.send(self.grads_out, [x.grad], microbatch=m))
            del output, grad, x
            pending = drop_finished(pending)
        set_input(self.model, None)
        for request in pending:
            request.wait()
        return losses
