"""The MegaScope wire protocol: what the page may ask, what the server answers.

One source for both sides: the server validates every client message here, and the page
(``assets/scope.js``) speaks exactly these shapes. Messages are JSON text frames over one
WebSocket (``/ws``). A client message is a JSON object with a ``type`` and only the keys
listed for that type; anything else (unknown type or key, wrong type, out of range, over
:data:`MAX_MESSAGE_BYTES`) gets an ``error`` frame and the connection stays open. Nothing a
client sends is ever evaluated: reducers and perturbations are chosen by name from the fixed
lists below.

Client -> server
----------------
``generate``  ``{"prompts": [str, ...], "max_new_tokens": int, "reducer": str, "bins": int,
"top_k": int}``: run the prompts as one batch, greedily, token by token.
``attention`` ``{"layer": int, "head": int, "prompt": int}``: the attention matrix of one
head at the last forward pass (layers are numbered from 1, heads and prompts from 0).
``pca``       ``{"layer": int}``: the residual stream after ``layer`` (0: the embeddings) at the
last forward pass, every token of every prompt, projected on its first two principal axes.
``perturb``   ``{"target": str, "kind": str, "strength": float, "layer": int | null,
"seed": int}``: switch one perturbation on (``layer`` null: every layer); strength 0 switches
that (target, layer) off.
``clear``     ``{}``: switch every perturbation off.

Server -> client
----------------
``model`` (on connect): the architecture, the parallel layout, the lists below, ``mode``
("serve" or "training"), ``defaults`` and ``limits`` of ``generate``.
``start``: ``id``, ``prompts`` (token texts per prompt), ``perturbations`` (active ones), and
the run's ``reducer``, ``bins``, ``top_k``, ``max_new_tokens`` (every viewer sees every run).
``step``: ``id``, ``step``, ``tokens`` (the new token's text per prompt), ``token_ids``,
``topk`` (per prompt, ``[{"token", "id", "p"}]``), ``clean_topk`` and ``kl`` (per prompt;
null when nothing is perturbed), ``rows_from`` (per prompt: the position of the first row
in ``layers``) and ``layers``: ``[{"layer": n, "q": [...], "k", "v", "fc1", "fc2",
"residual"}]`` where each kind is per prompt a list of token rows of ``bins`` reduced values.
A step carries only the rows that are new since the previous step; a slow client may miss
steps (they are dropped, never waited for), so ``done`` carries every row again.
``done``: ``id``, ``text`` (per prompt), ``tokens`` (token texts per prompt), ``layers`` (all
rows), ``dropped`` (steps this client missed).
``attention``: ``layer``, ``head``, ``prompt``, ``tokens``, ``matrix`` (rows: queries).
``pca``: ``layer``, ``tokens`` (per prompt), ``points`` (per prompt, ``[x, y]`` per token, in
order: a trajectory), ``explained`` (variance ratio of the two axes).
``perturbations``: ``active``: the perturbations now switched on.
``snapshot`` (training mode): ``iteration``, ``reducer``, ``bins``, ``topk`` (last position)
and the fields of ``done`` for the probe prompts.
``error``: ``message``.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = [
    "MAX_MESSAGE_BYTES", "MAX_PROMPTS", "MAX_PROMPT_CHARS", "MAX_NEW_TOKENS", "MAX_BINS",
    "MAX_TOP_K", "LIMITS", "REDUCERS", "PERTURBATIONS", "KINDS", "ProtocolError", "parse_message",
    "DEFAULTS",
]

MAX_MESSAGE_BYTES = 16 * 1024
MAX_PROMPTS = 8
MAX_PROMPT_CHARS = 2000
MAX_NEW_TOKENS = 256
MAX_BINS = 256
MAX_TOP_K = 50
MAX_STRENGTH = 1e3

REDUCERS = ("mean", "absmax", "rms", "zeros")
"""Per-token reducers, applied on the device to each of ``bins`` equal slices of a token's
features: the slice's mean, largest magnitude, root mean square, fraction of exact zeros."""

KINDS = ("q", "k", "v", "fc1", "fc2", "residual")
"""What is captured per layer: the query, key and value heads (split from the fused QKV),
the MLP's first projection (before the activation) and its output, the residual stream
after the layer."""

PERTURBATIONS: dict[str, tuple[str, ...]] = {
    # "storage": faults in the stored weights of the layer (attention and MLP matrices)
    "weights": ("gaussian", "uniform", "bitflip"),
    # "calculation": faults in what the MLP computes
    "mlp": ("gaussian", "uniform"),
    # "system": faults between layers, on the residual stream
    "residual": ("offset", "noise"),
}

LIMITS: dict[str, int] = {"prompts": MAX_PROMPTS, "prompt_chars": MAX_PROMPT_CHARS,
                          "max_new_tokens": MAX_NEW_TOKENS, "bins": MAX_BINS, "top_k": MAX_TOP_K}
"""What ``generate`` accepts, sent to the page in the ``model`` frame."""

DEFAULTS: dict[str, Any] = {"max_new_tokens": 8, "reducer": "rms", "bins": 16, "top_k": 5}

# type -> {key: (kind, required)}
_SHAPES: dict[str, dict[str, tuple[str, bool]]] = {
    "generate": {"prompts": ("prompts", True), "max_new_tokens": ("int", False),
                 "reducer": ("reducer", False), "bins": ("int", False), "top_k": ("int", False)},
    "attention": {"layer": ("int", True), "head": ("int", True), "prompt": ("int", True)},
    "pca": {"layer": ("int", True)},
    "perturb": {"target": ("str", True), "kind": ("str", True), "strength": ("float", True),
                "layer": ("layer", False), "seed": ("int", False)},
    "clear": {},
}

_RANGES = {"max_new_tokens": (1, MAX_NEW_TOKENS), "bins": (1, MAX_BINS), "top_k": (1, MAX_TOP_K),
           "layer": (0, 1 << 20), "head": (0, 1 << 20), "prompt": (0, MAX_PROMPTS - 1),
           "seed": (0, 2**31 - 1)}


class ProtocolError(ValueError):
    """A client message the server refuses; ``str()`` is the error frame's message."""


def parse_message(raw: str | bytes) -> dict[str, Any]:
    """Validate one client frame; returns a plain dict with defaults filled in.

    Raises :class:`ProtocolError` with a one-line reason. Never evaluates anything: the
    values are checked against fixed types, ranges and names."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(raw)} bytes is over the limit of {MAX_MESSAGE_BYTES}")
    try:
        message = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError("message is not JSON") from None
    if not isinstance(message, dict):
        raise ProtocolError("message must be a JSON object with a 'type'")
    kind = message.get("type")
    if kind not in _SHAPES:
        raise ProtocolError(f"unknown message type {kind!r}; known: {', '.join(_SHAPES)}")
    shape = _SHAPES[kind]
    unknown = sorted(set(message) - set(shape) - {"type"})
    if unknown:
        raise ProtocolError(f"'{kind}' does not take {', '.join(map(repr, unknown))}")
    out: dict[str, Any] = {"type": kind}
    if kind == "generate":
        out.update(DEFAULTS)
    if kind == "perturb":
        out.update(layer=None, seed=0)
    for key, (check, required) in shape.items():
        if key not in message:
            if required:
                raise ProtocolError(f"'{kind}' needs '{key}'")
            continue
        out[key] = _CHECKS[check](key, message[key])
    if kind == "perturb":
        _check_perturbation(out)
    return out


def _int(key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"'{key}' must be an integer")
    lo, hi = _RANGES[key]
    if not lo <= value <= hi:
        raise ProtocolError(f"'{key}' must be between {lo} and {hi}, not {value}")
    return value


def _layer(key: str, value: Any) -> int | None:
    return None if value is None else _int(key, value)


def _float(key: str, value: Any) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ProtocolError(f"'{key}' must be a finite number")
    if not 0 <= value <= MAX_STRENGTH:
        raise ProtocolError(f"'{key}' must be between 0 and {MAX_STRENGTH:g}, not {value}")
    return float(value)


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > 64:
        raise ProtocolError(f"'{key}' must be a short string")
    return value


def _reducer(key: str, value: Any) -> str:
    if value not in REDUCERS:
        raise ProtocolError(f"unknown reducer {value!r}; choose one of {', '.join(REDUCERS)}")
    return value


def _prompts(key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not value or len(value) > MAX_PROMPTS:
        raise ProtocolError(f"'prompts' must be a list of 1 to {MAX_PROMPTS} strings")
    for prompt in value:
        if not isinstance(prompt, str) or not prompt or len(prompt) > MAX_PROMPT_CHARS:
            raise ProtocolError(f"each prompt must be a non-empty string of at most {MAX_PROMPT_CHARS} characters")
    return list(value)


_CHECKS = {"int": _int, "layer": _layer, "float": _float, "str": _str, "reducer": _reducer,
           "prompts": _prompts}


def _check_perturbation(message: dict[str, Any]) -> None:
    target, kind = message["target"], message["kind"]
    if target not in PERTURBATIONS:
        raise ProtocolError(f"unknown perturbation target {target!r}; choose one of {', '.join(PERTURBATIONS)}")
    if kind not in PERTURBATIONS[target]:
        raise ProtocolError(f"'{target}' perturbations are {', '.join(PERTURBATIONS[target])}, not {kind!r}")
    if kind == "bitflip" and message["strength"] > 1:
        raise ProtocolError("'bitflip' strength is the fraction of elements flipped: between 0 and 1")
