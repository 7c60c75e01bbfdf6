"""Stage 3's comparison of like p2p links by their fastest transfers (``bandwidth._raised_floors``)."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.bandwidth import _attribute, _raised_floors

LINKS = [[0, 4], [1, 5], [2, 6], [3, 7]]


def _frames(lows: dict[tuple, list[int]], waits: int = 3_000_000):
    """Four like pipeline links, 4 iterations, 8 transfers each: ``lows`` gives a link's fastest
    transfer per iteration (ns); its other transfers wait ``waits`` more, as on shared CPUs."""
    obs, per = [], []
    for link in LINKS:
        for it in range(4):
            low = lows.get(tuple(link), [100_000] * 4)[it]
            times = [low] + [low + waits * (k % 3) for k in range(1, 8)]
            obs += [{"obs": link, "what": "p2p", "inter": False, "bytes": 16384, "iteration": it, "time_ns": t}
                    for t in times]
            per.append({"obs": link, "what": "p2p", "inter": False, "bytes": 16384, "iteration": it,
                        "time_ns": float(sorted(times)[4]), "n": 8, "size": 2, "kind": 16384, "pair": False,
                        "recurs": True, "slow": False, "ratio": 1.0, "excess_ns": 0.0})
    schema = {"obs": pl.List(pl.Int32), "iteration": pl.Int32}
    return pl.DataFrame(obs).cast(schema), pl.DataFrame(per).cast(schema)


def test_of_more_than_two_like_links_on_shared_cpus_one_whose_fastest_transfers_are_raised_is_slow():
    # the loaded link's fastest transfer is 10x the others' in every iteration; its medians,
    # like everyone's, are mostly waits for a core
    obs, per = _frames({(1, 5): [1_000_000] * 4})
    out = _raised_floors(obs, per, shared_cpus=True)
    slow = out.filter(pl.col("slow"))
    assert sorted(set(map(tuple, slow["obs"].to_list()))) == [(1, 5)]
    assert slow["iteration"].to_list() == [0, 1, 2, 3]
    assert slow["fastest"].all() and slow["ratio"].min() > 9
    # on GPUs more than two like links are judged by their medians only (``link_bandwidth``)
    assert not _raised_floors(obs, per, shared_cpus=False)["slow"].any()


def test_a_link_raised_in_one_iteration_only_is_not():
    obs, per = _frames({(1, 5): [1_000_000, 100_000, 100_000, 100_000]})
    assert not _raised_floors(obs, per, shared_cpus=True)["slow"].any()


def test_a_link_slow_in_some_steps_is_transient_on_gpus_and_noise_on_shared_cpus():
    # four like links, link 1-5 slow (4x) in two iterations of four: a transient fault where
    # transfer times are the links' own, one process descheduled where processes share cores
    # (megatron-core PP4, 4 processes on 2 cores, no fault: one link 5x in one step of four)
    obs, per = _frames({})
    slow = (pl.col("obs") == pl.lit([1, 5], pl.List(pl.Int32))) & pl.col("iteration").is_in([1, 2])
    per = per.with_columns(slow=slow, ratio=pl.when(slow).then(4.0).otherwise(1.0), z=pl.lit(5.0),
                           excess_ns=pl.when(slow).then(1e6).otherwise(0.0), fastest=pl.lit(False),
                           floor_ratio=pl.lit(None, pl.Float64))
    assert [(f.kind, f.ranks) for f in _attribute(per, shared_cpus=False)] == [("slow_link", (1, 5))]
    assert _attribute(per, shared_cpus=True) == []
