"""Work a rank adds (``added_work``): the ops it calls more often than its peers, and what that costs."""

from __future__ import annotations

import polars as pl

from pathlib import Path

from mapp.analysis.detect import detect_bundle
from mapp.analysis.detect.added_work import added_work, adds_work, clocked, graded_work, op_calls
from mapp.analysis.ingest import load_bundle
from mapp.bench.real import load_corpus

MS = 1_000_000


def _work(rows):
    """``same_work``'s per (rank, iteration, kind) table from (rank, name, shape, calls, q_us), two
    data-parallel peers (``dp``) of one stage, three iterations alike."""
    out = [{"rank": r, "dp": r, "pp": 0, "iteration": it, "name": n, "shape": s, "calls": float(c), "q": q * 1e3}
           for it in range(3) for r, n, s, c, q in rows]
    return pl.DataFrame(out).cast({"rank": pl.Int32, "dp": pl.Int32, "pp": pl.Int32, "iteration": pl.Int32})


def test_extra_calls_of_a_name_are_the_work_added():
    # rank 1 runs a third more of the layer's GEMMs, same shape, same time a call
    work = _work([(0, "aten::mm", "[[512,256],[256,1024]]", 60, 100.0),
                  (1, "aten::mm", "[[512,256],[256,1024]]", 80, 100.0),
                  (0, "aten::add", "[[512,1024]]", 40, 5.0), (1, "aten::add", "[[512,1024]]", 40, 5.0)])
    added = added_work(work, ["pp"]).row(0, named=True)
    assert added["rank"] == 1 and abs(added["added"] - 80 / 60) < 1e-9
    assert abs(added["added_excess_ns"] - 20 * 100e3) < 1e-3


def test_one_more_call_of_a_name_adds_one_call_not_the_names_other_shapes():
    # two replicas of other sequence lengths: rank 1 copies longer tensors (other shapes, dearer
    # calls) and makes one copy more a step (a log line). What it adds is that one call at most,
    # not the 1.0 ms more its copies of longer tensors take
    work = _work([(0, "aten::copy_", "[[2,8,206,206]]", 59, 10.0),
                  (1, "aten::copy_", "[[2,8,256,256]]", 59, 26.0),
                  (1, "aten::copy_", "[[38,2]]", 1, 6.0)])
    added = added_work(work, ["pp"]).row(0, named=True)
    assert added["rank"] == 1
    assert added["added_excess_ns"] <= 26e3 + 1e-3          # one call at its dearest kind
    assert added["added"] < 1.05                            # not (59 x 26 + 6) / (59 x 10) = 2.6x


def test_kernels_are_calls_of_the_op_that_launched_them():
    # two replicas of other sequence lengths on GPUs: cuBLAS picks a GEMM kernel per problem
    # size, so each rank's aten::mm calls run as kernels the other never launches, and one
    # rank's shape takes a split-K kernel with a reduction beside it. As many aten::mm calls on
    # each: no work added
    work = _work([(0, "nvjet_128x256_NNN", "[132,1,1]x[384,1,1] <- aten::mm [[3072,4096],[4096,4096]]", 16, 300.0),
                  (0, "nvjet_128x176_splitK_NNT", "[132,1,1]x[384,1,1] <- aten::mm [[512,4096],[4096,4096]]", 16, 60.0),
                  (0, "splitKreduce_kernel", "[64,1,1]x[256,1,1] <- aten::mm [[512,4096],[4096,4096]]", 16, 5.0),
                  (1, "nvjet_128x216_coopA_NNT", "[132,1,1]x[384,1,1] <- aten::mm [[1800,4096],[4096,4096]]", 32, 180.0)])
    assert added_work(work, ["pp"]) is None
    calls = op_calls(work.filter(pl.col("iteration") == 0), ["rank"]).sort("rank")
    assert calls.select("rank", "op", "calls").rows() == [(0, "aten::mm", 32.0), (1, "aten::mm", 32.0)]
    # extra matmuls are more aten::mm calls (of a shape, its one kernel: more calls of it)
    more = work.with_columns(calls=pl.when(pl.col("rank") == 1).then(40.0).otherwise(pl.col("calls")))
    added = added_work(more, ["pp"]).row(0, named=True)
    assert added["rank"] == 1 and added["added"] > 1.05


def test_stages_of_different_programs_are_compared_at_their_scale():
    # one rank a pipeline stage, all ranks one group: the last stage runs 3 layers to the
    # others' 1 (scale 3), calling every layer kind 3x as often, and no more; a stage that calls
    # its layers' GEMM 16x as often as its peers at its scale adds work
    def job(last_calls):
        rows = [(r, "aten::mm", "[[3584,2304],[2304,2304]]", 8 * (3 if r == 3 else 1), 50.0) for r in range(3)]
        rows += [(3, "aten::mm", "[[3584,2304],[2304,2304]]", last_calls, 50.0)]
        rows += [(r, "aten::add", "[[3584,2304]]", 12 * (3 if r == 3 else 1), 10.0) for r in range(4)]
        return _work(rows).with_columns(job=pl.lit(0))

    scales = pl.DataFrame({"rank": [0, 1, 2, 3] * 3, "iteration": [i for i in range(3) for _ in range(4)],
                           "scale": [1.0, 1.0, 1.0, 3.0] * 3}).cast({"rank": pl.Int32, "iteration": pl.Int32})
    assert added_work(job(24), ["job"], scales=scales) is None        # 3 layers' worth: its program
    added = added_work(job(128), ["job"], scales=scales).row(0, named=True)
    assert added["rank"] == 3 and abs(added["added"] - 128 / 24) < 1e-9
    assert abs(added["added_excess_ns"] - (128 - 24) * 50e3) < 1e-3
    # without the scale the heavier stage would read as adding work on every kind
    assert added_work(job(24), ["job"]) is not None
    # an end stage's own GEMMs sharing its layers' shape call it up to twice as often: with
    # ``often`` 2, only beyond that is work added
    assert added_work(job(40), ["job"], scales=scales, often=2.0) is None
    assert added_work(job(128), ["job"], scales=scales, often=2.0) is not None


def test_work_a_peer_added_to_one_kind_does_not_set_another_stages_scale():
    # PP2, one rank a stage, each running one layer: the last stage (rank 1) also runs extra
    # matmuls of its MLP's first GEMM's shape before each microbatch, 39 calls a step to the
    # first stage's 4, 44 ms a step. Weighted by that peer's time alone the kind outweighed the
    # rest of the layer, and the first stage read as a tenth of the last.
    import numpy as np
    from mapp.analysis.detect.same_work import _program_scale

    kinds = [("aten::mm", "[[64,512],[512,2048]]", {0: (4, 1.4e6), 1: (39, 1.13e6)}),
             ("aten::mm", "[[64,2048],[2048,512]]", {0: (4, 0.95e6), 1: (4, 1.1e6)}),
             ("aten::mm", "[[512,64],[64,2048]]", {0: (2, 1.5e6), 1: (2, 1.4e6)}),
             ("aten::add_", "[[2048,512],[2048,512],[]]", {0: (4, 0.55e6), 1: (4, 0.6e6)})]
    rows = [{"rank": r, "iteration": 3, "name": n, "shape": s, "calls": float(by[r][0]), "q": by[r][1]}
            for n, s, by in kinds for r in (0, 1)]
    work = pl.DataFrame(rows).cast({"rank": pl.Int32, "iteration": pl.Int32})
    other = {0: 1, 1: 0}   # each rank's peer is the other
    peer = [next(x for x in rows if x["rank"] == other[row["rank"]] and x["shape"] == row["shape"]) for row in rows]
    peer_calls = np.array([p["calls"] for p in peer])
    peer_ns = peer_calls * np.array([p["q"] for p in peer])
    scale = dict(zip(work["rank"].to_list(), _program_scale(work, peer_calls, peer_ns)))
    assert scale[0] == 1.0      # the first stage runs the same layer: not a tenth of the last
    assert scale[1] == 1.0


def _timed(work, times):
    """``work`` with each (rank, name)'s real time ``t`` and longest call (``times``: us, us)."""
    t = pl.DataFrame([{"rank": r, "name": n, "t": a * 1e3, "longest": b * 1e3} for (r, n), (a, b) in times.items()])
    return work.with_columns(pl.col("shape").cast(pl.String)).join(t.cast({"rank": pl.Int32}), on=["rank", "name"],
                                                                   how="left")


def test_surplus_calls_of_a_larger_size_cost_what_they_took_by_the_ranks_clock():
    # no shapes recorded: rank 1's 48 extra aten::mm calls are 1 ms matmuls where the model's 30
    # are 0.4 ms ones, so the op's typical call prices them at 0.4 ms (19.2 ms); they took 48 ms
    work = _timed(_work([(0, "aten::mm", None, 30, 400.0), (1, "aten::mm", None, 78, 400.0),
                         (0, "aten::add", None, 40, 5.0), (1, "aten::add", None, 40, 5.0)]),
                  {(0, "aten::mm"): (12_000.0, 450.0), (1, "aten::mm"): (60_000.0, 1_100.0),
                   (0, "aten::add"): (200.0, 6.0), (1, "aten::add"): (200.0, 6.0)})
    added = added_work(work, ["pp"]).row(0, named=True)
    assert added["rank"] == 1
    assert abs(added["added_excess_ns"] - 48 * 400e3) < 1e-3       # counted: the decision's figure
    assert abs(added["added_real_ns"] - 48_000e3) < 1e-3           # by its clock: the cost's


def test_by_its_clock_a_rank_adds_no_more_than_its_surplus_calls_at_its_longest_call():
    # one more copy a step (a log line) beside copies of longer tensors: by the clock it took 1 ms
    # more, but one surplus call of at most 26 us is all it added
    work = _timed(_work([(0, "aten::copy_", None, 59, 10.0), (1, "aten::copy_", None, 60, 26.0)]),
                  {(0, "aten::copy_"): (590.0, 12.0), (1, "aten::copy_"): (1_560.0, 26.0)})
    added = added_work(work, ["pp"]).row(0, named=True)
    assert added["rank"] == 1 and abs(added["added_real_ns"] - 26e3) < 1e-3


def test_calls_traded_for_others_are_another_branch_not_work_added():
    # a mixture of experts whose router favours rank 0's experts: rank 1's experts, short of
    # tokens, zero-fill buffers (16 more calls a step of empty/fill_, dear ones) where rank 0
    # slices its many tokens (16 more of narrow/as_strided). Neither adds work to one program
    work = _work([(0, "aten::mm", "[[512,256],[256,1024]]", 40, 100.0), (1, "aten::mm", "[[512,256],[256,1024]]", 40, 100.0),
                  (0, "aten::fill_", "[[512,256]]", 48, 20.0), (1, "aten::fill_", "[[512,256]]", 56, 150.0),
                  (0, "aten::empty", "[]", 117, 5.0), (1, "aten::empty", "[]", 125, 5.0),
                  (0, "aten::narrow", "[[512,256]]", 38, 5.0), (1, "aten::narrow", "[[512,256]]", 30, 5.0),
                  (0, "aten::as_strided", "[[512,256]]", 266, 2.0), (1, "aten::as_strided", "[[512,256]]", 258, 2.0)])
    assert added_work(work, ["pp"]) is None
    # the same surplus with nothing missing is work added
    more = work.filter(~pl.col("name").is_in(["aten::narrow", "aten::as_strided"]))
    assert added_work(more, ["pp"]).row(0, named=True)["rank"] == 1
    # and so are extra matmuls beside the trade: only the traded calls are set aside
    faulted = work.with_columns(calls=pl.when((pl.col("rank") == 1) & (pl.col("name") == "aten::mm"))
                                .then(52.0).otherwise(pl.col("calls")))
    added = added_work(faulted, ["pp"]).row(0, named=True)
    assert added["rank"] == 1 and abs(added["added"] - 52 / 40) < 1e-9


def test_a_peers_log_line_trades_nothing_away_from_a_ranks_extra_matmuls():
    # rank 0 prints (2 more item calls a step), rank 1 runs 4 more GEMMs: no one-to-one trade
    work = _work([(0, "aten::mm", "[[512,256],[256,1024]]", 40, 100.0), (1, "aten::mm", "[[512,256],[256,1024]]", 44, 100.0),
                  (0, "aten::item", "[]", 6, 5.0), (1, "aten::item", "[]", 4, 5.0)])
    added = {a["rank"]: a for a in added_work(work, ["pp"]).rows(named=True)}
    assert abs(added[1]["added"] - 44 / 40) < 1e-9
    # (rank 0's two prints are its own surplus, a sliver of its work: ``adds_work`` weighs that)
    assert added[0]["added_base_ns"] == 4 * 5e3


def test_of_surplus_ops_alike_in_count_the_cheap_ones_are_traded_and_the_dear_one_is_work_added():
    # DDP with ZeroRedundancyOptimizer, extra MLP matmuls on rank 1: its optimizer shard makes 10
    # fewer calls of two ops a step; its extra matmuls add 12 calls of addmm and of two views.
    # Two gaps of 10 match two of the three surpluses of 12: the views, never the matmuls, in
    # every call (the choice once followed the group_by's row order and changed run to run)
    work = _work([(0, "aten::addmm", "[[512,256],[256,1024]]", 40, 100.0), (1, "aten::addmm", "[[512,256],[256,1024]]", 52, 100.0),
                  (0, "aten::t", "[[256,1024]]", 40, 2.0), (1, "aten::t", "[[256,1024]]", 52, 2.0),
                  (0, "aten::transpose", "[[256,1024]]", 40, 2.0), (1, "aten::transpose", "[[256,1024]]", 52, 2.0),
                  (0, "aten::lerp_", "[[1024]]", 30, 8.0), (1, "aten::lerp_", "[[1024]]", 20, 8.0),
                  (0, "aten::sqrt", "[[1024]]", 30, 8.0), (1, "aten::sqrt", "[[1024]]", 20, 8.0)])
    for _ in range(12):
        added = {a["rank"]: a for a in added_work(work, ["pp"]).rows(named=True)}
        assert abs(added[1]["added_excess_ns"] - 12 * 100e3) < 1e-3, added[1]


def test_work_every_rank_calls_a_different_number_of_times_is_the_programs_split_not_work_added():
    # four peers whose attention runs 14, 28, 42 and 56 GEMMs a step (a causal sequence split in
    # contiguous chunks): no count is the peers' normal, so none is added work
    rows = [(r, "aten::bmm", "", 14 * (r + 1), 100.0) for r in range(4)] + \
           [(r, "aten::add", "", 40, 5.0) for r in range(4)]
    work = _work(rows)
    assert added_work(work, ["pp"]) is None
    graded = graded_work(work, ["pp"]).row(0, named=True)
    assert graded["name"] == "aten::bmm" and graded["ranks"] == [0, 1, 2, 3]
    assert graded["calls"] == [14, 28, 42, 56]
    # one rank's extra GEMMs, its three peers agreeing: work added, nothing graded
    fault = _work([(r, "aten::bmm", "", 28 if r == 2 else 14, 100.0) for r in range(4)])
    assert graded_work(fault, ["pp"]) is None
    assert added_work(fault, ["pp"])["rank"].to_list() == [2]
    # of two peers, one calling more is all a fault looks like: added, never graded
    pair = _work([(r, "aten::bmm", "", 14 * (r + 1), 100.0) for r in range(2)])
    assert graded_work(pair, ["pp"]) is None and added_work(pair, ["pp"])["rank"].to_list() == [1]


def test_work_dealt_to_some_ranks_in_grades_is_the_programs_split_not_work_added():
    # a distributed optimizer dealing its blocks out unevenly: ranks 0 and 2 above the fewest, by
    # different counts (20 and 16 against 8), in every step: its peers never agree, so no
    # count is the normal that rank 0 or 2 adds to
    work = _work([(r, "aten::linalg_vector_norm", "", (20, 8, 16, 8)[r], 50.0) for r in range(4)]
                 + [(r, "aten::addmm", "", 14, 3000.0) for r in range(4)])
    assert added_work(work, ["pp"]) is None
    graded = graded_work(work, ["pp"]).row(0, named=True)
    assert graded["name"] == "aten::linalg_vector_norm" and graded["calls"] == [20, 8, 16, 8]
    # the same deal with extra matmuls on rank 3: the matmuls are its own, work added
    fault = _work([(r, "aten::linalg_vector_norm", "", (20, 8, 16, 8)[r], 50.0) for r in range(4)]
                  + [(r, "aten::addmm", "", 56 if r == 3 else 14, 3000.0) for r in range(4)])
    assert added_work(fault, ["pp"])["rank"].to_list() == [3]
    # two ranks above the others alike are what two slow ranks look like: added on both
    alike = _work([(r, "aten::addmm", "", (20, 8, 20, 8)[r], 3000.0) for r in range(4)])
    assert graded_work(alike, ["pp"]) is None
    assert added_work(alike, ["pp"])["rank"].sort().to_list() == [0, 2]


def test_a_causal_ring_split_is_imbalance_of_the_program_not_a_slow_gpu():
    # ring attention by hand on 4 gloo processes (tests/corpus/user_ring_cp.py), each rank one
    # contiguous chunk of a causal sequence: rank i attends to i + 1 chunks, so ranks 0-3 call
    # aten::bmm 14, 28, 42 and 56 times a step ("slow compute" 2 and 3 before: the ops they call
    # more often)
    users = {c.id: c for c in load_corpus(Path(__file__).resolve().parents[2] / "corpus" / "cases-users")}
    verdict = detect_bundle(load_bundle(users["cp4-ring-causal-s512"].directory), threshold=0.1)
    assert [s for s in verdict.suspects if s.kind in ("slow_compute", "slow_host")] == []
    graded = [i for i in verdict.imbalance if i.kind == "graded_work"]
    assert len(graded) == 1 and graded[0].evidence["ranks"] == [0, 1, 2, 3]
    assert graded[0].evidence["calls"] == [14, 28, 42, 56]


def test_ops_the_ranks_holding_more_parameters_call_more_often_are_the_plans_not_work_added():
    # ranks 0 and 1 own 3 embedding tables, 2 and 3 own 2 (one more AccumulateGrad a step each):
    # one more sparse backward each, on the ranks that hold more: the sharding plan's work
    params = [(r, "torch::autograd::AccumulateGrad", "", 19 if r < 2 else 18, 2.0) for r in range(4)]
    rows = params + [(r, "aten::_embedding_bag_sparse_backward", "", 3 if r < 2 else 2, 900.0) for r in range(4)] + \
        [(r, "aten::addmm", "", 8, 3000.0) for r in range(4)]
    work = _work(rows)
    assert added_work(work, ["pp"]) is None
    graded = graded_work(work, ["pp"])
    assert set(graded["name"].to_list()) == {"aten::_embedding_bag_sparse_backward", "torch::autograd::AccumulateGrad"}
    # extra matmuls on rank 0 alone, one of the two that hold more: its own, work added
    fault = _work(params + [(r, "aten::addmm", "", 24 if r == 0 else 8, 3000.0) for r in range(4)])
    assert added_work(fault, ["pp"])["rank"].to_list() == [0]
    # the same counts with every rank holding as many parameters: two ranks' extra calls alike
    # are what two slow ranks look like, work added on both
    alike = _work([(r, "torch::autograd::AccumulateGrad", "", 18, 2.0) for r in range(4)]
                  + [(r, "aten::_embedding_bag_sparse_backward", "", 3 if r < 2 else 2, 900.0) for r in range(4)])
    assert added_work(alike, ["pp"])["rank"].sort().to_list() == [0, 1]


def _users(case_id: str):
    users = {c.id: c for c in load_corpus(Path(__file__).resolve().parents[2] / "corpus" / "cases-users")}
    return detect_bundle(load_bundle(users[case_id].directory), threshold=0.1)


def test_a_dlrm_whose_first_ranks_own_more_tables_is_the_plans_imbalance_not_a_slow_gpu():
    # a user's DLRM by hand on 4 gloo processes (tests/corpus/user_dlrm.py), 10 tables sharded
    # table-wise 3, 3, 2, 2: ranks 0 and 1 look up, differentiate and update a third more
    # tables ("slow compute 0", 1.37x on the ops it called more often, before)
    verdict = _users("dp4-dlrm-t10-mean-healthy")
    assert [s for s in verdict.suspects if s.kind in ("slow_compute", "slow_host")] == []
    graded = [i for i in verdict.imbalance if i.kind == "graded_work"]
    assert len(graded) == 1 and graded[0].evidence["ranks"] == [0, 1, 2, 3]
    assert graded[0].evidence["calls"] == [3, 3, 2, 2]


def test_extra_matmuls_priced_at_their_clock_are_a_real_part_of_the_work():
    # the same DLRM, 3x its MLPs' matmuls on rank 2: 8 aten::addmm calls a step on its peers,
    # priced at their typical (small) call 2% of its work, by their clocks a fifth ("slow host
    # 2" before, from stage 2 alone)
    verdict = _users("dp4-dlrm-fwd3x-r2")
    top = verdict.suspects[0]
    assert (top.rank, top.kind) == (2, "slow_compute")


def test_surplus_calls_that_cost_the_threshold_by_the_ranks_clock_add_work_however_cheap_their_typical_call():
    # a user's GNN under DDP, 1.7x the linear layers' matmuls on rank 1 (4 gloo processes on 2
    # cores): 336 surplus calls a step, 3.8 ms at their typical call, 152 ms by its clock against
    # its peers' 141 ms on those ops, 374 ms busy ("no suspect" before)
    row = {"added": 2.16, "added_excess_ns": 3.8 * MS, "added_base_ns": 3.3 * MS, "excess_ns": 68 * MS,
           "busy_ns": 374 * MS, "all_work_ns": 145 * MS, "added_real_ns": 152 * MS, "added_base_real_ns": 141 * MS}
    assert not adds_work(row, 0.1 / 3)                           # by the typical call alone: 1% of its work
    assert adds_work(row, 0.1 / 3, threshold=0.1)
    assert clocked(row, 0.1)
    assert not clocked(row, 0.5)                                 # 41% of its work, under a threshold of 50%
    # a router sending more tokens to one rank's experts makes it call more, small calls: 2.4 ms
    # a step by its clock of 64 ms (a mixture of experts, PP2 x DP2 under the profiler)
    routed = {"added": 1.15, "added_excess_ns": 0.52 * MS, "added_base_ns": 3.5 * MS, "excess_ns": 0.9 * MS,
              "busy_ns": 64 * MS, "all_work_ns": 37 * MS, "added_real_ns": 2.4 * MS, "added_base_real_ns": 5.1 * MS}
    assert not clocked(routed, 0.1)
    assert not adds_work(routed, 0.1 / 3, threshold=0.1)
    # nor surplus calls barely dearer than the peers' own time on those ops
    assert not clocked(row | {"added_real_ns": 40 * MS, "added_base_real_ns": 500 * MS}, 0.1)


def test_extra_matmuls_of_a_gnns_larger_layers_are_work_added_by_their_clock():
    top = _users("ddp4-gnn-fwd1.7x-r1").suspects[0]
    assert (top.rank, top.kind) == (1, "slow_compute")
    assert top.evidence["peers"]["added_work"]["by_clock_ms_per_iteration"] > 100
