"""Simulated bundles whose answers are known from their ground truth, shared by the SQL tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mapp.analysis.simulate import SimConfig, parse_fault, simulate
from mapp.sql import open_database

SLOW_RANK = 1
"""GPU slowed 1.5x in the faulty job (stage 0, dp 1 of TP1 x PP2 x DP4)."""
SLOW_LINK = (0, 4)
"""Pipeline link slowed 4x in the faulty job."""


def _simulate(directory: Path, config: SimConfig) -> dict:
    simulate(config, directory)
    return json.loads((directory / "ground_truth.json").read_text())


@pytest.fixture(scope="session")
def faulty(tmp_path_factory):
    """TP1 x PP2 x DP4, rank 1 computes 1.5x slower, link 0-4 runs at a quarter of its bandwidth."""
    directory = tmp_path_factory.mktemp("faulty")
    truth = _simulate(directory, SimConfig(
        tp=1, pp=2, dp=4, microbatches=4, iterations=3, layers=8, hidden=1024, seed=3,
        faults=[parse_fault(f"slow_gpu:{SLOW_RANK}:1.5"), parse_fault(f"slow_link:{SLOW_LINK[0]}-{SLOW_LINK[1]}:4")],
    ))
    db = open_database(directory)
    yield db, truth, directory
    db.close()


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory):
    """TP2 x PP4 x DP1, 8 microbatches, no jitter and no faults: a clean 1F1B pipeline."""
    directory = tmp_path_factory.mktemp("pipeline")
    truth = _simulate(directory, SimConfig(tp=2, pp=4, dp=1, microbatches=8, iterations=3, layers=8,
                                           hidden=1024, jitter_sigma=0.0, seed=1))
    db = open_database(directory)
    yield db, truth, directory
    db.close()


@pytest.fixture(scope="session")
def imbalanced(tmp_path_factory):
    """TP1 x PP4 x DP1 where stage 2 has 1.5x the compute of the others."""
    directory = tmp_path_factory.mktemp("imbalanced")
    truth = _simulate(directory, SimConfig(tp=1, pp=4, dp=1, microbatches=8, iterations=2, layers=8,
                                           hidden=1024, jitter_sigma=0.0, seed=2,
                                           faults=[parse_fault("stage_imbalance:2:1.5")]))
    db = open_database(directory)
    yield db, truth, directory
    db.close()


def run(db, name: str, **params) -> list[dict]:
    """Rows of a named query as dicts."""
    from mapp.sql import get_query

    query = get_query(name)
    return db.query(query.sql, query.bind({k: str(v) for k, v in params.items()})).dicts()
