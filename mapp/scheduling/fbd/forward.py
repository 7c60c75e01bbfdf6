"""The forward worker of a pipeline stage: forward passes only, no activations kept.

Per iteration it waits for the weights of the current version from its backward partners,
then runs every microbatch's forward under ``no_grad``: each layer's activations are freed as
soon as the next layer has used them. It sends the stage output to the next stage's forward
worker and the stage input (what its backward partners recompute from) to its backward
partners; a tensor is kept only until its transfer ran. Its receives for the whole iteration
are posted up front, so that transfers overlap its compute.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from mapp.capture.tracer import Granularity

from .layout import FbdLayout, Worker
from .model import set_input
from .params import ShardAssembler
from .transfers import Transfers, drop_finished

__all__ = ["ForwardWorker"]


class ForwardWorker:
    """``step(iteration)`` runs one iteration's forward passes of stage ``me.stage``."""

    def __init__(self, *, me: Worker, layout: FbdLayout, model: torch.nn.Module, transfers: Transfers,
                 data: Iterator, forward_step: Callable, num_microbatches: int,
                 activation: tuple[tuple[int, ...], torch.dtype], tracer: Any = None):
        self.me, self.layout, self.model, self.transfers = me, layout, model, transfers
        self.data, self.forward_step, self.microbatches = data, forward_step, num_microbatches
        self.activation = activation
        self.tracer = tracer
        self.assembler = ShardAssembler(model, layout.ratio)
        s, t, last = me.stage, me.tp, me.stage == layout.pp - 1
        self.params_in = [layout.channel("params", b, me.rank) for b in layout.backward_partners(me)]
        prev = layout.rank("forward", s - 1, t) if s > 0 else None
        self.act_in = layout.channel("activations", prev, me.rank) if prev is not None else None
        self.act_out = None if last else layout.channel("activations", me.rank, layout.rank("forward", s + 1, t))
        self.inputs_out = [layout.channel("inputs", me.rank, b) for b in layout.backward_partners(me)] if s else []
        self.version = 0

    def _scope(self, name: str, **args: Any):
        import contextlib

        if self.tracer is None or not self.tracer.enabled:
            return contextlib.nullcontext()
        return self.tracer.scope(name, cat="compute", level=Granularity.SCHEDULE, **args)

    def load_weights(self, iteration: int) -> None:
        """Receive the weights after ``iteration`` optimizer steps (all shards, then copy)."""
        specs = [[((n,), self.assembler.dtype), ((1,), torch.int64)] for n in self.assembler.sizes]
        requests = [self.transfers.recv(c, spec, iteration=iteration) for c, spec in zip(self.params_in, specs)]
        shards = []
        for request in requests:
            flat, version = request.wait()
            if int(version.item()) != iteration:
                raise RuntimeError(f"forward worker {self.me.rank}: weights of version {int(version.item())} "
                                   f"arrived for iteration {iteration}")
            shards.append(flat)
        with self._scope("weights", iteration=iteration):
            self.assembler.assemble(shards)
        self.version = iteration

    def step(self, iteration: int) -> None:
        """The weights of this iteration, then its forward passes."""
        shape, dtype = self.activation
        recvs = ([self.transfers.recv(self.act_in, [(shape, dtype)], microbatch=m) for m in range(self.microbatches)]
                 if self.act_in is not None else [])
        self.load_weights(iteration)
        self.forward_passes(recvs)

    def forward_passes(self, recvs: list) -> None:
        """Every microbatch's forward pass (``recvs``: the posted receives of the inputs)."""
        pending = []
        for m in range(self.microbatches):
            x = recvs[m].wait()[0] if recvs else None
            if recvs:
                recvs[m] = None
            set_input(self.model, x)
            with torch.no_grad(), self._scope("forward", microbatch=m, chunk=0):
                output, _ = self.forward_step(self.data, self.model)
            if self.act_out is not None:
                pending.append(self.transfers.send(self.act_out, [output], microbatch=m))
            for channel in self.inputs_out:
                pending.append(self.transfers.send(channel, [x], microbatch=m))
            del output, x
            pending = drop_finished(pending)
        set_input(self.model, None)
        for request in pending:
            request.wait()

