"""The ``mapp`` application: one Typer app, one module per command group."""

from __future__ import annotations

import typer

from mapp import __version__
from mapp.cli import bench, demo, detect, report, simulate, sql
from mapp.cli.trace import trace_app

app = typer.Typer(
    name="mapp",
    help="Where every rank's time went in Megatron-core training, and which GPU or link slowed the job.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# Each command module adds its commands; the order here is the order in --help.
for _module in (demo, simulate, detect, sql, report):
    _module.register(app)
app.add_typer(trace_app, name="trace")
bench.register(app)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mapp {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """mapp: capture, merge, query and diagnose Megatron-core training traces."""
