"""Device counters from NVML (``nvidia-ml-py``): SM clock, power, temperature, throttle reasons.

Sampled once per traced iteration, on the writer thread (never the training thread), and
written as ``C`` (counter) events named ``gpu`` on the ``counters`` lane::

    {"ph":"C","name":"gpu","cat":"other","tid":"counters","ts":...,
     "args":{"sm_clock_mhz":1980,"power_w":612.4,"temperature_c":54,"throttle_reasons":0}}

``throttle_reasons`` is NVML's bit mask (``nvmlDeviceGetCurrentClocksEventReasons``); 0 means
none. Without ``pynvml`` or a GPU, :func:`make_sampler` returns ``None`` and nothing is sampled.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable

from .writer import counter_record

__all__ = ["NvmlSampler", "make_sampler"]


class NvmlSampler:
    """Reads one device's counters; each field that NVML refuses is left out."""

    def __init__(self, nvml: Any, device_index: int):
        self._nvml = nvml
        self.index = device_index
        self.handle = nvml.nvmlDeviceGetHandleByIndex(device_index)
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self._reasons = reasons or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)

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
        return values

    def __call__(self, iteration: int) -> list[tuple]:
        """Writer-thread callback: one counter record for this iteration."""
        values = self.read()
        if not values:
            return []
        values["device"] = self.index
        return [counter_record("gpu", time.perf_counter_ns(), values, iteration)]


def _nvml_index(nvml: Any) -> int:
    """NVML's index of torch's current device (``CUDA_VISIBLE_DEVICES`` may renumber devices)."""
    import os

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
