"""What every command shares: consoles, the theme, one-line errors and progress bars."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.theme import Theme

from mapp.errors import MappError

__all__ = ["console", "err_console", "guarded", "progress_bar", "warn"]

THEME = Theme(
    {
        "mapp.error": "bold red",
        "mapp.warning": "yellow",
        "mapp.ok": "green",
        "mapp.suspect": "bold red",
        "mapp.victim": "yellow",
        "mapp.dim": "dim",
        "mapp.path": "cyan",
    }
)
console = Console(theme=THEME, highlight=False)
err_console = Console(theme=THEME, stderr=True, highlight=False, emoji=False)

F = TypeVar("F", bound=Callable[..., Any])


def warn(message: str) -> None:
    """One warning line on stderr."""
    err_console.print(f"[mapp.warning]warning:[/] {escape(message)}", soft_wrap=True)


def guarded(command: F) -> F:
    """Turn a ``MappError`` into one red line and its exit code; Ctrl-C into exit 130.

    ``MAPP_DEBUG=1`` re-raises so the traceback is shown.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except MappError as error:
            if os.environ.get("MAPP_DEBUG"):
                raise
            err_console.print(f"[mapp.error]error:[/] {escape(str(error))}", soft_wrap=True)
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            err_console.print("[mapp.error]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


@contextmanager
def progress_bar(description: str, *, unit: str = "items") -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr; yields ``update(done, total)``. Silent when not a terminal."""
    columns = [TextColumn("{task.description}"), BarColumn()]
    columns.append(DownloadColumn() if unit == "bytes" else MofNCompleteColumn())
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
