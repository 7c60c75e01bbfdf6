"""The ``mapp`` application: one Typer app, one module per command or command group.

Every command module registers the same way: it defines a module-level ``commands``, a
``typer.Typer``, and decorates its functions with ``@commands.command("name")``; it is then
listed in ``COMMAND_MODULES`` below, whose order is the order in ``mapp --help``.

- ``commands = typer.Typer()`` (no name): its commands join the top level (``mapp detect``).
- ``commands = typer.Typer(name="trace", help="...", no_args_is_help=True)``: a command group
  (``mapp trace merge``); the help is the group's line in ``mapp --help``.

Command modules import the analysis inside their functions, so that ``mapp --help`` stays fast.
"""

from __future__ import annotations

import typer

from mapp import __version__
from mapp.cli import bench, demo, detect, report, schedule, scope, simulate, sql, trace

app = typer.Typer(
    name="mapp",
    help="Where every rank's time went in Megatron-core training, and which GPU or link slowed the job.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

COMMAND_MODULES = (demo, simulate, detect, sql, report, trace, bench, scope, schedule)

for _module in COMMAND_MODULES:
    app.add_typer(_module.commands)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mapp {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """mapp: capture, merge, query and diagnose Megatron-core training traces."""
