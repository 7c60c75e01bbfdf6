"""``mapp report``: a summary of the run in the terminal, and optionally as an HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapp.cli._shared import InputFormatOption, load
from mapp.cli._ui import console, err_console, guarded, warn
from mapp.errors import InputError
from mapp.output import check_output, is_stdout

commands = typer.Typer()  # its commands join the top level of `mapp` (see mapp.cli.app)


@commands.command("report")
@guarded
def report(
    directory: Annotated[Path, typer.Argument(help="Directory holding the per-rank traces.")],
    html: Annotated[Optional[Path], typer.Option("--html", help="Also write the report as one self-contained HTML page with interactive charts (- for stdout).")] = None,
    db: Annotated[Optional[Path], typer.Option("--db", help="Keep the SQL database in this file and reuse it (see mapp sql --db).")] = None,
    skip: Annotated[int, typer.Option("--skip", help="Leave the first N iterations (warm-up) out of the time breakdowns.")] = 0,
    no_align: Annotated[bool, typer.Option("--no-align", help="Skip clock alignment (job-wide windows and skew need it).")] = False,
    no_detect: Annotated[bool, typer.Option("--no-detect", help="Do not run the straggler detector.")] = False,
    input_format: InputFormatOption = None,
) -> None:
    """Summarise a run: layout, iteration time, time per stage and rank, overlap, collective
    skew, p2p bandwidth, pipeline bubbles, top ops and (if installed) the straggler verdict.

    Every figure comes from a named query (mapp sql --list); --html writes the same as a page.
    """
    from mapp.analysis.run import analyse
    from mapp.report import ReportView, build_summary, detect_verdict, write_html
    from mapp.sql.database import open_database

    if skip < 0:
        raise InputError(f"--skip {skip}: must be >= 0")
    check_output(html, directory, option="--html")
    check_output(db, directory, option="--db", beside_traces=False)
    bundle = load(directory, input_format) if directory.is_dir() else None
    if bundle is None:
        raise InputError(f"{directory}: not a directory", "give the directory that holds the per-rank traces")
    # matched and aligned once, for the SQL schema and the detector alike
    analysis = analyse(bundle, align=not no_align)
    database = open_database(directory, db=db, analysis=analysis, warn=warn)
    try:
        notes: list[str] = []
        # the detector's stage 2 needs aligned clocks even where the tables go without
        verdict = None if no_detect else detect_verdict(analysis if not no_align else analyse(bundle), notes)
        summary = build_summary(database, skip=skip, verdict=verdict, notes=notes)
    finally:
        database.close()
    # with --html -, stdout carries the page alone; the summary goes to stderr
    (err_console if is_stdout(html) else console).print(ReportView(summary))
    if html is not None:
        path = write_html(summary, html)
        if not is_stdout(html):
            console.print(f"[mapp.ok]wrote[/] [mapp.path]{path}[/]")
