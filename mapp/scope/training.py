"""MegaScope inside a training job: the same views, every N steps, from the live model.

::

    scope = TrainingScope(model_chunks, tokenizer, port=8765, interval=50)
    for it in range(iterations):
        train_step(...)
        scope.after_step(it)      # every `interval` steps: one captured forward pass
    scope.close()

On a snapshot step every rank runs one forward pass of the probe prompts in eval mode with
the capture hooks on (:meth:`Engine.snapshot`), and rank 0 streams a ``snapshot`` frame. On the
other steps ``after_step`` returns at once: no hook is installed, no collective runs, nothing
waits, so the steps between are the training job's own. Requests from the page (perturb,
clear) wait in rank 0's bounded queue and are applied by every rank at the next snapshot step
(broadcast there, the one collective a snapshot adds); perturbations then stay on for the
training steps too (see :mod:`mapp.megatron_hooks.perturb` for why that is safe).
"""

from __future__ import annotations

import queue
from typing import Any

import torch.distributed as dist

from mapp.megatron_hooks.scope import unwrap_gpt

from .engine import Engine
from .protocol import DEFAULTS

__all__ = ["TrainingScope", "PROBE_PROMPTS"]

PROBE_PROMPTS = ["The quick brown fox jumps over the lazy dog.", "1 2 3 4 5 6 7 8 9"]


class TrainingScope:
    def __init__(self, model: Any, tokenizer: Any, *, port: int = 8765, interval: int = 10,
                 host: str = "127.0.0.1", token: str | None = None, prompts: list[str] | None = None,
                 reducer: str = DEFAULTS["reducer"], bins: int = DEFAULTS["bins"], on_ready=None,
                 snapshot_dir: str | None = None):
        from .serve import architecture, hello_frame
        from .server import ScopeServer
        from .views import answer

        chunks = list(model) if isinstance(model, (list, tuple)) else [model]
        if len(chunks) != 1:
            raise ValueError("MegaScope follows one model chunk per rank (no virtual pipeline stages)")
        self.model = chunks[0]
        self.engine = Engine(self.model, tokenizer)
        self.interval = max(1, interval)
        self.prompts = prompts or PROBE_PROMPTS
        self.reducer, self.bins = reducer, bins
        self.snapshot_dir = snapshot_dir   # rank 0 also writes each snapshot there (mapp.snapshot_format)
        self.server = None
        lay = self.engine.layout
        if lay.rank == 0:
            hello = hello_frame(architecture(unwrap_gpt(self.model)), lay.tp, lay.pp, "training")
            self.server = ScopeServer(hello=hello, answer=lambda m: answer(self.engine.last, m),
                                      host=host, port=port, token=token)
            bound = self.server.start()
            if on_ready is not None:
                on_ready(f"http://{host}:{bound}/" + (f"?token={token}" if token else ""))

    def after_step(self, iteration: int) -> bool:
        """Take a snapshot if ``iteration`` is on the interval; True if it did."""
        if iteration % self.interval:
            return False
        for message in self._requests():
            if message["type"] == "perturb":
                active = self.engine.perturb(message)
            elif message["type"] == "clear":
                active = self.engine.clear()
            else:
                continue
            self._publish({"type": "perturbations", "active": active})
        was_training = self.model.training
        self.model.eval()
        try:
            snap = self.engine.snapshot(self.prompts, self.reducer, self.bins)
        finally:
            self.model.train(was_training)
        if snap is not None:
            self._publish({"type": "snapshot", "iteration": iteration, "reducer": self.reducer, "bins": self.bins, **snap})
            if self.snapshot_dir is not None:
                self._write(iteration, snap)
        return True

    def _write(self, iteration: int, snap: dict[str, Any]) -> None:
        from mapp.capture.snapshots import write_snapshot

        last = self.engine.last
        write_snapshot(self.snapshot_dir, iteration, source="training", reducer=self.reducer, bins=self.bins,
                       prompts=self.prompts, tokens=snap["tokens"], layers=snap["layers"],
                       attention=last.attention, residual=last.residual, stats=last.stats)

    def _requests(self) -> list[dict[str, Any]]:
        """Rank 0's pending requests, the same list on every rank."""
        pending: list[dict[str, Any]] = []
        if self.server is not None:
            while True:
                try:
                    client, message = self.server.commands.get_nowait()
                except queue.Empty:
                    break
                if message["type"] == "generate":
                    self.server.publish({"type": "error", "message": "a training job shows snapshots "
                                         "of its probe prompts; generation is for mapp scope serve"}, client)
                else:
                    pending.append(message)
        if dist.is_initialized() and dist.get_world_size() > 1:
            box = [pending]
            dist.broadcast_object_list(box, src=0)
            pending = box[0]
        return pending

    def _publish(self, frame: dict[str, Any]) -> None:
        if self.server is not None:
            self.server.publish(frame)

    def close(self) -> None:
        self.engine.clear()
        if self.server is not None:
            self.server.stop()
