"""The demo model: a small megatron-core GPT trained here, on text the package ships.

``mapp scope demo`` serves it, training it first (about a minute or two on a 2-core CPU) if it
is not there yet. The text (``data/corpus.txt``, made by ``data/make_corpus.py``) is simple
templated English: names introduced and used again, made-up words copied, facts asked and
answered, lists and sums; so that attention to earlier names and copying are there to see.
The model reads UTF-8 bytes (vocabulary 256: nothing to download or ship besides the text)
and uses grouped-query attention (4 heads in 2 groups), so the page shows that split too.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Callable

import torch

from mapp.errors import OutputError
from mapp.scope.model import SPEC_FILE, ModelSpec, build_model, ensure_model_parallel, save_checkpoint

__all__ = ["DEMO_SPEC", "DEFAULT_STEPS", "default_demo_dir", "train_demo_model", "demo_is_trained",
           "corpus_text", "greedy_continuation"]

DEMO_SPEC = ModelSpec(
    num_layers=4, hidden_size=128, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=512,
    vocab_size=256, max_sequence_length=128, activation="gelu", tokenizer="bytes",
)

DEFAULT_STEPS = 600
BATCH_SIZE = 16
LEARNING_RATE = 6e-3
WARMUP_STEPS = 30
MARKER = "mapp_demo.json"
"""Written last into a trained demo's directory: how it was trained (and that it finished)."""

CORPUS = Path(__file__).with_name("data") / "corpus.txt"


def default_demo_dir() -> Path:
    """``$MAPP_HOME/scope-demo`` if MAPP_HOME is set, else ``~/.cache/mapp/scope-demo``."""
    home = os.environ.get("MAPP_HOME")
    base = Path(home) if home else Path.home() / ".cache" / "mapp"
    return base / "scope-demo"


def corpus_text() -> str:
    """The shipped training text."""
    return CORPUS.read_text(encoding="utf-8")


def demo_is_trained(directory) -> bool:
    """Whether ``directory`` holds a finished demo checkpoint of the current DEMO_SPEC.

    A different spec (an older mapp's demo) counts as not trained, so it is trained again."""
    directory = Path(directory)
    try:
        spec = json.loads((directory / SPEC_FILE).read_text())
        marker = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (spec == _spec_dict() and isinstance(marker, dict)
            and (directory / "metadata.json").is_file())


def _spec_dict() -> dict:
    from dataclasses import asdict

    return asdict(DEMO_SPEC)


def _batches(data: torch.Tensor, seq: int, batch: int, generator: torch.Generator):
    """Endless random windows of the corpus: (tokens, labels), each (batch, seq)."""
    offsets = torch.arange(seq + 1)
    while True:
        starts = torch.randint(0, len(data) - seq - 1, (batch, 1), generator=generator)
        window = data[starts + offsets]
        yield window[:, :-1], window[:, 1:]


def _learning_rate(step: int, total: int) -> float:
    """Linear warm-up, then cosine decay to a tenth: a short run still ends on a calm model."""
    if step < WARMUP_STEPS:
        return LEARNING_RATE * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, total - WARMUP_STEPS)
    return LEARNING_RATE * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _train(model, steps: int, seed: int, progress: Callable | None) -> list[float]:
    """Adam on next-byte prediction over the corpus; returns the loss of every step."""
    device = next(model.parameters()).device
    data = torch.tensor(list(corpus_text().encode("utf-8")), dtype=torch.long)
    batches = _batches(data, DEMO_SPEC.max_sequence_length, BATCH_SIZE, torch.Generator().manual_seed(seed))
    position = torch.arange(DEMO_SPEC.max_sequence_length, device=device).unsqueeze(0).expand(BATCH_SIZE, -1)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.98))
    losses = []
    model.train()
    for step in range(steps):
        tokens, labels = (t.to(device) for t in next(batches))
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(step, steps)
        # labels given: megatron-core returns the per-token cross entropy, (batch, seq)
        loss = model(tokens, position, None, labels=labels).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, steps, losses[-1])
    model.eval()
    return losses


def _check_single_process() -> None:
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_world_size() != 1:
        raise RuntimeError("train_demo_model runs in a single process: call it before torchrun's world starts")


def _replaceable(directory: Path) -> bool:
    """An existing directory may be replaced only if it is empty or a scope checkpoint:
    anything else may be the user's, and is left alone."""
    return not directory.exists() or (directory.is_dir() and
                                      (not any(directory.iterdir()) or (directory / SPEC_FILE).is_file()))


def train_demo_model(directory, *, steps: int | None = None, progress=None, seed: int = 0) -> Path:
    """Train DEMO_SPEC on the shipped text and save it as a dist checkpoint in ``directory``.

    Single process (world 1, gloo; set up here unless the caller already did, TP=PP=1).
    The checkpoint is written to a temporary sibling and renamed into place at the end, so
    a killed run never leaves a directory that looks complete. ``progress(step, total, loss)``
    is called after every step. The caller's torch RNG state is left as it was."""
    directory = Path(directory).expanduser().absolute()
    steps = DEFAULT_STEPS if steps is None else steps
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if not _replaceable(directory):
        raise OutputError(f"{directory} exists and is not a scope checkpoint: not replacing it",
                          "give an empty or new directory")
    _check_single_process()
    ensure_model_parallel()
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {directory.parent}: {e.strerror or e}") from None
    staging = directory.with_name(f".{directory.name}.training-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    started = time.perf_counter()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            # parallel_output: the loss is computed on vocabulary-parallel logits (the gathered
            # ones are an autograd view that megatron's cross entropy may not modify in place)
            model = build_model(DEMO_SPEC, parallel_output=True)
            losses = _train(model, steps, seed, progress)
        save_checkpoint(model, DEMO_SPEC, staging)
        _write_marker(staging, steps=steps, seed=seed, losses=losses, seconds=time.perf_counter() - started)
        _move_into_place(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def _write_marker(directory: Path, *, steps: int, seed: int, losses: list[float], seconds: float) -> None:
    head = losses[: max(1, len(losses) // 20)]
    tail = losses[-max(1, len(losses) // 20):]
    (directory / MARKER).write_text(json.dumps({
        "steps": steps, "seed": seed, "batch_size": BATCH_SIZE, "learning_rate": LEARNING_RATE,
        "first_loss": sum(head) / len(head), "final_loss": sum(tail) / len(tail),
        "train_seconds": round(seconds, 1), "corpus_bytes": CORPUS.stat().st_size,
    }, indent=2) + "\n")


def _move_into_place(staging: Path, directory: Path) -> None:
    """Rename the finished checkpoint to ``directory``; an old one is moved aside first and
    removed only after the new one is in place."""
    old = None
    if directory.exists():
        old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        directory.rename(old)
    staging.rename(directory)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def greedy_continuation(model, tokenizer, prompt: str, max_new_tokens: int = 40) -> str:
    """The model's greedy continuation of ``prompt`` (single stage, TP gathered logits; the
    whole sequence is recomputed per token: for a quick look, not for serving)."""
    ids = tokenizer.encode(prompt)
    limit = min(tokenizer.vocab_size, model.vocab_size)   # never pick a padded-vocabulary id
    new: list[int] = []
    device = next(model.parameters()).device
    with torch.no_grad():
        for _ in range(max_new_tokens):
            window = (ids + new)[-model.max_sequence_length:]
            tokens = torch.tensor([window], device=device)
            position = torch.arange(len(window), device=device).unsqueeze(0)
            logits = model(tokens, position, None)
            new.append(int(logits[0, -1, :limit].argmax()))
    return tokenizer.decode(new)
