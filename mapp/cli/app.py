"""The ``mapp`` application: one Typer app, one module per command group."""

from __future__ import annotations

import importlib

import typer

from mapp import __version__
from mapp.cli.trace import trace_app

app = typer.Typer(
    name="mapp",
    help="Where every rank's time went in Megatron-core training, and which GPU or link slowed the job.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
app.add_typer(trace_app, name="trace")

# Command modules each define ``register(app)``; listed here so the layout is explicit.
_COMMAND_MODULES = ("mapp.cli.demo", "mapp.cli.simulate", "mapp.cli.detect", "mapp.cli.sql", "mapp.cli.report", "mapp.cli.bench")
for _name in _COMMAND_MODULES:
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as _error:
        if _error.name != _name:
            raise
        continue
    _module.register(app)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mapp {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """mapp: capture, merge, query and diagnose Megatron-core training traces."""


def main() -> None:
    app()
