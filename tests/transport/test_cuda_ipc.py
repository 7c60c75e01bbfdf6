"""GPU tensors between processes of one host by CUDA IPC (``ShmTransport``'s device path).

Skipped without CUDA. Run on a GPU machine:

    python -m pytest -q tests/transport/test_cuda_ipc.py
"""

from __future__ import annotations

import glob
import os
import uuid
import warnings

import pytest

torch = pytest.importorskip("torch")

from tests.transport._messages import expected_digest  # noqa: E402
from tests.transport._ranks import run_ranks  # noqa: E402
from tests.transport._workers import device_crash, device_exchange, device_fill  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# a 1 MiB device arena: every 8th message (4 MB) is larger, so the arena is replaced by a
# larger generation while messages stream; the CPU rings stream too (256 KiB arena)
SMALL = {"MAPP_TRANSPORT_DEVICE_ARENA_BYTES": str(1 << 20), "MAPP_TRANSPORT_ARENA_BYTES": str(256 << 10)}


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.parametrize("world,spread", [(2, False), (3, False), (2, True)], ids=["2-one-gpu", "3-one-gpu", "2-two-gpus"])
def test_gpu_tensors_of_many_dtypes_and_sizes_arrive_intact_in_any_tag_order(world, spread):
    if spread and _gpus() < 2:
        pytest.skip("needs 2 GPUs")
    digests = run_ranks(device_exchange, world, 45, 1 << 20, spread, env={**SMALL, "MAPP_TRANSPORT_JOB": f"ipc{uuid.uuid4().hex[:8]}"}, timeout=90)
    assert digests == [expected_digest(rank, world, 45, 1 << 20) for rank in range(world)]


def test_messages_bigger_than_the_default_arena():
    # 64 MiB default arena, 100 MB messages (new generations) and small ones between them
    job = f"ipc{uuid.uuid4().hex[:8]}"
    before = set(os.listdir("/dev/shm"))
    digests = run_ranks(device_exchange, 2, 17, 25 << 20, False, env={"MAPP_TRANSPORT_JOB": job}, timeout=120)
    assert digests == [expected_digest(rank, 2, 17, 25 << 20) for rank in range(2)]
    assert glob.glob(f"/dev/shm/mapp-{job}*") == []
    _report_torch_leftovers(before, "after a normal close and exit")


def test_a_message_that_fills_the_arena_after_a_small_one():
    # 4 KB then exactly the arena's 1 MiB: the big one skips the lap's tail, whose bytes no
    # message used (and the receiver never acknowledges); it must not wait for them
    job = f"ipc{uuid.uuid4().hex[:8]}"
    assert run_ranks(device_fill, 2, 1 << 20, env={"MAPP_TRANSPORT_DEVICE_ARENA_BYTES": str(1 << 20), "MAPP_TRANSPORT_JOB": job}, timeout=60) == [True, True]


@pytest.mark.parametrize("mid_copy", [True, False], ids=["gpu-message-announced", "cpu-message-streaming"])
def test_a_rank_killed_mid_transfer_fails_its_peer_clearly_and_leaves_no_segment(mid_copy):
    job = f"ipccrash{uuid.uuid4().hex[:8]}"
    before = set(os.listdir("/dev/shm"))
    results = run_ranks(device_crash, 2, mid_copy, env={"MAPP_TRANSPORT_JOB": job}, killed=(1,), timeout=120)
    outcome = results[0]
    errors = outcome["errors"]
    # the big message either arrived whole (its copy ended before the death) or failed clearly
    assert len(errors) == 3 + (not outcome["delivered"]), outcome
    first, rest = (errors[:1], errors[1:]) if not outcome["delivered"] else ([], errors)
    for error in first:  # the big message: its sender died, or its copy out of the dead arena failed
        assert ("rank 1" in error and "died" in error) or "CUDA IPC copy failed" in error, error
    for error in rest:
        assert "rank 1" in error and ("died" in error or "did it die" in error), error
    assert glob.glob(f"/dev/shm/mapp-{job}*") == []  # ours: every segment of the job is gone
    # torch's own CUDA IPC files (the CUDA driver's cuda.shm.* of interprocess events, torch's
    # torch_<pid>_* reference counters) stay when their producer is SIGKILLed: they are not
    # ours to remove (no blanket cleanup of other processes' segments), so only reported.
    # Measured on an H200 (torch 2.11, CUDA 13): a process that made one interprocess event
    # leaves cuda.shm.0.<pid hex>.1 even after destroying it and exiting normally (torch's
    # reduce_tensor of a CUDA tensor makes one too); torch_* files go at a normal exit
    _report_torch_leftovers(before, "after a SIGKILL")


def _report_torch_leftovers(before: set[str], when: str) -> None:
    left = sorted(set(os.listdir("/dev/shm")) - before)
    theirs = [name for name in left if name.startswith(("cuda.shm.", "torch_"))]
    if theirs:
        warnings.warn(f"torch's CUDA IPC files left in /dev/shm {when} (not mapp's): {theirs}", stacklevel=2)
