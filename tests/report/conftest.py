"""A simulated run with a slow GPU and a slow link, summarised once for the report tests."""

from __future__ import annotations

import pytest

from mapp.analysis.simulate import SimConfig, parse_fault, simulate
from mapp.report import build_summary
from mapp.sql import open_database


@pytest.fixture(scope="session")
def summary(tmp_path_factory):
    directory = tmp_path_factory.mktemp("report")
    simulate(SimConfig(tp=2, pp=2, dp=2, microbatches=4, iterations=3, layers=8, hidden=1024, seed=5,
                       faults=[parse_fault("slow_gpu:5:1.5"), parse_fault("slow_link:1-5:4")]), directory)
    db = open_database(directory)
    try:
        yield build_summary(db, verdict="rank 5 is slow (test verdict)")
    finally:
        db.close()
