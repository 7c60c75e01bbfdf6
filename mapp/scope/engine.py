"""The MegaScope engine: generation with the internals captured, on every rank of a TP x PP job.

Every rank runs the same requests in the same order (rank 0 hands them out, see
:mod:`mapp.scope.serve`). One generation step is one forward pass of the whole batch through
the pipeline (stage by stage: each stage receives the hidden states from the previous one
and sends its output to the next), captured by :class:`~mapp.megatron_hooks.scope.ScopeCapture`
on every stage; the last stage picks each prompt's next token (greedy) and every rank learns
it; tensor-parallel rank 0 of each stage sends its reduced rows to global rank 0, which turns
them into one ``step`` frame (:mod:`mapp.scope.protocol`). There is no KV cache: each step
recomputes the whole sequence, which is what lets every step show every layer's rows for
every token, and costs little at the lengths a person reads.

With a perturbation on, each step runs the clean model too (its logits only), so the frame
can show clean and perturbed top-k side by side with their KL divergence; generation follows
the perturbed model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist

from mapp.megatron_hooks.perturb import Perturbation, Perturber
from mapp.megatron_hooks.scope import ScopeCapture, gather_tp, unwrap_gpt

from .protocol import KINDS

__all__ = ["Layout", "Engine", "LastPass"]

Publish = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Layout:
    """Where this rank sits: what the engine needs of megatron's parallel state."""

    rank: int
    world: int
    tp: int
    pp: int
    tp_rank: int
    first_stage: bool
    last_stage: bool
    prev_rank: int | None
    next_rank: int | None
    last_stage_rank: int   # the last stage of this rank's pipeline (same TP rank)
    dp_rank: int

    @classmethod
    def current(cls) -> "Layout":
        from megatron.core import parallel_state as ps

        pp = ps.get_pipeline_model_parallel_world_size()
        first, last = ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()
        return cls(
            rank=dist.get_rank(), world=dist.get_world_size(),
            tp=ps.get_tensor_model_parallel_world_size(), pp=pp,
            tp_rank=ps.get_tensor_model_parallel_rank(), first_stage=first, last_stage=last,
            prev_rank=None if first else ps.get_pipeline_model_parallel_prev_rank(),
            next_rank=None if last else ps.get_pipeline_model_parallel_next_rank(),
            last_stage_rank=ps.get_pipeline_model_parallel_last_rank(),
            dp_rank=ps.get_data_parallel_rank(),
        )

    @property
    def reports(self) -> bool:
        """TP rank 0 of data-parallel replica 0 speaks for its stage (the others hold copies)."""
        return self.tp_rank == 0 and self.dp_rank == 0


@dataclass
class LastPass:
    """Rank 0's copy of the final forward pass of the last generation, for the views asked
    for afterwards (attention matrices, PCA). Replaced whole, never edited."""

    tokens: list[list[str]]
    attention: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> [b, heads, L, L]
    residual: dict[int, np.ndarray] = field(default_factory=dict)   # layer -> [b, L, hidden]
    stats: dict[int, dict[str, list[float]]] = field(default_factory=dict)  # layer -> kind -> STATS


class Engine:
    """One rank's share of MegaScope: its model chunk, its perturbations, its capture."""

    def __init__(self, model: Any, tokenizer: Any, *, vocab: int | None = None, layout: Layout | None = None):
        self.model = model
        self.gpt = unwrap_gpt(model)
        self.config = self.gpt.config
        self.tokenizer = tokenizer
        self.vocab = vocab or tokenizer.vocab_size   # the padded rows of the output layer never win
        self.layout = layout or Layout.current()
        self.perturber = Perturber(model, tp_rank=self.layout.tp_rank)
        self.device = next(self.gpt.parameters()).device
        self.last: LastPass | None = None
        self.max_len = getattr(self.gpt, "max_sequence_length", None) or 1 << 30

    # -- requests that every rank runs -----------------------------------------------------

    def perturb(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        self.perturber.set(Perturbation(message["target"], message["kind"], message["strength"],
                                        message.get("layer"), message.get("seed", 0)))
        return self.perturber.describe()

    def clear(self) -> list[dict[str, Any]]:
        self.perturber.clear()
        return []

    @torch.no_grad()
    def generate(self, message: dict[str, Any], publish: Publish, request_id: int = 0) -> None:
        """Greedy generation of ``message["prompts"]`` as one batch; rank 0 publishes frames."""
        reducer, bins, top_k = message["reducer"], message["bins"], message["top_k"]
        seqs, new = self._prompt_ids(message["prompts"], message["max_new_tokens"])
        if self.layout.rank == 0:
            publish({"type": "start", "id": request_id, "perturbations": self.perturber.describe(),
                     "reducer": reducer, "bins": bins, "top_k": top_k, "max_new_tokens": new,
                     "prompts": [[self._text(t) for t in s] for s in seqs]})
        rows_from = [0] * len(seqs)
        for step in range(new + 1):
            final = step == new   # one more pass over the finished text: rows for the last token
            start = 0 if final else min(rows_from)
            capture = ScopeCapture(self.model, reducer=reducer, bins=bins, keep_full=final, from_position=start)
            logits, clean = self._step_logits(seqs, capture)
            choice = self._choose(logits, seqs)
            stage = self._stage_payload(capture, seqs, [0] * len(seqs) if final else rows_from,
                                        logits, clean, top_k, final, start)
            parts = self._collect(stage)
            if self.layout.rank == 0:
                frame = _merge(parts)
                if final:
                    self.last = LastPass([[self._text(t) for t in s] for s in seqs],
                                         frame.pop("attention"), frame.pop("residual"), frame.pop("stats"))
                    publish({"type": "done", "id": request_id, "layers": frame["layers"],
                             "tokens": self.last.tokens,
                             "text": [self.tokenizer.decode(s) for s in seqs]})
                else:
                    frame.pop("attention"), frame.pop("residual"), frame.pop("stats")
                    publish({"type": "step", "id": request_id, "step": step, "rows_from": list(rows_from),
                             "tokens": [self._text(int(t)) for t in choice],
                             "token_ids": [int(t) for t in choice], **frame})
            if not final:
                rows_from = [len(s) for s in seqs]
                for s, t in zip(seqs, choice.tolist()):
                    s.append(int(t))

    @torch.no_grad()
    def snapshot(self, prompts: list[str], reducer: str = "rms", bins: int = 16, top_k: int = 5) -> dict[str, Any] | None:
        """One captured forward pass of ``prompts`` (training mode: no generation). Every rank
        calls it; rank 0 gets the fields of a ``done`` frame plus the top-k, others None."""
        seqs, _ = self._prompt_ids(prompts, 0)
        capture = ScopeCapture(self.model, reducer=reducer, bins=bins, keep_full=True)
        logits, _ = self._step_logits(seqs, capture)
        parts = self._collect(self._stage_payload(capture, seqs, [0] * len(seqs), logits, None, top_k, True))
        if self.layout.rank != 0:
            return None
        frame = _merge(parts)
        tokens = [[self._text(t) for t in s] for s in seqs]
        self.last = LastPass(tokens, frame.pop("attention"), frame.pop("residual"), frame.pop("stats"))
        return {"layers": frame["layers"], "tokens": tokens, "topk": frame["topk"],
                "text": [self.tokenizer.decode(s) for s in seqs]}

    # -- one step ---------------------------------------------------------------------------

    def _prompt_ids(self, prompts: list[str], max_new: int) -> tuple[list[list[int]], int]:
        new = max(0, min(max_new, self.max_len - 1))
        keep = self.max_len - new
        seqs = []
        for prompt in prompts:
            ids = self.tokenizer.encode(prompt) or [0]
            seqs.append(ids[-keep:])   # the end of a long prompt is what the next token depends on
        return seqs, new

    def _text(self, token_id: int) -> str:
        return self.tokenizer.token_text(int(token_id))

    def _batch(self, seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Right-padded tokens, positions and the causal mask (True: masked). Padding sits
        after every real token, so a causal model's rows for real tokens never see it."""
        length = max(len(s) for s in seqs)
        tokens = torch.zeros(len(seqs), length, dtype=torch.long)
        for i, s in enumerate(seqs):
            tokens[i, : len(s)] = torch.tensor(s)
        positions = torch.arange(length).unsqueeze(0).expand(len(seqs), -1)
        mask = torch.ones(1, 1, length, length, dtype=torch.bool).triu(1)
        return tokens.to(self.device), positions.to(self.device), mask.to(self.device)

    def _step_logits(self, seqs, capture: ScopeCapture):
        """(perturbed-or-plain logits, clean logits or None); logits only on the last stage."""
        tokens, positions, mask = self._batch(seqs)
        clean = None
        if self.perturber.active:
            with self.perturber.suspended():
                clean = self._forward(tokens, positions, mask)
        with capture:
            logits = self._forward(tokens, positions, mask)
        return logits, clean

    def decode(self, seqs: list[list[int]], new: int) -> None:
        """Greedy decoding with the model alone (no hook, no frame): ``new`` tokens appended to
        each of ``seqs`` in place, recomputing the sequence each step as :meth:`generate` does.
        What a capture's cost is measured against; every stage calls it."""
        with torch.no_grad():
            for _ in range(new):
                for s, t in zip(seqs, self._choose(self._forward(*self._batch(seqs)), seqs).tolist()):
                    s.append(t)

    def _forward(self, tokens, positions, mask) -> torch.Tensor | None:
        """This stage's part of one pipeline pass; returns logits ``[b, L, V]`` on the last stage."""
        lay = self.layout
        if not lay.first_stage:
            hidden = torch.empty(tokens.shape[1], tokens.shape[0], self.config.hidden_size,
                                 dtype=self.config.pipeline_dtype or torch.float32, device=self.device)
            dist.recv(hidden, src=lay.prev_rank)
            self.gpt.set_input_tensor(hidden)
        out = self.model(tokens, positions, mask)
        if not lay.last_stage:
            dist.send(out.contiguous(), dst=lay.next_rank)
            return None
        if lay.tp > 1 and not getattr(self.gpt.output_layer, "gather_output", False):
            out = gather_tp(out, -1)   # a training model keeps its logits split over TP
        return out

    def _choose(self, logits, seqs) -> torch.Tensor:
        """The next token of each prompt, decided on the last stage and sent down its pipeline."""
        lay = self.layout
        choice = torch.zeros(len(seqs), dtype=torch.long, device=self.device)
        if lay.last_stage:
            choice = self._last_rows(logits, seqs).argmax(-1)
        if lay.pp > 1:
            from megatron.core import parallel_state as ps

            dist.broadcast(choice, src=lay.last_stage_rank, group=ps.get_pipeline_model_parallel_group())
        return choice.cpu()

    def _last_rows(self, logits: torch.Tensor, seqs) -> torch.Tensor:
        index = torch.tensor([len(s) - 1 for s in seqs], device=logits.device)
        return logits[torch.arange(len(seqs), device=logits.device), index, : self.vocab].float()

    def _stage_payload(self, capture, seqs, rows_from, logits, clean, top_k, final, start: int = 0) -> dict | None:
        if not self.layout.reports:
            return None
        lengths = [len(s) for s in seqs]
        layers: dict[int, dict[str, list[np.ndarray]]] = {}
        for (kind, layer), rows in _to_host({(k, n): r for k in KINDS for n, r in capture.rows.get(k, {}).items()}).items():
            # rows [b, L, bins]: the capture kept positions start.. only
            layers.setdefault(layer, {})[kind] = [rows[i, rows_from[i] - start: lengths[i] - start]
                                                  for i in range(len(seqs))]
        stats = {layer: {kind: capture.stats[kind][layer].cpu().tolist() for kind in capture.stats
                         if layer in capture.stats[kind]} for layer in layers} if final else {}
        payload: dict[str, Any] = {"layers": layers, "attention": {}, "residual": {}, "stats": stats}
        if final:
            payload["attention"] = {n: a.cpu().numpy().astype(np.float32) for n, a in capture.attention.items()}
            payload["residual"] = {n: r.cpu().numpy().astype(np.float32) for n, r in capture.residual.items()}
        if self.layout.last_stage and logits is not None:
            payload.update(self._topk(logits, clean, seqs, top_k))
        return payload

    def _topk(self, logits, clean, seqs, k: int) -> dict[str, Any]:
        logp = torch.log_softmax(self._last_rows(logits, seqs), -1)
        out: dict[str, Any] = {"topk": self._ranked(logp, k), "clean_topk": None, "kl": None}
        if clean is not None:
            clean_logp = torch.log_softmax(self._last_rows(clean, seqs), -1)
            out["clean_topk"] = self._ranked(clean_logp, k)
            # KL(clean || perturbed): how much the fault moved the model's prediction
            kl = (clean_logp.exp() * (clean_logp - logp)).sum(-1)
            # (clamped at 0: rounding makes a zero divergence come out as -1e-8)
            out["kl"] = [max(0.0, float(x)) if math.isfinite(float(x)) else None for x in kl]
        return out

    def _ranked(self, logp: torch.Tensor, k: int) -> list[list[dict[str, Any]]]:
        values, ids = logp.exp().topk(min(k, logp.shape[-1]), dim=-1)
        return [[{"token": self._text(int(t)), "id": int(t), "p": float(p)} for p, t in zip(pv, iv)]
                for pv, iv in zip(values.tolist(), ids.tolist())]

    def _collect(self, payload: dict | None) -> list[dict | None] | None:
        """Every rank's payload, at global rank 0 (the stages' layers are on different ranks)."""
        if self.layout.world == 1:
            return [payload]
        parts = [None] * self.layout.world if self.layout.rank == 0 else None
        dist.gather_object(payload, parts, dst=0)
        return parts


def _to_host(tensors: dict[Any, torch.Tensor]) -> dict[Any, np.ndarray]:
    """Every tensor to the host in one copy: on a GPU each ``.cpu()`` waits for the device, and
    a step has six kinds of rows per layer."""
    if not tensors:
        return {}
    keys = list(tensors)
    flat = torch.cat([tensors[k].float().reshape(-1) for k in keys]).cpu().numpy()
    out, offset = {}, 0
    for k in keys:
        n = tensors[k].numel()
        out[k] = flat[offset: offset + n].reshape(tensors[k].shape)
        offset += n
    return out


def _merge(parts: list[dict | None]) -> dict[str, Any]:
    """The stages' payloads -> one frame body: layers in model order, top-k from the last stage."""
    layers: dict[int, dict] = {}
    frame: dict[str, Any] = {"topk": None, "clean_topk": None, "kl": None, "attention": {}, "residual": {}, "stats": {}}
    for part in parts:
        if part is None:
            continue
        layers.update(part["layers"])
        frame["attention"].update(part["attention"])
        frame["residual"].update(part["residual"])
        frame["stats"].update(part["stats"])
        for key in ("topk", "clean_topk", "kl"):
            if part.get(key) is not None:
                frame[key] = part[key]
    frame["layers"] = [{"layer": n, **layers[n]} for n in sorted(layers)]
    return frame
