"""The stage models of a decoupled run.

A backward worker builds its stage with the example's own ``build_model`` (DDP-wrapped,
trainable) and the example's optimizer; a forward worker builds a bare copy without gradients
at its own TP, whose weights come from the backward workers (:mod:`.params`).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["build_forward_model", "build_optimizer", "set_input"]


def build_forward_model(args: Any, device: torch.device):
    """The forward worker's stage: the example's GPT (``examples/train_gpt.build_model``'s
    config at this role's TP, stage from ``parallel_state``) without DDP, gradients or
    optimizer state; its weights are overwritten by the first sync."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype = torch.bfloat16 if args.bf16 else torch.float32
    cfg = TransformerConfig(
        num_layers=args.layers,
        hidden_size=args.hidden,
        ffn_hidden_size=args.ffn_hidden,
        num_attention_heads=args.heads,
        tensor_model_parallel_size=ps.get_tensor_model_parallel_world_size(),
        pipeline_model_parallel_size=args.pp,
        pipeline_dtype=dtype,
        bf16=args.bf16,
        params_dtype=dtype,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        use_cpu_initialization=device.type == "cpu",
        num_layers_in_last_pipeline_stage=args.last_stage_layers,
    )
    model = GPTModel(
        config=cfg,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=args.vocab,
        max_sequence_length=args.seq,
        pre_process=ps.is_pipeline_first_stage(),
        post_process=ps.is_pipeline_last_stage(),
    ).to(device)
    if args.bf16:
        from megatron.core.transformer.module import Float16Module

        model = Float16Module(cfg, model)
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
