"""The realism options: a host that runs ahead of the GPU, host noise, heavy-tailed sequence
lengths, the output layer on the last stage, and data-loader stalls."""

from __future__ import annotations

import hashlib
import json

import polars as pl
import pytest

from mapp.analysis.simulate import SimConfig, parse_fault, simulate

from ._sim import QUIET, run

BIG = dict(layers=8, hidden=2048, seq_length=2048, **QUIET)
REAL = dict(host_ahead=True, host_noise_us=5.0, data_load_us=200.0, seqlen_sigma=0.6, vocab_size=32768)


def digest(paths) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.mark.parametrize("fmt", ["mapp", "megatronapp"])
def test_same_seed_same_bytes_with_every_option(tmp_path, fmt):
    fields = dict(tp=2, pp=2, dp=2, layers=4, hidden=512, seq_length=256, microbatches=4, iterations=2,
                  format=fmt, faults=[parse_fault("data_stall:0:2"), parse_fault("slow_gpu:3:1.3")], **REAL)
    a = simulate(SimConfig(**fields, seed=7), tmp_path / "a")
    b = simulate(SimConfig(**fields, seed=7), tmp_path / "b")
    c = simulate(SimConfig(**fields, seed=8), tmp_path / "c")
    assert digest(a.files) == digest(b.files)
    assert digest(a.files) != digest(c.files)


def test_a_host_ahead_of_the_gpu_hides_its_launches(tmp_path):
    # big ops (ms) and a 50 us launch: the host stays ahead, the job is as fast as without it
    fields = dict(tp=2, pp=2, dp=1, microbatches=4, iterations=1, host_overhead_us=50.0, **BIG)
    serial, _ = run(tmp_path, "serial", **fields)
    ahead, ev = run(tmp_path, "ahead", host_ahead=True, **fields)
    t0, t1 = serial.ground_truth["iteration_us"][0], ahead.ground_truth["iteration_us"][0]
    assert t0 < t1 < 1.05 * t0  # only the launches after each synchronising p2p show
    # a host 40x slower than the GPU can feed: the GPU starves and the job is much slower
    slow, _ = run(tmp_path, "slow", host_ahead=True, faults=[parse_fault("slow_host:0:40")], **fields)
    assert slow.ground_truth["iteration_us"][0] > 1.2 * t1


def test_spans_start_when_the_stream_reaches_them(tmp_path):
    # launches slower than the kernels: every op waits for its launch, so the GPU idles between
    # consecutive compute ops; without host_ahead they are back to back
    fields = dict(tp=1, pp=1, dp=2, layers=2, hidden=512, seq_length=256, microbatches=2, iterations=1,
                  per_layer=True, host_overhead_us=100.0, **{k: v for k, v in QUIET.items()})
    for name, ahead in (("serial", False), ("ahead", True)):
        _, ev = run(tmp_path, name, host_ahead=ahead, **fields)
        ops = ev.filter(pl.col("layer").is_not_null() & (pl.col("rank") == 0)).sort("start")
        gaps = (ops["start"].shift(-1) - ops["end"]).drop_nulls()
        inside = gaps.filter(gaps < 1_000)  # between ops of one step
        if ahead:
            assert inside.min() > 90.0  # the launch of the next op (100 us) minus the op's own time
        else:
            assert inside.max() < 0.01


def test_slow_host_below_the_gpu_time_is_invisible(tmp_path):
    fields = dict(tp=2, pp=2, dp=2, microbatches=4, iterations=1, host_ahead=True, host_overhead_us=20.0, **BIG)
    healthy, _ = run(tmp_path, "h", **fields)
    mild, _ = run(tmp_path, "m", faults=[parse_fault("slow_host:1:3")], **fields)
    assert mild.ground_truth["iteration_us"][0] == pytest.approx(healthy.ground_truth["iteration_us"][0], rel=0.01)


def test_host_noise_is_heavy_tailed_and_seeded(tmp_path):
    fields = dict(tp=1, pp=1, dp=2, layers=2, hidden=512, seq_length=256, microbatches=8, iterations=1,
                  per_layer=True, host_overhead_us=0.0, host_noise_us=20.0, **QUIET)
    _, ev = run(tmp_path, "n", **fields)  # serial host: every noise draw shows as a gap
    ops = ev.filter(pl.col("layer").is_not_null()).sort("rank", "start")
    gaps = ops.with_columns(gap=pl.col("start") - pl.col("end").shift(1).over("rank"))["gap"].drop_nulls()
    gaps = gaps.filter(gaps < 20_000)
    # Lomax(1.5) x 20 us: median 20 x (2^(2/3) - 1) = 11.7 us, mean 40 us
    assert 5 < gaps.median() < 25
    assert gaps.max() > 5 * gaps.median()


def test_sequence_lengths_size_compute_and_transfers_per_replica(tmp_path):
    fields = dict(tp=2, pp=2, dp=2, microbatches=4, iterations=1, per_layer=True, seqlen_sigma=0.7, seed=3, **BIG)
    result, ev = run(tmp_path, **fields)
    reduces = ev.filter((pl.col("cat") == "collective") & (pl.col("group") == "tp"))
    # one size per (replica, microbatch): every stage and TP shard of a replica agrees
    sizes = reduces.group_by("dp", "microbatch").agg(n=pl.col("bytes").n_unique(), b=pl.col("bytes").first())
    assert (sizes["n"] == 1).all()
    assert sizes["b"].n_unique() > 4
    per_token = 2048 * 2
    assert (sizes["b"] % per_token == 0).all()
    # sends and receives agree on the size; p2p carries the same tokens as the replica's TP reduces
    p2p = ev.filter(pl.col("cat") == "p2p").join(sizes.select("dp", "microbatch", "b"), on=["dp", "microbatch"])
    assert (p2p["bytes"] == p2p["b"]).all()
    # MLP time is linear in the tokens, attention grows faster than linear
    mlp = ev.filter(pl.col("name") == "mlp").join(sizes, on=["dp", "microbatch"])
    ratio = mlp["dur_ns"] / mlp["b"]
    assert ratio.max() / ratio.min() < 1.001
    att = ev.filter(pl.col("name") == "attention").join(sizes, on=["dp", "microbatch"]).sort("b")
    per = att["dur_ns"] / att["b"]
    assert per[-1] > per[0]


def test_layer_spans_record_their_tokens_as_the_capture_does(tmp_path):
    # mapp's capture writes each layer call's tokens (sequence x micro-batch) where lengths vary;
    # the detector takes out of each op's time what its tokens explain
    fields = dict(tp=2, pp=2, dp=2, microbatches=4, iterations=1, per_layer=True, seqlen_sigma=0.7, seed=3,
                  micro_batch_size=2, **BIG)
    _, ev = run(tmp_path, **fields)
    layers = ev.filter(pl.col("name").is_in(["attention", "mlp", "attention_backward", "mlp_backward"])).with_columns(
        tokens=pl.col("args").str.json_path_match("$.tokens").cast(pl.Int64))
    assert layers["tokens"].null_count() == 0
    # the replica's TP reduces carry hidden x 2 bytes per token of each sample: the same tokens
    reduces = ev.filter((pl.col("cat") == "collective") & (pl.col("group") == "tp")).group_by("dp", "microbatch").agg(
        b=pl.col("bytes").first())
    both = layers.join(reduces, on=["dp", "microbatch"])
    assert len(both) == len(layers)
    assert (both["tokens"] * 2048 * 2 == both["b"]).all()
    assert layers.group_by("dp", "microbatch").agg(pl.col("tokens").n_unique())["tokens"].max() == 1
    assert layers["tokens"].n_unique() > 4


def test_output_layer_makes_the_last_stage_heavier(tmp_path):
    fields = dict(tp=2, pp=2, dp=1, microbatches=4, iterations=1, vocab_size=131072, **BIG)
    _, ev = run(tmp_path, **fields)
    fwd = ev.filter(pl.col("name") == "forward").group_by("pp").agg(pl.col("dur_ns").median()).sort("pp")
    assert fwd["dur_ns"][1] > 1.3 * fwd["dur_ns"][0]
    # the cross-entropy's three TP all-reduces and the embedding's are traced like any other
    tp = ev.filter((pl.col("group") == "tp") & (pl.col("rank") == 0))
    tp_last = ev.filter((pl.col("group") == "tp") & (pl.col("rank") == 2))
    layers = 8 // 2
    assert tp.filter(pl.col("iteration") == 0).height == 4 * (4 * layers + 1)
    assert tp_last.filter(pl.col("iteration") == 0).height == 4 * (4 * layers + 3 + 1)


def test_data_stall_delays_one_forward_of_its_tp_group(tmp_path):
    fields = dict(tp=2, pp=2, dp=2, microbatches=4, iterations=2, host_ahead=True, data_load_us=100.0, **BIG)
    result, ev = run(tmp_path, faults=[parse_fault("data_stall:2:30:1-1")], **fields)  # tp0 dp1 pp0
    [fault] = result.ground_truth["faults"]
    assert fault["hardware"] is True and fault["iterations"] == [1, 1]
    [stall] = fault["stalls"]
    assert stall["iteration"] == 1
    mb = stall["microbatch"]
    fwd = ev.filter((pl.col("name") == "forward") & (pl.col("pp") == 0))
    hit = fwd.filter((pl.col("iteration") == 1) & (pl.col("microbatch") == mb))
    normal = fwd.filter(pl.col("iteration") == 0)["dur_ns"].median()
    slow = hit.filter(pl.col("dp") == 1)
    # the reader and its TP peer (waiting in the batch broadcast) both take ~30 ms longer (less
    # what the host had queued ahead of the GPU when it began to wait for the data)
    assert (slow["dur_ns"] > normal + 25e6).all() and slow.height == 2
    assert slow["dur_ns"][0] == slow["dur_ns"][1]
    assert (hit.filter(pl.col("dp") == 0)["dur_ns"] < normal + 1e6).all()
    assert result.ground_truth["iteration_us"][1] > result.ground_truth["healthy_iteration_us_each"][1] + 25_000


def test_realistic_job_in_both_formats_reads_back(tmp_path):
    for fmt in ("mapp", "megatronapp"):
        fields = dict(tp=2, pp=4, dp=2, layers=8, hidden=1024, seq_length=512, microbatches=8, iterations=2,
                      format=fmt, per_layer=True, seed=11, **REAL)
        result, ev = run(tmp_path, fmt, **fields)
        assert ev.filter(pl.col("cat") == "iteration").height == 16 * 2
        truth = json.loads((tmp_path / fmt / "ground_truth.json").read_text())
        assert truth["config"]["host_ahead"] is True
