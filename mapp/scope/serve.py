"""``mapp scope serve``: one model, any TP x PP, every rank in lockstep, one page on rank 0.

::

    mapp scope serve CHECKPOINT                                  # one process
    torchrun --nproc_per_node=4 -m mapp scope serve CHECKPOINT --tp 2 --pp 2

Rank 0 runs the web server (:mod:`mapp.scope.server`) in a thread and, in its main thread,
takes the browsers' requests one at a time and broadcasts each to every rank; all ranks then
run it together (:class:`~mapp.scope.engine.Engine`). When idle, rank 0 broadcasts a no-op
now and then, so that the other ranks' wait never reaches the process group's timeout.
"""

from __future__ import annotations

import datetime
import os
import queue
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from mapp.errors import InputError

from .protocol import DEFAULTS, KINDS, LIMITS, PERTURBATIONS, REDUCERS

__all__ = ["serve", "init_parallel", "architecture", "hello_frame"]

IDLE_S = 30.0


def init_parallel(tp: int | None, pp: int) -> tuple[int, int]:
    """The process group (from torchrun's environment, or a world of one) and megatron's
    TP x PP layout; serving takes the whole world: ``tp * pp`` must equal it."""
    from megatron.core import parallel_state as ps

    if not dist.is_initialized():
        # idle viewers are normal: a request may come hours after the last one
        timeout = datetime.timedelta(days=7)
        if "RANK" in os.environ:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            if torch.cuda.is_available():
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(backend, timeout=timeout)
        else:
            import tempfile

            store = dist.FileStore(os.path.join(tempfile.mkdtemp(prefix="mapp-scope-"), "store"), 1)
            dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=timeout)
    world = dist.get_world_size()
    tp = tp or world // pp
    if tp * pp != world:
        raise InputError(f"--tp {tp} x --pp {pp} does not use the {world} processes",
                         f"start {tp * pp} processes (torchrun --nproc_per_node={tp * pp}) or change --tp/--pp")
    if not ps.model_parallel_is_initialized():
        ps.initialize_model_parallel(tp, pp)
    return tp, pp


def architecture(gpt: Any) -> dict[str, Any]:
    """What the page needs to know of the model, read off the built GPTModel (a served
    checkpoint and a training job alike)."""
    config = gpt.config
    return {"layers": config.num_layers, "heads": config.num_attention_heads,
            "query_groups": config.num_query_groups or config.num_attention_heads,
            "hidden": config.hidden_size, "ffn": config.ffn_hidden_size,
            "vocab": getattr(gpt, "vocab_size", None), "max_sequence_length": getattr(gpt, "max_sequence_length", None)}


def hello_frame(arch: dict[str, Any], tp: int, pp: int, mode: str) -> dict[str, Any]:
    """The ``model`` frame each new client gets first (:mod:`mapp.scope.protocol`)."""
    return {"type": "model", "mode": mode, "tp": tp, "pp": pp, **arch,
            "reducers": list(REDUCERS), "kinds": list(KINDS),
            "perturbations": {k: list(v) for k, v in PERTURBATIONS.items()}, "defaults": DEFAULTS,
            "limits": LIMITS}


def serve(checkpoint: str | Path, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          tp: int | None = None, pp: int = 1, on_ready: Callable[[str], None] | None = None) -> None:
    """Load ``checkpoint`` on every rank and serve it until interrupted."""
    from .engine import Engine
    from .model import load_checkpoint
    from .tokenizer import load_tokenizer
    from .server import ScopeServer, check_binding
    from .views import answer

    check_binding(host, token)
    checkpoint = Path(checkpoint)
    tp, pp = init_parallel(tp, pp)
    model, spec = load_checkpoint(checkpoint)
    engine = Engine(model, load_tokenizer(checkpoint, spec))
    server = None
    if dist.get_rank() == 0:
        server = ScopeServer(hello=hello_frame(architecture(model), tp, pp, "serve"), answer=lambda m: answer(engine.last, m),
                             host=host, port=port, token=token)
        bound = server.start()
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        url = f"http://{shown}:{bound}/" + (f"?token={token}" if token else "")
        if on_ready is not None:
            on_ready(url)
    try:
        _loop(engine, server)
    finally:
        if server is not None:
            server.stop()


def _next_request(server: Any) -> Any:
    if server is None:
        return None
    try:
        return server.commands.get(timeout=IDLE_S)
    except queue.Empty:
        return ("noop", None)


def _loop(engine: Any, server: Any) -> None:
    requests = 0
    while True:
        item = [_next_request(server)]
        if dist.get_world_size() > 1:
            dist.broadcast_object_list(item, src=0)
        client, message = item[0]
        if client == "noop":
            continue
        if client == "stop":
            return
        requests += 1
        _run(engine, server, client, message, requests)


def _run(engine: Any, server: Any, client: int, message: dict[str, Any], request_id: int) -> None:
    publish = server.publish if server is not None else (lambda frame, client=None: None)
    kind = message["type"]
    if kind == "generate":
        engine.generate(message, publish, request_id)
    elif kind in ("perturb", "clear"):
        active = engine.perturb(message) if kind == "perturb" else engine.clear()
        publish({"type": "perturbations", "active": active})
