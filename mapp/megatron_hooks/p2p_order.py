"""megatron-core's batched pipeline p2p at two stages: messages posted in an order that pairs.

With two pipeline stages the previous and the next rank are the same rank. megatron-core's
batched p2p (``_batched_p2p_ops``, the default ``batch_p2p_comm``) and its shape exchange for
variable sequence lengths (``P2PCommunicator._communicate_shapes``) post, on every rank,
``send_prev, recv_prev, send_next, recv_next``. Messages between two ranks meet receives in
posting order (NCCL within a batch, gloo per tag), so in the interleaved schedule's steady
state rank 0's gradient for rank 1 met rank 1's receive of an activation and the other way
round. With equal shapes nothing fails and the stages train on each other's tensors; with
variable sequence lengths (measured on 2 GPUs over NCCL) a stage receives another
microbatch's shape and the attention mask no longer fits (``expanded size ... must match``).

Here every rank posts its sends next-then-prev and its receives prev-then-next: what a rank
sends to its next stage is first, and its peer's first receive from that rank is the one from
its previous stage, which is that rank. The unbatched path (``_p2p_ops``) already orders by
rank parity over two groups and is left alone. With more than two stages the previous and
next ranks differ and the order changes nothing. (The CPU patches tag each message with its
direction instead: :mod:`mapp.megatron_hooks.cpu_patches`.)
"""

from __future__ import annotations

import torch

__all__ = ["apply"]

_applied = False


def ordered_ops(send_prev, recv_prev, send_next, recv_next, prev_rank: int, next_rank: int, group) -> list:
    """megatron's four p2p operations (None: not posted), sends next-then-prev, receives
    prev-then-next."""
    dist = torch.distributed
    ops = []
    for op, tensor, peer in ((dist.isend, send_next, next_rank), (dist.isend, send_prev, prev_rank),
                             (dist.irecv, recv_prev, prev_rank), (dist.irecv, recv_next, next_rank)):
        if tensor is not None:
            ops.append(dist.P2POp(op, tensor, peer, group))
    return ops


def apply() -> None:
    """Patch megatron-core's batched pipeline p2p and shape exchange (idempotent)."""
    global _applied
    if _applied:
        return
    from megatron.core.pipeline_parallel import p2p_communication as p2p

    def batched_p2p_ops(*, tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next, group,
                        prev_pipeline_rank, next_pipeline_rank):
        ops = ordered_ops(tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next,
                          prev_pipeline_rank, next_pipeline_rank, group)
        return torch.distributed.batch_isend_irecv(ops) if ops else []

    def communicate_shapes(self, tensor_send_next, tensor_send_prev, recv_prev, recv_next):
        device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
        shape = lambda t: None if t is None else torch.tensor(t.size(), device=device, dtype=torch.int64)  # noqa: E731
        recv_prev_shape = torch.empty((3,), device=device, dtype=torch.int64) if recv_prev else None
        recv_next_shape = torch.empty((3,), device=device, dtype=torch.int64) if recv_next else None
        ops = ordered_ops(shape(tensor_send_prev), recv_prev_shape, shape(tensor_send_next), recv_next_shape,
                          self.prev_rank, self.next_rank, self.pp_group)
        for req in torch.distributed.batch_isend_irecv(ops) if ops else []:
            req.wait()
        return ([0, 0, 0] if recv_prev_shape is None else recv_prev_shape.tolist(),
                [0, 0, 0] if recv_next_shape is None else recv_next_shape.tolist())

    p2p._batched_p2p_ops = batched_p2p_ops
    p2p.P2PCommunicator._communicate_shapes = communicate_shapes
    _applied = True
