"""MegaScope capture: forward hooks that see inside a megatron-core GPT, sharded or not.

::

    capture = ScopeCapture(model_chunk, reducer="rms", bins=16)
    with capture:                      # hooks exist only inside the block
        model(tokens, positions, mask)
    capture.rows["q"][layer]           # [batch, tokens, bins] on the device, gathered over TP

Per transformer layer it records the query, key and value heads, the attention
probabilities, the MLP's first projection (before the activation) and its output, and the
residual stream after the layer; per stage, the embeddings (the residual stream before
layer 1) and the final logits. Layers are keyed by megatron-core's global ``layer_number``
(1-based, pipeline offset included), so the stages of a pipeline each hold their own slice
of one numbering.

Why hooks on these modules:

- Q, K and V come from ``linear_qkv``'s output, split here. Megatron fuses them *per query
  group*: the features of group ``g`` are ``[q heads of g | k_g | v_g]`` (heads/groups query
  heads, then one key and one value head), not ``[Q | K | V]`` as in Hugging Face. Splitting
  the wrong way mixes keys into queries; with GQA it also miscounts heads.
- Attention probabilities are read where the local path forms them (the output of
  ``core_attention.scale_mask_softmax``); a fused or flash kernel never materialises them, so
  there they are recomputed from the query and key handed to ``core_attention``.
- Tensor parallelism shards heads and the MLP's width across ranks: every hook gathers over
  the TP group on the device before reducing, so what comes out equals the unsharded model.

Everything is reduced on the device right away (:func:`mapp.capture.reduce.reduce_bins`);
only the attention matrices and the full residual stream, which the attention view and the
PCA need, are kept whole, and only when asked for (``keep_full``). No hook is installed
outside ``with capture:``: with capture off, the model runs untouched.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from mapp.capture.reduce import reduce_bins

__all__ = ["ScopeCapture", "gather_tp", "gather_parts", "tensor_stats", "split_qkv", "attention_from_qk", "unwrap_gpt", "transformer_layers"]


def unwrap_gpt(model: Any) -> Any:
    """The GPTModel inside megatron's wrappers (DistributedDataParallel, Float16Module)."""
    while hasattr(model, "module") and not hasattr(model, "decoder"):
        model = model.module
    return model


def transformer_layers(model: Any) -> list[Any]:
    gpt = unwrap_gpt(model)
    return list(gpt.decoder.layers) if hasattr(gpt, "decoder") else []


def split_qkv(mixed: torch.Tensor, groups: int, heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``linear_qkv``'s output ``[..., groups * (heads/groups + 2) * head_dim]`` (this rank's
    share: local groups and heads) -> Q ``[..., heads, head_dim]``, K and V
    ``[..., groups, head_dim]``, from megatron's per-query-group layout."""
    per_group = heads // groups
    head_dim = mixed.shape[-1] // (groups * (per_group + 2))
    grouped = mixed.reshape(*mixed.shape[:-1], groups, (per_group + 2) * head_dim)
    q, k, v = torch.split(grouped, [per_group * head_dim, head_dim, head_dim], dim=-1)
    return q.reshape(*mixed.shape[:-1], heads, head_dim), k, v


def attention_from_qk(query: torch.Tensor, key: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Causal attention probabilities ``[batch, heads, sq, sk]`` from ``query [sq, b, heads,
    hd]`` and ``key [sk, b, groups, hd]`` (GQA keys repeated per group, as megatron does):
    what a fused kernel computes but never stores."""
    heads, groups = query.shape[2], key.shape[2]
    if heads != groups:
        key = key.repeat_interleave(heads // groups, dim=2)
    scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    scores = torch.einsum("qbhd,kbhd->bhqk", query.float(), key.float()) * scale
    sq, sk = scores.shape[-2:]
    future = torch.ones(sq, sk, dtype=torch.bool, device=scores.device).triu(sk - sq + 1)
    return scores.masked_fill(future, float("-inf")).softmax(-1)


def _plus_bias(output: Any) -> torch.Tensor:
    """A megatron linear returns ``(output, bias)``; with ``skip_bias_add`` the bias is not in
    the output yet, and what the layer computes is their sum."""
    if isinstance(output, tuple):
        out, bias = output[0], output[1] if len(output) > 1 else None
        return out if bias is None else out + bias
    return output


class ScopeCapture:
    """Forward hooks on one model chunk (one pipeline stage) for one or more forward passes.

    ``rows[kind][layer]``: ``[batch, tokens - from_position, bins]`` reduced values (kinds:
    ``mapp.scope.protocol.KINDS``) of the tokens from ``from_position`` on; with ``keep_full``
    also ``stats[kind][layer]``, the full activation's statistics (:func:`tensor_stats`). With ``keep_full``: ``attention[layer]`` ``[batch, heads,
    tokens, tokens]`` and ``residual[layer]`` ``[batch, tokens, hidden]`` (layer 0: the
    embeddings). ``logits``: ``[batch, tokens, vocab]`` on the last stage. Each forward pass
    overwrites what the previous one left."""

    def __init__(self, model: Any, *, reducer: str = "rms", bins: int = 16, keep_full: bool = False,
                 from_position: int = 0, tp_group: Any = None):
        self.gpt = unwrap_gpt(model)
        self.config = self.gpt.config
        self.reducer, self.bins, self.keep_full = reducer, bins, keep_full
        self.from_position = from_position
        self.tp_group = tp_group if tp_group is not None else _tp_group()
        self.tp = dist.get_world_size(self.tp_group) if self.tp_group is not None else 1
        groups = self.config.num_query_groups or self.config.num_attention_heads
        if groups % self.tp:
            raise ValueError(f"MegaScope needs query groups ({groups}) divisible by TP ({self.tp})")
        self.local_heads = self.config.num_attention_heads // self.tp
        self.local_groups = groups // self.tp
        self.rows: dict[str, dict[int, torch.Tensor]] = {}
        # statistics of each full activation before reduction: mapp.snapshot_format.STATS
        self.stats: dict[str, dict[int, torch.Tensor]] = {}
        self.attention: dict[int, torch.Tensor] = {}
        self.residual: dict[int, torch.Tensor] = {}
        self.logits: torch.Tensor | None = None
        self._handles: list[Any] = []
        self._qk: dict[int, tuple[torch.Tensor, torch.Tensor, float | None]] = {}

    # -- install / remove --------------------------------------------------------------

    def __enter__(self) -> "ScopeCapture":
        self.install()
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    def install(self) -> None:
        if self._handles:
            return
        hook = self._handles.append
        gpt = self.gpt
        if getattr(gpt, "pre_process", False) and hasattr(gpt, "embedding"):
            hook(gpt.embedding.register_forward_hook(self._on_embedding))
        for layer in transformer_layers(gpt):
            n = layer.layer_number
            attention, mlp = layer.self_attention, layer.mlp
            hook(attention.linear_qkv.register_forward_hook(self._bind(self._on_qkv, n)))
            softmax = getattr(attention.core_attention, "scale_mask_softmax", None)
            if softmax is not None:
                hook(softmax.register_forward_hook(self._bind(self._on_probs, n)))
            else:
                hook(attention.core_attention.register_forward_pre_hook(
                    self._bind(self._on_core_attention, n), with_kwargs=True))
                hook(attention.core_attention.register_forward_hook(self._bind(self._on_recompute, n)))
            hook(mlp.linear_fc1.register_forward_hook(self._bind(self._on_fc1, n)))
            hook(mlp.register_forward_hook(self._bind(self._on_mlp, n)))
            hook(layer.register_forward_hook(self._bind(self._on_layer, n)))
        if getattr(gpt, "post_process", False) and hasattr(gpt, "output_layer"):
            hook(gpt.output_layer.register_forward_hook(self._on_logits))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._qk.clear()

    def clear(self) -> None:
        self.rows, self.stats, self.attention, self.residual, self.logits = {}, {}, {}, {}, None

    @staticmethod
    def _bind(fn, layer: int):
        return lambda module, *args: fn(layer, *args)

    # -- gathering and storing ---------------------------------------------------------

    def _gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        return x if self.tp == 1 else gather_tp(x, dim, self.tp_group)

    def _seq_gather(self, x: torch.Tensor) -> torch.Tensor:
        # with sequence parallelism the residual stream is split over TP along the tokens
        return self._gather(x, 0) if getattr(self.config, "sequence_parallel", False) else x

    def _store(self, kind: str, layer: int, x: torch.Tensor) -> None:
        """``x [tokens, batch, ...features]`` -> reduced ``[batch, tokens, bins]``."""
        flat = x.detach().reshape(x.shape[0], x.shape[1], -1)
        # rows before from_position were sent at an earlier step: reduce only the new ones
        self.rows.setdefault(kind, {})[layer] = reduce_bins(flat[self.from_position:], self.reducer, self.bins).transpose(0, 1)
        if self.keep_full:
            self.stats.setdefault(kind, {})[layer] = tensor_stats(flat)

    # -- hooks -------------------------------------------------------------------------

    def _on_embedding(self, module, inputs, output) -> None:
        if self.keep_full:
            self.residual[0] = self._seq_gather(output).detach().float().transpose(0, 1)

    def _parts(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x] if self.tp == 1 else gather_parts(x, self.tp_group)

    def _on_qkv(self, layer: int, inputs, output) -> None:
        # one all-gather of the fused output, split per rank (each holds whole query groups),
        # not one per Q, K and V
        split = [split_qkv(part, self.local_groups, self.local_heads)
                 for part in self._parts(_plus_bias(output).detach())]
        for i, kind in enumerate(("q", "k", "v")):
            self._store(kind, layer, torch.cat([s[i] for s in split], dim=2) if len(split) > 1 else split[0][i])

    def _on_probs(self, layer: int, inputs, output) -> None:
        if self.keep_full:
            self.attention[layer] = self._gather(output.detach().float(), 1)

    def _on_core_attention(self, layer: int, args, kwargs) -> None:
        if self.keep_full:
            query = args[0] if args else kwargs["query"]
            key = args[1] if len(args) > 1 else kwargs["key"]
            self._qk[layer] = (query.detach(), key.detach(), None)

    def _on_recompute(self, layer: int, inputs, output) -> None:
        if layer in self._qk:
            query, key, scale = self._qk.pop(layer)
            self.attention[layer] = self._gather(attention_from_qk(query, key, scale), 1)

    def _on_fc1(self, layer: int, inputs, output) -> None:
        x = _plus_bias(output).detach()
        if getattr(self.config, "gated_linear_unit", False) and self.tp > 1:
            # each rank holds [gate | up] of its share: one all-gather, then the gates in rank
            # order followed by the ups
            halves = [part.chunk(2, dim=-1) for part in self._parts(x)]
            x = torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=-1)
        else:
            x = self._gather(x, -1)
        self._store("fc1", layer, x)

    def _on_mlp(self, layer: int, inputs, output) -> None:
        self._store("fc2", layer, self._seq_gather(_plus_bias(output)))

    def _on_layer(self, layer: int, inputs, output) -> None:
        hidden = self._seq_gather(output[0] if isinstance(output, tuple) else output)
        self._store("residual", layer, hidden)
        if self.keep_full:
            self.residual[layer] = hidden.detach().float().transpose(0, 1)

    def _on_logits(self, module, inputs, output) -> None:
        logits = output[0] if isinstance(output, tuple) else output
        if not getattr(module, "gather_output", False):
            logits = self._gather(logits, -1)
        self.logits = logits.detach().float().transpose(0, 1)


def tensor_stats(x: torch.Tensor) -> torch.Tensor:
    """mean, std, min, max, absmax, rms, fraction of zeros of ``x``: one small tensor on the
    device (copied to the host with the rows, never alone)."""
    x = x.float()
    return torch.stack([x.mean(), x.std() if x.numel() > 1 else x.new_zeros(()), x.min(), x.max(),
                        x.abs().max(), x.square().mean().sqrt(), (x == 0).float().mean()])


def gather_parts(x: torch.Tensor, group: Any = None) -> list[torch.Tensor]:
    """Every TP rank's shard of ``x``, in rank order (one all-gather, on the device)."""
    group = group if group is not None else _tp_group()
    x = x.detach().contiguous()
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x, group=group)
    return parts


def gather_tp(x: torch.Tensor, dim: int, group: Any = None) -> torch.Tensor:
    """Concatenate every TP rank's shard of ``x`` along ``dim``, on the device, in rank order."""
    return torch.cat(gather_parts(x, group), dim=dim)


def _tp_group():
    if not dist.is_available() or not dist.is_initialized():
        return None
    from megatron.core import parallel_state

    try:
        return parallel_state.get_tensor_model_parallel_group()
    except AssertionError:  # model parallel not initialised: a single-process model
        return None
