"""Collective, p2p and compute-dependency semantics hold for every instance in the output.

Traces are read back through ``load_bundle`` and put on the true clock with the clocks that
``ground_truth.json`` states (skew is on), so these also check the clock model.
"""

from __future__ import annotations

import polars as pl
import pytest

from mapp.analysis.simulate import parse_fault

from ._sim import run

EPS = 0.01  # us: ns rounding of timestamps plus clock inversion

LAYOUTS = [
    dict(tp=2, pp=4, dp=2, vpp=1, microbatches=6),
    dict(tp=2, pp=2, dp=2, vpp=2, microbatches=4),
    dict(tp=1, pp=4, dp=2, vpp=2, microbatches=8),
    dict(tp=4, pp=1, dp=2, vpp=1, microbatches=3),
    # the realism options: the host ahead of the GPU, noise, data fetch, uneven lengths, vocabulary
    dict(tp=2, pp=4, dp=2, vpp=1, microbatches=6, host_ahead=True, host_noise_us=5.0, data_load_us=50.0,
         seqlen_sigma=0.5, vocab_size=4096),
    dict(tp=2, pp=2, dp=2, vpp=2, microbatches=4, host_ahead=True, host_noise_us=20.0, seqlen_sigma=0.8,
         vocab_size=4096),
]


@pytest.fixture(scope="module", params=range(len(LAYOUTS)),
                ids=lambda i: "tp{tp}pp{pp}dp{dp}v{vpp}".format(**LAYOUTS[i]) + ("-real" if len(LAYOUTS[i]) > 5 else ""))
def traced(request, tmp_path_factory):
    layout = LAYOUTS[request.param]
    tmp = tmp_path_factory.mktemp("sem")
    faults = [parse_fault("slow_gpu:1:1.5"), parse_fault("seqlen_imbalance::0.2")]
    result, ev = run(tmp, **layout, iterations=2, per_layer=True, faults=faults, seed=3)
    return layout, result, ev


def test_every_rank_and_iteration_present(traced):
    layout, result, ev = traced
    world = layout["tp"] * layout["pp"] * layout["dp"]
    iters = ev.filter(pl.col("cat") == "iteration")
    assert iters.height == world * 2
    assert sorted(iters["rank"].unique().to_list()) == list(range(world))
    assert result.events == ev.height


def test_collectives_end_together_after_the_last_arrival(traced):
    _, _, ev = traced
    coll = ev.filter(pl.col("cat") == "collective")
    assert coll.height > 0
    inst = coll.group_by("group", pl.col("group_ranks").list.first().alias("leader"), "seq").agg(
        n=pl.len(),
        size=pl.col("group_ranks").list.len().first(),
        ranks=pl.col("rank").sort(),
        members=pl.col("group_ranks").first(),
        names=pl.col("name").n_unique(),
        last_arrival=pl.col("start").max(),
        first_end=pl.col("end").min(),
        last_end=pl.col("end").max(),
    )
    assert (inst["n"] == inst["size"]).all()
    assert (inst["names"] == 1).all()
    assert all(r.to_list() == m.to_list() for r, m in zip(inst["ranks"], inst["members"]))
    assert (inst["last_end"] - inst["first_end"] < EPS).all()
    assert (inst["first_end"] > inst["last_arrival"]).all()  # plus a positive transfer time


def test_every_recv_ends_after_its_send_started_and_vice_versa(traced):
    _, _, ev = traced
    p2p = ev.filter(pl.col("cat") == "p2p")
    sends = p2p.filter(pl.col("name") == "send").select(
        src="rank", dst="peer", seq="seq", s_start="start", s_end="end", s_mb="microbatch", s_chunk="chunk",
        s_it="iteration")
    recvs = p2p.filter(pl.col("name") == "recv").select(
        dst="rank", src="peer", seq="seq", r_start="start", r_end="end", r_mb="microbatch", r_chunk="chunk",
        r_it="iteration")
    assert sends.height == recvs.height > 0 or sends.height == recvs.height == 0
    pairs = sends.join(recvs, on=["src", "dst", "seq"], how="full", coalesce=True)
    assert pairs.height == sends.height
    assert pairs["s_start"].null_count() == 0 and pairs["r_start"].null_count() == 0
    assert (pairs["s_mb"] == pairs["r_mb"]).all()
    assert (pairs["s_it"] == pairs["r_it"]).all()
    assert (pairs["r_end"] > pairs["s_start"] + EPS).all()
    assert (pairs["s_end"] > pairs["r_start"] + EPS).all()


def test_compute_waits_for_its_input(traced):
    layout, _, ev = traced
    p, v = layout["pp"], layout["vpp"]
    key = ["rank", "iteration", "microbatch", "chunk"]
    recvs = ev.filter(pl.col("name") == "recv").group_by(key).agg(
        first_in=pl.col("end").min(), last_in=pl.col("end").max())
    steps = ev.filter(pl.col("name").is_in(["forward", "backward"]))
    needs_input = steps.filter(
        ~((pl.col("name") == "forward") & (pl.col("pp") == 0) & (pl.col("chunk") == 0))
        & ~((pl.col("name") == "backward") & (pl.col("pp") == p - 1) & (pl.col("chunk") == v - 1)))
    j = needs_input.join(recvs, on=key, how="left")
    assert j["first_in"].null_count() == 0  # every step that needs an input received one
    # a forward needs the activation (the first message for its microbatch and chunk); a
    # backward needs the gradient too (with pp=2 both come from the same peer)
    fwd = j.filter(pl.col("name") == "forward")
    bwd = j.filter(pl.col("name") == "backward")
    assert (fwd["start"] >= fwd["first_in"] - EPS).all()
    assert (bwd["start"] >= bwd["last_in"] - EPS).all()


def test_layer_events_nest_inside_their_step(traced):
    _, _, ev = traced
    layers = ev.filter(pl.col("layer").is_not_null())
    assert layers.height > 0
    steps = ev.filter(pl.col("name").is_in(["forward", "backward"])).select(
        "rank", "iteration", "microbatch", "chunk", step=pl.col("name"), s0="start", s1="end")
    j = layers.with_columns(step=pl.when(pl.col("name").str.ends_with("backward")).then(pl.lit("backward"))
                            .otherwise(pl.lit("forward"))).join(
        steps, on=["rank", "iteration", "microbatch", "chunk", "step"])
    assert j.height == layers.height
    assert ((j["start"] >= j["s0"] - EPS) & (j["end"] <= j["s1"] + EPS)).all()


def test_seq_counts_calls_per_group_from_zero(traced):
    _, _, ev = traced
    coll = ev.filter(pl.col("cat") == "collective").sort("rank", "ts_ns")
    per = coll.group_by("rank", "group", maintain_order=True).agg(seq=pl.col("seq"))
    for row in per.iter_rows(named=True):
        assert row["seq"] == list(range(len(row["seq"])))


def test_p2p_seq_is_unique_and_counts_calls_per_peer(traced):
    layout, _, ev = traced
    p2p = ev.filter(pl.col("cat") == "p2p").sort("rank", "ts_ns")
    for name in ("send", "recv"):
        part = p2p.filter(pl.col("name") == name)
        assert part.select("rank", "peer", "seq").is_duplicated().sum() == 0
        per = part.group_by("rank", "peer", maintain_order=True).agg(seq=pl.col("seq"))
        for row in per.iter_rows(named=True):
            if name == "send" or layout["pp"] > 2 or layout["vpp"] == 1:
                assert row["seq"] == list(range(len(row["seq"])))
            else:  # pp=2, interleaved: receives carry the sender's numbers (two communicators)
                assert sorted(row["seq"]) == list(range(len(row["seq"])))
