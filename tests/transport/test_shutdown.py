"""``dist.destroy_process_group()`` before the transport is closed (the training example's
order with the DPP runtime's transport, closed by ``atexit``): the goodbye still goes through,
nothing escapes the transport's threads, and every process exits cleanly."""

from __future__ import annotations

import pytest

from tests.transport._ranks import run_ranks
from tests.transport._workers import destroyed_first


@pytest.mark.parametrize("backend", ["dist", "shm", "auto"])
@pytest.mark.parametrize("close", [True, False], ids=["closed-after", "closed-at-exit"])
def test_destroying_the_process_groups_before_closing_the_transport_exits_cleanly(backend, close):
    # run_ranks asserts exit status 0 for every rank: a hung close (killed) or an abort fails it
    results = run_ranks(destroyed_first, 2, backend, close)
    for escaped in results:
        if close:
            assert len(escaped) == 1 and "after close: " in escaped[0] and "is closed" in escaped[0], escaped
        else:
            assert escaped == []
