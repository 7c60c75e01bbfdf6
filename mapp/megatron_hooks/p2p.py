"""Pipeline point-to-point: one ``send``/``recv`` span per tensor a pipeline exchange moves.

``P2PCommunicator._communicate`` (megatron.core.pipeline_parallel.p2p_communication) does
every activation/gradient exchange of the schedules, batched or not; it is wrapped at the
class. One call can move up to four tensors (send/recv to/from next/prev); each becomes its
own event spanning the whole call (the exchange completes together), lane ``comm``,
``cat: "p2p"``, ``schedule`` granularity, with ``peer`` (global rank), ``seq`` (this rank's
count of earlier sends to / receives from that peer, counted traced or not), ``bytes``,
``dtype``, ``direction`` (``next``/``prev``) and, for sends, the ``microbatch`` and ``chunk``
of the forward (activations) or backward (gradients) step that produced the tensor.
A call with ``wait_on_reqs=False`` (overlapped p2p) is recorded up to its launch, ``async: true``.
"""

from __future__ import annotations

import functools
from typing import Callable

from mapp.capture.tracer import Granularity

from ._patching import Patcher
from .context import HookContext, dtype_name, nbytes

__all__ = ["install_p2p"]


def _wrap_communicate(ctx: HookContext, fn: Callable) -> Callable:
    tracer = ctx.tracer

    @functools.wraps(fn)
    def communicate(self, *, tensor_send_next=None, tensor_send_prev=None, recv_prev=False,
                    recv_next=False, **kwargs):
        ops = []
        if tensor_send_prev is not None:
            ops.append(("send", self.prev_rank, "prev", tensor_send_prev, ctx.bwd_outputs))
        if recv_prev:
            ops.append(("recv", self.prev_rank, "prev", None, None))
        if tensor_send_next is not None:
            ops.append(("send", self.next_rank, "next", tensor_send_next, ctx.fwd_outputs))
        if recv_next:
            ops.append(("recv", self.next_rank, "next", None, None))
        seqs = [tracer.next_seq((name, peer)) for name, peer, *_ in ops]
        call = functools.partial(fn, self, tensor_send_next=tensor_send_next,
                                 tensor_send_prev=tensor_send_prev, recv_prev=recv_prev,
                                 recv_next=recv_next, **kwargs)
        if not ops or not tracer.wants(Granularity.SCHEDULE):
            return call()
        starts = [tracer.stamp() for _ in ops]
        result = call()
        recv_prev_tensor, recv_next_tensor = result[0], result[1]
        for (name, peer, direction, tensor, origin), seq, t0 in zip(ops, seqs, starts):
            if tensor is None:
                tensor = recv_prev_tensor if direction == "prev" else recv_next_tensor
            args = {"peer": peer, "seq": seq, "direction": direction}
            if tensor is not None:
                args["bytes"] = nbytes(tensor)
                args["dtype"] = dtype_name(tensor.dtype)
            if origin is not None:
                microbatch, chunk = origin.get(id(tensor), (None, None))
                args["microbatch"] = microbatch
                args["chunk"] = chunk
            if not kwargs.get("wait_on_reqs", True):
                args["async"] = True
            tracer.emit(name, "p2p", t0, tid="comm", args=args)
        return result

    return communicate


def install_p2p(ctx: HookContext, patcher: Patcher) -> None:
    from megatron.core.pipeline_parallel import p2p_communication

    cls = p2p_communication.P2PCommunicator
    patcher.wrap(cls, "_communicate", functools.partial(_wrap_communicate, ctx))
