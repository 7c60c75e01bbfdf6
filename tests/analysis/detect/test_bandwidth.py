"""Stage 3's comparison of like p2p links by their fastest transfers (``bandwidth._raised_floors``),
the transfers it cannot time alone (``_batched_with_others``) and the links that move more than
their like links (``traffic.added_traffic``)."""

from __future__ import annotations

from types import SimpleNamespace

import polars as pl
import pytest

from mapp.analysis.detect._stats import binomial_tail as _binomial_tail
from mapp.analysis.detect.bandwidth import (_attribute, _batched_links, _batched_with_others,
                                            _by_chance, _fastest_too, _raised_floors, _with_floors)
from mapp.analysis.detect.traffic import added_traffic

LINKS = [[0, 4], [1, 5], [2, 6], [3, 7]]


def _frames(lows: dict[tuple, list[int]], waits: int = 3_000_000):
    """Four like pipeline links, 4 iterations, 8 transfers each: ``lows`` gives a link's fastest
    transfer per iteration (ns); its other transfers wait ``waits`` more, as on shared CPUs."""
    obs, per = [], []
    for link in LINKS:
        for it in range(4):
            low = lows.get(tuple(link), [100_000] * 4)[it]
            times = [low] + [low + waits * (k % 3) for k in range(1, 8)]
            obs += [{"obs": link, "what": "p2p", "inter": False, "bytes": 16384, "iteration": it, "time_ns": t}
                    for t in times]
            per.append({"obs": link, "what": "p2p", "inter": False, "bytes": 16384, "iteration": it,
                        "time_ns": float(sorted(times)[4]), "n": 8, "size": 2, "kind": 16384, "pair": False,
                        "recurs": True, "slow": False, "ratio": 1.0, "excess_ns": 0.0, "batched": False})
    schema = {"obs": pl.List(pl.Int32), "iteration": pl.Int32}
    return pl.DataFrame(obs).cast(schema), pl.DataFrame(per).cast(schema)


def _pair(lows: dict[tuple, list[int]]):
    """``_frames`` of two like links only, 0-4 and 1-5 (as PP2 x DP2's pipeline links)."""
    obs, per = _frames(lows)
    two = pl.col("obs").list.get(0) <= 1
    return obs.filter(two), per.filter(two).with_columns(pair=pl.lit(True))


def test_of_more_than_two_like_links_on_shared_cpus_one_whose_fastest_transfers_are_raised_is_slow():
    # the loaded link's fastest transfer is 10x the others' in every iteration; its medians,
    # like everyone's, are mostly waits for a core
    obs, per = _frames({(1, 5): [1_000_000] * 4})
    out = _raised_floors(obs, per, shared_cpus=True)
    slow = out.filter(pl.col("slow"))
    assert sorted(set(map(tuple, slow["obs"].to_list()))) == [(1, 5)]
    assert slow["iteration"].to_list() == [0, 1, 2, 3]
    assert slow["fastest"].all() and slow["ratio"].min() > 9
    # on GPUs more than two like links are judged by their medians only (``link_bandwidth``)
    assert not _raised_floors(obs, per, shared_cpus=False)["slow"].any()


def test_a_link_raised_in_one_iteration_only_is_not():
    obs, per = _frames({(1, 5): [1_000_000, 100_000, 100_000, 100_000]})
    assert not _raised_floors(obs, per, shared_cpus=True)["slow"].any()


def test_on_shared_cpus_a_link_whose_fastest_transfer_over_the_run_is_raised_is_slow():
    # PP2 x DP2 on 4 processes sharing 2 CPUs, a 4 MB tensor more in every exchange of link 0-4
    # (here): its fastest transfer 1.1-2.2 ms a step, the like link's 0.26-2.5 ms, its ends at
    # times both descheduled through a whole step: 2x or more in one step of four only. Over the
    # run the like link's ends were free together once (0.26 ms), the loaded link never under 1.1.
    ms = 1_000_000
    obs, per = _pair({(0, 4): [int(1.5 * ms), int(2.2 * ms), int(1.2 * ms), int(1.1 * ms)],
                      (1, 5): [int(0.26 * ms), int(1.8 * ms), int(0.8 * ms), int(2.5 * ms)]})
    out = _raised_floors(obs, per, shared_cpus=True)
    slow = out.filter(pl.col("slow"))
    assert set(map(tuple, slow["obs"].to_list())) == {(0, 4)} and slow["iteration"].to_list() == [0, 1, 2, 3]
    assert slow["fastest"].all() and abs(slow["floor_ratio"][0] - 1.1 / 0.26) < 1e-6
    # two healthy like links whose fastest transfers scatter so, each lowest in some steps: neither
    obs, per = _pair({(0, 4): [int(0.3 * ms), int(1.0 * ms), int(0.5 * ms), int(0.7 * ms)],
                      (1, 5): [int(0.6 * ms), int(0.4 * ms), int(1.2 * ms), int(0.2 * ms)]})
    assert not _raised_floors(obs, per, shared_cpus=True)["slow"].any()


def test_on_shared_cpus_a_link_once_as_fast_as_its_like_link_is_not_slow_by_its_waits():
    # megatron-core PP2 x DP2, 4 processes on 2 of 16 CPUs, no fault (``--set fresh28``): link 0-2's
    # fastest transfer 5.3x, 3.9x and 6.1x its like link's in three steps of four, 1.1x in the
    # first. Waiting only adds: a link that once moved its kind as fast as its like link has no
    # cost of its own, and its raised steps were waits ("slow link 0<->2" 4.6x before)
    us = 1_000
    obs, per = _pair({(0, 4): [188 * us, 925 * us, 1321 * us, 1060 * us],
                      (1, 5): [171 * us, 175 * us, 338 * us, 175 * us]})
    assert not _raised_floors(obs, per, shared_cpus=True)["slow"].any()
    # nor one 2x its like link or more in every step but never 3.5x at its fastest over the run
    # (3.2x: healthy TP2 x PP2 and PP2 x DP2 jobs read 2.3x and 2.7x so)
    obs, per = _pair({(0, 4): [550 * us, 925 * us, 1321 * us, 1060 * us],
                      (1, 5): [171 * us, 175 * us, 338 * us, 175 * us]})
    assert not _raised_floors(obs, per, shared_cpus=True)["slow"].any()
    # a link never fast, 3.8x over the run: slow, with what each raised step cost
    obs, per = _pair({(0, 4): [650 * us, 925 * us, 1321 * us, 1060 * us],
                      (1, 5): [171 * us, 175 * us, 338 * us, 175 * us]})
    slow = _raised_floors(obs, per, shared_cpus=True).filter(pl.col("slow"))
    assert set(map(tuple, slow["obs"].to_list())) == {(0, 4)} and slow["fastest"].all()
    assert slow["iteration"].to_list() == [0, 1, 2, 3] and slow["floor_ratio"][0] > 3.8


def test_a_link_slow_in_some_steps_is_transient_on_gpus_and_noise_on_shared_cpus():
    # four like links, link 1-5 slow (4x) in two iterations of four: a transient fault where
    # transfer times are the links' own, one process descheduled where processes share cores
    # (megatron-core PP4, 4 processes on 2 cores, no fault: one link 5x in one step of four)
    obs, per = _frames({})
    slow = (pl.col("obs") == pl.lit([1, 5], pl.List(pl.Int32))) & pl.col("iteration").is_in([1, 2])
    per = per.with_columns(slow=slow, ratio=pl.when(slow).then(4.0).otherwise(1.0), z=pl.lit(5.0),
                           excess_ns=pl.when(slow).then(1e6).otherwise(0.0), fastest=pl.lit(False),
                           floor_ratio=pl.lit(None, pl.Float64))
    assert [(f.kind, f.ranks) for f in _attribute(per, shared_cpus=False)] == [("slow_link", (1, 5))]
    assert _attribute(per, shared_cpus=True) == []


def _p2p(rows):
    """A matching's p2p table from (src, dst, send_start, send_end, recv_start, recv_end[, bytes, iteration])."""
    out = []
    for i, r in enumerate(rows):
        src, dst, s0, s1, r0, r1, *rest = r
        size, it = rest if rest else (16 << 20, 0)
        out.append({"pair_id": i, "src": src, "dst": dst, "bytes": size, "iteration": it, "send_start_ns": s0,
                    "send_end_ns": s1, "recv_start_ns": r0, "recv_end_ns": r1, "bytes_match": True,
                    "send_async": False, "recv_async": False})
    return pl.DataFrame(out).cast({"src": pl.Int32, "dst": pl.Int32, "iteration": pl.Int32})


def test_a_transfer_batched_with_another_peers_is_not_timed_alone_one_with_the_same_peers_is():
    p = _p2p([
        # stage 1 of interleaved 1F1B: its receive from 0 and its send to 2 in one batch
        (0, 1, 0, 500, 0, 900),        # 0 -> 1, rank 1's side in the batch below
        (1, 2, 3, 903, 10, 600),       # 1 -> 2, rank 1's side spans the batch
        # later, 1F1B's send-forward-receive-backward: two directions of one link, one batch
        (1, 2, 2000, 2300, 2000, 2300),
        (2, 1, 2001, 2301, 2002, 2302),
        # and a lone transfer
        (2, 3, 5000, 5100, 5000, 5100),
    ])
    assert sorted(_batched_with_others(p)["pair_id"].to_list()) == [0, 1]


def test_like_links_are_those_that_carry_as_many_transfers_of_a_size_not_every_link_of_it():
    # interleaved PP4: links 0-1, 1-2, 2-3 carry 2 activations a step each way, the last stage's
    # link back to the first one; link 2-3 also moves a 512 MB tensor on every exchange
    act, extra = 16 << 20, 512_000_000
    rows = []
    for it in range(4):
        t = it * 10_000
        for a, b in [(0, 1), (1, 2), (2, 3)]:
            rows += [(a, b, t, t + 10, t, t + 10, act, it), (b, a, t + 20, t + 30, t + 20, t + 30, act, it)] * 2
        rows += [(3, 0, t + 40, t + 50, t + 40, t + 50, act, it), (0, 3, t + 60, t + 70, t + 60, t + 70, act, it)]
        rows += [(2, 3, t + 80, t + 90, t + 80, t + 90, extra, it), (3, 2, t + 91, t + 99, t + 91, t + 99, extra, it)] * 2
    found = added_traffic(SimpleNamespace(p2p=_p2p(rows)))
    assert [(f.kind, f.ranks) for f in found] == [("slow_link", (2, 3))]
    assert found[0].slowdown > 30 and found[0].observations[0]["compared"] == "bytes moved"
    # without the extra tensor nothing moves more than its like links
    plain = [r for r in rows if r[6] == act]
    assert added_traffic(SimpleNamespace(p2p=_p2p(plain))) == []


def _ring(heavy: float, steps: int = 3) -> list[tuple]:
    """A ring of 4 ranks, 12 chunks of 4 MB a step on each link; link 2 -> 3's padded to ``heavy`` x."""
    chunk, rows = 4_000_000, []
    for it in range(steps):
        for k in range(12):
            t = it * 100_000 + k * 1_000
            for a in range(4):
                size = int(chunk * heavy) if a == 2 else chunk
                rows.append((a, (a + 1) % 4, t, t + 500, t, t + 500, size, it))
    return rows


def test_a_link_of_heavier_messages_is_named_by_its_bytes_at_the_threshold():
    # as many messages on every link of the ring, link 2 -> 3's 5x larger in every step
    found = added_traffic(SimpleNamespace(p2p=_p2p(_ring(5.0))), 0.1)
    assert [(f.kind, f.ranks) for f in found] == [("slow_link", (2, 3))]
    assert found[0].slowdown == pytest.approx(5.0) and found[0].observations[0]["larger"]
    # messages 5% larger move 5% more: under a link threshold of 0.1, no slow link
    assert added_traffic(SimpleNamespace(p2p=_p2p(_ring(1.05))), 0.1) == []
    assert added_traffic(SimpleNamespace(p2p=_p2p(_ring(1.0))), 0.1) == []


def _counted_ring(counts: dict[int, int], steps: int = 4) -> list[tuple]:
    """A one-way ring of 4 ranks, no sizes recorded: ``counts[a]`` messages a step from a to a+1."""
    rows = []
    for it in range(steps):
        for a, n in counts.items():
            for k in range(n):
                t = it * 100_000 + k * 1_000
                rows.append((a, (a + 1) % 4, t, t + 500, t, t + 500, None, it))
    return rows


def test_a_link_of_more_messages_is_named_only_well_beyond_its_like_links():
    # no sizes: messages counted. A tensor moved beside every exchange of link 1-2 doubles its
    found = added_traffic(SimpleNamespace(p2p=_p2p(_counted_ring({0: 10, 1: 20, 2: 10, 3: 10}))))
    assert [(f.ranks, f.observations[0]["compared"]) for f in found] == [((1, 2), "messages moved")]
    assert found[0].slowdown == pytest.approx(2.0)
    # work dealt out in grades sends a few more on some links by design (a Cholesky's panels)
    assert added_traffic(SimpleNamespace(p2p=_p2p(_counted_ring({0: 10, 1: 10, 2: 9, 3: 8})))) == []

def _batched(spec, batched: bool = True):
    """Batched (or not) like links over 4 iterations, 8 transfers each: (link, fastest ns, slow
    by medians, ratio by medians); the others wait 3x the fastest."""
    obs, per = [], []
    for link, low, slow, ratio in spec:
        for it in range(4):
            times = [low] + [3 * low] * 7
            obs += [{"obs": link, "what": "p2p", "inter": False, "bytes": 1000, "iteration": it, "time_ns": t}
                    for t in times]
            per.append({"obs": link, "what": "p2p", "inter": False, "bytes": 1000, "iteration": it,
                        "time_ns": float(3 * low), "n": 8, "slow": slow, "ratio": ratio, "excess_ns": 0.0,
                        "fastest": False, "floor_ratio": None, "batched": batched})
    schema = {"obs": pl.List(pl.Int32), "iteration": pl.Int32, "floor_ratio": pl.Float64}
    return pl.DataFrame(obs).cast({"obs": pl.List(pl.Int32), "iteration": pl.Int32}), pl.DataFrame(per).cast(schema)


def _slow_links(out):
    return sorted({tuple(o) for o in out.filter(pl.col("slow"))["obs"].to_list()})


def _judged(obs, per, link_threshold=0.1):
    """What ``link_bandwidth`` does with p2p links after ``_raised_floors``."""
    return _batched_links(_fastest_too(_with_floors(obs, per), link_threshold))


def test_of_two_slow_batched_links_at_a_rank_the_one_far_slower_by_its_fastest_transfers_is_the_one():
    # link 2-3 is slow by its medians (1.5x) and its fastest transfers are 12x; link 0-3, batched
    # with it at rank 3, reads 6.6x by its fastest only: 2-3 is the link, whatever the medians say
    obs, per = _batched([([0, 1], 100, False, 1.0), ([1, 2], 100, False, 1.0),
                         ([2, 3], 1200, True, 1.5), ([0, 3], 660, False, 1.0)])
    assert _slow_links(_judged(obs, per)) == [(2, 3)]
    # a rank slow at both its links alike (its own hardware) explains neither by the other
    obs, per = _batched([([0, 1], 100, False, 1.0), ([1, 2], 410, False, 1.0),
                         ([2, 3], 400, False, 1.0), ([0, 3], 100, False, 1.0)])
    assert _slow_links(_judged(obs, per)) == [(1, 2), (2, 3)]
    # a link slow by its medians whose fastest transfers are as quick as its like links' is not
    obs, per = _batched([([0, 1], 100, False, 1.0), ([1, 2], 100, True, 1.47),
                         ([2, 3], 100, False, 1.0), ([0, 3], 100, False, 1.0)])
    assert _slow_links(_judged(obs, per)) == []


def test_a_link_slow_by_its_typical_transfers_only_is_not_slow():
    # two like pipeline links, not batched (PP2 x DP2, 4 H200s, no fault): link 0-2's medians
    # 2-3x link 1-3's (host-timed transfers that waited for queued kernels), its fastest alike
    obs, per = _batched([([0, 2], 170, True, 2.5), ([1, 3], 172, False, 1.0)], batched=False)
    assert _slow_links(_judged(obs, per)) == []
    # 512 MB more on every exchange of link 0-2: its fastest transfers 8x too
    obs, per = _batched([([0, 2], 1400, True, 10.0), ([1, 3], 172, False, 1.0)], batched=False)
    assert _slow_links(_judged(obs, per)) == [(0, 2)]
    # slower by its fastest by less than the threshold: not a slow link by its medians either
    obs, per = _batched([([0, 2], 180, True, 2.5), ([1, 3], 172, False, 1.0)], batched=False)
    assert _slow_links(_judged(obs, per)) == []


def test_a_links_fastest_is_against_its_like_links_only():
    from mapp.analysis.detect.bandwidth import _against_likes

    step = ["what", "iteration"]

    def lows(rows):
        return pl.DataFrame([{"obs": o, "what": "p2p", "iteration": 0, "low": float(v)} for o, v in rows]).cast(
            {"obs": pl.List(pl.Int32), "iteration": pl.Int32})

    # one row a link: each against the median of the others
    out = _against_likes(lows([([0, 1], 10), ([1, 2], 20), ([2, 3], 60)]), step).sort("low")
    assert out["other"].to_list() == [40.0, 35.0, 15.0]
    # a link with rows of two sizes in the step (sizes that never recur): its own other row is
    # no like link of it
    out = _against_likes(lows([([0, 1], 100), ([0, 1], 4_000_000), ([1, 2], 10), ([1, 2], 1000)]), step)
    assert sorted(out["other"].to_list()) == [505.0, 505.0, 2_000_050.0, 2_000_050.0]
    # a link alone in its step has nothing to be compared with
    assert _against_likes(lows([([0, 1], 100), ([0, 1], 200)]), step).is_empty()


def test_the_binomial_tail_is_exact_on_few_iterations_and_finite_on_thousands():
    assert _binomial_tail(3, 4, 0.137) == pytest.approx(4 * 0.137 ** 3 * 0.863 + 0.137 ** 4)
    assert _binomial_tail(0, 10, 0.3) == pytest.approx(1.0)
    # a link's rows by the thousand, where C(1100, j) overflows a float: 11 slow expected, so 5
    # or more is nearly certain (an OverflowError stopped stage 3 before)
    assert 0.95 < _binomial_tail(5, 1100, 0.01) <= 1.0


@pytest.mark.parametrize("kind", [1024, None])
def test_like_links_of_a_collective_that_recorded_no_size_are_judged_by_chance_too(kind):
    # 4 like groups over 4 iterations, each slow in 2 of them: any one so slow is what chance
    # makes likely. A collective whose instances recorded no size has a null kind; its rows
    # were left out of the judgement (the join dropped null keys) and stayed "not by chance".
    rows = [dict(obs=[2 * g, 2 * g + 1], what="all_reduce/dp", inter=False, kind=kind, size=2, iteration=it,
                 slow=it in ((0, 1), (1, 2), (2, 3), (3, 0))[g]) for g in range(4) for it in range(4)]
    per = pl.DataFrame(rows, schema={"obs": pl.List(pl.Int32), "what": pl.String, "inter": pl.Boolean,
                                     "kind": pl.Int64, "size": pl.UInt32, "iteration": pl.Int32, "slow": pl.Boolean})
    out = _by_chance(per)
    assert out.height == per.height and out["chance"].all()
    assert out["kind"].to_list() == per["kind"].to_list()


def test_a_link_whose_fastest_transfers_were_raised_is_not_excused_as_chance():
    # The four like groups above, each slow in 2 of 4 iterations by their typical transfers:
    # chance. One whose fastest transfers took 3x its like links' in every iteration
    # (``_raised_floors``) is slow by itself: its like links' rate does not excuse it.
    rows = [dict(obs=[2 * g, 2 * g + 1], what="p2p", inter=False, kind=1024, size=2, iteration=it,
                 slow=it in ((0, 1), (1, 2), (2, 3), (3, 0))[g], floor_ratio=3.0 if g == 0 else None)
            for g in range(4) for it in range(4)]
    per = pl.DataFrame(rows, schema={"obs": pl.List(pl.Int32), "what": pl.String, "inter": pl.Boolean,
                                     "kind": pl.Int64, "size": pl.UInt32, "iteration": pl.Int32, "slow": pl.Boolean,
                                     "floor_ratio": pl.Float64})
    chance = {tuple(obs): c for obs, c in _by_chance(per).group_by("obs").agg(pl.col("chance").all()).iter_rows()}
    assert chance == {(0, 1): False, (2, 3): True, (4, 5): True, (6, 7): True}


def test_on_shared_cpus_a_link_raised_over_the_run_only_by_its_ends_waits_for_a_core_is_not_slow():
    # megatron-core PP2 x DP2 with a heavier last stage, 4 processes on 2 CPUs under mapp's capture,
    # no fault (``--set fresh194``): link 0-2's fastest 200 KB message took 2.6 ms over the run,
    # 12x link 1-3's, but 2.4 ms of it its ends sat on a run queue (the capture records it)
    us = 1_000
    obs, per = _pair({(0, 4): [4163 * us, 2594 * us, 2637 * us, 4453 * us],
                      (1, 5): [2043 * us, 777 * us, 248 * us, 218 * us]})
    assert set(map(tuple, _raised_floors(obs, per, shared_cpus=True).filter(pl.col("slow"))["obs"].to_list())) == {(0, 4)}
    # timed less those waits: 0.22-0.28 ms, 0.89-1.28x link 1-3's step by step, 1.12x in the typical step
    own, _ = _pair({(0, 4): [227 * us, 224 * us, 248 * us, 278 * us],
                    (1, 5): [254 * us, 209 * us, 211 * us, 218 * us]})
    out = _raised_floors(obs, per, shared_cpus=True, own=own)
    assert not out["slow"].any()
    # and says which link was raised by the waits alone, with both figures (``BandwidthEvidence.waited``)
    waited = out.filter(pl.col("waited_own").is_not_null())
    assert set(map(tuple, waited["obs"].to_list())) == {(0, 4)}
    assert waited["waited_run"].min() > 10 and 1.0 < waited["waited_own"].max() < 1.3
    # a loaded link keeps a cost of its own without the waits (1.55-14x in the typical step of 29
    # CPU jobs): still slow
    own, _ = _pair({(0, 4): [340 * us, 330 * us, 360 * us, 400 * us],
                    (1, 5): [254 * us, 209 * us, 211 * us, 218 * us]})
    slow = _raised_floors(obs, per, shared_cpus=True, own=own).filter(pl.col("slow"))
    assert set(map(tuple, slow["obs"].to_list())) == {(0, 4)} and slow["fastest"].all()
    # and without any record of waits (the profiler's traces) the run decides alone, as before
    assert _raised_floors(obs, per, shared_cpus=True, own=None)["slow"].any()


def _fresh(case_id: str):
    from pathlib import Path

    from mapp.bench.real import load_corpus
    return {c.id: c for c in load_corpus(Path(__file__).resolve().parents[2] / "corpus" / "cases-fresh")}[case_id]


def _recorded(case):
    from mapp.analysis.detect import detect_bundle
    from mapp.analysis.ingest import load_bundle
    return detect_bundle(load_bundle(case.directory), threshold=0.1)


@pytest.mark.parametrize("case_id,link", [("gpt-pp2dp2-mapp-laststage3of4-f194", "0<->2"),
                                          ("gpt-pp2dp4-mapp-seqlognorm1-f199", "3<->7"),
                                          ("gpt-pp2dp2-mapp-seqlognorm1-f203", "0<->2")])
def test_recorded_imbalance_whose_link_waited_for_cores_names_no_link(case_id, link):
    # held out (tests/corpus/cases-fresh, ``--set fresh194``/``fresh199``/``fresh203``, 4 and 8
    # gloo processes on half as many CPUs, mapp's capture): a heavier last stage, lognormal
    # lengths, no fault. Each read "slow link" by the fastest transfers of one link over the run
    # (7.0x, 3.3x, 6.5x): a raise the run queue made, as the spans' recorded waits for a core show
    case = _fresh(case_id)
    assert case.cls == "imbalance" and not case.injected
    verdict = _recorded(case)
    assert verdict.suspects == []
    assert any(s.name == "3 bandwidth" and s.ran for s in verdict.stages)     # compared, not skipped
    # and the user is told why the raised link is none
    said = [n for n in verdict.notes if n.startswith(f"link {link}:")]
    assert len(said) == 1 and "waits for a core" in said[0] and "not a slow link" in said[0]


def test_a_recorded_loaded_link_is_named_by_its_typical_step_less_the_waits():
    # ``--set fresh203`` (held out): PP2 x DP2, 4 processes on 2 CPUs, 3 MB more on every exchange
    # of link 1-3. Less the waits for a core its fastest over the run was 1.28x link 0-2's (one
    # step of ten where both ends were quick), its typical step 1.55x: named
    case = _fresh("gpt-pp2dp2-mapp-link1-3-f203")
    assert case.injected[0]["extra_bytes"] == 3_000_000
    verdict = _recorded(case)
    top = verdict.suspects[0]
    assert (top.kind, {top.rank, top.peer}) == ("slow_link", {1, 3})
    assert not any(n.startswith("link 1<->3:") for n in verdict.notes)     # named, not excused
    assert top.evidence["bandwidth"]["observations"][0]["compared"] == "fastest transfers"


def test_a_link_slow_at_one_size_only_while_its_other_transfers_keep_pace_is_not_slow(tmp_path):
    # The suite's healthy-250 in the original tracer's format (TP8 x PP4 x DP8, lengths of sigma
    # 0.3, no fault): each link's one steady-state exchange of an iteration holds the wait for
    # the later stage, and link 93-157's read "slow link 1.28x" while its sends of the warm-up,
    # in the same iterations, were as fast as their like links' (``_steady_at_other_sizes``).
    # A link made 8x slower stays named: it moves every size slowly
    from tests.analysis.detect._sim import detect
    job = dict(tp=8, pp=4, dp=8, microbatches=4, iterations=2, layers=4, hidden=4096, seq_length=2048,
               host_ahead=True, host_overhead_us=100.0, host_noise_us=5.0, data_load_us=200.0, seqlen_sigma=0.3,
               jitter_sigma=0.02, vocab_size=50304, format="megatronapp", seed=952767284)
    assert detect(tmp_path, name="healthy", **job).suspects == []
    v = detect(tmp_path, "slow_link:93-157:8", name="slow", **job)
    assert (v.suspects[0].kind, {v.suspects[0].rank, v.suspects[0].peer}) == ("slow_link", {93, 157})
