"""Work sized by a rank's data (``data_sized``): a rank slower on a few ops only, at its peers'
pace on the ops that make most of their compute, computes on more data there; a slower device is
slower on everything."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from mapp.analysis.detect import detect_bundle
from mapp.analysis.detect.data_sized import PACED_KINDS, looped_by_data, paced_split, sized_by_data
from mapp.analysis.ingest import load_bundle
from mapp.bench.real import load_corpus

MS = 1_000_000
COORDS = pl.DataFrame({"rank": [0, 1, 2], "pp": [0, 0, 0]}).cast({"rank": pl.Int32, "pp": pl.Int32})


def _events(times: dict[int, tuple[float, float]], iterations: int = 3) -> pl.DataFrame:
    """Per rank (matmul ms, sparse update ms), one call of each an iteration, 1 s apart, and
    ``PACED_KINDS`` little ops of 0.1 ms at the matmuls' pace (30 ms: 1x)."""
    rows = []
    for rank, (mm, sparse) in times.items():
        little = [(f"aten::op{i}", 0.1 * mm / 30) for i in range(PACED_KINDS)]
        for it in range(iterations):
            t = it * 1000 * MS
            for name, dur in (("aten::mm", mm), ("aten::coalesce", sparse), *little):
                rows.append({"rank": rank, "name": name, "cat": "compute", "lane": "cpu:1", "ts_ns": t,
                             "dur_ns": int(dur * MS), "iteration": it})
                t += int(dur * MS) + MS
    return pl.DataFrame(rows).cast({"rank": pl.Int32, "iteration": pl.Int32})


def test_a_rank_slower_on_its_minor_ops_keeps_its_peers_pace():
    # rank 0's sparse update 5x its peers' (10 ms more), its matmuls (most of their compute)
    # as fast: its pace is 1.0 though its compute is 1.33x
    split = {r["rank"]: r for r in paced_split(_events({0: (30, 12.5), 1: (30, 2.5), 2: (30, 2.5)}), COORDS).to_dicts()}
    assert split[0]["pace"] == 1.0 and split[0]["pace_kinds"] == PACED_KINDS + 2
    # a rank 1.3x slower on everything runs at 1.3x
    split = {r["rank"]: r for r in paced_split(_events({0: (39, 3.25), 1: (30, 2.5), 2: (30, 2.5)}), COORDS).to_dicts()}
    assert abs(split[0]["pace"] - 1.3) < 1e-9
    # spans per layer name too few ops for a pace
    few = _events({0: (30, 12.5), 1: (30, 2.5), 2: (30, 2.5)}).filter(~pl.col("name").str.starts_with("aten::op"))
    assert paced_split(few, COORDS) is None


def test_only_a_rank_slower_as_a_whole_at_its_peers_pace_over_many_ops_is_sized_by_its_data():
    row = {"slowdown": 1.5, "pace": 0.95, "pace_kinds": PACED_KINDS, "busy_ns": 200 * MS}
    assert sized_by_data(row, 0.1)
    assert not sized_by_data(row | {"pace": 1.3}, 0.1)            # slower on most of its work too
    assert not sized_by_data(row | {"slowdown": 1.05}, 0.1)       # not slower as a whole
    assert not sized_by_data(row | {"pace_kinds": 5}, 0.1)        # a span per layer: no op-level pace
    # its extra calls cost it the threshold's share of its compute: work added, not data
    assert not sized_by_data(row | {"added_excess_ns": 5 * MS, "added_real_ns": 30 * MS}, 0.1)
    # so do kinds of work no peer ran, which no pace weighs
    assert not sized_by_data(row | {"alone_ns": 30 * MS}, 0.1)
    assert sized_by_data(row | {"alone_ns": 5 * MS}, 0.1)


def test_a_pace_far_under_the_whole_slowdown_is_a_few_ops_slower():
    # the owner of a DLRM's hot tables, 4 gloo processes with 4 cores each: 1.59x its peers'
    # compute at a pace of 1.08, past half the threshold (0.05) but far under the 0.59 it is
    # slower as a whole; a device slower by f runs at a pace of about f
    row = {"slowdown": 1.59, "pace": 1.08, "pace_kinds": 141, "busy_ns": 161 * MS}
    assert sized_by_data(row, 0.1)
    assert sized_by_data(row | {"pace": 1.2}, 0.1)                 # 0.34 of 0.59: a few ops still
    assert not sized_by_data(row | {"pace": 1.3}, 0.1)             # over 0.4 of 0.59
    assert not sized_by_data(row | {"slowdown": 1.2, "pace": 1.08}, 0.1)


def test_the_owner_of_the_hot_tables_is_the_datas_imbalance_not_a_slow_gpu():
    # a user's DLRM by hand on 4 gloo processes (tests/corpus/user_dlrm.py), the bags of rank
    # 0's two tables 6x longer: its sparse backward and Adagrad's coalesce take 5-7x its peers',
    # its matmuls no longer than theirs ("slow compute 0", 1.57x, before)
    users = {c.id: c for c in load_corpus(Path(__file__).resolve().parents[2] / "corpus" / "cases-users")}
    verdict = detect_bundle(load_bundle(users["dp4-dlrm-mean-skew6"].directory), threshold=0.1)
    assert [s for s in verdict.suspects if s.kind in ("slow_compute", "slow_host")] == []
    assert any("rank 0 computes" in n and "slower on a few ops only" in n for n in verdict.notes)


def test_a_rank_slower_by_no_more_than_its_data_runs_the_loops_is_its_datas():
    # its calls of the loop's ops 1.47x its peers', its compute 1.41x: its data's; 1.8x is more
    # than the loops explain; and extra calls that cost the threshold are work added, at any scale
    row = {"data_scale": 1.47, "slowdown": 1.41, "busy_ns": 300 * MS, "added_excess_ns": 0.0, "added_real_ns": 0.0}
    assert looped_by_data(row, 0.1)
    assert not looped_by_data(row | {"slowdown": 1.8}, 0.1)
    assert not looped_by_data(row | {"added_real_ns": 40 * MS}, 0.1)
    assert not looped_by_data(row | {"data_scale": 1.05, "slowdown": 1.04}, 0.1)
    assert not looped_by_data(row | {"data_scale": None}, 0.1)
    # its data's loops leave the rest of its step as it was: the kinds called as often as its
    # peers hold 63% of their time, as in the LSTM; 16%, its whole step run again (a BFS rank's
    # frontier expansion and PageRank push repeated 3x)
    assert looped_by_data(row | {"fixed_part": 0.63}, 0.1)
    assert not looped_by_data(row | {"fixed_part": 0.16}, 0.1)


def test_inputs_twice_as_slow_as_the_optimizer_are_larger_inputs_even_where_the_optimizer_is_slower():
    from mapp.analysis.detect.data_sized import larger_inputs

    row = {"input_floor": 4.16, "input_kinds": 14, "param_floor": 1.17, "param_kinds": 538, "slowdown": 2.67,
           "added": None}
    assert larger_inputs(row, 0.1)
    # a slower device: its optimizer as slow as its other calls
    assert not larger_inputs(row | {"param_floor": 2.5}, 0.1)
    # an optimizer a little slower, inputs not twice it: the threshold's own test holds
    assert not larger_inputs(row | {"input_floor": 2.0, "slowdown": 1.9}, 0.1)
    # too few kinds for a median that far apart
    assert not larger_inputs(row | {"input_kinds": 9}, 0.1)
    # calls beyond its peers' are work added
    assert not larger_inputs(row | {"added": 1.5}, 0.1)
