"""The all-reduce a :class:`~mapp.scheduling.fbd.coordinator.Coordinator` combines its tables with.

- :class:`TorchMaxAllReduce`: ``torch.distributed.all_reduce(op=MAX)`` of a uint8 tensor on a
  group of every process (gloo by default: the table lives in host memory and needs no GPU
  stream, so it cannot queue behind, or in front of, the job's NCCL kernels).
- :class:`ThreadWorld`: several coordinators in one process, each standing for a process
  (tests, and trying the coordinator without torch).
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["TorchMaxAllReduce", "ThreadWorld"]


class TorchMaxAllReduce:
    """``bytes -> bytes``: the element-wise MAX over the processes of ``group`` (None: all)."""

    def __init__(self, group: Any = None):
        import torch

        self._torch = torch
        self.group = group

    def __call__(self, table: bytes) -> bytes:
        torch = self._torch
        tensor = torch.frombuffer(bytearray(table), dtype=torch.uint8)
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX, group=self.group)
        return tensor.numpy().tobytes()


class ThreadWorld:
    """``size`` participants in one process; ``world.member(i)`` is participant ``i``'s
    all-reduce. Every participant must call it once per round (a barrier of ``size`` threads);
    ``timeout`` seconds without the others raises ``threading.BrokenBarrierError`` everywhere,
    so a test that would hang fails instead."""

    def __init__(self, size: int, timeout: float | None = 60.0):
        self.size = size
        self._tables: list[bytes | None] = [None] * size
        self._result: bytes = b""
        self._barrier = threading.Barrier(size, action=self._combine, timeout=timeout)
        self._read = threading.Barrier(size, timeout=timeout)

    def _combine(self) -> None:
        tables = self._tables
        self._result = bytes(map(max, *tables)) if self.size > 1 else bytes(tables[0])
        self._tables = [None] * self.size

    def member(self, index: int):
        def allreduce_max(table: bytes) -> bytes:
            self._tables[index] = table
            self._barrier.wait()
            result = self._result
            self._read.wait()  # nobody starts the next round before all read this one
            return result

        return allreduce_max

    def abort(self) -> None:
        self._barrier.abort()
        self._read.abort()
