"""MegaScope perturbations: faults injected into a megatron-core GPT, per layer, reversibly.

Three places a fault can sit, named as the original MegaScope names them:

- ``weights`` ("storage"): the layer's weight matrices as stored. ``gaussian`` adds
  ``strength * std(W) * z``; ``uniform`` scales each element by ``1 + strength * u``
  (``u`` uniform in [-1, 1]); ``bitflip`` flips one random bit of the stored dtype in a
  ``strength`` fraction of the elements (the sign, exponent or mantissa: an exponent bit makes
  a huge value or NaN, as real memory faults do).
- ``mlp`` ("calculation"): the MLP's output. ``gaussian`` adds ``strength * z`` times each
  token's standard deviation; ``uniform`` scales it by ``1 + strength * u``.
- ``residual`` ("system"): the residual stream between this layer and the next. ``offset``
  adds ``strength * d``, one fixed random direction ``d`` (N(0, 1) per feature) for every token
  (a constant added to every feature alike would do nothing: the next LayerNorm subtracts the
  mean); ``noise`` adds ``strength * z`` times each token's standard deviation.

Why it is safe to leave on in training: weights are never written. The perturbed values live
in a tensor of their own that replaces ``param.data`` only while the layer's forward runs and
is swapped back right after, so the optimizer updates (and a switched-off perturbation leaves)
the clean weights bit for bit, and autograd still flows into the same parameters. Activation
faults are out-of-place additions inside the forward, which autograd differentiates through.
Strength 0 installs nothing, so it is bit-identical to no perturbation.

The random draws are fixed by ``seed`` and the layer (and, for sharded weights, the tensor
parallel rank, since each rank holds a different shard): the same ``z`` at every strength,
and every bit flipped at strength ``s`` is also flipped at any larger strength, so a fault's
effect grows with its strength instead of being re-drawn. Activation noise is drawn per token
position in order, so a token keeps its noise as generation extends the sequence.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .scope import transformer_layers

__all__ = ["Perturbation", "Perturber", "flip_bits"]

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class Perturbation:
    target: str            # "weights" | "mlp" | "residual"
    kind: str
    strength: float
    layer: int | None = None   # megatron layer_number (1-based); None: every layer
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _generator(device: torch.device, *seeds: int) -> torch.Generator:
    # one stream per (seed, layer, tensor, rank), the same in every process and Python version
    digest = hashlib.blake2b(repr(seeds).encode(), digest_size=8).digest()
    gen = torch.Generator(device=device)
    gen.manual_seed(int.from_bytes(digest, "little") >> 1)
    return gen


def flip_bits(x: torch.Tensor, fraction: float, gen: torch.Generator) -> torch.Tensor:
    """A copy of ``x`` with one random bit flipped in each element whose draw falls below
    ``fraction``: nested sets, so a larger fraction flips a superset of the bits."""
    flat = x.detach().contiguous().reshape(-1)
    itype = _INT_VIEW[flat.element_size()]
    bits = 8 * flat.element_size()
    u = torch.rand(flat.shape, generator=gen, device=flat.device)
    position = torch.randint(0, bits, flat.shape, generator=gen, device=flat.device)
    out = flat.clone()
    ints = out.view(itype)
    chosen = u < fraction
    # 1 << position in the signed type: the top bit is the sign bit (its mask wraps negative)
    masks = torch.ones_like(ints).bitwise_left_shift(position.to(ints.dtype))
    ints[chosen] = ints[chosen].bitwise_xor(masks[chosen])
    return out.reshape(x.shape)


def _perturbed_weight(w: torch.Tensor, p: Perturbation, gen: torch.Generator) -> torch.Tensor:
    if p.kind == "bitflip":
        return flip_bits(w, p.strength, gen)
    z = torch.randn(w.shape, generator=gen, device=w.device, dtype=torch.float32)
    if p.kind == "gaussian":
        return (w.float() + p.strength * w.float().std() * z).to(w.dtype)
    if p.kind == "uniform":
        return (w.float() * (1 + p.strength * (2 * torch.rand(w.shape, generator=gen, device=w.device) - 1))).to(w.dtype)
    raise ValueError(f"unknown weight perturbation {p.kind!r}")


def _per_token_noise(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    # x is [tokens, batch, hidden]; drawing in that order keeps position t's noise the same
    # however many tokens follow it
    return torch.randn(x.shape, generator=gen, device=x.device, dtype=torch.float32)


def _perturbed_activation(x: torch.Tensor, p: Perturbation, gen: torch.Generator) -> torch.Tensor:
    xf = x.float()
    if p.kind == "offset":
        out = xf + p.strength * torch.randn(x.shape[-1], generator=gen, device=x.device)
    elif p.kind in ("gaussian", "noise"):
        out = xf + p.strength * xf.std(-1, keepdim=True) * _per_token_noise(x, gen)
    elif p.kind == "uniform":
        out = xf * (1 + p.strength * (2 * torch.rand(x.shape, generator=gen, device=x.device) - 1))
    else:
        raise ValueError(f"unknown activation perturbation {p.kind!r}")
    return out.to(x.dtype)


class Perturber:
    """The perturbations switched on for one model chunk, as hooks on its layers.

    ``set(p)`` switches one on (strength 0: off) for its (target, layer); ``clear()`` removes
    them all. Layers this chunk does not hold (another pipeline stage's) are ignored here and
    perturbed by that stage's Perturber."""

    def __init__(self, model: Any, tp_rank: int = 0):
        self.layers = {layer.layer_number: layer for layer in transformer_layers(model)}
        self.tp_rank = tp_rank
        self.active: dict[tuple[str, int | None], Perturbation] = {}
        self._handles: list[Any] = []

    def set(self, p: Perturbation) -> None:
        key = (p.target, p.layer)
        if p.strength == 0:
            self.active.pop(key, None)
        else:
            self.active[key] = p
        self._reinstall()

    def clear(self) -> None:
        self.active.clear()
        self._reinstall()

    @contextlib.contextmanager
    def suspended(self):
        """The clean model for the duration of the block (the perturbations stay chosen)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        try:
            yield
        finally:
            self._reinstall()

    def describe(self) -> list[dict[str, Any]]:
        return [p.as_dict() for p in self.active.values()]

    def _reinstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for p in self.active.values():
            numbers = self.layers if p.layer is None else [n for n in (p.layer,) if n in self.layers]
            for n in numbers:
                self._install(p, n, self.layers[n])

    def _install(self, p: Perturbation, n: int, layer: Any) -> None:
        if p.target == "weights":
            self._install_weights(p, n, layer)
        elif p.target == "mlp":
            self._handles.append(layer.mlp.register_forward_hook(self._activation_hook(p, n, mlp=True)))
        elif p.target == "residual":
            self._handles.append(layer.register_forward_hook(self._activation_hook(p, n, mlp=False)))
        else:
            raise ValueError(f"unknown perturbation target {p.target!r}")

    def _install_weights(self, p: Perturbation, n: int, layer: Any) -> None:
        params = [(name, w) for name, w in layer.named_parameters() if w.dim() >= 2
                  and name.startswith(("self_attention.", "mlp."))]
        saved: list[tuple[torch.nn.Parameter, torch.Tensor]] = []

        def swap_in(module, args):
            for i, (name, w) in enumerate(params):
                gen = _generator(w.device, p.seed, n, i, self.tp_rank)
                with torch.no_grad():
                    perturbed = _perturbed_weight(w.data, p, gen)
                saved.append((w, w.data))
                w.data = perturbed

        def swap_back(module, args, output):
            while saved:
                w, clean = saved.pop()
                w.data = clean

        self._handles.append(layer.register_forward_pre_hook(swap_in))
        self._handles.append(layer.register_forward_hook(swap_back))

    def _activation_hook(self, p: Perturbation, n: int, *, mlp: bool):
        def hook(module, args, output):
            # the same draw on every TP rank: these activations are replicated across TP
            gen = _generator(_device(output), p.seed, n, 1 if mlp else 2)
            if isinstance(output, tuple):
                out, rest = output[0], output[1:]
                if mlp and rest and rest[0] is not None:
                    # the MLP returns (output, bias) with the bias not yet added: perturb the sum
                    return (_perturbed_activation(out + rest[0], p, gen), None, *rest[1:])
                return (_perturbed_activation(out, p, gen), *rest)
            return _perturbed_activation(output, p, gen)

        return hook


def _device(output: Any) -> torch.device:
    return (output[0] if isinstance(output, tuple) else output).device
