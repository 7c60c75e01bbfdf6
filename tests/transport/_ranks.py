"""Run a function on N real processes joined by torch.distributed (gloo, file store)."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path


def run_ranks(fn: Callable, world: int, *args, timeout: float = 50.0, env: dict[str, str] | None = None, killed: tuple[int, ...] = (),
              backend: str = "gloo") -> list:
    """``fn(rank, world, *args)`` on ``world`` spawned processes; their results by rank.
    ``backend``: the default group's (``nccl``: rank r on GPU r).

    A rank that raises fails the call with its traceback; a rank still running after
    ``timeout`` seconds is killed and fails it too (the tests must never hang). The ranks
    in ``killed`` are expected to die by SIGKILL (their result is None).
    """
    ctx = mp.get_context("spawn")
    results: mp.Queue = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="mapp-transport-") as tmp:
        store = str(Path(tmp) / "store")
        procs = [ctx.Process(target=_entry, args=(fn, rank, world, store, results, env or {}, args, backend), daemon=True)
                 for rank in range(world)]
        for proc in procs:
            proc.start()
        outcomes = _collect(results, world - len(killed), timeout)
        for rank, proc in enumerate(procs):
            # generous for a rank that finished: on a loaded machine a torch process takes a
            # while to exit; one that never reported is hung (or died): no need to wait long
            proc.join(60.0 if rank in outcomes or rank in killed else 5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        exits = [proc.exitcode for proc in procs]
    missing = sorted(set(range(world)) - set(outcomes) - set(killed))
    failed = {rank: text for rank, (ok, text) in outcomes.items() if not ok}
    # a failure first: it often explains why another rank never finished
    assert not failed, "\n".join(f"rank {rank}:\n{text}" for rank, text in failed.items()) + (f"\n(ranks {missing} did not finish)" if missing else "")
    assert not missing, f"ranks {missing} did not finish within {timeout} s"
    want = [-9 if rank in killed else 0 for rank in range(world)]
    assert exits == want, f"exit statuses {exits}, expected {want}: a rank did not exit cleanly after its work"
    return [outcomes[rank][1] if rank in outcomes else None for rank in range(world)]


def _collect(results: mp.Queue, world: int, timeout: float) -> dict[int, tuple[bool, object]]:
    outcomes: dict[int, tuple[bool, object]] = {}
    deadline = time.monotonic() + timeout
    while len(outcomes) < world and time.monotonic() < deadline:
        try:
            rank, ok, value = results.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        outcomes[rank] = (ok, value)
    return outcomes


def _entry(fn: Callable, rank: int, world: int, store: str, results: mp.Queue, env: dict[str, str], args: tuple,
           backend: str = "gloo") -> None:
    os.environ.update(env)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
        value = fn(rank, world, *args)
        results.put((rank, True, value))
    except BaseException:  # the parent reports it: a child's traceback is otherwise lost
        results.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
