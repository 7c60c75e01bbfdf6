"""Real processes exchange many tagged messages of mixed dtypes and shapes, in any order."""

from __future__ import annotations

import pytest

from tests.transport._ranks import run_ranks
from tests.transport._workers import exchange, semantics


@pytest.mark.parametrize("world", [2, 4])
def test_dist_exchange_of_many_tagged_messages_in_random_order(world):
    digests = run_ranks(exchange, world, "dist", 40, 50_000)
    assert len(set(digests)) == world  # each rank received different messages


@pytest.mark.parametrize("backend", ["dist"])
def test_wait_times_out_then_completes_and_a_closed_peer_fails_the_waiters(backend):
    errors, _ = run_ranks(semantics, 2, backend)
    assert "irecv(src=1, tag=99) on rank 0 did not complete within 0.2 s" in errors[0]
    assert "irecv(src=1, tag=100) on rank 0 failed: rank 1 closed its transport" in errors[1]
    assert "rank 5 is not a peer of rank 0" in errors[2]
