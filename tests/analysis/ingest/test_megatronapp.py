"""The MegatronApp reader, checked against traces whose construction states the answer."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import orjson
import polars as pl
import pytest

from mapp.analysis.ingest import megatronapp, schema
from mapp.errors import TraceFormatError

_HERE = pathlib.Path(__file__).parent
_spec = importlib.util.spec_from_file_location("megatronapp_fixture", _HERE / "megatronapp_fixture.py")
fx = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(fx)

COMMITTED = _HERE.parent.parent / "fixtures" / "megatronapp"


def _read(files, warnings=None):
    sink = warnings if warnings is not None else []
    return megatronapp.read(sorted(files), warn=sink.append)


@pytest.fixture
def tp2pp2(tmp_path):
    written = fx.write_trace_dir(tmp_path, tp=2, pp=2, dp=1, iterations=2)
    events, ranks = _read(written.files.values())
    return written, events, ranks


def test_tables_have_the_schema(tp2pp2):
    _, events, ranks = tp2pp2
    assert events.schema == pl.Schema(schema.EVENTS_SCHEMA)
    assert ranks.schema == pl.Schema(schema.RANKS_SCHEMA)


def test_ranks_table(tp2pp2):
    written, _, ranks = tp2pp2
    assert ranks["rank"].to_list() == [0, 1, 2, 3]
    for row in ranks.iter_rows(named=True):
        assert {a: row[a] for a in ("tp", "dp", "pp")} == written.coords[row["rank"]]
        assert (row["layout_tp"], row["layout_pp"], row["layout_dp"]) == (2, 2, 1)
        assert row["world_size"] == 4
        assert row["format"] == "megatronapp"
        assert row["clock"] == "cuda"
        assert row["src_file"] == str(written.files[row["rank"]])
    # dev = tp + TP * dp in the fixture
    assert ranks["device"].to_list() == ["0", "1", "0", "1"]


def test_every_pair_becomes_one_row(tp2pp2):
    written, events, _ = tp2pp2
    counts = dict(events.group_by("rank").len().iter_rows())
    assert counts == written.pairs
    assert events["ph"].unique().to_list() == ["X"]
    assert events["src_line"].null_count() == events.height
    assert events["seq"].null_count() == events.height


def test_coordinates_on_every_row(tp2pp2):
    written, events, _ = tp2pp2
    for rank, coords in written.coords.items():
        rows = events.filter(pl.col("rank") == rank)
        for axis, value in coords.items():
            assert rows[axis].unique().to_list() == [value]


def test_iterations_are_laid_end_to_end_with_their_gaps(tp2pp2):
    written, events, _ = tp2pp2
    for rank, walls in written.iteration_walls.items():
        its = events.filter((pl.col("rank") == rank) & (pl.col("cat") == "iteration")).sort("ts_ns")
        first_start = fx.PAD_BEFORE[0]
        second_start = fx.PAD_BEFORE[0] + walls[0] + fx.PAD_BEFORE[1]
        assert its["ts_ns"].to_list() == [first_start, second_start]
        assert its["dur_ns"].to_list() == walls
        assert its["iteration"].to_list() == [0, 1]
        assert its["lane"].to_list() == ["iteration", "iteration"]
        # the first event of iteration 1 begins GAP_NS after the iteration starts
        inside = events.filter((pl.col("rank") == rank) & (pl.col("iteration") == 1) & (pl.col("cat") != "iteration"))
        assert inside["ts_ns"].min() == second_start + fx.GAP_NS


def test_nested_durations(tp2pp2):
    _, events, _ = tp2pp2
    leaf = fx.LEAF_NS - fx.GAP_NS    # a leaf's B comes one gap in, its E closes LEAF_NS after the previous mark
    reduces = events.filter(pl.col("name") == "_reduce")
    assert reduces["dur_ns"].unique().to_list() == [leaf]
    # attention = gap + leaf _reduce + gap
    attention = events.filter(pl.col("name") == "attention")
    assert attention["dur_ns"].unique().to_list() == [fx.LEAF_NS + fx.GAP_NS]


def test_tp_collectives(tp2pp2):
    _, events, _ = tp2pp2
    reduces = events.filter(pl.col("name") == "_reduce")
    # 2 per forward (attention, mlp) x 2 microbatches x 2 iterations on each of 4 ranks
    assert reduces.height == 2 * 2 * 2 * 4
    assert reduces["cat"].unique().to_list() == ["collective"]
    assert reduces["lane"].unique().to_list() == ["comm"]
    assert reduces["group"].unique().to_list() == ["tp"]
    assert reduces["bytes"].null_count() == reduces.height  # the original records no size on them
    by_rank = {r: g for r, g in reduces.select("rank", "group_ranks").unique("rank").iter_rows()}
    assert by_rank == {0: [0, 1], 1: [0, 1], 2: [2, 3], 3: [2, 3]}
    assert orjson.loads(reduces["args"][0])["expect"] == "_reduce"


def test_p2p_peers_from_group_and_from_coordinates(tp2pp2):
    _, events, _ = tp2pp2
    p2p = events.filter(pl.col("cat") == "p2p")
    # stage 0 talks to the same tp rank on stage 1 (rank + 2), and back
    expected = {0: 2, 1: 3, 2: 0, 3: 1}
    for rank, peer in expected.items():
        assert p2p.filter(pl.col("rank") == rank)["peer"].unique().to_list() == [peer]
    # cool-down and send-extra records carry no group: their peer came from the coordinates
    assert p2p.filter(pl.col("name") == "recv-cooldown")["peer"].to_list() == [2, 2, 3, 3]
    assert p2p.filter(pl.col("name") == "send-extra")["peer"].to_list() == [0, 0, 1, 1]
    # an exchange moves two tensors (one each way), the others one
    sizes = dict(p2p.select("name", "bytes").unique().iter_rows())
    assert sizes == {"send-warmup": fx.P2P_BYTES, "recv-extra": fx.P2P_BYTES, "exchange-next": 2 * fx.P2P_BYTES,
                     "exchange-prev": 2 * fx.P2P_BYTES, "recv-cooldown": fx.P2P_BYTES, "send-extra": fx.P2P_BYTES}
    assert p2p["lane"].unique().to_list() == ["comm"]
    names0 = p2p.filter((pl.col("rank") == 0) & (pl.col("iteration") == 0))["name"].to_list()
    assert names0 == ["send-warmup", "exchange-next", "recv-cooldown"]
    args = orjson.loads(p2p.filter(pl.col("name") == "send-warmup")["args"][0])
    assert args["expect"] == "recv-warmup"
    # the original's unit: data / 2**27 per second (binary gigabits/s), over the record's span
    leaf = fx.LEAF_NS - fx.GAP_NS
    assert args["bandwidth"] == pytest.approx(fx.P2P_BYTES / 2**27 / (leaf / 1e9))
    assert args["bandwidth"] == pytest.approx(fx.P2P_BYTES * 8 / 2**30 / (leaf / 1e9))


def test_p2p_calls_that_move_nothing_are_not_p2p(tp2pp2):
    _, events, _ = tp2pp2
    idle = events.filter(pl.col("cat") == "other")
    # stage 0: recv-warmup, recv-extra, send-extra, send-cooldown; stage 1: two exchange-next
    assert sorted(idle.filter((pl.col("rank") == 0) & (pl.col("iteration") == 0))["name"].to_list()) == [
        "recv-extra", "recv-warmup", "send-cooldown", "send-extra"]
    assert idle.filter((pl.col("rank") == 2) & (pl.col("iteration") == 0))["name"].to_list() == [
        "exchange-next", "exchange-next"]
    assert idle["peer"].null_count() == idle.height and idle["bytes"].null_count() == idle.height
    assert orjson.loads(idle["args"][0])["bandwidth"] is None


def test_categories(tp2pp2):
    _, events, _ = tp2pp2
    cats = dict(events.select("name", "cat").unique().iter_rows())
    assert cats["optimizer"] == "optimizer"
    for name in ("forward", "forward-warmup", "backward", "backward-cooldown", "transformer_layer",
                 "attention", "mlp", "loss"):
        assert cats[name] == "compute"
    assert cats["allreduce"] == "collective"
    assert events.filter(pl.col("name") == "optimizer").height == 4 * 2


def test_tp_x_dp_tag_is_narrowed_to_tp_and_dp_group_named(tmp_path):
    written = fx.write_trace_dir(tmp_path, tp=2, pp=2, dp=2, iterations=2)
    events, ranks = _read(written.files.values())
    assert (ranks["layout_tp"][0], ranks["layout_dp"][0], ranks["layout_pp"][0]) == (2, 2, 2)
    reduces = events.filter((pl.col("name") == "_reduce") & (pl.col("rank") == 7))
    assert reduces["group"].unique().to_list() == ["tp"]
    assert reduces["group_ranks"][0].to_list() == [6, 7]
    assert orjson.loads(reduces["args"][0])["mapp_original_group"] == [4, 5, 6]
    # the gradient reduction carries no group in the original: it is the rank's DP group
    sync = events.filter(pl.col("name") == "allreduce")
    assert sync.height == 8 * 2
    assert sync["cat"].unique().to_list() == ["collective"]
    assert sync["group"].unique().to_list() == ["dp"]
    assert dict(sync.select("rank", "group_ranks").unique("rank").iter_rows()) == {
        0: [0, 2], 1: [1, 3], 2: [0, 2], 3: [1, 3], 4: [4, 6], 5: [5, 7], 6: [4, 6], 7: [5, 7]}
    assert orjson.loads(sync["args"][0])["mapp_inferred_group"] == "dp"
    assert sync["bytes"].null_count() == sync.height


def test_groups_are_recovered_when_files_are_missing(tmp_path):
    # files of rank 4 and 6 are absent: the TP x DP list still names them, and the default rank
    # order (tp fastest, then dp, then pp) gives the TP and DP groups by arithmetic
    written = fx.write_trace_dir(tmp_path, tp=2, pp=2, dp=2, iterations=1)
    files = [path for rank, path in written.files.items() if rank not in (4, 6)]
    events, _ = _read(files)
    reduces = events.filter((pl.col("name") == "_reduce") & (pl.col("rank") == 7))
    assert reduces["group"].unique().to_list() == ["tp"]
    assert reduces["group_ranks"][0].to_list() == [6, 7]
    sync = events.filter((pl.col("name") == "allreduce") & (pl.col("rank") == 5))
    assert sync["group_ranks"][0].to_list() == [5, 7]


def test_tp_one_reduces_move_nothing(tmp_path):
    written = fx.write_trace_dir(tmp_path, tp=1, pp=2, dp=2, iterations=1)
    events, _ = _read(written.files.values())
    reduces = events.filter(pl.col("name") == "_reduce")
    assert reduces.height > 0
    assert reduces["cat"].unique().to_list() == ["other"]
    assert reduces["group_ranks"].null_count() == reduces.height


def test_repeated_iterations_are_dropped(tmp_path):
    # the original's iteration_end runs twice per iteration and writes the iteration again
    written = fx.write_trace_dir(tmp_path, tp=2, pp=2, dp=1, iterations=2, repeat_iterations=True)
    warnings: list[str] = []
    events, _ = _read(written.files.values(), warnings)
    assert dict(events.group_by("rank").len().iter_rows()) == written.pairs
    its = events.filter((pl.col("rank") == 0) & (pl.col("cat") == "iteration")).sort("ts_ns")
    assert its["dur_ns"].to_list() == written.iteration_walls[0]
    assert sum("repeat the one before" in w for w in warnings) == 4


def test_group_is_null_when_members_form_no_axis(tmp_path):
    written = fx.write_trace_dir(tmp_path, tp=2, pp=1, dp=1, iterations=1)
    path = written.files[0]
    records = orjson.loads(path.read_bytes())
    records += [
        {"name": "allreduce", "ph": "B", "rel_ts": 5000, "dp_rk": 0, "pp_rk": 0, "tp_rk": 0, "dev": 0, "g_rk": 0},
        {"name": "allreduce", "ph": "E", "rel_ts": 5100, "dp_rk": 0, "pp_rk": 0, "tp_rk": 0, "dev": 0, "g_rk": 0,
         "group": [7], "data": 10},
    ]
    path.write_bytes(orjson.dumps(records))
    events, _ = _read(written.files.values())
    row = events.filter(pl.col("name") == "allreduce")
    assert row["group_ranks"][0].to_list() == [0, 7]
    assert row["group"][0] is None
    assert row["iteration"][0] is None         # after the last iteration's E


def test_truncated_files_keep_complete_pairs(tmp_path):
    written = fx.write_trace_dir(tmp_path, tp=2, pp=2, dp=1, iterations=2, truncate_last_iteration=True)
    warnings: list[str] = []
    events, ranks = _read(written.files.values(), warnings)
    assert ranks.height == 4
    assert dict(events.group_by("rank").len().iter_rows()) == written.pairs
    for rank, path in written.files.items():
        size = path.stat().st_size
        assert any(w.startswith(f"{path}: truncated at byte {size}; kept ") for w in warnings)
        assert any(w.startswith(f"{path}: ") and "B records have no E" in w for w in warnings)
    # only iteration 0 closed; iteration 1 contributes its complete inner pairs
    assert events.filter(pl.col("cat") == "iteration")["iteration"].to_list() == [0] * 4
    assert events.filter(pl.col("iteration") == 1).height > 0


def test_not_json_raises_naming_the_file(tmp_path):
    bad = tmp_path / "benchmark-data-0-pipeline-0-tensor-0.json"
    bad.write_text("this is not json")
    with pytest.raises(TraceFormatError) as info:
        _read([bad])
    assert str(bad) in str(info.value)


def test_sniff():
    assert megatronapp.sniff(pathlib.Path("benchmark-data-3-pipeline-1-tensor-0.json"), b"")
    head = b'[\n{"name":"forward","ph":"B","rel_ts":10,"dp_rk":0,"pp_rk":0,"tp_rk":0,"dev":0,"g_rk":0}'
    assert megatronapp.sniff(pathlib.Path("x.json"), head)
    assert not megatronapp.sniff(pathlib.Path("rank-00000.json"), b'[\n{"ph":"M","name":"mapp","pid":0}')
    assert not megatronapp.sniff(pathlib.Path("trace.json"), b'{"traceEvents": []}')


def test_committed_fixture_reads():
    files = sorted(COMMITTED.glob("benchmark-data-*.json"))
    assert len(files) == 4
    events, ranks = _read(files)
    assert ranks["rank"].to_list() == [0, 1, 2, 3]
    assert events.filter(pl.col("cat") == "iteration").height == 4
    assert set(events["cat"].unique().to_list()) == {"iteration", "compute", "collective", "p2p", "optimizer"}
    assert events["peer"].drop_nulls().len() == events.filter(pl.col("cat") == "p2p").height


def test_the_layers_scopes_take_the_microbatch_of_the_step_they_ran_inside(tp2pp2, tmp_path):
    # the tracer puts micro_batch_index on the pipeline steps only; the layer's scopes inside a
    # forward are that microbatch's work (stage 1 fits each replica's data per microbatch on them)
    _, events, _ = tp2pp2
    steps = events.filter(pl.col("name").is_in(["forward", "forward-warmup"]))
    inner = events.filter(pl.col("name").is_in(["transformer_layer", "attention", "mlp"]))
    assert inner.height == 2 * 2 * 4 * 3 and inner["microbatch"].null_count() == 0
    for row in inner.iter_rows(named=True):
        around = steps.filter((pl.col("rank") == row["rank"]) & (pl.col("ts_ns") <= row["ts_ns"])
                              & (pl.col("ts_ns") + pl.col("dur_ns") >= row["ts_ns"] + row["dur_ns"]))
        assert around["microbatch"].to_list() == [row["microbatch"]]
    assert sorted(inner["microbatch"].unique().to_list()) == [0, 1]
    # collectives keep what they recorded (none); without pipeline steps (PP 1) nothing is guessed
    assert events.filter(pl.col("name") == "_reduce")["microbatch"].null_count() == 2 * 2 * 2 * 4
    written = fx.write_trace_dir(tmp_path / "pp1", tp=2, pp=1, dp=2, iterations=2)
    flat, _ = _read(written.files.values())
    assert flat.filter(pl.col("name") == "attention")["microbatch"].null_count() == flat.filter(
        pl.col("name") == "attention").height > 0
