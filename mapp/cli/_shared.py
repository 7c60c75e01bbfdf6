"""What several commands share: the input-format option, defined once, and loading a bundle.

``--input-format`` names the format of the traces read (mapp, megatronapp, kineto) on every
command that reads them; ``--format`` is always what a command writes (``mapp sql``'s table,
csv or json; ``mapp simulate``'s trace format). ``mapp detect`` and ``mapp trace merge`` took
``--format`` for their input before: it still works there, hidden.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapp.analysis.ingest import FORMATS
from mapp.cli._ui import progress_bar, warn
from mapp.errors import InputError

__all__ = ["InputFormatOption", "FormerFormatOption", "input_format", "load"]

InputFormatOption = Annotated[
    Optional[str],
    typer.Option("--input-format", metavar="FORMAT",
                 help=f"Trace format, instead of detecting it: {', '.join(FORMATS)}."),
]
FormerFormatOption = Annotated[
    Optional[str], typer.Option("--format", hidden=True, help="The former name of --input-format here."),
]


def input_format(given: str | None, former: str | None) -> str | None:
    """The input format from ``--input-format``, or the former ``--format`` spelling."""
    if given is not None and former is not None and given != former:
        raise InputError(f"--input-format {given} and --format {former}", "give the input format once, as --input-format")
    return given if given is not None else former


def load(directory: Path, format: str | None, *, use_cache: bool = True):
    """Load a bundle with a progress bar and warnings on stderr."""
    from mapp.analysis.ingest import load_bundle

    with progress_bar(f"reading {directory}", unit="bytes") as update:
        return load_bundle(directory, format=format, use_cache=use_cache, warn=warn, progress=update)
