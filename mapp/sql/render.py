"""Query results as a rich table, CSV or JSON: the three ``--format`` / ``.mode`` choices."""

from __future__ import annotations

import csv
import datetime as _dt
import decimal
import json
from typing import IO, Any

import pyarrow as pa
from rich.table import Table
from rich.text import Text

__all__ = ["FORMATS", "rich_table", "write_csv", "write_json", "json_value"]

FORMATS = ("table", "csv", "json")
_NUMERIC = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)


def json_value(value: Any) -> Any:
    """A value JSON can hold (Decimal -> int/float, datetimes -> ISO text, bytes -> hex)."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (_dt.date, _dt.datetime, _dt.time, _dt.timedelta)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    return value


def _cell(value: Any) -> Text | str:
    if value is None:
        return Text("NULL", style="mapp.dim")
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, dict)):
        return json.dumps(json_value(value))
    return str(value)


def rich_table(table: pa.Table, *, max_rows: int | None = 1000, title: str | None = None,
               too_wide_hint: str = "--format csv, or a wider terminal") -> Table:
    """``table`` as a rich Table; rows past ``max_rows`` are left out with a note in the caption.

    No cell ever wraps: a result is data, and a number folded over two lines (or cut short)
    reads as two numbers. The console lays a table wider than the terminal out whole and says
    ``too_wide_hint`` on stderr (``mapp.cli._ui.FitConsole``).
    """
    out = Table(title=title, header_style="bold", show_lines=False, caption_justify="left")
    out.too_wide_hint = too_wide_hint
    for field in table.schema:
        numeric = any(check(field.type) for check in _NUMERIC)
        out.add_column(field.name, justify="right" if numeric else "left", no_wrap=True)
    shown = table if max_rows is None else table.slice(0, max_rows)
    columns = [shown.column(i).to_pylist() for i in range(shown.num_columns)]
    for row in zip(*columns):
        out.add_row(*[_cell(v) for v in row])
    rows = table.num_rows
    caption = f"{rows:,} row{'s' if rows != 1 else ''}"
    if max_rows is not None and rows > max_rows:
        caption += f" ({max_rows:,} shown; use .maxrows N or --format csv for all)"
    out.caption = caption
    return out


def write_csv(table: pa.Table, out: IO[str]) -> None:
    """RFC 4180 CSV with a header row; NULL is an empty field, lists are JSON."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.column_names)
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    for row in zip(*columns):
        writer.writerow(["" if v is None else json.dumps(json_value(v)) if isinstance(v, (list, dict))
                         else json_value(v) for v in row])


def write_json(table: pa.Table, out: IO[str]) -> None:
    """A JSON array of one object per row."""
    rows = [{k: json_value(v) for k, v in row.items()} for row in table.to_pylist()]
    json.dump(rows, out, indent=None, separators=(",", ":"))
    out.write("\n")
