"""mapp sql's communication tables come from the one matching schema: meanings, types, the README."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

import mapp.sql
from mapp.analysis.graph.schema import COLLECTIVES, MEMBERS, P2P
from mapp.sql import TABLES
from mapp.sql.schema import markdown_tables

SQL_TABLE = {"collectives": COLLECTIVES, "collective_members": MEMBERS, "p2p": P2P}


def _duckdb_types(schema: dict) -> dict[str, str]:
    """How DuckDB types the columns of a polars frame with ``schema`` (as the SQL schema loads them)."""
    con = duckdb.connect()
    con.register("f", pl.DataFrame(schema=schema).to_arrow())
    return {name: kind for name, kind, *_ in con.execute("DESCRIBE f").fetchall()}


def test_columns_from_matching_carry_its_meaning_and_type(faulty):
    db, _, _ = faulty
    for sql_name, table in SQL_TABLE.items():
        doc = TABLES[sql_name]
        assert doc.row == table.row
        expected = _duckdb_types(table.schema(timing=True, aligned=True))
        shared = [c for c, _ in db.columns(sql_name) if c in expected]
        assert shared, sql_name
        for column, kind in db.columns(sql_name):
            if column in shared:
                assert kind == expected[column], (sql_name, column)
                assert doc.columns[column].startswith(table.column(column).meaning), (sql_name, column)


def test_the_readme_tables_are_generated_from_the_schema():
    readme = (Path(mapp.sql.__file__).parent / "README.md").read_text()
    assert markdown_tables() in readme
