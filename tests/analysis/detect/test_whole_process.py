"""``whole_process``: a rank whose spans outside its transformer layers are as much slower as
its layers is a process the shared cores gave less time, on plain frames (the real jobs are in
``test_real_corpus``)."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.peers import _IS_LAYER, leaf_ops
from mapp.analysis.detect.whole_process import whole_process

COORDS = pl.DataFrame({"rank": [0, 1], "pp": [0, 0], "tp": [0, 0]}, schema_overrides={"rank": pl.Int32})


def _timed(layers: dict[int, float], outside: dict[int, float], iterations=(2, 3, 4),
           tokens: dict[int, int] | None = None) -> pl.DataFrame:
    """Per rank and iteration, in sequence: an embedding (2 ms), two layer spans (10 ms each), an
    output layer (4 ms) and an optimizer step (6 ms, no tokens recorded), the layers times
    ``layers[rank]``, the embedding and output layer ``outside[rank]``; each span on 1,024 tokens
    (``tokens[rank]``, its times scaled alike)."""
    rows = []
    for it in iterations:
        for rank in (0, 1):
            ts = it * 1_000_000_000
            n = (tokens or {}).get(rank, 1024)
            for name, ms, f in (("embedding.forward", 2, outside.get(rank, 1.0)), ("layer.forward", 10, layers.get(rank, 1.0)),
                                ("layer.backward", 10, layers.get(rank, 1.0)), ("output_layer.forward", 4, outside.get(rank, 1.0)),
                                ("optimizer_step", 6, 1.0)):
                dur = int(ms * 1e6 * f * (n / 1024 if name != "optimizer_step" else 1.0))
                rows.append((rank, it, name, "compute", ts, dur, None if name == "optimizer_step" else n))
                ts += dur + 100_000
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "iteration": pl.Int32, "name": pl.Utf8, "cat": pl.Utf8,
                                      "ts_ns": pl.Int64, "dur_ns": pl.Int64, "tokens": pl.Int64}, orient="row").with_columns(
        lane=pl.lit("compute"))


def _judged(timed: pl.DataFrame) -> dict[int, tuple[float, float, bool]]:
    out = whole_process(leaf_ops(timed), COORDS, ["pp"], _IS_LAYER)
    return {r: (round(lr, 3), round(lo, 3), w) for r, lr, lo, w in
            out.select("rank", "layers_ratio", "outside_ratio", "whole_process").iter_rows()}


def test_a_rank_slower_at_everything_alike_is_its_whole_process():
    judged = _judged(_timed({1: 1.4}, {1: 1.3}))
    assert judged[1] == (1.4, 1.3, True)
    # its peer, faster at both, is not
    assert judged[0][2] is False


def test_a_rank_slower_in_its_layers_alone_is_not():
    judged = _judged(_timed({1: 1.5}, {1: 1.05}))
    assert judged[1] == (1.5, 1.05, False)


def test_the_cut_is_half_the_layers_slowdown_in_logs():
    # layers 1.44x: its other spans at 1.2x (half, in logs) are its whole process, at 1.15x not
    assert _judged(_timed({1: 1.44}, {1: 1.2}))[1][2] is True
    assert _judged(_timed({1: 1.44}, {1: 1.15}))[1][2] is False


def test_a_span_one_rank_alone_ran_is_no_same_work():
    timed = _timed({1: 1.5}, {1: 1.0})
    # a 30 ms span only rank 1 ran in each iteration: not compared, so not its whole process
    extra = timed.filter((pl.col("rank") == 1) & (pl.col("name") == "output_layer.forward")).with_columns(
        name=pl.lit("checkpoint"), ts_ns=pl.col("ts_ns") + 50_000_000, dur_ns=pl.lit(30_000_000, pl.Int64))
    assert _judged(pl.concat([timed, extra]))[1][2] is False


def test_replicas_on_other_lengths_are_compared_per_token():
    # rank 1 drew twice the tokens: its spans twice as long, no slower per token
    assert _judged(_timed({}, {}, tokens={1: 2048}))[1] == (1.0, 1.0, False)
    # and slower at everything alike per token on those lengths: its whole process
    assert _judged(_timed({1: 1.4}, {1: 1.3}, tokens={1: 2048}))[1] == (1.4, 1.3, True)


def test_spans_that_record_no_tokens_are_left_out():
    # the optimizer step (no tokens) 3x on rank 1 changes nothing
    timed = _timed({1: 1.5}, {1: 1.0}).with_columns(
        dur_ns=pl.when((pl.col("rank") == 1) & (pl.col("name") == "optimizer_step")).then(pl.col("dur_ns") * 3)
        .otherwise(pl.col("dur_ns")))
    assert _judged(timed)[1] == (1.5, 1.0, False)


def _why(layers: float, outside: float, *, shared_cpus: bool = True, threshold: float = 0.1) -> str | None:
    from mapp.analysis.detect.gates import overruled_why
    from mapp.analysis.detect.peer_evidence import PeerEvidence

    row = {"rank": 0, "iterations": [2, 3, 4], "flagged": True, "gap_flagged": False, "gap_excess_ns": 0.0,
           "whole_process": True, "layers_ratio": layers, "outside_ratio": outside}
    return overruled_why(row, PeerEvidence("stage peers"), None, host=False, counted=False, extra=False, guessed=False,
                         stalled=0.0, busy=1e8, shared_cpus=shared_cpus, threshold=threshold)


def test_the_gate_sets_aside_a_rank_whose_layers_lose_little_beyond_its_whole_process():
    why = _why(1.40, 1.28)
    assert why is not None and "its whole process ran slower on shared cores" in why
    assert "outside the transformer layers 1.28x" in why and "layers' 1.40x" in why


def test_a_fault_on_the_rank_the_cores_favour_less_still_shows_beyond_its_whole_process():
    # DP2, 1.33x layers on rank 0, the busier core's: its layers 1.80x, its other spans 1.33x
    assert _why(1.80, 1.33) is None
    # at a lower threshold, what is left beyond the process (1.09x) counts too
    assert _why(1.40, 1.28, threshold=0.05) is None


def test_off_shared_cpus_the_gate_does_not_apply():
    assert _why(1.40, 1.28, shared_cpus=False) is None


def test_a_layers_parts_are_its_layers():
    # traced below the layer (attention and MLP spans): still the layers' part, not the rest
    timed = _timed({1: 1.5}, {1: 1.0}).with_columns(
        name=pl.col("name").replace({"layer.forward": "self_attention.forward", "layer.backward": "mlp.backward"}))
    assert _judged(timed)[1] == (1.5, 1.0, False)
