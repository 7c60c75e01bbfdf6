"""Small patches that let megatron-core 0.16.x train on CPU with gloo. Applied only without CUDA.

megatron-core assumes a GPU in a handful of places that a CPU run reaches:

- the RNG tracker (``tensor_parallel.random``) saves and restores *CUDA* generator states;
  on CPU the tracker keeps CPU generator states instead;
- buffers are allocated on ``torch.cuda.current_device()`` (DDP grad buffers, the global
  memory buffer, p2p receive tensors, TP gathers) and a few tensors use ``device="cuda"``
  (token counters in the schedules, the default causal mask);
- ``torch.cuda.synchronize()`` follows batched p2p and appears in the optimizer;
- gradient clipping asserts that grads are ``torch.cuda.FloatTensor``;
- pipeline p2p posts its messages untagged. NCCL pairs one call's sends and receives as a
  group, but gloo pairs the messages between two ranks by (peer, tag) in the order they were
  posted, and with two pipeline stages the previous and the next rank are one rank: in the
  interleaved schedule rank 1's activation and gradient to rank 0 met rank 0's receives in the
  opposite order, so stages trained on each other's tensors (or on an unfilled buffer), and
  with variable sequence lengths a shape message met a tensor receive and gloo aborted. Here
  every pipeline message carries the direction it travels as its tag (shapes their own), so
  that each receive takes the message meant for it, batched or not.

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
    # mixture of experts: the all-to-all dispatcher copies token counts on a CUDA side stream
    "transformer.moe.token_dispatcher",
    "transformer.moe.moe_layer",
    "transformer.moe.moe_utils",
    "transformer.moe.router",
    "transformer.moe.experts",
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


class _NoStream:
    """A CUDA stream or event on a CPU run: CPU work is in order, so there is nothing to wait for.
    Only what megatron-core's MoE dispatcher calls (an unknown method fails as it would)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_event(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record_event(self, *args: Any, **kwargs: Any) -> "_NoStream":
        # an event to synchronize() on later
        return _NoStream()

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def query(self) -> bool:
        return True

    def __enter__(self) -> "_NoStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


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
        self.Stream = self.Event = _NoStream
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


# Tags of pipeline p2p messages on CPU: the direction a message travels, shapes apart.
_TO_NEXT, _TO_PREV, _SHAPE_TO_NEXT, _SHAPE_TO_PREV = 1, 2, 3, 4


def _tagged_ops(send_prev, recv_prev, send_next, recv_next, prev_rank: int, next_rank: int, group,
                to_next: int = _TO_NEXT, to_prev: int = _TO_PREV) -> list:
    """megatron's four p2p operations, in its order, each tagged with its direction (a receive
    from the previous stage takes what that stage sent to its next)."""
    dist = torch.distributed
    ops = []
    for op, tensor, peer, tag in ((dist.isend, send_prev, prev_rank, to_prev), (dist.irecv, recv_prev, prev_rank, to_next),
                                  (dist.isend, send_next, next_rank, to_next), (dist.irecv, recv_next, next_rank, to_prev)):
        if tensor is not None:
            ops.append(dist.P2POp(op, tensor, peer, group, tag))
    return ops


def _patch_pipeline_p2p_tags() -> None:
    from megatron.core.pipeline_parallel import p2p_communication as p2p

    def batched_p2p_ops(*, tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next, group,
                        prev_pipeline_rank, next_pipeline_rank):
        ops = _tagged_ops(tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next,
                          prev_pipeline_rank, next_pipeline_rank, group)
        return torch.distributed.batch_isend_irecv(ops) if ops else []

    def p2p_ops(*, tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next, group,
                prev_pipeline_rank, next_pipeline_rank):
        # unbatched: the same tagged messages, one request each, keyed as megatron keys them
        names = [n for n, t in (("send_prev", tensor_send_prev), ("recv_prev", tensor_recv_prev),
                                ("send_next", tensor_send_next), ("recv_next", tensor_recv_next)) if t is not None]
        ops = _tagged_ops(tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next,
                          prev_pipeline_rank, next_pipeline_rank, group)
        return {name: op.op(op.tensor, op.peer, op.group, op.tag) for name, op in zip(names, ops)}

    def communicate_shapes(self, tensor_send_next, tensor_send_prev, recv_prev, recv_next):
        shape = lambda t: None if t is None else torch.tensor(t.size(), dtype=torch.int64)
        recv_prev_shape = torch.empty((3,), dtype=torch.int64) if recv_prev else None
        recv_next_shape = torch.empty((3,), dtype=torch.int64) if recv_next else None
        ops = _tagged_ops(shape(tensor_send_prev), recv_prev_shape, shape(tensor_send_next), recv_next_shape,
                          self.prev_rank, self.next_rank, self.pp_group, _SHAPE_TO_NEXT, _SHAPE_TO_PREV)
        for req in torch.distributed.batch_isend_irecv(ops) if ops else []:
            req.wait()
        return ([0, 0, 0] if recv_prev_shape is None else recv_prev_shape.tolist(),
                [0, 0, 0] if recv_next_shape is None else recv_next_shape.tolist())

    p2p._batched_p2p_ops = batched_p2p_ops
    p2p._p2p_ops = p2p_ops
    p2p.P2PCommunicator._communicate_shapes = communicate_shapes


def _patch_moe_splits() -> None:
    # The all-to-all dispatcher hands its split sizes to ``all_to_all_single`` as the numpy arrays
    # its GPU-to-host copy makes; a CPU tensor is never copied, so it would stay a tensor.
    try:
        from megatron.core.transformer.moe import token_dispatcher
    except ImportError:
        return
    move = token_dispatcher.maybe_move_tensor_to_cpu

    def maybe_move_tensor_to_cpu(tensor, as_numpy=False, record_stream=False):
        if as_numpy and torch.is_tensor(tensor) and not tensor.is_cuda:
            return tensor.numpy()
        return move(tensor, as_numpy=as_numpy, record_stream=record_stream)

    token_dispatcher.maybe_move_tensor_to_cpu = maybe_move_tensor_to_cpu


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
    _patch_pipeline_p2p_tags()
    _patch_moe_splits()
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
