"""A DuckDB database over one trace bundle: open it, run statements read-only, interrupt them.

``open_database(DIR)`` builds the schema in memory over the bundle's Parquet events;
``open_database(DIR, db=FILE)`` builds it once into FILE (events copied in) and reuses FILE
while the bundle's events table is unchanged; ``open_database(None, db=FILE)`` opens FILE alone.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from mapp.errors import InputError, OutputError
from mapp.output import check_export_dir, check_output
from mapp.sql.errors import QueryError, ReadOnlyError
from mapp.sql.schema import TABLES, build_schema, bundle_fingerprint, describe

__all__ = ["TraceDatabase", "QueryResult", "open_database"]

# Statements whose result is only a count or a flag: run, nothing shown.
_SILENT_STATEMENTS = {"CREATE", "INSERT", "UPDATE", "DELETE", "DROP", "ALTER", "SET", "VARIABLE_SET", "COPY",
                      "ATTACH", "DETACH", "TRANSACTION", "LOAD", "EXPORT", "PREPARE", "EXECUTE", "VACUUM",
                      "ANALYZE", "UPDATE_EXTENSIONS", "COPY_DATABASE", "MULTI"}


@dataclass(slots=True)
class QueryResult:
    """Rows of one statement, as Arrow, and how long it took."""

    table: pa.Table
    elapsed_s: float
    statement: str = ""

    @property
    def columns(self) -> list[str]:
        return self.table.column_names

    def rows(self) -> list[tuple]:
        """Every row as a tuple (for tests and small results)."""
        columns = [self.table.column(i).to_pylist() for i in range(self.table.num_columns)]
        return list(zip(*columns))

    def dicts(self) -> list[dict[str, Any]]:
        return self.table.to_pylist()


@dataclass(slots=True)
class TraceDatabase:
    """One DuckDB connection holding the schema of ``mapp.sql.schema.TABLES``."""

    connection: duckdb.DuckDBPyConnection
    allowed: list[Path] = field(default_factory=list)
    """The only directories statements may read or write files in (--allow-files)."""
    path: Path | None = None
    """The database file, when persisted."""

    @property
    def info(self) -> dict:
        """The one row of the ``bundle`` table."""
        return describe(self.connection)

    def tables(self) -> list[tuple[str, str]]:
        """(name, "table"|"view") of every public relation, schema tables first."""
        rows = self.connection.execute(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_schema = 'main' AND table_name NOT LIKE '\\_%' ESCAPE '\\' ORDER BY table_name"
        ).fetchall()
        kinds = {name: ("view" if kind == "VIEW" else "table") for name, kind in rows}
        ordered = [t for t in TABLES if t in kinds] + sorted(t for t in kinds if t not in TABLES)
        return [(name, kinds[name]) for name in ordered]

    def columns(self, table: str) -> list[tuple[str, str]]:
        """(column, type) of one relation; raises ``InputError`` if there is none by that name."""
        rows = self.connection.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_name = ? ORDER BY ordinal_position", [table]
        ).fetchall()
        if not rows:
            names = ", ".join(name for name, _ in self.tables())
            raise InputError(f"no table {table!r}", f"tables: {names}")
        return rows

    def execute(self, sql: str, params: dict[str, Any] | None = None, *,
                on_start: Callable[[], None] | None = None) -> list[QueryResult]:
        """Run every statement of ``sql``; return a result for each one that yields rows.

        DuckDB's refusals become ``QueryError`` carrying DuckDB's message and a hint.
        """
        try:
            statements = self.connection.extract_statements(sql)
        except duckdb.Error as error:
            raise _query_error(error) from None
        if not self.allowed:
            for statement in statements:
                if _writes_files(self.connection, statement):
                    raise ReadOnlyError(f"read-only: {statement.type.name} reaches files, and this console reaches none",
                                        "to write or read files, pass --allow-files DIR (a directory outside the bundle)")
        results = []
        for statement in statements:
            start = time.perf_counter()
            try:
                table = _run_statement(self.connection, statement, params if len(statements) == 1 else None)
            except duckdb.InterruptException:
                raise KeyboardInterrupt from None
            except duckdb.Error as error:
                raise _query_error(error) from None
            if table is not None:
                results.append(QueryResult(table, time.perf_counter() - start, statement.query.strip()))
        return results

    def query(self, sql: str, params: dict[str, Any] | None = None) -> QueryResult:
        """Run one statement that returns rows."""
        results = self.execute(sql, params)
        if not results:
            raise QueryError("the statement returned no rows", "use SELECT ...")
        return results[-1]

    def execute_interruptibly(self, sql: str, params: dict[str, Any] | None = None) -> list[QueryResult]:
        """``execute`` on a worker thread so Ctrl-C (KeyboardInterrupt here) cancels the query
        through ``connection.interrupt()`` and leaves the connection usable."""
        outcome: dict[str, Any] = {}
        go, done = threading.Event(), threading.Event()
        cancelled = False

        def work() -> None:
            go.wait()
            try:
                if not cancelled:
                    outcome["results"] = self.execute(sql, params)
            except BaseException as error:  # handed back to the calling thread
                outcome["error"] = error
            finally:
                done.set()

        # Waited for by polling an Event between short sleeps, not by Thread.join: the wait is
        # plain Python between sleeps, where a KeyboardInterrupt lands cleanly, and after the
        # interrupt no join on a thread that may be ending is needed. The query starts only once
        # this thread is inside the ``try``: a Ctrl-C landing while the worker was being started
        # escaped it and left the query running, the connection busy for good (the interrupt
        # test, under load, once).
        worker = threading.Thread(target=work, name="mapp-sql-query", daemon=True)
        try:
            worker.start()
            go.set()
            while not done.is_set():
                time.sleep(0.05)
        except KeyboardInterrupt:
            if not go.is_set():   # the query never began
                cancelled = True
                go.set()
                raise KeyboardInterrupt from None
            # interrupting a connection with no query running does nothing: repeated until the
            # query, which may be starting only now, has ended
            while not done.is_set():
                self.connection.interrupt()
                time.sleep(0.01)
            self._wait_until_idle()
            raise KeyboardInterrupt from None
        if "error" in outcome:
            raise outcome["error"]
        return outcome["results"]

    def _wait_until_idle(self, timeout_s: float = 10.0) -> None:
        # DuckDB's own threads wind an interrupted query down after the call has returned; the
        # connection refuses new calls ("busy") until they have.
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.connection.execute("SELECT 1").fetchall()
                return
            except duckdb.Error:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.02)

    def close(self) -> None:
        self.connection.close()


def _run_statement(con: duckdb.DuckDBPyConnection, statement, params: dict[str, Any] | None) -> pa.Table | None:
    """Rows of a statement that returns them (SELECT, PRAGMA, DESCRIBE...), else None."""
    if statement.type.name in _SILENT_STATEMENTS:
        con.execute(statement.query, params or None).fetchall()
        return None
    relation = con.sql(statement.query, params=params or None)
    if relation is None:
        return None
    try:
        to_table = getattr(relation, "to_arrow_table", None) or relation.arrow
        return to_table()
    except BaseException:
        # An interrupted or failed result would keep the connection busy while referenced.
        relation.close()
        abort = getattr(con, "abort", None)
        if abort is not None:
            try:
                abort()
            except duckdb.Error:
                pass
        raise


def _query_error(error: duckdb.Error) -> QueryError:
    text = str(error).strip()
    if isinstance(error, duckdb.PermissionException) or "the configuration has been locked" in text:
        return ReadOnlyError(f"read-only: {text.splitlines()[0]}",
                             "mapp sql reads the bundle and nothing else; to read or write files, pass "
                             "--allow-files DIR (a directory outside the bundle)")
    hint = "see the tables with .tables / .schema TABLE, or mapp sql DIR -c 'DESCRIBE events'"
    if "Catalog Error" in text and "group" in text.lower():
        hint = 'quote the column "group" (a SQL keyword); ' + hint
    elif "syntax error" in text.lower() and re.search(r'\bgroup\b(?!\s+by)', text, re.IGNORECASE):
        hint = 'write "group" in double quotes: it is a SQL keyword; ' + hint
    return QueryError(text.replace("\n", " "), hint)


def open_database(
    directory: Path | str | None,
    *,
    db: Path | str | None = None,
    align: bool = True,
    rebuild: bool = False,
    load: Callable[[Path], Any] | None = None,
    warn: Callable[[str], None] | None = None,
    allow_files: Sequence[Path | str] = (),
    analysis: Any = None,
    memory_limit: str | None = None,
    match: bool = True,
) -> TraceDatabase:
    """Open the SQL schema of the bundle in ``directory``, sealed (see ``_seal``).

    ``db``: persist the schema (events included) in this DuckDB file and reuse it while the
    bundle's events table is unchanged; with ``directory=None`` the file is opened as it is.
    ``load(directory)`` returns the ``TraceBundle`` (default ``load_bundle``; the CLI passes one
    with a progress bar). ``allow_files``: directories outside the bundle that statements may
    read and write files in (``COPY ... TO``); by default none. ``analysis``: the bundle's
    ``mapp.analysis.run.Analysis`` when the command already has it (then nothing is loaded).
    ``memory_limit``: DuckDB's (``4GB``, ``500MB``); past it, joins, sorts and aggregations
    spill to a temporary directory instead of failing (see :func:`_config`). ``match=False``:
    the communication tables stay empty (``analyse(match=False)``), for bundles whose
    communication is too large to match in memory; not with ``db``.
    """
    if directory is None and db is None:
        raise InputError("give a trace directory or --db FILE")
    if db is not None and not match:
        raise InputError("--no-match with --db", "a database file keeps the matched communication; leave one out")
    from mapp.analysis.run import analyse

    if analysis is not None:
        load = lambda _: analysis.bundle  # noqa: E731
    elif load is None:
        from mapp.analysis.ingest import load_bundle

        def load(d: Path):
            return load_bundle(d, warn=warn)

    def analysed(bundle):
        return analysis if analysis is not None else analyse(bundle, align=align, match=match)

    allowed = [check_export_dir(d, directory, option="--allow-files") for d in allow_files]
    if db is not None:
        database = _open_persisted(Path(directory) if directory is not None else None, Path(db),
                                   rebuild=rebuild, load=load, analysed=analysed, warn=warn,
                                   config=_config(memory_limit))
        return _seal(database, allowed)
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory", "give the directory that holds the per-rank traces")
    bundle = load(directory)
    # a cache outside the bundle (a read-only bundle's) is as much off limits
    allowed = [check_export_dir(d, bundle.cache_dir, option="--allow-files") for d in allowed]
    con = _open(None, _config(memory_limit))
    build_schema(con, analysed(bundle), warn=warn, via_arrow=bool(allowed))
    return _seal(TraceDatabase(con), allowed, reads=[] if allowed else list(bundle.parts))


def _seal(database: TraceDatabase, allowed: list[Path], reads: list[Path] = ()) -> TraceDatabase:
    """What makes a console shared over a bundle (or embedded in a report) harmless.

    DuckDB opens no file but ``reads`` (the events view's Parquet) and those in ``allowed``
    (--allow-files), installs and loads no extension, and no statement may change that
    (``lock_configuration``). A path DuckDB may read it may also write (``COPY ... TO`` with
    ``USE_TMP_FILE false``, to a target that can be any expression): so where it reads the
    events file, no statement that writes files runs at all (``_writes_files``); where
    statements may write (``allowed``), the events are read through Arrow instead. A --db file
    is open read-only.
    """
    con = database.connection
    paths = [str(Path(p).resolve()) for p in reads]
    if paths:
        con.execute("SET allowed_paths = " + _sql_list(paths))
    if allowed:
        con.execute("SET allowed_directories = " + _sql_list([str(p) + os.sep for p in allowed]))
    for setting in ("enable_external_access", "autoinstall_known_extensions", "autoload_known_extensions"):
        con.execute(f"SET {setting} = false")
    con.execute("SET lock_configuration = true")
    database.allowed = allowed
    return database


def _sql_list(items: list[str]) -> str:
    return "[" + ", ".join("'" + item.replace("'", "''") + "'" for item in items) + "]"


# Statements that reach files whatever their arguments; and the ones that wrap another statement.
_FILE_STATEMENTS = {"COPY", "COPY_DATABASE", "EXPORT", "ATTACH", "DETACH", "LOAD", "EXTENSION", "UPDATE_EXTENSIONS"}
_WRAPPER = re.compile(r'^\s*(?:EXPLAIN(?:\s+ANALYZE)?|PREPARE\s+(?:"[^"]*"|\w+)(?:\s*\([^)]*\))?\s+AS)\s+',
                      re.IGNORECASE)


def _writes_files(con: duckdb.DuckDBPyConnection, statement) -> bool:
    """Whether a statement reads or writes files by its kind (COPY, EXPORT, ATTACH, ...), also
    inside EXPLAIN ANALYZE (which runs it) or PREPARE; what cannot be told counts as yes."""
    kind = statement.type.name
    if kind in _FILE_STATEMENTS:
        return True
    if kind not in ("EXPLAIN", "PREPARE"):
        return False
    wrapper = _WRAPPER.match(statement.query)
    if wrapper is None:
        return True
    try:
        inner = con.extract_statements(statement.query[wrapper.end():])
    except duckdb.Error:
        return True
    return any(_writes_files(con, s) for s in inner)


def _stored_fingerprint(con: duckdb.DuckDBPyConnection) -> str | None:
    try:
        rows = con.execute("SELECT fingerprint FROM _mapp_meta").fetchall()
    except duckdb.Error:
        return None
    return rows[0][0] if rows else None


def _open_persisted(directory: Path | None, db: Path, *, rebuild: bool, load, analysed, warn,
                    config: dict) -> TraceDatabase:
    if directory is None:
        if not db.exists():
            raise InputError(f"{db}: no such database", "build it first: mapp sql DIR --db FILE")
        con = _connect(db, config)
        if _stored_fingerprint(con) is None:
            con.close()
            raise InputError(f"{db}: not a mapp database", "build one with mapp sql DIR --db FILE")
        return TraceDatabase(con, path=db)
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory", "give the directory that holds the per-rank traces")
    check_output(db, directory, option="--db", beside_traces=False)
    bundle = load(directory)
    wanted = bundle_fingerprint(bundle)
    if db.exists() and not rebuild:
        con = _connect(db, config)
        stored = _stored_fingerprint(con)
        if stored == wanted:
            return TraceDatabase(con, path=db)
        con.close()
        if stored is None:
            raise OutputError(f"--db {db}: exists and is not a mapp database", "choose another file")
        if warn:
            warn(f"{db} was built from another version of the traces; rebuilding it")
    tmp = db.with_name(f".{db.name}.building")
    tmp.unlink(missing_ok=True)
    try:
        con = duckdb.connect(str(tmp), config=config)
    except (duckdb.Error, OSError) as error:
        raise OutputError(f"--db {db}: cannot create ({error})") from None
    try:
        build_schema(con, analysed(bundle), persist=True, warn=warn)
        con.execute("CREATE TABLE _mapp_meta AS SELECT ? AS fingerprint", [wanted])
        con.execute("CHECKPOINT")
        con.close()
        os.replace(tmp, db)
    except BaseException:
        con.close()
        tmp.unlink(missing_ok=True)
        raise
    return TraceDatabase(_connect(db, config), path=db)


def _config(memory_limit: str | None) -> dict:
    """DuckDB's settings for a connection: its memory limit, if given, and always a spill
    directory of its own (an in-memory database would otherwise spill into ``./.tmp`` of
    wherever mapp was started), removed when the process exits."""
    spill = Path(tempfile.mkdtemp(prefix="mapp-duckdb-spill-"))
    atexit.register(shutil.rmtree, spill, ignore_errors=True)
    config = {"temp_directory": str(spill)}
    if memory_limit is not None:
        config["memory_limit"] = memory_limit
    return config


def _open(db: Path | None, config: dict, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(str(db) if db is not None else ":memory:", read_only=read_only, config=config)
    except (duckdb.InvalidInputException, duckdb.ParserException) as error:
        if "memory_limit" in config and "memory" in str(error).lower():
            raise InputError(f"--memory-limit {config.get('memory_limit')}: not a size DuckDB takes",
                             "give a size such as 4GB or 500MB") from None
        raise


def _connect(db: Path, config: dict) -> duckdb.DuckDBPyConnection:
    """The database file, read-only: queries may make TEMP tables, never change the file."""
    try:
        return _open(db, config, read_only=True)
    except duckdb.Error as error:
        raise InputError(f"{db}: cannot open as a DuckDB database ({str(error).splitlines()[0]})") from None
