"""Who is which worker, the transfers between them, and weights resharded from TP k to TP 1."""

from __future__ import annotations

import pytest

from mapp.scheduling.fbd import FbdLayout


def test_backward_workers_keep_the_coupled_ranks_and_forward_workers_follow():
    layout = FbdLayout(pp=2, backward_tp=2, forward_tp=1)
    assert layout.world_size == 6 and layout.ratio == 2
    assert [(w.role[0], w.stage, w.tp) for w in layout.workers()] == [
        ("b", 0, 0), ("b", 0, 1), ("b", 1, 0), ("b", 1, 1), ("f", 0, 0), ("f", 1, 0)]
    assert layout.backward_partners(layout.worker(5)) == [2, 3]
    assert [layout.forward_partner(layout.worker(r)) for r in range(4)] == [4, 4, 5, 5]
    assert [layout.shard_index(layout.worker(r)) for r in range(4)] == [0, 1, 0, 1]
    assert layout.tp_group("backward", 1) == [2, 3] and layout.pp_group("forward", 0) == [4, 5]


def test_channels_are_the_transfers_of_the_run_in_one_order():
    layout = FbdLayout(pp=2, backward_tp=2, forward_tp=1)
    got = [(c.index, c.kind, c.src, c.dst) for c in layout.channels()]
    assert got == [
        (0, "params", 0, 4), (1, "params", 1, 4), (2, "params", 2, 5), (3, "params", 3, 5),
        (4, "activations", 4, 5),
        (5, "inputs", 5, 2), (6, "inputs", 5, 3),
        (7, "grads", 2, 0), (8, "grads", 3, 1),
    ]
    assert layout.channel("grads", 3, 1).index == 8
    with pytest.raises(KeyError):
        layout.channel("grads", 0, 2)
    assert len(FbdLayout(pp=4, backward_tp=1, forward_tp=1).channels()) == 4 + 3 + 3 + 3


def test_sizes_are_checked():
    with pytest.raises(ValueError, match="multiple"):
        FbdLayout(pp=2, backward_tp=2, forward_tp=3)
    with pytest.raises(ValueError, match="outside"):
        FbdLayout(pp=1, backward_tp=1, forward_tp=1).worker(2)


def _tp_attrs(tensor, dim):
    tensor.tensor_model_parallel = True
    tensor.partition_dim = dim
    tensor.partition_stride = 1
    return tensor


def test_shards_of_tp2_assemble_into_the_tp1_weights():
    torch = pytest.importorskip("torch")
    from mapp.scheduling.fbd.params import ShardAssembler, ShardPacker

    def model(tp, full=None):
        m = torch.nn.Module()
        m.column = torch.nn.Parameter(torch.zeros(8 // tp, 3))     # column-parallel: split dim 0
        m.row = torch.nn.Parameter(torch.zeros(3, 6 // tp))        # row-parallel: split dim 1
        m.norm = torch.nn.Parameter(torch.zeros(3))                # replicated
        _tp_attrs(m.column, 0)
        _tp_attrs(m.row, 1)
        return m

    full = {"column": torch.randn(8, 3), "row": torch.randn(3, 6), "norm": torch.randn(3)}
    shards = [model(2) for _ in range(2)]
    with torch.no_grad():
        for i, m in enumerate(shards):
            m.column.copy_(full["column"].chunk(2, 0)[i])
            m.row.copy_(full["row"].chunk(2, 1)[i])
            m.norm.copy_(full["norm"])
    target = model(1)
    assembler = ShardAssembler(target, k=2)
    flats = [ShardPacker(m, index=i, k=2).pack() for i, m in enumerate(shards)]
    assert [f.numel() for f in flats] == assembler.sizes == [12 + 9 + 3, 12 + 9]
    assembler.assemble(flats)
    for name, value in full.items():
        assert torch.equal(getattr(target, name), value), name
    with pytest.raises(ValueError, match="shards"):
        assembler.assemble(flats[:1])


def test_strided_partitions_are_refused():
    torch = pytest.importorskip("torch")
    from mapp.scheduling.fbd.params import ShardAssembler

    m = torch.nn.Module()
    m.fc1 = torch.nn.Parameter(torch.zeros(8, 3))
    _tp_attrs(m.fc1, 0).partition_stride = 2
    with pytest.raises(NotImplementedError, match="partition_stride=2"):
        ShardAssembler(m, k=2)
    assert ShardAssembler(m, k=1).sizes == [24]


def test_split_placement_refuses_two_workers_of_a_role_on_one_gpu():
    from mapp.scheduling.fbd.world import devices_for, shared_gpu

    # one stage on two GPUs: backward on GPU 0, forward on GPU 1, nothing shared
    one = FbdLayout(1, 1, 1)
    assert [str(d) for d in devices_for(one, "split", 2, 2)] == ["cuda:0", "cuda:1"]
    assert shared_gpu(one, devices_for(one, "split", 2, 2)) is None
    # two stages on two GPUs: both backward workers on GPU 0 (their world would be gloo)
    two = FbdLayout(2, 1, 1)
    assert shared_gpu(two, devices_for(two, "split", 2, 4)) == "the backward workers of ranks 0, 1 on cuda:0"
    assert shared_gpu(two, devices_for(two, "split", 4, 4)) is None
    # one GPU for a forward and a backward worker: different roles may share it; CPUs always may
    assert shared_gpu(one, devices_for(one, "split", 1, 2)) is None
    assert shared_gpu(two, devices_for(two, "rank", 0, 4)) is None
