"""Convert a local Hugging Face GPT-2 directory into a scope checkpoint.

    convert_gpt2("~/models/gpt2", "~/models/gpt2-mcore")   # then: mapp scope serve ~/models/gpt2-mcore

Reads the directory with ``transformers`` (``local_files_only``: nothing is downloaded), maps
every weight to megatron-core's GPTModel names and layouts, and writes a Megatron
distributed checkpoint at TP=1 PP=1 (loadable at any TP/PP), ``mapp_model.json`` and the
tokenizer files. The layouts that differ:

- HF's ``Conv1D`` stores weights as (in, out); megatron's linears as (out, in): transposed.
- HF's ``c_attn`` is [all q | all k | all v]; megatron's ``linear_qkv`` is interleaved per
  query group: for each group g, [the q heads of g, k_g, v_g] (so that a TP rank's slice is a
  whole set of groups). Biases likewise.
- The vocabulary is padded to a multiple of 128 (what megatron does, so that it splits over
  TP); the padding rows are zero, and their logits are to be ignored.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from mapp.errors import InputError, OutputError
from mapp.scope.model import ModelSpec, build_model, ensure_model_parallel, save_checkpoint
from mapp.scope.tokenizer import TOKENIZER_FILES, load_tokenizer

__all__ = ["convert_gpt2", "gpt2_spec", "gpt2_to_megatron", "interleave_qkv", "VOCAB_MULTIPLE"]

VOCAB_MULTIPLE = 128
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}


def _padded(vocab_size: int) -> int:
    return -(-vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def gpt2_spec(config) -> ModelSpec:
    """The ModelSpec of a ``GPT2Config``; a GPT-2 variant megatron-core's GPT does not compute
    the same way is refused in one line."""
    activation = _ACTIVATIONS.get(config.activation_function)
    if activation is None:
        raise InputError(f"GPT-2 activation {config.activation_function!r} is not supported",
                         f"supported: {', '.join(_ACTIVATIONS)}")
    if not getattr(config, "scale_attn_weights", True) or getattr(config, "scale_attn_by_inverse_layer_idx", False):
        raise InputError("GPT-2 attention scaling other than 1/sqrt(head_dim) is not supported")
    return ModelSpec(
        num_layers=config.n_layer,
        hidden_size=config.n_embd,
        num_attention_heads=config.n_head,
        num_query_groups=config.n_head,
        ffn_hidden_size=config.n_inner or 4 * config.n_embd,
        vocab_size=_padded(config.vocab_size),
        max_sequence_length=config.n_positions,
        activation=activation,
        add_bias_linear=True,
        layernorm_epsilon=config.layer_norm_epsilon,
        share_embeddings_and_output_weights=bool(getattr(config, "tie_word_embeddings", True)),
        tokenizer="gpt2",
    )


def interleave_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: int) -> torch.Tensor:
    """Megatron's fused QKV layout from separate q, k, v (weights (rows, in) or biases (rows,)):
    for each query group g, [q rows of g's heads, k_g rows, v_g rows]."""
    tail = q.shape[1:]
    per_group = [t.reshape(groups, -1, *tail) for t in (q, k, v)]
    return torch.cat(per_group, dim=1).reshape(-1, *tail)


def _split_c_attn(weight: torch.Tensor, hidden: int, kv_rows: int):
    """HF c_attn (Conv1D, (in, out) = (H, q+k+v)) as (out, in) q, k, v; a bias (q+k+v,) too."""
    w = weight.t() if weight.dim() == 2 else weight
    return w[:hidden], w[hidden:hidden + kv_rows], w[hidden + kv_rows:]


def gpt2_to_megatron(hf_state: dict[str, torch.Tensor], spec: ModelSpec) -> dict[str, torch.Tensor]:
    """Megatron GPTModel (local spec) weights from a GPT2LMHeadModel state dict."""
    h, groups = spec.hidden_size, spec.num_query_groups
    kv_rows = groups * (h // spec.num_attention_heads)
    sd = {k.removeprefix("transformer."): v for k, v in hf_state.items()}
    vocab = sd["wte.weight"].shape[0]
    embedding = torch.zeros(spec.vocab_size, h, dtype=sd["wte.weight"].dtype)
    embedding[:vocab] = sd["wte.weight"]
    out = {
        "embedding.word_embeddings.weight": embedding,
        "embedding.position_embeddings.weight": sd["wpe.weight"],
        "decoder.final_layernorm.weight": sd["ln_f.weight"],
        "decoder.final_layernorm.bias": sd["ln_f.bias"],
    }
    if not spec.share_embeddings_and_output_weights:
        head = torch.zeros_like(embedding)
        head[:vocab] = hf_state["lm_head.weight"]
        out["output_layer.weight"] = head
    for i in range(spec.num_layers):
        src, dst = f"h.{i}.", f"decoder.layers.{i}."
        out[dst + "input_layernorm.weight"] = sd[src + "ln_1.weight"]
        out[dst + "input_layernorm.bias"] = sd[src + "ln_1.bias"]
        for kind in ("weight", "bias"):
            q, k, v = _split_c_attn(sd[src + f"attn.c_attn.{kind}"], h, kv_rows)
            out[dst + f"self_attention.linear_qkv.{kind}"] = interleave_qkv(q, k, v, groups)
        out[dst + "self_attention.linear_proj.weight"] = sd[src + "attn.c_proj.weight"].t()
        out[dst + "self_attention.linear_proj.bias"] = sd[src + "attn.c_proj.bias"]
        out[dst + "pre_mlp_layernorm.weight"] = sd[src + "ln_2.weight"]
        out[dst + "pre_mlp_layernorm.bias"] = sd[src + "ln_2.bias"]
        out[dst + "mlp.linear_fc1.weight"] = sd[src + "mlp.c_fc.weight"].t()
        out[dst + "mlp.linear_fc1.bias"] = sd[src + "mlp.c_fc.bias"]
        out[dst + "mlp.linear_fc2.weight"] = sd[src + "mlp.c_proj.weight"].t()
        out[dst + "mlp.linear_fc2.bias"] = sd[src + "mlp.c_proj.bias"]
    return {k: v.contiguous() for k, v in out.items()}


def _read_config(hf_dir: Path):
    """The GPT2Config in ``hf_dir``; anything else is a one-line InputError."""
    if not hf_dir.is_dir():
        raise InputError(f"{hf_dir} is not a directory", "give a Hugging Face GPT-2 directory")
    if not (hf_dir / "config.json").is_file():
        raise InputError(f"{hf_dir} has no config.json: not a Hugging Face model directory")
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(hf_dir), local_files_only=True)
    except Exception as e:   # transformers raises OSError/ValueError with long texts
        raise InputError(f"cannot read {hf_dir / 'config.json'}: {_short(e)}") from None
    if config.model_type != "gpt2":
        raise InputError(f"{hf_dir} holds a {config.model_type!r} model, not GPT-2")
    if not any((hf_dir / name).is_file() for name in TOKENIZER_FILES):
        raise InputError(f"{hf_dir} has no tokenizer files (vocab.json + merges.txt or tokenizer.json)",
                         "save the GPT-2 tokenizer there too (tokenizer.save_pretrained)")
    return config


def _load_hf(hf_dir: Path):
    """The GPT-2 model in ``hf_dir`` (local files only), in fp32."""
    from transformers import GPT2LMHeadModel

    try:
        return GPT2LMHeadModel.from_pretrained(str(hf_dir), local_files_only=True, torch_dtype=torch.float32)
    except Exception as e:
        raise InputError(f"cannot load the GPT-2 weights in {hf_dir}: {_short(e)}",
                         "it needs model.safetensors or pytorch_model.bin") from None


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _check_output(hf_dir: Path, out_dir: Path) -> None:
    if out_dir.resolve() == hf_dir.resolve():
        raise OutputError(f"{out_dir} is the Hugging Face directory: not writing into it",
                          "give a new output directory")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise OutputError(f"{out_dir} exists and is not empty: not writing into it",
                          "give a new or empty output directory")


def _check_single_process() -> None:
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() != 1:
        raise RuntimeError("convert_gpt2 runs in a single process (it writes a TP=1 PP=1 checkpoint)")


def convert_gpt2(hf_dir, out_dir) -> ModelSpec:
    """Convert the GPT-2 in local directory ``hf_dir`` to a scope checkpoint in ``out_dir``.

    Single process; sets up a world-1 process group unless one exists. The output is written
    to a temporary sibling and renamed at the end, so a failed run leaves nothing that looks
    complete. Returns the spec written."""
    hf_dir, out_dir = Path(hf_dir).expanduser(), Path(out_dir).expanduser().absolute()
    _check_output(hf_dir, out_dir)
    spec = gpt2_spec(_read_config(hf_dir))     # refuses what it cannot convert before the weights load
    hf = _load_hf(hf_dir)
    weights = gpt2_to_megatron(hf.state_dict(), spec)
    del hf
    _check_single_process()
    ensure_model_parallel()
    model = build_model(spec, device="cpu")
    _load_weights(model, weights)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = out_dir.with_name(f".{out_dir.name}.converting-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        save_checkpoint(model, spec, staging)
        _copy_tokenizer(hf_dir, staging, spec)
        if out_dir.exists():
            out_dir.rmdir()     # empty (checked above)
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return spec


def _load_weights(model, weights: dict[str, torch.Tensor]) -> None:
    """Copy ``weights`` into ``model``: every parameter must be given, with its shape."""
    params = dict(model.named_parameters())
    missing, unexpected = sorted(set(params) - set(weights)), sorted(set(weights) - set(params))
    if missing or unexpected:
        raise RuntimeError(f"GPT-2 mapping mismatch: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for name, param in params.items():
            if param.shape != weights[name].shape:
                raise RuntimeError(f"GPT-2 mapping: {name} is {tuple(weights[name].shape)}, "
                                   f"the model wants {tuple(param.shape)}")
            param.copy_(weights[name])


def _copy_tokenizer(hf_dir: Path, directory: Path, spec: ModelSpec) -> None:
    """Copy the tokenizer files and check that the model covers the tokenizer's vocabulary."""
    for name in TOKENIZER_FILES:
        if (hf_dir / name).is_file():
            shutil.copy2(hf_dir / name, directory / name)
    tokenizer = load_tokenizer(directory, spec)
    if tokenizer.vocab_size > spec.vocab_size:
        raise InputError(f"the tokenizer in {hf_dir} has {tokenizer.vocab_size} tokens, "
                         f"more than the model's {spec.vocab_size}")
