"""Small patches that let megatron-core 0.16.x train on CPU with gloo. Applied only without CUDA.

megatron-core assumes a GPU in a handful of places that a CPU run reaches:

- the RNG tracker (``tensor_parallel.random``) saves and restores *CUDA* generator states;
  on CPU the tracker keeps CPU generator states instead;
- buffers are allocated on ``torch.cuda.current_device()`` (DDP grad buffers, the global
  memory buffer, p2p receive tensors, TP gathers) and a few tensors use ``device="cuda"``
  (token counters in the schedules, the default causal mask);
- ``torch.cuda.synchronize()`` follows batched p2p and appears in the optimizer;
- gradient clipping asserts that grads are ``torch.cuda.FloatTensor``.

Instead of editing those modules, each one gets its own view of ``torch`` (:class:`_CpuTorch`)
in which ``torch.cuda.current_device()`` answers ``"cpu"``, ``synchronize`` and stream calls
do nothing, and tensor factories given ``device="cuda"`` build on the CPU. The real ``torch``
module is left untouched, so code outside megatron-core is not affected.

These patches are for tests, demos and small experiments on machines without a GPU; they
are never applied when ``torch.cuda.is_available()``. Sequence parallelism still needs
Apex/Transformer Engine and does not run on CPU.
"""

from __future__ import annotations

import contextlib
import importlib
import types
from typing import Any

import torch

__all__ = ["apply_if_cpu", "apply", "is_applied", "PATCHED_MODULES"]

# megatron-core modules (relative to megatron.core) whose ``torch`` global is swapped.
PATCHED_MODULES = (
    "utils",
    "parallel_state",
    "tensor_parallel.mappings",
    "tensor_parallel.layers",
    "tensor_parallel.utils",
    "tensor_parallel.data",
    "tensor_parallel.cross_entropy",
    "pipeline_parallel.p2p_communication",
    "pipeline_parallel.schedules",
    "pipeline_parallel.utils",
    "distributed.param_and_grad_buffer",
    "distributed.distributed_data_parallel",
    "distributed.finalize_model_grads",
    "optimizer.optimizer",
    "optimizer.clip_grads",
    "optimizer.grad_scaler",
    "models.common.language_module.language_module",
    "models.gpt.gpt_model",
    "models.common.embeddings.rotary_pos_embedding",
    "transformer.module",
    "transformer.transformer_layer",
    "transformer.transformer_block",
    "transformer.attention",
    "transformer.dot_product_attention",
    "transformer.utils",
)

_FACTORIES = ("zeros", "ones", "empty", "full", "tensor", "arange", "randn", "rand", "zeros_like",
              "ones_like", "empty_like")

_applied = False


def _on_cpu(device: Any) -> Any:
    if device is None:
        return None
    if isinstance(device, int):
        return "cpu"
    text = str(device)
    return "cpu" if text.startswith("cuda") else device


def _factory(fn):
    def make(*args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = _on_cpu(kwargs["device"])
        return fn(*args, **kwargs)

    make.__name__ = getattr(fn, "__name__", "factory")
    return make


class _CudaOnCpu(types.ModuleType):
    """``torch.cuda`` as megatron-core sees it on a CPU run."""

    def __init__(self) -> None:
        super().__init__("torch.cuda")
        self.current_device = lambda: "cpu"
        self.synchronize = lambda *a, **k: None
        self.is_available = lambda: False
        self.device_count = lambda: 0
        self.current_stream = lambda *a, **k: None
        self.default_stream = lambda *a, **k: None
        self.stream = lambda *a, **k: contextlib.nullcontext()
        self.nvtx = types.SimpleNamespace(range_push=lambda *a, **k: None, range_pop=lambda *a, **k: None,
                                          range=lambda *a, **k: contextlib.nullcontext())

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)


class _CpuTorch(types.ModuleType):
    """``torch`` as megatron-core sees it on a CPU run: everything is the real torch except
    ``torch.cuda`` and the tensor factories' ``device="cuda"``."""

    def __init__(self) -> None:
        super().__init__("torch")
        self.cuda = _CudaOnCpu()
        for name in _FACTORIES:
            setattr(self, name, _factory(getattr(torch, name)))

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def _patch_rng_tracker() -> None:
    from megatron.core.tensor_parallel import random as rng

    def add(self, name, seed):
        self._is_initialized = True
        if seed in self.seeds_:
            raise Exception(f"seed {seed} already exists")
        self.seeds_.add(seed)
        if name in self.states_:
            raise Exception(f"rng state {name} already exists")
        self.states_[name] = torch.Generator().manual_seed(seed).get_state()

    @contextlib.contextmanager
    def fork(self, name=rng._MODEL_PARALLEL_RNG_TRACKER_NAME):
        if name not in self.states_:
            raise Exception(f"rng state {name} is not added")
        orig = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(orig)

    rng.CudaRNGStatesTracker.add = add
    rng.CudaRNGStatesTracker.fork = fork
    rng._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    rng._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)


def _patch_grad_clipping() -> None:
    # The fp32 clip asserts ``torch.cuda.FloatTensor`` grads; on CPU scale them directly.
    from megatron.core.optimizer import clip_grads, optimizer

    def clip_grad_by_total_norm_fp32(parameters, max_norm, total_norm, use_decoupled_grad=False):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        attr = "decoupled_grad" if use_decoupled_grad else "grad"
        grads = [getattr(p, attr).detach() for p in parameters if getattr(p, attr, None) is not None]
        coeff = max_norm / (total_norm + 1.0e-6)
        if grads and coeff < 1.0:
            torch._foreach_mul_(grads, coeff)

    clip_grads.clip_grad_by_total_norm_fp32 = clip_grad_by_total_norm_fp32
    optimizer.clip_grad_by_total_norm_fp32 = clip_grad_by_total_norm_fp32


def apply() -> None:
    """Apply the CPU patches unconditionally (idempotent). Prefer :func:`apply_if_cpu`."""
    global _applied
    if _applied:
        return
    cpu_torch = _CpuTorch()
    for name in PATCHED_MODULES:
        try:
            module = importlib.import_module(f"megatron.core.{name}")
        except ImportError:
            continue
        if getattr(module, "torch", None) is torch:
            module.torch = cpu_torch
    _patch_rng_tracker()
    _patch_grad_clipping()
    _applied = True


def apply_if_cpu() -> bool:
    """Apply the patches when CUDA is not available; return whether they are in effect."""
    if torch.cuda.is_available():
        return False
    apply()
    return True


def is_applied() -> bool:
    """Whether the CPU patches are in effect in this process."""
    return _applied
