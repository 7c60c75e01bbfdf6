"""Each detector stage on tiny hand-built inputs whose answer is written down.

Stage 1 (``peers.compare_peers``), stage 2 (``lateness.collective_lateness``), stage 3
(``bandwidth.link_bandwidth``) and ``verdict.combine``, without a simulator or a trace file:
every expected number below follows from the durations and start times written in the test.
"""

from __future__ import annotations

import math

import polars as pl
import pytest

from mapp.analysis.detect.bandwidth import BandwidthEvidence, link_bandwidth
from mapp.analysis.detect.lateness import LatenessEvidence, collective_lateness
from mapp.analysis.detect.layout import LayoutInfo
from mapp.analysis.detect.peers import compare_peers, leaf_ops
from mapp.analysis.detect.same_work import self_times
from mapp.analysis.detect.thresholds import Thresholds
from mapp.analysis.detect.verdict import combine
from mapp.analysis.graph.matching import match_events
from mapp.analysis.ingest.schema import EVENTS_SCHEMA

MS = 1_000_000  # ns
US = 1_000
CUTS = Thresholds()  # the defaults: --threshold 0.1, the others derived from it
PEERS = {"slow_op": CUTS.slowdown, "min_effect": CUTS.min_effect}  # what compare_peers is given

_STAGE1 = ["rank", "name", "cat", "lane", "ts_ns", "dur_ns", "iteration", "microbatch", "chunk", "layer"]
_COLL = ["rank", "name", "lane", "ts_ns", "dur_ns", "iteration", "group", "group_ranks", "seq", "bytes"]
_P2P = ["rank", "name", "lane", "ts_ns", "dur_ns", "iteration", "peer", "seq", "bytes", "expect"]


def frame(rows: list[dict], columns: list[str]) -> pl.DataFrame:
    schema = {c: EVENTS_SCHEMA.get(c, pl.String()) for c in columns}
    return pl.DataFrame([{c: r.get(c) for c in columns} for r in rows], schema=schema, orient="row")


def coords(sizes: dict[str, int]) -> pl.DataFrame:
    """Megatron's order (TP fastest, then DP, then PP), one host for all."""
    tp, dp = sizes["tp"], sizes["dp"]
    world = tp * dp * sizes["pp"]
    return pl.DataFrame({
        "rank": list(range(world)), "tp": [r % tp for r in range(world)],
        "pp": [r // (tp * dp) for r in range(world)], "dp": [(r // tp) % dp for r in range(world)],
        "host": ["node0"] * world,
    }, schema={"rank": pl.Int32, "tp": pl.Int32, "pp": pl.Int32, "dp": pl.Int32, "host": pl.String})


class Identity:
    """Clocks already agree: aligned times are the raw ones."""

    def to_reference(self, ts: pl.Expr, rank: pl.Expr) -> pl.Expr:
        return ts


def compute_events(ranks, *, iterations=3, microbatches=4, layers=2, base_ms=1.0,
                   factor=lambda rank, it: 1.0, gap_us=lambda rank, it: 20, wobble=True) -> pl.DataFrame:
    """Forward matmuls, back to back on each rank with an idle gap before each.

    Op (mb, layer) takes ``base_ms`` x a deterministic wobble of +/-1% (the same on every rank,
    so peers agree exactly) x ``factor(rank, iteration)``.
    """
    rows = []
    for rank in ranks:
        t = 0
        for it in range(iterations):
            for mb in range(microbatches):
                for layer in range(layers):
                    w = 1.0 + (0.01 * ((mb * layers + layer) % 3 - 1) if wobble else 0.0)
                    dur = int(round(base_ms * MS * w * factor(rank, it)))
                    t += gap_us(rank, it) * US
                    rows.append(dict(rank=rank, name="matmul", cat="compute", lane="stream:7", ts_ns=t, dur_ns=dur,
                                     iteration=it, microbatch=mb, layer=layer))
                    t += dur
            t += 5 * MS  # between iterations
    return frame(rows, _STAGE1)


def row_of(df: pl.DataFrame, rank: int) -> dict:
    return df.filter(pl.col("rank") == rank).row(0, named=True)


# --- stage 1: peers -------------------------------------------------------------------------------


def test_stage1_slow_gpu_is_flagged_at_its_factor_in_every_iteration():
    # dp=4: each rank is compared with its three DP peers; rank 2's matmuls take 1.5x theirs.
    sizes = {"tp": 1, "pp": 1, "dp": 4}
    ev = compute_events(range(4), factor=lambda r, it: 1.5 if r == 2 else 1.0)
    p = compare_peers(ev, coords(sizes), sizes, **PEERS)
    assert p.mode == "dp peers" and p.reason is None
    assert p.ranks["rank"].to_list() == [0, 1, 2, 3]
    slow = row_of(p.ranks, 2)
    assert slow["flagged"] and slow["slowdown"] == pytest.approx(1.5, rel=1e-3)
    assert slow["iterations"] == [0, 1, 2]
    assert slow["share_slow"] == pytest.approx(1.0)  # every op beyond 1.1x
    assert slow["n_ops"] == 3 * 4 * 2
    # excess per iteration: 8 ops x 1 ms x (1.5 - 1) = 4 ms (the wobble averages out to 1.0)
    assert slow["excess_ns"] == pytest.approx(4 * MS, rel=0.01)
    assert slow["busy_ns"] == pytest.approx(12 * MS, rel=0.01)
    for r in (0, 1, 3):
        healthy = row_of(p.ranks, r)
        assert not healthy["flagged"] and healthy["slowdown"] == pytest.approx(1.0, abs=1e-3)
        assert healthy["iterations"] == []
    per = p.rank_iterations.filter(pl.col("rank") == 2)
    assert per["effect"].to_list() == pytest.approx([math.log(1.5)] * 3, rel=1e-3)
    assert per["flagged"].all() and not p.rank_iterations.filter(pl.col("rank") != 2)["flagged"].any()


def test_stage1_a_slowdown_in_one_iteration_is_a_window():
    # rank 1 is 1.4x slower in iteration 1 of 3 only.
    sizes = {"tp": 1, "pp": 1, "dp": 4}
    ev = compute_events(range(4), factor=lambda r, it: 1.4 if (r, it) == (1, 1) else 1.0)
    p = compare_peers(ev, coords(sizes), sizes, **PEERS)
    row = row_of(p.ranks, 1)
    assert row["flagged"] and row["iterations"] == [1]
    assert row["slowdown"] == pytest.approx(1.4, rel=1e-3)
    assert not p.ranks.filter(pl.col("rank") != 1)["flagged"].any()


def test_stage1_below_a_third_of_the_threshold_is_no_flag():
    # rank 3 is 3% slower everywhere: certain (no noise) but under the minimum effect, which
    # --threshold 0.1 sets to 0.1 / 3 = 3.3%.
    sizes = {"tp": 1, "pp": 1, "dp": 4}
    ev = compute_events(range(4), factor=lambda r, it: 1.03 if r == 3 else 1.0)
    p = compare_peers(ev, coords(sizes), sizes, **PEERS)
    assert p.min_effect == pytest.approx(0.1 / 3)
    assert row_of(p.ranks, 3)["slowdown"] == pytest.approx(1.03, rel=1e-3)
    assert not p.ranks["flagged"].any()


def test_stage1_min_effect_is_its_own_cut():
    # the same 3% rank with --min-effect 0.02 (threshold unchanged) is an outlier: the cut that
    # stopped it above is min_effect, not the slowdown threshold
    sizes = {"tp": 1, "pp": 1, "dp": 4}
    ev = compute_events(range(4), factor=lambda r, it: 1.03 if r == 3 else 1.0)
    p = compare_peers(ev, coords(sizes), sizes, slow_op=0.1, min_effect=0.02)
    assert row_of(p.ranks, 3)["flagged"] and p.ranks["flagged"].sum() == 1


def test_stage1_two_peers_compare_each_with_the_other():
    # tp=2, dp=1: "stage peers", two ranks per op; rank 1 is 1.25x. Against the other rank
    # (not their mean) the ratio is 1.25, and stage 2 must agree before a verdict (pairs).
    sizes = {"tp": 2, "pp": 1, "dp": 1}
    ev = compute_events(range(2), factor=lambda r, it: 1.25 if r == 1 else 1.0)
    p = compare_peers(ev, coords(sizes), sizes, **PEERS)
    assert p.mode == "stage peers" and p.pairs
    assert row_of(p.ranks, 1)["flagged"] and row_of(p.ranks, 1)["slowdown"] == pytest.approx(1.25, rel=1e-3)
    assert not row_of(p.ranks, 0)["flagged"]


def test_stage1_one_rank_per_stage_uses_its_own_history_and_stage_balance():
    # tp=dp=1, pp=2: no peer; each rank against its own iterations. Stage 1 runs 1.4x the
    # compute of stage 0 in every iteration: a stage imbalance of 1.4, not a slow rank.
    sizes = {"tp": 1, "pp": 2, "dp": 1}
    ev = compute_events(range(2), factor=lambda r, it: 1.4 if r == 1 else 1.0)
    p = compare_peers(ev, coords(sizes), sizes, **PEERS)
    assert p.mode == "own history"
    assert not p.ranks["flagged"].any()
    stages = {r["pp"]: r for r in p.stages.iter_rows(named=True)}
    assert stages[0]["ratio"] == pytest.approx(1.0) and stages[1]["ratio"] == pytest.approx(1.4, rel=1e-3)
    assert stages[0]["compute_ns"] == pytest.approx(8 * MS, rel=0.01)  # 4 mb x 2 layers x 1 ms


def test_stage1_slow_host_shows_as_launch_gaps_not_compute():
    # rank 0 idles 300 us before each op instead of 20 us: 280 us more before each of 8 ops per
    # iteration, except the trace's very first op (no event before it): (7 + 8 + 8) / 3 x 280 us.
    sizes = {"tp": 1, "pp": 1, "dp": 4}
    ev = compute_events(range(4), gap_us=lambda r, it: 300 if r == 0 else 20)
    p = compare_peers(ev, coords(sizes), sizes, **PEERS)
    row = row_of(p.ranks, 0)
    assert row["gap_flagged"] and not row["flagged"]
    assert row["gap_excess_ns"] == pytest.approx((7 + 8 + 8) / 3 * 280 * US)
    assert not p.ranks.filter(pl.col("rank") != 0)["gap_flagged"].any()
    quiet = compare_peers(ev, coords(sizes), sizes, **PEERS, judge_gaps=False)
    assert not quiet.ranks["gap_flagged"].any()


def test_stage1_waiting_inside_an_op_is_not_its_compute():
    # A 2 ms op with a 0.5 ms collective nested inside it computed for 1.5 ms (its self time);
    # the parent span that contains two child ops is not a leaf.
    ev = frame([
        dict(rank=0, name="layer", cat="compute", lane="t", ts_ns=0, dur_ns=10 * MS, iteration=0),
        dict(rank=0, name="fwd", cat="compute", lane="t", ts_ns=0, dur_ns=2 * MS, iteration=0),
        dict(rank=0, name="bwd", cat="compute", lane="t", ts_ns=3 * MS, dur_ns=4 * MS, iteration=0),
        dict(rank=0, name="all_reduce", cat="collective", lane="t", ts_ns=1 * MS, dur_ns=MS // 2, iteration=0),
    ], _STAGE1)
    leaves = leaf_ops(ev).sort("ts_ns")
    assert leaves["name"].to_list() == ["fwd", "bwd"]
    assert leaves["self_ns"].to_list() == [int(1.5 * MS), 4 * MS]


def test_stage1_a_hosts_time_in_the_cuda_runtime_is_not_its_ops_compute():
    # A GPU job traced host-only: a 100 ms copy of the batch to the GPU that spent 90 ms in
    # cudaMemcpyAsync (its stream draining first) computed for 10 ms; a 1 ms launch of which
    # 0.2 ms was cudaLaunchKernel for 0.8 ms. The runtime calls are no ops of their own.
    ev = frame([
        dict(rank=0, name="aten::copy_", cat="compute", lane="cpu:1", ts_ns=0, dur_ns=100 * MS, iteration=0),
        dict(rank=0, name="cudaMemcpyAsync", cat="other", lane="cpu:1", ts_ns=5 * MS, dur_ns=90 * MS, iteration=0),
        dict(rank=0, name="aten::mm", cat="compute", lane="cpu:1", ts_ns=101 * MS, dur_ns=MS, iteration=0),
        dict(rank=0, name="cudaLaunchKernel", cat="other", lane="cpu:1", ts_ns=101 * MS + MS // 2, dur_ns=MS // 5,
             iteration=0),
        # an annotation of the same category is no runtime call
        dict(rank=0, name="custom", cat="other", lane="cpu:1", ts_ns=103 * MS, dur_ns=MS, iteration=0),
    ], _STAGE1)
    ops = self_times(ev).sort("ts_ns")
    assert ops["name"].to_list() == ["aten::copy_", "aten::mm"]
    assert ops["self_ns"].to_list() == [10 * MS, MS - MS // 5]


def test_stage1_without_a_layout_or_peers_says_why():
    ev = compute_events(range(1), iterations=1)
    p = compare_peers(ev, coords({"tp": 1, "pp": 1, "dp": 1}), {"tp": 1, "pp": 1, "dp": 1}, **PEERS)
    assert p.mode == "skipped" and "single iteration" in p.reason
    p = compare_peers(ev, coords({"tp": 1, "pp": 1, "dp": 1}).with_columns(pp=pl.lit(None, pl.Int32)), None,
                      **PEERS)
    assert p.mode == "skipped" and "no layout" in p.reason


# --- stage 2: lateness ----------------------------------------------------------------------------


def collective_calls(rounds: int, starts: dict, ends: dict, groups: dict[str, list[int]],
                     group_of: dict) -> pl.DataFrame:
    """One collective per (round, instance name); ``starts[name][rank]``/``ends[name]`` in ns
    from the round's start; rounds are 100 ms apart."""
    rows = []
    for k in range(rounds):
        base = k * 100 * MS
        for name, per_rank in starts.items():
            label, members = group_of[name], groups[name]
            for rank in per_rank:  # a member missing from ``per_rank`` never calls it
                ts = base + per_rank[rank]
                rows.append(dict(rank=rank, name="all_reduce", lane="c", ts_ns=ts, dur_ns=base + ends[name] - ts,
                                 iteration=k, group=label, group_ranks=members, seq=k, bytes=1 << 20))
    return frame(rows, _COLL)


def matched(collectives: pl.DataFrame | None = None, p2p: pl.DataFrame | None = None, *, world: int, aligned=True):
    m = match_events(collectives if collectives is not None else frame([], _COLL),
                     p2p if p2p is not None else frame([], _P2P), range(world))
    return m.with_clock(Identity()) if aligned else m


def test_stage2_the_rank_that_starts_every_collective_last_is_flagged():
    # One DP group of four; rank 1 calls every all-reduce 5 ms after rank 0; ranks 2 and 3 at
    # 0.1 and 0.2 ms. Per instance the others wait 5 + 4.9 + 4.8 = 14.7 ms for rank 1, i.e.
    # 4.9 ms each on average; over 10 instances rank 1's net delay is +49 ms, rank 0's -50 ms.
    starts = {"ar": {0: 0, 1: 5 * MS, 2: MS // 10, 3: MS // 5}}
    calls = collective_calls(10, starts, {"ar": 6 * MS}, {"ar": [0, 1, 2, 3]}, {"ar": "dp"})
    late = collective_lateness(matched(calls, world=4), traced=[0, 1, 2, 3])
    assert late.ran and late.reason is None
    r1 = row_of(late.ranks, 1)
    assert r1["instances"] == 10 and r1["last"] == 10
    assert r1["share_last"] == 1.0 and r1["expected_share"] == pytest.approx(0.25)
    assert r1["share_last_dp"] == 1.0
    assert r1["blame_ns"] == pytest.approx(10 * 14.7 * MS)
    assert r1["waited_ns"] == 0
    assert r1["net_ns"] == pytest.approx(49 * MS)
    # binomial: (10 - 2.5) / sqrt(10 x 0.25 x 0.75)
    assert r1["last_z"] == pytest.approx(7.5 / math.sqrt(1.875))
    assert r1["flagged"]
    nets = {r: row_of(late.ranks, r)["net_ns"] for r in (0, 2, 3)}
    assert nets == pytest.approx({0: -50 * MS, 2: -49 * MS, 3: -48 * MS})
    assert late.ranks.filter(pl.col("flagged"))["rank"].to_list() == [1]
    assert late.ranks.filter(pl.col("rank") != 1)["share_last"].to_list() == [0.0, 0.0, 0.0]


def test_stage2_a_victim_late_after_waiting_has_no_net_delay():
    # tp=2 x dp=2; rank 1 (slow GPU) starts its TP all-reduce with rank 0 5 ms late. Rank 0
    # waited in TP, so it comes last to its DP all-reduce with rank 2 (which waits 4.9 ms):
    # last at every DP collective, yet per round it imposed 4.9 ms and suffered 5 ms.
    # Net per round: rank 0 -0.1 ms, rank 1 +9.9 ms, rank 2 -5.0 ms, rank 3 -4.8 ms.
    starts = {"tp0": {0: 0, 1: 5 * MS}, "tp1": {2: 0, 3: MS // 10},
              "dp0": {0: 6 * MS, 2: 11 * MS // 10}, "dp1": {1: 6 * MS, 3: 11 * MS // 10}}
    ends = {"tp0": 6 * MS, "tp1": 11 * MS // 10, "dp0": 7 * MS, "dp1": 7 * MS}
    groups = {"tp0": [0, 1], "tp1": [2, 3], "dp0": [0, 2], "dp1": [1, 3]}
    group_of = {"tp0": "tp", "tp1": "tp", "dp0": "dp", "dp1": "dp"}
    late = collective_lateness(matched(collective_calls(10, starts, ends, groups, group_of), world=4),
                               traced=[0, 1, 2, 3])
    r0, r1 = row_of(late.ranks, 0), row_of(late.ranks, 1)
    assert (r0["share_last_tp"], r0["share_last_dp"]) == (0.0, 1.0)
    assert (r1["share_last_tp"], r1["share_last_dp"]) == (1.0, 1.0)
    assert r0["net_ns"] == pytest.approx(-1 * MS)
    assert r1["net_ns"] == pytest.approx(99 * MS)
    assert row_of(late.ranks, 2)["net_ns"] == pytest.approx(-50 * MS)
    assert row_of(late.ranks, 3)["net_ns"] == pytest.approx(-48 * MS)
    assert late.ranks.filter(pl.col("flagged"))["rank"].to_list() == [1]


def test_stage2_needs_aligned_clocks_and_complete_instances():
    starts = {"ar": {0: 0, 1: MS}}
    calls = collective_calls(3, starts, {"ar": 2 * MS}, {"ar": [0, 1, 2]}, {"ar": "dp"})  # rank 2 never called
    late = collective_lateness(matched(calls, world=3, aligned=False), traced=[0, 1, 2])
    assert not late.ran and "aligned" in late.reason
    late = collective_lateness(matched(calls, world=3), traced=[0, 1, 2])
    assert not late.ran and "complete" in late.reason


# --- stage 3: bandwidth ---------------------------------------------------------------------------


def p2p_calls(links: dict[tuple[int, int], float], *, iterations=2, messages=4, nbytes=1 << 20,
              sender_wait_ms=0.0) -> pl.DataFrame:
    """Each link (src, dst) moves ``messages`` messages of ``nbytes`` per iteration taking
    ``links[...]`` ms once both sides are ready. The sender posts ``sender_wait_ms`` early (its
    span is that much longer: it waited, which is not transfer time)."""
    rows = []
    for it in range(iterations):
        for (src, dst), ms in links.items():
            for k in range(messages):
                t = (it * 1000 + k * 10) * MS
                seq = it * messages + k
                d = int(ms * MS)
                early = int(sender_wait_ms * MS)
                rows.append(dict(rank=src, name="send", lane="p", ts_ns=t - early, dur_ns=d + early, iteration=it,
                                 peer=dst, seq=seq, bytes=nbytes))
                rows.append(dict(rank=dst, name="recv", lane="p", ts_ns=t, dur_ns=d, iteration=it, peer=src,
                                 seq=seq, bytes=nbytes))
    return frame(rows, _P2P)


def hosts(world: int, per_node: int | None = None) -> pl.DataFrame:
    return pl.DataFrame({"rank": list(range(world)),
                         "host": [None if per_node is None else f"n{r // per_node}" for r in range(world)]},
                        schema={"rank": pl.Int32, "host": pl.String})


def test_stage3_one_link_four_times_slower_is_a_slow_link():
    # Four pipeline links move 1 MiB in 1 ms; 0->2 takes 4 ms: ratio 4 to its class's median.
    # The senders post 2 ms early: that wait is not transfer time (the shorter side counts).
    links = {(0, 2): 4.0, (1, 3): 1.0, (4, 6): 1.0, (5, 7): 1.0}
    bw = link_bandwidth(matched(p2p=p2p_calls(links, sender_wait_ms=2.0), world=8), hosts(8), link_threshold=CUTS.link)
    assert bw.ran
    assert len(bw.findings) == 1
    f = bw.findings[0]
    assert (f.kind, f.ranks) == ("slow_link", (0, 2))
    assert f.slowdown == pytest.approx(4.0, rel=1e-6)
    assert f.observations[0]["iterations"] == [0, 1] and f.observations[0]["what"] == "p2p"
    # 4 messages of 3 ms beyond the class's 1 ms, per iteration
    assert f.excess_ns == pytest.approx(4 * 3 * MS)
    healthy = bw.observations.filter(pl.col("obs") != [0, 2])
    assert healthy["ratio"].to_list() == pytest.approx([1.0] * 6) and not healthy["slow"].any()
    # effective bandwidth: 1 MiB in 1 ms = 1.048576 GB/s (bytes per ns)
    assert healthy["gbps"].to_list() == pytest.approx([(1 << 20) / MS] * 6)


def test_stage3_every_inter_node_link_of_one_rank_slow_is_its_nic():
    # Two nodes of four ranks; rank 1's two inter-node links are 3x, its intra-node link and
    # every other rank's links are fine: a slow NIC on rank 1, not two slow links.
    links = {(1, 5): 3.0, (1, 6): 3.0, (1, 2): 1.0, (0, 4): 1.0, (2, 6): 1.0, (3, 7): 1.0, (0, 3): 1.0}
    bw = link_bandwidth(matched(p2p=p2p_calls(links), world=8), hosts(8, per_node=4), link_threshold=CUTS.link)
    assert [(f.kind, f.ranks) for f in bw.findings] == [("slow_nic", (1,))]
    f = bw.findings[0]
    assert f.slowdown == pytest.approx(3.0, rel=1e-6) and f.healthy_links == 0
    assert sorted(tuple(o["ranks"]) for o in f.observations) == [(1, 5), (1, 6)]


def test_stage3_collective_transfer_time_is_the_last_arrivers():
    # Two DP groups of two ranks all-reduce 1 MiB; group {0,1}'s last arriver (who did not
    # wait) takes 2 ms, group {2,3}'s 0.5 ms, in every round. The other member of each waited
    # 3 ms more. Two of a kind are compared with each other (a median of two would halve the
    # difference): 2 / 0.5 = 4 and 0.25; and being so in every round, {0,1} is a slow link.
    starts = {"a": {0: 0, 1: 3 * MS}, "b": {2: 0, 3: 3 * MS}}
    ends = {"a": 5 * MS, "b": int(3.5 * MS)}
    calls = collective_calls(3, starts, ends, {"a": [0, 1], "b": [2, 3]}, {"a": "dp", "b": "dp"})
    bw = link_bandwidth(matched(calls, world=4), hosts(4), link_threshold=CUTS.link)
    obs = {tuple(r["obs"]): r for r in bw.observations.filter(pl.col("iteration") == 0).iter_rows(named=True)}
    assert obs[(0, 1)]["time_ns"] == 2 * MS and obs[(2, 3)]["time_ns"] == MS // 2
    assert obs[(0, 1)]["ratio"] == pytest.approx(4.0) and obs[(2, 3)]["ratio"] == pytest.approx(0.25)
    assert obs[(0, 1)]["what"] == "all_reduce/dp"
    assert [(f.kind, f.ranks) for f in bw.findings] == [("slow_link", (0, 1))]


def test_stage3_a_link_alone_in_its_class_is_not_compared():
    bw = link_bandwidth(matched(p2p=p2p_calls({(0, 1): 4.0}), world=2), hosts(2), link_threshold=CUTS.link)
    assert not bw.ran and "only one of its kind" in bw.reason
    # what it moved at best is said, for the user to weigh against the hardware: 1 MiB in 4 ms
    assert bw.reason.endswith("(at best: p2p 0<->1 1.0 MB in 4.00 ms, 262.1 MB/s)")
    bw = link_bandwidth(matched(world=2), hosts(2), link_threshold=CUTS.link)
    assert not bw.ran and "no matched" in bw.reason



def test_stage3_a_jobs_only_link_is_weighed_against_the_slowest_fabric():
    # PP2 on 2 ranks: one link, nothing like it. 4 messages of 1 MiB an iteration, 4 ms each once
    # both ends were ready; 10 Gb Ethernet would take 1 ms + 1 MiB at 1.25 GB/s = 1.84 ms. The
    # excess, 4 x 2.16 ms, of a 50 ms iteration: without it the iteration would take 41.4 ms
    bw = link_bandwidth(matched(p2p=p2p_calls({(0, 1): 4.0}), world=2), hosts(2), link_threshold=CUTS.link,
                        iteration_ns=50 * MS)
    allowed_ms = 1 + (1 << 20) / 1.25 / 1e6
    excess_ms = 4 * (4.0 - allowed_ms)
    assert bw.ran and [(f.kind, f.ranks) for f in bw.findings] == [("slow_link", (0, 1))]
    f = bw.findings[0]
    assert f.excess_ns == pytest.approx(excess_ms * MS)
    assert f.slowdown == pytest.approx(50 / (50 - excess_ms))
    assert f.observations[0]["ratio"] == pytest.approx(4.0 / allowed_ms)
    assert f.observations[0]["iterations"] == [0, 1]
    assert "10 Gb Ethernet" in f.observations[0]["compared"]


def test_stage3_a_jobs_only_link_as_fast_as_ethernet_is_not_slow():
    # the same link at 1.5 ms a message: within the 1.84 ms 10 Gb Ethernet would take
    bw = link_bandwidth(matched(p2p=p2p_calls({(0, 1): 1.5}), world=2), hosts(2), link_threshold=CUTS.link,
                        iteration_ns=50 * MS)
    assert not bw.ran and bw.findings == []
    assert "the job's one p2p link took no longer than 10 Gb Ethernet would" in bw.reason

def test_stage3_messages_with_an_async_side_have_no_transfer_time():
    # The same four links with 0->2 four times slower, but every send is async (its span is its
    # 10 us post, MegaDPP's): the shorter side would be the post, 10 us for every link, and
    # 0->2 would hide among the others at a "bandwidth" of 100 GB/s. Such messages are left out.
    links = {(0, 2): 4.0, (1, 3): 1.0, (4, 6): 1.0, (5, 7): 1.0}
    calls = p2p_calls(links).with_columns(
        dur_ns=pl.when(pl.col("name") == "send").then(10 * US).otherwise(pl.col("dur_ns")),
        **{"async": pl.col("name") == "send"},
    )
    bw = link_bandwidth(matched(p2p=calls, world=8), hosts(8), link_threshold=CUTS.link)
    assert not bw.ran and "no matched" in bw.reason
    # a blocking link beside them is still measured
    both = pl.concat([calls, p2p_calls({(8, 9): 1.0, (10, 11): 1.0}).with_columns(pl.lit(False).alias("async"))])
    bw = link_bandwidth(matched(p2p=both, world=12), hosts(12), link_threshold=CUTS.link)
    assert bw.ran and sorted(tuple(o) for o in bw.observations["obs"].unique().to_list()) == [(8, 9), (10, 11)]


# --- verdict.combine ------------------------------------------------------------------------------


def layout_info(sizes: dict[str, int]) -> LayoutInfo:
    c = coords(sizes)
    return LayoutInfo(sizes, "--layout", c, len(c))


def _rank_2_slow_and_last(slowdown_threshold: float):
    """The three stages on one job: tp=1, pp=1, dp=4; rank 2 computes 1.5x slower and so comes
    last to every all-reduce (4 ms after the others, who each wait for it). ``combine``'s answer."""
    sizes = {"tp": 1, "pp": 1, "dp": 4}
    info = layout_info(sizes)
    peers = compare_peers(compute_events(range(4), factor=lambda r, it: 1.5 if r == 2 else 1.0), info.ranks, sizes,
                          **PEERS)
    starts = {"ar": {0: 0, 1: MS // 10, 2: 4 * MS, 3: MS // 5}}
    matching = matched(collective_calls(3, starts, {"ar": 5 * MS}, {"ar": [0, 1, 2, 3]}, {"ar": "dp"}), world=4)
    late = collective_lateness(matching, [0, 1, 2, 3])
    bw = link_bandwidth(matching, info.ranks.select("rank", "host"), link_threshold=CUTS.link)
    return combine(peers, late, bw, info, slowdown_threshold=slowdown_threshold, imbalance_threshold=CUTS.imbalance,
                   iteration_ns=20 * MS)


def test_combine_a_slow_gpu_with_stage_2_agreeing():
    suspects, imbalance, victims, grid, *_ = _rank_2_slow_and_last(CUTS.slowdown)
    assert [(s.rank, s.kind) for s in suspects] == [(2, "slow_compute")]
    s = suspects[0]
    assert s.slowdown == pytest.approx(1.5, rel=1e-3)
    assert s.iterations == [0, 1, 2]
    assert s.excess_ns == pytest.approx(4 * MS, rel=0.01)  # pp=1: no pipeline factor
    assert s.without_ns == pytest.approx(16 * MS, rel=0.01)
    assert s.evidence["lateness"]["share_last"] == 1.0
    # 0.5 + 0.3 x (1 - cut/z) + 0.19 x stage 2's margin: noiseless ops put stage 1's z far past
    # its cut (margin ~1) and stage 2 corroborates, so beyond 0.8
    assert 0.8 < s.confidence <= 0.99
    assert imbalance == []
    # victims: its peers that waited more than the median rank (waits 4, 3.9, 3.8 and 0 ms per
    # instance: median 3.85), so rank 3 is not one
    assert victims == [0, 1]
    assert dict(zip(grid["rank"].to_list(), grid["role"].to_list())) == {0: "victim", 1: "victim", 2: "suspect",
                                                                          3: "ok"}


def test_a_rank_under_the_threshold_is_no_suspect_and_makes_no_victims():
    # The job above with --threshold 0.6: rank 2 (1.5x) is below it. It is reported as such,
    # and its peers, which waited for it, are not marked victims of a suspect there is not.
    suspects, _, victims, grid, below, _ = _rank_2_slow_and_last(0.6)
    assert suspects == [] and victims == []
    assert [(s.rank, s.kind, round(s.slowdown, 2)) for s in below] == [(2, "slow_compute", 1.5)]
    assert set(grid["role"].to_list()) == {"ok"}


def test_combine_turns_a_slow_link_into_a_suspect_and_stage_imbalance_into_imbalance():
    # pp=2 x dp=3: stage 1 (ranks 3-5) computes 1.4x stage 0 (imbalance, no suspect); pipeline
    # link 0->3 is 4x the other two (1->4, 2->5), which is 4x its class's median.
    sizes = {"tp": 1, "pp": 2, "dp": 3}
    info = layout_info(sizes)
    ev = compute_events(range(6), factor=lambda r, it: 1.4 if r >= 3 else 1.0)
    peers = compare_peers(ev, info.ranks, sizes, **PEERS)
    matching = matched(p2p=p2p_calls({(0, 3): 4.0, (1, 4): 1.0, (2, 5): 1.0}), world=6)
    bw = link_bandwidth(matching, info.ranks.select("rank", "host"), link_threshold=CUTS.link)
    late = LatenessEvidence(False, "no complete collective instance with two or more traced members")
    suspects, imbalance, victims, grid, *_ = combine(peers, late, bw, info, slowdown_threshold=CUTS.slowdown,
                                                 imbalance_threshold=CUTS.imbalance, iteration_ns=30 * MS)
    assert [(s.rank, s.kind, s.peer) for s in suspects] == [(0, "slow_link", 3)]
    assert suspects[0].slowdown == pytest.approx(4.0)
    assert suspects[0].label() == "0<->3"
    assert suspects[0].iterations == [0, 1] and suspects[0].excess_ns == pytest.approx(4 * 3 * MS)
    assert [(i.kind, i.evidence["stage"]) for i in imbalance] == [("stage", 1)]
    assert imbalance[0].evidence["ratio"] == pytest.approx(1.4, rel=1e-3)
    assert victims == []
    assert grid.filter(pl.col("role") == "suspect")["rank"].to_list() == [0, 3]


def test_combine_a_stage_1_flag_that_stage_2_contradicts_is_dropped_with_two_peers():
    # Two peers (tp=2): rank 1 looks 1.25x slower, but stage 2 finds it waiting on rank 0,
    # never keeping rank 0 waiting: with two ranks either could be the noisy one, so no verdict.
    sizes = {"tp": 2, "pp": 1, "dp": 1}
    info = layout_info(sizes)
    peers = compare_peers(compute_events(range(2), factor=lambda r, it: 1.25 if r == 1 else 1.0), info.ranks,
                          sizes, **PEERS)
    assert row_of(peers.ranks, 1)["flagged"] and peers.pairs
    starts = {"ar": {0: 2 * MS, 1: 0}}  # rank 0 comes last
    late = collective_lateness(matched(collective_calls(4, starts, {"ar": 3 * MS}, {"ar": [0, 1]}, {"ar": "tp"}),
                                       world=2), [0, 1])
    assert row_of(late.ranks, 1)["net_ns"] < 0
    bw = BandwidthEvidence(False, "no matched p2p message or complete collective")
    suspects, *_ = combine(peers, late, bw, info, slowdown_threshold=CUTS.slowdown,
                           imbalance_threshold=CUTS.imbalance, iteration_ns=20 * MS)
    assert suspects == []
    # the same stage-1 evidence with stage 2 agreeing (rank 1 last) is a suspect
    starts = {"ar": {0: 0, 1: 2 * MS}}
    late = collective_lateness(matched(collective_calls(4, starts, {"ar": 3 * MS}, {"ar": [0, 1]}, {"ar": "tp"}),
                                       world=2), [0, 1])
    suspects, *_ = combine(peers, late, bw, info, slowdown_threshold=CUTS.slowdown,
                           imbalance_threshold=CUTS.imbalance, iteration_ns=20 * MS)
    assert [(s.rank, s.kind) for s in suspects] == [(1, "slow_compute")]


def kernel_events(ranks, *, iterations=3, extra_gemms=lambda rank: 0, extra_gap_ms=0.0,
                  items=lambda rank, it: 0, stall_ms=lambda rank: 0.0) -> pl.DataFrame:
    """A profiler trace's GPU stream: per iteration 8 GEMMs and 40 elementwise kernels of 1 ms
    each (``shape`` recorded, as Kineto's grid x block), 20 us apart; a rank with
    ``extra_gemms`` runs that many more GEMMs of the same shape, each after an idle gap of
    ``extra_gap_ms`` (its host launching them late); ``items``: 0.3 ms ``item`` calls (a log
    line's); ``stall_ms``: host time before each iteration's first kernel."""
    rows = []
    for rank in ranks:
        t = 0
        for it in range(iterations):
            calls = ([("gemm", "[2,66,1]x[384,1,1]", MS)] * (8 + extra_gemms(rank))
                     + [("elementwise", "[512,1,1]x[128,1,1]", MS)] * 40 + [("item", "[1,1,1]x[1,1,1]", 3 * MS // 10)]
                     * items(rank, it))
            t += int(stall_ms(rank) * MS)
            for k, (name, shape, dur) in enumerate(calls):
                t += 20 * US + (int(extra_gap_ms * MS) if 8 <= k < 8 + extra_gemms(rank) else 0)
                rows.append(dict(rank=rank, name=name, cat="compute", lane="stream:7", ts_ns=t, dur_ns=dur,
                                 iteration=it, shape=shape))
                t += dur
            t += 5 * MS
    return frame(rows, [*_STAGE1, "shape"])


TP2 = {"tp": 2, "pp": 1, "dp": 1}


def _rank_1_last() -> LatenessEvidence:
    """Two TP peers, rank 1 last at 12 all-reduces (2 ms after rank 0): far beyond chance."""
    calls = collective_calls(12, {"ar": {0: 0, 1: 2 * MS}}, {"ar": 3 * MS}, {"ar": [0, 1]}, {"ar": "tp"})
    return collective_lateness(matched(calls, world=2), [0, 1])


def _combined(ev: pl.DataFrame, sizes: dict, late: LatenessEvidence | None = None) -> list:
    info = layout_info(sizes)
    peers = compare_peers(ev, info.ranks, sizes, **PEERS)
    late = late or LatenessEvidence(False, "no complete collective instance with two or more traced members")
    bw = BandwidthEvidence(False, "no matched p2p message or complete collective")
    suspects, _, _, _, below, _ = combine(peers, late, bw, info, slowdown_threshold=CUTS.slowdown,
                                       imbalance_threshold=CUTS.imbalance, iteration_ns=80 * MS)
    return suspects + below     # what was judged, the threshold's cut aside (the tests read slowdowns)


def test_combine_extra_calls_are_judged_as_the_work_they_add_and_explain_its_idle_gaps():
    # Two TP peers, profiler-like kernels: rank 1 runs 12 GEMMs an iteration where rank 0 runs
    # 8, beside 40 other kernels alike: 52 ms of kernels against 48, 1.083x, under the 1.1
    # threshold. The calls are counted exactly: its GEMMs take 1.5x their time on rank 0. Its
    # host launching them late idles its GPU 3 ms before each (12 ms an iteration, more than
    # the 4 ms of extra kernels) and it comes last to every all-reduce: extra work, not a slow
    # host (a real pair of H100s, extra GEMMs in each layer: named a slow host before; here
    # too, at 1.25x, with the extra calls not counted).
    ev = kernel_events(range(2), extra_gemms=lambda r: 4 if r == 1 else 0, extra_gap_ms=3.0)
    peers = compare_peers(ev, coords(TP2), TP2, **PEERS)
    assert peers.pairs and row_of(peers.ranks, 1)["slowdown"] == pytest.approx(52 / 48, rel=1e-3)
    suspects = _combined(ev, TP2, _rank_1_last())
    assert [(s.rank, s.kind) for s in suspects] == [(1, "slow_compute")]
    assert suspects[0].slowdown == pytest.approx(1.5, rel=1e-3)
    assert suspects[0].evidence["peers"]["added_work"]["excess_ms_per_iteration"] == pytest.approx(4.0, rel=1e-3)


def test_combine_a_gpu_slower_on_the_same_calls_keeps_its_whole_slowdown():
    # The same kernels, as many calls on both ranks, rank 1's 1.3x slower: no work added, so
    # its slowdown is its compute's over all kernels, and a slower GPU is no slow host.
    ev = kernel_events(range(2)).with_columns(
        dur_ns=pl.when(pl.col("rank") == 1).then(pl.col("dur_ns") * 13 // 10).otherwise(pl.col("dur_ns")))
    suspects = _combined(ev, TP2, _rank_1_last())
    assert [(s.rank, s.kind) for s in suspects] == [(1, "slow_compute")]
    assert suspects[0].slowdown == pytest.approx(1.3, rel=1e-3)
    assert "added_work" not in suspects[0].evidence["peers"]


def test_stage1_a_mark_of_no_duration_is_no_op_and_hides_no_span():
    # The MegatronApp tracer writes ``loss`` as a begin and an end at one timestamp, at the start
    # of each microbatch's backward. Taken for an op it times nothing (every rank ties at the
    # floor) and, as the backward's only child, made the backward no leaf: a 1.3x GPU in a
    # simulated TP2 x PP2 x DP4 job read 1.065x, under the threshold. Here dp=4, rank 2 1.3x.
    sizes = {"tp": 1, "pp": 1, "dp": 4}
    rows = []
    for rank in range(4):
        f = 1.3 if rank == 2 else 1.0
        t = 0
        for it in range(3):
            for mb in range(4):
                fwd, bwd = int(MS * f), int(2 * MS * f)
                rows.append(dict(rank=rank, name="forward", cat="compute", lane="stream:7", ts_ns=t + 20 * US,
                                 dur_ns=fwd, iteration=it, microbatch=mb))
                t += 20 * US + fwd
                rows.append(dict(rank=rank, name="backward", cat="compute", lane="stream:7", ts_ns=t + 20 * US,
                                 dur_ns=bwd, iteration=it, microbatch=mb))
                rows.append(dict(rank=rank, name="loss", cat="compute", lane="stream:7", ts_ns=t + 20 * US, dur_ns=0,
                                 iteration=it, microbatch=mb))
                t += 20 * US + bwd
            t += 5 * MS
    p = compare_peers(frame(rows, _STAGE1), coords(sizes), sizes, **PEERS)
    slow = row_of(p.ranks, 2)
    assert slow["flagged"] and slow["slowdown"] == pytest.approx(1.3, rel=1e-3)
    assert slow["n_ops"] == 3 * 4 * 2   # forward and backward of each microbatch; no loss mark


def test_combine_a_few_extra_small_calls_are_no_extra_work():
    # dp=4, rank 0 logs: 8 ``item`` calls a step where its peers make 1 (0.3 ms each, 1.04x
    # its compute). They are no real part of its work: it is not named at their 8x.
    sizes = {"tp": 1, "pp": 1, "dp": 4}
    for s in _combined(kernel_events(range(4), items=lambda r, it: 8 if r == 0 else 1), sizes):
        assert s.slowdown < 1 + CUTS.slowdown and "added_work" not in s.evidence["peers"]
    # a log line in one step of eight is no lasting extra work either, beside a 1.05x GPU
    ev = kernel_events(range(4), iterations=8, items=lambda r, it: (30 if r == 0 else 1) if it == 0 else 0)
    ev = ev.with_columns(dur_ns=pl.when(pl.col("rank") == 0).then(pl.col("dur_ns") * 105 // 100)
                         .otherwise(pl.col("dur_ns")))
    assert [(s.rank, round(s.slowdown, 3)) for s in _combined(ev, sizes)] == [(0, 1.05)]
    # a host that stalls 10 ms a step and makes 3 more item calls is still a slow host
    ev = kernel_events(range(2), iterations=8, items=lambda r, it: 4 if r == 1 else 1,
                       stall_ms=lambda r: 10.0 if r == 1 else 0.0)
    assert [(s.rank, s.kind) for s in _combined(ev, TP2, _rank_1_last())] == [(1, "slow_host")]


def test_combine_pipeline_stages_are_not_compared_on_their_calls():
    # pp=2, one rank a stage: stage 0 runs 10 GEMMs a step, stage 1 8 (an uneven split of
    # layers, imbalance): different programs, so calls are not compared across them.
    suspects = _combined(kernel_events(range(2), extra_gemms=lambda r: 2 if r == 0 else 0), {"tp": 1, "pp": 2, "dp": 1})
    assert all("added_work" not in s.evidence.get("peers", {}) and s.slowdown < 1 + CUTS.slowdown for s in suspects)


def test_stage3_a_link_moving_sizes_its_like_link_does_not_is_named_though_no_transfer_is_timed():
    # PP2 x DP2 on GPUs under the profiler: every pipeline exchange is posted asynchronously (a
    # batched p2p's CPU records), so no transfer has a time. Both links move 4 x 16 MiB an
    # iteration; link 1-3 also 4 x 512 MB (4 H200s: 31.5x its like link's bytes). Its extra
    # bytes name it; its cost is unknown, not 0 ms, which the verdict must not weigh as nothing.
    p2p = p2p_calls({(0, 2): 1.0, (1, 3): 1.0}, nbytes=16 << 20)
    extra = p2p_calls({(1, 3): 1.0}, nbytes=512_000_000).with_columns(seq=pl.col("seq") + 100)
    calls = pl.concat([p2p, extra]).with_columns(**{"async": pl.lit(True)})
    bw = link_bandwidth(matched(p2p=calls, world=4), hosts(4), link_threshold=CUTS.link)
    assert [(f.kind, f.ranks) for f in bw.findings] == [("slow_link", (1, 3))]
    f = bw.findings[0]
    assert f.slowdown == pytest.approx((4 * (16 << 20) + 4 * 512_000_000) / (4 * (16 << 20)))
    assert f.observations[0]["compared"] == "bytes moved" and f.observations[0]["timed"] is False


def test_a_kernel_is_the_work_of_the_op_that_launched_it():
    # cuBLASLt's persistent GEMM kernels on Hopper launch one block per SM whatever the problem:
    # on 2 H200s one nvjet kernel and grid ran a 3072^3 matmul at 218 us and another GEMM at
    # 74 us, so by grid and block alone two ranks' calls of "one kind" were different work.
    # A kernel's shape is also the name and input dims of the CPU op with its External id.
    from mapp.analysis.detect.detector import _launched_by

    gemm, grid = "nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopA_NNT", "[2, 66, 1]x[384, 1, 1]"
    rows = [
        # rank, name, lane, shape, external_id
        (0, "aten::mm", "cpu:1", "[[3072, 3072], [3072, 3072]]", "10"),
        (0, gemm, "stream:7", grid, "10"),
        (0, "aten::mm", "cpu:1", "[[3072, 9216], [9216, 3072]]", "11"),
        (0, gemm, "stream:7", grid, "11"),
        (0, gemm, "stream:7", grid, None),             # launched before the profiling window
        (1, gemm, "stream:7", grid, "10"),             # rank 1's id 10 is another rank's op
        (1, "aten::mm", "cpu:1", "[[3072, 3072], [3072, 3072]]", "10"),
    ]
    ev = pl.DataFrame(rows, schema=["rank", "name", "lane", "shape", "external_id"], orient="row")
    out = _launched_by(ev)
    assert "external_id" not in out.columns and out["name"].to_list() == ev["name"].to_list()
    assert out["shape"].to_list() == [
        "[[3072, 3072], [3072, 3072]]",
        f"{grid} <- aten::mm [[3072, 3072], [3072, 3072]]",
        "[[3072, 9216], [9216, 3072]]",
        f"{grid} <- aten::mm [[3072, 9216], [9216, 3072]]",
        grid,
        f"{grid} <- aten::mm [[3072, 3072], [3072, 3072]]",
        "[[3072, 3072], [3072, 3072]]",
    ]


def test_without_shapes_a_kernel_is_a_call_of_its_op_by_name_counted_once():
    # Recorded without shapes, the op that launched a kernel is known by name only: GEMMs of
    # other sizes (a replica of longer sequences) run as other kernels, one ``aten::mm`` call
    # each; a split-K GEMM's reduction kernel is the same call, not another.
    from mapp.analysis.detect.detector import _launched_by

    gemm, red, grid = "nvjet_sm90_tst_320x128", "splitKreduce_kernel", "[2, 66, 1]x[384, 1, 1]"
    rows = [
        # rank, name, cat, lane, shape, external_id
        (0, "aten::mm", "other", "cpu:1", None, "10"),
        (0, gemm, "compute", "stream:7", grid, "10"),
        (0, red, "compute", "stream:7", "[4, 1, 1]x[128, 1, 1]", "10"),
        (0, "aten::mm", "other", "cpu:1", None, "11"),
        (0, gemm, "compute", "stream:7", grid, "11"),
        (0, "aten::copy_", "other", "cpu:1", None, "12"),
        (0, "Memcpy HtoD", "memory", "stream:7", None, "12"),
        (0, gemm, "compute", "stream:7", grid, None),             # launched before the window
    ]
    ev = pl.DataFrame(rows, schema=["rank", "name", "cat", "lane", "shape", "external_id"], orient="row")
    out = _launched_by(ev)
    assert out["shape"].to_list() == [None, f"{grid} <- aten::mm", "[4, 1, 1]x[128, 1, 1] <- aten::mm", None,
                                      f"{grid} <- aten::mm", None, None, grid]
    assert out["launch"].to_list() == [False, True, False, False, True, False, False, False]


def test_ranks_joined_by_their_groups_through_others_run_one_program():
    # Plain TP x DP over gloo (4 processes on 2 cores): gloo names no group, and the calls'
    # timing showed {0,1}, {0,2} and {1,3} but not the TP group {2,3}. Asked to share a group
    # with every peer, ranks 2 and 3 each stood alone (groups of 2, 1 and 1), and rank 3, whose
    # matmuls ran 1.45x, had no peer to be slower than. Joined through others, they are one job.
    from mapp.analysis.detect.program import program_groups

    ops = pl.DataFrame({"rank": [0, 1, 2, 3], "name": ["aten::mm"] * 4, "shape": ["[[64,256],[256,256]]"] * 4})
    seen = [frozenset({0, 1}), frozenset({0, 2}), frozenset({1, 3})]
    programs, what = program_groups(ops, set(), [0, 1, 2, 3], seen)
    assert programs["program"].n_unique() == 1 and what.endswith("all 4 compared")
    # two jobs that never communicate, even through others, stay apart; p2p partners too
    programs, _ = program_groups(ops, set(), [0, 1, 2, 3], [frozenset({0, 1}), frozenset({2, 3})])
    assert programs.sort("rank")["program"].to_list() == [0, 0, 1, 1]
    programs, _ = program_groups(ops, {(0, 2), (1, 3)}, [0, 1, 2, 3], seen + [frozenset({2, 3})])
    assert programs.sort("rank")["program"].to_list() == [0, 0, 1, 1]


def _unknown(ranks: list[int]) -> LayoutInfo:
    none = pl.Series([None] * len(ranks), dtype=pl.Int32)
    table = pl.DataFrame({"rank": pl.Series(ranks, dtype=pl.Int32), "tp": none, "pp": none, "dp": none,
                          "host": pl.Series([None] * len(ranks), dtype=pl.String)})
    return LayoutInfo(None, "unknown", table, len(ranks))


def _both(pairs: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Each message and one back, later (a pipeline's activations and gradients)."""
    return pairs + [(b, a, t + 100) for a, b, t in pairs]


def _messages(pairs: list[tuple[int, int, int]]) -> pl.DataFrame:
    """Matched p2p messages (src, dst, when the send started, in ms)."""
    return pl.DataFrame({"src": [a for a, _, _ in pairs], "dst": [b for _, b, _ in pairs],
                         "send_start_aligned_ns": [int(t * MS) for _, _, t in pairs]},
                        schema={"src": pl.Int32, "dst": pl.Int32, "send_start_aligned_ns": pl.Int64})


def test_ranks_whose_messages_form_one_chain_are_a_pipelines_stages_in_its_order():
    # a pipeline on the world group alone (torch.distributed.pipelining): ranks 2 - 0 - 3 - 1,
    # the first activation sent by rank 1 at 1 ms, gradients back later
    from mapp.analysis.detect.layout import from_p2p_chain

    chain = [(1, 3, 1), (3, 0, 2), (0, 2, 3), (2, 0, 4), (0, 3, 5), (3, 1, 6)]
    info = from_p2p_chain(_unknown([0, 1, 2, 3]), _messages(chain))
    assert info.known and info.sizes == {"tp": 1, "pp": 4, "dp": 1} and info.source == "p2p chain"
    assert dict(info.ranks.select("rank", "pp").iter_rows()) == {1: 0, 3: 1, 0: 2, 2: 3}
    assert info.describe() == "tp=1,pp=4,dp=1 (from p2p chain)"
    # the same messages, the first one sent the other way: the chain's other end is its first stage
    turned = from_p2p_chain(_unknown([0, 1, 2, 3]), _messages([(2, 0, 0)] + chain))
    assert dict(turned.ranks.select("rank", "pp").iter_rows()) == {2: 0, 0: 1, 3: 2, 1: 3}


@pytest.mark.parametrize("pairs", [
    _both([(0, 1, 1), (1, 2, 2), (2, 3, 3), (3, 0, 4)]),     # a ring: no first stage
    _both([(0, 1, 1), (0, 2, 2), (0, 3, 3)]),                # a star: rank 0 talks to every other
    _both([(0, 1, 1), (2, 3, 2)]),                           # two chains: two jobs, or replicas of one
    _both([(0, 1, 1), (1, 2, 2)]),                           # rank 3 exchanges with no one
    [(0, 1, 1), (1, 2, 2), (2, 3, 3)],                # one way only: no gradient comes back
])
def test_messages_that_are_no_pipelines_chain_leave_the_layout_unknown(pairs):
    from mapp.analysis.detect.layout import from_p2p_chain

    info = from_p2p_chain(_unknown([0, 1, 2, 3]), _messages(pairs))
    assert not info.known and info.source == "unknown"


def test_neighbours_that_trade_with_both_sides_at_once_are_no_pipeline():
    # 4 strips of a grid trading boundary rows every 10 ms: each middle rank sends to both its
    # neighbours within 0.05 ms (a halo exchange); a pipeline's middle stage computes between a
    # send forward and one back
    from mapp.analysis.detect.layout import exchanges_at_once, from_p2p_chain

    halo = [m for t in range(0, 100, 10) for m in
            [(0, 1, t), (1, 0, t), (1, 2, t + 0.05), (2, 1, t), (2, 3, t + 0.05), (3, 2, t)]]
    assert exchanges_at_once(_messages(halo))
    assert not from_p2p_chain(_unknown([0, 1, 2, 3]), _messages(halo)).known
    # the same links, the sends back 5 ms after the sends forward: stages, in a chain
    piped = [m for t in range(0, 100, 10) for m in
             [(0, 1, t), (1, 2, t + 1), (2, 3, t + 2), (3, 2, t + 5), (2, 1, t + 6), (1, 0, t + 7)]]
    assert not exchanges_at_once(_messages(piped))
    assert from_p2p_chain(_unknown([0, 1, 2, 3]), _messages(piped)).sizes == {"tp": 1, "pp": 4, "dp": 1}


def test_neighbours_that_pair_off_by_turns_are_no_pipeline():
    # replica exchange on 4 ranks: pairs 0-1 and 2-3 swap on even steps, 1-2 on odd ones; a
    # pipeline moves every microbatch through every link in every step
    from mapp.analysis.detect.layout import from_p2p_chain, links_take_turns

    def stepped(pairs):
        return _messages([(a, b, t) for a, b, t, _ in pairs]).with_columns(
            iteration=pl.Series([i for *_, i in pairs], dtype=pl.Int32))

    swaps = [m for it in range(8) for m in
             ([(0, 1, it * 100, it), (1, 0, it * 100, it), (2, 3, it * 100, it), (3, 2, it * 100, it)] if it % 2 == 0
              else [(1, 2, it * 100, it), (2, 1, it * 100, it)])]
    assert links_take_turns(stepped(swaps))
    assert not from_p2p_chain(_unknown([0, 1, 2, 3]), stepped(swaps)).known
    piped = [(a, b, it * 1000 + t, it) for it in range(8)
             for a, b, t in [(0, 1, 1), (1, 2, 2), (2, 3, 3), (3, 2, 305), (2, 1, 306), (1, 0, 307)]]
    assert not links_take_turns(stepped(piped))
    assert from_p2p_chain(_unknown([0, 1, 2, 3]), stepped(piped)).sizes == {"tp": 1, "pp": 4, "dp": 1}


def test_a_chain_of_ranks_that_each_run_the_whole_model_is_no_pipeline():
    # every rank computing a loss runs the whole model on its part of the data: its chain of
    # messages (a sequence's carries) makes no stages
    from mapp.analysis.detect.layout import from_p2p_chain, loss_everywhere

    chain = _messages(_both([(0, 1, 1), (1, 2, 2), (2, 3, 3)]))
    assert not from_p2p_chain(_unknown([0, 1, 2, 3]), chain, whole_model=True).known
    ops = pl.DataFrame({"rank": [0, 1, 2, 3, 0, 1, 2, 3], "cat": ["compute"] * 8,
                        "name": ["aten::mm"] * 4 + ["aten::nll_loss_forward"] * 4})
    assert loss_everywhere(ops)
    # a pipeline's last stage alone computes the loss
    assert not loss_everywhere(ops.filter((pl.col("rank") == 3) | (pl.col("name") == "aten::mm")))


def test_ranks_that_each_hold_as_many_parameters_hold_the_whole_model():
    # a pipeline's stages hold different layers (the corpora's: 56, 52, 52 and 64 gradients
    # accumulated a step on megatron-core's PP4); replicas of one model hold as many each
    from mapp.analysis.detect.layout import parameters_everywhere

    def ops(counts):
        rows = [(r, it, "torch::autograd::AccumulateGrad") for r, n in enumerate(counts) for it in range(3) for _ in range(n)]
        rows += [(r, it, "aten::mm") for r in range(len(counts)) for it in range(3)]
        return pl.DataFrame(rows, schema={"rank": pl.Int32, "iteration": pl.Int32, "name": pl.String}, orient="row")

    assert parameters_everywhere(ops([10, 10, 10, 10]))
    assert not parameters_everywhere(ops([56, 52, 52, 64]))
    assert not parameters_everywhere(ops([0, 0, 0, 0]))       # no training: nothing to tell by


def test_a_chain_of_the_traced_ranks_of_a_larger_world_is_no_whole_pipeline():
    # ranks 0-2 of a world of 4 traced: the fourth stage's trace is missing
    from mapp.analysis.detect.layout import from_p2p_chain

    partial = _unknown([0, 1, 2])
    partial.world_size = 4
    assert not from_p2p_chain(partial, _messages(_both([(0, 1, 1), (1, 2, 2)]))).known
    assert from_p2p_chain(_unknown([0, 1, 2]), _messages(_both([(0, 1, 1), (1, 2, 2)]))).sizes["pp"] == 3


def test_ranks_whose_ops_differ_only_in_their_shapes_run_one_program():
    # one op set by name, launched with other grids on each rank (batches of their own lengths)
    from mapp.analysis.detect.program import program_groups

    names = [f"kernel_{k}" for k in range(8)]
    ops = pl.DataFrame({"rank": [r for r in (0, 1) for _ in names], "name": names * 2,
                        "shape": [f"[{r + 1}0,1,1]" for r in (0, 1) for _ in names]})
    programs, what = program_groups(ops, set(), [0, 1], [frozenset({0, 1})])
    assert programs["program"].n_unique() == 1 and what.endswith("all 2 compared")
    # p2p partners stay apart however alike their ops are
    programs, _ = program_groups(ops, {(0, 1)}, [0, 1], [frozenset({0, 1})])
    assert programs["program"].n_unique() == 2


def test_one_rank_per_stage_calls_are_compared_at_the_scale_of_its_layers_work():
    # pp=2, one rank a stage, profiler-like kernels: 4 kinds a layer (1 ms each), 2 layers on
    # stage 0 and 6 on stage 1, and 6 small kinds once a step on both (0.1 ms: loss, optimizer).
    # Every call as fast on both. Most kinds are the small ones, called as often: an unweighted
    # median of the kinds' count ratios says 1 and stage 1 read 2.9x, a slow GPU. Weighted by
    # the time spent on them, the layers' 3x is its program's scale: no slower work, imbalance.
    sizes = {"tp": 1, "pp": 2, "dp": 1}
    rows = []
    for rank, layers in ((0, 2), (1, 6)):
        t = 0
        for it in range(3):
            calls = [(f"layer_kernel_{k}", MS) for _ in range(layers) for k in range(4)]
            calls += [(f"step_kernel_{k}", MS // 10) for k in range(6)]
            for name, dur in calls:
                t += 20 * US
                rows.append(dict(rank=rank, name=name, cat="compute", lane="stream:7", ts_ns=t, dur_ns=dur,
                                 iteration=it, shape="[132,1,1]x[384,1,1]"))
                t += dur
            t += 5 * MS
    ev = frame(rows, [*_STAGE1, "shape"])
    peers = compare_peers(ev, coords(sizes), sizes, **PEERS)
    # (the step's kinds, as many on both, are priced at the layers' scale too: 0.95x and 1.05x)
    assert all(0.9 < s < 1.1 for s in peers.ranks["slowdown"].to_list())
    assert all(s.slowdown < 1 + CUTS.slowdown for s in _combined(ev, sizes))


def test_work_a_rank_adds_in_every_iteration_is_slower_however_much_it_varies():
    # DP4, profiler-like kernels with shapes: ten 1 ms GEMMs a step on every rank, and rank 2
    # runs 3, 8, 2 and 9 more of another shape in its four steps (work before each microbatch
    # whose amount is drawn per microbatch): 1.2x to 1.9x its peers in every step. Judged by
    # how much its slowdown scatters (z 2.4) it was no suspect; slower in every step, it is.
    sizes = {"tp": 1, "pp": 1, "dp": 4}
    rows = []
    for rank in range(4):
        t = 0
        for it, extra in enumerate((3, 8, 2, 9)):
            calls = [("[64,512]x[512,2048]", MS)] * 10 + ([("[64,512]x[512,1024]", MS)] * extra if rank == 2 else [])
            for shape, dur in calls:
                t += 20 * US
                rows.append(dict(rank=rank, name="gemm", cat="compute", lane="stream:7", ts_ns=t, dur_ns=dur,
                                 iteration=it, shape=shape))
                t += dur
            t += 5 * MS
    ev = frame(rows, [*_STAGE1, "shape"])
    peers = compare_peers(ev, coords(sizes), sizes, **PEERS)
    slow = peers.ranks.filter(pl.col("flagged"))
    assert slow["rank"].to_list() == [2] and slow["slowdown"].item() > 1.3
    assert [(s.rank, s.kind) for s in _combined(ev, sizes)] == [(2, "slow_compute")]


def _replicas(extra_copies: int) -> pl.DataFrame:
    """DP2 profiler-like ops, two replicas of other sequence lengths: per step 2 norms of one
    shape on both (all they share), 40 GEMMs of a shape of each replica's own, and copies of
    shapes of their own: 2 on rank 1, 2 + ``extra_copies`` on rank 0. Every call 1 ms."""
    rows = []
    for rank in range(2):
        t = 0
        for it in range(4):
            own = "[4096,512]" if rank == 0 else "[1800,512]"
            calls = ([("norm", "[512]")] * 2 + [("gemm", own + "x[512,512]")] * 40
                     + [("copy", own)] * (2 + (extra_copies if rank == 0 else 0)))
            for name, shape in calls:
                t += 20 * US
                rows.append(dict(rank=rank, name=name, cat="compute", lane="stream:7", ts_ns=t, dur_ns=MS,
                                 iteration=it, shape=shape))
                t += MS
            t += 5 * MS
    return frame(rows, [*_STAGE1, "shape"])


def test_work_no_peer_ran_is_added_as_a_share_of_all_the_ranks_work():
    # Replicas share only the 2 norms a step (2 ms of ~44 ms). One copy more on rank 0 (the
    # distributed optimizer's shard of more tensors) is 1 ms of its 45: read against the
    # shared 2 ms it was "1.5x"; against all its work, 1.02x: no suspect
    sizes = {"tp": 1, "pp": 1, "dp": 2}
    peers = compare_peers(_replicas(1), coords(sizes), sizes, **PEERS)
    row = peers.ranks.filter(pl.col("rank") == 0).row(0, named=True)
    assert row["slowdown"] < 1.05
    assert _combined(_replicas(1), sizes) == []
    # twenty copies more (20 ms of 64) are work added all the same
    peers = compare_peers(_replicas(20), coords(sizes), sizes, **PEERS)
    row = peers.ranks.filter(pl.col("rank") == 0).row(0, named=True)
    assert row["slowdown"] > 1.3


def test_a_middle_stage_of_more_layers_adds_no_work_by_its_own_optimizer_shapes():
    # PP3, one rank a stage, nothing slower: the middle stage holds 8 layers and the others 2
    # (the first and last lighter for the embedding and the loss). Each stage's optimizer runs
    # its multi-tensor kernel in a grid of its own (its parameters), more often the more layers
    # it holds. Those calls are a shape no other stage runs and more calls of that op than the
    # others make: counted as work the middle stage added, it read 1.19x, a slow GPU. Taken at
    # its program's scale (4x the layers: 4x the calls), they add nothing.
    sizes = {"tp": 1, "pp": 3, "dp": 1}
    rows = []
    for rank, layers in ((0, 2), (1, 8), (2, 2)):
        t = 0
        for it in range(4):
            calls = [(f"layer_kernel_{k}", "[132,1,1]x[384,1,1]", MS) for _ in range(4 * layers) for k in range(4)]
            calls += [("embedding_kernel", "[64,1,1]x[128,1,1]", MS // 2)] * 4 if rank == 0 else []
            calls += [("xent_kernel", "[64,1,1]x[128,1,1]", MS)] * 4 if rank == 2 else []
            calls += [("multi_tensor_apply_kernel", f"[{40 * layers + rank},1,1]x[512,1,1]", 4 * MS // 10)] * (10 * layers + 2)
            for name, shape, dur in calls:
                t += 20 * US
                rows.append(dict(rank=rank, name=name, cat="compute", lane="stream:7", ts_ns=t, dur_ns=dur,
                                 iteration=it, shape=shape))
                t += dur
            t += 5 * MS
    ev = frame(rows, [*_STAGE1, "shape"])
    peers = compare_peers(ev, coords(sizes), sizes, **PEERS)
    assert not peers.ranks["flagged"].any()
    assert _combined(ev, sizes) == []


def test_stage3_a_batched_link_slower_by_its_fastest_transfers_too_is_named_and_its_batch_partners_are_not():
    # A chain 0-1-2-3-4 whose middle ranks receive from one neighbour and send to the other in
    # one batch (interleaved 1F1B): every span of rank 1 and 2 overlaps one to another peer.
    # Link 1-2 moves its messages 1.5x slower, each of them, so its fastest transfer is 1.5x too;
    # the links batched with it at ranks 1 and 2 are not slower themselves
    links = {(0, 1): 1.0, (1, 2): 1.5, (2, 3): 1.0, (3, 4): 1.0}
    bw = link_bandwidth(matched(p2p=p2p_calls(links, iterations=4), world=5), hosts(5), link_threshold=CUTS.link)
    assert bw.observations.filter(pl.col("obs") == [1, 2])["batched"].all()
    assert [(f.kind, f.ranks) for f in bw.findings] == [("slow_link", (1, 2))]
    assert bw.findings[0].slowdown == pytest.approx(1.5, rel=1e-6)


def _groups_slow_in(slow: dict[int, set[int]], groups: int = 12, iterations: int = 4) -> pl.DataFrame:
    """``groups`` like groups of two ranks (2g, 2g+1), each all-reducing 4 bytes once an
    iteration, both members at once: 0.25 ms, or 2.5 ms in the iterations ``slow[g]``."""
    rows = []
    for g in range(groups):
        for it in range(iterations):
            dur = int((2.5 if it in slow.get(g, set()) else 0.25) * MS)
            for rank in (2 * g, 2 * g + 1):
                rows.append(dict(rank=rank, name="all_reduce", lane="c", ts_ns=it * 100 * MS, dur_ns=dur, iteration=it,
                                 group="dp", group_ranks=[2 * g, 2 * g + 1], seq=it, bytes=4))
    return frame(rows, _COLL)


def test_stage3_of_many_like_groups_one_slow_as_often_as_chance_makes_likely_is_no_slow_group():
    # 12 like groups on shared CPUs; group 0 is 10x slower in 3 of 4 iterations. Where its like
    # groups are never slow, that is a slow link; where 6 of them are slow now and then (7 of
    # their 44 group-iterations), one of 12 groups slow in 3 of 4 is what chance makes likely
    # (64 gloo processes, PP2 x DP32, no fault: 16 of 32 embedding groups slow at least once,
    # one in 3 of 4 steps: "slow link 2<->34" before)
    def findings(slow):
        calls = _groups_slow_in(slow)
        return [(f.kind, f.ranks) for f in link_bandwidth(matched(calls, world=24), hosts(24), link_threshold=CUTS.link,
                                                          shared_cpus=True).findings]

    assert findings({0: {0, 1, 2}}) == [("slow_link", (0, 1))]
    noise = {1: {0}, 3: {2}, 5: {1, 3}, 7: {0}, 9: {3}, 10: {1}}
    assert findings({0: {0, 1, 2}, **noise}) == []
    # in every iteration it stands out from that noise
    assert findings({0: {0, 1, 2, 3}, **noise}) == [("slow_link", (0, 1))]
