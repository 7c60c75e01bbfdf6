"""``mapp sql`` reaches no file but the bundle's events (read-only) unless --allow-files DIR.

Every statement here wrote or read outside the bundle, or overwrote its traces, before the
database was sealed (issue 14); each must now be refused with ``ReadOnlyError`` and leave every
file of the bundle and of the machine as it was.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mapp.errors import OutputError
from mapp.sql import open_database
from mapp.sql.errors import QueryError, ReadOnlyError


def _hashes(directory: Path) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture()
def sealed(faulty, tmp_path):
    """The shared faulty bundle, a fresh database over it, and a private home directory."""
    _, _, directory = faulty
    db = open_database(directory)
    before = _hashes(directory)
    yield db, directory, tmp_path
    db.close()
    assert _hashes(directory) == before, "a statement changed a file of the bundle"


def _escapes(directory: Path, outside: Path) -> list[str]:
    trace = next(p for p in sorted(directory.glob("rank-*.json")))
    events = directory / ".mapp" / "events.parquet"
    return [
        f"COPY (SELECT 1) TO '{trace}'",
        f"COPY (SELECT 1) TO 'file://{trace}'",
        f"COPY (SELECT 1 AS x) TO '{events}' (FORMAT parquet, USE_TMP_FILE false)",
        f"COPY (SELECT 1) TO '{directory}/x.csv'",
        f"COPY (SELECT 1) TO ('{directory}/' || 'y.csv')",
        f"COPY (SELECT 1) TO \"{outside}/quoted.csv\"",
        f"COPY (SELECT 1) TO $${outside}/dollar.csv$$",
        f"COPY (SELECT 1) TO '{outside}/anywhere.csv'",
        f"PREPARE s AS COPY (SELECT 1) TO '{outside}/prepared.csv'",
        f"SET home_directory = '{directory}'",
        "COPY (SELECT 1) TO '~/home.csv'",
        f"ATTACH '{outside}/evil.db' AS evil",
        f"ATTACH '{trace}' AS evil",
        f"EXPORT DATABASE '{outside}/dump'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{outside}/explained.csv'",
        f"SELECT * FROM read_json_auto('{trace}')",
        "SELECT * FROM glob('/*')",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "SET lock_configuration = false",
        f"SET allowed_directories = ['{outside}']",
        f"SET profiling_output = '{outside}/profile.json'",
        f"SET temp_directory = '{directory}'",
    ]


def test_every_escape_is_refused_in_one_line(sealed):
    db, directory, outside = sealed
    for statement in _escapes(directory, outside):
        try:
            db.execute(statement)
            # PREPARE only stores the statement: running it is the escape
            if statement.startswith("PREPARE"):
                db.execute("EXECUTE s")
        except ReadOnlyError as error:
            assert "\n" not in str(error) and "--allow-files" in str(error), statement
        else:
            pytest.fail(f"not refused: {statement}")
    assert list(outside.iterdir()) == [], "a statement wrote outside the bundle"
    assert db.query("SELECT count(*) AS n FROM events").rows()[0][0] > 0, "the bundle is still readable"


def test_scratch_tables_and_macros_in_memory_still_work(sealed):
    db, _, _ = sealed
    db.execute("CREATE TABLE mine AS SELECT rank, count(*) AS n FROM events GROUP BY rank")
    db.execute("CREATE MACRO twice(x) AS 2 * x")
    assert db.query("SELECT twice(sum(n)) FROM mine").rows()[0][0] == 2 * db.query("SELECT count(*) FROM events").rows()[0][0]


def test_allow_files_opens_one_directory_and_nothing_else(faulty, tmp_path):
    _, _, directory = faulty
    exports, other = tmp_path / "exports", tmp_path / "other"
    exports.mkdir()
    other.mkdir()
    before = _hashes(directory)
    db = open_database(directory, allow_files=[exports])
    try:
        db.execute(f"COPY (SELECT rank, count(*) AS n FROM events GROUP BY rank ORDER BY rank) TO '{exports}/n.csv'")
        lines = (exports / "n.csv").read_text().splitlines()
        assert lines[0] == "rank,n" and len(lines) == 1 + 8  # TP1 x PP2 x DP4
        assert db.query(f"SELECT count(*) FROM read_csv('{exports}/n.csv')").rows() == [(8,)]
        events = directory / ".mapp" / "events.parquet"
        for statement in (f"COPY (SELECT 1) TO '{other}/x.csv'", f"COPY (SELECT 1) TO '{directory}/x.csv'",
                          f"COPY (SELECT 1) TO '{exports}/../other/y.csv'",
                          f"COPY (SELECT 1 AS x) TO '{events}' (FORMAT parquet, USE_TMP_FILE false)",
                          f"SELECT count(*) FROM read_parquet('{events}')"):
            with pytest.raises(ReadOnlyError):
                db.execute(statement)
    finally:
        db.close()
    assert list(other.iterdir()) == []
    assert _hashes(directory) == before


@pytest.mark.parametrize("where", ["bundle", "inside", "above"])
def test_allow_files_may_not_overlap_the_bundle(faulty, where):
    _, _, directory = faulty
    chosen = {"bundle": directory, "inside": directory / ".mapp", "above": directory.parent}[where]
    with pytest.raises(OutputError, match="overlaps the trace bundle"):
        open_database(directory, allow_files=[chosen])


def test_a_persisted_database_is_opened_read_only(faulty, tmp_path):
    _, _, directory = faulty
    target = tmp_path / "run.duckdb"
    open_database(directory, db=target).close()
    before = hashlib.sha256(target.read_bytes()).hexdigest()
    db = open_database(None, db=target)
    try:
        with pytest.raises(QueryError, match="read-only"):
            db.execute("DROP TABLE events")
        db.execute("CREATE TEMP TABLE scratch AS SELECT 1 AS one")  # scratch space still works
        assert db.query("SELECT one FROM scratch").rows() == [(1,)]
        with pytest.raises(ReadOnlyError):
            db.execute(f"COPY events TO '{tmp_path}/all.csv'")
    finally:
        db.close()
    assert hashlib.sha256(target.read_bytes()).hexdigest() == before
    assert not (tmp_path / "all.csv").exists()


def test_sealing_survives_a_relative_path_and_the_working_directory(faulty, tmp_path, monkeypatch):
    _, _, directory = faulty
    monkeypatch.chdir(directory)
    db = open_database(Path("."))
    try:
        with pytest.raises(ReadOnlyError):
            db.execute("COPY (SELECT 1) TO 'relative.csv'")
    finally:
        db.close()
    assert not (directory / "relative.csv").exists()
    assert os.getcwd() == str(directory)
