"""The coordinator across real processes: torch.distributed (gloo) all-reduces its table and
runs the ready groups as gloo all-reduces on the groups of processes hosting their members.

3 processes x 30 worker threads = 90 virtual ranks (more than 64 ranks' worth of bits), 120
random groups of 2-5 ranks, each posted twice by every member in its own random order. Were two
processes to issue two of these collectives in opposite orders, both would wait in gloo until
its timeout; the test asserts every sum arrived and every process saw the same rounds.
"""

from __future__ import annotations

import json

import pytest

from ._gloo_workers import plan, run

torch = pytest.importorskip("torch")


def test_three_processes_ninety_ranks_one_order(tmp_path):
    import torch.multiprocessing as mp

    processes, ranks, groups, seed = 3, 90, 120, 5
    mp.spawn(run, args=(processes, ranks, groups, seed, str(tmp_path)), nprocs=processes, join=True)
    reports = [json.loads((tmp_path / f"process-{p}.json").read_text()) for p in range(processes)]
    for report in reports:
        assert report["errors"] == [] and report["alive"] == 0
    assert all(r["rounds"] == reports[0]["rounds"] for r in reports[1:])
    order = [g for _, ready in reports[0]["rounds"] for g in ready]
    members = plan(seed, ranks, groups)
    assert sorted(order) == sorted(list(range(groups)) * 2)
    for p, report in enumerate(reports):
        assert report["executed"] == [g for g in order if any(m % processes == p for m in members[g])]
