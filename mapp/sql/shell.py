"""The interactive SQL shell of ``mapp sql DIR``.

Statements may span lines and end with ``;``; dot commands take one line. Results are rich
tables (or CSV/JSON with ``.mode``); Ctrl-C cancels a running query (``connection.interrupt()``)
or clears the line being typed, Ctrl-D or ``.quit`` leaves. Line editing and history come from
prompt_toolkit when it is installed, else from readline.
"""

from __future__ import annotations

import os
import signal
import shlex
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mapp.errors import InputError, MappError
from mapp.sql import render
from mapp.sql.database import QueryResult, TraceDatabase
from mapp.sql.library import get_query, list_queries, parse_params
from mapp.sql.schema import TABLES

__all__ = ["Shell", "history_path"]

PROMPT = "mapp> "
CONTINUATION = "  ...> "

HELP = """\
Statements end with ';' and may span lines. Dot commands:
  .tables                 list the tables and views
  .schema [TABLE]         columns of every table, or of one, with what they mean
  .queries                the named queries
  .run NAME [k=v ...]     run a named query (parameters as k=v)
  .mode table|csv|json    how results are shown
  .timer on|off           show how long each statement took
  .maxrows N              rows shown in table mode (0: all)
  .help                   this text
  .quit                   leave (or Ctrl-D)
Ctrl-C cancels a running query and clears the line being typed."""


def history_path() -> Path | None:
    """``$MAPP_SQL_HISTORY``, else ``~/.local/state/mapp/sql_history``; None if it cannot be made."""
    path = Path(os.environ.get("MAPP_SQL_HISTORY") or Path.home() / ".local" / "state" / "mapp" / "sql_history")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
    except OSError:
        return None
    return path


def _complete(text: str) -> bool:
    stripped = text.strip()
    return not stripped or stripped.startswith(".") or stripped.endswith(";")


def _prompt_toolkit_reader(history: Path | None) -> Callable[[], str] | None:
    try:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings
    except ImportError:
        return None
    bindings = KeyBindings()

    @bindings.add("enter")
    def _enter(event) -> None:
        buffer = event.current_buffer
        if _complete(buffer.text):
            buffer.validate_and_handle()
        else:
            buffer.insert_text("\n")

    session = PromptSession(
        history=FileHistory(str(history)) if history else InMemoryHistory(),
        multiline=True, key_bindings=bindings,
        prompt_continuation=lambda width, line, wrap: CONTINUATION.rjust(width),
    )
    return lambda: session.prompt(PROMPT)


def _readline_reader(history: Path | None) -> Callable[[], str]:
    try:
        import atexit
        import readline

        if history:
            try:
                readline.read_history_file(history)
            except OSError:
                pass
            atexit.register(lambda: _save_readline(readline, history))
    except ImportError:
        pass

    def read() -> str:
        lines = [input(PROMPT)]
        while not _complete("\n".join(lines)):
            lines.append(input(CONTINUATION))
        return "\n".join(lines)

    return read


def _save_readline(readline, history: Path) -> None:
    try:
        readline.write_history_file(history)
    except OSError:
        pass


class Shell:
    """A read-eval-print loop over one ``TraceDatabase``; ``handle`` runs one input (for tests)."""

    def __init__(self, db: TraceDatabase, console: Console, *, mode: str = "table",
                 reader: Callable[[], str] | None = None):
        self.db = db
        self.console = console
        self.mode = mode
        self.timer = False
        self.max_rows = 200
        self.reader = reader

    def run(self) -> int:
        """Read and run inputs until ``.quit`` or end of input; returns the exit status."""
        if self.reader is None:
            history = history_path()
            self.reader = _prompt_toolkit_reader(history) or _readline_reader(history)
        # Ctrl-C cancels the running query and the shell goes on (the command line's own
        # handler would end the process): Python's handler while the shell runs.
        if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
            return self._loop()
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            return self._loop()
        finally:
            signal.signal(signal.SIGINT, previous)

    def _loop(self) -> int:
        info = self.db.info
        self.console.print(
            f"[bold]mapp sql[/] over {info.get('directory', '?')}: {info.get('traced_ranks', '?')} ranks, "
            f"{info.get('events', 0):,} events{'' if info.get('aligned') else ' (clocks not aligned)'}. "
            "Type .help, or a statement ending with ';'.", soft_wrap=True)
        while True:
            try:
                text = self.reader()
            except KeyboardInterrupt:
                continue
            except EOFError:
                self.console.print()
                return 0
            if not self.handle(text):
                return 0

    def handle(self, text: str) -> bool:
        """Run one statement or dot command; False when the shell should quit."""
        text = text.strip()
        if not text:
            return True
        try:
            if text.startswith("."):
                return self._dot(text)
            self._sql(text, None)
        except KeyboardInterrupt:
            self.console.print("[mapp.warning]query cancelled[/]")
        except MappError as error:
            self.console.print(f"[mapp.error]error:[/] {error}", soft_wrap=True, markup=True, highlight=False)
        return True

    def _sql(self, sql: str, params: dict | None) -> None:
        for result in self.db.execute_interruptibly(sql, params):
            self.show(result)

    def show(self, result: QueryResult) -> None:
        """Print one result in the current mode."""
        if self.mode == "table":
            self.console.print(render.rich_table(result.table, max_rows=self.max_rows or None,
                                                 too_wide_hint=".mode csv, or a wider terminal"))
        elif self.mode == "csv":
            render.write_csv(result.table, self.console.file)
        else:
            render.write_json(result.table, self.console.file)
        self.console.file.flush()
        if self.timer:
            self.console.print(f"[mapp.dim]Run Time: {result.elapsed_s:.3f} s[/]")

    def _dot(self, text: str) -> bool:
        try:
            words = shlex.split(text)
        except ValueError as error:
            raise InputError(f"{text}: {error}") from None
        command, args = words[0].lower(), words[1:]
        if command in (".quit", ".exit", ".q"):
            return False
        if command == ".help":
            self.console.print(HELP, markup=False, highlight=False)
        elif command == ".tables":
            self._tables()
        elif command == ".schema":
            self._schema(args[0] if args else None)
        elif command == ".queries":
            self._queries()
        elif command in (".run", ".query"):
            if not args:
                raise InputError(f"{command} NAME [k=v ...]", "see .queries")
            query = get_query(args[0])
            self._sql(query.sql, query.bind(parse_params(args[1:])))
        elif command == ".mode":
            if len(args) != 1 or args[0] not in render.FORMATS:
                raise InputError(f".mode {' '.join(args)}: expected one of {', '.join(render.FORMATS)}",
                                 f"current mode: {self.mode}")
            self.mode = args[0]
            self.console.print(f"[mapp.dim]mode {self.mode}[/]")
        elif command == ".timer":
            if len(args) != 1 or args[0] not in ("on", "off"):
                raise InputError(".timer on|off", f"the timer is {'on' if self.timer else 'off'}")
            self.timer = args[0] == "on"
            self.console.print(f"[mapp.dim]timer {args[0]}[/]")
        elif command == ".maxrows":
            if len(args) != 1 or not args[0].isdigit():
                raise InputError(".maxrows N", f"now {self.max_rows} (0 shows every row)")
            self.max_rows = int(args[0])
        else:
            raise InputError(f"unknown command {command}", "type .help")
        return True

    def _tables(self) -> None:
        table = Table("table", "kind", "rows", "one row is", header_style="bold")
        for name, kind in self.db.tables():
            rows = self.db.connection.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
            table.add_row(name, kind, f"{rows:,}", TABLES[name].row if name in TABLES else "")
        self.console.print(table)

    def _schema(self, name: str | None) -> None:
        names = [name] if name else [n for n, _ in self.db.tables()]
        for table_name in names:
            doc = TABLES.get(table_name)
            out = Table("column", "type", "meaning", title=f"{table_name}: {doc.row if doc else ''}",
                        title_justify="left", header_style="bold")
            for column, type_ in self.db.columns(table_name):
                out.add_row(column, type_, doc.columns.get(column, "") if doc else "")
            self.console.print(out)

    def _queries(self) -> None:
        self.console.print(queries_table())


def queries_table() -> Table:
    """The named queries, their parameters and what they answer (``.queries`` and ``--list``)."""
    table = Table("query", "parameters", "answers", header_style="bold")
    for query in list_queries():
        params = ", ".join(f"{p.name}={p.default!r}" if p.default is not None else p.name for p in query.params)
        table.add_row(query.name, params, query.summary)
    return table


def stdin_is_terminal() -> bool:
    return sys.stdin.isatty()
