"""``mapp sql``: ask a trace bundle anything in SQL (DuckDB), or run a named query."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from mapp.cli._shared import InputFormatOption, load
from mapp.cli._ui import console, guarded, warn
from mapp.errors import InputError

if TYPE_CHECKING:  # DuckDB and Arrow load when a command runs, not for `mapp --help`
    from mapp.sql.database import QueryResult, TraceDatabase

ENGINES = ("duckdb", "perfetto")

commands = typer.Typer()  # its commands join the top level of `mapp` (see mapp.cli.app)


def _loader(input_format: str | None):
    return lambda directory: load(directory, input_format)


def open_for_cli(directory: Path | None, db: Path | None, *, no_align: bool = False, rebuild: bool = False,
                 input_format: str | None = None, allow_files: list[Path] | None = None,
                 memory_limit: str | None = None, no_match: bool = False) -> TraceDatabase:
    """Open the bundle's database with a progress bar and warnings on stderr (shared with report)."""
    from mapp.sql.database import open_database

    return open_database(directory, db=db, align=not no_align, rebuild=rebuild, load=_loader(input_format),
                         warn=warn, allow_files=allow_files or (), memory_limit=memory_limit,
                         match=not no_match)


def print_result(result: QueryResult, fmt: str) -> None:
    """One result on stdout in ``fmt`` (table, csv or json)."""
    from mapp.sql import render

    if fmt == "table":
        console.print(render.rich_table(result.table, max_rows=None))
    elif fmt == "csv":
        render.write_csv(result.table, sys.stdout)
    else:
        render.write_json(result.table, sys.stdout)
    sys.stdout.flush()


def _statements(command: str | None, file: Path | None) -> str | None:
    if command is not None and file is not None:
        raise InputError("-c and -f together", "give one of them")
    if file is not None:
        if str(file) == "-":
            return sys.stdin.read()
        try:
            return file.read_text()
        except OSError as error:
            raise InputError(f"-f {file}: cannot read ({error.strerror})") from None
    return command


def _perfetto(directory: Path | None, sql: str | None, perfetto_bin: Path | None, fmt: str,
              input_format: str | None) -> None:
    from mapp.sql.perfetto_engine import PerfettoEngine, merged_trace_for

    if directory is None:
        raise InputError("--engine perfetto needs the trace directory")
    if sql is None:
        raise InputError("--engine perfetto runs -c SQL or -f FILE only", "the shell and named queries are DuckDB's")
    if perfetto_bin is None:
        PerfettoEngine(Path("merged.json"), None)  # says what is missing before any work
    bundle = _loader(input_format)(directory)
    engine = PerfettoEngine(merged_trace_for(directory, bundle), perfetto_bin)
    try:
        from mapp.sql.database import QueryResult

        print_result(QueryResult(engine.query(sql), 0.0, sql), fmt)
    finally:
        engine.close()


@commands.command("sql")
@guarded
def sql(
    directory: Annotated[Optional[Path], typer.Argument(help="Directory holding the per-rank traces.")] = None,
    query: Annotated[Optional[str], typer.Option("-q", "--query", help="Run this named query (see --list).")] = None,
    param: Annotated[Optional[list[str]], typer.Option("-p", "--param", help="A named query's parameter, NAME=VALUE (repeatable).")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the named queries and exit.")] = False,
    command: Annotated[Optional[str], typer.Option("-c", help="Run these SQL statements and exit.")] = None,
    file: Annotated[Optional[Path], typer.Option("-f", help="Run the SQL statements in this file ('-': stdin) and exit.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="Output of -c, -f and --query: table, csv or json.")] = "table",
    db: Annotated[Optional[Path], typer.Option("--db", help="Keep the database in this DuckDB file (events copied in) and reuse it while the traces are unchanged; alone, opens the file.")] = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild --db FILE even if it is current.")] = False,
    no_align: Annotated[bool, typer.Option("--no-align", help="Skip clock alignment (*_aligned_ns columns stay null).")] = False,
    no_match: Annotated[bool, typer.Option("--no-match", help="Skip matching communication (collectives, collective_members and p2p stay empty, times unaligned): for traces whose communication does not fit in memory; events and ranks are read out of core.")] = False,
    input_format: InputFormatOption = None,
    engine: Annotated[str, typer.Option("--engine", help="duckdb (built in) or perfetto (your trace_processor_shell over the merged trace; needs pip install perfetto).")] = "duckdb",
    perfetto_bin: Annotated[Optional[Path], typer.Option("--perfetto-bin", help="Path to trace_processor_shell, for --engine perfetto.")] = None,
    allow_files: Annotated[Optional[list[Path]], typer.Option("--allow-files", metavar="DIR", help="Let statements read and write files in DIR (e.g. COPY ... TO 'DIR/out.csv'); DIR must be outside the bundle. Repeatable. Without it, no statement reaches any file.")] = None,
    memory_limit: Annotated[Optional[str], typer.Option("--memory-limit", metavar="SIZE", help="DuckDB's memory limit (e.g. 4GB); larger joins, sorts and aggregations spill to a temporary directory. \\[default: DuckDB's, 80% of RAM]")] = None,
) -> None:
    """Query a trace bundle in SQL: an interactive shell, -c/-f statements, or a named query.

    Tables: events, ranks, collectives, collective_members, p2p, iterations, gpu_counters, findings,
    bundle (.schema in the shell describes every column). Times are integer nanoseconds: *_ns on
    each rank's own clock, *_aligned_ns on the reference rank's clock. Statements reach no
    file and no extension (a console shared over a bundle is harmless), unless --allow-files.
    """
    from mapp.sql import render
    from mapp.sql.library import get_query, parse_params
    from mapp.sql.shell import Shell, queries_table

    if fmt not in render.FORMATS:
        raise InputError(f"--format {fmt}: expected one of {', '.join(render.FORMATS)}")
    if engine not in ENGINES:
        raise InputError(f"--engine {engine}: expected one of {', '.join(ENGINES)}")
    if list_:
        console.print(queries_table())
        return
    statements = _statements(command, file)
    if engine == "perfetto":
        _perfetto(directory, statements, perfetto_bin, fmt, input_format)
        return
    named = get_query(query) if query is not None else None
    params = named.bind(parse_params(param)) if named is not None else None
    if param and named is None:
        raise InputError("--param without --query", "parameters belong to named queries")
    if named is not None and statements is not None:
        raise InputError("--query with -c or -f", "give one of them")
    if allow_files:
        from mapp.output import check_export_dir

        for allowed in allow_files:  # before any work: a bad directory costs nothing
            check_export_dir(allowed, directory, option="--allow-files")
    database = open_for_cli(directory, db, no_align=no_align, rebuild=rebuild, input_format=input_format,
                            allow_files=allow_files, memory_limit=memory_limit, no_match=no_match)
    try:
        if named is not None:
            print_result(database.query(named.sql, params), fmt)
        elif statements is not None:
            for result in database.execute(statements):
                print_result(result, fmt)
        elif not sys.stdin.isatty():
            for result in database.execute(sys.stdin.read()):
                print_result(result, fmt)
        else:
            raise typer.Exit(Shell(database, console, mode=fmt).run())
    finally:
        database.close()
