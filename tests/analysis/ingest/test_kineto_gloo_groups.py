"""Gloo calls in PyTorch profiler traces name no process group: p2p peers are group-local ranks
and collectives carry no members. ``_gloo_groups`` resolves both across the ranks read together.

The real trace is the corpus case ``gpt-pp2dp2-prof-layer1.5x-r2`` (tests/corpus/README.md):
megatron-core GPT, PP2 x DP2 on gloo, ranks 0,1 on stage 0 and 2,3 on stage 1, so the pipeline
pairs are 0 <-> 2 and 1 <-> 3; every c10d send/recv names peer 1 on ranks 0,1 and peer 0 on
ranks 2,3 (their place in the pipeline group), and the gradient all-reduce runs on the DP groups
{0,1} and {2,3}.
"""

from __future__ import annotations

import pathlib
import shutil

import polars as pl

from mapp.analysis.align import align_bundle
from mapp.analysis.graph import match_bundle
from mapp.analysis.ingest import _gloo_groups, load_bundle
from mapp.analysis.ingest.schema import EVENTS_SCHEMA

CASE = pathlib.Path(__file__).parent.parent.parent / "corpus" / "cases" / "gpt-pp2dp2-prof-layer1.5x-r2"


def _copy(tmp_path: pathlib.Path) -> pathlib.Path:
    return _copy_of(CASE, tmp_path)


def _copy_of(case: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    for f in case.glob("rank-*.json.gz"):  # a copy: the bundle writes its cache beside the traces
        shutil.copy(f, tmp_path / f.name)
    return tmp_path


def test_real_pp2dp2_peers_are_global_ranks(tmp_path):
    notes: list[str] = []
    bundle = load_bundle(_copy(tmp_path), warn=notes.append)
    p2p = bundle.scan().filter(pl.col("cat") == "p2p").collect()
    assert sorted(p2p.group_by("rank", "name", "peer").len().rows()) == [
        (0, "recv", 2, 8), (0, "send", 2, 8), (1, "recv", 3, 8), (1, "send", 3, 8),
        (2, "recv", 0, 8), (2, "send", 0, 8), (3, "recv", 1, 8), (3, "send", 1, 8)]
    matching = match_bundle(bundle)
    assert sorted(matching.p2p.group_by("src", "dst").len().rows()) == [(0, 2, 8), (1, 3, 8), (2, 0, 8), (3, 1, 8)]
    assert not [f for f in matching.findings if f.kind in ("no_peer", "unmatched_send", "unmatched_recv")]
    assert len(matching.p2p) == 32 and matching.p2p["bytes_match"].all()
    # a gloo send lasts until its caller waits on it: not simultaneous with its receive
    assert matching.p2p["send_async"].all() and not matching.p2p["recv_async"].any()
    assert not any("gloo send" in n or "gloo recv" in n for n in notes), notes


def test_real_pp2dp2_dp_all_reduces_get_their_group_and_one_clock_component(tmp_path):
    notes: list[str] = []
    bundle = load_bundle(_copy(tmp_path), warn=notes.append)
    grads = bundle.scan().filter((pl.col("cat") == "collective") & (pl.col("bytes") > 1 << 20)).collect()
    assert sorted(grads.group_by("rank", "group_ranks").len().rows()) == [
        (0, [0, 1], 4), (1, [0, 1], 4), (2, [2, 3], 4), (3, [2, 3], 4)]
    # the 4-byte all-reduces, one a step, fit the pipeline groups and the DP groups by their
    # count; their members leave them together within a fraction of the DP members' scatter
    four = bundle.scan().filter((pl.col("cat") == "collective") & (pl.col("bytes") == 4)).collect()
    assert sorted(four.group_by("rank", "group_ranks").len().rows()) == [
        (0, [0, 2], 4), (1, [1, 3], 4), (2, [0, 2], 4), (3, [1, 3], 4)]
    # the last stage's TP all-reduces (a group of one) stay ungrouped
    assert any(n.startswith("gloo collectives name no process group: 32 of 80 calls placed") for n in notes), notes
    clock = align_bundle(bundle, match_bundle(bundle))
    assert clock.components == [[0, 1, 2, 3]]


def _events(rows: list[dict]) -> pl.DataFrame:
    schema = {**EVENTS_SCHEMA, _gloo_groups.LOCAL: pl.Int32()}
    return pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema, orient="row")


def _p2p(rank, name, local):
    return dict(rank=rank, name=name, cat="p2p", ph="X", ts_ns=0, dur_ns=1, **{_gloo_groups.LOCAL: local})


def test_a_peer_two_groups_fit_is_left_null_with_a_note():
    # ranks 0,1,2 in one world; rank 0 sends to local 1 on two groups of its own that both
    # have a rank answering with a receive from local 0: no telling which
    groups = {0: [(0, 1), (0, 2)], 1: [(0, 1)], 2: [(0, 2)]}
    events = _events([_p2p(0, "send", 1), _p2p(1, "recv", 0), _p2p(2, "recv", 0)])
    notes: list[str] = []
    out = _gloo_groups.resolve(events, groups, notes.append)
    assert _gloo_groups.LOCAL not in out.columns
    assert out.filter(pl.col("rank") == 0)["peer"].to_list() == [None]
    assert any(n.startswith("rank 0: 1 gloo send call(s) name group-local peer 1") and "2 process groups fit" in n
               for n in notes), notes


def test_the_side_that_answers_decides_and_untraced_peers_take_the_one_proposal():
    # rank 0's groups (0,1) and (0,2) both put local 1 elsewhere; only rank 2 answers (recv
    # from local 0 in (0,2)). Rank 0's receive names local 1 in (0, 3), whose rank 3 is not traced.
    groups = {0: [(0, 1), (0, 2), (0, 3)], 1: [(0, 1)], 2: [(0, 2)]}
    events = _events([_p2p(0, "send", 1), _p2p(2, "recv", 0), _p2p(0, "recv", 9)])
    notes: list[str] = []
    out = _gloo_groups.resolve(events, groups, notes.append)
    assert out.select("rank", "name", "peer").rows() == [(0, "send", 2), (2, "recv", 0), (0, "recv", None)]
    assert any("rank 0: 1 gloo recv call(s) name group-local peer 9" in n for n in notes), notes
    # one proposal whatever the group, towards a rank with no trace: taken
    out = _gloo_groups.resolve(_events([_p2p(0, "recv", 1)]), {0: [(0, 3)]}, notes.append)
    assert out["peer"].to_list() == [3]


def test_of_two_groups_that_fit_the_one_the_ranks_calls_of_that_size_ran_on_is_taken():
    # Interleaved PP4 under gloo: the pipeline group (0,1,2,3), the embedding group (0,3), and a
    # group (2,3) of its own for a 4 MB tensor more on every exchange of link 2-3. Stage 0
    # receives the last stage's hand-back (local 3: the pipeline group alone) and stage 1's
    # gradients (local 1: rank 1 on the pipeline group or rank 3 on the embedding group, whose
    # rank 3 also receives from local 0); stage 2 sends activations to local 3 and local 1 on
    # the pipeline group and the 4 MB tensor to local 1 on (2,3)
    act, big = 131072, 4_000_000
    groups = {0: [(0, 1, 2, 3), (0, 3)], 1: [(0, 1, 2, 3)], 2: [(0, 1, 2, 3), (2, 3)],
              3: [(0, 1, 2, 3), (0, 3), (2, 3)]}

    def call(rank, name, local, size):
        return {**_p2p(rank, name, local), "bytes": size}

    events = _events([call(0, "recv", 3, act), call(3, "send", 0, act),      # 3 -> 0, the hand-back
                      call(0, "recv", 1, act), call(1, "send", 0, act),      # 1 -> 0, gradients
                      call(3, "recv", 0, act), call(0, "send", 3, act),      # 0 -> 3, the hand-back's gradients
                      call(2, "send", 3, act), call(3, "recv", 2, act),      # 2 -> 3, activations
                      call(2, "send", 1, act), call(1, "recv", 2, act),      # 2 -> 1, gradients
                      call(2, "send", 1, big), call(3, "recv", 0, big)])     # 2 -> 3 on (2,3), the extra tensor
    notes: list[str] = []
    out = _gloo_groups.resolve(events, groups, notes.append)
    assert out.select("rank", "name", "peer", "bytes").rows() == [
        (0, "recv", 3, act), (3, "send", 0, act), (0, "recv", 1, act), (1, "send", 0, act),
        (3, "recv", 0, act), (0, "send", 3, act), (2, "send", 3, act), (3, "recv", 2, act),
        (2, "send", 1, act), (1, "recv", 2, act), (2, "send", 3, big), (3, "recv", 2, big)]
    assert not [n for n in notes if "left without a peer" in n or "disagree" in n], notes


def test_sides_that_disagree_are_named():
    # rank 0 sends to rank 1 (the only proposal), but rank 1's receive resolves elsewhere
    groups = {0: [(0, 1)], 1: [(1, 2)]}
    notes: list[str] = []
    _gloo_groups.resolve(_events([_p2p(0, "send", 1), _p2p(1, "recv", 1)]), groups, notes.append)
    assert any(n.startswith("rank 0's gloo send calls go to rank 1, but rank 1 has no recv calls resolved to rank 0")
               for n in notes), notes


def test_megatron_coordinates_come_from_the_process_groups_pg_config_declares(tmp_path):
    # gloo calls name no group, but every rank's pg_config lists megatron-core's groups by
    # description: its place in its TENSOR_MODEL_PARALLEL_GROUP, PIPELINE_... and DATA_... is
    # its (tp, pp, dp), whether or not any call was placed in a group. Here PP2 x DP2: stage 0
    # is ranks 0,1 (dp 0,1), stage 1 ranks 2,3.
    bundle = load_bundle(_copy(tmp_path))
    ranks = bundle.ranks.sort("rank")
    assert ranks.select("rank", "tp", "pp", "dp").rows() == [(0, 0, 0, 0), (1, 0, 0, 1), (2, 0, 1, 0), (3, 0, 1, 1)]
    assert ranks.select("layout_tp", "layout_pp", "layout_dp").unique().rows() == [(1, 2, 2)]


def test_a_plain_ddp_trace_has_no_megatron_coordinates(tmp_path):
    # plain DDP: pg_config lists only the default group; there is no layout to read
    for f in (CASE.parent / "ddp4-prof-healthy").glob("rank-*.json.gz"):
        shutil.copy(f, tmp_path / f.name)
    ranks = load_bundle(tmp_path).ranks
    assert ranks["tp"].null_count() == ranks["layout_tp"].null_count() == 4


def test_tp_calls_on_shared_cores_are_placed_by_how_tightly_their_members_end_them(tmp_path):
    # megatron-core TP2 x DP2, 4 gloo processes on 2 cores (cases-extra
    # gpt-tp2dp2-prof-healthy-run2): the time between two TP all-reduces of a pair differs by
    # over 10% between its members (scheduling), so no interval test placed them; but the
    # members of a TP pair end each call within ~1-2 ms of each other, the DP pair's 13-19 ms
    case = CASE.parent.parent / "cases-extra" / "gpt-tp2dp2-prof-healthy-run2"
    for f in case.glob("rank-*.json.gz"):
        shutil.copy(f, tmp_path / f.name)
    bundle = load_bundle(tmp_path, warn=lambda _: None)
    tp = bundle.scan().filter((pl.col("cat") == "collective") & (pl.col("bytes") == 131072)).collect()
    assert sorted(tp.group_by("rank", "group_ranks").len().rows()) == [
        (0, [0, 1], 48), (1, [0, 1], 48), (2, [2, 3], 48), (3, [2, 3], 48)]


FRESH = CASE.parent.parent / "cases-fresh"


def test_pp2_p2p_without_shapes_goes_to_the_pipeline_partner(tmp_path):
    # megatron-core PP2 x DP2 under the profiler's defaults (record_shapes=False): no c10d input
    # names the peer. Ranks 0,1 are stage 0, 2,3 stage 1; link 1-3 also carries an extra
    # exchange on a group of its own every time, so its ends make twice the calls
    bundle = load_bundle(_copy_of(FRESH / "gpt-pp2dp2-prof-nosh-link1-3-f113", tmp_path), warn=lambda _: None)
    p2p = bundle.scan().filter(pl.col("cat") == "p2p").collect()
    assert sorted(p2p.group_by("rank", "name", "peer").len().rows()) == [
        (0, "recv", 2, 8), (0, "send", 2, 8), (1, "recv", 3, 16), (1, "send", 3, 16),
        (2, "recv", 0, 8), (2, "send", 0, 8), (3, "recv", 1, 16), (3, "send", 1, 16)]
    matching = match_bundle(bundle)
    assert sorted(matching.p2p.group_by("src", "dst").len().rows()) == [(0, 2, 8), (1, 3, 16), (2, 0, 8), (3, 1, 16)]
    assert not [f for f in matching.findings if f.kind in ("no_peer", "unmatched_send", "unmatched_recv")]


def test_pp4_middle_stages_without_shapes_are_paired_by_when_their_calls_end(tmp_path):
    # PP4 under the profiler's defaults: stages 0 and 3 have one neighbour each, stages 1 and 2
    # two. Each step, rank 0 exchanges 2 messages each way with rank 1 (its trace, 4 steps);
    # link 1-2 carries twice that (an extra exchange injected there), link 2-3 as many as 0-1
    bundle = load_bundle(_copy_of(FRESH / "gpt-pp4-prof-nosh-link1-2-f104", tmp_path), warn=lambda _: None)
    p2p = bundle.scan().filter(pl.col("cat") == "p2p").collect()
    assert sorted(p2p.group_by("rank", "name", "peer").len().rows()) == [
        (0, "recv", 1, 8), (0, "send", 1, 8),
        (1, "recv", 0, 8), (1, "recv", 2, 16), (1, "send", 0, 8), (1, "send", 2, 16),
        (2, "recv", 1, 16), (2, "recv", 3, 8), (2, "send", 1, 16), (2, "send", 3, 8),
        (3, "recv", 2, 8), (3, "send", 2, 8)]
    matching = match_bundle(bundle)
    assert not [f for f in matching.findings if f.kind in ("no_peer", "unmatched_send", "unmatched_recv")]


def test_pairing_by_ends_finds_the_peers_shapes_record():
    # the same pairing on PP4 traces recorded with shapes, their peers taken away: every call
    # gets the peer its c10d input named, on fixed and on lognormal lengths
    pipe = (0, 1, 2, 3)
    for name in ("gpt-pp4-prof-layer1.5x-r2-f2", "gpt-pp4-prof-seqlognorm0.95-f9"):
        events = load_bundle(FRESH / name, warn=lambda _: None).scan().collect()
        recorded = events.filter(pl.col("cat") == "p2p")["peer"].to_list()
        assert None not in recorded and len(recorded) >= 96
        blind = events.with_columns(peer=pl.when(pl.col("cat") == "p2p").then(None).otherwise(pl.col("peer")))
        paired = _gloo_groups._pipeline_peers(blind, {r: pipe for r in pipe})
        assert paired.filter(pl.col("cat") == "p2p")["peer"].to_list() == recorded, name


def test_a_send_is_not_paired_with_a_receive_that_ended_before_it_was_posted():
    # rank 1 posts a send at 100 and waits on it at 400 (an isend: its span ends at the wait);
    # rank 2's receive ended at 150. Then rank 1 sends again, posted at 390 and done at 398, and
    # rank 0's receive ends at 399. By ends alone the first send (400) pairs with rank 0's
    # receive (399), and the second, posted at 390, with a receive done at 150
    def call(rank, name, start, end):
        return dict(rank=rank, name=name, cat="p2p", ph="X", ts_ns=start, dur_ns=end - start)

    events = _events([call(1, "send", 100, 400), call(2, "recv", 90, 150), call(1, "send", 390, 398),
                      call(0, "recv", 380, 399)]).drop(_gloo_groups.LOCAL)
    pipes = {r: (0, 1, 2) for r in (0, 1, 2)}
    assert _gloo_groups._pipeline_peers(events, pipes)["peer"].to_list() == [2, 1, 0, 1]


def test_a_pipeline_call_left_without_a_partner_leaves_every_call_without_a_peer():
    # three stages; rank 1 sends to 0 and 2, but only rank 0 receives: the trace of rank 2's
    # side is cut short, so no pairing takes every call (nothing is guessed)
    def call(rank, name, end):
        return dict(rank=rank, name=name, cat="p2p", ph="X", ts_ns=end - 10, dur_ns=10)

    events = _events([call(1, "send", 100), call(0, "recv", 101), call(1, "send", 200),
                      call(2, "send", 300), call(1, "recv", 301)]).drop(_gloo_groups.LOCAL)
    pipes = {0: (0, 1, 2), 1: (0, 1, 2), 2: (0, 1, 2)}
    assert _gloo_groups._pipeline_peers(events, pipes)["peer"].to_list() == [None] * 5
    # with rank 2's receive there (and a send from rank 0 to 1, so that each end calls half
    # as often as the middle, as a line's ends do), each call gets the neighbour whose call
    # ended with it
    whole = pl.concat([events, _events([call(2, "recv", 202), call(0, "send", 400),
                                        call(1, "recv", 401)]).drop(_gloo_groups.LOCAL)])
    assert _gloo_groups._pipeline_peers(whole, pipes)["peer"].to_list() == [0, 1, 2, 1, 2, 1, 1, 0]




def test_an_interleaved_pipeline_keeps_its_calls_without_a_peer(tmp_path):
    # megatron-core PP4 with 2 model chunks a rank (interleaved 1F1B), no fault, the profiler's
    # defaults: each microbatch also goes from stage 3 back to stage 0. Paired as a pipeline that
    # does not interleave, a third of the calls were forced onto other neighbours (link 1-2 16
    # messages each way, the others 48, where the ends' link carries 16 and the others 32)
    case = FRESH / "gpt-pp4-vpp2-prof-nosh-healthy-f115"
    bundle = load_bundle(_copy_of(case, tmp_path), warn=lambda _: None)
    p2p = bundle.scan().filter(pl.col("cat") == "p2p").collect()
    assert len(p2p) == 448 and p2p["peer"].null_count() == 448
    # the same calls of a pipeline that does not interleave are paired (the PP4 case above)
    p2p = load_bundle(FRESH / "gpt-pp4-prof-nosh-link1-2-f104", warn=lambda _: None).scan().filter(
        pl.col("cat") == "p2p").collect()
    assert p2p["peer"].null_count() == 0


RING = pathlib.Path(__file__).parent.parent.parent / "fixtures" / "kineto_gloo_ring"


def test_a_ring_read_as_a_pipeline_is_read_and_its_calls_keep_no_peer(tmp_path):
    # hand-written ring attention on 4 gloo ranks, the world its only group: every rank sends
    # 120 times to the next and receives 120 times from the one before, rank 3 to rank 0. Paired
    # as a line, its calls made a graph scipy's min_weight_full_bipartite_matching did not finish
    for f in RING.glob("*.json.gz"):
        shutil.copy(f, tmp_path / f.name)
    bundle = load_bundle(tmp_path, warn=lambda _: None)
    p2p = bundle.scan().filter(pl.col("cat") == "p2p").collect()
    assert sorted(p2p.group_by("rank", "name").len().rows()) == [
        (r, name, 120) for r in range(4) for name in ("recv", "send")]
    # its ends call as often as its middle: no line shown; nor a ring's direction, as each rank
    # posts its send and its receive together and waits on both: under the shifts r -> r+1 and
    # r -> r-1 alike no message is received before it was sent (``_partner_peers``)
    assert p2p["peer"].null_count() == 960


def _layered(levels: int) -> "sparse.csr_matrix":
    # two sends and two receives a level, each send allowed both receives of its level and of the
    # next: a long chain, as a pipeline's pairings are. Send 2k+i ends with receive 2k+i (cost 1),
    # every other allowed pair costs 5
    from scipy import sparse
    rows, cols, cost = [], [], []
    for s in range(2 * levels):
        level = s // 2
        for r in range(2 * level, min(2 * level + 4, 2 * levels)):
            rows.append(s)
            cols.append(r)
            cost.append(1.0 if r == s else 5.0)
    return sparse.csr_matrix((cost, (rows, cols)), shape=(2 * levels, 2 * levels))


def test_the_cheapest_full_matching_of_a_deep_layered_graph(monkeypatch):
    graph = _layered(200)
    assert _gloo_groups._cheapest_full_matching(graph).tolist() == list(range(400))
    monkeypatch.setattr(_gloo_groups, "DENSE", 10)   # the linear program, for pairings too large for a dense one
    assert _gloo_groups._cheapest_full_matching(graph).tolist() == list(range(400))


def test_no_full_matching_is_none_either_way(monkeypatch):
    from scipy import sparse
    graph = _layered(50).tolil()
    graph[:, 99] = 0            # no send may pair with the last receive
    graph = sparse.csr_matrix(graph)
    graph.eliminate_zeros()
    assert _gloo_groups._cheapest_full_matching(graph) is None
    monkeypatch.setattr(_gloo_groups, "DENSE", 10)
    assert _gloo_groups._cheapest_full_matching(graph) is None


PP_BY_HAND = pathlib.Path(__file__).parent.parent.parent / "fixtures" / "kineto_gloo_pp_by_hand"


def test_groups_of_one_do_not_hide_a_pipeline_over_the_world(tmp_path):
    # a 1F1B pipeline by hand over 4 gloo processes: groups of the world, of a pipeline of the
    # same four ranks, and a data-parallel group of each rank alone. Its p2p calls, without a
    # peer of record, pair along the line 0-1-2-3: 48 messages each way on each link
    for f in PP_BY_HAND.glob("*.json.gz"):
        shutil.copy(f, tmp_path / f.name)
    p2p = load_bundle(tmp_path, warn=lambda _: None).scan().filter(pl.col("cat") == "p2p").collect()
    assert sorted(p2p.group_by("rank", "name", "peer").len().rows()) == [
        (0, "recv", 1, 48), (0, "send", 1, 48),
        (1, "recv", 0, 48), (1, "recv", 2, 48), (1, "send", 0, 48), (1, "send", 2, 48),
        (2, "recv", 1, 48), (2, "recv", 3, 48), (2, "send", 1, 48), (2, "send", 3, 48),
        (3, "recv", 2, 48), (3, "send", 2, 48)]


def test_only_group_passes_over_groups_of_one():
    assert _gloo_groups.only_group([(0, 1, 2, 3), (0, 1, 2, 3), (1,)]) == (0, 1, 2, 3)
    assert _gloo_groups.only_group([(0, 1, 2, 3), (1, 3)]) is None
    assert _gloo_groups.only_group([(2,)]) is None


MS_NS = 1_000_000


def _ring_calls(n: int = 4, laps: int = 6, seed: int = 0) -> pl.DataFrame:
    """p2p calls of ``n`` ranks passing a message r -> r+1 every lap, no peer recorded: each rank
    posts its send at a jittered time, and its receive ends 0.1 ms after its predecessor's post."""
    import numpy as np
    rng = np.random.default_rng(seed)
    post = {(r, lap): lap * 20 * MS_NS + int(rng.uniform(0, 5) * MS_NS) for r in range(n) for lap in range(laps)}
    rows = []
    for (r, lap), t in post.items():
        rows.append({"rank": r, "cat": "p2p", "name": "send", "peer": None, "ts_ns": t, "dur_ns": 50_000})
        done = post[((r - 1) % n, lap)] + 100_000
        start = lap * 20 * MS_NS
        rows.append({"rank": r, "cat": "p2p", "name": "recv", "peer": None, "ts_ns": start, "dur_ns": done - start})
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "cat": pl.String, "name": pl.String, "peer": pl.Int32,
                                      "ts_ns": pl.Int64, "dur_ns": pl.Int64})


def test_a_ring_with_no_peer_recorded_is_paired_by_causality_unless_a_member_is_untraced():
    calls = _ring_calls()
    notes = []
    paired = _gloo_groups._partner_peers(calls, {0, 1, 2, 3}, notes.append)
    sends, recvs = paired.filter(pl.col("name") == "send"), paired.filter(pl.col("name") == "recv")
    assert (sends["peer"] == (sends["rank"] + 1) % 4).all()
    assert (recvs["peer"] == (recvs["rank"] + 3) % 4).all()
    assert len(notes) == 1 and "0 -> 1, 1 -> 2, 2 -> 3, 3 -> 0" in notes[0]
    # rank 3's trace lost: its neighbours must not be joined to each other
    lost = calls.filter(pl.col("rank") != 3)
    assert _gloo_groups._partner_peers(lost, {0, 1, 2, 3}, notes.append)["peer"].null_count() == lost.height
    # nor where no group says who the members are, or some calls already have peers
    assert _gloo_groups._partner_peers(calls, set(), notes.append)["peer"].null_count() == calls.height
    some = calls.with_columns(peer=pl.when(pl.col("rank") == 0).then(pl.lit(1, pl.Int32)).otherwise(pl.col("peer")))
    assert _gloo_groups._partner_peers(some, {0, 1, 2, 3}, notes.append)["peer"].null_count() == some["peer"].null_count()
    assert len(notes) == 1


def _prefill_decode_calls(rounds: int = 6, layers: int = 4, seed: int = 0) -> pl.DataFrame:
    """p2p calls of disaggregated serving, no peer recorded: prefill workers 0 and 1 send one
    message a layer to decode workers 2 and 3 (each posted at a jittered time, received 0.2 ms
    later), which send one message back at the round's end (received 0.1 ms after it was posted)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    rows = []
    for lap in range(rounds):
        start = lap * 100 * MS_NS
        back = {}
        for src, dst in ((0, 2), (1, 3)):
            for layer in range(layers):
                t = start + (layer * 5 + rng.uniform(0, 4)) * MS_NS
                rows.append({"rank": src, "cat": "p2p", "name": "send", "peer": None, "ts_ns": int(t), "dur_ns": 50_000})
                rows.append({"rank": dst, "cat": "p2p", "name": "recv", "peer": None, "ts_ns": start,
                             "dur_ns": int(t + 200_000 - start)})
            back[dst] = start + (60 + rng.uniform(0, 20)) * MS_NS
        for dst, src in ((2, 0), (3, 1)):
            rows.append({"rank": dst, "cat": "p2p", "name": "send", "peer": None, "ts_ns": int(back[dst]), "dur_ns": 50_000})
            rows.append({"rank": src, "cat": "p2p", "name": "recv", "peer": None, "ts_ns": start + 30 * MS_NS,
                         "dur_ns": int(back[dst] + 100_000 - start - 30 * MS_NS)})
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "cat": pl.String, "name": pl.String, "peer": pl.Int32,
                                      "ts_ns": pl.Int64, "dur_ns": pl.Int64})


def test_pairs_that_send_more_one_way_than_the_other_are_paired_by_causality():
    # four times as many messages 0 -> 2 and 1 -> 3 as back: no two ranks send as often as they
    # receive, once asked of every pairing (``_partner_peers``)
    calls = _prefill_decode_calls()
    notes = []
    paired = _gloo_groups._partner_peers(calls, {0, 1, 2, 3}, notes.append)
    sends = paired.filter(pl.col("name") == "send")
    assert dict(sends.group_by("rank").agg(pl.col("peer").unique()).with_columns(pl.col("peer").list.first())
                .iter_rows()) == {0: 2, 1: 3, 2: 0, 3: 1}
    assert paired.filter(pl.col("name") == "recv").group_by("rank", "peer").len().sort("rank").rows() == [
        (0, 2, 6), (1, 3, 6), (2, 0, 24), (3, 1, 24)]
    assert len(notes) == 1 and "paired 0 -> 2, 1 -> 3, 2 -> 0, 3 -> 1" in notes[0]
    # the tokens' way back too few to tell their senders apart: no peers
    few = _prefill_decode_calls(rounds=_gloo_groups.RING_LEAST - 1)
    assert _gloo_groups._partner_peers(few, {0, 1, 2, 3}, notes.append)["peer"].null_count() == few.height

def _hub_calls(spokes: int = 3, rounds: int = 6) -> pl.DataFrame:
    """p2p calls of a server (rank 0) receiving each client's update in turn by blocking recv,
    clients 1..``spokes`` sending by blocking send, no peer recorded: client k posts its send at
    the round's start, and its send and the server's receive of it end together."""
    rows = []
    for lap in range(rounds):
        t = lap * 50 * MS_NS
        for k in range(1, spokes + 1):
            done = t + k * 3 * MS_NS
            rows.append({"rank": k, "cat": "p2p", "name": "send", "peer": None, "ts_ns": t, "dur_ns": done + 20_000 - t})
            rows.append({"rank": 0, "cat": "p2p", "name": "recv", "peer": None, "ts_ns": done - 3 * MS_NS,
                         "dur_ns": 3 * MS_NS})
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "cat": pl.String, "name": pl.String, "peer": pl.Int32,
                                      "ts_ns": pl.Int64, "dur_ns": pl.Int64})


def test_a_hub_with_no_peer_recorded_is_paired_with_every_spoke_by_its_calls_ends():
    calls = _hub_calls()
    notes = []
    paired = _gloo_groups._hub_peers(calls, {0, 1, 2, 3}, notes.append)
    sends, recvs = paired.filter(pl.col("name") == "send"), paired.filter(pl.col("name") == "recv")
    assert (sends["peer"] == 0).all()
    # the server received from 1, 2, 3 in turn each round
    assert recvs.sort("ts_ns")["peer"].to_list() == [1, 2, 3] * 6
    assert len(notes) == 1 and "rank 0 receives only, and ranks 1, 2, 3 send only" in notes[0]
    # a scatter by hand, the same calls' sides swapped: the hub sends only
    swapped = calls.with_columns(name=pl.when(pl.col("name") == "send").then(pl.lit("recv")).otherwise(pl.lit("send")))
    out = _gloo_groups._hub_peers(swapped, {0, 1, 2, 3}, notes.append)
    assert (out.filter(pl.col("rank") != 0)["peer"] == 0).all()
    assert out.filter(pl.col("rank") == 0).sort("ts_ns")["peer"].to_list() == [1, 2, 3] * 6
    # not where a member went untraced, a spoke also receives, or spokes send too few messages
    lost = calls.filter(pl.col("rank") != 3)
    assert _gloo_groups._hub_peers(lost, {0, 1, 2, 3}, notes.append)["peer"].null_count() == lost.height
    mixed = calls.with_columns(name=pl.when((pl.col("rank") == 2) & (pl.col("ts_ns") == 0)).then(pl.lit("recv"))
                               .otherwise(pl.col("name")))
    assert _gloo_groups._hub_peers(mixed, {0, 1, 2, 3}, notes.append)["peer"].null_count() == mixed.height
    few = _hub_calls(rounds=_gloo_groups.RING_LEAST - 1)
    assert _gloo_groups._hub_peers(few, {0, 1, 2, 3}, notes.append)["peer"].null_count() == few.height
    assert len(notes) == 2
