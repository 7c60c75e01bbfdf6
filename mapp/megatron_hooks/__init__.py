"""mapp.megatron_hooks: install the mapp tracer into megatron-core 0.16.x from the outside.

Module hooks on transformer layers, attention and MLP; wrappers around TP collectives, pipeline
p2p, DDP grad reduce / param gather, the optimizer step and the pipeline schedule steps.
``install(...)`` for a training script, ``add_trace_args``/``install_from_args`` for
Megatron-style flags; ``cpu_patches.apply_if_cpu()`` lets megatron-core run on CPU with gloo.
"""

from .flags import add_trace_args, install_from_args
from .install import Installation, current, install, uninstall

__all__ = ["install", "uninstall", "current", "Installation", "add_trace_args", "install_from_args"]
