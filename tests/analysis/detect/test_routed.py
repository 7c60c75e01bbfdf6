"""Work sized by an all_to_all exchange (``routed``): a rank slower only between its exchanges
computed on the tokens routed to it; a slower GPU is slower outside them too."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from mapp.analysis.detect import detect_bundle
from mapp.analysis.detect.routed import routed_split, sized_by_routing
from mapp.analysis.ingest import load_bundle
from mapp.bench.real import load_corpus

MS = 1_000_000


def _events(times: dict[int, tuple[float, float, float]], iterations: int = 3) -> pl.DataFrame:
    """Per rank (attention ms, experts ms, head ms): attention, then an all_to_all that
    dispatches, the experts, an all_to_all that returns, the head; each iteration 1 s apart."""
    rows = []
    for rank, (attn, experts, head) in times.items():
        for it in range(iterations):
            t = it * 1000 * MS
            for name, cat, dur in (("aten::mm", "compute", attn), ("all_to_all", "collective", 1.0),
                                   ("aten::addmm", "compute", experts), ("all_to_all", "collective", 1.0),
                                   ("aten::linear", "compute", head)):
                rows.append({"rank": rank, "name": name, "cat": cat, "lane": "cpu:1", "ts_ns": t,
                             "dur_ns": int(dur * MS), "iteration": it})
                t += int(dur * MS) + MS // 10
    return pl.DataFrame(rows).cast({"rank": pl.Int32, "iteration": pl.Int32})


COORDS = pl.DataFrame({"rank": [0, 1, 2], "pp": [0, 0, 0]}).cast({"rank": pl.Int32, "pp": pl.Int32})
MATCHED = pl.DataFrame({"op": ["all_to_all"], "complete": [True]})
"""``matching.collectives`` with one all_to_all matched with every member of its group."""


def test_a_rank_slower_only_between_its_exchanges_is_sized_by_its_tokens():
    split = {r["rank"]: r for r in routed_split(_events({0: (10, 40, 10), 1: (10, 10, 10), 2: (10, 10, 10)}),
                                                COORDS, MATCHED).rows(named=True)}
    assert abs(split[0]["routed_ratio"] - 4.0) < 1e-9 and abs(split[0]["unrouted_ratio"] - 1.0) < 1e-9
    assert abs(split[0]["unrouted_share"] - 20 / 30) < 1e-9   # its peers' compute outside the exchanges
    assert sized_by_routing(split[0], 0.1) and not sized_by_routing(split[1], 0.1)


def test_outside_a_little_slower_by_chance_is_still_sized_by_tokens_but_extra_calls_are_work():
    favourite = {"routed_ratio": 4.8, "unrouted_ratio": 1.21, "unrouted_share": 0.45, "busy_ns": 480 * MS,
                 "added_excess_ns": 0.0, "added_real_ns": 0.03 * MS}   # a few more little ops a step
    assert sized_by_routing(favourite, 0.1)
    # the same rank calling its experts' matmuls again: 259 ms of extra calls a step, work added
    assert not sized_by_routing({**favourite, "added_excess_ns": 4.3 * MS, "added_real_ns": 259 * MS}, 0.1)
    # a GPU slower alike on both
    assert not sized_by_routing({"routed_ratio": 1.3, "unrouted_ratio": 1.28, "unrouted_share": 0.45}, 0.1)
    # too little outside the exchanges to speak for the GPU
    assert not sized_by_routing({**favourite, "unrouted_share": 0.05}, 0.1)


def test_a_rank_slower_outside_its_exchanges_too_is_not():
    # a GPU 1.3x slower on everything: the attention and the head as well
    split = {r["rank"]: r for r in routed_split(_events({0: (13, 52, 13), 1: (10, 40, 10), 2: (10, 40, 10)}),
                                                COORDS, MATCHED).rows(named=True)}
    assert abs(split[0]["routed_ratio"] - 1.3) < 1e-9
    assert not sized_by_routing(split[0], 0.1)


def test_no_exchange_no_split():
    events = _events({0: (10, 40, 10), 1: (10, 10, 10)}).filter(pl.col("name") != "all_to_all")
    assert routed_split(events, COORDS, MATCHED) is None


def test_exchanges_never_matched_whole_say_nothing():
    # a sample of a job's ranks (HTA's trace_filter): who exchanges tokens with whom is unknown
    events = _events({0: (10, 40, 10), 1: (10, 10, 10), 2: (10, 10, 10)})
    assert routed_split(events, COORDS, MATCHED.with_columns(complete=pl.lit(False))) is None


USERS = {c.id: c for c in load_corpus(Path(__file__).resolve().parents[2] / "corpus" / "cases-users")}


def _verdict(case_id: str):
    return detect_bundle(load_bundle(USERS[case_id].directory), threshold=0.1)


def test_favoured_experts_are_no_slow_gpu():
    # a user's expert parallelism by hand over all_to_all_single, 4 processes on 2 cores, the
    # router's logits of rank 0's experts +1.5: its ops between the exchanges 4.6x its peers',
    # the rest 0.85x ("slow compute 0", 4.36x, before)
    verdict = _verdict("ep4-moe-h256-skew1.5")
    assert [s for s in verdict.suspects if s.kind in ("slow_compute", "slow_host")] == []
    assert any(n.startswith("rank 0 ") and "all_to_all exchanges" in n for n in verdict.notes)


def test_extra_expert_matmuls_are_still_a_fault():
    # the same job with rank 2's experts doing 2x their matmuls again (extra calls, counted)
    verdict = _verdict("ep4-moe-h256-fwd2x-r2")
    assert [(s.rank, s.kind) for s in verdict.suspects][:1] == [(2, "slow_compute")]


def test_a_zero_shard_trades_away_no_extra_matmuls_in_any_run():
    # DDP + ZeroRedundancyOptimizer + fp16 hook, 2.2x the MLP matmuls on rank 3: its optimizer
    # shard makes 10 fewer calls of 3 ops a step, its extra matmuls 12 more of 5; which were
    # traded followed the group_by's row order, and rank 3 was named in about half the runs
    bundle = load_bundle(USERS["dp4-zh-w256-zero-fp16-fwd2.2x-r3"].directory)
    for _ in range(4):
        verdict = detect_bundle(bundle, threshold=0.1)
        assert [(s.rank, s.kind) for s in verdict.suspects][:1] == [(3, "slow_compute")]
