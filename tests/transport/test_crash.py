"""A rank killed mid-transfer: the others fail with a clear error (no hang), and no
shared-memory segment of the job is left behind."""

from __future__ import annotations

import glob
import uuid

import pytest

from tests.transport._ranks import run_ranks
from tests.transport._workers import crash, setup_crash


# shm: the 64 MB message read from the dying rank's memory; shm-arena: streamed through the arena
@pytest.mark.parametrize("backend", ["shm", "shm-arena", "dist"])
@pytest.mark.parametrize("world", [2, 3])
def test_killing_a_rank_mid_transfer_fails_its_peers_and_leaves_no_segment(backend, world):
    job = f"crashtest{uuid.uuid4().hex[:8]}"
    env = {"MAPP_TRANSPORT_JOB": job, "MAPP_TRANSPORT_ARENA_BYTES": str(256 << 10)}
    if backend == "shm-arena":
        backend, env["MAPP_TRANSPORT_SINGLE_COPY_BYTES"] = "shm", "0"
    results = run_ranks(crash, world, backend, env=env, killed=(1,))
    assert results[1] is None
    for rank in [0, 2][: world - 1]:
        errors = results[rank]
        assert len(errors) == 3, errors
        for error in errors:
            assert "rank 1" in error and ("died" in error or "did it die" in error), error
    assert glob.glob(f"/dev/shm/mapp-{job}*") == []


def test_a_rank_killed_during_set_up_fails_the_others_and_leaves_no_segment():
    job = f"crashtest{uuid.uuid4().hex[:8]}"
    results = run_ranks(setup_crash, 2, env={"MAPP_TRANSPORT_JOB": job}, killed=(1,))
    assert "shared-memory transport set-up failed" in results[0] and "did it die?" in results[0], results[0]
    assert glob.glob(f"/dev/shm/mapp-{job}*") == []
