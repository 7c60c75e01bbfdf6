"""Real processes exchange many tagged messages of mixed dtypes and shapes, in any order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.transport._messages import expected_digest
from tests.transport._ranks import run_ranks
from tests.transport._workers import exchange, semantics, single_copy


# a small arena (256 KiB per pair) so that the large messages (400 KB) stream through it
SMALL_ARENA = {"MAPP_TRANSPORT_ARENA_BYTES": str(256 << 10)}


@pytest.mark.parametrize("backend", ["shm", "dist"])
@pytest.mark.parametrize("world", [2, 4])
def test_many_tagged_messages_in_flight_received_in_random_order(backend, world):
    # both backends must deliver exactly what was sent: the same digests
    digests = run_ranks(exchange, world, backend, 40, 100_000, env=SMALL_ARENA)
    assert digests == [expected_digest(rank, world, 40, 100_000) for rank in range(world)]


def _yama_forbids_reading_siblings() -> bool:
    scope = Path("/proc/sys/kernel/yama/ptrace_scope")
    return scope.exists() and scope.read_text().strip() != "0"


@pytest.mark.skipif(_yama_forbids_reading_siblings(), reason="Yama ptrace_scope >= 1: ranks cannot read each other's memory (the arena path serves)")
@pytest.mark.parametrize("world", [2, 3])
def test_large_messages_read_from_the_senders_memory_arrive_intact_beside_small_ones(world):
    # from 64 KiB on by address (one copy, split over 3 threads), smaller ones through the arena
    env = {**SMALL_ARENA, "MAPP_TRANSPORT_SINGLE_COPY_BYTES": str(64 << 10), "MAPP_TRANSPORT_COPY_THREADS": "3"}
    results = run_ranks(single_copy, world, 40, 100_000, env=env)
    assert [peers for _, peers in results] == [[p for p in range(world) if p != rank] for rank in range(world)]
    assert [digest for digest, _ in results] == [expected_digest(rank, world, 40, 100_000) for rank in range(world)]


@pytest.mark.parametrize("backend", ["shm", "dist"])
def test_wait_times_out_then_completes_and_a_closed_peer_fails_the_waiters(backend):
    errors, _ = run_ranks(semantics, 2, backend)
    assert "irecv(src=1, tag=99) on rank 0 did not complete within 0.2 s" in errors[0]
    assert "irecv(src=1, tag=100) on rank 0 failed: rank 1 closed its transport" in errors[1]
    assert "rank 5 is not a peer of rank 0" in errors[2]
