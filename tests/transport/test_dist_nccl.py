"""DistTransport over NCCL between two GPUs (skipped without them). Run on a 2-GPU machine:

    python -m pytest -q tests/transport/test_dist_nccl.py
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.transport._ranks import run_ranks  # noqa: E402
from tests.transport._workers import nccl_rounds  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                reason="needs 2 CUDA devices")


def test_messages_both_ways_between_device_synchronizations_do_not_hang():
    # A receive always posted on NCCL for the next header spins on the GPU until that message
    # comes: a torch.cuda.synchronize() between rounds then waited for the peer's next round,
    # and the peer for ours (DPP with --dpp-transport dist hung so on 2 GPUs)
    sums = run_ranks(nccl_rounds, 2, 3, backend="nccl", timeout=120)
    n = 1 << 16
    for rank, got in enumerate(sums):
        src = 1 - rank
        assert got == [float(n * (100 * src + 10 * r + tag)) for r in range(3) for tag in reversed(range(4))]
