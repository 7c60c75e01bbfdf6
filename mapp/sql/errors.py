"""Errors of the SQL layer: a statement DuckDB refused, a query name that does not exist."""

from __future__ import annotations

from mapp.errors import InputError, MappError

__all__ = ["QueryError", "UnknownQueryError", "ReadOnlyError", "EngineUnavailable"]


class QueryError(MappError):
    """DuckDB (or trace processor) refused a statement; ``message`` is the engine's own text."""

    exit_code = 5


class UnknownQueryError(InputError):
    """``--query NAME`` names no query in the library; ``close`` are the nearest names."""

    def __init__(self, name: str, close: list[str]):
        hint = (f"did you mean {', '.join(close)}? " if close else "") + "mapp sql --list shows every query"
        super().__init__(f"no named query {name!r}", hint)
        self.name = name
        self.close = close


class ReadOnlyError(QueryError):
    """A statement would write to the trace bundle's own files."""


class EngineUnavailable(MappError):
    """An optional engine (trace processor) cannot be used here."""

    exit_code = 6
