"""``mapp trace``: turn a directory of per-rank traces into one timeline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console

from mapp.cli._shared import FormerFormatOption, InputFormatOption, input_format, load
from mapp.cli._ui import console, err_console, guarded, progress_bar, warn
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
