"""One call to trace a megatron-core training job: :func:`install`, and :func:`uninstall`.

::

    from mapp.megatron_hooks import install
    tracing = install(model=model_chunks, optimizer=optimizer, trace_dir="traces",
                      interval=50, length=2, granularity="layer")
    for it in range(iterations):
        with tracing.iteration(it):
            forward_backward(...)
            optimizer.step()
    tracing.close()

Call it after ``parallel_state.initialize_model_parallel`` and after the model is built.
With ``enabled=False`` nothing is patched and ``iteration()`` is a no-op context.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from mapp.capture.tracer import Granularity, Tracer, TracerConfig
from mapp.capture.window import Window

from ._patching import Patcher
from .collectives import install_collectives
from .context import HookContext
from .ddp import install_ddp
from .groups import GroupNames, layout_and_coords
from .layers import LayerHooks
from .optimizer import install_optimizer
from .p2p import install_p2p
from .schedules import install_schedules

__all__ = ["install", "uninstall", "Installation", "current"]

_current: "Installation | None" = None


class Installation:
    """The installed hooks and their tracer. ``close()`` removes the hooks and flushes the file."""

    def __init__(self, tracer: Tracer | None, patcher: Patcher | None = None,
                 layer_hooks: LayerHooks | None = None, handles: list[Any] | None = None,
                 ctx: HookContext | None = None):
        self.tracer = tracer
        self.ctx = ctx
        self._patcher = patcher
        self._layers = layer_hooks
        self._handles = handles or []
        self.enabled = tracer is not None and tracer.enabled

    def iteration(self, iteration: int):
        """Context manager around one training iteration (traced if inside a window)."""
        if not self.enabled:
            return contextlib.nullcontext(False)
        return self.tracer.iteration(iteration)

    def begin_iteration(self, iteration: int) -> bool:
        return self.tracer.begin_iteration(iteration) if self.enabled else False

    def end_iteration(self) -> None:
        if self.enabled:
            self.tracer.end_iteration()

    def close(self) -> None:
        """Remove every hook and patch, then write what is pending and close the file."""
        global _current
        if self._layers is not None:
            self._layers.remove()
            self._layers = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._patcher is not None:
            self._patcher.restore()
            self._patcher = None
        if self.tracer is not None:
            self.tracer.close()
        if _current is self:
            _current = None

    def __enter__(self) -> "Installation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _as_chunks(model: Any) -> list[Any]:
    if model is None:
        return []
    return list(model) if isinstance(model, (list, tuple)) else [model]


def _device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return "cpu"


def install(
    model: Any = None,
    optimizer: Any = None,
    *,
    trace_dir: str = "trace_output",
    interval: int = 5,
    length: int = 2,
    start: int = 0,
    stop: int | None = None,
    granularity: str | Granularity = Granularity.LAYER,
    clock: str = "auto",
    nvml: bool = True,
    enabled: bool = True,
    run_id: str | None = None,
    flush_ms: float = 100.0,
    config: TracerConfig | None = None,
) -> Installation:
    """Install the tracer into megatron-core 0.16.x and return the :class:`Installation`.

    ``model``: the model chunk(s) (one module or the list of virtual-pipeline chunks, DDP-
    wrapped or not) whose layers get forward/backward hooks; without it only the schedule,
    communication and optimizer are traced. ``optimizer``: the optimizer in use (selects
    megatron-core's or torch's step hooks). The window traces ``length`` iterations every
    ``interval`` from ``start``. ``config`` overrides all the tracer settings at once.
    A second call uninstalls the first installation.
    """
    global _current
    if _current is not None:
        _current.close()
    if not enabled or (config is not None and not config.enabled):
        return Installation(None)

    import torch.distributed as dist

    groups = GroupNames()
    groups.register_parallel_state()
    layout, coords = layout_and_coords()
    if config is None:
        config = TracerConfig(
            trace_dir=trace_dir, window=Window(interval=interval, length=length, start=start, stop=stop),
            granularity=granularity, clock=clock, run_id=run_id, flush_ms=flush_ms)
    if config.rank is None and dist.is_initialized():
        config.rank = dist.get_rank()
    if config.world_size is None and dist.is_initialized():
        config.world_size = dist.get_world_size()
    config.layout = config.layout or layout
    config.coords = config.coords or coords
    config.device = config.device or _device_name()
    config.extra_metadata = {**_versions(), **config.extra_metadata}
    tracer = Tracer(config)
    ctx = HookContext(tracer, groups)
    patcher = Patcher()
    install_schedules(ctx, patcher)
    install_p2p(ctx, patcher)
    install_collectives(ctx, patcher)
    install_ddp(ctx, patcher)
    handles = install_optimizer(ctx, patcher, optimizer)
    layer_hooks = None
    chunks = _as_chunks(model)
    if chunks:
        layer_hooks = LayerHooks(ctx)
        layer_hooks.attach_model(chunks)
    if nvml and getattr(tracer.clock, "kind", None) == "cuda":
        from mapp.capture.nvml import make_sampler

        sampler = make_sampler()
        if sampler is not None:
            tracer.on_traced_iteration_end(sampler)
    _current = Installation(tracer, patcher, layer_hooks, handles, ctx)
    return _current


def _versions() -> dict[str, Any]:
    from importlib import metadata

    from .cpu_patches import is_applied

    out: dict[str, Any] = {"cpu_patches": is_applied()}
    for package in ("torch", "megatron-core"):
        try:
            out[package.replace("-", "_")] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    out["torchrun_restart"] = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    return out


def uninstall() -> None:
    """Undo the current installation, if any (flushes and closes its trace file)."""
    if _current is not None:
        _current.close()


def current() -> Installation | None:
    """The installation in effect in this process, if any."""
    return _current
