"""The model MegaScope looks at: a megatron-core GPT described by one small JSON file.

A scope checkpoint is a directory holding a Megatron distributed checkpoint (what
``megatron.core.dist_checkpointing.save`` writes, resharded on load to any TP/PP) plus
``mapp_model.json``, the :class:`ModelSpec` that says which architecture to build before
loading. The spec is the single source of the architecture: the demo trainer, the GPT-2
converter and ``mapp scope serve`` all build the model from it.

The model is always the local (no Transformer Engine) layer spec with learned absolute
position embeddings and no dropout, so that attention probabilities are materialised
(MegaScope captures them) and the same weights give the same logits on CPU at any TP/PP.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F

from mapp.errors import InputError, OutputError

__all__ = [
    "SPEC_FILE", "ModelSpec", "build_model", "save_checkpoint", "load_checkpoint",
    "ensure_model_parallel", "gelu_tanh",
]

SPEC_FILE = "mapp_model.json"
"""Name of the spec inside a checkpoint directory."""

ACTIVATIONS = ("gelu", "gelu_tanh")
TOKENIZERS = ("bytes", "gpt2")


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's ``gelu_new``: the tanh approximation of GELU.

    A module-level function rather than a lambda so that a config holding it can be pickled."""
    return F.gelu(x, approximate="tanh")


def _activation(name: str):
    return {"gelu": F.gelu, "gelu_tanh": gelu_tanh}[name]


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a scope model; saved as ``CHECKPOINT_DIR/mapp_model.json``."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int            # == heads unless GQA
    ffn_hidden_size: int
    vocab_size: int                  # the model's (may be padded above the tokenizer's)
    max_sequence_length: int
    activation: str = "gelu"         # "gelu" | "gelu_tanh" (GPT-2's gelu_new)
    add_bias_linear: bool = True
    layernorm_epsilon: float = 1e-5
    share_embeddings_and_output_weights: bool = True
    tokenizer: str = "bytes"         # "bytes" (vocab 256, shipped) | "gpt2" (files in the checkpoint dir)

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise ValueError(problem)

    def _problem(self) -> str | None:
        """What makes this spec unbuildable, or None."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                return f"{f.name} must be a positive integer, not {value!r}"
            if f.type == "bool" and not isinstance(value, bool):
                return f"{f.name} must be true or false, not {value!r}"
        if self.hidden_size % self.num_attention_heads:
            return f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}"
        if self.num_attention_heads % self.num_query_groups:
            return (f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                    f"num_query_groups {self.num_query_groups}")
        if self.activation not in ACTIVATIONS:
            return f"activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)}"
        if self.tokenizer not in TOKENIZERS:
            return f"tokenizer {self.tokenizer!r} is not one of {', '.join(TOKENIZERS)}"
        if not isinstance(self.layernorm_epsilon, (int, float)) or not self.layernorm_epsilon > 0:
            return f"layernorm_epsilon must be a positive number, not {self.layernorm_epsilon!r}"
        return None

    @classmethod
    def load(cls, directory) -> "ModelSpec":
        """Read ``directory/mapp_model.json``; a missing or invalid one is a one-line InputError."""
        path = Path(directory) / SPEC_FILE
        if not Path(directory).is_dir():
            raise InputError(f"{directory} is not a directory", "give a scope checkpoint directory")
        if not path.is_file():
            raise InputError(f"{directory} has no {SPEC_FILE}: not a mapp scope checkpoint",
                             "make one with `mapp scope demo` or the GPT-2 converter")
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InputError(f"{path} is not valid JSON: {_one_line(e)}") from None
        if not isinstance(data, dict):
            raise InputError(f"{path} does not hold a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"{path} has unknown fields: {', '.join(unknown)}")
        try:
            return cls(**data)
        except (TypeError, ValueError) as e:
            raise InputError(f"{path} is not a valid model spec: {_one_line(e)}") from None

    def save(self, directory) -> None:
        """Write ``directory/mapp_model.json`` (atomically: a reader never sees half a file)."""
        path = Path(directory) / SPEC_FILE
        tmp = path.with_name(f".{SPEC_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, path)

    def transformer_config(self, *, tp: int = 1, pp: int = 1, dtype=torch.float32, device_is_cpu=True):
        """The megatron-core TransformerConfig of this architecture at ``tp`` x ``pp``.

        Dropout is off (a scope model is looked at, and must give the same numbers every time);
        ``use_cpu_initialization`` is what megatron-core needs on CPU."""
        from megatron.core.transformer.transformer_config import TransformerConfig

        return TransformerConfig(
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            num_query_groups=self.num_query_groups,
            ffn_hidden_size=self.ffn_hidden_size,
            activation_func=_activation(self.activation),
            add_bias_linear=self.add_bias_linear,
            layernorm_epsilon=self.layernorm_epsilon,
            tensor_model_parallel_size=tp,
            pipeline_model_parallel_size=pp,
            params_dtype=dtype,
            pipeline_dtype=dtype,
            bf16=dtype == torch.bfloat16,
            fp16=dtype == torch.float16,
            attention_dropout=0.0,
            hidden_dropout=0.0,
            use_cpu_initialization=device_is_cpu,
        )


def _one_line(error: BaseException) -> str:
    """An exception's message on one line, shortened. torch.distributed.checkpoint wraps a
    rank's failure with that rank's traceback: its last line is the message that matters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if any(line.startswith("Traceback") for line in lines):
        lines = lines[-1:]
    text = " ".join(" ".join(lines).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def ensure_model_parallel() -> None:
    """Make a single process usable on its own: a world-1 gloo group and TP=PP=1.

    Does nothing when the caller (torchrun and ``initialize_model_parallel``) already set
    things up. A world of several ranks without model-parallel groups is the caller's to
    lay out, so it is refused rather than guessed."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    if not dist.is_initialized():
        # a FileStore in a fresh temporary directory: no port to pick, no clash with other jobs
        store = dist.FileStore(os.path.join(tempfile.mkdtemp(prefix="mapp-scope-"), "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    if not ps.model_parallel_is_initialized():
        if dist.get_world_size() != 1:
            raise RuntimeError("call megatron.core.parallel_state.initialize_model_parallel(tp, pp) first")
        ps.initialize_model_parallel(1, 1)


def build_model(spec: ModelSpec, *, parallel_output: bool = False, device=None, dtype=torch.float32):
    """This rank's stage of the GPT that ``spec`` describes, at the current TP/PP.

    Call after ``parallel_state.initialize_model_parallel(tp, pp)``. Weights are initialised
    on the CPU (megatron-core then gives the same full weights at any TP, and CPU needs it
    anyway) and moved to ``device`` (default: the current CUDA device if there is one, else
    the CPU). ``parallel_output=False``: logits come back gathered over TP."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.process_groups_config import ProcessGroupCollection

    _cpu_patches()
    _ensure_rng_tracker()
    device = torch.device(device) if device is not None else _default_device()
    tp = ps.get_tensor_model_parallel_world_size()
    pp = ps.get_pipeline_model_parallel_world_size()
    _check_divisible(spec, tp)
    config = spec.transformer_config(tp=tp, pp=pp, dtype=dtype, device_is_cpu=True)
    groups = ProcessGroupCollection.use_mpu_process_groups()
    tied_copy = spec.share_embeddings_and_output_weights and pp > 1
    embd_group = groups.embd
    if tied_copy:
        # megatron-core copies the tied embedding to the last stage with an all-reduce of
        # `weight.data.cuda()`, which fails on a CPU-only torch: hide the group while it
        # builds and do that all-reduce here, on the weight's own device.
        groups.embd = None
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=spec.vocab_size,
        max_sequence_length=spec.max_sequence_length,
        pre_process=ps.is_pipeline_first_stage(),
        post_process=ps.is_pipeline_last_stage(),
        parallel_output=parallel_output,
        share_embeddings_and_output_weights=spec.share_embeddings_and_output_weights,
        position_embedding_type="learned_absolute",
        pg_collection=groups,
    ).to(device)
    if tied_copy:
        groups.embd = embd_group
        model.embd_group = embd_group
        _sync_tied_embedding(model)
    return model


# dist_checkpointing modules that call torch.cuda on the way (mapp's CPU patches cover training)
_CHECKPOINT_MODULES = (
    "megatron.core.dist_checkpointing.strategies.filesystem_async",
    "megatron.core.dist_checkpointing.strategies.state_dict_saver",
    "megatron.core.dist_checkpointing.strategies.async_utils",
    "megatron.core.dist_checkpointing.tensor_aware_state_dict",
)


def _cpu_patches() -> None:
    """Without CUDA, let megatron-core build, run and checkpoint on the CPU.

    ``mapp.megatron_hooks.cpu_patches`` gives megatron-core's training modules a view of
    ``torch`` whose ``torch.cuda`` is the CPU; the checkpoint writer also calls
    ``torch.cuda.synchronize()`` and allocates on the current device, so it gets the same view."""
    import importlib

    from mapp.megatron_hooks.cpu_patches import apply_if_cpu

    if not apply_if_cpu():
        return
    import megatron.core.utils as core_utils

    cpu_torch = core_utils.torch    # the CPU view that apply_if_cpu installed there
    for name in _CHECKPOINT_MODULES:
        module = importlib.import_module(name)
        if getattr(module, "torch", None) is torch:
            module.torch = cpu_torch


def _ensure_rng_tracker() -> None:
    """megatron-core's attention forks the model-parallel RNG state even with dropout off; seed
    it if the caller has not (dropout is 0, so the seed changes no number; CPU init of the
    weights draws from torch's global generator, which the caller seeds)."""
    from megatron.core import tensor_parallel

    tracker = tensor_parallel.get_cuda_rng_tracker()
    if "model-parallel-rng" not in getattr(tracker, "states_", {}):
        tensor_parallel.model_parallel_cuda_manual_seed(0)


def _check_divisible(spec: ModelSpec, tp: int) -> None:
    """Refuse, in one line, a TP that does not divide what megatron-core splits over TP."""
    for name in ("num_attention_heads", "num_query_groups", "ffn_hidden_size", "vocab_size"):
        if getattr(spec, name) % tp:
            raise InputError(f"{name} {getattr(spec, name)} is not divisible by tensor-parallel size {tp}",
                             "use a TP size that divides it")


def _sync_tied_embedding(model) -> None:
    """First and last stage start with the same tied embedding (what megatron-core does on GPU)."""
    import torch.distributed as dist

    if model._is_in_embd_group():
        weight = model.shared_embedding_or_output_weight()
        with torch.no_grad():
            dist.all_reduce(weight.data, group=model.embd_group)


def save_checkpoint(model, spec: ModelSpec, directory) -> None:
    """Save ``model`` as a Megatron distributed checkpoint plus its spec in ``directory``.

    Collective: every rank calls it. The directory is created if needed; rank 0 writes the
    spec after the weights, so a directory with a spec has complete weights."""
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    _cpu_patches()
    _require_psutil()
    directory = Path(directory)
    if dist.get_rank() == 0:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"cannot create {directory}: {_one_line(e)}") from None
    dist.barrier()
    dist_checkpointing.save(model.sharded_state_dict(), str(directory))
    dist.barrier()
    if dist.get_rank() == 0:
        spec.save(directory)
    dist.barrier()


def _require_psutil() -> None:
    """megatron-core's checkpoint writer needs psutil in its writer processes, where a missing
    one surfaces as an unrelated error: say so up front, on one line."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        raise OutputError("saving a Megatron distributed checkpoint needs psutil",
                          "pip install psutil") from None


def load_checkpoint(directory, *, device=None):
    """Build this rank's model for the current TP/PP from ``directory`` and load its weights.

    The saving run's TP/PP may differ: megatron-core reshards. Returns ``(model, spec)`` with
    the model in eval mode. If ``torch.distributed`` is not initialised, a single-process
    world (TP=PP=1) is set up. Every problem with the directory is a one-line InputError."""
    from megatron.core import dist_checkpointing
    from torch.distributed.checkpoint.api import CheckpointException

    directory = Path(directory)
    spec = ModelSpec.load(directory)      # also checks that it is a directory
    if not dist_checkpointing.check_is_distributed_checkpoint(str(directory)):
        raise InputError(f"{directory} is not a Megatron distributed checkpoint (no metadata.json)",
                         "save it with megatron.core.dist_checkpointing")
    ensure_model_parallel()
    model = build_model(spec, device=device)    # also applies the CPU patches
    try:
        state = dist_checkpointing.load(model.sharded_state_dict(), str(directory))
        model.load_state_dict(state)
    except (Exception, CheckpointException) as e:  # many kinds, multi-line messages; the last is a BaseException
        raise InputError(f"cannot load the weights of {directory}: {_one_line(e)}",
                         "is mapp_model.json the spec this checkpoint was saved with?") from None
    model.eval()
    return model, spec
