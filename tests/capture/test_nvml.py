"""What the NVML sampler makes of NVML's process samples (one per process that ran a kernel in
NVML's last sampling period): this process's SM share, the others' summed, and how many others
computed; and which listed process is this one. NVML's answers are plain records here; the NVML
calls themselves run only on a GPU machine."""

from __future__ import annotations

import os
from types import SimpleNamespace

from mapp.capture.nvml import own_pid, process_shares


def _sample(pid: int, sm: int, ts: int = 1) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm)


def test_other_processes_shares_are_summed_apart_from_this_ones():
    shares = process_shares([_sample(100, 60), _sample(200, 25), _sample(300, 8)], own_pid=100)
    assert shares == {"sm_pct": 60.0, "other_sm_pct": 33.0, "other_processes": 2}


def test_a_process_that_ran_no_kernel_is_not_counted():
    # a peer rank's process holding a context on this device reads 0
    shares = process_shares([_sample(100, 97), _sample(200, 0)], own_pid=100)
    assert shares == {"sm_pct": 97.0, "other_sm_pct": 0.0, "other_processes": 0}


def test_no_samples_no_fields():
    assert process_shares([], own_pid=100) == {}


def test_without_this_process_among_the_samples_nothing_is_said():
    # inside a container NVML may give host PIDs: this process's own work would read as a
    # neighbour's, so where its PID is not among the samples no share is given
    assert process_shares([_sample(4100, 95), _sample(4200, 30)], own_pid=100) == {}


class _Listing:
    """NVML's list of the processes holding a context on a device (``pid`` only is read)."""

    def __init__(self, *pids: int):
        self.pids = pids

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in self.pids]


def test_this_process_is_found_by_its_pid_or_as_the_only_one_on_the_device():
    me = os.getpid()
    assert own_pid(_Listing(me, 4200), None) == me
    # inside a container NVML gives host PIDs: alone on the device, the one listed is this one
    assert own_pid(_Listing(74213), None) == 74213
    # two unknown processes (a neighbour already there): no guess
    assert own_pid(_Listing(74213, 74290), None) == me
    assert own_pid(_Listing(), None) == me


class _Device(_Listing):
    """NVML for one device: its counters and one process sample of this process and one of a
    neighbour's."""

    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 0, 0

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1980

    def nvmlDeviceGetPowerUsage(self, handle):
        return 612_400

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 54

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 4

    def nvmlDeviceGetProcessUtilization(self, handle, since_us):
        return [_sample(os.getpid(), 70, ts=since_us + 1), _sample(4200, 25, ts=since_us + 1)]


def test_the_sampler_writes_the_gpu_counter_of_the_trace_format():
    # what the capture writes is what the detector and the SQL view read (``trace_format``)
    from mapp.capture.nvml import NvmlSampler
    from mapp.trace_format import GPU_COUNTER, GPU_COUNTER_FIELDS

    [(_, name, _, values, iteration)] = NvmlSampler(_Device(os.getpid()), 0)(iteration=3)
    assert (name, iteration) == (GPU_COUNTER, 3)
    assert set(values) == set(GPU_COUNTER_FIELDS)
    assert (values["other_sm_pct"], values["other_processes"], values["device"]) == (25.0, 1, 0)
