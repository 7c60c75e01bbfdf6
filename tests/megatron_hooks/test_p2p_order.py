"""megatron-core's batched pipeline p2p at two stages (``mapp.megatron_hooks.p2p_order``),
on two real gloo processes with untagged messages: each receive gets the message meant for
it, tensors and shapes alike; megatron-core's own order swaps them (the bug it fixes)."""

from __future__ import annotations

import types

from tests.transport._ranks import run_ranks


def _exchange(rank: int, world: int, patched: bool) -> dict:
    import torch
    import torch.distributed as dist
    from megatron.core.pipeline_parallel import p2p_communication as p2p

    if patched:
        from mapp.megatron_hooks import p2p_order

        p2p_order.apply()
    peer = 1 - rank  # two stages: the previous and the next rank are one rank
    group = dist.group.WORLD
    send_next = torch.full((4,), 10.0 * rank + 1)    # an activation for the next stage
    send_prev = torch.full((4,), 10.0 * rank + 2)    # a gradient for the previous stage
    recv_prev, recv_next = torch.zeros(4), torch.zeros(4)
    for req in p2p._batched_p2p_ops(tensor_send_prev=send_prev, tensor_recv_prev=recv_prev, tensor_send_next=send_next,
                                    tensor_recv_next=recv_next, group=group, prev_pipeline_rank=peer,
                                    next_pipeline_rank=peer):
        req.wait()
    out = {"recv_prev": recv_prev[0].item(), "recv_next": recv_next[0].item()}
    if patched:  # megatron-core's own shape exchange makes its tensors on a GPU
        me = types.SimpleNamespace(prev_rank=peer, next_rank=peer, pp_group=group)
        shapes = p2p.P2PCommunicator._communicate_shapes(me, torch.zeros(3 + rank, 1, 1), torch.zeros(7 + rank, 1, 1),
                                                         True, True)
        out["shapes"] = [list(s) for s in shapes]
    return out


def test_two_stages_each_receive_gets_its_message():
    got = run_ranks(_exchange, 2, True, timeout=120, env={"CUDA_VISIBLE_DEVICES": ""})
    for rank, r in enumerate(got):
        peer = 1 - rank
        assert r["recv_prev"] == 10 * peer + 1 and r["recv_next"] == 10 * peer + 2
        # from the previous stage the shape of its activation, from the next its gradient's
        assert r["shapes"] == [[3 + peer, 1, 1], [7 + peer, 1, 1]]


def test_megatron_core_order_swaps_them():
    got = run_ranks(_exchange, 2, False, timeout=120, env={"CUDA_VISIBLE_DEVICES": ""})
    assert [(r["recv_prev"], r["recv_next"]) for r in got] == [(12.0, 11.0), (2.0, 1.0)]
