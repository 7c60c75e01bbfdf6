"""The stage models of a decoupled run.

A backward worker builds its stage with the example's own ``build_model`` (DDP-wrapped,
trainable) and the example's optimizer; a forward worker builds a bare copy without gradients
at its own TP, whose weights come from the backward workers (:mod:`.params`).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["build_forward_model", "build_optimizer", "set_input"]


def build_forward_model(args: Any, device: torch.device, gpt_config: Callable, gpt_module: Callable):
    """The forward worker's stage: the example's GPT (``gpt_config`` at this role's TP, the stage
    from ``parallel_state``; ``gpt_module``) without DDP, gradients or optimizer state; its
    weights are overwritten by the first sync."""
    from megatron.core import parallel_state as ps

    cfg = gpt_config(args, device, tp=ps.get_tensor_model_parallel_world_size())
    model = gpt_module(args, cfg, device)
    for p in model.parameters():
        p.requires_grad_(False)
    return cfg, model


def build_optimizer(args: Any, chunks: list):
    """The example's optimizer (``examples/train_gpt.py``: Adam or SGD, lr 1e-4, ``--clip-grad``)."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    config = OptimizerConfig(optimizer=args.optimizer, lr=1e-4, bf16=args.bf16, use_distributed_optimizer=False,
                             clip_grad=args.clip_grad)
    return get_megatron_optimizer(config, chunks)


def set_input(model: Any, tensor: torch.Tensor | None) -> None:
    """Hand a stage its input activation (what the schedules do before each forward step)."""
    from megatron.core.utils import get_attr_wrapped_model

    get_attr_wrapped_model(model, "set_input_tensor")([tensor])
