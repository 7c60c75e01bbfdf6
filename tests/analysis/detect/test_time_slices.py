"""Where a rank's slowed ops land (``time_slices.scattered``), on ops built by hand: a neighbour's
slices land at random, everything else that slows a rank's ops at the same ones or a whole
microbatch at a time."""

from __future__ import annotations

import math
import random

import polars as pl

from mapp.analysis.detect.findings import Suspect
from mapp.analysis.detect.time_slices import kernel_places, scattered, sliced_suspects

ITERATIONS, MICROBATCHES, LAYERS = 4, 8, 8
NAMES = ("layer.forward", "layer.backward")
SLICE_NS = 1_000_000


def _ops(slowed_places, tokens_of_slowed: int | None = None) -> pl.DataFrame:
    """Two ranks, every op 1 ms on rank 0; on rank 1 the places ``slowed_places(iteration)``
    returns take 2 ms (a slice more), the rest 1 ms."""
    rows = []
    for it in range(ITERATIONS):
        slowed = slowed_places(it)
        for mb in range(MICROBATCHES):
            for name in NAMES:
                for layer in range(LAYERS):
                    place = (name, mb, layer)
                    key = hash((it, name, mb, layer))
                    for rank in (0, 1):
                        slow = rank == 1 and place in slowed
                        tokens = tokens_of_slowed if slow and tokens_of_slowed else 1024
                        rows.append({"rank": rank, "iteration": it, "name": name, "microbatch": mb, "chunk": -1,
                                     "layer": layer, "ordinal": 0, "gk": key,
                                     "self_ns": 2 * SLICE_NS if slow else SLICE_NS,
                                     "excess": float(SLICE_NS) if slow else 0.0, "slow": slow,
                                     "r_adj": math.log(2) if slow else 0.0, "tokens": tokens})
    return pl.DataFrame(rows).with_columns(pl.col("rank").cast(pl.Int32))


PLACES = [(name, mb, layer) for mb in range(MICROBATCHES) for name in NAMES for layer in range(LAYERS)]


def _random_places(share: float, seed: int = 7):
    rng = random.Random(seed)
    drawn = {it: set(rng.sample(PLACES, int(share * len(PLACES)))) for it in range(ITERATIONS)}
    return lambda it: drawn[it]


def _row(frame: pl.DataFrame, rank: int) -> dict:
    return frame.filter(pl.col("rank") == rank).row(0, named=True)


def test_slices_at_random_places_are_flagged_with_the_time_they_cost():
    # 38 of the rank's 128 ops a step a slice longer, different ones each step
    found = scattered(_ops(_random_places(0.3)), min_effect=0.033)
    mine = _row(found, 1)
    assert mine["flagged"]
    assert abs(mine["sum_ratio"] - (38 * 2 + 90) / 128) < 1e-9
    assert mine["excess_ns"] == 38 * SLICE_NS
    assert mine["iterations"] == [0, 1, 2, 3]
    assert abs(mine["place_lift"]) < 0.15 and abs(mine["microbatch_lift"]) < 0.15
    assert not _row(found, 0)["flagged"]


def test_the_same_ops_slowed_every_step_are_not_slices():
    # a layer fault or a host that launches some ops late: the same places step after step
    same = _random_places(0.3)
    found = scattered(_ops(lambda it: same(0)), min_effect=0.033)
    mine = _row(found, 1)
    assert mine["place_lift"] > 0.9
    assert not mine["flagged"]


def test_whole_microbatches_slowed_are_not_slices():
    # a longer sequence: every op of its microbatch slower, a different microbatch each step
    rng = random.Random(3)
    chosen = {it: set(rng.sample(range(MICROBATCHES), 3)) for it in range(ITERATIONS)}
    found = scattered(_ops(lambda it: {p for p in PLACES if p[1] in chosen[it]}), min_effect=0.033)
    mine = _row(found, 1)
    assert mine["microbatch_lift"] > 0.9
    assert not mine["flagged"]


def test_ops_with_more_tokens_than_their_peers_are_left_out():
    # the slowed ops had twice the tokens: more work, not a slice; what is left is as fast as the peer
    found = scattered(_ops(_random_places(0.3), tokens_of_slowed=2048), min_effect=0.033)
    mine = _row(found, 1)
    assert mine["sum_ratio"] == 1.0
    assert not mine["flagged"]


def test_too_few_slowed_ops_say_nothing():
    found = scattered(_ops(_random_places(0.1)), min_effect=0.033)   # 12 a step
    assert _row(found, 1)["slow_ops"] == 12
    assert not _row(found, 1)["flagged"]


def test_a_flagged_rank_is_a_suspect_only_if_it_keeps_its_peers_waiting():
    found = scattered(_ops(_random_places(0.3)), min_effect=0.033)
    coords = {0: {"tp": 0, "pp": 0, "dp": 0}, 1: {"tp": 1, "pp": 0, "dp": 0}}
    assert sliced_suspects(found, [], set(), coords, 200e6) == []
    [s] = sliced_suspects(found, [], {1}, coords, 200e6)
    assert (s.rank, s.kind) == (1, "slow_compute")
    assert s.excess_ns == 38 * SLICE_NS and s.coords == coords[1]
    assert "time_slices" in s.evidence


def test_a_suspect_of_a_higher_slowdown_on_the_rank_stands():
    found = scattered(_ops(_random_places(0.3)), min_effect=0.033)
    higher = Suspect(rank=1, kind="slow_compute", confidence=0.9, slowdown=2.0)
    lower = Suspect(rank=1, kind="slow_host", confidence=0.6, slowdown=1.05)
    assert sliced_suspects(found, [higher], {1}, {}, None) == [higher]
    [s] = sliced_suspects(found, [lower], {1}, {}, None)
    assert "time_slices" in s.evidence and s.slowdown > 1.2


SEEN = {1: {"other_sm_pct": 33.0, "seen": 1, "samples": 3}}


def _bursts(it: int) -> set:
    """A neighbour that bursts: three runs of ten consecutive ops a step, each inside one
    microbatch's forward, at different places each step (so they cluster by microbatch)."""
    rng = random.Random(it)
    return {("layer.forward", mb, layer) for mb in rng.sample(range(MICROBATCHES), 3) for layer in range(LAYERS)}


def test_bursts_cluster_by_microbatch_and_are_named_only_where_a_neighbour_was_seen():
    found = scattered(_ops(_bursts), min_effect=0.033)
    mine = _row(found, 1)
    assert mine["microbatch_lift"] > 0.25 and not mine["flagged"]   # placement alone: not slices
    coords = {1: {"tp": 1, "pp": 0, "dp": 0}}
    assert sliced_suspects(found, [], {1}, coords, 200e6) == []
    [s] = sliced_suspects(found, [], {1}, coords, 200e6, SEEN)
    assert (s.rank, s.kind) == (1, "slow_compute") and s.excess_ns == 24 * SLICE_NS
    assert s.evidence["neighbour"] == SEEN[1] and "NVML" in s.evidence["note"]


def test_a_seen_rank_is_judged_by_its_peers_times_as_measured_not_as_the_data_fit_left_them():
    # the fit put every slowed op down to its replica's data (r_adj 0, no excess): by the fitted
    # sum the rank is as fast as its peer, by the times as measured 24 of 128 ops took twice theirs
    fitted_away = _ops(_bursts).with_columns(r_adj=pl.lit(0.0), excess=pl.lit(0.0))
    found = scattered(fitted_away, min_effect=0.033)
    mine = _row(found, 1)
    assert mine["sum_ratio"] == 1.0 and mine["lasting"] == 0.0
    assert abs(mine["raw_ratio"] - (24 * 2 + 104) / 128) < 1e-9 and mine["raw_lasting"] == 1.0
    [s] = sliced_suspects(found, [], {1}, {}, 200e6, SEEN)
    assert abs(s.slowdown - mine["raw_ratio"]) < 1e-12 and s.excess_ns == 24 * SLICE_NS


def test_a_neighbour_seen_names_no_rank_that_keeps_no_one_waiting_or_is_not_slower():
    found = scattered(_ops(_bursts), min_effect=0.033)
    assert sliced_suspects(found, [], set(), {}, 200e6, SEEN) == []
    level = scattered(_ops(lambda it: set()), min_effect=0.033)
    assert _row(level, 1)["lasting"] == 0.0
    assert sliced_suspects(level, [], {1}, {}, 200e6, SEEN) == []


def test_a_seen_rank_slower_in_most_steps_is_named_where_stage_2_measured_it_holding_its_peers_up():
    # bursts in steps 0 and 2 of 3, none in step 1: slower in 2 of 3 steps, not nearly all
    three = _ops(lambda it: set() if it == 1 else _bursts(it)).filter(pl.col("iteration") < 3)
    found = scattered(three, min_effect=0.033)
    assert abs(_row(found, 1)["raw_lasting"] - 2 / 3) < 1e-9
    # who holds whom up stood in for (one rank a pipeline stage): nearly every step, as before
    assert sliced_suspects(found, [], {1}, {}, 200e6, SEEN) == []
    [s] = sliced_suspects(found, [], {1}, {}, 200e6, SEEN, measured_waits=True)
    assert (s.rank, s.kind, s.iterations) == (1, "slow_compute", [0, 2])
    assert "in 2 of 3 traced steps" in s.evidence["note"]
    # slower in 1 of 3 steps is no more than chance, measured or not
    once = scattered(_ops(lambda it: _bursts(it) if it == 0 else set()).filter(pl.col("iteration") < 3),
                     min_effect=0.033)
    assert sliced_suspects(once, [], {1}, {}, 200e6, SEEN, measured_waits=True) == []
    # and nothing unseen is named so: placement alone still asks for nearly every step
    assert sliced_suspects(found, [], {1}, {}, 200e6, measured_waits=True) == []


def _kernels(slowed_calls) -> pl.DataFrame:
    """A profiler trace's timed events on two DP peers: each iteration 96 calls of one GEMM
    kernel (1 ms on rank 0) and, on the host, the op that launched each (0.1 ms); on rank 1
    the calls ``slowed_calls(iteration)`` returns take 2 ms, and so do all its host ops."""
    rows = []
    for it in range(ITERATIONS):
        slowed = slowed_calls(it)
        for rank in (0, 1):
            t = it * 1_000_000_000
            for call in range(96):
                slow = rank == 1 and call in slowed
                rows.append({"rank": rank, "iteration": it, "name": "nvjet_gemm", "lane": "stream:7",
                             "shape": "132x1x1x384x1x1", "ts_ns": t, "self_ns": 2 * SLICE_NS if slow else SLICE_NS})
                rows.append({"rank": rank, "iteration": it, "name": "aten::mm", "lane": "thread:1",
                             "shape": "[[8, 8]]", "ts_ns": t, "self_ns": 200_000 if rank == 1 else 100_000})
                t += 3 * SLICE_NS
    return pl.DataFrame(rows).with_columns(pl.col("rank").cast(pl.Int32))


COORDS = pl.DataFrame({"rank": [0, 1], "tp": [0, 0], "pp": [0, 0], "dp": [0, 1]}).with_columns(pl.col("rank").cast(pl.Int32))


def test_kernel_calls_are_matched_call_by_call_and_host_ops_left_out():
    rng = random.Random(5)
    drawn = {it: set(rng.sample(range(96), 30)) for it in range(ITERATIONS)}
    places = kernel_places(_kernels(lambda it: drawn[it]), COORDS, ["pp", "tp"], slow_op=0.1)
    assert set(places["lane"].to_list()) == {"stream:7"}
    mine = places.filter(pl.col("rank") == 1).sort("iteration", "ordinal")
    assert mine.filter(pl.col("iteration") == 0)["slow"].arg_true().to_list() == sorted(drawn[0])
    found = scattered(places, min_effect=0.033)
    assert _row(found, 1)["flagged"]
    assert abs(_row(found, 1)["sum_ratio"] - 126 / 96) < 1e-9


def test_kernel_calls_slowed_at_the_same_place_every_step_are_not_slices():
    places = kernel_places(_kernels(lambda it: set(range(0, 90, 3))), COORDS, ["pp", "tp"], slow_op=0.1)
    found = scattered(places, min_effect=0.033)
    assert _row(found, 1)["place_lift"] > 0.9
    assert not _row(found, 1)["flagged"]


def test_with_one_rank_a_stage_the_heaviest_stage_is_the_one_waited_on():
    # No collective of a pipeline of one rank a stage says who waits on whom (at the one a step
    # the first stage is last whatever its speed): the stage that computes the most is the one
    # the pipeline waits on, and a neighbour slowing a lighter stage fills slack
    from mapp.analysis.detect.peer_evidence import PeerEvidence
    from mapp.analysis.detect.verdict import _waited_on

    coords = {0: {"tp": 0, "pp": 0, "dp": 0}, 1: {"tp": 0, "pp": 1, "dp": 0}}
    sliced = scattered(_ops(_random_places(0.4)), min_effect=0.033)
    first_waits = {0: {"net_ns": 5e6, "net_lasting": 1.0}, 1: {"net_ns": -5e6, "net_lasting": 0.0}}

    def stages(heavy: int) -> pl.DataFrame:
        return pl.DataFrame({"pp": [0, 1], "compute_ns": [240e6 if heavy == 0 else 190e6, 240e6 if heavy == 1 else 190e6]},
                            schema={"pp": pl.Int32, "compute_ns": pl.Float64})

    def waited(peers: PeerEvidence) -> set[int]:
        judged, ranks = _waited_on(peers, first_waits, coords)
        assert judged is sliced
        return ranks

    assert [waited(PeerEvidence("layer peers", stages=stages(heavy), sliced=sliced)) for heavy in (0, 1)] == [{0}, {1}]
    assert waited(PeerEvidence("layer peers", sliced=sliced)) == set()
    # with peers of its own at each stage, stage 2 says it
    assert waited(PeerEvidence("stage peers", stages=stages(1), sliced=sliced)) == {0}


def test_ranks_without_kernels_have_no_slices_to_judge():
    # GPU ranks whose trace holds host ops only (no stream lane): nothing to place, no error (a
    # gloo job on a GPU machine's cores, read as GPU ranks, failed here with "r_adj not found")
    host_only = _kernels(lambda it: set()).filter(~pl.col("lane").str.starts_with("stream:"))
    places = kernel_places(host_only, COORDS, ["pp", "tp"], slow_op=0.1)
    assert places.is_empty()
    assert scattered(places, min_effect=0.033).is_empty()
