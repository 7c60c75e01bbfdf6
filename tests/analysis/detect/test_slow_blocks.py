"""Several GPUs slowed alike (a slow node: its TP group, half a DP group): each is named at its
own slowdown against the healthy rest, while replicas whose data is redrawn each microbatch
make no such block."""

from __future__ import annotations

import random

import polars as pl
import pytest

from mapp.analysis.detect.slow_blocks import BLOCK_UNITS, slow_blocks
from tests.analysis.detect._sim import detect


@pytest.mark.parametrize("faults,fields", [
    # megatron keeps a TP group inside one node: a slow node slows the whole group, here half
    # of every peer group (stage peers), so the median sat between slow and healthy
    (("slow_gpu:0:1.5", "slow_gpu:1:1.5"), dict(tp=2, pp=1, dp=2)),
    (("slow_gpu:0:1.3", "slow_gpu:1:1.3", "slow_gpu:2:1.3", "slow_gpu:3:1.3"), dict(tp=4, pp=1, dp=2)),
    (("slow_gpu:0:1.5", "slow_gpu:1:1.5"), dict(tp=2, pp=2, dp=2)),
    (("slow_gpu:0:1.2", "slow_gpu:3:1.2"), dict(tp=1, pp=1, dp=4)),
    # one replica's TP group of four: each rank leads its DP peers alone, in every microbatch
    # (it was "replica dp1 got longer sequences", though every replica's were alike)
    (("slow_gpu:2:1.3", "slow_gpu:3:1.3"), dict(tp=2, pp=1, dp=4)),
])
def test_gpus_slowed_alike_are_each_named_at_their_own_slowdown(tmp_path, faults, fields):
    v = detect(tmp_path, *faults, **fields)
    slowed = {int(f.split(":")[1]) for f in faults}
    factor = float(faults[0].rsplit(":", 1)[1])
    assert {(s.rank, s.kind) for s in v.suspects} == {(r, "slow_compute") for r in slowed}
    assert all(s.slowdown == pytest.approx(factor, rel=0.03) for s in v.suspects)
    assert v.imbalance == []
    said = [n for n in v.notes if "slower than every other peer in nearly every microbatch" in n]
    assert len(said) == 1 and all(f"{r}" in said[0] for r in slowed)


def test_one_slow_gpu_or_two_slowed_unalike_are_no_block(tmp_path):
    v = detect(tmp_path, "slow_gpu:1:1.5", tp=2, pp=1, dp=2)
    assert [(s.rank, s.kind) for s in v.suspects] == [(1, "slow_compute")]
    assert not any("block of peers" in n for n in v.notes)
    v = detect(tmp_path, "slow_gpu:3:1.5", "slow_gpu:12:1.3", tp=2, pp=2, dp=4, name="two")
    assert {s.rank for s in v.suspects} == {3, 12}
    assert not any("block of peers" in n for n in v.notes)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("fields,sigma", [(dict(tp=2, pp=1, dp=2), 0.3), (dict(tp=4, pp=1, dp=2), 0.3),
                                          (dict(tp=1, pp=1, dp=4), 0.8), (dict(tp=2, pp=1, dp=4), 0.8)])
def test_replicas_on_lengths_redrawn_each_microbatch_make_no_block(tmp_path, fields, sigma, seed):
    # a TP group shares its data: on a long microbatch it is slower together, on a short one faster
    v = detect(tmp_path, f"seqlen_imbalance::{sigma}", seed=seed, **fields)
    assert v.suspects == []
    assert [i.kind for i in v.imbalance] == ["sequence_length"]


def _ops(leads: dict[int, list[float]], units: int = BLOCK_UNITS, ranks: int = 4, noise: float = 0.01) -> pl.DataFrame:
    """``r_adj`` per (rank, unit) of one peer group: each rank's lead in each unit (default 0) plus noise."""
    rng = random.Random(7)
    rows = [{"rank": r, "pp": 0, "iteration": u // 4, "microbatch": u % 4,
             "r_adj": leads.get(r, [0.0] * units)[u] + rng.gauss(0.0, noise)}
            for r in range(ranks) for u in range(units)]
    return pl.DataFrame(rows)


def _block(ops):
    return slow_blocks(ops, ["pp"], 0.1).block


def test_a_block_is_two_or_more_peers_ahead_of_every_other_in_nearly_every_unit():
    ahead = [0.3] * BLOCK_UNITS
    assert _block(_ops({0: ahead, 3: ahead})) == [0, 3]
    # one unit of eight where the block is not ahead is tolerated, not one in two
    assert _block(_ops({0: ahead, 3: [0.3] * (BLOCK_UNITS - 1) + [-0.3]})) == [0, 3]
    turns = [0.3 if u % 2 else -0.3 for u in range(BLOCK_UNITS)]
    assert _block(_ops({0: turns, 3: turns})) == []


def test_blocks_are_found_in_each_peer_group():
    ahead = [0.3] * BLOCK_UNITS
    two = pl.concat([_ops({0: ahead, 1: ahead}), _ops({2: ahead, 3: ahead}).with_columns(pp=pl.lit(1, pl.Int64))])
    two = two.with_columns(rank=pl.col("rank") + 4 * pl.col("pp"))
    assert _block(two) == [0, 1, 6, 7]
    # the same where one group misses a unit (no common shape: one group at a time)
    assert _block(two.filter(~((pl.col("pp") == 1) & (pl.col("iteration") == 0) & (pl.col("microbatch") == 0)))) \
        == [0, 1]


def test_no_block_under_the_threshold_over_too_few_units_or_of_more_than_half_the_peers():
    assert _block(_ops({0: [0.05] * BLOCK_UNITS, 3: [0.05] * BLOCK_UNITS})) == []
    few = BLOCK_UNITS - 1
    assert _block(_ops({0: [0.3] * few, 3: [0.3] * few}, units=few)) == []
    three = [0.3] * BLOCK_UNITS
    assert _block(_ops({0: three, 1: three, 2: three})) == []


def test_a_rank_ahead_alone_leads_but_is_no_block():
    alone = slow_blocks(_ops({2: [0.3] * BLOCK_UNITS}), ["pp"], 0.1)
    assert (alone.block, alone.leading) == ([], [2])
    assert slow_blocks(_ops({}), ["pp"], 0.1) == ([], [])
    # a block leads too
    assert slow_blocks(_ops({0: [0.3] * BLOCK_UNITS, 3: [0.3] * BLOCK_UNITS}), ["pp"], 0.1).leading == [0, 3]


def test_where_lengths_vary_no_healthy_rank_is_made_a_block(tmp_path):
    # a slow node's lead, taken by the data fit for its replica's, once made healthy ranks of the
    # replica's other stage look fast and the other replica's a block: where compute varies with
    # the data no block is sought (a node there is not told from its replica's data)
    slowed = ("slow_gpu:0:1.3", "slow_gpu:1:1.3", "slow_gpu:2:1.3", "slow_gpu:3:1.3")
    v = detect(tmp_path, *slowed, "seqlen_imbalance::0.3", tp=4, pp=2, dp=2, microbatches=8, iterations=3, seed=1)
    assert {s.rank for s in v.suspects} <= {0, 1, 2, 3}
