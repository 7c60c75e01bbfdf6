"""``mapp scope``: MegaScope, a live view inside a megatron-core GPT (see ``mapp.scope``).

Parse, call, render: the model, the engine and the server live in ``mapp.scope`` and are
imported when a command runs (they need torch; ``mapp --help`` does not).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Optional

import typer

from mapp.cli._ui import console, err_console, guarded, progress_bar
from mapp.errors import InputError

commands = typer.Typer(name="scope", no_args_is_help=True,
                       help="See inside a megatron-core GPT in the browser: activations, attention, top-k, perturbations.")

HostOption = Annotated[str, typer.Option("--host", help="Address to listen on; anything but loopback needs --token.")]
PortOption = Annotated[int, typer.Option("--port", help="Port of the page and its WebSocket (0: any free port).")]
TokenOption = Annotated[Optional[str], typer.Option("--token", help="Secret every connection must present (?token=...).")]


def _torch_available() -> None:
    # looked up, not imported: the CLI itself stays torch-free (tests/test_layering.py)
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("megatron") is None:
        raise InputError("mapp scope needs torch and megatron-core",
                         "pip install torch==2.13.0 && pip install -e '.[megatron]'")


def _ready(url: str) -> None:
    # one plain line on stdout, flushed: scripts and tests read the URL (and port) from it
    print(f"MegaScope serving at {url}", flush=True)


@commands.command("serve")
@guarded
def serve(
    checkpoint: Annotated[Path, typer.Argument(help="A Megatron distributed checkpoint with mapp_model.json "
                                                    "(mapp scope demo makes one; mapp scope convert-hf converts GPT-2).")],
    host: HostOption = "127.0.0.1",
    port: PortOption = 8765,
    token: TokenOption = None,
    tp: Annotated[Optional[int], typer.Option("--tp", help="Tensor-parallel size (default: every process).")] = None,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel size.")] = 1,
) -> None:
    """Serve a checkpoint's model: a page and a WebSocket on 127.0.0.1 by default.

    Run it under torchrun for TP/PP (torchrun --nproc_per_node=4 -m mapp scope serve CKPT --tp 2 --pp 2);
    rank 0 serves. Stop it with Ctrl-C."""
    _torch_available()
    if not checkpoint.is_dir():
        raise InputError(f"{checkpoint} is not a directory", "give the checkpoint directory (it holds mapp_model.json)")
    from mapp.scope.serve import serve as run

    run(checkpoint, host=host, port=port, token=token, tp=tp, pp=pp, on_ready=_ready)


@commands.command("demo")
@guarded
def demo(
    port: PortOption = 8765,
    directory: Annotated[Optional[Path], typer.Option("--dir", help="Where the demo model lives "
                                                      "(default: $MAPP_HOME/scope-demo or ~/.cache/mapp/scope-demo).")] = None,
    retrain: Annotated[bool, typer.Option("--retrain", help="Train the demo model again even if it is there.")] = False,
) -> None:
    """Serve the demo model, training it first (a minute or two on a CPU) if it is not there yet."""
    _torch_available()
    from mapp.scope.demo import default_demo_dir, demo_is_trained, train_demo_model
    from mapp.scope.serve import serve as run

    directory = directory or default_demo_dir()
    if retrain or not demo_is_trained(directory):
        console.print(f"training the demo GPT on the text mapp ships (once; kept in [mapp.path]{directory}[/])")
        with progress_bar("training", unit="steps") as update:
            train_demo_model(directory, progress=lambda step, total, loss: update(step, total),
                             )
    run(directory, port=port, on_ready=_ready)


@commands.command("convert-hf")
@guarded
def convert_hf(
    hf_dir: Annotated[Path, typer.Argument(help="A local Hugging Face GPT-2 directory (config.json and weights).")],
    out: Annotated[Path, typer.Argument(help="New directory for the Megatron distributed checkpoint.")],
) -> None:
    """Convert a Hugging Face GPT-2 checkpoint for mapp scope serve (no download: local files only)."""
    _torch_available()
    from mapp.scope.convert_hf import convert_gpt2

    spec = convert_gpt2(hf_dir, out)
    err_console.print(f"wrote a {spec.num_layers}-layer GPT ({spec.hidden_size} wide) to {out}; "
                      f"serve it with: mapp scope serve {out}")
