"""``mapp trace``: turn a directory of per-rank traces into one timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapp.analysis.ingest import FORMATS, load_bundle
from mapp.analysis.merge import write_chrome_trace
from mapp.cli._ui import console, guarded, progress_bar, warn

trace_app = typer.Typer(help="Work with per-rank trace files.", no_args_is_help=True)

FormatOption = Annotated[
    Optional[str],
    typer.Option("--format", help=f"Input format, instead of detecting it: {', '.join(FORMATS)}."),
]


def load(directory: Path, format: str | None, *, use_cache: bool = True):
    """Load a bundle with a progress bar and warnings on stderr (shared by commands)."""
    with progress_bar(f"reading {directory}", unit="bytes") as update:
        return load_bundle(directory, format=format, use_cache=use_cache, warn=warn, progress=update)


@trace_app.command("merge")
@guarded
def merge(
    directory: Annotated[Path, typer.Argument(help="Directory holding the per-rank trace files.")],
    out: Annotated[
        Optional[Path], typer.Option("-o", "--out", help="Merged Chrome trace to write [default: DIR/merged.json].")
    ] = None,
    format: FormatOption = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Re-read the traces even if DIR/.mapp is current.")] = False,
) -> None:
    """Merge per-rank traces into one Chrome trace (open it in ui.perfetto.dev).

    Also writes the events table to DIR/.mapp/events.parquet for the other commands.
    """
    bundle = load(directory, format, use_cache=not no_cache)
    target = out if out is not None else directory / "merged.json"
    with progress_bar("writing merged trace") as update:
        result = write_chrome_trace(bundle, target, progress=update)
    console.print(
        f"[mapp.ok]merged[/] {result.events:,} events from {result.ranks} ranks ({bundle.format}) "
        f"into [mapp.path]{result.path}[/]"
    )
    console.print(f"events table: [mapp.path]{bundle.events_path}[/]", style="mapp.dim")
