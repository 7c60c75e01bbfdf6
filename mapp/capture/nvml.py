"""Device counters from NVML (``nvidia-ml-py``): SM clock, power, temperature, throttle reasons,
and what other processes computed on the device.

Sampled once per traced iteration, on the writer thread (never the training thread), and
written as ``C`` (counter) events named ``gpu`` on the ``counters`` lane::

    {"ph":"C","name":"gpu","cat":"other","tid":"counters","ts":...,
     "args":{"sm_clock_mhz":1980,"power_w":612.4,"temperature_c":54,"throttle_reasons":0,
             "sm_pct":97.0,"other_sm_pct":0,"other_processes":0,"device":0}}

``throttle_reasons`` is NVML's bit mask (``nvmlDeviceGetCurrentClocksEventReasons``); 0 means
none. ``other_sm_pct`` is how busy other processes kept the device's SMs
(``nvmlDeviceGetProcessUtilization``, the samples since the previous call: in practice one per
process that ran a kernel in NVML's last sampling period, the share of that period it did;
summed over the processes that are not this one), ``sm_pct`` the same for this process,
``other_processes`` how many others ran a kernel. A neighbour time-slicing the GPU (another
job, a stray server) is seen here directly, where the trace alone shows only its effect; each
sample is a snapshot, so one that bursts may be caught in some samples only. NVML lists a
process only where it ran a kernel, so one that merely holds a context on the device (a peer
rank's, say) is not counted. Inside a container NVML may give host PIDs, which differ from
this process's own: where NVML lists only one process on the device when the sampler starts
(after the tracer's CUDA clock made this process's context there), that is this one
(``own_pid``); where its PID is still not among
the samples (a training process runs kernels all the time), its work cannot be told from a
neighbour's and the three fields are left out.

Without ``pynvml`` or a GPU, :func:`make_sampler` returns ``None`` and nothing is sampled.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any, Callable

from mapp.trace_format import GPU_COUNTER

from .writer import counter_record

__all__ = ["NvmlSampler", "make_sampler", "own_pid", "process_shares"]


class NvmlSampler:
    """Reads one device's counters; each field that NVML refuses is left out."""

    def __init__(self, nvml: Any, device_index: int):
        self._nvml = nvml
        self.index = device_index
        self.handle = nvml.nvmlDeviceGetHandleByIndex(device_index)
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = reasons or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        self._pid = own_pid(nvml, self.handle)
        self._since_us = 0          # NVML's CPU timestamp (µs) of the newest process sample seen

    def read(self) -> dict[str, float]:
        nvml, h = self._nvml, self.handle
        values: dict[str, float] = {}
        probes: list[tuple[str, Callable[[], float]]] = [
            ("sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
            ("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("temperature_c", lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
        ]
        if self._reasons is not None:
            probes.append(("throttle_reasons", lambda: int(self._reasons(h))))
        for key, probe in probes:
            try:
                values[key] = probe()
            except Exception:
                pass
        values.update(self._processes())
        return values

    def _processes(self) -> dict[str, float]:
        """``sm_pct``, ``other_sm_pct`` and ``other_processes`` over the process samples NVML took
        since the last call; nothing where NVML refuses (no such samples yet, or not supported)."""
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(self.handle, self._since_us)
        except Exception:
            return {}
        self._since_us = max([self._since_us, *(int(sample.timeStamp) for sample in samples)])
        return process_shares(samples, self._pid)

    def __call__(self, iteration: int) -> list[tuple]:
        """Writer-thread callback: one counter record for this iteration."""
        values = self.read()
        if not values:
            return []
        values["device"] = self.index
        return [counter_record(GPU_COUNTER, time.perf_counter_ns(), values, iteration)]


def own_pid(nvml: Any, handle: Any) -> int:
    """This process's PID as NVML gives it: ``os.getpid()`` where NVML lists it on the device;
    else, where NVML lists exactly one process there, that one (inside a container NVML may give
    host PIDs; the sampler starts after the tracer's CUDA clock has made this process's context
    on the device, so alone it can only be this one); else ``os.getpid()``, and the samples tell
    (``process_shares`` says nothing where it is not among them)."""
    pid = os.getpid()
    try:
        listed = {int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    except Exception:
        return pid
    return listed.pop() if pid not in listed and len(listed) == 1 else pid


def process_shares(samples: list, own_pid: int) -> dict[str, float]:
    """From NVML process samples (``pid``, ``smUtil`` in %; NVML gives one per process that ran a
    kernel in its last sampling period): the SM utilisation of ``own_pid``, the sum of the
    others', and how many others ran a kernel; nothing where ``own_pid`` is not among them (PIDs
    of another namespace: this process's work could not be told from a neighbour's)."""
    by_pid: dict[int, list[int]] = {}
    for sample in samples:
        by_pid.setdefault(int(sample.pid), []).append(int(sample.smUtil))
    if own_pid not in by_pid:
        return {}
    mean = {pid: sum(u) / len(u) for pid, u in by_pid.items()}
    others = [m for pid, m in mean.items() if pid != own_pid]
    return {"sm_pct": round(mean[own_pid], 1), "other_sm_pct": round(sum(others), 1),
            "other_processes": sum(1 for m in others if m > 0)}


def _nvml_index(nvml: Any) -> int:
    """NVML's index of torch's current device (``CUDA_VISIBLE_DEVICES`` may renumber devices)."""
    import torch

    cuda_index = torch.cuda.current_device()
    try:
        props = torch.cuda.get_device_properties(cuda_index)
        bus_id = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        return nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetHandleByPciBusId(bus_id))
    except Exception:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        if cuda_index < len(visible) and visible[cuda_index].strip().isdigit():
            return int(visible[cuda_index])
        return cuda_index


def make_sampler(device_index: int | None = None) -> NvmlSampler | None:
    """A sampler for ``device_index`` (default: torch's current device), or ``None`` when NVML
    or a GPU is not there."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if device_index is None:
            device_index = _nvml_index(pynvml)
        return NvmlSampler(pynvml, device_index)
    except Exception as exc:
        warnings.warn(f"mapp: NVML device counters off ({type(exc).__name__}: {exc})", RuntimeWarning)
        return None
