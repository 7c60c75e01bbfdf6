"""``steady.steady_layers``: a rank whose layer spans are slower than its peers' in every
traced iteration, on plain frames (the real-trace cases are in ``test_real_corpus``)."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.steady import STEADY, _layer_ratios, steady_layers

COORDS = pl.DataFrame({"rank": [0, 1, 2, 3], "pp": [0] * 4, "tp": [0] * 4}, schema_overrides={"rank": pl.Int32})


def _timed(scale: dict[tuple[int, int], float], iterations=(2, 3, 4), tokens: dict[int, int] | None = None) -> pl.DataFrame:
    """Two layer spans (forward, backward) and an optimizer step per rank and iteration, 10 ms
    a layer span, times ``scale[(rank, iteration)]``; each layer call on 1,024 tokens, or
    ``tokens[rank]``."""
    rows = []
    for it in iterations:
        for rank in range(4):
            f, n = scale.get((rank, it), 1.0), (tokens or {}).get(rank, 1024)
            rows += [(rank, it, "layer.forward", int(10e6 * f), n), (rank, it, "layer.backward", int(10e6 * f), n),
                     (rank, it, "optimizer_step", int(30e6), None)]
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "iteration": pl.Int32, "name": pl.Utf8, "dur_ns": pl.Int64,
                                      "tokens": pl.Int64}, orient="row")


def _per(iterations=(2, 3, 4), flagged=()) -> pl.DataFrame:
    return pl.DataFrame([(r, it, 0.0, (r, it) in flagged) for it in iterations for r in range(4)],
                        schema={"rank": pl.Int32, "iteration": pl.Int32, "effect": pl.Float64, "flagged": pl.Boolean},
                        orient="row")


def _steady(timed, per) -> dict[int, float]:
    out = steady_layers(timed, COORDS, ["pp", "tp"], per)
    return {r: s for r, s in out.group_by("rank").agg(pl.col("steady").max()).iter_rows() if s is not None}


def test_a_rank_slower_by_the_bar_in_every_iteration_is_flagged_in_each_with_its_ratio():
    timed = _timed({(2, 2): 1.4, (2, 3): 1.3, (2, 4): 1.6})
    out = steady_layers(timed, COORDS, ["pp", "tp"], _per()).sort("rank", "iteration")
    two = out.filter(pl.col("rank") == 2)
    assert two["flagged"].to_list() == [True, True, True]
    # its effect: the log of its layers over the mean of the other three
    assert [round(x, 3) for x in two["effect"].exp().to_list()] == [1.4, 1.3, 1.6]
    assert two["steady"].to_list() == [1.3] * 3
    assert not out.filter(pl.col("rank") != 2)["flagged"].any()


def test_slower_in_some_iterations_only_or_under_the_bar_is_not_steady():
    assert _steady(_timed({(2, 2): 1.6, (2, 3): 1.6, (2, 4): 1.1}), _per()) == {}
    below = STEADY - 0.05
    assert _steady(_timed({(2, it): below for it in (2, 3, 4)}), _per()) == {}


def test_a_rank_with_more_tokens_has_more_work_not_a_slow_gpu():
    # its replica drew longer sequences: as slow per token as its peers
    timed = _timed({(2, it): 2.0 for it in (2, 3, 4)}, tokens={2: 2048})
    assert _steady(timed, _per()) == {}
    # and a trace that records no tokens says nothing of the work
    assert _steady(_timed({(2, it): 1.5 for it in (2, 3, 4)}).drop("tokens"), _per()) == {}


def test_two_traced_iterations_are_too_few():
    timed = _timed({(2, 2): 1.6, (2, 3): 1.6}, iterations=(2, 3))
    assert _steady(timed, _per(iterations=(2, 3))) == {}


def test_two_steady_ranks_of_one_group_or_one_beside_a_rank_its_ops_flag_are_not_named():
    both = _timed({(r, it): 1.5 for r in (1, 2) for it in (2, 3, 4)})
    assert _steady(both, _per()) == {}
    one = _timed({(2, it): 1.5 for it in (2, 3, 4)})
    assert _steady(one, _per(flagged={(0, 3)})) == {}
    # its own flags are no reason against it
    assert _steady(one, _per(flagged={(2, 3)})) == {2: 1.5}


def test_a_steady_rank_is_named_unless_another_rank_s_ops_flag_that_rank_more_often():
    one = _timed({(2, it): 1.5 for it in (2, 3, 4)})
    # contention came and went: its ops flag it in one step, another rank's in another
    assert _steady(one, _per(flagged={(2, 4), (0, 3)})) == {2: 1.5}
    assert _steady(one, _per(flagged={(2, 4), (2, 2), (0, 3), (1, 2)})) == {2: 1.5}
    # a rank its ops flag in more steps than the steady one's is the likelier culprit
    assert _steady(one, _per(flagged={(2, 4), (0, 3), (0, 4)})) == {}


def test_one_steady_rank_in_each_of_two_groups_names_neither():
    # PP2 x DP2: stage 0 is ranks 0-1, stage 1 ranks 2-3; a culprit's neighbour in the other
    # stage can be slowed steadily too, and more
    two = COORDS.with_columns(pp=pl.Series([0, 0, 1, 1]))
    timed = _timed({(r, it): 1.5 for r in (0, 3) for it in (2, 3, 4)})
    out = steady_layers(timed, two, ["pp", "tp"], _per())
    assert not out["flagged"].any() and out["steady"].is_null().all()
    alone = steady_layers(_timed({(3, it): 1.5 for it in (2, 3, 4)}), two, ["pp", "tp"], _per())
    assert alone.filter(pl.col("flagged"))["rank"].unique().to_list() == [3]


def test_peers_with_no_layer_time_are_no_baseline():
    timed = _timed({(r, it): 0.0 for r in (0, 1, 3) for it in (2, 3, 4)})
    out = steady_layers(timed, COORDS, ["pp", "tp"], _per())
    assert not out["flagged"].any() and out["effect"].is_finite().all()


def test_one_rank_a_stage_its_layers_are_compared_call_for_call():
    # PP4, one rank a stage (no group: every stage is a peer): the last stage runs twice the layer
    # calls (a heavier last stage), each as fast as the others' - more work, not slower layers
    pipeline = COORDS.with_columns(pp=pl.col("rank"))
    heavier = pl.concat([_timed({}), _timed({}).filter(pl.col("rank") == 3)])
    ratios, traced = _layer_ratios(heavier, pipeline, [], per_call=True)
    assert traced == 3 and len(ratios) == 12 and ratios["r"].round(6).unique().to_list() == [1.0]
    assert steady_layers(heavier, pipeline, [], _per(), per_call=True)["steady"].null_count() == 12
    # stage 0's every call 1.4x the other stages' in every step: flagged in each, at that ratio
    slow = steady_layers(_timed({(0, it): 1.4 for it in (2, 3, 4)}), pipeline, [], _per(), per_call=True)
    first = slow.filter(pl.col("rank") == 0).sort("iteration")
    assert first["flagged"].all() and [round(x, 3) for x in first["effect"].exp().to_list()] == [1.4] * 3
    assert not slow.filter(pl.col("rank") != 0)["flagged"].any()
