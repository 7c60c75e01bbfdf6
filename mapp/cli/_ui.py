"""What every command shares: consoles, the theme, one-line errors and progress bars."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import typer
from rich.console import Console, ConsoleOptions
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.protocol import is_renderable, rich_cast
from rich.rule import Rule
from rich.segment import Segment
from rich.table import Table

from mapp.errors import INTERRUPTED, MappError
from mapp.report.theme import THEME

__all__ = ["FitConsole", "console", "PROGRESS_REST", "err_console", "fitted", "guarded", "help_paragraphs", "progress_bar", "warn"]


_UNBOUNDED = 100_000
"""A width no table reaches: what a renderable measures at this width is what it needs."""


class FitConsole(Console):
    """A console that never squeezes a table into fewer columns than it needs.

    rich lays everything out at the console's width (80 columns when stdout is a pipe), so a
    wide table in a CI log or a file had its numbers folded over two lines or cut with an
    ellipsis. Here, when stdout is not a terminal, each print is laid out at the width it needs
    (no wrapping at all: a log can be as wide as it likes). In a terminal, rich still wraps
    text to fit, but a table whose narrowest layout (every number whole) is wider than the
    terminal is printed at that width, and ``hints`` (stderr) says what to do instead: the
    table's ``too_wide_hint`` attribute, else a generic line.
    """

    def __init__(self, *args: Any, hints: Console | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.hints = hints

    def print(self, *objects: Any, **kwargs: Any) -> None:
        width = None
        if objects and not kwargs.get("soft_wrap") and not kwargs.get("width"):
            options = self.options.update(width=_UNBOUNDED, markup=kwargs.get("markup"))
            width = self._terminal_width(objects, options) if self.is_terminal else _widest(self, options, objects)
        if width is None or width <= self.width:
            super().print(*objects, **kwargs)
            return
        saved = self._width  # the configured width (None: follow the terminal), put back as it was
        self.width = width
        try:
            super().print(*objects, **kwargs)
        finally:
            self._width = saved

    def _terminal_width(self, objects: tuple[Any, ...], options: ConsoleOptions) -> int | None:
        """The narrowest width that keeps every table's cells whole; says so on ``hints`` past the edge."""
        tables = [o for o in objects if isinstance(o, Table)]
        needed = max((Measurement.get(self, options, t).minimum for t in tables), default=0)
        if needed > self.width and self.hints is not None:
            hint = next((t.too_wide_hint for t in tables if getattr(t, "too_wide_hint", None)),
                        "widen the terminal, or pipe the output through less -S")
            self.hints.print(f"[mapp.dim]hint:[/] this table is {needed} columns wide and the terminal "
                             f"{self.width}: {escape(hint)}", soft_wrap=True)
        return needed or None


def _widest(console: Console, options: ConsoleOptions, objects: tuple[Any, ...]) -> int | None:
    """The width that lays ``objects`` out without wrapping anything; None if only rules."""
    spans = [_span(console, options, o) for o in objects]
    return max((s.maximum for s in spans if s is not None), default=None)


def _span(console: Console, options: ConsoleOptions, renderable: Any) -> Measurement | None:
    """The narrowest and widest ``renderable`` can be laid out; None when it fills any width (a rule).

    A renderable without its own measure (a report made of tables and lines) is measured by
    the parts it yields.
    """
    renderable = rich_cast(renderable)
    if isinstance(renderable, Rule):
        return None
    if not is_renderable(renderable):
        renderable = str(renderable)
    if isinstance(renderable, str) or hasattr(renderable, "__rich_measure__"):
        span = Measurement.get(console, options, renderable)
        return None if span.maximum >= options.max_width else span
    parts = [_span(console, options, part) for part in renderable.__rich_console__(console, options)
             if not isinstance(part, Segment)]
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return Measurement(max(p.minimum for p in parts), max(p.maximum for p in parts))


err_console = Console(theme=THEME, stderr=True, highlight=False, emoji=False)
console = FitConsole(theme=THEME, highlight=False, hints=err_console)

F = TypeVar("F", bound=Callable[..., Any])


def warn(message: str) -> None:
    """One warning line on stderr."""
    err_console.print(f"[mapp.warning]warning:[/] {escape(message)}", soft_wrap=True)


def guarded(command: F) -> F:
    """Turn a ``MappError`` into one red line and its exit code; Ctrl-C into exit 130.

    ``MAPP_DEBUG=1`` re-raises so the traceback is shown. Every command wears this, so it also
    makes the command's docstring into ``--help`` paragraphs (see ``help_paragraphs``).
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
            return _interrupted()
        except BrokenPipeError:
            # stdout's reader stopped early (| head): nothing more to say, and nowhere to say it
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(141) from None

    wrapper.__doc__ = help_paragraphs(command.__doc__)
    return wrapper  # type: ignore[return-value]


def _interrupted() -> None:
    # Reached where Python's own handler raised KeyboardInterrupt (the SQL shell, or the
    # commands called in-process); the entry point handles Ctrl-C itself (mapp.cli.main).
    err_console.print("[mapp.error]interrupted[/]")
    raise typer.Exit(INTERRUPTED) from None


def help_paragraphs(doc: str | None) -> str | None:
    """``doc`` with the lines of each paragraph joined, paragraphs still apart.

    Typer's ``rich`` markup mode keeps a docstring's line breaks, so help text broke wherever
    the source line ended and then again at the terminal's edge ("... nanoseconds:" / "*_ns on"
    / "each rank's ..."); joined, rich wraps each paragraph on words at any width.
    """
    if not doc:
        return doc
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


PROGRESS_REST = 28
"""Columns a progress line needs beside its description and bar: "12.3/45.6 MB" or "1024/1024",
the elapsed "0:00:12" and the gaps between columns."""


def fitted(description: str, room: int) -> str:
    """``description`` in at most ``room`` columns, a path in it shortened to its last parts.

    A long path (a pytest temporary directory, a cluster mount) pushed the elapsed time off an
    80-column line, where rich cut it to "0:00:…"; the user typed the path, so its tail is
    enough to tell which one is being read.
    """
    room = max(room, 16)
    if len(description) <= room:
        return description
    verb, _, path = description.partition(" ")
    parts = path.split("/")
    while len(parts) > 1 and len(verb) + 1 + len("/".join(parts)) > room:
        parts.pop(0)
    return f"{verb} {'/'.join(parts)}"[:room]


@contextmanager
def progress_bar(description: str, *, unit: str = "items") -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr; yields ``update(done, total)``. Silent when not a terminal."""
    bar_width = 40 if err_console.width >= 120 else 20
    columns = [TextColumn("{task.description}"), BarColumn(bar_width=bar_width)]
    columns.append(DownloadColumn() if unit == "bytes" else MofNCompleteColumn())
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        task = bar.add_task(fitted(description, err_console.width - bar_width - PROGRESS_REST), total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
