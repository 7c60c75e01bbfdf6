"""mapp.capture: a low-overhead, framework-neutral tracer writing trace format v1.

Scopes (context managers and decorators) with arguments; the host clock on CPU (with each
span's thread CPU time and wait for a core) and pooled CUDA events on GPU, resolved later on a
background writer thread; sampling windows; four granularity levels; bounded memory. ``import mapp.capture`` does not import torch (the CUDA
clock imports it when it is made). ``mapp.megatron_hooks`` drives this tracer from
megatron-core; any other training loop can use it directly.
"""

from .clock import CudaClock, HostClock, ThreadTimeClock
from .tracer import Granularity, Tracer, TracerConfig
from .window import Window

__all__ = ["Tracer", "TracerConfig", "Granularity", "Window", "HostClock", "ThreadTimeClock", "CudaClock"]
