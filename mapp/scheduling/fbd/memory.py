"""Peak memory of a stretch of code, above what was allocated when it started.

On a GPU: the CUDA allocator's peak (``max_memory_allocated``) over the stretch, less the
allocated bytes at its start. On the CPU, where torch keeps no such counter: the profiler's
record of every allocation and free (``profile_memory``), whose running total starts at zero
when profiling starts; what the calling thread allocates is counted (the coordinator's
receive buffers, allocated on its control thread, are not).
"""

from __future__ import annotations

import json
import os
import tempfile

import torch

__all__ = ["PeakMemory"]


class PeakMemory:
    """``with PeakMemory(device) as peak: ...``; then ``peak.bytes``."""

    def __init__(self, device: torch.device):
        self.device = device
        self.bytes = 0
        self._profile = None
        self._start = 0

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        else:
            from torch.profiler import ProfilerActivity, profile

            self._profile = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._profile.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = torch.cuda.max_memory_allocated(self.device) - self._start
            return
        self._profile.__exit__(*exc)
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            self._profile.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f)["traceEvents"]
        finally:
            os.unlink(path)
        totals = [e["args"].get("Total Allocated", 0) for e in events if e.get("name") == "[memory]"]
        self.bytes = max([0, *totals])
