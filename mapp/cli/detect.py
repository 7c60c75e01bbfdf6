"""``mapp detect``: which GPU, host or link slowed the job, and which ranks only waited."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapp.cli._ui import console, err_console, guarded, warn
from mapp.cli._shared import (DEFAULT_THRESHOLD, FormerFormatOption, ImbalanceThresholdOption, InputFormatOption,
                               LinkThresholdOption, MinEffectOption, ThresholdOption, input_format, load, thresholds)
from mapp.output import check_output, is_stdout

__all__ = ["commands", "detect"]

commands = typer.Typer()  # its commands join the top level of `mapp` (see mapp.cli.app)


@commands.command("detect")
@guarded
def detect(
    directory: Annotated[Path, typer.Argument(help="Directory holding the per-rank trace files.")],
    threshold: ThresholdOption = DEFAULT_THRESHOLD,
    link_threshold: LinkThresholdOption = None,
    imbalance_threshold: ImbalanceThresholdOption = None,
    min_effect: MinEffectOption = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the verdict as JSON to this file (- for stdout; the report then goes to stderr).")] = None,
    layout: Annotated[Optional[str], typer.Option("--layout", help="tp=..,pp=..,dp=.. for traces that do not record their layout.")] = None,
    input_format_: InputFormatOption = None,
    former_format: FormerFormatOption = None,
    fail_on_suspect: Annotated[bool, typer.Option("--fail-on-suspect", help="Exit with status 1 when there is a suspect.")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Re-read the traces even if DIR/.mapp is current.")] = False,
) -> None:
    """Find the straggler: slow GPU, slow host, slow link or slow NIC, told apart from its victims.

    Three stages: each rank's compute against its peers', who arrives last at collectives on
    aligned clocks, and the effective bandwidth of links and collective transfers. Workload
    imbalance (a heavy stage, uneven sequence lengths) is reported as imbalance, not a fault.
    Exit status 0 whether or not there are suspects, unless --fail-on-suspect.
    """
    from mapp.analysis.detect import detect_bundle, parse_layout
    from mapp.report.verdict import DetectReport

    sizes = parse_layout(layout) if layout else None
    cuts = thresholds(threshold, link_threshold, imbalance_threshold, min_effect)
    check_output(json_out, directory, option="--json")
    bundle = load(directory, input_format(input_format_, former_format), use_cache=not no_cache)
    verdict = detect_bundle(bundle, threshold=cuts, layout=sizes)
    report = DetectReport(verdict, source=str(directory))
    # with --json -, stdout carries the JSON alone (for jq and scripts); the report goes to stderr
    (err_console if is_stdout(json_out) else console).print(report)
    if json_out is not None:
        report.write_json(json_out)
        if not is_stdout(json_out):
            console.print(f"verdict: [mapp.path]{json_out}[/]", style="mapp.dim")
    if fail_on_suspect and not verdict.healthy:
        raise typer.Exit(1)
