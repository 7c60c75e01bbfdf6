"""``mapp trace``: turn a directory of per-rank traces into one timeline."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mapp.cli._shared import FormerFormatOption, InputFormatOption, check_engine, input_format, load
from mapp.cli._ui import PROGRESS_REST, console, err_console, fitted, guarded, progress_bar, warn
from mapp.output import check_output, is_stdout

if TYPE_CHECKING:  # the analysis is imported when a command runs, not for `mapp --help`
    from mapp.analysis.align import ClockModel
    from mapp.analysis.graph import Matching
    from mapp.analysis.ingest import TraceBundle
    from mapp.analysis.run import Analysis
    from mapp.analysis.timeline import Timeline

# A command group: `mapp trace ...` (see mapp.cli.app)
commands = typer.Typer(name="trace", help="Work with per-rank trace files.", no_args_is_help=True)


@commands.command("merge")
@guarded
def merge_command(
    directory: Annotated[Path, typer.Argument(help="Directory holding the per-rank trace files.")],
    out: Annotated[
        Optional[Path], typer.Option("-o", "--out", help="Merged Chrome trace to write, - for stdout. \\[default: DIR/merged.json]")
    ] = None,
    input_format_: InputFormatOption = None,
    former_format: FormerFormatOption = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Re-read the traces even if DIR/.mapp is current.")] = False,
    no_align: Annotated[
        bool, typer.Option("--no-align", help="Keep every rank's raw clock (no alignment, no clock.json).")
    ] = False,
) -> None:
    """Merge per-rank traces into one Chrome trace (open it in ui.perfetto.dev).

    Aligns every rank's clock onto rank 0's from collectives and p2p messages, draws flow
    arrows for p2p messages and collectives and marks each collective's last arriver. Also
    writes the events table to DIR/.mapp/events.parquet, and the clock model (every rank's
    offset and drift, in ns) to DIR/.mapp/clock.json: an export for other tools, which mapp
    itself never reads back (each command aligns the clocks from the traces).
    """
    target = out if out is not None else directory / "merged.json"
    check_output(target, directory, option="-o", merged=True)
    bundle = load(directory, input_format(input_format_, former_format), use_cache=not no_cache)
    # with -o -, stdout carries the trace alone; what is said about it goes to stderr
    said = err_console if is_stdout(target) else console
    merge_with_progress(bundle, target, align=not no_align, said=said)
    said.print(f"events table: [mapp.path]{bundle.events_path}[/]", style="mapp.dim")


def merge_with_progress(bundle: TraceBundle, target: Path, *, align: bool = True, said: Console = console,
                        analysis: Analysis | None = None) -> Timeline:
    """Merge with a progress bar, then render the findings and the alignment summary on ``said``."""
    from mapp.analysis.timeline import merge_timeline

    with progress_bar("writing merged trace") as update:
        timeline = merge_timeline(bundle, target, align=align, progress=update, analysis=analysis)
    render_timeline(timeline, bundle, said)
    return timeline


def render_timeline(timeline: Timeline, bundle: TraceBundle, said: Console = console) -> None:
    _report_matching(timeline.matching, timeline.clock, timeline.clock_path, said)
    result = timeline.merged
    said.print(
        f"[mapp.ok]merged[/] {result.events:,} events from {result.ranks} ranks ({bundle.format}) "
        f"into [mapp.path]{result.path}[/]"
    )


def _report_matching(matching: Matching, clock: ClockModel | None, clock_path: Path | None, console: Console) -> None:
    for finding in matching.findings:
        if finding.severity == "info":
            console.print(finding.line(), style="mapp.dim", soft_wrap=True)
        else:
            warn(finding.line())
    if clock is None:
        return
    worst = max(clock.ranks.values(), key=lambda c: c.residual_ns, default=None)
    if worst is not None:
        console.print(
            f"aligned {len(clock.ranks)} ranks to rank {clock.reference_rank}'s clock "
            f"(worst residual {worst.residual_ns / 1000:.3f} us on rank {worst.rank}): [mapp.path]{clock_path}[/]",
            style="mapp.dim",
        )
    for note in clock.notes:
        if clock.violations and "p2p messages" in note:
            warn(note)
        else:
            console.print(note, style="mapp.dim", soft_wrap=True)
    if not clock.connected:
        from mapp.analysis.graph.diagnose import rank_list

        others = "; ".join(f"ranks {rank_list(c)} on rank {c[0]}'s" for c in clock.components[1:])
        warn(f"ranks form {len(clock.components)} groups with no collective or p2p between them; only the "
             f"first is on rank {clock.reference_rank}'s clock, the others on their own: {others}")


@commands.command("ingest")
@guarded
def ingest_command(
    directory: Annotated[Path, typer.Argument(help="Directory holding the per-rank trace files.")],
    engine: Annotated[
        Optional[str], typer.Option("--engine", metavar="ENGINE",
                                    help="Run on a cluster engine: ray. Writes the partitioned dataset DIR/.mapp/events/ "
                                    "and matches communication there. \\[default: this process, one file]"),
    ] = None,
    address: Annotated[
        Optional[str], typer.Option("--address", help="The Ray cluster to join (auto, HOST:6379, ray://HOST:10001). "
                                    "\\[default: start a local one]"),
    ] = None,
    workers: Annotated[
        Optional[int], typer.Option("--workers", metavar="N", help="CPUs of the local cluster started without "
                                    "--address. \\[default: this machine's]"),
    ] = None,
    ranks_per_partition: Annotated[
        int, typer.Option("--ranks-per-partition", metavar="N", min=1,
                          help="Trace files (ranks) in one file of the partitioned dataset.")
    ] = 256,
    partitioned: Annotated[
        bool, typer.Option("--partitioned", help="Write the partitioned dataset without an engine (in this process).")
    ] = False,
    input_format_: InputFormatOption = None,
) -> None:
    """Read the traces into the events table once, for every later command to reuse.

    Without --engine this is what every command does first: DIR/.mapp/events.parquet, one file.
    With --engine ray, the trace files are parsed on the cluster's workers, one task per block
    of --ranks-per-partition ranks, each writing its part of the hive-partitioned dataset
    DIR/.mapp/events/rank_block=K/part-0.parquet (DuckDB, Spark, Polars, Arrow and Ray Data read
    it as it is); then each worker selects its files' communication calls and the driver
    matches them (kept in DIR/.mapp/matching/). Workers must see DIR at the same path.
    """
    check_engine(engine, address, workers)
    fmt = input_format(input_format_, None)
    if engine is None and not partitioned:
        bundle = load(directory, fmt, use_cache=False)
        _ingest_summary(bundle, None, None)
        return
    if engine is None:
        from mapp.analysis.ingest import ingest_partitioned

        from mapp.analysis.ingest.dataset import ingest_local

        with progress_bar(f"reading {directory}") as update:
            def run(tasks):
                return ingest_local(tasks, on_done=lambda r: update(r.index + 1, len(tasks)))

            bundle, results = ingest_partitioned(directory, format=fmt, ranks_per_partition=ranks_per_partition,
                                                 warn=warn, run=run)
        _ingest_summary(bundle, results, None)
        return
    from mapp.analysis.cluster import connect, ingest_on_cluster, match_on_cluster

    with connect(address, workers) as cluster, _cluster_progress(f"reading {directory}") as update:
        bundle, results = ingest_on_cluster(directory, cluster, format=fmt, ranks_per_partition=ranks_per_partition,
                                            warn=warn, progress=update)
        match_on_cluster(bundle, cluster)
        described = cluster.describe()
    _ingest_summary(bundle, results, described)


_BAR = 20
"""The cluster progress line's bar width: its rate column leaves no room for rich's 40."""


@contextmanager
def _cluster_progress(description: str):
    """Files and blocks done and events/s across the cluster, on stderr while it runs."""
    columns = [TextColumn("{task.description}"), BarColumn(bar_width=_BAR), MofNCompleteColumn(), TextColumn("files"),
               TextColumn("{task.fields[rate]}"), TimeElapsedColumn()]
    with Progress(*columns, console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        # the rate takes ~45 columns ("12/40 blocks  1.52 M events/s") beside the bar and the rest
        task = bar.add_task(fitted(description, err_console.width - _BAR - PROGRESS_REST - 45), total=None, rate="")

        def update(state) -> None:
            bar.update(task, completed=state.files_done, total=state.files,
                       rate=f"{state.blocks_done}/{state.blocks} blocks  {state.events_per_s / 1e6:.2f} M events/s")

        yield update


def _ingest_summary(bundle: TraceBundle, results, engine: dict | None) -> None:
    from rich.table import Table

    from mapp.analysis.ingest.dataset import per_worker

    if results is None:
        console.print(f"[mapp.ok]ingested[/] {len(bundle.ranks):,} ranks ({bundle.format}) into "
                      f"[mapp.path]{bundle.events_path}[/]")
        return
    events = sum(r.rows for r in results)
    where = f"on ray ({engine['workers']} workers, {engine['address']})" if engine else "in this process"
    console.print(f"[mapp.ok]ingested[/] {events:,} events of {len(bundle.ranks):,} ranks ({bundle.format}) {where} "
                  f"into {len(results)} files of [mapp.path]{bundle.events_path}[/]")
    table = Table("worker", "blocks", "files", "events", "seconds", "events/s", "peak RSS MB", title="per worker",
                  title_justify="left")
    for w in per_worker(results):
        table.add_row(w.worker, str(w.blocks), f"{w.files:,}", f"{w.rows:,}", f"{w.seconds:.1f}",
                      f"{w.rows / w.seconds:,.0f}" if w.seconds else "-", f"{w.peak_rss / 2**20:,.0f}")
    console.print(table)
