"""The library of named queries: ``mapp/sql/queries/NAME.sql``, each documented in its header.

A query file starts with a comment block::

    -- NAME: one line saying what it answers.
    --
    -- More lines of description.
    --
    -- @param skip INTEGER = 0  what the parameter does
    -- @column rank INTEGER  what the column holds

followed by one SELECT statement that refers to its parameters as ``$name``. Parameters are
bound by DuckDB (never pasted into the text); ``--param k=v`` values are converted to the
declared type.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mapp.errors import InputError
from mapp.sql.errors import UnknownQueryError

__all__ = ["NamedQuery", "Param", "Column", "QUERY_DIR", "list_queries", "get_query", "parse_query", "parse_params"]

QUERY_DIR = Path(__file__).resolve().parent / "queries"

_HEAD = re.compile(r"^--\s*([a-z][a-z0-9_]*)\s*:\s*(.+)$")
_PARAM = re.compile(r"^--\s*@param\s+([a-z_][a-z0-9_]*)\s+([A-Z]+)(?:\s*=\s*(\S+))?\s+(.+)$")
_COLUMN = re.compile(r"^--\s*@column\s+([a-z_][a-z0-9_]*)\s+([A-Z]+)\s+(.+)$")
_USED_PARAM = re.compile(r"\$([a-z_][a-z0-9_]*)")


@dataclass(frozen=True, slots=True)
class Param:
    """A ``$name`` the query takes."""

    name: str
    type: str
    default: Any
    description: str

    def convert(self, text: str) -> Any:
        """``text`` (from ``--param name=text``) as this parameter's type."""
        try:
            if self.type in ("INTEGER", "BIGINT"):
                return int(text)
            if self.type in ("DOUBLE", "FLOAT"):
                return float(text)
            if self.type == "BOOLEAN":
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(text)
                return text.lower() in ("true", "1")
        except ValueError:
            raise InputError(f"--param {self.name}={text}: not a valid {self.type}",
                             f"{self.name}: {self.description}") from None
        return text


@dataclass(frozen=True, slots=True)
class Column:
    """A documented output column."""

    name: str
    type: str
    description: str


@dataclass(frozen=True, slots=True)
class NamedQuery:
    """One query of the library."""

    name: str
    summary: str
    description: str
    params: tuple[Param, ...]
    columns: tuple[Column, ...]
    sql: str
    path: Path | None = None
    used_params: frozenset[str] = field(default_factory=frozenset)

    def bind(self, values: dict[str, str] | None = None) -> dict[str, Any]:
        """Parameter values for DuckDB: the defaults, overridden by ``values`` (text)."""
        values = dict(values or {})
        known = {p.name: p for p in self.params}
        unknown = sorted(set(values) - set(known))
        if unknown:
            takes = ", ".join(known) if known else "no parameters"
            raise InputError(f"query {self.name} has no parameter {unknown[0]!r}", f"it takes: {takes}")
        return {name: (p.convert(values[name]) if name in values else p.default) for name, p in known.items()}


def _default(type_: str, text: str | None) -> Any:
    if text is None:
        return None
    if text.startswith("'") and text.endswith("'"):
        return text[1:-1]
    return Param("default", type_, None, "").convert(text)


def parse_query(text: str, path: Path | None = None) -> NamedQuery:
    """Parse a query file's text; raises ``ValueError`` when its header is malformed."""
    lines = text.splitlines()
    header: list[str] = []
    for line in lines:
        if not line.startswith("--"):
            break
        header.append(line.rstrip())
    where = str(path) if path else "query"
    if not header or not (m := _HEAD.match(header[0])):
        raise ValueError(f"{where}: the first line must be '-- name: what it answers'")
    name, summary = m.group(1), m.group(2).strip()
    description: list[str] = []
    params: list[Param] = []
    columns: list[Column] = []
    for line in header[1:]:
        if "@param" in line:
            p = _PARAM.match(line)
            if not p:
                raise ValueError(f"{where}: cannot read {line!r} (-- @param name TYPE [= default]  description)")
            params.append(Param(p.group(1), p.group(2), _default(p.group(2), p.group(3)), p.group(4).strip()))
        elif "@column" in line:
            c = _COLUMN.match(line)
            if not c:
                raise ValueError(f"{where}: cannot read {line!r} (-- @column name TYPE  description)")
            columns.append(Column(c.group(1), c.group(2), c.group(3).strip()))
        else:
            description.append(line[2:].strip())
    sql = "\n".join(lines[len(header):]).strip()
    body = re.sub(r"'(?:[^']|'')*'", "''", sql)
    used = frozenset(_USED_PARAM.findall(body))
    return NamedQuery(name, summary, "\n".join(description).strip(), tuple(params), tuple(columns), sql, path, used)


def list_queries(directory: Path = QUERY_DIR) -> list[NamedQuery]:
    """Every query of the library, by name."""
    return [parse_query(p.read_text(), p) for p in sorted(directory.glob("*.sql")) if not p.name.startswith("_")]


def get_query(name: str, directory: Path = QUERY_DIR) -> NamedQuery:
    """The query called ``name``; ``UnknownQueryError`` (with the close names) if there is none."""
    path = directory / f"{name}.sql"
    if re.fullmatch(r"[a-z][a-z0-9_]*", name) and path.is_file():
        return parse_query(path.read_text(), path)
    names = [q.name for q in list_queries(directory)]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    close += [n for n in names if n not in close and (name in n or n in name)][: 3 - len(close)]
    return _raise_unknown(name, close)


def _raise_unknown(name: str, close: list[str]):
    raise UnknownQueryError(name, close)


def parse_params(items: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` (repeated ``--param``) as a dict."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--param {item!r}: expected NAME=VALUE", "e.g. --param limit=50")
        out[key.strip()] = value.strip()
    return out
