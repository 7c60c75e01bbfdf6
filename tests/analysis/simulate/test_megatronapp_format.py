"""The MegatronApp files hold, field for field, what the original MegaScan tracer writes.

The facts checked here come from OpenSQZ/MegatronApp: ``megatron/training/trace.py`` (record
shape, ``bandwidth``, the iteration records), the scopes of its 1F1B schedule
(``pipeline_parallel/schedules.py`` on its tracing branches), ``tensor_parallel/mappings.py``
(``_reduce`` tagged with the TP x DP group) and its aggregator ``scripts/dependency.py``, which
reads ``expect`` from every record that has a non-null ``group``.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from mapp.analysis.ingest import load_bundle
from mapp.analysis.simulate import SimConfig, parse_fault, simulate

CORE = ["name", "ph", "rel_ts", "dp_rk", "pp_rk", "tp_rk", "dev", "g_rk"]
BASE = dict(layers=4, hidden=512, seq_length=256, microbatches=4, iterations=2, format="megatronapp")


def records(out, d: int, p: int, t: int) -> list[dict]:
    return json.loads((out / f"benchmark-data-{d}-pipeline-{p}-tensor-{t}.json").read_text())


@pytest.fixture(scope="module")
def tp2pp2dp2(tmp_path_factory):
    out = tmp_path_factory.mktemp("ma") / "t"
    simulate(SimConfig(tp=2, pp=2, dp=2, seed=4, **BASE), out)
    return out


def test_record_shapes(tp2pp2dp2):
    recs = records(tp2pp2dp2, 1, 0, 1)  # rank 3: tp1 dp1 of stage 0
    for r in recs:
        if r["name"] == "iteration" and r["ph"] == "B":
            assert list(r) == ["name", "ph", "pad_before"]
            continue
        keys = list(r)
        if r["ph"] == "B":
            assert keys == CORE
        else:  # the scope's attrs, then the core fields, then bandwidth where data is
            at = keys.index("name")
            assert keys[at:at + len(CORE)] == CORE
            tail = keys[at + len(CORE):]
            assert tail in ([], ["bandwidth"], ["duration_wall", "duration_cuda"])
            assert ("bandwidth" in tail) == ("data" in keys[:at])
        assert (r["g_rk"], r["dp_rk"], r["pp_rk"], r["tp_rk"], r["dev"]) == (3, 1, 0, 1, 3)


def test_every_grouped_record_has_expect(tp2pp2dp2):
    # the original aggregator does waiting[(event["args"]["expect"], group)] for these
    for d, p, t in [(0, 0, 0), (1, 1, 1)]:
        grouped = [r for r in records(tp2pp2dp2, d, p, t) if r.get("group") is not None]
        assert grouped and all("expect" in r for r in grouped)


def test_reduce_is_tagged_with_the_tp_x_dp_group(tp2pp2dp2):
    recs = records(tp2pp2dp2, 1, 1, 0)  # rank 6; stage 1 holds ranks 4..7
    reduces = [r for r in recs if r["name"] == "_reduce" and r["ph"] == "E"]
    assert reduces
    for r in reduces:
        assert list(r)[:2] == ["expect", "group"] and r["expect"] == "_reduce"
        assert r["group"] == [4, 5, 7]
        assert "data" not in r and "bandwidth" not in r and "micro_batch_index" not in r


def test_p2p_scopes_and_their_attributes(tp2pp2dp2):
    # pp=2, m=4: stage 0 warms up with one forward, stage 1 with none
    first = [r for r in records(tp2pp2dp2, 0, 0, 0) if r["ph"] == "E"]
    names = [r["name"] for r in first if "data" in r][:9]
    assert names == ["recv-warmup", "send-warmup", "recv-extra", "exchange-next", "exchange-prev",
                     "exchange-next", "exchange-prev", "exchange-next", "send-extra"]
    by_name = {}
    for r in first:
        by_name.setdefault(r["name"], r)
    # a call that moves nothing on the first stage: still recorded, data/group/bandwidth null
    for name in ("recv-warmup", "recv-extra", "exchange-prev", "send-extra", "send-cooldown"):
        assert by_name[name]["data"] is None and by_name[name]["bandwidth"] is None
    assert by_name["recv-warmup"]["group"] is None and by_name["recv-warmup"]["expect"] == "send-warmup"
    assert by_name["recv-extra"]["expect"] == "send-warmup"
    send = by_name["send-warmup"]
    assert list(send)[:4] == ["micro_batch_index", "expect", "data", "group"]
    assert send["expect"] == "recv-warmup" and send["group"] == [4]
    ex = by_name["exchange-next"]
    assert list(ex)[:3] == ["expect", "data", "group"] and "micro_batch_index" not in ex
    assert ex["data"] == 2 * 256 * 512 * 2  # activation out + gradient in
    cool = by_name["recv-cooldown"]
    assert list(cool)[:2] == ["micro_batch_index", "data"] and "expect" not in cool and "group" not in cool
    assert by_name["send-extra"]["micro_batch_index"] == 3  # the original records num_microbatches - 1


def test_bandwidth_is_binary_gigabits_per_second(tp2pp2dp2):
    recs = records(tp2pp2dp2, 0, 1, 1)
    opened = {}
    checked = 0
    for r in recs:
        if r["ph"] == "B" and "rel_ts" in r:
            opened.setdefault(r["name"], []).append(r["rel_ts"])
        elif r["ph"] == "E" and r["name"] != "iteration":
            began = opened[r["name"]].pop()
            if r.get("data"):
                elapsed = r["rel_ts"] - began
                assert r["bandwidth"] == pytest.approx(r["data"] / 2**27 / (elapsed / 1e9), rel=1e-12)
                # 8 / 2**30 bits vs 1e-9 bytes per ns: 7.45 x the GB/s figure
                assert r["bandwidth"] == pytest.approx(r["data"] / elapsed * 1e9 / 2**30 * 8, rel=1e-12)
                checked += 1
    assert checked > 0


def test_gradient_sync_and_optimizer_scopes_carry_nothing(tp2pp2dp2):
    recs = records(tp2pp2dp2, 0, 0, 0)
    for name in ("allreduce", "optimizer", "loss"):
        ends = [r for r in recs if r["name"] == name and r["ph"] == "E"]
        if name == "loss":
            assert not ends  # stage 0 computes no loss
            continue
        assert len(ends) == 2 and all(list(r) == CORE for r in ends)
    assert not {r["name"] for r in recs} & {"grad-sync", "reduce-scatter", "all-gather"}
    last = records(tp2pp2dp2, 0, 1, 0)
    assert sum(r["name"] == "loss" and r["ph"] == "E" for r in last) == 2 * 4


def test_no_pipelining_has_no_step_records(tmp_path):
    out = tmp_path / "p1"
    simulate(SimConfig(tp=2, pp=1, dp=2, seed=1, **BASE), out)
    names = {r["name"] for r in records(out, 0, 0, 0)}
    assert names == {"iteration", "_reduce", "loss", "optimizer"}


def test_tp_one_reduces_have_a_null_group(tmp_path):
    out = tmp_path / "tp1"
    simulate(SimConfig(tp=1, pp=2, dp=2, seed=1, **BASE), out)
    reduces = [r for r in records(out, 0, 0, 0) if r["name"] == "_reduce" and r["ph"] == "E"]
    assert reduces and all(r["group"] is None and r["expect"] == "_reduce" for r in reduces)


def test_reader_recovers_the_groups_and_times(tp2pp2dp2):
    bundle = load_bundle(tp2pp2dp2, use_cache=False)
    ev = bundle.events
    reduces = ev.filter(pl.col("name") == "_reduce")
    assert reduces["group"].unique().to_list() == ["tp"]
    assert reduces.filter(pl.col("rank") == 6)["group_ranks"][0].to_list() == [6, 7]
    sync = ev.filter(pl.col("name") == "allreduce")
    assert sync["group"].unique().to_list() == ["dp"]
    assert sync.filter(pl.col("rank") == 5)["group_ranks"][0].to_list() == [5, 7]
    p2p = ev.filter(pl.col("cat") == "p2p")
    assert p2p["peer"].null_count() == 0
    assert p2p.filter(pl.col("rank") == 0)["peer"].unique().to_list() == [4]
    # iterations laid end to end: the second starts after the first ends
    its = ev.filter((pl.col("cat") == "iteration") & (pl.col("rank") == 0)).sort("ts_ns")
    assert its["ts_ns"][1] >= its["ts_ns"][0] + its["dur_ns"][0]


def test_original_tracer_syncs_slow_the_job(tmp_path):
    # the original's barriers (global, TP) and synchronizes cost time the v1 capture does not
    fields = dict(tp=2, pp=2, dp=2, layers=4, hidden=512, seq_length=256, microbatches=4, iterations=1,
                  seed=2, jitter_sigma=0.0)
    v1 = simulate(SimConfig(**fields), tmp_path / "v1")
    ma = simulate(SimConfig(**fields, format="megatronapp"), tmp_path / "ma")
    assert ma.ground_truth["iteration_us"][0] > v1.ground_truth["iteration_us"][0]


def test_data_sizes_follow_the_tokens(tmp_path):
    out = tmp_path / "tok"
    simulate(SimConfig(tp=2, pp=2, dp=2, seed=5, seqlen_sigma=0.6, **BASE), out)
    truth = json.loads((out / "ground_truth.json").read_text())
    assert truth["config"]["seqlen_sigma"] == 0.6
    sends = [r for r in records(out, 1, 0, 0) if r["name"] == "send-warmup" and r["ph"] == "E"]
    recvs = [r for r in records(out, 1, 1, 0) if r["name"] == "recv-extra" and r["ph"] == "E"]
    assert sends[0]["data"] == recvs[0]["data"]  # the same microbatch on both stages
    sizes = {r["data"] for r in records(out, 1, 1, 0) if r.get("data")}
    assert len(sizes) > 2 and all(s % (512 * 2) == 0 for s in sizes)  # whole tokens


def test_data_stall_fault_is_refused_on_a_rank_that_reads_no_data(tmp_path):
    from mapp.errors import InputError

    with pytest.raises(InputError) as err:
        simulate(SimConfig(tp=2, pp=3, dp=1, faults=[parse_fault("data_stall:1:20")], **{**BASE, "layers": 3}),
                 tmp_path / "x")
    assert "reads no data" in str(err.value)
    with pytest.raises(InputError):
        simulate(SimConfig(tp=2, pp=3, dp=1, faults=[parse_fault("data_stall:2:20")], **{**BASE, "layers": 3}),
                 tmp_path / "y")
