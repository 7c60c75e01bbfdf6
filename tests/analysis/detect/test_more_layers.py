"""A pipeline stage of more layers, its compared ops slower only by its parameters' work."""

import polars as pl
import pytest

from mapp.analysis.detect.more_layers import LAYER_KINDS, layer_paces, more_layers

UNLIKE = "!"


def _ops(calls: dict[int, tuple[int, int]]) -> pl.DataFrame:
    """Per rank ``(calls, ns)``: that many calls of each of 12 layer ops called unalike, each
    ``ns`` long (op k weighs k times as much), and one optimizer call called alike."""
    rows = []
    for rank, (n, ns) in calls.items():
        for k in range(1, 13):
            rows.extend([{"rank": rank, "name": f"aten::op{k}", "shape": UNLIKE, "self_ns": ns * k}] * n)
        rows.append({"rank": rank, "name": "aten::_fused_adam_", "shape": "#0", "self_ns": 1000})
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "name": pl.Utf8, "shape": pl.Utf8, "self_ns": pl.Int64})


def test_a_stage_of_more_calls_at_its_peers_pace_reads_pace_one():
    paces = layer_paces(_ops({0: (4, 100), 1: (4, 100), 2: (12, 100), 3: (4, 100)}), UNLIKE)
    got = {r: (p, k) for r, p, k in paces.iter_rows()}
    # every call of rank 2 as long as its peers' (three times as many): pace 1 over 12 names
    assert got == {0: (1.0, 12), 1: (1.0, 12), 2: (1.0, 12), 3: (1.0, 12)}


def test_a_stage_whose_calls_take_longer_reads_that_pace():
    paces = layer_paces(_ops({0: (4, 100), 1: (4, 100), 2: (4, 250), 3: (4, 100)}), UNLIKE)
    got = dict(paces.select("rank", "layer_pace").iter_rows())
    # (its peers against the median of the others: 100 ns, theirs)
    assert got[2] == pytest.approx(2.5) and got[0] == pytest.approx(1.0)


def test_ops_called_alike_and_ops_some_rank_never_calls_are_not_its_layers():
    ops = pl.concat([_ops({0: (4, 100), 1: (4, 100)}),
                     pl.DataFrame({"rank": [1] * 5, "name": ["aten::only1"] * 5, "shape": [UNLIKE] * 5,
                                   "self_ns": [10**6] * 5}, schema={"rank": pl.Int32, "name": pl.Utf8,
                                                                   "shape": pl.Utf8, "self_ns": pl.Int64})])
    assert dict(layer_paces(ops, UNLIKE).select("rank", "layer_kinds").iter_rows()) == {0: 12, 1: 12}


STAGE = {"layer_units": 3.0, "layer_pace": 0.96, "layer_kinds": 68, "slowdown": 2.41, "added": None}


def test_three_times_the_layers_at_their_pace_are_more_layers():
    assert more_layers(STAGE, 0.1)


@pytest.mark.parametrize("change", [
    {"layer_pace": 1.5},                         # its layers' calls slower too: a slower device
    {"layer_units": 1.0},                        # as many layers: the parameters' work is not more
    {"slowdown": 4.0},                           # slower than three times the parameters explain
    {"added": 2.0},                              # work added in calls: ``added_work`` weighs it
    {"layer_kinds": LAYER_KINDS - 1},            # too few names to tell a pace
    {"layer_pace": None},
])
def test_anything_else_is_not(change):
    assert not more_layers({**STAGE, **change}, 0.1)
