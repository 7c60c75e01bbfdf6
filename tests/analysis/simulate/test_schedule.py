"""The per-stage step order matches megatron-core's 1F1B and interleaved schedules."""

from __future__ import annotations

import itertools

import pytest

from mapp.analysis.simulate.schedule import Batch, Compute, build_programs, schedule_table, warmup_count


def order(p: int, v: int, m: int, s: int) -> list[str]:
    steps = build_programs(p, v, m).stages[s]
    return [f"{'B' if st.backward else 'F'}{st.microbatch}.{st.chunk}" for st in steps
            if isinstance(st, Compute)]


def test_one_f_one_b_order_first_and_last_stage():
    # p=4, m=6: stage 0 warms up with 3 forwards, then alternates, then cools down
    assert order(4, 1, 6, 0) == ["F0.0", "F1.0", "F2.0", "F3.0", "B0.0", "F4.0", "B1.0",
                                 "F5.0", "B2.0", "B3.0", "B4.0", "B5.0"]
    assert order(4, 1, 6, 3) == [x for i in range(6) for x in (f"F{i}.0", f"B{i}.0")]


def test_warmup_counts_like_megatron():
    assert [warmup_count(4, 1, 8, s) for s in range(4)] == [3, 2, 1, 0]
    assert warmup_count(4, 1, 2, 0) == 2  # capped at the microbatch count
    # interleaved: 2 (p - s - 1) + (v - 1) p
    assert [warmup_count(4, 2, 8, s) for s in range(4)] == [10, 8, 6, 4]
    assert warmup_count(4, 2, 4, 0) == 8  # everything in warmup


def test_schedule_table_matches_megatron_docstring_example():
    # megatron-core's example for N=3 microbatches per group, M=5, VP=2
    table = schedule_table(5, 2, 3)
    assert [mb for mb, _ in table] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [c for _, c in table] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_interleaved_order_takes_groups_of_pp_microbatches_per_chunk():
    # p=2, v=2, m=4, stage 0: warmup 2*1 + 1*2 = 4 forwards: mb 0,1 of chunk 0 then chunk 1
    got = order(2, 2, 4, 0)
    assert got[:4] == ["F0.0", "F1.0", "F0.1", "F1.1"]
    assert got[4:6] == ["F2.0", "B0.1"]  # backward runs the last chunk first


CASES = [(p, 1, m) for p in range(1, 6) for m in range(1, 10)] + [
    (p, v, m) for p in range(2, 5) for v in (2, 3) for m in (p, 2 * p, 3 * p)]


@pytest.mark.parametrize(("p", "v", "m"), CASES)
def test_every_step_receives_its_input_first_and_runs_once(p, v, m):
    programs = build_programs(p, v, m)
    for s, steps in enumerate(programs.stages):
        received = set()
        for st in steps:
            if isinstance(st, Batch):
                received |= {(op.direction, op.microbatch, op.chunk) for op in st.ops if not op.send}
                continue
            if not st.backward and not (s == 0 and st.chunk == 0):
                assert ("f", st.microbatch, st.chunk) in received, (s, st)
            if st.backward and not (s == p - 1 and st.chunk == v - 1):
                assert ("b", st.microbatch, st.chunk) in received, (s, st)
        computes = [(st.backward, st.microbatch, st.chunk) for st in steps if isinstance(st, Compute)]
        expected = sorted((b, mb, c) for b in (False, True) for mb, c in itertools.product(range(m), range(v)))
        assert sorted(computes) == expected
